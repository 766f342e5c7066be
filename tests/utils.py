"""Test helpers shared by the unit tests."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, TypeVar

import redis.asyncio as aredis
from scrapy.utils.test import get_crawler as scrapy_get_crawler

from webcrawl.addon import WebcrawlDefaults

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy import Spider
    from scrapy.crawler import Crawler

T = TypeVar("T")


def get_crawler(
    spidercls: type[Spider] | None = None, settings_dict: dict[str, Any] | None = None
) -> Crawler:
    """Scrapy's ``get_crawler`` with every package's defaults installed at
    ``default`` priority, as the add-on does (without the add-on's other
    work: it would start an embedded Redis when ``REDIS_URL`` is empty)."""
    settings = dict(settings_dict or {})
    # The project's own value (webcrawl.settings): robots.txt obeyed.
    settings.setdefault("ROBOTSTXT_OBEY", True)
    settings["ADDONS"] = {WebcrawlDefaults: 0, **settings.get("ADDONS", {})}
    return scrapy_get_crawler(spidercls, settings)


def run_redis(redis_url: str, body: Callable[[aredis.Redis], Awaitable[T]]) -> T:
    """Run ``body`` on a fresh asyncio client of ``redis_url`` in a new event
    loop, and close the client."""

    async def main() -> T:
        client = aredis.Redis.from_url(redis_url)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())
