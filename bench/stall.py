"""Where a page with 100,000 links spends the worker's reactor time.

``python -m bench.stall [--links N] [--repeat R] [--sizes] [--json]`` builds
the sandbox's ``/many/links.html`` (:data:`sandbox.hostile.MANY_LINKS`
links, ~4 MB) and times, in this process, each stage of
:func:`pipelines.processing.extract` as the web spider calls it (2 x the
default ``MAX_OUTLINKS_PER_PAGE`` anchors examined): decode, parse, anchor
walk, URL resolution, main text, and the whole call; then the frontier's
canonicalisation of the 1000 URLs followed (``enqueue_request`` does it one
request at a time; the dupefilter's batch is Redis round trips awaited in the
scheduler's background task, not reactor time). Medians over ``--repeat``
runs, in milliseconds.

Then the web spider's whole parse of the page runs on an asyncio event loop
beside a 2 ms timer, parsed on the loop (``PARSE_OFFLOAD_BYTES=0``) and in
the parse pool's child: the longest stretch of the loop thread's CPU time
between two ticks is how long the loop was held in one piece (the worst
wall-clock lateness of a tick is printed too: it also counts waits for a
core on a loaded machine). ``--sizes`` prints ``extract``'s time by page size
instead (how ``PARSE_OFFLOAD_BYTES`` was chosen); ``--json`` prints JSON.

Settings read: none (the spider's defaults are imported).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from typing import TYPE_CHECKING, Any

from extensions.settings.defaults import MAX_OUTLINKS_PER_PAGE
from extensions.utils.url import canonicalize_url
from pipelines import processing
from sandbox.hostile import MANY_LINKS, many_links_body
from sandbox.site import HTML

if TYPE_CHECKING:
    from collections.abc import Callable


def stages(body: bytes, url: str, max_anchors: int) -> dict[str, float]:
    """Milliseconds per stage of one run."""
    out: dict[str, float] = {}

    def timed(name: str, func: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        result = func()
        out[name] = (time.perf_counter() - t0) * 1000
        return result

    _, text = timed("decode", lambda: processing.decode_html(body, HTML))
    tree = timed("parse", lambda: processing._parse(text))
    doc = tree.document
    anchors = timed("anchor_walk", lambda: processing._first_anchors(doc, max_anchors))
    base_dir = processing._base_dir(url)
    timed(
        "resolve_urls",
        lambda: [
            processing._absolute(url, a.getattr("href") or "", base_dir)
            for a in anchors
        ],
    )
    timed("main_text", lambda: processing.main_text(tree))
    page = timed(
        "extract_total",
        lambda: processing.extract(
            body, url, {"Content-Type": [HTML]}, None, max_anchors
        ),
    )
    urls = [link.url for link in page.follow_links()][: max_anchors // 2]
    timed("canonicalize", lambda: [canonicalize_url(u) for u in urls])
    return out


def loop_lateness(body: bytes, offload_bytes: int) -> tuple[float, float, float]:
    """While the web spider parses ``body`` and yields its requests, beside a
    2 ms timer on the event loop: the longest stretch of the loop thread's
    CPU time between two ticks (ms: work done without a turn), the worst
    lateness of a tick (ms, wall clock: also waits for a busy core), and the
    wall time of the parse (ms),
    with ``PARSE_OFFLOAD_BYTES=offload_bytes`` (0: parsed on the loop). The
    parse pool is started (and warmed) before it is measured."""
    import asyncio

    from scrapy import Request
    from scrapy.http import HtmlResponse
    from scrapy.utils.test import get_crawler

    from webcrawl.addon import WebcrawlDefaults
    from webcrawl.spiders.web import WebSpider

    url = "http://a.test/many/links.html"
    crawler = get_crawler(
        WebSpider,
        {
            "ADDONS": {WebcrawlDefaults: 0},
            "WEB_ALLOWED_DOMAINS": ["a.test"],
            "PARSE_OFFLOAD_BYTES": offload_bytes,
        },
    )
    spider = WebSpider.from_crawler(crawler)
    crawler.spider = spider
    assert crawler.stats is not None
    crawler.stats.open_spider()
    response = HtmlResponse(
        url, body=body, headers={"Content-Type": HTML}, request=Request(url)
    )

    async def run() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        worst = stretch = 0.0

        async def ticks() -> None:
            nonlocal worst, stretch
            while True:
                due, cpu = loop.time() + 0.002, time.thread_time()
                await asyncio.sleep(0.002)
                stretch = max(stretch, time.thread_time() - cpu)
                worst = max(worst, loop.time() - due)

        _ = [x async for x in spider.parse(response)]  # warm-up (pool start)
        ticker = asyncio.ensure_future(ticks())
        await asyncio.sleep(0.05)
        worst = stretch = 0.0
        t0 = time.perf_counter()
        _ = [x async for x in spider.parse(response)]
        wall = time.perf_counter() - t0
        await asyncio.sleep(0.01)  # a tick held up to the end lands
        ticker.cancel()
        return stretch * 1000, worst * 1000, wall * 1000

    try:
        return asyncio.run(run())
    finally:
        spider._on_closed()


def size_curve(repeat: int) -> list[tuple[str, int, float]]:
    """Median ``extract`` ms of link pages and of text pages by size (what
    ``PARSE_OFFLOAD_BYTES`` is chosen from), and of the parse pool's round
    trip for a small page (its fixed cost)."""
    import random
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from sandbox.site import Site, SiteSpec

    def median_ms(func: Callable[[], Any]) -> float:
        runs = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            func()
            runs.append((time.perf_counter() - t0) * 1000)
        return round(statistics.median(runs), 1)

    # max_links as the spider has it (2 x MAX_OUTLINKS_PER_PAGE anchors).
    url, headers = "http://a.test/x.html", {"Content-Type": [HTML]}
    extract, anchors = processing.extract, MAX_OUTLINKS_PER_PAGE * 2
    rows = []
    for links in (1_000, 6_000, 10_000, 25_000, 100_000):
        body = many_links_body(links)
        ms = median_ms(functools.partial(extract, body, url, headers, None, anchors))
        rows.append((f"{links:,} links", len(body), ms))
    site = Site(SiteSpec(seed=1, hosts=2, pages_per_host=5), 8080)
    nav = [(1, "/"), *((1, site.spec.page_path(1, k)) for k in range(1, 5))]
    for size in (50_000, 250_000, 1_000_000, 4_000_000):
        body = site.render_html(1, "/x.html", nav, random.Random(1), size=size)
        ms = median_ms(functools.partial(extract, body, url, headers, None, anchors))
        rows.append(("text", len(body), ms))
    small = many_links_body(100)
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        pool.submit(processing.extract, small, url, headers, None, 2000).result()
        ms = median_ms(
            lambda: pool.submit(
                processing.extract, small, url, headers, None, 2000
            ).result()
        )
    rows.append(("pool round trip, 100 links", len(small), ms))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", type=int, default=MANY_LINKS)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--sizes", action="store_true", help="extract time by page size, then exit"
    )
    args = parser.parse_args(argv)
    if args.sizes:
        print("| page | bytes | extract ms |\n|---|---|---|")
        for name, size, ms in size_curve(args.repeat):
            print(f"| {name} | {size:,} | {ms} |")
        return
    body = many_links_body(args.links)
    url = "http://site-001.sandbox.test:8080/many/links.html"
    runs = [stages(body, url, MAX_OUTLINKS_PER_PAGE * 2) for _ in range(args.repeat)]
    medians = {k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}
    loop = {
        f"loop_{name}": [
            round(statistics.median(x), 1)
            for x in zip(
                *(loop_lateness(body, threshold) for _ in range(args.repeat)),
                strict=True,
            )
        ]
        for name, threshold in (("in_process", 0), ("offloaded", 1))
    }
    if args.json:
        print(json.dumps({"bytes": len(body), "links": args.links, **medians, **loop}))
        return
    print(f"{len(body):,} bytes, {args.links:,} links, median of {args.repeat}")
    print("| stage | ms |\n|---|---|")
    for name, ms in medians.items():
        print(f"| {name} | {ms} |")
    print(
        "\n| spider parse | longest loop stretch, CPU ms | worst tick lateness ms "
        "| wall ms |\n|---|---|---|---|"
    )
    for name, (cpu, late, wall) in loop.items():
        print(f"| {name[5:]} | {cpu} | {late} | {wall} |")


if __name__ == "__main__":
    main()
