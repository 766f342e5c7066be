"""A Scrapy scheduler whose queue is the shared Redis frontier.

Settings read (defaults in :mod:`extensions.settings.defaults`):
``FRONTIER_BATCH_SIZE``,
``FRONTIER_BUFFER_SIZE``, ``FRONTIER_LEASE_TIMEOUT``, ``FRONTIER_PARTITIONS``,
``FRONTIER_HEARTBEAT_INTERVAL``, ``FRONTIER_PRIORITY_FUNCTION``,
``SCHEDULER_PERSIST``, ``SCHEDULER_FLUSH_ON_START``, ``REDIS_RETRY_INITIAL``,
``REDIS_RETRY_MAX``, ``DOWNLOAD_DELAY``, ``BACKOFF_QUIET_PERIOD``,
``CONCURRENT_REQUESTS``, ``DUPEFILTER_CLASS``, ``SCHEDULER_DEBUG``,
``DUPEFILTER_DEBUG`` (each seed dropped as seen logged); the
frontier spill's (:mod:`extensions.core.frontier.spill`): ``FRONTIER_HOST_QUEUE_MAX``,
``FRONTIER_MAX_MEMORY``, ``FRONTIER_SPILL_STORE``, ``FRONTIER_SPILL_BATCH``.

How it keeps Scrapy's synchronous contract without blocking the reactor:
``enqueue_request`` puts the request in a local outbox and returns ``True``;
``next_request`` takes from a local buffer of leased requests and returns
``None`` when it is empty. One background task (asyncio, on the reactor's
loop) does all Redis work in few round trips: it runs the outbox through the
dupefilter in one batch, pushes the survivors and acknowledges finished
leases in one script, refills the buffer with a batch of leases when it runs
low, renews this worker's leases and reclaims expired ones. When Redis is
unreachable it waits and retries with back-off; nothing is dropped, since the
outbox and acknowledgements stay in memory until Redis takes them. Any other
failure of one step (heartbeat, recover, push, lease) is logged with its
traceback once per run of failures and counted
(``scheduler/step_errors/<step>``), and the other steps still run: one bad
entry in Redis or one bug cannot stop the worker's whole share of the fleet.
Entries the worker cannot use (see :mod:`extensions.core.frontier.frontier`, "Poison")
go to the poison list, counted as ``scheduler/poison`` and logged once.

Leases end (are acknowledged) when the request's outcome is final and
durable: its page stored (signal :data:`extensions.signals.items_stored`), a
redirect or retry queued in its place (handed over atomically in the same
script), or the request dropped (spider error, dropped item, filtered).
A retry carries its delay in ``meta["frontier_delay_ms"]``
(:mod:`extensions.utils.failures`): it waits in Redis, not here.

A seed request carries its seed-list entry (``meta["seed_taken"]``,
:mod:`extensions.core.seeds`): the scheduler takes it off and sends
:data:`extensions.signals.seeds_settled` once the seed's batch is committed
(or the seed was refused in ``request_scheduled``), so the entry leaves its
worker's taken list only when a live worker would queue the request anyway.
A seed the dupefilter drops (the crawl has seen its URL) is counted as
``seeds/filtered`` and logged with how to crawl it again.

Terminal failures reach the dead-letter queue
(:mod:`extensions.core.frontier.deadletters`) through
the :data:`extensions.signals.request_dead` signal: they are written before
the acknowledgements of the same round, so a failed page is never acknowledged
without its dead letter. A redirect that another component refuses in
``request_scheduled`` (Scrapy's OffsiteMiddleware, before ``enqueue_request``)
ends its parent's lease with a dead letter (``offsite_redirect``).

A crawl is idle when no work is due: no host may be fetched from now, no
retry is due, no lease is out anywhere in the fleet, and the local queues are
empty, as Redis last answered: while Redis does not answer, nothing is
idle. Parked hosts and retries due later do not keep a finite crawl
(``MAX_IDLE_TIME_BEFORE_CLOSE``) open: they stay in Redis for the next run,
and the closing log line and the ``frontier/waiting_*`` stats say how many.
A worker silent for three heartbeats is dead: its leases go back at once.

Dead letters with no page record (those the scheduler writes itself, and
those the frontier's scripts write: the host-down sweep, the commit's
diversion of a down host's new URLs) are taken from the dead-letter queue a
page of :data:`RECORD_PAGE` at a time, at each heartbeat and at once while
more wait, and sent with :data:`extensions.signals.dead_letters_unrecorded`,
so the page store records them as it records the spider's final failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Self

from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.misc import build_from_crawler, load_object
from twisted.internet.defer import Deferred

from extensions import meta
from extensions.connection import (
    FATAL_REDIS_ERRORS,
    TRANSIENT_REDIS_ERRORS,
    async_client,
)
from extensions.connection.scripts import server_now_ms
from extensions.core.frontier.deadletters import DeadLetter, DeadLetters, dead_letter
from extensions.core.frontier.frontier import (
    PartitionedFrontier,
    QueuedRequest,
    Spilled,
    Worker,
    worker_id,
)
from extensions.core.frontier.lua import PRIORITY_MAX, PRIORITY_MIN
from extensions.core.frontier.scoring import LocalHostCounts
from extensions.core.frontier.serialization import (
    CorruptEntry,
    UnserializableRequest,
    request_from_bytes,
    request_to_bytes,
)
from extensions.core.frontier.spill import FrontierSpill
from extensions.core.scheduler.leases import (
    LeaseBook,
    lease_of,
    lease_of_response,
    unwrap,
)
from extensions.meta import DELAY_META, FAILURE_META
from extensions.settings import config, defaults
from extensions.signals import (
    dead_letters_unrecorded,
    item_held,
    items_stored,
    request_dead,
    seeds_settled,
)
from extensions.utils.failures import TrapFiltered, classify_exception
from extensions.utils.hosts import host_key
from extensions.utils.url import canonicalize_url

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

# Finish reason of a crawl stopped because Redis refused its credentials.
REDIS_AUTH_REASON = "redis_auth"
# Leases are not renewed past this age: a request whose outcome never comes
# (a bug, a lost signal) is then reclaimed instead of being held forever.
MAX_LEASE_AGE = 3600.0
# Poll interval when the frontier is empty (other workers may add work).
IDLE_POLL = 0.5
# A worker whose heartbeat is this many intervals old is dead: its leases
# and write-ahead batches go back to the frontier.
DEAD_AFTER_HEARTBEATS = 3
# Dead letters without a page record handed to the store per partition and
# round: bounded replies, whatever the size of a host-down sweep.
RECORD_PAGE = 200


async def _maybe_await(result: Any) -> Any:
    if isinstance(result, Deferred):
        return await maybe_deferred_to_future(result)
    if inspect.isawaitable(result):
        return await result
    return result


class Stage(Enum):
    """Where an outbox batch is on its way to Redis; a Redis failure retries
    the batch from its stage (``RedisScheduler._sync_out``)."""

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
    """An outbox batch on its way to Redis (see ``RedisScheduler._sync_out``)."""

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


class RedisScheduler(BaseScheduler):
    """Scrapy scheduler over :class:`extensions.core.frontier.frontier.Frontier`.

    Ordering: higher ``request.priority`` first (after the scoring function),
    FIFO within a priority, per host; across hosts, whichever host may be
    fetched soonest. Persistence: the frontier, the dupefilter and the
    politeness records stay in Redis when the crawl closes unless
    ``SCHEDULER_PERSIST`` is False (this scheduler is the only component
    that deletes crawl keys); ``SCHEDULER_FLUSH_ON_START`` starts afresh.
    """

    #: A request deferred because its host may not be fetched now (robots.txt
    #: unreachable, parked, spaced) waits in its host's queue in Redis, not
    #: in a worker: the downloader middlewares read this to defer freely.
    parks_hosts = True

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        s = crawler.settings
        config.require(s, defaults)
        self.batch_size = s.getint("FRONTIER_BATCH_SIZE")
        buffer_size = s.getint("FRONTIER_BUFFER_SIZE")
        self.buffer_size = buffer_size or 2 * s.getint("CONCURRENT_REQUESTS", 16)
        self.lease_timeout = s.getfloat("FRONTIER_LEASE_TIMEOUT")
        self.partitions = s.getint("FRONTIER_PARTITIONS")
        self.heartbeat = s.getfloat("FRONTIER_HEARTBEAT_INTERVAL")
        self.persist = s.getbool("SCHEDULER_PERSIST")
        self.flush_on_start = s.getbool("SCHEDULER_FLUSH_ON_START")
        self.retry_initial = s.getfloat("REDIS_RETRY_INITIAL")
        self.retry_max = s.getfloat("REDIS_RETRY_MAX")
        self.default_delay_ms = int(s.getfloat("DOWNLOAD_DELAY", 0) * 1000)
        # The frontier forgives a stale back-off by the same rule as the
        # back-off middleware (extensions.downloadermiddlewares.backoff), so both agree
        # on spacing.
        self.backoff_quiet_ms = int(s.getfloat("BACKOFF_QUIET_PERIOD") * 1000)
        self.debug = s.getbool("SCHEDULER_DEBUG")
        self.dupefilter_debug = s.getbool("DUPEFILTER_DEBUG")
        self._said_seed_seen = False
        # Work due within this many ms keeps a finite crawl open (later work
        # waits in Redis for the next run): the idle time it would close after.
        self.horizon_ms = int(s.getfloat("MAX_IDLE_TIME_BEFORE_CLOSE") * 1000)
        path = s.get("FRONTIER_PRIORITY_FUNCTION")
        self.score: Callable[..., int] | None = load_object(path) if path else None
        self.host_counts = LocalHostCounts()
        self.spill = FrontierSpill(crawler)
        self.dupefilter = build_from_crawler(
            load_object(s["DUPEFILTER_CLASS"]), crawler
        )
        # BloomDupeFilter's memory of its answers (no Redis call); None for
        # a dupefilter without one.
        self._seen_before: Callable[[Request], bool] | None = getattr(
            self.dupefilter, "seen_before", None
        )
        # A dupefilter with a batch call (BloomDupeFilter) is asked once per
        # outbox batch, after the write-ahead; any other BaseDupeFilter
        # (RFPDupeFilter, BaseDupeFilter...) in enqueue_request, as Scrapy's
        # own scheduler asks it: it keeps what it saw in this process.
        self._batch_dedup = callable(getattr(self.dupefilter, "requests_seen", None))
        self.worker = worker_id()
        self.stats = crawler.stats
        self.spider: Spider | None = None
        self.frontier: PartitionedFrontier | None = None
        self.dlq: DeadLetters | None = None
        self._dead: list[DeadLetter] = []
        self._dead_unrecorded: list[DeadLetter] = []  # written here, no page
        self._records_left = 0  # unrecorded dead letters still listed
        # Redirects announced in request_scheduled, not yet enqueued: a
        # component that refuses one there never calls enqueue_request.
        self._announced: dict[int, Request] = {}
        # Local state, all touched only on the reactor thread.
        self._outbox: deque[tuple[Request, str | None]] = deque()
        self._acks: list[str] = []
        self._buffer: deque[tuple[str, Request]] = deque()
        self._memory: deque[Request] = deque()  # requests JSON cannot hold
        self._held: dict[str, float] = {}  # lease -> time leased (monotonic)
        # What each lease handed to the engine waits for (.leases).
        self.leases = LeaseBook(self._ack)
        self._failed_output: set[str] = set()  # leases whose output raised
        self._remote_ready = 0
        self._remote_leases = 0
        self._other_leases = 0  # leases outstanding not held by this worker
        self.paused = False  # the fleet is paused (scrapy pause): lease nothing
        self._next_poll = 0.0
        self._next_heartbeat = 0.0
        self._next_records = 0.0
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closer: asyncio.Future[None] | None = None
        self._redis_down_since: float | None = None
        self._retry_delay = self.retry_initial
        # Deduplicated requests and acknowledgements waiting for Redis: kept
        # apart from the outbox so a failed push is retried without running
        # the requests through the dupefilter again (they are marked seen).
        self._pending: _Batch | None = None
        self._warned_unserializable = False
        self._warned_clamped = False
        self._wake_warned = False
        self._warned_poison = False
        self._beaten = False  # this worker is in the workers ZSET
        self._failing: dict[str, int] = {}  # stage -> failures in a row

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    # -- Scrapy's scheduler contract ------------------------------------------

    def open(self, spider: Spider) -> Deferred[None]:
        return deferred_from_coro(self.open_async(spider))

    async def open_async(self, spider: Spider) -> None:
        """Open the frontier and the dupefilter; start the background task."""
        if problem := dupefilter_problem(type(self.dupefilter)):
            raise TypeError(problem)
        self.spider = spider
        self.client = async_client(self.crawler)
        self.frontier = PartitionedFrontier(
            self.client,
            spider.name,
            self.partitions,
            Worker(
                self.worker,
                int(self.lease_timeout * 1000),
                self.default_delay_ms,
                self.backoff_quiet_ms,
                self.spill.refill_below,
            ),
        )
        # Each partition caps and refills its own hosts.
        frontier = self.frontier
        self.spill.open(
            frontier.parts, lambda host: frontier.part(frontier.partition_of(host))
        )
        self.dlq = DeadLetters(self.client, spider.name, self.partitions)
        sig = self.crawler.signals
        sig.connect(self._on_request_dead, signal=request_dead)
        sig.connect(self._on_request_scheduled, signal=signals.request_scheduled)
        sig.connect(self._on_items_stored, signal=items_stored)
        sig.connect(self._on_item_held, signal=item_held)
        sig.connect(self._on_item_finished, signal=signals.item_scraped)
        sig.connect(self._on_item_finished, signal=signals.item_dropped)
        sig.connect(self._on_item_finished, signal=signals.item_error)
        sig.connect(self._on_spider_error, signal=signals.spider_error)
        sig.connect(self._on_request_dropped, signal=signals.request_dropped)
        if self.flush_on_start:
            await self._retrying(self._flush_keys)
        # A crawl keeps the partition count it was started with (the same
        # host in two partitions would have two locks).
        await self._retrying(self.frontier.pin)
        await _maybe_await(self.dupefilter.open())
        logger.info(
            "Frontier %r opened as worker %s (persist=%s)",
            self.spider.name if self.spider else "",
            self.worker,
            self.persist,
        )
        # Know what Redis holds for the crawl before the engine first asks: a
        # resumed crawl must not look finished (and close) in the instant
        # before its first lease. Nothing is leased here: the engine is not
        # running yet, and a lease held through the rest of its start-up
        # could expire before its first renewal on a loaded machine.
        await self._retrying(self._learn_pending)
        self._task = asyncio.ensure_future(self._run())

    def close(self, reason: str) -> Deferred[None]:
        return deferred_from_coro(self.close_async(reason))

    async def close_async(self, reason: str) -> None:
        """Stop the background task, hand back unstarted leases, push what is
        left and close the dupefilter (and flush the crawl's keys unless it
        persists)."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        # Hand back what was leased but never started, then push what is left.
        unstarted = [lease for lease, _ in self._buffer]
        self._buffer.clear()
        assert self.frontier is not None
        if unstarted:
            returned = await self._retrying(self.frontier.release, unstarted, limit=5)
            logger.info("Handed back %s unstarted leases", returned)
        await self._retrying(self._sync_out, limit=5)
        await self._retrying(self._report_waiting, limit=2)
        # A store error is logged (and counted) like a failed step, never
        # stops the close.
        await self._stage("spill", self._report_spilled)
        if self._pending is None:
            # Nothing written ahead is left: no one needs to recover us.
            await self._retrying(self.frontier.retire, limit=2)
        if self._memory:
            logger.warning(
                "%s requests that cannot be stored in Redis are lost on close",
                len(self._memory),
            )
        await _maybe_await(self.dupefilter.close(reason))
        if not self.persist:
            await self._retrying(self._flush_keys, limit=5)
        await self.spill.close()
        await self.client.aclose()

    def has_pending_requests(self) -> bool:
        # A paused fleet is not finished: never close for idleness meanwhile.
        # Nor while Redis is away: idle means Redis said nothing is due, not
        # that it did not answer (the figures below are from before it left).
        return bool(
            self.paused
            or self._redis_down_since is not None
            or self._buffer
            or self._outbox
            or self._acks
            or self._dead
            or self._dead_unrecorded
            or self._records_left
            or self._pending
            or self._memory
            # A request in the engine is the engine's to count; a response
            # processed whose item a pipeline still holds is ours.
            or self.leases.holding
            or self._remote_ready
            or self._other_leases
            or self.spill.pending
        )

    def enqueue_request(self, request: Request) -> bool:
        # Served back as it was made: the canonical URL is the dupefilter's
        # key (extensions.dupefilters), never a replacement of the spider's.
        self._announced.pop(id(request), None)
        # A redirect, retry or deferral of a leased request is a copy made
        # while the leases middleware stood in for its errback.
        unwrap(request)
        if not self._batch_dedup and self._request_seen(request):
            self._redirect_loop(request)
            return False
        if self._seen_before is not None and self._seen_before(request):
            # A repeat of a fingerprint this worker's dupefilter already
            # answered for (most links of a page): dropped before it is
            # serialized and written ahead. The engine sends request_dropped,
            # which ends a parent's lease as the batch path does.
            self._redirect_loop(request)
            if meta.SEED_TAKEN in request.meta:
                self._seed_seen(request)
            return False
        parent = request.meta.pop(meta.FRONTIER_LEASE, None)
        if parent is not None:
            # A redirect or retry of a leased request: the lease is handed
            # over in the script that queues this request.
            self._held.pop(parent, None)
            self.leases.forget(parent)
        self._outbox.append((request, parent))
        self._wakeup.set()
        return True

    def _request_seen(self, request: Request) -> bool:
        """Scrapy's own scheduler's question to a dupefilter, and its log."""
        if request.dont_filter or not self.dupefilter.request_seen(request):
            return False
        if type(self.dupefilter).log is not BaseDupeFilter.log:
            self.dupefilter.log(request, self.spider)  # (BaseDupeFilter's warns)
        return True

    @property
    def df(self) -> BaseDupeFilter:
        """The dupefilter, under the name of Scrapy's own scheduler."""
        return self.dupefilter

    def next_request(self) -> Request | None:
        if len(self._buffer) <= self.buffer_size // 2:
            self._wakeup.set()
        if self._buffer:
            lease, request = self._buffer.popleft()
            self._held[lease] = time.monotonic()
            self.leases.begin(lease)
            request.meta[meta.FRONTIER_LEASE] = lease
            self.stats.inc_value("scheduler/dequeued/redis")
            self.stats.inc_value("scheduler/dequeued")
            return request
        if self._memory:
            self.stats.inc_value("scheduler/dequeued/memory")
            self.stats.inc_value("scheduler/dequeued")
            return self._memory.popleft()
        return None

    def __len__(self) -> int:
        return len(self._buffer) + len(self._outbox) + len(self._memory)

    @property
    def frontier_counts(self) -> tuple[int, int]:
        """(hosts with queued requests, leases outstanding fleet-wide), as the
        last lease or heartbeat call saw them (no Redis call)."""
        return self._remote_ready, self._remote_leases

    # -- outcomes ----------------------------------------------------------------

    def _ack(self, lease: str | None) -> None:
        if lease and self._held.pop(lease, None) is not None:
            self.leases.forget(lease)
            self._acks.append(lease)
            self._wakeup.set()

    def _on_items_stored(self, items: list[Any]) -> None:
        for item in items:
            self.leases.stored(item)

    def _on_item_held(self, item: Any, **_: Any) -> None:
        self.leases.hold(item)

    def _on_item_finished(self, item: Any, response: Any = None, **_: Any) -> None:
        self.leases.item_finished(lease_of_response(response))

    # -- how a leased request ended (called by .leases) -------------------------

    def response_reached_spider(self, response: Any) -> None:
        """A leased response goes to its callback (or errback): a response
        the failure policy gave up on (a 5xx or 429 out of attempts) is dead
        letter, filed before its lease can end."""
        request = response.request
        record = request.meta.get(FAILURE_META) or {}
        if record.get("terminal") and record.get("reason"):
            self._dead_letter(request, str(record["reason"]), status=response.status)

    def download_failed(
        self,
        request: Request,
        exception: BaseException,
        errback: Callable[..., Any] | None = None,
    ) -> None:
        """A leased request's download failed for good: a terminal failure
        (its class's attempts spent, or a failure no retry can fix) is dead
        lettered before its lease can end. A request without an errback
        has no one to record the page: its letter is filed unrecorded, for
        the page store to record (``dead_letters_unrecorded``)."""
        if isinstance(exception, TrapFiltered) and not exception.dead_letter:
            return  # a trap budget's refusal: a filtered record only
        record = request.meta.get(FAILURE_META) or {}
        reason = record.get("reason") if record.get("terminal") else None
        if reason is None and not record:
            reason = classify_exception(exception)
        if reason is None:
            return  # a filter's refusal (robots.txt, offsite): not a failure
        error = None if record else f"{type(exception).__name__}: {exception}"[:500]
        self._dead_letter(
            request, str(reason), error=error, recorded=errback is not None
        )

    def output_failed(
        self, request: Request, exc: BaseException, response: Any = None
    ) -> None:
        """The callback (or errback) of a leased request raised: the spider
        could not process what it got. Dead-lettered as ``unparseable``, with
        no page record (its output stopped, and ``spider_error`` follows);
        the lease ends once the items it did yield are finished."""
        lease = lease_of(request)
        if lease is None:
            return
        self._failed_output.add(lease)
        self._spider_failed(request, lease, exc, response)
        self.leases.output_ended(lease)

    def _on_spider_error(self, failure: Any, response: Any, **_: Any) -> None:
        lease = lease_of_response(response)
        if lease is None:
            return
        if lease in self._failed_output:
            self._failed_output.discard(lease)  # filed by output_failed
            return
        # Raised before any output (a callback that is not a generator, a
        # spider middleware's process_spider_input): nothing else will end
        # the lease.
        self._spider_failed(response.request, lease, failure.value, response)
        if self.leases.tracks(lease):
            self.leases.output_ended(lease)
        else:
            self._ack(lease)

    def _spider_failed(
        self, request: Request, lease: str, exc: BaseException, response: Any
    ) -> None:
        error = f"{type(exc).__name__}: {exc}"[:500]
        status = getattr(response, "status", None)
        self._dead_letter(request, "unparseable", error=error, status=status,
                          recorded=False)  # fmt: skip

    def _dead_letter(
        self,
        request: Request,
        reason: str,
        *,
        error: str | None = None,
        status: int | None = None,
        recorded: bool = True,
    ) -> None:
        """File ``request``'s dead letter before its lease can end.
        ``recorded``: the spider records the page itself (its errback);
        otherwise the page store is asked to (``dead_letters_unrecorded``)."""
        try:
            letter = dead_letter(unwrap(request), self.spider, reason, status=status,
                                 error=error)  # fmt: skip
        except UnserializableRequest:
            return
        if recorded:
            self._on_request_dead(letter)
        else:
            self._dead_unrecorded.append(letter)
            self.stats.inc_value(f"dlq/{reason}")
            self._wakeup.set()

    def _on_request_dropped(self, request: Request, **_: Any) -> None:
        self._ack(request.meta.get(meta.FRONTIER_LEASE))
        seed = request.meta.get(meta.SEED_TAKEN)
        if seed is not None:
            # A seed this worker's dupefilter had already answered for (see
            # enqueue_request): the first copy is written ahead or queued.
            self.crawler.signals.send_catch_log(
                seeds_settled, entries=[seed], spider=self.spider
            )

    def _on_request_dead(self, letter: DeadLetter, **_: Any) -> None:
        self._dead.append(letter)
        self.stats.inc_value(f"dlq/{letter.reason}")
        self._wakeup.set()

    def _on_request_scheduled(self, request: Request, **_: Any) -> None:
        # A child of a leased request (a redirect, a retry, a deferral) is
        # announced here before enqueue_request; if a handler of this signal
        # refuses it (OffsiteMiddleware raises IgnoreRequest), the engine
        # never calls enqueue_request nor request_dropped, and the parent's
        # lease would be held for MAX_LEASE_AGE. Check right after the
        # engine's synchronous _schedule_request has returned. A seed (not
        # leased yet) refused there must leave its worker's taken list too.
        if (
            request.meta.get(meta.FRONTIER_LEASE) is None
            and request.meta.get(meta.SEED_TAKEN) is None
        ):
            return
        self._announced[id(request)] = request
        asyncio.get_running_loop().call_soon(self._check_announced, id(request))

    def _check_announced(self, key: int) -> None:
        request = self._announced.pop(key, None)
        if request is None:
            return  # enqueued
        self.stats.inc_value("scheduler/refused_on_schedule")
        seed = request.meta.get(meta.SEED_TAKEN)
        if seed is not None:
            # Its refuser counted it (offsite/filtered), as for any seed.
            self.crawler.signals.send_catch_log(
                seeds_settled, entries=[seed], spider=self.spider
            )
            return
        letter = self._letter(request, "offsite_redirect", "refused when scheduled")
        if letter is not None:
            self._dead_unrecorded.append(letter)
            self.stats.inc_value("dlq/offsite_redirect")
            self._wakeup.set()
        self._ack(request.meta.get(meta.FRONTIER_LEASE))

    def _letter(self, request: Request, reason: str, error: str) -> DeadLetter | None:
        try:
            return dead_letter(unwrap(request), self.spider, reason, error=error)
        except UnserializableRequest:
            return None

    # -- the background task --------------------------------------------------

    async def _run(self) -> None:
        while not self._closing:
            try:
                pending = self.has_pending_requests()
                await self._step()
                if self._redis_down_since is not None:
                    logger.warning(
                        "Redis is reachable again after %.1fs",
                        time.monotonic() - self._redis_down_since,
                    )
                    self._redis_down_since = None
                if pending and not self.has_pending_requests():
                    # The last ack went out, or the fleet's last lease ended:
                    # let the engine see the idle spider now, not at its
                    # next 5 s heartbeat (the idle time runs from here).
                    self._wake_engine()
            except FATAL_REDIS_ERRORS as exc:
                # Waiting does not fix a wrong password: stop, in one line.
                logger.critical("Redis refused this worker (%s): closing", exc)
                self._task = None  # close() must not wait for this task
                self._close_crawl(REDIS_AUTH_REASON)
                return
            except TRANSIENT_REDIS_ERRORS as exc:
                delay = self._redis_failed(exc)
                await self._sleep(delay)
                continue
            await self._wait()

    def _close_crawl(self, reason: str) -> None:
        try:
            engine = self.crawler.engine
        except RuntimeError:  # not crawling (a scheduler opened by hand)
            return
        self._closer = asyncio.ensure_future(engine.close_spider_async(reason=reason))

    def _redis_failed(self, exc: BaseException) -> float:
        now = time.monotonic()
        if self._redis_down_since is None:
            self._redis_down_since = now
            self._retry_delay = self.retry_initial
            logger.error(
                "Redis unreachable (%s); holding %s outgoing requests and %s "
                "acknowledgements, retrying with back-off",
                type(exc).__name__,
                len(self._outbox),
                len(self._acks),
            )
        else:
            self._retry_delay = min(self.retry_max, self._retry_delay * 2)
        self.stats.inc_value("scheduler/redis_errors")
        return self._retry_delay

    async def _sleep(self, seconds: float) -> None:
        self._wakeup.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), seconds)

    async def _wait(self) -> None:
        if self._closing:
            return
        if self._outbox or self._acks or self._pending:
            if "push" in self._failing or not self._beaten:
                # Not in a tight loop: the push failed, or waits for a beat.
                await self._sleep(self.retry_initial)
            return
        if self._records_left and self._beaten:
            return  # the next page of records at once
        deadline = min(self._next_heartbeat, self._next_records, self.spill.next_step())
        if len(self._buffer) <= self.buffer_size // 2:
            deadline = min(deadline, self._next_poll)
        await self._sleep(max(0.0, deadline - time.monotonic()))

    async def _step(self) -> None:
        """One round of Redis work, in stages. Redis being away ends the
        round (every stage would fail alike, ``_run`` backs off); any other
        failure of one stage -- a script error on data it cannot handle, a
        bug -- is logged with its traceback and the other stages still run,
        so no single failing step can starve the rest of the fleet's work."""
        self._wakeup.clear()
        now = time.monotonic()
        # Beat first: a worker must be known alive before it writes ahead,
        # or its write-ahead entries would never be recovered. A failing beat
        # is tried again at the next interval, not on every step.
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.heartbeat
            await self._stage("heartbeat", self._heartbeat)
            await self._stage("recover", self._recover)
        if self._beaten:
            await self._stage("push", self._sync_out)
            if self._records_left or now >= self._next_records:
                self._next_records = now + self.heartbeat
                await self._stage("records", self._hand_records)
        if len(self._buffer) <= self.buffer_size // 2 and now >= self._next_poll:
            await self._stage("lease", self._refill)
        if self.spill.enabled:
            await self._stage("spill", self.spill.step)

    async def _stage(self, name: str, func: Callable[[], Awaitable[None]]) -> bool:
        """Run one stage; True when it succeeded. Transient Redis errors
        propagate (see :meth:`_step`)."""
        try:
            await func()
        except TRANSIENT_REDIS_ERRORS:
            raise
        except Exception:
            # Not transient: a bug, or a Redis error on data. Loud, with the
            # traceback, once per run of failures (the count is in stats).
            self.stats.inc_value(f"scheduler/step_errors/{name}")
            failures = self._failing.get(name, 0)
            self._failing[name] = failures + 1
            if failures == 0:
                logger.exception(
                    "Frontier step %r failed; the other steps go on and it is "
                    "tried again (further failures are counted in "
                    "scheduler/step_errors/%s)",
                    name,
                    name,
                )
            if name == "lease":
                # Do not hammer a failing lease script on every wake-up.
                self._next_poll = time.monotonic() + self.retry_initial
            return False
        failures = self._failing.pop(name, 0)
        if failures:
            logger.warning(
                "Frontier step %r works again after %s failures", name, failures
            )
        return True

    async def _sync_out(self) -> None:
        """Dedup the outbox, push it and send acknowledgements, in batches.

        A batch goes through stages kept in ``self._pending``, so a Redis
        failure at any point retries from where it stopped: written ahead
        (:meth:`Frontier.log_ahead`), run through the dupefilter, committed.
        The dupefilter marks URLs seen as it answers; if its answer is lost
        (connection dropped, worker killed), the batch is queued whole
        rather than dropped as "seen".
        """
        assert self.frontier is not None
        await self._flush_dead()
        while self._pending or self._outbox or self._acks:
            if self._pending is None:
                batch = [
                    self._outbox.popleft() for _ in range(min(500, len(self._outbox)))
                ]
                acks, self._acks = self._acks, []
                self._pending = self._prepare(batch, acks)
            p = self._pending
            if p.stage is Stage.NEW:
                if p.candidates:
                    await self.frontier.log_ahead(
                        self.worker, p.entry, [q for _, q in p.candidates]
                    )
                p.stage = Stage.LOGGED
            if p.stage is Stage.LOGGED:
                checked = [r for r, _ in p.candidates if not r.dont_filter]
                if not self._batch_dedup:
                    checked = []  # asked in enqueue_request already
                p.stage = Stage.UNCERTAIN
                seen = iter(
                    await self.dupefilter.requests_seen(checked) if checked else []
                )
                p.queued = []
                for request, queued in p.candidates:
                    if checked and not request.dont_filter and next(seen):
                        self._redirect_loop(request)
                        if id(request) in p.seed_ids:
                            self._seed_seen(request)
                        self.crawler.signals.send_catch_log(
                            signals.request_dropped, request=request, spider=self.spider
                        )
                    else:
                        p.queued.append(queued)
                p.stage = Stage.DEDUPED
            if p.stage is Stage.UNCERTAIN:
                self.stats.inc_value("scheduler/dedup_uncertain", len(p.candidates))
                p.queued = [q for _, q in p.candidates]
                p.stage = Stage.DEDUPED
            if p.stage is not Stage.COMMITTED:
                await self._flush_dead()
                await self._commit(p)
            if p.refused:
                # Kept in the write-ahead entry until written: a failure
                # here retries the write, never the commit.
                await self.spill.write(
                    p.refused, p.entry if p.candidates else "", self.worker
                )
            self._pending = None
            if p.seeds:
                # Queued, spilled or filtered as seen: their seed-list
                # entries may go (a live worker would queue them anyway).
                self.crawler.signals.send_catch_log(
                    seeds_settled, entries=p.seeds, spider=self.spider
                )

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
            # Work appeared: look for it now rather than at the next poll.
            self._next_poll = 0.0
        if p.acks:
            self.stats.inc_value("scheduler/acked", acked)
        if self.debug:
            logger.debug("Pushed %s (%s new), acked %s", len(p.queued), added, acked)

    async def _flush_dead(self) -> None:
        """Write the dead letters. Before the acknowledgements: a page's
        lease never ends without its dead letter written."""
        assert self.dlq is not None
        if self._dead:
            dead = list(self._dead)
            await self.dlq.add(dead)
            del self._dead[: len(dead)]
        if self._dead_unrecorded:
            dead = list(self._dead_unrecorded)
            await self.dlq.add(dead, recorded=False)
            del self._dead_unrecorded[: len(dead)]
            self._records_left += len(dead)

    async def _hand_records(self) -> None:
        """Send a page of the dead letters that have no page record
        (:meth:`DeadLetters.unrecorded`) to whoever records failed pages."""
        assert self.dlq is not None
        # A failing call leaves nothing "left": tried again at the next beat,
        # never in a tight loop, and never holding a finite crawl open.
        self._records_left = 0
        letters, self._records_left = await self.dlq.unrecorded(RECORD_PAGE)
        if letters:
            self.stats.inc_value("dlq/recorded_by_store", len(letters))
            self.crawler.signals.send_catch_log(
                dead_letters_unrecorded, letters=letters
            )

    def _redirect_loop(self, request: Request) -> None:
        """A redirect (or meta refresh) back to a URL of its own chain is
        a duplicate to the dupefilter: dead-letter it as a loop."""
        chain = request.meta.get("redirect_urls")
        if not chain:
            return
        if request.url in chain or canonicalize_url(request.url) in {
            canonicalize_url(u) for u in chain
        }:
            self.stats.inc_value("scheduler/redirect_loop")
            letter = self._letter(request, "redirect_loop", " -> ".join(chain))
            if letter is not None:
                letter.error = letter.error and letter.error[:500]
                self._dead_unrecorded.append(letter)
                self.stats.inc_value("dlq/redirect_loop")

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
                    request, self.spider, unique=not self._batch_dedup
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

    def _seed_seen(self, request: Request) -> None:
        """A seed the crawl has seen (pushed again after it was crawled, or
        queued): dropped by the dupefilter, counted (``seeds/filtered``) and
        logged with how to crawl it again; the first one, or each one with
        ``DUPEFILTER_DEBUG``."""
        self.stats.inc_value("seeds/filtered")
        if self._said_seed_seen and not self.dupefilter_debug:
            return
        self._said_seed_seen = True
        logger.info(
            "Seed %s dropped: the crawl has seen it (its dupefilter knows the "
            'URL). To crawl it again, push it with "dont_filter": true: '
            '{"url": "%s", "dont_filter": true} (docs/seeds.md)%s',
            request.url,
            request.url,
            ""
            if self.dupefilter_debug
            else "; further seeds dropped as seen are counted in seeds/filtered "
            "(DUPEFILTER_DEBUG logs each)",
        )

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

    async def _refill(self) -> None:
        assert self.frontier is not None
        want = min(self.batch_size, self.buffer_size - len(self._buffer))
        batch = await self.frontier.lease(want)
        # Due work only: a parked host or a later retry is not pending.
        # Due work only, or about to be: a host waiting out its spacing, or
        # anything due within the idle horizon. A host parked for longer, or
        # a retry due later, is not pending: it waits in Redis.
        self._remote_ready = int(batch.spaced or 0 <= batch.wait_ms <= self.horizon_ms)
        self._remote_leases = batch.leases_outstanding
        if batch.paused != self.paused:
            if batch.paused:
                # Finish the downloads under way; hand back what has not
                # started, so it waits in its host's queue, not in this worker.
                # Out of the buffer before the await: the engine takes
                # requests from it meanwhile, and one it started must not be
                # handed back too (fetched twice). A Redis error leaves these
                # leases to expire: queued again, late, never fetched twice.
                unstarted = [lease for lease, _ in self._buffer]
                self._buffer.clear()
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
            self.paused = batch.paused
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
            self._acks.extend(lease for lease, _, _ in bad)
            self._poisoned(len(bad))
        now = time.monotonic()
        if batch.leases:
            self._next_poll = now  # there may be more ready right away
            self._wake_engine()
        elif batch.wait_ms >= 0 and not batch.paused:
            self._next_poll = now + min(batch.wait_ms / 1000, IDLE_POLL)
        else:
            self._next_poll = now + IDLE_POLL

    async def _learn_pending(self) -> None:
        """What the crawl holds in Redis, as pending work (no lease taken):
        queued hosts (due, spaced or parked: the first lease round tells
        them apart), retries and other workers' leases."""
        assert self.frontier is not None
        hosts, leased = await self.frontier.counts()
        retries = await self.frontier.retries()
        self._remote_ready = int(bool(hosts or retries))
        self._remote_leases = leased
        self._count_others(leased)

    async def _heartbeat(self) -> None:
        assert self.frontier is not None
        await self.frontier.beat()
        self._beaten = True
        now = time.monotonic()
        renew = [lease for lease, t in self._held.items() if now - t < MAX_LEASE_AGE]
        renew += [lease for lease, _ in self._buffer]
        if renew:
            await self.frontier.extend(renew)
        ready, self._remote_leases = await self.frontier.due()
        self._remote_ready = self._remote_ready or ready
        self._count_others(self._remote_leases)

    def _count_others(self, outstanding: int) -> None:
        """Leases held by other workers: a worker must not close while they
        hold work that may come back (its own are in the engine's count)."""
        self._other_leases = max(0, outstanding - len(self._held) - len(self._buffer))

    async def _recover(self) -> None:
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

    async def _report_waiting(self) -> None:
        """Say what stays in Redis for the next run (log line and stats)."""
        assert self.frontier is not None
        waiting = await self.frontier.waiting()
        self.stats.set_value("frontier/waiting_urls", waiting.urls)
        self.stats.set_value("frontier/waiting_hosts", waiting.hosts)
        if waiting.urls:
            now = await server_now_ms(self.client, self.frontier.keys.ready)
            due_in = max(0.0, (waiting.next_due_ms - now) / 1000)
            self.stats.set_value("frontier/next_due_in_s", round(due_in, 1))
            logger.info(
                "Closing with %s URLs waiting in Redis on %s hosts; the next is "
                "due in %.0f s",
                waiting.urls, waiting.hosts, due_in,
            )  # fmt: skip
        else:
            logger.info("Closing with no URL waiting in Redis")

    async def _report_spilled(self) -> None:
        """Say what waits in the spill store for the next run."""
        spilled = await self.spill.count()
        if spilled:
            self.stats.set_value("frontier/waiting_spilled", spilled)
            logger.info("%s more URLs wait in the spill store", spilled)

    async def _flush_keys(self) -> None:
        assert self.frontier is not None and self.spider is not None
        deleted = await self.frontier.flush()
        logger.info("Flushed %s keys of crawl %r", deleted, self.spider.name)
        # The spilled requests go with the keys: their counters and scores
        # (the arrival counter starts again) are gone.
        await self.spill.clear()

    async def _retrying(
        self,
        func: Callable[..., Awaitable[Any]],
        *args: Any,
        limit: int | None = None,
    ) -> Any:
        """Call ``func`` until Redis answers (``limit`` tries at most)."""
        tries = 0
        while True:
            try:
                return await func(*args)
            except FATAL_REDIS_ERRORS:
                raise
            except TRANSIENT_REDIS_ERRORS as exc:
                tries += 1
                if limit is not None and tries >= limit:
                    logger.error("Giving up on Redis after %s tries: %s", tries, exc)
                    return None
                await asyncio.sleep(self._redis_failed(exc))

    def _wake_engine(self) -> None:
        """Ask the engine to poll the scheduler now (:func:`wake_engine`)."""
        if not wake_engine(self.crawler) and not self._wake_warned:
            self._wake_warned = True
            logger.warning(
                "This Scrapy's engine has no _slot.nextcall: requests leased "
                "from Redis wait for the engine's heartbeat (up to 5 s)"
            )


