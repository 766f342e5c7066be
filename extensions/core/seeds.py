"""The seed list: ``redis-cli lpush web:start_urls URL``.

An entry is a URL or a JSON object ``{"url": ..., "priority": ..., "meta":
{"user": {...}}}``. Entries are taken oldest first (the list is pushed at the
head and taken from the tail). Each entry is judged on its own: whatever it
holds (bytes that are not UTF-8, a 100 KB string, JSON that is not an object,
fields of the wrong type, a URL that ``Request`` refuses), a bad entry is
logged, counted and moved with its reason to ``web:start_urls:invalid``, and
never costs the entries taken with it.

What a seed may carry is deliberately small, because whoever can write the
seed list is not necessarily trusted with the workers:

* ``url``: an http(s) URL of at most ``max_url_length`` characters (the
  spider passes Scrapy's ``URLLENGTH_LIMIT``, 2083 by default);
* ``priority``: an integer in the frontier's range (-32768..32767);
* ``meta``: only the key ``user`` (:data:`SEED_META_KEYS`), free JSON data of
  the operator's own (at most :data:`SEED_USER_META_MAX` bytes), carried on
  the seed request as ``request.meta["user"]``. Scrapy and webcrawl read
  control keys from ``meta`` (``frontier_lease``, ``download_maxsize``,
  ``dont_obey_robotstxt``, ``proxy``...), so a seed naming any other key is
  refused, not silently trimmed: the operator learns why it was not crawled.

Hand-over (a reliable queue): a take moves the entries atomically into the
worker's taken list ``web:{web:start_urls}:taken:<worker>`` (same cluster
slot as the seed list, :func:`extensions.keys.seed_taken`); each seed request
carries its entry in ``meta["seed_taken"]``, and the entry leaves the taken
list only once the scheduler has queued the request in the frontier or it was
refused before it (signal :data:`extensions.signals.seeds_settled`; the
removal rides on the worker's next take or beat). An invalid entry leaves it
once its record is in the invalid list. Every take and every beat (each
``heartbeat`` seconds) records the worker in ``web:{web:start_urls}:takers``;
a worker silent for ``dead_after`` (three heartbeats, the frontier's rule) is
dead, and the next take of a live worker puts its taken entries back at the
taking end of the seed list. A clean close puts back what is left (seeds
taken but not handed to the scheduler, e.g. a start batch the engine never
consumed). So a worker killed at any point loses no seed; one killed after
its scheduler queued a seed but before the entry left costs a duplicate,
which the dupefilter drops.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request

from extensions.connection.scripts import LUA_NOW_MS, script
from extensions.core.frontier.lua import PRIORITY_MAX, PRIORITY_MIN
from extensions.keys import invalid_start_urls, seed_taken, seed_takers, start_urls

if TYPE_CHECKING:
    from collections.abc import Sequence

    import redis.asyncio as aredis
    from scrapy.settings import BaseSettings

# Move a taker's taken entries back to the taking end of the seed list, the
# oldest taken last (so taken first again). Returns how many moved; a taken
# key of the wrong type is left alone (-1): it is no seed list of ours.
_LUA_GIVE_BACK = """
local function give_back(taken, seeds)
  local kind = redis.call('TYPE', taken)['ok']
  if kind == 'none' then return 0 end
  if kind ~= 'list' then return -1 end
  -- The taken list holds the newest at its head: pushed in that order, the
  -- oldest ends at the seed list's tail. (No LMOVE: Redis < 6.2.)
  local entries = redis.call('LRANGE', taken, 0, -1)
  for _, v in ipairs(entries) do redis.call('RPUSH', seeds, v) end
  redis.call('DEL', taken)
  return #entries
