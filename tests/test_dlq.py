"""The dead-letter queue (extensions.core.frontier.deadletters) and ``scrapy dlq``
against a real
redis-server: entries, per-reason sizes, and an exact re-queue past the
dupefilter."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import redis.asyncio as aredis
from scrapy import Request

from extensions.core.frontier.deadletters import DeadLetters, dead_letter
from extensions.core.frontier.frontier import Frontier, QueuedRequest, Worker
from extensions.core.frontier.serialization import request_from_bytes
from extensions.meta import FAILURE_META
from tests.support.fleet import ROOT, worker_env

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path


def run(redis_url: str, body: Callable[[DeadLetters], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        client = aredis.Redis.from_url(redis_url)
        try:
            return await body(DeadLetters(client, "web"))
        finally:
            await client.aclose()

    return asyncio.run(main())


def failed(url: str, reason: str, attempts: int = 2, **meta: Any) -> Request:
    """A request as the spider's errback sees it after its last attempt."""
    record = {"reason": reason, "attempts": attempts, "first": 1000.0,
              "status": None, "error": f"{reason} error", "terminal": True}  # fmt: skip
    return Request(url, priority=3, meta={FAILURE_META: record, "depth": 2, **meta})


def scrapy_dlq(
    redis_url: str, *args: str, command: str = "dlq"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scrapy", command, *args,
         "-s", f"REDIS_URL={redis_url}"],
        cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip


def test_entries_hold_the_failure_and_sizes_follow_replacements(
    redis_url: str,
) -> None:
    async def body(dlq: DeadLetters) -> None:
        redirected = failed(
            "http://b.test/final",
            "http_5xx",
            redirect_urls=["http://b.test/start"],
            frontier_lease="w:1",
        )
        letters = [
            dead_letter(failed("http://a.test/x", "dns"), None, "dns"),
            dead_letter(redirected, None, "http_5xx", status=502),
        ]
        assert await dlq.add(letters) == 2
        assert await dlq.sizes() == {"dns": 1, "http_5xx": 1}
        # The same URL failing again replaces its entry, and its count moves.
        again = dead_letter(failed("http://a.test/x", "connection"), None, "connection")
        assert await dlq.add([again]) == 0
        assert await dlq.sizes() == {"connection": 1, "http_5xx": 1}
        entries = {e["url"]: e for e in await dlq.entries()}
        five = entries["http://b.test/start"]  # the URL that was queued
        assert (five["reason"], five["status"], five["attempts"]) == (
            "http_5xx",
            502,
            2,
        )
        assert five["first_failure"] == 1000.0 and five["last_failure"] > 1000.0
        # The request is stored as first queued: no failure, chain or lease.
        request = request_from_bytes(five["request"].encode())
        assert request.url == "http://b.test/start"
        assert request.meta == {"depth": 2}
        assert [e["url"] for e in await dlq.entries(host="b.test")] == [
            "http://b.test/start"
        ]

    run(redis_url, body)


def test_scrapy_dlq_list_requeue_purge(redis_url: str) -> None:
    async def fill(dlq: DeadLetters) -> None:
        await dlq.add(
            [
                dead_letter(failed("http://a.test/1", "dns"), None, "dns"),
                dead_letter(failed("http://a.test/2", "dns"), None, "dns"),
                dead_letter(failed("http://c.test/3", "tls"), None, "tls"),
            ]
        )
        # The dupefilter has seen these URLs: a re-queue must not ask it.

    run(redis_url, fill)
    listed = scrapy_dlq(redis_url, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert sorted((r["url"], r["reason"], r["attempts"]) for r in rows) == [
        ("http://a.test/1", "dns", 2),
        ("http://a.test/2", "dns", 2),
        ("http://c.test/3", "tls", 2),
    ]
    text = scrapy_dlq(redis_url, "list", "--reason", "tls")
    assert "http://c.test/3" in text.stdout and "http://a.test/1" not in text.stdout

    requeued = scrapy_dlq(redis_url, "requeue", "--reason", "dns")
    assert requeued.returncode == 0, requeued.stderr
    assert "2 requests re-queued" in requeued.stdout

    async def after(dlq: DeadLetters) -> list[Request]:
        assert await dlq.sizes() == {"tls": 1}
        got = await Frontier(dlq.client, "web", Worker("w", 60_000)).lease(10)
        return [request_from_bytes(m) for _, m in got.leases]

    leased = run(redis_url, after)
    assert sorted(r.url for r in leased) == ["http://a.test/1", "http://a.test/2"]
    assert all(r.meta == {"depth": 2} for r in leased)

    refused = scrapy_dlq(redis_url, "purge")
    assert refused.returncode != 0
    purged = scrapy_dlq(redis_url, "purge", "--host", "c.test")
    assert "1 dead letters purged" in purged.stdout
    assert run(redis_url, lambda dlq: dlq.sizes()) == {}


def test_scrapy_status_reads_the_dead_letter_queue(
    redis_url: str, tmp_path: Path
) -> None:
    async def fill(dlq: DeadLetters) -> None:
        await dlq.add(
            [
                dead_letter(failed("http://a.test/1", "dns"), None, "dns"),
                dead_letter(failed("http://a.test/2", "dns"), None, "dns"),
                dead_letter(failed("http://c.test/3", "tls"), None, "tls"),
            ]
        )
        retry = QueuedRequest("http://a.test:80", 0, b"http://a.test/r", 60_000)
        await Frontier(dlq.client, "web").commit([retry])

    run(redis_url, fill)
    home = f"WEBCRAWL_HOME={tmp_path}"
    shown = scrapy_dlq(redis_url, "--json", "-s", home, command="status")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["dlq"] == 3
    assert status["dlq_by_reason"] == {"dns": 2, "tls": 1}
    assert status["retries_pending"] == 1
