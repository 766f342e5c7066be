"""The per-host record: its fields, the scripts that write them, the host keys.

This module owns the host record: it names its fields, holds the Lua helpers
every script includes to read them (:data:`LUA_RECORD`: the Redis clock, the
record, the spacing rule, the park rule) and the scripts that write them
(:class:`HostRecords`). The frontier (:mod:`extensions.core.frontier.frontier`) queues
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
    :data:`extensions.core.frontier.deadletters.HOST_DOWN_LUA`): its requests go to the
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
    :mod:`extensions.core.frontier.spill` as it moves them back (and by recovery).
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
frontier's lease script and the lock script of
:mod:`extensions.downloadermiddlewares.politeness`.

Settings read: none (the middlewares pass their settings in).
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

from extensions.connection.scripts import script
from extensions.core.frontier.lua import (
    FAIL_LUA,
    PARK_LUA,
    RAISE_BACKOFF_LUA,
    SET_DELAY_LUA,
    SUCCESS_LUA,
)
from extensions.keys import FrontierKeys
from extensions.utils.hosts import host_partition

if TYPE_CHECKING:
    import redis.asyncio as aredis

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

    def record(self, hostkey: str) -> str:
        """The key of a host's record, in its partition."""
        partition = host_partition(hostkey, self.partitions)
        return FrontierKeys(self.prefix, partition, self.partitions).host(hostkey)

    async def set_delay(self, hostkey: str, delay_ms: int | None) -> None:
        """Set the host's minimum delay (None: remove it, the default applies)."""
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
