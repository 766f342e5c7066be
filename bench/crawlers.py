"""Run one crawler over the sandbox web and measure it (used by :mod:`bench.run`).

Four crawlers, each as real ``scrapy`` subprocesses, on the same sandbox web,
seeds, concurrency and delay:

* ``bare``: bare Scrapy, the ``scrapy`` crawler below with no item pipeline:
  the floor every Scrapy crawler pays (fetch, parse, follow links);
* ``scrapy``: stock Scrapy, ``scrapy runspider bench/spiders/stock.py`` with
  the memory scheduler (``DownloaderAwarePriorityQueue`` when the web has
  more than one host), Scrapy's ``RobotsTxtMiddleware``, no Redis;
* ``scrapy-redis``: the same spider under scrapy-redis 0.9.1's Scheduler,
  PriorityQueue and RFPDupeFilter (workarounds in ``bench/README.md``);
* ``webcrawl``: ``scrapy crawl web`` workers of this project (everything on:
  Redis frontier, Bloom dupefilter, robots/lock/back-off middlewares, batching
  store with the near-duplicate index), seeded with ``redis-cli lpush``.

All but ``bare`` write pages through the same ``pipelines.storage.StoragePipeline``
into SQLite (the stock crawlers without its near-duplicate index, which needs
Redis). What is measured, and where from:

* pages and timing from the sandbox's own request record (``t_ms`` at arrival),
  never from crawler logs: pages/s = page requests / (last - first request);
* CPU (user + sys) and peak RSS of each crawler process from ``os.wait4``;
* Redis from ``INFO`` before and after the crawl on a fresh ``redis-server``
  per run: ``total_commands_processed`` (commands clients sent; one EVALSHA
  is one), the ``INFO commandstats`` calls (also the commands Lua scripts ran),
  ``total_writes_processed`` (reply flushes: one per round trip, a pipeline
  is one) and the server's own CPU (``used_cpu_user + used_cpu_sys``);
* politeness violations: consecutive requests to one host (robots.txt
  included) closer than its delay minus :data:`SLACK_MS`; on a web whose
  hosts share addresses (``SiteSpec.addresses``, crawled with
  ``POLITENESS_KEY=host,ip``), to one address (the record's ``ip``) closer
  than the IP delay, counted apart.

Reads no settings; what each crawler gets is built here and passed with ``-s``.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from extensions.connection.embedded import RedisProcess
from sandbox.process import SandboxProcess
from tests.support.fleet import push_seeds, worker_command, worker_env

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from sandbox.site import SiteSpec

ROOT = Path(__file__).resolve().parent.parent
STOCK_SPIDER = ROOT / "bench" / "spiders" / "stock.py"
STOCK_SETTINGS = "bench.spiders.settings"
# A request up to 15 ms early is clock and scheduling noise, not a violation.
SLACK_MS = 15.0
STORAGE = json.dumps({"pipelines.storage.StoragePipeline": 500})
# One process, memory scheduler, no Redis: with the storage pipeline or not.
STOCK = ("bare", "scrapy")


@dataclass(frozen=True)
class Crawler:
    """One column of the tables: a crawler kind and its number of workers."""

    kind: str  # "bare", "scrapy", "scrapy-redis" or "webcrawl"
    workers: int = 1

    @property
    def label(self) -> str:
        """>>> Crawler("bare").label, Crawler("webcrawl", 4).label
        ('bare Scrapy', 'webcrawl x4')
        """
        names = {
            "bare": "bare Scrapy",
            "scrapy": "stock Scrapy",
            "scrapy-redis": "scrapy-redis",
        }
        name = names.get(self.kind, self.kind)
        return name if self.kind in STOCK else f"{name} x{self.workers}"

    @property
    def uses_redis(self) -> bool:
        return self.kind not in STOCK


@dataclass
class RunResult:
    """What one crawl of one crawler measured."""

    crawler: Crawler
    pages: int = 0  # page requests the sandbox served (robots.txt excluded)
    requests: int = 0  # all requests, robots.txt included
    fetch_s: float = 0.0  # first to last request the sandbox saw
    wall_s: float = 0.0  # first worker start to last worker exit
    cpu_s: float = 0.0  # user + sys, summed over the crawler's processes
    peak_rss_kib: int = 0  # largest ru_maxrss of one process
    exit_codes: list[int] = field(default_factory=list)
    redis: dict[str, float] = field(default_factory=dict)
    violations: int = 0
    ip_violations: int = 0  # per address, on a web with shared addresses
    bound_s: float = 0.0  # politeness bound, see politeness_bound()
    missing: int = 0  # reachable pages not fetched
    error: str | None = None

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.fetch_s if self.fetch_s > 0 else 0.0


@dataclass
class Run:
    """A crawl to make: the web, the per-crawl settings and the time limit."""

    spec: SiteSpec
    delay: float = 0.0
    concurrency: int = 32
    per_host: int = 8
    timeout: float = 300.0
    idle_close: float = 3.0
    # Seconds between two requests to one address (POLITENESS_KEY names ip;
    # 0: no per-address politeness, the web's addresses not judged).
    ip_delay: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)
    # (process number, command) -> command: e.g. a profiler (bench.profile)
    wrap: Callable[[int, list[str]], list[str]] | None = None


def host_delays(spec: SiteSpec, delay: float) -> dict[str, float]:
    """Seconds between two requests to each host: DOWNLOAD_DELAY or Crawl-delay.

    >>> from sandbox.site import SiteSpec
    >>> host_delays(SiteSpec(hosts=2, crawl_delay_hosts={1: 2.0}), 0.5)
    {'site-000.sandbox.test': 0.5, 'site-001.sandbox.test': 2.0}
    """
    return {
        spec.host_name(i): max(delay, spec.crawl_delay(i) or 0.0)
        for i in range(spec.hosts)
    }


def expected_requests(spec: SiteSpec, port: int) -> dict[str, int]:
    """Requests a polite full crawl makes per host: allowed reachable pages
    plus one robots.txt."""
    counts: dict[str, int] = defaultdict(int)
    for url in spec.reachable_urls(port, True):
        counts[url.split("/")[2].split(":")[0]] += 1
    return {host: n + 1 for host, n in counts.items()}


def address_requests(spec: SiteSpec, requests: Mapping[str, int]) -> dict[str, int]:
    """Requests per address (``SiteSpec.addresses``) from requests per host.

    >>> from sandbox.site import SiteSpec
    >>> spec = SiteSpec(hosts=3, addresses={0: "127.0.1.1", 1: "127.0.1.1"})
    >>> address_requests(spec, {"site-000.sandbox.test": 3,
    ...                         "site-001.sandbox.test": 2, "site-002.sandbox.test": 4})
    {'127.0.1.1': 5, '127.0.0.1': 4}
    """
    out: dict[str, int] = defaultdict(int)
    for host, n in requests.items():
        out[spec.address(spec.host_index(host) or 0)] += n
    return dict(out)


def politeness_bound(requests: Mapping[str, int], delays: Mapping[str, float]) -> float:
    """Shortest time from first to last request for a crawler that waits
    ``delays[h]`` between two requests to host ``h``: max of (n_h - 1) d_h.

    >>> politeness_bound({"a": 11, "b": 3}, {"a": 0.25, "b": 1.0})
    2.5
    """
    return max(((n - 1) * delays.get(h, 0.0) for h, n in requests.items()), default=0)


def violations(
    records: Iterable[Mapping[str, Any]],
    delays: Mapping[str, float],
    slack_ms: float = SLACK_MS,
) -> int:
    """Consecutive requests to one host closer than its delay minus the slack.

    >>> recs = [{"host": "a", "t_ms": t} for t in (0, 250, 400, 700)]
    >>> violations(recs, {"a": 0.25})
    1
    """
    times: dict[str, list[float]] = defaultdict(list)
    for r in records:
        times[r["host"]].append(float(r["t_ms"]))
    count = 0
    for host, ts in times.items():
        limit = delays.get(host, 0.0) * 1000 - slack_ms
        if limit <= 0:
            continue
        ts.sort()
        count += sum(1 for a, b in itertools.pairwise(ts) if b - a < limit)
    return count


def redis_counters(client: redis.Redis) -> dict[str, float]:
    """The server-wide counters a crawl's Redis cost is computed from."""
    stats = client.info("stats")
    cpu = client.info("cpu")
    calls = sum(
        int(v["calls"])
        for k, v in client.info("commandstats").items()
        if isinstance(v, dict)
    )
    return {
        "commands": float(stats["total_commands_processed"]),
        "calls": float(calls),
        "round_trips": float(stats.get("total_writes_processed", 0)),
        "cpu_s": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
    }


