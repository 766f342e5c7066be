"""Store errors are handled as documented: transient failures are retried,
permanent ones are tried once, recorded and reported, never retried forever.

Real SQLite files (one of an older schema, one locked by another
connection), a real redis-server for the duplicate check, and the real
PageBatcher writer thread.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.misc import build_from_crawler

from extensions import keys
from pipelines.batching import PageBatcher, PreparedPage, prepare_page
from pipelines.items import PageItem
from pipelines.storage import StoragePipeline
from pipelines.stores.base import PermanentStoreError, TransientStoreError
from pipelines.stores.sqlite import SQLiteStore
from tests.utils import get_crawler

if TYPE_CHECKING:
    from pathlib import Path

    import redis


def page(n: int) -> PreparedPage:
    text = " ".join(f"page{n} word{i}" for i in range(40))
    return prepare_page(
        PageItem(
            f"http://a.test/{n}",
            f"http://a.test/{n}",
            200,
            f"fp{n}",
            body=f"<html><body><p>{text}</p></body></html>".encode(),
        )
    )


def old_schema_db(path: Path) -> None:
    """A pages file written by an older release: no ``worker`` column."""
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE pages_metadata (id TEXT PRIMARY KEY, url TEXT, "
            "domain TEXT, fetched_at REAL, content_hash TEXT)"
        )
    conn.close()


class Recorder:
    def __init__(self) -> None:
        self.stored: list[str] = []
        self.failed: list[tuple[list[str], BaseException]] = []
        self.retries = 0

    def kwargs(self) -> dict[str, Any]:
        return {
            "on_stored": lambda ps, r: self.stored.extend(p.page_id for p in ps),
            "on_failed": lambda ps, e: self.failed.append(([p.page_id for p in ps], e)),
            "on_retry": lambda e, n: self._retry(),
        }

    def _retry(self) -> None:
        self.retries += 1


def run_batch(store: Any, n: int, rec: Recorder, **kw: Any) -> list[PreparedPage]:
    async def main() -> list[PreparedPage]:
        b = PageBatcher(
            store,
            batch_size=3,
            flush_interval=0.05,
            retry_initial=0.02,
            retry_max=0.05,
            close_timeout=kw.pop("close_timeout", 2.0),
            **rec.kwargs(),
            **kw,
        )
        await b.open()
        for i in range(n):
            await b.put(page(i))
        return await asyncio.wait_for(b.close(), 10)

    return asyncio.run(main())


def test_permanent_sqlite_error_is_tried_once_and_recorded(tmp_path: Path) -> None:
    """Before: every ``sqlite3.OperationalError`` was "transient", so a batch
    an older schema refuses was retried until close with the engine paused
    (try 1, 2, 3... for as long as the worker ran)."""
    path = tmp_path / "pages.sqlite3"
    old_schema_db(path)
    rec = Recorder()
    unstored = run_batch(SQLiteStore(path, timeout=0.05), 7, rec)
    assert rec.retries == 0
    assert rec.stored == []  # nothing acknowledged to the frontier
    assert [ids for ids, _ in rec.failed] == [
        ["fp0", "fp1", "fp2"],
        ["fp3", "fp4", "fp5"],
        ["fp6"],
    ]
    assert all(isinstance(e, PermanentStoreError) for _, e in rec.failed)
    # The reason: the first statement the old schema refuses (the read of
    # the visit history, or the write of a column it lacks).
    assert "column" in str(rec.failed[0][1])
    assert sorted(p.page_id for p in unstored) == [f"fp{i}" for i in range(7)]


def test_locked_sqlite_is_retried_until_free(tmp_path: Path) -> None:
    """ "database is locked" stays transient: retried, then written once."""
    path = tmp_path / "pages.sqlite3"
    SQLiteStore(path).open()
    holder = sqlite3.connect(path, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    released = threading.Event()

    def release_after_retries() -> None:
        while rec.retries < 2:
            threading.Event().wait(0.01)
        holder.rollback()
        holder.close()
        released.set()

    rec = Recorder()
    threading.Thread(target=release_after_retries, daemon=True).start()
    unstored = run_batch(SQLiteStore(path, timeout=0.01), 3, rec)
    assert released.is_set()
    assert unstored == [] and rec.failed == []
    assert sorted(rec.stored) == ["fp0", "fp1", "fp2"]
    assert SQLiteStore(path).count() == 3


class BuggyStore(SQLiteStore):
    """A store with a programming error in its write path."""

    def write_batch(self, metadata_docs: Any, content_docs: Any) -> Any:
        return len(None)  # type: ignore[arg-type]


def test_unexpected_error_is_not_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: a bug in the store was retried forever as "unexpected"."""
    rec = Recorder()
    with caplog.at_level(logging.ERROR, logger="pipelines.batching"):
        unstored = run_batch(BuggyStore(tmp_path / "p.sqlite3"), 2, rec)
    assert rec.retries == 0 and len(unstored) == 2
    assert isinstance(rec.failed[0][1], TypeError)
    (record,) = [r for r in caplog.records if "not retried" in r.getMessage()]
    assert record.exc_info is not None  # the traceback is in the log


