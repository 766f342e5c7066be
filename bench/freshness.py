"""Freshness and age of a continuous crawl: adaptive against uniform revisits.

``python -m bench.freshness [--pages N] [--budget B] [--seed S]``

A simulation, driven by the real policy functions of :mod:`extensions.recrawl`
(:func:`~extensions.recrawl.adaptive_interval`, the default, and
:func:`~extensions.recrawl.uniform_interval`) over the sandbox's own change
model (:class:`sandbox.changes.ChangeModel`: a seeded Poisson process per
page; half the pages never change, a quarter change every ``period`` on
average, a quarter every ``10 * period``). What is compared is the policy, so
the crawler is reduced to what constrains a policy: a fetch budget. One
fetcher serves ``B`` fetches per time unit in order of due time (a page due
while the fetcher is busy waits); each fetch sees the page's version at that
moment, tells the policy whether it changed (a 304 when not), and the policy
sets the next visit. Real crawls of this web run in seconds per change
(``tests/test_recrawl_e2e.py``); the simulation covers ~40 revisits per page
in under a second of CPU, which a real crawl could only do in hours.

Both policies get the same budget: uniform revisits every page every
``pages / budget`` (exactly the budget); adaptive starts there
(``RECRAWL_DEFAULT_INTERVAL``), within ``[default / 8, default * 8]``, and may
use less than the budget, never more (the fetcher is the bound).

Measured over the second half of the run (after the adaptive intervals have
settled), time-averaged over pages:

* freshness: the share of pages whose stored copy equals the live page
  (Cho and Garcia-Molina's F);
* age: how long, on average, the stored copy has been out of date (0 while
  fresh; their A), in time units (one unit: a fast page's mean change gap).
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import math
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from extensions.recrawl import Bounds, Visit, adaptive_interval, uniform_interval
from sandbox.changes import ChangeModel
from sandbox.site import SiteSpec

if TYPE_CHECKING:
    from collections.abc import Callable

# Hosts x pages of the simulated web (the sandbox's layout and paths).
HOSTS = 20
# The change model's period: the time unit of the results.
PERIOD = 1.0
# Revisits per page (at the uniform interval) the run lasts.
ROUNDS = 40
# Adaptive bounds around the uniform interval: [u / SPREAD, u * SPREAD].
SPREAD = 8.0


@dataclass
class Result:
    policy: str
    freshness: float
    age: float
    fetches: int
    budget: int
    changed_share: float


@dataclass
class Web:
    """The simulated web: its pages' change times and true rates."""

    urls: list[tuple[int, str]]
    rates: list[float]
    times: list[list[float]]
    uniform: float  # the interval that spends the budget exactly
    horizon: float


