"""The outermost downloader middleware: a leased request's failed download.

Settings read: none.

It follows a leased request whose download fails for good through the
spider's errback (:class:`~extensions.core.scheduler.leases.FollowedErrback`), so its
lease ends with the errback's output (``docs/frontier.md``, "Leases").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from extensions.core.scheduler.leases import (
    FollowedErrback,
    lease_of,
    leasing_of,
    unwrap,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response


class LeaseDownloaderMiddleware:
    """The outermost downloader middleware: follows a leased request whose
    download fails for good to the end of its errback's output.

    Scrapy calls ``request.errback`` for a failure however it arose (a
    download error, or an exception a downloader middleware raised in
    ``process_response``, where no ``process_exception`` sees it). So on
    the way out (``process_request``) the request's errback is replaced by a
    :class:`FollowedErrback` for the time it is downloaded; a response puts
    the spider's own back on the way in (``process_response``), and the
    scheduler puts it back on any copy it is given (a redirect, retry or
    deferral), so the spider never sees it outside its errback's call."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeaseDownloaderMiddleware:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        leasing = leasing_of(self.crawler)
        lease = lease_of(request)
        if leasing is None or lease is None or not leasing.book.tracks(lease):
            return
        if not isinstance(request.errback, FollowedErrback):
            request.errback = FollowedErrback(request, request.errback, leasing, lease)

    def process_response(self, request: Request, response: Response) -> Response:
        unwrap(request)
        return response
