"""The per-host record: its fields, the scripts that write them, the host keys.

This module owns the host record: it names its fields, holds the Lua helpers
every script includes to read them (:data:`LUA_RECORD`: the Redis clock, the
record, the spacing rule, the park rule) and the scripts that write them
(:class:`HostRecords`). The frontier (:mod:`extensions.frontier`) queues
requests by :func:`host_key` and keeps one record per host in Redis,
``FrontierKeys(prefix, partition, partitions).host(hostkey)`` in its partition
(:func:`host_partition`), a HASH of integers (times are epoch
ms of the Redis clock, durations ms):

``next``
    The frontier's next allowed fetch: written by its lease script only.
``delay``
    The host's minimum delay: max(``DOWNLOAD_DELAY``, the capped robots.txt
    ``Crawl-delay``/``Request-rate``), written by the robots middleware
    (absent: ``DOWNLOAD_DELAY``).
``backoff``, ``backoff_at``
    The current back-off delay and when it was last raised; a back-off older
    than ``BACKOFF_QUIET_PERIOD`` is forgiven by every reader.
``park``
    Until when the host must not be fetched (an open circuit breaker, a
    ``Retry-After`` deadline, an unreachable robots.txt); only ever moved
    later.
``fails``
    Consecutive connection failures (the circuit breaker's count).
``breaker``
    How often the circuit breaker opened in a row (its cool-down doubles
    each time); cleared with ``fails`` by a response.
``failing_since``
    When the current run of connection failures began (its first failure);
    cleared with ``fails`` by a response.
``down``
    Until when the host is judged down (``HOST_DOWN_AFTER``, see
    :data:`extensions.dlq.HOST_DOWN_LUA`): its requests go to the
    dead-letter queue as ``host_down`` instead of its queue (the frontier's
    commit); cleared by a response.
``down_reason``
    Why ``down`` was set, the one field that is not a number: ``host_down``,
    or ``dns`` when the host's name has not resolved for ``DNS_DOWN_AFTER``
    (its requests are then dead-lettered as ``dns``); cleared with ``down``.
``spilled``
    Requests of the host in the spill store (``FRONTIER_SPILL_STORE``), and
    on their way there: raised by the frontier's commit script for each
    request it refuses, lowered by the refill script of
    :mod:`extensions.spill` as it moves them back (and by recovery).
``spilling``
    Of those, the ones a worker has not yet confirmed written to the spill
    store: a refill starts only when it is 0 (all spilled so far are in the
    store it reads).
``spill_low``
    The lowest score spilled since a refill started (cleared when one
    starts): that refill moves back only requests scored below it, so it
    never moves a later request ahead of an earlier one still on its way.

The effective spacing of a host is max(``delay`` or the default, ``backoff``
unless forgiven): the ``spacing`` helper of :data:`LUA_RECORD`, used by the
frontier's lease script and the lock script of :mod:`extensions.politeness`.

Settings read: none (the middlewares pass their settings in).
"""

from __future__ import annotations

import ipaddress
import logging
import random
from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import mmh3
from scrapy.exceptions import CannotResolveHostError, DownloadConnectionRefusedError
from scrapy.http import Request

from extensions import meta
from extensions.keys import FrontierKeys
from extensions.scripts import LUA_NOW_MS, script

if TYPE_CHECKING:
    import redis.asyncio as aredis

logger = logging.getLogger(__name__)

DEFAULT_PORTS = {"http": 80, "https": 443, "ftp": 21, "ws": 80, "wss": 443}


class HostUnresolvable(CannotResolveHostError):
    """A page request failed without a connection: its host's name did not
    resolve when its robots.txt was fetched (the robots middleware raises
    it; the failure policy retries it like any DNS failure, and the circuit
    breaker does not count it: the robots.txt fetch was counted)."""


class HostDown(DownloadConnectionRefusedError):
    """A page request failed without a connection: its host's robots.txt got
    no connection ``ROBOTS_DOWN_AFTER`` times in a row (the robots
    middleware raises it; the failure policy treats it as a connection
    failure; the circuit breaker does not count it again, but the host-down
    verdict of ``HOST_DOWN_AFTER`` is judged on it)."""


# Values of POLITENESS_KEY.
KEY_MODES = ("host", "domain", "ip")


