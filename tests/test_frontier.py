"""The frontier's Lua scripts against a real redis-server."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import redis.asyncio as aredis
from scrapy import Request

from extensions.connection.scripts import server_now_ms
from extensions.core.frontier.frontier import (
    Frontier,
    LeaseBatch,
    QueuedRequest,
    Worker,
)
from extensions.core.frontier.serialization import request_to_bytes
from tests.support.frontier import q, urls

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import redis


def run(redis_url: str, body: Callable[[Frontier], Awaitable[None]]) -> None:
    async def main() -> None:
        client = aredis.Redis.from_url(redis_url)
        try:
            await body(Frontier(client, "web"))
        finally:
            await client.aclose()

    asyncio.run(main())


def as_worker(
    f: Frontier, worker: str, delay_ms: int = 0, quiet_ms: int = 1_800_000
) -> Frontier:
    """The frontier ``f`` as worker ``worker`` with 60 s leases."""
    return Frontier(f.client, "web", Worker(worker, 60_000, delay_ms, quiet_ms))


async def lease(
    f: Frontier, count: int, worker: str, delay_ms: int, quiet_ms: int = 1_800_000
) -> LeaseBatch:
    return await as_worker(f, worker, delay_ms, quiet_ms).lease(count)


def test_priority_then_fifo(redis_url: str) -> None:
    async def body(f: Frontier) -> None:
        await f.commit([q("http://a.test/1"), q("http://a.test/2", 5)])
        await f.commit([q("http://a.test/3"), q("http://a.test/4", 5)])
        await f.commit([q("http://a.test/5", -3), q("http://a.test/0")])
        got = await lease(f, 10, "w1", 0)
        assert urls(got.leases) == [
            "http://a.test/2",
            "http://a.test/4",
            "http://a.test/1",
            "http://a.test/3",
            "http://a.test/0",
            "http://a.test/5",
        ]
        assert got.leases_outstanding == 6
        assert got.hosts_ready == 0
        assert got.wait_ms == -1

    run(redis_url, body)


def test_identical_request_is_queued_once(redis_url: str) -> None:
    async def body(f: Frontier) -> None:
        added, _ = await f.commit([q("http://a.test/1"), q("http://a.test/1")])
        assert added == 1

    run(redis_url, body)


def test_host_delay_spaces_leases_and_reports_wait(redis_url: str) -> None:
    async def body(f: Frontier) -> None:
        reqs = [q(f"http://a.test/{i}") for i in range(3)]
        reqs += [q(f"http://b.test/{i}", host="http://b.test:80") for i in range(3)]
        await f.commit(reqs)
        first = await lease(f, 10, "w1", 300)
        # One request per host: each host must wait its delay for the next.
        assert sorted(urls(first.leases)) == ["http://a.test/0", "http://b.test/0"]
        assert 200 < first.wait_ms <= 300
        assert (await lease(f, 10, "w1", 300)).leases == []
        await asyncio.sleep(first.wait_ms / 1000 + 0.02)
        second = await lease(f, 10, "w2", 300)
        assert sorted(urls(second.leases)) == ["http://a.test/1", "http://b.test/1"]

    run(redis_url, body)


def test_host_record_delay_backoff_and_park(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def body(f: Frontier) -> None:
        await f.commit([q(f"http://a.test/{i}") for i in range(4)])
        await f.client.hset(f.keys.host("http://a.test:80"), mapping={"delay": 50})
        # The robots.txt delay beats a shorter DOWNLOAD_DELAY...
        got = await lease(f, 10, "w1", 20)
        assert len(got.leases) == 1 and 20 < got.wait_ms <= 50
        # ... and a longer one beats it (the record keeps the Crawl-delay
        # alone: the larger of the two spaces the host).
        await asyncio.sleep(0.06)
        got = await lease(f, 10, "w1", 10_000)
        assert len(got.leases) == 1 and 9_000 < got.wait_ms <= 10_000
        await f.client.zadd(f.keys.ready, {"http://a.test:80": 0})
        sec, _ = await f.client.time()
        await f.client.hset(
            f.keys.host("http://a.test:80"),
            mapping={"backoff": 5000, "backoff_at": int(sec) * 1000},
        )
        await asyncio.sleep(0.06)
        got = await lease(f, 10, "w1", 0)
        assert len(got.leases) == 1 and 4000 < got.wait_ms <= 5000
        # A back-off raised longer ago than the quiet period is forgiven.
        await f.client.zadd(f.keys.ready, {"http://a.test:80": 0})
        got = await lease(f, 1, "w1", 0, quiet_ms=1)
        assert len(got.leases) == 1 and got.wait_ms <= 50
        # A parked host is rescheduled for its park time, not handed out.
        sec, _ = await f.client.time()
        park = (int(sec) + 100) * 1000
        await f.client.hset(f.keys.host("http://a.test:80"), mapping={"park": park})
        await f.client.zadd(f.keys.ready, {"http://a.test:80": 0})
        got = await lease(f, 10, "w1", 0)
        assert got.leases == [] and got.wait_ms > 90_000

    run(redis_url, body)


def test_ack_release_and_expiry(redis_url: str) -> None:
    async def body(f: Frontier) -> None:
        await f.commit([q(f"http://a.test/{i}") for i in range(4)])
        got = await lease(f, 4, "w1", 0)
        ids = [i for i, _ in got.leases]
        # Acknowledged: gone for good.
        assert await f.commit(acks=ids[:1]) == (0, 1)
        # Released: back in the queue at once, with its place kept.
        assert await f.release(ids[1:2]) == 1
        # Expired: reclaimed by the next lease call of any worker.
        await f.client.zadd(f.keys.leases, {ids[2]: 0}, xx=True)
        again = await lease(f, 10, "w2", 0)
        assert again.reclaimed == 1
        assert urls(again.leases) == ["http://a.test/1", "http://a.test/2"]
        # Extending a reclaimed lease does not resurrect it.
        assert await as_worker(f, "w1").extend([ids[2], ids[3]]) == 1
        assert await f.client.zcard(f.keys.leases) == 3

    run(redis_url, body)


def test_handover_is_atomic_with_the_push(redis_url: str) -> None:
    async def body(f: Frontier) -> None:
        await f.commit([q("http://a.test/old")])
        (lease_id, _member), *_ = (await lease(f, 1, "w1", 0)).leases
        added, acked = await f.commit([q("http://a.test/new")], [lease_id])
        assert (added, acked) == (1, 1)
        assert await f.counts() == (1, 0)

    run(redis_url, body)


def test_queued_request_memory(redis_url: str, redis_client: redis.Redis) -> None:
    """At most 200 bytes of Redis per queued request, as the spider queues
    them (errback, depth), measured with MEMORY USAGE over a large queue."""
    n_hosts, per_host = 20, 1000

    class Spider:
        def on_error(self, failure: object) -> None: ...

    spider = Spider()

    async def body(f: Frontier) -> None:
        for h in range(n_hosts):
            host = f"http://site-{h:03d}.sandbox.test:8080"
            reqs = [
                QueuedRequest(
                    host,
                    95,
                    request_to_bytes(
                        Request(
                            f"{host}/articles/{i % 97}/page-{i}.html",
                            errback=spider.on_error,
                            meta={"depth": 2},
                        ),
                        spider,  # type: ignore[arg-type]
                    ),
                )
                for i in range(per_host)
            ]
            await f.commit(reqs)

    run(redis_url, body)
    total = 0
    for key in redis_client.scan_iter(match="web:*", count=1000):
        total += redis_client.memory_usage(key, samples=0) or 0
    per_request = total / (n_hosts * per_host)
    print(f"Redis bytes per queued request: {per_request:.1f}")
    assert per_request <= 200


def test_write_ahead_of_a_dead_worker_is_queued_again(redis_url: str) -> None:
    async def body(f: Frontier) -> None:
        await f.client.zadd(f.keys.workers, {"dead": 0, "alive": 10**13})
        await f.log_ahead("dead", "e1", [q("http://a.test/1"), q("http://a.test/2")])
        await f.log_ahead("alive", "e2", [q("http://a.test/3")])
        assert await f.recover(dead_after_ms=60_000) == (2, 0, 0)
        got = await lease(f, 10, "w", 0)
        assert urls(got.leases) == ["http://a.test/1", "http://a.test/2"]
        assert await f.client.exists(f.keys.wal("dead")) == 0
        # A committed batch leaves nothing to recover.
        await f.commit([q("http://a.test/3")], wal=("alive", "e2"))
        assert await f.client.hlen(f.keys.wal("alive")) == 0

    run(redis_url, body)


def test_a_delayed_retry_waits_in_redis_until_due(redis_url: str) -> None:
    """A retry replaces its parent's lease in one script and waits in the
    delayed ZSET (not in any worker) until its due time on Redis's clock."""

    async def body(f: Frontier) -> None:
        await f.commit([q("http://a.test/page")])
        (parent, member), *_ = (await lease(f, 1, "w1", 0)).leases
        retry = QueuedRequest("http://a.test:80", 0, member, delay_ms=800)
        assert await f.commit([retry], [parent]) == (1, 1)
        assert await f.client.zcard(f.keys.leases) == 0
        got = await lease(f, 10, "w2", 0)
        assert got.leases == [] and 0 < got.wait_ms <= 800
        # Not due work: a finite crawl may close while it waits.
        assert await f.due() == (0, 0)
        waiting = await f.waiting()
        assert (waiting.urls, waiting.hosts) == (1, 1)
        assert 0 < waiting.next_due_ms - await server_now_ms(f.client) <= 800
        await asyncio.sleep(got.wait_ms / 1000 + 0.05)
        got = await lease(f, 10, "w2", 0)
        assert urls(got.leases) == ["http://a.test/page"]
        assert await f.client.zcard(f.keys.delayed) == 0

    run(redis_url, body)


def test_leases_of_a_silent_worker_come_back_at_once(redis_url: str) -> None:
    """A worker whose heartbeat is older than the silence limit loses its
    leases at the next recover call, long before their lease timeout."""

    async def body(f: Frontier) -> None:
        await f.commit([q("http://a.test/1"), q("http://a.test/2")])
        await as_worker(f, "dead", 0).lease(1)
        await as_worker(f, "alive", 0).lease(1)
        now = await server_now_ms(f.client)
        await f.client.zadd(f.keys.workers, {"dead": now - 31_000, "alive": now})
        assert await f.recover(dead_after_ms=30_000) == (0, 0, 1)
        got = await lease(f, 10, "alive", 0)
        assert urls(got.leases) == ["http://a.test/1"]
        assert await f.client.zcard(f.keys.leases) == 2
        assert await f.client.zscore(f.keys.workers, "dead") is None

    run(redis_url, body)
