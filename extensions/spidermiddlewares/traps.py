"""Trap and abuse limits on the URLs a page yields, before they reach the frontier.

Settings read: ``TRAPS_ENABLED``, ``URLLENGTH_LIMIT`` (Scrapy's name and
default, 2083; this filter replaces Scrapy's ``UrlLengthMiddleware``),
``TRAP_MAX_PATH_DEPTH``, ``TRAP_MAX_SEGMENT_REPEATS``, ``HOST_MAX_PAGES``,
``TRAP_MAX_QUERY_VARIANTS``, ``MAX_OUTLINKS_PER_PAGE``,
``FRONTIER_PARTITIONS`` and ``FRONTIER_HEARTBEAT_INTERVAL`` (a host's own
``max_pages``, ``scrapy hosts set --max-pages``, read again once a heartbeat
old: :class:`~extensions.core.frontier.overrides.OverridesCache`), and through
:mod:`extensions.connection` ``REDIS_URL`` / ``WEBCRAWL_HOME``.

Why a spider middleware: the spider's output is where a URL first enters the
crawl, before the dupefilter and the frontier, so a trap URL never costs a
Bloom bit, a queue entry or a lease, and a refused request's record (the
request's errback, as for any final failure) joins the same item stream as
the page that linked it. Redirect targets do not pass here: their hops are
bounded by ``REDIRECT_MAX_TIMES`` and checked by the SSRF guard.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.exceptions import NotConfigured
from twisted.python.failure import Failure

from extensions import keys
from extensions.connection import async_client, retry_redis
from extensions.connection.scripts import run_pipelined, script
from extensions.core.frontier.deadletters import dead_letter
from extensions.core.frontier.overrides import HostOverrides, OverridesCache
from extensions.core.frontier.serialization import UnserializableRequest
from extensions.settings import config, defaults
from extensions.signals import request_dead
from extensions.utils.failures import TrapFiltered
from extensions.utils.hosts import host_key, hostname_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    import redis.asyncio as aredis
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

_YEAR = re.compile(r"^(19|20)\d\d([-_.]\d\d?){0,2}$")
_SMALL_NUMBER = re.compile(r"^\d\d?$")
# A session id or token in a path segment (see is_token): 16+ hex digits or
# 24+ letters and digits, a UUID, or base64url characters in short runs.
_TOKEN = re.compile(r"^([0-9a-fA-F]{16,}|[A-Za-z0-9]{24,})$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}(-?[0-9a-fA-F]{4}){3}-?[0-9a-fA-F]{12}$")
_BASE64URL = re.compile(r"^[A-Za-z0-9_-]+$")
# Runs of one kind of character: an acronym, a word (capitalized or not), a
# number. Words and numbers make long runs; random characters short ones.
_RUN = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Letters and digits a segment needs before its runs are judged, and the mean
# run length at or under which it counts as random: measured on random
# tokens (base62 and base64url of 12 to 22 characters: 1 to 3 % missed) and
# on 136,000 real path segments and file names (robots.txt rules of
# Protego's corpus, /usr/share, site-packages: 0.4 % taken, half of them ids,
# hashes or part numbers anyway).
TOKEN_MIN_CHARS = 10
TOKEN_MAX_MEAN_RUN = 3.0


def path_segments(path: str) -> list[str]:
    """>>> path_segments("/a//b/c/")
    ['a', 'b', 'c']
    """
    return [s for s in path.split("/") if s]


def max_repeats(segments: list[str]) -> int:
    """How often the most frequent segment occurs.

    >>> max_repeats(["a", "b", "a", "b", "a", "b"]), max_repeats(["2024", "01", "01"])
    (3, 2)
    >>> max_repeats([])
    0
    """
    return max(Counter(segments).values(), default=0)


def is_token(segment: str) -> bool:
    """Whether a path segment (less any ``.ext``) looks machine-made: a
    session id, a token or a hash rather than a word, a name or a number.

    >>> is_token("0123456789abcdef"), is_token("6fa459ea-ee8a-3ca4-894e-db77e160355e")
    (True, True)
    >>> [is_token(s) for s in ("w31uSs63WTNdpqbIUKqRPg", "a2T3xp839qJ85Ttr.html")]
    [True, True]
    >>> [is_token(s) for s in ("python3-doc", "NFLCommish07", "getElementById")]
    [False, False, False]
    >>> [is_token(s) for s in ("2024", "index.html", "my-post-2024-03-01")]
    [False, False, False]
    """
    stem = segment.split(".", 1)[0]
    if _UUID.match(stem) or (_TOKEN.match(stem) and any(c.isdigit() for c in stem)):
        return True
    if not _BASE64URL.match(stem):
        return False
    # "-" and "_" are read through: a slug's date (my-post-2024-03-01) is one
    # number, and base64url's two extra characters do not cut a token.
    joined = stem.replace("-", "").replace("_", "")
    runs = _RUN.findall(joined)
    chars = len(joined)
    kinds = (
        any(c.isdigit() for c in joined)
        + any(c.islower() for c in joined)
        + any(c.isupper() for c in joined)
    )
    return (
        chars >= TOKEN_MIN_CHARS
        and kinds >= 2
        and chars <= TOKEN_MAX_MEAN_RUN * len(runs)
    )


def path_template(path: str) -> str | None:
    """The path with its date parts and session-like tokens replaced, when it
    has any: a calendar yields one URL per day or month under one template, a
    session id in the path one URL per visit.

    >>> path_template("/calendar/2024/01"), path_template("/events/2024-03-01/")
    ('/calendar/{y}/{n}', '/events/{y}/')
    >>> path_template("/s/00000000000000000001/page.html")
    '/s/{id}/page.html'
    >>> path_template("/s/6fa459ea-ee8a-3ca4-894e-db77e160355e/x")
    '/s/{id}/x'
    >>> path_template("/shop;jsessionid=A1B2C3/cart")
    '/shop;{id}/cart'
    >>> path_template("/blog/2024/01/15/my-post") is None, path_template("/p/12")
    (True, None)
    """
    segments = path.split("/")
    out: list[str] = []
    dated = templated = False
    for seg in segments:
        if _YEAR.match(seg):
            out.append("{y}")
            dated = templated = True
        elif dated and _SMALL_NUMBER.match(seg) and out[-1] in ("{y}", "{n}"):
            out.append("{n}")
        elif ";" in seg:  # a path parameter: ;jsessionid=...
            out.append(seg.split(";", 1)[0] + ";{id}")
            templated = True
        elif is_token(seg):
            out.append("{id}")
            templated = True
        else:
            out.append(seg)
    if not templated:
        return None
    if dated:
        # A dated path with a slug after the date is an article, not a calendar.
        tail = out[out.index("{y}") :]
        if any(s and s not in ("{y}", "{n}", "{id}") for s in tail):
            return None
    return "/".join(out)


# KEYS[1] the host's admitted-URL HLL, KEYS[2] the path's variant HLL.
# ARGV[1] the URL, ARGV[2] HOST_MAX_PAGES (0: none), ARGV[3] the variant
# (query string or templated path, '' when the URL has neither), ARGV[4]
# TRAP_MAX_QUERY_VARIANTS (0: none).
# A budget that is full refuses without adding (HLL has no membership test, so
# a URL admitted earlier is refused too: the dupefilter would drop it anyway).
# Returns 0 admitted, 1 over the host budget, 2 over the variant budget.
ADMIT_SCRIPT = """
local host_cap = tonumber(ARGV[2])
local var_cap = tonumber(ARGV[4])
local check_var = ARGV[3] ~= '' and var_cap > 0
if host_cap > 0 and redis.call('PFCOUNT', KEYS[1]) >= host_cap then
  return 1
