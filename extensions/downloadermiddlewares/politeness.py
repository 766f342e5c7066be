"""Fleet-wide politeness: download locks in Redis, per host and per address.

Settings read: ``DOWNLOAD_DELAY`` (Scrapy's, enforced across every worker),
``DOWNLOAD_SLOTS`` (a host's own ``delay``, ``concurrency`` and
``randomize_delay``), ``POLITENESS_ENABLED``, ``POLITENESS_KEY``,
``IP_DOWNLOAD_DELAY``, ``DOMAIN_DOWNLOAD_DELAY``, ``POLITENESS_MAX_WAIT``,
``POLITENESS_MAX_DEFERRALS``, ``BACKOFF_QUIET_PERIOD``,
``AUTOTHROTTLE_ENABLED`` and ``AUTOTHROTTLE_START_DELAY`` (the spacing
includes the host's fleet-wide AutoThrottle delay),
``FRONTIER_HEARTBEAT_INTERVAL`` (how long a lock outlives a worker killed
mid-download), ``DOWNLOAD_TIMEOUT``, ``FRONTIER_PARTITIONS`` (a lock lives
in the partition of its id), and through :mod:`extensions.connection`
``REDIS_URL``; the key prefix is the spider's name. The rules:
``docs/host-record.md`` ("The download lock").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
from dataclasses import asdict, dataclass
from enum import IntEnum
from time import monotonic
from typing import TYPE_CHECKING, Any, Self

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.resolver import dnscache
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import defer

from extensions import keys, meta
from extensions.connection import TRANSIENT_REDIS_ERRORS, async_client, retry_redis
from extensions.connection.locks import LUA_OWNS, LUA_TAKE, TokenLock, new_token
from extensions.connection.scripts import LUA_NOW_MS, script
from extensions.core.frontier.hostrecord import HostRecords
from extensions.core.frontier.lua import LUA_HOST_CONF, LUA_RECORD
from extensions.core.frontier.overrides import HostConf, download_slots
from extensions.downloadermiddlewares import Deferral, deferred_copy
from extensions.settings import config, defaults
from extensions.utils.hosts import (
    KEY_KINDS,
    host_key,
    host_partition,
    hostname_of,
    politeness_keys,
    registered_domain,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    import redis.asyncio as aredis
    from scrapy.crawler import Crawler
    from scrapy.http import Request

logger = logging.getLogger(__name__)

# Values POLITENESS_KEY may name (one or more, comma-separated).
KEY_MODES = KEY_KINDS

# The wait a HELD reply gives: a lock's PTTL, or one spacing (at least 20 ms)
# while its holder is still fetching (its PTTL is spacing + hold then: its
# end is not known yet).
LUA_HELD_WAIT = """
local function held_wait(key, delay)
  local ttl = redis.call('PTTL', key)
  if ttl > delay then ttl = math.max(delay, 20) end
  if ttl < 1 then ttl = 1 end
  return ttl
end
"""

# The host's lock. KEYS[1] the lock, KEYS[2] the host record, KEYS[3] the
# overrides HASH, KEYS[4] the lock's in-flight ZSET (one hash tag: the host's
# partition).
# ARGV[1] token, ARGV[2] DOWNLOAD_DELAY ms, ARGV[3] back-off quiet period ms,
# ARGV[4] hold ms, ARGV[5] the host name, ARGV[6] its DOWNLOAD_SLOTS delay ms
# and ARGV[7] concurrency (-1: not set), ARGV[8] the AutoThrottle start delay
# ms (-1: AutoThrottle off), ARGV[9] a factor on the spacing
# (randomize_delay, else 1), ARGV[10] '1' to take the lock, '0' only to read
# the host's park and spacing (POLITENESS_KEY without host).
# With a concurrency of 1 (the default) the lock is set NX PX for spacing +
# hold, held through the fetch and cut to the spacing at the answer (CUT
# below). Above 1, the lock is set for the spacing alone (start to start,
# as Scrapy spaces a slot) and the download counts in the in-flight ZSET
# (token -> until when, renewed while it runs) until its answer; at most
# `concurrency` count at once.
# Returns {code, ms, fails, concurrency} (code: a LockState): ACQUIRED (ms =
# the spacing; 0 with a concurrency of 1: no spacing, nothing set), HELD by
# another token or the in-flight count full (ms to wait), PARKED (ms until
# the park ends); fails = the record's consecutive connection failures.
HOST_SCRIPT = (
    LUA_RECORD
    + LUA_HOST_CONF
    + LUA_TAKE
    + LUA_HELD_WAIT
    + """
local now = now_ms()
local rec = host_record(KEYS[2])
if rec.park > now then
  return {2, rec.park - now, rec.fails, 1}