def test_transient_error_type_is_still_retried(tmp_path: Path) -> None:
    class Down(SQLiteStore):
        calls = 0

        def write_batch(self, metadata_docs: Any, content_docs: Any) -> Any:
            self.calls += 1
            if self.calls < 3:
                raise TransientStoreError("failover")
            return super().write_batch(metadata_docs, content_docs)

    rec = Recorder()
    assert run_batch(Down(tmp_path / "p.sqlite3"), 2, rec) == []
    assert rec.retries == 2 and sorted(rec.stored) == ["fp0", "fp1"]


def pipeline(redis_url: str, tmp_path: Path) -> StoragePipeline:
    crawler = get_crawler(
        settings_dict={
            "REDIS_URL": redis_url,
            "SQLITE_PATH": str(tmp_path / "pages.sqlite3"),
            "PIPELINE_BATCH_SIZE": 2,
        }
    )
    return build_from_crawler(StoragePipeline, crawler)


def test_redis_refusing_the_duplicate_check_is_an_error(
    redis_url: str,
    redis_client: redis.Redis,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A key of the wrong type makes Redis refuse the script: the page is
    stored unchecked and the refusal is logged at ERROR (before: a WARNING
    that read as "Redis down")."""
    pipe = pipeline(redis_url, tmp_path)
    assert pipe.crawler.spider is None  # the index prefix is then "web"
    redis_client.set(keys.content_hashes("web"), "not a hash")
    it = page(1).item

    async def main() -> None:
        await pipe.open_spider()
        await pipe.process_item(it)
        await pipe.close_spider()

    with caplog.at_level(logging.WARNING, logger="pipelines.storage"):
        asyncio.run(main())
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert refused and refused[0].levelno == logging.ERROR
    assert SQLiteStore(tmp_path / "pages.sqlite3").count() == 1
    assert pipe.crawler.stats is not None
    assert pipe.crawler.stats.get_value("storage/dedup_errors") == 1


def test_a_bug_in_the_duplicate_check_propagates(
    redis_url: str, tmp_path: Path
) -> None:
    """Before: any exception was taken for "Redis down" and hidden."""
    pipe = pipeline(redis_url, tmp_path)
    it = page(1).item

    async def main() -> None:
        await pipe.open_spider()
        assert pipe.dedup is not None

        async def broken(*args: Any) -> None:
            raise KeyError("a bug")

        pipe.dedup.check = broken  # type: ignore[method-assign]
        try:
            with pytest.raises(KeyError):
                await pipe.process_item(it)
        finally:
            await pipe.close_spider()

    asyncio.run(main())


@pytest.mark.slow
def test_worker_with_unstored_pages_exits_non_zero(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A real ``scrapy crawl web`` whose SQLite file has an older schema: the
    first batch fails for good, the crawl stops (``store_failed``), the
    worker says how many pages it could not store and exits non-zero (before:
    it retried that batch until killed, and a worker ending with pages
    unstored exited 0). The pages' leases stay in the frontier, to be handed
    out again when they expire."""
    from sandbox.site import SiteSpec
    from tests.support.localcrawl import crawl_sandbox
    from webcrawl.commands.crawl import UNSTORED_EXIT_CODE

    db = tmp_path / "old.sqlite3"
    old_schema_db(db)
    report = crawl_sandbox(
        SiteSpec(seed=2, hosts=4, pages_per_host=6),
        redis_url,
        tmp_path,
        workers=1,
        settings={
            "SQLITE_PATH": str(db),
            "DOWNLOAD_DELAY": 0.05,
            "PIPELINE_BATCH_SIZE": 4,
            "PIPELINE_FLUSH_INTERVAL": 0.2,
        },
        timeout=120,
    )
    assert report.exit_codes == [UNSTORED_EXIT_CODE]
    log = (report.log_dir / "worker-0.log").read_text()
    assert "(store_failed)" in log
    lines = [ln for ln in log.splitlines() if "fetched pages were not stored" in ln]
    assert len(lines) == 1
    unstored = int(lines[0].split("ERROR: ")[1].split()[0])
    assert unstored >= 4
    # Not acknowledged: every unstored page still holds its lease in Redis.
    leased = redis_client.zcard(keys.FrontierKeys("web").leases)
    assert leased >= unstored