end
"""

# take: beat, drop settled entries from this taker's taken list, give back
# the taken entries of dead takers, then move up to n seeds (oldest first)
# from the seed list into this taker's taken list.
# KEYS[1] seed list, KEYS[2] takers ZSET, KEYS[3] this taker's taken list.
# ARGV[1] n, ARGV[2] this taker's id, ARGV[3] dead after (ms), ARGV[4] the
# taken-list key prefix, ARGV[5..] settled entries. A dead taker's taken list
# is ARGV[4] .. its id, built here because the dead are known only inside
# the script; every taken list is tagged {<prefix>:start_urls}, the slot of
# KEYS[1] (extensions.keys.seed_taken).
# Returns {entries given back, broken taken keys skipped, taken entries...}.
TAKE_LUA = (
    LUA_NOW_MS
    + _LUA_GIVE_BACK
    + """
local seeds, takers, mine = KEYS[1], KEYS[2], KEYS[3]
local me = ARGV[2]
local now = now_ms()
redis.call('ZADD', takers, now, me)
for i = 5, #ARGV do redis.call('LREM', mine, -1, ARGV[i]) end
local back, broken = 0, 0
local dead = redis.call('ZRANGEBYSCORE', takers, '-inf', now - tonumber(ARGV[3]))
for _, taker in ipairs(dead) do
  if taker ~= me then
    local n = give_back(ARGV[4] .. taker, seeds)
    if n < 0 then broken = broken + 1 else back = back + n end
    redis.call('ZREM', takers, taker)
  end
