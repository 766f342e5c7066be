"""The sandbox web: generator, server, recorder, resolver and their speed."""

from __future__ import annotations

import asyncio
import email.utils
import http.client
import json
import subprocess
import sys
import time
import zlib
from collections import deque
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

import brotli
import pytest
from lxml import html as lxml_html
from protego import Protego
from scrapy.http import HtmlResponse

from sandbox.__main__ import build_parser, spec_from_args
from sandbox.hostile import (
    BOMB_PATHS,
    BOMB_SIZE,
    DUPLICATE_EXACT,
    DUPLICATE_NEAR,
    ENCODING_PAGES,
    ENTRY_PATHS,
    FLAKY_FAILURES,
    HUGE_SIZE,
    NEAR_CHANGED_WORDS,
)
from sandbox.load import run_load
from sandbox.process import ROOT, SandboxProcess, min_gap_ms_by_host
from sandbox.site import (
    FEATURES,
    MAX_LINKS,
    MAX_PAGE_BYTES,
    MIN_LINKS,
    MIN_PAGE_BYTES,
    PRIVATE_PAGES,
    Request,
    Site,
    SiteSpec,
    host_name,
)
from tests.support.polling import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

PORT = 8080  # for in-process rendering; no socket involved
ALL = SiteSpec(
    seed=7, hosts=12, pages_per_host=20, crawl_delay_hosts={2: 1.5}, features=FEATURES
)
PLAIN = SiteSpec(seed=7, hosts=12, pages_per_host=20)


@pytest.fixture(scope="module")
def web() -> Iterator[SandboxProcess]:
    with SandboxProcess(ALL) as proc:
        yield proc


@pytest.fixture(scope="module")
def plain_web() -> Iterator[SandboxProcess]:
    with SandboxProcess(PLAIN) as proc:
        yield proc