end
local function arg(i)
  local v = tonumber(ARGV[i])
  if v and v >= 0 then return v end
  return nil
end
local own, conc = host_conf(KEYS[3], ARGV[5], arg(6), arg(7), tonumber(ARGV[2]))
local delay = math.floor(spacing(rec, own, now, tonumber(ARGV[3]), tonumber(ARGV[8]))
                         * tonumber(ARGV[9]))
if ARGV[10] ~= '1' then
  return {0, delay, rec.fails, conc}
end
local token, hold = ARGV[1], tonumber(ARGV[4])
-- Downloads in flight (a concurrency above 1, or just lowered to 1): an
-- entry past its time went with its worker.
local flying = 0
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  flying = redis.call('ZCARD', KEYS[4])
  if redis.call('ZSCORE', KEYS[4], token) then flying = flying - 1 end
end
if flying >= conc then
  return {1, math.max(50, math.min(delay, 100)), rec.fails, conc}
end
if conc <= 1 then
  if delay <= 0 then return {0, 0, rec.fails, 1} end
  -- Taken NX, or already ours (a retry whose reply was lost): not HELD.
  if take(KEYS[1], token, delay + hold) then return {0, delay, rec.fails, 1} end
elseif delay <= 0 or take(KEYS[1], token, delay) then
  redis.call('ZADD', KEYS[4], now + hold, token)
  return {0, delay, rec.fails, conc}
end
return {1, held_wait(KEYS[1], delay), rec.fails, conc}
"""
)

# The host's download is over (its response headers, or an error).
# KEYS as HOST_SCRIPT. ARGV[1] token, ARGV[2] DOWNLOAD_DELAY ms, ARGV[3]
# back-off quiet period ms, ARGV[4] the host name, ARGV[5] its DOWNLOAD_SLOTS
# delay ms and ARGV[6] concurrency (-1: not set), ARGV[7] the AutoThrottle
# start delay ms (-1: off), ARGV[8] the spacing factor, ARGV[9] ms from the
# take to the answer, ARGV[10] '1' if the lock was held through the fetch,
# ARGV[11] ms from the answer (its headers reaching the worker) to now.
# Ends the token's in-flight entry; a lock held through the fetch now lasts
# the host's spacing from the answer, read afresh (an operator's override,
# a back-off raised meanwhile count at once), its AutoThrottle part counted
# from the take (start to start): max(static spacing, throttle - ARGV[9]),
# less ARGV[11] (at least 1 ms).
# Returns the lock's TTL now (ms), -1 when the token does not hold it.
CUT_SCRIPT = (
    LUA_RECORD
    + LUA_HOST_CONF
    + LUA_OWNS
    + """
local token = ARGV[1]
redis.call('ZREM', KEYS[4], token)
if ARGV[10] ~= '1' or not owns(KEYS[1], token) then return -1 end
local now = now_ms()
local rec = host_record(KEYS[2])
local function arg(i)
  local v = tonumber(ARGV[i])
  if v and v >= 0 then return v end
  return nil
end
local own = host_conf(KEYS[3], ARGV[4], arg(5), arg(6), tonumber(ARGV[2]))
local ttl = math.max(static_spacing(rec, own, now, tonumber(ARGV[3])),
                     throttle_of(rec, tonumber(ARGV[7])) - tonumber(ARGV[9]))
ttl = math.max(1, math.floor(ttl * tonumber(ARGV[8])) - tonumber(ARGV[11]))
redis.call('PEXPIRE', KEYS[1], ttl)
return ttl
"""
)

# A domain's or an address's lock. KEYS[1] the lock. ARGV[1] token,
# ARGV[2] its spacing ms, ARGV[3] hold ms.
# Returns {code, ms}: ACQUIRED (set NX PX for spacing + hold, or already the
# token's; ms = the spacing, 0: none, nothing set) or HELD (ms to wait).
COARSE_SCRIPT = (
    LUA_TAKE
    + LUA_HELD_WAIT
    + """
local delay = tonumber(ARGV[2])
if delay <= 0 then return {0, 0} end
if take(KEYS[1], ARGV[1], delay + tonumber(ARGV[3])) then return {0, delay} end
return {1, held_wait(KEYS[1], delay)}
"""
)

# Give a lock back untouched: its request found another of its locks busy.
# KEYS[1] the lock, KEYS[2] its in-flight ZSET. ARGV[1] token.
# Returns 1 if the token held either.
GIVE_BACK_SCRIPT = (
    LUA_OWNS
    + """
local held = redis.call('ZREM', KEYS[2], ARGV[1])
if owns(KEYS[1], ARGV[1]) then
  redis.call('DEL', KEYS[1])
  held = 1
