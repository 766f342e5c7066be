"""Continuous crawling: a next-visit time per stored page, revisits with
conditional GET, and an adaptive revisit interval per URL.

Settings read (defaults in :mod:`extensions.settings.defaults`): ``RECRAWL_ENABLED``,
``RECRAWL_MIN_INTERVAL``, ``RECRAWL_DEFAULT_INTERVAL``,
``RECRAWL_MAX_INTERVAL``, ``RECRAWL_GIVE_UP_INTERVAL``, ``RECRAWL_POLICY``,
``RECRAWL_BATCH_SIZE``, ``RECRAWL_POLL_INTERVAL``, ``RECRAWL_SCHEDULE_STORE``,
``RECRAWL_WINDOW``, ``FRONTIER_LEASE_TIMEOUT``; ``REDIS_URL`` through
:mod:`extensions.connection`.

How a page comes back:

1. Its fetch is stored; the store's acknowledgement
   (:data:`extensions.signals.items_stored`) reaches :class:`Recrawler`,
   which reads from each item what the fetch learned (``url``, ``status``,
   ``content_hash``, response ``headers``) and what the previous visit left in
   the request (``recrawl``: the :data:`extensions.meta.RECRAWL_RECORD`
   record the spider copies into the item). The policy turns that into the
   next interval; one script writes the next-visit time and the record
   (:data:`SCHEDULE_LUA`).
2. Every ``RECRAWL_POLL_INTERVAL`` seconds one script claims the due URLs
   (:data:`CLAIM_LUA`): it pushes their next-visit time a hold ahead in the
   same step (the longer of ``RECRAWL_MIN_INTERVAL`` and
   ``FRONTIER_LEASE_TIMEOUT``), so two workers never both take one URL, and a
   worker that dies before its claimed URLs reach the frontier's write-ahead
   log only delays those pages by the hold instead of losing them. A revisit
   still waiting in its host's queue when the hold ends is claimed again; its
   second copy is the same queue member and is not queued twice.
3. The revisit request (``dont_filter``: the Bloom filter marked the URL seen
   on discovery, and a seen URL must stay revisitable) carries the record in
   its meta and the validators as ``If-None-Match`` / ``If-Modified-Since``,
   and goes to ``engine.crawl``: the scheduler writes it ahead and pushes it
   into its host's queue exactly as a discovered URL, so the host schedule,
   robots.txt, the per-host lock and back-off govern it as any other request.
   ``304`` is in its ``handle_httpstatus_list``: not-modified is an outcome,
   not an error.

Redis layout (:class:`extensions.keys.FrontierKeys`): ``recrawl`` ZSET
url -> next visit (ms, Redis ``TIME``); ``recrawl:data`` HASH url -> JSON
``[interval s, etag, last-modified, content hash, visits, changes, observed
s]`` (the last three: the page's change history, :class:`History`). The
validators live in Redis, not in the store, so building a revisit reads no
store on the hot path.

The store-side schedule (``RECRAWL_SCHEDULE_STORE``, a class path built with
``build_from_crawler``, satisfying :class:`ScheduleStore`; the page store's
is :class:`pipelines.stores.schedule.PageStoreSchedule`): a next visit more
than ``RECRAWL_WINDOW`` ahead is written to the store (url, due time, record)
and removed from Redis (:data:`PARK_LUA`); every quarter window, each worker
moves what falls due within the window back into Redis with its due time
(:data:`LOAD_LUA`: a URL already there keeps its own, so refills that meet
are harmless) and deletes it from the store, only where the store still
holds that due time (a page rescheduled meanwhile keeps its new one). Redis
then holds the window only. Due times are Redis ``TIME`` in both places. A
worker that dies between two of these steps leaves a URL in both places: it
is revisited once more than needed, never lost.

The policy (``RECRAWL_POLICY``, a dotted path like
``FRONTIER_PRIORITY_FUNCTION``) is ``policy(visit, bounds) -> seconds``;
:func:`budgeted_interval` (Cho and Garcia-Molina's optimal revisit
frequency for each page's estimated change rate) is the default,
:func:`adaptive_interval` (Nutch's steps) and :func:`uniform_interval` (the
baseline) the others the freshness benchmark compares it with.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from redis.exceptions import ResponseError
from scrapy import Request, signals
from scrapy.exceptions import DontCloseSpider, NotConfigured
from scrapy.utils.misc import build_from_crawler, load_object

from extensions.connection import TRANSIENT_REDIS_ERRORS, async_client
from extensions.connection.scripts import LUA_NOW_MS, script
from extensions.keys import FrontierKeys
from extensions.meta import RECRAWL_RECORD
from extensions.settings import config, defaults
from extensions.settings.config import SettingsError
from extensions.signals import items_stored

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    import redis.asyncio as aredis
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Nutch AdaptiveFetchSchedule's defaults: a change shortens the interval by
# 20 %, no change lengthens it by 40 % (slower growth than shrink would make
# a page that changes about once per interval drift away from it).
DEC_RATE = 0.2
INC_RATE = 0.4
# Hex digits of the content hash the schedule keeps: 64 bits tell a change
# from none with a negligible chance of error, at a quarter of a SHA-256's
# 64 characters (48 bytes less Redis per known URL).
HASH_CHARS = 16
# Compared visits a page's change history keeps: past it, the counts are
# halved, so the rate estimate follows a page whose rate drifts (about the
# last 16-32 visits count) and the record stays a few bytes.
HISTORY_WINDOW = 32
# The budgeted policy moves an interval by at most this factor per visit:
# the first revisits of a page say little (one unchanged visit estimates a
# rate of 0), so its interval walks towards the estimate as evidence grows.
MAX_STEP = 2.0
# Sitemap <changefreq> in seconds ("always" and "never" map to the bounds).
CHANGEFREQ = {
    "hourly": 3600.0,
    "daily": 86400.0,
    "weekly": 7 * 86400.0,
    "monthly": 30 * 86400.0,
    "yearly": 365 * 86400.0,
}

# schedule: set the next visit of pages just stored.
# KEYS[1] recrawl ZSET, KEYS[2] recrawl data HASH
# ARGV: triples (url, interval ms, record JSON)
# Returns the number of URLs scheduled.
SCHEDULE_LUA = (
    LUA_NOW_MS
    + """
