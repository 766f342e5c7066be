"""The seed feed's heartbeat (extensions.spidermiddlewares.seeds, any spider): a refusal
by Redis is logged and tried again at the next beat; a bug stops the beat
and surfaces (its task's done callback logs it), rather than being logged
at every beat forever. Against a real redis-server."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from scrapy.crawler import Crawler
from scrapy.settings import Settings

from extensions.keys import seed_takers
from extensions.settings import defaults
from extensions.spidermiddlewares.seeds import SeedFeed
from tests.utils import get_crawler
from webcrawl.spiders.web import ANCHORS_PER_OUTLINK, WebSpider

if TYPE_CHECKING:
    import redis


def _feed(redis_url: str) -> SeedFeed:
    crawler = get_crawler(
        WebSpider, {"REDIS_URL": redis_url, "FRONTIER_HEARTBEAT_INTERVAL": 0.01}
    )
    crawler.spider = WebSpider.from_crawler(crawler)
    return SeedFeed.from_crawler(crawler)


def _beat(feed: SeedFeed) -> BaseException | None:
    """Run the heartbeat for a few dozen beats: what it stopped on, if it
    stopped."""

    async def main() -> BaseException | None:
        task = asyncio.ensure_future(feed._beat())
        await asyncio.sleep(0.3)
        try:
            return task.exception() if task.done() else None
        finally:
            task.cancel()
            await feed.seed_list().client.aclose()

    return asyncio.run(main())


def test_a_redis_refusal_keeps_the_heartbeat_going(
    redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.set(seed_takers("web"), "not a ZSET")  # WRONGTYPE on every beat
    assert _beat(_feed(redis_url)) is None


def test_a_bug_in_the_heartbeat_surfaces(redis_url: str) -> None:
    feed = _feed(redis_url)
    seeds = feed.seed_list()

    async def broken(n: int) -> None:
        raise AttributeError("a bug")

    seeds.take = broken  # type: ignore[method-assign]
    stopped = _beat(feed)
    assert isinstance(stopped, AttributeError)


def test_the_spider_reads_the_extensions_defaults_before_the_add_on_runs() -> None:
    """Scrapy builds the spider before the add-ons run: settings the spider
    reads from the extensions' defaults must not read as 0 (a heartbeat of
    0 beat the seed list in a busy loop, and every other taker looked dead)."""
    spider = WebSpider.from_crawler(Crawler(WebSpider, Settings()))
    assert spider.max_anchors == defaults.MAX_OUTLINKS_PER_PAGE * ANCHORS_PER_OUTLINK
