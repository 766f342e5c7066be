"""``make demo``: crawl the sandbox web with two workers and print a summary.

Starts the sandbox web and a Redis of its own (the embedded one, under
``WEBCRAWL_HOME/demo``), seeds the crawl with ``redis-cli lpush``, runs two
``scrapy crawl web`` workers until the crawl is done, prints pages stored,
pages/s, robots-disallowed fetches and the smallest gap between two requests
to one host against the configured delay, then stops everything it started.

Environment: ``DEMO_HOSTS`` (100), ``DEMO_PAGES`` (pages per host, 10),
``DEMO_DELAY`` (seconds, 0.25), ``DEMO_WORKERS`` (2).

Ctrl-C (SIGINT) or SIGTERM stops the workers, the sandbox web and the Redis
the demo started, says so in one line and exits with 128 + the signal.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys

from scrapy.settings import Settings

from extensions.connection.embedded import ensure_embedded, stop_embedded, webcrawl_home
from pipelines.stores import store_from_settings
from sandbox.site import SiteSpec, crawl_delay_map
from tests.support.localcrawl import crawl_sandbox


class Interrupted(BaseException):
    """Raised by the demo's SIGINT and SIGTERM handler (a BaseException, like
    KeyboardInterrupt, so that no ``except Exception`` on the way takes it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupted(signum: int, frame: object) -> None:
    # The clean-up that follows must not be cut short by a second Ctrl-C:
    # every step of it is bounded (workers get 20 s, then SIGKILL).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Interrupted(signum)


def main() -> int:
    signal.signal(signal.SIGINT, _interrupted)
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        return _demo()
    except Interrupted as exc:
        print(
            f"Interrupted by {signal.Signals(exc.signum).name}: stopped the "
            "workers, the sandbox web and the embedded Redis the demo started",
            file=sys.stderr,
        )
        return 128 + exc.signum


def _demo() -> int:
    hosts = int(os.environ.get("DEMO_HOSTS", "100"))
    pages = int(os.environ.get("DEMO_PAGES", "10"))
    delay = float(os.environ.get("DEMO_DELAY", "0.25"))
    workers = int(os.environ.get("DEMO_WORKERS", "2"))
    home = webcrawl_home() / "demo"
    shutil.rmtree(home, ignore_errors=True)
    spec = SiteSpec(
        seed=1,
        hosts=hosts,
        pages_per_host=pages,
        crawl_delay_hosts=crawl_delay_map(hosts, 3, 1.0),
    )
    print(f"Sandbox: {hosts} hosts x {pages} pages, 3 hosts with Crawl-delay: 1")
    try:
        redis_url = ensure_embedded(home)
        print(f"Redis (embedded): {redis_url}, data in {home / 'redis'}")
        report = crawl_sandbox(
            spec,
            redis_url,
            home,
            workers=workers,
            settings={"DOWNLOAD_DELAY": delay, "LOG_LEVEL": "INFO"},
        )
    finally:
        stop_embedded(home)
    store = store_from_settings(Settings({"WEBCRAWL_HOME": str(home)}))
    store.open()
    try:
        stored = store.count()
    finally:
        store.close()
    expected = len(spec.reachable_urls(report.port))
    gaps = report.min_gaps_ms()
    worst_host, worst_gap = min(
        gaps.items(), key=lambda kv: kv[1] / _delay(spec, kv[0], delay)
    )
    fetched = len(report.page_records)
    seconds = report.fetch_seconds()
    print()
    print(f"workers                        {workers} (exit codes {report.exit_codes})")
    print(
        f"records stored                 {stored} (pages reachable and allowed: "
        f"{expected}; the rest are URLs kept on record unfetched: robots-"
        "forbidden or failed)"
    )
    print(f"pages fetched                  {fetched} in {seconds:.1f}s")
    print(f"pages/s                        {fetched / seconds if seconds else 0:.1f}")
    print(f"robots-disallowed fetches      {len(report.disallowed_fetches())}")
    print(f"robots.txt fetches per host    max {max(report.robots_fetches().values())}")
    print(
        f"smallest gap to one host       {worst_gap:.0f} ms on {worst_host} "
        f"(its delay: {_delay(spec, worst_host, delay) * 1000:.0f} ms)"
    )
    print(f"logs                           {report.log_dir}")
    ok = (
        all(code == 0 for code in report.exit_codes)
        and not report.disallowed_fetches()
        and stored >= expected
    )
    return 0 if ok else 1


def _delay(spec: SiteSpec, host: str, default: float) -> float:
    return max(default, spec.crawl_delay(host) or 0.0)


if __name__ == "__main__":
    sys.exit(main())
