"""The fleet-wide per-host lock: the Redis scripts, the middleware, and real
crawls of two workers against one loopback web server."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from scrapy import Spider
from scrapy.exceptions import NotConfigured
from scrapy.http import Request
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from extensions import keys
from extensions.hosts import HostRecord, host_key
from extensions.politeness import (
    ACQUIRED,
    DOWNLOADER_MIDDLEWARES,
    HELD,
    PARKED,
    HostLock,
    PolitenessMiddleware,
)
from webcrawl import defaults

ROOT = Path(__file__).resolve().parent.parent
HOST = "http://a.test:80"

# -- a loopback web server that logs when each request arrives ---------------

Route = Callable[[BaseHTTPRequestHandler], tuple[int, dict[str, str], bytes]]


class LogServer:
    """http.server in a thread on an ephemeral port; ``log`` holds
    ``(monotonic time, path)`` of each request as it arrives."""

    def __init__(self, routes: dict[str, Route] | None = None) -> None:
        self.routes = routes or {}
        self.log: list[tuple[float, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.log.append((time.monotonic(), self.path))
                route = server.routes.get(self.path)
                if route is None:
                    status, headers, body = 200, dict[str, str](), b"<html>ok</html>"
                else:
                    status, headers, body = route(self)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> LogServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def times(self, prefix: str) -> list[float]:
        return sorted(t for t, path in self.log if path.startswith(prefix))


SPIDER = """
import json, os
import scrapy

class TestSpider(scrapy.Spider):
    name = "web"

    async def start(self):
        for url in json.loads(os.environ["TEST_URLS"]):
            yield scrapy.Request(url, dont_filter=True, errback=self.failed)

    def parse(self, response):
        pass

    def failed(self, failure):
        pass

    def closed(self, reason):
        with open(os.environ["TEST_STATS"], "w") as f:
            json.dump(self.crawler.stats.get_stats(), f, default=str)
"""


def start_crawl(
    tmp: Path, name: str, redis_url: str, urls: list[str], **settings: Any
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start ``scrapy runspider`` of a tiny spider with webcrawl's politeness
    middlewares; returns the process and the path its stats will be at."""
    spider = tmp / "spider.py"
    spider.write_text(SPIDER)
    stats = tmp / f"{name}.stats.json"
    base = {
        "REDIS_URL": redis_url,
        "DOWNLOADER_MIDDLEWARES": json.dumps(DOWNLOADER_MIDDLEWARES),
        "TELNETCONSOLE_ENABLED": "False",
        "LOG_LEVEL": "INFO",
        "USER_AGENT": defaults.WEBCRAWL_USER_AGENT,
        "CONCURRENT_REQUESTS": "16",
    }
    base.update({k: str(v) for k, v in settings.items()})
    args = [sys.executable, "-m", "scrapy", "runspider", str(spider)]
    for k, v in base.items():
        args += ["-s", f"{k}={v}"]
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(ROOT),
        TEST_URLS=json.dumps(urls),
        TEST_STATS=str(stats),
    )
    with open(tmp / f"{name}.log", "wb") as log:
        proc = subprocess.Popen(args, cwd=tmp, env=env, stdout=log, stderr=log)
    return proc, stats


def finish(tmp: Path, name: str, proc: subprocess.Popen[bytes], stats: Path) -> dict:
    proc.wait(60)
    log = (tmp / f"{name}.log").read_text()
    assert proc.returncode == 0, log
    assert "Traceback" not in log, log
    return dict(json.loads(stats.read_text()))


def crawl(
    tmp: Path, redis_url: str, urls: list[str], **settings: Any
) -> dict[str, Any]:
    proc, stats = start_crawl(tmp, "w0", redis_url, urls, **settings)
    return finish(tmp, "w0", proc, stats)


# -- the lock scripts on a real Redis ----------------------------------------


async def _lock(redis_url: str) -> tuple[aredis.Redis, HostLock]:
    client = aredis.Redis.from_url(redis_url)
    return client, HostLock(client, "web", quiet_ms=1_800_000)