local now = now_ms()
local n = 0
for i = 1, #ARGV, 3 do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[i + 1]), ARGV[i])
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 2])
  n = n + 1
end
return n
"""
)

# claim: take up to `count` due URLs, pushing their next visit `hold` ms
# ahead in the same step (the claim: no other worker takes them; a lost
# revisit comes due again after `hold`).
# KEYS[1] recrawl ZSET, KEYS[2] recrawl data HASH
# ARGV[1] count, ARGV[2] hold ms
# Returns {url1, record1, url2, record2, ...} (record: JSON or false).
CLAIM_LUA = (
    LUA_NOW_MS
    + """
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0,
                       tonumber(ARGV[1]))
local out = {}
for _, url in ipairs(due) do
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), url)
  out[#out + 1] = url
  out[#out + 1] = redis.call('HGET', KEYS[2], url)
end
return out
"""
)


# park: take pages whose next visit is beyond the window out of Redis (they
# wait in the schedule store).
# KEYS[1] recrawl ZSET, KEYS[2] recrawl data HASH
# ARGV: urls
# Returns the number of URLs removed from the ZSET.
PARK_LUA = """
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
end
return n
"""

# load: bring schedule-store entries that fall due within the window into
# Redis with their due time; a URL already in Redis keeps its time and record.
# KEYS[1] recrawl ZSET, KEYS[2] recrawl data HASH
# ARGV: triples (url, due ms, record JSON)
# Returns the number of URLs added.
LOAD_LUA = """
local n = 0
for i = 1, #ARGV, 3 do
  if redis.call('ZADD', KEYS[1], 'NX', tonumber(ARGV[i + 1]), ARGV[i]) == 1 then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 2])
    n = n + 1
  end
