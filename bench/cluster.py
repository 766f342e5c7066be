"""A fleet against a local 3-master Redis Cluster: per-master work, and the
ceiling it implies (``python -m bench.cluster``; ``make bench`` runs it).

Starts a throw-away cluster on loopback (:class:`tests.support.cluster.LocalCluster`),
then crawls the sandbox web twice with ``--workers`` real ``scrapy crawl web``
workers: once with one frontier partition (``FRONTIER_PARTITIONS=1``: the
frontier is one slot on one master) and once with ``--partitions`` of them
(default 3: their tags are spaced so that each master gets one).
Around each crawl it reads every master's ``INFO`` and reports, per master:
commands processed (``total_commands_processed``), client reads
(``total_reads_processed``: one per request a client sent, a pipeline or a
script call counting once, so it stands for round trips), Redis CPU
(``used_cpu_sys + used_cpu_user``, less the idle rate measured before the
crawl: cluster bus pings and cron), memory and keys.

Per page fetched it derives Redis commands, round trips and CPU; then the
ceiling on paper: one Redis core serves ``1 / cpu_per_page`` pages/s; on M
masters the work spreads by slot, except the frontier of one partition,
which stays on one master. From the one-partition run, the frontier's share
``f`` of the CPU is the frontier master's CPU beyond the mean of the others,
over the total. With P partitions on M masters (P >= M, spread evenly) the
hottest master carries ``f / min(P, M) + (1 - f) / M`` of the work, and the
fleet's ceiling is ``1 / (cpu_per_page * that)`` pages/s. The crawl itself is
politeness-bound on this 2-core machine: the pages/s measured here is not the
ceiling, the CPU per page is what carries over.

Every process is bounded by ``--timeout`` and stopped at the end. Reads no
settings (command-line options only).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from extensions.keys import FrontierKeys
from sandbox.site import SiteSpec
from tests.support.cluster import LocalCluster
from tests.support.localcrawl import crawl_sandbox

IDLE_SECONDS = 3.0


@dataclass
class Sample:
    cpu: float
    commands: int
    reads: int
    used_memory: int
    keys: int
    at: float


def sample(port: int) -> Sample:
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        info = client.info("all")
        keys = int(client.dbsize())
    finally:
        client.close()
    return Sample(
        cpu=float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
        commands=int(info["total_commands_processed"]),
        reads=int(info.get("total_reads_processed", 0)),
        used_memory=int(info["used_memory"]),
        keys=keys,
        at=time.monotonic(),
    )


def snapshot(cluster: LocalCluster) -> dict[int, Sample]:
    return {port: sample(port) for port in cluster.master_ports()}


@dataclass
class MasterRun:
    port: int
    partitions: list[int]
    commands: int
    reads: int
    cpu_s: float
    used_memory: int
    keys: int


@dataclass
class RunResult:
    partitions: int
    pages: int
    seconds: float
    exit_codes: list[int]
    masters: list[MasterRun]

    @property
    def cpu_s(self) -> float:
        return sum(m.cpu_s for m in self.masters)

    def per_page(self, value: float) -> float:
        return value / self.pages if self.pages else float("nan")


def partition_owners(cluster: LocalCluster, partitions: int) -> dict[int, list[int]]:
    """Master port -> the frontier partitions whose slot it holds."""
    client = RedisCluster(host="127.0.0.1", port=cluster.ports[0])
    try:
        owners: dict[int, list[int]] = {}
        for p in range(partitions):
            node = client.get_node_from_key(FrontierKeys("web", p, partitions).ready)
            owners.setdefault(int(node.port), []).append(p)
        return owners
    finally:
        client.close()


def run_once(
    cluster: LocalCluster,
    spec: SiteSpec,
    work: Path,
    workers: int,
    partitions: int,
    delay: float,
    timeout: float,
    idle_cpu_per_s: dict[int, float],
) -> RunResult:
    owners = partition_owners(cluster, partitions)
    before = snapshot(cluster)
    report = crawl_sandbox(
        spec,
        cluster.url,
        work / f"p{partitions}",
        workers=workers,
        settings={"DOWNLOAD_DELAY": delay, "FRONTIER_PARTITIONS": partitions},
        timeout=timeout,
    )
    after = snapshot(cluster)
    masters = []
    for port, b in before.items():
        a = after[port]
        idle = idle_cpu_per_s.get(port, 0.0) * (a.at - b.at)
        masters.append(
            MasterRun(
                port=port,
                partitions=owners.get(port, []),
                commands=a.commands - b.commands,
                reads=a.reads - b.reads,
                cpu_s=max(0.0, a.cpu - b.cpu - idle),
                used_memory=a.used_memory,
                keys=a.keys,
            )
        )
    return RunResult(
        partitions, len(report.page_records), report.seconds, report.exit_codes, masters
    )


def frontier_share(run: RunResult) -> float:
    """The share of Redis CPU that stays on the frontier's master (one
    partition): its CPU beyond the mean of the other masters, over the total."""
    hot = [m for m in run.masters if m.partitions]
    others = [m for m in run.masters if not m.partitions]
    if not hot or not others or run.cpu_s <= 0:
        return float("nan")
    base = sum(m.cpu_s for m in others) / len(others)
    return max(0.0, min(1.0, (hot[0].cpu_s - base) / run.cpu_s))


def ceiling(cpu_per_page: float, share: float, masters: int, partitions: int) -> float:
    """Pages/s the hottest of ``masters`` masters allows, one core each.

    >>> round(ceiling(0.001, 0.5, 1, 1))
    1000
    >>> round(ceiling(0.001, 0.5, 10, 1)), round(ceiling(0.001, 0.5, 10, 10))
    (1818, 10000)
    """
    hottest = share / min(partitions, masters) + (1 - share) / masters
    return 1.0 / (cpu_per_page * hottest)


def render(runs: list[RunResult], command: str, workers: int) -> str:
    lines = [
        "### bench.cluster",
        "",
        f"`{command}`",
        "",
        f"3 masters on loopback, {workers} workers; per master, the crawl's "
        "deltas (idle CPU subtracted):",
        "",
        "| partitions | master | its partitions | commands | round trips "
        "| Redis CPU s | used memory | keys |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        for m in run.masters:
            lines.append(
                f"| {run.partitions} | :{m.port} | "
                f"{','.join(map(str, m.partitions)) or '-'} | {m.commands:,} | "
                f"{m.reads:,} | {m.cpu_s:.2f} | {m.used_memory / 2**20:.2f} MiB | "
                f"{m.keys:,} |"
            )
    lines += [
        "",
        "| partitions | pages | seconds | exit codes | commands/page "
        "| round trips/page | Redis CPU ms/page | pages/s per Redis core |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for run in runs:
        cpp = run.per_page(run.cpu_s)
        lines.append(
            f"| {run.partitions} | {run.pages} | {run.seconds:.1f} | "
            f"{run.exit_codes} | "
            f"{run.per_page(sum(m.commands for m in run.masters)):.1f} | "
            f"{run.per_page(sum(m.reads for m in run.masters)):.1f} | "
            f"{cpp * 1000:.3f} | {1 / cpp if cpp > 0 else float('nan'):,.0f} |"
        )
    one = runs[0]
    cpp = one.per_page(one.cpu_s)
    share = frontier_share(one)
    lines += [
        "",
        f"Ceiling on paper (Redis CPU {cpp * 1000:.3f} ms/page from the "
        f"one-partition run; frontier share f = {share:.2f}): pages/s the "
        "hottest master allows, one Redis core per master.",
        "",
        "| masters | 1 partition | partitions = masters |",
        "|---:|---:|---:|",
    ]
    if cpp > 0 and not math.isnan(share):
        for masters in (1, 3, 10):
            lines.append(
                f"| {masters} | {ceiling(cpp, share, masters, 1):,.0f} | "
                f"{ceiling(cpp, share, masters, masters):,.0f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cluster", description=__doc__
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=30)
    parser.add_argument("--pages-per-host", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--timeout", type=float, default=150.0, help="per crawl")
    args = parser.parse_args(argv)
    spec = SiteSpec(seed=4, hosts=args.hosts, pages_per_host=args.pages_per_host)
    command = "python -m bench.cluster " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        work = Path(tmp)
        with LocalCluster(work / "cluster", masters=3) as cluster:
            first = snapshot(cluster)
            time.sleep(IDLE_SECONDS)
            second = snapshot(cluster)
            idle = {
                port: (second[port].cpu - s.cpu) / (second[port].at - s.at)
                for port, s in first.items()
            }
            runs: list[Any] = [
                run_once(
                    cluster, spec, work, args.workers, p, args.delay, args.timeout, idle
                )
                for p in (1, args.partitions)
            ]
    print(render(runs, command, args.workers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
