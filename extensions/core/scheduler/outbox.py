"""The scheduler's outbox: requests on their way into the frontier.

Settings read (defaults in :mod:`extensions.settings.defaults`):
``FRONTIER_PRIORITY_FUNCTION``, ``SCHEDULER_DEBUG``.

Each batch of the outbox goes through stages (:class:`Stage`): written ahead,
run through the dupefilter, committed with the acknowledgements of the leases
that ended, its refused part spilled; a Redis failure resumes it from the
stage it reached (``docs/frontier.md``, "The write-ahead log").
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from scrapy.utils.misc import load_object

from extensions import meta
from extensions.core.frontier.frontier import QueuedRequest
from extensions.core.frontier.lua import PRIORITY_MAX, PRIORITY_MIN
from extensions.core.frontier.scoring import LocalHostCounts
from extensions.core.frontier.serialization import (
    UnserializableRequest,
    request_to_bytes,
)
from extensions.meta import DELAY_META
from extensions.signals import seeds_settled
from extensions.utils.hosts import host_key

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

    from extensions.core.frontier.frontier import PartitionedFrontier, Spilled
    from extensions.core.frontier.spill import FrontierSpill
    from extensions.core.scheduler.dedup import Dedup

logger = logging.getLogger(__name__)

# Requests of the outbox taken into one batch: one write-ahead entry, one
# dupefilter call and one commit script each.
OUTBOX_BATCH = 500


class Stage(Enum):
    """Where an outbox batch is on its way to Redis; a Redis failure retries
    the batch from its stage (:meth:`Outbox.sync`)."""

    #: Serialized and scored, not yet written anywhere.
    NEW = "new"
    #: Written ahead (:meth:`Frontier.log_ahead`): a live worker queues it
    #: should this one die before the commit.
    LOGGED = "logged"
    #: Sent to the dupefilter, whose answer was lost: queue the batch whole.
    UNCERTAIN = "uncertain"
    #: Filtered by the dupefilter: ``queued`` holds what to commit.
    DEDUPED = "deduped"
    #: Committed; ``refused`` holds what the cap refused, to write to the
    #: spill store (kept in the write-ahead entry until then).
    COMMITTED = "committed"


@dataclass
class _Batch:
    """An outbox batch on its way to Redis (see :meth:`Outbox.sync`)."""

    candidates: list[tuple[Request, QueuedRequest]]
    acks: list[str]
    entry: str
    stage: Stage = Stage.NEW
    queued: list[QueuedRequest] = field(default_factory=list)
    refused: list[Spilled] = field(default_factory=list)
    #: Seed-list entries of the batch's seeds (``meta.SEED_TAKEN``): settled
    #: once the batch is committed and its refused part spilled.
    seeds: list[str] = field(default_factory=list)
    #: The batch's seed requests (by id): one the dupefilter drops says why.
    seed_ids: set[int] = field(default_factory=set)


class Outbox:
    """Requests enqueued and leases ended, until Redis has taken them.

    Everything stays in memory until its commit: a Redis outage loses
    nothing. ``dedup`` answers which requests of a batch are new;
    ``before_commit()`` writes the round's dead letters before any
    acknowledgement goes out; ``queued()`` says new work is in the frontier."""

    def __init__(
        self,
        crawler: Crawler,
        dedup: Dedup,
        spill: FrontierSpill,
        *,
        before_commit: Callable[[], Awaitable[None]],
        queued: Callable[[], None],
    ) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.debug = s.getbool("SCHEDULER_DEBUG")
        path = s.get("FRONTIER_PRIORITY_FUNCTION")
        self.score: Callable[..., int] | None = load_object(path) if path else None
        self.host_counts = LocalHostCounts()
        self.dedup = dedup
        self.spill = spill
        self._before_commit = before_commit
        self._queued = queued
        self.frontier: PartitionedFrontier | None = None
        self.spider: Spider | None = None
        self.worker = ""
        self._requests: deque[tuple[Request, str | None]] = deque()
        # Each ended lease with the number of requests added before it (its
        # response's children among them): it goes out with the batch that
        # takes the last of those, never earlier (an ack before its page's
        # links are written ahead loses them if the worker dies then).
        self._acks: deque[tuple[str, int]] = deque()
        self._added = 0  # requests ever added
        self._taken = 0  # requests ever taken into a batch
        self._memory: deque[Request] = deque()  # requests JSON cannot hold
        # The batch on its way, kept apart from the outbox so a failed push
        # is retried without running the requests through the dupefilter
        # again (they are marked seen).
        self._batch: _Batch | None = None
        self._warned_unserializable = False
        self._warned_clamped = False

    def open(self, frontier: PartitionedFrontier, spider: Spider) -> None:
        self.frontier = frontier
        self.spider = spider
        self.worker = frontier.worker.id

    # -- what comes in ---------------------------------------------------------

    def add(self, request: Request, parent: str | None) -> None:
        """Queue ``request``; ``parent``: the lease it takes over (a redirect
        or retry), ended in the script that queues it."""
        self._requests.append((request, parent))
        self._added += 1

    def ack(self, lease: str) -> None:
        """``lease`` ended: acknowledged with the commit of the batch that
        holds the last request added so far (its children written ahead)."""
        self._acks.append((lease, self._added))

    def take_memory(self) -> Request | None:
        """A request that JSON cannot hold, kept in this worker's memory."""
        return self._memory.popleft() if self._memory else None

    # -- what it holds --------------------------------------------------------

    def __len__(self) -> int:
        return len(self._requests) + len(self._memory)

    @property
    def busy(self) -> bool:
        """Work for Redis: requests, acknowledgements or a batch on its way."""
        return bool(self._requests or self._acks or self._batch)

    @property
    def pending(self) -> bool:
        return self.busy or bool(self._memory)

    @property
    def written_ahead(self) -> bool:
        """A batch is (or may be) in this worker's write-ahead log."""
        return self._batch is not None

    @property
    def waiting(self) -> tuple[int, int]:
        """(requests, acknowledgements) not yet taken into a batch."""
        return len(self._requests), len(self._acks)

    def close(self) -> None:
        if self._memory:
            logger.warning(
                "%s requests that cannot be stored in Redis are lost on close",
                len(self._memory),
            )

    # -- the stages -------------------------------------------------------------

    async def sync(self) -> None:
        """Dedup the outbox, push it and send acknowledgements, in batches.

        A batch goes through stages kept in ``self._batch``, so a Redis
        failure at any point retries from where it stopped: written ahead
        (:meth:`Frontier.log_ahead`), run through the dupefilter, committed.
        The dupefilter marks URLs seen as it answers; if its answer is lost
        (connection dropped, worker killed), the batch is queued whole
        rather than dropped as "seen".
        """
        assert self.frontier is not None
        await self._before_commit()
        while self._batch or self._requests or self._acks:
            if self._batch is None:
                self._batch = self._prepare(*self._next_batch())
            p = self._batch
            if p.stage is Stage.NEW:
                if p.candidates:
                    await self.frontier.log_ahead(
                        self.worker, p.entry, [q for _, q in p.candidates]
                    )
                p.stage = Stage.LOGGED
            if p.stage is Stage.LOGGED:
                await self._dedup(p)
            if p.stage is Stage.UNCERTAIN:
                self.stats.inc_value("scheduler/dedup_uncertain", len(p.candidates))
                p.queued = [q for _, q in p.candidates]
                p.stage = Stage.DEDUPED
            if p.stage is not Stage.COMMITTED:
                await self._before_commit()
                await self._commit(p)
            if p.refused:
                # Kept in the write-ahead entry until written: a failure
                # here retries the write, never the commit.
                await self.spill.write(
                    p.refused, p.entry if p.candidates else "", self.worker
                )
            self._batch = None
            if p.seeds:
                # Queued, spilled or filtered as seen: their seed-list
                # entries may go (a live worker would queue them anyway).
                self.crawler.signals.send_catch_log(
                    seeds_settled, entries=p.seeds, spider=self.spider
                )

    def _next_batch(self) -> tuple[list[tuple[Request, str | None]], list[str]]:
        """The next requests (``OUTBOX_BATCH`` at most) and the acks that may
        go with them: those of leases whose requests are all in this batch
        or an earlier one."""
        n = min(OUTBOX_BATCH, len(self._requests))
        batch = [self._requests.popleft() for _ in range(n)]
        self._taken += n
        acks = []
        while self._acks and self._acks[0][1] <= self._taken:
            acks.append(self._acks.popleft()[0])
        return batch, acks

    async def _dedup(self, p: _Batch) -> None:
        """Run the batch through the dupefilter (``LOGGED`` to ``DEDUPED``;
        ``UNCERTAIN`` while its answer is awaited)."""
        p.stage = Stage.UNCERTAIN
        seen = await self.dedup.seen([r for r, _ in p.candidates])
        p.queued = []
        for (request, queued), dropped in zip(p.candidates, seen, strict=True):
            if dropped:
                self.dedup.drop(request, seed=id(request) in p.seed_ids)
            else:
                p.queued.append(queued)
        p.stage = Stage.DEDUPED

    async def _commit(self, p: _Batch) -> None:
        """Commit a deduplicated batch; what the spill cap refused stays in
        ``p.refused``."""
        assert self.frontier is not None
        wal = (self.worker, p.entry) if p.candidates else None
        added, acked, p.refused = await self.frontier.commit_capped(
            p.queued, p.acks, wal, self.spill.cap(), self.spill.refill_below
        )
        p.stage = Stage.COMMITTED
        if p.queued:
            self.stats.inc_value("scheduler/enqueued/redis", len(p.queued))
            self.stats.inc_value("scheduler/enqueued", len(p.queued))
            self._queued()
        if p.acks:
            self.stats.inc_value("scheduler/acked", acked)
        if self.debug:
            logger.debug("Pushed %s (%s new), acked %s", len(p.queued), added, acked)

    def _prepare(
        self, batch: list[tuple[Request, str | None]], acks: list[str]
    ) -> _Batch:
        """Serialize and score ``batch``. Leases of parents (redirects,
        retries) join the acknowledgements: they end with the child queued
        or filtered, in the same script."""
        candidates: list[tuple[Request, QueuedRequest]] = []
        seeds: list[str] = []
        seed_ids: set[int] = set()
        for request, parent in batch:
            if parent:
                acks.append(parent)
            seed = request.meta.pop(meta.SEED_TAKEN, None)
            if seed is not None:
                seeds.append(seed)
                seed_ids.add(id(request))
            # The retry delay is this queueing's, not the request's: it must
            # not travel on to a redirect or a deferral of the retry.
            delay = int(request.meta.pop(DELAY_META, 0) or 0)
            try:
                # With a dupefilter that passes identical requests (e.g.
                # BaseDupeFilter), each is its own queue member.
                member = request_to_bytes(
                    request, self.spider, unique=self.dedup.per_batch
                )
            except UnserializableRequest as exc:
                self._unserializable(request, exc)
                continue
            host = host_key(request.url)
            priority = (
                self.score(request, self.host_counts)
                if self.score
                else request.priority
            )
            self.host_counts.add(host)
            if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
                self._clamped(request, priority)
            candidates.append((request, QueuedRequest(host, priority, member, delay)))
        return _Batch(
            candidates, acks, uuid.uuid4().hex[:12], seeds=seeds, seed_ids=seed_ids
        )

    # -- what it says -----------------------------------------------------------

    def _clamped(self, request: Request, priority: int) -> None:
        """A priority beyond the frontier's range: the request keeps it (it
        comes back with it), its queue order saturates at the range's end."""
        self.stats.inc_value("scheduler/priority_clamped")
        if not self._warned_clamped:
            self._warned_clamped = True
            logger.warning(
                "Priority %s of %s is beyond the frontier's order (%s..%s): it "
                "is queued at the nearest end, and keeps its priority "
                "(counted in scheduler/priority_clamped; reported once)",
                priority, request, PRIORITY_MIN, PRIORITY_MAX,
            )  # fmt: skip

    def _unserializable(self, request: Request, exc: Exception) -> None:
        self.stats.inc_value("scheduler/unserializable")
        self.stats.inc_value("scheduler/enqueued/memory")
        self.stats.inc_value("scheduler/enqueued")
        if not self._warned_unserializable:
            logger.warning(
                "Unable to serialize request %s: %s - it is kept in this worker's "
                "memory only (not shared, lost if the worker dies); "
                "this is reported once",
                request,
                exc,
            )
            self._warned_unserializable = True
        self._memory.append(request)
