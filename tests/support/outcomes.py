"""What a crawl left behind: the page store, the dead-letter queue and the
frontier in Redis (the buckets every URL of a finished crawl falls into)."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio as aredis
from scrapy.settings import Settings

from extensions.core.frontier.deadletters import DeadLetters
from extensions.keys import FrontierKeys
from pipelines.stores import store_from_settings

if TYPE_CHECKING:
    from pathlib import Path

    from tests.support.localcrawl import CrawlReport


def stored_urls(home: Path) -> dict[str, Any]:
    """Every page of the SQLite store under ``home``, by URL."""
    store = store_from_settings(Settings({"WEBCRAWL_HOME": str(home)}))
    store.open(create=False)
    try:
        return {page.url: page for page in store.iter_pages()}
    finally:
        store.close()


def assert_complete(report: CrawlReport, home: Path) -> None:
    """Every reachable page fetched and stored with its 200, no page
    robots.txt disallows fetched."""
    expected = report.spec.reachable_urls(report.port)
    counts = report.fetch_counts()
    missing = expected - set(counts)
    assert not missing, f"never fetched: {sorted(missing)[:5]}"
    assert not report.disallowed_fetches()
    pages = stored_urls(home)
    not_stored = {u for u in expected if u not in pages}
    assert not not_stored, f"not stored: {sorted(not_stored)[:5]}"
    assert all(pages[u].metadata["status"] == 200 for u in expected)


def dead_letters(redis_url: str, partitions: int = 1) -> dict[str, dict[str, Any]]:
    """The dead-letter queue's entries, by URL."""

    async def main() -> list[dict[str, Any]]:
        client = aredis.Redis.from_url(redis_url)
        try:
            return await DeadLetters(client, "web", partitions).entries()
        finally:
            await client.aclose()

    return {e["url"]: e for e in asyncio.run(main())}


def waiting_urls(redis_url: str, partitions: int = 1) -> set[str]:
    """URLs queued or delayed in the frontier (not leased: the crawl ended)."""
    client = redis.Redis.from_url(redis_url)
    urls: set[str] = set()
    try:
        for p in range(partitions):
            k = FrontierKeys("web", p, partitions)
            for key in client.scan_iter(match=k.queue_prefix + "*"):
                members: list[bytes] = client.zrange(key, 0, -1)  # type: ignore[assignment]
                urls.update(m.split(b"\n", 1)[0].decode() for m in members)
            delayed: list[bytes] = client.zrange(k.delayed, 0, -1)  # type: ignore[assignment]
            urls.update(m.split(b"\n", 3)[2].decode() for m in delayed)
            assert client.zcard(k.leases) == 0
    finally:
        client.close()
    return urls


def in_flight(redis_url: str, pid: int, partitions: int = 1) -> int:
    """Requests worker ``pid`` holds in Redis: its leases and its batches
    written ahead of the dupefilter, in every partition."""
    client = redis.Redis.from_url(redis_url)
    try:
        prefix = f"{socket.gethostname()}-{pid}-"
        leases = batches = 0
        for p in range(partitions):
            keys = FrontierKeys("web", p, partitions)
            held: list[bytes] = client.hkeys(keys.lease_data)  # type: ignore[assignment]
            leases += sum(lease.decode().startswith(prefix) for lease in held)
            for wal in client.scan_iter(match=keys.wal_prefix + prefix + "*"):
                written: list[bytes] = client.hvals(wal)  # type: ignore[assignment]
                batches += sum(len(json.loads(v)) for v in written)
        return leases + batches
    finally:
        client.close()
