"""Fleet-wide politeness: a per-host download lock in Redis.

Settings read: ``DOWNLOAD_DELAY`` (Scrapy's, enforced across every worker),
``POLITENESS_ENABLED``, ``POLITENESS_KEY``, ``POLITENESS_MAX_WAIT``,
``POLITENESS_MAX_DEFERRALS``, ``BACKOFF_QUIET_PERIOD``,
``FRONTIER_HEARTBEAT_INTERVAL`` (how long a lock outlives a worker killed
mid-download), ``DOWNLOAD_TIMEOUT``,
``FRONTIER_PARTITIONS`` (the lock lives in its host's partition), and through
:mod:`extensions.connection` ``REDIS_URL``; the key prefix
is the spider's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from enum import IntEnum
from time import monotonic
from typing import TYPE_CHECKING, Any, Self

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.resolver import dnscache

from extensions import keys, meta
from extensions.connection import TRANSIENT_REDIS_ERRORS, async_client, retry_redis
from extensions.connection.locks import LUA_TAKE, TokenLock, new_token
from extensions.connection.scripts import script
from extensions.core.frontier.lua import LUA_RECORD
from extensions.downloadermiddlewares import Deferral, deferred_copy
from extensions.settings import config, defaults
from extensions.utils.hosts import (
    host_key,
    host_partition,
    hostname_of,
    registered_domain,
)

if TYPE_CHECKING:
    import redis.asyncio as aredis
    from scrapy.crawler import Crawler
    from scrapy.http import Request

logger = logging.getLogger(__name__)

# Values of POLITENESS_KEY.
KEY_MODES = ("host", "domain", "ip")


# KEYS[1] the lock key, KEYS[2] the host record (same hash tag).
# ARGV[1] token, ARGV[2] default delay ms (DOWNLOAD_DELAY), ARGV[3] back-off
# quiet period ms, ARGV[4] hold ms (the lock is set for spacing + hold,
# renewed as long by its holder while the fetch runs, and cut to the spacing
# when the fetch completes).
# Returns {code, ms, fails} (code: a LockState): ACQUIRED (the lock is set NX
# PX, or already held by ARGV[1] and set again, ms = the host's effective
# spacing; ms 0 = no spacing, nothing set),
# HELD by another token (ms = its PTTL, or one spacing while the holder is
# still fetching), PARKED (ms until the park ends);
# fails = the record's consecutive connection failures.
ACQUIRE_SCRIPT = (
    LUA_RECORD
    + LUA_TAKE
    + """
local now = now_ms()
local rec = host_record(KEYS[2])
if rec.park > now then
  return {2, rec.park - now, rec.fails}
end
local delay = math.floor(spacing(rec, tonumber(ARGV[2]), now, tonumber(ARGV[3])))
if delay <= 0 then
  return {0, 0, rec.fails}
end
-- Taken NX, or already ours (a retry whose reply was lost): not HELD.
if take(KEYS[1], ARGV[1], delay + tonumber(ARGV[4])) then
  return {0, delay, rec.fails}
end
local ttl = redis.call('PTTL', KEYS[1])
-- A holder still fetching keeps the lock for spacing + hold: its end is not
-- known yet, so wait one spacing (at least 20 ms) and ask again.
if ttl > delay then
  ttl = math.max(delay, 20)
end
if ttl < 1 then
  ttl = 1
