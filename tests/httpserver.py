"""Test helpers for real crawls: a routed loopback web server that logs what it
serves, and ``scrapy runspider`` of a tiny spider that reports its stats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extensions.downloadermiddlewares import POLITENESS_MIDDLEWARES
from extensions.settings import defaults

if TYPE_CHECKING:
    from collections.abc import Mapping

ROOT = Path(__file__).resolve().parent.parent

Reply = tuple[int, dict[str, str], bytes]
Route = Callable[[], Reply]


def reply(body: bytes = b"ok", status: int = 200, **headers: str) -> Route:
    """A route that always answers the same; ``Content_Type="text/plain"``
    sends ``Content-Type``."""
    sent = {name.replace("_", "-"): value for name, value in headers.items()}
    return lambda: (status, sent, body)


@dataclass(frozen=True)
class Hit:
    path: str
    at: float  # time.monotonic() when the request arrived
    status: int


class LogServer:
    """http.server in a thread on an ephemeral 127.0.0.1 port.

    ``routes`` map a path to a callable giving ``(status, headers, body)``;
    other paths get ``default`` (200 ``ok``). A path in ``delays`` is answered
    that many seconds late. Each request served is logged as a :class:`Hit`.
    """

    def __init__(
        self,
        routes: Mapping[str, Route] | None = None,
        *,
        delays: Mapping[str, float] | None = None,
        default: Route | None = None,
    ) -> None:
        self.routes = dict(routes or {})
        self.delays = dict(delays or {})
        self.default = default or reply()
        self._log: list[Hit] = []
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, headers, body = server.serve(self.path)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def serve(self, path: str) -> Reply:
        at = time.monotonic()
        time.sleep(self.delays.get(path, 0))
        route = self.routes.get(path)
        answer = (route or self.default)()
        with self._lock:
            self._log.append(Hit(path, at, answer[0]))
        return answer

    def start(self) -> LogServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> LogServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def log(self) -> list[Hit]:
        """The requests served so far, by arrival time."""
        with self._lock:
            return sorted(self._log, key=lambda hit: hit.at)

    def hits(self, prefix: str = "/") -> list[Hit]:
        return [hit for hit in self.log if hit.path.startswith(prefix)]

    def times(self, prefix: str) -> list[float]:
        return [hit.at for hit in self.hits(prefix)]

    def count(self, path: str) -> int:
        return sum(hit.path == path for hit in self.log)


SPIDER = """
import json, os
import scrapy

class TestSpider(scrapy.Spider):
    name = "web"

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.allowed_domains = crawler.settings.getlist("TEST_ALLOWED_DOMAINS")
        return spider

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


class Crawl:
    """``scrapy runspider`` of a spider that requests ``urls`` through
    webcrawl's politeness middlewares, started in the background; several
    may run at once in one ``tmp`` under different names."""

    def __init__(
        self,
        tmp: Path,
        redis_url: str,
        urls: list[str],
        name: str = "w0",
        **settings: Any,
    ) -> None:
        spider = tmp / "spider.py"
        spider.write_text(SPIDER)
        self.log = tmp / f"{name}.log"
        self.stats = tmp / f"{name}.stats.json"
        base = {
            "REDIS_URL": redis_url,
            "DOWNLOADER_MIDDLEWARES": json.dumps(POLITENESS_MIDDLEWARES),
            # The middlewares without the rest of the add-on: their defaults.
            "ADDONS": json.dumps({"webcrawl.addon.WebcrawlDefaults": 0}),
            "TELNETCONSOLE_ENABLED": "False",
            "LOG_LEVEL": "INFO",
            "USER_AGENT": defaults.WEBCRAWL_USER_AGENT,
            "ROBOTSTXT_OBEY": "True",
            "CONCURRENT_REQUESTS": "16",
        } | {k: str(v) for k, v in settings.items()}
        args = [sys.executable, "-m", "scrapy", "runspider", str(spider)]
        for k, v in base.items():
            args += ["-s", f"{k}={v}"]
        env = dict(os.environ, PYTHONPATH=str(ROOT), TEST_URLS=json.dumps(urls))
        env["TEST_STATS"] = str(self.stats)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(args, cwd=tmp, env=env, stdout=out, stderr=out)

    def finish(self, timeout: float = 60) -> dict[str, Any]:
        """Wait for the crawl; it must exit 0 without a traceback. Its stats."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        log = self.log.read_text()
        assert self.proc.returncode == 0, log
        assert "Traceback" not in log, log
        return dict(json.loads(self.stats.read_text()))


def crawl(
    tmp: Path, redis_url: str, urls: list[str], **settings: Any
) -> dict[str, Any]:
    """One crawl to its end (see :class:`Crawl`); its stats."""
    return Crawl(tmp, redis_url, urls, **settings).finish()
