"""Fleet-wide statistics in Redis: every worker folds its counters in, cheaply.

Settings read (defaults in :mod:`extensions.settings.defaults`):
``STATS_FOLD_INTERVAL``,
``STATS_LOG_FLEET``, ``FRONTIER_LEASE_TIMEOUT`` (a worker silent that long
is dead; its record lives as long), ``FRONTIER_PARTITIONS`` and Scrapy's
``LOGSTATS_INTERVAL`` (how often the fleet line is logged). A metrics
exporter that serves this worker's metrics sets the stat ``metrics/port``; the
beat then carries it.

Each worker, every ``STATS_FOLD_INTERVAL`` seconds, takes the change of a few of
its Scrapy stats since the last fold (pages fetched, stored, responses by
status class, bytes, errors, retries, DLQ) and adds it, in ONE script call, to

* the fleet totals (``web:stats:{web:stats}:fleet``),
* its own record (``...:w:<worker>``: totals plus a beat: machine, pid,
  pages/s, metrics port), which expires when the worker stops folding,
* the bucket of the current minute (``...:m:<minute>``, Redis time), which
  expires after 18 minutes.

Rates over the last 1, 5 and 15 minutes are sums of minute buckets over the
window (the oldest bucket pro rata) divided by its length. Buckets rather
than an EWMA: they add up exactly across workers (an EWMA per worker freezes,
and keeps counting, when the worker dies), they give the same figure to every
reader, and 17 small hashes cost nothing. A rate lags the crawl by at most a
fold interval.

Liveness is the frontier's: the scheduler beats ``web:{web}:workers`` and
:meth:`extensions.core.frontier.frontier.Frontier.workers` reads it; this module owns
only
the ``web:stats:*`` keys and joins the two in :func:`fleet_view`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from scrapy import signals
from scrapy.exceptions import NotConfigured

from extensions.connection import TRANSIENT_REDIS_ERRORS, async_client
from extensions.connection.scripts import LUA_NOW_MS, script, server_now_ms
from extensions.core.frontier.frontier import PartitionedFrontier, worker_id
from extensions.core.seeds import SeedSource, seed_counts, seed_source
from extensions.extensions.recrawl import Figures, fleet_figures
from extensions.keys import StatsKeys
from extensions.settings import config, defaults

if TYPE_CHECKING:
    import redis.asyncio as aredis
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

# Minute buckets read: the 15-minute window spans the running minute, 14
# whole ones and part of the one before (see rates()).
BUCKETS = 17
RATE_WINDOWS = (1, 5, 15)
RATE_SPAN = 10.0  # seconds a worker's own pages/s is measured over

# Fleet counter -> the Scrapy stats it sums.
COUNTERS: dict[str, tuple[str, ...]] = {
    "pages": ("response_received_count",),
    "requests": ("downloader/request_count",),
    "bytes": ("downloader/response_bytes",),
    "stored": ("storage/written",),
    "duplicates": ("storage/duplicates/exact", "storage/duplicates/near"),
    "errors": ("downloader/exception_count", "log_count/ERROR"),
    "retries": ("retry/count",),
    "robots_forbidden": ("robotstxt/forbidden",),
    "seeds": ("seeds/accepted",),
}
IGNORED = "downloader/exception_type_count/scrapy.exceptions.IgnoreRequest"
# Stats whose every key under the prefix is folded under its own name.
STATUS_PREFIX = "downloader/response_status_count/"
DLQ_PREFIX = (
    "dlq/"  # dead letters written, by reason (extensions.core.frontier.deadletters)
)

# fold: add counter deltas to the fleet, the worker and the minute bucket, and
# beat the worker record.
# KEYS[1] fleet totals HASH, KEYS[2] the worker's HASH, KEYS[3] the bucket
# HASH of the current minute (chosen by the caller, see FleetStats.fold)
# ARGV[1] worker record TTL (ms), ARGV[2] bucket TTL (s), ARGV[3] n counters,
# then n (name, delta) pairs, then (field, value) pairs of the worker's beat.
# Returns the Redis time (ms) of the fold.
FOLD_LUA = (
    LUA_NOW_MS
    + """
local now = now_ms()
local n = tonumber(ARGV[3])
for i = 0, n - 1 do
  local name, delta = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
  redis.call('HINCRBY', KEYS[1], name, delta)
  redis.call('HINCRBY', KEYS[2], name, delta)
  redis.call('HINCRBY', KEYS[3], name, delta)
