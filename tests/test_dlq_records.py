"""Every dead letter has its page record (issue 12): those the frontier's
scripts write (the host-down sweep, the commit's diversion of a down host's
new URLs) and those the scheduler writes itself (a redirect refused when
scheduled) reach the page store through the ``dead_letters_unrecorded``
signal, a bounded page at a time. Real redis-server, real SQLite store."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import redis.asyncio as aredis
from scrapy import Request, signals
from scrapy.utils.misc import build_from_crawler

from extensions import meta
from extensions.core.frontier.deadletters import DeadLetters
from extensions.core.frontier.frontier import Frontier, QueuedRequest
from pipelines.storage import StoragePipeline
from pipelines.stores.sqlite import SQLiteStore
from tests.support.hostdown import DOWN, K, failing_for
from tests.support.scheduler import make_crawler, opened

if TYPE_CHECKING:
    from pathlib import Path

    import redis

SWEPT = [f"http://down.test/{i}" for i in range(7)]
LATER = "http://down.test/later"


async def judged_down(client: aredis.Redis) -> None:
    """Seven queued URLs of DOWN swept by the verdict, then one more diverted
    by the commit while the verdict lasts."""
    frontier = Frontier(client, "web")
    await frontier.commit(
        [
            QueuedRequest(DOWN, 0, url.encode(), 60_000 * (i % 2))
            for i, url in enumerate(SWEPT)
        ]
    )
    swept, _down, made = await DeadLetters(client, "web").host_down(
        DOWN, 1000, 3_600_000, "host down: refused"
    )
    assert (swept, made) == (7, True)
    await frontier.commit([QueuedRequest(DOWN, 0, LATER.encode())])


def test_script_dead_letters_are_handed_out_a_page_at_a_time(
    redis_url: str, redis_client: redis.Redis
) -> None:
    failing_for(redis_client, DOWN, 5_000)

    async def main() -> list[list[str]]:
        client = aredis.Redis.from_url(redis_url)
        try:
            await judged_down(client)
            dlq = DeadLetters(client, "web")
            pages = []
            while True:
                letters, left = await dlq.unrecorded(3)
                pages.append([x.url for x in letters])
                assert all(x.reason == "host_down" for x in letters)
                if not left:
                    return pages
        finally:
            await client.aclose()

    pages = asyncio.run(main())
    assert [len(p) for p in pages] == [3, 3, 2]
    assert sorted(u for p in pages for u in p) == sorted([*SWEPT, LATER])
    assert redis_client.llen(K.dlq_unrecorded) == 0


def test_the_scheduler_has_the_store_record_every_dead_letter(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    failing_for(redis_client, DOWN, 5_000)
    crawler = make_crawler(
        redis_url, SQLITE_PATH=str(tmp_path / "p.sqlite3"), PIPELINE_BATCH_SIZE=4
    )
    refused = Request(
        "http://b.test/elsewhere",
        meta={meta.FRONTIER_LEASE: "lease-1", "redirect_urls": ["http://a.test/r"]},
    )

    async def main() -> dict[str, Any]:
        client = aredis.Redis.from_url(redis_url)
        try:
            await judged_down(client)
        finally:
            await client.aclose()
        pipe = build_from_crawler(StoragePipeline, crawler)
        await pipe.open_spider()
        scheduler = await opened(crawler)
        # OffsiteMiddleware's refusal: announced, never enqueued.
        crawler.signals.send_catch_log(
            signals.request_scheduled, request=refused, spider=crawler.spider
        )
        stats = crawler.stats
        assert stats is not None
        deadline = time.monotonic() + 10
        while (stats.get_value("storage/dead_letters") or 0) < 9:
            assert time.monotonic() < deadline, stats.get_stats()
            await asyncio.sleep(0.02)
        await pipe.close_spider()
        await scheduler.close_async("finished")
        return stats.get_stats()

    got = asyncio.run(main())
    assert got["dlq/recorded_by_store"] == 9
    store = SQLiteStore(tmp_path / "p.sqlite3")
    for url in [*SWEPT, LATER]:
        page = store.get_page(url)
        assert page is not None, url
        assert page.metadata["status"] == 0
        assert page.metadata["error"].startswith("host_down: host down")
    page = store.get_page("http://a.test/r")
    assert page is not None
    assert page.metadata["error"] == "offsite_redirect: refused when scheduled"
    assert redis_client.llen(K.dlq_unrecorded) == 0


def test_a_spider_error_gets_its_page_record(redis_url: str, tmp_path: Path) -> None:
    """Issue 21, item 6: a response the spider failed on is dead-lettered
    with no page record, so the store records it (before, its letter was
    filed as recorded and no record was ever written)."""
    from scrapy.http import HtmlResponse
    from twisted.python.failure import Failure

    from extensions.signals import dead_letters_unrecorded

    crawler = make_crawler(redis_url)
    handed: list[Any] = []
    crawler.signals.connect(
        lambda letters, **_: handed.extend(letters),
        signal=dead_letters_unrecorded,
        weak=False,
    )

    async def main() -> None:
        scheduler = await opened(crawler)
        scheduler.enqueue_request(Request("http://a.test/broken"))
        deadline = time.monotonic() + 10
        while (request := scheduler.next_request()) is None:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        response = HtmlResponse(request.url, body=b"<html>", request=request)
        try:
            raise ValueError("the spider's bug")
        except ValueError:
            failure = Failure()
        crawler.signals.send_catch_log(
            signals.spider_error, failure=failure, response=response,
            spider=crawler.spider,
        )  # fmt: skip
        while not handed:
            assert time.monotonic() < deadline, crawler.stats.get_stats()  # type: ignore[union-attr]
            await asyncio.sleep(0.02)
        await scheduler.close_async("finished")

    asyncio.run(main())
    (letter,) = handed
    assert (letter.url, letter.reason, letter.status) == (
        "http://a.test/broken", "unparseable", 200,
    )  # fmt: skip
