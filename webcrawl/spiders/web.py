"""The ``web`` spider: crawl from the Redis seed list, follow links in scope.

Settings read: ``WEB_ALLOWED_DOMAINS``, ``WEB_SCOPE_SEED_HOSTS``,
``WEBCRAWL_WORKER_ID``, ``LINK_SKIP_EXTENSIONS``, ``PARSE_OFFLOAD_BYTES``
(defaults in :mod:`webcrawl.defaults`), ``RECRAWL_ENABLED``,
``MAX_OUTLINKS_PER_PAGE`` (:mod:`extensions.settings.defaults`).

Spider arguments (``-a``): ``allowed_domains`` (comma list), ``max_depth``
(a whole number >= 1, sets ``DEPTH_LIMIT``; 0 is refused: leave it out for no
limit).

Seeds: ``redis-cli lpush web:start_urls URL`` (or a JSON object, see
:mod:`extensions.core.seeds`), taken, polled and handed over by
:mod:`extensions.spidermiddlewares.seeds` as for any spider;
:meth:`WebSpider.seed_request`
gives each its errback (and, with ``WEB_SCOPE_SEED_HOSTS``, its host to the
scope). ``MAX_IDLE_TIME_BEFORE_CLOSE`` is the same extension's.

Every response yields one :class:`~pipelines.items.PageItem`, and so does every
final failure (download error, HTTP error status, robots.txt exclusion), so a
page that fails stays on record and its frontier lease ends. Links are yielded
before the page item: the frontier then queues the children before the page
can be stored and its lease acknowledged.

An HTML page is parsed once, by :func:`pipelines.processing.extract`: its
links, its robots directives (one rule: ``nofollow`` or ``none`` from
``<meta name=robots>`` or ``X-Robots-Tag`` means no link of the page is
followed) and its main text. The item carries that result to the storage
pipeline (``PageItem.extracted``), which records the same directives and does
not parse the page again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from lxml.etree import LxmlError
from scrapy import Request, Spider, signals
from scrapy.http import HtmlResponse, Response
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.gz import gunzip
from scrapy.utils.sitemap import Sitemap

import extensions.settings.defaults
from extensions.meta import FRONTIER_LEASE, RECRAWL_RECORD, SITEMAP_LASTMOD
from extensions.settings import config
from extensions.settings.config import SettingsError
from extensions.utils.failures import TrapFiltered
from extensions.utils.url import canonicalize_url
from pipelines.items import PageItem
from pipelines.processing import Extracted, extract
from webcrawl import defaults
from webcrawl.addon import refuse

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)

# Anchors of one page examined per outlink MAX_OUTLINKS_PER_PAGE allows: room
# for its off-scope, nofollow and skipped links, while a page with 100,000
# links costs the reactor a bounded parse (it held it for seconds).
ANCHORS_PER_OUTLINK = 2
# Links of a page examined between two turns of the event loop (~2 ms of
# work): a page's up to 2 x MAX_OUTLINKS_PER_PAGE anchors never hold it long.
LINK_CHUNK = 100
# Largest decompressed sitemap read (the sitemaps protocol's own limit).
DOWNLOAD_MAXSIZE = 50 * 1024 * 1024


def _header_dict(response: Response) -> dict[str, list[str]]:
    return {
        k.decode("latin-1").lower(): [v.decode("latin-1") for v in vs]
        for k, vs in response.headers.items()
    }


def _max_depth(value: str | int | None) -> int | None:
    """The ``max_depth`` spider argument: a whole number >= 1, or none.

    0 is refused rather than read as Scrapy's ``DEPTH_LIMIT=0`` ("no limit"),
    which is the opposite of what ``-a max_depth=0`` says.

    >>> _max_depth("2"), _max_depth(None), _max_depth("")
    (2, None, None)
    >>> _max_depth("0")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    extensions...SettingsError: max_depth=0 is not allowed: use a whole ...
    """
    if value is None or value == "":
        return None
    try:
        depth = int(value)
    except ValueError:
        depth = 0
    if depth < 1:
        raise SettingsError(
            f"max_depth={value} is not allowed: use a whole number >= 1 "
            "(leave it out for no limit)"
        )
    return depth


class WebSpider(Spider):
    name = "web"
    allowed_domains: list[str]
    scope_seed_hosts: bool
    worker: str | None
    recrawl: bool
    skip_suffixes: tuple[str, ...]
    max_anchors: int | None
    offload_bytes: int
    _pool: ProcessPoolExecutor | None

    def __init__(
        self,
        *args: Any,
        allowed_domains: str | list[str] | None = None,
        max_depth: str | int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(allowed_domains, str):
            allowed_domains = [
                d.strip() for d in allowed_domains.split(",") if d.strip()
            ]
        self._arg_domains = allowed_domains or []
        self._max_depth = _max_depth(max_depth)

    @classmethod
    def update_settings(cls, settings: BaseSettings) -> None:
        # The spider reads its settings in from_crawler, before the add-on
        # runs: it installs the defaults of what it reads, its own and the
        # extensions' (FRONTIER_HEARTBEAT_INTERVAL, MAX_OUTLINKS_PER_PAGE,
        # REDIS_RETRY_MAX: read as 0 otherwise, a heartbeat of 0 beat in a
        # busy loop). The add-on does it again, and checks them, before the
        # crawl starts.
        super().update_settings(settings)
        config.install(settings, extensions.settings.defaults)
        config.install(settings, defaults)

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> WebSpider:
        try:
            spider = super().from_crawler(crawler, *args, **kwargs)
        except SettingsError as exc:  # a bad -a argument: one line, exit 2
            refuse(exc)
        s = crawler.settings
        if spider._max_depth is not None:
            s.set("DEPTH_LIMIT", spider._max_depth, priority="spider")
        spider.allowed_domains = spider._arg_domains or s.getlist("WEB_ALLOWED_DOMAINS")
        spider.scope_seed_hosts = s.getbool("WEB_SCOPE_SEED_HOSTS")
        spider.offload_bytes = s.getint("PARSE_OFFLOAD_BYTES")
        spider._pool = None
        spider.worker = s.get("WEBCRAWL_WORKER_ID") or None
        max_outlinks = s.getint("MAX_OUTLINKS_PER_PAGE")
        spider.max_anchors = max_outlinks * ANCHORS_PER_OUTLINK or None
        spider.skip_suffixes = tuple(
            "." + ext.lower().lstrip(".") for ext in s.getlist("LINK_SKIP_EXTENSIONS")
        )
        # Sitemap <lastmod> dates travel with requests only when revisits
        # are on (extensions.extensions.recrawl): otherwise they would cost queue bytes.
        spider.recrawl = s.getbool("RECRAWL_ENABLED")
        crawler.signals.connect(spider._on_closed, signal=signals.spider_closed)
        return spider

    # -- seeds (taken by extensions.spidermiddlewares.seeds)
    # --------------------------------

    def seed_request(self, request: Request) -> Request:
        """Shape a seed's request (:mod:`extensions.spidermiddlewares.seeds`
        calls it): the
        page is recorded even if it fails, and with ``WEB_SCOPE_SEED_HOSTS``
        and no domains given, the seed's host joins the crawl's scope."""
        if self.scope_seed_hosts and not self._arg_domains:
            host = (urlsplit(request.url).hostname or "").lower()
            if host not in self.allowed_domains:
                self.allowed_domains.append(host)
        return request.replace(url=canonicalize_url(request.url), errback=self.on_error)

    def _on_closed(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # -- pages -----------------------------------------------------------------

    def _item(self, response: Response, error: str | None = None) -> PageItem:
        request = response.request
        assert request is not None
        return PageItem(
            url=request.meta.get("redirect_urls", [request.url])[0],
            final_url=response.url,
            status=response.status,
            fingerprint=self._fingerprint(request),
            depth=int(request.meta.get("depth", 0)),
            referrer=_referrer(request),
            fetched_at=time.time(),
            headers=_header_dict(response),
            body=response.body,
            encoding=getattr(response, "encoding", None),
            error=error,
            lease=request.meta.get(FRONTIER_LEASE),
            worker=self.worker,
            recrawl=request.meta.get(RECRAWL_RECORD),
            lastmod=request.meta.get(SITEMAP_LASTMOD),
        )

    def revisit_request(self, request: Request) -> Request:
        """Complete a revisit of the continuous crawl (extensions.extensions.recrawl):
        a failed revisit is recorded like any failed page."""
        return request.replace(url=canonicalize_url(request.url), errback=self.on_error)

    def _fingerprint(self, request: Request) -> str:
        fingerprinter = self.crawler.request_fingerprinter
        urls = request.meta.get("redirect_urls")
        if urls:  # the page is stored under the URL that was scheduled
            request = request.replace(url=urls[0])
        return fingerprinter.fingerprint(request).hex()

    async def parse(self, response: Response, **kwargs: Any) -> AsyncIterator[Any]:
        if response.status == 304:
            # A revisit's conditional GET: not modified, nothing to parse.
            yield self._item(response)
            return
        if not isinstance(response, HtmlResponse) and _looks_like_sitemap(response):
            # Sitemap: lines of robots.txt arrive as seeds
            # (extensions.downloadermiddlewares.robotstxt).
            # Up to 50 MB of XML: inflated off the loop (zlib lets go of the
            # GIL), parsed lazily, with a turn of the loop every LINK_CHUNK
            # entries, as for a page's links (tests/test_parse_stall.py).
            body = await asyncio.to_thread(gunzip_if_needed, response)
            for n, request in enumerate(self._sitemap_links(response, body), 1):
                if n % LINK_CHUNK == 0:
                    await asyncio.sleep(0)
                yield request
            yield self._item(response)
            return
        item = self._item(response)
        if isinstance(response, HtmlResponse):
            # One parse serves the links here and the pipeline's text and
            # fingerprints (the item carries it), and one rule decides
            # noindex/nofollow for both (pipelines.processing.robots_directives).
            page = await self._extract(item, response.url)
            item.extracted = page
            stats = self.crawler.stats
            assert stats is not None
            if page.links_unexamined:
                stats.inc_value("links/unexamined", page.links_unexamined)
            seen: set[str] = set()
            for n, link in enumerate(page.follow_links(), 1):
                if n % LINK_CHUNK == 0:
                    # Give the reactor a turn between chunks of links.
                    await asyncio.sleep(0)
                url = link.url
                if url in seen or not self._in_scope(url):
                    continue
                seen.add(url)
                skipped = self._skipped_extension(url)
                if skipped is not None:
                    stats.inc_value(f"links/skipped/{skipped}")
                    continue
                # DepthMiddleware sets meta["depth"]; RefererMiddleware the
                # Referer header. The web spider fetches (and stores) pages
                # under their canonical URL, its own choice.
                try:
                    request = Request(canonicalize_url(url), errback=self.on_error)
                except ValueError:
                    # A URL the extractor lets through and Scrapy refuses
                    # (``http://a.test:99999/``: port out of range): skip the
                    # link, not the page and its other links.
                    stats.inc_value("links/invalid")
                    continue
                yield request
        yield item

    async def _extract(self, item: PageItem, url: str) -> Extracted:
        """:func:`pipelines.processing.extract` of the page: in this process,
        or in the parse pool's child for a body of ``PARSE_OFFLOAD_BYTES`` or
        more. The parser and the main-text extractor are C code that holds
        the GIL (a thread would not help): a 4 MB page of 100,000 links held
        the reactor 0.3 to 0.6 s (``python -m bench.stall``)."""
        args = (item.body, url, item.headers, item.encoding, self.max_anchors)
        if not self.offload_bytes or len(item.body) < self.offload_bytes:
            return extract(*args)
        stats = self.crawler.stats
        assert stats is not None
        if self._pool is None:
            # spawn, not fork: this process runs threads (DNS, stores).
            self._pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"))
        try:
            page = await asyncio.wrap_future(self._pool.submit(extract, *args))
        except BrokenProcessPool:
            # The child died: killed, out of memory, or it could not start
            # (multiprocessing's spawn imports the main module again: a
            # script that starts a crawl without an ``if __name__ ==
            # "__main__"`` guard). Parse here from now on, rather than
            # starting child after child.
            stats.inc_value("parse/pool_broken")
            logger.warning(
                "The parse pool's process died; parsing every page in this "
                "process from now on (PARSE_OFFLOAD_BYTES ignored)"
            )
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool, self.offload_bytes = None, 0
            return extract(*args)
        stats.inc_value("parse/offloaded")
        return page

    def _skipped_extension(self, url: str) -> str | None:
        """The ``LINK_SKIP_EXTENSIONS`` entry ``url``'s path ends with, if any
        (images, media, archives...: never requested, as by Scrapy's
        LinkExtractor, but counted)."""
        path = urlsplit(url).path.lower()
        if not path.endswith(self.skip_suffixes):  # one C call for the usual miss
            return None
        return max((s for s in self.skip_suffixes if path.endswith(s)), key=len)[1:]

    def _in_scope(self, url: str) -> bool:
        if not self.allowed_domains:
            return True
        host = (urlsplit(url).hostname or "").lower()
        return any(host == d or host.endswith("." + d) for d in self.allowed_domains)

    def _sitemap_links(
        self, response: Response, body: bytes | None = None
    ) -> Iterator[Request]:
        """The in-scope requests of a sitemap (``body``: its XML, the
        response's own inflated if None)."""
        if body is None:
            body = gunzip_if_needed(response)
        for entry in self._sitemap_entries(body):
            loc = entry.get("loc")
            if not loc:
                continue
            try:
                url = response.urljoin(loc)
                if not self._in_scope(url):
                    continue
                lastmod = entry.get("lastmod") if self.recrawl else None
                request = Request(
                    canonicalize_url(url),
                    errback=self.on_error,
                    meta={SITEMAP_LASTMOD: lastmod} if lastmod else None,
                )
            except ValueError:
                # Not a URL (``http://[oops/``: urlsplit refuses it) or one
                # Scrapy refuses (a port out of range): skip the entry, not
                # the rest of the sitemap.
                assert self.crawler.stats is not None
                self.crawler.stats.inc_value("web/sitemap_invalid_loc")
                continue
            yield request

    def _sitemap_entries(self, body: bytes) -> Iterator[dict[str, Any]]:
        """The entries of a sitemap, until the XML is past recovery.

        Scrapy's :class:`~scrapy.utils.sitemap.Sitemap` parses lazily (lxml's
        ``iterparse``, in recover mode): a document with no root element at
        all (empty, binary, plain text) raises ``StopIteration`` when it is
        opened, hostile XML an ``lxml.etree.LxmlError`` then or while it is
        read. Those are counted (``web/sitemap_unparseable``) and end the
        sitemap; any other error is a bug and surfaces.
        """
        try:
            yield from Sitemap(body)
        except (LxmlError, StopIteration):
            stats = self.crawler.stats
            assert stats is not None
            stats.inc_value("web/sitemap_unparseable")

    def on_error(self, failure: Failure) -> Iterator[PageItem]:
        """The final-failure path of every request: the page is stored with
        its error. (A terminal failure's dead letter is the scheduler's,
        :mod:`extensions.core.scheduler.leases`, filed before this runs.)"""
        request: Request = failure.request  # type: ignore[attr-defined]
        value = failure.value
        if isinstance(value, HttpError):
            yield self._item(value.response, error=f"http {value.response.status}")
            return
        stats = self.crawler.stats
        assert stats is not None
        stats.inc_value(f"web/failed/{type(value).__name__}")
        yield PageItem(
            url=request.meta.get("redirect_urls", [request.url])[0],
            final_url=request.url,
            status=0,
            fingerprint=self._fingerprint(request),
            depth=int(request.meta.get("depth", 0)),
            referrer=_referrer(request),
            fetched_at=time.time(),
            error=f"{type(value).__name__}: {value}"[:500],
            lease=request.meta.get(FRONTIER_LEASE),
            worker=self.worker,
            recrawl=request.meta.get(RECRAWL_RECORD),
            # Refused before any request: the store keeps a stored page.
            filtered=value.reason if isinstance(value, TrapFiltered) else None,
        )


def _looks_like_sitemap(response: Response) -> bool:
    head = response.body[:512].lstrip()
    return (
        b"<urlset" in head
        or b"<sitemapindex" in head
        or response.url.endswith((".xml", ".xml.gz"))
    )


def gunzip_if_needed(response: Response) -> bytes:
    if response.body[:2] == b"\x1f\x8b":
        try:
            return gunzip(response.body, max_size=DOWNLOAD_MAXSIZE)
        except (OSError, EOFError, ValueError, zlib.error):
            # A truncated or corrupt archive, or one past DOWNLOAD_MAXSIZE
            # (Scrapy raises a ValueError subclass): no sitemap in it.
            return b""
    return response.body


def _referrer(request: Request) -> str | None:
    value = request.headers.get(b"Referer")
    return value.decode("latin-1") if value else None
