"""What the operator commands do (``scrapy status``, ``seed``, ``pause``,
``resume``, ``reset``, ``redis_url``, ``hosts``), and their base class.

Settings read: ``REDIS_URL``/``WEBCRAWL_HOME`` (the Redis of the crawl),
``FRONTIER_LEASE_TIMEOUT`` (a worker silent that long is dead),
``FRONTIER_PARTITIONS`` (unless the crawl's workers recorded theirs), the Bloom
settings (``BLOOM_*``) and the page store settings (``PAGE_STORE``,
``MONGO_URI``, ``SQLITE_PATH``).

The frontier's figures come from :class:`extensions.core.frontier.frontier.Frontier`,
the
fleet's from :mod:`extensions.extensions.fleetstats`, the store's through the
:class:`~pipelines.stores.base.PageStore` interface: this module spells no
key name of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from fnmatch import fnmatchcase
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar

from scrapy.commands import ScrapyCommand
from scrapy.spiderloader import get_spider_loader

from extensions.connection import (
    TRANSIENT_REDIS_ERRORS,
    RedisUnavailable,
    check_url,
    cluster_mode,
    info_per_master,
    new_async_client,
    resolve_redis_url,
)
from extensions.connection.embedded import embedded_unless_configured
from extensions.connection.scripts import server_now_ms
from extensions.core import seeds
from extensions.core.bloom import AsyncBloomFilter, BloomConfig
from extensions.core.frontier.deadletters import DeadLetters
from extensions.core.frontier.frontier import PartitionedFrontier, recorded_partitions
from extensions.core.frontier.hostrecord import HostRecords
from extensions.core.frontier.overrides import HostConf, HostOverrides
from extensions.core.seeds import (
    URL_LENGTH_LIMIT,
    InvalidSeed,
    SeedSource,
    parse_seed,
    seed_counts,
    seed_source,
)
from extensions.extensions.fleetstats import fleet_view
from extensions.extensions.recrawl import fleet_figures
from extensions.keys import (
    DEFAULT_CRAWL,
    FrontierKeys,
    bloom_meta,
    crawl_patterns,
    glob_escape,
    invalid_seeds,
    invalid_start_urls,
    seed_patterns,
    start_urls,
)
from extensions.settings import config
from extensions.utils.redact import redact_url
from pipelines.stores import store_from_settings
from webcrawl.addon import DEFAULTS, install_defaults

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence

    import redis.asyncio as aredis
    from scrapy.settings import BaseSettings, Settings

_T = TypeVar("_T")


class OperatorCommand(ScrapyCommand):
    """Base of webcrawl's commands: run from the project, no crawler process,
    ``--crawl NAME`` (the key prefix), and the workers' settings: every
    package's defaults installed and checked as the add-on does, Redis found
    the way a worker finds it (``REDIS_URL``, its ``_FILE``, else the
    embedded Redis, started if need be)."""

    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "WARNING"}

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--crawl", default=DEFAULT_CRAWL, help="crawl (spider) name"
        )

    def crawl_settings(self) -> Settings:
        """The workers' settings; a value out of range: one line on stderr
        and exit status 2, as a worker refuses it."""
        assert self.settings is not None
        settings = self.settings.copy()
        install_defaults(settings)
        try:
            config.check(settings, *DEFAULTS)
        except config.SettingsError as exc:
            self.refuse(exc)
        embedded_unless_configured(settings, "cmdline")
        return settings

    def refuse(self, error: Exception) -> NoReturn:
        print(f"scrapy {self.name()}: {error}", file=sys.stderr)
        raise SystemExit(2)

    def name(self) -> str:
        return type(self).__module__.rsplit(".", 1)[-1]

    def call(self, func: Callable[..., Coroutine[Any, Any, _T]], *args: Any) -> _T:
        """``func(settings, *args)`` to completion; Redis unreachable: one line
        on stderr (password redacted) and exit status 1, no traceback; a
        setting that cannot be used (a page store it cannot load): one line
        and exit status 2."""
        settings = self.crawl_settings()
        try:
            return asyncio.run(func(settings, *args))
        except config.SettingsError as exc:
            self.refuse(exc)
        except TRANSIENT_REDIS_ERRORS as exc:
            url = redact_url(resolve_redis_url(settings))
            print(f"Redis unreachable at {url}: {exc}", file=sys.stderr)
            raise SystemExit(1) from None
        except RedisUnavailable as exc:  # already one line, password masked
            print(exc, file=sys.stderr)
            raise SystemExit(1) from None


@contextlib.contextmanager
def quiet_broken_pipe() -> Iterator[None]:
    """End as a Unix tool ends when the reader of its output goes away
    (``scrapy status | head``, like ``yes | head``): killed by SIGPIPE,
    without a word.

    Python ignores SIGPIPE, so a write to a closed pipe raises
    ``BrokenPipeError`` (a traceback, exit 1); this is the way out the
    Python documentation gives ("Note on SIGPIPE", :mod:`signal`), then the
    signal's own default. SIGPIPE stays ignored everywhere else: a Redis
    socket closed under a write must raise, not kill.
    """
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout once more at exit: let that go to /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGPIPE)
        raise SystemExit(128 + signal.SIGPIPE) from None  # if it came late


def client_for(settings: BaseSettings) -> aredis.Redis:
    """An asyncio client for a command or the status page's threads (a
    cluster client on a cluster: :func:`cluster_mode` may probe, blocking,
    which is fine outside a crawl's reactor). A URL redis-py cannot read
    raises :class:`RedisUnavailable`, its password masked."""
    check_url(resolve_redis_url(settings))
    cluster_mode(settings)
    return new_async_client(settings)


async def partitions_of(
    settings: BaseSettings, client: aredis.Redis, crawl: str
) -> int:
    """The crawl's partition count: the one its workers recorded, else
    ``FRONTIER_PARTITIONS`` (an operator's settings may lack the workers')."""
    recorded = await recorded_partitions(client, crawl)
    return recorded or settings.getint("FRONTIER_PARTITIONS")


async def frontier_of(
    settings: BaseSettings, client: aredis.Redis, crawl: str
) -> PartitionedFrontier:
    """The crawl's frontier over all its partitions."""
    return PartitionedFrontier(
        client, crawl, await partitions_of(settings, client, crawl)
    )


