"""The ``web`` spider: crawl from the Redis seed list, follow links in scope.

Settings read: ``SEED_POLL_INTERVAL``, ``SEED_BATCH_SIZE``,
``MAX_IDLE_TIME_BEFORE_CLOSE``, ``WEB_ALLOWED_DOMAINS``,
``WEB_SCOPE_SEED_HOSTS``, ``WEBCRAWL_WORKER_ID``, ``LINK_SKIP_EXTENSIONS``,
``PARSE_OFFLOAD_BYTES`` (defaults in :mod:`webcrawl.defaults`),
``REDIS_RETRY_MAX``, ``RECRAWL_ENABLED``, ``MAX_OUTLINKS_PER_PAGE``,
``FRONTIER_HEARTBEAT_INTERVAL`` (:mod:`extensions.settings.defaults`) and Scrapy's
``URLLENGTH_LIMIT`` (the longest seed URL accepted; 0 keeps the 2083 cap,
since a seed is always bounded).

Spider arguments (``-a``): ``allowed_domains`` (comma list), ``max_depth``
(a whole number >= 1, sets ``DEPTH_LIMIT``; 0 is refused: leave it out for no
limit).

Seeds: ``redis-cli lpush web:start_urls URL`` (or a JSON object, see
:mod:`extensions.core.seeds`). ``start()`` takes what is in the list when the crawl
opens; afterwards a poll every ``SEED_POLL_INTERVAL`` seconds (one Redis call,
no busy loop) feeds new seeds to the engine while the crawl runs. A failing
poll backs off (doubling up to ``REDIS_RETRY_MAX``) and keeps trying: Redis
being away is logged once at WARNING, any other failure at ERROR with its
traceback each time.

No seed is lost when a worker dies (:mod:`extensions.core.seeds`, "Hand-over"): a
take moves the entries to this worker's taken list, each seed request carries
its entry (``meta["seed_taken"]``), and the entry leaves the list once the
scheduler has queued the request (signal
:data:`extensions.signals.seeds_settled`). A beat every
``FRONTIER_HEARTBEAT_INTERVAL`` (from the crawl's start, while ``start()``
may wait on the engine) keeps this worker alive to the others and gives back
the seeds of workers silent for three beats; the spider's close gives back
what it took and did not hand over.

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
import contextlib
import logging
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from lxml.etree import LxmlError
from redis.exceptions import ResponseError
from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider
from scrapy.http import HtmlResponse, Response
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.gz import gunzip
from scrapy.utils.sitemap import Sitemap

import extensions.settings.defaults
from extensions.connection import TRANSIENT_REDIS_ERRORS, new_async_client
from extensions.core.frontier.deadletters import dead_letter
from extensions.core.frontier.frontier import worker_id
from extensions.core.frontier.serialization import UnserializableRequest
from extensions.core.scheduler import DEAD_AFTER_HEARTBEATS, wake_engine
from extensions.core.seeds import SeedList, seed_url_limit
from extensions.meta import (
    FAILURE_META,
    FRONTIER_LEASE,
    RECRAWL_RECORD,
    SEED_TAKEN,
    SITEMAP_CHANGEFREQ,
)
from extensions.settings import config
from extensions.settings.config import SettingsError
from extensions.signals import request_dead, seeds_settled
from extensions.spidermiddlewares.traps import TrapFiltered
from extensions.utils.failures import classify_exception
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
    poll_interval: float
    seed_batch: int
    seed_url_limit: int
    poll_retry_max: float
    heartbeat: float
    max_idle: float
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
        spider.poll_interval = s.getfloat("SEED_POLL_INTERVAL")
        spider.seed_batch = s.getint("SEED_BATCH_SIZE")
        spider.seed_url_limit = seed_url_limit(s)
        spider.poll_retry_max = s.getfloat("REDIS_RETRY_MAX")
        spider.heartbeat = s.getfloat("FRONTIER_HEARTBEAT_INTERVAL")
        spider.max_idle = s.getfloat("MAX_IDLE_TIME_BEFORE_CLOSE")
        spider.offload_bytes = s.getint("PARSE_OFFLOAD_BYTES")
        spider._pool = None
        spider.worker = s.get("WEBCRAWL_WORKER_ID") or None
        max_outlinks = s.getint("MAX_OUTLINKS_PER_PAGE")
        spider.max_anchors = max_outlinks * ANCHORS_PER_OUTLINK or None
        spider.skip_suffixes = tuple(
            "." + ext.lower().lstrip(".") for ext in s.getlist("LINK_SKIP_EXTENSIONS")
        )
        # Sitemap <changefreq> hints travel with requests only when revisits
        # are on (extensions.extensions.recrawl): otherwise they would cost queue bytes.
        spider.recrawl = s.getbool("RECRAWL_ENABLED")
        crawler.signals.connect(spider._on_idle, signal=signals.spider_idle)
        crawler.signals.connect(spider._on_closed, signal=signals.spider_closed)
        crawler.signals.connect(spider._release_seeds, signal=signals.spider_closed)
        crawler.signals.connect(spider._on_seeds_settled, signal=seeds_settled)
        for sig in (signals.response_received, signals.item_scraped):
            crawler.signals.connect(spider._on_activity, signal=sig)
        return spider

    # -- seeds -----------------------------------------------------------------

    def _seed_list(self) -> SeedList:
        if getattr(self, "_seeds", None) is None:
            # A client of its own: the scheduler closes the shared one when
            # it closes, and the seeds are given back after that.
            self._seeds = SeedList(
                new_async_client(self.crawler.settings),
                self.name,
                self.seed_url_limit,
                taker=worker_id(),
                dead_after_ms=int(self.heartbeat * DEAD_AFTER_HEARTBEATS * 1000),
            )
        return self._seeds

    def _on_seeds_settled(self, entries: list[str], **_: Any) -> None:
        self._seed_list().settle(list(entries))

    def _given_back(self, n: int, broken: int) -> None:
        stats = self.crawler.stats
        assert stats is not None
        if n:
            stats.inc_value("seeds/given_back", n)
            logger.warning(
                "Put back on %s %s seeds that stopped workers had taken",
                self._seed_list().key,
                n,
            )
        if broken:
            logger.error(
                "%s taken-seed keys of stopped workers are not lists: left "
                "alone (see %s*)",
                broken,
                self._seed_list().taken_prefix,
            )

    async def _take_seeds(self) -> list[Request]:
        taken = await self._seed_list().take(self.seed_batch)
        self._given_back(taken.given_back, taken.broken)
        stats = self.crawler.stats
        assert stats is not None
        for raw, why in taken.invalid:
            stats.inc_value("seeds/invalid")
            logger.warning(
                "Invalid seed %r (%s): moved to %s",
                raw[:200],
                why,
                self._seed_list().invalid_key,
            )
        requests = []
        for seed, entry in taken.seeds:
            stats.inc_value("seeds/accepted")
            if self.scope_seed_hosts and not self._arg_domains:
                host = (urlsplit(seed.url).hostname or "").lower()
                if host not in self.allowed_domains:
                    self.allowed_domains.append(host)
            requests.append(
                Request(
                    seed.url,
                    priority=seed.priority,
                    meta={**seed.meta, SEED_TAKEN: entry},
                    errback=self.on_error,
                )
            )
        return requests

    async def start(self) -> AsyncIterator[Any]:
        self._idle_since: float | None = None
        self._poll_failing = False
        # Beat from the start: start() may wait on the engine for long with
        # seeds taken, and must not be taken for dead meanwhile.
        self._beater = asyncio.ensure_future(self._beat_seeds())
        self._beater.add_done_callback(_report_poller_death)
        while True:
            requests = await self._guarded_take()
            if requests is None:
                break  # logged; the poller takes over and keeps trying
            for request in requests:
                yield request
            if len(requests) < self.seed_batch:
                break
        self._poller = asyncio.ensure_future(self._poll_seeds())
        self._poller.add_done_callback(_report_poller_death)

    async def _guarded_take(self) -> list[Request] | None:
        """:meth:`_take_seeds`, or None when it failed. Redis being away is
        logged once (WARNING) until it answers again; anything else is a bug
        or a broken seed list (e.g. the key holds a string, not a list) and
        is logged at ERROR with its traceback on every failure. Either way
        the poller keeps running with back-off, so the worker never stops
        taking seeds silently, and still crawls its frontier meanwhile."""
        stats = self.crawler.stats
        assert stats is not None
        try:
            requests = await self._take_seeds()
        except TRANSIENT_REDIS_ERRORS as exc:
            stats.inc_value("seeds/poll_errors")
            if not self._poll_failing:
                logger.warning(
                    "Seed poll: Redis unreachable (%s); retrying with back-off",
                    type(exc).__name__,
                )
            self._poll_failing = True
            return None
        except Exception:
            stats.inc_value("seeds/poll_errors")
            logger.exception(
                "Seed poll of %s failed; retrying with back-off",
                self._seed_list().key,
            )
            self._poll_failing = True
            return None
        if self._poll_failing:
            logger.warning("Seed poll works again")
            self._poll_failing = False
        return requests

    async def _poll_seeds(self) -> None:
        retry_max = max(self.poll_retry_max, self.poll_interval)
        delay = self.poll_interval
        while True:
            await asyncio.sleep(delay)
            requests = await self._guarded_take()
            if requests is None:
                delay = min(retry_max, delay * 2)
                continue
            delay = self.poll_interval
            engine = self.crawler.engine
            for request in requests:
                assert engine is not None
                engine.crawl(request)
            if requests:
                self._on_activity()

    async def _beat_seeds(self) -> None:
        """Every heartbeat: be alive to the other takers, settle what the
        scheduler queued, give back dead takers' seeds. A failing beat is
        tried at the next one (the poll logs Redis trouble already)."""
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                taken = await self._seed_list().take(0)
            except TRANSIENT_REDIS_ERRORS:
                continue
            except ResponseError:
                # Redis refused the script (out of memory, a key of another
                # type): tried again at the next beat. Anything else is a bug:
                # it ends the task, and _report_poller_death logs it.
                logger.exception("Seed heartbeat failed; tried again")
                continue
            self._given_back(taken.given_back, taken.broken)

    async def _release_seeds(self) -> None:
        """Give back the seeds this worker took and did not hand over (the
        scheduler has closed: what it queued is settled by now). Should Redis
        fail here, the entries stay taken and a live worker (or the next
        run) puts them back after three heartbeats."""
        beater = getattr(self, "_beater", None)
        if beater is not None:
            beater.cancel()
            await asyncio.wait([beater], timeout=5)
        if getattr(self, "_seeds", None) is None:
            return
        seeds = self._seed_list()
        try:
            n = await seeds.release()
        except TRANSIENT_REDIS_ERRORS as exc:
            logger.warning(
                "Could not give back this worker's taken seeds (%s): a live "
                "worker puts them back after %s heartbeats",
                type(exc).__name__,
                DEAD_AFTER_HEARTBEATS,
            )
            return
        finally:
            await seeds.client.aclose()
        if n:
            logger.info("Gave back %s taken seeds to %s", n, self._seed_list().key)

    def _on_activity(self, *args: Any, **kwargs: Any) -> None:
        self._idle_since = None

    def _on_idle(self) -> None:
        now = time.monotonic()
        if getattr(self, "_idle_since", None) is None:
            self._idle_since = now
        idle_for = now - (self._idle_since or now)
        if self.max_idle <= 0:
            raise DontCloseSpider
        if idle_for < self.max_idle:
            # The engine asks again at its next 5 s heartbeat: without a
            # wake-up at the deadline a 6 s idle time closed after 10 to 15 s.
            timer = getattr(self, "_idle_timer", None)
            if timer is not None:
                timer.cancel()
            self._idle_timer = asyncio.get_running_loop().call_later(
                self.max_idle - idle_for, wake_engine, self.crawler
            )
            raise DontCloseSpider

    def _on_closed(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        timer = getattr(self, "_idle_timer", None)
        if timer is not None:
            timer.cancel()
        poller = getattr(self, "_poller", None)
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(Exception):
                poller.exception()

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
            changefreq=request.meta.get(SITEMAP_CHANGEFREQ),
        )

    def revisit_request(self, request: Request) -> Request:
        """Complete a revisit of the continuous crawl (extensions.extensions.recrawl):
        a failed revisit is recorded like any failed page."""
        return request.replace(errback=self.on_error)

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
                # Referer header.
                try:
                    request = Request(url, errback=self.on_error)
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
                freq = entry.get("changefreq") if self.recrawl else None
                request = Request(
                    url,
                    errback=self.on_error,
                    meta={SITEMAP_CHANGEFREQ: freq} if freq else None,
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
        its error, and a terminal failure is dead-lettered (an exception may
        name its class with a ``failure_reason`` attribute)."""
        request: Request = failure.request  # type: ignore[attr-defined]
        value = failure.value
        self._dead_letter(request, value)
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

    def _dead_letter(self, request: Request, value: BaseException | None) -> None:
        if isinstance(value, TrapFiltered) and not value.dead_letter:
            return  # a trap budget's refusal: a filtered record only
        record = request.meta.get(FAILURE_META) or {}
        status = None
        if isinstance(value, HttpError):
            status = value.response.status
            reason = record.get("reason") if record.get("terminal") else None
        else:
            reason = record.get("reason") if record.get("terminal") else None
            if reason is None and value is not None:
                reason = classify_exception(value)
        if reason is None:
            return  # a final answer (404) or a filter's refusal: stored only
        error = None if record else f"{type(value).__name__}: {value}"[:500]
        try:
            letter = dead_letter(request, self, reason, status=status, error=error)
        except UnserializableRequest:
            return
        self.crawler.signals.send_catch_log(request_dead, letter=letter)


def _report_poller_death(task: asyncio.Future[None]) -> None:
    """The seed poller and heartbeat never end but by cancellation: say so
    if one does (a bug)."""
    if not task.cancelled() and task.exception() is not None:
        logger.error(
            "A seed task stopped (the poller: no new seeds will be taken by "
            "this worker; the heartbeat: its taken seeds go to other workers)",
            exc_info=task.exception(),
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