end
local out = {back, broken}
for i = 1, tonumber(ARGV[1]) do
  local v = redis.call('RPOPLPUSH', seeds, mine)
  if not v then break end
  out[#out + 1] = v
end
return out
"""
)

# release: a clean close. Drop settled entries, give the rest back, leave.
# KEYS[1] seed list, KEYS[2] takers ZSET, KEYS[3] this taker's taken list.
# ARGV[1] this taker's id, ARGV[2..] settled entries.
# Returns the number of entries given back.
RELEASE_LUA = (
    _LUA_GIVE_BACK
    + """
for i = 2, #ARGV do redis.call('LREM', KEYS[3], -1, ARGV[i]) end
local n = give_back(KEYS[3], KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return n
"""
)

# Scrapy's own default URLLENGTH_LIMIT (the longest URL old browsers took).
URL_LENGTH_LIMIT = 2083
# The only meta key a seed may set (see the module docstring).
SEED_META_KEYS = frozenset({"user"})
# Bytes of JSON a seed's user data may take: it rides in the queued request.
SEED_USER_META_MAX = 1024
# Characters of a refused entry kept in the invalid list (plus its length).
INVALID_ENTRY_KEEP = 4096
_FIELDS = frozenset({"url", "priority", "meta"})


def seed_url_limit(settings: BaseSettings) -> int:
    """The longest seed URL accepted: ``URLLENGTH_LIMIT``, where 0 (which
    switches Scrapy's own URL length check off) keeps :data:`URL_LENGTH_LIMIT`,
    so a seed is always bounded. The spider and ``scrapy seed`` both use it.

    >>> from scrapy.settings import Settings
    >>> seed_url_limit(Settings()), seed_url_limit(Settings({"URLLENGTH_LIMIT": 0}))
    (2083, 2083)
    >>> seed_url_limit(Settings({"URLLENGTH_LIMIT": 100}))
    100
    """
    return settings.getint("URLLENGTH_LIMIT", URL_LENGTH_LIMIT) or URL_LENGTH_LIMIT


class InvalidSeed(ValueError):
    pass


@dataclass
class Seed:
    url: str
    priority: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


def _no_constant(name: str) -> Any:
    raise InvalidSeed(f"not JSON: {name} is not a number")


def parse_seed(raw: bytes | str, max_url_length: int = URL_LENGTH_LIMIT) -> Seed:
    """Parse one entry of the seed list; raises :class:`InvalidSeed` only.

    >>> parse_seed(b"https://a.test/")
    Seed(url='https://a.test/', priority=0, meta={})
    >>> parse_seed('{"url": "http://b.test/x", "priority": 5, "meta": {"user": [1]}}')
    Seed(url='http://b.test/x', priority=5, meta={'user': [1]})
    >>> parse_seed("ftp://c.test/")
    Traceback (most recent call last):
    ...
    extensions.core.seeds.InvalidSeed: scheme must be http or https, not 'ftp'
    >>> parse_seed("{not json")
    Traceback (most recent call last):
    ...
    extensions.core.seeds.InvalidSeed: not JSON: Expecting property name ...
    >>> parse_seed("http://[::1")
    Traceback (most recent call last):
    ...
    extensions.core.seeds.InvalidSeed: bad URL: Invalid IPv6 URL
    >>> parse_seed('{"url": "http://a.test/", "meta": {"frontier_lease": "w:1"}}')
    Traceback (most recent call last):
    ...
    extensions...InvalidSeed: meta key 'frontier_lease' not allowed (allowed: user)
    """
    if len(raw) > 4 * max_url_length + 2 * SEED_USER_META_MAX + 256:
        # Refuse before decoding or parsing anything that large.
        raise InvalidSeed(f"entry too long ({len(raw)} bytes)")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise InvalidSeed("not UTF-8") from None
    text = text.strip()
    seed = _parse_json(text) if text.startswith("{") else Seed(text)
    if len(seed.url) > max_url_length:
        raise InvalidSeed(
            f"URL longer than {max_url_length} characters ({len(seed.url)})"
        )
    if any(c.isspace() for c in seed.url):
        raise InvalidSeed("whitespace in URL")
    try:
        parts = urlsplit(seed.url)
        parts.port  # noqa: B018 - raises ValueError on a port out of range
        # Whatever else Request refuses (it normalizes with w3lib) must be
        # refused here, not when the spider builds the request.
        escaped = Request(seed.url).url
    except ValueError as exc:  # UnicodeError (IDNA) is a ValueError too
        raise InvalidSeed(f"bad URL: {exc}") from None
    if len(escaped) > max_url_length:
        # Scrapy's UrlLengthMiddleware would drop the request silently (and
        # its entry would stay taken): refuse it here, with the reason.
        raise InvalidSeed(
            f"URL longer than {max_url_length} characters once escaped ({len(escaped)})"
        )
    if parts.scheme not in ("http", "https"):
        raise InvalidSeed(f"scheme must be http or https, not {parts.scheme!r}")
    if not parts.hostname:
        raise InvalidSeed("no host")
    return seed


def _parse_json(text: str) -> Seed:
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InvalidSeed(f"not JSON: {exc.msg}") from None
    except RecursionError:
        raise InvalidSeed("not JSON: nested too deep") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("url"), str):
        raise InvalidSeed('a JSON seed needs a "url" string')
    unknown = sorted(set(obj) - _FIELDS)
    if unknown:
        raise InvalidSeed(
            f"unknown field {unknown[0]!r} (allowed: url, priority, meta)"
        )
    priority = obj.get("priority", 0)
    meta = obj.get("meta", {})
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise InvalidSeed('"priority" must be an integer')
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise InvalidSeed(f'"priority" must be in {PRIORITY_MIN}..{PRIORITY_MAX}')
    if not isinstance(meta, dict):
        raise InvalidSeed('"meta" must be an object')
    for key in meta:
        if key not in SEED_META_KEYS:
            allowed = ", ".join(sorted(SEED_META_KEYS))
            raise InvalidSeed(f"meta key {key!r} not allowed (allowed: {allowed})")
    if "user" in meta:
        size = len(json.dumps(meta["user"], separators=(",", ":")).encode())
        if size > SEED_USER_META_MAX:
            raise InvalidSeed(
                f'meta "user" takes {size} bytes (at most {SEED_USER_META_MAX})'
            )
    return Seed(obj["url"].strip(), priority, meta)


def invalid_record(entry: bytes, reason: str) -> str:
    """The JSON line kept in the invalid list for a refused entry: the entry
    as text (cut to :data:`INVALID_ENTRY_KEEP` characters, with its length
    when cut) and why it was refused.

    >>> invalid_record(b"ftp://a.test/", "scheme")
    '{"entry": "ftp://a.test/", "reason": "scheme"}'
    >>> json.loads(invalid_record(b"x" * 5000, "long"))["length"]
    5000
    """
    record: dict[str, Any] = {
        "entry": entry[:INVALID_ENTRY_KEEP].decode("utf-8", "replace"),
        "reason": reason,
    }
    if len(entry) > INVALID_ENTRY_KEEP:
        record["length"] = len(entry)
    return json.dumps(record)


@dataclass
class Taken:
    """What one take brought: seeds with their entries, the invalid entries
    with why (already recorded in the invalid list), and how many entries
    of dead takers it put back on the seed list first."""

    seeds: list[tuple[Seed, str]]
    invalid: list[tuple[bytes, str]]
    given_back: int = 0
    broken: int = 0


async def push_seeds(
    client: aredis.Redis, prefix: str, entries: Sequence[str | bytes]
) -> int:
    """Add ``entries`` to crawl ``prefix``'s seed list as an operator's
    ``redis-cli lpush`` does, the first entry first out (seeds are taken from
    the list's tail), 1,000 a command. Returns how many were pushed."""
    for i in range(0, len(entries), 1000):
        await client.lpush(start_urls(prefix), *entries[i : i + 1000])
    return len(entries)


class SeedList:
    """The seed list of crawl ``prefix``, as taken by worker ``taker`` (a
    unique id per run). ``dead_after_ms``: how long a taker may stay silent
    before its taken seeds go back to the list (see the module docstring)."""

    def __init__(
        self,
        client: aredis.Redis,
        prefix: str,
        max_url_length: int = URL_LENGTH_LIMIT,
        *,
        taker: str,
        dead_after_ms: int,
    ) -> None:
        self.client = client
        self.key = start_urls(prefix)
        self.invalid_key = invalid_start_urls(prefix)
        self.takers_key = seed_takers(prefix)
        self.taken_key = seed_taken(prefix, taker)
        self.taken_prefix = seed_taken(prefix, "")
        self.taker = taker
        self.dead_after_ms = dead_after_ms
        self.max_url_length = max_url_length
        # Entries settled (queued or refused) whose removal from the taken
        # list rides on the next take, beat or release.
        self._settled: list[bytes | str] = []

    def settle(self, entries: list[bytes | str]) -> None:
        """Let ``entries`` leave the taken list (at the next call to Redis)."""
        self._settled.extend(entries)

    async def take(self, n: int) -> Taken:
        """Up to ``n`` seeds, oldest first, each with its entry (for
        ``meta["seed_taken"]``), and the invalid entries with their reasons
        (moved to the invalid list). ``n=0`` is a beat: it settles and gives
        back dead takers' seeds only."""
        settled, self._settled = self._settled, []
        try:
            raw = await script(self.client, TAKE_LUA)(
                keys=[self.key, self.takers_key, self.taken_key],
                args=[n, self.taker, self.dead_after_ms, self.taken_prefix, *settled],
            )
        except BaseException:
            self._settled[:0] = settled  # sent again with the next call
            raise
        taken = Taken([], [], int(raw[0]), int(raw[1]))
        for entry in raw[2:]:
            try:
                seed = parse_seed(entry, self.max_url_length)
            except InvalidSeed as exc:
                taken.invalid.append((entry, str(exc)))
            else:
                # parse_seed decoded it: the entry is UTF-8.
                taken.seeds.append((seed, entry.decode("utf-8")))
        if taken.invalid:
            await self.client.rpush(
                self.invalid_key,
                *(invalid_record(e, why) for e, why in taken.invalid),
            )
            # Recorded: they may leave the taken list.
            self.settle([e for e, _ in taken.invalid])
        return taken

    async def release(self) -> int:
        """A clean close: settle, give back what is left, leave the takers.
        Returns how many entries went back to the seed list."""
        settled, self._settled = self._settled, []
        try:
            return int(
                await script(self.client, RELEASE_LUA)(
                    keys=[self.key, self.takers_key, self.taken_key],
                    args=[self.taker, *settled],
                )
            )
        except BaseException:
            self._settled[:0] = settled
            raise
