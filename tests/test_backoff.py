"""Back-off on 429/503 (Retry-After in both forms) and the circuit breaker."""

from __future__ import annotations

import asyncio
import itertools
import time
from email.utils import formatdate
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import Spider
from scrapy.exceptions import DownloadConnectionRefusedError, NotConfigured
from scrapy.http import HtmlResponse, Request
from scrapy.statscollectors import MemoryStatsCollector

from extensions import keys, meta
from extensions.downloadermiddlewares.backoff import BackoffMiddleware
from tests.httpserver import LogServer, Reply, Route, crawl, reply
from tests.utils import get_crawler

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import redis

HOST = "http://a.test:80"
RECORD = keys.FrontierKeys("web").host(HOST)


def _mw(redis_url: str, **settings: Any) -> BackoffMiddleware:
    crawler = get_crawler(Spider, settings_dict={"REDIS_URL": redis_url, **settings})
    crawler.spider = Spider("web")
    crawler.stats = MemoryStatsCollector(crawler)
    return BackoffMiddleware.from_crawler(crawler)


def _now(client: redis.Redis) -> int:
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


@pytest.mark.parametrize(
    "settings",
    [{"BACKOFF_ENABLED": False}, {"BACKOFF_INITIAL": 0}, {"BREAKER_THRESHOLD": 0}],
)
def test_not_configured(settings: dict[str, Any]) -> None:
    with pytest.raises(NotConfigured):
        BackoffMiddleware.from_crawler(get_crawler(settings_dict=settings))


def test_escalation_doubles_caps_and_is_forgiven(
    redis_url: str, redis_client: redis.Redis
) -> None:
    mw = _mw(redis_url, BACKOFF_INITIAL=0.1, BACKOFF_MAX=0.35, BACKOFF_JITTER=0)
    req = Request("http://a.test/x")

    async def hit(status: int = 429) -> None:
        await mw.process_response(req, HtmlResponse(req.url, status=status))

    async def main() -> list[int]:
        seen = []
        await hit()
        seen.append(int(redis_client.hget(RECORD, "backoff") or 0))
        await hit(503)  # inside the window: the same burst, no doubling
        seen.append(int(redis_client.hget(RECORD, "backoff") or 0))
        for _ in range(3):
            await asyncio.sleep(seen[-1] / 1000 + 0.01)
            await hit()
            seen.append(int(redis_client.hget(RECORD, "backoff") or 0))
        await mw.records.client.aclose()
        return seen

    assert asyncio.run(main()) == [100, 100, 200, 350, 350]
    park = int(redis_client.hget(RECORD, "park") or 0)
    assert _now(redis_client) < park <= _now(redis_client) + 350
    assert mw.crawler.stats.get_value("backoff/raised") == 4
    # After the quiet period the back-off is forgiven: the next raise restarts.
    redis_client.hset(RECORD, "backoff_at", _now(redis_client) - 1_900_000)
    mw2 = _mw(redis_url, BACKOFF_INITIAL=0.1, BACKOFF_JITTER=0)

    async def again() -> None:
        await mw2.process_response(req, HtmlResponse(req.url, status=429))
        await mw2.records.client.aclose()

    asyncio.run(again())
    assert redis_client.hget(RECORD, "backoff") == b"100"


