"""The benchmark suite: ``make bench`` (``python -m bench.run``), ``--quick`` for CI.

Crawls the sandbox web with stock Scrapy, stock scrapy-redis and webcrawl (one
and two workers), in turn, same pages, seeds, concurrency and delay
(:mod:`bench.crawlers`), repeats each crawl, measures Redis memory per queued
request and per seen URL (:mod:`bench.memory`), runs the component
micro-benchmarks (``python -m bench.bloom``, ``python -m bench.pipeline``,
``python -m bench.freshness``, ``python -m bench.cluster``) and
prints one table per scenario, crawlers as columns, each cell the median of
the repeats, its range, and its ratio to stock Scrapy. The tables also go to
``bench/out/latest.md``. Every crawl is bounded by ``--timeout``; everything
started is stopped. ``bench/README.md`` explains each number.

Reads no settings (command-line options only).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
import scrapy

from bench.crawlers import Crawler, Run, RunResult, crawl
from bench.memory import measure
from extensions.connection.embedded import find_redis_binary
from sandbox.site import SiteSpec, shared_addresses

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "latest.md"

UNTHROTTLED = [
    Crawler("bare"),
    Crawler("scrapy"),
    Crawler("scrapy-redis", 1),
    Crawler("webcrawl", 1),
    Crawler("webcrawl", 2),
]
# Polite: stock Scrapy as the reference, two scrapy-redis workers to show what
# a per-process DOWNLOAD_DELAY does, and webcrawl fleets of two and four.
POLITE = [
    Crawler("scrapy"),
    Crawler("scrapy-redis", 2),
    Crawler("webcrawl", 2),
    Crawler("webcrawl", 4),
]


@dataclass
class Scenario:
    name: str
    run: Run
    crawlers: list[Crawler]
    polite: bool = False
    results: dict[Crawler, list[RunResult]] = field(default_factory=dict)

    @property
    def per_ip(self) -> bool:
        """Politeness per address too (a shared-IP web)."""
        return self.run.ip_delay > 0


@dataclass
class Size:
    """Crawl sizes of one mode."""

    repeats: int
    unthrottled: SiteSpec
    uniform: SiteSpec
    skewed: SiteSpec | None
    uniform_delay: float
    skewed_delay: float
    memory_n: int
    crawl_pages: int  # the memory table's real crawl (bench.memory.crawl)
    idle_close: float
    timeout: float
    bloom_args: list[str]
    pipeline_args: list[str] | None  # None: not run
    unthrottled_crawlers: list[Crawler] = field(default_factory=lambda: UNTHROTTLED)
    polite_crawlers: list[Crawler] = field(default_factory=lambda: POLITE)
    # The shared-IP web (POLITENESS_KEY=host,ip on 3 partitions; None: not
    # run), its DOWNLOAD_DELAY and IP_DOWNLOAD_DELAY.
    shared_ip: SiteSpec | None = None
    shared_ip_delays: tuple[float, float] = (0.5, 1.0)
    shared_ip_crawlers: list[Crawler] = field(
        default_factory=lambda: [Crawler("webcrawl", 2), Crawler("webcrawl", 4)]
    )


# Sized so that start-up and ramp-up are a few percent of each crawl and the
# whole run fits in about 25 minutes on 2 cores, one run per crawler.
FULL = Size(
    repeats=1,
    # 5,000 pages: at ~25-40 pages/s with the storage pipeline, 2-3 minutes
    # of crawling per column against ~5 s of start-up.
    unthrottled=SiteSpec(seed=1, hosts=50, pages_per_host=100),
    # Ten hosts at 0.5 s: a bound of 20 pages/s, which one webcrawl process
    # can store on the 2-core VM, so the crawl is politeness-bound, not
    # CPU-bound; 125 pages (and robots.txt) per host is a 63 s bound.
    uniform=SiteSpec(seed=2, hosts=10, pages_per_host=125),
    # Skewed: host 0 holds half the pages (200 of 400), more than the 32
    # downloader places, so a scheduler that is not host-aware fills every
    # place with host 0's requests waiting out its delay (head-of-line
    # blocking, Scrapy #2638) and serves the other hosts only at the end.
    # Host 0's 200 pages at 0.3 s: a 60 s bound.
    skewed=SiteSpec(seed=3, hosts=5, pages_per_host=80, shape="skewed"),
    uniform_delay=0.5,
    skewed_delay=0.3,
    memory_n=50_000,
    crawl_pages=10_000,
    idle_close=2.0,
    # Per crawl process: 5,000 pages at a slow 20 pages/s is 250 s.
    timeout=480.0,
    bloom_args=["--n", "500000"],
    pipeline_args=["--quick"],
    # 40 hosts, 20 of them on two addresses (10 each, as shared hosting
    # puts them), the rest one each: with 0.5 s per host and 1 s per
    # address, each shared address has 10 x 6 requests waiting (robots.txt
    # included) at 1 s apart, a 63 s bound, while its hosts alone would
    # allow 10 a second and the other 20 hosts finish in 4 s: only a
    # crawler that spaces hosts and addresses at once, and leases the free
    # hosts while an address is busy, keeps every constraint and the bound.
    shared_ip=SiteSpec(
        seed=4, hosts=40, pages_per_host=5, addresses=shared_addresses(40, 20, 2)
    ),
    # The four columns: scrapy-redis x1 would add ~3.5 minutes at
    # stock Scrapy's rate (0.86x of it in earlier runs, bench/RESULTS.md);
    # scrapy-redis stays in the polite tables and the memory table, where it
    # differs, and in --quick.
    unthrottled_crawlers=[c for c in UNTHROTTLED if c.kind != "scrapy-redis"],
)
QUICK = Size(
    repeats=1,
    unthrottled=SiteSpec(seed=1, hosts=6, pages_per_host=5),
    uniform=SiteSpec(seed=2, hosts=4, pages_per_host=4),
    skewed=None,  # --quick: the uniform shape only
    uniform_delay=0.25,
    skewed_delay=0.25,
    memory_n=2_000,
    # One page per host of the memory table's 100-host crawl: it runs in the
    # test suite (tests/test_bench_smoke.py), where 300 cost 4 s more CPU.
    crawl_pages=100,
    idle_close=1.0,
    timeout=60.0,
    bloom_args=["--quick"],
    pipeline_args=None,  # 15 s: the full run has it
    polite_crawlers=[Crawler("scrapy"), Crawler("webcrawl", 2)],
)
# Same for every crawler: the pipeline's batch flush interval (default 5 s)
# only moves the end of the process, not the fetches; 1 s keeps runs short.
COMMON = {"PIPELINE_FLUSH_INTERVAL": 1.0}


def scenarios(size: Size, only: set[str]) -> list[Scenario]:
    out = []

    def run(spec: SiteSpec, delay: float) -> Run:
        return Run(
            spec,
            delay=delay,
            timeout=size.timeout,
            idle_close=size.idle_close,
            extra=dict(COMMON),
        )

    if "unthrottled" in only:
        out.append(
            Scenario(
                "unthrottled",
                run(size.unthrottled, 0.0),
                list(size.unthrottled_crawlers),
            )
        )
    if "polite" in only:
        shapes = [("polite-uniform", size.uniform, size.uniform_delay)]
        if size.skewed is not None:
            shapes.append(("polite-skewed", size.skewed, size.skewed_delay))
        for name, spec, delay in shapes:
            out.append(
                Scenario(
                    name, run(spec, delay), list(size.polite_crawlers), polite=True
                )
            )
    if ("polite" in only or "shared-ip" in only) and size.shared_ip is not None:
        delay, ip_delay = size.shared_ip_delays
        shared = replace(
            run(size.shared_ip, delay),
            ip_delay=ip_delay,
            extra={**COMMON, "POLITENESS_KEY": "host,ip", "FRONTIER_PARTITIONS": 3},
        )
        out.append(
            Scenario(
                "polite-shared-ip", shared, list(size.shared_ip_crawlers), polite=True
            )
        )
    return out


# --- statistics and tables ------------------------------------------------------


def summary(values: Sequence[float], fmt: str) -> str:
    """Median and [min-max] of ``values`` (just the value for one).

    >>> summary([3.0, 1.0, 2.0], "{:.1f}")
    '2.0 [1.0-3.0]'
    >>> summary([5], "{:.0f}")
    '5'
    """
    if not values:
        return "n/a"
    med = fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def ratio(value: float, base: float | None) -> str:
    """``(x1.23)`` of ``value`` against ``base``; empty without a base.

    >>> ratio(2.0, 4.0), ratio(1.0, None), ratio(1.0, 0.0)
    ('(x0.50)', '', '')
    """
    return f"(x{value / base:.2f})" if base else ""


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table.

    >>> print(table(["a", "b"], [["1", "2"]]))
    | a | b |
    |---|---|
    | 1 | 2 |
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


Metric = tuple[str, "Callable[[RunResult], float | None]", str, bool]


def _metrics(polite: bool, per_ip: bool = False) -> list[Metric]:
    """(label, value of one run, format, show ratio to stock Scrapy)."""

    def per_page(v: float, r: RunResult, scale: float = 1.0) -> float | None:
        return scale * v / r.pages if r.pages else None

    def redis_per_page(key: str) -> Callable[[RunResult], float | None]:
        return lambda r: per_page(r.redis[key], r) if r.redis else None

    rows: list[Metric] = [
        ("pages fetched", lambda r: float(r.pages), "{:.0f}", False),
        ("reachable pages missed", lambda r: float(r.missing), "{:.0f}", False),
        ("pages/s (sandbox record)", lambda r: r.pages_per_s, "{:.1f}", True),
    ]
    if polite:
        rows += [
            ("politeness bound s", lambda r: r.bound_s, "{:.1f}", False),
            ("first-to-last fetch s", lambda r: r.fetch_s, "{:.1f}", True),
            (
                "efficiency (bound / fetch s)",
                lambda r: r.bound_s / r.fetch_s if r.fetch_s else None,
                "{:.2f}",
                True,
            ),
            ("politeness violations", lambda r: float(r.violations), "{:.0f}", False),
        ]
    if per_ip:
        rows.append(
            (
                "politeness violations per address",
                lambda r: float(r.ip_violations),
                "{:.0f}",
                False,
            )
        )
    rows += [
        (
            "CPU s / 1000 pages (crawlers)",
            lambda r: per_page(r.cpu_s, r, 1000),
            "{:.1f}",
            True,
        ),
        (
            "peak RSS MiB (largest process)",
            lambda r: r.peak_rss_kib / 1024,
            "{:.0f}",
            True,
        ),
        ("Redis commands / page", redis_per_page("commands"), "{:.1f}", False),
        ("Redis round trips / page", redis_per_page("round_trips"), "{:.2f}", False),
        (
            "Redis CPU s / 1000 pages",
            lambda r: per_page(r.redis["cpu_s"], r, 1000) if r.redis else None,
            "{:.2f}",
            False,
        ),
        ("process wall s", lambda r: r.wall_s, "{:.1f}", True),
    ]
    return rows


def scenario_table(sc: Scenario) -> str:
    header = ["metric", *(c.label for c in sc.crawlers)]
    base_runs = [r for r in sc.results.get(sc.crawlers[0], []) if not r.error]
    rows = []
    for label, value, fmt, show_ratio in _metrics(sc.polite, sc.per_ip):
        base_vals = [v for v in map(value, base_runs) if v is not None]
        base = statistics.median(base_vals) if base_vals else None
        row = [label]
        for c in sc.crawlers:
            runs = sc.results.get(c, [])
            ok = [r for r in runs if not r.error]
            vals = [v for v in map(value, ok) if v is not None]
            if not runs:
                row.append("not run")
            elif not ok:
                row.append(f"n/a ({runs[0].error})")
            elif not vals:
                row.append("n/a (no Redis)" if "Redis" in label else "n/a")
            else:
                cell = summary(vals, fmt)
                if show_ratio and c != sc.crawlers[0]:
                    cell += " " + ratio(statistics.median(vals), base)
                row.append(cell)
        rows.append(row)
    failed = [
        f"{c.label} run {n + 1}: {r.error}"
        for c in sc.crawlers
        for n, r in enumerate(sc.results.get(c, []))
        if r.error
    ]
    spec, run = sc.run.spec, sc.run
    text = (
        f"### {sc.name}\n\n{spec.hosts} hosts, {spec.pages_per_host} pages per host "
        f"({spec.shape}"
        + (f", {len(set(spec.addresses.values()))} addresses" if spec.addresses else "")
        + f"), DOWNLOAD_DELAY={run.delay:g}, "
        + (
            f"IP_DOWNLOAD_DELAY={run.ip_delay:g}, "
            + ", ".join(f"{k}={v}" for k, v in run.extra.items() if k not in COMMON)
            + ", "
            if sc.per_ip
            else ""
        )
        + "CONCURRENT_REQUESTS="
        f"{run.concurrency}, CONCURRENT_REQUESTS_PER_DOMAIN={run.per_host}; "
        f"{len(next(iter(sc.results.values()), []))} run(s) per crawler, "
        f"median [min-max] (xratio to {sc.crawlers[0].label}).\n\n"
        + table(header, rows)
    )
    if failed:
        text += "\n\nFailed runs (left out of the medians): " + "; ".join(failed)
    return text


def _median(
    sc: Scenario, crawler: Crawler, value: Callable[[RunResult], float | None]
) -> float | None:
    """Median of ``value`` over ``crawler``'s successful runs in ``sc``."""
    vals = [
        v
        for r in sc.results.get(crawler, [])
        if not r.error and (v := value(r)) is not None
    ]
    return statistics.median(vals) if vals else None


