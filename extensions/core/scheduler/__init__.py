"""The Scrapy scheduler whose queue is the shared Redis frontier.

Settings read (defaults in :mod:`extensions.settings.defaults`):
``FRONTIER_PARTITIONS``, ``FRONTIER_LEASE_TIMEOUT``, ``DOWNLOAD_DELAY``,
``BACKOFF_QUIET_PERIOD``, ``SCHEDULER_PERSIST``, ``SCHEDULER_FLUSH_ON_START``,
``DUPEFILTER_CLASS``, the politeness terms of the lease script
(:func:`extensions.core.frontier.overrides.schedule_terms`); its parts read
their own (:mod:`.outbox`, :mod:`.dedup`, :mod:`.buffer`, :mod:`.handoff`,
:mod:`.task`, and the frontier spill, :mod:`extensions.core.frontier.spill`).

:class:`RedisScheduler` keeps Scrapy's synchronous contract without blocking
the reactor: ``enqueue_request`` puts the request in a local outbox
(:class:`~.outbox.Outbox`), ``next_request`` takes from a local buffer of
leased requests (:class:`~.buffer.LeaseBuffer`), failures become dead letters
(:class:`~.handoff.DeadLetterHandoff`), and one background task
(:class:`~.task.BackgroundTask`) does all the Redis work. It wires those parts
and answers Scrapy; how they talk and the protocol they keep are in
``docs/frontier.md`` ("The scheduler: Scrapy's contract without blocking").
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.misc import build_from_crawler, load_object
from twisted.internet.defer import Deferred

from extensions import meta
from extensions.connection import async_client
from extensions.connection.scripts import server_now_ms
from extensions.core.frontier.deadletters import DeadLetters
from extensions.core.frontier.frontier import PartitionedFrontier, Worker, worker_id
from extensions.core.frontier.overrides import schedule_terms
from extensions.core.frontier.spill import FrontierSpill
from extensions.core.scheduler.buffer import (
    DEAD_AFTER_HEARTBEATS,
    IDLE_POLL,
    MAX_LEASE_AGE,
    LeaseBuffer,
)
from extensions.core.scheduler.dedup import Dedup, dupefilter_problem
from extensions.core.scheduler.handoff import RECORD_PAGE, DeadLetterHandoff
from extensions.core.scheduler.leases import Leasing, lease_of_response, unwrap
from extensions.core.scheduler.outbox import OUTBOX_BATCH, Outbox, Stage
from extensions.core.scheduler.task import REDIS_AUTH_REASON, BackgroundTask
from extensions.settings import config, defaults
from extensions.signals import item_held, items_stored, request_dead, seeds_settled

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter

__all__ = [
    "DEAD_AFTER_HEARTBEATS",
    "IDLE_POLL",
    "MAX_LEASE_AGE",
    "OUTBOX_BATCH",
    "RECORD_PAGE",
    "REDIS_AUTH_REASON",
    "RedisScheduler",
    "Stage",
    "dupefilter_problem",
    "wake_engine",
]

logger = logging.getLogger(__name__)


async def _maybe_await(result: Any) -> Any:
    if isinstance(result, Deferred):
        return await maybe_deferred_to_future(result)
    if inspect.isawaitable(result):
        return await result
    return result


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
        self.lease_timeout = s.getfloat("FRONTIER_LEASE_TIMEOUT")
        self.partitions = s.getint("FRONTIER_PARTITIONS")
        self.persist = s.getbool("SCHEDULER_PERSIST")
        self.flush_on_start = s.getbool("SCHEDULER_FLUSH_ON_START")
        self.default_delay_ms = int(s.getfloat("DOWNLOAD_DELAY", 0) * 1000)
        # The frontier forgives a stale back-off by the same rule as the
        # back-off middleware (extensions.downloadermiddlewares.backoff), so
        # both agree on spacing.
        self.backoff_quiet_ms = int(s.getfloat("BACKOFF_QUIET_PERIOD") * 1000)
        self.spill = FrontierSpill(crawler)
        self.dupefilter = build_from_crawler(
            load_object(s["DUPEFILTER_CLASS"]), crawler
        )
        self.worker = worker_id()
        self.stats = crawler.stats
        self.spider: Spider | None = None
        self.frontier: PartitionedFrontier | None = None
        # The parts (docs/frontier.md): each owns its state and hears of the
        # others only through the callbacks wired here.
        self.letters = DeadLetterHandoff(crawler, filed=self._wake)
        self.buffer = LeaseBuffer(crawler, ended=self._acked, leased=self._wake_engine)
        self.dedup = Dedup(crawler, self.dupefilter, dropped=self.letters.redirect_loop)
        self.outbox = Outbox(
            crawler,
            self.dedup,
            self.spill,
            before_commit=self.letters.flush,
            queued=self.buffer.poll_now,
        )
        self.task = BackgroundTask(
            crawler,
            buffer=self.buffer,
            outbox=self.outbox,
            letters=self.letters,
            spill=self.spill,
            pending=self.has_pending_requests,
            idle=self._wake_engine,
        )
        # What each lease handed to the engine waits for (.leases), and
        # where its failures go: the outermost middlewares report to them.
        self.leases = self.buffer.book
        self.leasing = Leasing(self.leases, self.letters)
        # Redirects announced in request_scheduled, not yet enqueued: a
        # component that refuses one there never calls enqueue_request.
        self._announced: dict[int, Request] = {}
        self._wake_warned = False

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
        self.frontier = frontier = PartitionedFrontier(
            self.client,
            spider.name,
            self.partitions,
            Worker(
                self.worker,
                int(self.lease_timeout * 1000),
                self.default_delay_ms,
                self.backoff_quiet_ms,
                self.spill.refill_below,
                **schedule_terms(self.crawler.settings),
            ),
        )
        # Each partition caps and refills its own hosts.
        self.spill.open(
            frontier.parts, lambda host: frontier.part(frontier.partition_of(host))
        )
        self.buffer.open(frontier, spider)
        self.dedup.open(spider)
        self.outbox.open(frontier, spider)
        self.letters.open(
            DeadLetters(self.client, spider.name, self.partitions), spider
        )
        sig = self.crawler.signals
        sig.connect(self.letters.add, signal=request_dead)
        sig.connect(self._on_request_scheduled, signal=signals.request_scheduled)
        sig.connect(self._on_items_stored, signal=items_stored)
        sig.connect(self._on_item_held, signal=item_held)
        sig.connect(self._on_item_finished, signal=signals.item_scraped)
        sig.connect(self._on_item_finished, signal=signals.item_dropped)
        sig.connect(self._on_item_finished, signal=signals.item_error)
        sig.connect(self._on_spider_error, signal=signals.spider_error)
        sig.connect(self._on_request_dropped, signal=signals.request_dropped)
        if self.flush_on_start:
            await self.task.retrying(self._flush_keys)
        # A crawl keeps the partition count it was started with (the same
        # host in two partitions would have two locks).
        await self.task.retrying(frontier.pin)
        # Ours talks to Redis (the Bloom filter's metadata): a blip is waited
        # out here too, not a worker that exits as it starts.
        await self.task.retrying(lambda: _maybe_await(self.dupefilter.open()))
        logger.info(
            "Frontier %r opened as worker %s (persist=%s)",
            spider.name,
            self.worker,
            self.persist,
        )
        # Know what Redis holds for the crawl before the engine first asks: a
        # resumed crawl must not look finished (and close) in the instant
        # before its first lease. Nothing is leased here: the engine is not
        # running yet, and a lease held through the rest of its start-up
        # could expire before its first renewal on a loaded machine.
        await self.task.retrying(self.buffer.learn_pending)
        self.task.start()

    def close(self, reason: str) -> Deferred[None]:
        return deferred_from_coro(self.close_async(reason))

    async def close_async(self, reason: str) -> None:
        """Stop the background task, hand back unstarted leases, push what is
        left and close the dupefilter (and flush the crawl's keys unless it
        persists)."""
        await self.task.stop()
        assert self.frontier is not None
        # Hand back what was leased but never started, then push what is left.
        if unstarted := self.buffer.unstarted():
            retrying = self.task.retrying
            returned = await retrying(self.frontier.release, unstarted, limit=5)
            logger.info("Handed back %s unstarted leases", returned)
        await self.task.retrying(self.outbox.sync, limit=5)
        await self.task.retrying(self._report_waiting, limit=2)
        # A store error is logged (and counted) like a failed step, never
        # stops the close.
        await self.task.stage("spill", self._report_spilled)
        if not self.outbox.written_ahead:
            # Nothing written ahead is left: no one needs to recover us.
            await self.task.retrying(self.frontier.retire, limit=2)
        self.outbox.close()
        await _maybe_await(self.dupefilter.close(reason))
        if not self.persist:
            await self.task.retrying(self._flush_keys, limit=5)
        await self.spill.close()
        await self.client.aclose()

    def has_pending_requests(self) -> bool:
        # A paused fleet is not finished: never close for idleness meanwhile.
        # Nor while Redis is away: idle means Redis said nothing is due, not
        # that it did not answer (the figures are from before it left).
        return bool(
            self.task.redis_down
            or self.buffer.pending
            or self.outbox.pending
            or self.letters.pending
            or self.spill.pending
        )

    def enqueue_request(self, request: Request) -> bool:
        # Served back as it was made: the canonical URL is the dupefilter's
        # key (extensions.dupefilters), never a replacement of the spider's.
        self._announced.pop(id(request), None)
        # A redirect, retry or deferral of a leased request is a copy made
        # while the leases middleware stood in for its errback.
        unwrap(request)
        if not self.dedup.admits(request):
            return False
        parent = request.meta.pop(meta.FRONTIER_LEASE, None)
        if parent is not None:
            # A redirect or retry of a leased request: the lease is handed
            # over in the script that queues this request.
            self.buffer.hand_over(parent)
        self.outbox.add(request, parent)
        self.task.wake()
        return True

    @property
    def df(self) -> BaseDupeFilter:
        """The dupefilter, under the name of Scrapy's own scheduler."""
        return self.dupefilter

    def next_request(self) -> Request | None:
        if self.buffer.low:
            self.task.wake()
        request = self.buffer.take()
        if request is not None:
            self.stats.inc_value("scheduler/dequeued/redis")
            self.stats.inc_value("scheduler/dequeued")
            return request
        request = self.outbox.take_memory()
        if request is not None:
            self.stats.inc_value("scheduler/dequeued/memory")
            self.stats.inc_value("scheduler/dequeued")
        return request

    def __len__(self) -> int:
        return len(self.buffer) + len(self.outbox)

    @property
    def frontier_counts(self) -> tuple[int, int]:
        """(hosts with queued requests, leases outstanding fleet-wide), as the
        last lease or heartbeat call saw them (no Redis call)."""
        return self.buffer.figures

    # -- outcomes ----------------------------------------------------------------

    def _acked(self, lease: str) -> None:
        """A lease ended (:class:`LeaseBuffer`): acknowledged at the next push."""
        self.outbox.ack(lease)
        self.task.wake()

    def _wake(self) -> None:
        self.task.wake()

    def _on_items_stored(self, items: list[Any]) -> None:
        for item in items:
            self.leases.stored(item)

    def _on_item_held(self, item: Any, **_: Any) -> None:
        self.leases.hold(item)

    def _on_item_finished(self, item: Any, response: Any = None, **_: Any) -> None:
        self.leases.item_finished(lease_of_response(response))

    def _on_spider_error(self, failure: Any, response: Any, **_: Any) -> None:
        lease = lease_of_response(response)
        # Raised before any output (a callback that is not a generator, a
        # spider middleware's process_spider_input): nothing else will end
        # the lease.
        if lease is not None and self.letters.spider_error(
            response.request, lease, failure.value, response
        ):
            self.buffer.end_output(lease)

    def _on_request_dropped(self, request: Request, **_: Any) -> None:
        self.buffer.end(request.meta.get(meta.FRONTIER_LEASE))
        seed = request.meta.get(meta.SEED_TAKEN)
        if seed is not None:
            # A seed this worker's dupefilter had already answered for (see
            # enqueue_request): the first copy is written ahead or queued.
            self.crawler.signals.send_catch_log(
                seeds_settled, entries=[seed], spider=self.spider
            )

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
        self.letters.offsite_redirect(request)
        self.buffer.end(request.meta.get(meta.FRONTIER_LEASE))

    # -- closing --------------------------------------------------------------------

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

    def _wake_engine(self) -> None:
        """Ask the engine to poll the scheduler now (:func:`wake_engine`)."""
        if not wake_engine(self.crawler) and not self._wake_warned:
            self._wake_warned = True
            logger.warning(
                "This Scrapy's engine has no _slot.nextcall: requests leased "
                "from Redis wait for the engine's heartbeat (up to 5 s)"
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
