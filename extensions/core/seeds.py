"""The seed list: ``redis-cli lpush web:start_urls URL``.

Settings read (by :func:`seed_source` and :func:`seed_meta_keys`):
``REDIS_START_URLS_KEY``, ``REDIS_START_URLS_AS_SET``,
``REDIS_START_URLS_AS_ZSET`` (scrapy-redis's names and meanings) and
``SEED_META_KEYS``.

Where seeds come from (:class:`SeedSource`): the spider's ``redis_key``
(a scrapy-redis spider's attribute; any spider may set it), else
``REDIS_START_URLS_KEY`` (``%(name)s:start_urls``), formatted with the
spider's name; a list of keys is taken in order, the first that holds seeds
first, as scrapy-redis's list ``redis_key`` does. A key is a LIST (entries
taken oldest first: pushed at the head, taken from the tail), a SET
(``REDIS_START_URLS_AS_SET``: in no order) or a ZSET
(``REDIS_START_URLS_AS_ZSET``: highest score first); a key of another type
than the settings say is refused with the setting to change.

An entry is a URL or a JSON object ``{"url": ..., "priority": ...,
"meta": {...}, "dont_filter": ...}``, which may also have scrapy-redis's
``method`` and form fields (:func:`parse_seed`). Each entry is judged on
its own: whatever it holds (bytes that are not UTF-8, a 100 KB string, JSON
that is not an object, fields of the wrong type, a URL that ``Request``
refuses), a bad entry is logged, counted and moved with its reason to
``web:start_urls:invalid`` (the first key's ``:invalid``), and never costs
the entries taken with it.

What a seed may carry is deliberately small, because whoever can write the
seed list is not necessarily trusted with the workers:

* ``url``: an http(s) URL of at most ``max_url_length`` characters (the
  spider passes Scrapy's ``URLLENGTH_LIMIT``, 2083 by default);
* ``priority``: an integer in the frontier's range (-32768..32767);
* ``meta``: the operator's own JSON data, at most
  :data:`SEED_USER_META_MAX` bytes, carried on the seed request as
  ``request.meta["user"]`` (the key ``user`` itself, and every other key
  folded in under it: scrapy-redis's ``{"meta": {"job-id": ...}}`` arrives
  as ``request.meta["user"]["job-id"]``). Scrapy and webcrawl read control
  keys from ``meta`` (``proxy``, ``download_maxsize``,
  ``dont_obey_robotstxt``, ``frontier_lease``...: :data:`CONTROL_META`): a
  seed naming one is refused, not silently trimmed, unless
  ``SEED_META_KEYS`` lists it (then it, like any key listed there, is set
  on ``request.meta`` itself); webcrawl's own keys never;
* ``dont_filter``: true to crawl the URL again although the crawl has seen
  it (re-pushing it alone is dropped by the dupefilter, with a log line);
* ``method`` and any other field (strings): scrapy-redis's form request,
  the fields as form data (in the query of a GET, the body of a POST).

Hand-over (a reliable queue): a take moves the entries atomically into the
worker's taken list ``web:{web:start_urls}:taken:<worker>`` (same cluster
slot as the seed key, :func:`extensions.keys.seed_taken`); each seed request
carries its taken entry in ``meta["seed_taken"]``, and the entry leaves the
taken list only once the scheduler has queued the request in the frontier
or it was refused before it (signal :data:`extensions.signals.seeds_settled`;
the removal rides on the worker's next take or beat). An invalid entry
leaves it once its record is in the invalid list. Every take and every beat
(each ``heartbeat`` seconds) records the worker in
``web:{web:start_urls}:takers``; a worker silent for ``dead_after`` (three
heartbeats, the frontier's rule) is dead, and the next take of a live worker
puts its taken entries back where they came from: at the taking end of a
list, into a set, into a zset with the score they had (a zset entry is
taken as ``<score>\\n<entry>`` to keep it). A clean close puts back what is
left (seeds taken but not handed to the scheduler, e.g. a start batch the
engine never consumed). So a worker killed at any point loses no seed; one
killed after its scheduler queued a seed but before the entry left costs a
duplicate, which the dupefilter drops.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from redis.exceptions import ResponseError
from scrapy import FormRequest, Request

from extensions.connection.scripts import LUA_NOW_MS, script
from extensions.core.frontier.lua import PRIORITY_MAX, PRIORITY_MIN
from extensions.keys import invalid_seeds, seed_taken, seed_takers, start_urls
from extensions.meta import SCRAPY_META, SEED_TAKEN, WEBCRAWL_META

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    import redis.asyncio as aredis
    from scrapy.settings import BaseSettings

# The Redis types a seed key may have: REDIS_START_URLS_AS_SET / AS_ZSET.
KINDS = ("list", "set", "zset")

# Move a taker's taken entries back where they came from, the oldest taken
# last (a list's taking end: taken first again; a zset: with the score it
# was taken with, the entry kept as "<score>\n<entry>"). Returns how many
# moved; a taken key of the wrong type is left alone (-1): it is no seed
# list of ours.
_LUA_GIVE_BACK = """
local function give_back(taken, seeds, kind)
  local t = redis.call('TYPE', taken)['ok']
  if t == 'none' then return 0 end
  if t ~= 'list' then return -1 end
  -- The taken list holds the newest at its head: pushed in that order, the
  -- oldest ends at the seed list's tail. (No LMOVE: Redis < 6.2.)
  local entries = redis.call('LRANGE', taken, 0, -1)
  for _, v in ipairs(entries) do
    if kind == 'set' then
      redis.call('SADD', seeds, v)
    elseif kind == 'zset' then
      local score, entry = string.match(v, '^([^\\n]*)\\n(.*)$')
      if not tonumber(score) then score, entry = '0', v end
      redis.call('ZADD', seeds, score, entry)
    else
      redis.call('RPUSH', seeds, v)
    end
  end
  redis.call('DEL', taken)
  return #entries
