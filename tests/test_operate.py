"""The operator's commands against real processes: ``scrapy status``,
``seed``, ``pause``/``resume``, ``reset``, ``redis_url`` and the live page.

Real redis-server, real sandbox web, real ``scrapy crawl web`` workers and
real ``scrapy <command>`` subprocesses; what was fetched is judged on the
sandbox's request record.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.settings import Settings

from extensions.connection.embedded import find_redis_binary, stop_embedded
from extensions.keys import FrontierKeys, StatsKeys, start_urls
from pipelines.stores.sqlite import SQLiteStore
from sandbox.process import SandboxProcess
from sandbox.site import SiteSpec
from tests.support.fleet import ROOT, start_worker, stop, worker_env
from tests.support.localcrawl import crawl_sandbox, reset_crawl
from tests.support.tools import scrapy, status
from webcrawl.addon import install_defaults
from webcrawl.operate import gather_status

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    import redis

pytestmark = pytest.mark.slow

DOCS = ROOT / "docs"


def peek(settings: dict[str, object]) -> dict[str, Any]:
    """The figures of ``scrapy status --json``, read in this process: cheap
    enough to poll (the command itself is checked where it matters)."""
    s = Settings(settings)
    install_defaults(s)
    return asyncio.run(gather_status(s))


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 30.0, every: float = 0.2
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> dict[str, object]:
    return {
        "REDIS_URL": redis_url,
        "WEBCRAWL_HOME": str(tmp_path / "home"),
        "BLOOM_CAPACITY": 100_000,
    }


@pytest.fixture
def sandbox_web(tmp_path: Path) -> Iterator[Callable[[int], SandboxProcess]]:
    """Starts the sandbox web: 3 hosts of ``pages`` pages each."""
    started: list[SandboxProcess] = []

    def start(pages: int) -> SandboxProcess:
        spec = SiteSpec(seed=3, hosts=3, pages_per_host=pages)
        started.append(SandboxProcess(spec, directory=tmp_path, max_seconds=120))
        return started[-1].start()

    yield start
    for proc in started:
        proc.stop()


def worker_settings(settings: dict[str, object], **extra: object) -> dict[str, object]:
    return {
        **settings,
        "SEED_POLL_INTERVAL": 0.2,
        "STATS_FOLD_INTERVAL": 0.3,
        "LOGSTATS_INTERVAL": 1,
        "PIPELINE_FLUSH_INTERVAL": 0.2,
        # A worker silent for three beats is taken for dead and leaves the
        # registry: at 0.5 s a loaded machine's stall of 1.5 s made a live,
        # paused worker vanish from `scrapy status`.
        "FRONTIER_HEARTBEAT_INTERVAL": 2,
        "WEB_ALLOWED_DOMAINS": "sandbox.test",
        # The sandbox web is on loopback: lift the SSRF guard.
        "ALLOW_PRIVATE_ADDRESSES": True,
        "LOG_LEVEL": "INFO",
        **extra,
    }


def test_seed_reports_invalid_lines_by_number(
    settings: dict[str, object], redis_client: redis.Redis
) -> None:
    lines = [
        "http://a.sandbox.test/",
        "# a comment",
        "ftp://b.sandbox.test/",
        '{"url": "http://c.sandbox.test/", "priority": 5}',
        '{"url": 5}',
        "http://d.sandbox.test/" + "x" * 100,
        "",
    ]
    # The workers' URL length limit applies here too.
    limited = {**settings, "URLLENGTH_LIMIT": 100}
    done = scrapy("seed", "-", settings=limited, stdin="\n".join(lines))
    assert done.returncode == 1
    assert "-:3: scheme must be http or https" in done.stderr
    assert '-:5: a JSON seed needs a "url" string' in done.stderr
    assert "-:6: " in done.stderr and "-:4: " not in done.stderr
    assert "Pushed 2 seeds" in done.stdout
    # Taken from the tail: the first line comes out first.
    assert redis_client.lrange(start_urls("web"), 0, -1) == [
        b'{"url": "http://c.sandbox.test/", "priority": 5}',
        b"http://a.sandbox.test/",
    ]


def test_reset_says_what_it_would_delete_and_needs_yes(
    settings: dict[str, object], redis_client: redis.Redis
) -> None:
    scrapy("seed", "-", settings=settings, stdin="http://a.sandbox.test/\n")
    k = FrontierKeys("web")
    redis_client.zadd(
        k.queue("http://a.sandbox.test:80"), {"http://a.sandbox.test/x": 1}
    )
    redis_client.hset(StatsKeys("web").fleet, "pages", 3)
    redis_client.set("other:{other}:ready", 1)  # another crawl: never touched
    refused = scrapy("reset", settings=settings)
    assert refused.returncode == 1
    assert "Would delete 3 keys" in refused.stdout
    assert "frontier q" in refused.stdout and "seeds" in refused.stdout
    assert redis_client.exists(start_urls("web"))
    done = scrapy("reset", "--yes", settings=settings)
    assert done.returncode == 0, done.stderr
    assert "Deleted 3 keys" in done.stdout
    assert sorted(redis_client.keys("*")) == [b"other:{other}:ready"]


def test_redis_url_starts_the_embedded_redis(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"WEBCRAWL_HOME": str(home), "REDIS_URL": ""}
    try:
        done = scrapy("redis_url", env=env)
        assert done.returncode == 0, done.stderr
        url = done.stdout.strip()
        assert url.startswith("redis://127.0.0.1:")
        # The README's next step, verbatim: redis-cli -u "$(scrapy redis_url)"
        ping = subprocess.run(
            [find_redis_binary("redis-cli"), "-u", url, "ping"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert ping.stdout.strip() == "PONG"
        # A second call finds the same server.
        assert scrapy("redis_url", env=env).stdout.strip() == url
    finally:
        stop_embedded(home)


def test_worker_without_seeds_says_so(
    settings: dict[str, object], tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    proc = start_worker(worker_settings(settings), log)
    try:
        wait_for("the no-seeds log line", lambda: "No seeds" in log.read_text())
        # Polled in this process (a `scrapy status` costs a second of CPU),
        # then asked of the command once.
        wait_for("the worker in the status", lambda: peek(settings)["workers"])
        s = status(settings)
        assert s["waiting_for_seeds"] is True
        assert s["workers"][0]["waiting_for_seeds"] is True
        assert s["workers"][0]["pid"] == proc.pid
        assert log.read_text().count("No seeds") == 1
    finally:
        stop(proc)


def test_status_pause_resume_and_fleet_log(
    settings: dict[str, object],
    sandbox_web: Callable[[int], SandboxProcess],
    tmp_path: Path,
) -> None:
    web = sandbox_web(8)
    reset_crawl(str(settings["REDIS_URL"]))
    seeds = "\n".join(web.seed_urls())
    assert scrapy("seed", "-", settings=settings, stdin=seeds).returncode == 0
    log = tmp_path / "worker.log"
    # 3 hosts at 1 page/s each: the 24-page web lasts long enough to pause.
    proc = start_worker(
        worker_settings(settings, DOWNLOAD_DELAY=1.0, MAX_IDLE_TIME_BEFORE_CLOSE=1),
        log,
    )
    try:
        wait_for(
            "pages in the fleet stats",
            lambda: peek(settings)["totals"].get("pages", 0) >= 3,
        )
        assert "Fleet paused" in scrapy("pause", settings=settings).stdout
        wait_for("leases to end", lambda: peek(settings)["leased"] == 0)
        fetched = len(web.records())
        paused = status(settings)  # the command, while the fleet stands still
        for field in ("queued", "leased", "dlq", "workers", "pages_stored"):
            assert field in paused
        (worker,) = paused["workers"]
        assert worker["pid"] == proc.pid and worker["machine"]
        assert paused["dlq"] == 0 and paused["bloom"]["items"] > 0
        assert paused["rates"]["pages"]["1m"] > 0
        assert paused["paused"] and paused["queued"] > 0
        time.sleep(1.5)  # with the status call: longer than MAX_IDLE_TIME_BEFORE_CLOSE
        assert proc.poll() is None, "a paused worker must stay alive"
        assert len(web.records()) == fetched, "a paused fleet fetched pages"
        still = peek(settings)
        assert still["queued"] == paused["queued"]
        assert still["pages_stored"] == paused["pages_stored"]

        assert "resumed" in scrapy("resume", settings=settings).stdout
        assert proc.wait(60) == 0
    finally:
        stop(proc)
    counts: dict[str, int] = {}
    for r in web.records():
        if r["path"] != "/robots.txt":
            url = f"http://{r['host']}:{web.port}{r['path']}"
            counts[url] = counts.get(url, 0) + 1
    # Resumed where it was: every reachable page once, none twice.
    assert set(counts) >= web.reachable_urls()
    assert max(counts.values()) == 1
    text = log.read_text()
    assert "Fleet paused" in text and "Fleet resumed" in text
    assert "requests queued over" in text and "pages/s (1m)" in text
    final = peek(settings)
    assert final["workers"] == [] and final["queued"] == 0
    assert final["pages_stored"] >= len(web.reachable_urls())


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("chromium is not installed (make test installs it)")
    return subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_live_page_in_chromium_matches_status_json(
    settings: dict[str, object],
    sandbox_web: Callable[[int], SandboxProcess],
    tmp_path: Path,
) -> None:
    web = sandbox_web(8)
    from lxml import html

    reset_crawl(str(settings["REDIS_URL"]))
    scrapy("seed", "-", settings=settings, stdin="\n".join(web.seed_urls()))
    procs = [
        start_worker(
            worker_settings(settings, DOWNLOAD_DELAY=0.4), tmp_path / f"w{n}.log"
        )
        for n in range(2)
    ]
    server = subprocess.Popen(
        [sys.executable, "-m", "scrapy", "status", "--serve", "0", "--every", "0.5"]
        + [a for k, v in settings.items() for a in ("-s", f"{k}={v}")],
        cwd=ROOT,
        env=worker_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split()[3]
        wait_for(
            "pages in the fleet stats",
            lambda: peek(settings)["totals"].get("pages", 0) >= 6,
        )
        # While it crawls: the screenshot for the README (a few seconds of
        # polls, so the chart has a line).
        shot = tmp_path / "status.png"
        done = chromium(
            tmp_path,
            f"--screenshot={shot}",
            "--window-size=1024,900",
            "--virtual-time-budget=8000",
            url,
        )
        assert shot.exists(), done.stderr[-2000:]
        if os.environ.get("WEBCRAWL_UPDATE_SCREENSHOT"):
            DOCS.mkdir(exist_ok=True)
            shutil.copy(shot, DOCS / "status-page.png")
        # Pause: the figures stop moving, so the page and --json must agree.
        scrapy("pause", settings=settings)
        wait_for("leases to end", lambda: peek(settings)["leased"] == 0)
        time.sleep(0.5)
        dom = chromium(tmp_path, "--dump-dom", "--virtual-time-budget=3000", url)
        expected = status(settings)
    finally:
        server.terminate()
        server.wait(10)
        for proc in procs:
            stop(proc)
    page = html.fromstring(dom.stdout)

    def shown(element_id: str) -> str:
        return page.get_element_by_id(element_id).text_content().strip()

    assert int(page.body.get("data-polls")) >= 1, "the page's script never ran"
    points = page.get_element_by_id("line").get("points").split()
    assert len(points) >= 2, "no pages/s history drawn"
    assert shown("paused") == "PAUSED"
    assert shown("queued") == f"{expected['queued']:,}"
    assert shown("leased") == "0"
    assert shown("dlq") == "0"
    assert shown("pages_stored") == f"{expected['pages_stored']:,}"
    assert shown("pages_fetched") == f"{expected['totals']['pages']:,}"
    assert shown("nworkers") == str(len(expected["workers"])) == "2"
    h = expected["hosts"]
    assert shown("hosts") == f"{h['ready']} / {h['waiting']} / {h['parked']}"
    rows = page.get_element_by_id("workers").findall("tr")
    assert sorted(r[0].text_content() for r in rows) == sorted(
        w["id"] for w in expected["workers"]
    )


def test_status_of_an_empty_crawl_creates_nothing(
    settings: dict[str, object], tmp_path: Path, redis_client: redis.Redis
) -> None:
    text = scrapy("status", settings=settings)
    assert text.returncode == 0, text.stderr
    assert "Workers alive: 0" in text.stdout and "(not created yet)" in text.stdout
    s = status(settings)
    assert (s["queued"], s["leased"], s["dlq"], s["workers"]) == (0, 0, 0, [])
    assert s["pages_stored"] == 0 and s["bloom"] is None
    # Reading status neither creates a page store nor any crawl key.
    assert not (tmp_path / "home").exists()
    assert redis_client.keys("*") == []


def test_status_counts_the_fleets_pages_not_this_machines_store(
    redis_url: str, tmp_path: Path
) -> None:
    """Issue 21: the workers' WEBCRAWL_HOME is not the operator's: status
    showed the operator's (empty) store as "0 pages stored". The figure is the
    fleet's, from its counters in Redis; the store this command reads is
    named as such, and its absence said."""
    spec = SiteSpec(seed=5, hosts=2, pages_per_host=4)
    workers_home = tmp_path / "workers"
    report = crawl_sandbox(
        spec, redis_url, workers_home, workers=1,
        settings={"DOWNLOAD_DELAY": 0.05, "STATS_FOLD_INTERVAL": 0.3}, timeout=120,
    )  # fmt: skip
    assert report.exit_codes == [0]
    store = SQLiteStore(workers_home / "pages.sqlite3")
    store.open(create=False)
    stored = store.count()
    store.close()
    assert stored >= len(spec.reachable_urls(report.port))
    elsewhere = {"REDIS_URL": redis_url, "WEBCRAWL_HOME": str(tmp_path / "operator")}
    s = status(elsewhere)
    assert s["pages_stored"] == stored
    assert s["store_pages"] is None  # no store where this command looks
    text = scrapy("status", settings=elsewhere)
    assert text.returncode == 0, text.stderr
    assert f"{stored} pages (the fleet's counters in Redis)" in text.stdout
    assert "no page store at" in text.stdout
    assert not (tmp_path / "operator").exists()
    # Where the workers' store is, both figures agree.
    s = status({**elsewhere, "WEBCRAWL_HOME": str(workers_home)})
    assert s["pages_stored"] == s["store_pages"] == stored
