"""Scheduler contract tests, after Scrapy's tests/test_scheduler.py: the same
tests on every configuration, against a real redis-server, plus re-open
checks that prove persistence.

The scheduler's Redis work runs in an asyncio task, so the tests drive it in
an asyncio loop and wait for that task to settle (no Twisted reactor needed).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
import redis.asyncio as aredis
from scrapy import Request, signals
from scrapy.http import Response

from extensions.connection.embedded import RedisProcess
from extensions.core.frontier.frontier import Frontier, QueuedRequest, Worker
from extensions.core.frontier.serialization import request_to_bytes
from extensions.core.scheduler import RedisScheduler, buffer
from extensions.core.scheduler.outbox import OUTBOX_BATCH
from extensions.dupefilters import BloomDupeFilter
from extensions.meta import FRONTIER_LEASE
from extensions.signals import item_held, items_stored
from extensions.utils.hosts import host_key
from pipelines.items import PageItem
from tests.support.scheduler import (
    drain,
    make_crawler,
    opened,
    pushed,
    run,
    wait_for,
)

if TYPE_CHECKING:
    from pathlib import Path


CONFIGS = [
    pytest.param({"FRONTIER_BATCH_SIZE": 1, "FRONTIER_BUFFER_SIZE": 2}, id="batch1"),
    pytest.param({"FRONTIER_BATCH_SIZE": 32}, id="batch32"),
    pytest.param(
        {"FRONTIER_BATCH_SIZE": 8, "FRONTIER_PRIORITY_FUNCTION": ""}, id="raw-priority"
    ),
]


@pytest.mark.parametrize("config", CONFIGS)
def test_priority_order_and_fifo(redis_url: str, config: dict[str, Any]) -> None:
    async def body() -> None:
        s = await opened(make_crawler(redis_url, **config))
        for i, prio in enumerate([0, 5, 0, 5, -1]):
            assert s.enqueue_request(Request(f"http://a.test/{i}", priority=prio))
        got = await drain(s, 5)
        assert [r.url for r in got] == [f"http://a.test/{i}" for i in (1, 3, 0, 2, 4)]
        assert s.next_request() is None
        await s.close_async("finished")

    run(body)


@pytest.mark.parametrize("config", CONFIGS)
def test_pending_until_outcome_is_durable(
    redis_url: str, config: dict[str, Any]
) -> None:
    async def body() -> None:
        crawler = make_crawler(redis_url, **config)
        s = await opened(crawler)
        assert not s.has_pending_requests()
        s.enqueue_request(Request("http://a.test/1"))
        assert s.has_pending_requests()
        (request,) = await drain(s, 1)
        lease = request.meta[FRONTIER_LEASE]
        # In the engine's hands: the engine counts it, not the scheduler.
        await wait_for(lambda: not s.has_pending_requests())
        # Its response processed, with an item a pipeline holds (as the
        # leases middleware and the storage pipeline report it): the crawl
        # is not finished until the item is durable.
        item = PageItem(url=request.url, final_url=request.url, status=200,
                        fingerprint="00", lease=lease)  # fmt: skip
        s.leases.yielded(lease, item)
        s.leases.output_ended(lease)
        crawler.signals.send_catch_log(item_held, item=item)
        response = Response(request.url, request=request)
        crawler.signals.send_catch_log(signals.item_scraped, item={}, response=response)
        await asyncio.sleep(0.3)
        assert s.has_pending_requests()
        assert crawler.stats is not None
        assert not crawler.stats.get_value("scheduler/acked")
        crawler.signals.send_catch_log(items_stored, items=[item])
        await wait_for(lambda: not s.has_pending_requests())
        assert crawler.stats is not None
        assert crawler.stats.get_value("scheduler/acked") == 1
        await s.close_async("finished")

    run(body)


@pytest.mark.parametrize("config", CONFIGS)
def test_duplicates_filtered_unless_dont_filter(
    redis_url: str, config: dict[str, Any]
) -> None:
    async def body() -> None:
        crawler = make_crawler(redis_url, **config)
        s = await opened(crawler)
        for url in ["http://a.test/x", "http://A.TEST:80/x#frag", "http://a.test/y"]:
            s.enqueue_request(Request(url))
        s.enqueue_request(Request("http://a.test/x", dont_filter=True))
        got = await drain(s, 3)
        await asyncio.sleep(0.2)
        assert s.next_request() is None
        assert sorted(r.url for r in got) == [
            "http://a.test/x",
            "http://a.test/x",
            "http://a.test/y",
        ]
        assert crawler.stats is not None
        assert crawler.stats.get_value("dupefilter/filtered") == 1
        await s.close_async("finished")

    run(body)


@pytest.mark.parametrize("config", CONFIGS)
def test_reopen_keeps_queue_when_persisting(
    redis_url: str, config: dict[str, Any]
) -> None:
    async def body() -> None:
        s = await opened(make_crawler(redis_url, **config))
        for i in range(5):
            s.enqueue_request(Request(f"http://a.test/{i}"))
        # Two leased and buffered but never started: handed back on close.
        await drain(s, 0)
        await s.close_async("shutdown")
        s2 = await opened(make_crawler(redis_url, **config))
        got = await drain(s2, 5)
        assert sorted(r.url for r in got) == [f"http://a.test/{i}" for i in range(5)]
        await s2.close_async("finished")

    run(body)


def test_no_persist_flushes_on_close(redis_url: str) -> None:
    async def body() -> None:
        s = await opened(make_crawler(redis_url, SCHEDULER_PERSIST=False))
        s.enqueue_request(Request("http://a.test/1"))
        await pushed(s)
        await s.close_async("finished")
        s2 = await opened(make_crawler(redis_url))
        await asyncio.sleep(0.3)
        assert s2.next_request() is None
        assert not s2.has_pending_requests()
        # The dupefilter was flushed too: the URL is new again.
        s2.enqueue_request(Request("http://a.test/1"))
        assert len(await drain(s2, 1)) == 1
        await s2.close_async("finished")

    run(body)


def test_flush_on_start(redis_url: str) -> None:
    async def body() -> None:
        s = await opened(make_crawler(redis_url))
        s.enqueue_request(Request("http://a.test/1"))
        await pushed(s)
        await s.close_async("shutdown")
        s2 = await opened(make_crawler(redis_url, SCHEDULER_FLUSH_ON_START=True))
        await asyncio.sleep(0.3)
        assert s2.next_request() is None
        await s2.close_async("finished")

    run(body)


def test_redirect_hands_over_its_lease(redis_url: str) -> None:
    async def body() -> None:
        crawler = make_crawler(redis_url)
        s = await opened(crawler)
        s.enqueue_request(Request("http://a.test/old"))
        (parent,) = await drain(s, 1)
        child = parent.replace(url="http://a.test/new")  # meta (lease) copied
        s.enqueue_request(child)
        (got,) = await drain(s, 1)
        assert got.url == child.url
        assert got.meta[FRONTIER_LEASE] != parent.meta[FRONTIER_LEASE]
        stats = crawler.stats
        assert stats is not None

        def acked() -> bool:
            return bool(stats.get_value("scheduler/acked") == 1)

        await wait_for(acked)
        await s.close_async("finished")

    run(body)


def test_repeated_link_is_dropped_without_redis(redis_url: str) -> None:
    # A link whose fingerprint this worker's dupefilter already answered for
    # is refused by enqueue_request itself (the engine then sends
    # request_dropped): no serialization, no write-ahead, no Bloom command.
    async def body() -> None:
        crawler = make_crawler(redis_url)
        s = await opened(crawler)
        assert s.enqueue_request(Request("http://a.test/old"))
        (parent,) = await drain(s, 1)
        stats = crawler.stats
        assert stats is not None
        client = aredis.Redis.from_url(redis_url)

        async def bloom_calls() -> int:
            found = (await client.info("commandstats")).get("cmdstat_bitfield")
            return int(found["calls"]) if found else 0

        before = await bloom_calls()
        assert not s.enqueue_request(Request("http://A.TEST/old#again"))
        # A redirect back to a known URL: dropped too, and (as the engine
        # does for a refused request) request_dropped ends the parent's lease.
        child = parent.replace(url="http://a.test/old")
        assert not s.enqueue_request(child)
        crawler.signals.send_catch_log(signals.request_dropped, request=child)
        assert stats.get_value("dupefilter/filtered") == 2
        await wait_for(lambda: stats.get_value("scheduler/acked") == 1)
        assert await bloom_calls() == before
        assert stats.get_value("scheduler/enqueued/redis") == 1
        await client.aclose()
        await s.close_async("finished")

    run(body)


def test_redirect_to_a_non_canonical_url_is_not_taken_for_refused(
    redis_url: str,
) -> None:
    # The engine announces a redirect in request_scheduled, then calls
    # enqueue_request: the announcement must be cleared under the object the
    # engine announced, or the redirect is dead-lettered as refused though it
    # was queued. It comes back as it was made (issue 23), not canonicalized.
    async def body() -> None:
        crawler = make_crawler(redis_url)
        s = await opened(crawler)
        s.enqueue_request(Request("http://a.test/old"))
        (parent,) = await drain(s, 1)
        child = parent.replace(url="http://A.TEST/new#top")  # lease copied
        crawler.signals.send_catch_log(signals.request_scheduled, request=child)
        assert s.enqueue_request(child)
        (got,) = await drain(s, 1)
        assert got.url == child.url == "http://a.test/new#top"
        await asyncio.sleep(0.05)  # past the announcement check
        stats = crawler.stats
        assert stats is not None
        assert stats.get_value("scheduler/refused_on_schedule") is None
        assert stats.get_value("dlq/offsite_redirect") is None
        await s.close_async("finished")

    run(body)


def test_unserializable_request_is_counted_and_kept(redis_url: str) -> None:
    async def body() -> None:
        crawler = make_crawler(redis_url)
        s = await opened(crawler)

        def callback(response: Any) -> None: ...

        # A local function is no spider method: to_dict() cannot name it.
        s.enqueue_request(Request("http://a.test/1", callback=callback))
        (got,) = await drain(s, 1)
        assert got.url == "http://a.test/1"
        assert crawler.stats is not None
        assert crawler.stats.get_value("scheduler/unserializable") == 1
        await s.close_async("finished")

    run(body)


def test_expired_lease_of_dead_worker_is_reclaimed(redis_url: str) -> None:
    async def body() -> None:
        # A worker leases the request and dies: no hand-back, no renewal.
        client = aredis.Redis.from_url(redis_url)
        dead = Frontier(client, "web", Worker("dead", lease_ms=300))
        url = "http://a.test/1"
        await dead.commit(
            [QueuedRequest(host_key(url), 0, request_to_bytes(Request(url)))]
        )
        assert len((await dead.lease(1)).leases) == 1
        await client.aclose()
        alive = await opened(make_crawler(redis_url, FRONTIER_LEASE_TIMEOUT=0.3))
        (got,) = await drain(alive, 1, timeout=5)
        assert got.url == "http://a.test/1"
        await alive.close_async("finished")

    run(body)


def test_waits_out_a_redis_restart(tmp_path: Path) -> None:
    server = RedisProcess(tmp_path / "redis").start()
    try:

        async def body() -> None:
            crawler = make_crawler(server.url, REDIS_RETRY_INITIAL=0.05)
            s = await opened(crawler)
            s.enqueue_request(Request("http://a.test/before"))
            assert len(await drain(s, 1)) == 1
            await asyncio.to_thread(server.stop)
            s.enqueue_request(Request("http://a.test/during"))
            await asyncio.sleep(0.5)
            assert s.has_pending_requests()
            await asyncio.to_thread(server.start, server.port)
            (got,) = await drain(s, 1, timeout=15)
            assert got.url == "http://a.test/during"
            assert crawler.stats is not None
            assert crawler.stats.get_value("scheduler/redis_errors") >= 1
            await s.close_async("finished")

        run(body)
    finally:
        server.stop()


def test_lost_dupefilter_answer_queues_the_batch(redis_url: str) -> None:
    """The dupefilter marked the URLs seen but its answer never arrived (the
    connection dropped): the retry must not drop them as duplicates."""

    async def body() -> None:
        crawler = make_crawler(redis_url, REDIS_RETRY_INITIAL=0.05)
        s = await opened(crawler)
        real = s.dupefilter.requests_seen
        calls = 0

        async def lossy(requests: list[Request]) -> list[bool]:
            nonlocal calls
            calls += 1
            await real(requests)  # the bits are set...
            if calls == 1:  # ...but the answer is lost
                raise ConnectionError("connection dropped")
            return await real(requests)

        s.dupefilter.requests_seen = lossy  # type: ignore[method-assign]
        s.enqueue_request(Request("http://a.test/1"))
        (got,) = await drain(s, 1)
        assert got.url == "http://a.test/1"
        assert crawler.stats is not None
        assert crawler.stats.get_value("scheduler/dedup_uncertain") == 1
        await s.close_async("finished")

    run(body)


def test_requests_come_back_as_they_were_made(redis_url: str) -> None:
    """Issue 23: the URL as given (not its canonical form), the priority,
    download_slot, and every one of identical dont_filter requests."""

    async def body() -> None:
        crawler = make_crawler(redis_url)
        s = await opened(crawler)
        made = [
            Request("http://a.test/p?b=2&a=1&sid=0123456789abcdef", priority=7),
            Request("http://a.test/same", dont_filter=True),
            Request("http://a.test/same", dont_filter=True),
            Request("http://b.test/", meta={"download_slot": "slot-b"}),
        ]
        for request in made:
            assert s.enqueue_request(request)
        got = await drain(s, 4)
        assert sorted(r.url for r in got) == sorted(r.url for r in made)
        by_url = {r.url: r for r in got}
        assert by_url[made[0].url].priority == 7
        assert by_url["http://b.test/"].meta["download_slot"] == "slot-b"
        await s.close_async("finished")

    run(body)


def test_a_resumed_crawl_is_pending_right_after_open(redis_url: str) -> None:
    """Issue 23: a worker resuming a persisted crawl must not look finished
    (and close) in the instant before its first lease, whatever the spider;
    a host waiting out its DOWNLOAD_DELAY is pending too."""

    async def body() -> None:
        first = await opened(make_crawler(redis_url, DOWNLOAD_DELAY=30))
        first.enqueue_request(Request("http://a.test/1"))
        first.enqueue_request(Request("http://a.test/2"))
        await first.close_async("finished")
        crawler = make_crawler(redis_url, DOWNLOAD_DELAY=30)
        s = RedisScheduler.from_crawler(crawler)
        assert crawler.spider is not None
        await s.open_async(crawler.spider)
        assert s.has_pending_requests()  # before any lease round
        assert len(await drain(s, 1)) == 1
        # Its host now waits out 30 s: not due, but pending.
        await asyncio.sleep(0.5)
        assert s.next_request() is None
        assert s.has_pending_requests()
        await s.close_async("finished")

    run(body)


def test_a_pages_ack_waits_for_its_last_link_written_ahead(redis_url: str) -> None:
    """Issue 22: an outbox batch takes OUTBOX_BATCH requests; a page whose
    links fill more than one batch keeps its lease in Redis until the batch
    holding its last link is written ahead (a worker killed between the two
    batches must not have acknowledged a page whose links it never wrote)."""

    async def body() -> None:
        crawler = make_crawler(redis_url)
        s = await opened(crawler)
        s.enqueue_request(Request("http://a.test/page"))
        (page,) = await drain(s, 1)
        lease = page.meta[FRONTIER_LEASE]
        frontier = s.frontier
        assert frontier is not None and crawler.stats is not None
        # The second batch's write-ahead waits, as if the worker died there.
        real = frontier.log_ahead
        calls = 0
        stuck, go_on = asyncio.Event(), asyncio.Event()

        async def log_ahead(*args: Any) -> None:
            nonlocal calls
            calls += 1
            if calls == 2:
                stuck.set()
                await go_on.wait()
            await real(*args)

        frontier.log_ahead = log_ahead  # type: ignore[method-assign]
        links = OUTBOX_BATCH + 100
        for i in range(links):
            assert s.enqueue_request(Request(f"http://b{i % 20}.test/{i}"))
        s.leases.output_ended(lease)  # the page's output ended: its lease too
        await wait_for(stuck.is_set)
        # Redis: the first batch queued, the page's lease still outstanding.
        assert await frontier.queued() == OUTBOX_BATCH
        assert (await frontier.counts())[1] == 1
        assert not crawler.stats.get_value("scheduler/acked")
        go_on.set()
        await pushed(s, 1 + links)
        await wait_for(lambda: crawler.stats.get_value("scheduler/acked") == 1)
        await s.close_async("finished")

    run(body)


def test_a_lease_past_its_maximum_age_lets_the_crawl_close(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22: a lease whose outcome never comes (here an item a pipeline
    holds and never reports stored) is not renewed past MAX_LEASE_AGE, so it
    expires in Redis and its request is fetched again; the worker must
    forget it too, or a finite crawl never closes on that worker."""
    monkeypatch.setattr(buffer, "MAX_LEASE_AGE", 0.0)

    async def body() -> None:
        crawler = make_crawler(redis_url, FRONTIER_LEASE_TIMEOUT=1.0)
        s = await opened(crawler)
        assert s.frontier is not None and crawler.stats is not None
        s.enqueue_request(Request("http://a.test/1"))
        (request,) = await drain(s, 1)
        lease = request.meta[FRONTIER_LEASE]
        item = PageItem(url=request.url, final_url=request.url, status=200,
                        fingerprint="00", lease=lease)  # fmt: skip
        s.leases.yielded(lease, item)
        s.leases.output_ended(lease)
        crawler.signals.send_catch_log(item_held, item=item)  # never stored
        # Not renewed: it expires in Redis and the request comes back.
        (again,) = await drain(s, 1, timeout=30)
        assert again.url == request.url
        s.leases.output_ended(again.meta[FRONTIER_LEASE])  # this time it ends
        await wait_for(lambda: crawler.stats.get_value("scheduler/acked") == 1)
        assert await s.frontier.counts() == (0, 0)  # Redis holds nothing
        await wait_for(lambda: not s.has_pending_requests())
        assert crawler.stats.get_value("scheduler/lease_abandoned") == 1
        await s.close_async("finished")

    run(body)


