"""Redis clients for a crawl.

Settings read: ``REDIS_URL`` (Scrapy setting, else the environment variable of
that name, else the file ``REDIS_URL_FILE`` names; see
:func:`extensions.settings.config.setting_or_env`), else scrapy-redis's
``REDIS_HOST``, ``REDIS_PORT``, ``REDIS_DB`` and ``REDIS_PARAMS`` (turned into
a URL, :mod:`extensions.connection.params`), and ``REDIS_CLUSTER``. No
component starts a process: when neither names a Redis the webcrawl add-on
has started the embedded Redis (:mod:`extensions.connection.embedded`) before the
crawl; without the add-on that is a
:class:`~extensions.settings.config.SettingsError`.

One asyncio client per crawler, shared by the scheduler, dupefilter, lock
middleware and pipelines, so a worker keeps one small connection pool. The
asyncio client never blocks the reactor (Scrapy's default reactor is the
asyncio one). A synchronous client exists for code that runs in threads or
outside a crawl (commands, tests, benchmarks).

Redis Cluster: when ``REDIS_URL`` names any node of a cluster (the start-up
check reads ``INFO cluster``: ``cluster_enabled:1``), or ``REDIS_CLUSTER`` is
True, both clients are redis-py's cluster clients. They learn the slot map
from that one node, route each command (a script by its first key) to the
master of its slot, follow ``MOVED``/``ASK`` and refresh the map after a
failover. Every script and transaction of webcrawl keeps its keys under one
hash tag (:mod:`extensions.keys`), so each runs on one master.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import weakref
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis
import redis.asyncio as aredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import parse_url
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    BusyLoadingError,
    ClusterError,
    NoPermissionError,
    ReadOnlyError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from extensions.connection.params import redis_url_from_params
from extensions.settings.config import SettingsError, setting_or_env
from extensions.utils.redact import redact_url

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# Errors that mean "Redis is not there right now": wait and try again. Only
# these: a programming error or a refused command must surface. Python's own
# ConnectionError covers a reset, refused or aborted socket that escapes the
# client unwrapped; other OSErrors (a missing file, a bad certificate) do not
# heal by waiting. ReadOnlyError, TryAgainError and the cluster errors come
# from a replica being promoted or a cluster resharding: they pass.
# ClusterError covers CLUSTERDOWN (ClusterDownError, MasterDownError) and
# redis-py's "too many redirections" while the slot map settles after a
# failover; a slot no master serves (SlotNotCoveredError) heals when a
# replica takes it over.
TRANSIENT_REDIS_ERRORS: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    BusyLoadingError,
    ReadOnlyError,
    TryAgainError,
    ClusterError,
    SlotNotCoveredError,
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


# REDIS_URLs found to name a cluster node (by check_redis or cluster_mode):
# the asyncio client, built on the reactor thread, must not probe again.
_CLUSTER_URLS: dict[str, bool] = {}


def check_redis(url: str, timeout: float = STARTUP_TIMEOUT) -> bool:
    """Ping the Redis at ``url`` once, no retries, ``timeout`` seconds per step;
    return True when it is a node of a Redis Cluster (and remember it, so the
    crawl's clients are cluster clients).

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
        raise _not_a_url(url, exc) from None
    try:
        client.ping()
        cluster = _cluster_enabled(client)
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
    except ResponseError as exc:
        # The client's SELECT of a database other than 0 on a cluster node.
        if "cluster mode" not in str(exc):
            raise
        raise RedisUnavailable(
            f"Redis at {where} is a cluster node: a cluster has database 0 only, "
            "and REDIS_URL names another"
        ) from None
    finally:
        client.close()
    _CLUSTER_URLS[url] = cluster
    return cluster


def _not_a_url(url: str, exc: ValueError) -> RedisUnavailable:
    """The error for a URL redis-py cannot read. redis-py quotes the part it
    could not read (a "port" that may be a password, in ``redis://user:pw``):
    quote no part of the URL."""
    detail = re.sub(r"'([^']*)'", lambda m: "'***'" if m[1] in url else m[0], str(exc))
    return RedisUnavailable(f"REDIS_URL={redact_url(url)} is not a Redis URL: {detail}")


def check_url(url: str) -> None:
    """Raise :class:`RedisUnavailable` (password masked) when redis-py cannot
    read ``url``; no I/O. For the paths that build a client without
    :func:`check_redis` first (the operator commands)."""
    try:
        parse_url(url)
    except ValueError as exc:
        raise _not_a_url(url, exc) from None


def _cluster_enabled(client: redis.Redis) -> bool:
    """``INFO cluster`` says ``cluster_enabled:1`` (a user without the right
    to INFO reads as no cluster: ``REDIS_CLUSTER=True`` then says it)."""
    try:
        info = client.info("cluster")
    except NoPermissionError:
        return False
    return bool(int(info.get("cluster_enabled", 0)))


def cluster_mode(settings: BaseSettings) -> bool:
    """Whether the crawl's Redis is a cluster: ``REDIS_CLUSTER``, else what
    the start-up check found, else one ``INFO cluster`` now (blocking: for
    commands and threads, never the reactor)."""
    if settings.getbool("REDIS_CLUSTER"):
        return True
    url = resolve_redis_url(settings)
    if url not in _CLUSTER_URLS:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=STARTUP_TIMEOUT, socket_timeout=STARTUP_TIMEOUT
        )
        try:
            _CLUSTER_URLS[url] = _cluster_enabled(client)
        finally:
            client.close()
    return _CLUSTER_URLS[url]


