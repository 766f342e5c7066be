"""Back-off on 429/503 (Retry-After in both forms) and the circuit breaker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import Spider
from scrapy.exceptions import DownloadConnectionRefusedError, NotConfigured
from scrapy.http import HtmlResponse, Request
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from extensions import keys
from extensions.backoff import BackoffMiddleware
from extensions.politeness import DOWNLOADER_MIDDLEWARES

if TYPE_CHECKING:
    import redis

ROOT = Path(__file__).resolve().parent.parent
HOST = "http://a.test:80"
RECORD = keys.FrontierKeys("web").host(HOST)


def _mw(redis_url: str, **settings: Any) -> BackoffMiddleware:
    crawler = get_crawler(Spider, settings_dict={"REDIS_URL": redis_url, **settings})
    crawler.spider = Spider("web")
    crawler.stats = MemoryStatsCollector(crawler)
    return BackoffMiddleware.from_crawler(crawler)


def _now(client: redis.Redis) -> int:
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


@pytest.mark.parametrize(
    "settings",
    [{"BACKOFF_ENABLED": False}, {"BACKOFF_INITIAL": 0}, {"BREAKER_THRESHOLD": 0}],
)
def test_not_configured(settings: dict[str, Any]) -> None:
    with pytest.raises(NotConfigured):
        BackoffMiddleware.from_crawler(get_crawler(settings_dict=settings))


def test_escalation_doubles_caps_and_is_forgiven(
    redis_url: str, redis_client: redis.Redis
) -> None:
    mw = _mw(redis_url, BACKOFF_INITIAL=0.1, BACKOFF_MAX=0.35, BACKOFF_JITTER=0)
    req = Request("http://a.test/x")

    async def hit(status: int = 429) -> None:
        await mw.process_response(req, HtmlResponse(req.url, status=status))

    async def main() -> list[int]:
        seen = []
        await hit()
        seen.append(int(redis_client.hget(RECORD, "backoff") or 0))
        await hit(503)  # inside the window: the same burst, no doubling
        seen.append(int(redis_client.hget(RECORD, "backoff") or 0))
        for _ in range(3):
            await asyncio.sleep(seen[-1] / 1000 + 0.01)
            await hit()
            seen.append(int(redis_client.hget(RECORD, "backoff") or 0))
        await mw.backoff.client.aclose()
        return seen

    assert asyncio.run(main()) == [100, 100, 200, 350, 350]
    park = int(redis_client.hget(RECORD, "park") or 0)
    assert _now(redis_client) < park <= _now(redis_client) + 350
    assert mw.crawler.stats.get_value("backoff/raised") == 4
    # After the quiet period the back-off is forgiven: the next raise restarts.
    redis_client.hset(RECORD, "backoff_at", _now(redis_client) - 1_900_000)
    mw2 = _mw(redis_url, BACKOFF_INITIAL=0.1, BACKOFF_JITTER=0)

    async def again() -> None:
        await mw2.process_response(req, HtmlResponse(req.url, status=429))
        await mw2.backoff.client.aclose()

    asyncio.run(again())
    assert redis_client.hget(RECORD, "backoff") == b"100"


def test_breaker_opens_parks_and_closes(
    redis_url: str, redis_client: redis.Redis
) -> None:
    mw = _mw(redis_url, BREAKER_THRESHOLD=3, BREAKER_COOLDOWN=60)
    req = Request("http://a.test/x")
    exc = DownloadConnectionRefusedError("refused")

    async def main() -> None:
        for _ in range(2):
            await mw.process_exception(req, exc)
        assert not redis_client.hget(RECORD, "park")
        await mw.process_exception(req, exc)  # the third: opens
        await mw.process_exception(req, exc)  # already open: no reopen
        # Not a connection failure: does not count.
        await mw.process_exception(req, ValueError("x"))
        assert redis_client.hget(RECORD, "fails") == b"4"
        # The probe after the cool-down answers (the lock put fails in meta).
        probe = Request("http://a.test/y", meta={"politeness_lock": {"fails": 4}})
        await mw.process_response(probe, HtmlResponse(probe.url, status=200))
        await mw.backoff.client.aclose()

    asyncio.run(main())
    stats = mw.crawler.stats
    assert stats is not None
    assert stats.get_value("backoff/breaker_opened") == 1
    assert stats.get_value("backoff/breaker_closed") == 1
    assert stats.get_value("backoff/connection_failures") == 4
    park = int(redis_client.hget(RECORD, "park") or 0)
    assert 50_000 < park - _now(redis_client) <= 60_000
    assert redis_client.hmget(RECORD, "fails", "breaker") == [None, None]


def test_breaker_reopens_for_longer(redis_url: str, redis_client: redis.Redis) -> None:
    mw = _mw(redis_url, BREAKER_THRESHOLD=1, BREAKER_COOLDOWN=10)
    req = Request("http://a.test/x")

    async def main() -> None:
        await mw.process_exception(req, TimeoutError())
        redis_client.hset(RECORD, "park", 1)  # the cool-down has passed
        await mw.process_exception(req, TimeoutError())  # the probe fails
        await mw.backoff.client.aclose()

    asyncio.run(main())
    park = int(redis_client.hget(RECORD, "park") or 0)
    assert 15_000 < park - _now(redis_client) <= 20_000
    assert mw.crawler.stats.get_value("backoff/breaker_opened") == 2


# -- Retry-After through a real crawl ------------------------------------------


class RetryAfterServer:
    """Answers each page once with 429 and the given Retry-After, then 200;
    logs arrival times."""

    def __init__(self, retry_after: dict[str, str]) -> None:
        self.retry_after = retry_after
        self.log: list[tuple[float, str, int]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                first = not any(p == self.path for _, p, _ in server.log)
                value = server.retry_after.get(self.path)
                status = 429 if first and value is not None else 200
                if self.path == "/robots.txt":
                    status = 404
                server.log.append((time.monotonic(), self.path, status))
                self.send_response(status)
                if status == 429:
                    self.send_header(
                        "Retry-After", str(value() if callable(value) else value)
                    )
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


SPIDER = """
import json, os
import scrapy

