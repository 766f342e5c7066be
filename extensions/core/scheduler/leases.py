"""When a leased request is done, whatever the spider yields.

Settings read: none.

The scheduler hands each request out under a frontier lease
(``meta["frontier_lease"]``, :mod:`extensions.meta`); the lease ends (the
scheduler acknowledges it) once the request's outcome is final. In the words
of Scrapy's own request life cycle, a response is *fully processed* when:

* its callback's output is *consumed*: :class:`LeaseSpiderMiddleware`, the
  outermost spider middleware (:data:`SPIDER_MIDDLEWARES`), sees the end of
  the output and counts the items in it;
* and every one of those items is *finished* by the item pipelines: Scrapy
  sends ``item_scraped``, ``item_dropped`` or ``item_error`` with the
  response. An item a pipeline keeps until it is durable (a pipeline that
  writes in batches) is finished only when that pipeline says it is stored:
  it sends :data:`extensions.signals.item_held` for the item in
  ``process_item`` and :data:`extensions.signals.items_stored` once it is
  durable (``pipelines.storage`` does; any pipeline may). For every other
  pipeline an item that left ``process_item`` is done.

A download that fails for good reaches the spider's errback, whose output
Scrapy does not pass through spider middlewares: :class:`LeaseDownloaderMiddleware`,
the outermost downloader middleware, follows it the same way (it stands in
for the errback of a leased request while it is downloaded, see there).
A callback that raises (``spider_error``) ends its lease too, with a dead
letter (the scheduler's).

Requests a callback yields go to the scheduler as they are yielded, before
the output ends: they are written ahead in the same round as the parent's
acknowledgement, or an earlier one. A redirect, retry or deferral hands its
parent's lease over instead (the scheduler's business).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from scrapy import Request
from scrapy.exceptions import CloseSpider
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.misc import arg_to_iter
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from extensions.meta import FRONTIER_LEASE

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


def lease_of(obj: Any) -> str | None:
    """The lease token an item names itself (a ``lease`` attribute or key),
    or that a request or response carries in its meta.

    >>> lease_of({"lease": "w:1"}), lease_of(Request("http://a.test/"))
    ('w:1', None)
    >>> lease_of(Request("http://a.test/", meta={"frontier_lease": "w:2"}))
    'w:2'
    """
    if isinstance(obj, Request):
        value = obj.meta.get(FRONTIER_LEASE)
    elif isinstance(obj, dict):
        value = obj.get("lease")
    else:
        value = getattr(obj, "lease", None)
    return value if isinstance(value, str) else None


def lease_of_response(response: Any) -> str | None:
    """The lease of the request behind a response, or behind a failure
    (Scrapy passes a ``Failure`` as the "response" of an errback's items)."""
    request = getattr(response, "request", None)
    return lease_of(request) if isinstance(request, Request) else None


@dataclass
class _Lease:
    output_done: bool = False
    items: int = 0  # items yielded, not yet finished by the pipelines
    held: int = 0  # items a pipeline holds until they are durable
    refs: list[int] = field(default_factory=list)  # ids of its items


class LeaseBook:
    """The leases of requests handed to the engine, and what each waits for.

    ``done(lease)`` is called once a lease's request is fully processed (see
    the module docstring). A lease nobody reports on (a request the engine
    drops without a word) is never ended here: the scheduler stops renewing
    it after its maximum age and the frontier hands it out again.
    """

    def __init__(self, done: Callable[[str], None]) -> None:
        self._done = done
        self._leases: dict[str, _Lease] = {}
        # id(item) -> (item, lease): the items of leases not ended yet (the
        # item is kept, so its id cannot be reused meanwhile).
        self._items: dict[int, tuple[Any, str]] = {}
        self._held: dict[int, str] = {}  # id(item) -> lease, held items

    def __len__(self) -> int:
        return len(self._leases)

    def begin(self, lease: str) -> None:
        """The request of ``lease`` was handed to the engine."""
        self._leases[lease] = _Lease()

    def forget(self, lease: str) -> None:
        """The lease ended otherwise (handed over to a redirect or retry,
        dropped): nothing more to wait for."""
        state = self._leases.pop(lease, None)
        if state is not None:
            self._drop_refs(state)

    def tracks(self, lease: str) -> bool:
        return lease in self._leases

    @property
    def holding(self) -> int:
        """Leases whose response is processed but an item of which a
        pipeline still holds: work the engine no longer sees."""
        return sum(1 for s in self._leases.values() if s.held > 0)

    def yielded(self, lease: str, item: Any) -> None:
        state = self._leases.get(lease)
        if state is None:
            return
        state.items += 1
        self._items[id(item)] = (item, lease)
        state.refs.append(id(item))

    def output_ended(self, lease: str) -> None:
        state = self._leases.get(lease)
        if state is not None:
            state.output_done = True
            self._check(lease, state)

    def item_finished(self, lease: str | None) -> None:
        """An item of ``lease``'s response left the pipelines (scraped,
        dropped or failed)."""
        state = self._leases.get(lease) if lease else None
        if state is not None:
            state.items = max(0, state.items - 1)
            self._check(lease, state)  # type: ignore[arg-type]

    def hold(self, item: Any) -> bool:
        """A pipeline keeps ``item`` until it is durable. False when the item
        is no item of a tracked lease (a record of the store's own)."""
        found = self._items.get(id(item))
        lease = found[1] if found is not None and found[0] is item else lease_of(item)
        state = self._leases.get(lease) if lease else None
        if state is None or lease is None:
            return False
        state.held += 1
        self._held[id(item)] = lease
        return True

    def stored(self, item: Any) -> None:
        """``item`` is durable (:data:`extensions.signals.items_stored`)."""
        lease = self._held.pop(id(item), None)
        if lease is None:
            # Not announced held (a pipeline that only sends items_stored):
            # its lease, if it names one, waits for nothing more from it.
            lease = lease_of(item)
            state = self._leases.get(lease) if lease else None
            if state is None and lease is not None:
                self._done(lease)  # not handed out by this book
            elif state is not None:
                self._check(lease, state)  # type: ignore[arg-type]
            return
        state = self._leases.get(lease)
        if state is not None:
            state.held = max(0, state.held - 1)
            self._check(lease, state)

    def _check(self, lease: str, state: _Lease) -> None:
        if state.output_done and state.items <= 0 and state.held <= 0:
            del self._leases[lease]
            self._drop_refs(state)
            self._done(lease)

    def _drop_refs(self, state: _Lease) -> None:
        for ref in state.refs:
            self._items.pop(ref, None)
            self._held.pop(ref, None)


class Failures(Protocol):
    """Where the failures of leased requests are filed: the scheduler's
    dead-letter hand-off (:mod:`extensions.core.scheduler.handoff`)."""

    def response_reached_spider(self, response: Any) -> None: ...

    def download_failed(
        self,
        request: Request,
        exception: BaseException,
        errback: Callable[..., Any] | None = None,
    ) -> None: ...

    def output_failed(
        self, request: Request, lease: str, exc: BaseException, response: Any
    ) -> None: ...


@dataclass(frozen=True)
class Leasing:
    """What the two outermost middlewares report a leased request's
    progress to: the lease book and where failures are filed."""

    book: LeaseBook
    failures: Failures

    def output_failed(
        self, request: Request, lease: str, exc: BaseException, response: Any = None
    ) -> None:
        """The callback (or errback) of a leased request raised: its dead
        letter is filed, and the lease ends once the items it did yield are
        finished."""
        self.failures.output_failed(request, lease, exc, response)
        self.book.output_ended(lease)


def leasing_of(crawler: Crawler) -> Leasing | None:
    """The crawl's :class:`Leasing` if its scheduler leases (it has one as
    ``leasing``), else None (another scheduler, or no engine yet)."""
    engine = getattr(crawler, "engine", None)
    scheduler = getattr(engine, "scheduler", None) if engine is not None else None
    found = getattr(scheduler, "leasing", None)
    return found if isinstance(found, Leasing) else None


async def follow(
    leasing: Leasing,
    lease: str,
    result: AsyncIterator[Any],
    request: Request,
    response: Response | None = None,
) -> AsyncIterator[Any]:
    """Yield ``result``, counting its items for ``lease``; end the lease's
    output when it is exhausted, or report the exception it raised."""
    book = leasing.book
    try:
        async for out in result:
            if out is not None and not isinstance(out, Request):
                book.yielded(lease, out)
            yield out
    except CloseSpider:
        # The spider closes on purpose; what it yielded is processed.
        book.output_ended(lease)
        raise
    except Exception as exc:
        leasing.output_failed(request, lease, exc, response)
        raise
    book.output_ended(lease)


def unwrap(request: Request) -> Request:
    """Put the spider's own errback back on ``request`` (in place)."""
    errback = request.errback
    if isinstance(errback, FollowedErrback):
        request.errback = errback.errback
    return request


class FollowedErrback:
    """The errback of one leased request while it is downloaded. Called by
    Scrapy's scraper when the download failed for good: puts the spider's
    own errback back (the spider sees its request unchanged), has the
    dead letter of a terminal failure filed, then calls the
    spider's errback (or, without one, hands the failure back for Scrapy to
    log) and follows its output."""

    def __init__(
        self,
        request: Request,
        errback: Callable[[Failure], Any] | None,
        leasing: Leasing,
        lease: str,
    ) -> None:
        self.request = request
        self.errback = errback
        self.leasing = leasing
        self.lease = lease
        self.__name__ = getattr(errback, "__name__", "errback")

    def __call__(self, failure: Failure) -> Any:
        # Scrapy sets failure.request to the request it calls back for.
        found = getattr(failure, "request", None)
        request = found if isinstance(found, Request) else self.request
        unwrap(request)
        unwrap(self.request)
        book = self.leasing.book
        # A Failure always holds its exception (typed optional by Twisted).
        assert failure.value is not None
        self.leasing.failures.download_failed(request, failure.value, self.errback)
        if self.errback is None:
            book.output_ended(self.lease)
            return failure  # Scrapy logs the download error, as without us
        try:
            output = self.errback(failure)
        except Exception as exc:
            self.leasing.output_failed(request, self.lease, exc)
            raise
        if output is None or isinstance(output, Failure):
            # Nothing, or the failure itself (Scrapy re-raises it).
            book.output_ended(self.lease)
            return output
        return follow(self.leasing, self.lease, _outputs(output), request)


async def _outputs(output: Any) -> AsyncIterator[Any]:
    """What Scrapy makes of a callback's return value, as one async
    iterator: an async iterator, an awaitable's result, one item or an
    iterable of them (``scrapy.utils.spider.iterate_spider_output``)."""
    if isinstance(output, Deferred):
        output = await maybe_deferred_to_future(output)
    elif inspect.isawaitable(output):
        output = await output
    if isinstance(output, AsyncIterator):
        async for out in output:
            yield out
        return
    for out in arg_to_iter(output):
        yield out
