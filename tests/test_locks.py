"""The token lock of :mod:`extensions.connection.locks` on a real Redis."""

from __future__ import annotations

import asyncio

import redis
import redis.asyncio as aredis

from extensions.connection.locks import TokenLock

KEY = "web:robots:fetch:http://a.test:80"


def test_only_the_holder_takes_releases_or_extends_it(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def main() -> None:
        client = aredis.Redis.from_url(redis_url)
        lock = TokenLock(client)
        assert await lock.acquire(KEY, "mine", 1_000)
        assert not await lock.acquire(KEY, "other", 60_000)
        assert not await lock.release(KEY, "other")
        assert not await lock.extend(KEY, "other", 60_000)
        assert redis_client.get(KEY) == b"mine"
        # A retry by the holder (its first reply lost) gets it back, for the
        # TTL it asks from now.
        assert await lock.acquire(KEY, "mine", 60_000)
        assert 59_000 < redis_client.pttl(KEY) <= 60_000
        assert await lock.extend(KEY, "mine", 5_000)
        assert redis_client.pttl(KEY) <= 5_000
        assert await lock.release(KEY, "mine")
        assert not redis_client.exists(KEY)
        assert await lock.acquire(KEY, "other", 1_000)
        await client.aclose()

    asyncio.run(main())