end
if check_var and redis.call('PFCOUNT', KEYS[2]) >= var_cap then
  return 2
end
if host_cap > 0 then redis.call('PFADD', KEYS[1], ARGV[1]) end
if check_var then redis.call('PFADD', KEYS[2], ARGV[3]) end
return 0
"""
BUDGET_REASONS = {1: "host_budget", 2: "query_variants"}


class TrapFilter:
    """Spider middleware (order 450, after Scrapy's offsite and depth
    middlewares have seen the output) that refuses trap URLs.

    Refused for good, each with its errback called with :class:`TrapFiltered`
    (the web spider records the request as a failure, reason in its error):
    ``url_too_long`` (``URLLENGTH_LIMIT``), ``path_too_deep``
    (``TRAP_MAX_PATH_DEPTH``), ``repeated_segments``
    (``TRAP_MAX_SEGMENT_REPEATS``).

    Fleet-wide budgets, counted in Redis (HyperLogLogs, so a URL linked from
    many pages counts once; about 1% error): ``host_budget`` (``HOST_MAX_PAGES``
    distinct URLs per host) and ``query_variants`` (``TRAP_MAX_QUERY_VARIANTS``
    distinct query strings per host and path, where a calendar's dated paths,
    ``/calendar/2024/01``, and session ids in the path, ``/s/<token>/x`` or
    ``;jsessionid=``, count as variants of one path: see
    :func:`path_template`). A budget refusal is counted, logged once per
    host or path, and goes to the request's errback like the others, with
    ``dead_letter=False``: the spider records it as a *filtered record* in
    the page store (disk, not Redis memory: a facet explosion can refuse
    millions of URLs, each at most once per linking page, so at most
    ``MAX_OUTLINKS_PER_PAGE`` per fetched page), which the store writes only
    where the page has no record: a URL admitted before the budget filled
    (a HyperLogLog cannot tell it apart) keeps its stored page.

    ``MAX_OUTLINKS_PER_PAGE``: requests of one response past the cap are
    dropped and counted (``traps/outlinks_dropped``), without records.

    Stats: ``traps/filtered/<reason>``, ``traps/outlinks_dropped``,
    ``traps/outlinks_capped_pages``. Order of the output is kept: requests
    still come out before the page item that follows them.
    """

    # Requests sent to Redis per round trip.
    BATCH = 500

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        config.require(s, defaults)
        if not s.getbool("TRAPS_ENABLED"):
            raise NotConfigured("TRAPS_ENABLED is False")
        self.crawler = crawler
        self.max_length = s.getint("URLLENGTH_LIMIT")
        self.max_depth = s.getint("TRAP_MAX_PATH_DEPTH")
        self.max_repeats = s.getint("TRAP_MAX_SEGMENT_REPEATS")
        self.host_max_pages = s.getint("HOST_MAX_PAGES")
        self.max_variants = s.getint("TRAP_MAX_QUERY_VARIANTS")
        self.max_outlinks = s.getint("MAX_OUTLINKS_PER_PAGE")
        self.partitions = s.getint("FRONTIER_PARTITIONS")
        self.heartbeat = s.getfloat("FRONTIER_HEARTBEAT_INTERVAL")
        self._client: aredis.Redis | None = None
        self._overrides: OverridesCache | None = None
        self._full_logged: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @property
    def client(self) -> aredis.Redis:
        if self._client is None:
            self._client = async_client(self.crawler)
        return self._client

    @property
    def prefix(self) -> str:
        return keys.crawl_prefix(self.crawler)

    async def host_caps(self) -> dict[str, int]:
        """Host name -> its own page budget (``scrapy hosts set --max-pages``),
        in ``HOST_MAX_PAGES``' place."""
        if self._overrides is None:
            self._overrides = OverridesCache(
                HostOverrides(self.client, self.prefix, self.partitions),
                self.heartbeat,
            )
        table = await self._overrides.table()
        return {h: c.max_pages for h, c in table.items() if c.max_pages is not None}

    def _count(self, reason: str) -> None:
        stats = self.crawler.stats
        assert stats is not None
        stats.inc_value(f"traps/filtered/{reason}")

    def check(self, url: str) -> TrapFiltered | None:
        """The refusal of ``url`` by the limits that need no Redis, or None.

        Public for tests and for other entry points (seeds) that want the
        same rules.
        """
        if self.max_length and len(url) > self.max_length:
            return TrapFiltered("url_too_long", f"{len(url)} > {self.max_length}")
        segments = path_segments(urlsplit(url).path)
        if self.max_depth and len(segments) > self.max_depth:
            return TrapFiltered(
                "path_too_deep", f"{len(segments)} segments > {self.max_depth}"
            )
        if (
            self.max_repeats
            and len(segments) > self.max_repeats  # else no segment can repeat more
            and max_repeats(segments) > self.max_repeats
        ):
            return TrapFiltered(
                "repeated_segments", f"a segment repeats > {self.max_repeats} times"
            )
        return None

    def _refuse(self, request: Request, exc: TrapFiltered) -> Iterable[Any]:
        """Count the refusal and return what the request's errback makes of it."""
        self._count(exc.reason)
        logger.debug("Trap filter refused %s: %s", request.url[:200], exc)
        if exc.dead_letter:
            error = f"{type(exc).__name__}: {exc}"[:500]
            try:
                letter = dead_letter(
                    request, self.crawler.spider, exc.reason, error=error
                )
            except UnserializableRequest:
                pass
            else:
                self.crawler.signals.send_catch_log(request_dead, letter=letter)
        if request.errback is None:
            return ()
        failure = Failure(exc)
        failure.request = request  # type: ignore[attr-defined]
        return request.errback(failure) or ()

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        pending: list[Request] = []
        followed = 0
        dropped = 0
        async for item in result:
            if not isinstance(item, Request):
                async for out in self._flush(pending):
                    yield out
                yield item
                continue
            refused = self.check(item.url)
            if refused is not None:
                for out in self._refuse(item, refused):
                    yield out
                continue
            if self.max_outlinks and followed >= self.max_outlinks:
                dropped += 1
                continue
            followed += 1
            pending.append(item)
            if len(pending) >= self.BATCH:
                async for out in self._flush(pending):
                    yield out
        async for out in self._flush(pending):
            yield out
        if dropped:
            stats = self.crawler.stats
            assert stats is not None
            stats.inc_value("traps/outlinks_dropped", dropped)
            stats.inc_value("traps/outlinks_capped_pages")
            logger.info(
                "%s links of %s dropped (MAX_OUTLINKS_PER_PAGE=%s)",
                dropped,
                response.url,
                self.max_outlinks,
            )

    async def _flush(self, pending: list[Request]) -> AsyncIterator[Any]:
        """Run ``pending`` through the Redis budgets and yield what passes."""
        if not pending:
            return
        batch = pending[:]
        pending.clear()
        caps = await self.host_caps()
        if not (self.host_max_pages or self.max_variants or caps):
            for request in batch:
                yield request
            return
        # A Redis outage holds the page's output back until Redis answers (as
        # the robots and lock middlewares wait): failing here would lose the
        # page item and its lease. Retrying is safe: PFADD is idempotent.
        verdicts = await retry_redis(lambda: self._admit(batch, caps), "trap budgets")
        for request, verdict in zip(batch, verdicts, strict=True):
            if not verdict:
                yield request
                continue
            reason = BUDGET_REASONS[int(verdict)]
            host = host_key(request.url)
            key = host if reason == "host_budget" else host + urlsplit(request.url).path
            refused = TrapFiltered(reason, f"{key} is full", dead_letter=False)
            for out in self._refuse(request, refused):
                yield out
            if key not in self._full_logged:
                self._full_logged.add(key)
                logger.info(
                    "Trap filter: %s is full (%s), further URLs refused",
                    key,
                    reason,
                )

    async def _admit(
        self, batch: list[Request], caps: dict[str, int] | None = None
    ) -> list[Any]:
        """One pipelined round trip: the budget script's verdict per request.

        A request with nothing to count (no host budget, and no query or
        templated path for the variant budget) is admitted here: the script
        would neither read nor write anything for it. On a web of plain
        paths that is every link, and no round trip at all.
        """
        verdicts: list[Any] = [0] * len(batch)
        calls: list[tuple[int, list[str], list[Any]]] = []
        for i, request in enumerate(batch):
            parts = urlsplit(request.url)
            template = path_template(parts.path)
            variant = (
                parts.path + ("?" + parts.query if parts.query else "")
                if template
                else parts.query
            )
            host = host_key(request.url)
            host_cap = (caps or {}).get(hostname_of(host), self.host_max_pages)
            if not host_cap and not (variant and self.max_variants):
                continue
            calls.append(
                (
                    i,
                    [
                        keys.trap_pages(self.prefix, host),
                        keys.trap_variants(self.prefix, host, template or parts.path),
                    ],
                    [request.url, host_cap, variant, self.max_variants],
                )
            )
        if not calls:
            return verdicts
        admit = script(self.client, ADMIT_SCRIPT)
        answers = await run_pipelined(self.client, [(admit, k, a) for _, k, a in calls])
        for (i, _, _), verdict in zip(calls, answers, strict=True):
            verdicts[i] = verdict
        return verdicts