def host_key(url_or_request: str | Request) -> str:
    """The frontier's dispatch key of a URL: ``scheme://host:port``, lowercased,
    the default port made explicit: RFC 9309's identity of a robots.txt (not
    Scrapy's slot key, which is the bare hostname; see :mod:`extensions.keys`).

    >>> host_key("http://A.Test/x?y=1")
    'http://a.test:80'
    >>> host_key("https://a.test:8443/")
    'https://a.test:8443'
    >>> host_key("HTTPS://user:pw@Example.COM")
    'https://example.com:443'
    >>> host_key("http://[::1]:8080/p")
    'http://[::1]:8080'
    >>> host_key(Request("http://127.0.0.1:5000/robots.txt"))
    'http://127.0.0.1:5000'
    """
    url = url_or_request.url if isinstance(url_or_request, Request) else url_or_request
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:  # a port out of range: keep the URL's own text
        port = None
    if port is None:
        port = DEFAULT_PORTS.get(scheme, 0)
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


@lru_cache(maxsize=65_536)
def host_partition(hostkey: str, partitions: int) -> int:
    """The frontier partition of a host (``FRONTIER_PARTITIONS``): MurmurHash3
    (32-bit, seed 0) of its :func:`host_key` modulo the partition count, the
    same on every worker and every run (Python's ``hash`` is salted per
    process). Everything keyed by host lives in that partition: its queue,
    its record, its download lock.

    >>> host_partition("http://a.test:80", 1)
    0
    >>> [host_partition(f"http://h{i}.test:80", 4) for i in range(8)]
    [2, 1, 0, 0, 1, 0, 3, 3]
    """
    if partitions <= 1:
        return 0
    return mmh3.hash(hostkey, 0, signed=False) % partitions


def hostname_of(key: str) -> str:
    """The bare host name of a :func:`host_key`.

    >>> hostname_of("http://a.test:80")
    'a.test'
    >>> hostname_of("http://[::1]:8080")
    '::1'
    """
    return urlsplit(key).hostname or ""


@lru_cache(maxsize=1)
def _extractor() -> object:
    import tldextract

    # The snapshot of the public suffix list bundled with tldextract: no
    # network fetch at run time.
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def registered_domain(hostname: str) -> str:
    """The registrable domain of a host name (public suffix + one label); IP
    addresses and names without a known suffix are returned as they are.

    >>> registered_domain("www.bbc.co.uk")
    'bbc.co.uk'
    >>> registered_domain("a.b.example.com")
    'example.com'
    >>> registered_domain("127.0.0.1")
    '127.0.0.1'
    >>> registered_domain("localhost")
    'localhost'
    """
    hostname = hostname.lower().strip("[]")
    try:
        ipaddress.ip_address(hostname)
        return hostname
    except ValueError:
        pass
    ext = _extractor()(hostname)  # type: ignore[operator]
    return str(ext.top_domain_under_public_suffix or hostname)


# The fields of the host record (see the module docstring).
NEXT = "next"
DELAY = "delay"
BACKOFF = "backoff"
BACKOFF_AT = "backoff_at"
PARK = "park"
FAILS = "fails"
BREAKER = "breaker"
FAILING_SINCE = "failing_since"
DOWN = "down"
FIELDS = (NEXT, DELAY, BACKOFF, BACKOFF_AT, PARK, FAILS, BREAKER, FAILING_SINCE, DOWN)
# The spill counters (extensions.spill): not read by host_record.
SPILLED = "spilled"
SPILLING = "spilling"
SPILL_LOW = "spill_low"

# The Lua helpers of every script that reads or writes the host record: the
# Redis clock, the record as numbers, the spacing rule and the park rule.
LUA_RECORD = (
    LUA_NOW_MS
    + """
-- The host record at `hkey` as numbers: absent fields are 0, but `delay` is
-- nil when absent (the default delay applies). `call` (default redis.call)
-- runs the read: the frontier passes its `on_key`, which sets a key of the
-- wrong type aside rather than fail.
local function host_record(hkey, call)
  local r = (call or redis.call)('HMGET', hkey, 'next', 'delay', 'backoff',
                                 'backoff_at', 'park', 'fails', 'breaker',
                                 'failing_since', 'down')
  return {next = tonumber(r[1]) or 0, delay = tonumber(r[2]),
          backoff = tonumber(r[3]) or 0, backoff_at = tonumber(r[4]) or 0,
          park = tonumber(r[5]) or 0, fails = tonumber(r[6]) or 0,
          breaker = tonumber(r[7]) or 0, failing_since = tonumber(r[8]) or 0,
          down = tonumber(r[9]) or 0}
end
-- The back-off still in force at `now`: one raised longer than `quiet` ms
-- ago is forgiven.
local function effective_backoff(rec, now, quiet)
  if rec.backoff > 0 and now - rec.backoff_at < quiet then return rec.backoff end
  return 0
end
-- The host's spacing: max(delay or the default, the back-off in force).
local function spacing(rec, default_ms, now, quiet)
  return math.max(rec.delay or default_ms, effective_backoff(rec, now, quiet))
end
-- Move the park deadline to `deadline` if that is later (never earlier);
-- returns the deadline in force.
local function park_until(hkey, rec, deadline)
  if deadline > rec.park then
    redis.call('HSET', hkey, 'park', deadline)
    rec.park = deadline
  end
  return rec.park
end
"""
)

