"""The scheduler's leases: the buffer of leased requests, the heartbeat
that renews them, and the recovery of dead workers' work.

Settings read (defaults in :mod:`extensions.settings.defaults`):
``FRONTIER_BATCH_SIZE``, ``FRONTIER_BUFFER_SIZE``, ``CONCURRENT_REQUESTS``,
``FRONTIER_HEARTBEAT_INTERVAL``, ``MAX_IDLE_TIME_BEFORE_CLOSE``.

It leases a batch when the buffer runs half empty, renews at each heartbeat
the leases it holds, and remembers what Redis last said is due or leased
elsewhere, which is what keeps a finite crawl open (``docs/frontier.md``,
"Leases", "Worker registry and dead-worker recovery", "Idle and close").
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from extensions import meta
from extensions.core.frontier.serialization import CorruptEntry, request_from_bytes
from extensions.core.scheduler.leases import LeaseBook

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

    from extensions.core.frontier.frontier import PartitionedFrontier

logger = logging.getLogger(__name__)

# Leases are not renewed past this age: a request whose outcome never comes
# (a bug, a lost signal) is then reclaimed instead of being held forever.
MAX_LEASE_AGE = 3600.0
# Poll interval when the frontier is empty (other workers may add work).
IDLE_POLL = 0.5
# A worker whose heartbeat is this many intervals old is dead: its leases
# and write-ahead batches go back to the frontier.
DEAD_AFTER_HEARTBEATS = 3


class LeaseBuffer:
    """Leased requests, from the lease call to their end.

    ``ended(lease)`` hears of each lease whose outcome came (to acknowledge
    it); ``leased()`` of each batch of leases that arrived (to wake the
    engine). The :class:`LeaseBook` (``book``) says when a request handed to
    the engine is fully processed."""

    def __init__(
        self,
        crawler: Crawler,
        *,
        ended: Callable[[str], None],
        leased: Callable[[], None],
    ) -> None:
        s = crawler.settings
        self.stats = crawler.stats
        self.batch_size = s.getint("FRONTIER_BATCH_SIZE")
        buffer_size = s.getint("FRONTIER_BUFFER_SIZE")
        self.size = buffer_size or 2 * s.getint("CONCURRENT_REQUESTS", 16)
        self.heartbeat = s.getfloat("FRONTIER_HEARTBEAT_INTERVAL")
        # Work due within this many ms keeps a finite crawl open (later work
        # waits in Redis for the next run): the idle time it would close after.
        self.horizon_ms = int(s.getfloat("MAX_IDLE_TIME_BEFORE_CLOSE") * 1000)
        self._ended = ended
        self._leased = leased
        self.frontier: PartitionedFrontier | None = None
        self.spider: Spider | None = None
        # Local state, all touched only on the reactor thread.
        self._buffer: deque[tuple[str, Request]] = deque()
        self._held: dict[str, float] = {}  # lease -> time leased (monotonic)
        # What each lease handed to the engine waits for.
        self.book = LeaseBook(self.end)
        self._remote_ready = 0
        self._remote_leases = 0
        self._other_leases = 0  # leases outstanding not held by this worker
        self.paused = False  # the fleet is paused (scrapy pause): lease nothing
        self._next_poll = 0.0
        self._next_heartbeat = 0.0
        self.beaten = False  # this worker is in the workers ZSET
        self._warned_poison = False

    def open(self, frontier: PartitionedFrontier, spider: Spider) -> None:
        self.frontier = frontier
        self.spider = spider

    # -- the engine's side ----------------------------------------------------

    def __len__(self) -> int:
        return len(self._buffer)

    @property
    def low(self) -> bool:
        """The buffer is half empty: time to lease more."""
        return len(self._buffer) <= self.size // 2

    def take(self) -> Request | None:
        """The next leased request, handed to the engine, or None."""
        if not self._buffer:
            return None
        lease, request = self._buffer.popleft()
        self._held[lease] = time.monotonic()
        self.book.begin(lease)
        request.meta[meta.FRONTIER_LEASE] = lease
        return request

    def hand_over(self, lease: str) -> None:
        """``lease`` goes over to a child (a redirect, a retry): the script
        that queues the child ends it."""
        self._held.pop(lease, None)
        self.book.forget(lease)

    def end(self, lease: str | None) -> None:
        """The outcome of ``lease`` came: acknowledge it (once)."""
        if lease and self._held.pop(lease, None) is not None:
            self.book.forget(lease)
            self._ended(lease)

    def end_output(self, lease: str) -> None:
        """The output of ``lease``'s response stopped: its lease ends once
        the items it yielded are finished (at once if it is not followed)."""
        if self.book.tracks(lease):
            self.book.output_ended(lease)
        else:
            self.end(lease)

    @property
    def pending(self) -> bool:
        """Work this worker holds or Redis last said is due or leased
        elsewhere (a request in the engine is the engine's to count; a
        response processed whose item a pipeline still holds is ours)."""
        return bool(
            self.paused
            or self._buffer
            or self.book.holding
            or self._remote_ready
            or self._other_leases
        )

    @property
    def figures(self) -> tuple[int, int]:
        """(hosts with queued requests, leases outstanding fleet-wide), as the
        last lease or heartbeat call saw them (no Redis call)."""
        return self._remote_ready, self._remote_leases

    # -- when it has work ---------------------------------------------------------

    def beat_due(self, now: float) -> bool:
        """True when the heartbeat is due (and schedules the next one: a
        failing beat is tried again at the next interval)."""
        if now < self._next_heartbeat:
            return False
        self._next_heartbeat = now + self.heartbeat
        return True

    def lease_due(self, now: float) -> bool:
        return self.low and now >= self._next_poll

    def poll_now(self) -> None:
        """Work appeared: look for it now rather than at the next poll."""
        self._next_poll = 0.0

    def poll_after(self, seconds: float) -> None:
        self._next_poll = time.monotonic() + seconds

    def next_due(self) -> float:
        """When (monotonic) the buffer next has Redis work."""
        if self.low:
            return min(self._next_heartbeat, self._next_poll)
        return self._next_heartbeat

    # -- Redis work ---------------------------------------------------------------

    async def refill(self) -> None:
        assert self.frontier is not None
        want = min(self.batch_size, self.size - len(self._buffer))
        batch = await self.frontier.lease(want)
        # Due work only, or about to be: a host waiting out its spacing, or
        # anything due within the idle horizon. A host parked for longer, or
        # a retry due later, is not pending: it waits in Redis.
        self._remote_ready = int(batch.spaced or 0 <= batch.wait_ms <= self.horizon_ms)
        self._remote_leases = batch.leases_outstanding
        if batch.paused != self.paused:
            await self._pause(batch.paused)
        if batch.reclaimed:
            self.stats.inc_value("scheduler/reclaimed", batch.reclaimed)
            logger.info("Reclaimed %s expired leases", batch.reclaimed)
        self._poisoned(batch.poisoned)
        bad: list[tuple[str, bytes, str]] = []
        for lease, member in batch.leases:
            try:
                request = request_from_bytes(member, self.spider)
            except CorruptEntry as exc:
                bad.append((lease, member, str(exc)))
                continue
            self._buffer.append((lease, request))
        self._count_others(batch.leases_outstanding - len(bad))
        if bad:
            # Set aside before the leases end: if this fails, the leases
            # expire and the entries come back to be judged again.
            await self.frontier.quarantine_leases(bad)
            for lease, _, _ in bad:
                self._ended(lease)
            self._poisoned(len(bad))
        now = time.monotonic()
        if batch.leases:
            self._next_poll = now  # there may be more ready right away
            self._leased()
        elif batch.wait_ms >= 0 and not batch.paused:
            self._next_poll = now + min(batch.wait_ms / 1000, IDLE_POLL)
        else:
            self._next_poll = now + IDLE_POLL

    async def _pause(self, paused: bool) -> None:
        assert self.frontier is not None
        if paused:
            # Finish the downloads under way; hand back what has not
            # started, so it waits in its host's queue, not in this worker.
            # Out of the buffer before the await: the engine takes requests
            # from it meanwhile, and one it started must not be handed back
            # too (fetched twice). A Redis error leaves these leases to
            # expire: queued again, late, never fetched twice.
            unstarted = self.unstarted()
            if unstarted:
                await self.frontier.release(unstarted)
            logger.info(
                "Fleet paused: leasing nothing, finishing %s requests under "
                "way, %s unstarted handed back",
                len(self._held),
                len(unstarted),
            )
        else:
            logger.info("Fleet resumed: leasing again")
        self.paused = paused

    def unstarted(self) -> list[str]:
        """Take the leases never handed to the engine out of the buffer."""
        leases = [lease for lease, _ in self._buffer]
        self._buffer.clear()
        return leases

    async def learn_pending(self) -> None:
        """What the crawl holds in Redis, as pending work (no lease taken):
        queued hosts (due, spaced or parked: the first lease round tells
        them apart), retries and other workers' leases."""
        assert self.frontier is not None
        hosts, leased = await self.frontier.counts()
        retries = await self.frontier.retries()
        self._remote_ready = int(bool(hosts or retries))
        self._remote_leases = leased
        self._count_others(leased)

    async def beat(self) -> None:
        """Beat, renew this worker's leases, read what is due."""
        assert self.frontier is not None
        await self.frontier.beat()
        self.beaten = True
        now = time.monotonic()
        self._abandon([t for t, at in self._held.items() if now - at >= MAX_LEASE_AGE])
        renew = [*self._held, *(lease for lease, _ in self._buffer)]
        if renew:
            await self.frontier.extend(renew)
        ready, self._remote_leases = await self.frontier.due()
        self._remote_ready = self._remote_ready or ready
        self._count_others(self._remote_leases)

    def _abandon(self, leases: list[str]) -> None:
        """Leases past ``MAX_LEASE_AGE``, whose outcome never came: no longer
        renewed (they expire and are fetched again), and no longer work this
        worker holds (a finite crawl would never close on them). An outcome
        that comes after all acknowledges nothing."""
        for lease in leases:
            self._held.pop(lease, None)
            self.book.forget(lease)
        if leases:
            self.stats.inc_value("scheduler/lease_abandoned", len(leases))
            logger.warning(
                "Gave up %s leases held over %.0f s with no outcome: they "
                "expire and are fetched again (scheduler/lease_abandoned)",
                len(leases),
                MAX_LEASE_AGE,
            )

    def _count_others(self, outstanding: int) -> None:
        """Leases held by other workers: a worker must not close while they
        hold work that may come back (its own are in the engine's count)."""
        self._other_leases = max(0, outstanding - len(self._held) - len(self._buffer))

    async def recover(self) -> None:
        """Take back the leases and write-ahead batches of dead workers."""
        assert self.frontier is not None
        recovered, poisoned, reclaimed = await self.frontier.recover(
            int(self.heartbeat * DEAD_AFTER_HEARTBEATS * 1000)
        )
        self._poisoned(poisoned)
        if recovered:
            self.stats.inc_value("scheduler/recovered", recovered)
            logger.warning(
                "Queued again %s requests a stopped worker had not queued", recovered
            )
        if reclaimed:
            self.stats.inc_value("scheduler/reclaimed_dead", reclaimed)
            logger.warning(
                "Took back %s leases of workers silent for %d heartbeats",
                reclaimed,
                DEAD_AFTER_HEARTBEATS,
            )

    def _poisoned(self, n: int) -> None:
        """Count entries moved to the poison list; log the first time only."""
        if not n:
            return
        assert self.frontier is not None
        self.stats.inc_value("scheduler/poison", n)
        if not self._warned_poison:
            logger.warning(
                "Moved %s malformed frontier entries to %s (reported once; "
                "counted in scheduler/poison)",
                n,
                ", ".join(self.frontier.poison_keys),
            )
            self._warned_poison = True