end
if n > 0 then redis.call('EXPIRE', KEYS[3], ARGV[2]) end
local beat = {'beat', now}
for i = 4 + 2 * n, #ARGV do beat[#beat + 1] = ARGV[i] end
redis.call('HSET', KEYS[2], unpack(beat))
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return now
"""
)


def fold_counters(stats: dict[str, Any]) -> dict[str, int]:
    """The fleet counters a worker's Scrapy stats add up to.

    >>> fold_counters({"response_received_count": 3,
    ...                "downloader/response_status_count/200": 2,
    ...                "downloader/response_status_count/404": 1,
    ...                "storage/duplicates/near": 1, "dlq/http_500": 1,
    ...                "downloader/exception_count": 3, IGNORED: 2})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'pages': 3, 'duplicates': 1, 'errors': 1, 'status_2xx': 2, 'status_4xx': 1,
     'dlq/http_500': 1}
    """
    out: dict[str, int] = {}
    for name, sources in COUNTERS.items():
        value = sum(int(stats.get(s) or 0) for s in sources)
        if name == "errors":
            # A request refused on purpose (robots.txt) is no error.
            value -= int(stats.get(IGNORED) or 0)
        if value:
            out[name] = value
    for key, value in stats.items():
        if key.startswith(STATUS_PREFIX) and isinstance(value, int):
            cls = f"status_{key[len(STATUS_PREFIX) :][:1]}xx"
            out[cls] = out.get(cls, 0) + value
        elif key.startswith(DLQ_PREFIX) and isinstance(value, int):
            out[key] = value
    return out


def rates(
    buckets: dict[int, dict[str, int]], now_ms: int, name: str
) -> dict[str, float]:
    """Per-second rates of counter ``name`` over the last 1, 5 and 15 minutes
    from minute buckets (minute number -> counters).

    A window of W minutes holds the running minute, the W - 1 before it, and
    the part of the minute before those that is still inside the window
    (taken pro rata, as if its events were spread evenly):

    >>> rates({98: {"pages": 60}, 99: {"pages": 600}, 100: {"pages": 30}},
    ...       100 * 60000 + 30000, "pages")
    {'1m': 5.5, '5m': 2.3, '15m': 0.7667}
    """
    minute, into = divmod(now_ms, 60000)
    out = {}
    for window in RATE_WINDOWS:
        whole = sum(
            buckets.get(m, {}).get(name, 0)
            for m in range(minute - window + 1, minute + 1)
        )
        edge = buckets.get(minute - window, {}).get(name, 0) * (1 - into / 60000)
        out[f"{window}m"] = round((whole + edge) / (window * 60), 4)
    return out


@dataclass
class FleetView:
    """The fleet's figures: totals, rates and the live workers."""

    now_ms: int
    totals: dict[str, int] = field(default_factory=dict)
    rates: dict[str, dict[str, float]] = field(default_factory=dict)
    workers: list[dict[str, Any]] = field(default_factory=list)


def _decode(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


async def fleet_view(
    client: aredis.Redis,
    prefix: str,
    alive_ms: int,
    frontier: PartitionedFrontier | None = None,
) -> FleetView:
    """Read the fleet totals, the minute buckets and the live workers.

    A worker is live when the frontier's heartbeat (``Frontier.workers``) is
    younger than ``alive_ms``; its record here adds what it folded.
    """
    keys = StatsKeys(prefix)
    frontier = frontier or PartitionedFrontier(client, prefix)
    beats = await frontier.workers()
    now = await server_now_ms(client, frontier.keys.workers)
    minute = now // 60000
    minutes = list(range(minute - BUCKETS + 1, minute + 1))
    live = sorted(w for w, beat in beats.items() if now - beat < alive_ms)
    async with client.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.fleet)
        for m in minutes:
            pipe.hgetall(keys.minute(m))
        for w in live:
            pipe.hgetall(keys.worker(w))
        replies = await pipe.execute()
    totals = {k: int(v) for k, v in _decode(replies[0]).items()}
    buckets = {
        m: {k: int(v) for k, v in _decode(r).items()}
        for m, r in zip(minutes, replies[1 : 1 + len(minutes)], strict=True)
    }
    view = FleetView(now, totals)
    for name in ("pages", "stored", "bytes", "errors"):
        view.rates[name] = rates(buckets, now, name)
    for w, raw in zip(live, replies[1 + len(minutes) :], strict=True):
        record = _decode(raw)
        entry: dict[str, Any] = {
            "id": w,
            "machine": record.get("machine", ""),
            "pid": int(record.get("pid") or 0),
            "last_beat_s": round((now - beats[w]) / 1000, 1),
            "pages_per_s": float(record.get("pages_per_s") or 0.0),
            "metrics_port": int(record.get("metrics_port") or 0) or None,
            "waiting_for_seeds": record.get("waiting_for_seeds") == "1",
            "pages": int(record.get("pages") or 0),
            "stored": int(record.get("stored") or 0),
        }
        view.workers.append(entry)
    return view


