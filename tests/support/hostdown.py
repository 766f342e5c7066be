"""A host failing in Redis: its record's failure streak set on Redis's
clock, and a few requests queued and delayed for it and for a host that is
up."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy import Spider
from scrapy.statscollectors import MemoryStatsCollector

from extensions.core.frontier.frontier import Frontier, QueuedRequest
from extensions.keys import FrontierKeys
from tests.utils import get_crawler, run_redis

if TYPE_CHECKING:
    import redis
    import redis.asyncio as aredis

DOWN = "http://down.test:80"
OTHER = "http://up.test:80"
K = FrontierKeys("web")


def failing_for(client: redis.Redis, hostkey: str, ms: int, fails: int = 5) -> None:
    """``hostkey`` has failed ``fails`` times in a row since ``ms`` ago."""
    sec, usec = client.time()
    now = int(sec) * 1000 + int(usec) // 1000
    client.hset(K.host(hostkey), mapping={"fails": fails, "failing_since": now - ms})


def queue_some(redis_url: str) -> None:
    """Two requests queued and one delayed for DOWN, one of each for OTHER."""

    async def body(client: aredis.Redis) -> None:
        frontier = Frontier(client, "web")
        await frontier.commit(
            [
                QueuedRequest(DOWN, 5, b"http://down.test/a"),
                QueuedRequest(DOWN, -2, b'http://down.test/b\n{"m":{"depth":1}}'),
                QueuedRequest(DOWN, 0, b"http://down.test/retry", delay_ms=60_000),
                QueuedRequest(OTHER, 0, b"http://up.test/x"),
                QueuedRequest(OTHER, 0, b"http://up.test/later", delay_ms=60_000),
            ]
        )

    run_redis(redis_url, body)


def middleware_crawler(redis_url: str, **settings: Any) -> Any:
    """A crawler with an open spider and stats, for downloader middlewares."""
    crawler = get_crawler(Spider, settings_dict={"REDIS_URL": redis_url, **settings})
    crawler.spider = Spider("web")
    crawler.stats = MemoryStatsCollector(crawler)
    return crawler
