"""The batching storage pipeline: ``pipelines.storage.StoragePipeline``.

Per :class:`~pipelines.items.PageItem`: extraction, fingerprints and zlib
compression in a thread (:func:`~pipelines.batching.prepare_page`), then the
fleet's duplicate index (see :mod:`pipelines.dedup`): the page store's, in a
thread, then Redis's bounded cache of the newest pages
(:class:`~pipelines.dedup.DuplicateIndex`, asyncio client), then the
bounded :class:`~pipelines.batching.PageBatcher`, which writes batches on its
own thread. Once a batch is durable, on the reactor thread,
:data:`extensions.signals.items_stored` is sent with its items (all of them:
stored, duplicates, and those recorded as permanent per-page errors); never
before. While the buffer is full or the store fails for a
transient reason, the engine is paused and ``process_item`` waits for room:
pages are never dropped. Other items pass through untouched.

Errors: a batch the store refuses for good (``PermanentStoreError``, or any
error it does not declare transient) is not retried: its pages are counted
(``storage/unstored``), logged with the reason, and the crawl stops with
finish reason ``store_failed``. Their frontier leases are not acknowledged:
once this worker stops renewing them they expire
(``FRONTIER_LEASE_TIMEOUT``) and the frontier hands the URLs out again, and
the application's ``scrapy crawl`` exits non-zero. A Redis
outage during the duplicate check stores the page unchecked (warning once);
a command Redis refuses (``ResponseError``: out of memory, wrong type) does
the same but logs at ERROR; any other error is a bug and propagates. A store
that cannot answer the duplicate lookup for a transient reason leaves the
check to Redis's cache (warning once).

Dead letters written with no page record (by the scheduler or a frontier
script: a redirect loop, a host judged down...) reach the pipeline through
:data:`extensions.signals.dead_letters_unrecorded`; each is stored as a
failed page (:func:`pipelines.items.dead_letter_item`: status 0 or its
last status, ``error`` naming the reason), like the spider's final failures,
and counted as ``storage/dead_letters``. Close waits for them.

What the pipeline passes on for a page (to feed exports, ``-o``/``FEEDS``)
is its exported record (:func:`pipelines.records.page_record`): metadata and
extracted text, the decoded body only with ``PIPELINE_ITEM_BODY``; never the
lease token, the raw headers or body bytes of the
:class:`~pipelines.items.PageItem`.

Settings read: ``PIPELINE_BATCH_SIZE``, ``PIPELINE_FLUSH_INTERVAL``,
``PIPELINE_MAX_BUFFER``, ``PIPELINE_ZLIB_LEVEL``, ``PIPELINE_RETRY_INITIAL``,
``PIPELINE_RETRY_MAX``, ``PIPELINE_CLOSE_TIMEOUT``, ``PIPELINE_ITEM_BODY``,
``NEARDUP_ENABLED``, ``NEARDUP_CACHE_PAGES``,
``NEARDUP_MAX_DISTANCE``, ``NEARDUP_MIN_WORDS``, ``NEARDUP_MAX_CANDIDATES``,
and the store's (``PAGE_STORE``, ``MONGO_URI``, ``MONGO_DATABASE``,
``MONGO_TIMEOUT_MS``, ``SQLITE_PATH``, ``WEBCRAWL_HOME``, see
:mod:`pipelines.stores`); ``REDIS_URL`` through :mod:`extensions.connection`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError
from scrapy.exceptions import NotConfigured

from extensions import signals
from extensions.connection import TRANSIENT_REDIS_ERRORS
from extensions.settings import config
from pipelines import defaults
from pipelines.batching import PageBatcher, PreparedPage, prepare_page
from pipelines.dedup import EXACT, Duplicate, DuplicateIndex
from pipelines.items import PageItem, dead_letter_item
from pipelines.records import decode_body, page_record
from pipelines.stores import store_from_settings
from pipelines.stores.base import NOT_MODIFIED, TransientStoreError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from extensions.core.frontier.deadletters import DeadLetter
    from pipelines.stores.base import BatchResult

logger = logging.getLogger(__name__)

# Pages fetched but not written (a permanent store failure, or a store still
# failing at close): ``scrapy crawl`` exits non-zero when it is set.
UNSTORED_STAT = "storage/unstored"


class StoragePipeline:
    """Processes pages and stores them in batches (module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        s = crawler.settings
        config.require(s, defaults)
        self.batch_size = s.getint("PIPELINE_BATCH_SIZE")
        self.flush_interval = s.getfloat("PIPELINE_FLUSH_INTERVAL")
        self.max_buffer = s.getint("PIPELINE_MAX_BUFFER")
        self.zlib_level = s.getint("PIPELINE_ZLIB_LEVEL")
        self.retry_initial = s.getfloat("PIPELINE_RETRY_INITIAL")
        self.retry_max = s.getfloat("PIPELINE_RETRY_MAX")
        self.close_timeout = s.getfloat("PIPELINE_CLOSE_TIMEOUT")
        self.item_body = s.getbool("PIPELINE_ITEM_BODY")
        self.neardup = s.getbool("NEARDUP_ENABLED")
        self.max_distance = s.getint("NEARDUP_MAX_DISTANCE")
        self.min_words = s.getint("NEARDUP_MIN_WORDS")
        self.max_candidates = s.getint("NEARDUP_MAX_CANDIDATES")
        self.cache_pages = s.getint("NEARDUP_CACHE_PAGES")
        if self.batch_size < 1:
            raise NotConfigured("PIPELINE_BATCH_SIZE must be at least 1")
        if not 0 <= self.zlib_level <= 9:
            raise NotConfigured("PIPELINE_ZLIB_LEVEL must be 0-9")
        self.store = store_from_settings(s)
        self.batcher: PageBatcher | None = None
        self.dedup: DuplicateIndex | None = None
        self._paused_engine = False
        self._dedup_failed = False
        self._store_lookup_failed = False
        self._dedup_refused = False
        self._closing_task: asyncio.Task[None] | None = None
        self._recording: set[asyncio.Task[None]] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StoragePipeline:
        return cls(crawler)

    async def open_spider(self) -> None:
        if self.neardup:
            from extensions.connection import async_client
            from extensions.keys import crawl_prefix

            prefix = crawl_prefix(self.crawler)
            self.dedup = DuplicateIndex(
                async_client(self.crawler),
                prefix,
                self.max_distance,
                self.max_candidates,
                self.cache_pages,
            )
        self.batcher = PageBatcher(
            self.store,
            batch_size=self.batch_size,
            flush_interval=self.flush_interval,
            max_buffer=self.max_buffer,
            retry_initial=self.retry_initial,
            retry_max=self.retry_max,
            close_timeout=self.close_timeout,
            on_stored=self._stored,
            on_pressure=self._pressure,
            on_retry=self._retry,
            on_failed=self._failed,
        )
        await self.batcher.open()
        self.crawler.signals.connect(
            self._on_dead_letters, signal=signals.dead_letters_unrecorded
        )
        logger.info("Storing pages in %r, batches of %d", self.store, self.batch_size)

    async def process_item(self, item: Any) -> Any:
        if not isinstance(item, PageItem):
            return item
        assert self.batcher is not None
        # Its response's lease waits for items_stored (see
        # extensions.core.scheduler.leases).
        self.crawler.signals.send_catch_log(signals.item_held, item=item)
        page = await asyncio.to_thread(
            prepare_page, item, self.zlib_level, self.min_words
        )
        # Told back with items_stored: a revisit compares it with the last one.
        item.content_hash = page.content_hash
        await self._check_duplicate(page)
        self._count_page(page)
        await self.batcher.put(page)
        self._set("storage/buffer", self.batcher.pending)
        body = None
        if self.item_body and not item.error:
            body = decode_body(item.body, page.metadata["encoding"])
        return page_record(page.metadata, page.text, body)

    def _on_dead_letters(self, letters: list[DeadLetter]) -> None:
        """Record dead letters that have no page record yet (a task: the
        scheduler's round does not wait for the store)."""
        task = asyncio.ensure_future(self._record(letters))
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)

    async def _record(self, letters: list[DeadLetter]) -> None:
        fingerprinter = self.crawler.request_fingerprinter
        for letter in letters:
            await self.process_item(dead_letter_item(letter, fingerprinter))
            self._inc("storage/dead_letters")

    async def close_spider(self) -> None:
        if self.batcher is None:
            return
        if self._recording:
            await asyncio.gather(*self._recording)
        unstored = await self.batcher.close()
        if self._paused_engine:
            self._pressure(False)
        if unstored:
            stats = self.crawler.stats
            if stats is not None:
                stats.set_value(UNSTORED_STAT, len(unstored))
            logger.error(
                "%d pages could not be written to %r; their leases are not "
                "acknowledged, so the frontier hands them out again once they "
                "expire",
                len(unstored),
                self.store,
            )

    async def _check_duplicate(self, page: PreparedPage) -> None:
        if self.dedup is None or page.metadata["noindex"]:
            return
        if page.content_hash is None and page.simhash is None:
            return
        dup = await self._find_stored_original(page)
        try:
            if dup is not None:
                await self.dedup.forget(page.page_id)
            else:
                dup = await self.dedup.check(
                    page.page_id, page.content_hash, page.simhash
                )
        except TRANSIENT_REDIS_ERRORS as e:  # Redis down: store the page unchecked
            self._inc("storage/dedup_errors")
            if not self._dedup_failed:
                self._dedup_failed = True
                logger.warning("Duplicate check failed, storing pages unchecked: %s", e)
            return
        except ResponseError as e:
            # Redis refused the script (out of memory, a key of another
            # type): not a bug here, and not an outage that will pass.
            self._inc("storage/dedup_errors")
            if not self._dedup_refused:
                self._dedup_refused = True
                logger.error(
                    "Redis refused the duplicate check, storing pages unchecked: %s",
                    e,
                )
            return
        if dup is not None:
            page.mark_duplicate(dup)
            self._inc(f"storage/duplicates/{'exact' if dup.kind == EXACT else 'near'}")

    async def _find_stored_original(self, page: PreparedPage) -> Duplicate | None:
        """The stored page this one duplicates (the store's index, in a
        thread: SQLite and pymongo block)."""
        try:
            found = await asyncio.to_thread(
                self.store.find_original,
                page.page_id,
                page.content_hash,
                page.simhash,
                self.max_distance,
                self.max_candidates,
            )
        except TransientStoreError as e:
            self._inc("storage/dedup_errors")
            if not self._store_lookup_failed:
                self._store_lookup_failed = True
                logger.warning(
                    "Duplicate lookup in the page store failed, checking the "
                    "Redis cache only: %s",
                    e,
                )
            return None
        if found is None:
            return None
        return Duplicate(found.kind, found.page_id, found.distance)

    def _count_page(self, page: PreparedPage) -> None:
        meta = page.metadata
        self._inc("storage/pages")
        if meta["status"] == NOT_MODIFIED:
            # A revisit's 304: a visit, not a failed page (no body is normal).
            self._inc("storage/pages/not_modified")
        elif meta["filtered"]:
            self._inc("storage/pages/filtered")
        elif meta["error"] or not meta["size"]:
            self._inc("storage/pages/failed")
        if meta["noindex"]:
            self._inc("storage/pages/noindex")
        if page.content is not None:
            self._inc("storage/bytes/raw", page.content["original_size"])
            self._inc("storage/bytes/compressed", page.content["compressed_size"])

    def _stored(self, pages: list[PreparedPage], result: BatchResult) -> None:
        """The batch is durable: tell the frontier (reactor thread)."""
        self._inc("storage/batches")
        self._inc("storage/written", result.written)
        for err in result.errors:
            self._inc(f"storage/errors/{err.collection}")
            logger.error(
                "Page %s not stored in %s (permanent error %s): %s",
                err.page_id,
                err.collection,
                err.code,
                err.message,
            )
        stats = self.crawler.stats
        if stats is not None:
            if self.batcher is not None:
                stats.set_value("storage/buffer", self.batcher.pending)
            raw = stats.get_value("storage/bytes/raw", 0)
            packed = stats.get_value("storage/bytes/compressed", 0)
            if packed:
                stats.set_value("storage/compression_ratio", round(raw / packed, 3))
        self.crawler.signals.send_catch_log(
            signal=signals.items_stored, items=[p.item for p in pages]
        )

    def _failed(self, pages: list[PreparedPage], error: BaseException) -> None:
        """A batch failed for good (reactor thread): stop the crawl, since
        the store refuses what this worker fetches."""
        self._inc("storage/batches_failed")
        engine = self.crawler.engine
        if engine is None or self._closing_task is not None:
            return
        if self._paused_engine:
            self._pressure(False)
        logger.error(
            "Stopping the crawl: the page store failed permanently (%s)",
            type(error).__name__,
        )
        self._closing_task = asyncio.ensure_future(
            engine.close_spider_async(reason="store_failed")
        )

    def _pressure(self, on: bool) -> None:
        engine = self.crawler.engine
        if on:
            self._inc("storage/backpressure")
            logger.info("Page store busy or failing: pausing the engine")
            if engine is not None and not engine.paused:
                engine.pause()
                self._paused_engine = True
        elif self._paused_engine:
            logger.info("Page store caught up: resuming the engine")
            self._paused_engine = False
            if engine is not None:
                engine.unpause()

    def _retry(self, error: BaseException, attempt: int) -> None:
        # Runs in the writer thread: stats collectors are plain dicts.
        self._inc("storage/retries")

    def _set(self, key: str, value: int) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.set_value(key, value)

    def _inc(self, key: str, count: int = 1) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(key, count)
