"""Seeds from Redis and a fleet's idle rule, for any spider.

Settings read: ``SEED_POLL_INTERVAL``, ``SEED_BATCH_SIZE``,
``MAX_IDLE_TIME_BEFORE_CLOSE``, ``REDIS_RETRY_MAX``,
``FRONTIER_HEARTBEAT_INTERVAL`` (:mod:`extensions.settings.defaults`) and Scrapy's
``URLLENGTH_LIMIT`` (the longest seed URL, see
:func:`extensions.core.seeds.seed_url_limit`).

:class:`SeedFeed` is a spider middleware
(:data:`extensions.spidermiddlewares.SPIDER_MIDDLEWARES`). Its
``process_start`` yields the seeds waiting in ``<spider>:start_urls``
(``redis-cli lpush shop:start_urls URL``, or ``scrapy seed --crawl shop``;
entries as :mod:`extensions.core.seeds` describes), then the spider's own start
requests; afterwards a poll every ``SEED_POLL_INTERVAL`` seconds (one Redis
call, no busy loop) feeds new seeds to the engine while the crawl runs. A
failing poll backs off (doubling up to ``REDIS_RETRY_MAX``) and keeps trying:
Redis being away is logged once at WARNING, any other failure at ERROR with
its traceback each time.

A seed request is ``Request(url, priority=..., meta={"user": ...})`` with
the spider's default callback (``parse``; a ``CrawlSpider``'s rules apply).
A spider may shape it with a ``seed_request(request) -> Request`` method
(the ``web`` spider adds its errback and widens its scope there).

No seed is lost when a worker dies (:mod:`extensions.core.seeds`, "Hand-over"): a
take moves the entries to this worker's taken list, each seed request
carries its entry (``meta["seed_taken"]``), and the entry leaves the list
once the scheduler has queued the request (signal
:data:`extensions.signals.seeds_settled`). A beat every
``FRONTIER_HEARTBEAT_INTERVAL`` (from the crawl's start, while the start
requests may wait on the engine) keeps this worker alive to the others and
gives back the seeds of workers silent for three beats; the spider's close
gives back what it took and did not hand over.

Idling: with ``MAX_IDLE_TIME_BEFORE_CLOSE`` = 0 (the default) a worker runs
as a service and waits for seeds; otherwise it closes after that many
seconds in which the engine had nothing to do: the scheduler reports
nothing pending for the whole fleet (no lease out anywhere, nothing due in
Redis), no response arrived and no item was scraped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError
from scrapy import Request, signals
from scrapy.exceptions import DontCloseSpider

from extensions.connection import TRANSIENT_REDIS_ERRORS, new_async_client
from extensions.core.frontier.frontier import worker_id
from extensions.core.scheduler import DEAD_AFTER_HEARTBEATS, wake_engine
from extensions.core.seeds import (
    SeedList,
    seed_meta_keys,
    seed_source,
    seed_url_limit,
)
from extensions.extensions.redismixin import request_maker
from extensions.settings import config, defaults
from extensions.signals import seeds_settled

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class SeedFeed:
    """Spider middleware: seeds from ``<spider>:start_urls``, and the
    ``MAX_IDLE_TIME_BEFORE_CLOSE`` rule (module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        config.require(s, defaults)
        self.crawler = crawler
        self.poll_interval = s.getfloat("SEED_POLL_INTERVAL")
        self.batch = s.getint("SEED_BATCH_SIZE")
        self.max_idle = s.getfloat("MAX_IDLE_TIME_BEFORE_CLOSE")
        self.retry_max = s.getfloat("REDIS_RETRY_MAX")
        self.heartbeat = s.getfloat("FRONTIER_HEARTBEAT_INTERVAL")
        self.url_limit = seed_url_limit(s)
        self._seeds: SeedList | None = None
        self._idle_since: float | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._poll_failing = False
        self._beater: asyncio.Task[None] | None = None
        self._poller: asyncio.Task[None] | None = None
        sig = crawler.signals
        sig.connect(self._on_idle, signal=signals.spider_idle)
        sig.connect(self._on_closed, signal=signals.spider_closed)
        sig.connect(self._on_settled, signal=seeds_settled)
        for activity in (signals.response_received, signals.item_scraped):
            sig.connect(self._on_activity, signal=activity)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SeedFeed:
        return cls(crawler)

    # -- the seed list ----------------------------------------------------------

    def seed_list(self) -> SeedList:
        if self._seeds is None:
            spider = self.crawler.spider
            assert spider is not None
            # A client of its own: the scheduler closes the shared one when
            # it closes, and the seeds are given back after that.
            settings = self.crawler.settings
            self._seeds = SeedList(
                new_async_client(settings),
                spider.name,
                self.url_limit,
                taker=worker_id(),
                dead_after_ms=int(self.heartbeat * DEAD_AFTER_HEARTBEATS * 1000),
                # The spider's seed keys (a scrapy-redis redis_key, SETs or
                # ZSETs) and, for a scrapy-redis spider, its own request maker.
                source=seed_source(spider, settings),
                meta_keys=seed_meta_keys(settings),
                maker=request_maker(spider),
            )
        return self._seeds

    def _on_settled(self, entries: list[str], **_: Any) -> None:
        self.seed_list().settle(list(entries))

    def _given_back(self, n: int, broken: int) -> None:
        stats = self.crawler.stats
        assert stats is not None
        if n:
            stats.inc_value("seeds/given_back", n)
            logger.warning(
                "Put back on %s %s seeds that stopped workers had taken",
                self.seed_list().key,
                n,
            )
        if broken:
            logger.error(
                "%s taken-seed keys of stopped workers are not lists: left "
                "alone (see %s*)",
                broken,
                self.seed_list().taken_prefix,
            )

    async def _take(self) -> list[Request]:
        taken = await self.seed_list().take(self.batch)
        self._given_back(taken.given_back, taken.broken)
        stats = self.crawler.stats
        assert stats is not None
        for raw, why in taken.invalid:
            stats.inc_value("seeds/invalid")
            logger.warning(
                "Invalid seed %r (%s): moved to %s",
                raw[:200],
                why,
                self.seed_list().invalid_key,
            )
        shape = getattr(self.crawler.spider, "seed_request", None)
        stats.inc_value("seeds/accepted", len(taken.seeds) + len(taken.made))
        made = [seed.request(entry) for seed, entry in taken.seeds] + taken.made
        return [shape(request) for request in made] if shape is not None else made

    async def _guarded_take(self) -> list[Request] | None:
        """:meth:`_take`, or None when it failed. Redis being away is logged
        once (WARNING) until it answers again; anything else is a bug or a
        broken seed list (e.g. the key holds a string, not a list) and is
        logged at ERROR with its traceback on every failure. Either way the
        poller keeps running with back-off, so the worker never stops taking
        seeds silently, and still crawls its frontier meanwhile."""
        stats = self.crawler.stats
        assert stats is not None
        try:
            requests = await self._take()
        except TRANSIENT_REDIS_ERRORS as exc:
            stats.inc_value("seeds/poll_errors")
            if not self._poll_failing:
                logger.warning(
                    "Seed poll: Redis unreachable (%s); retrying with back-off",
                    type(exc).__name__,
                )
            self._poll_failing = True
            return None
        except Exception:
            stats.inc_value("seeds/poll_errors")
            logger.exception(
                "Seed poll of %s failed; retrying with back-off",
                self.seed_list().key,
            )
            self._poll_failing = True
            return None
        if self._poll_failing:
            logger.warning("Seed poll works again")
            self._poll_failing = False
        return requests

    # -- start, poll, beat, release --------------------------------------------

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        # Beat from the start: the start requests may wait on the engine for
        # long with seeds taken, and this worker must not look dead meanwhile.
        self._beater = asyncio.ensure_future(self._beat())
        self._beater.add_done_callback(_report_task_death)
        while True:
            requests = await self._guarded_take()
            if requests is None:
                break  # logged; the poller takes over and keeps trying
            for request in requests:
                yield request
            if len(requests) < self.batch:
                break
        self._poller = asyncio.ensure_future(self._poll())
        self._poller.add_done_callback(_report_task_death)
        async for out in start:
            yield out

    async def _poll(self) -> None:
        retry_max = max(self.retry_max, self.poll_interval)
        delay = self.poll_interval
        while True:
            await asyncio.sleep(delay)
            requests = await self._guarded_take()
            if requests is None:
                delay = min(retry_max, delay * 2)
                continue
            delay = self.poll_interval
            engine = self.crawler.engine
            assert engine is not None
            for request in requests:
                engine.crawl(request)
            if requests:
                self._on_activity()

    async def _beat(self) -> None:
        """Every heartbeat: be alive to the other takers, settle what the
        scheduler queued, give back dead takers' seeds. A failing beat is
        tried at the next one (the poll logs Redis trouble already)."""
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                taken = await self.seed_list().take(0)
            except TRANSIENT_REDIS_ERRORS:
                continue
            except ResponseError:
                # Redis refused the script (out of memory, a key of another
                # type): tried again at the next beat. Anything else is a bug:
                # it ends the task, and _report_task_death logs it.
                logger.exception("Seed heartbeat failed; tried again")
                continue
            self._given_back(taken.given_back, taken.broken)

    async def _on_closed(self) -> None:
        """Stop the timers and tasks, then give back the seeds this worker
        took and did not hand over (the scheduler has closed: what it queued
        is settled by now). Should Redis fail here, the entries stay taken
        and a live worker (or the next run) puts them back after three
        heartbeats."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait([self._poller], timeout=5)
        if self._beater is not None:
            self._beater.cancel()
            await asyncio.wait([self._beater], timeout=5)
        if self._seeds is None:
            return
        seeds = self._seeds
        try:
            n = await seeds.release()
        except TRANSIENT_REDIS_ERRORS as exc:
            logger.warning(
                "Could not give back this worker's taken seeds (%s): a live "
                "worker puts them back after %s heartbeats",
                type(exc).__name__,
                DEAD_AFTER_HEARTBEATS,
            )
            return
        finally:
            await seeds.client.aclose()
        if n:
            logger.info("Gave back %s taken seeds to %s", n, seeds.key)

    # -- idling -------------------------------------------------------------------

    def _on_activity(self, *args: Any, **kwargs: Any) -> None:
        self._idle_since = None

    def _on_idle(self) -> None:
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        idle_for = now - self._idle_since
        if self.max_idle <= 0:
            raise DontCloseSpider
        if idle_for < self.max_idle:
            # The engine asks again at its next heartbeat (5 s): without a
            # wake-up at the deadline a 6 s idle time closed after 10 to 15 s.
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._idle_timer = asyncio.get_running_loop().call_later(
                self.max_idle - idle_for, wake_engine, self.crawler
            )
            raise DontCloseSpider


def _report_task_death(task: asyncio.Future[None]) -> None:
    """The seed poller and heartbeat never end but by cancellation: say so
    if one does (a bug)."""
    if not task.cancelled() and task.exception() is not None:
        logger.error(
            "A seed task stopped (the poller: no new seeds will be taken by "
            "this worker; the heartbeat: its taken seeds go to other workers)",
            exc_info=task.exception(),
        )
