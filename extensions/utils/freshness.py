"""The freshness model of the continuous crawl: how often a page changes,
how often to revisit it, and what a fetch is worth.

Pure functions and small classes, no Redis, no Scrapy: the recrawl extension
(:mod:`extensions.extensions.recrawl`) and the freshness benchmark
(``bench/freshness.py``)
run the same code.

* **Change rates from every signal.** :class:`History` keeps a page's
  evidence as a Poisson process observed at each visit: an unchanged visit
  says "no change for the whole gap"; a change with a date (the response's
  ``Last-Modified``, a sitemap's ``<lastmod>``) says "changed, then no
  change for the time since that date" (Cho and Garcia-Molina's estimator
  with last-modified dates: changes over the time the page is known
  unchanged); a change without a date only says "at least one change in the
  gap" (their estimator for an incomplete history). :meth:`History.rate`
  is the rate that maximises the likelihood of all three kinds together,
  with a prior pooled over the page's directory, host and the whole crawl
  (:class:`Priors`) for pages with little history.
* **The revisit interval** (:func:`optimal_interval`): Cho and
  Garcia-Molina's optimal allocation ("Effective page refresh policies for
  web crawlers", TODS 2003) with a small weight on age (:data:`AGE_WEIGHT`):
  pages that change too fast to keep fresh are let go first, to a bounded
  interval instead of never.
* **The price of a fetch** (the Lagrange multiplier of that allocation) is
  not set by hand: :func:`revisit_target` reads what the fleet fetched over a
  window and how late its revisits were, and :meth:`Demand.price_for` picks
  the price whose schedule asks for that many revisits a second, given how
  many known pages change at which rate (a histogram over rate bins).

Reads no settings (the extension passes the bounds and the revisit share).
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Mapping

# Compared visits a page's change history keeps: past it, the evidence is
# halved, so the rate estimate follows a page whose rate drifts (about the
# last 16-32 visits count) and the record stays a few bytes.
HISTORY_WINDOW = 32
# The weight of age in the allocation, relative to the price (the objective
# is the summed freshness minus AGE_WEIGHT / price x the summed age). 0 is
# Cho and Garcia-Molina's freshness optimum, which never revisits a page that
# changes faster than once per price: its copy grows older without bound.
# With 0.004 such a page is revisited about every sqrt(2 / 0.004) = 22
# prices. The largest weight that keeps 75 % of the optimum's freshness gain
# over uniform on the benchmark's measured web at both budgets (two seeds;
# bench/RESULTS.md): a larger one trades freshness for age (0.05: 55-59 % of
# the gain at 0.65-0.75x uniform's age), a smaller one age for freshness.
AGE_WEIGHT = 0.004
# Rate histogram bins (Demand): four per octave, 2^-40 (one change in ~35,000
# years: never) to 2^7 changes a second.
BINS_PER_OCTAVE = 4
MIN_BIN = -40 * BINS_PER_OCTAVE
MAX_BIN = 7 * BINS_PER_OCTAVE
# A pooled prior counts as this many visits of the pool's average visit for
# a new page, and PRIOR_VISITS / (1 + visits)^2 for a page with history (a
# page's own visits soon outweigh its pool's).
PRIOR_VISITS = 2.0
# A pool is used once it holds this many visits (a directory's, else the
# host's, else the crawl's); past POOL_WINDOW visits its evidence is halved.
PRIOR_MIN_VISITS = 8
POOL_WINDOW = 512
# Directories and hosts pooled per worker at most (least recently used
# dropped): a few MB of worker memory, nothing in Redis.
POOL_KEYS = 50_000

# The controller (revisit_target). Relative lateness (how long a due revisit
# waited beyond the poll, over its interval) above which the fleet is taken
# to be saturated; a revisit counts at most LATE_CLIP (one hopelessly late
# page must not stand for the window).
LATE_TOLERANCE = 0.25
LATE_CLIP = 4.0
# The target moves with exp(GAIN x (1 - lateness / LATE_TOLERANCE)) times
# what the fleet fetched for revisits, between 1 - DRAIN (late: the backlog
# drains) and GROWTH (on time: spare capacity is found by using it).
GAIN = 0.3
DRAIN = 0.1
GROWTH = 1.25
# Revisits and stored pages a window needs before it says anything.
MIN_EVENTS = 8
# Seconds known unchanged a dated estimate divides by at least (a change
# dated the very second of the visit).
MIN_EXPOSURE = 1.0
# Bounds of the price search, as multiples of the interval bounds.
PRICE_SPAN = 1e6


@dataclass(frozen=True)
class History:
    """A page's change evidence, as a Poisson process seen at each visit.

    ``visits`` compared fetches; ``changes`` of them found the page changed,
    ``blind`` of those without a date; ``observed`` the sum of the gaps
    between them; ``exposure`` the seconds the page is known to have stayed
    unchanged (whole gaps of unchanged visits, the time since the date of a
    dated change).

    >>> h = History().add(100.0, True).add(100.0, False)
    >>> h
    History(visits=2, changes=1, observed=200.0, exposure=100.0, blind=1)
    >>> round(h.rate() * 100, 3)  # Cho: -ln((2 - 1 + 0.5) / (2 + 0.5)) per 100 s
    0.511
    >>> d = History().add(100.0, True, since=10.0).add(100.0, False)
    >>> round(1 / d.rate())  # dated: 1 change in 110 s known unchanged
    110
    >>> History().add(100.0, None) == History(), History().rate()
    (True, 0.0)
    """

    visits: int = 0
    changes: int = 0
    observed: float = 0.0
    exposure: float = 0.0
    blind: int = 0

    def add(
        self, gap: float, changed: bool | None, since: float | None = None
    ) -> History:
        """This history after one more visit ``gap`` seconds after the last
        (``changed`` None: nothing compared, nothing learned; ``since``: the
        seconds from the page's last change to this visit, by a date)."""
        if changed is None:
            return self
        gap = max(0.0, gap)
        exposure, blind = self.exposure, self.blind
        if not changed:
            exposure += gap
        elif since is not None:
            # A date before the previous visit contradicts what that visit
            # saw: the gap bounds it.
            exposure += min(max(0.0, since), gap)
        else:
            blind += 1
        return History(
            self.visits + 1, self.changes + int(changed), self.observed + gap,
            exposure, blind,
        ).windowed()  # fmt: skip

    def aged(self, age: float, horizon: float) -> History:
        """A first visit's date (``Last-Modified`` or ``<lastmod>``): the
        page changed ``age`` seconds ago and not since. A date within
        ``horizon`` counts as a change (the date may be the page's creation;
        a page written seconds ago starts fast all the same); an older one
        only says "unchanged for the horizon" (a page that was static for
        years may start changing: its age must not outweigh what the next
        visits see)."""
        age = max(0.0, age)
        if age > horizon:
            return History(
                self.visits + 1, self.changes, self.observed + horizon,
                self.exposure + horizon, self.blind,
            ).windowed()  # fmt: skip
        return History(
            self.visits + 1, self.changes + 1, self.observed + age,
            self.exposure + age, self.blind,
        ).windowed()  # fmt: skip

    def windowed(self) -> History:
        if self.visits <= HISTORY_WINDOW:
            return self
        return History(
            self.visits // 2, self.changes // 2, self.observed / 2,
            self.exposure / 2, self.blind // 2,
        )  # fmt: skip

    def rate(self, prior: tuple[float, float] = (0.0, 0.0)) -> float:
        """Estimated changes per second: the rate ``l`` that maximises the
        likelihood ``l^D e^(-l E) (1 - e^(-l I))^B`` of ``D`` dated changes,
        ``E`` seconds known unchanged and ``B`` blind changes in gaps of
        ``I`` (the mean gap) on average (``D / E`` without blind changes: the
        estimator with last-modified dates). ``prior`` is a pool's average visit
        (changes, seconds known unchanged): it counts as
        :data:`PRIOR_VISITS` such visits for a new page, fewer as the page's
        own visits add up (``PRIOR_VISITS / (1 + visits)^2``), so a page that
        never changes drifts to the longest interval whatever its directory
        does. With blind changes, half an unchanged mean gap is added to
        ``E`` (Cho and Garcia-Molina's bias reduction: with blind changes
        only, the estimate is their ``-ln((n - X + 0.5) / (n + 0.5)) / I``,
        finite when every visit found a change)."""
        weight = PRIOR_VISITS / (1 + self.visits) ** 2
        prior = (prior[0] * weight, prior[1] * weight)
        changes = self.changes - self.blind + prior[0]
        gap = self.observed / self.visits if self.visits else 0.0
        blind = self.blind
        if blind == 0 or gap <= 0:
            changes += blind
            known = max(MIN_EXPOSURE, self.exposure + prior[1])
            return changes / known if changes > 0 else 0.0
        known = self.exposure + prior[1] + 0.5 * gap
        if changes <= 0:
            return math.log1p(blind * gap / known) / gap
        # d/dl log-likelihood = changes / l + blind gap / (e^(l gap) - 1) - known:
        # decreasing in l; bisect its root on a log scale.
        lo, hi = 1e-15, 1e9
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            slope = changes / mid + blind * gap / math.expm1(min(mid * gap, 700.0))
            if slope > known:
                lo = mid
            else:
                hi = mid
            if hi < lo * (1 + 1e-9):
                break
        return math.sqrt(lo * hi)

    def evidence(self) -> tuple[float, float]:
        """(changes, seconds known unchanged) this history adds to a pool: a
        blind change stands for half its gap."""
        gap = self.observed / self.visits if self.visits else 0.0
        return float(self.changes), self.exposure + 0.5 * gap * self.blind


def _g(x: float) -> float:
    """1 - (1 + x) e^-x, the freshness term of the optimality condition
    (a series where the difference would cancel)."""
    if x < 1e-3:
        return x * x * (0.5 - x / 3 + x * x / 8)
    return -math.expm1(-x) - x * math.exp(-x)


def _h(x: float) -> float:
    """x^2 / 2 - 1 + (1 + x) e^-x, the age term (a series for small x)."""
    if x < 1e-3:
        return x * x * x * (1 / 3 - x / 8)
    return x * x / 2 - _g(x)


def optimal_interval(
    rate: float, price: float, age_weight: float = AGE_WEIGHT
) -> float:
    """The revisit interval that maximises a page's freshness minus
    ``age_weight / price`` times its age, less ``price`` per fetch (Cho and
    Garcia-Molina: freshness per page ``F = (1 - e^-x) / x``, ``x = rate *
    interval``; the Lagrange multiplier of the fetch budget is the price).
    With ``y = rate * price`` the condition is ``1 - (1 + x) e^-x +
    age_weight / y * (x^2 / 2 - 1 + (1 + x) e^-x) = y``. Without the age
    term, a page with ``y >= 1`` is never revisited (``inf``); with it, such
    a page is let go to about ``price * sqrt(2 / age_weight)``. Middling
    rates get the shortest intervals, static and very fast pages the
    longest; a larger price spends fewer fetches.

    >>> [round(optimal_interval(r, 1.0, 0), 2) for r in (0.01, 0.1, 0.5, 0.9)]
    [14.86, 5.32, 3.36, 4.32]
    >>> optimal_interval(0.0, 1.0), optimal_interval(2.0, 1.0, 0)
    (inf, inf)
    >>> [round(optimal_interval(r, 1.0), 2) for r in (0.1, 0.9, 2.0, 100.0)]
    [5.27, 4.01, 15.83, 22.25]
    """
    if rate <= 0 or price <= 0:
        return math.inf
    y = rate * price
    if age_weight <= 0 and y >= 1:
        return math.inf
    k = age_weight / y
    # lhs(x) = g(x) + k (x^2 / 2 - g(x)) rises from 0 (slope x e^-x (1 - k)
    # + k x > 0): Newton's method, kept inside a bracket by bisection.
    lo, hi = 0.0, max(1.0, math.sqrt(2 * y))
    while _g(hi) + k * _h(hi) < y:
        lo, hi = hi, hi * 2
        if hi > 1e12:
            return math.inf
    x = (lo + hi) / 2
    for _ in range(100):
        f = _g(x) + k * _h(x) - y
        if abs(f) <= 1e-12 * y or hi - lo <= 1e-10 * hi:
            break
        if f < 0:
            lo = x
        else:
            hi = x
        step = x - f / (x * math.exp(-x) * (1 - k) + k * x)
        x = step if lo < step < hi else (lo + hi) / 2
    return x / rate


def expected_freshness(rate: float, interval: float) -> float:
    """The share of time a copy refreshed every ``interval`` is fresh:
    ``(1 - e^-x) / x`` (1 for a page that never changes).

    >>> expected_freshness(0.0, 10.0), round(expected_freshness(0.1, 10.0), 3)
    (1.0, 0.632)
    """
    x = rate * interval
    if x <= 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    return -math.expm1(-x) / x


def rate_bin(rate: float) -> int:
    """The histogram bin of a rate (changes/s): four per octave.

    >>> rate_bin(1.0), rate_bin(0.5), rate_bin(0.0), bin_rate(rate_bin(0.25))
    (0, -4, -160, 0.25)
    """
    if rate <= 0:
        return MIN_BIN
    b = round(BINS_PER_OCTAVE * math.log2(rate))
    return max(MIN_BIN, min(MAX_BIN, b))


def bin_rate(b: int) -> float:
    """The rate a bin stands for (its centre); the lowest bin is 0."""
    return 0.0 if b <= MIN_BIN else 2.0 ** (b / BINS_PER_OCTAVE)


def http_date(value: str | None) -> float | None:
    """Epoch seconds of an HTTP date (``Last-Modified``, ``Date``), or None.

    >>> http_date("Mon, 01 Jan 2024 00:00:00 GMT"), http_date("soon")
    (1704067200.0, None)
    """
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def w3c_date(value: str | None) -> float | None:
    """Epoch seconds of a sitemap ``<lastmod>`` (W3C datetime: a date, or a
    date and time with a zone; no zone is taken as UTC), or None.

    >>> w3c_date("2024-01-01"), w3c_date("2024-01-01T01:00:00+01:00")
    (1704067200.0, 1704067200.0)
    >>> w3c_date("2024-01-01T00:00Z"), w3c_date("yesterday")
    (1704067200.0, None)
    """
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


@dataclass
class _Pool:
    visits: float = 0.0
    changes: float = 0.0
    exposure: float = 0.0

    def add(self, visits: float, changes: float, exposure: float) -> None:
        self.visits += visits
        self.changes += changes
        self.exposure += exposure
        if self.visits > POOL_WINDOW:
            self.visits /= 2
            self.changes /= 2
            self.exposure /= 2


class Priors:
    """Change evidence pooled over each URL's directory, its host and the
    whole crawl, as this worker saw it: the prior of a page with little
    history of its own (a new page in a fast-changing section starts fast).

    Each visit adds what it learned (changes, seconds known unchanged) to
    its three pools; a page's prior is the average visit of the narrowest
    pool with at least :data:`PRIOR_MIN_VISITS` visits. Kept in the
    worker's memory (at most :data:`POOL_KEYS` directories and hosts, the
    least recently used dropped): a statistical aid rebuilt from revisits
    after a restart, nothing in Redis.

    >>> p = Priors()
    >>> for k in range(8):
    ...     p.add("http://a.test/news/%d" % k, History().add(10.0, True, 2.0))
    >>> p.prior("http://a.test/news/new")  # a visit: a change, 2 s before
    (1.0, 2.0)
    >>> p.prior("http://b.test/x") == p.prior("http://a.test/docs/x")
    True
    """

    def __init__(self, max_keys: int = POOL_KEYS) -> None:
        self.max_keys = max_keys
        self._pools: OrderedDict[str, _Pool] = OrderedDict()
        self._crawl = _Pool()

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def keys(url: str) -> tuple[str, str]:
        """(directory, host) pool keys of a URL.

        >>> Priors.keys("http://a.test:80/news/today.html?x=1")
        ('a.test:80/news/', 'a.test:80')
        """
        parts = urlsplit(url)
        path = parts.path or "/"
        return parts.netloc + path[: path.rfind("/") + 1], parts.netloc

    def add(self, url: str, learned: History) -> None:
        """Pool one visit's evidence (``learned``: what it added to the
        page's history)."""
        if not learned.visits:
            return
        changes, exposure = learned.evidence()
        for key in self.keys(url):
            pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = _Pool()
                if len(self._pools) > self.max_keys:
                    self._pools.popitem(last=False)
            else:
                self._pools.move_to_end(key)
            pool.add(learned.visits, changes, exposure)
        self._crawl.add(learned.visits, changes, exposure)

    def prior(self, url: str) -> tuple[float, float]:
        """The average visit (changes, seconds known unchanged) of the
        narrowest pool with enough visits, for :meth:`History.rate`."""
        for key in self.keys(url):
            pool = self._pools.get(key)
            if pool is not None and pool.visits >= PRIOR_MIN_VISITS:
                return self._average(pool)
        if self._crawl.visits >= PRIOR_MIN_VISITS:
            return self._average(self._crawl)
        return 0.0, 0.0

    @staticmethod
    def _average(pool: _Pool) -> tuple[float, float]:
        return pool.changes / pool.visits, pool.exposure / pool.visits


def learned(before: History, after: History) -> History:
    """What one visit added to a history (for :meth:`Priors.add`); nothing
    when the window halved it (the next visit adds again)."""
    if after.visits != before.visits + 1:
        return History()
    return History(
        1, after.changes - before.changes, after.observed - before.observed,
        after.exposure - before.exposure, after.blind - before.blind,
    )  # fmt: skip


@dataclass(frozen=True)
class Bounds:
    """``RECRAWL_MIN_INTERVAL`` <= interval <= ``RECRAWL_MAX_INTERVAL``
    (seconds); ``default`` is a new page's first interval
    (``RECRAWL_DEFAULT_INTERVAL``); ``price`` the price of a fetch, seconds
    (measured: :func:`revisit_target`, :meth:`Demand.price_for`)."""

    min: float
    default: float
    max: float
    price: float = 3600.0

    def clamp(self, seconds: float) -> float:
        """>>> Bounds(10, 100, 1000).clamp(5), Bounds(10, 100, 1000).clamp(5000)
        (10, 1000)
        """
        return max(self.min, min(self.max, seconds))


def interval_at(rate: float, price: float, bounds: Bounds) -> float:
    """The interval the allocation gives a page of ``rate`` at ``price``,
    within the bounds (a page that never changes: the longest)."""
    return bounds.clamp(optimal_interval(rate, price))


@dataclass
class Demand:
    """The fleet's known pages by estimated change rate (bin -> pages), and
    the revisit rate a price asks of the fleet.

    >>> d = Demand({rate_bin(0.1): 10, MIN_BIN: 90})
    >>> b = Bounds(1.0, 10.0, 1000.0)
    >>> round(d.revisits_at(1e-6, b), 2)  # every changing page at the minimum
    10.09
    >>> d.price_for(100.0, b) == d.price_for(10.09, b) == b.min / PRICE_SPAN
    True
    >>> round(d.revisits_at(d.price_for(1.0, b), b), 3)
    1.0
    """

    pages: dict[int, float] = field(default_factory=dict)

    def revisits_at(self, price: float, bounds: Bounds) -> float:
        """Revisits a second the schedule asks for at ``price``."""
        return sum(
            n / interval_at(bin_rate(b), price, bounds)
            for b, n in self.pages.items()
            if n > 0
        )

    def price_for(self, target: float, bounds: Bounds) -> float:
        """The price whose schedule asks for ``target`` revisits a second:
        the lowest price searched when even that asks for less (spare
        capacity: every changing page at the minimum interval), the highest
        when even that asks for more (every page at the maximum)."""
        lo, hi = bounds.min / PRICE_SPAN, bounds.max * PRICE_SPAN
        if self.revisits_at(lo, bounds) <= target:
            return lo
        if self.revisits_at(hi, bounds) >= target:
            return hi
        while hi > lo * 1.001:
            mid = math.sqrt(lo * hi)
            if self.revisits_at(mid, bounds) > target:
                lo = mid
            else:
                hi = mid
        return math.sqrt(lo * hi)

    @classmethod
    def from_counts(cls, counts: Mapping[int, float]) -> Demand:
        return cls({int(b): float(n) for b, n in counts.items() if float(n) > 0})


@dataclass
class Window:
    """What the fleet's revisits did over the measurement window (summed
    over the workers, in Redis): pages stored, revisits stored, of them
    found changed and answered 304, and the revisits whose lateness was
    measured (``timed``) with their summed relative lateness (``late``)."""

    seconds: float
    stored: int = 0
    revisits: int = 0
    changed: int = 0
    not_modified: int = 0
    timed: int = 0
    late: float = 0.0

    @property
    def lateness(self) -> float:
        """Mean relative lateness of the timed revisits (0: none timed)."""
        return self.late / self.timed if self.timed >= MIN_EVENTS else 0.0


def relative_lateness(late: float, interval: float) -> float:
    """A revisit's lateness beyond the poll, over its interval, clipped.

    >>> [relative_lateness(late, 10.0) for late in (5.0, -1.0, 1e9)]
    [0.5, 0.0, 4.0]
    """
    if interval <= 0:
        return 0.0
    return min(LATE_CLIP, max(0.0, late / interval))


def revisit_target(window: Window, scheduled: float, share: float) -> float | None:
    """Revisits a second the schedule should ask for, from what the fleet
    did over the window (None: too little happened to tell).

    What the fleet fetched (for revisits, or ``share`` of all its fetches
    when that is more: capacity new URLs used is capacity revisits can use)
    is what it can do at least; how late its revisits came says whether it
    can do more: on time, offer up to :data:`GROWTH` times as many (spare
    capacity is found by using it); late by :data:`LATE_TOLERANCE` of their
    intervals on average, hold; later, ask down to :data:`DRAIN` fewer, and
    no more than ``share`` of all its fetches (the rest is left to new
    URLs). Before any revisit is measured, what is scheduled stands for
    them.

    >>> w = Window(60.0, stored=600, revisits=600, timed=600)
    >>> revisit_target(w, 10.0, 1.0)  # on time: probe a quarter more
    12.5
    >>> w.late = 600 * 0.25  # a quarter of an interval late: hold
    >>> revisit_target(w, 20.0, 1.0)
    10.0
    >>> w.late = 600 * 0.5  # half an interval late: ask less
    >>> revisit_target(w, 20.0, 1.0), revisit_target(w, 20.0, 0.5)
    (9.0, 5.0)
    >>> revisit_target(Window(60.0), 10.0, 1.0) is None
    True
    """
    if window.seconds <= 0 or window.stored < MIN_EVENTS:
        return None
    fetched = window.stored / window.seconds
    base = share * fetched
    if window.revisits >= MIN_EVENTS:
        base = max(base, window.revisits / window.seconds)
    else:
        base = max(base, scheduled)
    late = window.lateness / LATE_TOLERANCE
    factor = min(GROWTH, max(1 - DRAIN, math.exp(GAIN * (1 - late))))
    target = base * factor
    if late > 1:
        target = min(target, share * fetched)
    return target


def window_of(
    buckets: Mapping[int, Mapping[str, float]], now_ms: int, bucket_ms: int, count: int
) -> Window:
    """The window over the last ``count`` buckets up to ``now_ms`` (bucket
    n covers ``[n, n + 1) * bucket_ms``): their counters summed, over the
    time from the start of the oldest bucket that exists.

    >>> b = {9: {"stored": 4, "revisits": 2}, 10: {"stored": 6, "timed": 1}}
    >>> w = window_of(b, 10_500, 1000, 6)
    >>> w.seconds, w.stored, w.revisits, w.timed
    (1.5, 10, 2, 1)
    """
    current = now_ms // bucket_ms
    numbers = [n for n in range(current - count + 1, current + 1) if buckets.get(n)]
    if not numbers:
        return Window(0.0)
    sums: dict[str, float] = {}
    for n in numbers:
        for name, value in buckets[n].items():
            sums[name] = sums.get(name, 0) + value
    return Window(
        (now_ms - numbers[0] * bucket_ms) / 1000,
        int(sums.get("stored", 0)),
        int(sums.get("revisits", 0)),
        int(sums.get("changed", 0)),
        int(sums.get("not_modified", 0)),
        int(sums.get("timed", 0)),
        sums.get("late_milli", 0) / 1000,
    )


def reprice(
    demand: Demand, scheduled: float, window: Window, share: float, bounds: Bounds
) -> tuple[float, float] | None:
    """(price, target revisits/s) from the fleet's figures, or None while
    they say too little (:func:`revisit_target`; fewer than
    :data:`MIN_EVENTS` known pages)."""
    target = revisit_target(window, scheduled, share)
    if target is None or sum(demand.pages.values()) < MIN_EVENTS:
        return None
    return demand.price_for(target, bounds), target
