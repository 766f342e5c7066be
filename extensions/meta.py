"""The ``Request.meta`` keys that cross modules, each named once.

Settings read: none.
"""

from __future__ import annotations

#: The frontier lease a request was handed out under (set by the scheduler
#: when it hands the request to the engine; carried to the item, whose
#: storage acknowledges it; a redirect or retry hands it over to its child).
FRONTIER_LEASE = "frontier_lease"

#: The host lock a request holds while it is downloaded (a dict set by the
#: politeness middleware: lock ``id``, ``host``, ``token``, ``spacing_ms``,
#: and ``fails``, the host's connection failures, which the back-off
#: middleware reads to close the circuit breaker).
POLITENESS_LOCK = "politeness_lock"

#: How often a request went back to the scheduler because its host could not
#: be fetched now (bounded by ``POLITENESS_MAX_DEFERRALS``).
POLITENESS_DEFERRALS = "politeness_deferrals"

#: Why a request was last sent back: ``parked``, ``spaced``, ``robots`` or
#: ``robots_pending`` (:class:`extensions.downloadermiddlewares.Deferral`).
POLITENESS_DEFERRED = "politeness_deferred"

#: True: never defer this request to the scheduler; fail it with
#: ``HostParked`` when its host is parked (the robots.txt fetch).
DONT_DEFER = "dont_defer"

#: True: download without the host lock (Scrapy-style opt-out).
DONT_POLITENESS = "dont_politeness"

#: True on the robots middleware's own robots.txt requests: the back-off
#: middleware leaves the host's page back-off alone for them (an unreachable
#: robots.txt parks the host through the robots cache instead).
ROBOTS_FETCH = "robots_fetch"

#: Set on a request whose host the back-off middleware found judged down
#: when the request failed: the failure policy gives it up at once instead
#: of retrying it, as ``host_down`` (True: ``HOST_DOWN_AFTER``) or with the
#: verdict's reason (``"dns"``: ``DNS_DOWN_AFTER``).
HOST_DOWN = "host_down"

#: A revisit's record (a list set by :mod:`extensions.extensions.recrawl`: the previous
#: visit's interval, validators and content hash); the spider copies it into
#: the item, whose ``recrawl`` attribute bears the same name.
RECRAWL_RECORD = "recrawl"

#: A sitemap's ``<lastmod>`` for the page (when it last changed: the spider
#: sets it when ``RECRAWL_ENABLED`` and copies it into the item; the recrawl
#: schedule dates a new page's last change with it).
SITEMAP_LASTMOD = "lastmod"

#: The seed-list entry a seed request was made from (a str, set by the
#: spider when it takes the seed, :mod:`extensions.core.seeds`). The scheduler
#: takes it off the request and, once the request is queued in the frontier
#: (or refused before it), sends :data:`extensions.signals.seeds_settled`
#: with it, so the entry leaves the worker's taken list only then.
SEED_TAKEN = "seed_taken"

# Meta keys: the failure record a request carries from attempt to attempt,
# and the delay the scheduler reads (and strips) when it queues a retry.
FAILURE_META = "failure"
DELAY_META = "frontier_delay_ms"

#: Every key above: webcrawl's own state, never set by anyone outside it (a
#: seed may not, whatever ``SEED_META_KEYS`` says).
WEBCRAWL_META = frozenset(
    {
        FRONTIER_LEASE,
        POLITENESS_LOCK,
        POLITENESS_DEFERRALS,
        POLITENESS_DEFERRED,
        DONT_DEFER,
        DONT_POLITENESS,
        ROBOTS_FETCH,
        HOST_DOWN,
        RECRAWL_RECORD,
        SITEMAP_LASTMOD,
        SEED_TAKEN,
        FAILURE_META,
        DELAY_META,
    }
)

#: The keys Scrapy's own components read from ``Request.meta`` (its
#: "Request.meta special keys" and the private ones its middlewares keep
#: there): a proxy, credentials, limits, robots.txt and redirect handling.
#: Data from outside (a seed) names one only where ``SEED_META_KEYS`` says so.
SCRAPY_META = frozenset(
    {
        "_auth_proxy",
        "_scheme_proxy",
        "allow_offsite",
        "autothrottle_dont_adjust_delay",
        "bindaddress",
        "cookiejar",
        "depth",
        "depth_reset",
        "dont_cache",
        "dont_merge_cookies",
        "dont_obey_robotstxt",
        "dont_redirect",
        "dont_retry",
        "download_fail_on_dataloss",
        "download_latency",
        "download_maxsize",
        "download_slot",
        "download_timeout",
        "download_warnsize",
        "ftp_local_filename",
        "ftp_passive",
        "ftp_password",
        "ftp_user",
        "handle_httpstatus_all",
        "handle_httpstatus_list",
        "http_auth_domain",
        "http_pass",
        "http_user",
        "is_start_request",
        "max_retry_times",
        "proxy",
        "redirect_reasons",
        "redirect_times",
        "redirect_ttl",
        "redirect_urls",
        "referrer_policy",
        "retry_times",
        "rule",
        "verbatim_url",
    }
)
