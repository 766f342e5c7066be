"""``python -m sandbox``: serve the sandbox web on one loopback port.

Prints ``{"port": N}`` on stdout once listening; see ``sandbox/README.md``.
Reads no settings: everything comes from the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from sandbox.server import serve
from sandbox.site import FEATURES, SHAPES, SiteSpec, crawl_delay_map


def parse_delay_map(text: str) -> dict[int, float]:
    """``"3=2,7=0.5"`` -> ``{3: 2.0, 7: 0.5}``.

    >>> parse_delay_map("3=2, 7=0.5")
    {3: 2.0, 7: 0.5}
    >>> parse_delay_map("")
    {}
    """
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, _, delay = item.partition("=")
        out[int(host)] = float(delay)
    return out


def parse_address_map(text: str) -> dict[int, str]:
    """``"0=127.0.1.1,5=127.0.1.1"`` -> ``{0: '127.0.1.1', 5: '127.0.1.1'}``.

    >>> parse_address_map("0=127.0.1.1, 5=127.0.1.2")
    {0: '127.0.1.1', 5: '127.0.1.2'}
    """
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, _, address = item.partition("=")
        out[int(host)] = address.strip()
    return out


def parse_slow_map(text: str) -> dict[int, tuple[float, int]]:
    """``"0=1.0:12,3=0.5"`` -> host 0 answers its first 12 page requests
    after 1 s, host 3 every one after 0.5 s.

    >>> parse_slow_map("0=1.0:12, 3=0.5")
    {0: (1.0, 12), 3: (0.5, 0)}
    """
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, _, spec = item.partition("=")
        seconds, _, count = spec.partition(":")
        out[int(host)] = (float(seconds), int(count or 0))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__)
    p.add_argument("--seed", type=int, default=0, help="content seed (default 0)")
    p.add_argument(
        "--hosts", type=int, default=100, help="number of hosts (default 100)"
    )
    p.add_argument("--pages", type=int, default=50, help="pages per host (default 50)")
    p.add_argument(
        "--shape",
        choices=SHAPES,
        default="uniform",
        help="page spread (default uniform)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=0,
        help="port on 127.0.0.1 (default 0: any free one)",
    )
    p.add_argument(
        "--record", default=None, help="append a JSON line per request to this file"
    )
    p.add_argument(
        "--crawl-delay-hosts",
        type=int,
        default=0,
        help="how many hosts get a Crawl-delay in robots.txt (default 0)",
    )
    p.add_argument(
        "--crawl-delay",
        type=float,
        default=1.0,
        help="their Crawl-delay, seconds (default 1)",
    )
    p.add_argument(
        "--crawl-delay-map",
        default="",
        help="exact Crawl-delay per host index, e.g. 3=2,7=0.5 (added to the count)",
    )
    p.add_argument(
        "--features",
        default="",
        help=f"hostile corners to switch on: {','.join(sorted(FEATURES))}, or all",
    )
    p.add_argument(
        "--change-period",
        type=float,
        default=0.0,
        help="pages change, each as a Poisson process: a quarter every PERIOD s "
        "on average, a quarter every 10 x PERIOD s, half never (default 0: off)",
    )
    p.add_argument(
        "--change-profile",
        choices=("classes", "measured", "loguniform", "rewrites"),
        default="classes",
        help="the spread of change rates (sandbox.changes): classes (as above), "
        "measured (Cho and Garcia-Molina's measured spread, PERIOD = one day), "
        "loguniform (1/24 to 365 PERIODs), rewrites (pages 1-6 of every host "
        "rewritten together every PERIOD s, the others never)",
    )
    p.add_argument(
        "--address-map",
        default="",
        help="the loopback address of hosts, e.g. 0=127.0.1.1,1=127.0.1.1 (the "
        "others: 127.0.0.1); the server listens on each, one port",
    )
    p.add_argument(
        "--slow-map",
        default="",
        help="hosts whose pages answer late, e.g. 0=1.0:12 (host 0: 1 s for its "
        "first 12 page requests, then at once; no :N: always)",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        default=0.0,
        help="exit after this long (default 0: never)",
    )
    p.add_argument(
        "--cache-pages",
        type=int,
        default=2048,
        help="rendered pages kept in memory (LRU)",
    )
    return p


def spec_from_args(args: argparse.Namespace) -> SiteSpec:
    delays = crawl_delay_map(args.hosts, args.crawl_delay_hosts, args.crawl_delay)
    delays.update(parse_delay_map(args.crawl_delay_map))
    names = {f.strip() for f in args.features.split(",") if f.strip()}
    features = FEATURES if "all" in names else frozenset(names)
    return SiteSpec(
        seed=args.seed,
        hosts=args.hosts,
        pages_per_host=args.pages,
        shape=args.shape,
        crawl_delay_hosts=delays,
        features=frozenset(features),
        change_period=args.change_period,
        change_profile=args.change_profile,
        addresses=parse_address_map(args.address_map),
        slow_hosts=parse_slow_map(args.slow_map),
    )


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        spec = spec_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(
        level=logging.WARNING, format="sandbox: %(levelname)s %(message)s"
    )
    asyncio.run(
        serve(
            spec, args.port, args.record, args.max_seconds, cache_pages=args.cache_pages
        )
    )


if __name__ == "__main__":
    main()