def _settings_args(settings: Mapping[str, object]) -> list[str]:
    args: list[str] = []
    for name, value in settings.items():
        args += ["-s", f"{name}={value}"]
    return args


def _commands(
    crawler: Crawler, run: Run, work: Path, redis_url: str, seeds: Path
) -> tuple[list[list[str]], dict[str, str]]:
    common: dict[str, object] = {
        "CONCURRENT_REQUESTS": run.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": run.per_host,
        "DOWNLOAD_DELAY": run.delay,
        "WEBCRAWL_HOME": work / "home",
        "LOG_LEVEL": "INFO",
        "LOGSTATS_INTERVAL": 10,
        **run.extra,
    }
    if crawler.kind == "webcrawl":
        settings = {
            **common,
            "REDIS_URL": redis_url,
            "MAX_IDLE_TIME_BEFORE_CLOSE": run.idle_close,
            "SEED_POLL_INTERVAL": 0.5,
            "WEB_ALLOWED_DOMAINS": "sandbox.test",
            # The sandbox web is on loopback: lift the SSRF guard.
            "ALLOW_PRIVATE_ADDRESSES": True,
        }
        if run.spec.addresses:  # the resolver gives each host its address
            settings["SANDBOX_ADDRESSES"] = run.spec.address_setting()
        if run.ip_delay:
            settings["IP_DOWNLOAD_DELAY"] = run.ip_delay
        cmd = worker_command(settings)
        return [cmd] * crawler.workers, worker_env()
    env = worker_env({"SCRAPY_SETTINGS_MODULE": STOCK_SETTINGS})
    settings = dict(common)
    if crawler.kind != "bare":  # bare: items go nowhere
        settings.update(ITEM_PIPELINES=STORAGE, NEARDUP_ENABLED=False)
    spider_args = ["-a", f"seeds={seeds}", "-a", "allowed_domains=sandbox.test"]
    if crawler.kind in STOCK:
        if run.spec.hosts > 1:
            settings["SCHEDULER_PRIORITY_QUEUE"] = (
                "scrapy.pqueues.DownloaderAwarePriorityQueue"
            )
    else:
        settings.update(
            {
                "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
                "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue",
                "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
                "REDIS_URL": redis_url,
                # Not persisting, the first worker to close deletes the queue
                # and the dupefilter the other workers still use.
                "SCHEDULER_PERSIST": True,
            }
        )
        spider_args += ["-a", f"idle_close={run.idle_close}"]
    cmd = [
        sys.executable,
        "-m",
        "scrapy",
        "runspider",
        str(STOCK_SPIDER),
        *spider_args,
        *_settings_args(settings),
    ]
    return [cmd] * crawler.workers, env


