"""BloomDupeFilter: Scrapy's dupefilter contract on a real redis-server."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import Request, Spider
from scrapy.exceptions import NotConfigured
from scrapy.utils.misc import build_from_crawler

from extensions import keys
from extensions.connection import async_client
from extensions.dupefilters import BloomDupeFilter
from tests.support.polling import until
from tests.utils import get_crawler

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import redis
    from scrapy.crawler import Crawler


class PathOnlyFingerprinter:
    """Requests that differ only in their query are duplicates."""

    def fingerprint(self, request: Request) -> bytes:
        return request.url.split("?")[0].encode()


def make_crawler(redis_url: str, **settings: Any) -> Crawler:
    base = {
        "REDIS_URL": redis_url,
        "BLOOM_CAPACITY": 10_000,
        "BLOOM_ERROR_RATE": 0.001,
        "BLOOM_STATS_INTERVAL": 0,
    }
    crawler = get_crawler(Spider, settings_dict={**base, **settings})
    crawler.spider = Spider.from_crawler(crawler, name="web")
    crawler.stats.open_spider()
    return crawler


def run(crawler: Crawler, body: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``body`` in one event loop, then close the crawler's client."""

    async def main() -> Any:
        try:
            return await body()
        finally:
            await async_client(crawler).aclose()

    return asyncio.run(main())


def test_batch_path(redis_url: str, redis_client: redis.Redis) -> None:
    crawler = make_crawler(redis_url)
    df = build_from_crawler(BloomDupeFilter, crawler)
    a, b, c = (Request(f"http://a.test/{i}") for i in range(3))

    async def body() -> tuple[list[bool], list[bool]]:
        await df.open_async()
        first = await df.requests_seen(
            [a, b, Request(a.url), a.replace(dont_filter=True)]
        )
        second = await df.requests_seen([a, b, c, b.replace(dont_filter=True)])
        await df.close_async("finished")
        return first, second

    first, second = run(crawler, body)
    assert first == [False, False, True, False]  # duplicate within the batch
    assert second == [True, True, False, False]  # dont_filter: never dropped
    assert crawler.stats.get_value("dupefilter/filtered") == 3
    # keys named by keys.py, prefixed with the spider name; close kept them
    assert redis_client.exists(keys.bloom_meta("web"))
    assert redis_client.exists(keys.bloom_shard("web", 0, 0))
    # stats refreshed on close
    assert crawler.stats.get_value("dupefilter/estimated_items") == 3
    rate = crawler.stats.get_value("dupefilter/expected_fp_rate")
    assert 0 < rate < 1e-20
    assert crawler.stats.get_value("dupefilter/layers") == 1


def test_fingerprinter_decides_what_a_duplicate_is(redis_url: str) -> None:
    crawler = make_crawler(
        redis_url,
        REQUEST_FINGERPRINTER_CLASS=f"{__name__}.PathOnlyFingerprinter",
    )
    df = build_from_crawler(BloomDupeFilter, crawler)

    async def body() -> list[bool]:
        return await df.requests_seen(
            [Request("http://a.test/p?x=1"), Request("http://a.test/p?x=2")]
        )

    assert run(crawler, body) == [False, True]


def test_persistence_across_workers_and_runs(redis_url: str) -> None:
    urls = [Request(f"http://a.test/{i}") for i in range(50)]
    first_crawler = make_crawler(redis_url)
    first = build_from_crawler(BloomDupeFilter, first_crawler)

    async def body1() -> list[bool]:
        await first.open_async()
        seen = await first.requests_seen(urls)
        await first.close_async("shutdown")
        return seen

    assert run(first_crawler, body1) == [False] * 50
    second_crawler = make_crawler(redis_url)
    second = build_from_crawler(BloomDupeFilter, second_crawler)

    async def body2() -> list[bool]:
        return await second.requests_seen(urls)

    assert run(second_crawler, body2) == [True] * 50


def test_stock_scheduler_path_is_synchronous(redis_url: str) -> None:
    crawler = make_crawler(redis_url)
    df = build_from_crawler(BloomDupeFilter, crawler)
    request = Request("http://a.test/x")
    assert df.request_seen(request) is False
    assert df.request_seen(Request("http://a.test/x")) is True
    assert df.request_seen(request.replace(dont_filter=True)) is False
    df.log(request, crawler.spider)
    assert crawler.stats.get_value("dupefilter/filtered") == 1

    # the batch path shares the filter with the synchronous one
    async def body() -> list[bool]:
        seen = await df.requests_seen([Request("http://a.test/x")])
        await df.close_async("finished")
        return seen

    assert run(crawler, body) == [True]


def test_prefix_falls_back_to_the_setting(
    redis_url: str, redis_client: redis.Redis
) -> None:
    crawler = make_crawler(redis_url, BLOOM_KEY_PREFIX="fleet")
    crawler.spider = None
    df = build_from_crawler(BloomDupeFilter, crawler)
    assert df.request_seen(Request("http://a.test/")) is False
    assert redis_client.exists(keys.bloom_meta("fleet"))
    bare = build_from_crawler(BloomDupeFilter, make_crawler(redis_url))
    bare.crawler.spider = None
    with pytest.raises(RuntimeError, match="key prefix"):
        bare.request_seen(Request("http://a.test/"))


def test_periodic_refresh(redis_url: str) -> None:
    crawler = make_crawler(redis_url, BLOOM_STATS_INTERVAL=0.05)
    df = build_from_crawler(BloomDupeFilter, crawler)

    async def body() -> Any:
        await df.open_async()
        await df.requests_seen([Request(f"http://a.test/{i}") for i in range(20)])
        await until(
            lambda: crawler.stats.get_value("dupefilter/estimated_items"), timeout=60
        )
        value = crawler.stats.get_value("dupefilter/estimated_items")
        await df.close_async("finished")
        return value

    assert run(crawler, body) == 20


@pytest.mark.parametrize(
    "override",
    [{"BLOOM_CAPACITY": 0}, {"BLOOM_ERROR_RATE": 2}, {"BLOOM_GROWTH": "lots"}],
)
def test_bad_settings(redis_url: str, override: dict[str, Any]) -> None:
    with pytest.raises(NotConfigured):
        build_from_crawler(BloomDupeFilter, make_crawler(redis_url, **override))


def test_a_worker_remembers_its_answers(
    redis_url: str, redis_client: redis.Redis
) -> None:
    # The filter never forgets: a fingerprint this worker had an answer for
    # is a duplicate without asking Redis again (seen_before, and the batch
    # path sends only the others).
    crawler = make_crawler(redis_url)
    df = build_from_crawler(BloomDupeFilter, crawler)
    a, b, c = (Request(f"http://a.test/{i}") for i in range(3))

    def bitfields() -> int:
        stats = redis_client.info("commandstats")
        names = ("cmdstat_bitfield", "cmdstat_bitfield_ro")
        return sum(int(stats[k]["calls"]) for k in names if k in stats)

    async def body() -> tuple[list[bool], list[bool], int]:
        await df.open_async()
        first = await df.requests_seen([a, b])
        before = bitfields()
        again = await df.requests_seen([Request(a.url), b, c])
        sent = bitfields() - before
        await df.close_async("finished")
        return first, again, sent

    assert not df.seen_before(a)  # nothing answered yet
    first, again, sent = run(crawler, body)
    assert first == [False, False]
    assert again == [True, True, False]
    assert sent == 1  # c only
    assert df.seen_before(Request(c.url))
    assert not df.seen_before(Request(c.url, dont_filter=True))
    assert not df.seen_before(Request("http://a.test/new"))
    assert crawler.stats.get_value("dupefilter/filtered") == 3
