"""The storage pipeline's core, free of Scrapy: documents and the batcher.

:func:`prepare_page` turns a :class:`~pipelines.items.PageItem` into the two
documents a store keeps (CPU work: run it in a thread). :class:`PageBatcher`
buffers prepared pages and writes them in batches through a
:class:`~pipelines.stores.base.PageStore` on one dedicated writer thread, on
an asyncio loop (Scrapy's asyncio reactor, or ``asyncio.run`` in tests and
benchmarks):

* a batch is written when ``batch_size`` pages are buffered, when the oldest
  buffered page is ``flush_interval`` seconds old, and on close;
* at most ``max_buffer`` pages are held (buffered + being written):
  :meth:`PageBatcher.put` waits for room, and ``on_pressure(True)`` is called
  while the buffer is full or the store is failing (the pipeline pauses the
  engine), ``on_pressure(False)`` once writes go through again;
* a batch whose write fails for a transient reason (the store raised
  :class:`~pipelines.stores.base.TransientStoreError`) is retried, unchanged,
  with exponential back-off (``retry_initial`` doubling up to ``retry_max``)
  until it succeeds: pages are never dropped. On close the retries stop after
  ``close_timeout`` seconds; pages still unwritten are reported (their
  frontier leases are not acknowledged, so the frontier hands them out again);
* a batch whose write fails for any other reason
  (:class:`~pipelines.stores.base.PermanentStoreError`, or an error no store
  declares transient, i.e. a bug) is not retried: it is tried once, logged
  with its traceback, its pages join :attr:`PageBatcher.unstored` and
  ``on_failed(pages, error)`` is called on the loop's thread (the pipeline
  stops the crawl); later batches are still tried, once each;
* ``on_stored(pages, result)`` is called on the loop's thread only after the
  store returned, i.e. once the batch is durable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import logging
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pipelines.processing import extract, fingerprints, header_values
from pipelines.stores.base import BatchResult, PageStore, TransientStoreError

if TYPE_CHECKING:
    from pipelines.dedup import Duplicate
    from pipelines.items import PageItem

logger = logging.getLogger(__name__)

_HTML_TYPES = ("html", "xml")
# The most header bytes (names and values) a non-HTML record keeps: a
# server's usual dozen headers fit many times over, while one that sends
# megabytes of them (a hostile server may) cannot bloat the store.
HEADERS_MAX_BYTES = 8192
# Left out of stored headers: a session secret of the crawled site, and no
# metadata of the document.
_UNSTORED_HEADERS = frozenset({"set-cookie", "set-cookie2"})


def stored_headers(
    headers: dict[str, list[str]], max_bytes: int = HEADERS_MAX_BYTES
) -> list[list[str]]:
    """The ``[name, value]`` pairs a metadata record keeps of ``headers``:
    names lower-cased, in order, ``Set-Cookie`` left out, and only while
    names and values add up to ``max_bytes`` (a header that would pass it
    is dropped, and so are the ones after it).

    >>> stored_headers({"Content-Type": ["application/pdf"],
    ...                 "Set-Cookie": ["sid=1"], "Link": ["<a>", "<b>"]})
    [['content-type', 'application/pdf'], ['link', '<a>'], ['link', '<b>']]
    >>> stored_headers({"A": ["x" * 10], "B": ["y" * 10]}, max_bytes=12)
    [['a', 'xxxxxxxxxx']]
    """
    pairs: list[list[str]] = []
    size = 0
    for name, values in headers.items():
        key = name.lower()
        if key in _UNSTORED_HEADERS:
            continue
        for value in values:
            size += len(key) + len(value)
            if size > max_bytes:
                return pairs
            pairs.append([key, value])
    return pairs


@dataclass
class PreparedPage:
    """One item with its documents, ready for a batch."""

    item: PageItem
    page_id: str
    metadata: dict[str, Any]
    content: dict[str, Any] | None = None
    content_hash: str | None = None
    simhash: int | None = None
    words: int = 0
    links: list[Any] = field(default_factory=list)
    # The extracted text (not stored: feeds export it, see pipelines.records).
    text: str = ""

    def mark_duplicate(self, dup: Duplicate) -> None:
        """Record that the page duplicates another: its content is not
        stored again."""
        self.metadata["duplicate_of"] = dup.of
        self.metadata["duplicate_kind"] = dup.kind
        self.metadata["duplicate_distance"] = dup.distance
        self.metadata["has_content"] = False
        self.content = None


def page_id_of(item: PageItem) -> str:
    """The deterministic document id: the request fingerprint (hex), else the
    SHA-1 of the URL.

    >>> from pipelines.items import PageItem
    >>> page_id_of(PageItem("http://a.test/", "http://a.test/", 200, "ab12"))
    'ab12'
    >>> page_id_of(PageItem("http://a.test/", "http://a.test/", 200, ""))[:8]
    '594e1fd4'
    """
    if item.fingerprint:
        return item.fingerprint
    return hashlib.sha1(item.url.encode("utf-8")).hexdigest()


def _first(headers: dict[str, list[str]], name: str) -> str | None:
    values = header_values(headers, name)
    return values[0] if values else None


def prepare_page(
    item: PageItem, zlib_level: int = 6, near_min_words: int = 20
) -> PreparedPage:
    """Extract, fingerprint and compress one page (no I/O).

    Failed and empty pages keep a metadata-only record; ``noindex`` pages
    keep metadata but no content. ``simhash`` is left None for texts shorter
    than ``near_min_words`` words (too short for a meaningful near-duplicate
    check), ``content_hash`` None for pages without text.
    """
    page_id = page_id_of(item)
    headers = item.headers or {}
    ctype = _first(headers, "Content-Type")
    body = item.body or b""
    meta: dict[str, Any] = {
        "_id": page_id,
        "url": item.url,
        "final_url": item.final_url or item.url,
        "domain": (urlsplit(item.url).hostname or "").lower(),
        "status": int(item.status),
        "error": item.error,
        "depth": int(item.depth),
        "referrer": item.referrer,
        "fetched_at": float(item.fetched_at or time.time()),
        "stored_at": None,
        "content_type": ctype,
        "encoding": None,
        "size": len(body),
        "compressed_size": 0,
        "compression_ratio": None,
        "content_hash": None,
        "simhash": None,
        "text_length": 0,
        "links_count": 0,
        "title": None,
        "description": None,
        "canonical": None,
        "language": None,
        "etag": _first(headers, "ETag"),
        "last_modified": _first(headers, "Last-Modified"),
        "noindex": False,
        "nofollow": False,
        "duplicate_of": None,
        "duplicate_kind": None,
        "duplicate_distance": None,
        "has_content": False,
        "worker": item.worker,
        "headers": None,
        "filtered": item.filtered,
    }
    page = PreparedPage(item, page_id, meta)
    if item.error or not body:
        return page
    is_html = ctype is None or any(t in ctype.lower() for t in _HTML_TYPES)
    if is_html:
        # The spider parsed the page already (links, robots meta): one parse.
        ex = item.extracted or extract(body, meta["final_url"], headers, item.encoding)
        words = len(ex.text.split())
        page.words = words
        page.links = ex.links
        page.text = ex.text
        meta.update(
            encoding=ex.encoding,
            title=ex.title or None,
            description=ex.description or None,
            canonical=ex.canonical,
            language=ex.language,
            links_count=len(ex.links) + ex.links_unexamined,
            noindex=ex.noindex,
            nofollow=ex.nofollow,
            text_length=len(ex.text),
        )
        if words:
            page.content_hash, near = fingerprints(ex.text)
            if words >= near_min_words:
                page.simhash = near
        if ex.noindex:
            return page
    else:
        # Not HTML (a PDF, an image...): a metadata record, whose headers
        # are most of what is known of it.
        meta["encoding"] = item.encoding
        meta["headers"] = stored_headers(headers)
        page.content_hash = hashlib.sha256(body).hexdigest()
    meta["content_hash"] = page.content_hash
    meta["simhash"] = f"{page.simhash:016x}" if page.simhash is not None else None
    blob = zlib.compress(body, zlib_level)
    ratio = round(len(body) / len(blob), 3) if blob else None
    meta.update(has_content=True, compressed_size=len(blob), compression_ratio=ratio)
    page.content = {
        "_id": page_id,
        "page_id": page_id,
        "url": item.url,
        "html_compressed": blob,
        "original_size": len(body),
        "compressed_size": len(blob),
        "compression_ratio": ratio,
        "encoding": meta["encoding"],
    }
    return page


class FlushAborted(Exception):
    """The batcher closed before a failing batch could be written."""


StoredCallback = Callable[[list[PreparedPage], BatchResult], None]
FailedCallback = Callable[[list[PreparedPage], BaseException], None]


class PageBatcher:
    """Buffers prepared pages and writes them in batches (see the module
    docstring for the flush, back-pressure and retry rules)."""

    def __init__(
        self,
        store: PageStore,
        *,
        batch_size: int = 50,
        flush_interval: float = 5.0,
        max_buffer: int = 200,
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
        close_timeout: float = 60.0,
        on_stored: StoredCallback | None = None,
        on_pressure: Callable[[bool], None] | None = None,
        on_retry: Callable[[BaseException, int], None] | None = None,
        on_failed: FailedCallback | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.store = store
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        # Room for one batch being written plus one filling.
        self.max_buffer = max(max_buffer, batch_size)
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.close_timeout = close_timeout
        self.on_stored = on_stored
        self.on_pressure = on_pressure
        self.on_retry = on_retry
        self.on_failed = on_failed
        self._buffer: list[PreparedPage] = []
        self._inflight: list[PreparedPage] = []
        self._first_at = 0.0
        self._closing = False
        self._failing = False
        self._pressure = False
        self._abort = threading.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="webcrawl-store"
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._room: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        # Pages not written: failed for good, or still failing at close.
        self.unstored: list[PreparedPage] = []
        self.failed_batches = 0
        self.batches = 0
        self.retries = 0
        self.flush_seconds: list[float] = []

    @property
    def pending(self) -> int:
        """Pages held: buffered plus being written."""
        return len(self._buffer) + len(self._inflight)

    @property
    def pressure(self) -> bool:
        return self._pressure

    async def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        try:
            await self._loop.run_in_executor(self._executor, self.store.open)
        except TransientStoreError as e:
            # The first batch retries the connection with back-off.
            logger.warning("Page store %r not reachable yet: %s", self.store, e)
        self._task = asyncio.ensure_future(self._run())

    async def put(self, page: PreparedPage) -> None:
        """Add a page; waits while the buffer is full (back-pressure)."""
        assert self._wake is not None and self._room is not None
        if self._closing:
            raise RuntimeError("PageBatcher is closed")
        while self.pending >= self.max_buffer:
            self._set_pressure()
            self._room.clear()
            await self._room.wait()
        if not self._buffer:
            self._first_at = time.monotonic()
        self._buffer.append(page)
        # Wake the writer on the first page (it starts the flush timer) and
        # on a full batch.
        if len(self._buffer) == 1 or len(self._buffer) >= self.batch_size:
            self._wake.set()

    async def close(self) -> list[PreparedPage]:
        """Write everything buffered; return the pages that could not be
        written within ``close_timeout`` (empty when all are durable)."""
        self._closing = True
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), self.close_timeout)
            except TimeoutError:
                self._abort.set()
                await self._task
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.store.close)
        self._executor.shutdown(wait=False)
        return self.unstored

    def _set_pressure(self) -> None:
        want = self._failing or self.pending >= self.max_buffer
        if want != self._pressure:
            self._pressure = want
            if self.on_pressure is not None:
                self.on_pressure(want)

    async def _run(self) -> None:
        assert self._wake is not None and self._room is not None
        loop = asyncio.get_running_loop()
        while True:
            if not self._buffer:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            if len(self._buffer) < self.batch_size and not self._closing:
                wait = self.flush_interval - (time.monotonic() - self._first_at)
                if wait > 0:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), wait)
                    continue
            batch = self._buffer[: self.batch_size]
            del self._buffer[: self.batch_size]
            self._first_at = time.monotonic()
            self._inflight = batch
            try:
                result = await loop.run_in_executor(
                    self._executor, self._write_with_retry, batch
                )
            except FlushAborted:
                self.unstored.extend(batch)
                self.unstored.extend(self._buffer)
                self._buffer.clear()
                self._inflight = []
                return
            except Exception as e:
                # Not transient (the stores turn every "not now" into
                # TransientStoreError): retrying cannot help, so the batch is
                # recorded as failed and reported, never retried forever and
                # never hidden. Catching everything here keeps the writer
                # alive for the batches still buffered.
                self._inflight = []
                self._failing = False
                self._batch_failed(batch, e)
                continue
            self._inflight = []
            self._failing = False
            self.batches += 1
            if self.on_stored is not None:
                try:
                    self.on_stored(batch, result)
                except Exception:
                    logger.exception("on_stored callback failed")
            self._room.set()
            self._set_pressure()

    def _write_with_retry(self, batch: list[PreparedPage]) -> BatchResult:
        """Runs in the writer thread."""
        assert self._loop is not None
        now = time.time()
        for page in batch:
            page.metadata["stored_at"] = now
        metadata = [p.metadata for p in batch]
        content = [p.content for p in batch if p.content is not None]
        delay = self.retry_initial
        attempt = 0
        while True:
            started = time.perf_counter()
            try:
                result = self.store.write_batch(metadata, content)
            except TransientStoreError as e:
                attempt += 1
                self.retries += 1
                if attempt == 1:
                    self._loop.call_soon_threadsafe(self._store_failing)
                if attempt == 1 or attempt % 10 == 0:
                    logger.warning(
                        "Writing a batch of %d pages failed (try %d, transient), "
                        "retrying in %.1fs: %s",
                        len(batch),
                        attempt,
                        delay,
                        e,
                    )
                if self.on_retry is not None:
                    self.on_retry(e, attempt)
                if self._abort.wait(delay):
                    raise FlushAborted() from e
                delay = min(delay * 2, self.retry_max)
                continue
            self.flush_seconds.append(time.perf_counter() - started)
            return result

    def _batch_failed(self, batch: list[PreparedPage], error: Exception) -> None:
        assert self._room is not None
        self.failed_batches += 1
        self.unstored.extend(batch)
        logger.error(
            "A batch of %d pages could not be written to %r and is not retried "
            "(%s: %s); its pages are recorded as unstored",
            len(batch),
            self.store,
            type(error).__name__,
            error,
            exc_info=error,
        )
        if self.on_failed is not None:
            try:
                self.on_failed(batch, error)
            except Exception:
                logger.exception("on_failed callback failed")
        self._room.set()
        self._set_pressure()

    def _store_failing(self) -> None:
        self._failing = True
        self._set_pressure()
