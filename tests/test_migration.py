"""``scrapy migrate_from_scrapy_redis``: a crawl scrapy-redis queued, moved
into webcrawl's frontier and finished by webcrawl workers.

scrapy-redis writes its own data in each test: its queue classes
(``PriorityQueue``, ``FifoQueue``, ``LifoQueue``) push the requests with its
pickle serializer or a JSON one (:mod:`tests.srjson`), its ``RFPDupeFilter``
records their fingerprints. A real redis-server; the command and the
workers are real subprocesses; the end-to-end tests crawl the sandbox web
and judge on its request record.
"""

from __future__ import annotations

import asyncio
import os
import pickle
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio as aredis
from scrapy import Request
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy_redis import picklecompat
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.queue import FifoQueue, LifoQueue, PriorityQueue

from extensions.core import migration
from extensions.core.bloom import AsyncBloomFilter, BloomConfig
from extensions.core.frontier.lua import priority_from_score
from extensions.core.migration import ScrapyRedisCrawl, frontier_for
from extensions.keys import FrontierKeys
from sandbox.process import SandboxProcess
from sandbox.site import SiteSpec
from tests import srjson
from tests.support.fleet import start_worker, wait_all
from tests.support.localcrawl import reset_crawl, sandbox_settings
from tests.support.tools import run_scrapy
from tests.utils import get_crawler
from webcrawl.spiders.web import WebSpider

if TYPE_CHECKING:
    import subprocess

    from scrapy.crawler import Crawler

    from extensions.core.migration import DupefilterReport, MoveReport

ROOT = Path(__file__).resolve().parent.parent
QUEUES = {"priority": PriorityQueue, "fifo": FifoQueue, "lifo": LifoQueue}
SERIALIZERS = {"pickle": picklecompat, "json": srjson}
PRIORITIES = [0, 5, 0, -3, 10, 5, 0, 7, -3, 0, 5, 1]


def queue_settings(queue: str, serializer: str) -> dict[str, str]:
    return {
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{QUEUES[queue].__name__}",
        "SCHEDULER_SERIALIZER": SERIALIZERS[serializer].__name__,
    }


def web_crawler(redis_url: str, **settings: Any) -> Crawler:
    """The ``web`` spider's crawler, its spider built (the requests' callbacks
    are its methods) and its request fingerprinter set."""
    crawler = get_crawler(
        WebSpider,
        {"REDIS_URL": redis_url, "FRONTIER_PRIORITY_FUNCTION": "", **settings},
    )
    crawler.spider = WebSpider.from_crawler(crawler)
    crawler.request_fingerprinter = build_from_crawler(
        load_object(crawler.settings["REQUEST_FINGERPRINTER_CLASS"]), crawler
    )
    return crawler


def scrapy_redis_queues(
    redis_url: str, crawler: Crawler, queue: str, serializer: str, urls: list[str]
) -> list[Request]:
    """scrapy-redis queues ``urls`` (priorities from :data:`PRIORITIES`) with
    its own queue class and serializer, and records their fingerprints with
    its own dupefilter, as its scheduler does; returns the requests in the
    order scrapy-redis itself pops them (from a copy of the queue)."""
    client = redis.Redis.from_url(redis_url)
    spider = crawler.spider
    module = SERIALIZERS[serializer]
    queues = [
        QUEUES[queue](client, spider, key, serializer=module)
        for key in ("%(spider)s:requests", "reference:%(spider)s")
    ]
    dupefilter = RFPDupeFilter(client, "web:dupefilter")
    for i, url in enumerate(urls):
        request = Request(
            url, priority=PRIORITIES[i % len(PRIORITIES)], errback=spider.on_error
        )
        dupefilter.request_seen(request)
        for q in queues:
            q.push(request)
    popped = []
    while (request := queues[1].pop()) is not None:
        popped.append(request)
    client.close()
    return popped


def expected_order(popped: list[Request], host: str) -> list[tuple[str, int]]:
    """One host's requests in the order webcrawl serves them: higher priority
    first, scrapy-redis's own order within one."""
    mine = [r for r in popped if f"//{host}/" in r.url or r.url.endswith(f"//{host}")]
    return [(r.url, r.priority) for r in sorted(mine, key=lambda r: -r.priority)]


def frontier_order(client: redis.Redis, hostkey: str) -> list[tuple[str, int]]:
    queued = client.zrange(FrontierKeys("web").queue(hostkey), 0, -1, withscores=True)
    return [
        (member.split(b"\n", 1)[0].decode(), priority_from_score(score))
        for member, score in queued
    ]


