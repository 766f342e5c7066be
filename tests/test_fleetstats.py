"""Fleet statistics and the frontier's operator calls against a real Redis."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
import redis.asyncio as aredis
from scrapy import Request, Spider
from scrapy.exceptions import NotConfigured

from extensions.connection.scripts import script
from extensions.core.frontier.frontier import Frontier, QueuedRequest, Worker
from extensions.core.frontier.serialization import request_to_bytes
from extensions.extensions import fleetstats
from extensions.extensions.fleetstats import BUCKETS, FleetStats, fleet_view
from extensions.keys import StatsKeys
from tests.utils import get_crawler

if TYPE_CHECKING:
    import redis


def q(url: str, host: str) -> QueuedRequest:
    return QueuedRequest(host, 0, request_to_bytes(Request(url)))


def worker(redis_url: str, name: str) -> FleetStats:
    crawler = get_crawler(Spider, {"REDIS_URL": redis_url, "LOGSTATS_INTERVAL": 3600})
    crawler.stats.open_spider()  # type: ignore[union-attr]
    ext = FleetStats.from_crawler(crawler)
    ext.spider_opened(Spider(name="web"))
    ext.worker = name  # as two workers of one fleet
    return ext


def test_not_configured_at_zero_interval() -> None:
    with pytest.raises(NotConfigured):
        FleetStats.from_crawler(get_crawler(Spider, {"STATS_FOLD_INTERVAL": 0}))


def test_one_script_call_per_fold_and_the_fleet_adds_up(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def body() -> None:
        a, b = worker(redis_url, "wa"), worker(redis_url, "wb")
        for ext, pages in ((a, 7), (b, 5)):
            stats: Any = ext.crawler.stats
            stats.inc_value("response_received_count", pages)
            stats.inc_value("downloader/response_status_count/200", pages - 1)
            stats.inc_value("downloader/response_status_count/503", 1)
            await ext.fold()
        redis_client.config_resetstat()
        stats = a.crawler.stats
        stats.inc_value("response_received_count", 3)
        stats.inc_value("downloader/response_status_count/200", 3)
        await a.fold()
        calls = {
            k.removeprefix("cmdstat_"): v["calls"]
            for k, v in redis_client.info("commandstats").items()
        }
        # One call from the worker; the rest ran inside that script (commandstats
        # counts a script's own commands too): 2 counters x 3 hashes.
        assert calls.pop("evalsha") == 1 and calls.pop("config") == 1
        assert calls == {"time": 1, "hincrby": 6, "expire": 1, "hset": 1, "pexpire": 1}

        # Liveness is the frontier's heartbeat; stats join it.
        client = aredis.Redis.from_url(redis_url)
        sec, usec = await client.time()
        now = sec * 1000 + usec // 1000
        await client.zadd(Frontier(client, "web").keys.workers, {"wa": now, "wb": now})
        view = await fleet_view(client, "web", 60_000)
        await client.aclose()
        assert view.totals == {
            "pages": 15,
            "status_2xx": 13,
            "status_5xx": 2,
        }
        by_id = {w["id"]: w for w in view.workers}
        assert by_id["wa"]["pages"] == 10 and by_id["wb"]["pages"] == 5
        assert by_id["wa"]["machine"] and by_id["wa"]["pid"] > 0
        # All 15 pages fell in the last minute: the 1-minute rate counts
        # them whole or nearly (a minute boundary may split them).
        assert 0 < view.rates["pages"]["1m"] <= 15 / 60
        assert view.rates["pages"]["15m"] * 15 == pytest.approx(
            view.rates["pages"]["1m"], rel=0.01
        )
        for ext in (a, b):
            ext._stop.set()
            await ext._task  # type: ignore[misc]

    asyncio.run(body())
    keys = StatsKeys("web")
    assert 0 < redis_client.pttl(keys.worker("wa")) <= 120_000
    (bucket,) = redis_client.keys(keys.minute_prefix + "*")
    assert BUCKETS * 60 < redis_client.ttl(bucket) <= BUCKETS * 60 + 60


def test_paused_fleet_leases_nothing_until_resumed(redis_url: str) -> None:
    async def body() -> None:
        client = aredis.Redis.from_url(redis_url)
        f = Frontier(client, "web", Worker("w1", 60_000))
        await f.commit([q("http://a.test/1", "http://a.test:80")])
        assert await f.pause() is True
        assert await f.pause() is False  # already paused
        got = await f.lease(10)
        assert got.leases == [] and got.paused
        view = await f.overview()
        assert view.paused and view.queued == 1 and view.leased == 0
        assert await f.resume() is True
        got = await f.lease(10)
        assert len(got.leases) == 1 and not got.paused
        await client.aclose()

    asyncio.run(body())


def test_overview_counts_hosts_by_state(redis_url: str) -> None:
    async def body() -> None:
        client = aredis.Redis.from_url(redis_url)
        f = Frontier(client, "web", Worker("w1", 60_000, default_delay_ms=60_000))
        hosts = ["http://a.test:80", "http://b.test:80", "http://c.test:80"]
        sizes = {hosts[0]: 2, hosts[1]: 1, hosts[2]: 3}
        await f.commit([q(f"{h}/{i}", h) for h, n in sizes.items() for i in range(n)])
        # a: leased now, so it waits out the delay; c: parked by its breaker.
        await f.lease(1)
        sec, _ = await client.time()
        await client.hset(f.keys.host("http://c.test:80"), "park", (sec + 60) * 1000)
        await client.rpush(f.keys.poison, '{"reason": "test"}')
        view = await f.overview()
        await client.aclose()
        assert view.queued == 5 and view.leased == 1 and view.poisoned == 1
        assert (view.hosts_ready, view.hosts_waiting, view.hosts_parked) == (1, 1, 1)
        assert view.top_hosts == [(hosts[2], 3), (hosts[0], 1), (hosts[1], 1)]
        assert view.next_lease_expiry is not None
        assert view.next_lease_expiry[0].startswith("w1:")

    asyncio.run(body())


def test_fold_script_writes_only_the_keys_it_is_given(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script touches only its KEYS (a cluster routes by them): the minute
    bucket is named by the caller, not built inside the script."""
    given: set[str] = set()

    def recording(client: Any, source: str) -> Any:
        registered = script(client, source)

        async def call(keys: list[str], args: list[Any]) -> Any:
            given.update(keys)
            return await registered(keys=keys, args=args)

        return call

    monkeypatch.setattr(fleetstats, "script", recording)

    async def body() -> None:
        ext = worker(redis_url, "wa")
        stats: Any = ext.crawler.stats
        for _ in range(2):
            stats.inc_value("response_received_count", 2)
            await ext.fold()
        ext._stop.set()
        await ext._task  # type: ignore[misc]

    asyncio.run(body())
    written = {
        k.decode() if isinstance(k, bytes) else k
        for k in redis_client.keys("web:stats:*")
    }
    assert any(":m:" in k for k in written)
    assert written <= given


def test_no_seeds_is_said_only_when_the_seed_list_is_empty(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that has not taken the seeds pushed for its spider yet (any
    spider, here ``shop``) must not say the list is empty (issue 23)."""
    redis_client.lpush("shop:start_urls", *(f"http://a.test/{i}" for i in range(24)))

    async def body() -> None:
        crawler = get_crawler(Spider, {"REDIS_URL": redis_url})
        crawler.stats.open_spider()  # type: ignore[union-attr]
        ext = FleetStats.from_crawler(crawler)
        ext.spider_opened(Spider(name="shop"))
        await ext.fold()
        assert "No seeds" not in caplog.text
        redis_client.delete("shop:start_urls")
        await ext.fold()
        assert "No seeds: shop:start_urls is empty" in caplog.text

    asyncio.run(body())
