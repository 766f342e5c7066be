"""Redis clients for a crawl.

Settings read: ``REDIS_URL`` (Scrapy setting, else the environment variable of
that name, else the file ``REDIS_URL_FILE`` names; see
:func:`extensions.config.setting_or_env`). No component starts a process: when
``REDIS_URL`` is empty the webcrawl add-on has started the embedded Redis
(:mod:`extensions.embedded_redis`) before the crawl; without the add-on an
empty ``REDIS_URL`` is a :class:`~extensions.config.SettingsError`.

One asyncio client per crawler, shared by the scheduler, dupefilter, lock
middleware and pipelines, so a worker keeps one small connection pool. The
asyncio client never blocks the reactor (Scrapy's default reactor is the
asyncio one). A synchronous client exists for code that runs in threads or
outside a crawl (commands, tests, benchmarks).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any, TypeVar

import redis
import redis.asyncio as aredis
from redis.exceptions import BusyLoadingError, ReadOnlyError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from extensions.config import SettingsError, setting_or_env
from extensions.redact import redact_url

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# Errors that mean "Redis is not there right now": wait and try again.
TRANSIENT_REDIS_ERRORS = (
    RedisConnectionError,
    RedisTimeoutError,
    BusyLoadingError,
    ReadOnlyError,
    ConnectionResetError,
    OSError,
)

_CLIENTS: weakref.WeakKeyDictionary[Crawler, aredis.Redis] = weakref.WeakKeyDictionary()

# Fail fast on a dead connection so the caller's own back-off takes over
# rather than hanging inside the client.
_CLIENT_OPTIONS: dict[str, Any] = {
    "socket_connect_timeout": 5,
    "socket_timeout": 30,
    "health_check_interval": 30,
}


def resolve_redis_url(settings: BaseSettings) -> str:
    """The Redis URL of the crawl (setting, environment or secret file).

    Never starts a server: this runs on the reactor thread, where a blocking
    subprocess start would stall every download.
    """
    url = setting_or_env(settings, "REDIS_URL")
    if not url:
        raise SettingsError(
            "REDIS_URL is not set: set it, or enable the webcrawl add-on "
            "(ADDONS), which starts the embedded Redis before the crawl"
        )
    return url


def sync_client(settings: BaseSettings) -> redis.Redis:
    url = resolve_redis_url(settings)
    return redis.Redis.from_url(url, **_CLIENT_OPTIONS)


def async_client(crawler: Crawler) -> aredis.Redis:
    """The crawler's shared asyncio Redis client (created on first use)."""
    client = _CLIENTS.get(crawler)
    if client is None:
        url = resolve_redis_url(crawler.settings)
        logger.info("Connecting to Redis at %s", redact_url(url))
        client = aredis.Redis.from_url(url, **_CLIENT_OPTIONS)
        _CLIENTS[crawler] = client
    return client


class _Outage:
    """Logs one outage once, however many callers wait it out."""

    since: float | None = None


async def retry_redis(
    call: Callable[[], Awaitable[_T]],
    what: str,
    initial: float = 0.5,
    maximum: float = 30.0,
) -> _T:
    """Await ``call()`` until Redis answers, backing off from ``initial`` to
    ``maximum`` seconds; log the outage once. Used where a Redis error must
    make a request wait rather than fail (a lost robots.txt or lock answer
    would otherwise turn into a failed page)."""
    delay = initial
    while True:
        try:
            result = await call()
        except TRANSIENT_REDIS_ERRORS as exc:
            if _Outage.since is None:
                _Outage.since = time.monotonic()
                logger.error(
                    "Redis unreachable (%s) during %s; waiting with back-off",
                    type(exc).__name__,
                    what,
                )
            await asyncio.sleep(delay)
            delay = min(maximum, delay * 2)
            continue
        if _Outage.since is not None:
            logger.warning(
                "Redis answers again (%s waited %.1fs)",
                what,
                time.monotonic() - _Outage.since,
            )
            _Outage.since = None
        return result
