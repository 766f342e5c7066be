"""The token lock every fleet-wide lock of a crawl uses.

A lock is a random token set with ``SET NX PX``; only its owner takes it
again (a retry whose first reply was lost), releases or extends it, by a
compare-on-token script (as redis-py's ``redis/lock.py`` does), so a holder
whose lock expired never deletes the next holder's.
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

# Taking a token lock, in Lua, for every script that takes one (the acquire
# script below, the host lock's of extensions.downloadermiddlewares.politeness):
# take(key, token,
# ttl_ms) sets `key` to `token` for `ttl_ms` if nobody holds it, or resets
# its TTL if `token` already does: a holder that retries after losing the
# reply (a Redis error, a restart from the AOF) gets its own lock back
# instead of waiting for it to expire. True if `token` holds the lock.
LUA_TAKE = """
local function take(key, token, ttl_ms)
  if redis.call('SET', key, token, 'NX', 'PX', ttl_ms) then
    return true
  end
  if redis.call('GET', key) == token then
    redis.call('PEXPIRE', key, ttl_ms)
    return true
  end
  return false
end
"""

# Whether `token` holds the lock at `key`, in Lua, for a script that acts on
# a lock only while its token holds it (the download lock's cut to the
# host's spacing, extensions.downloadermiddlewares.politeness).
LUA_OWNS = """
local function owns(key, token)
  return redis.call('GET', key) == token
end
"""

# KEYS[1] the lock key. ARGV[1] token, ARGV[2] TTL ms.
# take() above. Returns 1 if ARGV[1] holds the lock, else 0.
ACQUIRE_SCRIPT = (
    LUA_TAKE
    + """
if take(KEYS[1], ARGV[1], ARGV[2]) then
  return 1
end
return 0
"""
)

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
        """Take the lock for ``ttl_ms`` if nobody holds it, or keep it for
        ``ttl_ms`` from now if ``token`` already does (a retry)."""
        res = await script(self.client, ACQUIRE_SCRIPT)(
            keys=[key], args=[token, int(ttl_ms)]
        )
        return bool(res)

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