# -- status --------------------------------------------------------------------


async def gather_status(
    settings: BaseSettings, crawl: str = DEFAULT_CRAWL
) -> dict[str, Any]:
    """Every figure of ``scrapy status``, as one JSON-ready dict."""
    client = client_for(settings)
    try:
        frontier = await frontier_of(settings, client, crawl)
        alive_ms = int(settings.getfloat("FRONTIER_LEASE_TIMEOUT") * 1000)
        fv = await frontier.overview()
        fleet = await fleet_view(client, crawl, alive_ms, frontier)
        seeds, invalid = await seed_counts(client, seed_source_of(settings, crawl))
        has_bloom = await client.exists(bloom_meta(crawl))
        memory = await info_per_master(client, "memory")
        bloom = await _bloom(client, settings, crawl) if has_bloom else None
        # The dead-letter queue itself (not the workers' dlq/<reason> stats,
        # which forget what a requeue or purge took out).
        dlq_by_reason = await DeadLetters(client, crawl, len(frontier.parts)).sizes()
        retries_pending = await frontier.retries()
        overridden = await HostOverrides(client, crawl, len(frontier.parts)).all()
        recrawl = await fleet_figures(client, crawl)
    finally:
        await client.aclose()
    store = _store(settings)
    idle = not (fv.queued or fv.leased or seeds)
    return {
        "crawl": crawl,
        "time_ms": fv.now_ms,
        "paused": fv.paused,
        "poisoned": fv.poisoned,
        "queued": fv.queued,
        "leased": fv.leased,
        "hosts": {
            "ready": fv.hosts_ready,
            "waiting": fv.hosts_waiting,
            "parked": fv.hosts_parked,
        },
        "next_lease_expiry": (
            {"lease": fv.next_lease_expiry[0], "in_s": fv.next_lease_expiry[1]}
            if fv.next_lease_expiry
            else None
        ),
        "retries_pending": retries_pending,
        "dlq": sum(dlq_by_reason.values()),
        "dlq_by_reason": dlq_by_reason,
        "seeds_pending": int(seeds),
        "seeds_invalid": int(invalid),
        "waiting_for_seeds": bool(fleet.workers) and idle,
        "workers": fleet.workers,
        "rates": fleet.rates,
        "totals": fleet.totals,
        "top_hosts": [{"host": h, "queued": n} for h, n in fv.top_hosts],
        "host_overrides": {h: c.as_dict() for h, c in overridden.items()},
        "bloom": bloom,
        # The continuous crawl's freshness figures (None: no revisit schedule).
        "recrawl": recrawl.as_dict() if recrawl.pages else None,
        "redis": _memory(memory),
        # The fleet's figure: what every worker wrote to its page store,
        # wherever that is (this machine's WEBCRAWL_HOME may not be the
        # workers'); the store this command reads comes apart (_store).
        "pages_stored": fleet.totals.get("stored", 0),
        **store,
    }


