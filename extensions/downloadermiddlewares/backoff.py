"""Adaptive back-off and a per-host circuit breaker, shared by the fleet.

Settings read: ``BACKOFF_ENABLED``, ``BACKOFF_HTTP_CODES``, ``BACKOFF_INITIAL``,
``BACKOFF_MAX``, ``BACKOFF_JITTER``, ``BACKOFF_QUIET_PERIOD``,
``BREAKER_THRESHOLD``, ``BREAKER_COOLDOWN``, ``BREAKER_MAX_COOLDOWN``,
``HOST_DOWN_AFTER``, ``HOST_DOWN_TTL``, ``DNS_DOWN_AFTER``,
``FRONTIER_PARTITIONS`` (where a host's record lives), and through
:mod:`extensions.connection` ``REDIS_URL``.

A 429/503 raises the host's back-off in its record (StormCrawler's curve:
60 s, doubled by a further one once the current window has passed, up to a
day, forgiven after 30 quiet minutes; a ``Retry-After`` parks the host until
then instead); consecutive connection failures open its circuit breaker; a
host that fails every connection for ``HOST_DOWN_AFTER`` (or whose name does
not resolve for ``DNS_DOWN_AFTER``) is judged down and its waiting requests
dead-lettered in one script. The rules, and what a verdict costs:
``docs/host-record.md`` ("Back-off", "The circuit breaker", "Host
verdicts").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self

from scrapy.exceptions import (
    NotConfigured,
)

from extensions import meta
from extensions.connection import retry_redis
from extensions.core.frontier.deadletters import DeadLetters
from extensions.core.frontier.hostrecord import HostRecords
from extensions.keys import crawl_prefix
from extensions.settings import config, defaults
from extensions.utils.failures import (
    CONNECTION_FAILURES,
    DNS_FAILURES,
    HostDown,
    HostUnresolvable,
    parse_retry_after,
)
from extensions.utils.hosts import host_key

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response


logger = logging.getLogger(__name__)


class BackoffMiddleware:
    """Downloader middleware: raise a host's back-off on 429/503 responses and
    open its circuit breaker after repeated connection failures.

    Order: right after ``RetryMiddleware`` (560 > 550), so this
    ``process_response`` sees the 429/503 before the retry turns it into a new
    request; the retry then waits in the frontier while the host is parked.

    Everything lives in the host record (``web:{web}:h:<host>``, written by
    the scripts of :class:`extensions.core.frontier.hostrecord.HostRecords`):
    ``backoff``,
    ``backoff_at`` and ``park`` on a 429/503; ``fails``, ``breaker`` and
    ``park`` for the breaker. The frontier keeps a parked host's queue (it is
    never dropped) and hands it out again when the park ends: that first
    request is the breaker's probe; a success closes the breaker, a failure
    reopens it for twice as long (up to ``BREAKER_MAX_COOLDOWN``). A success is
    written only when the lock middleware saw failures on the record (its
    ``politeness_lock`` meta), so healthy hosts cost no extra round trip;
    without that middleware (politeness off), when this worker counted a
    failure of the host since its last success (failures that are not in a
    row must not add up to an open breaker or a host-down verdict).
    """

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        config.require(s, defaults)
        if not s.getbool("BACKOFF_ENABLED"):
            raise NotConfigured("BACKOFF_ENABLED is False")
        self.crawler = crawler
        self.http_codes = {int(c) for c in s.getlist("BACKOFF_HTTP_CODES")}
        self.initial_ms = round(s.getfloat("BACKOFF_INITIAL") * 1000)
        self.max_ms = round(s.getfloat("BACKOFF_MAX") * 1000)
        self.jitter = s.getfloat("BACKOFF_JITTER")
        self.quiet_ms = round(s.getfloat("BACKOFF_QUIET_PERIOD") * 1000)
        self.threshold = s.getint("BREAKER_THRESHOLD")
        self.cooldown_ms = round(s.getfloat("BREAKER_COOLDOWN") * 1000)
        self.max_cooldown_ms = round(s.getfloat("BREAKER_MAX_COOLDOWN") * 1000)
        self.down_after_ms = round(s.getfloat("HOST_DOWN_AFTER") * 1000)
        self.down_ttl_ms = round(s.getfloat("HOST_DOWN_TTL") * 1000)
        self.dns_after_ms = round(s.getfloat("DNS_DOWN_AFTER") * 1000)
        if self.initial_ms <= 0 or self.max_ms < self.initial_ms or self.threshold < 1:
            raise NotConfigured(
                "BACKOFF_INITIAL must be > 0 and <= BACKOFF_MAX, BREAKER_THRESHOLD >= 1"
            )
        self._records: HostRecords | None = None
        self._dead_letters: DeadLetters | None = None
        # Hosts this worker counted a failure of since their last success:
        # what closes a run of failures when no lock reports the record's.
        self._failing: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @property
    def records(self) -> HostRecords:
        if self._records is None:
            self._records = HostRecords.of_crawler(self.crawler)
        return self._records

    @property
    def dead_letters(self) -> DeadLetters:
        if self._dead_letters is None:
            self._dead_letters = DeadLetters(
                self.records.client,
                crawl_prefix(self.crawler),
                self.records.partitions,
            )
        return self._dead_letters

    async def process_response(self, request: Request, response: Response) -> Response:
        stats = self.crawler.stats
        assert stats is not None
        lock = request.meta.get(meta.POLITENESS_LOCK)
        hostkey = host_key(request)
        failing = bool(lock.get("fails")) if lock else hostkey in self._failing
        if failing:
            self._failing.discard(hostkey)
            opened = await retry_redis(
                lambda: self.records.succeed(hostkey), "the back-off record"
            )
            if opened:
                stats.inc_value("backoff/breaker_closed")
                logger.info("Circuit breaker of %s closed: it answers again", hostkey)
        if response.status not in self.http_codes or request.meta.get(
            meta.ROBOTS_FETCH
        ):
            # A 503 on robots.txt parks the host through the robots cache
            # (retried 60 s, 120 s, ...); it must not also raise the pages'
            # back-off.
            return response
        retry_after = parse_retry_after(response.headers.get(b"Retry-After"))
        retry_after_ms = None
        if retry_after is not None:
            retry_after_ms = min(round(retry_after * 1000), self.max_ms)
            stats.inc_value("backoff/retry_after")
        backoff_ms, _park, raised = await retry_redis(
            lambda: self.records.raise_backoff(
                hostkey,
                initial_ms=self.initial_ms,
                max_ms=self.max_ms,
                quiet_ms=self.quiet_ms,
                jitter=self.jitter,
                retry_after_ms=retry_after_ms,
            ),
            "the back-off record",
        )
        stats.inc_value(f"backoff/response_status_count/{response.status}")
        if raised:
            stats.inc_value("backoff/raised")
            stats.max_value("backoff/max_ms", backoff_ms)
            logger.info(
                "%s answered %s: back-off raised to %.1f s", hostkey, response.status,
                backoff_ms / 1000,
            )  # fmt: skip
        elif retry_after_ms is not None:
            logger.info(
                "%s answered %s with Retry-After: parked for %.1f s",
                hostkey, response.status, retry_after_ms / 1000,
            )  # fmt: skip
        return response

    async def process_exception(self, request: Request, exception: Exception) -> None:
        if not isinstance(exception, CONNECTION_FAILURES):
            return
        dns = self.dns_after_ms > 0 and isinstance(exception, DNS_FAILURES)
        if isinstance(exception, HostUnresolvable):
            # No connection was tried: the robots.txt fetch found the name
            # unresolvable (and was counted); the run of failures goes on.
            if dns:
                await self._judge_down(request, host_key(request), exception, "dns")
            return
        if isinstance(exception, HostDown):
            # No connection was tried (the robots middleware found the
            # robots.txt without one ROBOTS_DOWN_AFTER times, each counted):
            # the breaker does not count it again, since its pages must reach
            # the failure policy rather than wait behind doubling parks; but
            # it is the host's run of failures going on, so the verdict is
            # judged.
            if self.down_after_ms:
                await self._judge_down(request, host_key(request), exception)
            return
        stats = self.crawler.stats
        assert stats is not None
        hostkey = host_key(request)
        stats.inc_value("backoff/connection_failures")
        self._failing.add(hostkey)
        fails, park = await retry_redis(
            lambda: self.records.fail(
                hostkey,
                threshold=self.threshold,
                cooldown_ms=self.cooldown_ms,
                max_cooldown_ms=self.max_cooldown_ms,
            ),
            "the back-off record",
        )
        if park:
            stats.inc_value("backoff/breaker_opened")
            logger.warning(
                "Circuit breaker of %s opened after %d connection failures "
                "(last: %s): its queue is parked",
                hostkey, fails, type(exception).__name__,
            )  # fmt: skip
        if dns:
            await self._judge_down(request, hostkey, exception, "dns")
        elif self.down_after_ms and fails >= self.threshold:
            await self._judge_down(request, hostkey, exception)

    async def _judge_down(
        self,
        request: Request,
        hostkey: str,
        exception: Exception,
        reason: str = "host_down",
    ) -> None:
        """Judge the host down (``reason`` ``host_down``) or its name
        unresolvable (``dns``) if it has failed long enough (one script that
        also dead-letters its waiting requests); while a verdict is in force,
        mark ``request`` so that the failure policy gives it up."""
        stats = self.crawler.stats
        assert stats is not None
        dns = reason == "dns"
        what = "name does not resolve" if dns else "host down"
        error = f"{what}: {type(exception).__name__}: {exception}"
        after_ms = self.dns_after_ms if dns else self.down_after_ms
        swept, down, made = await retry_redis(
            lambda: self.dead_letters.host_down(
                hostkey, after_ms, self.down_ttl_ms, error, reason
            ),
            "the host-down verdict",
        )
        if not down:
            return
        request.meta[meta.HOST_DOWN] = "dns" if dns else True
        if made and dns:
            stats.inc_value("backoff/dns_down")
            stats.inc_value("dlq/dns", swept)
            logger.warning(
                "%s does not resolve (for DNS_DOWN_AFTER=%.0f s): %d waiting "
                "requests dead-lettered, new ones go to the DLQ for %.0f s",
                hostkey, after_ms / 1000, swept, self.down_ttl_ms / 1000,
            )  # fmt: skip
        elif made:
            stats.inc_value("backoff/host_down")
            stats.inc_value("dlq/host_down", swept)
            logger.warning(
                "%s judged down (failing for HOST_DOWN_AFTER=%.0f s): %d waiting "
                "requests dead-lettered, new ones go to the DLQ for %.0f s",
                hostkey, self.down_after_ms / 1000, swept, self.down_ttl_ms / 1000,
            )  # fmt: skip