def test_px_granularity_150ms(redis_url: str, redis_client: redis.Redis) -> None:
    async def main() -> None:
        client, lock = await _lock(redis_url)
        assert (await lock.acquire(HOST, HOST, "t1", 150))[:2] == (ACQUIRED, 150)
        pttl = redis_client.pttl(keys.host_lock("web", HOST))
        assert 100 < pttl <= 150
        code, ms, _ = await lock.acquire(HOST, HOST, "t2", 150)
        assert code == HELD and 0 < ms <= 150
        await asyncio.sleep(ms / 1000 + 0.01)
        assert (await lock.acquire(HOST, HOST, "t2", 150))[0] == ACQUIRED
        await client.aclose()

    asyncio.run(main())


def test_release_and_extend_only_by_owner(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def main() -> None:
        client, lock = await _lock(redis_url)
        assert (await lock.acquire(HOST, HOST, "owner", 10_000))[0] == ACQUIRED
        assert not await lock.release(HOST, "intruder")
        assert not await lock.extend(HOST, "intruder", 50_000)
        assert redis_client.get(keys.host_lock("web", HOST)) == b"owner"
        assert await lock.extend(HOST, "owner", 50_000)
        assert redis_client.pttl(keys.host_lock("web", HOST)) > 10_000
        assert await lock.release(HOST, "owner")
        assert redis_client.exists(keys.host_lock("web", HOST)) == 0
        await client.aclose()

    asyncio.run(main())


def test_spacing_comes_from_the_host_record(
    redis_url: str, redis_client: redis.Redis
) -> None:
    record = keys.FrontierKeys("web").host(HOST)
    lock_key = keys.host_lock("web", HOST)

    async def main() -> None:
        client, lock = await _lock(redis_url)
        # No delay anywhere: no lock is set.
        assert (await lock.acquire(HOST, HOST, "t", 0))[:2] == (ACQUIRED, 0)
        assert redis_client.exists(lock_key) == 0
        # The robots delay beats the default.
        redis_client.hset(record, "delay", 700)
        assert (await lock.acquire(HOST, HOST, "t", 100))[:2] == (ACQUIRED, 700)
        redis_client.delete(lock_key)
        # A fresh back-off beats the delay; a forgiven one does not.
        now = int(redis_client.time()[0]) * 1000
        redis_client.hset(record, mapping={"backoff": 5000, "backoff_at": now})
        assert (await lock.acquire(HOST, HOST, "t", 100))[:2] == (ACQUIRED, 5000)
        redis_client.delete(lock_key)
        redis_client.hset(record, "backoff_at", now - 1_900_000)
        assert (await lock.acquire(HOST, HOST, "t", 100))[:2] == (ACQUIRED, 700)
        redis_client.delete(lock_key)
        # A park wins over everything and sets no lock.
        redis_client.hset(record, mapping={"park": now + 60_000, "fails": 3})
        code, ms, fails = await lock.acquire(HOST, HOST, "t", 100)
        assert code == PARKED and 50_000 < ms <= 61_000 and fails == 3
        assert redis_client.exists(lock_key) == 0
        await client.aclose()

    asyncio.run(main())
    assert HostRecord(delay=700).spacing(100, 0, 1) == 700


def test_concurrent_acquirers_never_start_within_the_delay(redis_url: str) -> None:
    """Six clients (own connections) race for one host's 150 ms lock, each
    waiting out the PTTL it is told; no two acquisitions are closer than the
    delay, and the lock is not left idle much either."""
    delay = 150
    acquired: list[float] = []

    async def worker(lock: HostLock, n: int) -> None:
        token = f"w{n}"
        for _ in range(3):
            while True:
                code, ms, _ = await lock.acquire(HOST, HOST, token, delay)
                if code == ACQUIRED:
                    acquired.append(time.monotonic())
                    break
                await asyncio.sleep(ms / 1000)

    async def main() -> None:
        clients = [aredis.Redis.from_url(redis_url) for _ in range(6)]
        locks = [HostLock(c, "web", 1_800_000) for c in clients]
        await asyncio.gather(*(worker(lock, n) for n, lock in enumerate(locks)))
        for c in clients:
            await c.aclose()

    asyncio.run(main())
    acquired.sort()
    gaps = [b - a for a, b in itertools.pairwise(acquired)]
    assert len(acquired) == 18
    # A few ms of slack for the client-side clock of the replies.
    assert min(gaps) >= (delay - 5) / 1000, gaps
    assert sum(gaps) / len(gaps) < 2 * delay / 1000, gaps


# -- the middleware ------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({"POLITENESS_ENABLED": False}, "POLITENESS_ENABLED"),
        ({"POLITENESS_KEY": "port"}, "POLITENESS_KEY"),
    ],
)
def test_not_configured(settings: dict[str, Any], reason: str) -> None:
    with pytest.raises(NotConfigured, match=reason):
        PolitenessMiddleware.from_crawler(get_crawler(settings_dict=settings))


