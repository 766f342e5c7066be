"""The seed list: ``redis-cli lpush web:start_urls URL``.

An entry is a URL or a JSON object ``{"url": ..., "priority": ..., "meta":
{...}}``. Entries are taken oldest first (the list is pushed at the head and
taken from the tail). An entry that cannot be used is logged, counted and
moved, with the reason, to ``web:start_urls:invalid``, so nothing is silently
dropped.

Known window: a seed is out of the list from the moment a worker takes it
until the scheduler's next push (milliseconds); a worker killed inside that
window loses it, and it must be pushed again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from extensions.keys import invalid_start_urls, start_urls
from extensions.scripts import script

if TYPE_CHECKING:
    import redis.asyncio as aredis

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


class InvalidSeed(ValueError):
    pass


@dataclass
class Seed:
    url: str
    priority: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


def parse_seed(raw: bytes | str) -> Seed:
    """Parse one entry of the seed list.

    >>> parse_seed(b"https://a.test/")
    Seed(url='https://a.test/', priority=0, meta={})
    >>> parse_seed('{"url": "http://b.test/x", "priority": 5, "meta": {"k": 1}}')
    Seed(url='http://b.test/x', priority=5, meta={'k': 1})
    >>> parse_seed("ftp://c.test/")
    Traceback (most recent call last):
    ...
    extensions.seeds.InvalidSeed: scheme must be http or https, not 'ftp'
    >>> parse_seed("{not json")
    Traceback (most recent call last):
    ...
    extensions.seeds.InvalidSeed: not JSON: Expecting property name ...
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise InvalidSeed("not UTF-8") from None
    text = text.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidSeed(f"not JSON: {exc.msg}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("url"), str):
            raise InvalidSeed('a JSON seed needs a "url" string')
        priority = obj.get("priority", 0)
        meta = obj.get("meta", {})
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise InvalidSeed('"priority" must be an integer')
        if not isinstance(meta, dict):
            raise InvalidSeed('"meta" must be an object')
        seed = Seed(obj["url"].strip(), priority, meta)
    else:
        seed = Seed(text)
    parts = urlsplit(seed.url)
    if parts.scheme not in ("http", "https"):
        raise InvalidSeed(f"scheme must be http or https, not {parts.scheme!r}")
    if not parts.hostname:
        raise InvalidSeed("no host")
    if any(c.isspace() for c in seed.url):
        raise InvalidSeed("whitespace in URL")
    return seed


class SeedList:
    """Reads the seed list of crawl ``prefix``."""

    def __init__(self, client: aredis.Redis, prefix: str) -> None:
        self.client = client
        self.key = start_urls(prefix)
        self.invalid_key = invalid_start_urls(prefix)

    async def take(self, n: int) -> tuple[list[Seed], list[tuple[bytes, str]]]:
        """Up to ``n`` seeds, oldest first, and the invalid entries with their
        reasons (already moved to the invalid list)."""
        raw = await script(self.client, TAKE_LUA)(keys=[self.key], args=[n])
        seeds: list[Seed] = []
        invalid: list[tuple[bytes, str]] = []
        for entry in raw:
            try:
                seeds.append(parse_seed(entry))
            except InvalidSeed as exc:
                invalid.append((entry, str(exc)))
        if invalid:
            await self.client.rpush(
                self.invalid_key,
                *(
                    json.dumps({"entry": e.decode("utf-8", "replace"), "reason": why})
                    for e, why in invalid
                ),
            )
        return seeds, invalid
