"""The Redis frontier: per-host priority queues, a host schedule and leases.

The Mercator back-queue model on Redis: a ZSET of requests per host, and a
``ready`` ZSET of hosts scored by when each may next be fetched, so the next
request is "the host with the lowest score, if due" (O(log hosts)) and a host
that must wait never blocks the others. Popped requests are leased, not
deleted, until their outcome is durable; retries wait in the ``delayed``
ZSET; malformed entries go to the poison list. :class:`Frontier` is one
partition (its scripts are in :mod:`extensions.core.frontier.lua`);
:class:`PartitionedFrontier` routes a crawl's ``FRONTIER_PARTITIONS`` of
them by host and by lease. The protocol (leases, heartbeats, recovery,
write-ahead batches, poison, partitions): ``docs/frontier.md``.

Settings read: none (the scheduler passes its settings in, :class:`Worker`).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import mmh3

from extensions.connection.scripts import run_pipelined, script, server_now_ms
from extensions.core.frontier.lua import (
    BEAT_LUA,
    COMMIT_LUA,
    LEASE_LUA,
    PARK,
    POISON_ENTRY_KEEP,
    POISON_KEEP,
    RECOVER_LUA,
    RELEASE_LUA,
    clamp_priority,
)
from extensions.keys import FrontierKeys, crawl_patterns
from extensions.utils.hosts import host_partition

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import redis
    import redis.asyncio as aredis


def worker_id() -> str:
    """A worker id that names the machine and process, unique per run."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class Worker:
    """What one worker leases with, constant for its whole run."""

    id: str  # unique per run: names its leases, heartbeat and write-ahead log
    lease_ms: int  # how long a lease lasts unless renewed (FRONTIER_LEASE_TIMEOUT)
    default_delay_ms: int = 0  # the spacing of a host with no delay (DOWNLOAD_DELAY)
    # A back-off raised longer ago than this is forgiven (BACKOFF_QUIET_PERIOD).
    backoff_quiet_ms: int = 1_800_000
    # A host with spilled requests is refilled once its queue is shorter
    # (FRONTIER_SPILL_BATCH; 0: no spill store).
    refill_below: int = 0
    # The AutoThrottle delay of a host with no response yet
    # (AUTOTHROTTLE_START_DELAY; -1: AutoThrottle off).
    throttle_start_ms: int = -1
    # A lease marks its host's address busy this long (the IP delay, when
    # POLITENESS_KEY names ip; 0: no IP schedule).
    ip_delay_ms: int = 0
    # DOWNLOAD_SLOTS as the lease script reads it: JSON {host name: [delay
    # ms, concurrency]}, -1 where not set ('': none).
    slots: str = ""


@dataclass
class LeaseBatch:
    """What one lease round trip returned."""

    leases: list[tuple[str, bytes]]
    reclaimed: int
    wait_ms: int  # until the next queued host is ready; -1: nothing queued
    hosts_ready: int  # hosts with queued requests
    leases_outstanding: int  # across the whole fleet
    poisoned: int = 0  # malformed entries moved to the poison list
    paused: bool = False  # the fleet is paused (scrapy pause): nothing leased
    spaced: bool = False  # a host (not parked) waits out its politeness spacing


@dataclass
class FrontierOverview:
    """What :meth:`Frontier.overview` reads: hosts with queued requests are
    *ready* (may be fetched now), *waiting* (politeness delay or back-off) or
    *parked* (open circuit breaker, Retry-After)."""

    now_ms: int  # Redis time of the reading
    queued: int = 0  # requests queued over all hosts
    hosts_ready: int = 0
    hosts_waiting: int = 0
    hosts_parked: int = 0
    leased: int = 0  # leases outstanding, fleet-wide
    paused: bool = False
    poisoned: int = 0  # entries in the poison list (malformed, set aside)
    # The lease closest to its deadline (the oldest unrenewed one): its id
    # (``<worker>:<n>``) and seconds until it may be reclaimed.
    next_lease_expiry: tuple[str, float] | None = None
    top_hosts: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Spilled:
    """A request the commit script refused (its host was over the cap): it
    goes to the spill store with its score (:mod:`extensions.core.frontier.spill`)."""

    host: str
    score: int
    member: bytes
    priority: int


@dataclass
class QueuedRequest:
    host: str
    priority: int
    member: bytes
    delay_ms: int = 0  # > 0: wait in the delayed ZSET (a retry), then queue


