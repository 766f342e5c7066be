"""The SSRF guard: non-public addresses are refused after DNS resolution, on
every hop, with a record; an allowlisted range still works.

The end-to-end test runs real ``scrapy crawl web`` workers against a loopback
server on 127.0.0.1 (allowed by ``ADDRESS_ALLOWLIST``) whose pages link,
redirect and meta-refresh to 127.0.0.2, where a listening socket proves that
no connection arrived. Names that resolve to 10.x and 169.254.169.254 come
from a test resolver and are refused before any connection attempt: they end
as ``BlockedAddress`` (resolution refused), never as a connection error.
"""

from __future__ import annotations

import re
import socket
import sqlite3
import subprocess
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis
from scrapy.exceptions import NotConfigured
from twisted.internet.address import IPv4Address

from extensions.connection.embedded import find_redis_binary, free_port
from extensions.downloadermiddlewares.ssrf import (
    AddressGuard,
    AddressPolicy,
    BlockedAddress,
    GuardedResolver,
)
from tests.httpserver import LogServer, reply
from tests.support.fleet import push_seeds, start_worker, wait_all
from tests.utils import get_crawler

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.mark.parametrize(
    ("address", "category"),
    [
        ("127.0.0.2", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link_local"),
        ("fe80::1", "link_local"),
        ("fd12::1", "private"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("239.1.1.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "not_global"),
        ("8.8.8.8", None),
        ("2606:4700::1111", None),
    ],
)
def test_policy_categories(address: str, category: str | None) -> None:
    assert AddressPolicy().refusal(address) == category


def test_allowlist_lets_a_range_through() -> None:
    policy = AddressPolicy(["10.1.0.0/16", "127.0.0.1/32"])
    assert policy.refusal("10.1.200.3") is None
    assert policy.refusal("10.2.0.1") == "private"
    assert policy.refusal("127.0.0.1") is None
    assert policy.refusal("127.0.0.2") == "loopback"


# get_crawler() without a reactor picks Scrapy's aiohttp handler: name the
# Twisted one, as a real crawl has it.
TWISTED = {
    "http": "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler",
    "https": "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler",
}


def guard(**settings: object) -> AddressGuard:
    return AddressGuard(
        get_crawler(settings_dict={"DOWNLOAD_HANDLERS": TWISTED, **settings})
    )


def test_guard_is_off_when_private_addresses_are_allowed() -> None:
    with pytest.raises(NotConfigured):
        guard(ALLOW_PRIVATE_ADDRESSES=True)


def test_guard_refuses_a_handler_it_cannot_watch() -> None:
    handlers = {"http": "scrapy.core.downloader.handlers._httpx.HttpxDownloadHandler"}
    with pytest.raises(ValueError, match="Twisted download handler"):
        AddressGuard(get_crawler(settings_dict={"DOWNLOAD_HANDLERS": handlers}))


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.2/",
        "http://2130706434/",
        "http://0x7f000001/",
        "http://[::1]/",
        "http://169.254.169.254/latest/meta-data/",
    ],
)
def test_ip_literals_are_refused_up_front(url: str) -> None:
    from scrapy import Request

    mw = guard()
    mw.crawler.stats.open_spider()  # type: ignore[union-attr]
    with pytest.raises(BlockedAddress, match="blocked_address"):
        mw.process_request(Request(url))
    assert mw.crawler.stats.get_value("addresses/blocked") == 1  # type: ignore[union-attr]


class Listener:
    """A TCP socket on 127.0.0.2 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.2", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


@pytest.fixture
def victim_redis(tmp_path: Path) -> Iterator[tuple[int, redis.Redis, Path]]:
    """A redis-server on 127.0.0.2, the operator's own Redis a page points
    at; its log says "Possible SECURITY ATTACK" when it is sent HTTP."""
    port, log = free_port(), tmp_path / "victim-redis.log"
    proc = subprocess.Popen(
        [find_redis_binary(), "--bind", "127.0.0.2", "--port", str(port),
         "--save", "", "--appendonly", "no", "--logfile", str(log)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(host="127.0.0.2", port=port, single_connection_client=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield port, client, log
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_crawl_refuses_private_hops(
    redis_url: str,
    tmp_path: Path,
    listener: Listener,
    victim_redis: tuple[int, redis.Redis, Path],
) -> None:
    inner = f"127.0.0.2:{listener.port}"
    redis_port, victim, victim_log = victim_redis
    links = [
        f"http://{inner}/link.html",
        f"http://2130706434:{listener.port}/decimal.html",
        f"http://rebind.test:{listener.port}/rebind.html",  # public name, 127.0.0.2
        "http://internal.test/",  # 10.0.0.7: never connected to
        "http://metadata.test/latest/meta-data/",  # 169.254.169.254
        f"http://127.0.0.2:{redis_port}/",  # a Redis on 127.0.0.2
        "/redirect.html",
        "/refresh.html",
        "/ok.html",
    ]
    home = "".join(f'<a href="{u}">x</a>' for u in links).encode()
    refresh = f'<meta http-equiv="refresh" content="0; url=http://{inner}/r.html">'
    routes = {
        "/": reply(home, Content_Type="text/html"),
        "/robots.txt": reply(b"", status=404),
        "/redirect.html": reply(b"", status=302, Location=f"http://{inner}/302.html"),
        "/refresh.html": reply(
            f"<html><head>{refresh}</head></html>".encode(), Content_Type="text/html"
        ),
        "/ok.html": reply(b"<html>ok</html>", Content_Type="text/html"),
    }
    with LogServer(routes) as web:
        push_seeds(redis_url, [f"{web.url}/"])
        settings = {
            "REDIS_URL": redis_url,
            "WEBCRAWL_HOME": str(tmp_path),
            "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
            "SEED_POLL_INTERVAL": 0.2,
            "DOWNLOAD_DELAY": 0,
            "ADDRESS_ALLOWLIST": "127.0.0.1/32",
            "TWISTED_DNS_RESOLVER": "tests.resolvers.PrivateNamesResolver",
            "BLOOM_CAPACITY": 100_000,
            "LOG_LEVEL": "INFO",
        }
        log = tmp_path / "worker.log"
        assert wait_all([start_worker(settings, log)], 120) == [0]
        served = {hit.path for hit in web.log}
    text = log.read_text()
    assert "Traceback" not in text, text
    # The allowed server was crawled, hops included.
    assert {"/", "/ok.html", "/redirect.html", "/refresh.html"} <= served
    # Nothing reached 127.0.0.2 (link, decimal IP, rebinding name, 302,
    # meta refresh, the Redis port): only our own check connection.
    assert listener.accepted == 0
    connections = victim.info("stats")["total_connections_received"]
    assert connections == 1
    assert "SECURITY ATTACK" not in victim_log.read_text()
    with sqlite3.connect(tmp_path / "pages.sqlite3") as db:
        errors = dict(db.execute("SELECT url, error FROM pages_metadata"))
    blocked = {
        url for url, error in errors.items() if "blocked_address" in (error or "")
    }
    assert {
        f"http://{inner}/link.html",
        f"http://2130706434:{listener.port}/decimal.html",
        f"http://rebind.test:{listener.port}/rebind.html",
        "http://internal.test/",
        "http://metadata.test/latest/meta-data/",
        f"http://127.0.0.2:{redis_port}/",
        f"{web.url}/redirect.html",
        f"{web.url}/refresh.html",
    } <= blocked, errors
    # Refused at resolution, not by a failed connection: no connection was tried.
    assert (
        "BlockedAddress: blocked_address: internal.test -> 10.0.0.7 (private)"
        in (errors["http://internal.test/"])
    )
    stats = re.search(r"'addresses/blocked': (\d+)", text)
    assert stats is not None and int(stats.group(1)) >= 7, text


class FixedResolver:
    """An ``IHostnameResolver`` answering every name with ``addresses``."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses

    def resolveHostName(
        self, receiver: Any, host: str, portNumber: int = 0, *args: Any
    ) -> None:
        receiver.resolutionBegan(None)
        for address in self.addresses:
            receiver.addressResolved(IPv4Address("TCP", address, portNumber))
        receiver.resolutionComplete()


class Receiver:
    def __init__(self) -> None:
        self.got: list[str] = []
        self.done = False

    def resolutionBegan(self, resolution: Any) -> None:
        pass

    def addressResolved(self, address: Any) -> None:
        self.got.append(address.host)

    def resolutionComplete(self) -> None:
        self.done = True


@pytest.mark.parametrize(
    ("answers", "passed", "refused"),
    [
        (("10.0.0.1", "93.184.215.14"), ["93.184.215.14"], []),  # mixed: public only
        (
            ("10.0.0.1", "127.0.0.1"),
            [],
            [("10.0.0.1", "private"), ("127.0.0.1", "loopback")],
        ),
        (("93.184.215.14",), ["93.184.215.14"], []),
    ],
)
def test_resolver_passes_only_allowed_addresses(
    answers: tuple[str, ...], passed: list[str], refused: list[tuple[str, str]]
) -> None:
    seen: dict[str, list[tuple[str, str]]] = {}
    resolver = GuardedResolver(
        FixedResolver(*answers), AddressPolicy(), lambda h, r: seen.update({h: r})
    )
    receiver = Receiver()
    resolver.resolveHostName(receiver, "name.test", 80)
    assert receiver.got == passed and receiver.done
    assert seen == ({"name.test": refused} if refused else {})