def dupefilter_problem(cls: type) -> str | None:
    """Why the scheduler cannot use dupefilter class ``cls``, or None: it
    serves any ``BaseDupeFilter`` (a ``request_seen(request)``), and
    :class:`~extensions.dupefilters.BloomDupeFilter`'s batch call.

    >>> from scrapy.dupefilters import RFPDupeFilter
    >>> dupefilter_problem(RFPDupeFilter) is None
    True
    >>> print(dupefilter_problem(object))  # doctest: +ELLIPSIS
    DUPEFILTER_CLASS='builtins.object' is not allowed: use a scrapy.dupe...
    """
    if callable(getattr(cls, "request_seen", None)) or callable(
        getattr(cls, "requests_seen", None)
    ):
        return None
    name = f"{cls.__module__}.{cls.__qualname__}"
    return (
        f"DUPEFILTER_CLASS={name!r} is not allowed: use a "
        "scrapy.dupefilters.BaseDupeFilter (it has no request_seen())"
    )


def wake_engine(crawler: Crawler) -> bool:
    """Ask the engine to poll the scheduler now; False if it cannot be asked.

    The engine polls after each response and every 5 s (its heartbeat), and
    only then asks an idle spider whether to close: requests that arrive
    from Redis in between, or an idle time that ends in between, would wait
    for that heartbeat. Scrapy has no public call for an earlier poll, so this
    schedules the engine's own next call (``ExecutionEngine._slot.nextcall``,
    private): the one place webcrawl touches Scrapy's insides. Should a
    Scrapy release rename it, the engine waits for its heartbeat (slower,
    never wrong). True when there is no engine to wake (not crawling).
    """
    try:
        engine = crawler.engine
    except RuntimeError:  # not crawling (yet): nothing to wake
        return True
    if engine is None:
        return True
    nextcall = getattr(getattr(engine, "_slot", None), "nextcall", None)
    if nextcall is None:
        return False
    nextcall.schedule()
    return True