# KEYS[1] the host record. ARGV[1] ms to park the host from now.
# Moves ``park`` later, never earlier. Returns the park deadline (epoch ms).
PARK_SCRIPT = (
    LUA_RECORD
    + """
local rec = host_record(KEYS[1])
return park_until(KEYS[1], rec, now_ms() + tonumber(ARGV[1]))
"""
)

# KEYS[1] the host record.
# ARGV[1] initial back-off ms, ARGV[2] cap ms, ARGV[3] quiet period ms,
# ARGV[4] jitter factor (1 +- BACKOFF_JITTER), ARGV[5] Retry-After ms (-1: none).
# With a Retry-After: park = max(park, now + ARGV[5]). Without: the back-off
# starts at ARGV[1] (or after a quiet period), doubles when raised again once
# the current window has passed (a burst of 429s from requests sent before the
# raise counts once), is capped at ARGV[2]; park = max(park, now + back-off).
# Returns {back-off ms now in force, park deadline ms, 1 if raised else 0}.
RAISE_BACKOFF_SCRIPT = (
    LUA_RECORD
    + """
local now = now_ms()
local rec = host_record(KEYS[1])
local cur = effective_backoff(rec, now, tonumber(ARGV[3]))
local raised = 0
local retry_after = tonumber(ARGV[5])
local until_ms
if retry_after >= 0 then
  until_ms = now + retry_after
else
  if cur > 0 and now - rec.backoff_at < cur then
    return {cur, rec.park, 0}
  end
  local new = tonumber(ARGV[1])
  if cur > 0 then
    new = cur * 2
  end
  new = math.floor(math.min(tonumber(ARGV[2]), new * tonumber(ARGV[4])))
  redis.call('HSET', KEYS[1], 'backoff', new, 'backoff_at', now)
  cur = new
  raised = 1
  until_ms = now + new
end
return {cur, park_until(KEYS[1], rec, until_ms), raised}
"""
)

# KEYS[1] the host record.
# ARGV[1] threshold (failures), ARGV[2] cool-down ms, ARGV[3] max cool-down ms.
# Counts a connection failure (``fails``; the first of a run sets
# ``failing_since``). When the count reaches the
# threshold and the breaker is not already open (park in the future), opens
# it: park = now + cool-down * 2^(times opened in a row), capped; ``breaker``
# counts the openings. Returns {fails, park ms if opened by this call else 0}.
FAIL_SCRIPT = (
    LUA_RECORD
    + """
local now = now_ms()
local fails = redis.call('HINCRBY', KEYS[1], 'fails', 1)
redis.call('HSETNX', KEYS[1], 'failing_since', now)
if fails < tonumber(ARGV[1]) then
  return {fails, 0}
end
local rec = host_record(KEYS[1])
if rec.park > now then
  return {fails, 0}
end
local opened = redis.call('HINCRBY', KEYS[1], 'breaker', 1)
local cool = tonumber(ARGV[2]) * 2 ^ math.min(opened - 1, 30)
cool = math.floor(math.min(cool, tonumber(ARGV[3])))
redis.call('HSET', KEYS[1], 'park', now + cool)
return {fails, now + cool}
"""
)

# KEYS[1] the host record. No ARGV.
# Closes the breaker after a response: clears ``fails``, ``breaker``,
# ``failing_since`` and a ``down`` verdict (the host answers again).
# Returns the number of openings it had (0: it was closed).
SUCCESS_SCRIPT = """
local opened = tonumber(redis.call('HGET', KEYS[1], 'breaker') or '0') or 0
redis.call('HDEL', KEYS[1], 'fails', 'breaker', 'failing_since', 'down',
           'down_reason')
return opened
"""


