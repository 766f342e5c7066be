"""Pages that change: a seeded Poisson process per page (``--change-period``).

Each page falls in one change class by a stable hash of (seed, host, path).
Two profiles (sets of classes):

* ``classes`` (the sandbox's): half the pages never change, a quarter change
  on average every ``10 * period`` seconds ("slow"), a quarter every
  ``period`` seconds ("fast").
* ``measured``: the spread Cho and Garcia-Molina measured over 720,000 pages
  fetched daily for four months ("The evolution of the web and implications
  for an incremental crawler", VLDB 2000, their Figure 2, all domains, as
  read from the figure): 23 % changed at least daily, 15 % between daily and
  weekly, 16 % weekly to monthly, 16 % monthly to every 4 months, 30 % not
  in 4 months. With ``period`` one day, a page of a class has its mean
  change interval drawn log-uniform over the class's range (1 hour-1 day,
  1-7 days, 7-30, 30-120; the last class never changes): rates spread over
  three orders of magnitude, and a share of static pages.
* ``loguniform``: no static pages, every page's mean change interval
  log-uniform from 1 hour to 1 year (``period`` one day): the widest spread,
  used by the benchmark's ceiling table only.
* ``rewrites``: a script rewrites the same few files together every
  ``period`` seconds: pages 1 to :data:`REWRITTEN_PER_HOST` of every host
  (the home page's first links) change at ``start + period``, ``start + 2
  period``, ..., the others never (the continuous crawl's user scenario:
  36 of 186 pages on 6 hosts rewritten every 8 s).

Except in ``rewrites``, a page's changes are a Poisson process of that rate:
exponential gaps drawn from a generator seeded by the page, so every process
that builds the same model with the same start time sees the same change
times. A page's content
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
import re

from sandbox.site import stable_hash

# (name, share of pages, mean time between changes as a multiple of the
# period: drawn log-uniform from [low, high]; 0: never changes), assigned by
# hash in this order.
Classes = tuple[tuple[str, int, float, float], ...]
CLASSES: Classes = (
    ("static", 2, 0.0, 0.0),
    ("slow", 1, 10.0, 10.0),
    ("fast", 1, 1.0, 1.0),
)
MEASURED: Classes = (
    ("hourly-daily", 23, 1 / 24, 1.0),
    ("daily-weekly", 15, 1.0, 7.0),
    ("weekly-monthly", 16, 7.0, 30.0),
    ("monthly-4months", 16, 30.0, 120.0),
    ("static", 30, 0.0, 0.0),
)
LOGUNIFORM: Classes = (("hourly-yearly", 1, 1 / 24, 365.0),)
# Share and low/high are unused: the rewritten pages are chosen by number.
REWRITES: Classes = (("rewritten", 0, 1.0, 1.0), ("static", 1, 0.0, 0.0))
PROFILES: dict[str, Classes] = {
    "classes": CLASSES,
    "measured": MEASURED,
    "loguniform": LOGUNIFORM,
    "rewrites": REWRITES,
}
# Pages of every host the ``rewrites`` profile rewrites (page numbers 1..6).
REWRITTEN_PER_HOST = 6
_PAGE_NUMBER = re.compile(r"-(\d+)\.html$")


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
    >>> r = ChangeModel(1, 8.0, 100.0, "rewrites")
    >>> r.kind(0, "/news/oak-fern-3.html"), r.kind(0, "/docs/oak-fern-7.html")
    ('rewritten', 'static')
    >>> r.version(0, "/news/oak-fern-3.html", 125.0)
    (3, 124.0)
    """

    def __init__(
        self, seed: int, period: float, start: float, profile: str = "classes"
    ) -> None:
        if period <= 0:
            raise ValueError("the change period must be > 0")
        self.seed = seed
        self.period = period
        self.start = start
        if profile not in PROFILES:
            raise ValueError(f"change profile must be one of {sorted(PROFILES)}")
        self.classes = PROFILES[profile]
        self.periodic = profile == "rewrites"
        self._weight = sum(w for _, w, _, _ in self.classes)
        self._times: dict[tuple[int, str], list[float]] = {}
        self._rngs: dict[tuple[int, str], random.Random] = {}

    def kind(self, i: int, path: str) -> str:
        """The change class of a page ("static", "slow" or "fast" in the
        ``classes`` profile)."""
        return self._class(i, path)[0]

    def _class(self, i: int, path: str) -> tuple[str, int, float, float]:
        if self.periodic:
            number = _PAGE_NUMBER.search(path)
            rewritten = number is not None and 1 <= int(number[1]) <= REWRITTEN_PER_HOST
            return self.classes[0] if rewritten else self.classes[1]
        pick = stable_hash(self.seed, "changes", i, path) % self._weight
        for entry in self.classes:
            if pick < entry[1]:
                return entry
            pick -= entry[1]
        raise AssertionError("unreachable")

    def rate(self, i: int, path: str) -> float:
        """Mean changes per second of a page (0: never changes).

        >>> m = ChangeModel(1, 86400.0, 0.0, "measured")
        >>> rates = [m.rate(0, f"/p{k}") for k in range(2000)]
        >>> abs(sum(r == 0 for r in rates) / 2000 - 0.30) < 0.03
        True
        >>> 1 / max(rates) >= 3600 and 1 / min(r for r in rates if r) <= 120 * 86400
        True
        """
        _, _, low, high = self._class(i, path)
        if not low:
            return 0.0
        if self.periodic:
            return 1.0 / (low * self.period)
        u = (stable_hash(self.seed, "spread", i, path) % 2**32) / 2**32
        mult = low * (high / low) ** u
        return 1.0 / (mult * self.period)

    def change_times(self, i: int, path: str, until: float) -> list[float]:
        """The page's change times (absolute, seconds) up to at least ``until``."""
        key = (i, path)
        times = self._times.setdefault(key, [])
        rate = self.rate(i, path)
        if rate == 0:
            return times
        if self.periodic:
            step = 1.0 / rate
            while not times or times[-1] <= until:
                times.append(self.start + step * (len(times) + 1))
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
