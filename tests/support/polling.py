"""Wait for a condition, bounded, instead of sleeping a fixed time: a loaded
machine may be late, and a fixed sleep either wastes time or flakes."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis


async def until(
    cond: Callable[[], Any], timeout: float = 10.0, every: float = 0.01
) -> bool:
    """Poll ``cond`` (a function, or a coroutine function) every ``every``
    seconds on the running event loop until it is true (then True) or
    ``timeout`` seconds have passed (then False)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(every)


def wait_until(
    cond: Callable[[], Any], timeout: float = 10.0, every: float = 0.05
) -> bool:
    """:func:`until`, blocking (no event loop)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True


def redis_time_ms(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds * 1000 + micros / 1000
