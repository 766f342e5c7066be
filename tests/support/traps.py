"""The trap filter (:class:`~extensions.spidermiddlewares.traps.TrapFilter`)
built from settings, and a page's output run through it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from scrapy import Spider
from scrapy.http import HtmlResponse

from extensions.spidermiddlewares.traps import TrapFilter
from tests.utils import get_crawler

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


def trap_filter(**settings: Any) -> TrapFilter:
    crawler = get_crawler(Spider, settings_dict=settings)
    assert crawler.stats is not None
    crawler.stats.open_spider()
    return TrapFilter(crawler)


def run_output(mw: TrapFilter, items: list[Any]) -> list[Any]:
    """``items`` as one page's output through the filter (then its Redis
    client is closed)."""
    response = HtmlResponse("http://a.test/", body=b"<html></html>")

    async def result() -> AsyncIterator[Any]:
        for item in items:
            yield item

    async def collect() -> list[Any]:
        out = [x async for x in mw.process_spider_output(response, result())]
        await mw.client.aclose()
        return out

    return asyncio.run(collect())
