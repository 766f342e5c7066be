"""End to end: a worker SIGKILLed while it fetches robots.txt files does not
stall the fleet, and requests waiting for a robots.txt hold no fetch slot.

The crash scenario of issue 21: two real ``scrapy crawl web`` workers crawl
two sandbox hosts whose pages link to pages of 300 other hosts whose names
do not resolve (after 2 s, as names whose servers do not answer: the
sandbox's ``deadhosts`` feature), so robots.txt fetches are under way
through most of the crawl. One worker is SIGKILLed when a quarter of the
pages are fetched, and again at 60 %, and restarted at once each time. The
fetch locks it held die with it within about one heartbeat, and the requests
that wait for those hosts' robots.txt go back to the frontier instead of
holding the live workers' fetch slots: the crawl completes within the time
of the same crawl without kills plus 60 s, on the sandbox's clock. (It took
up to 3.5 minutes longer: the fetch locks lived 210 s.)

Two smaller crawls pin the two causes down on the sandbox's ``slowrobots``
host, whose robots.txt takes 10 s: a worker killed while it fetches that file
leaves a lock the other worker takes over within about a heartbeat, and the
host's requests that wait for the file go back to the frontier after
``ROBOTS_WAIT_MAX`` while the other hosts are crawled.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis

from extensions import keys
from extensions.keys import FrontierKeys
from extensions.settings.defaults import ROBOTS_WAIT_MAX
from sandbox.hostile import SLOW_ROBOTS_SECONDS
from sandbox.site import SiteSpec
from tests.support.fleet import push_seeds, start_worker, stop
from tests.support.localcrawl import CrawlReport, crawl_sandbox, sandbox_settings
from tests.support.outcomes import assert_complete
from tests.support.polling import redis_time_ms

if TYPE_CHECKING:
    from pathlib import Path

    from sandbox.process import SandboxProcess

pytestmark = pytest.mark.slow

SPEC = SiteSpec(seed=21, hosts=2, pages_per_host=150, features={"deadhosts"})
SETTINGS: dict[str, object] = {
    "DOWNLOAD_DELAY": 0.05,
    # The dead hosts' pages are retried once 3 s later, then dead-lettered.
    "RETRY_DELAY_SCALE": 0.1,
    # A killed worker's leases come back after 3 heartbeats (6 s).
    "FRONTIER_HEARTBEAT_INTERVAL": 2,
    "FRONTIER_LEASE_TIMEOUT": 10,
    "PIPELINE_FLUSH_INTERVAL": 1,
}
# The goal of issue 21: a crash run is at most this much longer.
MARGIN_S = 60.0
KILLS_AT = (0.25, 0.60)


def crawl_seconds(report: CrawlReport, redis_url: str) -> float:
    """From the first request the sandbox saw to the end of the last URL: the
    last reachable page fetched (the sandbox's clock) or the last dead letter
    written (a dead host's page, given up: Redis's clock, the same machine)."""
    expected = report.spec.reachable_urls(report.port)
    first = min(r["t_ms"] for r in report.records)
    last = max(
        r["t_ms"]
        for r in report.page_records
        if f"http://{r['host']}:{report.port}{r['path']}" in expected
    )
    client = redis.Redis.from_url(redis_url)
    try:
        letters = [json.loads(v) for v in client.hvals(FrontierKeys("web").dlq)]
    finally:
        client.close()
    # Every dead host's pages end as dead letters (the 300 hosts' pages that
    # the crawl found), none of the sandbox's own.
    assert letters and all("dnstimeout" in e["url"] for e in letters)
    last = max(last, *(e["last_failure"] * 1000 for e in letters))
    return (last - first) / 1000


def wait_for_pages(web: SandboxProcess, share: float, total: int) -> int:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        fetched = sum(1 for r in web.records() if r["path"] != "/robots.txt")
        if fetched >= share * total:
            return fetched
        time.sleep(0.05)
    raise AssertionError(f"{share:.0%} of the pages never fetched")


def test_a_worker_killed_while_fetching_robots_txt_does_not_stall_the_fleet(
    redis_url: str, tmp_path: Path
) -> None:
    baseline = crawl_sandbox(
        SPEC, redis_url, tmp_path / "baseline", workers=2, settings=SETTINGS,
        timeout=600,
    )  # fmt: skip
    assert baseline.exit_codes == [0, 0]
    assert_complete(baseline, tmp_path / "baseline")
    base_s = crawl_seconds(baseline, redis_url)
    home = tmp_path / "crash"
    restarted = {**sandbox_settings(redis_url, home), **SETTINGS}
    kills: list[int] = []

    def kill_and_restart(procs: list[Any], web: SandboxProcess) -> None:
        total = len(SPEC.reachable_urls(web.port))
        for n, share in enumerate(KILLS_AT):
            kills.append(wait_for_pages(web, share, total))
            stop(procs[0])  # SIGKILL
            procs[0] = start_worker(restarted, home / "logs" / f"restarted-{n}.log")

    crash = crawl_sandbox(
        SPEC, redis_url, home, workers=2, settings=SETTINGS,
        during=kill_and_restart, timeout=600,
    )  # fmt: skip
    assert len(kills) == 2
    assert crash.exit_codes == [0, 0]
    assert_complete(crash, home)
    crash_s = crawl_seconds(crash, redis_url)
    print(
        f"crawl without kills: {base_s:.1f} s; with SIGKILLs at {kills} pages: "
        f"{crash_s:.1f} s"
    )
    assert crash_s <= base_s + MARGIN_S


# Seconds after the SIGKILL by which another worker fetches the robots.txt
# the killed one was fetching: its leases come back after 3 heartbeats (3 s
# here) and its fetch lock lapses within one (1 s); a margin for a loaded
# machine. It was 210 s (ROBOTS_FETCH_TIMEOUT x (redirects + 2)).
TAKEOVER_S = 15.0


def test_a_dead_workers_robots_txt_lock_lapses_within_a_heartbeat(
    redis_url: str, tmp_path: Path
) -> None:
    spec = SiteSpec(seed=3, hosts=3, pages_per_host=8, features={"slowrobots"})
    settings = {"DOWNLOAD_DELAY": 0.05, "FRONTIER_HEARTBEAT_INTERVAL": 1,
                "FRONTIER_LEASE_TIMEOUT": 5}  # fmt: skip
    restarted = {**sandbox_settings(redis_url, tmp_path), **settings}
    killed: dict[str, Any] = {}

    def kill_the_fetcher(procs: list[Any], web: SandboxProcess) -> None:
        trap = f"http://{spec.host_name(spec.trap_host)}:{web.port}"
        lock = keys.robots_fetch_lock("web", trap)
        client = redis.Redis.from_url(redis_url)
        deadline = time.monotonic() + 120
        holder = None
        # The fetch lock of the slow robots.txt is taken, and the one request
        # of its host (its seed) is leased by the worker that took it.
        while holder is None and time.monotonic() < deadline:
            if client.exists(lock):
                leases = client.hgetall(FrontierKeys("web").lease_data)
                holder = next(
                    (
                        k.decode()
                        for k, v in leases.items()
                        if v.startswith(b"%s\n" % trap.encode())
                    ),
                    None,
                )
            time.sleep(0.02)
        assert holder is not None, "the slow robots.txt was never fetched"
        # Lease ids are <host name>-<pid>-<run>:<n>.
        pid = int(holder.rsplit(":", 1)[0].rsplit("-", 2)[1])
        (victim,) = [n for n, proc in enumerate(procs) if proc.pid == pid]
        # Half a second for its robots.txt request to reach the sandbox (the
        # file takes 10 s): a request that arrives after the kill is another
        # worker's.
        locked = redis_time_ms(client)
        while redis_time_ms(client) < locked + 500:
            time.sleep(0.02)
        assert client.exists(lock)
        killed["ms"] = redis_time_ms(client)
        client.close()
        stop(procs[victim])  # SIGKILL, mid-fetch of the slow robots.txt
        procs[victim] = start_worker(restarted, tmp_path / "logs" / "restarted.log")

    report = crawl_sandbox(
        spec, redis_url, tmp_path, workers=2, settings=settings,
        during=kill_the_fetcher, timeout=300,
    )  # fmt: skip
    assert report.exit_codes == [0, 0]
    assert_complete(report, tmp_path)
    trap = spec.host_name(spec.trap_host)
    fetches = sorted(
        r["t_ms"]
        for r in report.records
        if r["host"] == trap and r["path"] == "/robots.txt"
    )
    again = [t for t in fetches if t > killed["ms"]]
    if again:
        took = (again[0] - killed["ms"]) / 1000
    else:
        # A live worker's fetch was under way at the kill (the lock lapsed
        # while the victim's loop was starved, and was taken over before the
        # kill: the file is then fetched twice, as designed): nothing waited
        # on the dead worker's lock if the host's pages came once that fetch
        # could answer.
        pages = [r["t_ms"] for r in report.page_records if r["host"] == trap]
        took = (min(pages) - killed["ms"]) / 1000 - SLOW_ROBOTS_SECONDS
        assert fetches and pages, (fetches, pages)
    print(f"robots.txt fetched again {took:.1f} s after its fetcher was killed")
    assert took <= TAKEOVER_S


def test_requests_waiting_for_a_slow_robots_txt_hold_no_fetch_slot(
    redis_url: str, tmp_path: Path
) -> None:
    """One worker with 4 fetch slots; the 10 pages of the host whose
    robots.txt takes 10 s are seeded at once. They wait for it at most
    ``ROBOTS_WAIT_MAX`` in all, then in Redis: the other hosts are crawled
    completely before the slow robots.txt is answered."""
    spec = SiteSpec(seed=3, hosts=3, pages_per_host=10, features={"slowrobots"})

    def seed_the_slow_host(procs: list[Any], web: SandboxProcess) -> None:
        t = spec.trap_host
        push_seeds(redis_url, [spec.url(t, spec.page_path(t, k), web.port)
                               for k in range(1, spec.pages_on(t))])  # fmt: skip

    report = crawl_sandbox(
        spec, redis_url, tmp_path, workers=1,
        settings={"DOWNLOAD_DELAY": 0.05, "CONCURRENT_REQUESTS": 4},
        during=seed_the_slow_host, timeout=300,
    )  # fmt: skip
    assert report.exit_codes == [0]
    assert_complete(report, tmp_path)
    trap = spec.host_name(spec.trap_host)
    (asked,) = [
        r["t_ms"]
        for r in report.records
        if r["host"] == trap and r["path"] == "/robots.txt"
    ]
    answered = asked + SLOW_ROBOTS_SECONDS * 1000
    others = [r["t_ms"] for r in report.page_records if r["host"] != trap]
    print(f"the other hosts' last page {(max(others) - asked) / 1000:.1f} s after "
          f"the slow robots.txt was asked, {SLOW_ROBOTS_SECONDS:g} s to answer; "
          f"ROBOTS_WAIT_MAX {ROBOTS_WAIT_MAX:g} s")  # fmt: skip
    assert max(others) < answered
