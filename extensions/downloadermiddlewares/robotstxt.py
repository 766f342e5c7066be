"""A robots.txt cache shared by the whole fleet (RFC 9309).

Settings read: ``ROBOTS_ENABLED``, ``ROBOTSTXT_OBEY`` (Scrapy's meaning:
True obeys robots.txt, here through the fleet's cache in place of Scrapy's
per-process middleware; False obeys none, said in one warning line),
``ROBOTSTXT_PARSER``,
``ROBOTSTXT_USER_AGENT``, ``USER_AGENT``, ``DOWNLOAD_DELAY``, ``ROBOTS_TTL``,
``ROBOTS_MAX_SIZE``, ``ROBOTS_MAX_REDIRECTS``, ``ROBOTS_FETCH_TIMEOUT``,
``ROBOTS_RETRY_INITIAL``, ``ROBOTS_RETRY_MAX``, ``ROBOTS_CRAWL_DELAY_MAX``,
``ROBOTS_SITEMAP_SEEDS`` (with ``REDIS_START_URLS_KEY``,
``REDIS_START_URLS_AS_SET``, ``REDIS_START_URLS_AS_ZSET``: the seed key the
sitemaps go to), ``ROBOTS_DOWN_AFTER``, ``ROBOTS_WAIT_MAX``,
``FRONTIER_HEARTBEAT_INTERVAL`` (the life of the fetch lock), ``SCHEDULER``,
``POLITENESS_MAX_DEFERRALS`` (only without the Redis frontier, see below),
``FRONTIER_PARTITIONS`` (where a host's record lives), and through
:mod:`extensions.connection` ``REDIS_URL``.

While a host's robots.txt is unreachable (5xx, 429, no connection) its
requests wait in the frontier, however long that lasts (RFC 9309 2.3.1.3:
disallow while unreachable): the host is parked until the next robots.txt
try, and each request goes back to Redis, never away. Two exceptions: a host
whose name does not resolve fails its page requests with the DNS error, and
a host whose robots.txt got no connection ``ROBOTS_DOWN_AFTER`` times in a
row (the server is down) fails them with the connection error; the failure
policy (:mod:`extensions.utils.failures`) then gives them up after its attempts, a
bounded total, not after hours of robots.txt retries. Without the Redis
frontier (Scrapy's memory scheduler has no parked hosts: a deferred request
would come straight back), a request is dropped after
``POLITENESS_MAX_DEFERRALS`` deferrals, as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured, StopDownload
from scrapy.http import Request
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.misc import build_from_crawler, load_object

from extensions import keys, meta
from extensions.connection import TRANSIENT_REDIS_ERRORS, async_client, retry_redis
from extensions.connection.locks import TokenLock, new_token
from extensions.connection.scripts import LUA_NOW_MS, script, server_now_ms
from extensions.core.frontier.hostrecord import HostRecords
from extensions.core.seeds import push_seeds, seed_source
from extensions.downloadermiddlewares import Deferral, deferred_copy
from extensions.downloadermiddlewares.politeness import HostParked
from extensions.meta import DELAY_META
from extensions.settings import config, defaults
from extensions.utils.failures import (
    DNS_ERRORS,
    DOWNLOAD_ERRORS,
    HostDown,
    HostUnresolvable,
)
from extensions.utils.hosts import host_key

if TYPE_CHECKING:
    import redis.asyncio as aredis
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.robotstxt import RobotParser

logger = logging.getLogger(__name__)

# Meta key of our own robots.txt requests: counts the bytes received so far.
ROBOTS_BYTES_META = "robots_bytes"

# Status stored for a robots.txt that could not be fetched at all (timeout,
# connection refused): treated like a 5xx.
UNREACHABLE = 0
# Status stored when the host's name does not resolve: unreachable too, and
# its page requests fail with the DNS error (see the module docstring).
UNRESOLVABLE = -1

# KEYS[1] the robots cache HASH.
# ARGV[1] status, ARGV[2] body, ARGV[3] TTL ms of a usable answer, ARGV[4] 1
# if this is a failure (5xx/429/unreachable) else 0, ARGV[5] first retry ms,
# ARGV[6] longest retry ms.
# Stores status, body, fetched_at and expires (epoch ms, Redis clock) and the
# consecutive failures in ``failures``; a failure expires after ARGV[5]
# doubled per failure in a row, capped by ARGV[6]. Returns {failures, TTL ms}.
STORE_SCRIPT = (
    LUA_NOW_MS
    + """
