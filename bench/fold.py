"""Cost of one fleet-stats fold (:mod:`extensions.extensions.fleetstats`) in Redis.

Run: ``python -m bench.fold [--folds 2000]``. Starts a throw-away
redis-server, folds a worker's stats ``--folds`` times (each fold adds four
counters: pages, bytes, stored, 2xx) and prints the calls Redis saw and the
Redis time per fold from ``INFO commandstats``: what a worker costs the shared
Redis every ``STATS_FOLD_INTERVAL`` seconds, whatever its crawl rate.

Settings read: none (command-line options only).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from typing import Any

import redis
from scrapy import Spider
from scrapy.utils.test import get_crawler

from extensions.connection.embedded import RedisProcess
from extensions.extensions.fleetstats import FleetStats
from webcrawl.addon import WebcrawlDefaults

COUNTERS = (
    "response_received_count",
    "downloader/response_status_count/200",
    "downloader/response_bytes",
    "storage/written",
)


async def run(url: str, folds: int) -> dict[str, Any]:
    crawler = get_crawler(
        Spider,
        {"REDIS_URL": url, "LOGSTATS_INTERVAL": 3600, "ADDONS": {WebcrawlDefaults: 0}},
    )
    stats: Any = crawler.stats
    stats.open_spider()
    ext = FleetStats.from_crawler(crawler)
    ext.spider_opened(Spider(name="web"))
    sync = redis.Redis.from_url(url)
    sync.config_resetstat()
    for _ in range(folds):
        for key in COUNTERS:
            stats.inc_value(key, 7)
        await ext.fold()
    result: dict[str, Any] = sync.info("commandstats")["cmdstat_evalsha"]
    ext._stop.set()
    if ext._task is not None:
        await ext._task
    sync.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=2000)
    args = parser.parse_args()
    with RedisProcess(tempfile.mkdtemp(prefix="fold-"), appendonly=False) as server:
        st = asyncio.run(run(server.url, args.folds))
    # redis-py's first EVALSHA of a script fails with NOSCRIPT, then loads it.
    print(
        f"{args.folds} folds: {st['calls']} EVALSHA calls "
        f"({st.get('failed_calls', 0)} NOSCRIPT), "
        f"{st['usec_per_call']:.1f} us of Redis time per fold"
    )


if __name__ == "__main__":
    main()
