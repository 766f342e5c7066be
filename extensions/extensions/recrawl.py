"""Continuous crawling: a next-visit time per stored page, revisits with
conditional GET, a revisit interval per URL from its estimated change rate,
and the price of a fetch measured from what the fleet fetches.

Settings read (defaults in :mod:`extensions.settings.defaults`): ``RECRAWL_ENABLED``,
``RECRAWL_MIN_INTERVAL``, ``RECRAWL_DEFAULT_INTERVAL``,
``RECRAWL_MAX_INTERVAL``, ``RECRAWL_REVISIT_SHARE``, ``RECRAWL_POLICY``,
``RECRAWL_BATCH_SIZE``, ``RECRAWL_POLL_INTERVAL``, ``RECRAWL_SCHEDULE_STORE``,
``RECRAWL_WINDOW``, ``FRONTIER_LEASE_TIMEOUT``; ``REDIS_URL`` through
:mod:`extensions.connection`. ``RECRAWL_GIVE_UP_INTERVAL`` (a hand-set price,
gone) is refused.

How a page comes back:

1. Its fetch is stored; the store's acknowledgement
   (:data:`extensions.signals.items_stored`) reaches :class:`Recrawler`,
   which reads from each item what the fetch learned (``url``, ``status``,
   ``content_hash``, response ``headers``, a sitemap's ``lastmod``) and what
   the previous visit left in the request (``recrawl``: the
   :data:`extensions.meta.RECRAWL_RECORD` record and due time the spider
   copies into the item): :func:`next_visit` updates the page's change
   history (:class:`~extensions.utils.freshness.History`), estimates its rate and
   asks the policy for the next interval. One script writes the next-visit
   time, the record, the fleet's freshness figures and the window's
   counters (:data:`SCHEDULE_LUA`).
2. Every ``RECRAWL_POLL_INTERVAL`` seconds one script claims the due URLs
   (:data:`CLAIM_LUA`): it pushes their next-visit time a hold ahead in the
   same step (the longer of ``RECRAWL_MIN_INTERVAL`` and
   ``FRONTIER_LEASE_TIMEOUT``), so two workers never both take one URL, and a
   worker that dies before its claimed URLs reach the frontier's write-ahead
   log only delays those pages by the hold instead of losing them. A revisit
   still waiting in its host's queue when the hold ends is claimed again; its
   second copy is the same queue member and is not queued twice.
3. The revisit request (``dont_filter``: the Bloom filter marked the URL seen
   on discovery, and a seen URL must stay revisitable) carries the record and
   its due time in its meta and the validators as ``If-None-Match`` /
   ``If-Modified-Since``, and goes to ``engine.crawl``: the scheduler writes
   it ahead and pushes it into its host's queue exactly as a discovered URL,
   so the host schedule, robots.txt, the per-host lock and back-off govern it
   as any other request; it comes after the host's new URLs
   (:data:`REVISIT_PRIORITY`). ``304`` is in its ``handle_httpstatus_list``:
   not-modified is an outcome, not an error.

Every window bucket, each worker reads the fleet's figures (:func:`figures`)
and solves the price of a fetch (:func:`~extensions.utils.freshness.reprice`).

Redis layout (:class:`extensions.keys.FrontierKeys`): ``recrawl`` ZSET
url -> next visit (ms, Redis ``TIME``); ``recrawl:data`` HASH url -> JSON
record (:class:`Record`); ``recrawl:stats`` HASH: known pages per rate bin
(``b<n>``), the scheduled revisit rate, the summed expected freshness, the
bucket length, the last price and target, counters since the start;
``recrawl:w:<n>`` HASH: the counters of window bucket n (expiring). The
validators live in Redis, not in the store, so building a revisit reads no
store on the hot path.

The store-side schedule (``RECRAWL_SCHEDULE_STORE``, a class path built with
``build_from_crawler``, satisfying :class:`ScheduleStore`; the page store's
is :class:`pipelines.stores.schedule.PageStoreSchedule`): a next visit more
than ``RECRAWL_WINDOW`` ahead is written to the store (url, due time, record)
and removed from Redis by the schedule script; every quarter window, each
worker moves what falls due within the window back into Redis with its due
time (:data:`LOAD_LUA`: a URL already there keeps its own, so refills that
meet are harmless) and deletes it from the store, only where the store still
holds that due time (a page rescheduled meanwhile keeps its new one). Redis
then holds the window only. Due times are Redis ``TIME`` in both places. A
worker that dies between two of these steps leaves a URL in both places: it
is revisited once more than needed, never lost.

The policy (``RECRAWL_POLICY``, a dotted path like
``FRONTIER_PRIORITY_FUNCTION``) is ``policy(visit, bounds) -> seconds``;
:func:`budgeted_interval` (Cho and Garcia-Molina's optimal revisit interval
for each page's estimated change rate, at the measured price) is the
default, :func:`adaptive_interval` (Nutch's steps) and
:func:`uniform_interval` (the baseline) the others the freshness benchmark
compares it with.
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
from dataclasses import dataclass, field, replace
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from redis.exceptions import ResponseError
from scrapy import Request, signals
from scrapy.exceptions import DontCloseSpider, NotConfigured
from scrapy.utils.misc import build_from_crawler, load_object

from extensions.connection import TRANSIENT_REDIS_ERRORS, async_client
from extensions.connection.scripts import LUA_NOW_MS, script, server_now_ms
from extensions.keys import FrontierKeys
from extensions.meta import RECRAWL_RECORD
from extensions.settings import config, defaults
from extensions.settings.config import SettingsError
from extensions.signals import items_stored
from extensions.utils.freshness import (
    Bounds,
    Demand,
    History,
    Priors,
    Window,
    bin_rate,
    expected_freshness,
    http_date,
    learned,
    optimal_interval,
    rate_bin,
    relative_lateness,
    reprice,
    w3c_date,
    window_of,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Container, Iterable, Mapping, Sequence

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
# The budgeted policy shortens an interval by at most MAX_STEP a visit and
# lengthens it by at most MAX_STEP_UP: one visit says little (an unchanged
# one estimates a rate of 0), so a page's interval walks towards its target
# as evidence grows; it may walk away faster than towards (a page that stays
# unchanged costs a fetch per step: on a saturated fleet the static pages'
# climb to the maximum is what the changing ones wait for; 4 instead of 2
# also did slightly better on the benchmark). A new page's first interval
# may be as short as its target says, but at most MAX_STEP above its
# default: a wrong "fast" costs a few fetches, a wrong "slow" leaves the
# page stale for long.
MAX_STEP = 2.0
MAX_STEP_UP = 4.0
# A new page's price before the fleet has measured one, as a share of
# RECRAWL_DEFAULT_INTERVAL: a page changing once per default interval is then
# revisited about every default interval.
START_PRICE_SHARE = 0.26
# The window the fleet's revisits are measured over (window_seconds), in
# WINDOW_BUCKETS buckets (one Redis HASH each, expiring after the window).
WINDOW_INTERVALS = 10
MIN_WINDOW_S = 30.0
WINDOW_BUCKETS = 6
# A revisit's request.priority: below every page the crawl discovers (the
# frontier's scoring gives a page 0-105 by depth and kind, plus this), so a
# host's new URLs go first and the revisits take what capacity is left; the
# measured price then spends that. At the same priority as a seed (a revisit
# has no depth), revisits of pages just found starved the crawl's discovery.
REVISIT_PRIORITY = -100
# Revisits of a host among themselves: + up to this much by the chance their
# page changed since its last visit.
REVISIT_PRIORITY_SPAN = 10
# The chance of a change a revisit's priority assumes for a page seen once.
UNKNOWN_CHANGE_CHANCE = 0.5
# Seconds a Last-Modified may lie ahead of the response's Date (clock skew)
# and still date a change.
DATE_SLACK = 60.0

# Fields of the recrawl stats HASH (besides "b<bin>": known pages per rate
# bin): the summed scheduled revisit rate (1/s) and expected freshness, the
# window's bucket length, and the price and target the workers last solved.
STAT_SCHEDULED = "scheduled"
STAT_FRESHNESS = "freshness"
STAT_BUCKET_MS = "bucket_ms"
STAT_PRICE = "price"
STAT_TARGET = "target"
# Counters of a window bucket (and their totals in the stats HASH).
COUNTERS = ("stored", "revisits", "changed", "not_modified", "timed", "late_milli")

# schedule: set the next visit of pages just stored (or take it out of Redis:
# it waits in the schedule store), count each page once in the fleet's
# freshness figures, and add the batch's outcomes to the window bucket.
# The figures move only when Redis still holds the record the visit started
# from: a second fetch of one claim, or a page rescheduled meanwhile, writes
# its record but changes no figure twice.
# KEYS[1] recrawl ZSET, KEYS[2] recrawl data HASH, KEYS[3] recrawl stats
# HASH, KEYS[4] the window bucket HASH of now (named by the caller), KEYS[5]
# claimed HASH (the URL's claim ends)
# ARGV[1] bucket TTL (s), ARGV[2] bucket length (ms), ARGV[3] n counters,
# then n (name, count) pairs, then 8 fields per page: url, delay ms ('': park
# it), record JSON, previous record JSON ('': none), old bin ('': not
# counted), new bin ('': none), scheduled-rate change, expected-freshness
# change.
# Returns the number of pages scheduled or parked.
SCHEDULE_LUA = (
    LUA_NOW_MS
    + """