local now = now_ms()
local failures = 0
local ttl = tonumber(ARGV[3])
if ARGV[4] == '1' then
  failures = (tonumber(redis.call('HGET', KEYS[1], 'failures') or '0') or 0) + 1
  ttl = math.floor(math.min(tonumber(ARGV[6]),
    tonumber(ARGV[5]) * 2 ^ math.min(failures - 1, 30)))
end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'body', ARGV[2],
  'fetched_at', now, 'expires', now + ttl, 'failures', failures)
-- Outlive the entry so the next failure still finds its count.
redis.call('PEXPIRE', KEYS[1], math.max(ttl, tonumber(ARGV[6])) * 2)
return {failures, ttl}
"""
)


class Verdict(StrEnum):
    """What RFC 9309 makes of a robots.txt fetch, by its status."""

    #: 2xx: the file rules; parse it.
    PARSE = "parse"
    #: Unavailable (4xx, a redirect not followed): everything is allowed.
    ALLOW = "allow"
    #: Unreachable (5xx, 429, no answer): nothing is allowed; retry later.
    DISALLOW = "disallow"


def classify(status: int) -> Verdict:
    """RFC 9309's status classes.

    >>> [classify(s).value for s in (200, 206, 301, 404, 410)]
    ['parse', 'parse', 'allow', 'allow', 'allow']
    >>> [classify(s).value for s in (429, 500, 503, UNREACHABLE, UNRESOLVABLE)]
    ['disallow', 'disallow', 'disallow', 'disallow', 'disallow']
    """
    if 200 <= status < 300:
        return Verdict.PARSE
    # RFC 9309 2.3.1.4: 429 is in practice a server error (Google does so).
    if status == 429 or status >= 500 or status in (UNREACHABLE, UNRESOLVABLE):
        return Verdict.DISALLOW
    return Verdict.ALLOW


@dataclass(slots=True)
class _Attempt:
    """One worker's load of a host's robots.txt, across Redis errors: the
    fetch lock's token and, once fetched, the answer (status, body)."""

    token: str
    answer: tuple[int, bytes] | None = None


@dataclass(slots=True)
class RobotsEntry:
    """A parsed robots.txt of one host, valid until ``expires`` (monotonic)."""

    status: int
    parser: RobotParser | None
    expires: float
    retry_in: float = 0.0  # seconds until an unreachable robots.txt is retried
    failures: int = 0  # consecutive failed fetches (fleet-wide, from the cache)

    @property
    def verdict(self) -> Verdict:
        return classify(self.status)


def robots_delay(parser: Any, user_agent: str) -> float:
    """Seconds between fetches a robots.txt asks of ``user_agent``: its
    ``Crawl-delay`` or ``Request-rate`` (the larger), 0 when none.

    >>> from protego import Protego
    >>> rp = Protego.parse("User-agent: *\\nCrawl-delay: 2\\nRequest-rate: 1/5s")
    >>> robots_delay(rp, "webcrawl")
    5.0
    >>> robots_delay(Protego.parse("User-agent: *\\nDisallow:"), "webcrawl")
    0.0
    """
    delay = float(parser.crawl_delay(user_agent) or 0.0)
    rate = parser.request_rate(user_agent)
    if rate is not None and rate.requests:
        delay = max(delay, rate.seconds / rate.requests)
    return delay


