"""Memory per queued request and per seen URL, each system through its own code.

``N`` requests (URLs over 100 hosts with ``depth`` meta, as a crawl with the
project's settings queues them: ``REFERER_ENABLED`` is off, see
``webcrawl/settings.py``) go through:

* stock Scrapy: its in-process ``ScrapyPriorityQueue`` of ``FifoMemoryQueue``
  (the default ``SCHEDULER_MEMORY_QUEUE``) and ``RFPDupeFilter``'s set of
  20-byte fingerprints, measured with ``tracemalloc`` (Python heap, the requests
  themselves included: that is what a queued request costs there);
* scrapy-redis 0.9.1: ``PriorityQueue.push`` with its default serializer (its
  ``picklecompat``; the bytes only go to a throw-away local Redis and are
  never loaded) and ``RFPDupeFilter``'s SET of 40-character hex fingerprints;
* webcrawl: ``Frontier.commit`` of ``request_to_bytes`` members, keyed by
  ``host_key`` as the scheduler does, and the Bloom filter sized for ``N`` at
  ``BLOOM_ERROR_RATE``.

Redis bytes are ``MEMORY USAGE key SAMPLES 0`` summed over every key of a fresh
``redis-server`` (one per system), divided by ``N``.

The spill effect: the same ``N`` requests committed as a worker does with
``FRONTIER_HOST_QUEUE_MAX`` = a tenth of each host's share (so the queues
grow 10x past the cap), the refused ones written to a SQLite page store by
:class:`extensions.core.frontier.spill.FrontierSpill`; Redis bytes with the cap against
webcrawl's without it.

Reads no settings (``extensions.settings.defaults`` gives the Bloom error rate).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio as aredis
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from extensions.connection.embedded import RedisProcess
from extensions.core.bloom import BloomConfig, BloomFilter, bloom_bound_bytes_per_item
from extensions.core.frontier.frontier import Frontier, QueuedRequest
from extensions.core.frontier.serialization import request_to_bytes
from extensions.settings import defaults
from extensions.utils.hosts import host_key
from pipelines import defaults as pipeline_defaults
from pipelines.dedup import DuplicateIndex

if TYPE_CHECKING:
    from collections.abc import Iterator

HOSTS = 100
BATCH = 1000
GEOMETRY_POINTS = (10_000, 1_000_000, 10_000_000, 50_000_000, 100_000_000)


def requests(n: int) -> Iterator[Request]:
    """``n`` distinct requests as a crawl of the sandbox web queues them.

    >>> r = next(requests(1))
    >>> r.url, r.meta["depth"]
    ('http://site-000.sandbox.test:8080/news/amber-oak-0.html', 3)
    """
    for i in range(n):
        host = f"site-{i % HOSTS:03d}.sandbox.test:8080"
        yield Request(
            f"http://{host}/news/amber-oak-{i // HOSTS}.html",
            meta={"depth": 3},
        )


def redis_bytes(client: redis.Redis) -> int:
    """``MEMORY USAGE`` of every key in the database, summed."""
    total = 0
    for key in client.scan_iter(count=1000):
        total += int(client.memory_usage(key, samples=0) or 0)
    return total


def _spider() -> Spider:
    crawler = get_crawler(Spider)
    spider = Spider("web")
    spider.crawler = crawler
    return spider


def stock_scrapy(n: int) -> dict[str, float]:
    """Python heap bytes of Scrapy's memory queue and fingerprint set."""
    from scrapy.core.scheduler import Scheduler
    from scrapy.dupefilters import RFPDupeFilter

    # ScrapyPriorityQueue: DownloaderAwarePriorityQueue needs a running
    # engine; per request both hold the same Request in a deque.
    crawler = get_crawler(
        Spider, {"SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue"}
    )
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(_spider())
    gc.collect()
    tracemalloc.start()
    opened = tracemalloc.get_traced_memory()[0]
    # The requests are built under the trace: in Scrapy a queued request is
    # the Request object itself.
    for r in requests(n):
        scheduler.enqueue_request(r)
    gc.collect()
    queued = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(scheduler) == n
    dupefilter = RFPDupeFilter.from_crawler(crawler)
    reqs = list(requests(n))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for r in reqs:
        dupefilter.request_seen(r)
    # The fingerprinter's per-request cache goes with the requests; the
    # fingerprints (20-byte digests in a set) stay; where the set is reachable
    # it is sized exactly (the cache's emptied table would count otherwise).
    del reqs
    gc.collect()
    seen = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    fingerprints = getattr(dupefilter, "_fingerprints", None)
    if isinstance(fingerprints, set):  # exact: the set and its digests
        seen = sys.getsizeof(fingerprints) + sum(map(sys.getsizeof, fingerprints))
    return {"queued": (queued - opened) / n, "seen": seen / n}


