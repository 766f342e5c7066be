"""The shared robots.txt middleware: RFC 9309 status classes, redirects, size
limit and garbage, by one real crawl against loopback servers."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from extensions import keys
from extensions.embedded_redis import free_port
from extensions.politeness import DOWNLOADER_MIDDLEWARES
from extensions.robots import SharedRobotsTxtMiddleware
from webcrawl import defaults

if TYPE_CHECKING:
    import redis

ROOT = Path(__file__).resolve().parent.parent

Route = Callable[[], tuple[int, dict[str, str], bytes]]


class LogServer:
    """http.server in a thread on an ephemeral port, logging request paths."""

    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes = routes
        self.log: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.log.append(self.path)
                route = server.routes.get(self.path)
                status, headers, body = route() if route else (200, {}, b"ok")
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def count(self, path: str) -> int:
        return self.log.count(path)


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


def crawl(tmp: Path, redis_url: str, urls: list[str], **settings: Any) -> dict:
    (tmp / "spider.py").write_text(SPIDER)
    base = {
        "REDIS_URL": redis_url,
        "DOWNLOADER_MIDDLEWARES": json.dumps(DOWNLOADER_MIDDLEWARES),
        "TELNETCONSOLE_ENABLED": "False",
        "LOG_LEVEL": "INFO",
        "USER_AGENT": defaults.WEBCRAWL_USER_AGENT,
        **{k: str(v) for k, v in settings.items()},
    }
    args = [sys.executable, "-m", "scrapy", "runspider", "spider.py"]
    for k, v in base.items():
        args += ["-s", f"{k}={v}"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TEST_URLS=json.dumps(urls))
    env["TEST_STATS"] = str(tmp / "stats.json")
    proc = subprocess.run(
        args, check=False, cwd=tmp, env=env, capture_output=True, timeout=60
    )
    log = proc.stderr.decode()
    assert proc.returncode == 0, log
    assert "Traceback" not in log, log
    return dict(json.loads((tmp / "stats.json").read_text()))


def robots(body: bytes, status: int = 200) -> Route:
    return lambda: (status, {"Content-Type": "text/plain"}, body)


def redirect(to: str) -> Route:
    return lambda: (301, {"Location": to}, b"")


def chain(n: int, final: bytes) -> dict[str, Route]:
    """robots.txt redirected ``n`` times, then ``final``."""
    hops = ["/robots.txt"] + [f"/r{i}" for i in range(1, n + 1)]
    routes = {a: redirect(b) for a, b in itertools.pairwise(hops)}
    routes[hops[-1]] = robots(final)
    return routes


def slow_robots() -> tuple[int, dict[str, str], bytes]:
    time.sleep(2)
    return 200, {}, b"User-agent: *\nDisallow:\n"


DISALLOW = b"User-agent: *\nDisallow: /private\n"
PADDING = b"".join(b"# padding line %06d ..........\n" % i for i in range(20_000))
rng = random.Random(9309)
GARBAGE = bytes(rng.randrange(256) for _ in range(4096))


@pytest.fixture
def servers() -> Iterator[dict[str, LogServer]]:
    kinds: dict[str, dict[str, Route]] = {
        "ok": {
            "/robots.txt": robots(
                DISALLOW + b"Crawl-delay: 120\nSitemap: http://s.test/sitemap.xml\n"
            )
        },
        "notfound": {"/robots.txt": robots(b"Disallow: /", 404)},
        "forbidden": {"/robots.txt": robots(b"Disallow: /", 403)},
        "error": {"/robots.txt": robots(b"", 500)},
        "unavailable": {"/robots.txt": robots(b"", 503)},
        "redirect5": chain(5, DISALLOW),
        "redirect6": chain(6, DISALLOW),
        "big": {"/robots.txt": robots(DISALLOW + PADDING + b"Disallow: /late\n")},
        "garbage": {"/robots.txt": robots(GARBAGE)},
        "timeout": {"/robots.txt": slow_robots},
    }
    with ExitStack() as stack:
        found = {}
        for name, routes in kinds.items():
            server = LogServer(routes)
            stack.callback(server.close)
            found[name] = server
        yield found


def test_big_body_is_over_500_kib() -> None:
    assert len(DISALLOW + PADDING) > 600_000 > defaults.ROBOTS_MAX_SIZE


def test_refuses_to_run_beside_scrapys_robots() -> None:
    with pytest.raises(NotConfigured, match="ROBOTSTXT_OBEY"):
        SharedRobotsTxtMiddleware.from_crawler(
            get_crawler(settings_dict={"ROBOTSTXT_OBEY": True})
        )
    with pytest.raises(NotConfigured, match="ROBOTS_ENABLED"):
        SharedRobotsTxtMiddleware.from_crawler(
            get_crawler(settings_dict={"ROBOTS_ENABLED": False})
        )


@pytest.mark.slow
def test_status_classes_redirects_size_and_garbage(
    tmp_path: Path,
    redis_url: str,
    redis_client: redis.Redis,
    servers: dict[str, LogServer],
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: unreachable
    bases = {name: s.url for name, s in servers.items()} | {"dead": dead}
    urls = [b + p for b in bases.values() for p in ("/page", "/private")]
    urls.append(servers["big"].url + "/late")
    stats = crawl(
        tmp_path,
        redis_url,
        urls,
        ROBOTS_FETCH_TIMEOUT=0.5,
        ROBOTS_CRAWL_DELAY_MAX=0.2,
        RETRY_ENABLED=False,
    )
    s = servers

    def fetched(name: str, path: str) -> bool:
        return s[name].count(path) > 0

    # One robots.txt fetch per host, however many requests wait for it.
    for name in ("ok", "notfound", "error", "big", "garbage"):
        assert s[name].count("/robots.txt") == 1, name
    # 2xx: parsed; /private is never fetched.
    assert fetched("ok", "/page") and not fetched("ok", "/private")
    # 4xx: allow all.
    for name in ("notfound", "forbidden"):
        assert fetched(name, "/page") and fetched(name, "/private"), name
    # 5xx, timeout, unreachable: disallow all for now, host parked.
    for name in ("error", "unavailable", "timeout"):
        assert not fetched(name, "/page") and not fetched(name, "/private"), name
    now = int(redis_client.time()[0]) * 1000
    for name in ("error", "unavailable", "timeout", "dead"):
        hk = bases[name] + ("" if bases[name].count(":") == 2 else ":80")
        park = int(redis_client.hget(keys.FrontierKeys("web").host(hk), "park") or 0)
        assert park > now + 30_000, name
        cached = redis_client.hgetall(keys.robots("web", hk))
        assert int(cached[b"failures"]) == 1, name
    # Five redirects are followed; a sixth is not (then: unavailable, allow).
    assert s["redirect5"].count("/r5") == 1 and not fetched("redirect5", "/private")
    assert s["redirect6"].count("/r5") == 1 and s["redirect6"].count("/r6") == 0
    assert fetched("redirect6", "/private")
    # 600 KB: the first 500 KiB are parsed, a rule beyond them is not.
    assert not fetched("big", "/private") and fetched("big", "/late")
    # Garbage bytes parse to no rules: allow all, no crash.
    assert fetched("garbage", "/page") and fetched("garbage", "/private")
    # Crawl-delay capped, written to the host record; the sitemap is a seed.
    ok_host = keys.FrontierKeys("web").host(bases["ok"])
    assert redis_client.hget(ok_host, "delay") == b"200"
    assert redis_client.lrange(keys.start_urls("web"), 0, -1) == [
        b"http://s.test/sitemap.xml"
    ]
    cached = redis_client.hgetall(keys.robots("web", bases["ok"]))
    assert int(cached[b"status"]) == 200 and b"Disallow: /private" in cached[b"body"]
    assert stats["robotstxt/forbidden"] == 3
    assert stats["robotstxt/crawl_delay_capped"] == 1
    assert stats["robotstxt/failures"] == 4
    assert stats["robotstxt/unreachable_dropped"] == 8
