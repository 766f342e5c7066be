"""The outermost spider middleware: the end of a leased response's output.

Settings read: none.

It counts the items of each leased response's callback output and tells the
scheduler's :class:`~extensions.core.scheduler.leases.LeaseBook` when the output ends
(``docs/frontier.md``, "Leases"), so a lease ends when its response is fully
processed, whatever the spider yields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from extensions.core.scheduler.leases import follow, lease_of_response, leasing_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response


class LeaseSpiderMiddleware:
    """The outermost spider middleware: sees the end of each leased
    response's callback output (or errback output, for a response refused
    by a spider middleware's ``process_spider_input``, e.g. ``HttpError``)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeaseSpiderMiddleware:
        return cls(crawler)

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        leasing = leasing_of(self.crawler)
        lease = lease_of_response(response)
        if leasing is None or lease is None or not leasing.book.tracks(lease):
            async for out in result:
                yield out
            return
        leasing.failures.response_reached_spider(response)
        request = response.request
        assert request is not None
        async for out in follow(leasing, lease, result, request, response):
            yield out