end
-- A seed key of another type than the settings say: an error naming both.
local function wrong_kind(seeds, kind)
  local t = redis.call('TYPE', seeds)['ok']
  if t ~= 'none' and t ~= kind then
    return redis.error_reply('WRONGKIND ' .. t .. ' ' .. kind)
  end
end
"""

# take: beat, drop settled entries from this taker's taken list, give back
# the taken entries of dead takers, then move up to n seeds from the seed key
# into this taker's taken list: oldest first from a list, any from a set
# (SPOP), highest score first from a zset (ZPOPMAX, kept as
# "<score>\n<entry>").
# KEYS[1] seed key, KEYS[2] takers ZSET, KEYS[3] this taker's taken list.
# ARGV[1] n, ARGV[2] this taker's id, ARGV[3] dead after (ms), ARGV[4] the
# taken-list key prefix, ARGV[5] the seed key's kind (list, set, zset),
# ARGV[6..] settled entries. A dead taker's taken list is ARGV[4] .. its id,
# built here because the dead are known only inside the script; every taken
# list is tagged by the slot of KEYS[1] (extensions.keys.seed_taken).
# Returns {entries given back, broken taken keys skipped, taken entries...},
# or the error "WRONGKIND <type> <kind>".
TAKE_LUA = (
    LUA_NOW_MS
    + _LUA_GIVE_BACK
    + """
local seeds, takers, mine = KEYS[1], KEYS[2], KEYS[3]
local me, kind = ARGV[2], ARGV[5]
local err = wrong_kind(seeds, kind)
if err then return err end
local now = now_ms()
redis.call('ZADD', takers, now, me)
for i = 6, #ARGV do redis.call('LREM', mine, -1, ARGV[i]) end
local back, broken = 0, 0
local dead = redis.call('ZRANGEBYSCORE', takers, '-inf', now - tonumber(ARGV[3]))
for _, taker in ipairs(dead) do
  if taker ~= me then
    local n = give_back(ARGV[4] .. taker, seeds, kind)
    if n < 0 then broken = broken + 1 else back = back + n end
    redis.call('ZREM', takers, taker)
  end