def _memory(per_master: list[dict[str, Any]]) -> dict[str, Any]:
    """Redis memory summed over the masters (one on a plain Redis).

    >>> _memory([{"used_memory": 2097152, "maxmemory": 0}] * 3)
    {'used_memory': 6291456, 'used_memory_human': '6.00M', 'maxmemory': 0, 'masters': 3}
    """
    used = sum(int(m.get("used_memory", 0)) for m in per_master)
    return {
        "used_memory": used,
        "used_memory_human": (
            str(per_master[0].get("used_memory_human", ""))
            if len(per_master) == 1
            else f"{used / 2**20:.2f}M"
        ),
        "maxmemory": sum(int(m.get("maxmemory", 0)) for m in per_master),
        "masters": len(per_master),
    }


async def _bloom(
    client: aredis.Redis, settings: BaseSettings, crawl: str
) -> dict[str, Any]:
    stats = await AsyncBloomFilter(
        client, crawl, BloomConfig.from_settings(settings)
    ).stats()
    return {
        "layers": stats.layers,
        "bits": stats.bits,
        "fill": round(stats.bits_set / stats.bits, 6) if stats.bits else 0.0,
        "items": stats.counted_items,
        "expected_fp_rate": stats.expected_fp_rate,
    }


def _store(settings: BaseSettings) -> dict[str, Any]:
    """The page store this command's settings name (``store``): its pages
    (``store_pages``, None when there is none here: the workers' may be on
    another machine or under another ``WEBCRAWL_HOME``) and those that share
    another page's content (duplicates)."""
    store = store_from_settings(settings)
    path = getattr(store, "path", None)
    if path is not None and not Path(path).exists():
        # No store here: do not create an empty one.
        return {"store": repr(store), "store_pages": None, "duplicates": None}
    store.open()
    try:
        stored = store.count()
        content = getattr(store, "content_count", None)
        with_content = content() if content is not None else None
    finally:
        store.close()
    return {
        "store": repr(store),
        "store_pages": stored,
        "pages_with_content": with_content,
        # Pages stored without their own content: exact or near duplicates
        # of a page stored earlier, and failures (no body).
        "duplicates": stored - with_content if with_content is not None else None,
    }


def _num(n: float) -> str:
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.2f}"


