"""End to end: ``scrapy pause`` / ``resume`` on a busy fleet fetch no page twice.

Two real ``scrapy crawl web`` workers crawl the sandbox web; the fleet is
paused four times mid-crawl (each time until Redis holds no lease, so every
request that was under way has ended) and resumed. What was in flight at a
pause is either completed or handed back unstarted, never both: the
sandbox's own request record shows every reachable page fetched exactly once.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis
from scrapy.settings import Settings

from extensions.keys import FrontierKeys
from sandbox.site import SiteSpec
from tests.support.localcrawl import crawl_sandbox
from webcrawl.addon import install_defaults
from webcrawl.operate import set_paused

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sandbox.process import SandboxProcess

pytestmark = pytest.mark.slow


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_pause_and_resume_fetch_no_page_twice(redis_url: str, tmp_path: Path) -> None:
    # Many hosts at a short delay: the workers' buffers turn over constantly,
    # so a pause always finds leased requests both started and unstarted.
    spec = SiteSpec(seed=21, hosts=40, pages_per_host=12)
    settings = Settings({"REDIS_URL": redis_url})
    install_defaults(settings)
    client = redis.Redis.from_url(redis_url)
    leases = FrontierKeys("web").leases
    pauses: list[tuple[int, int]] = []  # (pages fetched at the pause, after it)

    def pause_four_times(procs: list[Any], web: SandboxProcess) -> None:
        total = len(spec.reachable_urls(web.port))

        def fetched() -> int:
            return sum(1 for r in web.records() if r["path"] != "/robots.txt")

        for share in (0.15, 0.35, 0.55, 0.75):
            pages = share * total
            wait_for(f"{share:.0%} of the pages", lambda p=pages: fetched() >= p)
            assert asyncio.run(set_paused(settings, True))
            at_pause = fetched()
            # Every request under way has ended: completed (its lease
            # acknowledged) or handed back (its lease released).
            wait_for("no lease left", lambda: client.zcard(leases) == 0)
            pauses.append((at_pause, fetched()))
            assert asyncio.run(set_paused(settings, False))

    try:
        report = crawl_sandbox(
            spec, redis_url, tmp_path, workers=2,
            settings={"DOWNLOAD_DELAY": 0.05}, during=pause_four_times,
            timeout=300,
        )  # fmt: skip
    finally:
        client.close()
    assert len(pauses) == 4
    assert report.exit_codes == [0, 0]
    expected = spec.reachable_urls(report.port)
    counts = report.fetch_counts()
    assert not expected - set(counts), sorted(expected - set(counts))[:5]
    twice = {u: n for u, n in counts.items() if n > 1}
    print(f"pages fetched at each pause and once it settled: {pauses}")
    assert twice == {}