class TestSpider(scrapy.Spider):
    name = "web"

    async def start(self):
        for url in json.loads(os.environ["TEST_URLS"]):
            yield scrapy.Request(url, dont_filter=True)

    def parse(self, response):
        pass

    def closed(self, reason):
        with open(os.environ["TEST_STATS"], "w") as f:
            json.dump(self.crawler.stats.get_stats(), f, default=str)
"""


@pytest.mark.slow
@pytest.mark.parametrize("form", ["seconds", "http-date"])
def test_retry_after_parks_the_host(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, form: str
) -> None:
    def header() -> str:
        if form == "seconds":
            return "2"
        return formatdate(time.time() + 3, usegmt=True)  # whole seconds: 2..3 s

    server = RetryAfterServer({"/page": header})  # type: ignore[dict-item]
    try:
        (tmp_path / "spider.py").write_text(SPIDER)
        settings = {
            "REDIS_URL": redis_url,
            "DOWNLOADER_MIDDLEWARES": json.dumps(DOWNLOADER_MIDDLEWARES),
            "TELNETCONSOLE_ENABLED": "False",
            "LOG_LEVEL": "INFO",
        }
        args = [sys.executable, "-m", "scrapy", "runspider", "spider.py"]
        for k, v in settings.items():
            args += ["-s", f"{k}={v}"]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        env["TEST_URLS"] = json.dumps([server.url + "/page"])
        env["TEST_STATS"] = str(tmp_path / "stats.json")
        proc = subprocess.run(
            args, check=False, cwd=tmp_path, env=env, capture_output=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr.decode()
    finally:
        server.close()
    pages = [(t, status) for t, path, status in server.log if path == "/page"]
    assert [status for _, status in pages] == [429, 200]
    # The retry waited out the Retry-After (the park), not the 60 s back-off.
    assert 1.9 <= pages[1][0] - pages[0][0] < 10
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["backoff/retry_after"] == 1
    assert stats["politeness/lock_waits"] >= 1
    assert not redis_client.hget(keys.FrontierKeys("web").host(server.url), "backoff")
