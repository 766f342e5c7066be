"""Prometheus metrics: the collector's families, the add-on switch, and two
real workers on one machine serving ``/metrics`` on distinct ports during a
sandbox crawl, their counters checked against the sandbox's request record.
The Grafana dashboard may only query metrics a worker exports."""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings

from extensions.extensions.metrics import METRICS, PrometheusMetrics, WorkerCollector
from extensions.settings import defaults
from pipelines.stores import store_from_settings
from sandbox.site import SiteSpec
from tests.support.localcrawl import crawl_sandbox
from tests.support.polling import wait_until
from tests.utils import get_crawler
from webcrawl.addon import Webcrawl

if TYPE_CHECKING:
    from sandbox.process import SandboxProcess

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
PORT_LINE = re.compile(rb"Prometheus metrics on http://127\.0\.0\.1:(\d+)/metrics")


def exported_names(text: str) -> set[str]:
    """Sample names of a /metrics text (counters with their _total)."""
    return {
        sample.name
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(vals: list[dict[Any, float]], name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return sum(v.get(key, 0.0) for v in vals)


def test_collector_builds_every_family_from_the_stats() -> None:
    from scrapy.statscollectors import MemoryStatsCollector

    crawler = get_crawler(settings_dict={"BLOOM_CAPACITY": 1000})
    stats = crawler.stats = MemoryStatsCollector(crawler)
    for key, value in {
        "response_received_count": 10,
        "robotstxt/response_status_count/200": 2,
        "robotstxt/forbidden": 3,
        "downloader/response_status_count/200": 9,
        "downloader/response_status_count/503": 1,
        "storage/written": 7,
        "storage/duplicates/exact": 1,
        "politeness/lock_wait_ms": 1500,
        "dupefilter/estimated_items": 250,
        "dupefilter/layers": 1,
        "dlq/http_status": 2,
        "downloader/exception_type_count/twisted.internet.error.DNSLookupError": 4,
    }.items():
        stats.set_value(key, value)
    gauges = {"webcrawl_frontier_queued": 42.0}
    registry_text = generate_latest(_registry(WorkerCollector(crawler, gauges)))
    vals = values(registry_text.decode())
    assert vals[("webcrawl_pages_fetched_total", ())] == 8
    assert vals[("webcrawl_pages_stored_total", ())] == 7
    assert vals[("webcrawl_responses_total", (("status_class", "5xx"),))] == 1
    assert vals[("webcrawl_robots_total", (("outcome", "forbidden"),))] == 3
    assert vals[("webcrawl_politeness_wait_seconds_total", ())] == 1.5
    assert vals[("webcrawl_bloom_fill_ratio", ())] == 0.25
    assert vals[("webcrawl_frontier_queued", ())] == 42
    assert vals[("webcrawl_dlq_total", (("reason", "http_status"),))] == 2
    assert vals[("webcrawl_download_errors_total", (("type", "DNSLookupError"),))] == 4
    names = {n.removesuffix("_total") for n in exported_names(registry_text.decode())}
    assert names <= set(METRICS)
    assert all(name.startswith("webcrawl_") for name in METRICS)


def _registry(collector: WorkerCollector) -> Any:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


@pytest.mark.parametrize(
    ("settings", "enabled"),
    [({}, False), ({"METRICS_PORT": 0}, False), ({"METRICS_PORT": 9410}, True)],
)
def test_addon_enables_metrics_only_with_a_port(
    settings: dict[str, Any], enabled: bool, redis_url: str
) -> None:
    # The add-on pings Redis before the crawl: give it a live one.
    s = Settings({"REDIS_URL": redis_url, **settings})
    Webcrawl().update_settings(s)
    assert (
        "extensions.extensions.metrics.PrometheusMetrics" in s["EXTENSIONS"]
    ) is enabled
    assert defaults.METRICS_PORT == 0
    if not enabled:
        with pytest.raises(NotConfigured, match="METRICS_PORT is 0"):
            PrometheusMetrics(get_crawler(settings_dict=settings))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str:
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as answer:
        return str(answer.read().decode())


@pytest.mark.slow
def test_two_workers_serve_consistent_metrics(redis_url: str, tmp_path: Path) -> None:
    first = free_port()
    scrapes: list[str] = []
    ports: list[int] = []
    sandbox_counts: dict[str, int] = {}

    def watch(procs: list[Any], web: SandboxProcess) -> None:
        deadline = time.monotonic() + 120
        logs = [tmp_path / "logs" / f"worker-{n}.log" for n in range(len(procs))]
        while len(ports) < len(logs) and time.monotonic() < deadline:
            ports[:] = [
                int(m.group(1))
                for log in logs
                if log.exists() and (m := PORT_LINE.search(log.read_bytes()))
            ]
            time.sleep(0.2)
        # Poll until the crawl is quiescent: nothing queued or leased in the
        # whole crawl and the fleet's stored count steady for a while.
        last, steady, vals = -1.0, 0, []
        while time.monotonic() < deadline and steady < 3:
            vals = [values(scrape(p)) for p in ports]
            stored = total(vals, "webcrawl_pages_stored_total")
            idle = all(
                v.get(("webcrawl_frontier_queued", ())) == 0
                and v.get(("webcrawl_frontier_leases", ())) == 0
                for v in vals
            )
            steady = steady + 1 if idle and stored == last and stored > 0 else 0
            last = stored
            time.sleep(0.5)  # two METRICS_REFRESH_INTERVALs
        # The sandbox flushes its record every 0.1 s: wait until it holds as
        # many requests as the fleet counted responses (bounded: a mismatch
        # that stays fails below).
        counted = sum(
            total(vals, "webcrawl_responses_total", status_class=c)
            for c in ("2xx", "3xx", "4xx", "5xx")
        )
        wait_until(lambda: len(web.records()) >= counted, timeout=30)
        records = web.records()
        sandbox_counts["pages"] = sum(r["path"] != "/robots.txt" for r in records)
        sandbox_counts["robots"] = sum(r["path"] == "/robots.txt" for r in records)
        sandbox_counts["all"] = len(records)
        scrapes[:] = [scrape(p) for p in ports]

    report = crawl_sandbox(
        SiteSpec(seed=9, hosts=6, pages_per_host=6),
        redis_url,
        tmp_path,
        workers=2,
        settings={
            "DOWNLOAD_DELAY": 0.05,
            "METRICS_PORT": first,
            "METRICS_HOST": "127.0.0.1",
            "METRICS_REFRESH_INTERVAL": 0.25,
            "BLOOM_STATS_INTERVAL": 1,
            # Time to scrape the quiescent workers before they close (the
            # watch sees them steady for 1.5 s, then scrapes).
            "MAX_IDLE_TIME_BEFORE_CLOSE": 8,
        },
        during=watch,
        timeout=180,
    )
    assert report.exit_codes == [0, 0]
    assert len(ports) == 2 and len(set(ports)) == 2
    assert all(first <= p < first + defaults.METRICS_PORT_TRIES for p in ports)
    logs = b"".join(p.read_bytes() for p in (tmp_path / "logs").glob("*.log"))
    for port in ports:  # the port is in each worker's stats, for the fleet view
        assert f"'metrics/port': {port}".encode() in logs

    assert len(scrapes) == 2
    vals = [values(text) for text in scrapes]
    # A family with labels (responses by status class, robots outcomes) or
    # fed by items (the pipeline buffer) has samples only once its worker saw
    # such an event; on a small web one worker may get none: judge the fleet.
    names = {n.removesuffix("_total") for t in scrapes for n in exported_names(t)}
    assert {
        "webcrawl_pages_fetched",
        "webcrawl_pages_stored",
        "webcrawl_responses",
        "webcrawl_downloaded_bytes",
        "webcrawl_robots",
        "webcrawl_politeness_waits",
        "webcrawl_frontier_queued",
        "webcrawl_frontier_leases",
        "webcrawl_leases",
        "webcrawl_retries",
        "webcrawl_bloom_fill_ratio",
        "webcrawl_pipeline_buffer",
        "webcrawl_event_loop_lag_seconds",
    } <= names
    # The fleet's counters agree with what the sandbox served.
    assert total(vals, "webcrawl_pages_fetched_total") == sandbox_counts["pages"]
    robots = total(vals, "webcrawl_robots_total", outcome="request_count")
    assert robots == sandbox_counts["robots"]
    responses = sum(
        total(vals, "webcrawl_responses_total", status_class=c)
        for c in ("2xx", "3xx", "4xx", "5xx")
    )
    assert responses == sandbox_counts["all"]
    assert total(vals, "webcrawl_downloaded_bytes_total") > 0
    store = store_from_settings(Settings({"WEBCRAWL_HOME": str(tmp_path)}))
    store.open(create=False)
    try:
        assert total(vals, "webcrawl_pages_stored_total") == store.count()
    finally:
        store.close()
    assert total(vals, "webcrawl_leases_total") >= total(
        vals, "webcrawl_pages_fetched_total"
    )
    assert total(vals, "webcrawl_bloom_estimated_items") > 0
    assert total(vals, "webcrawl_event_loop_lag_seconds") >= 0


def test_dashboard_queries_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
    assert len(exprs) >= 10
    exported = set(METRICS) | {
        f"{name}_total" for name, (kind, _) in METRICS.items() if kind == "counter"
    }
    used = {name for expr in exprs for name in re.findall(r"webcrawl_\w+", expr)}
    assert used and used <= exported, sorted(used - exported)
    # Every counter is queried as a rate of its _total sample.
    for name, (kind, _) in METRICS.items():
        if kind == "counter":
            assert name not in used, f"{name}: query {name}_total"
