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

Known window: a seed is out of the list from the moment a worker takes it
until the scheduler's next push (milliseconds); a worker killed inside that
window loses it, and it must be pushed again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request

from extensions.frontier import PRIORITY_MAX, PRIORITY_MIN
from extensions.keys import invalid_start_urls, start_urls
from extensions.scripts import script

if TYPE_CHECKING:
    import redis.asyncio as aredis
    from scrapy.settings import BaseSettings

# take: pop up to n seeds from the tail of the list.
# KEYS[1] seed list. ARGV[1] n. Returns the entries, oldest first.
TAKE_LUA = """
local n = tonumber(ARGV[1])
local out = {}
for i = 1, n do
  local v = redis.call('RPOP', KEYS[1])
  if not v then break end
  out[#out + 1] = v
end
return out
"""

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
    extensions.seeds.InvalidSeed: scheme must be http or https, not 'ftp'
    >>> parse_seed("{not json")
    Traceback (most recent call last):
    ...
    extensions.seeds.InvalidSeed: not JSON: Expecting property name ...
    >>> parse_seed("http://[::1")
    Traceback (most recent call last):
    ...
    extensions.seeds.InvalidSeed: bad URL: Invalid IPv6 URL
    >>> parse_seed('{"url": "http://a.test/", "meta": {"frontier_lease": "w:1"}}')
    Traceback (most recent call last):
    ...
    extensions.seeds.InvalidSeed: meta key 'frontier_lease' not allowed (allowed: user)
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
        Request(seed.url)
    except ValueError as exc:  # UnicodeError (IDNA) is a ValueError too
        raise InvalidSeed(f"bad URL: {exc}") from None
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


class SeedList:
    """Reads the seed list of crawl ``prefix``."""

    def __init__(
        self,
        client: aredis.Redis,
        prefix: str,
        max_url_length: int = URL_LENGTH_LIMIT,
    ) -> None:
        self.client = client
        self.key = start_urls(prefix)
        self.invalid_key = invalid_start_urls(prefix)
        self.max_url_length = max_url_length

    async def take(self, n: int) -> tuple[list[Seed], list[tuple[bytes, str]]]:
        """Up to ``n`` seeds, oldest first, and the invalid entries with their
        reasons (already moved to the invalid list)."""
        raw = await script(self.client, TAKE_LUA)(keys=[self.key], args=[n])
        seeds: list[Seed] = []
        invalid: list[tuple[bytes, str]] = []
        for entry in raw:
            try:
                seeds.append(parse_seed(entry, self.max_url_length))
            except InvalidSeed as exc:
                invalid.append((entry, str(exc)))
        if invalid:
            await self.client.rpush(
                self.invalid_key, *(invalid_record(e, why) for e, why in invalid)
            )
        return seeds, invalid
