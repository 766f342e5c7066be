"""End to end: seeds taken by a worker that is killed are crawled by another.

Real ``scrapy crawl web`` workers, a real redis-server, the sandbox web. Worker
A takes every seed and is SIGKILLed before its scheduler can queue one: its
beat into the frontier's worker registry fails (the registry key is made a
string for the time A runs), and a scheduler that has not beaten writes
nothing ahead (extensions.core.scheduler). The moment A has taken the seeds is
observed in Redis (the seed list is empty), so the kill lands in the window
deterministically. Worker B, started afterwards with the registry repaired,
finds the seed list empty: the seeds come back only through A's taken list.
"""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING

import pytest
import redis

from extensions.keys import FrontierKeys, seed_patterns, seed_takers, start_urls
from sandbox.process import SandboxProcess
from sandbox.site import SiteSpec
from tests.support.fleet import push_seeds, start_worker, stop, wait_all
from tests.support.localcrawl import reset_crawl, sandbox_settings
from tests.support.outcomes import stored_urls

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


def _taken(client: redis.Redis) -> list[bytes]:
    """Every entry of every worker's taken list."""
    entries: list[bytes] = []
    for pattern in seed_patterns("web"):
        for key in client.scan_iter(match=pattern):
            if client.type(key) == b"list":
                entries += client.lrange(key, 0, -1)
    return entries


def test_seeds_of_a_worker_killed_right_after_taking_them_are_crawled(
    tmp_path: Path, redis_url: str
) -> None:
    spec = SiteSpec(seed=31, hosts=3, pages_per_host=2)
    settings = {
        **sandbox_settings(redis_url, tmp_path),
        # A killed taker is dead after three beats (1.5 s).
        "FRONTIER_HEARTBEAT_INTERVAL": 0.5,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 6,
    }
    workers = FrontierKeys("web").workers
    client = redis.Redis.from_url(redis_url)
    reset_crawl(redis_url)
    try:
        with SandboxProcess(spec, directory=tmp_path, max_seconds=180) as web:
            seeds = web.seed_urls()
            client.set(workers, "not a registry")
            push_seeds(redis_url, seeds)
            a = start_worker(settings, tmp_path / "logs" / "a.log")
            deadline = time.monotonic() + 60
            while client.llen(start_urls("web")) and time.monotonic() < deadline:
                assert a.poll() is None, "worker A stopped by itself"
                time.sleep(0.02)
            stop(a, signal.SIGKILL)
            taken_at_kill = _taken(client)
            assert client.llen(start_urls("web")) == 0, "A never took the seeds"
            client.delete(workers)
            b = start_worker(settings, tmp_path / "logs" / "b.log")
            codes = wait_all([b], 120)
            web.stop()
        pages = stored_urls(tmp_path)
        assert codes == [0]
        # Nothing lost: every seed was crawled, by B.
        assert not set(seeds) - set(pages), sorted(set(seeds) - set(pages))
        assert sorted(taken_at_kill) == sorted(s.encode() for s in seeds)
        # B settled what it queued (nothing was given back on its close) and
        # left the takers.
        assert _taken(client) == []
        assert client.llen(start_urls("web")) == 0
        assert client.zcard(seed_takers("web")) == 0
        log = (tmp_path / "logs" / "b.log").read_text()
        assert "'seeds/given_back': 3" in log
    finally:
        client.close()
