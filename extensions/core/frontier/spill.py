"""The frontier spill: queues past a cap wait in the page store, not in Redis.

A host queues at most ``FRONTIER_HOST_QUEUE_MAX`` requests in Redis
(``FRONTIER_SPILL_BATCH`` while Redis ``used_memory`` is over
``FRONTIER_MAX_MEMORY``, sampled every :data:`MEMORY_SAMPLE_S` s); the commit
script refuses the rest, the worker
writes them to the spill store (``FRONTIER_SPILL_STORE``: a class satisfying
:class:`SpillStore`), and one worker at a time refills a host from it in
score order as its queue drains, so a host's requests are leased in the
order Redis alone would give, and none is lost to a worker that dies. The
protocol and its guarantees: ``docs/spill.md``.

Settings read: ``FRONTIER_HOST_QUEUE_MAX``, ``FRONTIER_MAX_MEMORY``,
``FRONTIER_SPILL_STORE``, ``FRONTIER_SPILL_BATCH``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, runtime_checkable

from scrapy.utils.misc import build_from_crawler, load_object

from extensions.connection import info_per_master
from extensions.connection.locks import TokenLock, new_token
from extensions.connection.scripts import script
from extensions.core.frontier.lua import REFILL_LUA, REFILL_START_LUA, SPILLED_LUA

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from scrapy.crawler import Crawler

    from extensions.core.frontier.frontier import Frontier, Spilled

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Seconds between samples of Redis used_memory (FRONTIER_MAX_MEMORY).
MEMORY_SAMPLE_S = 5.0
# Seconds between looks at the refill SET when nothing else woke the worker.
REFILL_POLL_S = 0.5
# Hosts refilled per look: a bounded round, the other workers take the rest.
REFILL_HOSTS = 8
# The refill lock's TTL: a store round trip or two, with room.
REFILL_LOCK_MS = 30_000


@runtime_checkable
class SpillStore(Protocol):
    """Where requests past the cap wait: per host, entries (score, request)
    kept in score order. Called from one worker thread (never the reactor).
    ``spill_append`` is idempotent (an entry written twice is kept once:
    scores are unique per host)."""

    def spill_append(self, host: str, entries: Sequence[tuple[int, bytes]]) -> None:
        """Keep ``entries`` (score, serialized request) of ``host``."""
        ...

    def spill_take(self, host: str, n: int) -> list[tuple[int, bytes]]:
        """The first ``n`` entries of ``host`` by score (not removed)."""
        ...

    def spill_delete(self, host: str, scores: Sequence[int]) -> None:
        """Remove the entries of ``host`` with these scores."""
        ...

    def spill_count(self, host: str | None = None) -> int:
        """Entries kept, of ``host`` or of every host."""
        ...

    def spill_clear(self) -> int:
        """Remove every entry (the crawl starts afresh); returns how many."""
        ...

    def close(self) -> None: ...


class FrontierSpill:
    """One worker's side of the spill: the cap it commits with, the memory
    sample, writing refused requests and refilling hosts.

    Store calls run in one thread of their own (a store's connection may be
    bound to a thread; the reactor never waits on the store)."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        self.host_max = s.getint("FRONTIER_HOST_QUEUE_MAX")
        self.max_memory = s.getint("FRONTIER_MAX_MEMORY")
        self.batch = s.getint("FRONTIER_SPILL_BATCH")
        self.stats = crawler.stats
        path = s.get("FRONTIER_SPILL_STORE") or ""
        self.store: SpillStore | None = None
        if path:
            self.store = build_from_crawler(load_object(path), crawler)
        elif self.max_memory or (s.getpriority("FRONTIER_HOST_QUEUE_MAX") or 0) > 0:
            # Set above the "default" priority: a user asked for a cap.
            logger.warning(
                "FRONTIER_HOST_QUEUE_MAX/FRONTIER_MAX_MEMORY are set but "
                "FRONTIER_SPILL_STORE is empty: nothing spills, queues grow in Redis"
            )
        self.over_memory = False
        self.pending = False  # the refill SET had hosts at the last look
        self._next_sample = 0.0
        self._next_refill = 0.0
        self._executor: ThreadPoolExecutor | None = None
        # The frontier's partitions (one: extensions.core.frontier.frontier.Frontier)
        # and
        # the one that holds a host's keys.
        self.parts: Sequence[Frontier] = ()
        self.part_of: Callable[[str], Frontier] | None = None
        self._locks: TokenLock | None = None

    @property
    def enabled(self) -> bool:
        return self.store is not None and bool(self.host_max or self.max_memory)

    @property
    def refill_below(self) -> int:
        """The queue length under which a host with spilled requests is
        refilled (0: no spill)."""
        return self.batch if self.enabled else 0

    def cap(self) -> int:
        """The most requests a host may queue in Redis now (0: no cap)."""
        if not self.enabled:
            return 0
        if self.over_memory:
            return min(self.host_max, self.batch) if self.host_max else self.batch
        return self.host_max

    def open(
        self,
        parts: Sequence[Frontier],
        part_of: Callable[[str], Frontier] | None = None,
    ) -> None:
        """Spill for the frontier ``parts`` (one per partition; all on one
        client); ``part_of(host)`` names the one that holds a host (default:
        the only one)."""
        self.parts = list(parts)
        only = self.parts[0]
        self.part_of = part_of or (lambda _host: only)
        self._locks = TokenLock(only.client)
        if self.store is not None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="spill")

    async def close(self) -> None:
        if self._executor is not None:
            if self.store is not None:
                await self._call(self.store.close)
            self._executor.shutdown(wait=True)
            self._executor = None

    async def _call(self, func: Callable[..., T], *args: Any) -> T:
        assert self._executor is not None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, func, *args)

    async def write(self, refused: Sequence[Spilled], entry: str, worker: str) -> None:
        """Write refused requests to the store, then confirm them (the
        write-ahead entry ``entry`` of ``worker`` holding them goes)."""
        assert self.store is not None and self.part_of is not None
        by_host: dict[str, list[tuple[int, bytes]]] = defaultdict(list)
        for r in refused:
            by_host[r.host].append((r.score, r.member))
        for host, entries in by_host.items():
            await self._call(self.store.spill_append, host, entries)
        # Each partition confirms its hosts and drops its write-ahead entry.
        by_part: dict[int, tuple[Frontier, list[Any]]] = {}
        for host, entries in by_host.items():
            part = self.part_of(host)
            by_part.setdefault(id(part), (part, []))[1].extend([host, len(entries)])
        for part, pairs in by_part.values():
            k = part.keys
            await script(part.client, SPILLED_LUA)(
                keys=[k.wal(worker)], args=[k.host_prefix, entry, *pairs]
            )
        self.stats.inc_value("frontier/spilled", len(refused))

    async def step(self) -> None:
        """Sample Redis memory (every :data:`MEMORY_SAMPLE_S`) and refill
        the hosts waiting for it (every :data:`REFILL_POLL_S`)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if self.max_memory and now >= self._next_sample:
            self._next_sample = now + MEMORY_SAMPLE_S
            await self.sample()
        if now >= self._next_refill:
            self._next_refill = now + REFILL_POLL_S
            await self.refill()

    async def count(self) -> int:
        """Requests waiting in the spill store (0: no store)."""
        if self.store is None or self._executor is None:
            return 0
        return await self._call(self.store.spill_count)

    async def clear(self) -> None:
        """Empty the spill store (the crawl's keys were flushed)."""
        if self.store is not None:
            n = await self._call(self.store.spill_clear)
            logger.info("Deleted %s spilled requests from the spill store", n)

    def next_step(self) -> float:
        """When (monotonic) :meth:`step` has work: the next refill while
        hosts wait for one, the next memory sample; never when off."""
        if not self.enabled:
            return math.inf
        due = self._next_refill if self.pending else math.inf
        if self.max_memory:
            due = min(due, self._next_sample)
        return due

    async def sample(self) -> None:
        """Judge Redis over ``FRONTIER_MAX_MEMORY``: on a Redis Cluster, the
        fullest master (each master holds some partitions' queues, and a
        plain ``INFO`` asks only the client's default node)."""
        infos = await info_per_master(self.parts[0].client, "memory")
        used = max(int(info["used_memory"]) for info in infos)
        over = used > self.max_memory
        if over != self.over_memory:
            logger.info(
                "Redis used_memory %s B is %s FRONTIER_MAX_MEMORY (%s B): "
                "hosts queue at most %s requests in Redis",
                used,
                "over" if over else "back under",
                self.max_memory,
                self.batch if over else (self.host_max or "any number of"),
            )
        self.over_memory = over

    async def refill(self) -> int:
        """Refill up to :data:`REFILL_HOSTS` hosts of the refill SET, each
        under its lock; returns the requests queued back."""
        assert self._locks is not None
        pending = False
        moved = 0
        for part in self.parts:
            hosts = cast(
                "list[bytes]",
                await part.client.srandmember(part.keys.refill, REFILL_HOSTS) or [],
            )
            pending = pending or bool(hosts)
            for raw in hosts:
                host = raw.decode()
                token = new_token()
                lock = part.keys.spill_lock(host)
                if not await self._locks.acquire(lock, token, REFILL_LOCK_MS):
                    continue
                try:
                    moved += max(0, await self._refill_host(part, host))
                finally:
                    await self._locks.release(lock, token)
        self.pending = pending
        if moved:
            self.stats.inc_value("frontier/refilled", moved)
        return moved

    async def _refill_host(self, part: Frontier, host: str) -> int:
        assert self.store is not None
        k, client = part.keys, part.client
        if not await script(client, REFILL_START_LUA)(keys=[k.host(host)], args=[]):
            return 0  # some are on their way to the store: next round
        entries = await self._call(self.store.spill_take, host, self.batch + 1)
        more = len(entries) > self.batch
        entries = entries[: self.batch]
        args: list[Any] = [host, int(more), self.batch]
        for score, member in entries:
            args += [score, member]
        n = int(
            await script(client, REFILL_LUA)(
                keys=[
                    k.ready,
                    k.refill,
                    k.poison,
                    k.dlq,
                    k.dlq_reasons,
                    k.dlq_unrecorded,
                    k.host(host),
                    k.queue(host),
                ],
                args=args,
            )
        )
        if n > 0:
            await self._call(self.store.spill_delete, host, [s for s, _ in entries[:n]])
        return n