end
return {1, ttl, rec.fails}
"""
)


class LockState(IntEnum):
    """The codes of :data:`ACQUIRE_SCRIPT`."""

    #: The lock is ours (or the host needs no spacing).
    ACQUIRED = 0
    #: Another request holds the host's lock: wait and ask again.
    HELD = 1
    #: The host is parked (back-off, breaker, robots.txt): do not fetch.
    PARKED = 2


class HostParked(IgnoreRequest):
    """A request that may not wait for, nor be deferred from, a parked host
    (meta ``dont_defer``, e.g. a robots.txt fetch)."""


class HostLock:
    """The per-host download lock of one crawl: a token lock
    (:mod:`extensions.connection.locks`) set ``NX PX`` with the host's spacing by a
    script that reads the host record, released or extended only by its owner.

    The lock is never released after a download: its TTL *is* the spacing.
    It is held through the fetch (spacing + one heartbeat, renewed while the
    download runs, so a worker killed mid-download holds the host for at most
    a heartbeat) and cut to the spacing when the response headers (or an
    error) arrive, so the next
    request, on any worker, starts at least one delay after the server
    answered this one. Spacing
    measured from the start of a fetch is not enough on a loaded machine: a
    request that takes the lock and is then slow to reach the server would
    arrive right before the next holder's (Heritrix, too, counts its
    politeness delay from the end of a fetch).

    With several frontier partitions the lock id is a host key (the
    middleware allows only ``POLITENESS_KEY = "host"`` then), and lock and
    record live in the host's partition: one slot, one script.
    """

    def __init__(
        self, client: aredis.Redis, prefix: str, quiet_ms: int, partitions: int = 1
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.quiet_ms = quiet_ms
        self.partitions = partitions
        self.tokens = TokenLock(client)

    def _key(self, lock_id: str) -> str:
        partition = host_partition(lock_id, self.partitions)
        return keys.host_lock(self.prefix, lock_id, partition, self.partitions)

    async def acquire(
        self,
        lock_id: str,
        hostkey: str,
        token: str,
        default_ms: int,
        hold_ms: int = 0,
    ) -> tuple[LockState, int, int]:
        """One round trip: ``(state, ms, fails)`` as the script documents."""
        res = await script(self.client, ACQUIRE_SCRIPT)(
            keys=[
                self._key(lock_id),
                keys.FrontierKeys(
                    self.prefix,
                    host_partition(hostkey, self.partitions),
                    self.partitions,
                ).host(hostkey),
            ],
            args=[token, int(default_ms), int(self.quiet_ms), int(hold_ms)],
        )
        return LockState(int(res[0])), int(res[1]), int(res[2])

    async def release(self, lock_id: str, token: str) -> bool:
        return await self.tokens.release(self._key(lock_id), token)

    async def extend(self, lock_id: str, token: str, ttl_ms: int) -> bool:
        return await self.tokens.extend(self._key(lock_id), token, ttl_ms)


class PolitenessMiddleware:
    """Downloader middleware: wait for the host's fleet-wide lock right before
    the download.

    Order: the last ``process_request`` before the download handler (see
    :data:`extensions.downloadermiddlewares.DOWNLOADER_MIDDLEWARES`), after robots.txt
    and any cache.

    Each request computes its lock id (``POLITENESS_KEY``: ``host``, the
    frontier's :func:`~extensions.utils.hosts.host_key`; ``domain``, the registered
    domain; ``ip``, the resolved address) and calls the acquire script, which
    reads the host record (``delay``, ``backoff``, ``park``) and sets the lock
    ``web:{web}:lock:<id>`` with ``PX`` = the effective spacing in one round
    trip. When the lock is held the request awaits its PTTL on the event loop
    (no sleep of the reactor thread, no spin) and tries again; one coroutine
    per lock id and worker competes at a time, the others queue locally. A
    host parked (or spaced) beyond ``POLITENESS_MAX_WAIT`` goes back to the
    scheduler, where the frontier keeps it until the park ends.

    The frontier always queues by host: ``domain`` and ``ip`` modes make the
    lock coarser than the schedule, which is safe but may cause lock waits.

    The lock enforces ``DOWNLOAD_DELAY``, so the per-process slot delay of
    Scrapy's downloader is set to 0 for locked requests (a local delay on top
    would start the download after the lock's window). The middleware also
    waits until the request's local download slot has a free transfer place
    before taking the lock, so the download starts when the lock is taken.
    """

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        config.require(settings, defaults)
        if not settings.getbool("POLITENESS_ENABLED"):
            raise NotConfigured("POLITENESS_ENABLED is False")
        self.mode = settings.get("POLITENESS_KEY")
        if self.mode not in KEY_MODES:
            # Not NotConfigured: that would log one warning and crawl on with
            # no fleet-wide lock at all. Off is POLITENESS_ENABLED=False only.
            raise config.SettingsError(
                f"POLITENESS_KEY={self.mode!r} is not allowed: use one of "
                f"{', '.join(repr(m) for m in KEY_MODES)}"
            )
        self.partitions = settings.getint("FRONTIER_PARTITIONS")
        if self.mode != "host" and self.partitions > 1:
            # A domain's or an IP's hosts fall in several partitions: one lock
            # for them all could not be set in one script with each host's
            # record (two slots on a cluster).
            raise config.SettingsError(
                f"POLITENESS_KEY={self.mode!r} needs FRONTIER_PARTITIONS=1 "
                f"(it is {self.partitions}): with partitions the lock is per host"
            )
        self.crawler = crawler
        self.default_ms = round(settings.getfloat("DOWNLOAD_DELAY") * 1000)
        self.max_wait_ms = round(settings.getfloat("POLITENESS_MAX_WAIT") * 1000)
        self.max_deferrals = settings.getint("POLITENESS_MAX_DEFERRALS")
        self.quiet_ms = round(settings.getfloat("BACKOFF_QUIET_PERIOD") * 1000)
        # The lock outlives a fetch that never reports back (a worker killed
        # mid-download) by at most this long: one heartbeat, renewed while
        # the download runs (up to DOWNLOAD_TIMEOUT).
        self.hold_ms = round(settings.getfloat("FRONTIER_HEARTBEAT_INTERVAL") * 1000)
        self.download_timeout = settings.getfloat("DOWNLOAD_TIMEOUT", 180)
        self._lock: HostLock | None = None
        self._local: dict[str, asyncio.Lock] = {}
        self._freed: asyncio.Event | None = None
        self._ips: dict[str, str] = {}
        self._slot_delay_logged = False
        crawler.signals.connect(
            self._reached_downloader, signals.request_reached_downloader
        )
        crawler.signals.connect(self._left_downloader, signals.request_left_downloader)
        crawler.signals.connect(self._headers_received, signals.headers_received)
        crawler.signals.connect(self._closed, signals.spider_closed)
        self._tasks: set[asyncio.Task[None]] = set()
        # Token -> the task renewing that lock while its download runs.
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
            )
        return self._lock

    async def lock_id(self, request: Request, hostkey: str) -> str:
        if self.mode == "host":
            return hostkey
        hostname = hostname_of(hostkey)
        if self.mode == "domain":
            return registered_domain(hostname)
        return await self._resolve(hostname)

    async def _resolve(self, hostname: str) -> str:
        ip = self._ips.get(hostname) or dnscache.get(hostname)
        if ip:
            return str(ip)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                hostname, None, type=socket.SOCK_STREAM
            )
            ip = str(infos[0][4][0])
        except (OSError, IndexError):
            return hostname  # unresolvable: the download fails anyway
        if len(self._ips) > 10_000:  # a bounded cache; DNS changes rarely
            self._ips.clear()
        self._ips[hostname] = ip
        return ip

    async def process_request(self, request: Request) -> Request | None:
        if request.meta.get(meta.DONT_POLITENESS) or not request.url.startswith(
            ("http://", "https://")
        ):
            return None
        hostkey = host_key(request)
        lock_id = await self.lock_id(request, hostkey)
        local = self._local.setdefault(lock_id, asyncio.Lock())
        try:
            async with local:
                return await self._take(request, hostkey, lock_id)
        finally:
            if not local.locked() and self._local.get(lock_id) is local:
                del self._local[lock_id]

    async def _take(
        self, request: Request, hostkey: str, lock_id: str
    ) -> Request | None:
        stats = self.crawler.stats
        assert stats is not None
        token = new_token()
        started = monotonic()
        waits = 0
        while True:
            await self._local_capacity(request)
            code, ms, fails = await retry_redis(
                lambda: self.lock.acquire(
                    lock_id, hostkey, token, self.default_ms, self.hold_ms
                ),
                "the host lock",
            )
            if code == LockState.ACQUIRED:
                if not self._has_capacity(request):
                    # The local slot filled while we were in Redis: give the
                    # window back rather than start late.
                    if ms:
                        await self.lock.release(lock_id, token)
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
            await asyncio.sleep(ms / 1000)
        waited_ms = round((monotonic() - started) * 1000)
        if waits:
            stats.inc_value("politeness/lock_wait_ms", waited_ms)
            stats.max_value("politeness/lock_wait_ms_max", waited_ms)
        stats.inc_value("politeness/lock_acquired")
        request.meta[meta.POLITENESS_LOCK] = {
            "id": lock_id,
            "host": hostkey,
            "token": token,
            "spacing_ms": ms,
            "fails": fails,
        }
        if ms:
            self._renewers[token] = asyncio.ensure_future(
                self._renew(lock_id, token, ms + self.hold_ms)
            )
        return None

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
        if held and held.get("spacing_ms") and not held.get("released"):
            task = asyncio.ensure_future(self._fetched(request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _fetched(self, request: Request) -> None:
        """The fetch is over: the lock now lasts one spacing from here."""
        held = request.meta.get(meta.POLITENESS_LOCK)
        if not held or not held.get("spacing_ms") or held.get("released"):
            return
        held["released"] = True
        renewer = self._renewers.pop(held["token"], None)
        if renewer is not None:
            # Ended before the lock is cut: a renewal after the cut would
            # hold the host a heartbeat longer.
            renewer.cancel()
            await asyncio.wait({renewer})
        try:
            await self.lock.extend(held["id"], held["token"], held["spacing_ms"])
        except TRANSIENT_REDIS_ERRORS as exc:
            # Redis away: shorten it once Redis is back, or the host would
            # wait out the rest of its hold after the outage.
            logger.debug("Could not shorten the lock of %s: %s", held["id"], exc)
            task = asyncio.ensure_future(self._shorten_later(held))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _closed(self) -> None:
        # A lock still to be shortened or renewed lapses by itself.
        for task in [*self._tasks, *self._renewers.values()]:
            task.cancel()

    async def _renew(self, lock_id: str, token: str, ttl_ms: int) -> None:
        """Keep a lock for ``ttl_ms`` (spacing + one heartbeat) from now, every
        third of a heartbeat, while its download runs: a worker killed
        mid-download holds the host for at most a heartbeat. Ends when the
        fetch is over (:meth:`_fetched`), or after ``DOWNLOAD_TIMEOUT``."""
        deadline = monotonic() + self.download_timeout
        try:
            while monotonic() < deadline:
                await asyncio.sleep(self.hold_ms / 3000)
                try:
                    if not await self.lock.extend(lock_id, token, ttl_ms):
                        return  # lapsed (a stalled loop, an outage)
                except TRANSIENT_REDIS_ERRORS as exc:
                    logger.debug("Could not renew the lock of %s: %s", lock_id, exc)
        finally:
            if self._renewers.get(token) is asyncio.current_task():
                del self._renewers[token]

    async def _shorten_later(self, held: dict[str, Any]) -> None:
        """Shorten a lock to one spacing from when Redis answers again; give
        up when its hold would have run out anyway."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                retry_redis(
                    lambda: self.lock.extend(
                        held["id"], held["token"], held["spacing_ms"]
                    ),
                    "the host lock",
                ),
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