end
local out = {back, broken}
local n = tonumber(ARGV[1])
if kind == 'list' then
  for i = 1, n do
    local v = redis.call('RPOPLPUSH', seeds, mine)
    if not v then break end
    out[#out + 1] = v
  end
elseif n > 0 and kind == 'set' then
  for _, v in ipairs(redis.call('SPOP', seeds, n)) do
    redis.call('LPUSH', mine, v)
    out[#out + 1] = v
  end
elseif n > 0 then
  local popped = redis.call('ZPOPMAX', seeds, n)
  for i = 1, #popped, 2 do
    local v = popped[i + 1] .. '\\n' .. popped[i]
    redis.call('LPUSH', mine, v)
    out[#out + 1] = v
  end
end
return out
"""
)

# release: a clean close. Drop settled entries, give the rest back, leave.
# KEYS[1] seed key, KEYS[2] takers ZSET, KEYS[3] this taker's taken list.
# ARGV[1] this taker's id, ARGV[2] the seed key's kind, ARGV[3..] settled
# entries. Returns the number of entries given back.
RELEASE_LUA = (
    _LUA_GIVE_BACK
    + """
local err = wrong_kind(KEYS[1], ARGV[2])
if err then return err end
for i = 3, #ARGV do redis.call('LREM', KEYS[3], -1, ARGV[i]) end
local n = give_back(KEYS[3], KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
return n
"""
)


class SeedKeyError(ValueError):
    """A seed key holds another Redis type than the settings say."""


@dataclass(frozen=True)
class SeedSource:
    """Where a crawl's seeds are: its seed keys, in the order they are taken
    from, and their Redis type (:data:`KINDS`)."""

    keys: tuple[str, ...]
    kind: str = "list"

    @classmethod
    def of_crawl(cls, prefix: str) -> SeedSource:
        """The default: the LIST ``<prefix>:start_urls``."""
        return cls((start_urls(prefix),))

    def setting(self) -> str:
        """The setting that makes seed keys of this kind."""
        return {
            "set": "REDIS_START_URLS_AS_SET=True",
            "zset": "REDIS_START_URLS_AS_ZSET=True",
        }.get(self.kind, "neither REDIS_START_URLS_AS_SET nor REDIS_START_URLS_AS_ZSET")


def seed_source(spider: Any, settings: BaseSettings) -> SeedSource:
    """The seed keys of ``spider`` (an instance or its class): its
    ``redis_key`` (a string or a list, scrapy-redis's attribute), else
    ``REDIS_START_URLS_KEY``, each ``%``-formatted with the spider's
    ``name`` as scrapy-redis does, stripped, without repeats; their type
    from ``REDIS_START_URLS_AS_SET`` / ``AS_ZSET``. Raises ``ValueError``
    for an empty key.

    >>> from scrapy.settings import Settings
    >>> class Shop:
    ...     name = "shop"
    ...     redis_key = ["%(name)s:hot", "%(name)s:urls", "shop:hot"]
    >>> seed_source(Shop, Settings({"REDIS_START_URLS_AS_ZSET": True}))
    SeedSource(keys=('shop:hot', 'shop:urls'), kind='zset')
    >>> class Web:
    ...     name = "web"
    >>> seed_source(Web, Settings())
    SeedSource(keys=('web:start_urls',), kind='list')
    """
    name = str(getattr(spider, "name", None) or "")
    configured = getattr(spider, "redis_key", None) or settings.get(
        "REDIS_START_URLS_KEY"
    )
    templates = [configured] if isinstance(configured, str) else list(configured or [])
    keys: list[str] = []
    for template in templates or ["%(name)s:start_urls"]:
        key = str(template)
        if "%(" in key:
            key = key % {"name": name}
        key = key.strip()
        if not key:
            raise ValueError("redis_key / REDIS_START_URLS_KEY names an empty key")
        if key not in keys:
            keys.append(key)
    kind = "list"
    if settings.getbool("REDIS_START_URLS_AS_SET"):
        kind = "set"
    elif settings.getbool("REDIS_START_URLS_AS_ZSET"):
        kind = "zset"
    return SeedSource(tuple(keys), kind)


def seed_meta_keys(settings: BaseSettings) -> frozenset[str]:
    """``SEED_META_KEYS``: the ``meta`` keys a seed may set on its request
    itself (control keys included: the operator vouches for the seed list)."""
    return frozenset(settings.getlist("SEED_META_KEYS"))


def meta_key_problems(keys: Iterable[str]) -> list[str]:
    """``SEED_META_KEYS`` entries no seed may set: webcrawl's own state.

    >>> meta_key_problems(["cookiejar", "frontier_lease"])
    ["SEED_META_KEYS names 'frontier_lease', webcrawl's own state: no seed may set it"]
    """
    return [
        f"SEED_META_KEYS names {key!r}, webcrawl's own state: no seed may set it"
        for key in keys
        if key in WEBCRAWL_META or key == USER_META
    ]


# Scrapy's own default URLLENGTH_LIMIT (the longest URL old browsers took).
URL_LENGTH_LIMIT = 2083
# The meta key of the operator's own data (see the module docstring).
USER_META = "user"
# Bytes of JSON a seed's meta may take: it rides in the queued request.
SEED_USER_META_MAX = 1024
# Characters of a refused entry kept in the invalid list (plus its length).
INVALID_ENTRY_KEEP = 4096
# Keys of a seed's meta that Scrapy or webcrawl read: refused unless
# SEED_META_KEYS lists them (webcrawl's own never).
CONTROL_META = SCRAPY_META | WEBCRAWL_META
# The fields a JSON seed may have besides form data (scrapy-redis turns
# every other field into form data).
_FIELDS = ("url", "priority", "meta", "dont_filter", "method")
# An HTTP method: a token of letters (scrapy-redis upper-cases it).
_METHOD = re.compile(r"[A-Za-z]{1,16}")


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
    dont_filter: bool = False
    method: str = "GET"
    formdata: dict[str, str | list[str]] | None = None

    def request(self, taken: str, **kwargs: Any) -> Request:
        """The seed's request, carrying its taken entry (``meta["seed_taken"]``)
        for the hand-over; ``kwargs`` go to the request (a callback, an
        errback). A form request (``method`` other than GET, or form data)
        as scrapy-redis makes it.

        >>> r = Seed("http://a.test/", 5, {"user": 1}).request("e")
        >>> r.url, r.priority, r.meta, r.dont_filter
        ('http://a.test/', 5, {'user': 1, 'seed_taken': 'e'}, False)
        >>> r = Seed("http://a.test/", formdata={"q": "x"}).request("e")
        >>> type(r).__name__, r.url, r.method
        ('FormRequest', 'http://a.test/?q=x', 'GET')
        """
        options: dict[str, Any] = {
            "priority": self.priority,
            "meta": {**self.meta, SEED_TAKEN: taken},
            "dont_filter": self.dont_filter,
            **kwargs,
        }
        if self.method == "GET" and not self.formdata:
            return Request(self.url, **options)
        return FormRequest(
            self.url, method=self.method, formdata=self.formdata or None, **options
        )


def _no_constant(name: str) -> Any:
    raise InvalidSeed(f"not JSON: {name} is not a number")


def parse_seed(
    raw: bytes | str,
    max_url_length: int = URL_LENGTH_LIMIT,
    meta_keys: frozenset[str] = frozenset(),
) -> Seed:
    """Parse one entry of the seed list; raises :class:`InvalidSeed` only.
    ``meta_keys``: ``SEED_META_KEYS`` (:func:`seed_meta_keys`).

    >>> parse_seed(b"https://a.test/")  # doctest: +ELLIPSIS
    Seed(url='https://a.test/', priority=0, meta={}, dont_filter=False, ...)
    >>> seed = parse_seed('{"url": "http://b.test/", "priority": 5, "meta": {"a": 1}}')
    >>> seed.priority, seed.meta
    (5, {'user': {'a': 1}})
    >>> seed = parse_seed('{"url": "http://b.test/", "meta": {"job": "7"}, "k": "v"}')
    >>> seed.meta, seed.formdata
    ({'user': {'job': '7'}}, {'k': 'v'})
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
    >>> parse_seed('{"url": "http://a.test/", "meta": {"proxy": "http://p.test"}}')
    Traceback (most recent call last):
    ...
    extensions...InvalidSeed: meta key 'proxy' is one Scrapy or webcrawl reads: ...
    >>> parse_seed('{"url": "http://a.test/", "meta": {"proxy": "http://p.test"}}',
    ...            meta_keys=frozenset({"proxy"})).meta
    {'proxy': 'http://p.test'}
    """
    if len(raw) > 4 * max_url_length + 2 * SEED_USER_META_MAX + 256:
        # Refuse before decoding or parsing anything that large.
        raise InvalidSeed(f"entry too long ({len(raw)} bytes)")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise InvalidSeed("not UTF-8") from None
    text = text.strip()
    seed = _parse_json(text, meta_keys) if text.startswith("{") else Seed(text)
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
        escaped = seed.request("").url
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


def _parse_json(text: str, meta_keys: frozenset[str]) -> Seed:
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InvalidSeed(f"not JSON: {exc.msg}") from None
    except RecursionError:
        raise InvalidSeed("not JSON: nested too deep") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("url"), str):
        raise InvalidSeed('a JSON seed needs a "url" string')
    priority = obj.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise InvalidSeed('"priority" must be an integer')
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise InvalidSeed(f'"priority" must be in {PRIORITY_MIN}..{PRIORITY_MAX}')
    dont_filter = obj.get("dont_filter", False)
    if not isinstance(dont_filter, bool):
        raise InvalidSeed('"dont_filter" must be true or false')
    method = obj.get("method", "GET")
    if not isinstance(method, str) or not _METHOD.fullmatch(method):
        raise InvalidSeed('"method" must be an HTTP method such as "POST"')
    formdata: dict[str, str | list[str]] = {}
    for name, value in obj.items():
        if name in _FIELDS:
            continue
        # scrapy-redis's shape: every other field is form data.
        if not (
            isinstance(value, str)
            or (isinstance(value, list) and all(isinstance(v, str) for v in value))
        ):
            allowed = ", ".join(_FIELDS)
            raise InvalidSeed(
                f"field {name!r} is not one of {allowed}, nor form data (a "
                "string or a list of strings)"
            )
        formdata[name] = value
    meta = _seed_meta(obj.get("meta", {}), meta_keys)
    return Seed(
        obj["url"].strip(),
        priority,
        meta,
        dont_filter,
        method.upper(),
        formdata or None,
    )


def _seed_meta(meta: Any, meta_keys: frozenset[str]) -> dict[str, Any]:
    """A seed's ``meta`` as its request carries it: the keys
    ``SEED_META_KEYS`` lists as they are, every other key under ``user``
    (the key ``user`` itself merged in), a control key refused."""
    if not isinstance(meta, dict):
        raise InvalidSeed('"meta" must be an object')
    out: dict[str, Any] = {}
    user: dict[str, Any] = {}
    for key, value in meta.items():
        if key in meta_keys and key not in WEBCRAWL_META and key != USER_META:
            out[key] = value
        elif key in CONTROL_META:
            raise InvalidSeed(
                f"meta key {key!r} is one Scrapy or webcrawl reads: not allowed "
                "(a key SEED_META_KEYS lists is; webcrawl's own never)"
            )
        elif key != USER_META:
            user[key] = value
    if USER_META in meta:
        if user and not isinstance(meta[USER_META], dict):
            raise InvalidSeed('meta "user" must be an object beside other keys')
        if user:
            both = sorted(set(user) & set(meta[USER_META]))
            if both:
                raise InvalidSeed(f'meta key {both[0]!r} given twice (and in "user")')
            user = {**meta[USER_META], **user}
        else:
            out[USER_META] = meta[USER_META]
    if user:
        out[USER_META] = user
    size = len(json.dumps(out, separators=(",", ":")).encode())
    if size > SEED_USER_META_MAX:
        raise InvalidSeed(f'"meta" takes {size} bytes (at most {SEED_USER_META_MAX})')
    return out


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
    """What one take brought: seeds with their taken entries, the invalid
    entries with why (already recorded in the invalid list), and how many
    entries of dead takers it put back on the seed key first."""

    seeds: list[tuple[Seed, str]]
    invalid: list[tuple[bytes, str]]
    given_back: int = 0
    broken: int = 0
    #: With a ``maker``: the requests it made (each entry's last carries
    #: the entry in ``meta["seed_taken"]``).
    made: list[Request] = field(default_factory=list)


def _entry(taken: bytes, kind: str) -> bytes:
    """The seed entry of a taken entry (a zset's keeps its score in front).

    >>> _entry(b"7\\nhttp://a.test/", "zset"), _entry(b"http://a.test/", "list")
    (b'http://a.test/', b'http://a.test/')
    """
    return taken.split(b"\n", 1)[-1] if kind == "zset" else taken


async def push_seeds(
    client: aredis.Redis,
    prefix: str,
    entries: Sequence[str | bytes],
    source: SeedSource | None = None,
) -> int:
    """Add ``entries`` to crawl ``prefix``'s seed key (``source``'s first;
    default ``<prefix>:start_urls``) as an operator would: ``lpush`` on a
    list, so that the first entry is taken first; ``sadd`` on a set; ``zadd``
    on a zset, scored by the entry's priority (a plain URL: 0), which the
    take reads highest first. 1,000 entries a command. Returns how many were
    pushed."""
    source = source or SeedSource.of_crawl(prefix)
    key = source.keys[0]
    for i in range(0, len(entries), 1000):
        chunk = entries[i : i + 1000]
        if source.kind == "set":
            await client.sadd(key, *chunk)
        elif source.kind == "zset":
            scored = {_bytes(e): _priority_of(e) for e in chunk}
            await client.zadd(key, scored)
        else:
            await client.lpush(key, *chunk)
    return len(entries)


def _bytes(entry: str | bytes) -> bytes:
    return entry.encode() if isinstance(entry, str) else entry


def _priority_of(entry: str | bytes) -> int:
    """The priority of a seed entry (0 when it has none or is invalid:
    the workers judge it)."""
    try:
        return parse_seed(entry).priority
    except InvalidSeed:
        return 0


async def seed_counts(client: aredis.Redis, source: SeedSource) -> tuple[int, int]:
    """(entries waiting in the seed keys, entries in the invalid list), each
    key counted as what it is (a key of the wrong type is counted too: the
    workers refuse it, saying so)."""
    count = {"list": client.llen, "set": client.scard, "zset": client.zcard}
    pending = 0
    for key in source.keys:
        kind = await client.type(key)
        counter = count.get(kind.decode() if isinstance(kind, bytes) else kind)
        if counter is not None:
            pending += int(await counter(key))
    return pending, int(await client.llen(invalid_seeds(source.keys[0])))


@dataclass
class _Key:
    """One seed key with its takers registry and this taker's taken list."""

    key: str
    takers: str
    taken: str
    taken_prefix: str


class SeedList:
    """The seeds of crawl ``prefix``, as taken by worker ``taker`` (a unique
    id per run), from ``source``'s keys (default: the LIST
    ``<prefix>:start_urls``). ``dead_after_ms``: how long a taker may stay
    silent before its taken seeds go back (see the module docstring).
    ``meta_keys``: ``SEED_META_KEYS``. ``maker``: a function that makes the
    seed requests of an entry itself (a scrapy-redis spider's
    ``make_request_from_data``, :mod:`extensions.extensions.redismixin`),
    instead of :func:`parse_seed`."""

    def __init__(
        self,
        client: aredis.Redis,
        prefix: str,
        max_url_length: int = URL_LENGTH_LIMIT,
        *,
        taker: str,
        dead_after_ms: int,
        source: SeedSource | None = None,
        meta_keys: frozenset[str] = frozenset(),
        maker: Callable[[bytes], list[Request]] | None = None,
    ) -> None:
        self.client = client
        self.maker = maker
        self.source = source or SeedSource.of_crawl(prefix)
        if self.source.kind not in KINDS:
            raise ValueError(f"a seed key is a {' or '.join(KINDS)}")
        self.kind = self.source.kind
        self._keys = [
            _Key(
                key,
                seed_takers(prefix, key),
                seed_taken(prefix, taker, key),
                seed_taken(prefix, "", key),
            )
            for key in self.source.keys
        ]
        first = self._keys[0]
        self.key = first.key
        self.invalid_key = invalid_seeds(first.key)
        self.takers_key = first.takers
        self.taken_key = first.taken
        self.taken_prefix = first.taken_prefix
        self.taker = taker
        self.dead_after_ms = dead_after_ms
        self.max_url_length = max_url_length
        self.meta_keys = meta_keys
        # Entries settled (queued or refused) whose removal from the taken
        # list rides on the next take, beat or release. With several keys
        # each goes to every taken list: removing it where it is not is a
        # no-op, and the same entry taken from two keys is the same seed.
        self._settled: list[bytes | str] = []
        # Entries taken from a key before a later key's take failed: in the
        # taken list, handed out with the next take.
        self._held: list[bytes] = []

    def settle(self, entries: list[bytes | str]) -> None:
        """Let ``entries`` leave the taken list (at the next call to Redis)."""
        self._settled.extend(entries)

    def _wrong_kind(self, key: str, exc: ResponseError) -> SeedKeyError:
        found = str(exc).split()[1] if str(exc).startswith("WRONGKIND") else "?"
        return SeedKeyError(
            f"seed key {key} is a {found}, not a {self.kind}: set "
            f"{SeedSource((key,), found).setting()} (scrapy-redis's settings) "
            "or push to another key"
        )

    async def take(self, n: int) -> Taken:
        """Up to ``n`` seeds, from the first key that holds some first, each
        with its taken entry (for ``meta["seed_taken"]``), and the invalid
        entries with their reasons (moved to the invalid list). ``n=0`` is a
        beat: it settles and gives back dead takers' seeds only (every take
        beats on every key, so a key not reached is not taken for dead)."""
        settled, self._settled = self._settled, []
        taken = Taken([], [])
        raw: list[bytes] = []
        try:
            for k in self._keys:
                try:
                    reply = await script(self.client, TAKE_LUA)(
                        keys=[k.key, k.takers, k.taken],
                        args=[
                            max(0, n - len(raw)),
                            self.taker,
                            self.dead_after_ms,
                            k.taken_prefix,
                            self.kind,
                            *settled,
                        ],
                    )
                except ResponseError as exc:
                    if "WRONGKIND" in str(exc):
                        raise self._wrong_kind(k.key, exc) from None
                    raise
                taken.given_back += int(reply[0])
                taken.broken += int(reply[1])
                raw += reply[2:]
        except BaseException:
            self._settled[:0] = settled  # sent again with the next call
            self._held += raw
            raise
        raw, self._held = [*self._held, *raw], []
        for entry in raw:
            if self.maker is not None:
                self._make(entry, taken)
                continue
            try:
                seed = parse_seed(
                    _entry(entry, self.kind), self.max_url_length, self.meta_keys
                )
            except InvalidSeed as exc:
                taken.invalid.append((entry, str(exc)))
            else:
                # parse_seed decoded it: the entry is UTF-8 (a score too).
                taken.seeds.append((seed, entry.decode("utf-8")))
        if taken.invalid:
            kind = self.kind
            records = [invalid_record(_entry(e, kind), w) for e, w in taken.invalid]
            await self.client.rpush(invalid_seeds(self.key), *records)
            # Recorded: they may leave the taken list.
            self.settle([e for e, _ in taken.invalid])
        return taken

    def _make(self, entry: bytes, taken: Taken) -> None:
        """The requests ``maker`` makes of one entry; the last carries the
        entry (the scheduler queues a worker's requests in the order made,
        so the entry leaves only once all of them are queued)."""
        try:
            made = self.maker(_entry(entry, self.kind)) if self.maker else []
            text = entry.decode("utf-8")
        except Exception as exc:
            # data from outside: one entry it fails on must not cost the rest.
            taken.invalid.append((entry, f"{type(exc).__name__}: {exc}"[:500]))
            return
        if not made:
            taken.invalid.append((entry, "make_request_from_data made no request"))
            return
        made[-1].meta[SEED_TAKEN] = text
        taken.made += made

    async def release(self) -> int:
        """A clean close: settle, give back what is left, leave the takers.
        Returns how many entries went back to the seed keys."""
        settled, self._settled = self._settled, []
        back = 0
        try:
            for k in self._keys:
                back += int(
                    await script(self.client, RELEASE_LUA)(
                        keys=[k.key, k.takers, k.taken],
                        args=[self.taker, self.kind, *settled],
                    )
                )
        except BaseException:
            self._settled[:0] = settled
            raise
        return back