def build_web(pages: int, budget: float, seed: int) -> Web:
    spec = SiteSpec(seed=seed, hosts=HOSTS, pages_per_host=max(1, pages // HOSTS))
    model = ChangeModel(seed, PERIOD, 0.0)
    urls = [(i, spec.page_path(i, k)) for i in range(HOSTS)
            for k in range(spec.pages_on(i))]  # fmt: skip
    uniform = len(urls) / budget
    horizon = ROUNDS * uniform
    until = horizon + uniform * SPREAD * 4
    return Web(
        urls,
        [model.rate(i, p) for i, p in urls],
        [model.change_times(i, p, until) for i, p in urls],
        uniform,
        horizon,
    )


def policy_runner(
    policy: Callable[[Visit, Bounds], float], bounds: Bounds
) -> Callable[[int, Visit], float]:
    return lambda j, visit: bounds.clamp(float(policy(visit, bounds)))


def oracle_intervals(web: Web, budget: float, bounds: Bounds) -> list[float]:
    """Cho and Garcia-Molina's optimal revisit frequencies for the true
    change rates (what no crawler knows): maximise the summed freshness
    ``f / l * (1 - exp(-l / f))`` under ``sum(f) = budget``, by Lagrange
    (bisection on the multiplier), within the same bounds."""
    fmin, fmax = 1 / bounds.max, 1 / bounds.min
    grid = [fmin * (fmax / fmin) ** (k / 199) for k in range(200)]

    def best(rate: float, mu: float) -> float:
        if rate == 0:
            return fmin
        return max(grid, key=lambda f: f / rate * -math.expm1(-rate / f) - mu * f)

    lo, hi = 1e-9, 1e3
    freqs: dict[float, float] = {}
    for _ in range(40):
        mu = math.sqrt(lo * hi)
        freqs = {r: best(r, mu) for r in set(web.rates)}
        if sum(freqs[r] for r in web.rates) > budget:
            lo = mu
        else:
            hi = mu
    return [1 / freqs[r] for r in web.rates]


def simulate(
    interval_of: Callable[[int, Visit], float],
    name: str,
    web: Web,
    budget: float,
) -> Result:
    """Run a policy over the change model; see the module docstring."""
    urls, times, uniform, horizon = web.urls, web.times, web.uniform, web.horizon
    start = horizon / 2  # measure after the intervals settled
    n = len(urls)
    # The first crawl: every page fetched once, spread over one round.
    due = [(uniform * j / n, j) for j in range(n)]
    heapq.heapify(due)
    interval: list[float | None] = [None] * n
    stored = [0] * n  # the version each stored copy is
    last_fetch = [0.0] * n
    fresh_time = 0.0
    age_time = 0.0
    fetches = counted = changed = 0
    free = 0.0
    gap = 1.0 / budget

    def account(j: int, t0: float, t1: float) -> tuple[float, float]:
        """Fresh time and integrated age of page j between fetches t0, t1,
        clipped to the measured window."""
        k = bisect.bisect_right(times[j], t0)
        first_change = times[j][k] if k < len(times[j]) else float("inf")
        lo, hi = max(t0, start), min(t1, horizon)
        if hi <= lo:
            return 0.0, 0.0
        fresh = max(0.0, min(hi, first_change) - lo)
        stale_from = max(lo, first_change)
        age = 0.0
        if stale_from < hi:
            # age(t) = t - first_change over [stale_from, hi]
            a0, a1 = stale_from - first_change, hi - first_change
            age = (a1 * a1 - a0 * a0) / 2
        return fresh, age

    while due:
        t, j = heapq.heappop(due)
        t = max(t, free)
        if t >= horizon:
            f, a = account(j, last_fetch[j], horizon)
            fresh_time += f
            age_time += a
            continue
        free = t + gap
        version = bisect.bisect_right(times[j], t)
        if interval[j] is not None:
            f, a = account(j, last_fetch[j], t)
            fresh_time += f
            age_time += a
        was_changed = None if interval[j] is None else version != stored[j]
        if t >= start:
            counted += 1
            changed += bool(was_changed)
        fetches += 1
        status = 304 if was_changed is False else 200
        visit = Visit(interval[j], was_changed, status)
        next_interval = interval_of(j, visit)
        interval[j] = next_interval
        stored[j] = version
        last_fetch[j] = t
        heapq.heappush(due, (t + next_interval, j))
    window = (horizon - start) * n
    return Result(
        name,
        round(fresh_time / window, 4),
        round(age_time / window, 4),
        counted,
        int(budget * (horizon - start)),
        round(changed / max(1, counted), 3),
    )


def schedule_memory(n: int) -> dict[str, float]:
    """Redis bytes per URL of the recrawl schedule (``MEMORY USAGE ...
    SAMPLES 0`` of its ZSET and HASH) holding ``n`` sandbox-like URLs, each
    with an ETag, a Last-Modified date and a content hash (as kept)."""
    import asyncio
    import hashlib
    import tempfile

    import redis.asyncio as aredis

    from extensions.embedded_redis import RedisProcess
    from extensions.recrawl import HASH_CHARS, Record, RecrawlSchedule

    spec = SiteSpec(seed=1, hosts=100, pages_per_host=max(1, n // 100))
    urls = [spec.url(i, spec.page_path(i, k), 8080) for i in range(spec.hosts)
            for k in range(spec.pages_on(i))][:n]  # fmt: skip

    def sha(url: str) -> str:
        # What the extension keeps of a page's SHA-256 (extensions.recrawl).
        return hashlib.sha256(url.encode()).hexdigest()[:HASH_CHARS]

    def etag(url: str) -> str:
        return '"' + hashlib.blake2b(url.encode(), digest_size=8).hexdigest() + '"'

    async def fill(url: str) -> dict[str, float]:
        client = aredis.Redis.from_url(url)
        schedule = RecrawlSchedule(client, "web")
        date = "Mon, 01 Jan 2024 00:00:00 GMT"
        for i in range(0, len(urls), 1000):
            await schedule.schedule(
                (u, Record(86400.0, etag(u), date, sha(u))) for u in urls[i : i + 1000]
            )
        keys = schedule.keys
        zset = await client.memory_usage(keys.recrawl, samples=0) or 0
        data = await client.memory_usage(keys.recrawl_data, samples=0) or 0
        await client.aclose()
        count = len(urls)
        return {"urls": count, "zset_bytes_per_url": round(zset / count, 1),
                "hash_bytes_per_url": round(data / count, 1),
                "bytes_per_url": round((zset + data) / count, 1),
                "url_length": round(sum(map(len, urls)) / count, 1)}  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        server = RedisProcess(tmp, appendonly=False).start()
        try:
            return asyncio.run(fill(server.url))
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=str(__doc__).splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument(
        "--budget", type=float, default=500.0,
        help="fetches per time unit (default: every page every 4 units)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--memory", type=int, default=0, metavar="N",
        help="also measure the schedule's Redis bytes per URL over N URLs",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    web = build_web(args.pages, args.budget, args.seed)
    u = web.uniform
    bounds = Bounds(u / SPREAD, u, u * SPREAD)
    results = [
        simulate(policy_runner(uniform_interval, bounds), "uniform", web, args.budget)
    ]
    # The adaptive policy at the same budget: its bounds scaled until it
    # spends the budget (RECRAWL_* set for the fleet's capacity); the best
    # freshness among the scales that do not exceed it.
    tried = []
    for scale in (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0):
        b = Bounds(bounds.min * scale, bounds.default * scale, bounds.max * scale)
        r = simulate(policy_runner(adaptive_interval, b), "adaptive", web, args.budget)
        r.policy = f"adaptive x{scale:g}"
        tried.append(r)
    results.append(max(tried, key=lambda r: r.freshness))
    oracle = oracle_intervals(web, args.budget, bounds)
    results.append(simulate(lambda j, v: oracle[j], "optimal", web, args.budget))
    ratio = results[1].freshness / results[0].freshness
    ceiling = results[2].freshness / results[0].freshness
    memory = schedule_memory(args.memory) if args.memory else None
    if args.json:
        out = {"results": [asdict(r) for r in results], "ratio": ratio,
               "ceiling": ceiling, "memory": memory}  # fmt: skip
        print(json.dumps(out))
        return 0
    print(f"{'policy':14} {'freshness':>9} {'age':>7} {'fetches':>8} {'budget':>8} "
          f"{'changed':>8}")  # fmt: skip
    for r in results:
        print(f"{r.policy:14} {r.freshness:9.3f} {r.age:7.3f} {r.fetches:8d} "
              f"{r.budget:8d} {r.changed_share:8.3f}")  # fmt: skip
    print(f"adaptive / uniform freshness: {ratio:.2f}x; "
          f"optimal (true rates) / uniform: {ceiling:.2f}x "
          f"({time.perf_counter() - began:.1f} s)")  # fmt: skip
    if memory is not None:
        print(f"schedule memory: {memory['bytes_per_url']} B per URL "
              f"(ZSET {memory['zset_bytes_per_url']}, HASH "
              f"{memory['hash_bytes_per_url']}; {memory['urls']:,} URLs of "
              f"{memory['url_length']} chars)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