def render_status(s: dict[str, Any]) -> str:
    """``scrapy status`` as text a person reads."""
    h, r = s["hosts"], s["rates"].get("pages", {})
    lines = [
        f"Crawl {s['crawl']!r}"
        + ("  (PAUSED: `scrapy resume` to continue)" if s["paused"] else ""),
        f"  rate        {r.get('1m', 0):.2f} pages/s (1m)  {r.get('5m', 0):.2f} (5m)  "
        f"{r.get('15m', 0):.2f} (15m)",
        f"  frontier    {_num(s['queued'])} queued over "
        f"{h['ready'] + h['waiting'] + h['parked']} "
        f"hosts ({h['ready']} ready, {h['waiting']} waiting, {h['parked']} parked)",
        f"  leases      {_num(s['leased'])} outstanding"
        + (
            f", next expiry in {s['next_lease_expiry']['in_s']:.0f}s"
            if s["next_lease_expiry"]
            else ""
        ),
        f"  retries     {s['retries_pending']} pending; DLQ {s['dlq']}"
        + (
            " ("
            + ", ".join(f"{k}: {v}" for k, v in sorted(s["dlq_by_reason"].items()))
            + ")"
            if s["dlq_by_reason"]
            else ""
        ),
        f"  seeds       {s['seeds_pending']} pending, {s['seeds_invalid']} invalid; "
        f"{s['poisoned']} malformed frontier entries set aside",
        f"  stored      {_num(s['pages_stored'])} pages (the fleet's counters in "
        f"Redis), {_num(s['totals'].get('duplicates', 0))} of them duplicates",
        (
            f"  store       {_num(s['store_pages'])} pages, "
            + (f"{_num(s['duplicates'])}" if s.get("duplicates") is not None else "?")
            + f" without own content, in {s['store']} (this command's settings)"
            if s["store_pages"] is not None
            else f"  store       no page store at {s['store']} (this command's "
            "settings: the workers' is elsewhere)"
        ),
        f"  fleet       {_num(s['totals'].get('pages', 0))} pages fetched, "
        f"{_num(s['totals'].get('bytes', 0))} bytes, "
        f"{_num(s['totals'].get('errors', 0))} errors",
    ]
    b = s["bloom"]
    lines.append(
        f"  bloom       {b['fill']:.4%} full, {_num(b['items'])} URLs, "
        "expected FP rate "
        f"{b['expected_fp_rate']:.2e}"
        if b
        else "  bloom       (not created yet)"
    )
    lines.append(f"  redis       {s['redis']['used_memory_human']} used")
    if s.get("recrawl"):
        lines.append(render_recrawl(s["recrawl"]))
    if s["waiting_for_seeds"]:
        lines.append(
            "  NO SEEDS: workers are waiting; push some with `scrapy seed FILE`"
        )
    lines.append(f"Workers alive: {len(s['workers'])}")
    for w in s["workers"]:
        lines.append(
            f"  {w['id']:<36} {w['machine']:<16} pid {w['pid']:<7} "
            f"beat {w['last_beat_s']:>5}s "
            f"ago  {w['pages_per_s']:7.2f} pages/s"
            + (f"  metrics :{w['metrics_port']}" if w["metrics_port"] else "")
            + ("  (waiting for seeds)" if w["waiting_for_seeds"] else "")
        )
    if s["top_hosts"]:
        lines.append("Top hosts by queue:")
        lines += [f"  {t['queued']:>8}  {t['host']}" for t in s["top_hosts"]]
    if s["host_overrides"]:
        lines.append("Host overrides (scrapy hosts):")
        lines += [
            "  " + render_override(h, f) for h, f in sorted(s["host_overrides"].items())
        ]
    return "\n".join(lines)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def render_recrawl(r: dict[str, Any]) -> str:
    """The ``recrawl`` line of ``scrapy status``: known pages, the store's
    estimated freshness, what the last window's revisits found, the price.

    >>> print(render_recrawl({"pages": 186, "estimated_freshness": 0.873,
    ...     "window_s": 30.0, "window": {"revisits": 120}, "changed_share": 0.3,
    ...     "not_modified_share": 0.65, "price_s": 2.5, "target_per_s": 5.2}))
    ... # doctest: +NORMALIZE_WHITESPACE
      recrawl     186 known pages, estimated freshness 87%; last 30 s: 120
                  revisits, 30% changed, 65% answered 304; price 2.5 s for
                  5.2 revisits/s
    """
    price = r.get("price_s")
    return (
        f"  recrawl     {_num(r['pages'])} known pages, estimated freshness "
        f"{_share(r.get('estimated_freshness'))}; last {r['window_s']:.0f} s: "
        f"{_num(r['window'].get('revisits', 0))} revisits, "
        f"{_share(r.get('changed_share'))} changed, "
        f"{_share(r.get('not_modified_share'))} answered 304"
        + (
            f"; price {price:.3g} s for {r['target_per_s']:.3g} revisits/s"
            if price is not None and r.get("target_per_s") is not None
            else ""
        )
    )


# -- per-host settings -----------------------------------------------------------


async def _overrides(
    settings: BaseSettings, client: aredis.Redis, crawl: str
) -> HostOverrides:
    return HostOverrides(client, crawl, await partitions_of(settings, client, crawl))


