"""A page with 100,000 links never holds the event loop for long (issue 12).

The ``web`` spider's parse runs on the event loop Scrapy's reactor drives; a
timer on that same loop, due every 2 ms, records for each tick the CPU time
the loop's thread spent since the tick before (``time.thread_time``) while
the spider parses the sandbox's ``/many/links.html`` (~4 MB,
:data:`sandbox.hostile.MANY_LINKS` links) and yields its requests: the
longest stretch of work the loop did without a turn. Thread CPU time, not
the wall clock: on a loaded machine the thread may also wait for a core,
which is not the loop's doing (the wall-clock lateness is in the message).
Before the parse went to a child process the loop was held 0.3 to 0.6 s in
one piece (``python -m bench.stall``: the main-text extraction and the parse
of the 4 MB document, C code holding the GIL).
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import os
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

from scrapy import Request
from scrapy.http import HtmlResponse, Response

from extensions.settings.defaults import MAX_OUTLINKS_PER_PAGE
from pipelines.items import PageItem
from sandbox.hostile import many_links_body
from tests.utils import get_crawler
from webcrawl.defaults import PARSE_OFFLOAD_BYTES
from webcrawl.spiders.web import ANCHORS_PER_OUTLINK, WebSpider

# What is left on the loop is a chunk of LINK_CHUNK links (~2 ms) and the
# hand-over of the body and the result (~2 ms of pickling each way); held in
# one piece, the page took 300 ms and more of the thread's CPU. The bound
# is 3x below that: on a loaded 2-core machine a stretch of the big
# sitemap's parse measured 56 ms of thread CPU (cache misses and the
# collector's pauses count as the thread's own).
MAX_STRETCH_S = 0.1
TICK_S = 0.002


def spider_for(url: str) -> WebSpider:
    crawler = get_crawler(WebSpider, {"WEB_ALLOWED_DOMAINS": ["a.test"]})
    spider = WebSpider.from_crawler(crawler)
    crawler.spider = spider
    assert crawler.stats is not None
    crawler.stats.open_spider()
    return spider


async def ticks(stretches: list[float], lateness: list[float]) -> None:
    """Per tick: the loop thread's CPU seconds since the last one, and how
    late (wall clock) the tick fired."""
    loop = asyncio.get_running_loop()
    while True:
        due, cpu = loop.time() + TICK_S, time.thread_time()
        await asyncio.sleep(TICK_S)
        stretches.append(time.thread_time() - cpu)
        lateness.append(loop.time() - due)


async def collect(output: Any) -> list[Any]:
    if hasattr(output, "__aiter__"):
        return [x async for x in output]
    return list(output)  # a generator: the whole page in one piece


def test_a_page_of_100k_links_never_holds_the_loop() -> None:
    body = many_links_body()
    assert len(body) >= PARSE_OFFLOAD_BYTES
    url = "http://a.test/many/links.html"
    spider = spider_for(url)
    response = HtmlResponse(
        url,
        body=body,
        headers={"Content-Type": "text/html; charset=utf-8"},
        request=Request(url),
    )

    stretches: list[float] = []
    lateness: list[float] = []

    async def main() -> list[Any]:
        # The process's own heap frozen, as in the sitemap test below: a
        # full collection over an xdist process that has run hundreds of
        # tests held the thread 0.32 s once, whatever code ran.
        gc.collect()
        gc.freeze()
        ticker = asyncio.ensure_future(ticks(stretches, lateness))
        await asyncio.sleep(0.05)  # the ticker runs
        try:
            out = await collect(spider.parse(response))
            await asyncio.sleep(TICK_S * 5)  # a tick held up to the end lands
        finally:
            ticker.cancel()
            gc.unfreeze()
        return out

    try:
        out = asyncio.run(main())
    finally:
        spider._on_closed()
    assert isinstance(out[-1], PageItem) and out[-1].extracted is not None
    requests = [r for r in out if isinstance(r, Request)]
    assert len(requests) == MAX_OUTLINKS_PER_PAGE * ANCHORS_PER_OUTLINK
    stats = spider.crawler.stats
    assert stats is not None
    assert stats.get_value("parse/offloaded") == 1
    assert max(stretches) < MAX_STRETCH_S, (
        sorted(stretches)[-3:],
        sorted(lateness)[-3:],
    )


def test_small_pages_are_parsed_in_process() -> None:
    body = many_links_body(100)
    url = "http://a.test/many/links.html"
    spider = spider_for(url)
    response = HtmlResponse(
        url, body=body, headers={"Content-Type": "text/html"}, request=Request(url)
    )
    out = asyncio.run(collect(spider.parse(response)))
    assert len([r for r in out if isinstance(r, Request)]) == 101
    assert spider._pool is None
    assert spider.crawler.stats.get_value("parse/offloaded") is None  # type: ignore[union-attr]


def test_a_dead_parse_pool_falls_back_to_parsing_in_process() -> None:
    """The child dies (here: at start, as it would without a main guard):
    the page is parsed in this process, and so is every later one, instead
    of starting child after child."""
    url = "http://a.test/many/links.html"
    spider = spider_for(url)
    spider._pool = ProcessPoolExecutor(
        1, mp_context=get_context("spawn"), initializer=os._exit, initargs=(3,)
    )
    response = HtmlResponse(
        url,
        body=many_links_body(),
        headers={"Content-Type": "text/html"},
        request=Request(url),
    )
    try:
        out = asyncio.run(collect(spider.parse(response)))
    finally:
        spider._on_closed()
    requests = [r for r in out if isinstance(r, Request)]
    assert len(requests) == MAX_OUTLINKS_PER_PAGE * ANCHORS_PER_OUTLINK
    stats = spider.crawler.stats
    assert stats is not None
    assert stats.get_value("parse/pool_broken") == 1
    assert stats.get_value("parse/offloaded") is None
    assert spider._pool is None and spider.offload_bytes == 0


def sitemap_body(n: int) -> bytes:
    entries = "".join(
        f"<url><loc>http://a.test/p/{i}</loc><changefreq>daily</changefreq></url>"
        for i in range(n)
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"{entries}</urlset>"
    ).encode()


def test_a_big_sitemap_never_holds_the_loop() -> None:
    """50,000 entries (the sitemaps protocol's limit per file), gzipped: the
    body is inflated off the loop and its entries yielded in chunks. Read in
    one piece it held the loop's thread 0.4 s and more."""
    body = gzip.compress(sitemap_body(50_000))
    url = "http://a.test/sitemap.xml.gz"
    spider = spider_for(url)
    response = Response(url, body=body, request=Request(url))
    stretches: list[float] = []
    lateness: list[float] = []

    async def main() -> tuple[int, Any]:
        # Counted, not kept: 50,000 live requests would make the test's own
        # garbage collections the longest stretches (the scheduler pushes
        # them to Redis as they come).
        # The process's own heap (Scrapy, lxml, the tests' imports) frozen:
        # a full collection over it takes ~70 ms whatever code runs, and
        # this measures the sitemap's own work.
        gc.collect()
        gc.freeze()
        ticker = asyncio.ensure_future(ticks(stretches, lateness))
        await asyncio.sleep(0.05)
        n, last = 0, None
        try:
            async for last in spider.parse(response):
                n += isinstance(last, Request)
            await asyncio.sleep(TICK_S * 5)
        finally:
            ticker.cancel()
            gc.unfreeze()
        return n, last

    try:
        n, last = asyncio.run(main())
    finally:
        spider._on_closed()
    assert n == 50_000
    assert isinstance(last, PageItem)
    assert max(stretches) < MAX_STRETCH_S, (
        sorted(stretches)[-3:],
        sorted(lateness)[-3:],
    )