def scrapy_redis(url: str, n: int) -> dict[str, float]:
    from scrapy_redis.dupefilter import RFPDupeFilter
    from scrapy_redis.queue import PriorityQueue

    client = redis.Redis.from_url(url)
    spider = _spider()
    pipe = client.pipeline(transaction=False)
    queue = PriorityQueue(pipe, spider, "%(spider)s:requests")
    for i, r in enumerate(requests(n), 1):
        queue.push(r)  # ZADD on the pipeline: sent every BATCH pushes
        if i % BATCH == 0:
            pipe.execute()
    pipe.execute()
    queued = redis_bytes(client)
    dupefilter = RFPDupeFilter(client, "web:dupefilter")
    fps = [dupefilter.request_fingerprint(r) for r in requests(n)]
    for i in range(0, n, BATCH):
        client.sadd("web:dupefilter", *fps[i : i + BATCH])
    seen = redis_bytes(client) - queued
    client.close()
    return {"queued": queued / n, "seen": seen / n}


async def _commit(url: str, n: int) -> None:
    client = aredis.Redis.from_url(url)
    frontier = Frontier(client, "web")
    batch: list[QueuedRequest] = []
    for r in requests(n):
        batch.append(QueuedRequest(host_key(r), 0, request_to_bytes(r)))
        if len(batch) == BATCH:
            await frontier.commit(batch)
            batch = []
    await frontier.commit(batch)
    await client.aclose()


async def _commit_capped(url: str, n: int, cap: int, home: str) -> int:
    """Commit ``n`` requests as a worker does under ``cap`` (write ahead,
    commit, write the refused ones to the spill store); returns how many
    were spilled."""
    from extensions.core.frontier.spill import FrontierSpill

    client = aredis.Redis.from_url(url)
    crawler = get_crawler(
        Spider,
        {
            "FRONTIER_HOST_QUEUE_MAX": cap,
            "FRONTIER_MAX_MEMORY": 0,
            "FRONTIER_SPILL_BATCH": min(cap, defaults.FRONTIER_SPILL_BATCH),
            "FRONTIER_SPILL_STORE": "pipelines.stores.spill.PageStoreSpill",
            "SQLITE_PATH": f"{home}/pages.sqlite3",
        },
    )
    spill = FrontierSpill(crawler)
    frontier = Frontier(client, "web")
    spill.open([frontier])
    spilled = 0
    try:
        batch: list[QueuedRequest] = []
        for i, r in enumerate(requests(n), 1):
            batch.append(QueuedRequest(host_key(r), 0, request_to_bytes(r)))
            if len(batch) == BATCH or i == n:
                entry = f"b{i}"
                await frontier.log_ahead("bench", entry, batch)
                _, _, refused = await frontier.commit_capped(
                    batch, (), ("bench", entry), spill.cap(), spill.refill_below
                )
                if refused:
                    await spill.write(refused, entry, "bench")
                spilled += len(refused)
                batch = []
    finally:
        await spill.close()
        await client.aclose()
    return spilled


