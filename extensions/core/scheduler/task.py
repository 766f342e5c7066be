"""The scheduler's background task: all its Redis work, in rounds, on the
reactor's asyncio loop, and what it does while Redis is away.

Settings read (defaults in :mod:`extensions.settings.defaults`):
``REDIS_RETRY_INITIAL``, ``REDIS_RETRY_MAX``.

Each round runs the stages that are due (heartbeat and recovery, the push of
the outbox, the hand-over of unrecorded dead letters, a lease call, the
spill's step), then sleeps until the next is due or something wakes it.
Redis being away ends the round and the task retries with back-off; any
other failure of one stage is logged, counted and the other stages go on
(``docs/frontier.md``, "Idle and close").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from extensions.connection import FATAL_REDIS_ERRORS, TRANSIENT_REDIS_ERRORS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy.crawler import Crawler

    from extensions.core.frontier.spill import FrontierSpill
    from extensions.core.scheduler.buffer import LeaseBuffer
    from extensions.core.scheduler.handoff import DeadLetterHandoff
    from extensions.core.scheduler.outbox import Outbox

logger = logging.getLogger(__name__)

# Finish reason of a crawl stopped because Redis refused its credentials.
REDIS_AUTH_REASON = "redis_auth"


class BackgroundTask:
    """Runs the rounds of Redis work of one scheduler's parts.

    ``pending()`` is the scheduler's ``has_pending_requests``: when a round
    ends it, ``idle()`` lets the engine see the idle spider at once."""

    def __init__(
        self,
        crawler: Crawler,
        *,
        buffer: LeaseBuffer,
        outbox: Outbox,
        letters: DeadLetterHandoff,
        spill: FrontierSpill,
        pending: Callable[[], bool],
        idle: Callable[[], None],
    ) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.retry_initial = s.getfloat("REDIS_RETRY_INITIAL")
        self.retry_max = s.getfloat("REDIS_RETRY_MAX")
        self.buffer = buffer
        self.outbox = outbox
        self.letters = letters
        self.spill = spill
        self._pending = pending
        self._idle = idle
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closer: asyncio.Future[None] | None = None
        self._redis_down_since: float | None = None
        self._retry_delay = self.retry_initial
        self._failing: dict[str, int] = {}  # stage -> failures in a row

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop after the round under way."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def wake(self) -> None:
        """Work arrived: run a round now."""
        self._wakeup.set()

    @property
    def redis_down(self) -> bool:
        """Redis did not answer the last round."""
        return self._redis_down_since is not None

    async def _run(self) -> None:
        while not self._closing:
            try:
                pending = self._pending()
                await self._step()
                if self._redis_down_since is not None:
                    logger.warning(
                        "Redis is reachable again after %.1fs",
                        time.monotonic() - self._redis_down_since,
                    )
                    self._redis_down_since = None
                if pending and not self._pending():
                    # The last ack went out, or the fleet's last lease ended:
                    # let the engine see the idle spider now, not at its
                    # next 5 s heartbeat (the idle time runs from here).
                    self._idle()
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

    async def retrying(
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

    def _redis_failed(self, exc: BaseException) -> float:
        now = time.monotonic()
        if self._redis_down_since is None:
            self._redis_down_since = now
            self._retry_delay = self.retry_initial
            requests, acks = self.outbox.waiting
            logger.error(
                "Redis unreachable (%s); holding %s outgoing requests and %s "
                "acknowledgements, retrying with back-off",
                type(exc).__name__,
                requests,
                acks,
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
        if self.outbox.busy:
            if "push" in self._failing or not self.buffer.beaten:
                # Not in a tight loop: the push failed, or waits for a beat.
                await self._sleep(self.retry_initial)
            return
        if self.letters.records_left and self.buffer.beaten:
            return  # the next page of records at once
        deadline = min(
            self.buffer.next_due(), self.letters.next_records, self.spill.next_step()
        )
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
        # or its write-ahead entries would never be recovered.
        if self.buffer.beat_due(now):
            await self.stage("heartbeat", self.buffer.beat)
            await self.stage("recover", self.buffer.recover)
        if self.buffer.beaten:
            await self.stage("push", self.outbox.sync)
            if self.letters.records_due(now):
                await self.stage("records", self.letters.hand_records)
        if self.buffer.lease_due(now) and not await self.stage(
            "lease", self.buffer.refill
        ):
            # Do not hammer a failing lease script on every wake-up.
            self.buffer.poll_after(self.retry_initial)
        if self.spill.enabled:
            await self.stage("spill", self.spill.step)

    async def stage(self, name: str, func: Callable[[], Awaitable[None]]) -> bool:
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
            return False
        failures = self._failing.pop(name, 0)
        if failures:
            logger.warning(
                "Frontier step %r works again after %s failures", name, failures
            )
        return True
