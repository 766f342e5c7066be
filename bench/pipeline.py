"""Benchmark of the storage pipeline: ``python -m bench.pipeline [--quick]``.

Prints pages/s through prepare_page + PageBatcher into the SQLite store and
through MongoStore's pymongo code path on mongomock, the zlib compression
ratio (on real HTML and on sandbox pages), the extraction speed, and the
event loop's worst stalls while batches are flushed (a 5 ms ticker on the
loop; target p99 < 50 ms). Real HTML: the Debian python3-doc package at
/usr/share/doc/python3/html when installed; else generated pages (said so in
the output).
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
from typing import Any

from pipelines.batching import PageBatcher, prepare_page
from pipelines.items import PageItem
from pipelines.stores.mongo import MongoStore
from pipelines.stores.sqlite import SQLiteStore

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


def ratio(bodies: list[bytes], level: int = 6) -> float:
    """Original over compressed size at zlib ``level``."""
    return sum(map(len, bodies)) / sum(len(zlib.compress(b, level)) for b in bodies)


def corpus(limit: int) -> tuple[str, list[bytes]]:
    files = sorted(DOCS.rglob("*.html"))[:limit] if DOCS.is_dir() else []
    if files:
        return f"python3-doc ({DOCS})", [f.read_bytes() for f in files]
    words = " ".join(f"word{i % 500}" for i in range(2000))
    pages = [
        f"<html><title>p{i}</title><nav><a href=/>home</a></nav>"
        f"<p>{i} {words}</p></html>".encode()
        for i in range(limit)
    ]
    return "generated pages (python3-doc not installed)", pages


async def through(store: Any, bodies: list[bytes]) -> dict[str, float]:
    lags: list[float] = []
    stop = False

    async def ticker() -> None:
        interval = 0.005
        while not stop:
            t = time.perf_counter()
            await asyncio.sleep(interval)
            lags.append(time.perf_counter() - t - interval)

    batcher = PageBatcher(store, batch_size=50, flush_interval=1.0)
    await batcher.open()
    tick = asyncio.ensure_future(ticker())
    start = time.perf_counter()
    for i, body in enumerate(bodies):
        item = PageItem(f"http://b.test/{i}", f"http://b.test/{i}", 200, f"fp{i}")
        item.body = body
        page = await asyncio.to_thread(prepare_page, item, 6)
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
    args = parser.parse_args(argv)
    limit = 100 if args.quick else 530
    name, bodies = corpus(limit)
    raw = sum(len(b) for b in bodies)
    print(f"corpus: {name}: {len(bodies)} pages, {raw / 1e6:.1f} MB")
    t = time.perf_counter()
    prepared = [
        prepare_page(PageItem("http://b.test/", "http://b.test/", 200, "x", body=b))
        for b in bodies
    ]
    t = time.perf_counter() - t
    packed = sum(p.metadata["compressed_size"] for p in prepared)
    print(
        "prepare (extract+hash+simhash+zlib 6), one thread: "
        f"{len(bodies) / t:.1f} pages/s"
    )
    print(f"zlib level 6 compression ratio (original/compressed): {raw / packed:.2f}")
    sandbox_pages = sandbox_corpus(limit)
    print(
        f"zlib level 6 ratio on {len(sandbox_pages)} sandbox pages "
        f"({sum(map(len, sandbox_pages)) / 1e6:.1f} MB): {ratio(sandbox_pages):.2f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = asyncio.run(through(SQLiteStore(Path(tmp) / "b.sqlite3"), bodies))
    import mongomock

    from tests.test_stores import patch_mongomock

    patch_mongomock()
    mongo = asyncio.run(through(MongoStore(client=mongomock.MongoClient()), bodies))
    print(
        f"{'store':<22}{'pages/s':>9}{'flush ms':>10}"
        f"{'loop lag p99 ms':>17}{'max ms':>8}"
    )
    for label, r in (("SQLite", sqlite), ("MongoStore/mongomock", mongo)):
        print(
            f"{label:<22}{r['pages_s']:>9.1f}{r['flush_ms']:>10.1f}"
            f"{r['lag_p99_ms']:>17.1f}{r['lag_max_ms']:>8.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