local now = now_ms()
local n = tonumber(ARGV[3])
for i = 0, n - 1 do
  local name, count = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
  redis.call('HINCRBY', KEYS[4], name, count)
  redis.call('HINCRBY', KEYS[3], name, count)
end
if n > 0 then redis.call('EXPIRE', KEYS[4], ARGV[1]) end
redis.call('HSET', KEYS[3], 'bucket_ms', ARGV[2])
local pages = 0
for i = 4 + 2 * n, #ARGV, 8 do
  local url = ARGV[i]
  local current = redis.call('HGET', KEYS[2], url) or ''
  redis.call('HDEL', KEYS[5], url)
  if current == ARGV[i + 3] then
    if ARGV[i + 4] ~= '' then
      redis.call('HINCRBY', KEYS[3], 'b' .. ARGV[i + 4], -1)
    end
    if ARGV[i + 5] ~= '' then
      redis.call('HINCRBY', KEYS[3], 'b' .. ARGV[i + 5], 1)
    end
    redis.call('HINCRBYFLOAT', KEYS[3], 'scheduled', ARGV[i + 6])
    redis.call('HINCRBYFLOAT', KEYS[3], 'freshness', ARGV[i + 7])
  end
  if ARGV[i + 1] == '' then
    redis.call('ZREM', KEYS[1], url)
    redis.call('HDEL', KEYS[2], url)
  else
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[i + 1]), url)
    redis.call('HSET', KEYS[2], url, ARGV[i + 2])
  end
  pages = pages + 1
