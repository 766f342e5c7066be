"""Benchmark of page processing and the storage pipeline:
``python -m bench.pipeline [--quick] [--repeats N] [--zlib-level L]``.

Prints, each a median of ``--repeats`` passes in this one process:

* ``prepare_page`` pages per CPU-second of one thread (extraction, SHA-256, SimHash,
  zlib: everything the pipeline does to a page before the store), on sandbox
  pages (rendered in process) and on real HTML: the Debian python3-doc
  package (``/usr/share/doc/python3/html``) when installed, else generated
  pages (said so in the output). Goals: 300 sandbox pages/s, 150 python3-doc
  pages/s.
* zlib level 1 against level 6 (the ``PIPELINE_ZLIB_LEVEL`` default) on both
  corpora: compression ratio and MB/s of input.
* pages/s through prepare_page + :class:`~pipelines.batching.PageBatcher`
  into the SQLite store and through MongoStore's pymongo code path on
  mongomock, with the event loop's stalls while batches flush (a 5 ms ticker
  on the loop; goal p99 < 20 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.batching import PageBatcher, prepare_page
from pipelines.items import PageItem
from pipelines.processing import extract
from pipelines.stores.mongo import MongoStore
from pipelines.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable

DOCS = Path("/usr/share/doc/python3/html")


def sandbox_corpus(limit: int) -> list[bytes]:
    """The first ``limit`` pages of a default sandbox web, rendered in process."""
    from sandbox.site import Request, Site, SiteSpec

    spec = SiteSpec(seed=0, hosts=20, pages_per_host=max(1, limit // 20))
    site = Site(spec, port=8080)
    bodies = []
    for url in sorted(spec.page_urls(8080))[:limit]:
        host, _, path = url.removeprefix("http://").partition("/")
        answer = site.handle(Request("GET", host, "/" + path, "", {}))
        assert not inspect.isawaitable(answer)
        bodies.append(answer.body)
    return bodies


def docs_corpus(limit: int, root: Path = DOCS) -> tuple[str, list[bytes]]:
    """The first ``limit`` HTML files under ``root`` (sorted by path), else
    generated pages."""
    files = sorted(root.rglob("*.html"))[:limit] if root.is_dir() else []
    if files:
        return f"python3-doc ({root})", [f.read_bytes() for f in files]
    words = " ".join(f"word{i % 500}" for i in range(2000))
    pages = [
        f"<html><title>p{i}</title><nav><a href=/>home</a></nav>"
        f"<p>{i} {words}</p></html>".encode()
        for i in range(limit)
    ]
    return "generated pages (python3-doc not installed)", pages


def _item(i: int, body: bytes) -> PageItem:
    url = f"http://b.test/{i}"
    return PageItem(url, url, 200, f"fp{i}", body=body)


def prepare_rate(bodies: list[bytes], repeats: int, level: int = 6) -> float:
    """Median pages per CPU-second of ``prepare_page`` on this thread over
    ``repeats`` passes. Thread CPU time, not wall time: on a shared machine
    it measures the work, not the neighbours."""
    items = [_item(i, b) for i, b in enumerate(bodies)]
    rates = []
    for _ in range(repeats):
        t = time.thread_time()
        for item in items:
            prepare_page(item, level)
        rates.append(len(items) / (time.thread_time() - t))
    return statistics.median(rates)


def zlib_figures(bodies: list[bytes], level: int, repeats: int) -> tuple[float, float]:
    """(ratio original/compressed, median MB of input per CPU-second) at zlib
    ``level``."""
    raw = sum(map(len, bodies))
    speeds = []
    packed = 0
    for _ in range(repeats):
        t = time.thread_time()
        packed = sum(len(zlib.compress(b, level)) for b in bodies)
        speeds.append(raw / 1e6 / (time.thread_time() - t))
    return raw / packed, statistics.median(speeds)


def _scrapy_links(body: bytes, url: str) -> object:
    from scrapy.http import HtmlResponse
    from scrapy.linkextractors import LinkExtractor

    response = HtmlResponse(url, body=body)
    links = LinkExtractor(unique=True).extract_links(response)
    robots = response.xpath(
        "//meta[translate(@name,'ROBTS','robts')='robots']/@content"
    ).getall()
    return links, robots


def _extract(body: bytes, url: str) -> object:
    return extract(body, url)


def parse_ms(fn: Callable[[bytes, str], object], bodies: list[bytes]) -> list[float]:
    """Thread CPU milliseconds of ``fn`` per page."""
    out = []
    for i, body in enumerate(bodies):
        t = time.thread_time()
        fn(body, f"http://b.test/{i}")
        out.append(1000 * (time.thread_time() - t))
    return out


def _row(label: str, r: dict[str, float]) -> None:
    print(
        f"{label:<58}{r['pages_s']:>9.1f}{r['flush_ms']:>10.1f}"
        f"{r['lag_p99_ms']:>17.1f}{r['lag_max_ms']:>8.1f}"
    )


async def through(
    store: Any, bodies: list[bytes], level: int, parsed: bool = False
) -> dict[str, float]:
    """Pages through prepare_page (in a thread, as the pipeline runs it) and
    the batcher, with a 5 ms ticker measuring the loop's stalls. ``parsed``:
    the items carry the spider's extraction, done before the clock starts."""
    lags: list[float] = []
    stop = False

    async def ticker() -> None:
        interval = 0.005
        while not stop:
            t = time.perf_counter()
            await asyncio.sleep(interval)
            lags.append(time.perf_counter() - t - interval)

    items = [_item(i, body) for i, body in enumerate(bodies)]
    for item in items if parsed else ():
        item.extracted = extract(item.body, item.url)
    batcher = PageBatcher(store, batch_size=50, flush_interval=1.0)
    await batcher.open()
    tick = asyncio.ensure_future(ticker())
    start = time.perf_counter()
    for item in items:
        page = await asyncio.to_thread(prepare_page, item, level)
        await batcher.put(page)
    await batcher.close()
    elapsed = time.perf_counter() - start
    stop = True
    await tick
    lags.sort()
    return {
        "pages_s": len(bodies) / elapsed,
        "lag_p99_ms": 1000 * lags[int(0.99 * (len(lags) - 1))] if lags else 0.0,
        "lag_max_ms": 1000 * lags[-1] if lags else 0.0,
        "flush_ms": 1000 * statistics.mean(batcher.flush_seconds or [0]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="storage pipeline benchmark")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--zlib-level", type=int, default=6)
    args = parser.parse_args(argv)
    limit = 100 if args.quick else 530
    level = args.zlib_level
    name, docs = docs_corpus(limit)
    sandbox = sandbox_corpus(limit)
    corpora = ((f"sandbox ({len(sandbox)} pages)", sandbox), (name, docs))
    for label, bodies in corpora:
        print(
            f"corpus: {label}: {len(bodies)} pages, "
            f"{sum(map(len, bodies)) / 1e6:.1f} MB"
        )
    print(
        f"prepare_page (extract+sha256+simhash+zlib {level}), pages per "
        f"CPU-second of one thread, median of {args.repeats}:"
    )
    for label, bodies in corpora:
        print(f"  {label:<50}{prepare_rate(bodies, args.repeats, level):>8.1f} pages/s")
    print(f"{'zlib':<52}{'ratio':>8}{'MB/s':>9}")
    for label, bodies in corpora:
        for lv in (1, 6):
            packed, speed = zlib_figures(bodies, lv, args.repeats)
            print(f"  level {lv}, {label:<42}{packed:>8.2f}{speed:>9.1f}")
    print(
        "the spider's parse on the reactor, ms per page (thread CPU): "
        "Scrapy's LinkExtractor + meta robots XPath (the spider before) "
        "against extract() (now: links, robots and text at once)"
    )
    print(f"  {'':<50}{'p50':>8}{'p99':>8}{'max':>8}")
    for label, bodies in corpora:
        for how, fn in (("LinkExtractor", _scrapy_links), ("extract()", _extract)):
            times = sorted(parse_ms(fn, bodies))
            p99 = times[int(0.99 * (len(times) - 1))]
            name_ = f"{how}, {label}"
            med = statistics.median(times)
            print(f"  {name_:<50}{med:>8.1f}{p99:>8.1f}{times[-1]:>8.1f}")
    import mongomock

    from tests.support.mongo import patch_mongomock

    patch_mongomock()
    print(
        "through the batcher, prepare_page in a thread (full: it extracts; "
        "parsed: the spider did):\n"
        f"{'store, corpus':<58}{'pages/s':>9}{'flush ms':>10}"
        f"{'loop lag p99 ms':>17}{'max ms':>8}"
    )
    for label, bodies in corpora:
        for parsed in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                store: Any = SQLiteStore(Path(tmp) / "b.sqlite3")
                r = asyncio.run(through(store, bodies, level, parsed))
            _row(f"SQLite, {label}, {'parsed' if parsed else 'full'}", r)
    mongo = MongoStore(client=mongomock.MongoClient())
    _row(
        f"MongoStore/mongomock, {name}, full", asyncio.run(through(mongo, docs, level))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
