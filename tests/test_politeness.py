"""The fleet-wide per-host lock: the Redis scripts, the middleware, and real
crawls of two workers against one loopback web server."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio as aredis
from scrapy import Spider
from scrapy.exceptions import NotConfigured
from scrapy.http import Request
from scrapy.statscollectors import MemoryStatsCollector

from extensions import keys
from extensions.hosts import HostRecord, host_key
from extensions.politeness import (
    ACQUIRED,
    HELD,
    PARKED,
    HostLock,
    PolitenessMiddleware,
)
from tests.httpserver import Crawl, LogServer, reply
from tests.utils import get_crawler

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

HOST = "http://a.test:80"


# -- the lock scripts on a real Redis ----------------------------------------


async def _lock(redis_url: str) -> tuple[aredis.Redis, HostLock]:
    client = aredis.Redis.from_url(redis_url)
    return client, HostLock(client, "web", quiet_ms=1_800_000)


def test_px_granularity_150ms(redis_url: str, redis_client: redis.Redis) -> None:
    async def main() -> None:
        client, lock = await _lock(redis_url)
        assert (await lock.acquire(HOST, HOST, "t1", 150))[:2] == (ACQUIRED, 150)
        pttl = redis_client.pttl(keys.host_lock("web", HOST))
        assert 100 < pttl <= 150
        code, ms, _ = await lock.acquire(HOST, HOST, "t2", 150)
        assert code == HELD and 0 < ms <= 150
        await asyncio.sleep(ms / 1000 + 0.01)
        assert (await lock.acquire(HOST, HOST, "t2", 150))[0] == ACQUIRED
        await client.aclose()

    asyncio.run(main())


def test_release_and_extend_only_by_owner(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def main() -> None:
        client, lock = await _lock(redis_url)
        assert (await lock.acquire(HOST, HOST, "owner", 10_000))[0] == ACQUIRED
        assert not await lock.release(HOST, "intruder")
        assert not await lock.extend(HOST, "intruder", 50_000)
        assert redis_client.get(keys.host_lock("web", HOST)) == b"owner"
        assert await lock.extend(HOST, "owner", 50_000)
        assert redis_client.pttl(keys.host_lock("web", HOST)) > 10_000
        assert await lock.release(HOST, "owner")
        assert redis_client.exists(keys.host_lock("web", HOST)) == 0
        await client.aclose()

    asyncio.run(main())


def test_spacing_comes_from_the_host_record(
    redis_url: str, redis_client: redis.Redis
) -> None:
    record = keys.FrontierKeys("web").host(HOST)
    lock_key = keys.host_lock("web", HOST)

    async def main() -> None:
        client, lock = await _lock(redis_url)
        # No delay anywhere: no lock is set.
        assert (await lock.acquire(HOST, HOST, "t", 0))[:2] == (ACQUIRED, 0)
        assert redis_client.exists(lock_key) == 0
        # The robots delay beats the default.
        redis_client.hset(record, "delay", 700)
        assert (await lock.acquire(HOST, HOST, "t", 100))[:2] == (ACQUIRED, 700)
        redis_client.delete(lock_key)
        # A fresh back-off beats the delay; a forgiven one does not.
        now = int(redis_client.time()[0]) * 1000
        redis_client.hset(record, mapping={"backoff": 5000, "backoff_at": now})
        assert (await lock.acquire(HOST, HOST, "t", 100))[:2] == (ACQUIRED, 5000)
        redis_client.delete(lock_key)
        redis_client.hset(record, "backoff_at", now - 1_900_000)
        assert (await lock.acquire(HOST, HOST, "t", 100))[:2] == (ACQUIRED, 700)
        redis_client.delete(lock_key)
        # A park wins over everything and sets no lock.
        redis_client.hset(record, mapping={"park": now + 60_000, "fails": 3})
        code, ms, fails = await lock.acquire(HOST, HOST, "t", 100)
        assert code == PARKED and 50_000 < ms <= 61_000 and fails == 3
        assert redis_client.exists(lock_key) == 0
        await client.aclose()

    asyncio.run(main())
    assert HostRecord(delay=700).spacing(100, 0, 1) == 700


def test_concurrent_acquirers_never_start_within_the_delay(redis_url: str) -> None:
    """Six clients (own connections) race for one host's 150 ms lock, each
    waiting out the PTTL it is told; no two acquisitions are closer than the
    delay, and the lock is not left idle much either."""
    delay = 150
    acquired: list[float] = []

    async def worker(lock: HostLock, n: int) -> None:
        token = f"w{n}"
        for _ in range(3):
            while True:
                code, ms, _ = await lock.acquire(HOST, HOST, token, delay)
                if code == ACQUIRED:
                    acquired.append(time.monotonic())
                    break
                await asyncio.sleep(ms / 1000)

    async def main() -> None:
        clients = [aredis.Redis.from_url(redis_url) for _ in range(6)]
        locks = [HostLock(c, "web", 1_800_000) for c in clients]
        await asyncio.gather(*(worker(lock, n) for n, lock in enumerate(locks)))
        for c in clients:
            await c.aclose()

    asyncio.run(main())
    acquired.sort()
    gaps = [b - a for a, b in itertools.pairwise(acquired)]
    assert len(acquired) == 18
    # A few ms of slack for the client-side clock of the replies.
    assert min(gaps) >= (delay - 5) / 1000, gaps
    assert sum(gaps) / len(gaps) < 2 * delay / 1000, gaps


# -- the middleware ------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({"POLITENESS_ENABLED": False}, "POLITENESS_ENABLED"),
        ({"POLITENESS_KEY": "port"}, "POLITENESS_KEY"),
    ],
)
def test_not_configured(settings: dict[str, Any], reason: str) -> None:
    with pytest.raises(NotConfigured, match=reason):
        PolitenessMiddleware.from_crawler(get_crawler(settings_dict=settings))


def _middleware(redis_url: str, **settings: Any) -> PolitenessMiddleware:
    crawler = get_crawler(Spider, settings_dict={"REDIS_URL": redis_url, **settings})
    crawler.spider = Spider("web")
    crawler.stats = MemoryStatsCollector(crawler)
    return PolitenessMiddleware.from_crawler(crawler)


@pytest.mark.parametrize(
    ("mode", "url", "expected"),
    [
        ("host", "https://www.Example.co.uk/a", "https://www.example.co.uk:443"),
        ("domain", "https://www.example.co.uk/a", "example.co.uk"),
        ("domain", "http://127.0.0.1:8080/", "127.0.0.1"),
        ("ip", "http://localhost:8080/", "127.0.0.1"),
    ],
)
def test_lock_id_modes(redis_url: str, mode: str, url: str, expected: str) -> None:
    mw = _middleware(redis_url, POLITENESS_KEY=mode)
    request = Request(url)
    assert asyncio.run(mw.lock_id(request, host_key(request))) == expected


def test_middleware_waits_and_counts(redis_url: str) -> None:
    mw = _middleware(redis_url, DOWNLOAD_DELAY=0.15)

    async def main() -> list[float]:
        started = []
        for n in range(3):
            request = Request(f"http://a.test/{n}")
            assert await mw.process_request(request) is None
            started.append(time.monotonic())
            assert request.meta["politeness_lock"]["spacing_ms"] == 150
            # The fetch completes: the lock now lasts one spacing from here.
            assert await mw.process_response(request, "response") == "response"
        await mw.lock.client.aclose()
        return started

    started = asyncio.run(main())
    assert started[2] - started[0] >= 0.29
    stats = mw.crawler.stats
    assert stats is not None
    assert stats.get_value("politeness/lock_acquired") == 3
    assert stats.get_value("politeness/lock_waits") >= 2
    assert stats.get_value("politeness/lock_wait_ms") >= 250


def test_middleware_defers_a_parked_host(
    redis_url: str, redis_client: redis.Redis
) -> None:
    mw = _middleware(redis_url, POLITENESS_MAX_WAIT=1.0)
    now = int(redis_client.time()[0]) * 1000
    redis_client.hset(keys.FrontierKeys("web").host(HOST), "park", now + 60_000)

    async def main() -> Any:
        result = await mw.process_request(Request("http://a.test/x"))
        await mw.lock.client.aclose()
        return result

    result = asyncio.run(main())
    assert isinstance(result, Request)
    assert result.dont_filter and result.meta["politeness_deferrals"] == 1
    assert mw.crawler.stats.get_value("politeness/deferred/parked") == 1


# -- real crawls ---------------------------------------------------------------


@pytest.fixture
def site() -> Iterator[LogServer]:
    robots = reply(b"User-agent: *\nDisallow: /private\n")
    html = reply(b"<html>ok</html>")
    with LogServer({"/robots.txt": robots}, default=html) as server:
        yield server


@pytest.mark.slow
def test_two_workers_share_the_delay_and_robots(
    tmp_path: Path, redis_url: str, site: LogServer
) -> None:
    """Two crawler processes fetch one host: downloads start >= DOWNLOAD_DELAY
    apart across both, robots.txt is fetched once, /private never."""
    urls = [f"{site.url}/page/{n}" for n in range(6)] + [f"{site.url}/private/1"]
    crawls = [
        Crawl(tmp_path, redis_url, urls, f"w{n}", DOWNLOAD_DELAY=0.2) for n in range(2)
    ]
    stats = [c.finish() for c in crawls]
    starts = sorted(site.times("/"))
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(site.times("/page/")) == 12
    assert site.times("/private") == []
    assert len(site.times("/robots.txt")) == 1
    assert min(gaps) >= 0.19, gaps
    assert sum(s.get("robotstxt/forbidden", 0) for s in stats) == 2
    assert sum(s.get("politeness/lock_waits", 0) for s in stats) > 0
