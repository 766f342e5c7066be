"""Per-host settings: Scrapy's ``DOWNLOAD_SLOTS`` and operators' overrides.

Two sources, by host name (Scrapy's slot key, the bare hostname; every host
key of that name, any scheme or port, takes them), the first that sets a
value wins:

1. an operator's override (``scrapy hosts set HOST --delay S --concurrency N
   --max-pages N``, :class:`HostOverrides`): kept in Redis, in the overrides
   HASH of every frontier partition (so the lease script and the download
   lock read it in their own slot, at once), written only by
   :data:`~extensions.core.frontier.lua.SET_OVERRIDE_LUA`; it lasts until
   ``scrapy hosts reset HOST`` (or ``scrapy reset``);
2. the worker's ``DOWNLOAD_SLOTS`` entry of the host (:func:`download_slots`):
   its ``delay``, ``concurrency`` and ``randomize_delay``;

else ``DOWNLOAD_DELAY``, a concurrency of 1 and ``HOST_MAX_PAGES``. A host's
delay replaces ``DOWNLOAD_DELAY`` for it (it may be lower); a robots.txt
``Crawl-delay``, a back-off and the AutoThrottle delay still apply above it
(the spacing rule, ``docs/host-record.md``). Values the worker itself uses
(``max_pages``, for the trap filter's budget) come from
:class:`OverridesCache`, read again once it is a heartbeat old.

Settings read: by :func:`schedule_terms` only (the lease script's
politeness terms): ``DOWNLOAD_DELAY``, ``DOWNLOAD_SLOTS``,
``POLITENESS_ENABLED``, ``POLITENESS_KEY``, ``IP_DOWNLOAD_DELAY``,
``AUTOTHROTTLE_ENABLED``, ``AUTOTHROTTLE_START_DELAY``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from w3lib.url import safe_url_string

from extensions.connection import TRANSIENT_REDIS_ERRORS
from extensions.connection.scripts import script
from extensions.core.frontier.lua import (
    OVERRIDE_CONCURRENCY,
    OVERRIDE_DELAY,
    OVERRIDE_FIELDS,
    OVERRIDE_MAX_PAGES,
    SET_OVERRIDE_LUA,
)
from extensions.keys import FrontierKeys
from extensions.utils.hosts import host_key, hostname_of, politeness_keys

if TYPE_CHECKING:
    from collections.abc import Mapping

    import redis.asyncio as aredis
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)


def host_name(text: str) -> str:
    """The host name an operator means by a host name, a host key or a URL
    (lowercased, an international name in its ASCII form, as requests carry
    it).

    >>> host_name("Example.COM"), host_name("https://example.com:8443/a")
    ('example.com', 'example.com')
    >>> host_name("bücher.de")
    'xn--bcher-kva.de'
    """
    text = text.strip()
    url = text if "://" in text else "http://" + text
    try:
        name = hostname_of(host_key(safe_url_string(url)))
    except ValueError:
        name = ""
    if not name:
        raise ValueError(f"not a host name: {text!r}")
    return name


@dataclass(frozen=True)
class HostConf:
    """One host's own settings; None: not set here."""

    delay: float | None = None  # seconds
    concurrency: int | None = None
    max_pages: int | None = None
    randomize: bool = False  # DOWNLOAD_SLOTS' randomize_delay

    def as_dict(self) -> dict[str, Any]:
        """The set values, by the override's field names.

        >>> HostConf(delay=5.0, max_pages=10).as_dict()
        {'delay': 5.0, 'max_pages': 10}
        """
        return {
            k: v
            for k, v in (
                (OVERRIDE_DELAY, self.delay),
                (OVERRIDE_CONCURRENCY, self.concurrency),
                (OVERRIDE_MAX_PAGES, self.max_pages),
            )
            if v is not None
        }


def _number(value: Any, kind: type, low: float) -> Any:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = kind(value)
    except (TypeError, ValueError):
        return None
    return number if number >= low else None


def conf_of(data: Mapping[str, Any]) -> HostConf:
    """A :class:`HostConf` from an override's JSON object or a
    ``DOWNLOAD_SLOTS`` entry; a value of the wrong type or range is ignored.

    >>> conf_of({"delay": 2, "concurrency": 3, "randomize_delay": True})
    HostConf(delay=2.0, concurrency=3, max_pages=None, randomize=True)
    >>> conf_of({"delay": -1, "concurrency": 0})
    HostConf(delay=None, concurrency=None, max_pages=None, randomize=False)
    """
    return HostConf(
        delay=_number(data.get(OVERRIDE_DELAY), float, 0),
        concurrency=_number(data.get(OVERRIDE_CONCURRENCY), int, 1),
        max_pages=_number(data.get(OVERRIDE_MAX_PAGES), int, 0),
        randomize=data.get("randomize_delay") is True,
    )


def download_slots(slots: Mapping[str, Any] | None) -> dict[str, HostConf]:
    """``DOWNLOAD_SLOTS`` by host name (entries that are not dicts ignored).

    >>> download_slots({"A.test": {"delay": 1.5}, "b.test": "x"})
    {'a.test': HostConf(delay=1.5, concurrency=None, max_pages=None, randomize=False)}
    """
    return {
        str(name).lower(): conf_of(entry)
        for name, entry in (slots or {}).items()
        if isinstance(entry, dict)
    }