def fetch(
    port: int,
    host: str,
    path: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            method,
            path,
            headers={"Host": host, "User-Agent": "sandbox-test", **(headers or {})},
        )
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def get(
    site: Site, url: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """Ask a Site in-process (no server) for a URL; only synchronous answers."""
    parts = urlsplit(url)
    answer = site.handle(
        Request("GET", parts.netloc, parts.path or "/", parts.query, headers or {})
    )
    assert not asyncio.iscoroutine(answer)
    return answer.status, answer.body  # type: ignore[union-attr]


def hrefs(url: str, body: bytes) -> list[str]:
    doc = lxml_html.fromstring(body)
    return [urljoin(url, h) for h in doc.xpath("//a/@href")]


# --- generator -------------------------------------------------------------------
def test_same_spec_same_pages_and_seed_changes_them() -> None:
    a, b = Site(PLAIN, PORT), Site(PLAIN, PORT)
    other = Site(SiteSpec(seed=8, hosts=12, pages_per_host=20), PORT)
    urls = PLAIN.page_urls(PORT)[::7]
    for url in urls:
        assert get(a, url) == get(b, url)
    assert get(a, urls[3]) != get(other, urls[3])
    # A fresh process renders the same bytes (no per-process hash salt).
    code = (
        "from sandbox.site import *; import hashlib, sys; "
        f"s = Site(SiteSpec(seed=7, hosts=12, pages_per_host=20), {PORT}); "
        "print(hashlib.sha256(s.page(3, 'page', 5).body).hexdigest())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    import hashlib

    assert out.stdout.strip() == hashlib.sha256(a.page(3, "page", 5).body).hexdigest()


def test_hosts_and_shapes() -> None:
    spec = SiteSpec()
    assert spec.hosts >= 100
    assert spec.host_name(0) == "site-000.sandbox.test"
    assert spec.host_index("site-099.sandbox.test:8080") == 99
    assert spec.host_index("site-100.sandbox.test") is None
    skewed = SiteSpec(hosts=10, pages_per_host=40, shape="skewed")
    counts = [skewed.pages_on(i) for i in range(10)]
    assert counts[0] == 200 and sum(counts) == 400 and min(counts) >= 1
    assert len(skewed.page_urls(PORT)) == 400 + 10 * PRIVATE_PAGES
    with pytest.raises(ValueError, match="unknown features"):
        SiteSpec(features=frozenset({"nope"}))


def test_page_sizes_and_link_counts() -> None:
    spec = SiteSpec(seed=3, hosts=30, pages_per_host=40)
    site = Site(spec, PORT)
    sizes, links = [], []
    for i in range(spec.hosts):
        for k in range(0, spec.pages_on(i), 3):
            page = site.page(i, "page", k).body
            sizes.append(len(page))
            anchors = lxml_html.fromstring(page).xpath("//a[@href]")
            links.append(len(anchors))
            assert len(anchors) == len(spec.links(i, k))
    assert min(sizes) >= MIN_PAGE_BYTES and max(sizes) <= MAX_PAGE_BYTES
    assert min(links) >= MIN_LINKS and max(links) <= MAX_LINKS
    assert max(sizes) - min(sizes) > 30_000  # a real spread, not one size
    page = site.page(4, "page", 2).body
    for marker in (b"<title>", b'name="description"', b"<nav>", b"<footer>"):
        assert marker in page
    root = "http://site-004.sandbox.test:8080/"
    cross = [u for u in hrefs(root, page) if "site-004" not in u]
    assert cross
    assert all(u.startswith("http://site-") and ":8080/" in u for u in cross)


def crawl_in_process(site: Site, respect_robots: bool) -> set[str]:
    """A tiny breadth-first crawler over the rendered HTML (robots via Protego)."""
    spec = site.spec
    robots: dict[str, Protego | None] = {}
    for i in range(spec.hosts):
        status, body = get(site, spec.url(i, "/robots.txt", PORT))
        robots[host_name(i)] = Protego.parse(body.decode()) if status == 200 else None
    seen = set(spec.seed_urls(PORT))
    todo = deque(seen)
    while todo:
        url = todo.popleft()
        status, body = get(site, url)
        assert status == 200, url
        for link in hrefs(url, body):
            host = urlsplit(link).hostname or ""
            parser = robots.get(host)
            if link in seen or (
                respect_robots and parser and not parser.can_fetch(link, "*")
            ):
                continue
            seen.add(link)
            todo.append(link)
    return seen


def test_reachable_urls_match_a_real_traversal() -> None:
    spec = SiteSpec(seed=5, hosts=15, pages_per_host=25, shape="skewed")
    site = Site(spec, PORT)
    polite = spec.reachable_urls(PORT)
    assert crawl_in_process(site, respect_robots=True) == polite
    everything = spec.reachable_urls(PORT, respect_robots=False)
    assert crawl_in_process(site, respect_robots=False) == everything
    assert everything == set(spec.page_urls(PORT))  # every page reachable from "/"
    private = everything - polite
    assert private and all(spec.is_disallowed(u) for u in private)
    assert all("/private/" in u for u in private)
    # Private pages of robots-404 hosts are allowed, hence reachable politely.
    assert spec.url(9, "/private/report-0.html", PORT) in polite


def test_reachable_urls_with_features() -> None:
    urls = ALL.reachable_urls(PORT)
    plain = PLAIN.reachable_urls(PORT)
    extra = {urlsplit(u).path for u in urls - plain}
    assert "/redirect/landing.html" in extra and "/redirect/loop/b" in extra
    assert "/calendar/2024/01" in extra
    assert not any(p.startswith("/calendar/2024/02") for p in extra)
    assert set(ENTRY_PATHS["errors"]) <= extra


# --- robots -----------------------------------------------------------------------
def test_robots(web: SandboxProcess) -> None:
    status, headers, body = fetch(web.port, host_name(0), "/robots.txt")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    robots = Protego.parse(body.decode())
    assert not robots.can_fetch(web.url(0, "/private/report-0.html"), "mybot")
    assert robots.can_fetch(web.url(0, "/"), "mybot")
    assert not robots.can_fetch(web.url(0, "/"), "badbot")
    assert robots.crawl_delay("mybot") is None
    status, _, body = fetch(web.port, host_name(2), "/robots.txt")
    assert (
        Protego.parse(body.decode()).crawl_delay("mybot")
        == 1.5
        == web.spec.crawl_delay(host_name(2))
    )
    assert web.spec.crawl_delay("site-003.sandbox.test:80") is None
    status, _, _ = fetch(web.port, host_name(9), "/robots.txt")
    assert status == 404 and not web.spec.is_disallowed(
        web.url(9, "/private/report-0.html")
    )
    assert web.spec.is_disallowed(web.url(0, "/private/report-0.html"))
    # The private pages exist, so a crawler that ignores robots gets them.
    assert fetch(web.port, host_name(0), "/private/report-1.html")[0] == 200


# --- server --------------------------------------------------------------------------
def test_keep_alive_head_and_unknown_hosts(plain_web: SandboxProcess) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", plain_web.port, timeout=10)
    paths = [PLAIN.page_path(1, k) for k in range(5)]
    bodies = []
    for path in paths:
        conn.request(
            "GET", path, headers={"Host": f"site-001.sandbox.test:{plain_web.port}"}
        )
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Connection") == "keep-alive"
        bodies.append(resp.read())
    sock = conn.sock
    conn.request("HEAD", paths[2], headers={"Host": "SITE-001.sandbox.test"})
    resp = conn.getresponse()
    assert resp.status == 200 and int(resp.getheader("Content-Length", "0")) == len(
        bodies[2]
    )
    assert resp.read() == b""
    assert conn.sock is sock  # one connection served them all
    conn.close()
    assert fetch(plain_web.port, "example.com", "/")[0] == 404
    assert fetch(plain_web.port, "site-012.sandbox.test", "/")[0] == 404
    assert fetch(plain_web.port, host_name(1), "/news/missing-1.html")[0] == 404


def test_features_off_by_default(plain_web: SandboxProcess) -> None:
    for feature, paths in ENTRY_PATHS.items():
        for path in paths:
            assert fetch(plain_web.port, host_name(1), path)[0] == 404, (feature, path)
    _, headers, _ = fetch(plain_web.port, host_name(1), "/")
    assert "etag" not in headers and "last-modified" not in headers


def test_record_file() -> None:
    with SandboxProcess(SiteSpec(hosts=3, pages_per_host=4)) as web:
        t0 = time.time() * 1000
        fetch(web.port, host_name(0), "/?q=1&x=2")
        fetch(web.port, f"{host_name(1)}:{web.port}", "/robots.txt")
        fetch(web.port, "nowhere.test", "/a")
        t1 = time.time() * 1000
        # Flushed while running (at least every 200 ms), not only at stop.
        assert wait_until(lambda: len(web.records()) >= 3, timeout=30)
        assert len(web.records()) == 3
    records = web.records()
    assert [(r["host"], r["path"], r["status"]) for r in records] == [
        ("site-000.sandbox.test", "/?q=1&x=2", 200),
        ("site-001.sandbox.test", "/robots.txt", 200),
        ("nowhere.test", "/a", 404),
    ]
    assert all(r["ua"] == "sandbox-test" for r in records)
    assert all(t0 <= r["t_ms"] <= t1 for r in records)
    assert records[0]["t_ms"] < records[1]["t_ms"] < records[2]["t_ms"]
    assert min_gap_ms_by_host(records, exclude_paths=()) == {}


def test_max_seconds_stops_the_server(tmp_path: Path) -> None:
    record = tmp_path / "r.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandbox",
            "--hosts",
            "2",
            "--max-seconds",
            "0.5",
            "--record",
            str(record),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = json.loads(proc.stdout.readline())["port"]
    assert fetch(port, host_name(0), "/")[0] == 200
    assert proc.wait(10) == 0
    proc.stdout.close()
    assert json.loads(record.read_text())["path"] == "/"


def test_cli_options() -> None:
    args = build_parser().parse_args(
        [
            "--hosts",
            "50",
            "--crawl-delay-hosts",
            "2",
            "--crawl-delay",
            "3",
            "--features",
            "slow,etag",
            "--shape",
            "skewed",
        ]
    )
    spec = spec_from_args(args)
    assert spec.hosts == 50 and spec.shape == "skewed"
    assert sorted(spec.crawl_delay_hosts.values()) == [3.0, 3.0]
    assert spec.features == {"slow", "etag"}
    assert (
        spec_from_args(build_parser().parse_args(["--features", "all"])).features
        == FEATURES
    )


# --- hostile corners ------------------------------------------------------------------
def trap(
    web: SandboxProcess, path: str, **kw: object
) -> tuple[int, dict[str, str], bytes]:
    return fetch(web.port, host_name(web.spec.trap_host), path, **kw)  # type: ignore[arg-type]


def test_trap_root_links_every_entry(web: SandboxProcess) -> None:
    _, _, body = trap(web, "/")
    links = {
        urlsplit(u)._replace(scheme="", netloc="").geturl()
        for u in hrefs(web.url(1), body)
    }
    assert {p for paths in ENTRY_PATHS.values() for p in paths} <= links


def test_calendar_is_infinite(web: SandboxProcess) -> None:
    path = "/calendar/2024/01"
    for _ in range(30):
        status, _, body = trap(web, path)
        assert status == 200
        nxt = [
            u for u in hrefs(web.url(1, path), body) if "Next" in u or "/calendar/" in u
        ]
        path = urlsplit(nxt[-1]).path
    assert path == "/calendar/2026/07"
    assert trap(web, "/calendar/2024/13")[0] == 404


def test_redirects(web: SandboxProcess) -> None:
    hops = []
    path = "/redirect/chain/1"
    while True:
        status, headers, _ = trap(web, path)
        if status not in (301, 302, 303, 307, 308):
            break
        hops.append(status)
        path = urlsplit(urljoin(web.url(1, path), headers["location"])).path
    assert (
        hops == [301, 302, 307] and status == 200 and path == "/redirect/landing.html"
    )
    status, headers, _ = trap(web, "/redirect/loop/a")
    assert status == 302 and headers["location"] == "/redirect/loop/b"
    assert trap(web, "/redirect/loop/b")[1]["location"] == "/redirect/loop/a"


def test_slow_page(web: SandboxProcess) -> None:
    start = time.monotonic()
    assert trap(web, "/slow/1.html")[0] == 200
    # The server held the reply for a second: the client cannot see it
    # sooner, however loaded the machine (how much later is not asserted).
    assert time.monotonic() - start >= 0.99


def test_errors(web: SandboxProcess) -> None:
    assert trap(web, "/error/500.html")[0] == 500
    assert trap(web, "/error/503.html")[0] == 503
    status, headers, _ = trap(web, "/error/429-seconds.html")
    assert status == 429 and headers["retry-after"] == "2"
    before = time.time()
    status, headers, _ = trap(web, "/error/429-date.html")
    after = time.time()
    when = email.utils.parsedate_to_datetime(headers["retry-after"]).timestamp()
    # 3 s after the server's clock of the reply, in whole seconds: bracketed
    # by the client's clock before and after, however late the client runs.
    assert status == 429 and before + 2 - 0.01 < when <= after + 3
    statuses = [trap(web, "/error/flaky.html")[0] for _ in range(FLAKY_FAILURES + 2)]
    assert statuses == [503] * FLAKY_FAILURES + [200, 200]


def test_malformed(web: SandboxProcess) -> None:
    status, _, body = trap(web, "/malformed/unclosed.html")
    assert status == 200 and b"</html>" not in body and b"</p>" not in body
    assert hrefs(web.url(1), body)  # a lenient parser still finds the links
    status, _, body = trap(web, "/malformed/garbage.html")
    assert status == 200 and b"\x00" in body
    with pytest.raises(UnicodeDecodeError):
        body.decode("utf-8")


@pytest.mark.parametrize("path", sorted(ENCODING_PAGES))
def test_encodings(web: SandboxProcess, path: str) -> None:
    _codec, where, text = ENCODING_PAGES[path]
    status, headers, body = trap(web, path)
    assert status == 200
    has_header_charset = "charset=" in headers["content-type"]
    assert has_header_charset == (where == "header")
    assert (b"charset=" in body) == (where == "meta")
    assert body.startswith(b"\xef\xbb\xbf") == (where == "bom")
    with pytest.raises(UnicodeDecodeError):
        body.decode("ascii")
    # Scrapy finds the encoding from whichever place declares it.
    response = HtmlResponse(
        web.url(1, path), body=body, headers={"Content-Type": headers["content-type"]}
    )
    assert text in response.text


@pytest.mark.parametrize(("path", "encoding"), sorted(BOMB_PATHS.items()))
def test_compression_bombs(web: SandboxProcess, path: str, encoding: str) -> None:
    status, headers, body = trap(web, path)
    assert status == 200 and headers["content-encoding"] == encoding
    assert len(body) < 3_000_000
    if encoding == "gzip":
        assert int.from_bytes(body[-4:], "little") == BOMB_SIZE % 2**32
    if encoding == "br":
        first = brotli.Decompressor().process(
            body[:20_000], output_buffer_limit=64 * 1024**2
        )
    else:
        wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
        first = zlib.decompressobj(wbits).decompress(body[:200_000], 64 * 1024**2)
    assert first.startswith(b"<!DOCTYPE html>") and len(first) > 100 * min(
        len(body), 200_000
    )


def test_huge_page(web: SandboxProcess) -> None:
    status, headers, _ = trap(web, "/huge.html", method="HEAD")
    assert status == 200 and int(headers["content-length"]) == HUGE_SIZE
    status, _, body = trap(web, "/huge.html")
    assert len(body) == HUGE_SIZE and body.rstrip().endswith(b"</html>")


def test_duplicates(web: SandboxProcess) -> None:
    bodies = {p: trap(web, p)[2] for p in DUPLICATE_EXACT + DUPLICATE_NEAR}
    assert len({bodies[p] for p in DUPLICATE_EXACT}) == 1
    original = bodies[DUPLICATE_EXACT[0]].split()
    for path in DUPLICATE_NEAR:
        near = bodies[path].split()
        assert len(near) == len(original)
        assert (
            sum(a != b for a, b in zip(original, near, strict=True))
            == NEAR_CHANGED_WORDS
        )
    assert bodies[DUPLICATE_NEAR[0]] != bodies[DUPLICATE_NEAR[1]]


def test_etag_and_last_modified(web: SandboxProcess) -> None:
    path = web.spec.page_path(3, 4)
    status, headers, body = fetch(web.port, host_name(3), path)
    etag, modified = headers["etag"], headers["last-modified"]
    assert status == 200 and body
    status, headers, body = fetch(
        web.port, host_name(3), path, headers={"If-None-Match": etag}
    )
    assert status == 304 and body == b"" and headers["etag"] == etag
    assert (
        fetch(web.port, host_name(3), path, headers={"If-None-Match": '"other"'})[0]
        == 200
    )
    assert (
        fetch(web.port, host_name(3), path, headers={"If-Modified-Since": modified})[0]
        == 304
    )
    earlier = email.utils.formatdate(
        email.utils.parsedate_to_datetime(modified).timestamp() - 60, usegmt=True
    )
    assert (
        fetch(web.port, host_name(3), path, headers={"If-Modified-Since": earlier})[0]
        == 200
    )
    # If-None-Match wins over If-Modified-Since (RFC 9110 13.2.2).
    both = {"If-None-Match": '"other"', "If-Modified-Since": modified}
    assert fetch(web.port, host_name(3), path, headers=both)[0] == 200


# --- resolver and speed -------------------------------------------------------------
SPIDER = """
import scrapy

class Probe(scrapy.Spider):
    name = "probe"
    custom_settings = {"ROBOTSTXT_OBEY": True, "USER_AGENT": "probe-bot"}

    async def start(self):
        yield scrapy.Request(self.url)

    def parse(self, response):
        yield {"url": response.url, "status": response.status,
               "title": response.css("title::text").get()}
"""


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["TWISTED_DNS_RESOLVER", "DNS_RESOLVER"])
def test_resolver_in_a_real_scrapy_crawl(
    plain_web: SandboxProcess, tmp_path: Path, setting: str
) -> None:
    (tmp_path / "probe.py").write_text(SPIDER)
    url = plain_web.url(0, "/")
    subprocess.run(
        [
            sys.executable, "-m", "scrapy", "runspider", "probe.py",
            "-a", f"url={url}",
            "-s", f"{setting}=sandbox.resolver.SandboxResolver",
            "-s", "TELNETCONSOLE_ENABLED=False",
            "-s", "LOG_LEVEL=WARNING",
            "-o", "out.jsonl:jsonlines",
        ],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=True,
        timeout=60,
    )  # fmt: skip
    items = [
        json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()
    ]
    assert items == [{"url": url, "status": 200, "title": items[0]["title"]}]
    assert items[0]["title"].endswith("| site-000.sandbox.test")

    def seen() -> set[tuple[str, str]]:
        return {(r["path"], r["ua"]) for r in plain_web.records()}

    wanted = {("/robots.txt", "probe-bot"), ("/", "probe-bot")}
    assert wait_until(lambda: wanted <= seen(), timeout=30), seen()


def test_resolver_answers_sandbox_names_without_dns() -> None:
    from scrapy.utils.test import get_crawler
    from twisted.internet import reactor

    from sandbox.resolver import SandboxResolver

    resolver = SandboxResolver.from_crawler(get_crawler(), reactor)
    results: list[str] = []
    resolver.getHostByName("site-042.sandbox.test").addCallback(results.append)
    assert results == ["127.0.0.1"]


def test_throughput(plain_web: SandboxProcess) -> None:
    urls = PLAIN.page_urls(plain_web.port)
    result = asyncio.run(run_load(plain_web.port, urls, seconds=2.0, connections=8))
    print(
        f"\nsandbox server: {result.rps:.0f} requests/s "
        f"({result.requests} in {result.seconds:.1f} s)"
    )
    assert result.errors == 0
    assert result.rps > 300


def test_changing_pages_follow_their_poisson_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sandbox import site as site_module
    from sandbox.site import Response as SiteResponse

    clock = [1000.0]
    monkeypatch.setattr(site_module.time, "time", lambda: clock[0])
    spec = SiteSpec(seed=3, hosts=2, pages_per_host=40, change_period=10.0)
    s = Site(spec, PORT)
    assert s.changes is not None
    paths = [spec.page_path(0, k) for k in range(40)]
    kinds = {p: s.changes.kind(0, p) for p in paths}
    assert set(kinds.values()) == {"static", "slow", "fast"}
    fast = next(p for p in paths if kinds[p] == "fast")
    static = next(p for p in paths if kinds[p] == "static")

    def get(path: str, **headers: str) -> SiteResponse:
        req = Request("GET", host_name(0), path, "", headers)
        answer = s.handle(req)
        assert isinstance(answer, SiteResponse)
        return answer

    first = {p: get(p) for p in (fast, static)}
    etags = {p: dict(r.headers)["ETag"] for p, r in first.items()}
    # Unchanged: a conditional GET is answered 304 with the same validators.
    assert get(static, **{"if-none-match": etags[static]}).status == 304
    assert get(fast, **{"if-none-match": etags[fast]}).status == 304
    clock[0] += 1000.0  # ~100 changes of a fast page, none of a static one
    assert get(static, **{"if-none-match": etags[static]}).status == 304
    later = get(fast, **{"if-none-match": etags[fast]})
    assert later.status == 200 and later.body != first[fast].body
    n, at = s.changes.version(0, fast, clock[0])
    assert n > 10 and 1000.0 < at <= clock[0]
    assert dict(later.headers)["Last-Modified"] == email.utils.formatdate(
        at, usegmt=True
    )


def test_change_profile_reaches_the_site_from_the_command_line() -> None:
    """``--change-profile measured``: the served web has the measured spread
    (30 % static, the rest from hourly to every four months)."""
    from sandbox.__main__ import build_parser, spec_from_args

    args = build_parser().parse_args(
        ["--hosts", "2", "--pages", "200", "--change-period", "86400",
         "--change-profile", "measured"]
    )  # fmt: skip
    spec = spec_from_args(args)
    assert spec.change_profile == "measured"
    s = Site(spec, PORT)
    assert s.changes is not None
    rates = [s.changes.rate(0, spec.page_path(0, k)) for k in range(200)]
    assert 0.2 < sum(r == 0 for r in rates) / len(rates) < 0.4
    changing = [1 / r for r in rates if r]
    assert min(changing) >= 3600 and max(changing) <= 120 * 86400
    assert max(changing) / min(changing) > 100  # orders of magnitude apart
    with pytest.raises(ValueError, match="change profile"):
        Site(SiteSpec(change_period=1.0, change_profile="nope"), PORT)


def test_slow_robots_txt(web: SandboxProcess) -> None:
    from sandbox.hostile import SLOW_ROBOTS_SECONDS

    start = time.monotonic()
    status, _, body = trap(web, "/robots.txt")
    # Held by the server: the client cannot see it sooner (later is allowed).
    assert time.monotonic() - start >= SLOW_ROBOTS_SECONDS - 0.01
    assert status == 200 and b"Disallow: /private/" in body
    assert fetch(web.port, host_name(0), "/robots.txt")[0] == 200  # only the trap


def test_dead_hosts_are_linked_from_every_page() -> None:
    from sandbox.hostile import DEAD_LINKS_PER_PAGE, dead_links
    from sandbox.resolver import DNS_TIMEOUT_SUFFIX

    site = Site(ALL, PORT)
    for i, k in [(0, 0), (3, 5), (11, 19)]:
        url = ALL.url(i, ALL.page_path(i, k), PORT)
        links = dead_links(ALL.seed, i, k, PORT)
        assert len(links) == DEAD_LINKS_PER_PAGE
        names = {urlsplit(u).hostname or "" for u in links}
        assert all(name.endswith(DNS_TIMEOUT_SUFFIX) for name in names)
        assert set(links) <= set(hrefs(url, get(site, url)[1]))
        assert not set(links) & set(hrefs(url, get(Site(PLAIN, PORT), url)[1]))
    # Not part of what a crawl can fetch from the sandbox.
    assert not any("dnstimeout" in u for u in ALL.reachable_urls(PORT))


def test_dnstimeout_names_fail_after_a_while() -> None:
    from scrapy.utils.test import get_crawler
    from twisted.internet.error import DNSLookupError
    from twisted.internet.task import Clock

    from sandbox.resolver import DNS_TIMEOUT_SECONDS, SandboxResolver

    clock = Clock()
    resolver = SandboxResolver.from_crawler(get_crawler(), clock)
    failures: list[Any] = []
    resolver.getHostByName("dead-001.dnstimeout.sandbox.test").addErrback(
        failures.append
    )
    clock.advance(DNS_TIMEOUT_SECONDS - 0.1)
    assert failures == []
    clock.advance(0.2)
    assert len(failures) == 1 and failures[0].check(DNSLookupError)
