"""What a partitioned frontier costs one Redis (``FRONTIER_PARTITIONS``).

Run: ``python -m bench.partitions [--partitions 1 4] [--workers 2]
[--hosts 40] [--pages-per-host 25]``. Crawls the same sandbox web once per
partition count with ``webcrawl`` workers (:func:`bench.crawlers.crawl`, a
fresh redis-server each) and prints, per page, the Redis commands and calls
(Lua's included), round trips and Redis CPU, with pages/s and what was
missed. On one Redis, partitions only add work (more, smaller script calls);
what they buy is room on a Redis Cluster, where each partition's slot can
live on another master.

Settings read: none (command-line options only).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.crawlers import Crawler, Run, crawl
from sandbox.site import SiteSpec


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--hosts", type=int, default=40)
    parser.add_argument("--pages-per-host", type=int, default=25)
    parser.add_argument("--seed", type=int, default=3)
    opts = parser.parse_args(argv)
    spec = SiteSpec(
        seed=opts.seed, hosts=opts.hosts, pages_per_host=opts.pages_per_host
    )
    print("P  pages  missing  commands/page  calls/page  round trips/page  "
          "Redis CPU ms/page  pages/s")  # fmt: skip
    for p in opts.partitions:
        run = Run(spec, timeout=240, extra={"FRONTIER_PARTITIONS": p})
        with tempfile.TemporaryDirectory(prefix="partitions-") as work:
            r = crawl(Crawler("webcrawl", opts.workers), run, Path(work))
        if r.error:
            print(f"{p}  failed: {r.error}")
            continue
        n = max(r.pages, 1)
        print(
            f"{p:<2} {r.pages:>5}  {r.missing:>7}  {r.redis['commands'] / n:>13.1f}"
            f"  {r.redis['calls'] / n:>10.1f}  {r.redis['round_trips'] / n:>16.2f}"
            f"  {r.redis['cpu_s'] * 1000 / n:>17.3f}  {r.pages_per_s:>7.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