def _cpu_per_page(r: RunResult) -> float | None:
    return r.cpu_s / r.pages if r.pages else None


def _share_of_bound(r: RunResult) -> float | None:
    return r.bound_s / r.fetch_s if r.fetch_s else None


def _goal(
    name: str, num: float | None, den: float | None, target: float, at_least: bool
) -> list[str]:
    """One row of the goals table: the ratio ``num / den`` against ``target``.

    >>> _goal("x", 3.0, 4.0, 0.8, True)
    ['x', '0.75', '>= 0.80', 'no']
    >>> _goal("x", 1.0, None, 1.5, False)
    ['x', 'n/a', '<= 1.50', 'n/a']
    """
    bound = f"{'>=' if at_least else '<='} {target:.2f}"
    if num is None or not den:
        return [name, "n/a", bound, "n/a"]
    value = num / den
    met = value >= target if at_least else value <= target
    return [name, f"{value:.2f}", bound, "yes" if met else "no"]


def goals_table(done: Sequence[Scenario]) -> str | None:
    """The issue's goals as ratios measured in this run (None when no
    scenario with the needed columns ran)."""
    bare, wc1, wc2 = Crawler("bare"), Crawler("webcrawl", 1), Crawler("webcrawl", 2)
    rows: list[list[str]] = []
    notes: list[str] = []
    for sc in done:
        if sc.polite:
            for n in (2, 4):
                c = Crawler("webcrawl", n)
                if c not in sc.results:
                    continue
                rows.append(
                    _goal(
                        f"{sc.name}: webcrawl x{n} share of the politeness bound",
                        _median(sc, c, _share_of_bound),
                        1.0,
                        0.95,
                        True,
                    )
                )
                counts = [("politeness violations", lambda r: float(r.violations))]
                if sc.per_ip:
                    counts.append(
                        (
                            "politeness violations per address",
                            lambda r: float(r.ip_violations),
                        )
                    )
                for label, count in counts:
                    worst = _median(sc, c, count)
                    rows.append(
                        [
                            f"{sc.name}: webcrawl x{n} {label}",
                            "n/a" if worst is None else f"{worst:.0f}",
                            "0",
                            "n/a" if worst is None else ("yes" if worst == 0 else "no"),
                        ]
                    )
            continue
        if bare not in sc.results:
            continue
        speed = _median(sc, bare, lambda r: r.pages_per_s)
        one = _median(sc, wc1, lambda r: r.pages_per_s)
        two = _median(sc, wc2, lambda r: r.pages_per_s)
        rows += [
            _goal("webcrawl x1 / bare Scrapy, pages/s", one, speed, 0.8, True),
            _goal(
                "webcrawl x1 / bare Scrapy, CPU per page",
                _median(sc, wc1, _cpu_per_page),
                _median(sc, bare, _cpu_per_page),
                1.5,
                False,
            ),
            _goal("webcrawl x2 / webcrawl x1, pages/s", two, one, 1.7, True),
        ]
        if speed and two and two >= 0.9 * speed:
            notes.append(
                f"webcrawl x2 fetched {two:.1f} pages/s, within 10% of the "
                f"{speed:.1f} pages/s bare Scrapy got from the same sandbox "
                "on the same cores: the sandbox server or the shared CPUs, "
                "not webcrawl, bound x2 here."
            )
    if not rows:
        return None
    text = "### goals\n\nRatios of medians from the tables above.\n\n" + table(
        ["goal", "measured", "target", "met"], rows
    )
    return text + "".join(f"\n\n{n}" for n in notes)


