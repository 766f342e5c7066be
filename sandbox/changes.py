"""Pages that change: a seeded Poisson process per page (``--change-period``).

Each page falls in one change class by a stable hash of (seed, host, path):
half the pages never change, a quarter change on average every
``10 * period`` seconds ("slow"), a quarter every ``period`` seconds ("fast").
A page's changes are a Poisson process of that rate: exponential gaps drawn
from a generator seeded by the page, so every process that builds the same
model with the same start time sees the same change times. A page's content
at time ``t`` is its version ``n`` = number of changes in ``(start, t]``; the
site renders version ``n`` with ``n`` in the seed, and serves the time of the
last change as ``Last-Modified`` (the ETag is a hash of the body).

Used by the site (:mod:`sandbox.site`), the continuous-crawl end-to-end test
and the freshness benchmark (``bench/freshness.py``), which share this model:
the same web for the crawler, the test's assertions and the simulation.

Reads no settings.
"""

from __future__ import annotations

import bisect
import random

from sandbox.site import stable_hash

# (share of pages, mean seconds between changes as a multiple of the period;
# 0: never changes), assigned by hash in this order.
CLASSES: tuple[tuple[str, int, float], ...] = (
    ("static", 2, 0.0),
    ("slow", 1, 10.0),
    ("fast", 1, 1.0),
)
_WEIGHT = sum(w for _, w, _ in CLASSES)


class ChangeModel:
    """When each page of a seeded web changes.

    >>> m = ChangeModel(seed=1, period=10.0, start=0.0)
    >>> m.version(0, "/", 0.0)
    (0, 0.0)
    >>> n, at = m.version(0, "/", 1e6)
    >>> (n > 0) == (m.rate(0, "/") > 0), at <= 1e6
    (True, True)
    >>> m.version(0, "/", 1e6) == ChangeModel(1, 10.0, 0.0).version(0, "/", 1e6)
    True
    """

    def __init__(self, seed: int, period: float, start: float) -> None:
        if period <= 0:
            raise ValueError("the change period must be > 0")
        self.seed = seed
        self.period = period
        self.start = start
        self._times: dict[tuple[int, str], list[float]] = {}
        self._rngs: dict[tuple[int, str], random.Random] = {}

    def kind(self, i: int, path: str) -> str:
        """The change class of a page: "static", "slow" or "fast"."""
        pick = stable_hash(self.seed, "changes", i, path) % _WEIGHT
        for name, weight, _ in CLASSES:
            if pick < weight:
                return name
            pick -= weight
        raise AssertionError("unreachable")

    def rate(self, i: int, path: str) -> float:
        """Mean changes per second of a page (0: never changes)."""
        kind = self.kind(i, path)
        mult = next(m for name, _, m in CLASSES if name == kind)
        return 1.0 / (mult * self.period) if mult else 0.0

    def change_times(self, i: int, path: str, until: float) -> list[float]:
        """The page's change times (absolute, seconds) up to at least ``until``."""
        key = (i, path)
        times = self._times.setdefault(key, [])
        rate = self.rate(i, path)
        if rate == 0:
            return times
        rng = self._rngs.get(key)
        if rng is None:
            seed = stable_hash(self.seed, "chg", i, path)
            rng = self._rngs[key] = random.Random(seed)
        last = times[-1] if times else self.start
        while last <= until:
            last += rng.expovariate(rate)
            times.append(last)
        return times

    def version(self, i: int, path: str, t: float) -> tuple[int, float]:
        """(changes in ``(start, t]``, time of the last one or ``start``)."""
        times = self.change_times(i, path, t)
        n = bisect.bisect_right(times, t)
        return n, times[n - 1] if n else self.start