_CLIENTS: weakref.WeakKeyDictionary[Crawler, aredis.Redis] = weakref.WeakKeyDictionary()

# Fail fast on a dead connection so the caller's own back-off takes over
# rather than hanging inside the client.
_CLIENT_OPTIONS: dict[str, Any] = {
    "socket_connect_timeout": 5,
    "socket_timeout": 30,
    "health_check_interval": 30,
}


def resolve_redis_url(settings: BaseSettings) -> str:
    """The Redis URL of the crawl (setting, environment or secret file; else
    the one scrapy-redis's ``REDIS_HOST``/``PORT``/``DB``/``PARAMS`` name).

    Never starts a server: this runs on the reactor thread, where a blocking
    subprocess start would stall every download.
    """
    url = setting_or_env(settings, "REDIS_URL") or redis_url_from_params(settings)[0]
    if not url:
        raise SettingsError(
            "REDIS_URL is not set: set it, or enable the webcrawl add-on "
            "(ADDONS), which starts the embedded Redis before the crawl"
        )
    return url


def sync_client(settings: BaseSettings) -> redis.Redis:
    """A synchronous client (a cluster client when :func:`cluster_mode`).

    Typed as :class:`redis.Redis`: redis-py's cluster client offers the same
    commands, and routes the keyless ones (``TIME``, ``INFO``) to one node
    and ``SCAN``, ``SCRIPT LOAD`` to every master."""
    url = resolve_redis_url(settings)
    if cluster_mode(settings):
        return cast("redis.Redis", RedisCluster.from_url(url, **_CLIENT_OPTIONS))
    return redis.Redis.from_url(url, **_CLIENT_OPTIONS)


class _ClusterConnection(aredis.Connection):
    """redis-py's asyncio connection, with one known bug turned back into the
    error it stands for.

    A write on a connection whose peer closed it (a master SIGKILLed, its
    socket reset) raises ``AttributeError: 'NoneType' object has no attribute
    'writelines'`` or a ``TypeError`` from the transport in redis-py 8.1
    (redis/redis-py#4287) instead of a ``ConnectionError``: it bypasses the
    cluster client's retries and slot-map refresh, and our handling of
    transient errors, and a page was lost in the failover test. Only when the
    connection is in fact gone does it become a ``ConnectionError``; any
    other ``AttributeError`` or ``TypeError`` is a bug and surfaces.
    """

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        try:
            await super().send_packed_command(command, check_health)
        except (AttributeError, TypeError) as exc:
            writer = self._writer
            if writer is not None and not writer.transport.is_closing():
                raise
            await self.disconnect(nowait=True)
            raise RedisConnectionError(
                f"connection to {self.host}:{self.port} closed under a write"
            ) from exc


def _cluster_client(url: str) -> AsyncRedisCluster:
    client = AsyncRedisCluster.from_url(url, **_CLIENT_OPTIONS)
    # The cluster client takes no connection class: set it where its node
    # manager builds every node's connections (one dict, shared), and on the
    # nodes already built from the URL.
    client.connection_kwargs["connection_class"] = _ClusterConnection
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = _ClusterConnection
    return client


def new_async_client(settings: BaseSettings) -> aredis.Redis:
    """A new asyncio client (a cluster client when ``REDIS_CLUSTER`` is set or
    the start-up check found a cluster). Never probes: safe on the reactor."""
    url = resolve_redis_url(settings)
    if settings.getbool("REDIS_CLUSTER") or _CLUSTER_URLS.get(url):
        logger.info("Connecting to the Redis Cluster at %s", redact_url(url))
        return cast("aredis.Redis", _cluster_client(url))
    logger.info("Connecting to Redis at %s", redact_url(url))
    return aredis.Redis.from_url(url, **_CLIENT_OPTIONS)


def async_client(crawler: Crawler) -> aredis.Redis:
    """The crawler's shared asyncio Redis client (created on first use)."""
    client = _CLIENTS.get(crawler)
    if client is None:
        client = _CLIENTS[crawler] = new_async_client(crawler.settings)
    return client


async def info_per_master(client: aredis.Redis, section: str) -> list[dict[str, Any]]:
    """``INFO section`` of every master: one on a plain Redis; on a cluster,
    one per master (``INFO`` alone goes to one node of a cluster)."""
    if isinstance(client, AsyncRedisCluster):
        replies = await client.info(section, target_nodes=AsyncRedisCluster.PRIMARIES)
        return list(replies.values())
    return [await client.info(section)]


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