def memory_table(n: int, out: dict[str, dict[str, Any]]) -> str:
    base = out["scrapy"]
    rows = []
    for key, label in (
        ("queued", "bytes per queued request"),
        ("seen", "bytes per seen URL"),
    ):
        row = [label, f"{base[key]:.1f}"]
        for name in ("scrapy-redis", "webcrawl"):
            row.append(f"{out[name][key]:.1f} {ratio(out[name][key], base[key])}")
        rows.append(row)
    bound = out["webcrawl"]["bloom_bound"]
    seen = out["webcrawl"]["seen"]
    rows.append(
        [
            "Bloom bytes per URL vs optimal bound",
            "n/a (exact set)",
            "n/a (exact set)",
            f"{seen:.3f} vs {bound:.3f} ({100 * (seen / bound - 1):+.1f}%)",
        ]
    )
    dedup = out["dedup"]["per_page"]
    rows.append(
        [
            "Redis bytes per stored page, duplicate index",
            "n/a",
            "n/a",
            f"{dedup:.1f} (a bounded cache; the page store holds the index)",
        ]
    )
    rows.append(["Redis bytes per seen URL, all-in (Bloom + index)", "n/a", "n/a",
                 f"{seen + dedup:.1f}"])  # fmt: skip
    if "spill" in out:
        sp = out["spill"]
        share = sp["per_queued"] / out["webcrawl"]["queued"]
        rows.append(
            [
                f"Redis bytes per queued request, 10x past FRONTIER_HOST_QUEUE_MAX"
                f"={sp['cap']}",
                "n/a",
                "n/a",
                f"{sp['per_queued']:.1f} (x{share:.2f} of uncapped; the rest in "
                "the page store)",
            ]
        )
    text = (
        f"### memory\n\n{n:,} requests over 100 hosts (depth "
        "meta), each system through its own queue and dupefilter code; stock "
        "Scrapy: Python heap (tracemalloc), the others: Redis MEMORY USAGE.\n\n"
        + table(["metric", "stock Scrapy", "scrapy-redis", "webcrawl"], rows)
    )
    if "crawl" in out:
        c = out["crawl"]
        text += (
            f"\n\nwebcrawl crawl of {c['pages']:,} sandbox pages (default "
            f"settings, 2 workers): Redis used_memory {c['used_memory']:,} B over "
            f"an empty server at the end, {c['peak_used_memory']:,} B at most "
            "while crawling; MEMORY USAGE "
            + ", ".join(f"{k} {v:,}" for k, v in c["families"].items())
            + " B."
        )
    return text


