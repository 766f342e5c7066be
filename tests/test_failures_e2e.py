"""End to end: every URL's story ends, with real workers and the sandbox web.

Two ``scrapy crawl web`` workers crawl the sandbox's ``failures`` corners
(:mod:`sandbox.hostile`): hosts whose names do not resolve, a host that is
down, a 30-hop redirect chain, a redirect loop, a 503 with ``Retry-After``
and a host answering 429 with ``Retry-After`` forever. Each ends in the
README's failure table's outcome, the crawl closes by itself, and every URL
is stored, dead-lettered or still waiting in Redis. What was fetched, and
when, is judged on the sandbox's own request record.
"""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis

from extensions.keys import FrontierKeys
from sandbox.hostile import DOWN_HOST, LONG_CHAIN, RETRY_LATER_SECONDS
from sandbox.site import SiteSpec
from tests.support.fleet import start_worker, stop
from tests.support.localcrawl import FAILURE_SETTINGS, crawl_sandbox, sandbox_settings
from tests.support.outcomes import dead_letters, stored_urls, waiting_urls

if TYPE_CHECKING:
    from pathlib import Path

    from sandbox.process import SandboxProcess

pytestmark = pytest.mark.slow


def test_every_corner_ends_in_its_documented_outcome(
    tmp_path: Path, redis_url: str
) -> None:
    spec = SiteSpec(seed=21, hosts=2, pages_per_host=3, features={"failures"})
    # The host that is down is never called down here (ROBOTS_DOWN_AFTER=0):
    # its unreachable robots.txt keeps its pages waiting, the RFC 9309 way,
    # and the crawl must close anyway.
    settings = {**FAILURE_SETTINGS, "ROBOTS_DOWN_AFTER": 0}
    report = crawl_sandbox(
        spec, redis_url, tmp_path, workers=2, settings=settings, timeout=120
    )
    assert report.exit_codes == [0, 0], report.log_dir
    port, trap = report.port, f"site-{spec.trap_host:03d}.sandbox.test"

    def trap_url(path: str) -> str:
        return f"http://{trap}:{port}{path}"

    dead = dead_letters(redis_url)
    reasons = {url: e["reason"] for url, e in dead.items()}
    gone = [
        f"http://gone-1.nxdomain.sandbox.test:{port}/",
        f"http://gone-1.nxdomain.sandbox.test:{port}/page.html",
        f"http://gone-2.nxdomain.sandbox.test:{port}/",
    ]
    # Names that do not resolve: given up after two attempts.
    for url in gone:
        assert reasons.get(url) == "dns", (url, dead.get(url))
        assert dead[url]["attempts"] == 2
    assert reasons[trap_url("/fail/long/1")] == "too_many_redirects"
    assert reasons[trap_url("/fail/loop/a")] == "redirect_loop"
    assert reasons[trap_url("/fail/refresh/a")] == "redirect_loop"
    # A redirect out of scope: Scrapy's OffsiteMiddleware drops it in
    # request_scheduled; the parent's lease ends with a record (it was held
    # for an hour and the crawl never went idle).
    assert reasons[trap_url("/fail/offsite.html")] == "offsite_redirect"
    # Retry-After honoured attempt after attempt, until the time budget.
    throttled = dead[trap_url("/fail/throttled.html")]
    assert throttled["reason"] == "retry_after" and throttled["attempts"] >= 3
    fetches = report.fetch_counts()
    assert fetches[trap_url(f"/fail/long/{LONG_CHAIN}")] == 0
    # 503 with Retry-After: fetched again no sooner than it said (the
    # sandbox's clock), then stored.
    later = [
        r["t_ms"] for r in report.page_records if r["path"] == "/fail/retry-later.html"
    ]
    assert len(later) == 2 and later[1] - later[0] >= RETRY_LATER_SECONDS * 1000
    pages = stored_urls(tmp_path)
    assert pages[trap_url("/fail/retry-later.html")].metadata["status"] == 200
    # A dead letter's page stays on record in the store too.
    assert all(pages[url].metadata["status"] == 0 for url in gone)

    # The host that is down: its robots.txt is unreachable, so its requests
    # wait in Redis for the next run (RFC 9309), never dropped.
    waiting = waiting_urls(redis_url)
    assert {f"http://{DOWN_HOST}/", f"http://{DOWN_HOST}/page.html"} <= waiting

    # Accounting: every URL the crawl met is stored, dead-lettered or waiting.
    met = set(report.spec.reachable_urls(port)) | set(gone)
    met |= {f"http://{DOWN_HOST}/", f"http://{DOWN_HOST}/page.html"}
    unaccounted = met - set(pages) - set(dead) - waiting
    assert not unaccounted, sorted(unaccounted)[:5]
    assert not set(dead) & waiting

    # The crawl closed by itself and said what it leaves behind.
    logs = "".join(p.read_text() for p in report.log_dir.glob("*.log"))
    assert "Closing with " in logs and " URLs waiting in Redis on " in logs


def test_retries_survive_sigkill_and_happen_at_their_due_time(
    tmp_path: Path, redis_url: str
) -> None:
    """Both workers are SIGKILLed while the 503's retry waits in Redis; two
    fresh workers fetch it at its due time, once, and take back the dead
    workers' leases within a few heartbeats. The host that is down is called
    down after two robots.txt fetches without a connection: its pages end in
    the dead-letter queue (a bounded total), not waiting forever."""
    spec = SiteSpec(seed=22, hosts=2, pages_per_host=3, features={"failures"})
    k = FrontierKeys("web")
    client = redis.Redis.from_url(redis_url)
    restarted: list[Any] = []

    def kill_while_pending(procs: list[Any], web: SandboxProcess) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(b"retry-later" in m for m in client.zrange(k.delayed, 0, -1)):
                break
            time.sleep(0.05)
        else:
            pytest.fail("the retry never reached the delayed set")
        for proc in procs:
            stop(proc, signal.SIGKILL)
        settings = {**sandbox_settings(redis_url, tmp_path), **down_after}
        for n, _ in enumerate(procs):
            procs[n] = start_worker(settings, tmp_path / "logs" / f"again-{n}.log")
            restarted.append(procs[n])

    down_after = {**FAILURE_SETTINGS, "ROBOTS_DOWN_AFTER": 2}
    try:
        report = crawl_sandbox(
            spec,
            redis_url,
            tmp_path,
            workers=2,
            settings=down_after,
            timeout=120,
            during=kill_while_pending,
        )
    finally:
        client.close()
    assert len(restarted) == 2 and report.exit_codes == [0, 0]
    later = [
        r["t_ms"] for r in report.page_records if r["path"] == "/fail/retry-later.html"
    ]
    assert len(later) == 2, later
    assert later[1] - later[0] >= RETRY_LATER_SECONDS * 1000
    port, trap = report.port, f"site-{spec.trap_host:03d}.sandbox.test"
    pages = stored_urls(tmp_path)
    assert (
        pages[f"http://{trap}:{port}/fail/retry-later.html"].metadata["status"] == 200
    )
    # Nothing the killed workers held is lost: every reachable page is stored
    # or dead-lettered or waiting.
    dead = dead_letters(redis_url)
    waiting = waiting_urls(redis_url)
    regular = {u for u in spec.reachable_urls(port) if "/fail/" not in u}
    assert not regular - set(pages) - set(dead) - waiting
    for url in (f"http://{DOWN_HOST}/", f"http://{DOWN_HOST}/page.html"):
        assert dead[url]["reason"] == "connection", dead.get(url)
        assert url not in waiting
