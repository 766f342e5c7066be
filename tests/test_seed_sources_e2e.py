"""End to end: seeds in a SET or a ZSET, some in scrapy-redis's JSON shape,
taken by a worker that is SIGKILLed right after: another worker crawls them
all.

As ``tests/test_seeds_e2e.py`` does for the LIST: real ``scrapy crawl web``
workers, a real redis-server, the sandbox web; the seeds pushed with
``redis-cli sadd`` / ``zadd`` as a scrapy-redis user pushes them, with
``REDIS_START_URLS_AS_SET`` / ``AS_ZSET``. Worker A takes every seed and is
SIGKILLed before its scheduler can queue one (its beat into the frontier's
worker registry fails: the registry key is a string while A runs, and a
scheduler that has not beaten writes nothing ahead). The kill lands once
the seed key is empty in Redis. Worker B, started with the registry
repaired, finds the key empty: the seeds come back only through A's taken
list, into the SET or ZSET they came from.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from typing import TYPE_CHECKING

import pytest
import redis

from extensions.connection.embedded import find_redis_binary
from extensions.keys import FrontierKeys, seed_patterns, seed_takers, start_urls
from sandbox.process import SandboxProcess
from sandbox.site import SiteSpec
from tests.support.fleet import start_worker, stop, wait_all
from tests.support.localcrawl import reset_crawl, sandbox_settings
from tests.support.outcomes import stored_urls

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

SEEDS = start_urls("web")


def _taken(client: redis.Redis) -> list[bytes]:
    entries: list[bytes] = []
    for pattern in seed_patterns("web"):
        for key in client.scan_iter(match=pattern):
            if client.type(key) == b"list":
                entries += client.lrange(key, 0, -1)
    return entries


def _entries(seeds: list[str]) -> dict[str, int]:
    """Half the seeds as plain URLs, half in scrapy-redis's JSON shape (its
    README's example fields), each with a score for a ZSET."""
    return {
        (
            url
            if i % 2
            else json.dumps({"url": url, "meta": {"job-id": f"j{i}"}, "ref": "x"})
        ): i
        for i, url in enumerate(seeds)
    }


@pytest.mark.parametrize("kind", ["set", "zset"])
def test_seeds_of_a_set_or_zset_taken_by_a_killed_worker_are_crawled(
    tmp_path: Path, redis_url: str, kind: str
) -> None:
    spec = SiteSpec(seed=37, hosts=3, pages_per_host=2)
    settings = {
        **sandbox_settings(redis_url, tmp_path),
        "FRONTIER_HEARTBEAT_INTERVAL": 0.5,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 6,
        f"REDIS_START_URLS_AS_{kind.upper()}": True,
    }
    workers = FrontierKeys("web").workers
    client = redis.Redis.from_url(redis_url)
    count = client.scard if kind == "set" else client.zcard
    reset_crawl(redis_url)
    try:
        with SandboxProcess(spec, directory=tmp_path, max_seconds=180) as web:
            seeds = web.seed_urls()
            # The form field "ref" goes into each JSON seed's query string.
            entries = _entries(seeds)
            client.set(workers, "not a registry")
            cli = [find_redis_binary("redis-cli"), "-u", redis_url]
            if kind == "set":
                cli += ["sadd", SEEDS, *entries]
            else:
                cli += ["zadd", SEEDS]
                for entry, score in entries.items():
                    cli += [str(score), entry]
            subprocess.run(cli, check=True, stdout=subprocess.DEVNULL)
            a = start_worker(settings, tmp_path / "logs" / "a.log")
            deadline = time.monotonic() + 60
            while count(SEEDS) and time.monotonic() < deadline:
                assert a.poll() is None, "worker A stopped by itself"
                time.sleep(0.02)
            stop(a, signal.SIGKILL)
            taken_at_kill = _taken(client)
            assert count(SEEDS) == 0, "A never took the seeds"
            client.delete(workers)
            b = start_worker(settings, tmp_path / "logs" / "b.log")
            codes = wait_all([b], 120)
            web.stop()
        pages = stored_urls(tmp_path)
        assert codes == [0]
        # Nothing lost: every seed was crawled, by B (a JSON seed's URL with
        # its form field in the query, as scrapy-redis makes it).
        expected = {url if i % 2 else f"{url}?ref=x" for i, url in enumerate(seeds)}
        assert not expected - set(pages), sorted(expected - set(pages))
        if kind == "zset":
            # Taken with their scores, which went back with them.
            assert sorted(taken_at_kill) == sorted(
                f"{float(s):g}\n{e}".encode() for e, s in entries.items()
            )
        else:
            assert sorted(taken_at_kill) == sorted(e.encode() for e in entries)
        assert _taken(client) == []
        assert not client.exists(SEEDS)
        assert client.zcard(seed_takers("web")) == 0
        log = (tmp_path / "logs" / "b.log").read_text()
        assert f"'seeds/given_back': {len(seeds)}" in log
        assert "Invalid seed" not in log
    finally:
        client.close()