def micro(module: str, args: list[str], timeout: float) -> str:
    cmd = [sys.executable, "-m", module, *args]
    try:
        proc = subprocess.run(
            cmd,
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        body = proc.stdout.strip() or proc.stderr.strip()[-2000:]
    except subprocess.TimeoutExpired:
        body = f"timed out after {timeout:.0f} s"
    shown = " ".join(["python", "-m", module, *args])
    if body.startswith(f"### {module}\n"):
        return body  # the module writes its own Markdown section
    return f"### {module}\n\n`{shown}`\n\n```\n{body}\n```"


def machine() -> str:
    server = subprocess.run(
        [find_redis_binary(), "--version"],
        check=False,
        capture_output=True,
        text=True,
    ).stdout.split()
    version = next((w[2:] for w in server if w.startswith("v=")), "?")
    return (
        f"{os.cpu_count()} cores, {platform.platform()}, Python "
        f"{platform.python_version()}, Scrapy {scrapy.__version__}, redis-server "
        f"{version}, redis-py {redis.__version__}, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke-test sizes")
    parser.add_argument("--repeats", type=int, help="runs per crawler")
    parser.add_argument(
        "--only",
        default="unthrottled,polite,memory,micro",
        help="comma list of: unthrottled, polite, shared-ip (the shared-IP web "
        "alone; polite includes it), memory, micro",
    )
    parser.add_argument(
        "--web",
        help="unthrottled web as HOSTSxPAGES (e.g. 20x50, for quick comparisons)",
    )
    parser.add_argument(
        "--crawlers",
        help="comma list of unthrottled columns to run, e.g. bare,webcrawl-1",
    )
    parser.add_argument("--out", type=Path, default=OUT, help="Markdown copy")
    parser.add_argument("--keep", action="store_true", help="keep crawl logs")
    args = parser.parse_args(argv)
    size = QUICK if args.quick else FULL
    if args.web:
        hosts, pages = (int(n) for n in args.web.lower().split("x"))
        size = replace(
            size, unthrottled=SiteSpec(seed=1, hosts=hosts, pages_per_host=pages)
        )
    if args.crawlers:
        names = {n.strip() for n in args.crawlers.split(",")}
        size = replace(
            size,
            unthrottled_crawlers=[
                c
                for c in UNTHROTTLED
                if c.kind in names or f"{c.kind}-{c.workers}" in names
            ],
        )
    repeats = args.repeats or size.repeats
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    started = time.monotonic()
    sections = [
        "## bench run\n\n`python -m bench.run " + " ".join(argv or sys.argv[1:]) + "`",
        "Machine: " + machine(),
    ]
    print("\n\n".join(sections), flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    try:
        scenarios_run = scenarios(size, only)
        for sc in scenarios_run:
            # Crawlers take turns within each repeat, so slow drift of the
            # machine's load spreads over all of them.
            for rep in range(repeats):
                for c in sc.crawlers:
                    where = work / sc.name / f"{c.kind}-{c.workers}-{rep}"
                    res = crawl(c, sc.run, where)
                    sc.results.setdefault(c, []).append(res)
                    print(
                        f"  {sc.name} {c.label} run {rep + 1}: {res.pages} pages, "
                        f"{res.pages_per_s:.1f}/s, cpu {res.cpu_s:.1f}s"
                        + (f", ERROR {res.error}" if res.error else ""),
                        file=sys.stderr,
                        flush=True,
                    )
            sections.append(scenario_table(sc))
            print("\n" + sections[-1], flush=True)
        goals = goals_table(scenarios_run)
        if goals is not None:
            sections.append(goals)
            print("\n" + sections[-1], flush=True)
        if "memory" in only:
            out = measure(size.memory_n, size.crawl_pages)
            sections.append(memory_table(size.memory_n, out))
            print("\n" + sections[-1], flush=True)
        if "micro" in only:
            for module, margs in (
                ("bench.bloom", size.bloom_args),
                ("bench.pipeline", size.pipeline_args),
                # Continuous crawling: freshness of the revisit policies and
                # the schedule's Redis bytes per URL, both schedules (~2 min).
                ("bench.freshness", ["--memory", "100000"]),
                # A fleet on a local 3-master Redis Cluster: per-master work
                # and the ceiling table (~2 minutes; full runs only).
                ("bench.cluster", None if args.quick else ["--timeout", "120"]),
            ):
                if margs is None:
                    continue
                sections.append(micro(module, margs, 300))
                print("\n" + sections[-1], flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    sections.append(f"Total: {time.monotonic() - started:.0f} s.")
    print("\n" + sections[-1])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n\n".join(sections) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