def _middleware(redis_url: str, **settings: Any) -> PolitenessMiddleware:
    crawler = get_crawler(Spider, settings_dict={"REDIS_URL": redis_url, **settings})
    crawler.spider = Spider("web")
    crawler.stats = MemoryStatsCollector(crawler)
    return PolitenessMiddleware.from_crawler(crawler)


@pytest.mark.parametrize(
    ("mode", "url", "expected"),
    [
        ("host", "https://www.Example.co.uk/a", "https://www.example.co.uk:443"),
        ("domain", "https://www.example.co.uk/a", "example.co.uk"),
        ("domain", "http://127.0.0.1:8080/", "127.0.0.1"),
        ("ip", "http://localhost:8080/", "127.0.0.1"),
    ],
)
def test_lock_id_modes(redis_url: str, mode: str, url: str, expected: str) -> None:
    mw = _middleware(redis_url, POLITENESS_KEY=mode)
    request = Request(url)
    assert asyncio.run(mw.lock_id(request, host_key(request))) == expected


def test_middleware_waits_and_counts(redis_url: str) -> None:
    mw = _middleware(redis_url, DOWNLOAD_DELAY=0.15)

    async def main() -> list[float]:
        started = []
        for n in range(3):
            request = Request(f"http://a.test/{n}")
            assert await mw.process_request(request) is None
            started.append(time.monotonic())
            assert request.meta["politeness_lock"]["spacing_ms"] == 150
            # The fetch completes: the lock now lasts one spacing from here.
            assert await mw.process_response(request, "response") == "response"
        await mw.lock.client.aclose()
        return started

    started = asyncio.run(main())
    assert started[2] - started[0] >= 0.29
    stats = mw.crawler.stats
    assert stats is not None
    assert stats.get_value("politeness/lock_acquired") == 3
    assert stats.get_value("politeness/lock_waits") >= 2
    assert stats.get_value("politeness/lock_wait_ms") >= 250


def test_middleware_defers_a_parked_host(
    redis_url: str, redis_client: redis.Redis
) -> None:
    mw = _middleware(redis_url, POLITENESS_MAX_WAIT=1.0)
    now = int(redis_client.time()[0]) * 1000
    redis_client.hset(keys.FrontierKeys("web").host(HOST), "park", now + 60_000)

    async def main() -> Any:
        result = await mw.process_request(Request("http://a.test/x"))
        await mw.lock.client.aclose()
        return result

    result = asyncio.run(main())
    assert isinstance(result, Request)
    assert result.dont_filter and result.meta["politeness_deferrals"] == 1
    assert mw.crawler.stats.get_value("politeness/deferred/parked") == 1


# -- real crawls ---------------------------------------------------------------


@pytest.fixture
def site() -> Iterator[LogServer]:
    robots = b"User-agent: *\nDisallow: /private\n"
    with LogServer({"/robots.txt": lambda h: (200, {}, robots)}) as server:
        yield server


@pytest.mark.slow
def test_two_workers_share_the_delay_and_robots(
    tmp_path: Path, redis_url: str, site: LogServer
) -> None:
    """Two crawler processes fetch one host: downloads start >= DOWNLOAD_DELAY
    apart across both, robots.txt is fetched once, /private never."""
    urls = [f"{site.url}/page/{n}" for n in range(6)] + [f"{site.url}/private/1"]
    procs = [
        start_crawl(tmp_path, f"w{n}", redis_url, urls, DOWNLOAD_DELAY=0.2)
        for n in range(2)
    ]
    stats = [finish(tmp_path, f"w{n}", *p) for n, p in enumerate(procs)]
    starts = sorted(site.times("/"))
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(site.times("/page/")) == 12
    assert site.times("/private") == []
    assert len(site.times("/robots.txt")) == 1
    assert min(gaps) >= 0.19, gaps
    assert sum(s.get("robotstxt/forbidden", 0) for s in stats) == 2
    assert sum(s.get("politeness/lock_waits", 0) for s in stats) > 0