end
return pages
"""
)

# claim: take up to `count` due URLs, pushing their next visit `hold` ms
# ahead in the same step (the claim: no other worker takes them; a lost
# revisit comes due again after `hold`). A URL's first claim keeps its due
# time in the claimed HASH until its next visit is scheduled: a claim after
# the hold hands out that same time, so the revisit request it makes is the
# one still queued (one queue member, not a second copy).
# KEYS[1] recrawl ZSET, KEYS[2] recrawl data HASH, KEYS[3] claimed HASH
# ARGV[1] count, ARGV[2] hold ms
# Returns {url1, record1, due1, url2, ...} (record: JSON or false; due: the
# ms the URL was first due at).
CLAIM_LUA = (
    LUA_NOW_MS
    + """
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES',
                       'LIMIT', 0, tonumber(ARGV[1]))
local out = {}
for i = 1, #due, 2 do
  local url = due[i]
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), url)
  local first = redis.call('HGET', KEYS[3], url)
  if not first then
    first = due[i + 1]
    redis.call('HSET', KEYS[3], url, first)
  end
  out[#out + 1] = url
  out[#out + 1] = redis.call('HGET', KEYS[2], url)
  out[#out + 1] = first
end
return out
"""
)

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
# Seconds closing waits for the loop's step in progress before cancelling it.
CLOSE_WAIT = 10.0


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
class Visit:
    """What one fetch of a page tells the policy.

    ``interval``: the interval that led to this visit (None: first visit).
    ``changed``: the content differs from the previous visit's (None: first
    visit, or a failed fetch: nothing to compare). ``hint``: what the server
    says about the page's lifetime, seconds (None: no hint). ``history``: the
    page's change evidence, this visit included. ``rate``: its estimated
    changes per second from every signal (history, dates, pooled prior).
    """

    interval: float | None
    changed: bool | None
    status: int
    hint: float | None = None
    history: History = field(default_factory=History)
    rate: float = 0.0


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
    """The optimal interval (:func:`~extensions.utils.freshness.optimal_interval`)
    for the page's estimated rate (``visit.rate``) at the fleet's measured
    price (``bounds.price``), moving at most x4 / x0.5 a visit
    (:data:`MAX_STEP_UP`, :data:`MAX_STEP`), within the bounds. With spare
    capacity (a low price) changing pages are chased to the minimum
    interval; under pressure the
    fastest are let go first; static pages drift to the maximum. A new page
    starts at its target, but not above :data:`MAX_STEP` times its hint (or
    the default), and a failed one at that bound; a failed revisit
    (nothing compared) lengthens the interval as in
    :func:`adaptive_interval`.

    >>> b = Bounds(60, 3600, 86400, price=600)
    >>> budgeted_interval(Visit(None, None, 200), b)  # nothing known yet
    7200.0
    >>> round(budgeted_interval(Visit(None, None, 200, rate=1 / 6000), b))
    3160
    >>> round(budgeted_interval(Visit(1500.0, True, 200, rate=1 / 600), b))  # let go
    2937
    >>> budgeted_interval(Visit(1000.0, False, 304, rate=1e-7), b)  # static
    4000.0
    >>> budgeted_interval(Visit(1000.0, None, 500, rate=1 / 3000), b)
    1400.0
    >>> budgeted_interval(Visit(None, None, 0, rate=1 / 6000), b)  # failed
    7200.0
    """
    target = optimal_interval(visit.rate, bounds.price)
    if visit.interval is None:
        base = visit.hint if visit.hint is not None else bounds.default
        if not 200 <= visit.status < 300:
            # A failed first fetch (an error, a page robots.txt forbids):
            # nothing says the page changes; its pool's rate is not its own.
            return bounds.clamp(base * MAX_STEP)
        return bounds.clamp(min(target, base * MAX_STEP))
    if visit.changed is None:
        return bounds.clamp(visit.interval * (1 + INC_RATE))
    step = min(max(target, visit.interval / MAX_STEP), visit.interval * MAX_STEP_UP)
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


def _compact(x: float) -> float | int:
    """A number as the record keeps it: whole seconds from 100 s up, else
    hundredths (the record is in Redis for every URL in the window).

    >>> _compact(86400.0), _compact(3.14159), _compact(_compact(1234.5))
    (86400, 3.14, 1234)
    """
    return round(x) if abs(x) >= 100 else round(x, 2)


@dataclass
class Record:
    """What the schedule keeps per URL, and a revisit carries in its meta:
    the interval, the validators, the content hash's first
    :data:`HASH_CHARS` digits, the change history and the rate bin the page
    is counted in (:class:`~extensions.utils.freshness.Demand`; None: not counted,
    a record written before the bins).

    >>> r = Record(600.0, "W/1", None, "ab", History(2, 1, 1200.0, 600.0, 1), -40)
    >>> r.to_json()
    '[600,"W/1",null,"ab",2,1,600,-40,1,1200]'
    >>> Record.from_json(r.to_json()) == r
    True
    """

    interval: float
    etag: str | None = None
    last_modified: str | None = None
    content_hash: str | None = None
    history: History = field(default_factory=History)
    bin: int | None = None

    def to_json(self) -> str:
        return json.dumps(self.fields(), separators=(",", ":"))

    def fields(self) -> list[Any]:
        """The record as a JSON list. The sum of the gaps (``observed``) is
        kept only for a page with blind changes (the estimator needs their
        mean gap), and read back as the exposure for the others: a page
        that dates its changes saves 10 bytes of Redis."""
        h = self.history
        out = [_compact(self.interval), self.etag, self.last_modified,
               self.content_hash, h.visits, h.changes, _compact(h.exposure),
               self.bin]  # fmt: skip
        if h.blind:
            out += [h.blind, _compact(h.observed)]
        return out

    @classmethod
    def from_fields(cls, fields: Sequence[Any]) -> Record:
        """From :meth:`fields`; a record of four fields (before the history)
        starts an empty history, one of seven (visits, changes, observed:
        before dates were kept) reads its changes as blind ones."""
        interval, etag, modified, chash, *rest = fields
        history, bin_ = History(), None
        if len(rest) == 3:
            n, x, observed = int(rest[0]), int(rest[1]), float(rest[2])
            unchanged = (n - x) * observed / n if n else 0.0
            history = History(n, x, observed, unchanged, x)
        elif len(rest) >= 4:
            n, x, exposure, bin_ = int(rest[0]), int(rest[1]), float(rest[2]), rest[3]
            blind, observed = 0, exposure
            if len(rest) >= 6:
                blind, observed = int(rest[4]), float(rest[5])
            history = History(n, x, observed, exposure, blind)
            bin_ = int(bin_) if bin_ is not None else None
        return cls(float(interval), etag, modified, chash, history, bin_)

    @classmethod
    def from_json(cls, data: str | bytes) -> Record:
        fields = json.loads(data)
        if not isinstance(fields, list):
            raise ValueError("a record is a JSON list")
        return cls.from_fields(fields)


@dataclass
class Claimed:
    """A due URL as the claim hands it out: its record as Redis holds it
    (the parsed JSON list; None: none, or not a record) and its due time."""

    url: str
    fields: list[Any] | None
    due_ms: int | None = None

    @property
    def record(self) -> Record | None:
        return Record.from_fields(self.fields) if self.fields is not None else None


def expected_freshness_at(rate: float, interval: float) -> float:
    """The chance a page of ``rate`` is unchanged ``interval`` seconds after
    a visit (Poisson: ``e^-(rate interval)``).

    >>> expected_freshness_at(0.0, 10.0), round(expected_freshness_at(0.1, 10.0), 3)
    (1.0, 0.368)
    """
    return math.exp(-rate * interval)


def revisit_request(url: str, claimed: Claimed | Record | None) -> Request:
    """The request that revisits ``url``: conditional on the validators of
    its last fetch, past the dupefilter, with ``304`` let through, after the
    new URLs of its host (:data:`REVISIT_PRIORITY`). Its meta carries the
    record as Redis held it and, last, ``{"due": ms}``: when the visit was
    due (Redis time), which tells how late it came."""
    if isinstance(claimed, Record):
        claimed = Claimed(url, claimed.fields())
    record = claimed.record if claimed is not None else None
    headers: dict[str, str] = {}
    if record is not None and record.etag:
        headers["If-None-Match"] = record.etag
    if record is not None and record.last_modified:
        headers["If-Modified-Since"] = record.last_modified
    meta: dict[str, Any] = {"handle_httpstatus_list": [304]}
    if claimed is not None and claimed.fields is not None:
        due = {"due": claimed.due_ms} if claimed.due_ms is not None else {}
        meta[RECRAWL_RECORD] = [*claimed.fields, due]
    priority = REVISIT_PRIORITY
    if record is not None and record.bin is not None:
        # The likelier the page changed since its last visit, the sooner:
        # under pressure a host's queue serves the changing pages first. A
        # page seen once says little (its first look may predate its first
        # change): it counts as even odds, or it could starve behind pages
        # known to change and never be found to change itself.
        changed = 1 - expected_freshness_at(bin_rate(record.bin), record.interval)
        if record.history.visits <= 1:
            changed = max(changed, UNKNOWN_CHANGE_CHANCE)
        priority += round(REVISIT_PRIORITY_SPAN * changed)
    return Request(url, headers=headers, meta=meta, dont_filter=True, priority=priority)


def _first(headers: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = headers.get(name)
    return values[0] if values else None


@dataclass
class Planned:
    """A page's next visit and what its fetch adds to the fleet's figures.

    ``prev_json``: the record the visit started from, exactly as Redis holds
    it ("" for none); ``old_bin``: the rate bin it was counted in (None: not
    counted); ``scheduled`` and ``freshness``: the change of the summed
    scheduled revisit rate (1/s) and expected freshness; ``delay``: seconds
    from the schedule write to the next visit (the interval less the time
    since the fetch); ``outcome``: first, changed, unchanged, not_modified or
    failed; ``late``: the revisit's relative lateness (None: not timed)."""

    url: str
    record: Record
    prev_json: str = ""
    old_bin: int | None = None
    scheduled: float = 0.0
    freshness: float = 0.0
    delay: float = 0.0
    outcome: str = "first"
    late: float | None = None


def _changed(
    status: int, prev: Record, chash: str | None, etag: str | None, modified: str | None
) -> bool | None:
    """Whether the page changed since ``prev``: a 304 says no; a 2xx is
    judged by its content hash, else its ETag, else its Last-Modified;
    anything else (a failure) says nothing."""
    if status == 304:
        return False
    if not 200 <= status < 300:
        return None
    if chash is not None and prev.content_hash:
        return chash[:HASH_CHARS] != prev.content_hash[:HASH_CHARS]
    if etag and prev.etag:
        return etag != prev.etag
    if modified and prev.last_modified:
        return modified != prev.last_modified
    return None


def next_visit(
    item: Any,
    policy: Callable[[Visit, Bounds], float],
    bounds: Bounds,
    now: float,
    priors: Priors | None = None,
    clock_offset: float = 0.0,
    poll: float = 0.0,
) -> Planned | None:
    """The next visit of a stored item's page, or None for an item that is
    not a page. Reads the item's ``url``, ``status``, ``content_hash``,
    ``headers``, ``fetched_at``, ``lastmod`` (a sitemap's) and ``recrawl``
    (the record and due time the revisit carried) attributes.

    What the fetch tells the page's history: changed or not (a 304, the
    content hash, else the ETag, else Last-Modified), and when it changed
    when the server dates it (a Last-Modified later than the record's, read
    against the response's Date); a new page's Last-Modified (or sitemap
    ``<lastmod>``) dates its last change. ``priors`` pools the evidence
    over the URL's directory and host; ``clock_offset`` is this machine's
    clock minus Redis's (seconds), ``poll`` the seconds a due revisit may
    wait for the claim without being late."""
    url = getattr(item, "url", None)
    if not isinstance(url, str):
        return None
    status = int(getattr(item, "status", 0) or 0)
    headers: Mapping[str, Sequence[str]] = getattr(item, "headers", None) or {}
    fetched = float(getattr(item, "fetched_at", 0.0) or now)
    carried = getattr(item, RECRAWL_RECORD, None)
    fields, due_ms = None, None
    if isinstance(carried, list) and carried:
        fields = list(carried)
        if isinstance(fields[-1], dict):
            due_ms = fields.pop()["due"] if "due" in fields[-1] else None
    prev = Record.from_fields(fields) if fields else None
    chash = getattr(item, "content_hash", None)
    etag, modified = _first(headers, "etag"), _first(headers, "last-modified")
    server_now = http_date(_first(headers, "date")) or fetched
    changed_at = http_date(modified)
    if changed_at is not None and changed_at > server_now + DATE_SLACK:
        changed_at = None  # a date in the future: not a date to learn from
    hint = cache_hint(headers, now)
    late: float | None = None
    if prev is None:
        history = History()
        lastmod = w3c_date(getattr(item, "lastmod", None))
        dated = max((d for d in (changed_at, lastmod) if d is not None), default=None)
        if dated is not None and 200 <= status < 300:
            history = history.aged(server_now - dated, bounds.default * MAX_STEP)
        changed = None
        outcome = "first" if 200 <= status < 300 or status == 304 else "failed"
    else:
        gap = prev.interval
        if due_ms is not None:
            behind = (fetched - clock_offset) - due_ms / 1000
            gap = max(0.0, prev.interval + behind)
            late = relative_lateness(behind - poll, prev.interval)
        changed = _changed(status, prev, chash, etag, modified)
        since = None
        before = http_date(prev.last_modified)
        if (
            changed
            and changed_at is not None
            and (before is None or changed_at > before)
        ):
            since = server_now - changed_at
        history = prev.history.add(gap, changed, since)
        outcome = {None: "failed", True: "changed", False: "unchanged"}[changed]
        if status == 304:
            outcome = "not_modified"
    if priors is not None:
        priors.add(url, learned(prev.history if prev else History(), history))
    rate = history.rate(priors.prior(url) if priors is not None else (0.0, 0.0))
    visit = Visit(prev.interval if prev else None, changed, status, hint,
                  history, rate)  # fmt: skip
    interval = bounds.clamp(float(policy(visit, bounds)))
    new_bin = rate_bin(rate)
    if 200 <= status < 300:
        record = Record(interval, etag, modified, chash[:HASH_CHARS] if chash else None,
                        history, new_bin)  # fmt: skip
    elif prev is not None:
        # Not modified (the validators and the content of the last 200 hold),
        # or a failure (keep what the last good fetch left, for the next
        # revisit).
        record = Record(interval, prev.etag, prev.last_modified,
                        prev.content_hash, history, new_bin)  # fmt: skip
    else:
        record = Record(interval, history=history, bin=new_bin)
    scheduled = 1 / interval
    freshness = expected_freshness(bin_rate(new_bin), interval)
    old_bin = prev.bin if prev is not None else None
    if old_bin is not None and prev is not None:
        scheduled -= 1 / prev.interval
        freshness -= expected_freshness(bin_rate(old_bin), prev.interval)
    return Planned(
        url,
        record,
        prev_json=json.dumps(fields, separators=(",", ":")) if fields else "",
        old_bin=old_bin,
        scheduled=scheduled,
        freshness=freshness,
        delay=max(0.0, interval - max(0.0, now - fetched)),
        outcome=outcome,
        late=late,
    )


@dataclass
class Figures:
    """The fleet's freshness figures as Redis holds them (:func:`figures`):
    known pages by rate bin, the revisit rate the schedule asks for (1/s),
    the summed expected freshness, the last price and target the workers
    solved, the counters over the last window and since the crawl began."""

    demand: Demand
    scheduled: float
    freshness_sum: float
    window: Window
    totals: dict[str, float]
    price: float | None = None
    target: float | None = None

    @property
    def pages(self) -> int:
        return round(sum(self.demand.pages.values()))

    @property
    def freshness(self) -> float | None:
        """Estimated freshness of the store: the mean, over known pages, of
        the share of time each copy is fresh at its rate and interval."""
        return (
            min(1.0, max(0.0, self.freshness_sum / self.pages)) if self.pages else None
        )

    def shares(self) -> dict[str, float | None]:
        """Over the window: the share of revisits that found a change, and
        the share answered 304."""
        w = self.window
        if not w.revisits:
            return {"changed": None, "not_modified": None}
        return {"changed": round(w.changed / w.revisits, 4),
                "not_modified": round(w.not_modified / w.revisits, 4)}  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for ``scrapy status`` and the status page."""
        w = self.window
        return {
            "pages": self.pages,
            "estimated_freshness": (
                round(self.freshness, 4) if self.freshness is not None else None
            ),
            "scheduled_per_s": round(self.scheduled, 4),
            "price_s": round(self.price, 6) if self.price is not None else None,
            "target_per_s": round(self.target, 4) if self.target is not None else None,
            "window_s": round(w.seconds, 1),
            "window": {
                "stored": w.stored,
                "revisits": w.revisits,
                "changed": w.changed,
                "not_modified": w.not_modified,
                "lateness": round(w.lateness, 4),
            },
            **{f"{k}_share": v for k, v in self.shares().items()},
            "totals": {k: int(v) for k, v in self.totals.items()},
        }


class RecrawlSchedule:
    """The recrawl schedule of one crawl in Redis (the scripts above), and
    the fleet's freshness figures beside it."""

    def __init__(self, client: aredis.Redis, prefix: str) -> None:
        self.client = client
        self.keys = FrontierKeys(prefix)
        self._schedule = script(client, SCHEDULE_LUA)
        self._claim = script(client, CLAIM_LUA)
        self._load = script(client, LOAD_LUA)

    async def schedule(
        self,
        planned: Sequence[Planned],
        now_ms: int,
        bucket_ms: int,
        park: Container[str] = (),
    ) -> int:
        """Write the next visits (or park those in ``park``: they wait in
        the schedule store), count them in the figures and add their
        outcomes to the window bucket of ``now_ms`` (Redis time)."""
        if not planned:
            return 0
        counts = {name: 0 for name in COUNTERS}
        counts["stored"] = len(planned)
        for p in planned:
            if p.outcome != "first":
                counts["revisits"] += 1
            if p.outcome in ("changed", "not_modified"):
                counts[p.outcome] += 1
            if p.late is not None:
                counts["timed"] += 1
                counts["late_milli"] += round(p.late * 1000)
        pairs = [(k, v) for k, v in counts.items() if v]
        args: list[Any] = [WINDOW_BUCKETS * bucket_ms // 1000 + 60, bucket_ms,
                           len(pairs)]  # fmt: skip
        for name, count in pairs:
            args += [name, count]
        for p in planned:
            args += [
                p.url,
                "" if p.url in park else int(p.delay * 1000),
                p.record.to_json(),
                p.prev_json,
                "" if p.old_bin is None else p.old_bin,
                "" if p.record.bin is None else p.record.bin,
                repr(p.scheduled),
                repr(p.freshness),
            ]
        keys = [self.keys.recrawl, self.keys.recrawl_data, self.keys.recrawl_stats,
                self.keys.recrawl_window(now_ms // bucket_ms),
                self.keys.recrawl_claimed]  # fmt: skip
        return int(await self._schedule(keys=keys, args=args))

    async def claim(self, count: int, hold_ms: int) -> list[Claimed]:
        keys = [self.keys.recrawl, self.keys.recrawl_data, self.keys.recrawl_claimed]
        res: list[Any] = await self._claim(keys=keys, args=[count, hold_ms])
        out: list[Claimed] = []
        for i in range(0, len(res), 3):
            url = res[i].decode()
            out.append(Claimed(url, _fields_or_none(url, res[i + 1]),
                               int(float(res[i + 2]))))  # fmt: skip
        return out

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
        return await server_now_ms(self.client, self.keys.recrawl)

    async def size(self) -> int:
        return int(await self.client.zcard(self.keys.recrawl))

    async def publish(self, price: float, target: float) -> None:
        """Record the price and target this worker solved (for status)."""
        await self.client.hset(
            self.keys.recrawl_stats,
            mapping={STAT_PRICE: repr(price), STAT_TARGET: repr(target)},
        )


async def figures(client: aredis.Redis, prefix: str, now_ms: int) -> Figures:
    """The freshness figures of a crawl: the stats HASH and the window's
    buckets up to ``now_ms`` (Redis time). The window spans the last
    :data:`WINDOW_BUCKETS` buckets that exist (its first bucket counted from
    its start)."""
    keys = FrontierKeys(prefix)
    raw = await client.hgetall(keys.recrawl_stats)
    stats = {_text(k): _text(v) for k, v in raw.items()}
    bucket_ms = int(stats.get(STAT_BUCKET_MS) or 0)
    bins: dict[int, float] = {}
    totals: dict[str, float] = {}
    for name, value in stats.items():
        if name.startswith("b") and name[1:].lstrip("-").isdigit():
            bins[int(name[1:])] = max(0.0, float(value))
        elif name in COUNTERS:
            totals[name] = float(value)
    window = Window(0.0)
    if bucket_ms > 0:
        current = now_ms // bucket_ms
        numbers = list(range(current - WINDOW_BUCKETS + 1, current + 1))
        async with client.pipeline(transaction=False) as pipe:
            for n in numbers:
                pipe.hgetall(keys.recrawl_window(n))
            replies = await pipe.execute()
        buckets = {
            n: {k.decode(): float(v) for k, v in reply.items()}
            for n, reply in zip(numbers, replies, strict=True)
        }
        window = window_of(buckets, now_ms, bucket_ms, WINDOW_BUCKETS)

    def number(name: str) -> float | None:
        value = stats.get(name)
        return float(value) if value else None

    return Figures(
        Demand.from_counts(bins),
        max(0.0, number(STAT_SCHEDULED) or 0.0),
        number(STAT_FRESHNESS) or 0.0,
        window,
        totals,
        number(STAT_PRICE),
        number(STAT_TARGET),
    )


async def fleet_figures(client: aredis.Redis, prefix: str) -> Figures:
    """:func:`figures` now (Redis time): for ``scrapy status``, the fleet
    line and ``/metrics``."""
    now_ms = await server_now_ms(client, FrontierKeys(prefix).recrawl_stats)
    return await figures(client, prefix, now_ms)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _fields_or_none(url: str, data: bytes | None) -> list[Any] | None:
    """A stored record's JSON list, or None when there is none or it is not
    one (written by something else: the revisit then goes out
    unconditional, and its store rewrites a good record).

    >>> _fields_or_none("u", b'[1, null, null, null]')
    [1, None, None, None]
    >>> _fields_or_none("u", b"{oops") is None, _fields_or_none("u", b"[1]") is None
    (True, True)
    """
    if not data:
        return None
    try:
        fields = json.loads(data)
        if not isinstance(fields, list) or len(fields) < 4:
            raise ValueError("a record is a JSON list of 4 fields or more")
        Record.from_fields(fields)
    except (ValueError, TypeError):
        logger.warning("Ignoring a malformed recrawl record of %s: %r", url, data[:200])
        return None
    return fields


def bounds_from_settings(settings: Any) -> Bounds:
    """The interval bounds; the price starts at :data:`START_PRICE_SHARE` of
    the default interval until the fleet has measured one."""
    if settings.get("RECRAWL_GIVE_UP_INTERVAL") is not None:
        raise SettingsError(
            "RECRAWL_GIVE_UP_INTERVAL is gone: the price of a fetch is measured "
            "from the fleet's revisit capacity; remove it (bound revisits with "
            "RECRAWL_MIN_INTERVAL/RECRAWL_MAX_INTERVAL, RECRAWL_REVISIT_SHARE)"
        )
    default = settings.getfloat("RECRAWL_DEFAULT_INTERVAL")
    bounds = Bounds(
        settings.getfloat("RECRAWL_MIN_INTERVAL"),
        default,
        settings.getfloat("RECRAWL_MAX_INTERVAL"),
        START_PRICE_SHARE * default,
    )
    if not bounds.min <= bounds.default <= bounds.max:
        raise SettingsError(
            "RECRAWL_MIN_INTERVAL <= RECRAWL_DEFAULT_INTERVAL <= "
            f"RECRAWL_MAX_INTERVAL does not hold: {bounds}"
        )
    return bounds


def window_seconds(bounds: Bounds) -> float:
    """The fleet's revisits are measured over :data:`WINDOW_INTERVALS`
    minimum intervals (about the time the schedule takes to answer a new
    price), at least :data:`MIN_WINDOW_S`.

    >>> window_seconds(Bounds(3, 10, 120)), window_seconds(Bounds(3600, 86400, 1e6))
    (30.0, 36000.0)
    """
    return max(MIN_WINDOW_S, WINDOW_INTERVALS * float(bounds.min))


class Recrawler:
    """The continuous-crawl extension (the webcrawl add-on enables it when
    ``RECRAWL_ENABLED``): schedules each stored page's next visit and feeds
    due revisits to the engine (module docstring).

    The price of a fetch is measured, not set: every window bucket, the
    worker reads the fleet's figures (:func:`figures`), takes the revisit
    rate the fleet can keep (:func:`~extensions.utils.freshness.revisit_target`,
    capped at ``RECRAWL_REVISIT_SHARE`` of its fetches while saturated) and
    solves the price whose schedule asks for that
    (:meth:`~extensions.utils.freshness.Demand.price_for`). Every worker reads the
    same figures, so they agree on the price without sharing one.

    A spider may define ``revisit_request(request) -> Request`` to complete a
    revisit (the web spider adds its errback, so a failed revisit is recorded
    and its lease ends like any page's).

    A continuous crawl runs as a service: an idle spider is kept open (the
    next revisit is due later), whatever ``MAX_IDLE_TIME_BEFORE_CLOSE`` says;
    ``CLOSESPIDER_TIMEOUT`` or a signal ends it.

    Stats: ``recrawl/scheduled`` (next visits written), ``recrawl/revisits``
    (due URLs claimed), ``recrawl/conditional`` (revisits with a validator),
    ``recrawl/revisited`` (revisits stored), ``recrawl/changed`` and
    ``recrawl/not_modified`` (of them, found changed, answered 304),
    ``recrawl/price`` and ``recrawl/target`` (the last price solved, s, and
    the revisit rate it aims at, 1/s); with a
    schedule store, ``recrawl/parked`` (next visits written to it) and
    ``recrawl/loaded`` (moved from it into Redis).
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
        self.share = s.getfloat("RECRAWL_REVISIT_SHARE")
        self.batch_size = s.getint("RECRAWL_BATCH_SIZE")
        self.poll = s.getfloat("RECRAWL_POLL_INTERVAL")
        hold = max(self.bounds.min, s.getfloat("FRONTIER_LEASE_TIMEOUT"))
        self.hold_ms = int(hold * 1000)
        self.window_ms = int(s.getfloat("RECRAWL_WINDOW") * 1000)
        self.bucket_ms = max(
            1, int(window_seconds(self.bounds) * 1000 / WINDOW_BUCKETS)
        )
        path = s.get("RECRAWL_SCHEDULE_STORE") or ""
        self.store: ScheduleStore | None = (
            build_from_crawler(load_object(path), crawler) if path else None
        )
        # The store's blocking calls, one at a time, off the reactor thread.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="recrawl-store")
        self._refill_due = 0.0  # monotonic time of the next refill
        self._reprice_due = 0.0  # monotonic time of the next price
        self.schedule: RecrawlSchedule | None = None
        self.priors = Priors()
        # (plan, monotonic time it was made): its delay counts from then.
        self._out: list[tuple[Planned, float]] = []
        # (Redis ms, monotonic s) at the last TIME, and this clock minus
        # Redis's (s): revisits' lateness and window buckets are on Redis time.
        self._clock: tuple[int, float] | None = None
        self._offset = 0.0
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._stop = asyncio.Event()
        crawler.signals.connect(self._opened, signal=signals.spider_opened)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)
        crawler.signals.connect(self._stored, signal=items_stored)
        crawler.signals.connect(self._idle, signal=signals.spider_idle)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def _opened(self, spider: Any) -> None:
        self.schedule = RecrawlSchedule(async_client(self.crawler), spider.name)
        self.prefix = spider.name
        self._task = asyncio.ensure_future(self._run())

    async def _closed(self, spider: Any) -> None:
        # Let the loop finish its step rather than cancel it: a schedule
        # script whose reply a cancellation lost would be sent again by the
        # last flush, and the window's counters would count its batch twice.
        self._closing = True
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), CLOSE_WAIT)
            except TimeoutError:
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
        at = time.monotonic()
        for item in items:
            plan = next_visit(item, self.policy, self.bounds, now, self.priors,
                              self._offset, self.poll)  # fmt: skip
            if plan is not None:
                self._out.append((plan, at))

    async def _now_ms(self) -> int:
        """Redis time (ms): extrapolated from the last ``TIME`` within a
        bucket, asked again past it."""
        assert self.schedule is not None
        now = time.monotonic()
        if self._clock is None or now - self._clock[1] > self.bucket_ms / 1000:
            redis_ms = await self.schedule.now_ms()
            self._clock = (redis_ms, time.monotonic())
            self._offset = time.time() - redis_ms / 1000
            return redis_ms
        return self._clock[0] + int((now - self._clock[1]) * 1000)

    async def _flush(self) -> None:
        assert self.schedule is not None
        while self._out:
            chunk = self._out[:500]
            now = time.monotonic()
            batch = [p for p, _ in chunk]
            for plan, at in chunk:
                plan.delay = max(0.0, plan.delay - (now - at))
            now_ms = await self._now_ms()
            if self.store is None:
                await self.schedule.schedule(batch, now_ms, self.bucket_ms)
            else:
                await self._split(batch, now_ms)
            del self._out[: len(chunk)]
            self._inc("recrawl/scheduled", len(batch))
            for plan in batch:
                if plan.outcome != "first":
                    self._inc("recrawl/revisited")
                if plan.outcome in ("changed", "not_modified"):
                    self._inc(f"recrawl/{plan.outcome}")

    async def _split(self, batch: list[Planned], now_ms: int) -> None:
        """Next visits beyond the window into the schedule store (written
        there before they leave Redis), the others into Redis."""
        assert self.schedule is not None and self.store is not None
        far = [p for p in batch if p.delay * 1000 > self.window_ms]
        if far:
            entries = [(p.url, now_ms + int(p.delay * 1000), p.record.to_json())
                       for p in far]  # fmt: skip
            await self._in_thread(self.store.put, entries)
        park = {p.url for p in far}
        await self.schedule.schedule(batch, now_ms, self.bucket_ms, park)
        if far:
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

    async def _reprice(self) -> None:
        """Solve the price from the fleet's figures (once a window bucket)."""
        assert self.schedule is not None
        if time.monotonic() < self._reprice_due:
            return
        self._reprice_due = time.monotonic() + self.bucket_ms / 1000
        self._clock = None  # a fresh TIME: the clock offset is measured again
        now_ms = await self._now_ms()
        found = await figures(self.schedule.client, self.prefix, now_ms)
        # Tens of ms of arithmetic over the rate bins: off the reactor.
        solved = await asyncio.get_running_loop().run_in_executor(
            None,
            functools.partial(reprice, found.demand, found.scheduled, found.window,
                              self.share, self.bounds),
        )  # fmt: skip
        if solved is None:
            return
        price, target = solved
        self.bounds = replace(self.bounds, price=price)
        await self.schedule.publish(price, target)
        stats = self.crawler.stats
        if stats is not None:
            stats.set_value("recrawl/price", round(price, 6))
            stats.set_value("recrawl/target", round(target, 4))

    async def _run(self) -> None:
        while not self._closing:
            try:
                await self._flush()
                if self.store is not None:
                    await self._refill()
                await self._reprice()
                if not self._closing:
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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.poll)

    async def _feed(self) -> None:
        assert self.schedule is not None
        engine = self.crawler.engine
        spider = self.crawler.spider
        if engine is None or spider is None:
            return
        complete = getattr(spider, "revisit_request", None)
        claimed = await self.schedule.claim(self.batch_size, self.hold_ms)
        for entry in claimed:
            request = revisit_request(entry.url, entry)
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
