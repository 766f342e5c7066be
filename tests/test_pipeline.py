"""The batching pipeline: its core (PageBatcher) as plain asyncio code with a
real writer thread and a real SQLite file, the duplicate index on a real
redis-server, and the thin Scrapy glue built through get_crawler."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis.asyncio as aredis
from scrapy.utils.misc import build_from_crawler

from extensions import signals
from pipelines import defaults
from pipelines.batching import PageBatcher, PreparedPage, prepare_page
from pipelines.dedup import EXACT, NEAR, DuplicateIndex
from pipelines.items import PageItem
from pipelines.records import RECORD_FIELDS
from pipelines.storage import StoragePipeline
from pipelines.stores.base import BatchResult, TransientStoreError
from pipelines.stores.sqlite import SQLiteStore
from tests.support.polling import until
from tests.utils import get_crawler

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.crawler import Crawler

WORDS = [f"w{i}" for i in range(600)]


def item(n: int | str, text: str | None = None, **kw: Any) -> PageItem:
    text = text or " ".join(f"page{n} {w}" for w in WORDS[:60])
    body = f"<html><title>{n}</title><body><p>{text}</p></body></html>".encode()
    return PageItem(
        f"http://a.test/{n}", f"http://a.test/{n}", 200, f"fp{n}", body=body, **kw
    )


class FlakyStore(SQLiteStore):
    """A real SQLite store that fails its first ``failures`` writes, or while
    ``down`` is set."""

    def __init__(self, path: Path, failures: int = 0) -> None:
        super().__init__(path)
        self.failures = failures
        self.down = threading.Event()
        self.calls = 0

    def write_batch(self, metadata_docs: Any, content_docs: Any) -> BatchResult:
        self.calls += 1
        if self.failures > 0 or self.down.is_set():
            self.failures -= 1
            raise TransientStoreError("injected")
        return super().write_batch(metadata_docs, content_docs)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_batches_by_size_and_on_close(tmp_path: Path) -> None:
    stored: list[list[str]] = []
    store = SQLiteStore(tmp_path / "p.sqlite3")

    async def main() -> None:
        b = PageBatcher(
            store,
            batch_size=4,
            flush_interval=60,
            on_stored=lambda pages, r: stored.append([p.page_id for p in pages]),
        )
        await b.open()
        for i in range(10):
            await b.put(prepare_page(item(i)))
        assert await until(lambda: len(stored) >= 2)
        assert [len(s) for s in stored] == [4, 4]  # 2 left buffered
        assert await b.close() == []

    run(main())
    assert [len(s) for s in stored] == [4, 4, 2]
    check = SQLiteStore(tmp_path / "p.sqlite3")
    assert check.count() == 10


def test_flush_timer(tmp_path: Path) -> None:
    stored: list[float] = []

    async def main() -> None:
        b = PageBatcher(
            SQLiteStore(tmp_path / "p.sqlite3"),
            batch_size=50,
            flush_interval=0.2,
            on_stored=lambda pages, r: stored.append(time.monotonic()),
        )
        await b.open()
        start = time.monotonic()
        await b.put(prepare_page(item(1)))
        # Written by the timer, not by close: wait for it (a loaded machine
        # may be late, never early).
        for _ in range(200):
            if stored:
                break
            await asyncio.sleep(0.05)
        assert len(stored) == 1 and stored[0] - start >= 0.19
        await b.close()

    run(main())


def test_retry_backpressure_and_no_loss(tmp_path: Path) -> None:
    """While the store is down, put() blocks at max_buffer and pressure is
    on; once it is back, every page is written exactly once."""
    store = FlakyStore(tmp_path / "p.sqlite3")
    store.down.set()
    pressure: list[bool] = []
    stored: list[str] = []

    async def main() -> None:
        b = PageBatcher(
            store,
            batch_size=5,
            flush_interval=0.05,
            max_buffer=10,
            retry_initial=0.02,
            retry_max=0.05,
            on_stored=lambda pages, r: stored.extend(p.page_id for p in pages),
            on_pressure=pressure.append,
        )
        await b.open()
        for i in range(10):
            await b.put(prepare_page(item(i)))
        blocked = asyncio.ensure_future(b.put(prepare_page(item(10))))
        # Three failed writes at most 0.05 s apart: put() still blocked.
        assert await until(lambda: store.calls >= 3 and b.pressure)
        assert not blocked.done() and b.pending == 10 and b.pressure
        assert stored == [] and store.calls >= 3
        store.down.clear()
        await asyncio.wait_for(blocked, 5)
        for i in range(11, 30):
            await b.put(prepare_page(item(i)))
        assert await b.close() == []
        assert not b.pressure

    run(main())
    assert pressure[0] is True and pressure[-1] is False
    assert sorted(stored) == sorted(f"fp{i}" for i in range(30))
    assert SQLiteStore(tmp_path / "p.sqlite3").count() == 30


def test_close_gives_up_after_timeout_and_reports(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "p.sqlite3")
    store.down.set()
    stored: list[Any] = []

    async def main() -> list[PreparedPage]:
        b = PageBatcher(
            store,
            batch_size=2,
            retry_initial=0.01,
            close_timeout=0.3,
            on_stored=lambda pages, r: stored.append(pages),
        )
        await b.open()
        for i in range(5):
            await b.put(prepare_page(item(i)))
        return await b.close()

    unstored = run(main())
    assert stored == []  # nothing acknowledged
    assert sorted(p.page_id for p in unstored) == [f"fp{i}" for i in range(5)]


def test_duplicate_index(redis_url: str) -> None:
    async def main() -> None:
        client = aredis.Redis.from_url(redis_url)
        idx = DuplicateIndex(client, "web")
        base = simhash_of(" ".join(WORDS))
        near = simhash_of(" ".join([*WORDS[:300], "changed", *WORDS[301:]]))
        far = simhash_of(" ".join(reversed(WORDS)) + " other words entirely")
        assert await idx.check("a", "h1", base) is None
        assert await idx.check("a", "h1", base) is None  # a re-fetch of itself
        dup = await idx.check("b", "h1", base)
        assert dup is not None and (dup.kind, dup.of) == (EXACT, "a")
        dup = await idx.check("c", "h2", near)
        assert dup is not None and (dup.kind, dup.of) == (NEAR, "a")
        assert dup.distance <= 3
        assert await idx.check("d", "h3", far) is None
        # "a" changes: its old fingerprints no longer match anything.
        assert await idx.check("a", "h9", far ^ 0xFFFF_0000_0000_FFFF) is None
        assert await idx.check("e", "h1", base) is None
        await client.aclose()

    run(main())


def simhash_of(text: str) -> int:
    from pipelines.processing import simhash

    return simhash(text)


def storing_crawler(
    redis_url: str, tmp_path: Path, batch_size: int
) -> tuple[Crawler, StoragePipeline, list[PageItem]]:
    """A crawler storing to SQLite in ``tmp_path``, its storage pipeline, and
    the list the items its ``items_stored`` signal acknowledges are added to."""
    crawler = get_crawler(
        settings_dict={
            "REDIS_URL": redis_url,
            "SQLITE_PATH": str(tmp_path / "pages.sqlite3"),
            "PIPELINE_BATCH_SIZE": batch_size,
        }
    )
    got: list[PageItem] = []

    def on_stored(items: list[PageItem]) -> None:
        got.extend(items)

    crawler.signals.connect(on_stored, signal=signals.items_stored, weak=False)
    return crawler, build_from_crawler(StoragePipeline, crawler), got


def test_scrapy_glue_stores_dedups_and_signals(redis_url: str, tmp_path: Path) -> None:
    _, pipe, got = storing_crawler(redis_url, tmp_path, batch_size=3)
    text = " ".join(WORDS[:200])
    items = [
        item("orig", text),
        item("copy", text),  # exact duplicate
        item("near", " ".join([*WORDS[:100], "x", *WORDS[101:200]])),
        PageItem("http://a.test/err", "http://a.test/err", 0, "fperr", error="boom"),
        item("hidden", "<meta name=robots content=noindex>" + text[:50]),
    ]

    async def main() -> None:
        await pipe.open_spider()
        for it in items:
            record = await pipe.process_item(it)
            # What feeds export: the page's record, not the item.
            assert record["url"] == it.url
            assert set(record) == set(RECORD_FIELDS)
        assert await pipe.process_item({"other": 1}) == {"other": 1}
        await pipe.close_spider()

    run(main())
    assert sorted(i.url for i in got) == sorted(i.url for i in items)
    store = SQLiteStore(tmp_path / "pages.sqlite3")
    assert store.count() == 5
    assert store.content_count() == 1  # only the original's content
    copy = store.get_page("http://a.test/copy")
    assert copy is not None and copy.metadata["duplicate_of"] == "fporig"
    near = store.get_page("http://a.test/near")
    assert near is not None and near.metadata["duplicate_kind"] == "near"
    assert near.body == items[0].body
    err = store.get_page("http://a.test/err")
    assert err is not None and err.body is None and err.metadata["error"] == "boom"


@pytest.mark.parametrize("with_body", [False, True])
def test_passes_on_the_page_record_body_only_when_asked(
    with_body: bool, tmp_path: Path
) -> None:
    settings: dict[str, Any] = {
        "SQLITE_PATH": str(tmp_path / "pages.sqlite3"),
        "NEARDUP_ENABLED": False,
    }
    if with_body:
        settings["PIPELINE_ITEM_BODY"] = True
    crawler = get_crawler(settings_dict=settings)
    pipe = build_from_crawler(StoragePipeline, crawler)
    page = item("b", lease="lease-token", worker="w1")

    async def main() -> Any:
        await pipe.open_spider()
        record = await pipe.process_item(page)
        await pipe.close_spider()
        return record

    record = run(main())
    assert record["text"] == " ".join(f"pageb {w}" for w in WORDS[:60])
    assert "lease-token" not in record.values()
    if with_body:
        assert record["body"] == page.body.decode()
    else:
        assert "body" not in record
        assert defaults.PIPELINE_ITEM_BODY is False


@pytest.mark.parametrize(
    ("settings", "ok"),
    [
        ({}, True),
        ({"PIPELINE_BATCH_SIZE": 0}, False),
        ({"PIPELINE_ZLIB_LEVEL": 11}, False),
    ],
)
def test_not_configured(settings: dict[str, Any], ok: bool, tmp_path: Path) -> None:
    from scrapy.exceptions import NotConfigured

    crawler = get_crawler(
        settings_dict={"SQLITE_PATH": str(tmp_path / "p"), **settings}
    )
    if ok:
        pipe = build_from_crawler(StoragePipeline, crawler)
        assert pipe.batch_size == defaults.PIPELINE_BATCH_SIZE
    else:
        with pytest.raises(NotConfigured):
            build_from_crawler(StoragePipeline, crawler)


def test_a_304_is_stored_as_a_visit_and_tells_its_hash(
    redis_url: str, tmp_path: Path
) -> None:
    """A revisit answered 304 keeps the stored page and is counted as a visit,
    not a failed page; the storage acknowledgement carries each item's
    content hash (what the recrawl schedule compares)."""
    crawler, pipe, got = storing_crawler(redis_url, tmp_path, batch_size=1)
    first = item("page")
    again = PageItem(first.url, first.url, 304, first.fingerprint, fetched_at=9.0)

    async def main() -> None:
        await pipe.open_spider()
        await pipe.process_item(first)
        await pipe.process_item(again)
        await pipe.close_spider()

    run(main())
    assert got[0].content_hash is not None and got[1].content_hash is None
    stats = crawler.stats
    assert stats is not None
    assert stats.get_value("storage/pages/not_modified") == 1
    assert stats.get_value("storage/pages/failed") is None
    stored = SQLiteStore(tmp_path / "pages.sqlite3").get_page(first.url)
    assert stored is not None and stored.body == first.body
    assert [h["status"] for h in stored.metadata["history"]] == [200, 304]


def test_redis_keeps_a_bounded_cache_and_the_store_the_whole_index(
    redis_url: str, tmp_path: Path
) -> None:
    """Redis holds the duplicate index of the newest NEARDUP_CACHE_PAGES
    pages only (before: every page, about 340 B each, forever); a copy of an
    evicted page is still found, in the page store, exact or near."""
    import redis as sync_redis

    from extensions import keys

    cap, n = 5, 40
    texts = {i: " ".join(f"page{i} {w}" for w in WORDS) for i in range(n)}

    def pipeline() -> StoragePipeline:
        crawler = get_crawler(
            settings_dict={
                "REDIS_URL": redis_url,
                "SQLITE_PATH": str(tmp_path / "pages.sqlite3"),
                "PIPELINE_BATCH_SIZE": 4,
                "NEARDUP_CACHE_PAGES": cap,
            }
        )
        return build_from_crawler(StoragePipeline, crawler)

    async def feed(pipe: StoragePipeline, items: list[PageItem]) -> None:
        await pipe.open_spider()
        for it in items:
            await pipe.process_item(it)
        await pipe.close_spider()

    run(feed(first := pipeline(), [item(i, texts[i]) for i in range(n)]))
    assert first.crawler.stats is not None
    assert first.crawler.stats.get_value("storage/duplicates/exact") is None
    client = sync_redis.Redis.from_url(redis_url)
    assert client.hlen(keys.simhash_pages("web")) == cap
    assert client.hlen(keys.content_hashes("web")) == cap
    assert client.llen(keys.simhash_order("web")) == cap
    bands = client.hvals(keys.simhash_bands("web"))
    assert sum(len(v.split()) for v in bands) == 4 * cap
    # Copies of the first pages, evicted from Redis long ago.
    copy = item("copy", texts[0])
    words = texts[1].split()
    near = item("near", " ".join([*words[:200], "changed", *words[201:]]))
    second = pipeline()
    run(feed(second, [copy, near]))
    store = SQLiteStore(tmp_path / "pages.sqlite3")
    got = store.get_page("http://a.test/copy")
    assert got is not None and got.metadata["duplicate_of"] == "fp0"
    got = store.get_page("http://a.test/near")
    assert got is not None and got.metadata["duplicate_kind"] == "near"
    assert got.metadata["duplicate_of"] == "fp1"
    # Found in the store, they were not cached as originals.
    assert client.hget(keys.simhash_pages("web"), "fpcopy") is None
    client.close()


def test_redis_memory_of_10000_pages_all_in_is_under_10_mb(redis_url: str) -> None:
    """The Redis a 10,000-page crawl keeps for its dupefilter and duplicate
    index, with the default settings: the Bloom filter's first layer and a
    full duplicate cache, by MEMORY USAGE of every key (before: 180 MB of
    Bloom filter alone, and about 1.5 KB of index per page, unbounded)."""
    import hashlib

    import redis as sync_redis

    from extensions.core.bloom import BloomConfig, BloomFilter

    n = 10_000
    digests = [hashlib.sha256(f"page {i}".encode()).digest() for i in range(n)]
    client = sync_redis.Redis.from_url(redis_url)
    bloom = BloomFilter(client, "web", BloomConfig())
    assert not any(bloom.test_and_set([d[:20] for d in digests]))
    bloom.flush()

    async def index() -> None:
        aclient = aredis.Redis.from_url(redis_url)
        idx = DuplicateIndex(aclient, "web")
        for d in digests:
            page_id, simhash = d[8:28].hex(), int.from_bytes(d[:8], "big")
            assert await idx.check(page_id, d.hex(), simhash) is None
        await aclient.aclose()

    run(index())
    used = sum(
        client.memory_usage(key, samples=0) or 0 for key in client.scan_iter(count=1000)
    )
    client.close()
    assert used < 10 * 2**20
