"""Crawl the sandbox web with a local fleet and report what happened.

Shared by ``make demo`` (:mod:`demo.__main__`), the end-to-end tests and the
benchmarks: start the sandbox web, push its seeds with ``redis-cli``, run N
``scrapy crawl web`` workers until the crawl is done, then read the truth from
the sandbox's own request record and from the page store.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy.settings import Settings

from extensions.connection import sync_client
from extensions.keys import (
    crawl_patterns,
    invalid_start_urls,
    seed_patterns,
    start_urls,
)
from sandbox.process import SandboxProcess, min_gap_ms_by_host
from tests.support.fleet import push_seeds, start_worker, stop_all, wait_all

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from sandbox.site import SiteSpec


@dataclass
class CrawlReport:
    spec: SiteSpec
    port: int
    workers: int
    seconds: float
    exit_codes: list[int]
    records: list[dict[str, Any]]
    log_dir: Path
    settings: dict[str, object]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def page_records(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["path"] != "/robots.txt"]

    def fetch_counts(self) -> Counter[str]:
        return Counter(
            f"http://{r['host']}:{self.port}{r['path']}" for r in self.page_records
        )

    def disallowed_fetches(self) -> list[str]:
        return [url for url in self.fetch_counts() if self.spec.is_disallowed(url)]

    def robots_fetches(self) -> Counter[str]:
        return Counter(r["host"] for r in self.records if r["path"] == "/robots.txt")

    def min_gaps_ms(self, include_robots: bool = True) -> dict[str, float]:
        exclude = () if include_robots else ("/robots.txt",)
        return min_gap_ms_by_host(self.records, exclude_paths=exclude)

    def fetch_seconds(self) -> float:
        """From the first to the last request the sandbox saw."""
        times = [r["t_ms"] for r in self.records]
        return (max(times) - min(times)) / 1000 if len(times) > 1 else 0.0


def reset_crawl(redis_url: str, prefix: str = "web") -> None:
    """Delete every key of crawl ``prefix``, its seed lists included (on a
    cluster: SCAN over every master, UNLINK split by slot)."""
    client = sync_client(Settings({"REDIS_URL": redis_url}))
    try:
        keys = [start_urls(prefix), invalid_start_urls(prefix)]
        for pattern in [*crawl_patterns(prefix), *seed_patterns(prefix)]:
            keys += list(client.scan_iter(match=pattern, count=1000))
        client.unlink(*keys)
    finally:
        client.close()


def sandbox_settings(redis_url: str, home: Path) -> dict[str, object]:
    """The settings of a worker that crawls the sandbox web until it is done.

    A crawl is done once every page is stored and no lease is left, which
    waits for the last batch of pages (``PIPELINE_FLUSH_INTERVAL``, 5 s by
    default) and then the idle time: 0.5 s and 2 s here close a fleet about
    6 s sooner than 5 s and 3 s did, which every fleet test paid.
    """
    return {
        "REDIS_URL": redis_url,
        "WEBCRAWL_HOME": str(home),
        "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
        "PIPELINE_FLUSH_INTERVAL": 0.5,
        "SEED_POLL_INTERVAL": 0.5,
        "WEB_ALLOWED_DOMAINS": "sandbox.test",
        # The sandbox web is on loopback: lift the SSRF guard.
        "ALLOW_PRIVATE_ADDRESSES": True,
        "LOG_LEVEL": "INFO",
    }


# For crawls of the sandbox's failure corners: short curves so the whole
# story fits in a test: the failure table's delays at a tenth, robots.txt
# retried after 2 s (doubling), an 8 s budget for a server that keeps
# answering 429 with Retry-After, heartbeats every second (a killed worker's
# leases come back within three), and an idle time longer than any retry
# delay of the scaled table (a retry due after the idle time would be left
# waiting for the next run, as designed).
FAILURE_SETTINGS: dict[str, object] = {
    "RETRY_DELAY_SCALE": 0.1,
    "ROBOTS_RETRY_INITIAL": 2,
    "RETRY_THROTTLED_TIME_BUDGET": 8,
    "FRONTIER_HEARTBEAT_INTERVAL": 1,
    "DOWNLOAD_DELAY": 0.2,
    "MAX_IDLE_TIME_BEFORE_CLOSE": 8,
    # The batch timer these idle times were tuned with (sandbox_settings
    # stores within 0.5 s): the last pages' leases end 5 s after their fetch,
    # which adds to the idle time on a loaded machine's slow corners.
    "PIPELINE_FLUSH_INTERVAL": 5.0,
}


def crawl_sandbox(
    spec: SiteSpec,
    redis_url: str,
    home: Path,
    workers: int = 2,
    settings: Mapping[str, object] | None = None,
    timeout: float = 600.0,
    during: Callable[[list[Any], SandboxProcess], None] | None = None,
    extra_seeds: list[str] | None = None,
) -> CrawlReport:
    """Crawl ``spec`` from scratch with ``workers`` processes; see module doc.

    ``during(procs, web)``, if given, runs while the workers crawl (fault
    injection: kill and restart workers, restart Redis...).
    """
    home.mkdir(parents=True, exist_ok=True)
    log_dir = home / "logs"
    reset_crawl(redis_url)
    all_settings = {**sandbox_settings(redis_url, home), **(settings or {})}
    with SandboxProcess(spec, directory=home, max_seconds=timeout + 60) as web:
        push_seeds(redis_url, [*web.seed_urls(), *(extra_seeds or [])])
        start = time.monotonic()
        procs: list[Any] = []
        try:
            for n in range(workers):
                procs.append(start_worker(all_settings, log_dir / f"worker-{n}.log"))
            if during is not None:
                during(procs, web)
            codes = wait_all(procs, timeout)
        except BaseException:
            # Interrupted (Ctrl-C, a failed check in ``during``): the workers
            # run in sessions of their own and would outlive this process.
            stop_all(procs)
            raise
        seconds = time.monotonic() - start
        web.stop()
        records = web.records()
        port = web.port
    return CrawlReport(
        spec, port, workers, seconds, codes, records, log_dir, all_settings
    )
