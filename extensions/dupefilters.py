"""A Scrapy dupefilter backed by the fleet's Bloom filter in Redis.

Settings read: ``BLOOM_*`` (see :mod:`extensions.core.bloom`: ``BLOOM_CAPACITY``,
``BLOOM_ERROR_RATE``, ``BLOOM_SHARD_BITS``, ``BLOOM_SCALABLE``,
``BLOOM_GROWTH``, ``BLOOM_TIGHTENING``, ``BLOOM_MAX_LAYERS``,
``BLOOM_PREALLOCATE``), ``BLOOM_KEY_PREFIX``, ``BLOOM_STATS_INTERVAL``,
``DUPEFILTER_DEBUG`` and ``REDIS_URL`` (through
:mod:`extensions.connection`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from scrapy.dupefilters import BaseDupeFilter
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.request import referer_str

from extensions.connection import TRANSIENT_REDIS_ERRORS, async_client, sync_client
from extensions.core.bloom import AsyncBloomFilter, BloomConfig, BloomFilter
from extensions.settings import config, defaults
from extensions.utils.url import canonical_request

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Self

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)


class BloomDupeFilter(BaseDupeFilter):
    """Drop requests whose fingerprint the crawl has seen, fleet-wide.

    What a duplicate is stays the decision of ``REQUEST_FINGERPRINTER_CLASS``,
    asked about the request with its URL in canonical form
    (:func:`extensions.utils.url.canonicalize_url`: session and tracking
    parameters dropped, query sorted): the key beside the request, which
    itself is queued and fetched as the spider made it. Requests with
    ``dont_filter=True`` (retries, recrawls) are never tested nor added.

    Two ways in:

    * :meth:`requests_seen` (the webcrawl scheduler): a batch of requests, one
      Redis round trip on the asyncio client; it also counts
      ``dupefilter/filtered`` and logs the drops, as Scrapy's ``log`` does.
    * :meth:`request_seen` (Scrapy's stock scheduler): one request, one
      *blocking* round trip on a synchronous client, for each request
      scheduled; the stock scheduler calls :meth:`log` itself.

    A worker remembers the fingerprints the filter answered for (``LOCAL``
    most recent, two generations): the filter never forgets, so a repeat of
    one of them is a duplicate without a round trip. :meth:`seen_before`
    asks that memory alone (the scheduler drops a repeated link there,
    before serializing it); :meth:`requests_seen` sends Redis only the rest.
    Sandbox pages link ~20 URLs each, almost all repeats.

    Seen and mark-seen are one atomic Redis command per request, so two
    workers never both accept a URL (see :mod:`extensions.core.bloom` for the bit
    math and the layout). Keys: ``keys.bloom_meta(prefix)`` (geometry, layer
    count, item counts) and ``keys.bloom_shard(prefix, layer, shard)``; the
    prefix is the spider name. Persistence: :meth:`close` never deletes keys;
    the scheduler flushes them with the rest of the crawl
    (``keys.crawl_patterns``) when its ``SCHEDULER_PERSIST`` says so.

    Stats: ``dupefilter/filtered``; from BITCOUNT, refreshed every
    ``BLOOM_STATS_INTERVAL`` seconds and on close, ``dupefilter/estimated_items``
    and ``dupefilter/expected_fp_rate`` (the rate a fresh URL is wrongly
    dropped now); ``dupefilter/layers``, and ``dupefilter/over_capacity`` once
    a full filter can no longer grow.
    """

    # Fingerprints remembered per generation: two generations of 100,000
    # 20-byte fingerprints are ~17 MB at most, far less than Scrapy's own
    # in-memory dupefilter holds for a crawl of that size.
    LOCAL = 100_000

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._known: set[bytes] = set()
        self._known_old: set[bytes] = set()
        settings = crawler.settings
        config.require(settings, defaults)
        try:
            self.config = BloomConfig.from_settings(settings)
        except ValueError as exc:  # a setting that is not a number
            raise NotConfigured(f"bad BLOOM_* setting: {exc}") from exc
        self.key_prefix = settings.get("BLOOM_KEY_PREFIX")
        self.stats_interval = settings.getfloat("BLOOM_STATS_INTERVAL")
        self.debug = settings.getbool("DUPEFILTER_DEBUG")
        self.logdupes = True
        self.prefix: str | None = None
        self.bloom: AsyncBloomFilter | None = None
        self._sync: BloomFilter | None = None
        self._snapshot: dict[str, Any] = {}
        self._refresher: asyncio.Task[None] | None = None
        self._refresh_failed_logged = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    # --- life cycle ------------------------------------------------------------

    def _resolve_prefix(self, prefix: str | None) -> str:
        spider = getattr(self.crawler, "spider", None)
        name = prefix or (spider.name if spider is not None else None)
        name = name or self.key_prefix
        if not name:
            raise RuntimeError(
                "BloomDupeFilter needs a key prefix: open it with the spider's "
                "name, run it in a crawl, or set BLOOM_KEY_PREFIX"
            )
        return str(name)

    def open(self, prefix: str | None = None) -> Deferred[None]:
        """Read or create the filter's geometry in Redis (a Deferred).

        ``prefix`` defaults to the spider's name, then ``BLOOM_KEY_PREFIX``.
        """
        return deferred_from_coro(self.open_async(prefix))

    async def open_async(self, prefix: str | None = None) -> None:
        """The coroutine behind :meth:`open`, for callers already in asyncio."""
        self.prefix = self._resolve_prefix(prefix)
        self.bloom = AsyncBloomFilter(
            async_client(self.crawler), self.prefix, self.config, self.crawler.stats
        )
        await self.bloom.open()
        if self.stats_interval > 0 and self._refresher is None:
            self._refresher = asyncio.get_running_loop().create_task(
                self._refresh_periodically()
            )

    def close(self, reason: str) -> Deferred[None]:
        """Send pending counts and refresh the stats; never deletes keys."""
        return deferred_from_coro(self.close_async(reason))

    async def close_async(self, reason: str = "finished") -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None
        if self.bloom is not None:
            await self.bloom.flush()
            await self.refresh_stats()
        if self._sync is not None:
            self._sync.flush()
            self._sync.client.close()
            self._sync = None

    # --- the two ways in ------------------------------------------------------

    async def requests_seen(self, requests: Sequence[Request]) -> list[bool]:
        """For each request, whether to drop it: True when already seen.

        Marks the others seen, all in one round trip. ``dont_filter``
        requests are reported False and not added. Counts and logs the drops.
        """
        if self.bloom is None:
            await self.open_async()
        assert self.bloom is not None
        fingerprint = self.fingerprint
        result = [False] * len(requests)
        spider = self.crawler.spider
        index: list[int] = []
        fps: list[bytes] = []
        for i, request in enumerate(requests):
            if request.dont_filter:
                continue
            fp = fingerprint(request)
            if self._knows(fp):
                result[i] = True
                self.log(request, spider)
            else:
                index.append(i)
                fps.append(fp)
        if not index:
            return result
        seen = await self.bloom.test_and_set(fps)
        for i, fp, was_seen in zip(index, fps, seen, strict=True):
            self._remember(fp)
            if was_seen:
                result[i] = True
                self.log(requests[i], spider)
        return result

    def seen_before(self, request: Request) -> bool:
        """Whether this worker already had the filter's answer for the
        request's fingerprint: then it is a duplicate (counted and logged
        like any drop), with no Redis call. False says nothing: ask
        :meth:`requests_seen`."""
        if request.dont_filter:
            return False
        if self._knows(self.fingerprint(request)):
            self.log(request, self.crawler.spider)
            return True
        return False

    def fingerprint(self, request: Request) -> bytes:
        """The request's fingerprint, its URL taken in canonical form."""
        return self.crawler.request_fingerprinter.fingerprint(
            canonical_request(request)
        )

    def _knows(self, fp: bytes) -> bool:
        return fp in self._known or fp in self._known_old

    def _remember(self, fp: bytes) -> None:
        # Only after the filter answered: its bits are set for good then.
        if len(self._known) >= self.LOCAL:
            self._known_old, self._known = self._known, set()
        self._known.add(fp)

    def request_seen(self, request: Request) -> bool:
        """Scrapy's stock path: one blocking round trip per request.

        Uses a synchronous client (created on first use). The stock scheduler
        counts and logs the drop by calling :meth:`log`.
        """
        if request.dont_filter:
            return False
        if self._sync is None:
            prefix = self.prefix or self._resolve_prefix(None)
            self._sync = BloomFilter(
                sync_client(self.crawler.settings),
                prefix,
                self.config,
                self.crawler.stats,
            )
        fp = self.fingerprint(request)
        if self._knows(fp):
            return True
        seen = self._sync.test_and_set([fp])[0]
        self._remember(fp)
        return seen

    def log(self, request: Request, spider: Spider | None) -> None:
        """Count a dropped request; log it (each one with DUPEFILTER_DEBUG,
        else the first only)."""
        if self.debug:
            logger.debug(
                "Filtered duplicate request: %(request)s (referer: %(referer)s)",
                {"request": request, "referer": referer_str(request)},
                extra={"spider": spider},
            )
        elif self.logdupes:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates "
                "will be shown (see DUPEFILTER_DEBUG to show all duplicates)",
                {"request": request},
                extra={"spider": spider},
            )
            self.logdupes = False
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value("dupefilter/filtered")

    # --- stats ------------------------------------------------------------------

    async def refresh_stats(self) -> dict[str, Any]:
        """Read BITCOUNT of every shard; write the estimates into the stats."""
        if self.bloom is None:
            await self.open_async()
        assert self.bloom is not None
        stats = await self.bloom.stats()
        self._snapshot = {
            "dupefilter/estimated_items": round(stats.estimated_items),
            "dupefilter/expected_fp_rate": stats.expected_fp_rate,
            "dupefilter/layers": stats.layers,
        }
        if self.crawler.stats is not None:
            for key, value in self._snapshot.items():
                self.crawler.stats.set_value(key, value)
        return dict(self._snapshot)

    async def _refresh_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.stats_interval)
            try:
                await self.refresh_stats()
            except TRANSIENT_REDIS_ERRORS:
                if not self._refresh_failed_logged:
                    self._refresh_failed_logged = True
                    logger.warning(
                        "Could not refresh the Bloom filter stats (logged once)",
                        exc_info=True,
                    )
