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

Reads no settings (``extensions.defaults`` gives the Bloom error rate).
"""

from __future__ import annotations

import asyncio
import gc
import sys
import tempfile
import tracemalloc
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio as aredis
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from extensions import defaults
from extensions.bloom import BloomConfig, BloomFilter, bloom_bound_bytes_per_item
from extensions.embedded_redis import RedisProcess
from extensions.frontier import Frontier, QueuedRequest
from extensions.hosts import host_key
from extensions.serialization import request_to_bytes

if TYPE_CHECKING:
    from collections.abc import Iterator

HOSTS = 100
BATCH = 1000


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


def measure(n: int) -> dict[str, dict[str, Any]]:
    """Bytes per queued request and per seen URL for the three systems."""
    out: dict[str, dict[str, Any]] = {"scrapy": stock_scrapy(n)}
    for name, func in (("scrapy-redis", scrapy_redis), ("webcrawl", webcrawl)):
        with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
            server = RedisProcess(tmp, appendonly=False).start()
            try:
                out[name] = func(server.url, n)
            finally:
                server.stop()
    return out