def spill_effect(url: str, n: int) -> dict[str, float]:
    """Redis bytes of ``n`` queued requests with the spill cap at a tenth of
    each host's share (the rest in a SQLite page store)."""
    cap = max(1, n // HOSTS // 10)
    with tempfile.TemporaryDirectory(prefix="bench-spill-") as home:
        spilled = asyncio.run(_commit_capped(url, n, cap, home))
    client = redis.Redis.from_url(url)
    total = redis_bytes(client)
    client.close()
    return {"cap": cap, "spilled": spilled, "bytes": total, "per_queued": total / n}


def webcrawl(url: str, n: int) -> dict[str, float]:
    asyncio.run(_commit(url, n))
    client = redis.Redis.from_url(url)
    queued = redis_bytes(client)
    config = BloomConfig(
        capacity=n, error_rate=defaults.BLOOM_ERROR_RATE, scalable=False
    )
    bloom = BloomFilter(client, "web", config)
    bloom.open()
    fingerprinter = get_crawler(Spider).request_fingerprinter
    batch: list[bytes] = []
    for r in requests(n):
        batch.append(fingerprinter.fingerprint(r))
        if len(batch) == BATCH:
            bloom.test_and_set(batch)
            batch = []
    bloom.test_and_set(batch)
    bloom.flush()
    seen = redis_bytes(client) - queued
    client.close()
    return {
        "queued": queued / n,
        "seen": seen / n,
        "bloom_bound": bloom_bound_bytes_per_item(defaults.BLOOM_ERROR_RATE),
    }


async def _check_pages(url: str, n: int) -> None:
    client = aredis.Redis.from_url(url)
    index = DuplicateIndex(client, "web")
    for i in range(n):
        digest = hashlib.sha256(f"page {i}".encode()).digest()
        simhash = int.from_bytes(digest[:8], "big")
        await index.check(f"{digest[8:28].hex()}", digest.hex(), simhash)
    await client.aclose()


def duplicate_index(url: str, n: int) -> dict[str, float]:
    """Redis bytes of the duplicate index after ``n`` distinct stored pages
    (page ids of 40 hex digits, SHA-256 content hashes, random SimHashes):
    a cache of ``NEARDUP_CACHE_PAGES`` pages, the page store holds the rest."""
    asyncio.run(_check_pages(url, n))
    client = redis.Redis.from_url(url)
    total = redis_bytes(client)
    client.close()
    cached = min(n, pipeline_defaults.NEARDUP_CACHE_PAGES)
    return {"total": total, "per_page": total / n, "per_cached_page": total / cached}


def _family(key: bytes) -> str:
    """>>> _family(b"web:bloom:{web:0}:1"), _family(b"web:{web}:q:http://a:80")
    ('bloom', 'frontier:q')
    """
    parts = key.decode().split(":")
    if len(parts) > 2 and parts[1].startswith("{"):
        return f"frontier:{parts[2]}"
    return parts[1] if len(parts) > 1 else parts[0]


def families(client: redis.Redis) -> dict[str, int]:
    """``MEMORY USAGE`` summed per key family (:func:`_family`)."""
    out: dict[str, int] = {}
    for key in client.scan_iter(count=1000):
        size = int(client.memory_usage(key, samples=0) or 0)
        out[_family(key)] = out.get(_family(key), 0) + size
    return dict(sorted(out.items()))


def crawl(pages: int, workers: int = 2, timeout: float = 900.0) -> dict[str, Any]:
    """A real crawl of ``pages`` sandbox pages (100 hosts, duplicates on) with
    the default settings and the storage pipeline (SQLite), on a fresh
    redis-server: its Redis memory at the end (``INFO memory`` used_memory
    over the empty server's, and ``MEMORY USAGE`` per key family) and the
    highest used_memory seen while it ran (sampled every 0.5 s), with its
    keys' ``MEMORY USAGE`` per family at that moment."""
    from sandbox.site import SiteSpec
    from tests.support.localcrawl import crawl_sandbox

    spec = SiteSpec(
        seed=4,
        hosts=100,
        pages_per_host=pages // 100,
        features=frozenset({"duplicates"}),
    )
    with tempfile.TemporaryDirectory(prefix="bench-crawl-memory-") as tmp:
        server = RedisProcess(tmp, appendonly=False).start()
        try:
            client = redis.Redis.from_url(server.url)
            empty = int(client.info("memory")["used_memory"])
            peak: dict[str, Any] = {"used": empty, "families": {}}

            def sample(procs: list[Any], web: Any) -> None:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    used = int(client.info("memory")["used_memory"])
                    if used > peak["used"]:
                        peak.update(used=used, families=families(client))
                    if all(p.poll() is not None for p in procs):
                        return
                    time.sleep(0.5)

            report = crawl_sandbox(
                spec,
                server.url,
                Path(tmp) / "home",
                workers=workers,
                settings={"MAX_IDLE_TIME_BEFORE_CLOSE": 5},
                timeout=timeout,
                during=sample,
            )
            used = int(client.info("memory")["used_memory"]) - empty
            at_end = families(client)
            client.close()
        finally:
            server.stop()
    fetched = len({(r["host"], r["path"]) for r in report.page_records})
    return {
        "pages": fetched,
        "used_memory": used,
        "peak_used_memory": peak["used"] - empty,
        "peak_families": peak["families"],
        "keys": sum(at_end.values()),
        "families": at_end,
        "per_page": used / max(fetched, 1),
        "codes": report.exit_codes,
        "seconds": report.seconds,
    }


def geometry(points: tuple[int, ...] = GEOMETRY_POINTS) -> list[dict[str, float]]:
    """The default Bloom geometry at ``points`` items: layers, MB, and the
    ratio of its bits to an optimal filter's at the compound bound."""
    config = BloomConfig()
    rows = []
    for n in points:
        layers = config.layers_for(n)
        rows.append(
            {
                "items": n,
                "layers": len(layers),
                "mb": sum(x.bits for x in layers) / 8 / 1e6,
                "bound": sum(x.error_rate for x in layers),
                "overhead": config.overhead(n),
            }
        )
    return rows


def measure(n: int, crawl_pages: int = 0) -> dict[str, dict[str, Any]]:
    """Bytes per queued request and per seen URL for the three systems;
    webcrawl's duplicate index, its Bloom geometry, and (``crawl_pages`` >
    0) a real crawl's Redis memory."""
    out: dict[str, dict[str, Any]] = {"scrapy": stock_scrapy(n)}
    for name, func in (
        ("scrapy-redis", scrapy_redis),
        ("webcrawl", webcrawl),
        ("dedup", duplicate_index),
        ("spill", spill_effect),
    ):
        with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
            server = RedisProcess(tmp, appendonly=False).start()
            try:
                out[name] = func(server.url, n)
            finally:
                server.stop()
    out["geometry"] = {"rows": geometry()}
    if crawl_pages:
        out["crawl"] = crawl(crawl_pages)
    return out


def report(n: int, out: dict[str, dict[str, Any]]) -> str:
    """The webcrawl rows as text (``python -m bench.memory``)."""
    web, dedup = out["webcrawl"], out["dedup"]
    lines = [
        f"{n:,} requests / pages",
        f"bytes per queued request              {web['queued']:.1f}",
        f"Bloom bytes per seen URL (sized for N) {web['seen']:.3f}"
        f" (bound {web['bloom_bound']:.3f})",
        f"duplicate index, Redis bytes total    {dedup['total']:,.0f}"
        f" ({dedup['per_cached_page']:.0f} B per cached page, cache of"
        f" {pipeline_defaults.NEARDUP_CACHE_PAGES:,})",
        f"duplicate index, Redis bytes per page {dedup['per_page']:.1f}",
        f"all-in per seen URL (Bloom + index)   {web['seen'] + dedup['per_page']:.2f}",
        *spill_lines(n, out),
        "",
        "default Bloom geometry: items, layers, MB, compound bound, bits/optimal",
    ]
    for row in out["geometry"]["rows"]:
        lines.append(
            f"  {row['items']:>13,} {row['layers']:>2} {row['mb']:>9.2f}"
            f" {row['bound']:.5f} {row['overhead']:.3f}"
        )
    if "crawl" in out:
        c = out["crawl"]
        lines += [
            "",
            f"crawl of {c['pages']:,} pages in {c['seconds']:.0f} s (2 workers,"
            f" exit codes {c['codes']}):",
            "  Redis used_memory at the end, over an empty server "
            f"{c['used_memory']:,} B ({c['per_page']:.0f} B per page)",
            f"  highest used_memory while crawling                 "
            f"{c['peak_used_memory']:,} B; its keys: "
            + ", ".join(f"{k} {v:,}" for k, v in c["peak_families"].items()),
            f"  MEMORY USAGE of every key {c['keys']:,} B: "
            + ", ".join(f"{k} {v:,}" for k, v in c["families"].items()),
        ]
    return "\n".join(lines)


def spill_lines(n: int, out: dict[str, dict[str, Any]]) -> list[str]:
    """The spill effect's rows of :func:`report`."""
    if "spill" not in out:
        return []
    sp, without = out["spill"], out["webcrawl"]["queued"] * n
    return [
        f"{n:,} queued, FRONTIER_HOST_QUEUE_MAX={sp['cap']:,} (10x past it), "
        f"{sp['spilled']:,} in the page store:",
        f"  Redis bytes with the cap {sp['bytes']:,.0f} ({sp['per_queued']:.1f} B"
        f" per queued request), without {without:,.0f}"
        f" ({out['webcrawl']['queued']:.1f} B): x{sp['bytes'] / without:.2f}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--n", type=int, default=50_000, help="requests and pages")
    parser.add_argument(
        "--crawl-pages", type=int, default=10_000, help="sandbox crawl (0: none)"
    )
    args = parser.parse_args(argv)
    print(report(args.n, measure(args.n, args.crawl_pages)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
