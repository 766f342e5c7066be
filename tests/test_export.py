"""Getting pages out: feed exports of a real crawl (``-o``/``FEEDS``),
``scrapy export`` to JSON lines and WARC (checked with warcio and byte for
byte against what the sandbox serves), and ``python -m pipelines.read``.

One real crawl of a small sandbox web (one ``scrapy crawl web`` worker, real
Redis) serves every test of the module.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
import redis
from scrapy.settings import Settings
from warcio.archiveiterator import ArchiveIterator

from pipelines.records import RECORD_FIELDS
from pipelines.stores import store_from_settings
from sandbox.site import Request, Site, SiteSpec
from tests.support.localcrawl import CrawlReport, crawl_sandbox
from tests.support.tools import WARCIO, run_tool

if TYPE_CHECKING:
    from pathlib import Path

    from extensions.connection.embedded import RedisProcess
    from pipelines.stores.base import StoredPage

# The module's crawl (a fixture) runs once: in one pytest-xdist process.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("export")]

# Hostile corners that make the WARC interesting: ETag/Last-Modified headers,
# duplicate pages (metadata records only), redirects (the response record is
# the final URL's) and non-UTF-8 bodies (bytes, not text, must survive).
FEATURES = frozenset({"etag", "duplicates", "redirects", "encodings"})


@dataclass
class Crawled:
    report: CrawlReport
    home: Path
    pages: list[StoredPage]


@pytest.fixture(scope="module")
def crawled(
    redis_server: RedisProcess, tmp_path_factory: pytest.TempPathFactory
) -> Crawled:
    home = tmp_path_factory.mktemp("export")
    redis.Redis.from_url(redis_server.url).flushall()
    feeds = {
        str(home / "pages.jsonl"): {"format": "jsonlines"},
        str(home / "pages.csv"): {"format": "csv"},
    }
    report = crawl_sandbox(
        SiteSpec(seed=4, hosts=4, pages_per_host=6, features=FEATURES),
        redis_server.url,
        home,
        workers=1,
        settings={"DOWNLOAD_DELAY": 0.01, "FEEDS": json.dumps(feeds)},
        timeout=240,
    )
    assert report.exit_codes == [0]
    store = store_from_settings(Settings({"WEBCRAWL_HOME": str(home)}))
    store.open(create=False)
    try:
        pages = list(store.iter_pages())
    finally:
        store.close()
    return Crawled(report, home, pages)


def served(site: Site, url: str) -> Any:
    """What the sandbox answers to a plain GET of ``url`` (rendered in this
    process: a site is a pure function of its spec and port)."""
    parts = urlsplit(url)
    return site.handle(Request("GET", parts.hostname or "", parts.path, "", {}))


# The dead letters the frontier writes itself (extensions.core.frontier.deadletters):
# their store
# records' errors start with the reason.
FRONTIER_ENDINGS = ("redirect_loop:", "offsite_redirect:", "host_down:", "dns:")


def test_feed_exports_hold_records_not_items(crawled: Crawled) -> None:
    """``-o pages.jsonl`` was empty (bytes are not JSON: one traceback per
    page) and ``-o pages.csv`` held raw HTML and lease tokens."""
    log = "".join(p.read_text() for p in crawled.report.log_dir.glob("*.log"))
    assert "Traceback" not in log
    by_url = {p.url: p for p in crawled.pages}
    lines = (crawled.home / "pages.jsonl").read_text("utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    # Feeds carry what the spider and its errbacks produced. A dead letter
    # the frontier wrote with no response (here the redirect loop's) is
    # recorded by the store alone (README "Feed exports").
    unfed = set(by_url) - {r["url"] for r in records}
    assert unfed, "the sandbox's redirect loop left no store-only record"
    for url in unfed:
        meta = by_url[url].metadata
        assert meta["status"] == 0 and meta["error"].startswith(FRONTIER_ENDINGS), meta
    assert len(records) == len(crawled.pages) - len(unfed) > 10
    assert {r["url"] for r in records} == set(by_url) - unfed
    for r in records:
        assert list(r) == list(RECORD_FIELDS)  # no lease, headers or body
        page = by_url[r["url"]]
        assert r["id"] == page.metadata["_id"]
        assert r["status"] == page.metadata["status"]
        if page.metadata["has_content"] and "html" in r["content_type"]:
            assert r["text"] and r["title"] == page.metadata["title"]
            assert "<" not in r["text"]
    with (crawled.home / "pages.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == list(RECORD_FIELDS)
    assert len(rows) - 1 == len(records)
    assert not [c for row in rows for c in row if "<html" in c.lower()]


def test_export_warc_is_valid_and_byte_exact(crawled: Crawled, tmp_path: Path) -> None:
    out = tmp_path / "crawl.warc.gz"
    home = str(crawled.home)
    done = run_tool("-m", "scrapy", "export", "--format", "warc", "-o", str(out),
                    "-s", f"WEBCRAWL_HOME={home}")  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    check = run_tool(WARCIO, "check", "-v", str(out))
    assert check.returncode == 0, check.stdout.decode()
    assert b"digest pass" in check.stdout and b"fail" not in check.stdout
    index = run_tool(WARCIO, "index", str(out))
    assert index.returncode == 0
    indexed = [json.loads(line) for line in index.stdout.decode().splitlines()]

    site = Site(crawled.report.spec, crawled.report.port)
    by_id = {p.metadata["_id"]: p for p in crawled.pages}
    kinds: dict[str, int] = {}
    metadata_urls = []
    with out.open("rb") as f:
        for record in ArchiveIterator(f):
            kinds[record.rec_type] = kinds.get(record.rec_type, 0) + 1
            headers = record.rec_headers
            assert headers.protocol == "WARC/1.1"
            uri = headers.get_header("WARC-Target-URI")
            if record.rec_type == "response":
                payload = record.content_stream().read()
                answer = served(site, uri)
                assert answer.status == int(record.http_headers.get_statuscode())
                assert payload == answer.body, uri  # byte for byte
                for name, value in answer.headers:
                    assert record.http_headers.get_header(name) == value
            elif record.rec_type == "metadata":
                meta = json.loads(record.content_stream().read())
                assert meta["url"] == uri
                assert by_id[meta["id"]].metadata["status"] == meta["status"]
                metadata_urls.append(uri)
    stored = [p for p in crawled.pages if p.metadata["has_content"]]
    assert kinds["warcinfo"] == 1
    assert kinds["response"] == len(stored)
    assert sorted(metadata_urls) == sorted(p.url for p in crawled.pages)
    assert len(stored) < len(crawled.pages)  # duplicates and failures
    # The hostile corners were crawled: a redirected page (its response record
    # is the final URL's) and bodies that are not UTF-8.
    assert any(p.metadata["final_url"] != p.url for p in stored)
    encodings = {str(p.metadata["encoding"]).replace("-", "").lower() for p in stored}
    assert encodings - {"utf8"}, encodings
    assert len(indexed) == sum(kinds.values())

    # --host keeps one host's pages only.
    host = urlsplit(stored[0].url).hostname or ""
    one = tmp_path / "one.warc"
    done = run_tool("-m", "scrapy", "export", "--format", "warc", "-o", str(one),
                    "--host", host, "-s", f"WEBCRAWL_HOME={home}")  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    with one.open("rb") as f:
        uris = {
            r.rec_headers.get_header("WARC-Target-URI")
            for r in ArchiveIterator(f)
            if r.rec_type == "metadata"
        }
    assert uris == {p.url for p in crawled.pages if p.metadata["domain"] == host}


def test_export_jsonl_since_and_body(crawled: Crawled, tmp_path: Path) -> None:
    times = sorted(p.metadata["fetched_at"] for p in crawled.pages)
    middle = times[len(times) // 2]
    out = tmp_path / "pages.jsonl"
    done = run_tool("-m", "scrapy", "export", "--format", "jsonl", "-o", str(out),
                    "--since", repr(middle), "--body",
                    "-s", f"WEBCRAWL_HOME={crawled.home}")  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    records = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    assert [r["fetched_at"] for r in records] == [t for t in times if t >= middle]
    by_url = {p.url: p for p in crawled.pages}
    for r in records:
        page = by_url[r["url"]]
        if page.metadata["has_content"]:
            assert r["body"] == page.text
            assert r["text"] is not None or "html" not in r["content_type"]


def test_export_and_read_refuse_a_missing_store(tmp_path: Path) -> None:
    home = tmp_path / "nothing-here"
    out = str(tmp_path / "x.jsonl")
    done = run_tool("-m", "scrapy", "export", "--format", "jsonl", "-o", out,
                    "-s", f"WEBCRAWL_HOME={home}")  # fmt: skip
    assert done.returncode == 2
    assert b"no SQLite page store at" in done.stderr
    read = run_tool("-m", "pipelines.read", "http://a.test/",
                    env={"WEBCRAWL_HOME": str(home)})  # fmt: skip
    assert read.returncode == 2
    assert b"no SQLite page store at" in read.stderr
    assert not home.exists()  # neither created an empty store


def test_read_honours_sqlite_path_and_settings(
    crawled: Crawled, tmp_path: Path
) -> None:
    page = next(p for p in crawled.pages if p.metadata["has_content"])
    path = str(crawled.home / "pages.sqlite3")
    # From another directory, with the store named by the environment...
    read = run_tool("-m", "pipelines.read", "--meta", page.url,
                    env={"SQLITE_PATH": path}, cwd=tmp_path)  # fmt: skip
    assert read.returncode == 0, read.stderr.decode()
    assert json.loads(read.stdout)["_id"] == page.metadata["_id"]
    # ... or by -s, as for the workers.
    read = run_tool("-m", "pipelines.read", page.url,
                    "-s", f"WEBCRAWL_HOME={crawled.home}")  # fmt: skip
    assert read.returncode == 0, read.stderr.decode()
    assert page.text is not None and page.text.strip() in read.stdout.decode()
    assert not (tmp_path / ".webcrawl").exists()


def test_a_redirected_page_is_read_and_exported_by_either_url(
    crawled: Crawled, tmp_path: Path
) -> None:
    """Issue 21: a page is stored under the URL that was scheduled (the key);
    ``python -m pipelines.read`` of the URL that answered found nothing."""
    keys = {p.url for p in crawled.pages}
    redirected = [
        p
        for p in crawled.pages
        if p.metadata["final_url"] != p.url and p.metadata["final_url"] not in keys
    ]
    assert redirected, "the sandbox's redirects corner was not crawled"
    page = redirected[0]
    final = page.metadata["final_url"]
    for url in (page.url, final):
        read = run_tool("-m", "pipelines.read", "--meta", url,
                        "-s", f"WEBCRAWL_HOME={crawled.home}")  # fmt: skip
        assert read.returncode == 0, read.stderr.decode()
        meta = json.loads(read.stdout)
        assert (meta["url"], meta["final_url"]) == (page.url, final)
    # An export names both: the key as "url", the URL that answered as
    # "final_url".
    out = tmp_path / "pages.jsonl"
    done = run_tool("-m", "scrapy", "export", "--format", "jsonl", "-o", str(out),
                    "-s", f"WEBCRAWL_HOME={crawled.home}")  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    records = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    assert {"url": page.url, "final_url": final}.items() <= next(
        r for r in records if r["final_url"] == final
    ).items()