class SharedRobotsTxtMiddleware:
    """Downloader middleware: obey robots.txt with one fetch per host per TTL
    for the whole fleet.

    Order: first (100, where Scrapy's ``RobotsTxtMiddleware`` sits, which must
    be off), before the lock middleware: the robots.txt request itself takes
    the host's lock like any other.

    The files come from the worker's :class:`RobotsCache`. With the Redis
    frontier, a request whose host's load has taken ``ROBOTS_WAIT_MAX`` goes
    back to the frontier for as long (``robotstxt/deferred_pending``) rather
    than hold a fetch slot while the file is fetched, here or by another
    worker.

    Per RFC 9309: 2xx is parsed (the first ``ROBOTS_MAX_SIZE`` bytes);
    redirects are followed up to ``ROBOTS_MAX_REDIRECTS`` (by Scrapy's
    ``RedirectMiddleware``), more count as unavailable; 4xx allows all; 5xx,
    429, timeouts and unreachable hosts disallow all for now: the host is
    parked until the retry (doubling from ``ROBOTS_RETRY_INITIAL`` to
    ``ROBOTS_RETRY_MAX``) and its requests go back to the frontier, not away.
    A disallowed URL is dropped (``robotstxt/forbidden``), never fetched.

    The fetching worker writes the host's ``delay`` (the
    ``Crawl-delay``/``Request-rate``, capped by ``ROBOTS_CRAWL_DELAY_MAX``;
    the spacing rule takes the larger of it and ``DOWNLOAD_DELAY``) to the
    host record and pushes the
    ``Sitemap:`` URLs within the spider's ``allowed_domains`` (all when it has
    none) onto the seed list; a robots.txt redirect out of that scope is not
    followed (the file is then unavailable).

    A larger file is cut at ``ROBOTS_MAX_SIZE`` bytes as they arrive
    (``StopDownload``) and that much is parsed (RFC 9309 2.5); only a file
    announced larger than ``DOWNLOAD_MAXSIZE`` (the bound of every download,
    decompression included) is unreachable.
    """

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        config.require(s, defaults)
        if not s.getbool("ROBOTS_ENABLED"):
            raise NotConfigured("ROBOTS_ENABLED is False")
        if not s.getbool("ROBOTSTXT_OBEY"):
            raise NotConfigured(
                "ROBOTSTXT_OBEY is False: robots.txt is NOT obeyed (set "
                "ROBOTSTXT_OBEY=True to obey it, through the fleet-wide cache)"
            )
        self.crawler = crawler
        self.cache = RobotsCache(crawler)
        # As Scrapy's middleware: ROBOTSTXT_USER_AGENT if set, else each
        # request's own User-Agent header, else USER_AGENT.
        self.robots_user_agent = s.get("ROBOTSTXT_USER_AGENT") or None
        self.max_deferrals = s.getint("POLITENESS_MAX_DEFERRALS")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_request(self, request: Request) -> Request | None:
        if ROBOTS_BYTES_META in request.meta and not self.cache.in_scope(request.url):
            # Our robots.txt fetch redirected out of the crawl's scope: not
            # followed (RFC 9309 then counts the file as unavailable).
            raise IgnoreRequest("robots.txt redirected out of scope")
        if request.meta.get("dont_obey_robotstxt") or not request.url.startswith(
            ("http://", "https://")
        ):
            return None
        stats = self.crawler.stats
        assert stats is not None
        entry = await self.cache.within(host_key(request))
        if entry is None:
            # Still being fetched, here or by another worker: wait in Redis,
            # not in a fetch slot that live hosts could use.
            stats.inc_value("robotstxt/deferred_pending")
            deferred = deferred_copy(request, Deferral.ROBOTS_PENDING, counted=False)
            deferred.meta[DELAY_META] = round(self.cache.wait_max * 1000)
            return deferred
        verdict = entry.verdict
        if verdict is Verdict.ALLOW or (
            entry.parser is None and verdict is Verdict.PARSE
        ):
            return None
        if verdict is Verdict.DISALLOW:
            if self.cache.down(entry.status, entry.failures):
                stats.inc_value("robotstxt/host_down")
                raise HostDown(
                    f"{host_key(request)} is down: {entry.failures} robots.txt "
                    "fetches in a row got no connection"
                )
            if entry.status == UNRESOLVABLE:
                stats.inc_value("robotstxt/unresolvable")
                raise HostUnresolvable(
                    f"{host_key(request)} does not resolve (robots.txt fetch)"
                )
            # Back to Redis, under the host parked until the next robots.txt
            # try: never dropped, however long it stays unreachable, nor
            # counted against POLITENESS_MAX_DEFERRALS (spent on robots.txt
            # waits, it made the request wait for its host's lock in a fetch
            # slot once the host answered).
            if self.cache.parks:
                stats.inc_value("robotstxt/deferred")
                return deferred_copy(request, Deferral.ROBOTS, counted=False)
            if int(request.meta.get(meta.POLITENESS_DEFERRALS, 0)) < self.max_deferrals:
                stats.inc_value("robotstxt/deferred")
                return deferred_copy(request, Deferral.ROBOTS)
            stats.inc_value("robotstxt/unreachable_dropped")
            raise IgnoreRequest("robots.txt unreachable (no frontier to wait in)")
        assert entry.parser is not None
        if not entry.parser.allowed(request.url, self._agent_of(request)):
            stats.inc_value("robotstxt/forbidden")
            logger.debug("Forbidden by robots.txt: %s", request)
            raise IgnoreRequest("Forbidden by robots.txt")
        return None

    def _agent_of(self, request: Request) -> str:
        """The user agent a request is matched as (see ``__init__``)."""
        if self.robots_user_agent:
            return str(self.robots_user_agent)
        header = request.headers.get(b"User-Agent")
        return header.decode("latin-1") if header else self.cache.user_agent