def _wait(
    procs: list[subprocess.Popen[bytes]], deadline: float
) -> tuple[list[int], float, int]:
    """Reap every process with ``os.wait4``; kill those past ``deadline``.

    Returns (exit codes, CPU seconds summed, largest peak RSS in KiB)."""
    codes: dict[int, int] = {}
    cpu = 0.0
    rss = 0
    while len(codes) < len(procs):
        for proc in procs:
            if proc.pid in codes:
                continue
            late = time.monotonic() > deadline
            if late:
                os.killpg(proc.pid, signal.SIGKILL)
            pid, status, usage = os.wait4(proc.pid, 0 if late else os.WNOHANG)
            if pid == 0:
                continue
            code = os.waitstatus_to_exitcode(status)
            proc.returncode = code
            codes[proc.pid] = -9 if late else code
            cpu += usage.ru_utime + usage.ru_stime
            rss = max(rss, usage.ru_maxrss)
        time.sleep(0.05)
    return [codes[p.pid] for p in procs], cpu, rss


def crawl(crawler: Crawler, run: Run, work: Path) -> RunResult:
    """Crawl ``run.spec`` from scratch with ``crawler``; everything started
    here is stopped here, whatever happens."""
    result = RunResult(crawler)
    work.mkdir(parents=True, exist_ok=True)
    server: RedisProcess | None = None
    web = SandboxProcess(run.spec, directory=work, max_seconds=run.timeout + 60)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        web.start()
        seeds = web.seed_urls()
        seed_file = work / "seeds.txt"
        seed_file.write_text("\n".join(seeds) + "\n")
        redis_url = ""
        client: redis.Redis | None = None
        if crawler.uses_redis:
            server = RedisProcess(work / "redis", appendonly=False).start()
            redis_url = server.url
            client = redis.Redis.from_url(redis_url)
            if crawler.kind == "webcrawl":
                push_seeds(redis_url, seeds)
        cmds, env = _commands(crawler, run, work, redis_url, seed_file)
        before = redis_counters(client) if client is not None else {}
        start = time.monotonic()
        if run.wrap is not None:
            cmds = [run.wrap(n, cmd) for n, cmd in enumerate(cmds)]
        for n, cmd in enumerate(cmds):
            with open(work / f"{crawler.kind}-{n}.log", "ab") as log:
                procs.append(
                    subprocess.Popen(
                        cmd,
                        cwd=ROOT,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
        codes, cpu, rss = _wait(procs, start + run.timeout)
        result.wall_s = time.monotonic() - start
        result.exit_codes, result.cpu_s, result.peak_rss_kib = codes, cpu, rss
        if client is not None:
            after = redis_counters(client)
            result.redis = {k: after[k] - before[k] for k in after}
            client.close()
        web.stop()
        records = web.records()
        page_records = [r for r in records if r["path"] != "/robots.txt"]
        result.pages = len(page_records)
        result.requests = len(records)
        if len(records) > 1:
            times = [float(r["t_ms"]) for r in records]
            result.fetch_s = (max(times) - min(times)) / 1000
        delays = host_delays(run.spec, run.delay)
        expected = expected_requests(run.spec, web.port)
        result.bound_s = politeness_bound(expected, delays)
        result.violations = violations(records, delays)
        if run.ip_delay:
            # Per address too: the bound is the larger of the two.
            per_ip = address_requests(run.spec, expected)
            ip_delays = dict.fromkeys(per_ip, run.ip_delay)
            result.bound_s = max(result.bound_s, politeness_bound(per_ip, ip_delays))
            by_ip = [{"host": r["ip"], "t_ms": r["t_ms"]} for r in records]
            result.ip_violations = violations(by_ip, ip_delays)
        fetched = {(r["host"], r["path"]) for r in page_records}
        result.missing = sum(
            1
            for url in run.spec.reachable_urls(web.port, True)
            if (url.split("/")[2].split(":")[0], "/" + url.split("/", 3)[3])
            not in fetched
        )
        if any(codes):
            result.error = f"exit codes {codes}, logs in {work}"
    except Exception as exc:  # one failed run must not lose the others
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        for proc in procs:
            if proc.poll() is None and proc.returncode is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                except ProcessLookupError:
                    pass
        web.stop()
        if server is not None:
            server.stop()
    return result
