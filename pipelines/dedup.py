"""The fleet-wide duplicate index in Redis: exact (SHA-256 of the text) and
near (64-bit SimHash within a Hamming distance) duplicates.

Keys (helpers in :mod:`extensions.keys`, one hash tag so one Lua script may
touch them all): ``<prefix>:simhash:{<prefix>:simhash}:sha`` (HASH content
hash -> page id), ``...:pages`` (HASH page id -> "<simhash> <content hash>",
the page's current fingerprints) and ``...:<band>:<block>`` (SET of page ids
whose SimHash has that 16-bit block in that band). Two hashes within Hamming
distance 3 share at least one of their four blocks, so the candidates of a
page are the members of its four band sets. Entries left behind by a page
whose text changed are dropped lazily when a lookup meets them.

The settings (``NEARDUP_*``) are read by :mod:`pipelines.storage`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from extensions import keys
from extensions.scripts import script
from pipelines.processing import simhash_blocks

if TYPE_CHECKING:
    import redis.asyncio as aredis

# KEYS[1]  HASH content hash -> page id (exact index)
# KEYS[2]  HASH page id -> "<simhash hex> <content hash>" (indexed originals)
# KEYS[3..6] SET of page ids per SimHash band (absent when no near check)
# ARGV[1]  page id
# ARGV[2]  content hash ('' : no exact check)
# ARGV[3]  SimHash as 16 hex digits ('' : no near check)
# ARGV[4]  largest Hamming distance that is a near duplicate
# ARGV[5]  most members read from one band set
# Returns {kind, other page id, distance}; kind (a Match): 0 = not a
# duplicate (the page is indexed as an original), 1 = exact, 2 = near.
CHECK_AND_ADD = """
local id, sha, sh = ARGV[1], ARGV[2], ARGV[3]
local maxd, maxc = tonumber(ARGV[4]), tonumber(ARGV[5])
local function fields(rec)
  return string.match(rec, '^(%S*) (%S*)$')
end
local function popcount16(x)
  local c = 0
  while x > 0 do x = bit.band(x, x - 1); c = c + 1 end
  return c
end
local function hamming(a, b)
  local d = 0
  for p = 1, 13, 4 do
    d = d + popcount16(bit.bxor(tonumber(string.sub(a, p, p + 3), 16),
                                tonumber(string.sub(b, p, p + 3), 16)))
  end
  return d
end
if sha ~= '' then
  local other = redis.call('HGET', KEYS[1], sha)
  if other and other ~= id then
    local rec = redis.call('HGET', KEYS[2], other)
    if rec then
      local _, osha = fields(rec)
      if osha == sha then
        redis.call('HDEL', KEYS[2], id)
        return {1, other, 0}
      end
    end
  end
end
if sh ~= '' then
  local best, bestd = nil, maxd + 1
  for i = 0, #KEYS - 3 do
    local key = KEYS[3 + i]
    local members
    if redis.call('SCARD', key) <= maxc then
      members = redis.call('SMEMBERS', key)
    else
      members = redis.call('SRANDMEMBER', key, maxc)
    end
    local pos = 13 - 4 * i
    local block = string.sub(sh, pos, pos + 3)
    for _, cand in ipairs(members) do
      if cand ~= id then
        local rec = redis.call('HGET', KEYS[2], cand)
        local csh = rec and fields(rec)
        if not csh or string.len(csh) ~= 16
            or string.sub(csh, pos, pos + 3) ~= block then
          redis.call('SREM', key, cand)
        else
          local d = hamming(sh, csh)
          if d < bestd then best, bestd = cand, d end
        end
      end
    end
  end
  if best then
    redis.call('HDEL', KEYS[2], id)
    return {2, best, bestd}
  end
end
redis.call('HSET', KEYS[2], id, sh .. ' ' .. sha)
if sha ~= '' then redis.call('HSET', KEYS[1], sha, id) end
for i = 3, #KEYS do redis.call('SADD', KEYS[i], id) end
return {0, '', 0}
"""

EXACT = "exact"
NEAR = "near"


class Match(IntEnum):
    """The codes of :data:`CHECK_AND_ADD`."""

    #: Not a duplicate: the page is now indexed as an original.
    ORIGINAL = 0
    #: The same content hash as an indexed page.
    EXACT = 1
    #: A SimHash within the distance of an indexed page's.
    NEAR = 2


@dataclass(frozen=True)
class Duplicate:
    """The page is a duplicate of ``of`` (a page id)."""

    kind: str
    of: str
    distance: int = 0


def simhash_hex(value: int) -> str:
    """>>> simhash_hex(0xBEEF)
    '000000000000beef'
    """
    return f"{value:016x}"


class DuplicateIndex:
    """Check-and-add against the crawl's duplicate index, one round trip per
    page (the Lua script above, registered once per client)."""

    def __init__(
        self,
        client: aredis.Redis,
        prefix: str,
        max_distance: int = 3,
        max_candidates: int = 64,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.max_distance = max_distance
        self.max_candidates = max_candidates

    def script_args(
        self, page_id: str, content_hash: str | None, simhash: int | None
    ) -> tuple[list[str], list[str | int]]:
        """KEYS and ARGV of one check (no near check when ``simhash`` is
        None).

        >>> idx = DuplicateIndex.__new__(DuplicateIndex)
        >>> idx.prefix, idx.max_distance, idx.max_candidates = "web", 3, 64
        >>> idx.script_args("p1", "ab", None)
        (['web:simhash:{web:simhash}:sha', 'web:simhash:{web:simhash}:pages'],
         ['p1', 'ab', '', 3, 64])
        """
        k = [keys.content_hashes(self.prefix), keys.simhash_pages(self.prefix)]
        sh = ""
        if simhash is not None:
            sh = simhash_hex(simhash)
            k += [
                keys.simhash_band(self.prefix, band, block)
                for band, block in enumerate(simhash_blocks(simhash))
            ]
        args: list[str | int] = [
            page_id,
            content_hash or "",
            sh,
            self.max_distance,
            self.max_candidates,
        ]
        return k, args

    async def check(
        self, page_id: str, content_hash: str | None, simhash: int | None
    ) -> Duplicate | None:
        """Return the :class:`Duplicate` the page is, or None after indexing
        it as an original."""
        if not content_hash and simhash is None:
            return None
        k, args = self.script_args(page_id, content_hash, simhash)
        code, other, distance = await script(self.client, CHECK_AND_ADD)(
            keys=k, args=args
        )
        match = Match(int(code))
        if match is Match.ORIGINAL:
            return None
        if isinstance(other, bytes):
            other = other.decode()
        kind = EXACT if match is Match.EXACT else NEAR
        return Duplicate(kind, str(other), int(distance))
