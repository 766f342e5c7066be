"""Trap and abuse limits: unit checks on the filter with a real Redis, and a
real crawl of the sandbox's trap corners whose fetches stay bounded."""

from __future__ import annotations

import asyncio
import base64
import random
import sqlite3
import string
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import redis
from scrapy import Request
from scrapy.exceptions import NotConfigured
from scrapy.http import HtmlResponse

from extensions.connection.embedded import RedisProcess
from extensions.settings import defaults
from extensions.spidermiddlewares.traps import path_template
from sandbox.site import SiteSpec
from tests.support.localcrawl import crawl_sandbox
from tests.support.outcomes import dead_letters
from tests.support.traps import run_output, trap_filter

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path


def refused(url: str, **settings: Any) -> str | None:
    found = trap_filter(**settings).check(url)
    return None if found is None else found.reason


def test_defaults_follow_scrapy_names() -> None:
    mw = trap_filter()
    assert mw.max_length == 2083  # Scrapy's URLLENGTH_LIMIT default
    assert mw.max_outlinks == defaults.MAX_OUTLINKS_PER_PAGE
    with pytest.raises(NotConfigured):
        trap_filter(TRAPS_ENABLED=False)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://a.test/" + "x" * 2100, "url_too_long"),
        ("http://a.test/" + "/".join(f"d{i}" for i in range(21)), "path_too_deep"),
        ("http://a.test/a/a/a/", "repeated_segments"),
        ("http://a.test/a/b/a/b/a/b", "repeated_segments"),
        ("http://a.test/a/b/a/b", None),
        ("http://a.test/2024/01/01/", None),
        ("http://a.test/" + "/".join(f"d{i}" for i in range(20)), None),
    ],
)
def test_check(url: str, reason: str | None) -> None:
    assert refused(url) == reason