class HostRecords:
    """Writes to the host records of one crawl (``prefix``), each one script
    or one command. The frontier's ``next`` is written by its lease script,
    and the lock script of :mod:`extensions.politeness` only reads."""

    def __init__(self, client: aredis.Redis, prefix: str, partitions: int = 1) -> None:
        self.client = client
        self.prefix = prefix
        self.partitions = partitions

    def record(self, hostkey: str) -> str:
        """The key of a host's record, in its partition."""
        partition = host_partition(hostkey, self.partitions)
        return FrontierKeys(self.prefix, partition, self.partitions).host(hostkey)

    async def set_delay(self, hostkey: str, delay_ms: int | None) -> None:
        """Set the host's minimum delay (None: remove it, the default applies)."""
        if delay_ms is None:
            await self.client.hdel(self.record(hostkey), DELAY)
        else:
            await self.client.hset(self.record(hostkey), DELAY, int(delay_ms))

    async def park(self, hostkey: str, for_ms: int) -> int:
        """Park a host for ``for_ms`` from now (never shortens a park); return
        the deadline in epoch ms of the Redis clock."""
        res = await script(self.client, PARK_SCRIPT)(
            keys=[self.record(hostkey)], args=[int(for_ms)]
        )
        return int(res)

    async def raise_backoff(
        self,
        hostkey: str,
        *,
        initial_ms: int,
        max_ms: int,
        quiet_ms: int,
        jitter: float,
        retry_after_ms: int | None,
    ) -> tuple[int, int, bool]:
        """Raise the back-off (or park until a Retry-After):
        ``(back-off ms, park deadline ms, raised)``."""
        factor = 1.0 + random.uniform(-jitter, jitter)
        res = await script(self.client, RAISE_BACKOFF_SCRIPT)(
            keys=[self.record(hostkey)],
            args=[
                initial_ms,
                max_ms,
                quiet_ms,
                repr(factor),
                -1 if retry_after_ms is None else retry_after_ms,
            ],
        )
        return int(res[0]), int(res[1]), bool(res[2])

    async def fail(
        self, hostkey: str, *, threshold: int, cooldown_ms: int, max_cooldown_ms: int
    ) -> tuple[int, int]:
        """Count a connection failure: ``(fails, park ms if it opened else 0)``."""
        res = await script(self.client, FAIL_SCRIPT)(
            keys=[self.record(hostkey)],
            args=[threshold, cooldown_ms, max_cooldown_ms],
        )
        return int(res[0]), int(res[1])

    async def succeed(self, hostkey: str) -> int:
        """Close the breaker; return how often it had opened in a row."""
        res = await script(self.client, SUCCESS_SCRIPT)(
            keys=[self.record(hostkey)], args=[]
        )
        return int(res)


class Deferral(StrEnum):
    """Why a request went back to the scheduler (meta
    :data:`extensions.meta.POLITENESS_DEFERRED`, stats ``.../deferred/<why>``)."""

    #: The host is parked (back-off, Retry-After, circuit breaker).
    PARKED = "parked"
    #: The host's spacing is longer than ``POLITENESS_MAX_WAIT``.
    SPACED = "spaced"
    #: The host's robots.txt is unreachable for now.
    ROBOTS = "robots"
    #: The host's robots.txt is still being fetched (here or by another
    #: worker) after ``ROBOTS_WAIT_MAX``.
    ROBOTS_PENDING = "robots_pending"


def deferred_copy(
    request: Request, reason: Deferral, *, counted: bool = True
) -> Request:
    """A copy of ``request`` to hand back to the scheduler when its host may
    not be fetched now: the frontier queues it under its parked host, so it is
    kept, not dropped. ``dont_filter`` stops the dupefilter from discarding
    it; :data:`extensions.meta.POLITENESS_DEFERRALS` counts how often it came
    back (unless not ``counted``: a wait that does not use up the bound of
    ``POLITENESS_MAX_DEFERRALS``).
    """
    copied = dict(request.meta)
    deferrals = int(copied.get(meta.POLITENESS_DEFERRALS, 0))
    copied[meta.POLITENESS_DEFERRALS] = deferrals + int(counted)
    copied[meta.POLITENESS_DEFERRED] = reason
    copied.pop(meta.POLITENESS_LOCK, None)
    return request.replace(dont_filter=True, meta=copied)
