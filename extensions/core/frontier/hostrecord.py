"""The per-host record's Python side: :class:`HostRecords` runs the scripts
that write it.

One record per host (``FrontierKeys(prefix, partition, partitions).host(key)``,
in its host's partition), a HASH of integers (epoch ms of the Redis clock,
durations in ms). Its fields, their single writer and the rules every script
applies to them (spacing, park, back-off, circuit breaker, host verdicts):
``docs/host-record.md``. Its scripts are in :mod:`extensions.core.frontier.lua`.

Settings read: none (the middlewares pass their settings in).
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

from extensions.connection import async_client
from extensions.connection.scripts import run_pipelined, script
from extensions.core.frontier.lua import (
    FAIL_LUA,
    IP_BUSY_LUA,
    PARK_LUA,
    RAISE_BACKOFF_LUA,
    SET_DELAY_LUA,
    SET_IP_LUA,
    SUCCESS_LUA,
    THROTTLE_LUA,
)
from extensions.keys import FrontierKeys, crawl_prefix
from extensions.utils.hosts import host_partition, hostname_of

if TYPE_CHECKING:
    import redis.asyncio as aredis
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class HostRecords:
    """Writes to the host records of one crawl (``prefix``), each one script
    or one command. The frontier's ``next`` is written by its lease script,
    and the lock script of :mod:`extensions.downloadermiddlewares.politeness` only
    reads."""

    def __init__(self, client: aredis.Redis, prefix: str, partitions: int = 1) -> None:
        self.client = client
        self.prefix = prefix
        self.partitions = partitions

    @classmethod
    def of_crawler(cls, crawler: Crawler) -> HostRecords:
        """The host records of ``crawler``'s crawl, on its shared client
        (``FRONTIER_PARTITIONS``)."""
        return cls(
            async_client(crawler),
            crawl_prefix(crawler),
            crawler.settings.getint("FRONTIER_PARTITIONS"),
        )

    def record(self, hostkey: str) -> str:
        """The key of a host's record, in its partition."""
        partition = host_partition(hostkey, self.partitions)
        return FrontierKeys(self.prefix, partition, self.partitions).host(hostkey)

    async def set_delay(self, hostkey: str, delay_ms: int | None) -> None:
        """Set the host's robots.txt delay (None: remove it)."""
        await script(self.client, SET_DELAY_LUA)(
            keys=[self.record(hostkey)],
            args=["" if delay_ms is None else int(delay_ms)],
        )

    async def park(self, hostkey: str, for_ms: int) -> int:
        """Park a host for ``for_ms`` from now (never shortens a park); return
        the deadline in epoch ms of the Redis clock."""
        res = await script(self.client, PARK_LUA)(
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
        res = await script(self.client, RAISE_BACKOFF_LUA)(
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
        res = await script(self.client, FAIL_LUA)(
            keys=[self.record(hostkey)],
            args=[threshold, cooldown_ms, max_cooldown_ms],
        )
        return int(res[0]), int(res[1])

    async def succeed(self, hostkey: str) -> int:
        """Close the breaker; return how often it had opened in a row."""
        res = await script(self.client, SUCCESS_LUA)(
            keys=[self.record(hostkey)], args=[]
        )
        return int(res)

    async def throttle(
        self,
        hostkey: str,
        *,
        latency_ms: int,
        target_concurrency: float,
        min_ms: int,
        max_ms: int,
        start_ms: int,
        ok: bool,
    ) -> tuple[int, int]:
        """Fold one response's latency into the host's AutoThrottle delay:
        ``(throttle ms before, after)``."""
        res = await script(self.client, THROTTLE_LUA)(
            keys=[self.record(hostkey)],
            args=[
                int(latency_ms),
                repr(float(target_concurrency)),
                int(min_ms),
                int(max_ms),
                int(start_ms),
                int(ok),
            ],
        )
        return int(res[0]), int(res[1])

    async def set_ip(self, hostkey: str, ip: str) -> bool:
        """Record the address the host's name resolves to (the lease
        script's IP schedule reads it); True if it changed."""
        res = await script(self.client, SET_IP_LUA)(
            keys=[self.record(hostkey)], args=[ip]
        )
        return bool(res)

    async def ip_busy(self, ip: str, for_ms: int) -> None:
        """Mark an address busy for ``for_ms`` from now in every partition's
        IP schedule (one pipelined round trip), so no partition's lease
        script hands out a host of it before then."""
        run = script(self.client, IP_BUSY_LUA)
        await run_pipelined(
            self.client,
            [
                (run, [FrontierKeys(self.prefix, i, self.partitions).ip_schedule],
                 [ip, int(for_ms)])
                for i in range(self.partitions)
            ],
        )  # fmt: skip

    async def of_name(self, name: str) -> dict[str, dict[str, str]]:
        """The records of every host key of host name ``name`` (any scheme or
        port; a SCAN of each partition), field -> value, by host key."""
        pattern = "*://" + ("[" + name + "]" if ":" in name else name) + ":*"
        pattern = pattern.replace("[", "\\[").replace("]", "\\]")
        found: dict[str, dict[str, str]] = {}
        for i in range(self.partitions):
            prefix = FrontierKeys(self.prefix, i, self.partitions).host_prefix
            async for key in self.client.scan_iter(match=prefix + pattern, count=1000):
                text = key.decode() if isinstance(key, bytes) else key
                hostkey = text[len(prefix) :]
                if hostname_of(hostkey) != name:
                    continue
                raw = await self.client.hgetall(text)
                found[hostkey] = {
                    (k.decode() if isinstance(k, bytes) else k): (
                        v.decode() if isinstance(v, bytes) else v
                    )
                    for k, v in raw.items()
                }
        return dict(sorted(found.items()))