def recrawl_part(figures: Figures) -> str:
    """The continuous crawl's part of the fleet line ("" without one).

    >>> from extensions.utils.freshness import Demand, Window
    >>> f = Figures(Demand({-160: 150, -8: 36}), 2.0, 160.0,
    ...             Window(30.0, 90, 90, 30, 55), {})
    >>> recrawl_part(f)
    '; recrawl: estimated freshness 86%, revisits (30 s) 33% changed, 61% 304'
    """
    if not figures.pages:
        return ""
    shares = figures.shares()
    freshness = figures.freshness or 0.0
    if shares["changed"] is None or shares["not_modified"] is None:
        return f"; recrawl: estimated freshness {freshness:.0%}, no revisits yet"
    return (
        f"; recrawl: estimated freshness {freshness:.0%}, revisits "
        f"({figures.window.seconds:.0f} s) {shares['changed']:.0%} changed, "
        f"{shares['not_modified']:.0%} 304"
    )


class FleetStats:
    """Scrapy extension: fold this worker's stats into Redis; log the fleet.

    Runs one asyncio task on the reactor's loop; a fold is one script call
    (never a call per event), so its cost does not grow with the crawl rate.
    Redis errors skip a fold (the next one carries the delta) and never stop
    the crawl.
    """

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        config.require(s, defaults)
        self.interval = s.getfloat("STATS_FOLD_INTERVAL")
        if self.interval <= 0:
            raise NotConfigured("STATS_FOLD_INTERVAL is 0")
        self.log_fleet = s.getbool("STATS_LOG_FLEET")
        self.log_interval = s.getfloat("LOGSTATS_INTERVAL")
        self.lease_timeout_ms = int(s.getfloat("FRONTIER_LEASE_TIMEOUT") * 1000)
        self.crawler = crawler
        self.worker = ""
        self.machine = socket.gethostname()
        self._folded: dict[str, int] = {}
        # (monotonic time, pages) at recent folds: this worker's pages/s is
        # taken over RATE_SPAN seconds, not one (short, jumpy) fold interval.
        self._samples: deque[tuple[float, int]] = deque()
        self._next_log = 0.0
        self._said_no_seeds = False
        self._seed_source = SeedSource(())  # set when the spider opens
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._client: aredis.Redis | None = None
        # (Redis time in ms, time.monotonic()) at the last reply from Redis.
        self._clock: tuple[int, float] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        ext = cls(crawler)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self, spider: Any) -> None:
        self.prefix = spider.name
        # Where its seeds wait (a scrapy-redis redis_key, SETs, ZSETs).
        self._seed_source = seed_source(spider, self.crawler.settings)
        # One id per worker across the fleet structures: the scheduler's.
        self.worker = getattr(self._scheduler(), "worker", None) or worker_id()
        self._client = async_client(self.crawler)
        self._keys = StatsKeys(self.prefix)
        self._frontier = PartitionedFrontier(
            self._client,
            self.prefix,
            self.crawler.settings.getint("FRONTIER_PARTITIONS", 1),
        )
        now = time.monotonic()
        self._samples.append((now, 0))
        self._next_log = now + self.log_interval
        self._task = asyncio.ensure_future(self._run())

    def _scheduler(self) -> Any:
        try:
            engine = self.crawler.engine
        except RuntimeError:  # not crawling: built outside a crawl
            return None
        return engine.scheduler if engine is not None else None

    async def spider_closed(self, spider: Any) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(*TRANSIENT_REDIS_ERRORS):
            await self.fold()  # the last delta

    async def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)
            if self._stop.is_set():
                return
            try:
                await self.fold()
                if self.log_fleet and time.monotonic() >= self._next_log:
                    self._next_log = time.monotonic() + self.log_interval
                    await self.log_line()
            except TRANSIENT_REDIS_ERRORS as exc:
                logger.debug("Stats fold skipped: %s", exc)

    def _waiting_for_seeds(self, counters: dict[str, int]) -> bool:
        """No seed taken, nothing fetched, and the frontier (as the scheduler
        last saw it) has nothing queued or leased anywhere."""
        counts = getattr(self._scheduler(), "frontier_counts", (0, 0))
        return (
            not counters.get("seeds") and not counters.get("pages") and counts == (0, 0)
        )

    async def fold(self) -> int:
        """Fold the change since the last fold into Redis; return Redis time."""
        assert self._client is not None
        stats = self.crawler.stats
        assert stats is not None
        counters = fold_counters(dict(stats.get_stats()))
        deltas = {k: v - self._folded.get(k, 0) for k, v in counters.items()}
        deltas = {k: v for k, v in deltas.items() if v}
        now = time.monotonic()
        pages = counters.get("pages", 0)
        while len(self._samples) > 1 and now - self._samples[1][0] >= RATE_SPAN:
            self._samples.popleft()
        then, before = self._samples[0] if self._samples else (now, pages)
        per_s = (pages - before) / max(now - then, 1e-3)
        waiting = self._waiting_for_seeds(counters)
        if waiting and not self._said_no_seeds:
            assert self._client is not None
            # Seeds pushed and not taken yet (the feed takes them at its next
            # poll) are no reason to say there are none: the spider's own seed
            # keys (a scrapy-redis redis_key, SETs, ZSETs) are counted.
            source = self._seed_source
            waiting = not (await seed_counts(self._client, source))[0]
        if waiting and not self._said_no_seeds:
            self._said_no_seeds = True
            logger.warning(
                "No seeds: %s empty and the frontier has nothing queued; "
                "waiting for seeds (push them with `scrapy seed FILE`)",
                " and ".join(source.keys)
                + (" is" if len(source.keys) == 1 else " are"),
            )
        args: list[Any] = [
            max(int(self.interval * 3000), self.lease_timeout_ms),
            BUCKETS * 60 + 60,
            len(deltas),
        ]
        for name, delta in deltas.items():
            args += [name, delta]
        args += [
            "machine", self.machine,
            "pid", os.getpid(),
            "pages_per_s", round(per_s, 2),
            "metrics_port", int(stats.get_value("metrics/port") or 0),
            "waiting_for_seeds", int(waiting),
        ]  # fmt: skip
        # The bucket is named before the call (a script touches only the keys
        # it is given): the minute on Redis's clock, from the last fold's
        # Redis time plus the time since. Near a minute's edge a fold may land
        # in the neighbouring bucket by the round trip's few milliseconds.
        assert self._client is not None
        if self._clock is None:
            self._clock = (
                await server_now_ms(self._client, self._keys.fleet),
                now,
            )
        redis_ms, at = self._clock
        minute = int(redis_ms + (now - at) * 1000) // 60000
        keys = [
            self._keys.fleet,
            self._keys.worker(self.worker),
            self._keys.minute(minute),
        ]
        when = int(await script(self._client, FOLD_LUA)(keys=keys, args=args))
        self._clock = (when, time.monotonic())
        # Only after Redis took it: a failed fold is carried by the next one.
        self._folded = counters
        self._samples.append((now, pages))
        return when

    async def log_line(self) -> None:
        """One line a person can read: the fleet's rate, depth and leases, and
        the continuous crawl's freshness figures when there is one.

        The depth is a pipelined ZCARD per queued host (O(hosts)), once per
        ``LOGSTATS_INTERVAL``: fine for monitoring, never on the hot path."""
        assert self._client is not None
        view = await fleet_view(
            self._client, self.prefix, self.lease_timeout_ms, self._frontier
        )
        queued = await self._frontier.queued()
        hosts, leased = await self._frontier.counts()
        recrawl = await fleet_figures(self._client, self.prefix)
        r = view.rates["pages"]
        dlq = sum(v for k, v in view.totals.items() if k.startswith(DLQ_PREFIX))
        logger.info(
            "Fleet: %s workers, %.1f pages/s (1m) %.1f (5m) %.1f (15m), "
            "%s pages stored; frontier: %s requests queued over %s hosts, "
            "%s leased%s%s",
            len(view.workers),
            r["1m"],
            r["5m"],
            r["15m"],
            view.totals.get("stored", 0),
            queued,
            hosts,
            leased,
            f", DLQ {dlq}" if dlq else "",
            recrawl_part(recrawl),
        )
