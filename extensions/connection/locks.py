"""The token lock every fleet-wide lock of a crawl uses.

A lock is a random token set with ``SET NX PX``; only its owner releases or
extends it, by a compare-on-token script (as redis-py's ``redis/lock.py``
does), so a holder whose lock expired never deletes the next holder's.
Used by the per-host download lock (:mod:`extensions.downloadermiddlewares.politeness`,
whose
acquire script also reads the host record) and the robots.txt fetch lock
(:mod:`extensions.downloadermiddlewares.robotstxt`). TTLs are milliseconds.

Settings read: none.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from extensions.connection.scripts import script

if TYPE_CHECKING:
    import redis.asyncio as aredis

# KEYS[1] the lock key. ARGV[1] token.
# Deletes the lock only while it holds ARGV[1]. Returns 1 if deleted, else 0.
RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS[1] the lock key. ARGV[1] token, ARGV[2] new TTL ms.
# Resets the TTL only while the lock holds ARGV[1]. Returns 1 if extended, else 0.
EXTEND_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


def new_token() -> str:
    """A random lock token (128 bits)."""
    return secrets.token_hex(16)


class TokenLock:
    """Token locks on one Redis client; the caller names each lock's key."""

    def __init__(self, client: aredis.Redis) -> None:
        self.client = client

    async def acquire(self, key: str, token: str, ttl_ms: int) -> bool:
        """Take the lock for ``ttl_ms`` if nobody holds it."""
        return bool(await self.client.set(key, token, nx=True, px=int(ttl_ms)))

    async def release(self, key: str, token: str) -> bool:
        """Delete the lock if ``token`` still holds it."""
        res = await script(self.client, RELEASE_SCRIPT)(keys=[key], args=[token])
        return bool(res)

    async def extend(self, key: str, token: str, ttl_ms: int) -> bool:
        """Set the lock's TTL to ``ttl_ms`` from now if ``token`` still holds it."""
        res = await script(self.client, EXTEND_SCRIPT)(
            keys=[key], args=[token, int(ttl_ms)]
        )
        return bool(res)
