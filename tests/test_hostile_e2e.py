"""Hostile inputs against real ``scrapy crawl web`` workers (issue 10).

Seeds are pushed with the real ``redis-cli``; poison is written into the real
Redis the workers share; what was fetched is read from the sandbox's own
request record. Each test's waits are bounded, and a ``during`` callback never
raises (it records what it saw), so a failing run still stops its workers.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis

from extensions.core.frontier.lua import POISON_KEEP
from extensions.keys import FrontierKeys
from sandbox.process import SandboxProcess
from sandbox.site import SiteSpec
from tests.support.fleet import push_seeds, start_worker, stop, wait_all
from tests.support.localcrawl import crawl_sandbox, reset_crawl
from tests.support.outcomes import assert_complete

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.slow

KEYS = FrontierKeys("web")
INVALID = "web:start_urls:invalid"


def wait_until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


def invalid_records(client: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(e) for e in client.lrange(INVALID, 0, -1)]


def worker_logs(home: Path) -> str:
    return "".join(p.read_text("utf-8", "replace") for p in (home / "logs").iterdir())


# Pushed with the sandbox's own seeds, in the same batch: before the fix the
# first of these (a ValueError in parse_seed) lost every seed of the batch
# and killed start(), so nothing was crawled.
START_HOSTILE = {
    "http://[::1": "Invalid IPv6",
    "http://h:99999/": "Port out of range",
    "\udcff\udcfe garbage": "not UTF-8",  # redis-cli gets the raw bytes ff fe
    "http://sandbox.test/" + "a" * 100_000: "too long",
    "[1,2]": "scheme",
    '{"url": "http://sandbox.test/", "priority": "high"}': "integer",
    '{"url": "http://sandbox.test/", "meta": {"download_maxsize": 0}}': "not allowed",
    '{"url": "http://sandbox.test/", "meta": {"proxy": "http://x.test:1"}}': "'proxy'",
}


def test_hostile_seeds_cost_nothing_but_themselves(
    redis_url: str, tmp_path: Path
) -> None:
    """Every seed ends crawled or in the invalid list with its reason, at
    start-up and while polling, and a seed's ``meta`` cannot name another
    worker's lease (which it acknowledged, i.e. deleted, before the fix)."""
    spec = SiteSpec(seed=4, hosts=3, pages_per_host=4)
    client = redis.Redis.from_url(redis_url)
    seen: dict[str, Any] = {}
    other_lease = "other-worker:1"

    def during(procs: list[Any], web: SandboxProcess) -> None:
        # Another worker's lease, far from expiring.
        sec, _ = client.time()
        client.zadd(KEYS.leases, {other_lease: (sec + 600) * 1000})
        member = web.url(0, "/held-by-other")
        client.hset(KEYS.lease_data, other_lease, f"x\n1\n{member}")
        seen["start"] = wait_until(
            lambda: client.llen(INVALID) >= len(START_HOSTILE), 90
        )
        polled = web.url(1, "/polled-seed")
        push_seeds(
            redis_url,
            [
                "http://h:99999/",
                json.dumps({"url": polled, "meta": {"user": {"campaign": "x"}}}),
                json.dumps({"url": polled, "meta": {"frontier_lease": other_lease}}),
            ],
        )
        seen["polled"] = wait_until(
            lambda: (
                client.llen(INVALID) >= len(START_HOSTILE) + 2
                and any(r["path"] == "/polled-seed" for r in web.records())
            ),
            60,
        )
        seen["lease_kept"] = client.zscore(KEYS.leases, other_lease) is not None
        # Let the worker's idle close happen (it waits for every lease).
        client.zrem(KEYS.leases, other_lease)
        client.hdel(KEYS.lease_data, other_lease)

    try:
        report = crawl_sandbox(
            spec, redis_url, tmp_path, workers=1,
            settings={"DOWNLOAD_DELAY": 0.02, "SEED_POLL_INTERVAL": 0.3},
            extra_seeds=list(START_HOSTILE), during=during, timeout=150,
        )  # fmt: skip
        records = invalid_records(client)
    finally:
        client.close()
    assert seen == {"start": True, "polled": True, "lease_kept": True}, (
        records,
        worker_logs(tmp_path)[-4000:],
    )
    assert report.exit_codes == [0], worker_logs(tmp_path)[-4000:]
    assert_complete(report, tmp_path)
    reasons = [r["reason"] for r in records]
    for words, reason in zip(START_HOSTILE.values(), reasons, strict=False):
        assert words in reason
    assert "Port out of range" in reasons[len(START_HOSTILE)]
    assert (
        "'frontier_lease' is one Scrapy or webcrawl reads: not allowed"
        in reasons[len(START_HOSTILE) + 1]
    )
    assert len(records) == len(START_HOSTILE) + 2
    # The huge entry is kept cut, with its length.
    assert records[3]["length"] == len("http://sandbox.test/") + 100_000


