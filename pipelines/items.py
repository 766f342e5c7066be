"""The page item the storage pipeline consumes (the ``web`` spider yields it).

It lives with its consumer: the application's spider imports it from here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from extensions.core.frontier.serialization import CorruptEntry, request_from_bytes

if TYPE_CHECKING:
    from scrapy.utils.request import RequestFingerprinterProtocol

    from extensions.core.frontier.deadletters import DeadLetter
    from pipelines.processing import Extracted


@dataclass
class PageItem:
    """One fetched (or finally failed) page.

    ``lease`` is an opaque token the frontier put in the request's meta; the
    spider copies it here and the storage pipeline hands the item back through
    :data:`extensions.signals.items_stored` once it is durable. Nothing but the
    frontier interprets it.

    ``recrawl`` is the revisit record the continuous-crawl extension put in
    the request's meta (``extensions.extensions.recrawl``), opaque here like ``lease``;
    ``lastmod`` a sitemap's ``<lastmod>`` for the page (when it last changed).
    ``content_hash`` is filled in by the storage pipeline, so whoever hears
    that the item was stored can tell whether the page changed.

    ``fingerprint`` is the hex request fingerprint of the request that was
    scheduled (from ``crawler.request_fingerprinter``): the store derives its
    document ids from it, so a re-fetch replaces rather than duplicates.

    ``filtered`` is the trap limit that refused the URL before any request
    (a filtered record: never fetched, ``error`` says why); the store never
    lets it replace a stored page.

    ``extracted`` is what :func:`pipelines.processing.extract` found in
    ``body`` when the spider already parsed it (links, robots directives):
    the pipeline then uses it instead of parsing the page again. It lives in
    the worker's memory only (never serialized): the item goes from the
    spider to the pipeline in one process.
    """

    url: str
    final_url: str
    status: int
    fingerprint: str
    depth: int = 0
    referrer: str | None = None
    fetched_at: float = 0.0
    headers: dict[str, list[str]] = field(default_factory=dict, repr=False)
    body: bytes = field(default=b"", repr=False)
    encoding: str | None = None
    error: str | None = None
    lease: str | None = None
    worker: str | None = None
    extracted: Extracted | None = field(default=None, repr=False, compare=False)
    recrawl: list[object] | None = None
    lastmod: str | None = None
    content_hash: str | None = None
    filtered: str | None = None


def dead_letter_item(
    letter: DeadLetter, fingerprinter: RequestFingerprinterProtocol
) -> PageItem:
    """The failed page of a dead letter that has no page record (see
    :data:`extensions.signals.dead_letters_unrecorded`): the URL as it was
    first queued, its last status (0: none), ``error`` naming the reason,
    and the fingerprint of its request, so it takes the place a fetch of it
    would have taken in the store.

    >>> from scrapy.utils.test import get_crawler
    >>> from extensions.core.frontier.deadletters import DeadLetter
    >>> fp = get_crawler().request_fingerprinter
    >>> item = dead_letter_item(DeadLetter("http://a.test/", "http://a.test:80",
    ...     "host_down", "http://a.test/", error="host down"), fp)
    >>> item.status, item.error, len(item.fingerprint)
    (0, 'host_down: host down', 40)
    """
    try:
        request = request_from_bytes(letter.request.encode())
    except CorruptEntry:
        from scrapy import Request

        request = Request(letter.url)
    if request.url != letter.url:
        request = request.replace(url=letter.url)
    error = letter.reason if not letter.error else f"{letter.reason}: {letter.error}"
    return PageItem(
        url=letter.url,
        final_url=letter.url,
        status=letter.status or 0,
        fingerprint=fingerprinter.fingerprint(request).hex(),
        depth=int(request.meta.get("depth", 0) or 0),
        fetched_at=letter.last_failure or time.time(),
        error=error[:500],
    )
