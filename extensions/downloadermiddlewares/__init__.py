"""webcrawl's downloader middlewares, and the one table of their order.

:data:`DOWNLOADER_MIDDLEWARES` is every downloader middleware the add-on
installs, with its order and the Scrapy middlewares it replaces (``None``).
A request a middleware may not fetch now goes back to the scheduler as a
:func:`deferred_copy`, never waits in a download slot.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from extensions import meta

if TYPE_CHECKING:
    from scrapy.http import Request

_HERE = "extensions.downloadermiddlewares"

# The order of webcrawl's downloader middlewares, and the Scrapy ones they
# replace. Robots.txt first (where Scrapy's RobotsTxtMiddleware sits); the
# failure policy in RetryMiddleware's place (550); back-off right after it,
# so its process_response sees a 429/503 before the retry does; the charset
# fallback before HttpCompressionMiddleware (590) hands the body on; the
# SSRF guard and the per-host lock last (after HttpCacheMiddleware, 900), so
# the address is checked and the wait happens right before the fetch.
POLITENESS_MIDDLEWARES: dict[str, int | None] = {
    "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
    f"{_HERE}.robotstxt.SharedRobotsTxtMiddleware": 100,
    f"{_HERE}.backoff.BackoffMiddleware": 560,
    f"{_HERE}.politeness.PolitenessMiddleware": 950,
}
DOWNLOADER_MIDDLEWARES: dict[str, int | None] = {
    # Outermost: it follows a leased request's failed download to the end of
    # its errback's output.
    f"{_HERE}.leases.LeaseDownloaderMiddleware": -1000,
    **POLITENESS_MIDDLEWARES,
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    f"{_HERE}.failurepolicy.FailurePolicyMiddleware": 550,
    f"{_HERE}.charsets.CharsetFallbackMiddleware": 585,
    f"{_HERE}.ssrf.AddressGuard": 900,
}


class Deferral(StrEnum):
    """Why a request went back to the scheduler (meta
    :data:`extensions.meta.POLITENESS_DEFERRED`, stats ``.../deferred/<why>``)."""

    #: The host is parked (back-off, Retry-After, circuit breaker).
    PARKED = "parked"
    #: The host's spacing is longer than ``POLITENESS_MAX_WAIT``.
    SPACED = "spaced"
    #: The host's robots.txt is unreachable for now.
    ROBOTS = "robots"
    #: The host's robots.txt is still being fetched (here or by another
    #: worker) after ``ROBOTS_WAIT_MAX``.
    ROBOTS_PENDING = "robots_pending"


def deferred_copy(
    request: Request, reason: Deferral, *, counted: bool = True
) -> Request:
    """A copy of ``request`` to hand back to the scheduler when its host may
    not be fetched now: the frontier queues it under its parked host, so it is
    kept, not dropped. ``dont_filter`` stops the dupefilter from discarding
    it; :data:`extensions.meta.POLITENESS_DEFERRALS` counts how often it came
    back (unless not ``counted``: a wait that does not use up the bound of
    ``POLITENESS_MAX_DEFERRALS``).
    """
    copied = dict(request.meta)
    deferrals = int(copied.get(meta.POLITENESS_DEFERRALS, 0))
    copied[meta.POLITENESS_DEFERRALS] = deferrals + int(counted)
    copied[meta.POLITENESS_DEFERRED] = reason
    copied.pop(meta.POLITENESS_LOCK, None)
    return request.replace(dont_filter=True, meta=copied)
