"""scrapy-redis's spiders (``RedisSpider``, ``RedisCrawlSpider``) served by
webcrawl's reliable seed take.

Settings read: none (the spider's seed keys are
:func:`extensions.core.seeds.seed_source`'s).

A spider subclassing ``scrapy_redis.spiders.RedisMixin`` reads its seeds
itself: on every ``spider_idle`` it counts its key and pops a batch from it
(``LRANGE`` + ``LTRIM``, ``SPOP``, ``ZREVRANGE`` + ``ZREMRANGEBYRANK``) with
a blocking client on the reactor thread, and a batch popped by a worker that
dies before scheduling it is lost for good (under Scrapy 2.13 and later,
which no longer calls ``start_requests``, that handler is its only reader).
:class:`RedisMixinSeeds` (an extension the add-on enables for every spider;
it does nothing for any other) disconnects that handler when the crawl is
built, so the spider's seeds are taken by webcrawl's reliable take
(:mod:`extensions.core.seeds`) from the same keys: its ``redis_key`` (a
string or a list), ``REDIS_START_URLS_AS_SET`` / ``AS_ZSET``. Its other
attributes are named in one warning each with what replaces them.

A spider that overrides ``make_request_from_data`` makes its seed requests
itself, from the entry's bytes as scrapy-redis hands them:
:func:`request_maker` gives the seed take that function
(:class:`extensions.core.seeds.SeedList`'s ``maker``); any other spider's
entries are read as webcrawl reads every seed (scrapy-redis's JSON shape
included).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy_redis.spiders import RedisMixin

from extensions.core.seeds import seed_source

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

# RedisMixin's attributes that webcrawl does without, and what does their job.
REPLACED_ATTRIBUTES = {
    "redis_batch_size": "SEED_BATCH_SIZE",
    "max_idle_time": "MAX_IDLE_TIME_BEFORE_CLOSE",
    "redis_encoding": "seeds are read as UTF-8",
    "redis_key_check_interval": "every take starts at the first key",
}


def is_redis_spider(spider: object) -> bool:
    """Whether ``spider`` (an instance or a class) is a scrapy-redis spider."""
    cls = spider if isinstance(spider, type) else type(spider)
    return issubclass(cls, RedisMixin)


def request_maker(spider: Spider) -> Callable[[bytes], list[Request]] | None:
    """The spider's own ``make_request_from_data``, as a maker of seed
    requests (a list, whatever it returns: a request, several, or none),
    when it is a scrapy-redis spider that overrides it; None otherwise."""
    if not is_redis_spider(spider):
        return None
    own = getattr(type(spider), "make_request_from_data", None)
    if own is RedisMixin.make_request_from_data:
        return None
    make = getattr(spider, "make_request_from_data")  # noqa: B009 - typed Spider

    def maker(entry: bytes) -> list[Request]:
        made = make(entry)
        if made is None:
            return []
        if isinstance(made, Request):
            return [made]
        return [r for r in _iterable(made) if isinstance(r, Request)]

    return maker


def _iterable(made: Any) -> Iterable[Any]:
    try:
        return list(made)
    except TypeError:
        return []


class RedisMixinSeeds:
    """Takes a scrapy-redis spider's own seed reading away (module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        spider = crawler.spider
        self.served = spider is not None and is_redis_spider(spider)
        if not self.served:
            return
        assert spider is not None
        # Its idle handler (RedisMixin.setup_redis connected it) counts and
        # pops the seed key with a blocking client, on the reactor thread.
        crawler.signals.disconnect(
            spider.spider_idle,  # type: ignore[attr-defined]
            signal=signals.spider_idle,
        )
        source = seed_source(spider, crawler.settings)
        logger.info(
            "Serving scrapy-redis spider %r: its seeds are taken reliably from "
            "%s (a %s) by webcrawl; its own reading of them (on spider_idle, "
            "destructive and blocking) is switched off%s",
            spider.name,
            ", ".join(source.keys),
            source.kind,
            "; seed requests made by its make_request_from_data"
            if request_maker(spider)
            else "",
        )
        for name, instead in REPLACED_ATTRIBUTES.items():
            value = getattr(type(spider), name, None)
            if value is not None and str(value).lower() not in ("utf-8", "utf8"):
                logger.warning(
                    "%s.%s is scrapy-redis's and is ignored here: %s",
                    type(spider).__name__,
                    name,
                    instead,
                )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)
