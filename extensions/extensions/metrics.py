"""Prometheus metrics of one worker: ``/metrics`` through prometheus-client.

``extensions.extensions.metrics.PrometheusMetrics`` is a Scrapy extension (the webcrawl
add-on enables it when ``METRICS_PORT`` > 0). When the spider opens it binds
``METRICS_PORT`` on ``METRICS_HOST``, or the next free port upward, trying at
most ``METRICS_PORT_TRIES`` ports, so several workers on one machine each get
their own; the port bound is logged and kept in the stats as
``metrics/port`` (and as the extension's ``port`` attribute) for the fleet
status to list.

Nothing here blocks the reactor: prometheus-client serves from its own daemon
thread, and a scrape reads a copy of the Scrapy stats (a dict copy, atomic
under the GIL) and the gauges last refreshed on the reactor. The Redis-wide
gauges (frontier depth, hosts ready, leases outstanding) are refreshed every
``METRICS_REFRESH_INTERVAL`` seconds by an asyncio task through the async
Redis client; the event-loop lag is measured by a 1-second timer on the
reactor (how late it fires).

Every metric is named ``webcrawl_*`` and documented in :data:`METRICS`;
counters are this worker's since it started (Prometheus sums them over
workers and turns them into rates), gauges named ``frontier`` and
``recrawl`` are the whole crawl's (read from Redis).

Settings read: ``METRICS_PORT``, ``METRICS_HOST``, ``METRICS_PORT_TRIES``,
``METRICS_REFRESH_INTERVAL``, ``BLOOM_CAPACITY`` and ``BLOOM_GROWTH`` (the
Bloom fill ratio), ``FRONTIER_PARTITIONS``, ``REDIS_URL`` (through
:mod:`extensions.connection`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet import task

from extensions.connection import TRANSIENT_REDIS_ERRORS, async_client
from extensions.core.frontier.frontier import PartitionedFrontier
from extensions.extensions.recrawl import fleet_figures
from extensions.settings import config, defaults

if TYPE_CHECKING:
    from collections.abc import Iterator

    from prometheus_client.metrics_core import Metric
    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

# Seconds between two ticks of the event-loop lag probe.
LAG_PROBE_INTERVAL = 1.0

# name -> (type, help). Counters are exposed with the "_total" suffix
# prometheus-client adds to a counter family's name.
METRICS: dict[str, tuple[str, str]] = {
    "webcrawl_pages_fetched": (
        "counter", "HTTP responses received for pages (robots.txt excluded)"),
    "webcrawl_pages_stored": ("counter", "Pages written to the page store"),
    "webcrawl_duplicates": ("counter", "Pages found duplicate, by kind"),
    "webcrawl_responses": (
        "counter", "HTTP responses by status class (robots.txt included)"),
    "webcrawl_downloaded_bytes": ("counter", "Bytes of response bodies downloaded"),
    "webcrawl_download_errors": ("counter", "Download exceptions, by type"),
    "webcrawl_robots": ("counter", "robots.txt outcomes (stats robotstxt/*)"),
    "webcrawl_politeness_locks": ("counter", "Per-host download locks taken"),
    "webcrawl_politeness_waits": (
        "counter", "Downloads that waited for their host's lock"),
    "webcrawl_politeness_wait_seconds": (
        "counter", "Seconds downloads waited for their host's lock"),
    "webcrawl_politeness_deferred": (
        "counter", "Requests handed back to the frontier, by reason"),
    "webcrawl_backoff_raised": ("counter", "Host back-offs raised (429/503)"),
    "webcrawl_leases": ("counter", "Requests leased from the frontier"),
    "webcrawl_leases_acked": ("counter", "Leases acknowledged (page durable)"),
    "webcrawl_leases_reclaimed": (
        "counter", "Expired leases of dead workers taken back"),
    "webcrawl_requests_queued": ("counter", "Requests this worker queued in Redis"),
    "webcrawl_retries": ("counter", "Download retries (Scrapy's RetryMiddleware)"),
    "webcrawl_retries_exhausted": ("counter", "Requests out of retries"),
    "webcrawl_dlq": ("counter", "Entries sent to a dead-letter queue, by reason"),
    "webcrawl_storage_retries": ("counter", "Page store batch writes retried"),
    "webcrawl_log_errors": ("counter", "ERROR log lines"),
    "webcrawl_frontier_queued": ("gauge", "Requests queued in the frontier (crawl)"),
    "webcrawl_frontier_hosts_ready": (
        "gauge", "Hosts with queued requests (crawl)"),
    "webcrawl_frontier_leases": ("gauge", "Leases outstanding (crawl)"),
    "webcrawl_bloom_estimated_items": (
        "gauge", "Items in the Bloom dupefilter (BITCOUNT estimate)"),
    "webcrawl_bloom_fill_ratio": (
        "gauge", "Bloom estimated items over the capacity of its layers"),
    "webcrawl_bloom_expected_fp_rate": (
        "gauge", "Expected false-positive rate of the Bloom dupefilter"),
    "webcrawl_bloom_layers": ("gauge", "Layers of the scalable Bloom dupefilter"),
    "webcrawl_pipeline_buffer": (
        "gauge", "Pages held by the storage pipeline (buffered + being written)"),
    "webcrawl_event_loop_lag_seconds": (
        "gauge", "How late the reactor ran a 1-second timer, last tick"),
    "webcrawl_event_loop_lag_max_seconds": (
        "gauge", "How late the reactor ran a 1-second timer, worst tick"),
    "webcrawl_start_time_seconds": ("gauge", "Unix time the worker opened"),
    "webcrawl_recrawl_revisits": ("counter", "Revisits stored (continuous crawl)"),
    "webcrawl_recrawl_changed": ("counter", "Revisits that found the page changed"),
    "webcrawl_recrawl_not_modified": ("counter", "Revisits answered 304"),
    "webcrawl_recrawl_estimated_freshness": (
        "gauge", "Estimated share of the known pages whose copy is fresh (crawl)"),
    "webcrawl_recrawl_changed_share": (
        "gauge", "Share of the revisits that found a change, last window (crawl)"),
    "webcrawl_recrawl_not_modified_share": (
        "gauge", "Share of the revisits answered 304, last window (crawl)"),
    "webcrawl_recrawl_price_seconds": (
        "gauge", "Price of a fetch the revisit schedule last solved (crawl)"),
}  # fmt: skip

# Counters read straight from one Scrapy stats key.
_SIMPLE_COUNTERS = {
    "webcrawl_pages_stored": "storage/written",
    "webcrawl_downloaded_bytes": "downloader/response_bytes",
    "webcrawl_politeness_locks": "politeness/lock_acquired",
    "webcrawl_politeness_waits": "politeness/lock_waits",
    "webcrawl_backoff_raised": "backoff/raised",
    "webcrawl_leases": "scheduler/dequeued/redis",
    "webcrawl_leases_acked": "scheduler/acked",
    "webcrawl_leases_reclaimed": "scheduler/reclaimed",
    "webcrawl_requests_queued": "scheduler/enqueued/redis",
    "webcrawl_retries": "retry/count",
    "webcrawl_retries_exhausted": "retry/max_reached",
    "webcrawl_storage_retries": "storage/retries",
    "webcrawl_log_errors": "log_count/ERROR",
    "webcrawl_recrawl_revisits": "recrawl/revisited",
    "webcrawl_recrawl_changed": "recrawl/changed",
    "webcrawl_recrawl_not_modified": "recrawl/not_modified",
}
# Gauges of the continuous crawl's figures in Redis (extensions.extensions.recrawl),
# refreshed with the frontier's.
RECRAWL_GAUGES = (
    "webcrawl_recrawl_estimated_freshness",
    "webcrawl_recrawl_changed_share",
    "webcrawl_recrawl_not_modified_share",
    "webcrawl_recrawl_price_seconds",
)
# Counters summed over the stats keys under a prefix, labelled by the rest.
_LABELLED_COUNTERS = {
    "webcrawl_duplicates": ("storage/duplicates/", "kind"),
    "webcrawl_download_errors": ("downloader/exception_type_count/", "type"),
    "webcrawl_politeness_deferred": ("politeness/deferred/", "reason"),
    "webcrawl_dlq": ("dlq/", "reason"),
}
# Gauges read straight from one Scrapy stats key.
_STAT_GAUGES = {
    "webcrawl_bloom_estimated_items": "dupefilter/estimated_items",
    "webcrawl_bloom_expected_fp_rate": "dupefilter/expected_fp_rate",
    "webcrawl_bloom_layers": "dupefilter/layers",
    "webcrawl_pipeline_buffer": "storage/buffer",
}


def status_classes(stats: dict[str, Any]) -> dict[str, float]:
    """Responses by status class from ``downloader/response_status_count/*``.

    >>> status_classes({"downloader/response_status_count/200": 3,
    ...                 "downloader/response_status_count/404": 1,
    ...                 "downloader/response_status_count/204": 2})
    {'2xx': 5.0, '4xx': 1.0}
    """
    classes: dict[str, float] = defaultdict(float)
    prefix = "downloader/response_status_count/"
    for key, value in stats.items():
        if key.startswith(prefix) and key[len(prefix) :].isdigit():
            classes[f"{key[len(prefix)]}xx"] += value
    return dict(sorted(classes.items()))


def robots_outcomes(stats: dict[str, Any]) -> dict[str, float]:
    """``robotstxt/<outcome>`` counters (one level: not the per-status or
    per-exception detail).

    >>> robots_outcomes({"robotstxt/forbidden": 2, "robotstxt/request_count": 1,
    ...                  "robotstxt/response_status_count/200": 1})
    {'forbidden': 2.0, 'request_count': 1.0}
    """
    prefix = "robotstxt/"
    return {
        key[len(prefix) :]: float(value)
        for key, value in sorted(stats.items())
        if key.startswith(prefix) and "/" not in key[len(prefix) :]
    }


def pages_fetched(stats: dict[str, Any]) -> float:
    """Responses received minus the robots.txt responses among them.

    >>> pages_fetched({"response_received_count": 8,
    ...                "robotstxt/response_status_count/200": 2})
    6.0
    """
    robots = sum(
        v for k, v in stats.items() if k.startswith("robotstxt/response_status_count/")
    )
    return float(stats.get("response_received_count", 0) - robots)


class WorkerCollector(Collector):
    """Builds the ``webcrawl_*`` families from a stats snapshot at each
    scrape (runs on the HTTP server's thread: reads only, never writes)."""

    def __init__(self, crawler: Crawler, gauges: dict[str, float]) -> None:
        self.crawler = crawler
        self.gauges = gauges
        s = crawler.settings
        self.bloom_capacity = s.getint("BLOOM_CAPACITY")
        self.bloom_growth = s.getfloat("BLOOM_GROWTH")

    def _counter(self, name: str, value: float) -> CounterMetricFamily:
        return CounterMetricFamily(name, METRICS[name][1], value=value)

    def _labelled(
        self, name: str, label: str, values: dict[str, float]
    ) -> CounterMetricFamily:
        family = CounterMetricFamily(name, METRICS[name][1], labels=[label])
        for key, value in values.items():
            family.add_metric([key], value)
        return family

    def _gauge(self, name: str, value: float | None) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, METRICS[name][1])
        if value is not None:
            family.add_metric([], value)
        return family

    def collect(self) -> Iterator[Metric]:
        stats_collector = self.crawler.stats
        stats = dict(stats_collector.get_stats()) if stats_collector else {}
        yield self._counter("webcrawl_pages_fetched", pages_fetched(stats))
        for name, key in _SIMPLE_COUNTERS.items():
            yield self._counter(name, float(stats.get(key, 0)))
        yield self._counter(
            "webcrawl_politeness_wait_seconds",
            stats.get("politeness/lock_wait_ms", 0) / 1000.0,
        )
        yield self._labelled(
            "webcrawl_responses", "status_class", status_classes(stats)
        )
        yield self._labelled("webcrawl_robots", "outcome", robots_outcomes(stats))
        for name, (prefix, label) in _LABELLED_COUNTERS.items():
            values = {
                key[len(prefix) :].rsplit(".", 1)[-1]: float(value)
                for key, value in stats.items()
                if key.startswith(prefix)
            }
            yield self._labelled(name, label, values)
        for name, key in _STAT_GAUGES.items():
            value = stats.get(key)
            yield self._gauge(name, float(value) if value is not None else None)
        yield self._gauge("webcrawl_bloom_fill_ratio", self._bloom_fill(stats))
        gauges = dict(self.gauges)
        for name in (
            "webcrawl_frontier_queued",
            "webcrawl_frontier_hosts_ready",
            "webcrawl_frontier_leases",
            "webcrawl_event_loop_lag_seconds",
            "webcrawl_event_loop_lag_max_seconds",
            "webcrawl_start_time_seconds",
            *RECRAWL_GAUGES,
        ):
            yield self._gauge(name, gauges.get(name))

    def _bloom_fill(self, stats: dict[str, Any]) -> float | None:
        items = stats.get("dupefilter/estimated_items")
        layers = int(stats.get("dupefilter/layers") or 1)
        if items is None:
            return None
        capacity = sum(
            self.bloom_capacity * self.bloom_growth**i for i in range(layers)
        )
        return float(items) / capacity if capacity else None


class PrometheusMetrics:
    """Serves this worker's ``/metrics`` (module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        s = crawler.settings
        config.require(s, defaults)
        self.first_port = s.getint("METRICS_PORT")
        self.host = str(s.get("METRICS_HOST"))
        self.tries = s.getint("METRICS_PORT_TRIES")
        self.refresh_interval = s.getfloat("METRICS_REFRESH_INTERVAL")
        if self.first_port <= 0:
            raise NotConfigured("METRICS_PORT is 0: no /metrics")
        # The declared ranges bound each setting; their sum is bounded here.
        if self.first_port + self.tries - 1 > 65535:
            raise NotConfigured("METRICS_PORT + METRICS_PORT_TRIES passes 65535")
        self.port: int | None = None
        self.gauges: dict[str, float] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(WorkerCollector(crawler, self.gauges))
        self._server: Any = None
        self._refresher: asyncio.Task[None] | None = None
        self._lag_probe: task.LoopingCall | None = None
        self._last_tick = 0.0
        self._redis_failed = False
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self.engine_stopped, signal=signals.engine_stopped)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PrometheusMetrics:
        return cls(crawler)

    def spider_opened(self, spider: Spider) -> None:
        self.gauges["webcrawl_start_time_seconds"] = time.time()
        self._serve()
        self._last_tick = time.monotonic()
        self._lag_probe = task.LoopingCall(self._tick)
        self._lag_probe.start(LAG_PROBE_INTERVAL, now=False)
        frontier = PartitionedFrontier(
            async_client(self.crawler),
            spider.name,
            self.crawler.settings.getint("FRONTIER_PARTITIONS", 1),
        )
        self._refresher = asyncio.ensure_future(self._refresh_loop(frontier))

    def _serve(self) -> None:
        """Bind the first free port of METRICS_PORT .. + METRICS_PORT_TRIES - 1."""
        last = self.first_port + self.tries - 1
        for port in range(self.first_port, last + 1):
            try:
                self._server, _ = start_http_server(
                    port, addr=self.host, registry=self.registry
                )
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                continue
            self.port = port
            stats = self.crawler.stats
            if stats is not None:
                stats.set_value("metrics/port", port)
            logger.info("Prometheus metrics on http://%s:%d/metrics", self.host, port)
            return
        logger.error(
            "No free port for /metrics in %d-%d on %s: metrics are off for "
            "this worker (raise METRICS_PORT_TRIES)",
            self.first_port,
            last,
            self.host,
        )

    def _tick(self) -> None:
        now = time.monotonic()
        lag = max(0.0, now - self._last_tick - LAG_PROBE_INTERVAL)
        self._last_tick = now
        self.gauges["webcrawl_event_loop_lag_seconds"] = lag
        worst = self.gauges.get("webcrawl_event_loop_lag_max_seconds", 0.0)
        self.gauges["webcrawl_event_loop_lag_max_seconds"] = max(worst, lag)

    async def _refresh_loop(self, frontier: PartitionedFrontier) -> None:
        while True:
            try:
                await self.refresh_frontier(frontier)
            except TRANSIENT_REDIS_ERRORS as e:
                # Redis down (or a cluster failing over): the scheduler logs
                # the outage and waits; the gauges keep their last values
                # until it is back.
                if not self._redis_failed:
                    self._redis_failed = True
                    logger.warning("Metrics: frontier gauges not refreshed: %s", e)
            await asyncio.sleep(self.refresh_interval)

    async def refresh_frontier(self, frontier: PartitionedFrontier) -> None:
        hosts, leases = await frontier.counts()
        queued = await frontier.queued()
        self.gauges.update(
            {
                "webcrawl_frontier_queued": float(queued),
                "webcrawl_frontier_hosts_ready": float(hosts),
                "webcrawl_frontier_leases": float(leases),
            }
        )
        recrawl = await fleet_figures(frontier.client, frontier.prefix)
        if recrawl.pages:
            shares = recrawl.shares()
            values = {
                "webcrawl_recrawl_estimated_freshness": recrawl.freshness,
                "webcrawl_recrawl_changed_share": shares["changed"],
                "webcrawl_recrawl_not_modified_share": shares["not_modified"],
                "webcrawl_recrawl_price_seconds": recrawl.price,
            }
            for name, value in values.items():
                if value is not None:
                    self.gauges[name] = float(value)
        self._redis_failed = False

    def spider_closed(self, spider: Spider) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
        if self._lag_probe is not None and self._lag_probe.running:
            self._lag_probe.stop()

    def engine_stopped(self) -> None:
        # Serve until the engine stops, so a last scrape sees the final
        # counters; shutdown() waits for the serving loop (up to its 0.5 s
        # poll), so it runs on a thread of its own, off the reactor.
        if self._server is not None:
            server, self._server = self._server, None
            threading.Thread(
                target=_shutdown, args=(server,), name="metrics-shutdown", daemon=True
            ).start()


def _shutdown(server: Any) -> None:
    server.shutdown()
    server.server_close()
