"""The fleet's duplicate index: exact (SHA-256 of the text) and near (64-bit
SimHash within a Hamming distance) duplicates.

Where it lives: the page store holds the index of the whole crawl (its
``content_hash`` index and the SimHash band index, see
:meth:`pipelines.stores.base.PageStore.find_original`), so it costs Redis
nothing per stored page. Redis holds a bounded cache of the newest
``NEARDUP_CACHE_PAGES`` pages checked as originals: the pages between their
check and their batch's write (the store cannot answer for them yet), and the
only place where two workers checking copies of one page at the same moment
meet, atomically, in one Lua script. A check asks the store first (in a
thread, off the reactor), then Redis; a page evicted from the cache was
checked ``NEARDUP_CACHE_PAGES`` pages ago and its batch is written by then
(if the store stalled that long, a copy is stored as an original: content
kept twice, nothing lost).

Keys (helpers in :mod:`extensions.keys`, one hash tag so one Lua script may
touch them all): ``<prefix>:simhash:{<prefix>:simhash}:sha`` (HASH content
hash -> page id), ``...:pages`` (HASH page id -> "<simhash> <content hash>",
the page's current fingerprints), ``...:bands`` (HASH "<band>:<block>" -> the
ids of the pages whose SimHash has that 16-bit block in that band, space
separated: one field per band, not one key, since a key costs about 250 B of
Redis) and ``...:order`` (LIST of page ids, oldest first: the eviction
order). Two hashes within Hamming distance 3 share at least one of their four
blocks, so the candidates of a page are the members of its four bands.
Entries left behind by a page whose text changed are dropped lazily when a
lookup meets them; an evicted page's are dropped with it.

The settings (``NEARDUP_*``) are read by :mod:`pipelines.storage`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from extensions import keys
from extensions.connection.scripts import script
from pipelines import defaults

if TYPE_CHECKING:
    import redis.asyncio as aredis

# KEYS[1]  HASH content hash -> page id (exact index)
# KEYS[2]  HASH page id -> "<simhash hex> <content hash>" (indexed originals)
# KEYS[3]  LIST of indexed page ids, oldest first (eviction order)
# KEYS[4]  HASH "<band>:<block hex>" -> page ids, space separated (band index)
# ARGV[1]  page id
# ARGV[2]  content hash ('' : no exact check)
# ARGV[3]  SimHash as 16 hex digits ('' : no near check)
# ARGV[4]  largest Hamming distance that is a near duplicate
# ARGV[5]  most members read from one band (the newest)
# ARGV[6]  most pages indexed (the cache's size)
# Returns {kind, other page id, distance}; kind (a Match): 0 = not a
# duplicate (the page is indexed as an original, and the oldest page evicted
# when the cache is over its size), 1 = exact, 2 = near.
CHECK_AND_ADD = """
local id, sha, sh = ARGV[1], ARGV[2], ARGV[3]
local maxd, maxc, cap = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
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
-- Band i (0..3, low block first) of a SimHash: its field and its block.
local function band(s, i)
  local block = string.sub(s, 13 - 4 * i, 16 - 4 * i)
  return i .. ':' .. block, block
end
local function members(field)
  local list, out = redis.call('HGET', KEYS[4], field), {}
  if list then
    for m in string.gmatch(list, '%S+') do out[#out + 1] = m end
  end
  return out
end
local function store(field, list)
  if #list == 0 then
    redis.call('HDEL', KEYS[4], field)
  else
    redis.call('HSET', KEYS[4], field, table.concat(list, ' '))
  end
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
  for i = 0, 3 do
    local field, block = band(sh, i)
    local list = members(field)
    local kept, changed = {}, false
    local first = #list - maxc + 1
    for j, cand in ipairs(list) do
      local keep = true
      if cand ~= id and j >= first then
        local rec = redis.call('HGET', KEYS[2], cand)
        local csh = rec and fields(rec)
        if not csh or string.len(csh) ~= 16 or select(2, band(csh, i)) ~= block then
          keep = false  -- evicted, or its text changed: drop it
        else
          local d = hamming(sh, csh)
          if d < bestd then best, bestd = cand, d end
        end
      end
      if keep then kept[#kept + 1] = cand else changed = true end
    end
    if changed then store(field, kept) end
  end
  if best then
    redis.call('HDEL', KEYS[2], id)
    return {2, best, bestd}
  end
end
redis.call('HSET', KEYS[2], id, sh .. ' ' .. sha)
if sha ~= '' then redis.call('HSET', KEYS[1], sha, id) end
if sh ~= '' then
  for i = 0, 3 do
    local field = band(sh, i)
    local list = redis.call('HGET', KEYS[4], field)
    if not list then
      redis.call('HSET', KEYS[4], field, id)
    elseif not string.find(' ' .. list .. ' ', ' ' .. id .. ' ', 1, true) then
      redis.call('HSET', KEYS[4], field, list .. ' ' .. id)
    end
  end
end
redis.call('RPUSH', KEYS[3], id)
if redis.call('LLEN', KEYS[3]) > cap then
  -- A page re-fetched is listed twice: its older entry evicts it early,
  -- which costs a store lookup, never a wrong answer.
  local old = redis.call('LPOP', KEYS[3])
  local rec = redis.call('HGET', KEYS[2], old)
  if rec then
    local osh, osha = fields(rec)
    redis.call('HDEL', KEYS[2], old)
    if osha ~= '' and redis.call('HGET', KEYS[1], osha) == old then
      redis.call('HDEL', KEYS[1], osha)
    end
    if string.len(osh) == 16 then
      for i = 0, 3 do
        local field = band(osh, i)
        local kept = {}
        for _, m in ipairs(members(field)) do
          if m ~= old then kept[#kept + 1] = m end
        end
        store(field, kept)
      end
    end
  end
end
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
        capacity: int = defaults.NEARDUP_CACHE_PAGES,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.max_distance = max_distance
        self.max_candidates = max_candidates
        self.capacity = capacity

    def script_args(
        self, page_id: str, content_hash: str | None, simhash: int | None
    ) -> tuple[list[str], list[str | int]]:
        """KEYS and ARGV of one check (no near check when ``simhash`` is
        None).

        >>> idx = DuplicateIndex.__new__(DuplicateIndex)
        >>> idx.prefix, idx.max_distance, idx.max_candidates = "web", 3, 64
        >>> idx.capacity = 100
        >>> idx.script_args("p1", "ab", None)
        (['web:simhash:{web:simhash}:sha', 'web:simhash:{web:simhash}:pages',
          'web:simhash:{web:simhash}:order', 'web:simhash:{web:simhash}:bands'],
         ['p1', 'ab', '', 3, 64, 100])
        """
        k = [
            keys.content_hashes(self.prefix),
            keys.simhash_pages(self.prefix),
            keys.simhash_order(self.prefix),
            keys.simhash_bands(self.prefix),
        ]
        args: list[str | int] = [
            page_id,
            content_hash or "",
            "" if simhash is None else simhash_hex(simhash),
            self.max_distance,
            self.max_candidates,
            self.capacity,
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

    async def forget(self, page_id: str) -> None:
        """Drop the page's cached fingerprints: it turned out a duplicate of
        a stored page, so it must not be taken for an original."""
        await self.client.hdel(keys.simhash_pages(self.prefix), page_id)
