"""The per-host politeness record and the host key functions.

The frontier (:mod:`extensions.frontier`) queues requests by :func:`host_key`
and keeps one politeness record per host in Redis,
``FrontierKeys(prefix).host(hostkey)``, a HASH whose values are integers in
milliseconds:

``next``
    The frontier's own next allowed fetch (read here, never written).
``delay``
    The host's minimum delay: max(``DOWNLOAD_DELAY``, the capped robots.txt
    ``Crawl-delay``/``Request-rate``), written by the robots middleware
    (absent: ``DOWNLOAD_DELAY``).
``backoff``, ``backoff_at``
    The current back-off delay and when it was last raised (epoch ms); a
    back-off older than ``BACKOFF_QUIET_PERIOD`` is forgiven by every reader.
``park``
    Epoch ms until which the host must not be fetched (an open circuit
    breaker, a ``Retry-After`` deadline, an unreachable robots.txt).
``fails``
    Consecutive connection failures (the circuit breaker's count).

Every writer uses the Redis server clock (``TIME``), so the fleet shares one
clock. The effective spacing of a host is max(``delay`` or the default,
``backoff`` unless forgiven); the lock script of :mod:`extensions.politeness`
and the frontier compute it the same way.

Settings read: none (the middlewares pass their settings in).
"""

from __future__ import annotations

import ipaddress
import logging
import weakref
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.exceptions import CannotResolveHostError, DownloadConnectionRefusedError
from scrapy.http import Request

if TYPE_CHECKING:
    import redis.asyncio as aredis
    from redis.commands.core import AsyncScript

logger = logging.getLogger(__name__)

DEFAULT_PORTS = {"http": 80, "https": 443, "ftp": 21, "ws": 80, "wss": 443}

# Meta flag of the robots middleware's own robots.txt requests: the back-off
# middleware leaves the host's page back-off alone for them (an unreachable
# robots.txt parks the host through the robots cache instead).
ROBOTS_FETCH_META = "robots_fetch"


class HostUnresolvable(CannotResolveHostError):
    """A page request failed without a connection: its host's name did not
    resolve when its robots.txt was fetched (the robots middleware raises
    it; the failure policy retries it like any DNS failure, and the circuit
    breaker does not count it: the robots.txt fetch was counted)."""


class HostDown(DownloadConnectionRefusedError):
    """A page request failed without a connection: its host's robots.txt got
    no connection ``ROBOTS_DOWN_AFTER`` times in a row (the robots
    middleware raises it; the failure policy treats it as a connection
    failure, and the circuit breaker does not count it again)."""


# Values of POLITENESS_KEY.
KEY_MODES = ("host", "domain", "ip")


def host_key(url_or_request: str | Request) -> str:
    """The frontier's dispatch key of a URL: ``scheme://host:port``, lowercased,
    the default port made explicit.

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


@dataclass(frozen=True, slots=True)
class HostRecord:
    """A snapshot of one host's politeness record (all values in ms)."""

    delay: int | None = None
    backoff: int = 0
    backoff_at: int = 0
    park: int = 0
    next: int = 0
    fails: int = 0

    def effective_backoff(self, now_ms: int, quiet_ms: int) -> int:
        """The back-off still in force at ``now_ms``.

        >>> rec = HostRecord(backoff=60_000, backoff_at=1_000)
        >>> rec.effective_backoff(2_000, 1_800_000)
        60000
        >>> rec.effective_backoff(1_801_000, 1_800_000)
        0
        """
        if self.backoff and now_ms - self.backoff_at < quiet_ms:
            return self.backoff
        return 0

    def spacing(self, default_ms: int, now_ms: int, quiet_ms: int) -> int:
        """The effective delay between two fetches of the host.

        >>> HostRecord().spacing(250, 0, 1000)
        250
        >>> HostRecord(delay=2000, backoff=500, backoff_at=0).spacing(250, 10, 1000)
        2000
        >>> HostRecord(delay=2000, backoff=9000, backoff_at=0).spacing(250, 10, 1000)
        9000
        """
        base = default_ms if self.delay is None else self.delay
        return max(base, self.effective_backoff(now_ms, quiet_ms))


def _int(value: bytes | str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


async def read_host(client: aredis.Redis, record_key: str) -> HostRecord:
    """Read a host's record (absent fields take their defaults)."""
    raw = await client.hgetall(record_key)
    fields = {
        (k.decode() if isinstance(k, bytes) else str(k)): _int(v)
        for k, v in raw.items()
    }
    return HostRecord(
        delay=fields.get("delay"),
        backoff=fields.get("backoff") or 0,
        backoff_at=fields.get("backoff_at") or 0,
        park=fields.get("park") or 0,
        next=fields.get("next") or 0,
        fails=fields.get("fails") or 0,
    )


async def write_delay(
    client: aredis.Redis, record_key: str, delay_ms: int | None
) -> None:
    """Set the host's minimum delay (None: remove it, the default applies)."""
    if delay_ms is None:
        await client.hdel(record_key, "delay")
    else:
        await client.hset(record_key, "delay", int(delay_ms))


# KEYS[1] the host record. ARGV[1] ms to park the host from now (Redis clock).
# Moves ``park`` later, never earlier. Returns the park deadline (epoch ms).
PARK_SCRIPT = """
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[1])
local park = tonumber(redis.call('HGET', KEYS[1], 'park') or '0') or 0
if deadline > park then
  redis.call('HSET', KEYS[1], 'park', deadline)
  park = deadline
end
return park
"""


_SCRIPTS: weakref.WeakKeyDictionary[aredis.Redis, dict[str, AsyncScript]] = (
    weakref.WeakKeyDictionary()
)


def script(client: aredis.Redis, source: str) -> AsyncScript:
    """``client.register_script(source)``, registered once per client."""
    registered = _SCRIPTS.setdefault(client, {})
    found = registered.get(source)
    if found is None:
        found = registered[source] = client.register_script(source)
    return found


async def park_host(client: aredis.Redis, record_key: str, for_ms: int) -> int:
    """Park a host for ``for_ms`` from now (never shortens a park); return the
    deadline in epoch ms of the Redis clock."""
    return int(await script(client, PARK_SCRIPT)(keys=[record_key], args=[int(for_ms)]))


async def redis_now_ms(client: aredis.Redis) -> int:
    """The Redis server clock in epoch ms (the clock of every record field)."""
    sec, usec = await client.time()
    return int(sec) * 1000 + int(usec) // 1000


def deferred_copy(request: Request, reason: str) -> Request:
    """A copy of ``request`` to hand back to the scheduler when its host may
    not be fetched now: the frontier queues it under its parked host, so it is
    kept, not dropped. ``dont_filter`` stops the dupefilter from discarding
    it; ``politeness_deferrals`` counts how often it came back.
    """
    meta = dict(request.meta)
    meta["politeness_deferrals"] = int(meta.get("politeness_deferrals", 0)) + 1
    meta["politeness_deferred"] = reason
    meta.pop("politeness_lock", None)
    return request.replace(dont_filter=True, meta=meta)