def test_poison_in_redis_does_not_stop_the_fleet(
    redis_url: str, tmp_path: Path
) -> None:
    """A write-ahead entry that is not JSON (of a dead worker), a lease record
    without its fields and a queued request naming a module: the workers set
    each aside in the poison list and crawl everything. Before the fix the
    recover script failed on every heartbeat and no page was crawled."""
    spec = SiteSpec(seed=6, hosts=3, pages_per_host=5)
    client = redis.Redis.from_url(redis_url)

    def during(procs: list[Any], web: SandboxProcess) -> None:
        client.zadd(KEYS.workers, {"ghost": 0})
        client.hset(KEYS.wal("ghost"), "e1", "not json")
        client.zadd(KEYS.leases, {"ghost:7": 0})
        client.hset(KEYS.lease_data, "ghost:7", "garbage")
        host = f"http://site-000.sandbox.test:{web.port}"
        client.zadd(KEYS.queue(host), {f'{host}/zen\n{{"C":"this.s"}}': 0})
        client.zadd(KEYS.ready, {host: 0})

    try:
        report = crawl_sandbox(
            spec, redis_url, tmp_path, workers=2,
            settings={"DOWNLOAD_DELAY": 0.02, "FRONTIER_HEARTBEAT_INTERVAL": 0.5},
            during=during, timeout=120,
        )  # fmt: skip
        poison = [json.loads(r) for r in client.lrange(KEYS.poison, 0, -1)]
        wal_left = client.exists(KEYS.wal("ghost"))
    finally:
        client.close()
    assert report.exit_codes == [0, 0]
    assert_complete(report, tmp_path)
    assert sorted(r["reason"] for r in poison) == [
        "malformed lease record",
        "request class 'this.s' is not allowed",
        "write-ahead batch is not a JSON list",
    ]
    assert len(poison) <= POISON_KEEP
    assert wal_left == 0
    logs = worker_logs(tmp_path)
    assert "Beautiful is better than ugly" not in logs  # `import this` ran
    assert logs.count("malformed frontier entries") <= 2  # once per worker
    assert "/zen" not in {r["path"] for r in report.records}


def test_a_broken_seed_list_is_reported_and_polling_goes_on(
    redis_url: str, tmp_path: Path
) -> None:
    """``web:start_urls`` holding a string (not a list) failed ``start()``
    and, while polling, was logged at DEBUG only: the poller died or hid the
    error. Now it is an ERROR with its traceback, and once the list is
    repaired its seeds are crawled by the same worker."""
    spec = SiteSpec(seed=8, hosts=2, pages_per_host=3)
    reset_crawl(redis_url)
    client = redis.Redis.from_url(redis_url)
    client.set("web:start_urls", "not a list")
    log = tmp_path / "logs" / "worker.log"
    settings = {
        "REDIS_URL": redis_url,
        "WEBCRAWL_HOME": str(tmp_path),
        "MAX_IDLE_TIME_BEFORE_CLOSE": 6,
        "SEED_POLL_INTERVAL": 0.3,
        "REDIS_RETRY_MAX": 1,
        "WEB_ALLOWED_DOMAINS": "sandbox.test",
        "BLOOM_CAPACITY": 1_000_000,
        "DOWNLOAD_DELAY": 0.02,
        "LOG_LEVEL": "INFO",
        # The sandbox web listens on loopback (tests.support.localcrawl does the same).
        "ALLOW_PRIVATE_ADDRESSES": True,
    }
    try:
        with SandboxProcess(spec, directory=tmp_path, max_seconds=180) as web:
            proc = start_worker(settings, log)
            try:
                reported = wait_until(
                    lambda: (
                        log.read_text().count("Seed poll of web:start_urls failed") >= 2
                    ),
                    60,
                )
                client.delete("web:start_urls")
                push_seeds(redis_url, web.seed_urls())
                codes = wait_all([proc], 120)
            finally:
                stop(proc)
            web.stop()
            fetched = {
                f"http://{r['host']}:{web.port}{r['path']}" for r in web.records()
            }
            missing = web.reachable_urls() - fetched
    finally:
        client.close()
    text = log.read_text()
    assert reported, text[-3000:]
    assert codes == [0]
    assert "ERROR" in text and "Traceback" in text
    assert "seed key web:start_urls is a string, not a list" in text
    assert "Seed poll works again" in text
    assert not missing, sorted(missing)[:5]