end
return held
"""
)

# Keep what a running download holds. KEYS[1] the lock, KEYS[2] its in-flight
# ZSET. ARGV[1] token, ARGV[2] the lock's TTL from now (ms; 0: leave the lock
# alone, it runs start to start), ARGV[3] the in-flight entry's time from now.
# Returns 1 if the token still held either.
RENEW_SCRIPT = (
    LUA_NOW_MS
    + LUA_OWNS
    + """
local held = 0
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], now_ms() + tonumber(ARGV[3]), ARGV[1])
  held = 1
end
if ARGV[2] ~= '0' and owns(KEYS[1], ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  held = 1
end
return held
"""
)


class LockState(IntEnum):
    """The codes of the lock scripts."""

    #: The lock is ours (or the host needs no spacing).
    ACQUIRED = 0
    #: Another request holds the lock: wait and ask again.
    HELD = 1
    #: The host is parked (back-off, breaker, robots.txt): do not fetch.
    PARKED = 2


class HostParked(IgnoreRequest):
    """A request that may not wait for, nor be deferred from, a parked host
    (meta ``dont_defer``, e.g. a robots.txt fetch)."""


@dataclass(frozen=True)
class Taken:
    """One lock a request holds: its kind (``host``, ``domain``, ``ip``), id
    and spacing (ms), and whether it is held through the download (a
    concurrency of 1, cut at the answer) or counts the download in flight."""

    kind: str
    id: str
    spacing_ms: int
    through: bool = True


@dataclass
class Grant:
    """The answer to :meth:`HostLock.take`: a state, ms (the host's spacing
    when acquired, else the wait), the record's ``fails`` and the locks
    taken (none unless acquired)."""

    state: LockState
    ms: int
    fails: int
    taken: list[Taken]
    # The (kind, id) of the lock found busy, when a domain's or an address's.
    busy: tuple[str, str] | None = None


class HostLock:
    """The download locks of one crawl: token locks
    (:mod:`extensions.connection.locks`) set ``NX PX`` by scripts, released
    or extended only by their owner.

    A host's lock is set by a script that reads the host record (park,
    spacing, its own settings): with a concurrency of 1 its TTL *is* the
    spacing: held through the fetch (spacing + one heartbeat, renewed while
    the download runs, so a worker killed mid-download holds the host for at
    most a heartbeat) and cut to the spacing when the response headers (or
    an error) arrive, so the next request, on any worker, starts at least
    one delay after the server answered this one (Heritrix, too, counts its
    politeness delay from the end of a fetch): counted from the start, a
    request slow to reach the server from a loaded worker would arrive right
    before the next holder's. A domain's or an address's lock (a wider
    ``POLITENESS_KEY``) is the same, with its own delay.

    A request takes its locks in :data:`~extensions.utils.hosts.KEY_KINDS`
    order (host, domain, ip) and gives back those it took when a later one
    is busy (:meth:`take`): it never holds one while it waits for another.
    Each lock lives in the partition of its id (a host key, a registered
    domain or an address): on a cluster, different slots, one script each.
    A worker killed between two takes leaves the first to expire by itself
    within its spacing + one heartbeat.
    """

    def __init__(
        self,
        client: aredis.Redis,
        prefix: str,
        quiet_ms: int,
        partitions: int = 1,
        throttle_start_ms: int = -1,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.quiet_ms = quiet_ms
        self.partitions = partitions
        self.throttle_start_ms = throttle_start_ms
        self.tokens = TokenLock(client)

    def _partition(self, lock_id: str) -> int:
        return host_partition(lock_id, self.partitions)

    def _key(self, lock_id: str) -> str:
        return keys.host_lock(
            self.prefix, lock_id, self._partition(lock_id), self.partitions
        )

    def _inflight(self, lock_id: str) -> str:
        return keys.host_inflight(
            self.prefix, lock_id, self._partition(lock_id), self.partitions
        )

    def _host_keys(self, hostkey: str) -> list[str]:
        k = keys.FrontierKeys(self.prefix, self._partition(hostkey), self.partitions)
        return [k.lock(hostkey), k.host(hostkey), k.overrides, k.inflight(hostkey)]

    @staticmethod
    def _slot_args(slot: HostConf) -> list[int]:
        return [
            -1 if slot.delay is None else round(slot.delay * 1000),
            -1 if slot.concurrency is None else slot.concurrency,
        ]

    async def acquire_host(
        self,
        hostkey: str,
        token: str,
        default_ms: int,
        hold_ms: int = 0,
        *,
        slot: HostConf | None = None,
        factor: float = 1.0,
        take: bool = True,
    ) -> tuple[LockState, int, int, int]:
        """The host's lock, one round trip: ``(state, ms, fails,
        concurrency)`` as :data:`HOST_SCRIPT` documents."""
        res = await script(self.client, HOST_SCRIPT)(
            keys=self._host_keys(hostkey),
            args=[
                token,
                int(default_ms),
                int(self.quiet_ms),
                int(hold_ms),
                hostname_of(hostkey),
                *self._slot_args(slot or HostConf()),
                self.throttle_start_ms,
                repr(float(factor)),
                int(take),
            ],
        )
        return LockState(int(res[0])), int(res[1]), int(res[2]), int(res[3])

    async def acquire(
        self,
        lock_id: str,
        hostkey: str,
        token: str,
        default_ms: int,
        hold_ms: int = 0,
    ) -> tuple[LockState, int, int]:
        """The host lock of ``hostkey`` (``lock_id`` is the host key):
        ``(state, ms, fails)``."""
        assert lock_id == hostkey, "a host's lock is keyed by its host key"
        state, ms, fails, _ = await self.acquire_host(
            hostkey, token, default_ms, hold_ms
        )
        return state, ms, fails

    async def acquire_coarse(
        self, lock_id: str, token: str, spacing_ms: int, hold_ms: int
    ) -> tuple[LockState, int]:
        """A domain's or an address's lock: ``(state, ms)``."""
        res = await script(self.client, COARSE_SCRIPT)(
            keys=[self._key(lock_id)],
            args=[token, int(spacing_ms), int(hold_ms)],
        )
        return LockState(int(res[0])), int(res[1])

    async def take(
        self,
        hostkey: str,
        coarse: Sequence[tuple[str, str, int]],
        token: str,
        *,
        default_ms: int,
        hold_ms: int,
        take_host: bool = True,
        slot: HostConf | None = None,
        factor: float = 1.0,
    ) -> Grant:
        """Every lock of one request, in order: the host's (or, when
        ``take_host`` is False, only its park and spacing), then each of
        ``coarse`` (``(kind, id, delay ms)``; without the host's lock a
        coarse lock is spaced by the host's spacing too). When one is busy
        the locks taken before it are given back, and the wait is returned.
        Safe to call again with the same token after a Redis error: each
        lock the token holds is taken again, not waited for."""
        state, ms, fails, conc = await self.acquire_host(
            hostkey, token, default_ms, hold_ms, slot=slot, factor=factor,
            take=take_host,
        )  # fmt: skip
        if state != LockState.ACQUIRED:
            return Grant(state, ms, fails, [])
        taken: list[Taken] = []
        if take_host and (ms > 0 or conc > 1):
            taken.append(Taken("host", hostkey, ms, through=conc <= 1))
        for kind, lock_id, delay_ms in coarse:
            spacing = delay_ms if take_host else max(delay_ms, ms)
            state, wait = await self.acquire_coarse(lock_id, token, spacing, hold_ms)
            if state != LockState.ACQUIRED:
                await self.give_back(taken, token)
                return Grant(state, wait, fails, [], (kind, lock_id))
            if wait:
                taken.append(Taken(kind, lock_id, wait))
        return Grant(LockState.ACQUIRED, ms, fails, taken)

    async def give_back(self, taken: Sequence[Taken], token: str) -> None:
        """Give back ``taken`` untouched (nothing was downloaded)."""
        run = script(self.client, GIVE_BACK_SCRIPT)
        for lock in taken:
            await run(keys=[self._key(lock.id), self._inflight(lock.id)], args=[token])

    async def renew(self, lock: Taken, token: str, hold_ms: int) -> bool:
        """Keep ``lock`` for a download still running: a lock held through
        the fetch for spacing + hold from now, an in-flight entry for hold.
        False once the token holds nothing of it (it lapsed)."""
        ttl = lock.spacing_ms + hold_ms if lock.through else 0
        res = await script(self.client, RENEW_SCRIPT)(
            keys=[self._key(lock.id), self._inflight(lock.id)],
            args=[token, int(ttl), int(hold_ms)],
        )
        return bool(res)

    async def cut(
        self,
        lock: Taken,
        token: str,
        *,
        default_ms: int,
        slot: HostConf | None = None,
        factor: float = 1.0,
        elapsed_ms: int = 0,
        late_ms: int = 0,
    ) -> int:
        """The download is over (answered ``late_ms`` ago, ``elapsed_ms``
        after the take): the lock now lasts its spacing from the answer (a
        host's read afresh, see :data:`CUT_SCRIPT`); the TTL set, -1 when
        the token no longer holds it."""
        late_ms = max(0, int(late_ms))
        if lock.kind != "host":
            ttl = max(1, lock.spacing_ms - late_ms)
            ok = await self.tokens.extend(self._key(lock.id), token, ttl)
            return ttl if ok else -1
        res = await script(self.client, CUT_SCRIPT)(
            keys=self._host_keys(lock.id),
            args=[
                token,
                int(default_ms),
                int(self.quiet_ms),
                hostname_of(lock.id),
                *self._slot_args(slot or HostConf()),
                self.throttle_start_ms,
                repr(float(factor)),
                max(0, int(elapsed_ms)),
                int(lock.through),
                late_ms,
            ],
        )
        return int(res)

    async def release(self, lock_id: str, token: str) -> bool:
        return await self.tokens.release(self._key(lock_id), token)

    async def extend(self, lock_id: str, token: str, ttl_ms: int) -> bool:
        return await self.tokens.extend(self._key(lock_id), token, ttl_ms)


class LockIds:
    """The ids of the locks a request takes, in ``POLITENESS_KEY``'s order:
    its host key, its registered domain, the address its name resolves to
    (through the crawl's resolver, kept in a bounded cache)."""

    def __init__(self, kinds: tuple[str, ...]) -> None:
        self.kinds = kinds
        self._ips: dict[str, str] = {}

    async def of(self, hostkey: str) -> list[tuple[str, str]]:
        """``(kind, id)`` of each lock a request for ``hostkey`` takes."""
        hostname = hostname_of(hostkey)
        ids = []
        for kind in self.kinds:
            if kind == "host":
                ids.append((kind, hostkey))
            elif kind == "domain":
                ids.append((kind, registered_domain(hostname)))
            else:
                ids.append((kind, await self._resolve(hostname)))
        return ids

    async def _resolve(self, hostname: str) -> str:
        ip = self._ips.get(hostname) or dnscache.get(hostname)
        if ip:
            return str(ip)
        try:
            ip = await self._lookup(hostname)
        except (OSError, IndexError, defer.TimeoutError):
            return hostname  # unresolvable: the download fails anyway
        if len(self._ips) > 10_000:  # a bounded cache; DNS changes rarely
            self._ips.clear()
        self._ips[hostname] = ip
        return ip

    @staticmethod
    async def _lookup(hostname: str) -> str:
        """The address the crawl's downloads connect to: through the
        resolver Scrapy installed on the reactor (``TWISTED_DNS_RESOLVER``)
        when this coroutine runs on the reactor's loop, else (a loop of its
        own: a unit test) the system's."""
        from twisted.internet import reactor

        loop = asyncio.get_running_loop()
        # A running reactor is not enough: a loop of its own run inside a
        # reactor callback (asyncio.run in a test) blocks the reactor, whose
        # resolver would then never answer.
        if reactor.running and getattr(reactor, "_asyncioEventloop", None) is loop:
            found = reactor.resolver.getHostByName(hostname)
            return str(await maybe_deferred_to_future(found))
        infos = await loop.getaddrinfo(hostname, None, type=socket.SOCK_STREAM)
        return str(infos[0][4][0])


class PolitenessMiddleware:
    """Downloader middleware: take the request's fleet-wide download locks
    right before the download.

    Order: the last ``process_request`` before the download handler (see
    :data:`extensions.downloadermiddlewares.DOWNLOADER_MIDDLEWARES`), after robots.txt
    and any cache.

    ``POLITENESS_KEY`` names the locks a request takes (:class:`HostLock`):
    ``host`` (the frontier's :func:`~extensions.utils.hosts.host_key`,
    spaced by the host record's rule: its robots.txt delay, its own delay,
    AutoThrottle, back-off), ``domain`` (the registered domain, spaced by
    ``DOMAIN_DOWNLOAD_DELAY``) and ``ip`` (the address the name resolves
    to through the crawl's resolver, spaced by ``IP_DOWNLOAD_DELAY``); each
    lives in the partition of its id. Without ``host``, a wider lock is
    spaced by the host's spacing too, and the host's park still holds.
    When a lock is held the request awaits the wait it is told on the event
    loop (no sleep of the reactor thread, no spin) and tries again; one
    coroutine per lock and worker competes at a time, the others queue
    locally. A host parked (or spaced) beyond ``POLITENESS_MAX_WAIT`` goes
    back to the scheduler, where the frontier keeps it until the park ends.
    With ``ip``, a cut of an address's lock, and a request that waits for
    one, mark the address busy in every partition's IP schedule, which the
    frontier's lease script reads.

    The locks enforce ``DOWNLOAD_DELAY`` (and ``DOWNLOAD_SLOTS``' delays), so
    the per-process slot delay of Scrapy's downloader is set to 0 for locked
    requests (a local delay on top would start the download after the lock's
    window). The middleware also waits until the request's local download
    slot has a free transfer place before taking the locks, so the download
    starts when they are taken.
    """

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        config.require(settings, defaults)
        if not settings.getbool("POLITENESS_ENABLED"):
            raise NotConfigured("POLITENESS_ENABLED is False")
        value = settings.get("POLITENESS_KEY")
        self.kinds = politeness_keys(value)
        if not config.AnyOf(*KEY_MODES).allows(value) or not self.kinds:
            # Not NotConfigured: that would log one warning and crawl on with
            # no fleet-wide lock at all. Off is POLITENESS_ENABLED=False only.
            raise config.SettingsError(
                f"POLITENESS_KEY={value!r} is not allowed: use "
                f"{config.AnyOf(*KEY_MODES).describe()}"
            )
        self.partitions = settings.getint("FRONTIER_PARTITIONS")
        self.crawler = crawler
        delay = settings.getfloat("DOWNLOAD_DELAY")
        self.default_ms = round(delay * 1000)
        # The delay of a domain's and an address's lock (0: DOWNLOAD_DELAY).
        self.coarse_ms = {
            kind: round(
                (settings.getfloat(f"{kind.upper()}_DOWNLOAD_DELAY") or delay) * 1000
            )
            for kind in ("domain", "ip")
        }
        self.slots = download_slots(settings.getdict("DOWNLOAD_SLOTS"))
        self.throttle_start_ms = (
            round(max(delay, settings.getfloat("AUTOTHROTTLE_START_DELAY")) * 1000)
            if settings.getbool("AUTOTHROTTLE_ENABLED")
            else -1
        )
        self.max_wait_ms = round(settings.getfloat("POLITENESS_MAX_WAIT") * 1000)
        self.max_deferrals = settings.getint("POLITENESS_MAX_DEFERRALS")
        self.quiet_ms = round(settings.getfloat("BACKOFF_QUIET_PERIOD") * 1000)
        # A lock outlives a fetch that never reports back (a worker killed
        # mid-download) by at most this long: one heartbeat, renewed while
        # the download runs (up to DOWNLOAD_TIMEOUT).
        self.hold_ms = round(settings.getfloat("FRONTIER_HEARTBEAT_INTERVAL") * 1000)
        self.download_timeout = settings.getfloat("DOWNLOAD_TIMEOUT", 180)
        self._lock: HostLock | None = None
        self._records: HostRecords | None = None
        self._local: dict[str, asyncio.Lock] = {}
        self._freed: asyncio.Event | None = None
        self.ids = LockIds(self.kinds)
        self._ip_recorded: dict[str, str] = {}  # host key -> address written
        self._slot_delay_logged = False
        crawler.signals.connect(
            self._reached_downloader, signals.request_reached_downloader
        )
        crawler.signals.connect(self._left_downloader, signals.request_left_downloader)
        crawler.signals.connect(self._headers_received, signals.headers_received)
        crawler.signals.connect(self._closed, signals.spider_closed)
        self._tasks: set[asyncio.Task[Any]] = set()
        # Token -> the task renewing its locks while its download runs.
        self._renewers: dict[str, asyncio.Task[None]] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @property
    def lock(self) -> HostLock:
        if self._lock is None:
            self._lock = HostLock(
                async_client(self.crawler),
                keys.crawl_prefix(self.crawler),
                self.quiet_ms,
                self.partitions,
                self.throttle_start_ms,
            )
        return self._lock

    @property
    def records(self) -> HostRecords:
        if self._records is None:
            self._records = HostRecords(
                self.lock.client, self.lock.prefix, self.partitions
            )
        return self._records

    async def lock_ids(self, request: Request, hostkey: str) -> list[tuple[str, str]]:
        """``(kind, id)`` of each lock the request takes, in order."""
        return await self.ids.of(hostkey)

    async def process_request(self, request: Request) -> Request | None:
        if request.meta.get(meta.DONT_POLITENESS) or not request.url.startswith(
            ("http://", "https://")
        ):
            return None
        hostkey = host_key(request)
        ids = await self.lock_ids(request, hostkey)
        names = [f"{kind} {lock_id}" for kind, lock_id in ids]
        local = [self._local.setdefault(name, asyncio.Lock()) for name in names]
        try:
            async with contextlib.AsyncExitStack() as stack:
                for lk in local:  # in KEY_KINDS order, as the Redis locks
                    await stack.enter_async_context(lk)
                return await self._take(request, hostkey, ids)
        finally:
            for name, lk in zip(names, local, strict=True):
                if not lk.locked() and self._local.get(name) is lk:
                    del self._local[name]

    def _conf(self, hostkey: str) -> tuple[HostConf, float]:
        """The host's DOWNLOAD_SLOTS entry and this request's spacing factor
        (randomize_delay: 1 to 1.5, never below the delay)."""
        slot = self.slots.get(hostname_of(hostkey), HostConf())
        return slot, (random.uniform(1.0, 1.5) if slot.randomize else 1.0)

    async def _take(
        self, request: Request, hostkey: str, ids: list[tuple[str, str]]
    ) -> Request | None:
        stats = self.crawler.stats
        assert stats is not None
        token = new_token()
        started = monotonic()
        waits = 0
        marked_until = 0.0  # this request marked its address busy until then
        slot, factor = self._conf(hostkey)
        coarse = [(k, i, self.coarse_ms[k]) for k, i in ids if k != "host"]
        while True:
            await self._local_capacity(request)
            grant = await retry_redis(
                lambda: self.lock.take(
                    hostkey, coarse, token, default_ms=self.default_ms,
                    hold_ms=self.hold_ms, take_host="host" in self.kinds,
                    slot=slot, factor=factor,
                ),
                "the host lock",
            )  # fmt: skip
            code, ms = grant.state, grant.ms
            if code == LockState.ACQUIRED:
                if not self._has_capacity(request):
                    # The local slot filled while we were in Redis: give the
                    # window back rather than start late.
                    await self.lock.give_back(grant.taken, token)
                    continue
                break
            if ms > self.max_wait_ms and request.meta.get(meta.DONT_DEFER):
                stats.inc_value("politeness/parked_refused")
                raise HostParked(f"{hostkey} parked or spaced for {ms} ms")
            deferrals = int(request.meta.get(meta.POLITENESS_DEFERRALS, 0))
            if ms > self.max_wait_ms and deferrals < self.max_deferrals:
                reason = (
                    Deferral.PARKED if code == LockState.PARKED else Deferral.SPACED
                )
                stats.inc_value(f"politeness/deferred/{reason}")
                logger.debug(
                    "Host %s %s for %d ms: %s goes back to the scheduler",
                    hostkey, reason, ms, request,
                )  # fmt: skip
                return deferred_copy(request, reason)
            waits += 1
            stats.inc_value("politeness/lock_waits")
            if grant.busy and grant.busy[0] == "ip" and monotonic() >= marked_until:
                # A request waits for this address: no partition should lease
                # another of its hosts before this one has had its turn (once
                # per turn it waits for, not at each poll).
                busy_ms = ms + self.coarse_ms["ip"]
                marked_until = monotonic() + busy_ms / 1000
                self._background(self._mark_ip(hostkey, grant.busy[1], busy_ms))
            await asyncio.sleep(ms / 1000)
        waited_ms = round((monotonic() - started) * 1000)
        if waits:
            stats.inc_value("politeness/lock_wait_ms", waited_ms)
            stats.max_value("politeness/lock_wait_ms_max", waited_ms)
        stats.inc_value("politeness/lock_acquired")
        request.meta[meta.POLITENESS_LOCK] = {
            "id": ids[0][1],
            "host": hostkey,
            "token": token,
            "spacing_ms": grant.ms,
            "fails": grant.fails,
            "factor": factor,
            "locks": [asdict(t) for t in grant.taken],
            "at": monotonic(),
        }
        if grant.taken:
            self._renewers[token] = asyncio.ensure_future(
                self._renew(grant.taken, token)
            )
        return None

    async def _mark_ip(self, hostkey: str, ip: str, busy_ms: int) -> None:
        """Tell every partition's lease script that ``ip`` is busy for
        ``busy_ms`` (and, once per host, which address the host has)."""
        try:
            if self._ip_recorded.get(hostkey) != ip:
                await self.records.set_ip(hostkey, ip)
                if len(self._ip_recorded) > 10_000:
                    self._ip_recorded.clear()
                self._ip_recorded[hostkey] = ip
            await self.records.ip_busy(ip, busy_ms)
        except TRANSIENT_REDIS_ERRORS as exc:
            # A hint for the schedule only: the address's lock holds anyway.
            logger.debug("IP schedule of %s not written: %s", ip, exc)

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def process_response(self, request: Request, response: Any) -> Any:
        await self._fetched(request)
        return response

    async def process_exception(self, request: Request, exception: Exception) -> None:
        await self._fetched(request)

    def _headers_received(self, request: Request, **_: Any) -> None:
        # The server had the request before it answered: the spacing can run
        # from the response headers, not from after the body and the other
        # middlewares (a busy worker would add its own lag to every interval).
        held = request.meta.get(meta.POLITENESS_LOCK)
        if held and held.get("locks") and not held.get("released"):
            held.setdefault("answered", monotonic())
            self._background(self._fetched(request))

    async def _fetched(self, request: Request) -> None:
        """The fetch is over: each lock now lasts its spacing from here."""
        held = request.meta.get(meta.POLITENESS_LOCK)
        if not held or not held.get("locks") or held.get("released"):
            return
        held["released"] = True
        renewer = self._renewers.pop(held["token"], None)
        if renewer is not None:
            # Ended before the locks are cut: a renewal after the cut would
            # hold them a heartbeat longer.
            renewer.cancel()
            await asyncio.wait({renewer})
        try:
            await self._cut(held)
        except TRANSIENT_REDIS_ERRORS as exc:
            # Redis away: cut them once Redis is back, or the host would
            # wait out the rest of its hold after the outage.
            logger.debug("Could not shorten the locks of %s: %s", held["host"], exc)
            self._background(self._shorten_later(held))

    async def _cut(self, held: dict[str, Any]) -> None:
        answered = held.setdefault("answered", monotonic())
        # Spacing counts from when the answer reached this worker (the server
        # had sent it before), not from when the script runs: a busy worker's
        # lag would be added to every interval.
        elapsed_ms = round((answered - held["at"]) * 1000)
        late_ms = round((monotonic() - answered) * 1000)
        slot = self.slots.get(hostname_of(held["host"]), HostConf())
        taken = [Taken(**t) for t in held["locks"]]
        # All at once: a lock cut a round trip late is idle that long.
        ttls = await asyncio.gather(
            *(
                self.lock.cut(
                    lock,
                    held["token"],
                    default_ms=self.default_ms,
                    slot=slot,
                    factor=held["factor"],
                    elapsed_ms=elapsed_ms,
                    late_ms=late_ms,
                )
                for lock in taken
            )
        )
        for lock, ttl in zip(taken, ttls, strict=True):
            if lock.kind == "ip" and ttl > 0:
                self._background(self._mark_ip(held["host"], lock.id, ttl))

    def _closed(self) -> None:
        # A lock still to be shortened or renewed lapses by itself.
        for task in [*self._tasks, *self._renewers.values()]:
            task.cancel()

    async def _renew(self, taken: list[Taken], token: str) -> None:
        """Keep the locks of a running download (spacing + one heartbeat
        from now; an in-flight entry one heartbeat), every third of a
        heartbeat: a worker killed mid-download holds them for at most a
        heartbeat. Ends when the fetch is over (:meth:`_fetched`), or after
        ``DOWNLOAD_TIMEOUT``."""
        deadline = monotonic() + self.download_timeout
        live = list(taken)
        try:
            while live and monotonic() < deadline:
                await asyncio.sleep(self.hold_ms / 3000)
                for lock in list(live):
                    try:
                        if not await self.lock.renew(lock, token, self.hold_ms):
                            live.remove(lock)  # lapsed (a stalled loop, an outage)
                    except TRANSIENT_REDIS_ERRORS as exc:
                        logger.debug("Could not renew the lock of %s: %s", lock.id, exc)
        finally:
            if self._renewers.get(token) is asyncio.current_task():
                del self._renewers[token]

    async def _shorten_later(self, held: dict[str, Any]) -> None:
        """Cut the locks to their spacing from when Redis answers again; give
        up when their hold would have run out anyway."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                retry_redis(lambda: self._cut(held), "the host lock"),
                self.hold_ms / 1000,
            )

    # -- the local download slot --------------------------------------------

    def _slot(self, request: Request) -> Any:
        try:
            engine = self.crawler.engine
        except RuntimeError:  # not crawling (a unit test): no local slots
            return None
        if engine is None:
            return None
        downloader = engine.downloader
        return downloader.slots.get(downloader.get_slot_key(request))

    def _has_capacity(self, request: Request) -> bool:
        slot = self._slot(request)
        if slot is None:
            return True
        return len(slot.transferring) + len(slot.queue) < slot.concurrency

    async def _local_capacity(self, request: Request) -> None:
        while not self._has_capacity(request):
            if self._freed is None:
                self._freed = asyncio.Event()
            await self._freed.wait()

    def _left_downloader(self, request: Request) -> None:
        freed, self._freed = self._freed, None
        if freed is not None:
            freed.set()

    def _reached_downloader(self, request: Request) -> None:
        if meta.POLITENESS_LOCK not in request.meta:
            return
        slot = self._slot(request)
        if slot is not None and (slot.delay or slot.jitter):
            if not self._slot_delay_logged:
                self._slot_delay_logged = True
                logger.info(
                    "DOWNLOAD_DELAY is enforced fleet-wide by the host lock: "
                    "the per-process slot delay is set to 0"
                )
            slot.delay = 0.0
            slot.jitter = 0.0
