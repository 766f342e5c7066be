"""AutoThrottle for the whole fleet: one delay per host, in its record.

Settings read: ``AUTOTHROTTLE_ENABLED``, ``AUTOTHROTTLE_TARGET_CONCURRENCY``,
``AUTOTHROTTLE_START_DELAY``, ``AUTOTHROTTLE_MAX_DELAY``,
``AUTOTHROTTLE_DEBUG``, ``DOWNLOAD_DELAY`` (the lowest delay),
``FRONTIER_PARTITIONS`` (where a host's record lives), and through
:mod:`extensions.connection` ``REDIS_URL``.

Scrapy's :class:`scrapy.extensions.throttle.AutoThrottle` adjusts the delay
of each download slot of one process; a fleet of N workers so fetches a host
N times as often as the settings say, and each worker learns the host's
latency alone. This extension keeps Scrapy's settings and algorithm but one
delay per host for the whole fleet: every worker folds the latency of each
response it downloads (``download_latency``) into the host record's
``throttle`` field (:data:`extensions.core.frontier.lua.THROTTLE_LUA`, one
script call), and the frontier's lease script and the download lock space
the host by it through the spacing rule: never below ``DOWNLOAD_DELAY``, the
robots.txt ``Crawl-delay``, the host's own delay or a back-off
(``docs/host-record.md``). Like Scrapy's, the delay counts from the start of
one download to the start of the next, and a host has no more downloads in
flight than its concurrency (fleet-wide, 1 unless ``DOWNLOAD_SLOTS`` or
``scrapy hosts set --concurrency`` say more): a target concurrency above it
cannot be reached. The webcrawl add-on switches Scrapy's AutoThrottle off
and this one on when ``AUTOTHROTTLE_ENABLED`` is True.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy import signals
from scrapy.exceptions import NotConfigured

from extensions.connection import TRANSIENT_REDIS_ERRORS
from extensions.core.frontier.hostrecord import HostRecords
from extensions.settings import config, defaults
from extensions.utils.hosts import host_key

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

logger = logging.getLogger(__name__)

# Scrapy's own meta key: a request whose latency must not move the delay.
DONT_ADJUST = "autothrottle_dont_adjust_delay"


class FleetAutoThrottle:
    """Extension: fold each response's latency into its host's fleet-wide
    AutoThrottle delay (stats ``autothrottle/samples``,
    ``autothrottle/redis_errors``; ``AUTOTHROTTLE_DEBUG`` logs every change
    as Scrapy's does)."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        config.require(s, defaults)
        if not s.getbool("AUTOTHROTTLE_ENABLED"):
            raise NotConfigured("AUTOTHROTTLE_ENABLED is False")
        self.crawler = crawler
        self.debug = s.getbool("AUTOTHROTTLE_DEBUG")
        self.target = s.getfloat("AUTOTHROTTLE_TARGET_CONCURRENCY")
        if self.target <= 0:
            # Scrapy's NotConfigured would crawl on without a throttle.
            raise config.SettingsError(
                f"AUTOTHROTTLE_TARGET_CONCURRENCY={self.target!r} is not allowed: "
                "use a number > 0"
            )
        self.min_ms = round(s.getfloat("DOWNLOAD_DELAY") * 1000)
        self.max_ms = round(s.getfloat("AUTOTHROTTLE_MAX_DELAY") * 1000)
        self.start_ms = max(
            self.min_ms, round(s.getfloat("AUTOTHROTTLE_START_DELAY") * 1000)
        )
        self._records: HostRecords | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        crawler.signals.connect(self._downloaded, signal=signals.response_downloaded)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @property
    def records(self) -> HostRecords:
        if self._records is None:
            self._records = HostRecords.of_crawler(self.crawler)
        return self._records

    def _downloaded(self, response: Response, request: Request, **_: Any) -> None:
        latency = request.meta.get("download_latency")
        if latency is None or request.meta.get(DONT_ADJUST) is True:
            return
        task = asyncio.ensure_future(self._fold(request, response, float(latency)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fold(self, request: Request, response: Response, latency: float) -> None:
        stats = self.crawler.stats
        assert stats is not None
        hostkey = host_key(request)
        try:
            old, new = await self.records.throttle(
                hostkey,
                latency_ms=round(latency * 1000),
                target_concurrency=self.target,
                min_ms=self.min_ms,
                max_ms=self.max_ms,
                start_ms=self.start_ms,
                ok=response.status == 200,
            )
        except TRANSIENT_REDIS_ERRORS as exc:
            # One sample lost: the next response brings another.
            stats.inc_value("autothrottle/redis_errors")
            logger.debug("AutoThrottle sample of %s not folded: %s", hostkey, exc)
            return
        stats.inc_value("autothrottle/samples")
        if self.debug:
            logger.info(
                "slot: %(slot)s | delay:%(delay)5d ms (%(delaydiff)+d) | "
                "latency:%(latency)5d ms | size:%(size)6d bytes",
                {
                    "slot": hostkey,
                    "delay": new,
                    "delaydiff": new - old,
                    "latency": latency * 1000,
                    "size": len(response.body),
                },
            )

    def _closed(self) -> None:
        for task in self._tasks:
            task.cancel()
