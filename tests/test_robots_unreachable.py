"""Requests of a host whose robots.txt stays unreachable wait in Redis (RFC
9309: disallow while unreachable), never dropped; a 503 on robots.txt does
not raise the pages' back-off; a host whose name does not resolve fails its
pages with the DNS error, for the failure policy to give them up."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import Spider
from scrapy.exceptions import CannotResolveHostError
from scrapy.http import HtmlResponse, Request
from scrapy.statscollectors import MemoryStatsCollector

from extensions import keys
from extensions.downloadermiddlewares import POLITENESS_MIDDLEWARES
from extensions.downloadermiddlewares.backoff import BackoffMiddleware
from extensions.downloadermiddlewares.robotstxt import (
    UNREACHABLE,
    UNRESOLVABLE,
    SharedRobotsTxtMiddleware,
)
from extensions.meta import ROBOTS_FETCH as ROBOTS_FETCH_META
from extensions.utils.failures import HostDown
from tests.httpserver import LogServer, crawl, reply
from tests.utils import get_crawler

if TYPE_CHECKING:
    from pathlib import Path

    import redis

HOST = "http://a.test:80"
RECORD = keys.FrontierKeys("web").host(HOST)


def _crawler(redis_url: str, **settings: Any) -> Any:
    crawler = get_crawler(Spider, settings_dict={"REDIS_URL": redis_url, **settings})
    crawler.spider = Spider("web")
    crawler.stats = MemoryStatsCollector(crawler)
    return crawler


def _cache_robots(client: redis.Redis, status: int, failures: int = 1) -> None:
    sec, _ = client.time()
    client.hset(
        keys.robots("web", HOST),
        mapping={
            "status": status,
            "body": "",
            "expires": (int(sec) + 600) * 1000,
            "failures": failures,
        },
    )


def test_unreachable_robots_defers_however_often_with_the_frontier(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """It was dropped (IgnoreRequest, and the dupefilter never let it back)
    after POLITENESS_MAX_DEFERRALS deferrals, about 7 minutes."""
    _cache_robots(redis_client, 503)
    crawler = _crawler(redis_url, SCHEDULER="extensions.core.scheduler.RedisScheduler")
    mw = SharedRobotsTxtMiddleware.from_crawler(crawler)
    request = Request("http://a.test/page", meta={"politeness_deferrals": 50})

    async def main() -> Any:
        try:
            return await mw.process_request(request)
        finally:
            await mw.cache.client.aclose()

    deferred = asyncio.run(main())
    assert isinstance(deferred, Request) and deferred.dont_filter
    # Not counted against POLITENESS_MAX_DEFERRALS: a robots.txt wait must not
    # use up the bound of the host lock's deferrals.
    assert deferred.meta["politeness_deferrals"] == 50
    assert crawler.stats.get_value("robotstxt/unreachable_dropped") is None


def test_unresolvable_host_fails_its_pages_with_the_dns_error(
    redis_url: str, redis_client: redis.Redis
) -> None:
    _cache_robots(redis_client, UNRESOLVABLE)
    crawler = _crawler(redis_url, SCHEDULER="extensions.core.scheduler.RedisScheduler")
    mw = SharedRobotsTxtMiddleware.from_crawler(crawler)

    async def main() -> None:
        try:
            await mw.process_request(Request("http://a.test/page"))
        finally:
            await mw.cache.client.aclose()

    with pytest.raises(CannotResolveHostError):
        asyncio.run(main())


def test_a_503_on_robots_txt_does_not_raise_the_page_backoff(
    redis_url: str, redis_client: redis.Redis
) -> None:
    mw = BackoffMiddleware.from_crawler(_crawler(redis_url))
    robots = Request("http://a.test/robots.txt", meta={ROBOTS_FETCH_META: True})
    page = Request("http://a.test/page")

    async def main() -> None:
        await mw.process_response(robots, HtmlResponse(robots.url, status=503))
        assert redis_client.hget(RECORD, "backoff") is None
        await mw.process_response(page, HtmlResponse(page.url, status=503))
        assert redis_client.hget(RECORD, "backoff") is not None
        await mw.records.client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize(("failures", "down"), [(1, False), (2, True)])
def test_a_host_without_connection_is_down_after_robots_down_after(
    redis_url: str, redis_client: redis.Redis, failures: int, down: bool
) -> None:
    """Its pages then fail with the connection error (a bounded total by the
    failure table) instead of waiting for ever behind its robots.txt."""
    _cache_robots(redis_client, UNREACHABLE, failures)
    crawler = _crawler(
        redis_url,
        SCHEDULER="extensions.core.scheduler.RedisScheduler",
        ROBOTS_DOWN_AFTER=2,
    )
    mw = SharedRobotsTxtMiddleware.from_crawler(crawler)

    async def main() -> Any:
        try:
            return await mw.process_request(Request("http://a.test/page"))
        finally:
            await mw.cache.client.aclose()

    if down:
        with pytest.raises(HostDown):
            asyncio.run(main())
    else:
        assert isinstance(asyncio.run(main()), Request)


class BrokenRobotsFetch:
    """A downloader middleware with a bug that only robots.txt fetches meet."""

    def process_request(self, request: Request) -> None:
        if request.meta.get(ROBOTS_FETCH_META):
            raise TypeError("a bug in a downloader middleware")


def test_a_bug_on_the_robots_fetch_surfaces(redis_url: str, tmp_path: Path) -> None:
    """A programming error while fetching robots.txt used to be taken for an
    unreachable file (``except Exception``): the host parked and retried for
    ever, the bug hidden. Only download errors mean unreachable now; the bug
    reaches the page request's errback, and no robots.txt is cached."""
    with LogServer({"/page": reply(b"<html></html>")}) as server:
        stats = crawl(
            tmp_path,
            redis_url,
            [server.url + "/page"],
            DOWNLOADER_MIDDLEWARES=json.dumps(
                POLITENESS_MIDDLEWARES | {f"{__name__}.BrokenRobotsFetch": 10}
            ),
            CLOSESPIDER_TIMEOUT=20,
        )
        assert server.count("/page") == 0
    assert "robotstxt/exception_count/TypeError" not in stats
    assert stats.get("downloader/exception_type_count/builtins.TypeError", 0) >= 2