class RobotsCache:
    """The robots.txt files of one worker: from memory, the fleet's cache in
    Redis, or one fetch for the whole fleet.

    Keys: ``web:robots:<host>`` (HASH: ``status``, raw ``body``,
    ``fetched_at``, ``expires``, ``failures``) and ``web:robots:fetch:<host>``
    (a token lock of :mod:`extensions.connection.locks`, so one worker fetches while the
    others poll the cache). The lock lives one ``FRONTIER_HEARTBEAT_INTERVAL``
    and its worker renews it every third of that while it fetches and
    records the file: a worker killed mid-fetch holds the host for at most a
    heartbeat. Each worker loads a host's entry once (a task its requests
    share) and keeps parsed entries in memory until the entry's expiry; a
    parser object never goes to Redis.

    The fetching worker records the answer (:meth:`record`): RFC 9309's
    status classes, the host's delay in its record, its sitemaps on the seed
    list, and a park of the host while the file is unreachable.
    """

    DOWNLOAD_PRIORITY = 1000

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.partitions = s.getint("FRONTIER_PARTITIONS")
        # The agent whose Crawl-delay is the host's (the middleware matches
        # each request as its own User-Agent header when this is not set).
        self.user_agent = str(
            s.get("ROBOTSTXT_USER_AGENT")
            or s.get("USER_AGENT")
            or s.get("WEBCRAWL_USER_AGENT")
        )
        self.ttl = s.getfloat("ROBOTS_TTL")
        self.max_size = s.getint("ROBOTS_MAX_SIZE")
        self.max_redirects = s.getint("ROBOTS_MAX_REDIRECTS")
        self.fetch_timeout = s.getfloat("ROBOTS_FETCH_TIMEOUT")
        self.retry_initial = s.getfloat("ROBOTS_RETRY_INITIAL")
        self.retry_max = s.getfloat("ROBOTS_RETRY_MAX")
        self.delay_max = s.getfloat("ROBOTS_CRAWL_DELAY_MAX")
        self.sitemap_seeds = s.getbool("ROBOTS_SITEMAP_SEEDS")
        self.down_after = s.getint("ROBOTS_DOWN_AFTER")
        self.wait_max = s.getfloat("ROBOTS_WAIT_MAX")
        # The fetch lock lives one heartbeat unless its holder renews it: a
        # worker that dies holding it (SIGKILL) stalls the host that long.
        self.lock_ms = round(s.getfloat("FRONTIER_HEARTBEAT_INTERVAL") * 1000)
        # The Redis frontier parks the host: a deferred request waits there
        # (a scheduler says so with its ``parks_hosts`` class attribute).
        self.parks = bool(getattr(load_object(s["SCHEDULER"]), "parks_hosts", False))
        self.download_delay = s.getfloat("DOWNLOAD_DELAY")
        self._parserimpl = load_object(s.get("ROBOTSTXT_PARSER"))
        self._entries: dict[str, RobotsEntry] = {}
        self._loads: dict[str, asyncio.Task[RobotsEntry]] = {}
        self._load_started: dict[str, float] = {}  # monotonic
        self._capped_logged: set[str] = set()
        self._client: aredis.Redis | None = None
        crawler.signals.connect(self._on_bytes, signal=signals.bytes_received)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    @property
    def prefix(self) -> str:
        return keys.crawl_prefix(self.crawler)

    @property
    def client(self) -> aredis.Redis:
        if self._client is None:
            self._client = async_client(self.crawler)
        return self._client

    @property
    def records(self) -> HostRecords:
        return HostRecords(self.client, self.prefix, self.partitions)

    @property
    def fetch_lock(self) -> TokenLock:
        return TokenLock(self.client)

    # -- the entry of a host ------------------------------------------------

    async def entry(self, hostkey: str) -> RobotsEntry:
        """The host's robots.txt, from memory, Redis or one fetch."""
        found = self._fresh(hostkey)
        if found is not None:
            return found
        return await asyncio.shield(self._loading(hostkey))

    async def within(self, hostkey: str) -> RobotsEntry | None:
        """:meth:`entry`, or None if it is not known within
        ``ROBOTS_WAIT_MAX`` (only with the Redis frontier to defer to)."""
        found = self._fresh(hostkey)
        if found is not None:
            return found
        load = self._loading(hostkey)
        if not self.parks:
            return await asyncio.shield(load)
        # The bound is the load's, not each request's: once it has taken
        # ROBOTS_WAIT_MAX, the host's next requests go back at once.
        left = self.wait_max - (time.monotonic() - self._load_started[hostkey])
        if left <= 0 and not load.done():
            return None
        # asyncio.wait neither cancels the load on a timeout nor raises.
        done, _ = await asyncio.wait({load}, timeout=max(left, 0.0))
        return load.result() if done else None

    def _fresh(self, hostkey: str) -> RobotsEntry | None:
        found = self._entries.get(hostkey)
        if found is not None and found.expires > time.monotonic():
            return found
        return None

    def _loading(self, hostkey: str) -> asyncio.Task[RobotsEntry]:
        """The load of the host's entry: one task per host and worker, which
        goes on when the requests waiting for it give up."""
        load = self._loads.get(hostkey)
        if load is None:
            load = asyncio.ensure_future(self._load_entry(hostkey))
            self._loads[hostkey] = load
            self._load_started[hostkey] = time.monotonic()
            load.add_done_callback(lambda done: self._loaded(hostkey, done))
        return load

    async def _load_entry(self, hostkey: str) -> RobotsEntry:
        # One token and one answer for every try: a try that a Redis error
        # ends takes its own lock back and records the answer it has.
        attempt = _Attempt(new_token())
        return await retry_redis(lambda: self._load(hostkey, attempt), "robots.txt")

    def _loaded(self, hostkey: str, load: asyncio.Task[RobotsEntry]) -> None:
        if self._loads.get(hostkey) is load:
            del self._loads[hostkey]
            del self._load_started[hostkey]
        # An error (a bug) reaches the requests that wait for the load; one
        # that went back to the frontier meets it on its next load.
        if not load.cancelled() and load.exception() is None:
            self._entries[hostkey] = load.result()

    def _closed(self) -> None:
        for load in list(self._loads.values()):
            load.cancel()

    async def _cached(self, hostkey: str) -> RobotsEntry | None:
        raw = await self.client.hgetall(keys.robots(self.prefix, hostkey))
        if not raw or b"status" not in raw:
            return None
        now_ms = await server_now_ms(self.client, keys.robots(self.prefix, hostkey))
        expires_ms = int(raw.get(b"expires", b"0"))
        body = raw.get(b"body", b"")
        body = body.encode() if isinstance(body, str) else bytes(body)
        if expires_ms <= now_ms:
            return None
        return self.parse(
            int(raw[b"status"]),
            body,
            (expires_ms - now_ms) / 1000,
            int(raw.get(b"failures", b"0") or 0),
        )

    def parse(
        self, status: int, body: bytes, ttl: float, failures: int = 0
    ) -> RobotsEntry:
        parser = None
        if classify(status) is Verdict.PARSE:
            parser = build_from_crawler(
                self._parserimpl, self.crawler, body[: self.max_size]
            )
            # Scrapy's signal, sent as its own middleware sends it: once per
            # robots.txt this worker parses (the fetched file or the cache's).
            self.crawler.signals.send_catch_log(
                signal=signals.robots_parsed, robotparser=parser, request=None
            )
        return RobotsEntry(status, parser, time.monotonic() + ttl, ttl, failures)

    async def _load(self, hostkey: str, attempt: _Attempt) -> RobotsEntry:
        stats = self.crawler.stats
        assert stats is not None
        lock_key = keys.robots_fetch_lock(self.prefix, hostkey)
        poll = 0.05
        while True:
            if attempt.answer is None:
                cached = await self._cached(hostkey)
                if cached is not None:
                    stats.inc_value("robotstxt/cache_hit")
                    return cached
            if await self.fetch_lock.acquire(lock_key, attempt.token, self.lock_ms):
                keeper = asyncio.ensure_future(self._keep(lock_key, attempt.token))
                try:
                    if attempt.answer is None:
                        # Check again under the lock: another worker may have
                        # stored the file between our cache miss and our SET NX.
                        cached = await self._cached(hostkey)
                        if cached is not None:
                            stats.inc_value("robotstxt/cache_hit")
                            return cached
                        attempt.answer = await self._fetch(hostkey)
                    return await self.record(hostkey, *attempt.answer)
                finally:
                    keeper.cancel()
                    await self._release(lock_key, attempt.token)
            # Another worker is fetching (our own lock, taken before a Redis
            # error, lapsed meanwhile: its answer will do): poll the cache.
            # A holder that died leaves a lock that lapses within a heartbeat.
            attempt.answer = None
            stats.inc_value("robotstxt/fetch_waits")
            await asyncio.sleep(poll)
            poll = min(poll * 2, 1.0)

    async def _keep(self, lock_key: str, token: str) -> None:
        """Renew the fetch lock every third of its life while this worker
        fetches and records (a fetch may take ROBOTS_FETCH_TIMEOUT per hop)."""
        while True:
            await asyncio.sleep(self.lock_ms / 3000)
            try:
                if not await self.fetch_lock.extend(lock_key, token, self.lock_ms):
                    return  # lapsed (a stalled loop, an outage): fetched twice
            except TRANSIENT_REDIS_ERRORS as exc:
                logger.debug("robots.txt lock %s not renewed: %s", lock_key, exc)

    async def _release(self, lock_key: str, token: str) -> None:
        """Release the fetch lock if Redis answers; otherwise it lapses by
        itself, and a retry with ``token`` takes it back meanwhile."""
        try:
            await self.fetch_lock.release(lock_key, token)
        except TRANSIENT_REDIS_ERRORS as exc:
            logger.debug("robots.txt lock %s not released: %s", lock_key, exc)

    async def _fetch(self, hostkey: str) -> tuple[int, bytes]:
        stats = self.crawler.stats
        engine = self.crawler.engine
        assert stats is not None and engine is not None
        request = Request(
            f"{hostkey}/robots.txt",
            priority=self.DOWNLOAD_PRIORITY,
            dont_filter=True,
            callback=NO_CALLBACK,
            meta={
                "dont_obey_robotstxt": True,
                meta.ROBOTS_FETCH: True,
                "redirect_ttl": self.max_redirects,
                "download_timeout": self.fetch_timeout,
                # Read the first ROBOTS_MAX_SIZE bytes of a larger file and
                # stop (_on_bytes): RFC 9309 asks to parse at least 500 KiB.
                ROBOTS_BYTES_META: 0,
                "download_warnsize": 0,
                "dont_retry": True,
                # A parked host fails this fetch (HostParked), never defers it.
                meta.DONT_DEFER: True,
            },
        )
        stats.inc_value("robotstxt/request_count")
        try:
            response: Response = await engine.download_async(request)
            status, body = response.status, response.body
        except HostParked as exc:
            logger.debug("robots.txt of %s not fetched: %s", hostkey, exc)
            status, body = UNREACHABLE, b""
        except IgnoreRequest as exc:
            # Too many redirects (or a redirect we may not follow): RFC 9309
            # lets us treat the file as unavailable.
            logger.debug("robots.txt of %s ignored: %s", hostkey, exc)
            status, body = 404, b""
        except DOWNLOAD_ERRORS as exc:
            # What a download fails with; anything else is a bug and surfaces
            # (it used to be taken for an unreachable file, parking the host).
            logger.info("robots.txt of %s unreachable: %s", hostkey, exc)
            stats.inc_value(f"robotstxt/exception_count/{type(exc).__name__}")
            dns = isinstance(exc, DNS_ERRORS)
            status, body = (UNRESOLVABLE if dns else UNREACHABLE), b""
        return status, body

    async def record(self, hostkey: str, status: int, body: bytes) -> RobotsEntry:
        """What the fetching worker does with the answer to a robots.txt
        request (``status`` :data:`UNREACHABLE`: none came): RFC 9309's status
        classes, the ``ROBOTS_MAX_SIZE`` cut, the host's delay and sitemaps,
        the raw file in the shared cache, and a park of the host when the file
        is unreachable. Returns the host's entry, as :meth:`entry` would."""
        stats = self.crawler.stats
        assert stats is not None
        if 300 <= status < 400:
            status, body = 404, b""  # a redirect not followed: unavailable
        stats.inc_value(f"robotstxt/response_status_count/{status}")
        body = body[: self.max_size]
        failure = classify(status) is Verdict.DISALLOW
        if failure:
            stats.inc_value("robotstxt/failures")
        early = self.parse(status, body, 0.0)
        if early.parser is not None:
            # Write the host's delay before the file is visible in the cache:
            # a worker that finds the cached file must also find the delay.
            await self._learn(hostkey, early.parser)
        failures, ttl_ms = await script(self.client, STORE_SCRIPT)(
            keys=[keys.robots(self.prefix, hostkey)],
            args=[
                status,
                body,
                round(self.ttl * 1000),
                int(failure),
                round(self.retry_initial * 1000),
                round(self.retry_max * 1000),
            ],
        )
        ttl = int(ttl_ms) / 1000
        if failure:
            logger.info(
                "robots.txt of %s failed (status %s, %d in a row): host parked, "
                "retry in %.0f s",
                hostkey, status or "unreachable", int(failures), ttl,
            )  # fmt: skip
            if status != UNRESOLVABLE and not self.down(status, int(failures)):
                # Not for a name that does not resolve, nor a host that is
                # down: their requests must reach the failure policy (which
                # gives them up after its attempts), not wait behind a
                # doubling park one by one.
                await self.records.park(hostkey, int(ttl_ms))
        # The file parsed above, valid for its TTL from now (parsed once).
        return RobotsEntry(
            status, early.parser, time.monotonic() + ttl, ttl, int(failures)
        )

    def down(self, status: int, failures: int) -> bool:
        """A host whose robots.txt fetch failed without a connection
        ``ROBOTS_DOWN_AFTER`` times in a row is down."""
        return status == UNREACHABLE and 0 < self.down_after <= failures

    def _on_bytes(self, data: bytes, request: Request, **_: Any) -> None:
        """Stop a robots.txt download once ``ROBOTS_MAX_SIZE`` bytes arrived;
        what arrived is the response (``fail=False``)."""
        got = request.meta.get(ROBOTS_BYTES_META)
        if got is None:
            return
        got += len(data)
        request.meta[ROBOTS_BYTES_META] = got
        if got >= self.max_size:
            raise StopDownload(fail=False)

    def in_scope(self, url: str) -> bool:
        """Whether ``url``'s host is in the spider's ``allowed_domains`` (by
        host name, port ignored, as the web spider scopes its links)."""
        domains = getattr(self.crawler.spider, "allowed_domains", None)
        if not domains:
            return True
        host = (urlsplit(url).hostname or "").lower()
        return any(host == d or host.endswith("." + d) for d in domains)

    async def _learn(self, hostkey: str, parser: RobotParser) -> None:
        """Write the host's delay and hand its sitemaps to the frontier."""
        rp = getattr(parser, "rp", None)
        if rp is None or not hasattr(rp, "request_rate"):
            wanted = float(parser.crawl_delay(self.user_agent) or 0.0)
        else:
            wanted = robots_delay(rp, self.user_agent)
        delay = wanted
        if delay > self.delay_max:
            if hostkey not in self._capped_logged:
                self._capped_logged.add(hostkey)
                logger.info(
                    "robots.txt of %s asks for a %.1f s delay: capped to %.1f s "
                    "(ROBOTS_CRAWL_DELAY_MAX)",
                    hostkey, delay, self.delay_max,
                )  # fmt: skip
            stats = self.crawler.stats
            assert stats is not None
            stats.inc_value("robotstxt/crawl_delay_capped")
            delay = self.delay_max
        if delay > 0:
            # The record keeps the robots.txt delay alone: the spacing rule
            # takes the larger of it and the host's own delay (DOWNLOAD_DELAY,
            # or an override, which may be lower).
            await self.records.set_delay(hostkey, round(delay * 1000))
            spacing = round(max(delay, self.download_delay) * 1000)
            # The robots.txt fetch itself was a request to the host, spaced by
            # the delay known before it: the next one must wait the new delay.
            await self.records.park(hostkey, spacing)
        else:
            await self.records.set_delay(hostkey, None)
        if self.sitemap_seeds and rp is not None:
            found = list(getattr(rp, "sitemaps", ()))
            # A sitemap seeds the crawl: it obeys the crawl's scope like a link.
            sitemaps = [url for url in found if self.in_scope(url)]
            if len(sitemaps) < len(found):
                stats = self.crawler.stats
                assert stats is not None
                stats.inc_value(
                    "robotstxt/sitemaps_out_of_scope", len(found) - len(sitemaps)
                )
            if sitemaps:
                # Onto the spider's own seed key, of its type (a SET, a ZSET).
                source = seed_source(self.crawler.spider, self.crawler.settings)
                await push_seeds(self.client, self.prefix, sitemaps, source)
                stats = self.crawler.stats
                assert stats is not None
                stats.inc_value("robotstxt/sitemaps", len(sitemaps))