def _random_ids(seed: int) -> dict[str, list[str]]:
    rng = random.Random(seed)
    base62 = string.ascii_letters + string.digits

    def chars(alphabet: str, n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    return {
        "uuid4": [str(uuid.UUID(int=rng.getrandbits(128), version=4))
                  for _ in range(500)],
        "base64url-16-bytes": [
            base64.urlsafe_b64encode(rng.randbytes(16)).decode().rstrip("=")
            for _ in range(500)
        ],
        "base62-16": [chars(base62, 16) for _ in range(500)],
        "base62-20": [chars(base62, 20) for _ in range(500)],
        "hex-32": [rng.randbytes(16).hex() for _ in range(500)],
    }  # fmt: skip


@pytest.mark.parametrize("shape", list(_random_ids(0)))
def test_random_session_ids_in_paths_make_one_template(shape: str) -> None:
    """Issue 21: ``/s/<random>/...`` drew 953 requests in 100 s: only hex of
    16+ digits and 24+ letters and digits were taken for ids, not a UUID,
    base64url of 16 bytes (22 characters) or 16 to 20 of base62."""
    ids = _random_ids(21)[shape]
    templates = [path_template(f"/s/{token}/page.html") for token in ids]
    found = sum(t == "/s/{id}/page.html" for t in templates)
    assert found >= 0.97 * len(ids), (
        found,
        [i for i, t in zip(ids, templates, strict=True) if not t],
    )


@pytest.mark.parametrize(
    "segment",
    [
        "python3-doc", "asyncio-eventloop.html", "NFLCommish07", "getElementById",
        "CategoryNavigationResultsWithTopNavView", "my-post-2024-03-01",
        "html5-canvas-tutorial", "windows10", "chapter-12-section-4",
        "Python-3.11.7.tar.xz", "iPhone", "README",
    ],
)  # fmt: skip
def test_words_names_and_numbers_are_not_ids(segment: str) -> None:
    assert path_template(f"/docs/{segment}") is None


def test_limits_can_be_lifted() -> None:
    off = {
        "URLLENGTH_LIMIT": 0,
        "TRAP_MAX_PATH_DEPTH": 0,
        "TRAP_MAX_SEGMENT_REPEATS": 0,
    }
    assert refused("http://a.test/" + "a/" * 2000, **off) is None


def errback(failure: Any) -> list[dict[str, str]]:
    return [{"refused": failure.request.url, "reason": failure.value.reason}]


def test_records_refusals_and_keeps_order(redis_url: str) -> None:
    mw = trap_filter(REDIS_URL=redis_url)
    page = {"page": "http://a.test/"}
    out = run_output(
        mw,
        [
            Request("http://a.test/ok", errback=errback),
            Request("http://a.test/a/a/a", errback=errback),
            page,
            Request("http://a.test/late"),
        ],
    )
    # A refusal's record comes at once; requests still precede the page item
    # that followed them (the page's lease ends after its children are queued).
    assert [getattr(x, "url", x) for x in out] == [
        {"refused": "http://a.test/a/a/a", "reason": "repeated_segments"},
        "http://a.test/ok",
        page,
        "http://a.test/late",
    ]
    assert mw.crawler.stats.get_value("traps/filtered/repeated_segments") == 1  # type: ignore[union-attr]


def test_outlinks_are_capped(redis_url: str) -> None:
    mw = trap_filter(REDIS_URL=redis_url, MAX_OUTLINKS_PER_PAGE=5)
    out = run_output(mw, [Request(f"http://a.test/{n}") for n in range(12)])
    assert [r.url for r in out] == [f"http://a.test/{n}" for n in range(5)]
    assert mw.crawler.stats.get_value("traps/outlinks_dropped") == 7  # type: ignore[union-attr]


def test_budgets_are_fleet_wide(redis_url: str) -> None:
    settings = {
        "REDIS_URL": redis_url,
        "HOST_MAX_PAGES": 6,
        "TRAP_MAX_QUERY_VARIANTS": 3,
    }
    first, second = trap_filter(**settings), trap_filter(**settings)
    facets = [Request(f"http://a.test/search?q={n}") for n in range(5)]
    months = [Request(f"http://a.test/cal/2024/{m:02d}") for m in range(1, 6)]
    out = run_output(first, facets + months)
    assert [r.url for r in out] == [r.url for r in facets[:3] + months[:3]]
    # Another worker sees the same full budgets: a full budget refuses even
    # URLs it admitted before (the dupefilter would drop those anyway) ...
    assert run_output(second, [Request(r.url) for r in facets[:3]]) == []
    # ... and the host's budget is shared: 6 admitted, no more.
    more = run_output(second, [Request(f"http://a.test/p{n}") for n in range(3)])
    assert more == []
    stats = second.crawler.stats
    assert stats is not None
    assert stats.get_value("traps/filtered/host_budget") >= 3


def test_links_with_nothing_to_count_cost_no_redis_command(redis_url: str) -> None:
    # Default budgets: no host budget, a variant budget that only URLs with a
    # query or a templated path count against. Pages of plain links are
    # admitted without a round trip of their own (the worker reads the hosts'
    # own budgets, `scrapy hosts set --max-pages`, once a heartbeat); a facet
    # link still goes to Redis.
    client = redis.Redis.from_url(redis_url)

    def calls() -> dict[str, int]:
        return {
            name.removeprefix("cmdstat_"): int(v["calls"])
            for name, v in client.info("commandstats").items()
        }

    plain = [Request(f"http://a.test/p/{n}.html") for n in range(20)]
    mw = trap_filter(REDIS_URL=redis_url)
    response = HtmlResponse("http://a.test/", body=b"<html></html>")

    async def pages(n: int) -> list[Any]:
        out: list[Any] = []
        for _ in range(n):

            async def result() -> AsyncIterator[Any]:
                for request in plain:
                    yield request

            out += [x async for x in mw.process_spider_output(response, result())]
        await mw.client.aclose()
        return out

    before = calls()
    out = asyncio.run(pages(5))
    assert [r.url for r in out] == [r.url for r in plain] * 5
    after = calls()
    # One read of the overrides for five pages; no script, no other command
    # but the client's handshake and health check, and this INFO.
    sent = {
        name: n - before.get(name, 0)
        for name, n in after.items()
        if n != before.get(name, 0) and name not in {"info", "client", "hello", "ping"}
    }
    assert sent == {"hgetall": 1}
    # A facet link goes to Redis: the budget script by SHA, in one round
    # trip (no SCRIPT EXISTS before it once the script is loaded).
    facets = [Request(f"http://a.test/s?q={n}") for n in range(3)]
    run_output(trap_filter(REDIS_URL=redis_url), facets[:1])
    before = client.info("commandstats")
    out = run_output(trap_filter(REDIS_URL=redis_url), facets)
    after = client.info("commandstats")
    assert [r.url for r in out] == [r.url for r in facets]
    assert after["cmdstat_evalsha"]["calls"] - before["cmdstat_evalsha"]["calls"] == 3
    assert after["cmdstat_script"] == before["cmdstat_script"]
    client.close()


def test_a_budget_refusal_reaches_the_errback_as_a_store_only_record(
    redis_url: str,
) -> None:
    """Before: counted and logged once, but no per-URL record at all."""
    mw = trap_filter(REDIS_URL=redis_url, HOST_MAX_PAGES=3, TRAP_MAX_QUERY_VARIANTS=2)
    seen: list[Any] = []

    def keep(failure: Any) -> list[str]:
        seen.append(failure.value)
        return ["record of " + failure.request.url]

    out = run_output(
        mw,
        [Request(f"http://a.test/search?q={n}", errback=keep) for n in range(3)]
        + [Request(f"http://a.test/p{n}", errback=keep) for n in range(2)],
    )
    assert [getattr(x, "url", x) for x in out] == [
        "http://a.test/search?q=0",
        "http://a.test/search?q=1",
        "record of http://a.test/search?q=2",  # over the path's variants
        "http://a.test/p0",
        "record of http://a.test/p1",  # over the host's pages
    ]
    assert [(e.reason, e.dead_letter) for e in seen] == [
        ("query_variants", False),
        ("host_budget", False),
    ]
    stats = mw.crawler.stats
    assert stats is not None
    assert stats.get_value("traps/filtered/query_variants") == 1
    assert stats.get_value("traps/filtered/host_budget") == 1


@pytest.mark.slow
def test_crawl_of_trap_corners_is_bounded(redis_url: str, tmp_path: Path) -> None:
    spec = SiteSpec(seed=3, hosts=2, pages_per_host=5, features={"calendar", "traps"})
    cap = 4
    report = crawl_sandbox(
        spec,
        redis_url,
        tmp_path,
        workers=1,
        settings={"DOWNLOAD_DELAY": 0.02, "TRAP_MAX_QUERY_VARIANTS": cap},
        timeout=240,
    )
    assert report.exit_codes == [0]
    paths = [r["path"] for r in report.page_records]

    def fetched(prefix: str) -> int:
        return sum(p.startswith(prefix) for p in paths)

    # Each trap ends: about `cap` variants each (HLL counts are approximate).
    assert 1 <= fetched("/calendar/") <= cap + 1
    assert 1 <= fetched("/session/") <= cap + 1
    assert 1 <= fetched("/s/") <= cap + 1
    assert 1 <= fetched("/sid/") <= cap + 1  # random-looking ids (issue 21)
    assert 1 <= fetched("/facets") <= cap + 2  # the bare path is one variant
    # /repeat/: a and b/a appended forever, cut where a segment repeats 3 times.
    repeats = [p for p in paths if p.startswith("/repeat/")]
    assert repeats and all(p.count("/a") <= 2 for p in repeats)
    with sqlite3.connect(tmp_path / "pages.sqlite3") as db:
        errors = [e for (e,) in db.execute("SELECT error FROM pages_metadata") if e]
        rows = db.execute("SELECT url, status, filtered FROM pages_metadata").fetchall()
    assert any("repeated_segments" in e for e in errors), errors
    # Every URL a budget refused has a filtered record, and none of them is
    # over a page that was fetched (a stored page is never replaced).
    fetched_urls = {f"http://{r['host']}:{report.port}{r['path']}"
                    for r in report.page_records}  # fmt: skip
    filtered = {url: reason for url, _, reason in rows if reason}
    assert "query_variants" in filtered.values(), rows
    assert not set(filtered) & fetched_urls
    assert all(status == 0 for url, status, _ in rows if url in filtered)
    # Store-only: the dead-letter queue holds no budget refusal.
    dead = dead_letters(redis_url)
    assert not [e for e in dead.values() if e["reason"] == "query_variants"]


def test_a_redis_restart_holds_the_output_back_instead_of_losing_it(
    tmp_path: Path,
) -> None:
    """Redis down while a page's links are checked: the page's output (its
    item carries the lease) waits for Redis rather than failing."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        mw = trap_filter(REDIS_URL=server.url, HOST_MAX_PAGES=100)
        page = {"page": "http://a.test/"}

        async def body() -> list[Any]:
            response = HtmlResponse("http://a.test/", body=b"<html></html>")

            async def result() -> AsyncIterator[Any]:
                yield Request("http://a.test/1")
                yield page

            await asyncio.to_thread(server.stop)
            task = asyncio.ensure_future(
                collect(mw.process_spider_output(response, result()))
            )
            await asyncio.sleep(1.0)
            assert not task.done()
            await asyncio.to_thread(server.start, server.port)
            out = await asyncio.wait_for(task, 30)
            await mw.client.aclose()
            return out

        out = asyncio.run(body())
    finally:
        server.stop()
    assert [getattr(x, "url", x) for x in out] == ["http://a.test/1", page]


async def collect(items: AsyncIterator[Any]) -> list[Any]:
    return [x async for x in items]
