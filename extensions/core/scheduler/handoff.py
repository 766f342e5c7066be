"""The scheduler's dead-letter hand-off: terminal failures into the
dead-letter queue, and letters with no page record out to the page store.

Settings read (defaults in :mod:`extensions.settings.defaults`):
``FRONTIER_HEARTBEAT_INTERVAL``.

A failed request's letter is written before its lease can end (the round's
letters go before its acknowledgements); letters the spider will not record
(a callback that raised, a redirect loop, an offsite redirect, the
frontier's own) are handed to the store a page at a time
(``docs/dead-letters.md``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from extensions.core.frontier.deadletters import DeadLetter, DeadLetters, dead_letter
from extensions.core.frontier.serialization import UnserializableRequest
from extensions.core.scheduler.leases import unwrap
from extensions.meta import FAILURE_META
from extensions.signals import dead_letters_unrecorded
from extensions.utils.failures import TrapFiltered, classify_exception
from extensions.utils.url import canonicalize_url

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

# Dead letters without a page record handed to the store per partition and
# round: bounded replies, whatever the size of a host-down sweep.
RECORD_PAGE = 200


class DeadLetterHandoff:
    """Dead letters from the moment a failure is final until Redis holds
    them, and those with no page record until the store has them.

    ``filed()`` hears of each letter filed (it waits for the next round)."""

    def __init__(self, crawler: Crawler, *, filed: Callable[[], None]) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.interval = crawler.settings.getfloat("FRONTIER_HEARTBEAT_INTERVAL")
        self._filed = filed
        self.dlq: DeadLetters | None = None
        self.spider: Spider | None = None
        self._dead: list[DeadLetter] = []
        self._dead_unrecorded: list[DeadLetter] = []  # written here, no page
        self.records_left = 0  # unrecorded dead letters still listed
        self.next_records = 0.0  # monotonic: the next hand-over to the store
        self._failed_output: set[str] = set()  # leases whose output raised

    def open(self, dlq: DeadLetters, spider: Spider) -> None:
        self.dlq = dlq
        self.spider = spider

    @property
    def pending(self) -> bool:
        return bool(self._dead or self._dead_unrecorded or self.records_left)

    # -- failures, as they come ---------------------------------------------------

    def add(self, letter: DeadLetter, **_: Any) -> None:
        """A dead letter another component made (signal ``request_dead``)."""
        self._dead.append(letter)
        self.stats.inc_value(f"dlq/{letter.reason}")
        self._filed()

    def response_reached_spider(self, response: Any) -> None:
        """A leased response goes to its callback (or errback): a response
        the failure policy gave up on (a 5xx or 429 out of attempts) is dead
        letter, filed before its lease can end."""
        request = response.request
        record = request.meta.get(FAILURE_META) or {}
        if record.get("terminal") and record.get("reason"):
            self.file(request, str(record["reason"]), status=response.status)

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
        self.file(request, str(reason), error=error, recorded=errback is not None)

    def output_failed(
        self, request: Request, lease: str, exc: BaseException, response: Any
    ) -> None:
        """The callback (or errback) of a leased request raised: dead
        lettered as ``unparseable``, with no page record (``spider_error``
        follows, and is not filed twice)."""
        self._failed_output.add(lease)
        self._spider_failed(request, exc, response)

    def spider_error(
        self, request: Request, lease: str, exc: BaseException, response: Any
    ) -> bool:
        """Scrapy's ``spider_error`` for a leased response: True when it
        is news (raised before any output), filed here."""
        if lease in self._failed_output:
            self._failed_output.discard(lease)  # filed by output_failed
            return False
        self._spider_failed(request, exc, response)
        return True

    def _spider_failed(
        self, request: Request, exc: BaseException, response: Any
    ) -> None:
        error = f"{type(exc).__name__}: {exc}"[:500]
        status = getattr(response, "status", None)
        self.file(request, "unparseable", error=error, status=status,
                  recorded=False)  # fmt: skip

    def offsite_redirect(self, request: Request) -> None:
        """A redirect refused in ``request_scheduled`` (before the scheduler
        saw it): its parent's lease ends with this letter."""
        letter = self._letter(request, "offsite_redirect", "refused when scheduled")
        if letter is not None:
            self._dead_unrecorded.append(letter)
            self.stats.inc_value("dlq/offsite_redirect")
            self._filed()

    def redirect_loop(self, request: Request) -> None:
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

    def file(
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
            self.add(letter)
        else:
            self._dead_unrecorded.append(letter)
            self.stats.inc_value(f"dlq/{reason}")
            self._filed()

    def _letter(self, request: Request, reason: str, error: str) -> DeadLetter | None:
        try:
            return dead_letter(unwrap(request), self.spider, reason, error=error)
        except UnserializableRequest:
            return None

    # -- Redis work ---------------------------------------------------------------

    async def flush(self) -> None:
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
            self.records_left += len(dead)

    def records_due(self, now: float) -> bool:
        """True when unrecorded letters wait, or at each heartbeat interval
        (and schedules the next look)."""
        if not (self.records_left or now >= self.next_records):
            return False
        self.next_records = now + self.interval
        return True

    async def hand_records(self) -> None:
        """Send a page of the dead letters that have no page record
        (:meth:`DeadLetters.unrecorded`) to whoever records failed pages."""
        assert self.dlq is not None
        # A failing call leaves nothing "left": tried again at the next beat,
        # never in a tight loop, and never holding a finite crawl open.
        self.records_left = 0
        letters, self.records_left = await self.dlq.unrecorded(RECORD_PAGE)
        if letters:
            self.stats.inc_value("dlq/recorded_by_store", len(letters))
            self.crawler.signals.send_catch_log(
                dead_letters_unrecorded, letters=letters
            )