@dataclass
class Waiting:
    """What the frontier holds that is not due yet (for the closing report)."""

    urls: int  # queued or delayed requests
    hosts: int  # hosts they belong to
    next_due_ms: int  # epoch ms (Redis clock) of the next one; -1: none


def _count(reply: Any) -> int:
    """A pipelined reply as a number: 0 for none or an error (wrong type).

    >>> _count(b"12"), _count(None), _count(ValueError("WRONGTYPE"))
    (12, 0, 0)
    """
    return 0 if reply is None or isinstance(reply, Exception) else int(reply)


class Frontier:
    """Asynchronous access to one crawl's frontier in Redis.

    Stateless: several frontiers (workers) share the same keys safely, since
    every change is one script. ``worker`` binds what one worker leases with;
    a frontier without one can queue and count, not lease (monitoring).
    The worker registry (``web:{web}:workers``, worker id -> last heartbeat)
    tells live workers from dead ones, whose write-ahead batches
    :meth:`recover` queues.
    """

    def __init__(
        self,
        client: aredis.Redis,
        prefix: str,
        worker: Worker | None = None,
        partition: int = 0,
        partitions: int = 1,
    ) -> None:
        self.client = client
        self.keys = FrontierKeys(prefix, partition, partitions)
        self._worker = worker

    @property
    def worker(self) -> Worker:
        if self._worker is None:
            raise TypeError("this Frontier was built without a Worker: it cannot lease")
        return self._worker

    async def commit(
        self,
        requests: Sequence[QueuedRequest] = (),
        acks: Iterable[str] = (),
        wal: tuple[str, str] | None = None,
    ) -> tuple[int, int]:
        """Queue ``requests`` and acknowledge the leases ``acks`` in one step;
        ``wal`` = (worker, entry id) names the write-ahead entry to drop.

        Returns (requests added, leases acknowledged). A request identical to
        one already queued for its host is not added twice.
        """
        added, acked, _ = await self.commit_capped(requests, acks, wal)
        return added, acked

    async def commit_capped(
        self,
        requests: Sequence[QueuedRequest] = (),
        acks: Iterable[str] = (),
        wal: tuple[str, str] | None = None,
        cap: int = 0,
        refill_below: int = 0,
    ) -> tuple[int, int, list[Spilled]]:
        """:meth:`commit`, where a host may queue at most ``cap`` requests
        (0: no cap): it returns the requests refused, for the spill store
        (:mod:`extensions.core.frontier.spill`). While any are refused, the write-ahead
        entry ``wal`` stays, holding them, until :meth:`spilled` confirms
        them written."""
        worker, entry = wal or ("", "")
        k = self.keys
        args: list[Any] = [
            k.queue_prefix,
            k.host_prefix,
            len(requests),
            entry,
            cap,
            refill_below,
        ]
        for r in requests:
            args += [r.host, clamp_priority(r.priority), r.member, max(0, r.delay_ms)]
        args += list(acks)
        res: list[Any] = await script(self.client, COMMIT_LUA)(
            keys=[
                k.ready,
                k.seq,
                k.leases,
                k.lease_data,
                k.wal(worker),
                k.poison,
                k.delayed,
                k.dlq,
                k.dlq_reasons,
                k.refill,
                k.dlq_unrecorded,
            ],
            args=args,
        )
        # Requests of a host judged down went to the DLQ (res[2]; its
        # per-reason counts say how many), never to the spill.
        refused = [
            Spilled(res[i].decode(), int(res[i + 1]), res[i + 2], int(res[i + 3]))
            for i in range(3, len(res), 4)
        ]
        return int(res[0]), int(res[1]), refused

    async def log_ahead(
        self, worker: str, entry: str, requests: Sequence[QueuedRequest]
    ) -> None:
        """Write a batch ahead of the dupefilter: if this worker dies before
        :meth:`commit`, a live worker queues the batch (:meth:`recover`)."""
        blob = json.dumps(
            [[r.host, clamp_priority(r.priority), r.member.decode()] for r in requests]
        )
        await self.client.hset(self.keys.wal(worker), entry, blob)

    async def recover(self, dead_after_ms: int) -> tuple[int, int, int]:
        """Queue the write-ahead batches of workers silent for ``dead_after_ms``
        and hand their leases back.

        Returns (requests queued again, malformed entries poisoned, leases
        reclaimed)."""
        k = self.keys
        queued, poisoned, reclaimed = await script(self.client, RECOVER_LUA)(
            keys=[k.workers, k.ready, k.seq, k.poison, k.leases, k.lease_data],
            args=[k.queue_prefix, k.host_prefix, k.wal_prefix, dead_after_ms],
        )
        return int(queued), int(poisoned), int(reclaimed)

    async def quarantine(self, entries: Sequence[tuple[str, str, bytes, str]]) -> None:
        """Move entries a worker cannot use to the poison list: each is
        (key it came from, field or lease id, the entry, why)."""
        if not entries:
            return
        records = [
            json.dumps(
                {
                    "key": key,
                    "field": field,
                    "entry": entry[:POISON_ENTRY_KEEP].decode("utf-8", "replace"),
                    "length": len(entry),
                    "reason": reason,
                }
            )
            for key, field, entry, reason in entries
        ]
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.rpush(self.keys.poison, *records)
            pipe.ltrim(self.keys.poison, -POISON_KEEP, -1)
            await pipe.execute()

    async def lease(self, count: int, reclaim: int = 32) -> LeaseBatch:
        """Reclaim up to ``reclaim`` expired leases (of any worker), then
        lease up to ``count`` requests of hosts that are due."""
        k, w = self.keys, self.worker
        res: list[Any] = await script(self.client, LEASE_LUA)(
            keys=[
                k.ready,
                k.leases,
                k.lease_data,
                k.seq,
                k.poison,
                k.paused,
                k.delayed,
                k.refill,
                k.overrides,
                k.ip_schedule,
            ],
            args=[
                k.queue_prefix,
                k.host_prefix,
                count,
                w.lease_ms,
                w.id,
                w.default_delay_ms,
                reclaim,
                w.backoff_quiet_ms,
                w.refill_below,
                w.throttle_start_ms,
                w.ip_delay_ms,
                w.slots,
            ],
        )
        items: list[bytes] = list(res[7:])
        leases = [(items[i].decode(), items[i + 1]) for i in range(0, len(items), 2)]
        return LeaseBatch(
            leases,
            int(res[0]),
            int(res[1]),
            int(res[2]),
            int(res[3]),
            int(res[4]),
            bool(res[5]),
            bool(res[6]),
        )

    async def release(self, lease_ids: Sequence[str]) -> int:
        if not lease_ids:
            return 0
        k = self.keys
        return int(
            await script(self.client, RELEASE_LUA)(
                keys=[k.ready, k.leases, k.lease_data, k.poison],
                args=[k.queue_prefix, k.host_prefix, *lease_ids],
            )
        )

    async def extend(self, lease_ids: Sequence[str]) -> int:
        """Push the deadline of leases this worker still holds by one lease
        time. ``XX`` leaves alone a lease that was already reclaimed (it is
        queued again; this worker's later acknowledgement of it is a no-op)."""
        if not lease_ids:
            return 0
        deadline = (
            await server_now_ms(self.client, self.keys.leases) + self.worker.lease_ms
        )
        changed = await self.client.zadd(
            self.keys.leases, dict.fromkeys(lease_ids, deadline), xx=True, ch=True
        )
        return cast("int", changed)

    async def beat(self) -> None:
        """Record this worker's heartbeat (Redis clock) in the registry. A
        worker beats before it writes ahead, or its batches would never be
        recovered."""
        await script(self.client, BEAT_LUA)(
            keys=[self.keys.workers], args=[self.worker.id]
        )

    async def retire(self) -> None:
        """Leave the registry: a clean stop, with nothing written ahead left."""
        await self.client.zrem(self.keys.workers, self.worker.id)

    async def flush(self) -> int:
        """Delete every key of the crawl but its seed list (the frontier, the
        robots cache, the Bloom filter, the duplicate index): start afresh.
        Returns the number of keys deleted."""
        deleted = 0
        for pattern in crawl_patterns(self.keys.prefix):
            async for key in self.client.scan_iter(match=pattern, count=1000):
                deleted += await self.client.unlink(key)
        return deleted

    async def counts(self) -> tuple[int, int]:
        """(hosts with queued requests, leases outstanding)."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.zcard(self.keys.ready)
            pipe.zcard(self.keys.leases)
            ready, leased = await pipe.execute()
        return int(ready), int(leased)

    async def due(self) -> tuple[int, int]:
        """(hosts and retries due now, leases outstanding). A parked host,
        or a retry due later, is not due work: a finite crawl may close
        while they wait (they stay in Redis for the next run)."""
        now = await server_now_ms(self.client, self.keys.workers)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.zcount(self.keys.ready, "-inf", now)
            pipe.zcount(self.keys.delayed, "-inf", now)
            pipe.zcard(self.keys.leases)
            ready, delayed, leased = await pipe.execute()
        return int(ready) + int(delayed), int(leased)

    async def waiting(self) -> Waiting:
        """URLs queued or delayed, their hosts and the next due time (a scan
        over the hosts: for the closing report and monitoring)."""
        ready = cast("list[bytes]", await self.client.zrange(self.keys.ready, 0, -1))
        hosts = {h.decode() for h in ready}
        urls = await self.queued()
        delayed = cast(
            "list[tuple[bytes, float]]",
            await self.client.zrange(self.keys.delayed, 0, -1, withscores=True),
        )
        urls += len(delayed)
        hosts.update(m.split(b"\n", 1)[0].decode() for m, _ in delayed)
        tops = [
            await self.client.zrange(key, 0, 0, withscores=True)
            for key in (self.keys.ready, self.keys.delayed)
        ]
        due = [int(t[0][1]) for t in tops if t]
        return Waiting(urls, len(hosts), min(due) if due else -1)

    async def queued(self) -> int:
        """Requests queued over all hosts (a scan over the ready hosts: for
        monitoring, not for the hot path)."""
        total = 0
        hosts = cast("list[bytes]", await self.client.zrange(self.keys.ready, 0, -1))
        for i in range(0, len(hosts), 500):
            async with self.client.pipeline(transaction=False) as pipe:
                for h in hosts[i : i + 500]:
                    pipe.zcard(self.keys.queue(h.decode()))
                total += sum(await pipe.execute())
        return total

    # -- operating the fleet ----------------------------------------------------

    async def pause(self) -> bool:
        """Pause the whole fleet: the lease script hands out nothing while the
        flag exists; workers finish what they hold. Returns False if it was
        already paused."""
        return bool(await self.client.set(self.keys.paused, "1", nx=True))

    async def resume(self) -> bool:
        """Resume the fleet; returns False if it was not paused."""
        return bool(await self.client.delete(self.keys.paused))

    async def workers(self) -> dict[str, int]:
        """Worker id -> its last heartbeat (Redis time, ms), as the scheduler
        beats it; a worker is dead once silent for a lease timeout."""
        pairs = cast(
            "list[tuple[bytes, float]]",
            await self.client.zrange(self.keys.workers, 0, -1, withscores=True),
        )
        return {w.decode(): int(score) for w, score in pairs}

    async def overview(self, top: int = 10) -> FrontierOverview:
        """The frontier's figures for an operator (``scrapy status``).

        Reads every queued host's queue length and park time, pipelined 500
        hosts a call: O(hosts), for monitoring only, never the hot path.
        """
        k = self.keys
        # TIME on its own: a cluster pipeline refuses keyless commands.
        now = await server_now_ms(self.client, k.leases)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.zrange(k.ready, 0, -1, withscores=True)
            pipe.zcard(k.leases)
            pipe.zrange(k.leases, 0, 0, withscores=True)
            pipe.exists(k.paused)
            pipe.llen(k.poison)
            hosts, leased, first, paused, poison = await pipe.execute()
        view = FrontierOverview(
            now_ms=now, leased=int(leased), paused=bool(paused), poisoned=int(poison)
        )
        sizes: list[tuple[int, str]] = []
        for i in range(0, len(hosts), 500):
            chunk = hosts[i : i + 500]
            async with self.client.pipeline(transaction=False) as pipe:
                for h, _ in chunk:
                    pipe.zcard(k.queue(h.decode()))
                    pipe.hget(k.host(h.decode()), PARK)
                # A key of the wrong type (poison, set aside by the lease
                # script when it meets it) reads as 0 here, not as a failure.
                replies = await pipe.execute(raise_on_error=False)
            for j, (h, score) in enumerate(chunk):
                n, park = (_count(r) for r in replies[2 * j : 2 * j + 2])
                view.queued += n
                sizes.append((n, h.decode()))
                if park > now:
                    view.hosts_parked += 1
                elif score > now:
                    view.hosts_waiting += 1
                else:
                    view.hosts_ready += 1
        sizes.sort(key=lambda t: (-t[0], t[1]))
        view.top_hosts = [(h, n) for n, h in sizes[:top]]
        if first:
            lease, deadline = first[0]
            view.next_lease_expiry = (lease.decode(), (int(deadline) - now) / 1000)
        return view


# A lease id of partition p > 0 travels as "<id>@<p>" (request meta, items):
# the partition's scripts keep their own ids ("<worker>:<seq>") untouched.
LEASE_PARTITION_SEP = "@"
# A partition whose last lease call found nothing due is not asked again for
# the time it said, and at most this long (s): new work may arrive in it from
# other workers' commits at any time (the scheduler's idle poll, too).
PARTITION_RECHECK = 0.5


def lease_token(partition: int, lease_id: str) -> str:
    """The id a worker carries for a lease of ``partition``.

    >>> lease_token(0, "w1:7"), lease_token(2, "w1:7")
    ('w1:7', 'w1:7@2')
    """
    return lease_id if partition == 0 else f"{lease_id}{LEASE_PARTITION_SEP}{partition}"


def split_lease(token: str) -> tuple[int, str]:
    """(partition, the partition's lease id) of a :func:`lease_token`.

    >>> split_lease("w1:7@2"), split_lease("w1:7"), split_lease("a@b:7")
    ((2, 'w1:7'), (0, 'w1:7'), (0, 'a@b:7'))
    """
    lease_id, sep, partition = token.rpartition(LEASE_PARTITION_SEP)
    if sep and partition.isdigit():
        return int(partition), lease_id
    return 0, token


class PartitionMismatch(ValueError):
    """A worker's ``FRONTIER_PARTITIONS`` is not the one its crawl's keys
    were written with."""


async def recorded_partitions(client: aredis.Redis, prefix: str) -> int | None:
    """The partition count a crawl's first worker recorded (None: none yet)."""
    value = await client.get(FrontierKeys(prefix).partitions)
    return None if value is None else int(value)


# FRONTIER_PARTITIONS's upper bound (extensions.settings.defaults).
_MAX_PARTITIONS = 256


def first_partitions(client: redis.Redis, prefix: str) -> int:
    """The partition count of a worker on a Redis Cluster that leaves
    ``FRONTIER_PARTITIONS`` unset: the count the crawl recorded
    (:meth:`PartitionedFrontier.pin`); one for a crawl written before
    partitions (the pin's rule); else one per master, so that a new crawl's
    frontier spreads over the whole cluster. Blocking: for the add-on, before
    the crawl starts (``client`` is a synchronous cluster client).
    """
    k = FrontierKeys(prefix)
    recorded = client.get(k.partitions)
    if recorded is not None:
        return int(recorded)
    if client.exists(k.ready, k.leases, k.delayed):
        return 1
    masters = len(cast("Any", client).get_primaries())
    return max(1, min(_MAX_PARTITIONS, masters))


class PartitionedFrontier:
    """The frontier of a crawl in ``partitions`` partitions (``FRONTIER_PARTITIONS``).

    Each partition is one :class:`Frontier` under its own hash tag, its
    scripts unchanged and within one slot; this class routes. A host belongs
    to one partition (:func:`extensions.utils.hosts.host_partition`), so a request
    is queued, leased and retried in its host's partition; a lease is
    acknowledged, renewed or handed back in the partition that leased it
    (its id says which, :func:`lease_token`).

    A commit whose requests and acknowledgements lie in one partition is one
    script, as with one partition. Otherwise each partition's part (its
    requests, its acknowledgements, its write-ahead entry) is one script, all
    sent at once: a redirect whose child lies in another partition than its
    parent's lease is then not atomic, but never lost. Should the worker stop
    after the parent's lease ended and before the child was queued, the
    child is still in its partition's write-ahead entry and a live worker
    queues it; the other way round, the parent is reclaimed and fetched
    again (at least once). Requests not written ahead are queued before any
    lease ends.

    Leasing: round robin over the partitions, starting one further on each
    call and, per worker, at an offset from its id (so a fleet does not
    start on the same partition); a call fills its count from the next
    partitions when one runs dry, and skips a partition whose last answer
    was "nothing due for W ms" until then (at most
    :data:`PARTITION_RECHECK`), so a worker never spins on empty ones.

    The worker beats into every partition's registry (one pipelined call),
    so a live worker recovers a dead one's write-ahead batches and leases in
    every partition. With one partition every call is exactly
    :class:`Frontier`'s.
    """

    def __init__(
        self,
        client: aredis.Redis,
        prefix: str,
        partitions: int = 1,
        worker: Worker | None = None,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, not {partitions}")
        self.client = client
        self.prefix = prefix
        self.parts = [
            Frontier(client, prefix, worker, p, partitions) for p in range(partitions)
        ]
        # Partition 0's keys: the crawl-wide ones (dead letters, recrawl).
        self.keys = self.parts[0].keys
        self._worker = worker
        self._next = mmh3.hash(worker.id, 0, signed=False) % partitions if worker else 0
        self._skip_until = [0.0] * partitions  # monotonic time
        self._due_at: list[float | None] = [0.0] * partitions  # monotonic; None: empty
        self._last = [LeaseBatch([], 0, 0, 0, 0) for _ in range(partitions)]
        # Write-ahead entry -> the partitions it was written to.
        self._logged: dict[str, set[int]] = {}

    @property
    def worker(self) -> Worker:
        return self.parts[0].worker

    async def pin(self) -> None:
        """Record this crawl's partition count, or check it against the one
        recorded: a host must map to one partition on every worker, or two
        records and two locks would exist for it (a politeness breach).

        A crawl without a record whose partition 0 holds frontier work was
        written by a worker of before partitions, with one partition.
        Raises :class:`PartitionMismatch`.
        """
        k, p = self.keys, len(self.parts)
        recorded = await recorded_partitions(self.client, self.prefix)
        legacy = (k.ready, k.leases, k.delayed)
        if recorded is None and p > 1 and await self.client.exists(*legacy):
            recorded = 1
        if recorded is None:
            await self.client.set(k.partitions, p, nx=True)
            recorded = await recorded_partitions(self.client, self.prefix)
        if recorded is not None and recorded != p:
            raise PartitionMismatch(
                f"FRONTIER_PARTITIONS={p}, but crawl {self.prefix!r} was "
                f"started with {recorded}: run every worker with "
                f"FRONTIER_PARTITIONS={recorded}, or start the crawl afresh "
                f"(scrapy reset)"
            )

    def part(self, partition: int) -> Frontier:
        """The frontier of one partition."""
        return self.parts[partition]

    def partition_of(self, host: str) -> int:
        return host_partition(host, len(self.parts))

    def _by_partition(self, tokens: Iterable[str]) -> dict[int, list[str]]:
        groups: dict[int, list[str]] = defaultdict(list)
        for token in tokens:
            partition, lease_id = split_lease(token)
            if partition >= len(self.parts):  # not one of ours: "@" in an id
                partition, lease_id = 0, token
            groups[partition].append(lease_id)
        return groups

    def _requests(
        self, requests: Iterable[QueuedRequest]
    ) -> dict[int, list[QueuedRequest]]:
        groups: dict[int, list[QueuedRequest]] = defaultdict(list)
        for r in requests:
            groups[self.partition_of(r.host)].append(r)
        return groups

    async def commit(
        self,
        requests: Sequence[QueuedRequest] = (),
        acks: Iterable[str] = (),
        wal: tuple[str, str] | None = None,
    ) -> tuple[int, int]:
        """:meth:`Frontier.commit` over the partitions (see the class)."""
        added, acked, _ = await self.commit_capped(requests, acks, wal)
        return added, acked

    async def commit_capped(
        self,
        requests: Sequence[QueuedRequest] = (),
        acks: Iterable[str] = (),
        wal: tuple[str, str] | None = None,
        cap: int = 0,
        refill_below: int = 0,
    ) -> tuple[int, int, list[Spilled]]:
        """:meth:`Frontier.commit_capped` over the partitions (see the
        class): each partition caps its own hosts; the requests refused in
        every partition, together. Each partition holding refused requests
        keeps its part of the write-ahead entry ``wal`` until the spill
        confirms them there (:mod:`extensions.core.frontier.spill`)."""
        queued, acked = self._requests(requests), self._by_partition(acks)
        logged = self._logged.get(wal[1], set()) if wal else set()
        touched = set(queued) | set(acked) | logged

        async def part(
            p: int,
            rs: Sequence[QueuedRequest] = (),
            ids: Iterable[str] = (),
            entry: tuple[str, str] | None = None,
        ) -> tuple[int, int, list[Spilled]]:
            return await self.part(p).commit_capped(rs, ids, entry, cap, refill_below)

        if len(touched) <= 1:
            p = touched.pop() if touched else 0
            parts = [await part(p, queued.get(p, ()), acked.get(p, ()), wal)]
            added, done = parts[0][0], parts[0][1]
        elif wal or not queued or not acked:
            # Every partition's part at once: a child whose partition fails
            # to commit after its parent's lease ended there is still in its
            # write-ahead entry, which recovery queues (never lost).
            parts = list(
                await asyncio.gather(
                    *(
                        part(p, queued.get(p, ()), acked.get(p, ()), wal)
                        for p in sorted(touched)
                    )
                )
            )
            added, done = sum(r[0] for r in parts), sum(r[1] for r in parts)
        else:
            # Children not written ahead: queue them first, then end the
            # parents' leases (at least once, never lost).
            parts = list(
                await asyncio.gather(*(part(p, rs) for p, rs in sorted(queued.items())))
            )
            seconds = await asyncio.gather(
                *(part(p, (), ids) for p, ids in sorted(acked.items()))
            )
            added, done = sum(r[0] for r in parts), sum(r[1] for r in seconds)
        if wal:
            self._logged.pop(wal[1], None)
        for p in queued:
            # Work arrived there: ask that partition again at the next lease.
            self._skip_until[p] = 0.0
            self._due_at[p] = 0.0
        return added, done, [s for r in parts for s in r[2]]

    async def log_ahead(
        self, worker: str, entry: str, requests: Sequence[QueuedRequest]
    ) -> None:
        """:meth:`Frontier.log_ahead`, each request in its host's partition."""
        groups = self._requests(requests)
        self._logged[entry] = set(groups)
        await asyncio.gather(
            *(self.part(p).log_ahead(worker, entry, rs) for p, rs in groups.items())
        )

    async def recover(self, dead_after_ms: int) -> tuple[int, int, int]:
        """:meth:`Frontier.recover` in every partition; the sums."""
        res = await asyncio.gather(*(f.recover(dead_after_ms) for f in self.parts))
        return (
            sum(r[0] for r in res),
            sum(r[1] for r in res),
            sum(r[2] for r in res),
        )

    async def quarantine_leases(
        self, entries: Sequence[tuple[str, bytes, str]]
    ) -> None:
        """Move leased entries a worker cannot use (lease token, entry, why)
        to the poison list of their partition."""
        groups: dict[int, list[tuple[str, str, bytes, str]]] = defaultdict(list)
        for token, entry, reason in entries:
            p, lease_id = split_lease(token)
            groups[p].append((self.part(p).keys.lease_data, lease_id, entry, reason))
        for p, bad in groups.items():
            await self.part(p).quarantine(bad)

    @property
    def poison_keys(self) -> list[str]:
        return [f.keys.poison for f in self.parts]

    async def lease(self, count: int, reclaim: int = 32) -> LeaseBatch:
        """Lease up to ``count`` requests, round robin over the partitions
        (see the class). The batch's figures are the fleet's, summed over the
        partitions (the skipped ones as their last answer left them)."""
        if len(self.parts) == 1:
            return await self.parts[0].lease(count, reclaim)
        n = len(self.parts)
        start, self._next = self._next, (self._next + 1) % n
        now = time.monotonic()
        leases: list[tuple[str, bytes]] = []
        reclaimed = poisoned = 0
        for p in ((start + i) % n for i in range(n)):
            if len(leases) >= count:
                break
            if self._skip_until[p] > now:
                continue
            batch = await self.parts[p].lease(count - len(leases), reclaim)
            self._last[p] = batch
            reclaimed += batch.reclaimed
            poisoned += batch.poisoned
            leases += [(lease_token(p, i), m) for i, m in batch.leases]
            wait = batch.wait_ms / 1000
            self._due_at[p] = None if batch.wait_ms < 0 else now + wait
            if not batch.leases:
                recheck = PARTITION_RECHECK
                if batch.wait_ms >= 0 and not batch.paused:
                    recheck = min(wait, PARTITION_RECHECK)
                self._skip_until[p] = now + recheck
        # A partition is next asked at the later of its due time and the end
        # of its skip: no earlier wake-up, or a worker would spin on it.
        due = [
            max(0.0, t - now, self._skip_until[p] - now)
            for p, t in enumerate(self._due_at)
            if t is not None
        ]
        return LeaseBatch(
            leases,
            reclaimed,
            round(min(due) * 1000) if due else -1,
            sum(b.hosts_ready for b in self._last),
            sum(b.leases_outstanding for b in self._last),
            poisoned,
            any(b.paused for b in self._last),
            any(b.spaced for b in self._last),
        )

    async def release(self, lease_ids: Sequence[str]) -> int:
        groups = self._by_partition(lease_ids)
        res = await asyncio.gather(
            *(self.part(p).release(ids) for p, ids in groups.items())
        )
        return sum(res)

    async def extend(self, lease_ids: Sequence[str]) -> int:
        groups = self._by_partition(lease_ids)
        res = await asyncio.gather(
            *(self.part(p).extend(ids) for p, ids in groups.items())
        )
        return sum(res)

    async def beat(self) -> None:
        """:meth:`Frontier.beat` into every partition's registry, one call."""
        if len(self.parts) == 1:
            return await self.parts[0].beat()
        # Each partition's registry stamped by its own master's clock (the
        # clock its recovery compares with), one round trip per master.
        beat = script(self.client, BEAT_LUA)
        await run_pipelined(
            self.client,
            [(beat, [f.keys.workers], [self.worker.id]) for f in self.parts],
        )
        return None

    async def retire(self) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            for f in self.parts:
                pipe.zrem(f.keys.workers, self.worker.id)
            await pipe.execute()

    async def flush(self) -> int:
        """:meth:`Frontier.flush` (its patterns match every partition)."""
        return await self.parts[0].flush()

    async def counts(self) -> tuple[int, int]:
        async with self.client.pipeline(transaction=False) as pipe:
            for f in self.parts:
                pipe.zcard(f.keys.ready)
                pipe.zcard(f.keys.leases)
            res = await pipe.execute()
        return sum(res[0::2]), sum(res[1::2])

    async def due(self) -> tuple[int, int]:
        res = await asyncio.gather(*(f.due() for f in self.parts))
        return sum(r[0] for r in res), sum(r[1] for r in res)

    async def waiting(self) -> Waiting:
        res = await asyncio.gather(*(f.waiting() for f in self.parts))
        due = [w.next_due_ms for w in res if w.next_due_ms >= 0]
        return Waiting(
            sum(w.urls for w in res), sum(w.hosts for w in res), min(due, default=-1)
        )

    async def queued(self) -> int:
        return sum(await asyncio.gather(*(f.queued() for f in self.parts)))

    async def retries(self) -> int:
        """Retries waiting for their due time (the delayed ZSETs)."""
        async with self.client.pipeline(transaction=False) as pipe:
            for f in self.parts:
                pipe.zcard(f.keys.delayed)
            return sum(await pipe.execute())

    async def pause(self) -> bool:
        """Pause every partition; False if all already were."""
        res = await asyncio.gather(*(f.pause() for f in self.parts))
        return any(res)

    async def resume(self) -> bool:
        res = await asyncio.gather(*(f.resume() for f in self.parts))
        return any(res)

    async def workers(self) -> dict[str, int]:
        """Worker id -> its latest heartbeat in any partition."""
        out: dict[str, int] = {}
        for beats in await asyncio.gather(*(f.workers() for f in self.parts)):
            for w, t in beats.items():
                out[w] = max(t, out.get(w, t))
        return out

    async def overview(self, top: int = 10) -> FrontierOverview:
        """:meth:`Frontier.overview` summed over the partitions."""
        views = await asyncio.gather(*(f.overview(top) for f in self.parts))
        if len(views) == 1:
            return views[0]
        total = FrontierOverview(now_ms=max(v.now_ms for v in views))
        expiries = []
        for p, v in enumerate(views):
            total.queued += v.queued
            total.hosts_ready += v.hosts_ready
            total.hosts_waiting += v.hosts_waiting
            total.hosts_parked += v.hosts_parked
            total.leased += v.leased
            total.paused = total.paused or v.paused
            total.poisoned += v.poisoned
            total.top_hosts += v.top_hosts
            if v.next_lease_expiry:
                lease_id, in_s = v.next_lease_expiry
                expiries.append((in_s, lease_token(p, lease_id)))
        total.top_hosts.sort(key=lambda t: (-t[1], t[0]))
        del total.top_hosts[top:]
        if expiries:
            in_s, token = min(expiries)
            total.next_lease_expiry = (token, in_s)
        return total
