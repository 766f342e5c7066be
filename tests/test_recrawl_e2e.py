"""End to end: two workers in continuous mode keep a changing sandbox web
fresh. Everything asserted is read from the sandbox's request record (what
was asked, with which validators, what was answered) and the page store."""

from __future__ import annotations

import signal
import statistics
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pytest

from pipelines.read import main as read_main
from sandbox.changes import ChangeModel
from sandbox.site import SiteSpec
from tests.support.fleet import stop
from tests.support.localcrawl import crawl_sandbox

if TYPE_CHECKING:
    from pathlib import Path

    from sandbox.process import SandboxProcess

pytestmark = pytest.mark.slow

# Seconds the workers crawl before they are stopped (gracefully).
RUN_SECONDS = 40.0
# A fast page changes every 3 s on average, a slow one every 30 s.
CHANGE_PERIOD = 3.0


# The whole schedule in Redis, or the store-side schedule (next visits more
# than 4 s ahead wait in the SQLite page store; a refill every second).
STORE_SIDE = {
    "RECRAWL_SCHEDULE_STORE": "pipelines.stores.schedule.PageStoreSchedule",
    "RECRAWL_WINDOW": 4.0,
}


@pytest.mark.parametrize("schedule", [{}, STORE_SIDE], ids=["redis", "store-side"])
def test_two_workers_revisit_changing_pages(
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    schedule: dict[str, Any],
) -> None:
    spec = SiteSpec(seed=5, hosts=3, pages_per_host=8, change_period=CHANGE_PERIOD)

    def crawl_for_a_while(procs: list[Any], web: SandboxProcess) -> None:
        time.sleep(RUN_SECONDS)
        for proc in procs:
            stop(proc, signal.SIGTERM)

    report = crawl_sandbox(
        spec,
        redis_url,
        tmp_path,
        workers=2,
        settings={
            "DOWNLOAD_DELAY": 0.05,
            "MAX_IDLE_TIME_BEFORE_CLOSE": 0,
            "RECRAWL_ENABLED": True,
            "RECRAWL_MIN_INTERVAL": 1.0,
            "RECRAWL_DEFAULT_INTERVAL": 3.0,
            "RECRAWL_MAX_INTERVAL": 20.0,
            "RECRAWL_POLL_INTERVAL": 0.25,
            "PIPELINE_FLUSH_INTERVAL": 0.25,
            **schedule,
        },
        timeout=RUN_SECONDS + 60,
        during=crawl_for_a_while,
    )
    records = sorted(report.page_records, key=lambda r: r["t_ms"])
    by_url: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_url[f"http://{r['host']}:{report.port}{r['path']}"].append(r)
    expected = spec.reachable_urls(report.port)
    assert expected <= set(by_url), "the first visit of every page happens"

    # Revisits happen, and most of them are conditional.
    revisits = [r for visits in by_url.values() for r in visits[1:]]
    assert len(revisits) > 2 * len(expected)
    conditional = [r for r in revisits if "inm" in r or "ims" in r]
    assert len(conditional) / len(revisits) > 0.9
    # 304s are answered (unchanged pages), and only to conditional requests.
    not_modified = [r for r in records if r["status"] == 304]
    assert len(not_modified) > len(expected)
    assert all("inm" in r or "ims" in r for r in not_modified)

    # Frequently changing pages are revisited more often than static ones.
    model = ChangeModel(spec.seed, CHANGE_PERIOD, 0.0)
    visits_by_kind: dict[str, list[int]] = defaultdict(list)
    for url in expected:
        host, path = url.split("//", 1)[1].split("/", 1)
        index = spec.host_index(host)
        assert index is not None
        visits_by_kind[model.kind(index, "/" + path)].append(len(by_url[url]))
    assert visits_by_kind["fast"] and visits_by_kind["static"]
    fast = statistics.mean(visits_by_kind["fast"])
    static = statistics.mean(visits_by_kind["static"])
    assert fast > 1.5 * static, dict(visits_by_kind)

    # The store holds what the server served most recently: the ETag of the
    # last 200 (the crawl stopped gracefully, so every fetch was stored).
    from tests.support.outcomes import stored_urls

    pages = stored_urls(tmp_path)
    stale = {}
    changed_pages = 0
    for url in expected:
        served = [r["etag"] for r in by_url[url] if r["status"] == 200]
        if len(set(served)) > 1:
            changed_pages += 1
        if pages[url].metadata["etag"] != served[-1]:
            stale[url] = (pages[url].metadata["etag"], served[-1])
    assert changed_pages > 0
    assert stale == {}
    # Each page's history records its visits, changes included.
    fast_url = max(expected, key=lambda u: len(by_url[u]))
    history = pages[fast_url].metadata["history"]
    assert len(history) >= len(by_url[fast_url]) - 1
    assert any(h["changed"] for h in history[1:])
    assert any(h["status"] == 304 for h in history)
    capsys.readouterr()
    code = read_main([fast_url, "--history", "-s", f"WEBCRAWL_HOME={tmp_path}"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and len(lines) == len(history)
    assert any("  304  unchanged  " in line for line in lines)
    # The content it had before its last change is kept as a version.
    code = read_main([fast_url, "--version", "1", "-s", f"WEBCRAWL_HOME={tmp_path}"])
    earlier = capsys.readouterr().out
    assert code == 0 and pages[fast_url].text not in earlier