end
return n
"""
# Batches a refill moves per poll at most (the rest: at the next poll).
REFILL_BATCHES = 10


class ScheduleStore(Protocol):
    """Where next visits beyond the window wait (blocking calls: run in the
    extension's own thread). Transient failures raise ``ConnectionError`` or
    ``TimeoutError``."""

    def put(self, entries: Sequence[tuple[str, int, str]]) -> None:
        """Set each ``(url, due ms, record JSON)``, replacing the URL's entry."""

    def due(self, until: int, limit: int) -> list[tuple[str, int, str]]:
        """Up to ``limit`` entries due at or before ``until``, earliest first."""
        ...

    def delete(self, entries: Sequence[tuple[str, int]]) -> None:
        """Remove each ``(url, due)`` whose entry still has that due time."""

    def count(self) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Bounds:
    """``RECRAWL_MIN_INTERVAL`` <= interval <= ``RECRAWL_MAX_INTERVAL``
    (seconds); ``default`` is a new page's first interval; ``give_up``
    (``RECRAWL_GIVE_UP_INTERVAL``) the budgeted policy's price of a fetch."""

    min: float
    default: float
    max: float
    give_up: float = 3600.0

    def clamp(self, seconds: float) -> float:
        """>>> Bounds(10, 100, 1000).clamp(5), Bounds(10, 100, 1000).clamp(5000)
        (10, 1000)
        """
        return max(self.min, min(self.max, seconds))


@dataclass(frozen=True)
class History:
    """A page's change history as Cho and Garcia-Molina's estimator needs it
    ("Estimating frequency of change", TOIT 2003): ``visits`` compared
    fetches, ``changes`` of them found the page changed, over ``observed``
    seconds (the sum of the intervals before them).

    >>> h = History().add(100.0, True).add(100.0, False)
    >>> h
    History(visits=2, changes=1, observed=200.0)
    >>> round(h.rate() * 100, 3)  # -ln((2 - 1 + 0.5) / (2 + 0.5)) per 100 s
    0.511
    >>> History().add(100.0, None) == History(), History().rate()
    (True, 0.0)
    """

    visits: int = 0
    changes: int = 0
    observed: float = 0.0

    def add(self, interval: float, changed: bool | None) -> History:
        """This history after one more visit ``interval`` seconds after the
        last (``changed`` None: nothing compared, nothing learned)."""
        if changed is None:
            return self
        visits, changes = self.visits + 1, self.changes + int(changed)
        observed = self.observed + interval
        if visits > HISTORY_WINDOW:
            visits, changes, observed = visits // 2, changes // 2, observed / 2
        return History(visits, changes, observed)

    def rate(self) -> float:
        """Estimated changes per second: ``-ln((n - X + 0.5) / (n + 0.5)) / I``
        for ``X`` changes found in ``n`` visits ``I`` seconds apart on average
        (the bias-reduced estimator for an incomplete history: a visit sees
        whether the page changed, not how often; the naive ``X / (n I)``
        underestimates a page that changes more than once per visit)."""
        n, x = self.visits, self.changes
        if n == 0 or self.observed <= 0:
            return 0.0
        return -math.log((n - x + 0.5) / (n + 0.5)) * n / self.observed


def optimal_interval(rate: float, give_up: float) -> float:
    """Cho and Garcia-Molina's optimal revisit interval for a page changing
    ``rate`` times a second ("Effective page refresh policies for web
    crawlers", TODS 2003): freshness per page is ``F = (1 - e^-x) / x`` with
    ``x = rate * interval``; maximising the sum of ``F`` under a fetch budget
    (Lagrange multiplier ``give_up``, seconds) gives ``1 - (1 + x) e^-x =
    rate * give_up``. A page changing faster than once per ``give_up`` on
    average is not worth a revisit (``inf``); a larger ``give_up`` spends
    fewer fetches. The interval is longest for static and for fast pages,
    shortest in between.

    >>> [round(optimal_interval(r, 1.0), 2) for r in (0.01, 0.1, 0.5, 0.9)]
    [14.86, 5.32, 3.36, 4.32]
    >>> optimal_interval(0.0, 1.0), optimal_interval(2.0, 1.0)
    (inf, inf)
    """
    y = rate * give_up
    if rate <= 0 or y >= 1:
        return math.inf
    # 1 - (1 + x) e^-x rises from 0 to 1: bisect for x (to 1e-9 relative).
    lo, hi = 0.0, 1.0
    while 1 - (1 + hi) * math.exp(-hi) < y:
        hi *= 2
    while hi - lo > 1e-9 * hi:
        mid = (lo + hi) / 2
        if 1 - (1 + mid) * math.exp(-mid) < y:
            lo = mid
        else:
            hi = mid
    return hi / rate


@dataclass(frozen=True)
class Visit:
    """What one fetch of a page tells the policy.

    ``interval``: the interval that led to this visit (None: first visit).
    ``changed``: the content differs from the previous visit's (None: first
    visit, or a failed fetch: nothing to compare). ``hint``: what the server
    or a sitemap says about the page's lifetime, seconds (None: no hint).
    ``history``: the page's change history, this visit included.
    """

    interval: float | None
    changed: bool | None
    status: int
    hint: float | None = None
    history: History = History()


def adaptive_interval(visit: Visit, bounds: Bounds) -> float:
    """Nutch's AdaptiveFetchSchedule: changed -> 20 % shorter, unchanged
    (a 304, or the same content hash) -> 40 % longer, within the bounds. A
    first visit starts at the hint if there is one, else the default. A
    failed fetch (an error, a page robots.txt now forbids) counts as
    unchanged: such pages drift to the maximum interval instead of being
    fetched at the rate of the pages that change (transient failures are
    the retry middleware's and back-off's business, not the schedule's).

    >>> b = Bounds(60, 3600, 86400)
    >>> adaptive_interval(Visit(None, None, 200), b)
    3600
    >>> adaptive_interval(Visit(None, None, 200, hint=600.0), b)
    600.0
    >>> adaptive_interval(Visit(1000.0, True, 200), b)
    800.0
    >>> adaptive_interval(Visit(1000.0, False, 304), b)
    1400.0
    >>> adaptive_interval(Visit(70.0, True, 200), b)
    60
    >>> adaptive_interval(Visit(1000.0, None, 0), b)
    1400.0
    """
    if visit.interval is None:
        return bounds.clamp(visit.hint if visit.hint is not None else bounds.default)
    factor = 1 - DEC_RATE if visit.changed else 1 + INC_RATE
    return bounds.clamp(visit.interval * factor)


def budgeted_interval(visit: Visit, bounds: Bounds) -> float:
    """Cho and Garcia-Molina's optimal interval (:func:`optimal_interval`,
    price ``RECRAWL_GIVE_UP_INTERVAL``) for the page's change rate estimated
    from its own history (:meth:`History.rate`), moving at most x2 / x0.5 a
    visit (:data:`MAX_STEP`), within the bounds. Static pages drift to the
    maximum; a page changing faster than the budget can follow is revisited
    less often than any page it chases (found changed at every visit, its
    estimate is only a lower bound, ``ln(2n + 1) / I``, so it settles near
    4 give-up intervals). A
    first visit starts at the hint if there is one, else the default; a
    failed fetch (nothing compared) lengthens the interval as in
    :func:`adaptive_interval`.

    >>> b = Bounds(60, 3600, 86400, give_up=600)
    >>> budgeted_interval(Visit(None, None, 200), b)
    3600
    >>> h = History(4, 2, 4000.0)  # half the visits 1000 s apart changed
    >>> round(budgeted_interval(Visit(1500.0, True, 200, history=h), b))
    2114
    >>> budgeted_interval(Visit(1000.0, False, 304, history=History(4, 0, 4e3)), b)
    2000.0
    >>> budgeted_interval(Visit(1000.0, True, 200, history=History(4, 4, 4e3)), b)
    2000.0
    """
    if visit.interval is None:
        return bounds.clamp(visit.hint if visit.hint is not None else bounds.default)
    if visit.changed is None:
        return bounds.clamp(visit.interval * (1 + INC_RATE))
    target = optimal_interval(visit.history.rate(), bounds.give_up)
    step = min(max(target, visit.interval / MAX_STEP), visit.interval * MAX_STEP)
    return bounds.clamp(step)


def uniform_interval(visit: Visit, bounds: Bounds) -> float:
    """Every page every ``RECRAWL_DEFAULT_INTERVAL`` (Cho and Garcia-Molina's
    uniform policy: the baseline).

    >>> uniform_interval(Visit(5.0, True, 200), Bounds(1, 10, 100))
    10
    """
    return bounds.default


def cache_hint(headers: Mapping[str, Sequence[str]], now: float) -> float | None:
    """The page's lifetime its response states, seconds: ``Cache-Control:
    max-age`` (``s-maxage`` is for shared caches, ignored), else ``Expires``
    minus ``Date`` (or ``now``). Header names lowercased, as the spider
    records them.

    >>> cache_hint({"cache-control": ["public, max-age=600"]}, 0)
    600.0
    >>> cache_hint({"expires": ["Thu, 01 Jan 1970 01:00:00 GMT"]}, 0)
    3600.0
    >>> cache_hint({"cache-control": ["no-cache"]}, 0) is None
    True
    """
    for value in headers.get("cache-control", ()):
        for directive in value.split(","):
            name, _, arg = directive.strip().partition("=")
            if name.lower() == "max-age":
                with contextlib.suppress(ValueError):
                    return float(int(arg.strip().strip('"')))
    expires = headers.get("expires")
    if expires:
        try:
            exp = parsedate_to_datetime(expires[0]).timestamp()
            date = headers.get("date")
            base = parsedate_to_datetime(date[0]).timestamp() if date else now
        except (TypeError, ValueError, IndexError):
            return None
        return max(0.0, exp - base)
    return None


def changefreq_hint(changefreq: str | None, bounds: Bounds) -> float | None:
    """A sitemap ``<changefreq>`` in seconds.

    >>> b = Bounds(60, 3600, 86400)
    >>> [changefreq_hint(f, b) for f in ("daily", "always", "x")]
    [86400.0, 60, None]
    """
    value = (changefreq or "").strip().lower()
    if value == "always":
        return bounds.min
    if value == "never":
        return bounds.max
    return CHANGEFREQ.get(value)


@dataclass
class Record:
    """What the schedule keeps per URL, and a revisit carries in its meta.

    >>> r = Record(600.0, '"x"', None, "ab")
    >>> Record.from_json(r.to_json()) == r
    True
    """

    interval: float
    etag: str | None = None
    last_modified: str | None = None
    content_hash: str | None = None
    history: History = History()

    def to_json(self) -> str:
        return json.dumps(self.fields(), separators=(",", ":"))

    def fields(self) -> list[Any]:
        h = self.history
        return [self.interval, self.etag, self.last_modified, self.content_hash,
                h.visits, h.changes, round(h.observed, 3)]  # fmt: skip

    @classmethod
    def from_fields(cls, fields: Sequence[Any]) -> Record:
        """From :meth:`fields`; a record written before the history was kept
        has four fields (its history starts empty)."""
        interval, etag, modified, chash, *rest = fields
        history = History()
        if rest:
            history = History(int(rest[0]), int(rest[1]), float(rest[2]))
        return cls(float(interval), etag, modified, chash, history)

    @classmethod
    def from_json(cls, data: str | bytes) -> Record:
        fields = json.loads(data)
        if not isinstance(fields, list):
            raise ValueError("a record is a JSON list")
        return cls.from_fields(fields)


def revisit_request(url: str, record: Record | None) -> Request:
    """The request that revisits ``url``: conditional on the validators of
    its last fetch, past the dupefilter, with ``304`` let through."""
    headers: dict[str, str] = {}
    if record is not None and record.etag:
        headers["If-None-Match"] = record.etag
    if record is not None and record.last_modified:
        headers["If-Modified-Since"] = record.last_modified
    meta: dict[str, Any] = {"handle_httpstatus_list": [304]}
    if record is not None:
        meta[RECRAWL_RECORD] = record.fields()
    return Request(url, headers=headers, meta=meta, dont_filter=True)


def _first(headers: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = headers.get(name)
    return values[0] if values else None


def next_visit(
    item: Any,
    policy: Callable[[Visit, Bounds], float],
    bounds: Bounds,
    now: float,
) -> tuple[str, Record] | None:
    """(url, record of its next visit) from a stored item, or None for an
    item that is not a page. Reads the item's ``url``, ``status``,
    ``content_hash``, ``headers`` and ``recrawl`` (the previous visit's
    record, from the request meta) attributes."""
    url = getattr(item, "url", None)
    if not isinstance(url, str):
        return None
    status = int(getattr(item, "status", 0) or 0)
    headers: Mapping[str, Sequence[str]] = getattr(item, "headers", None) or {}
    previous = getattr(item, RECRAWL_RECORD, None)
    prev = Record.from_fields(previous) if isinstance(previous, list) else None
    chash = getattr(item, "content_hash", None)
    changed: bool | None = None
    if prev is not None:
        if status == 304:
            changed = False
        elif 200 <= status < 300 and chash is not None and prev.content_hash:
            changed = chash[:HASH_CHARS] != prev.content_hash[:HASH_CHARS]
    hint = cache_hint(headers, now)
    if hint is None:
        hint = changefreq_hint(getattr(item, "changefreq", None), bounds)
    history = prev.history.add(prev.interval, changed) if prev else History()
    visit = Visit(prev.interval if prev else None, changed, status, hint, history)
    interval = bounds.clamp(float(policy(visit, bounds)))
    if 200 <= status < 300:
        return url, Record(
            interval,
            _first(headers, "etag"),
            _first(headers, "last-modified"),
            chash[:HASH_CHARS] if chash else None,
            history,
        )
    # Not modified (the validators and the content of the last 200 hold), or
    # a failure (keep what the last good fetch left, for the next revisit).
    if prev is not None:
        return url, Record(
            interval, prev.etag, prev.last_modified, prev.content_hash, history
        )
    return url, Record(interval)


class RecrawlSchedule:
    """The recrawl schedule of one crawl in Redis (the two scripts above)."""

    def __init__(self, client: aredis.Redis, prefix: str) -> None:
        self.client = client
        self.keys = FrontierKeys(prefix)
        self._schedule = script(client, SCHEDULE_LUA)
        self._claim = script(client, CLAIM_LUA)
        self._park = script(client, PARK_LUA)
        self._load = script(client, LOAD_LUA)

    async def schedule(self, entries: Iterable[tuple[str, Record]]) -> int:
        args: list[Any] = []
        for url, record in entries:
            args += [url, int(record.interval * 1000), record.to_json()]
        if not args:
            return 0
        keys = [self.keys.recrawl, self.keys.recrawl_data]
        return int(await self._schedule(keys=keys, args=args))

    async def claim(self, count: int, hold_ms: int) -> list[tuple[str, Record | None]]:
        keys = [self.keys.recrawl, self.keys.recrawl_data]
        res: list[Any] = await self._claim(keys=keys, args=[count, hold_ms])
        out: list[tuple[str, Record | None]] = []
        for i in range(0, len(res), 2):
            url, data = res[i].decode(), res[i + 1]
            out.append((url, _record_or_none(url, data)))
        return out

    async def park(self, urls: Sequence[str]) -> int:
        if not urls:
            return 0
        keys = [self.keys.recrawl, self.keys.recrawl_data]
        return int(await self._park(keys=keys, args=list(urls)))

    async def load(self, entries: Iterable[tuple[str, int, str]]) -> int:
        args: list[Any] = []
        for url, due, record in entries:
            args += [url, due, record]
        if not args:
            return 0
        keys = [self.keys.recrawl, self.keys.recrawl_data]
        return int(await self._load(keys=keys, args=args))

    async def now_ms(self) -> int:
        """Redis ``TIME`` in ms: the clock of every due time."""
        seconds, micros = await self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def size(self) -> int:
        return int(await self.client.zcard(self.keys.recrawl))


def _record_or_none(url: str, data: bytes | None) -> Record | None:
    """A stored record, or None when there is none or it is not one (written
    by something else: the revisit then goes out unconditional, and its
    store rewrites a good record).

    >>> _record_or_none("u", b'[1, null, null, null]').interval
    1.0
    >>> _record_or_none("u", b"{oops") is None
    True
    """
    if not data:
        return None
    try:
        return Record.from_json(data)
    except (ValueError, TypeError):
        logger.warning("Ignoring a malformed recrawl record of %s: %r", url, data[:200])
        return None


def bounds_from_settings(settings: Any) -> Bounds:
    bounds = Bounds(
        settings.getfloat("RECRAWL_MIN_INTERVAL"),
        settings.getfloat("RECRAWL_DEFAULT_INTERVAL"),
        settings.getfloat("RECRAWL_MAX_INTERVAL"),
        settings.getfloat("RECRAWL_GIVE_UP_INTERVAL"),
    )
    if not bounds.min <= bounds.default <= bounds.max:
        raise SettingsError(
            "RECRAWL_MIN_INTERVAL <= RECRAWL_DEFAULT_INTERVAL <= "
            f"RECRAWL_MAX_INTERVAL does not hold: {bounds}"
        )
    return bounds


class Recrawler:
    """The continuous-crawl extension (the webcrawl add-on enables it when
    ``RECRAWL_ENABLED``): schedules each stored page's next visit and feeds
    due revisits to the engine (module docstring).

    A spider may define ``revisit_request(request) -> Request`` to complete a
    revisit (the web spider adds its errback, so a failed revisit is recorded
    and its lease ends like any page's).

    A continuous crawl runs as a service: an idle spider is kept open (the
    next revisit is due later), whatever ``MAX_IDLE_TIME_BEFORE_CLOSE`` says;
    ``CLOSESPIDER_TIMEOUT`` or a signal ends it.

    Stats: ``recrawl/scheduled`` (next visits written), ``recrawl/revisits``
    (due URLs claimed), ``recrawl/conditional`` (revisits with a validator);
    with a schedule store, ``recrawl/parked`` (next visits written to it)
    and ``recrawl/loaded`` (moved from it into Redis).
    """

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        config.require(s, defaults)
        if not s.getbool("RECRAWL_ENABLED"):
            raise NotConfigured("RECRAWL_ENABLED is off")
        self.crawler = crawler
        self.bounds = bounds_from_settings(s)
        self.policy: Callable[[Visit, Bounds], float] = load_object(
            s.get("RECRAWL_POLICY")
        )
        self.batch_size = s.getint("RECRAWL_BATCH_SIZE")
        self.poll = s.getfloat("RECRAWL_POLL_INTERVAL")
        hold = max(self.bounds.min, s.getfloat("FRONTIER_LEASE_TIMEOUT"))
        self.hold_ms = int(hold * 1000)
        self.window_ms = int(s.getfloat("RECRAWL_WINDOW") * 1000)
        path = s.get("RECRAWL_SCHEDULE_STORE") or ""
        self.store: ScheduleStore | None = (
            build_from_crawler(load_object(path), crawler) if path else None
        )
        # The store's blocking calls, one at a time, off the reactor thread.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="recrawl-store")
        self._refill_due = 0.0  # monotonic time of the next refill
        self.schedule: RecrawlSchedule | None = None
        self._out: list[tuple[str, Record]] = []
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        crawler.signals.connect(self._opened, signal=signals.spider_opened)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)
        crawler.signals.connect(self._stored, signal=items_stored)
        crawler.signals.connect(self._idle, signal=signals.spider_idle)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def _opened(self, spider: Any) -> None:
        self.schedule = RecrawlSchedule(async_client(self.crawler), spider.name)
        self._task = asyncio.ensure_future(self._run())

    async def _closed(self, spider: Any) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        transient = (*TRANSIENT_REDIS_ERRORS, ConnectionError, TimeoutError)
        with contextlib.suppress(*transient):
            await self._flush()
        if self.schedule is not None:
            await self.schedule.client.aclose()
        if self.store is not None:
            await self._in_thread(self.store.close)
        self._executor.shutdown(wait=False)

    async def _in_thread(self, call: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, functools.partial(call, *args)
        )

    def _idle(self) -> None:
        raise DontCloseSpider

    def _stored(self, items: list[Any]) -> None:
        now = time.time()
        for item in items:
            entry = next_visit(item, self.policy, self.bounds, now)
            if entry is not None:
                self._out.append(entry)

    async def _flush(self) -> None:
        assert self.schedule is not None
        while self._out:
            batch = self._out[:500]
            if self.store is None:
                await self.schedule.schedule(batch)
            else:
                await self._split(batch)
            del self._out[: len(batch)]
            self._inc("recrawl/scheduled", len(batch))

    async def _split(self, batch: list[tuple[str, Record]]) -> None:
        """Next visits within the window into Redis, the others into the
        schedule store (written there before they leave Redis)."""
        assert self.schedule is not None and self.store is not None
        near = [(u, r) for u, r in batch if r.interval * 1000 <= self.window_ms]
        far = [(u, r) for u, r in batch if r.interval * 1000 > self.window_ms]
        await self.schedule.schedule(near)
        if far:
            now = await self.schedule.now_ms()
            entries = [(u, now + int(r.interval * 1000), r.to_json()) for u, r in far]
            await self._in_thread(self.store.put, entries)
            await self.schedule.park([u for u, _ in far])
            self._inc("recrawl/parked", len(far))

    async def _refill(self) -> None:
        """Move what falls due within the window from the store into Redis
        (every quarter window; until drained, at every poll)."""
        assert self.schedule is not None and self.store is not None
        if time.monotonic() < self._refill_due:
            return
        until = await self.schedule.now_ms() + self.window_ms
        limit = max(self.batch_size, 100)
        for _ in range(REFILL_BATCHES):
            entries = await self._in_thread(self.store.due, until, limit)
            await self.schedule.load(entries)
            await self._in_thread(self.store.delete, [(u, d) for u, d, _ in entries])
            self._inc("recrawl/loaded", len(entries))
            if len(entries) < limit:
                self._refill_due = time.monotonic() + self.window_ms / 4000
                return

    async def _run(self) -> None:
        while not self._closing:
            try:
                await self._flush()
                if self.store is not None:
                    await self._refill()
                await self._feed()
            except TRANSIENT_REDIS_ERRORS as exc:
                logger.warning("Recrawl schedule unreachable (%s)", type(exc).__name__)
            except (ConnectionError, TimeoutError) as exc:
                # The schedule store's transient failures (ScheduleStore):
                # the batch stays in _out, the window waits; both retried.
                logger.warning("Recrawl schedule store unreachable (%s)", exc)
            except ResponseError as exc:
                # Redis refused a script (out of memory, a key of another
                # type): log it and go on polling, as the scheduler does.
                logger.error("Recrawl schedule refused by Redis: %s", exc)
            await asyncio.sleep(self.poll)

    async def _feed(self) -> None:
        assert self.schedule is not None
        engine = self.crawler.engine
        spider = self.crawler.spider
        if engine is None or spider is None:
            return
        complete = getattr(spider, "revisit_request", None)
        claimed = await self.schedule.claim(self.batch_size, self.hold_ms)
        for url, record in claimed:
            request = revisit_request(url, record)
            if complete is not None:
                request = complete(request)
            engine.crawl(request)
            if request.headers:
                self._inc("recrawl/conditional")

        if claimed:
            self._inc("recrawl/revisits", len(claimed))

    def _inc(self, key: str, count: int = 1) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(key, count)