def test_breaker_opens_parks_and_closes(
    redis_url: str, redis_client: redis.Redis
) -> None:
    mw = _mw(redis_url, BREAKER_THRESHOLD=3, BREAKER_COOLDOWN=60)
    req = Request("http://a.test/x")
    exc = DownloadConnectionRefusedError("refused")

    async def main() -> None:
        for _ in range(2):
            await mw.process_exception(req, exc)
        assert not redis_client.hget(RECORD, "park")
        await mw.process_exception(req, exc)  # the third: opens
        await mw.process_exception(req, exc)  # already open: no reopen
        # Not a connection failure: does not count.
        await mw.process_exception(req, ValueError("x"))
        assert redis_client.hget(RECORD, "fails") == b"4"
        # The probe after the cool-down answers (the lock put fails in meta).
        probe = Request("http://a.test/y", meta={meta.POLITENESS_LOCK: {"fails": 4}})
        await mw.process_response(probe, HtmlResponse(probe.url, status=200))
        await mw.records.client.aclose()

    asyncio.run(main())
    stats = mw.crawler.stats
    assert stats is not None
    assert stats.get_value("backoff/breaker_opened") == 1
    assert stats.get_value("backoff/breaker_closed") == 1
    assert stats.get_value("backoff/connection_failures") == 4
    park = int(redis_client.hget(RECORD, "park") or 0)
    assert 50_000 < park - _now(redis_client) <= 60_000
    assert redis_client.hmget(RECORD, "fails", "breaker") == [None, None]


def test_failures_apart_do_not_add_up_without_the_lock_middleware(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Politeness off: no lock reports the record's failures, so the worker
    that counted one closes the run at the host's next success (before, two
    failures a thousand pages apart counted as two in a row)."""
    mw = _mw(redis_url, BREAKER_THRESHOLD=2, BREAKER_COOLDOWN=60)
    req = Request("http://a.test/x")
    exc = DownloadConnectionRefusedError("refused")

    async def main() -> list[Any]:
        await mw.process_exception(req, exc)
        seen = [redis_client.hget(RECORD, "fails")]
        await mw.process_response(req, HtmlResponse(req.url, status=200))
        seen.append(redis_client.hget(RECORD, "fails"))
        await mw.process_exception(req, exc)  # one in a row again, not two
        seen.append(redis_client.hmget(RECORD, "fails", "park"))
        await mw.records.client.aclose()
        return seen

    assert asyncio.run(main()) == [b"1", None, [b"1", None]]
    stats = mw.crawler.stats
    assert stats is not None and stats.get_value("backoff/breaker_opened") is None


def test_breaker_reopens_for_longer(redis_url: str, redis_client: redis.Redis) -> None:
    mw = _mw(redis_url, BREAKER_THRESHOLD=1, BREAKER_COOLDOWN=10)
    req = Request("http://a.test/x")

    async def main() -> None:
        await mw.process_exception(req, TimeoutError())
        redis_client.hset(RECORD, "park", 1)  # the cool-down has passed
        await mw.process_exception(req, TimeoutError())  # the probe fails
        await mw.records.client.aclose()

    asyncio.run(main())
    park = int(redis_client.hget(RECORD, "park") or 0)
    assert 15_000 < park - _now(redis_client) <= 20_000
    assert mw.crawler.stats.get_value("backoff/breaker_opened") == 2


# -- Retry-After through a real crawl ------------------------------------------


def retry_after_once(value: Callable[[], str]) -> Route:
    """429 with ``Retry-After: value()`` the first time, then 200."""
    calls = itertools.count()

    def route() -> Reply:
        if next(calls) == 0:
            return 429, {"Retry-After": value()}, b"ok"
        return 200, {}, b"ok"

    return route


@pytest.mark.slow
@pytest.mark.parametrize("form", ["seconds", "http-date"])
def test_retry_after_parks_the_host(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, form: str
) -> None:
    def header() -> str:
        if form == "seconds":
            return "2"
        return formatdate(time.time() + 3, usegmt=True)  # whole seconds: 2..3 s

    routes = {"/robots.txt": reply(b"ok", 404), "/page": retry_after_once(header)}
    with LogServer(routes) as server:
        stats = crawl(tmp_path, redis_url, [server.url + "/page"])
    pages = [(hit.at, hit.status) for hit in server.log if hit.path == "/page"]
    assert [status for _, status in pages] == [429, 200]
    # The retry waited out the Retry-After (the park), not the 60 s back-off.
    assert 1.9 <= pages[1][0] - pages[0][0] < 10
    assert stats["backoff/retry_after"] == 1
    assert stats["politeness/lock_waits"] >= 1
    assert not redis_client.hget(keys.FrontierKeys("web").host(server.url), "backoff")
