"""A :class:`~extensions.core.scheduler.RedisScheduler` driven without a
Twisted reactor: its Redis work runs in an asyncio task, so the tests drive it
in an asyncio loop and wait for that task to settle."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider

from extensions.core.scheduler import RedisScheduler
from tests.utils import get_crawler

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from scrapy.crawler import Crawler


class ContractSpider(Spider):
    name = "web"

    def parse(self, response: Any, **kwargs: Any) -> None:  # pragma: no cover
        pass


def make_crawler(redis_url: str, **settings: Any) -> Crawler:
    crawler = get_crawler(
        ContractSpider,
        {
            "REDIS_URL": redis_url,
            "SCHEDULER": "extensions.core.scheduler.RedisScheduler",
            "DUPEFILTER_CLASS": "extensions.dupefilters.BloomDupeFilter",
            "BLOOM_CAPACITY": 100_000,
            "FRONTIER_PRIORITY_FUNCTION": "",
            "FRONTIER_HEARTBEAT_INTERVAL": 0.2,
            **settings,
        },
    )
    crawler.spider = ContractSpider.from_crawler(crawler)
    return crawler


async def opened(crawler: Crawler) -> RedisScheduler:
    scheduler = RedisScheduler.from_crawler(crawler)
    assert crawler.spider is not None
    await scheduler.open_async(crawler.spider)
    return scheduler


async def pushed(scheduler: RedisScheduler, n: int = 1) -> None:
    """Wait until ``n`` requests are queued in Redis (the scheduler's stats)."""
    stats = scheduler.stats
    await wait_for(lambda: (stats.get_value("scheduler/enqueued/redis") or 0) >= n)


async def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


async def drain(
    scheduler: RedisScheduler, n: int, timeout: float = 10.0
) -> list[Request]:
    """Take ``n`` requests, waiting for the background task to lease them."""
    out: list[Request] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        request = scheduler.next_request()
        if request is None:
            await asyncio.sleep(0.01)
        else:
            out.append(request)
    return out


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(body())