async def set_host(
    settings: BaseSettings,
    host: str,
    values: dict[str, float | int | None],
    crawl: str = DEFAULT_CRAWL,
) -> HostConf:
    """Set (or, None, remove) fields of a host's override in every partition:
    the lease script and the download lock read it at once, the workers'
    other uses within a heartbeat. Returns the override now."""
    client = client_for(settings)
    try:
        overrides = await _overrides(settings, client, crawl)
        return await overrides.set(host, **values)
    finally:
        await client.aclose()


async def reset_host(
    settings: BaseSettings, host: str, crawl: str = DEFAULT_CRAWL
) -> bool:
    """Remove a host's override; False when it had none."""
    client = client_for(settings)
    try:
        return await (await _overrides(settings, client, crawl)).reset(host)
    finally:
        await client.aclose()


async def show_hosts(
    settings: BaseSettings, host: str | None = None, crawl: str = DEFAULT_CRAWL
) -> dict[str, Any]:
    """Every override (``overrides``: host name -> fields); with ``host``,
    its override and the records of its host keys (``records``: host key ->
    field -> value) with the Redis time they were read at (``time_ms``)."""
    client = client_for(settings)
    try:
        overrides = await _overrides(settings, client, crawl)
        if host is None:
            table = await overrides.all()
            return {"overrides": {h: c.as_dict() for h, c in table.items()}}
        conf = await overrides.get(host)
        records = HostRecords(client, crawl, overrides.partitions)
        return {
            "overrides": {host: conf.as_dict()} if conf else {},
            "records": await records.of_name(host),
            "time_ms": await server_now_ms(client),
        }
    finally:
        await client.aclose()


def render_override(host: str, fields: dict[str, Any]) -> str:
    """One line of ``scrapy hosts show``.

    >>> render_override("a.test", {"delay": 5.0, "concurrency": 2, "max_pages": 10})
    'a.test  delay 5 s, concurrency 2, max pages 10'
    """
    parts = []
    if "delay" in fields:
        parts.append(f"delay {fields['delay']:g} s")
    if "concurrency" in fields:
        parts.append(f"concurrency {fields['concurrency']}")
    if "max_pages" in fields:
        parts.append(f"max pages {fields['max_pages']}")
    return f"{host}  " + (", ".join(parts) or "(none)")


# -- seeds ---------------------------------------------------------------------


def check_seed_lines(
    lines: Iterable[str | bytes],
    max_url_length: int = URL_LENGTH_LIMIT,
    meta_keys: frozenset[str] = frozenset(),
) -> tuple[list[str], list[tuple[int, str, str]]]:
    """Valid seed entries, and (line number, line, why) for the invalid ones,
    judged by the parser the workers use (:func:`extensions.core.seeds.parse_seed`)
    with the same URL length limit and ``SEED_META_KEYS``. Blank lines and
    ``#`` comments are skipped; a line of bytes that are not UTF-8 is
    invalid, as on the seed list.

    >>> valid, invalid = check_seed_lines(["http://a.test/", "", "# c", "ftp://b/"])
    >>> valid, invalid
    (['http://a.test/'], [(4, 'ftp://b/', "scheme must be http or https, not 'ftp'")])
    >>> check_seed_lines([b"http://a.test/caf\\xe9", b"http://b.test/"])
    (['http://b.test/'], [(1, 'http://a.test/caf\ufffd', 'not UTF-8')])
    """
    valid: list[str] = []
    invalid: list[tuple[int, str, str]] = []
    for number, raw in enumerate(lines, 1):
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError:
            assert isinstance(raw, bytes)
            shown = raw.decode("utf-8", "replace").strip()
            invalid.append((number, shown, "not UTF-8"))
            continue
        line = text.strip()
        if not line or line.startswith("#"):
            continue
        try:
            parse_seed(line, max_url_length, meta_keys)
        except InvalidSeed as exc:
            invalid.append((number, line, str(exc)))
        else:
            valid.append(line)
    return valid, invalid