class FlakyOpenDupeFilter(BloomDupeFilter):
    """Redis goes away once while the worker opens its dupefilter."""

    fails = 1

    async def open_async(self, prefix: str | None = None) -> None:
        if FlakyOpenDupeFilter.fails:
            FlakyOpenDupeFilter.fails -= 1
            raise aredis.ConnectionError("Redis went away while the worker opened")
        await super().open_async(prefix)


def test_a_redis_blip_while_the_worker_opens_is_waited_out(redis_url: str) -> None:
    """The dupefilter's open talks to Redis (the Bloom filter's metadata): a
    transient error there is waited out with the scheduler's back-off, as at
    every other step of the open. It ended the worker with status 1 (a
    second worker of a fleet opening as Redis restarted)."""

    async def body() -> None:
        crawler = make_crawler(
            redis_url, DUPEFILTER_CLASS=f"{__name__}.FlakyOpenDupeFilter"
        )
        s = RedisScheduler.from_crawler(crawler)
        assert crawler.spider is not None
        await s.open_async(crawler.spider)
        try:
            assert FlakyOpenDupeFilter.fails == 0
            assert crawler.stats is not None
            assert crawler.stats.get_value("scheduler/redis_errors") == 1
        finally:
            await s.close_async("finished")

    run(body)
