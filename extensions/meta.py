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

#: Why a request was last sent back: ``parked``, ``spaced`` or ``robots``.
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

#: A revisit's record (a list set by :mod:`extensions.recrawl`: the previous
#: visit's interval, validators and content hash); the spider copies it into
#: the item, whose ``recrawl`` attribute bears the same name.
RECRAWL_RECORD = "recrawl"

#: A sitemap's ``<lastmod>`` for the page (when it last changed: the spider
#: sets it when ``RECRAWL_ENABLED`` and copies it into the item; the recrawl
#: schedule dates a new page's last change with it).
SITEMAP_LASTMOD = "lastmod"

#: The seed-list entry a seed request was made from (a str, set by the
#: spider when it takes the seed, :mod:`extensions.seeds`). The scheduler
#: takes it off the request and, once the request is queued in the frontier
#: (or refused before it), sends :data:`extensions.signals.seeds_settled`
#: with it, so the entry leaves the worker's taken list only then.
SEED_TAKEN = "seed_taken"