async def push_seeds(
    settings: BaseSettings, entries: list[str], crawl: str = DEFAULT_CRAWL
) -> int:
    """Push seed entries onto the crawl's seed key, first line first out (a
    list is taken from its tail; a zset by priority; a set in no order)."""
    client = client_for(settings)
    try:
        return await seeds.push_seeds(
            client, crawl, entries, seed_source_of(settings, crawl)
        )
    finally:
        await client.aclose()


def seed_source_of(settings: BaseSettings, crawl: str) -> SeedSource:
    """The seed keys of crawl ``crawl`` as its workers read them: the
    ``redis_key`` of the project's spider of that name, if any, else
    ``REDIS_START_URLS_KEY``, of the type ``REDIS_START_URLS_AS_SET`` /
    ``AS_ZSET`` say (:func:`extensions.core.seeds.seed_source`)."""
    spider: Any = SimpleNamespace(name=crawl)
    with contextlib.suppress(KeyError):
        spider = get_spider_loader(settings).load(crawl)
    return seed_source(spider, settings)


# -- pause / resume -------------------------------------------------------------


async def set_paused(
    settings: BaseSettings, paused: bool, crawl: str = DEFAULT_CRAWL
) -> bool:
    """Pause or resume the fleet; False when it already was in that state."""
    client = client_for(settings)
    try:
        frontier = await frontier_of(settings, client, crawl)
        return await (frontier.pause() if paused else frontier.resume())
    finally:
        await client.aclose()


# -- reset ---------------------------------------------------------------------


def key_kind(crawl: str, key: str, seed_keys: Sequence[str] = ()) -> str:
    """The kind of a crawl key, for ``scrapy reset``'s count.

    >>> key_kind("web", "web:{web}:q:http://a.test:80")
    'frontier q'
    >>> key_kind("web", "web:{web:p3}:ready")
    'frontier ready'
    >>> key_kind("web", "web:bloom:meta"), key_kind("web", "web:start_urls")
    ('bloom', 'seeds')
    >>> key_kind("web", "web:{web:start_urls}:taken:w1")
    'seeds'
    """
    tagged = FrontierKeys(crawl).tagged
    if key.startswith(tagged):
        return "frontier " + key[len(tagged) :].split(":", 1)[0]
    if key.startswith(f"{crawl}:{{{crawl}:p"):  # another partition's tag
        return "frontier " + key.split("}:", 1)[1].split(":", 1)[0]
    named = {start_urls(crawl), invalid_start_urls(crawl), *seed_keys}
    named |= {invalid_seeds(k) for k in seed_keys}
    if key in named or any(
        fnmatchcase(key, p) for p in seed_patterns(crawl, seed_keys)
    ):
        return "seeds"
    return key[len(crawl) + 1 :].split(":", 1)[0]


async def crawl_keys(
    client: aredis.Redis, crawl: str, seed_keys: Sequence[str] = ()
) -> list[str]:
    """Every key of the crawl, seed lists included (those of ``seed_keys``
    too: a spider's ``redis_key``), SCAN, never KEYS."""
    keys = []
    for pattern in [
        *crawl_patterns(crawl),
        *seed_patterns(crawl, seed_keys),
        *(glob_escape(k) for k in {*seed_keys, start_urls(crawl)}),
        *(glob_escape(invalid_seeds(k)) for k in seed_keys[:1]),
        invalid_start_urls(crawl),
    ]:
        async for key in client.scan_iter(match=pattern, count=1000):
            keys.append(key.decode())
    return sorted(set(keys))


async def reset(
    settings: BaseSettings, delete: bool, crawl: str = DEFAULT_CRAWL
) -> dict[str, int]:
    """Count the crawl's keys by kind; delete them when ``delete``."""
    client = client_for(settings)
    seed_keys = seed_source_of(settings, crawl).keys
    try:
        keys = await crawl_keys(client, crawl, seed_keys)
        kinds: dict[str, int] = {}
        for key in keys:
            kind = key_kind(crawl, key, seed_keys)
            kinds[kind] = kinds.get(kind, 0) + 1
        if delete:
            for i in range(0, len(keys), 500):
                await client.unlink(*keys[i : i + 500])
        return dict(sorted(kinds.items()))
    finally:
        await client.aclose()


def dumps(status: dict[str, Any]) -> str:
    return json.dumps(status, sort_keys=True)