def move(
    redis_url: str,
    crawler: Crawler,
    *,
    trust_pickle: bool = True,
    dupefilter: bool = True,
) -> tuple[MoveReport, DupefilterReport | None]:
    async def body() -> tuple[MoveReport, DupefilterReport | None]:
        client = aredis.Redis.from_url(redis_url)
        try:
            assert crawler.spider is not None
            crawl = ScrapyRedisCrawl(
                client,
                crawler.spider,
                crawler.settings,
                crawler.request_fingerprinter.fingerprint,
                trust_pickle=trust_pickle,
            )
            frontier = await frontier_for(client, "web", crawler.settings)
            report = await crawl.move_requests(frontier)
            dupes = await crawl.load_dupefilter() if dupefilter else None
            return report, dupes
        finally:
            await client.aclose()

    return asyncio.run(body())


URLS = [f"http://{h}.test/p/{i}" for i in range(12) for h in ("a", "b")]


@pytest.mark.parametrize("serializer", sorted(SERIALIZERS))
@pytest.mark.parametrize("queue", sorted(QUEUES))
def test_each_queue_and_serializer_is_moved_in_its_order_keeping_priorities(
    redis_client: redis.Redis, redis_url: str, queue: str, serializer: str
) -> None:
    crawler = web_crawler(redis_url, **queue_settings(queue, serializer))
    popped = scrapy_redis_queues(redis_url, crawler, queue, serializer, URLS)
    report, _ = move(redis_url, crawler, trust_pickle=serializer == "pickle")
    assert (report.read, report.queued, report.seen, report.left) == (24, 24, 0, 0)
    for host in ("a.test", "b.test"):
        assert frontier_order(redis_client, f"http://{host}:80") == expected_order(
            popped, host
        )
    # Moved, not copied; the move's worker left the registry, its
    # write-ahead entries went with their commits.
    assert not redis_client.exists("web:requests")
    keys = FrontierKeys("web")
    assert redis_client.zcard(keys.workers) == 0
    assert not list(redis_client.scan_iter(match=keys.wal_prefix + "*"))


def test_a_moved_request_keeps_its_callbacks_and_meta(redis_url: str) -> None:
    crawler = web_crawler(redis_url)
    client = redis.Redis.from_url(redis_url)
    PriorityQueue(client, crawler.spider, "%(spider)s:requests").push(
        Request(
            "http://a.test/x",
            errback=crawler.spider.on_error,  # type: ignore[union-attr]
            meta={"depth": 3, "mine": [1, "two"]},
            headers={"Accept-Language": "fr"},
            priority=4,
        )
    )
    move(redis_url, crawler)
    [(member, score)] = client.zrange(
        FrontierKeys("web").queue("http://a.test:80"), 0, -1, withscores=True
    )
    client.close()
    from extensions.core.frontier.serialization import request_from_bytes

    request = request_from_bytes(member, crawler.spider, priority_from_score(score))
    assert request.url == "http://a.test/x"
    assert request.errback == crawler.spider.on_error  # type: ignore[union-attr]
    assert request.meta == {"depth": 3, "mine": [1, "two"]}
    assert request.headers["Accept-Language"] == b"fr"
    assert request.priority == 4


def test_a_second_run_moves_nothing(redis_client: redis.Redis, redis_url: str) -> None:
    crawler = web_crawler(redis_url)
    scrapy_redis_queues(redis_url, crawler, "priority", "pickle", URLS)
    move(redis_url, crawler)
    before = frontier_order(redis_client, "http://a.test:80")
    report, _ = move(redis_url, crawler)
    assert (report.read, report.queued) == (0, 0)
    assert frontier_order(redis_client, "http://a.test:80") == before


