"""Freshness and age of a continuous crawl: the revisit policies at one budget.

``python -m bench.freshness [--web measured|classes] [--interval U ...]
[--budget B ...] [--pages N] [--seed S] [--memory N] [--hand-set]
[--ceilings] [--frontier]``

A simulation, driven by the real policy code of :mod:`extensions.extensions.recrawl`
and :mod:`extensions.utils.freshness`
(:func:`~extensions.extensions.recrawl.uniform_interval`,
:func:`~extensions.extensions.recrawl.adaptive_interval` and
:func:`~extensions.extensions.recrawl.budgeted_interval`, the default) over the
sandbox's
own change model (:class:`sandbox.changes.ChangeModel`: a seeded Poisson
process per page). The web (``--web``, fixed before any policy was measured):
``measured`` (the default), the spread of change rates Cho and Garcia-Molina
measured (23 % of pages change at least daily, 30 % not in four months,
rates log-uniform within each class; one time unit is one day), or
``classes``, the sandbox's three classes (half static, a quarter every 10
units, a quarter every unit). The budgets (``--interval``, default 7 and 30):
every page once a week or once a month on average, a fraction of what
keeping the fast pages fresh under uniform would need.

What is compared is the policy, so the crawler is reduced to what
constrains a policy: a fetch budget. One fetcher serves ``B`` fetches per
time unit in order of due time (a page due while the fetcher is busy waits);
each fetch sees the page's version at that moment, tells the policy whether
it changed (a 304 when not) with the page's change history, and the policy
sets the next visit. The default policy runs as the recrawl extension runs
it (:class:`FleetPlanner`: the stored item, :func:`~extensions.extensions.recrawl.
next_visit` with pooled priors, the figures the schedule script keeps, the
price solved from them every window bucket): its price is measured from the
fetcher, and each fetch also carries ``Last-Modified`` (the time of the
page's last change, as the sandbox serves it; "default no LM" without). Real
crawls of the sandbox run in seconds per change (``tests/test_recrawl_e2e.py``,
``tests/test_freshness_e2e.py``); the simulation covers 40 rounds of
revisits in seconds of CPU, which a real crawl could only do in months.

Every policy gets the same budget: uniform revisits every page every
``U = pages / budget`` (exactly the budget); adaptive and the default have
bounds ``[U / 8, 8 U]``; adaptive's are scaled the way an operator would set
them for the fleet's capacity, the best scale reported (``--hand-set`` does
the same with the default policy's price, fixed); the fetcher is the bound,
so none spends more. "optimal" is Cho and Garcia-Molina's allocation for the
*true* rates (no crawler knows them), without bounds: the ceiling of any
policy's freshness; its age is large because it never revisits the pages it
gives up. ``--ceilings`` prints that ceiling in closed form for three web
models and five budgets, ``--frontier`` the closed-form freshness/age
frontier of the measured web (what pairs of gain and age any policy can
reach).

Measured over the second half of the run (after the intervals settled),
time-averaged over pages:

* freshness: the share of pages whose stored copy equals the live page
  (Cho and Garcia-Molina's F);
* age: how long, on average, the stored copy has been out of date (0 while
  fresh; their A), in time units.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import math
import time
from dataclasses import asdict, dataclass, replace
from email.utils import formatdate
from types import SimpleNamespace
from typing import TYPE_CHECKING, Protocol

from extensions.extensions.recrawl import (
    START_PRICE_SHARE,
    WINDOW_BUCKETS,
    Record,
    Visit,
    adaptive_interval,
    budgeted_interval,
    next_visit,
    uniform_interval,
    window_seconds,
)
from extensions.utils.freshness import (
    Bounds,
    Demand,
    History,
    Priors,
    optimal_interval,
    reprice,
    window_of,
)
from sandbox.changes import ChangeModel
from sandbox.site import SiteSpec, host_name

if TYPE_CHECKING:
    from collections.abc import Callable

# Hosts x pages of the simulated web (the sandbox's layout and paths).
HOSTS = 20
# The change model's period: the time unit of the results (one day in the
# measured profile).
PERIOD = 1.0
# Revisits per page (at the uniform interval) the run lasts.
ROUNDS = 40
# Policies' bounds around the uniform interval: [u / SPREAD, u * SPREAD].
SPREAD = 8.0
# Scales tried for a policy's setting (adaptive: its bounds; the default
# policy at a hand-set price: the price as a share of the uniform interval),
# the way an operator would set them for the fleet's capacity; the best that
# stays within the budget is reported.
ADAPTIVE_SCALES = (0.12, 0.18, 0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0)
PRICE_SCALES = (0.07, 0.1, 0.14)
# Seconds per time unit of the simulation (the measured profile's day): the
# default policy runs on HTTP dates and Redis-like milliseconds.
UNIT_S = 86400.0
# The simulated clock's epoch, and the Last-Modified of a page that has not
# changed since the start (long before, as the sandbox's 2024 dates).
EPOCH = 1_800_000_000.0
OLD = EPOCH - 2 * 365 * UNIT_S
# Uniform intervals (units) of the closed-form ceiling table (--ceilings).
CEILING_INTERVALS = (1.0, 7.0, 30.0, 90.0, 365.0)
# Age weights of the closed-form frontier (--frontier): 0 is the freshness
# optimum, 100 close to the age optimum; AGE_WEIGHT (0.004) is the default
# policy's.
FRONTIER_WEIGHTS = (0.0, 0.001, 0.004, 0.01, 0.05, 1.0, 100.0)


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


def gain_share(result: Result, uniform: Result, optimal: Result) -> float:
    """The share of the optimum's freshness gain over uniform a policy
    captures (the issue's measure)."""
    return (result.freshness - uniform.freshness) / (
        optimal.freshness - uniform.freshness
    )


def build_web(
    pages: int, budget: float, seed: int, profile: str = "classes", changes: bool = True
) -> Web:
    """The web's pages and rates, and (``changes``) their change times up to
    the horizon (changes after it are never seen: nothing is measured there)."""
    spec = SiteSpec(seed=seed, hosts=HOSTS, pages_per_host=max(1, pages // HOSTS))
    model = ChangeModel(seed, PERIOD, 0.0, profile)
    urls = [(i, spec.page_path(i, k)) for i in range(HOSTS)
            for k in range(spec.pages_on(i))]  # fmt: skip
    uniform = len(urls) / budget
    horizon = ROUNDS * uniform
    times = [model.change_times(i, p, horizon) if changes else [] for i, p in urls]
    return Web(urls, [model.rate(i, p) for i, p in urls], times, uniform, horizon)


def ceilings(pages: int, seed: int) -> list[tuple[str, float, float, float]]:
    """(profile, uniform interval, uniform F, optimal F) in closed form (no
    simulation): how much any policy can gain over uniform, per web model
    and budget."""
    out = []
    for profile in ("classes", "measured", "loguniform"):
        for u in CEILING_INTERVALS:
            web = build_web(pages, pages / u, seed, profile, changes=False)
            uniform = closed_freshness(web, [web.uniform] * len(web.rates))
            optimal = closed_freshness(web, oracle_intervals(web, pages / u))
            out.append((profile, u, uniform, optimal))
    return out


def closed_age(web: Web, intervals: list[float]) -> float:
    """Cho and Garcia-Molina's closed form of age: a page changing ``l``
    times per unit revisited every ``I`` is on average ``I / 2 - 1 / l + (1
    - e^-lI) / (l^2 I)`` out of date (infinite for a changing page never
    revisited)."""
    total = 0.0
    for rate, interval in zip(web.rates, intervals, strict=True):
        if rate == 0:
            continue
        if math.isinf(interval):
            return math.inf
        x = rate * interval
        total += interval / 2 - 1 / rate - math.expm1(-x) / (rate * x)
    return total / len(web.rates)


def frontier(
    pages: int, seed: int, intervals: tuple[float, ...] = (7.0, 30.0)
) -> list[tuple[float, float, float, float, float, float]]:
    """(uniform interval, age weight, freshness, share of the optimum's gain
    over uniform, age, age over uniform's) in closed form, for the *true*
    rates of the measured web, no bounds: the allocation that maximises
    freshness minus ``weight / price`` x age for the budget
    (:func:`~extensions.utils.freshness.optimal_interval`), from Cho and
    Garcia-Molina's freshness optimum (weight 0) to the age optimum (a large
    weight). No policy does better than this frontier with the same
    budget: it says which pairs of (freshness gain, age) are reachable."""
    out = []
    for u in intervals:
        budget = pages / u
        web = build_web(pages, budget, seed, "measured", changes=False)
        n = len(web.rates)
        uniform_f = closed_freshness(web, [web.uniform] * n)
        uniform_a = closed_age(web, [web.uniform] * n)
        best = closed_freshness(web, oracle_intervals(web, budget))
        for weight in FRONTIER_WEIGHTS:
            chosen = allocate(web, budget, weight)
            f, a = closed_freshness(web, chosen), closed_age(web, chosen)
            gain = (f - uniform_f) / (best - uniform_f)
            out.append((u, weight, f, gain, a, a / uniform_a))
    return out


def allocate(web: Web, budget: float, weight: float) -> list[float]:
    """The true-rate intervals of the freshness-minus-age objective at the
    price that spends ``budget`` (bisection on the price)."""
    lo, hi = web.uniform * 1e-6, web.uniform * 1e3
    intervals: list[float] = []
    for _ in range(60):
        price = math.sqrt(lo * hi)
        intervals = [optimal_interval(r, price, weight) for r in web.rates]
        if sum(1 / i for i in intervals) > budget:
            lo = price
        else:
            hi = price
    return intervals


def oracle_intervals(web: Web, budget: float) -> list[float]:
    """Cho and Garcia-Molina's optimal revisit intervals for the true change
    rates (what no crawler knows), no bounds, freshness only (no age
    weight): :func:`~extensions.utils.freshness.optimal_interval` with
    the price (Lagrange multiplier) that spends the budget exactly, found by
    bisection; static pages and pages beyond the price are never revisited
    (``inf``)."""
    lo, hi = web.uniform * 1e-6, web.uniform * 1e3
    intervals: list[float] = []
    for _ in range(60):
        price = math.sqrt(lo * hi)
        intervals = [optimal_interval(r, price, 0.0) for r in web.rates]
        if sum(1 / i for i in intervals) > budget:
            lo = price
        else:
            hi = price
    return intervals


def closed_freshness(web: Web, intervals: list[float]) -> float:
    """Cho and Garcia-Molina's closed form: a page changing ``l`` times per
    unit revisited every ``I`` is fresh ``(1 - e^-lI) / (lI)`` of the time."""
    total = 0.0
    for rate, interval in zip(web.rates, intervals, strict=True):
        x = rate * interval
        if rate == 0:
            total += 1.0
        elif not math.isinf(x):
            total += -math.expm1(-x) / x
    return total / len(web.rates)


class Planner(Protocol):
    """A revisit policy in the simulation: told each fetch of page ``j``
    (at ``t``, due at ``due``; the page's version then and the time of its
    last change, None for version 0), it returns the next interval."""

    def plan(
        self, j: int, t: float, due: float, version: int, changed_at: float | None
    ) -> float: ...


class PolicyPlanner:
    """A policy function on what a visit sees without dates (changed or not,
    the change history): uniform, adaptive, or budgeted at a fixed price."""

    def __init__(self, policy: Callable[[Visit, Bounds], float], bounds: Bounds,
                 pages: int) -> None:  # fmt: skip
        self.policy, self.bounds = policy, bounds
        self.interval: list[float | None] = [None] * pages
        self.history = [History()] * pages
        self.stored = [0] * pages

    def plan(
        self, j: int, t: float, due: float, version: int, changed_at: float | None
    ) -> float:
        previous = self.interval[j]
        was_changed = None if previous is None else version != self.stored[j]
        if previous is not None:
            # What extensions.extensions.recrawl.next_visit keeps: the interval that
            # led here, not the (possibly later) actual gap.
            self.history[j] = self.history[j].add(previous, was_changed)
        status = 304 if was_changed is False else 200
        h = self.history[j]
        visit = Visit(previous, was_changed, status, history=h, rate=h.rate())
        interval = self.bounds.clamp(float(self.policy(visit, self.bounds)))
        self.interval[j], self.stored[j] = interval, version
        return interval


class OraclePlanner:
    def __init__(self, intervals: list[float]) -> None:
        self.intervals = intervals

    def plan(
        self, j: int, t: float, due: float, version: int, changed_at: float | None
    ) -> float:
        return self.intervals[j]


class FleetPlanner:
    """The default policy as the recrawl extension runs it, with the fleet
    reduced to the fetcher: each fetch becomes the item the spider would
    store (a 304 when the page is unchanged, else a 200 with a new content
    hash and ETag; ``Last-Modified`` the time of the last change, as the
    sandbox serves it, unless ``dates`` is off), :func:`~extensions.extensions.recrawl.
    next_visit` plans it with the worker's pooled priors, the figures the
    schedule script keeps are kept here, and every window bucket the price
    is solved from them (:func:`~extensions.utils.freshness.reprice`), unless
    ``price`` fixes it. Times are units of :data:`UNIT_S` seconds."""

    def __init__(self, web: Web, bounds: Bounds, dates: bool = True,
                 price: float | None = None, share: float = 1.0) -> None:  # fmt: skip
        s = UNIT_S
        self.bounds = Bounds(bounds.min * s, bounds.default * s, bounds.max * s,
                             (price if price is not None else bounds.default
                              * START_PRICE_SHARE) * s)  # fmt: skip
        self.fixed = price is not None
        self.dates, self.share = dates, share
        self.urls = [f"http://{host_name(i)}{path}" for i, path in web.urls]
        self.records: list[Record | None] = [None] * len(web.urls)
        self.due_ms: list[int | None] = [None] * len(web.urls)
        self.priors = Priors()
        self.bins: dict[int, float] = {}
        self.scheduled = 0.0
        self.bucket_ms = int(window_seconds(self.bounds) * 1000 / WINDOW_BUCKETS)
        self.buckets: dict[int, dict[str, float]] = {}
        self.next_price = 0

    def plan(
        self, j: int, t: float, due: float, version: int, changed_at: float | None
    ) -> float:
        now = EPOCH + t * UNIT_S
        now_ms = int(now * 1000)
        if not self.fixed and now_ms >= self.next_price:
            self.next_price = now_ms + self.bucket_ms
            window = window_of(self.buckets, now_ms, self.bucket_ms, WINDOW_BUCKETS)
            solved = reprice(Demand(self.bins), self.scheduled, window, self.share,
                             self.bounds)  # fmt: skip
            if solved is not None:
                self.bounds = replace(self.bounds, price=solved[0])
        prev = self.records[j]
        modified = EPOCH + changed_at * UNIT_S if changed_at is not None else OLD
        headers = {"etag": [f'"{j}-{version}"'], "date": [formatdate(now, usegmt=True)]}
        if self.dates:
            headers["last-modified"] = [formatdate(modified, usegmt=True)]
        unchanged = prev is not None and prev.etag == headers["etag"][0]
        carried = None
        if prev is not None:
            carried = [*prev.fields(), {"due": self.due_ms[j]}]
        item = SimpleNamespace(
            url=self.urls[j], status=304 if unchanged else 200,
            content_hash=None if unchanged else f"{j:08x}{version:08x}",
            headers=headers, fetched_at=now, recrawl=carried, lastmod=None,
        )  # fmt: skip
        plan = next_visit(item, budgeted_interval, self.bounds, now, self.priors)
        assert plan is not None
        if plan.old_bin is not None:
            self.bins[plan.old_bin] -= 1
        new_bin = plan.record.bin
        assert new_bin is not None
        self.bins[new_bin] = self.bins.get(new_bin, 0) + 1
        self.scheduled += plan.scheduled
        bucket = self.buckets.setdefault(now_ms // self.bucket_ms, {})
        counts = [("stored", 1), ("revisits", int(plan.outcome != "first")),
                  ("changed", int(plan.outcome == "changed")),
                  ("not_modified", int(plan.outcome == "not_modified")),
                  ("timed", int(plan.late is not None)),
                  ("late_milli", round((plan.late or 0.0) * 1000))]  # fmt: skip
        for name, count in counts:
            bucket[name] = bucket.get(name, 0) + count
        self.records[j] = plan.record
        self.due_ms[j] = now_ms + int(plan.record.interval * 1000)
        return plan.record.interval / UNIT_S


def simulate(planner: Planner, name: str, web: Web, budget: float) -> Result:
    """Run a policy over the change model; see the module docstring."""
    urls, times, uniform, horizon = web.urls, web.times, web.uniform, web.horizon
    start = horizon / 2  # measure after the intervals settled
    n = len(urls)
    # The first crawl: every page fetched once, spread over one round.
    due = [(uniform * j / n, j) for j in range(n)]
    heapq.heapify(due)
    seen = [False] * n
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
        t_due, j = heapq.heappop(due)
        t = max(t_due, free)
        if t >= horizon:
            f, a = account(j, last_fetch[j], horizon)
            fresh_time += f
            age_time += a
            continue
        free = t + gap
        version = bisect.bisect_right(times[j], t)
        was_changed = None if not seen[j] else version != stored[j]
        if seen[j]:
            f, a = account(j, last_fetch[j], t)
            fresh_time += f
            age_time += a
        if t >= start:
            counted += 1
            changed += bool(was_changed)
        fetches += 1
        changed_at = times[j][version - 1] if version else None
        next_interval = planner.plan(j, t, t_due, version, changed_at)
        seen[j] = True
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


def best_of(
    make: Callable[[float], Planner],
    name: str,
    web: Web,
    budget: float,
    scales: tuple[float, ...],
) -> Result:
    """The policy at each scale of its setting; the freshest run (the
    fetcher never serves more than the budget, so none exceeds it)."""
    tried = []
    for scale in scales:
        r = simulate(make(scale), name, web, budget)
        r.policy = f"{name} x{scale:g}"
        tried.append(r)
    return max(tried, key=lambda r: r.freshness)


def compare(
    web: Web, budget: float, hand_set: bool = False
) -> tuple[list[Result], float]:
    """uniform, adaptive, the default (measured price, with and without
    Last-Modified dates), with ``hand_set`` the default at the best of
    :data:`PRICE_SCALES` fixed prices, and optimal at one budget; and the
    optimum's closed-form freshness (a check on the simulation)."""
    u = web.uniform
    n = len(web.urls)
    bounds = Bounds(u / SPREAD, u, u * SPREAD)
    uniform = simulate(PolicyPlanner(uniform_interval, bounds, n), "uniform", web,
                       budget)  # fmt: skip

    def adaptive(s: float) -> Planner:
        scaled = Bounds(bounds.min * s, bounds.default * s, bounds.max * s)
        return PolicyPlanner(adaptive_interval, scaled, n)

    results = [
        uniform,
        best_of(adaptive, "adaptive", web, budget, ADAPTIVE_SCALES),
        simulate(FleetPlanner(web, bounds), "default", web, budget),
        simulate(FleetPlanner(web, bounds, dates=False), "default no LM", web, budget),
    ]
    if hand_set:
        results.append(best_of(lambda s: FleetPlanner(web, bounds, price=u * s),
                               "hand-set", web, budget, PRICE_SCALES))  # fmt: skip
    oracle = oracle_intervals(web, budget)
    results.append(simulate(OraclePlanner(oracle), "optimal", web, budget))
    return results, closed_freshness(web, oracle)


# The store-side schedule's measurement: next visits spread evenly over a
# week (a mean revisit interval of a week), RECRAWL_WINDOW of an hour.
STORE_SPREAD_S = 7 * 86400
STORE_WINDOW_S = 3600


def schedule_memory(n: int) -> dict[str, float]:
    """Redis bytes per URL of the recrawl schedule (``MEMORY USAGE ...
    SAMPLES 0`` of its ZSET and HASH) holding ``n`` sandbox-like URLs, each
    with an ETag, a Last-Modified date, a content hash (as kept) and a
    change history of a few weeks; then the same URLs with the store-side
    schedule (SQLite page store, next visits spread over
    :data:`STORE_SPREAD_S`, a window of :data:`STORE_WINDOW_S`): Redis bytes
    per known URL after a refill, and the SQLite bytes per URL."""
    import asyncio
    import hashlib
    import sqlite3
    import tempfile
    from pathlib import Path

    import redis.asyncio as aredis

    from extensions.connection.embedded import RedisProcess
    from extensions.extensions.recrawl import HASH_CHARS, Planned, RecrawlSchedule
    from extensions.utils.freshness import rate_bin
    from pipelines.stores.sqlite import SQLiteStore

    spec = SiteSpec(seed=1, hosts=100, pages_per_host=max(1, n // 100))
    urls = [spec.url(i, spec.page_path(i, k), 8080) for i in range(spec.hosts)
            for k in range(spec.pages_on(i))][:n]  # fmt: skip

    def sha(url: str) -> str:
        # What the extension keeps of a page's SHA-256 (extensions.extensions.recrawl).
        return hashlib.sha256(url.encode()).hexdigest()[:HASH_CHARS]

    def etag(url: str) -> str:
        return '"' + hashlib.blake2b(url.encode(), digest_size=8).hexdigest() + '"'

    date = "Mon, 01 Jan 2024 00:00:00 GMT"
    # A history as a page revisited daily for weeks has one: 7 changes dated
    # by Last-Modified, half a day before the visit that saw each.
    history = History(23, 7, 23 * 86400.0 + 0.125, 16.5 * 86400.0 + 0.125, 0)
    bin_ = rate_bin(history.rate())
    records = [(u, Record(86400.0, etag(u), date, sha(u), history, bin_))
               for u in urls]  # fmt: skip
    count = len(urls)

    async def usage(client: aredis.Redis, schedule: RecrawlSchedule, *more: str) -> int:
        keys = schedule.keys
        total = 0
        for key in (keys.recrawl, keys.recrawl_data, *more):
            total += await client.memory_usage(key, samples=0) or 0
        return int(total)

    async def fill(url: str, store: SQLiteStore) -> dict[str, float]:
        client = aredis.Redis.from_url(url)
        schedule = RecrawlSchedule(client, "web")
        now = await schedule.now_ms()
        bucket_ms = 600_000
        for i in range(0, count, 1000):
            planned = [Planned(u, r, delay=r.interval, outcome="unchanged")
                       for u, r in records[i : i + 1000]]  # fmt: skip
            await schedule.schedule(planned, now, bucket_ms)
        keys = schedule.keys
        zset = await client.memory_usage(keys.recrawl, samples=0) or 0
        data = await client.memory_usage(keys.recrawl_data, samples=0) or 0
        # The freshness figures: pages per rate bin and a window bucket,
        # whatever the number of URLs.
        figures = [keys.recrawl_stats, keys.recrawl_window(now // bucket_ms)]
        fixed = await usage(client, schedule, *figures) - zset - data
        await client.delete(keys.recrawl, keys.recrawl_data)
        # Store-side: every next visit in the store, then one refill of the
        # window (what extensions.extensions.recrawl.Recrawler._refill does).
        now = await schedule.now_ms()
        side = store.side
        side.schedule_put([(u, now + STORE_SPREAD_S * 1000 * j // count, r.to_json())
                           for j, (u, r) in enumerate(records)])  # fmt: skip
        until = now + STORE_WINDOW_S * 1000
        while entries := side.schedule_due(until, 1000):
            await schedule.load(entries)
            side.schedule_delete([(u, d) for u, d, _ in entries])
        window = await usage(client, schedule, *figures)
        in_window = int(await client.zcard(keys.recrawl))
        await client.aclose()
        return {"urls": count, "zset_bytes_per_url": round(zset / count, 1),
                "hash_bytes_per_url": round(data / count, 1),
                "bytes_per_url": round((zset + data) / count, 1),
                "figures_bytes": fixed,
                "url_length": round(sum(map(len, urls)) / count, 1),
                "store_side_in_window": in_window,
                "store_side_redis_bytes_per_url": round(window / count, 2)}  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        server = RedisProcess(tmp, appendonly=False).start()
        store = SQLiteStore(Path(tmp) / "pages.sqlite3")
        store.open()
        try:
            out = asyncio.run(fill(server.url, store))
        finally:
            server.stop()
            store.close()
        # The schedule table's share of the file (the other tables are empty).
        db = sqlite3.connect(Path(tmp) / "pages.sqlite3")
        pages, size = (db.execute(f"PRAGMA {p}").fetchone()[0]
                       for p in ("page_count", "page_size"))  # fmt: skip
        db.close()
        out["store_bytes_per_url"] = round(pages * size / count, 1)
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=str(__doc__).splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument(
        "--web", choices=("measured", "classes"), default="measured",
        help="the change profile (sandbox.changes): measured-like rates "
        "(the default) or the sandbox's three classes",
    )  # fmt: skip
    parser.add_argument(
        "--interval", type=float, action="append", metavar="U",
        help="budget as the uniform revisit interval in units (budget = "
        "pages / U); repeat for several budgets (default: 7 and 30)",
    )  # fmt: skip
    parser.add_argument(
        "--budget", type=float, action="append",
        help="budget in fetches per unit (instead of --interval)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--memory", type=int, default=0, metavar="N",
        help="also measure the schedule's Redis bytes per URL over N URLs",
    )  # fmt: skip
    parser.add_argument(
        "--ceilings", action="store_true",
        help="print only the closed-form optimal/uniform freshness per web "
        "profile and uniform interval (no simulation)",
    )  # fmt: skip
    parser.add_argument(
        "--hand-set", action="store_true",
        help="also run the default policy at the best of a few fixed prices "
        "(what a hand-set price could reach at best; 2 minutes more)",
    )  # fmt: skip
    parser.add_argument(
        "--frontier", action="store_true",
        help="print only the closed-form freshness/age frontier of the "
        "measured web at U = 7 and 30 (true rates, no simulation)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    if args.frontier:
        print(f"{'interval':>8} {'age weight':>10} {'freshness':>9} {'gain':>5} "
              f"{'age':>8} {'x unif':>6}")  # fmt: skip
        for u, weight, f, gain, a, ratio in frontier(args.pages, args.seed):
            print(f"{u:8g} {weight:10g} {f:9.3f} {gain:5.2f} {a:8.3f} {ratio:5.2f}x")
        return 0
    if args.ceilings:
        print(f"{'web':11} {'interval':>8} {'uniform F':>9} {'optimal F':>9} "
              f"{'ratio':>6}")  # fmt: skip
        for profile, u, uni, opt in ceilings(args.pages, args.seed):
            print(f"{profile:11} {u:8g} {uni:9.3f} {opt:9.3f} {opt / uni:5.2f}x")
        return 0
    budgets = list(args.budget or [])
    if not budgets:
        budgets = [args.pages / u for u in (args.interval or [7.0, 30.0])]
    runs = []
    for budget in budgets:
        web = build_web(args.pages, budget, args.seed, args.web)
        results, closed = compare(web, budget, args.hand_set)
        runs.append((budget, web, results, closed))
    memory = schedule_memory(args.memory) if args.memory else None
    if args.json:
        out = {"runs": [{"budget": b, "uniform_interval": w.uniform,
                         "results": [asdict(r) for r in rs],
                         "optimal_closed_form": closed}
                        for b, w, rs, closed in runs],
               "memory": memory}  # fmt: skip
        print(json.dumps(out))
        return 0
    for budget, web, results, closed in runs:
        print(f"web {args.web}, {len(web.urls)} pages, budget {budget:g} fetches "
              f"per unit (uniform interval {web.uniform:g} units)")  # fmt: skip
        print(f"{'policy':14} {'freshness':>9} {'x unif':>7} {'gain':>5} {'age':>7} "
              f"{'x unif':>6} {'fetches':>8} {'budget':>8} {'changed':>8}")  # fmt: skip
        uniform, optimal = results[0], results[-1]
        for r in results:
            ratio = r.freshness / uniform.freshness
            gain = gain_share(r, uniform, optimal)
            print(f"{r.policy:14} {r.freshness:9.3f} {ratio:6.2f}x {gain:5.2f} "
                  f"{r.age:7.3f} {r.age / uniform.age:5.2f}x {r.fetches:8d} "
                  f"{r.budget:8d} {r.changed_share:8.3f}")  # fmt: skip
        print(f"optimal, closed form: {closed:.3f}\n")
    print(f"({time.perf_counter() - began:.1f} s)")
    if memory is not None:
        print(f"schedule memory: {memory['bytes_per_url']} B per URL "
              f"(ZSET {memory['zset_bytes_per_url']}, HASH "
              f"{memory['hash_bytes_per_url']}; {memory['urls']:,} URLs of "
              f"{memory['url_length']} chars)")  # fmt: skip
        print(f"store-side schedule (RECRAWL_WINDOW {STORE_WINDOW_S} s, next "
              f"visits over {STORE_SPREAD_S // 86400} days): "
              f"{memory['store_side_redis_bytes_per_url']} B of Redis per known "
              f"URL ({memory['store_side_in_window']:,} URLs in the window), "
              f"{memory['store_bytes_per_url']} B of SQLite per URL")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