def slots_json(slots: Mapping[str, HostConf]) -> str:
    """``DOWNLOAD_SLOTS`` as the lease script reads it: {host name: [delay
    ms, concurrency]}, -1 where not set; '' for none.

    >>> slots_json({"a.test": HostConf(delay=1.5)})
    '{"a.test": [1500, -1]}'
    >>> slots_json({})
    ''
    """
    table = {
        name: [
            -1 if conf.delay is None else round(conf.delay * 1000),
            -1 if conf.concurrency is None else conf.concurrency,
        ]
        for name, conf in slots.items()
        if conf.delay is not None or conf.concurrency is not None
    }
    return json.dumps(table, sort_keys=True) if table else ""


def schedule_terms(settings: BaseSettings) -> dict[str, Any]:
    """What the lease script needs of a worker's politeness settings, as
    :class:`~extensions.core.frontier.frontier.Worker` fields: the
    AutoThrottle start delay (``AUTOTHROTTLE_ENABLED``,
    ``AUTOTHROTTLE_START_DELAY``, at least ``DOWNLOAD_DELAY``; -1: off), the
    IP delay when ``POLITENESS_KEY`` names ``ip`` (``IP_DOWNLOAD_DELAY``, 0:
    ``DOWNLOAD_DELAY``) and ``DOWNLOAD_SLOTS``.

    >>> from scrapy.settings import Settings
    >>> schedule_terms(Settings({"POLITENESS_KEY": "host,ip", "DOWNLOAD_DELAY": 1,
    ...     "AUTOTHROTTLE_ENABLED": True, "AUTOTHROTTLE_START_DELAY": 0.5}))
    {'throttle_start_ms': 1000, 'ip_delay_ms': 1000, 'slots': ''}
    """
    delay = settings.getfloat("DOWNLOAD_DELAY")
    polite = settings.getbool("POLITENESS_ENABLED", True)
    ip = polite and "ip" in politeness_keys(settings.get("POLITENESS_KEY", "host"))
    return {
        "throttle_start_ms": (
            round(max(delay, settings.getfloat("AUTOTHROTTLE_START_DELAY")) * 1000)
            if settings.getbool("AUTOTHROTTLE_ENABLED")
            else -1
        ),
        "ip_delay_ms": (
            round((settings.getfloat("IP_DOWNLOAD_DELAY") or delay) * 1000) if ip else 0
        ),
        "slots": slots_json(download_slots(settings.getdict("DOWNLOAD_SLOTS"))),
    }


class HostOverrides:
    """The operators' per-host overrides of one crawl: written to the
    overrides HASH of each of its ``partitions`` (one script call each),
    read from partition 0's."""

    def __init__(self, client: aredis.Redis, prefix: str, partitions: int = 1) -> None:
        self.client = client
        self.prefix = prefix
        self.partitions = partitions

    def _keys(self) -> list[str]:
        return [
            FrontierKeys(self.prefix, i, self.partitions).overrides
            for i in range(self.partitions)
        ]

    async def set(self, host: str, **values: float | int | None) -> HostConf:
        """Set (a number) or remove (None) fields of ``host``'s override;
        fields not named keep their value. Returns the override now."""
        unknown = set(values) - set(OVERRIDE_FIELDS)
        if unknown:
            raise ValueError(f"unknown override fields: {sorted(unknown)}")
        args: list[Any] = [host]
        for field, value in values.items():
            args += [field, "" if value is None else repr(value)]
        run = script(self.client, SET_OVERRIDE_LUA)
        out = ""
        for key in self._keys():
            out = await run(keys=[key], args=args)
        return conf_of(json.loads(out)) if out else HostConf()

    async def reset(self, host: str) -> bool:
        """Remove ``host``'s override; False when it had none."""
        had = await self.get(host) is not None
        await self.set(host, **dict.fromkeys(OVERRIDE_FIELDS))
        return had

    async def get(self, host: str) -> HostConf | None:
        raw = await self.client.hget(self._keys()[0], host)
        return conf_of(json.loads(raw)) if raw else None

    async def all(self) -> dict[str, HostConf]:
        """Every override, by host name."""
        raw = await self.client.hgetall(self._keys()[0])
        out = {}
        for name, value in sorted(raw.items()):
            try:
                host = name.decode() if isinstance(name, bytes) else name
                out[host] = conf_of(json.loads(value))
            except ValueError:  # not JSON: someone else's write; none
                continue
        return out


class OverridesCache:
    """A worker's copy of the overrides, read again when it is ``max_age``
    seconds old (``FRONTIER_HEARTBEAT_INTERVAL``: an operator's change
    reaches every worker within one heartbeat). While Redis does not answer
    the last copy stays in use."""

    def __init__(self, overrides: HostOverrides, max_age: float) -> None:
        self.overrides = overrides
        self.max_age = max_age
        self._table: dict[str, HostConf] = {}
        self._read_at = float("-inf")

    async def table(self) -> dict[str, HostConf]:
        now = time.monotonic()
        if now - self._read_at >= self.max_age:
            self._read_at = now
            try:
                self._table = await self.overrides.all()
            except TRANSIENT_REDIS_ERRORS as exc:
                logger.debug("Host overrides not read: %s", exc)
        return self._table