@pytest.mark.parametrize("where", ["commit", "remove"])
def test_a_move_stopped_midway_loses_nothing_and_queues_nothing_twice(
    redis_client: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """Stopped before a batch's commit (it is in the write-ahead entry, which
    a live worker queues once the stopped move's heartbeat is old), or after
    the commit and before the batch left scrapy-redis's key (a re-run finds
    it and the dupefilter drops it as queued): a re-run finishes the move,
    every request queued once."""
    monkeypatch.setattr(migration, "BATCH", 5)
    crawler = web_crawler(redis_url, **queue_settings("fifo", "pickle"))
    scrapy_redis_queues(redis_url, crawler, "fifo", "pickle", URLS)
    calls = {"n": 0}
    target = migration.PartitionedFrontier if where == "commit" else ScrapyRedisCrawl
    name = "commit" if where == "commit" else "_remove"
    real = getattr(target, name)

    async def failing(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise redis.ConnectionError("the move's process stops here")
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(target, name, failing)
    with pytest.raises(redis.ConnectionError):
        move(redis_url, crawler)
    monkeypatch.setattr(target, name, real)
    report, _ = move(redis_url, crawler)
    assert not redis_client.exists("web:requests")

    async def recover() -> None:
        # What any live worker's scheduler does at its heartbeat.
        client = aredis.Redis.from_url(redis_url)
        frontier = await frontier_for(client, "web", crawler.settings)
        await frontier.recover(dead_after_ms=0)
        await client.aclose()

    asyncio.run(recover())
    queued = [
        url
        for host in ("a.test", "b.test")
        for url, _ in frontier_order(redis_client, f"http://{host}:80")
    ]
    assert sorted(queued) == sorted(URLS)  # each once
    assert report.seen == 5  # the stopped batch, dropped as already queued


def test_pickle_is_not_read_without_trust(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    crawler = web_crawler(redis_url)
    scrapy_redis_queues(redis_url, crawler, "priority", "pickle", URLS[:3])
    result = command(tmp_path, redis_url)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "CWE-502" in lines[0] and "--trust-pickle" in lines[0]
    assert "Traceback" not in result.stderr
    assert redis_client.zcard("web:requests") == 3  # nothing moved
    assert not redis_client.exists(FrontierKeys("web").ready)


def test_a_pickle_looking_entry_is_refused_whatever_the_serializer_says(
    redis_client: redis.Redis, redis_url: str
) -> None:
    crawler = web_crawler(redis_url, SCHEDULER_SERIALIZER="tests.srjson")
    redis_client.zadd("web:requests", {pickle.dumps({"url": "http://a.test/"}): 0})
    with pytest.raises(migration.UntrustedPickle):
        move(redis_url, crawler, trust_pickle=False)


def test_entries_it_cannot_read_are_left_with_why(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    crawler = web_crawler(redis_url)
    scrapy_redis_queues(redis_url, crawler, "priority", "pickle", URLS[:4])
    gone = picklecompat.dumps(
        {**Request("http://a.test/gone").to_dict(), "callback": "gone"}
    )
    redis_client.zadd("web:requests", {b"\x80\x05not a pickle": -1, gone: -1})
    result = command(tmp_path, redis_url, "--trust-pickle")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "4 queued in the frontier" in result.stdout
    assert "2 left in web:requests" in result.stdout
    assert "left (unreadable): UnpicklingError" in result.stdout
    assert "left (unreadable): ValueError: Method 'gone' not found" in result.stdout
    assert redis_client.zcard("web:requests") == 2


# -- the dupefilter --------------------------------------------------------------


class ScrapyRedisFingerprinter:
    """A project's REQUEST_FINGERPRINTER_CLASS that computes scrapy-redis's
    fingerprint (SHA-1 of method, canonical URL and body), as bytes."""

    def fingerprint(self, request: Request) -> bytes:
        return bytes.fromhex(RFPDupeFilter.request_fingerprint(None, request))  # type: ignore[arg-type]


def test_fingerprints_of_another_function_are_left_alone_saying_why(
    redis_client: redis.Redis, redis_url: str
) -> None:
    crawler = web_crawler(redis_url)
    scrapy_redis_queues(redis_url, crawler, "priority", "pickle", URLS[:4])
    _, dupes = move(redis_url, crawler)
    assert dupes is not None
    assert (dupes.fingerprints, dupes.matched, dupes.loaded) == (4, False, 0)
    assert "scrapy-redis's fingerprint is" in dupes.why_not
    assert redis_client.scard("web:dupefilter") == 4  # left as it was


def test_fingerprints_of_the_same_function_are_loaded_into_the_bloom_filter(
    redis_client: redis.Redis, redis_url: str
) -> None:
    crawler = web_crawler(
        redis_url,
        REQUEST_FINGERPRINTER_CLASS=f"{__name__}.ScrapyRedisFingerprinter",
    )
    # URLs scrapy-redis crawled (in its dupefilter, not queued) and queued.
    crawled = [f"http://a.test/done/{i}" for i in range(50)]
    dupefilter = RFPDupeFilter(redis_client, "web:dupefilter")
    for url in crawled:
        dupefilter.request_seen(Request(url))
    scrapy_redis_queues(redis_url, crawler, "priority", "pickle", URLS[:4])
    report, dupes = move(redis_url, crawler)
    assert report.queued == 4
    assert dupes is not None and dupes.matched
    # The queued requests' fingerprints were in the filter already (marked
    # as they were queued); the crawled ones are new to it.
    assert (dupes.fingerprints, dupes.loaded, dupes.known) == (54, 50, 4)

    async def seen() -> list[bool]:
        client = aredis.Redis.from_url(redis_url)
        bloom = AsyncBloomFilter(
            client, "web", BloomConfig.from_settings(crawler.settings)
        )
        fingerprint = ScrapyRedisFingerprinter().fingerprint
        fps = [fingerprint(Request(u)) for u in [*crawled, "http://a.test/never"]]
        try:
            return await bloom.contains(fps)
        finally:
            await client.aclose()

    assert asyncio.run(seen()) == [True] * 50 + [False]


# -- the command -----------------------------------------------------------------


def command(
    tmp_path: Path, redis_url: str, *args: str, settings: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    options = [
        a
        for k, v in {"FRONTIER_PRIORITY_FUNCTION": "", **(settings or {})}.items()
        for a in ("-s", f"{k}={v}")
    ]
    return run_scrapy(
        ["migrate_from_scrapy_redis", "web", *args, *options],
        {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "REDIS_URL": redis_url,
            "WEBCRAWL_HOME": str(tmp_path / "home"),
            "SCRAPY_SETTINGS_MODULE": "webcrawl.settings",
        },
        timeout=120,
    )


def test_the_dry_run_reports_types_counts_and_the_serializer_and_changes_nothing(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    crawler = web_crawler(redis_url, **queue_settings("fifo", "json"))
    scrapy_redis_queues(redis_url, crawler, "fifo", "json", URLS[:5])
    redis_client.sadd("web:start_urls", "http://a.test/seed")
    redis_client.delete("reference:web")
    before = {k: redis_client.dump(k) for k in redis_client.keys("*")}
    result = command(
        tmp_path, redis_url, "--dry-run", settings=queue_settings("fifo", "json")
    )
    assert result.returncode == 2, result.stderr  # the seed key's type is wrong
    out = result.stdout
    assert "web:requests                 list           5  requests" in out
    assert (
        "web:dupefilter               set            5  fingerprints: left alone" in out
    )
    assert "web:start_urls               set            1  seeds" in out
    assert "serializer   tests.srjson; entries found: JSON" in out
    assert "--trust-pickle" not in out
    assert "PROBLEM: web:start_urls is a set: set REDIS_START_URLS_AS_SET=True" in out
    assert "Nothing changed (--dry-run)." in out
    assert {k: redis_client.dump(k) for k in redis_client.keys("*")} == before


# -- finished by webcrawl workers ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("queue", "serializer"),
    [("priority", "pickle"), ("fifo", "json"), ("lifo", "pickle")],
)
def test_a_migrated_crawl_is_finished_by_webcrawl_workers(
    redis_client: redis.Redis,
    redis_url: str,
    tmp_path: Path,
    queue: str,
    serializer: str,
) -> None:
    """Every URL scrapy-redis queued is fetched once, each host's in the
    order of their priorities: queued so (the frontier's scores, exactly),
    and served so (the sandbox's record of what it served). robots.txt is
    off here so that no request of a host waits on its robots.txt with the
    next ones (their order among themselves is then a race, not the
    frontier's), and every URL of the site is queued (the private ones
    too), so that no link leads to a URL scrapy-redis had not queued."""
    spec = SiteSpec(seed=43, hosts=2, pages_per_host=8)
    reset_crawl(redis_url)
    srsettings = queue_settings(queue, serializer)
    with SandboxProcess(spec, directory=tmp_path, max_seconds=300) as web:
        urls = sorted(web.reachable_urls(respect_robots=False))
        crawler = web_crawler(redis_url, **srsettings)
        popped = scrapy_redis_queues(redis_url, crawler, queue, serializer, urls)
        redis_client.delete("reference:web")
        trust = ["--trust-pickle"] if serializer == "pickle" else []
        result = command(tmp_path, redis_url, *trust, settings=srsettings)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"{len(urls)} queued in the frontier" in result.stdout
        hosts = sorted({u.split("/")[2] for u in urls})
        for host in hosts:
            assert frontier_order(redis_client, f"http://{host}") == expected_order(
                popped, host
            )
        settings = {
            **sandbox_settings(redis_url, tmp_path),
            "FRONTIER_PRIORITY_FUNCTION": "",
            "ROBOTSTXT_OBEY": False,  # robots.txt off (Scrapy's meaning)
            "DOWNLOAD_DELAY": 0.5,
            "MAX_IDLE_TIME_BEFORE_CLOSE": 3,
        }
        worker = start_worker(settings, tmp_path / "logs" / "worker.log")
        codes = wait_all([worker], 240)
        web.stop()
        records = web.records()
        port = web.port
    assert codes == [0], (tmp_path / "logs" / "worker.log").read_text()[-3000:]
    fetched = [f"http://{r['host']}:{port}{r['path']}" for r in records]
    assert Counter(fetched) == Counter(urls)  # every queued URL, once
    priority = {r.url: r.priority for r in popped}
    for host in hosts:
        served = [u for u in fetched if f"//{host}/" in u]
        wanted = [u for u, _ in expected_order(popped, host)]
        assert served == wanted, [(u, priority[u]) for u in served]
    assert redis_client.zcard(FrontierKeys("web").leases) == 0
