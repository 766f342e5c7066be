"""Where a crawler's CPU goes per page: ``python -m bench.profile``.

Runs one crawler of :mod:`bench.crawlers` over the unthrottled sandbox web
under the sampling profiler py-spy (``pip install py-spy``, a dev
requirement), then splits the samples into the components of a page's path
through the worker. A sample counts for the innermost frame of this project's
code on its stack (so Scrapy's ``request_from_dict`` called by our scheduler
is scheduler time, lxml called by the spider is spider time); a stack with no
frame of ours is Scrapy core (engine, downloader, HTTP, Twisted, asyncio).
Only samples of the thread holding the GIL count (``py-spy --gil``: its idle
detection does not work in this VM; a thread blocked on a lock or a queue was
sampled as running), so the shares are of the interpreter's CPU (C code that
releases the GIL, zlib and SQLite, is undercounted), and ``ms CPU / page``
is the share times the worker's CPU seconds (``os.wait4``) over the pages
the sandbox served in a second crawl of the same web without the profiler.

Sampling slows the worker a little (py-spy stops it to read each stack, at
``--rate`` Hz); compare shares, and take pages/s from ``python -m bench.run``.

Reads no settings (command-line options only).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from bench.crawlers import Crawler, Run, crawl
from bench.run import COMMON
from sandbox.site import SiteSpec

if TYPE_CHECKING:
    from collections.abc import Iterable

ROOT = Path(__file__).resolve().parent.parent

# Project file (relative to the repository root) -> component. Order matters
# only for the prefixes (first match wins).
COMPONENTS: list[tuple[str, str | None]] = [
    ("extensions/downloadermiddlewares/robotstxt.py", "mw: robots"),
    ("extensions/downloadermiddlewares/politeness.py", "mw: politeness/lock"),
    ("extensions/connection/locks.py", "mw: politeness/lock"),
    ("extensions/core/frontier/hostrecord.py", "mw: politeness/lock"),
    ("extensions/downloadermiddlewares/ssrf.py", "mw: addresses/SSRF"),
    ("extensions/downloadermiddlewares/backoff.py", "mw: backoff"),
    ("extensions/utils/failures.py", "mw: backoff"),
    ("extensions/downloadermiddlewares/charsets.py", "mw: charsets"),
    ("extensions/spidermiddlewares/traps.py", "spider mw: traps"),
    ("webcrawl/spiders/", "spider (parse, links)"),
    ("bench/spiders/", "spider (parse, links)"),
    ("pipelines/processing.py", "pipeline: prepare_page"),
    ("pipelines/batching.py", "pipeline: prepare_page"),
    ("pipelines/dedup.py", "pipeline: near-dup index"),
    ("pipelines/", "pipeline: store, batching"),
    ("extensions/extensions/metrics.py", "stats/metrics"),
    ("extensions/extensions/fleetstats.py", "stats/metrics"),
    ("extensions/", "scheduler (frontier, dupefilter, Redis)"),
    ("webcrawl/commands/", None),  # the entry point: on every stack
    ("webcrawl/", "webcrawl other"),
]
CORE = "Scrapy core, Twisted, asyncio"
# Leaves py-spy samples as running though the thread waits: an idle worker
# of asyncio.to_thread's pool blocked on its queue, the reactor in epoll.
IDLE = ("_worker (concurrent/futures/thread.py:81)", "EpollSelector.select (")
_FRAME = re.compile(r"\((?P<file>[^():]+):\d+\)$")


def component(path: str) -> str | None:
    """The component of a frame's file, or None outside this project.

    >>> component(str(ROOT / "extensions/downloadermiddlewares/robotstxt.py"))
    'mw: robots'
    >>> component("pipelines/dedup.py")  # py-spy names files by sys.path entry
    'pipeline: near-dup index'
    >>> component("/usr/lib/python3/site-packages/scrapy/core/engine.py") is None
    True
    """
    try:
        rel = (ROOT / path).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    if rel.startswith(".venv/"):
        return None
    for prefix, name in COMPONENTS:
        if rel.startswith(prefix):
            return name
    return None


def split(raw_lines: Iterable[str]) -> tuple[Counter[str], Counter[str]]:
    """Samples per component and, for each, per library at the stack's leaf.

    A line of py-spy's raw format is ``frame;frame;...;leaf COUNT``, each frame
    ``function (file:line)``.
    """
    per_component: Counter[str] = Counter()
    per_leaf: Counter[str] = Counter()
    cache: dict[str, str | None] = {}
    for line in raw_lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        if frames[-1].startswith(IDLE):
            continue
        name = CORE
        for frame in reversed(frames):
            m = _FRAME.search(frame)
            if m is None:
                continue
            f = m.group("file")
            if f not in cache:
                cache[f] = component(f)
            if cache[f] is not None:
                name = cache[f]  # type: ignore[assignment]
                break
        per_component[name] += int(count)
        leaf = _FRAME.search(frames[-1])
        lib = _library(leaf.group("file")) if leaf else "?"
        per_leaf[f"{name} | {lib}"] += int(count)
    return per_component, per_leaf


def _library(path: str) -> str:
    """A short name for where a leaf frame's file lives: its top package.

    >>> _library("redis/asyncio/client.py"), _library("json/encoder.py")
    ('redis', 'json')
    >>> _library("pipelines/processing.py"), _library("<frozen runpy>")
    ('ours', '<frozen runpy>')
    """
    if component(path) is not None:
        return "ours"
    return Path(path).parts[0].removesuffix(".py") if path else "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile", description=__doc__
    )
    parser.add_argument("--crawler", default="webcrawl", help="bare, scrapy, webcrawl")
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--pages", type=int, default=50, help="pages per host")
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--leaves", type=int, default=25, help="top leaf rows")
    parser.add_argument("--raw", type=Path, help="keep py-spy's raw samples here")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    work = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    raw = [work / f"spy-{n}.txt" for n in range(1)]

    def wrap(n: int, cmd: list[str]) -> list[str]:
        out = ["-o", str(raw[n])]
        rate = ["-r", str(args.rate)]
        return [spy, "record", "--gil", "-f", "raw", *rate, *out, "--", *cmd]

    spec = SiteSpec(seed=1, hosts=args.hosts, pages_per_host=args.pages)
    run = Run(spec, timeout=300, idle_close=2.0, extra=dict(COMMON), wrap=wrap)
    try:
        # CPU per page from a run without the profiler, shares from one with.
        plain = crawl(Crawler(args.crawler), replace(run, wrap=None), work / "plain")
        res = crawl(Crawler(args.crawler), run, work / "crawl")
        for r in (plain, res):
            if r.error:
                print("ERROR", r.error, file=sys.stderr)
                return 1
        lines = raw[0].read_text().splitlines()
        if args.raw is not None:
            shutil.copy(raw[0], args.raw)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per_component, per_leaf = split(lines)
    total = sum(per_component.values()) or 1
    ms_page = 1000 * plain.cpu_s / max(plain.pages, 1)
    print(
        f"{args.crawler}: {plain.pages} pages, {plain.pages_per_s:.1f}/s, "
        f"CPU {plain.cpu_s:.1f} s = {ms_page:.2f} ms/page; under py-spy "
        f"{res.pages_per_s:.1f}/s, {total} samples\n"
    )
    print("| component | share of CPU | ms CPU / page |\n|---|---|---|")
    for name, n in per_component.most_common():
        print(f"| {name} | {100 * n / total:.1f}% | {ms_page * n / total:.2f} |")
    print("\n| component | leaf library | share |\n|---|---|---|")
    for key, n in per_leaf.most_common(args.leaves):
        name, lib = key.split(" | ")
        print(f"| {name} | {lib} | {100 * n / total:.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
