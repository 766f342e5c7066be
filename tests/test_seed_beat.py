"""The seed feed's heartbeat (extensions.spidermiddlewares.seeds, any spider): a refusal
by Redis is logged and tried again at the next beat; a bug stops the beat
and surfaces (its task's done callback logs it), rather than being logged
at every beat forever. Against a real redis-server."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from scrapy.crawler import Crawler
from scrapy.settings import Settings

from extensions.keys import seed_takers
from extensions.settings import defaults
from extensions.spidermiddlewares.seeds import SeedFeed
from tests.support.polling import until
from tests.utils import get_crawler
from webcrawl.spiders.web import ANCHORS_PER_OUTLINK, WebSpider

if TYPE_CHECKING:
    import pytest
    import redis


def _feed(redis_url: str) -> SeedFeed:
    crawler = get_crawler(
        WebSpider, {"REDIS_URL": redis_url, "FRONTIER_HEARTBEAT_INTERVAL": 0.01}
    )
    crawler.spider = WebSpider.from_crawler(crawler)
    return SeedFeed.from_crawler(crawler)


def test_a_redis_refusal_keeps_the_heartbeat_going(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused beat after beat (each logged), the beat goes on; once Redis
    takes it again, the worker is a live taker again. (Before, the test only
    checked that the task had not died with an exception: a beat that
    stopped quietly, or never beat, passed too.)"""
    redis_client.set(seed_takers("web"), "not a ZSET")  # WRONGTYPE on every beat
    feed = _feed(redis_url)

    def refused() -> int:
        return sum(
            r.getMessage() == "Seed heartbeat failed; tried again"
            for r in caplog.records
        )

    async def main() -> tuple[bool, bool, bool]:
        task = asyncio.ensure_future(feed._beat())
        try:
            kept_trying = await until(lambda: refused() >= 3)
            alive = not task.done()
            redis_client.delete(seed_takers("web"))
            taker = feed.seed_list().taker
            beats_again = await until(
                lambda: redis_client.zscore(seed_takers("web"), taker) is not None
            )
            return kept_trying, alive and not task.done(), beats_again
        finally:
            task.cancel()
            await feed.seed_list().client.aclose()

    with caplog.at_level(logging.ERROR, logger="extensions.spidermiddlewares.seeds"):
        assert asyncio.run(main()) == (True, True, True)


def test_a_bug_in_the_heartbeat_surfaces(redis_url: str) -> None:
    feed = _feed(redis_url)
    seeds = feed.seed_list()

    async def broken(n: int) -> None:
        raise AttributeError("a bug")

    seeds.take = broken  # type: ignore[method-assign]

    async def main() -> BaseException | None:
        task = asyncio.ensure_future(feed._beat())
        try:
            assert await until(task.done), "the heartbeat went on over a bug"
            return task.exception()
        finally:
            task.cancel()
            await seeds.client.aclose()

    assert isinstance(asyncio.run(main()), AttributeError)


def test_the_spider_reads_the_extensions_defaults_before_the_add_on_runs() -> None:
    """Scrapy builds the spider before the add-ons run: settings the spider
    reads from the extensions' defaults must not read as 0 (a heartbeat of
    0 beat the seed list in a busy loop, and every other taker looked dead)."""
    spider = WebSpider.from_crawler(Crawler(WebSpider, Settings()))
    assert spider.max_anchors == defaults.MAX_OUTLINKS_PER_PAGE * ANCHORS_PER_OUTLINK
