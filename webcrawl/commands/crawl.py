"""``scrapy crawl``, exiting non-zero when pages were fetched but not stored.

Scrapy's own command exits 0 whatever the crawl's end: a worker whose page
store refused its batches (``finish_reason`` ``store_failed``) or was still
failing at close would read as a success to scrapyd, systemd or a shell loop.
This command runs the crawl exactly as Scrapy's does, then reads the
``storage/unstored`` stat (:data:`pipelines.storage.UNSTORED_STAT`) and, when
it is not zero, logs one line with the count and exits with
:data:`UNSTORED_EXIT_CODE`; a crawl that Redis stopped by refusing its
credentials (finish reason ``redis_auth``) exits 2, as it would at start.
Unstored pages' frontier leases were not acknowledged, so the fleet fetches
them again once the leases expire.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.commands.crawl import Command as ScrapyCrawlCommand

from extensions.core.scheduler import REDIS_AUTH_REASON
from pipelines.storage import UNSTORED_STAT

if TYPE_CHECKING:
    import argparse

    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

# Distinct from Scrapy's 1 (bootstrap failed, bad usage): the crawl ran, but
# some of what it fetched is not in the store.
UNSTORED_EXIT_CODE = 3


class Command(ScrapyCrawlCommand):
    """Scrapy's ``crawl``; exits :data:`UNSTORED_EXIT_CODE` when pages were
    left unstored."""

    def __init__(self) -> None:
        super().__init__()
        self._crawlers: list[Crawler] = []

    def _create_crawler(self, spidercls: type[Spider] | str) -> Crawler:
        crawler = super()._create_crawler(spidercls)
        self._crawlers.append(crawler)
        return crawler

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        super().run(args, opts)
        unstored = sum(
            int(c.stats.get_value(UNSTORED_STAT, 0) or 0)
            for c in self._crawlers
            if c.stats is not None
        )
        refused = [
            c
            for c in self._crawlers
            if c.stats is not None
            and c.stats.get_value("finish_reason") == REDIS_AUTH_REASON
        ]
        if refused and not self.exitcode:
            # Redis refused the credentials mid-crawl: a supervisor must see
            # a failure, as with a wrong password at start (exit 2).
            self.exitcode = 2
        if unstored and not self.exitcode:
            logger.error(
                "%d fetched pages were not stored; exiting with status %d",
                unstored,
                UNSTORED_EXIT_CODE,
            )
            self.exitcode = UNSTORED_EXIT_CODE
