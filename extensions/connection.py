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
import re
import time
import weakref
from typing import TYPE_CHECKING, Any, TypeVar

import redis
import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    BusyLoadingError,
    ClusterDownError,
    NoPermissionError,
    ReadOnlyError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from extensions.config import SettingsError, setting_or_env
from extensions.redact import redact_url

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# Errors that mean "Redis is not there right now": wait and try again. Only
# these: a programming error or a refused command must surface. Python's own
# ConnectionError covers a reset, refused or aborted socket that escapes the
# client unwrapped; other OSErrors (a missing file, a bad certificate) do not
# heal by waiting. ReadOnlyError, TryAgainError and ClusterDownError come
# from a replica being promoted or a cluster resharding: they pass.
TRANSIENT_REDIS_ERRORS: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    BusyLoadingError,
    ReadOnlyError,
    TryAgainError,
    ClusterDownError,
    ConnectionError,
)

# Errors that never heal by waiting, though redis-py derives the first two
# from its ConnectionError: wrong credentials, a user without the rights.
# Catch them before TRANSIENT_REDIS_ERRORS and stop.
FATAL_REDIS_ERRORS: tuple[type[Exception], ...] = (
    AuthenticationError,
    AuthorizationError,
    NoPermissionError,
)

# Seconds the start-up check waits to connect and for each answer: a Redis
# that accepts connections and never answers must fail the worker within
# seconds, not after the client's retries of its 30 s socket timeout.
STARTUP_TIMEOUT = 5.0


class RedisUnavailable(RuntimeError):
    """Redis cannot be used at start; the message is one line, password masked."""


def check_redis(url: str, timeout: float = STARTUP_TIMEOUT) -> None:
    """Ping the Redis at ``url`` once, no retries, ``timeout`` seconds per step.

    Raises :class:`RedisUnavailable` saying what is wrong and where.
    Blocking: for the add-on, before the crawl starts.
    """
    where = redact_url(url)
    try:
        client = redis.Redis.from_url(
            url,
            socket_connect_timeout=timeout,
            socket_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
    except ValueError as exc:
        # redis-py quotes the part it could not read (a "port" that may be a
        # password, in ``redis://user:pw``): quote no part of the URL here.
        detail = re.sub(
            r"'([^']*)'", lambda m: "'***'" if m[1] in url else m[0], str(exc)
        )
        raise RedisUnavailable(
            f"REDIS_URL={where} is not a Redis URL: {detail}"
        ) from None
    try:
        client.ping()
    except FATAL_REDIS_ERRORS as exc:
        if not client.connection_pool.connection_kwargs.get("password"):
            raise RedisUnavailable(
                f"Redis at {where} requires a password and REDIS_URL has none"
            ) from None
        raise RedisUnavailable(
            f"Redis at {where} refused the credentials: {exc}"
        ) from None
    except (RedisTimeoutError, TimeoutError):
        raise RedisUnavailable(
            f"Redis at {where} accepted no connection or gave no answer within "
            f"{timeout:g}s"
        ) from None
    except (RedisConnectionError, ConnectionError) as exc:
        raise RedisUnavailable(f"Redis at {where} is unreachable: {exc}") from None
    finally:
        client.close()


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
        except FATAL_REDIS_ERRORS:
            raise
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
