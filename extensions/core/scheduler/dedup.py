"""The scheduler's questions to its dupefilter.

Settings read (defaults in :mod:`extensions.settings.defaults`):
``DUPEFILTER_DEBUG``.

Any Scrapy dupefilter serves (a ``request_seen``), asked in
``enqueue_request`` as Scrapy's own scheduler asks it; the Bloom dupefilter
(:mod:`extensions.dupefilters`) is asked once per outbox batch, after the
batch is written ahead, and drops a repeat of a fingerprint it already
answered for before anything is serialized (``docs/frontier.md``, "The
write-ahead log").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.dupefilters import BaseDupeFilter

from extensions import meta

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class Dedup:
    """Which requests are new to the crawl. ``dropped(request)`` hears of
    each request dropped as seen (a redirect back into its own chain is a
    dead letter). ``per_batch``: the dupefilter is asked per outbox batch
    (:meth:`seen`), else in :meth:`admits`; a request it passes twice is
    then queued twice."""

    def __init__(
        self,
        crawler: Crawler,
        dupefilter: BaseDupeFilter,
        *,
        dropped: Callable[[Request], None],
    ) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.debug = crawler.settings.getbool("DUPEFILTER_DEBUG")
        self.dupefilter = dupefilter
        self._dropped = dropped
        # BloomDupeFilter's memory of its answers (no Redis call); None for
        # a dupefilter without one.
        self._seen_before: Callable[[Request], bool] | None = getattr(
            dupefilter, "seen_before", None
        )
        # A dupefilter with a batch call (BloomDupeFilter) is asked once per
        # outbox batch, after the write-ahead; any other BaseDupeFilter
        # (RFPDupeFilter, BaseDupeFilter...) in enqueue_request, as Scrapy's
        # own scheduler asks it: it keeps what it saw in this process.
        self.per_batch = callable(getattr(dupefilter, "requests_seen", None))
        self.spider: Spider | None = None
        self._said_seed_seen = False

    def open(self, spider: Spider) -> None:
        self.spider = spider

    def admits(self, request: Request) -> bool:
        """False for a request to drop as a duplicate before it is queued:
        one Scrapy's kind of dupefilter has seen, or a repeat of a
        fingerprint the Bloom dupefilter already answered for (most links
        of a page: no serialization, no write-ahead, no Redis call). The
        engine then sends ``request_dropped``, which ends a parent's lease
        as the batch path does."""
        if not self.per_batch and self._request_seen(request):
            self._dropped(request)
            return False
        if self._seen_before is not None and self._seen_before(request):
            self._dropped(request)
            if meta.SEED_TAKEN in request.meta:
                self.seed_seen(request)
            return False
        return True

    def _request_seen(self, request: Request) -> bool:
        """Scrapy's own scheduler's question to a dupefilter, and its log."""
        if request.dont_filter or not self.dupefilter.request_seen(request):
            return False
        if type(self.dupefilter).log is not BaseDupeFilter.log:
            self.dupefilter.log(request, self.spider)  # type: ignore[arg-type]
        return True

    async def seen(self, requests: Sequence[Request]) -> list[bool]:
        """The batch question: for each request, whether the crawl has seen
        it (never a ``dont_filter`` one; never here for a dupefilter asked
        in :meth:`admits`). The dupefilter marks them seen as it answers."""
        checked = [r for r in requests if not r.dont_filter]
        if not self.per_batch or not checked:
            return [False] * len(requests)
        # The dupefilter's method, looked up at each call (never kept).
        answers = iter(await self.dupefilter.requests_seen(checked))  # type: ignore[attr-defined]
        return [False if r.dont_filter else next(answers) for r in requests]

    def drop(self, request: Request, *, seed: bool) -> None:
        """``request`` of a batch was seen: dropped, as the engine drops a
        request the scheduler refuses (``request_dropped``)."""
        self._dropped(request)
        if seed:
            self.seed_seen(request)
        self.crawler.signals.send_catch_log(
            signals.request_dropped, request=request, spider=self.spider
        )

    def seed_seen(self, request: Request) -> None:
        """A seed the crawl has seen (pushed again after it was crawled, or
        queued): dropped by the dupefilter, counted (``seeds/filtered``) and
        logged with how to crawl it again; the first one, or each one with
        ``DUPEFILTER_DEBUG``."""
        self.stats.inc_value("seeds/filtered")
        if self._said_seed_seen and not self.debug:
            return
        self._said_seed_seen = True
        logger.info(
            "Seed %s dropped: the crawl has seen it (its dupefilter knows the "
            'URL). To crawl it again, push it with "dont_filter": true: '
            '{"url": "%s", "dont_filter": true} (docs/seeds.md)%s',
            request.url,
            request.url,
            ""
            if self.debug
            else "; further seeds dropped as seen are counted in seeds/filtered "
            "(DUPEFILTER_DEBUG logs each)",
        )


def dupefilter_problem(cls: type) -> str | None:
    """Why the scheduler cannot use dupefilter class ``cls``, or None: it
    serves any ``BaseDupeFilter`` (a ``request_seen(request)``), and
    :class:`~extensions.dupefilters.BloomDupeFilter`'s batch call.

    >>> from scrapy.dupefilters import RFPDupeFilter
    >>> dupefilter_problem(RFPDupeFilter) is None
    True
    >>> print(dupefilter_problem(object))  # doctest: +ELLIPSIS
    DUPEFILTER_CLASS='builtins.object' is not allowed: use a scrapy.dupe...
    """
    if callable(getattr(cls, "request_seen", None)) or callable(
        getattr(cls, "requests_seen", None)
    ):
        return None
    name = f"{cls.__module__}.{cls.__qualname__}"
    return (
        f"DUPEFILTER_CLASS={name!r} is not allowed: use a "
        "scrapy.dupefilters.BaseDupeFilter (it has no request_seen())"
    )
