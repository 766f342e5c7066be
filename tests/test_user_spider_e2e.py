"""End to end: a user's own CrawlSpider on the fleet (issue 23).

The project in ``tests/user_project`` is what a Scrapy user brings: a
``CrawlSpider`` with rules (one callback yields plain dict items, one yields
nothing, one rule only follows), a pipeline of their own that writes each
item to a file, and ``ADDONS = {"webcrawl.addon.Webcrawl": 0}``. Two real
``scrapy crawl shop`` workers, seeded with ``redis-cli lpush
shop:start_urls``, crawl the sandbox web; one is SIGKILLed mid-crawl and
started again. Judged on the sandbox's request record and in Redis: every
reachable page fetched, none robots.txt disallows, every item written at
least once, no lease left, the fleet closed by itself, no two requests to a
host closer than its delay.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis

from extensions.keys import FrontierKeys
from sandbox.process import SandboxProcess, min_gap_ms_by_host
from sandbox.resolver import SANDBOX_RESOLVER
from sandbox.site import SiteSpec
from tests.support.fleet import push_seeds, stop
from tests.support.localcrawl import reset_crawl

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "tests" / "user_project"
DELAY = 0.2
# A request may reach the sandbox this much early on a loaded machine (the
# crawl e2e tests' margin).
SLACK_MS = 30
ITEM_SECTIONS = ("news", "blog", "docs", "products")


def _worker(
    redis_url: str, home: Path, items: Path, log: Path
) -> subprocess.Popen[bytes]:
    settings = {
        "REDIS_URL": redis_url,
        "WEBCRAWL_HOME": str(home),
        "TWISTED_DNS_RESOLVER": SANDBOX_RESOLVER,
        "ALLOW_PRIVATE_ADDRESSES": True,  # the sandbox is on loopback
        "DOWNLOAD_DELAY": DELAY,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 4,
        "SEED_POLL_INTERVAL": 0.5,
        "FRONTIER_HEARTBEAT_INTERVAL": 1,
        "FRONTIER_LEASE_TIMEOUT": 5,
    }
    cmd = [sys.executable, "-m", "scrapy", "crawl", "shop"]
    for name, value in settings.items():
        cmd += ["-s", f"{name}={value}"]
    env = dict(os.environ, SHOP_ITEMS_DIR=str(items), PYTHONUNBUFFERED="1")
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT), str(ROOT)])
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            cmd, cwd=PROJECT, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL
        )


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            stop(proc, signal.SIGKILL)


def test_a_users_crawlspider_on_the_fleet_survives_a_sigkill(
    tmp_path: Path, redis_url: str, procs: list[subprocess.Popen[bytes]]
) -> None:
    spec = SiteSpec(seed=23, hosts=4, pages_per_host=20)
    items_dir = tmp_path / "items"
    items_dir.mkdir()
    logs = tmp_path / "logs"
    reset_crawl(redis_url, "shop")
    client = redis.Redis.from_url(redis_url)
    with SandboxProcess(spec, directory=tmp_path, max_seconds=300) as web:
        reachable = web.reachable_urls()
        push_seeds(redis_url, web.seed_urls(), key="shop:start_urls")
        for name in ("a", "b"):
            procs.append(_worker(redis_url, tmp_path, items_dir, logs / f"{name}.log"))
        # Kill worker a once a third of the pages were served.
        deadline = time.monotonic() + 120
        while len(web.records()) < len(reachable) // 3:
            assert time.monotonic() < deadline, "the crawl never got going"
            assert all(p.poll() is None for p in procs), "a worker stopped early"
            time.sleep(0.1)
        stop(procs[0], signal.SIGKILL)
        procs.append(_worker(redis_url, tmp_path, items_dir, logs / "a2.log"))
        # The fleet closes by itself (MAX_IDLE_TIME_BEFORE_CLOSE).
        live = procs[1:]
        deadline = time.monotonic() + 240
        while any(p.poll() is None for p in live):
            assert time.monotonic() < deadline, "the fleet did not close"
            time.sleep(0.2)
        codes = [p.returncode for p in live]
        web.stop()
        records = web.records()
    log_text = "\n".join(p.read_text() for p in sorted(logs.glob("*.log")))
    assert codes == [0, 0], log_text[-3000:]
    pages = [r for r in records if r["path"] != "/robots.txt"]
    fetched = {f"http://{r['host']}:{web.port}{r['path']}" for r in pages}
    assert reachable - fetched == set()
    assert [u for u in fetched if spec.is_disallowed(u)] == []
    # Every item written at least once, by whichever worker.
    written = {
        json.loads(line)["url"]
        for path in items_dir.glob("*.jsonl")
        for line in path.read_text().splitlines()
        if line.endswith("}")
    }
    expected = {
        u for u in reachable if u.split("/")[3:4] in ([s] for s in ITEM_SECTIONS)
    }
    assert expected, "the site has no item pages"
    assert expected - written == set()
    # Nothing leased, nothing queued: the crawl is over in Redis too.
    keys = FrontierKeys("shop")
    assert client.zcard(keys.leases) == 0
    assert client.zcard(keys.ready) == 0
    # Politeness, on the server's clock.
    too_close = {
        host: gap
        for host, gap in min_gap_ms_by_host(records).items()
        if gap < DELAY * 1000 - SLACK_MS
    }
    assert too_close == {}
    client.close()
