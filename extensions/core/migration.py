"""Moving a crawl scrapy-redis queued into webcrawl's frontier.

Settings read (scrapy-redis's, with its defaults): ``SCHEDULER_QUEUE_CLASS``
(``scrapy_redis.queue.PriorityQueue``), ``SCHEDULER_QUEUE_KEY``
(``%(spider)s:requests``), ``SCHEDULER_SERIALIZER`` (pickle,
``scrapy_redis.picklecompat``), ``SCHEDULER_DUPEFILTER_KEY``
(``%(spider)s:dupefilter``), ``DUPEFILTER_CLASS`` (whose fingerprint wrote
that key, when it is scrapy-redis's or a subclass); webcrawl's
``FRONTIER_PRIORITY_FUNCTION``, ``FRONTIER_PARTITIONS`` (unless the crawl
recorded its own), ``FRONTIER_LEASE_TIMEOUT``, the ``BLOOM_*`` settings and
the seed keys' (:func:`extensions.core.seeds.seed_source`).

:class:`ScrapyRedisCrawl` reads what scrapy-redis left of one spider's crawl
in Redis: :meth:`~ScrapyRedisCrawl.inventory` says what is there (key types,
counts, the serializer the entries are in) and changes nothing;
:meth:`~ScrapyRedisCrawl.move_requests` moves ``<spider>:requests`` into the
per-host frontier; :meth:`~ScrapyRedisCrawl.load_dupefilter` loads
``<spider>:dupefilter`` into the Bloom filter when it can.

**The requests** are read with scrapy-redis's own queue class and
serializer (its ``_decode_request``: ``SCHEDULER_SERIALIZER``'s ``loads``,
then Scrapy's ``request_from_dict`` against the spider), in the order its
queue pops them (a ``PriorityQueue`` lowest score first, a ``FifoQueue``
from its tail, a ``LifoQueue`` from its head; a subclass as its base), and
queued as webcrawl's scheduler queues a request (as it was made, its
priority through ``FRONTIER_PRIORITY_FUNCTION``, JSON): through the
frontier's own write-ahead, dupefilter and commit path, a batch at a time
(:class:`~extensions.core.frontier.frontier.PartitionedFrontier`'s
``beat``, ``log_ahead``, ``commit``; the Bloom filter's ``test_and_set``).
Only then are the batch's entries removed from scrapy-redis's key (``ZREM``,
``LREM``), so a crash at any point loses nothing: before the commit the
batch is in this process's write-ahead entry, which a live worker (or the
next run) queues once this process stops beating; after it, a re-run finds
the entries again and the dupefilter drops them as already queued.
Requests within one priority keep scrapy-redis's order. An entry that
cannot be read (another serializer, a callback the spider lacks) or stored
as JSON is left where it is, counted with why.

**Pickle** (scrapy-redis's default serializer) runs code of whoever could
write to that Redis when it is read (CWE-502): entries in pickle (by the
serializer configured, or by their first bytes) are read only with
``trust_pickle``; otherwise :class:`UntrustedPickle` says so.

**The dupefilter** holds SHA-1 fingerprints, not URLs: nothing turns one
back into its URL. It is loaded into webcrawl's Bloom filter (which stores
the fingerprint of ``REQUEST_FINGERPRINTER_CLASS``) only when scrapy-redis's
fingerprint and this crawl's are the same function, checked on fixed probe
requests; otherwise it is left alone (:meth:`load_dupefilter` says what that
means). ``<spider>:start_urls`` is left for the reliable seed take.
"""

from __future__ import annotations

import importlib
import pickle
import uuid
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, cast

from scrapy import Request
from scrapy.http import FormRequest
from scrapy.utils.misc import load_object
from scrapy_redis import picklecompat
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.queue import FifoQueue, LifoQueue, PriorityQueue

from extensions.core.bloom import AsyncBloomFilter, BloomConfig
from extensions.core.frontier.frontier import (
    PartitionedFrontier,
    QueuedRequest,
    Worker,
    recorded_partitions,
    worker_id,
)
from extensions.core.frontier.scoring import LocalHostCounts
from extensions.core.frontier.serialization import (
    UnserializableRequest,
    request_to_bytes,
)
from extensions.core.seeds import SeedSource, seed_source
from extensions.utils.hosts import host_key
from extensions.utils.url import canonical_request

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis.asyncio as aredis
    from scrapy import Spider
    from scrapy.settings import BaseSettings

# scrapy-redis's defaults (scrapy_redis.defaults), for the settings left unset.
QUEUE_CLASS = "scrapy_redis.queue.PriorityQueue"
QUEUE_KEY = "%(spider)s:requests"
DUPEFILTER_KEY = "%(spider)s:dupefilter"
ITEMS_KEY = "%(spider)s:items"
STATS_KEY = "%(spider)s:stats"
# Entries read, moved and removed per round trip.
BATCH = 500
# Serializer modules that unpickle (scrapy-redis's default among them).
PICKLERS = frozenset({"scrapy_redis.picklecompat", "pickle", "_pickle", "dill"})
# Requests whose fingerprints the two filters must agree on before
# scrapy-redis's are loaded: both canonicalize these URLs alike, so a
# difference is one of fingerprint function, not of URL handling.
PROBES = (
    Request("http://example.com/"),
    Request("https://example.org/a/b?x=1&y=2"),
    FormRequest("https://example.org/form", formdata={"q": "x"}),
)
# Reasons kept per kind of entry left behind.
EXAMPLES = 3


class MigrationError(ValueError):
    """The crawl cannot be moved as the settings say; one line saying why."""


class UntrustedPickle(MigrationError):
    """The queue holds pickle and ``trust_pickle`` was not given."""


@dataclass
class KeyReport:
    """One key scrapy-redis left: its name, Redis type and size."""

    key: str
    type: str
    count: int
    role: str  # what webcrawl does with it


@dataclass
class Inventory:
    """What :meth:`ScrapyRedisCrawl.inventory` found (nothing changed)."""

    keys: list[KeyReport]
    queue_class: str
    serializer: str
    data_format: str  # what the first queue entry looks like
    needs_trust: bool  # reading the queue unpickles
    fingerprints_match: bool | None  # None: no dupefilter key
    problems: list[str] = field(default_factory=list)


@dataclass
class MoveReport:
    """What :meth:`ScrapyRedisCrawl.move_requests` did."""

    read: int = 0
    queued: int = 0  # committed to the frontier
    seen: int = 0  # dropped: the crawl's dupefilter had them (a re-run)
    left: int = 0  # left in scrapy-redis's key
    reasons: dict[str, list[str]] = field(default_factory=dict)

    def leave(self, entry: bytes, kind: str, why: str) -> None:
        """Count an entry left in scrapy-redis's key; keep the first few of
        each ``kind`` with why."""
        self.left += 1
        examples = self.reasons.setdefault(kind, [])
        if len(examples) < EXAMPLES:
            examples.append(f"{why} ({entry[:60]!r})")


@dataclass
class DupefilterReport:
    """What :meth:`ScrapyRedisCrawl.load_dupefilter` did."""

    key: str
    fingerprints: int = 0
    loaded: int = 0  # new to the Bloom filter
    known: int = 0  # already in it
    malformed: int = 0  # members that are not a hex SHA-1
    matched: bool = False
    why_not: str = ""


def looks_like_pickle(data: bytes) -> bool:
    """Whether ``data`` starts as a pickle of protocol 2 or later does.

    >>> looks_like_pickle(pickle.dumps({"url": "x"})), looks_like_pickle(b'{"url"')
    (True, False)
    """
    return len(data) > 1 and data[0] == 0x80 and 2 <= data[1] <= 5


def data_format(data: bytes | None) -> str:
    """What an entry looks like: pickle, JSON, or unknown.

    >>> data_format(pickle.dumps(1, protocol=5)), data_format(b' {"a": 1}')
    ('pickle (protocol 5)', 'JSON')
    >>> data_format(None), data_format(b"\\x00\\x01")
    ('none (empty)', 'unknown')
    """
    if data is None:
        return "none (empty)"
    if looks_like_pickle(data):
        return f"pickle (protocol {data[1]})"
    if data.lstrip()[:1] in (b"{", b"["):
        return "JSON"
    return "unknown"


def _serializer(settings: BaseSettings) -> ModuleType:
    """``SCHEDULER_SERIALIZER`` as scrapy-redis loads it (a module path;
    unset: pickle)."""
    value = settings.get("SCHEDULER_SERIALIZER")
    if not value:
        return picklecompat
    if isinstance(value, ModuleType):
        return value
    try:
        module = importlib.import_module(str(value))
    except ImportError as exc:
        raise MigrationError(
            f"SCHEDULER_SERIALIZER={value!r} cannot be imported: {exc}"
        ) from None
    if not (hasattr(module, "loads") and hasattr(module, "dumps")):
        raise MigrationError(f"SCHEDULER_SERIALIZER={value!r} has no loads/dumps")
    return module


def _unpickles(module: ModuleType) -> bool:
    return module.__name__ in PICKLERS or getattr(module, "loads", None) in (
        pickle.loads,
        picklecompat.loads,
    )


class ScrapyRedisCrawl:
    """What scrapy-redis left of ``spider``'s crawl in Redis (module
    docstring). ``fingerprint``: this crawl's request fingerprint
    (``crawler.request_fingerprinter.fingerprint``)."""

    def __init__(
        self,
        client: aredis.Redis,
        spider: Spider,
        settings: BaseSettings,
        fingerprint: Callable[[Request], bytes],
        *,
        trust_pickle: bool = False,
    ) -> None:
        self.client = client
        self.spider = spider
        self.name = spider.name
        self.settings = settings
        self.fingerprint = fingerprint
        self.trust_pickle = trust_pickle
        names = {"spider": spider.name}
        self.queue_key = (settings.get("SCHEDULER_QUEUE_KEY") or QUEUE_KEY) % names
        self.dupefilter_key = (
            settings.get("SCHEDULER_DUPEFILTER_KEY") or DUPEFILTER_KEY
        ) % names
        self.queue_path = str(settings.get("SCHEDULER_QUEUE_CLASS") or QUEUE_CLASS)
        try:
            self.queue_cls = load_object(self.queue_path)
        except (ImportError, NameError, AttributeError, ValueError) as exc:
            raise MigrationError(
                f"SCHEDULER_QUEUE_CLASS={self.queue_path!r} cannot be loaded: {exc}"
            ) from None
        self.serializer = _serializer(settings)
        # The queue's own decoding (serializer, request_from_dict against the
        # spider); it is never asked to push or pop: no client of its own.
        self.queue = self.queue_cls(
            server=None, spider=spider, key=self.queue_key, serializer=self.serializer
        )
        path = settings.get("DUPEFILTER_CLASS")
        cls = load_object(path) if path else RFPDupeFilter
        if not (isinstance(cls, type) and RFPDupeFilter in cls.__mro__):
            cls = RFPDupeFilter  # what scrapy-redis's scheduler wrote with
        # Its fingerprint method reads no state: no client of its own either.
        self.theirs: RFPDupeFilter = cls.__new__(cls)
        self.seeds = seed_source(spider, settings)
        self.score: Callable[..., int] | None = None
        path = settings.get("FRONTIER_PRIORITY_FUNCTION")
        if path:
            self.score = load_object(path)

    # -- what is there ---------------------------------------------------------

    def _order(self) -> tuple[str, str]:
        """(Redis type, the end scrapy-redis pops from) of the queue class."""
        mro = self.queue_cls.__mro__
        if PriorityQueue in mro:
            return "zset", "lowest score"
        if LifoQueue in mro:
            return "list", "head"
        if FifoQueue in mro:
            return "list", "tail"
        raise MigrationError(
            f"SCHEDULER_QUEUE_CLASS={self.queue_path!r} is not scrapy-redis's "
            "PriorityQueue, FifoQueue or LifoQueue (or a subclass): the order it "
            "pops in is unknown"
        )

    async def _type(self, key: str) -> str:
        kind = await self.client.type(key)
        return kind.decode() if isinstance(kind, bytes) else str(kind)

    async def _count(self, key: str, kind: str) -> int:
        count = {
            "list": self.client.llen,
            "set": self.client.scard,
            "zset": self.client.zcard,
            "hash": self.client.hlen,
        }.get(kind)
        return int(await count(key)) if count else 0

    async def _read(self, offset: int, n: int) -> list[bytes]:
        """Up to ``n`` queue entries in pop order, after the first ``offset``."""
        kind, end = self._order()
        key, last = self.queue_key, offset + n - 1
        if kind == "zset":
            entries = await self.client.zrange(key, offset, last)
        elif end == "head":
            entries = await self.client.lrange(key, offset, last)
        else:
            entries = await self.client.lrange(key, -last - 1, -offset - 1)
            entries.reverse()
        return cast("list[bytes]", entries)

    async def inventory(self) -> Inventory:
        """The keys, their types and sizes, and the serializer the queue's
        entries are in; changes nothing (``--dry-run``)."""
        kind, end = self._order()
        keys: list[KeyReport] = []
        problems: list[str] = []
        queue_type = await self._type(self.queue_key)
        head = await self._read(0, 1) if queue_type == kind else []
        first = head[0] if head else None
        keys.append(
            KeyReport(
                self.queue_key,
                queue_type,
                await self._count(self.queue_key, queue_type),
                f"requests: moved into the frontier ({self.queue_path}, popped "
                f"from its {end})",
            )
        )
        if queue_type not in ("none", kind):
            problems.append(self._wrong_type(queue_type, kind))
        df_type = await self._type(self.dupefilter_key)
        matched = None
        if df_type != "none":
            matched = self._fingerprints_match()[0]
            keys.append(
                KeyReport(
                    self.dupefilter_key,
                    df_type,
                    await self._count(self.dupefilter_key, df_type),
                    "fingerprints: "
                    + (
                        "loaded into the Bloom filter"
                        if matched
                        else "left alone (scrapy-redis's fingerprint is not this "
                        "crawl's; a URL cannot be recovered from one)"
                    ),
                )
            )
        for key in self.seeds.keys:
            seed_type = await self._type(key)
            role = f"seeds: left for the reliable take ({self.seeds.kind} expected)"
            keys.append(
                KeyReport(key, seed_type, await self._count(key, seed_type), role)
            )
            if seed_type not in ("none", self.seeds.kind):
                setting = SeedSource((key,), seed_type).setting()
                problems.append(f"{key} is a {seed_type}: set {setting}")
        for template, role in (
            (ITEMS_KEY, "items (RedisPipeline's): left alone"),
            (STATS_KEY, "stats (RedisStatsCollector's): left alone"),
        ):
            key = template % {"spider": self.name}
            key_type = await self._type(key)
            if key_type != "none":
                keys.append(
                    KeyReport(key, key_type, await self._count(key, key_type), role)
                )
        found = data_format(first)
        return Inventory(
            keys,
            self.queue_path,
            self.serializer.__name__,
            found,
            _unpickles(self.serializer) or found.startswith("pickle"),
            matched,
            problems,
        )

    def _wrong_type(self, found: str, expected: str) -> str:
        return (
            f"{self.queue_key} is a {found}, but SCHEDULER_QUEUE_CLASS="
            f"{self.queue_path!r} keeps a {expected}: set the queue class the "
            "crawl was queued with"
        )

    # -- the requests ----------------------------------------------------------

    def _decode(self, data: bytes) -> Request:
        if (looks_like_pickle(data) or _unpickles(self.serializer)) and not (
            self.trust_pickle
        ):
            raise UntrustedPickle(
                f"{self.queue_key} holds pickle ({self.serializer.__name__}): "
                "reading it runs code of whoever could write to this Redis "
                "(CWE-502); give --trust-pickle if only your own scrapy-redis "
                "workers wrote it"
            )
        request: Request = self.queue._decode_request(data)
        return request

    def _queued(self, request: Request, counts: LocalHostCounts) -> QueuedRequest:
        """``request`` as webcrawl's scheduler queues it (scored priority,
        JSON); raises UnserializableRequest."""
        member = request_to_bytes(request, self.spider)
        host = host_key(request.url)
        priority = self.score(request, counts) if self.score else request.priority
        counts.add(host)
        return QueuedRequest(host, priority, member)

    async def move_requests(self, frontier: PartitionedFrontier) -> MoveReport:
        """Move every entry of the queue key into ``frontier`` (module
        docstring); returns what was moved, dropped and left."""
        kind, end = self._order()
        found = await self._type(self.queue_key)
        report = MoveReport()
        if found == "none":
            return report
        if found != kind:
            raise MigrationError(self._wrong_type(found, kind))
        bloom = AsyncBloomFilter(
            self.client, self.name, BloomConfig.from_settings(self.settings)
        )
        await bloom.open()
        await frontier.pin()
        counts = LocalHostCounts()
        me = frontier.worker.id
        offset = 0  # entries left behind sit at the pop end
        while entries := await self._read(offset, BATCH):
            report.read += len(entries)
            batch: list[tuple[bytes, Request, QueuedRequest]] = []
            for data in entries:
                try:
                    request = self._decode(data)
                except UntrustedPickle:
                    raise
                except Exception as exc:
                    # The user's serializer and spider on data from Redis
                    # (a missing callback, another format): this entry is
                    # left, with why, and costs the others nothing.
                    report.leave(data, "unreadable", f"{type(exc).__name__}: {exc}")
                    continue
                try:
                    batch.append((data, request, self._queued(request, counts)))
                except UnserializableRequest as exc:
                    report.leave(data, "not storable as JSON", str(exc))
            offset += len(entries) - len(batch)
            if not batch:
                continue
            entry = uuid.uuid4().hex[:12]
            # Beat first: only a registered worker's batches are recovered.
            await frontier.beat()
            await frontier.log_ahead(me, entry, [q for _, _, q in batch])
            checked = [(i, r) for i, (_, r, _) in enumerate(batch) if not r.dont_filter]
            # The Bloom dupefilter's key: the fingerprint of the canonical URL
            # (the request itself is queued as scrapy-redis held it).
            seen = await bloom.test_and_set(
                [self.fingerprint(canonical_request(r)) for _, r in checked]
            )
            dropped = {i for (i, _), was in zip(checked, seen, strict=True) if was}
            keep = [q for i, (_, _, q) in enumerate(batch) if i not in dropped]
            await frontier.commit(keep, wal=(me, entry))
            report.queued += len(keep)
            report.seen += len(dropped)
            await self._remove([d for d, _, _ in batch], kind, end)
        await bloom.flush()
        await frontier.retire()
        return report

    async def _remove(self, entries: list[bytes], kind: str, end: str) -> None:
        """Remove moved entries from scrapy-redis's key (one occurrence each,
        counted from the end scrapy-redis pops)."""
        async with self.client.pipeline(transaction=False) as pipe:
            if kind == "zset":
                pipe.zrem(self.queue_key, *entries)
            else:
                for data in entries:
                    count = 1 if end == "head" else -1
                    pipe.lrem(self.queue_key, count, data)  # type: ignore[arg-type]
            await pipe.execute()

    # -- the dupefilter ----------------------------------------------------------

    def _fingerprints_match(self) -> tuple[bool, str]:
        """Whether scrapy-redis's fingerprint and this crawl's agree on the
        probe requests (as the crawl's dupefilter sees them), and if not, on
        which."""
        for probe in PROBES:
            theirs = self.theirs.request_fingerprint(probe)
            canonical = canonical_request(probe)
            ours = self.fingerprint(canonical).hex()
            if theirs != ours:
                return False, (
                    f"on {probe.method} {probe.url} scrapy-redis's fingerprint is "
                    f"{theirs[:12]}..., this crawl's {ours[:12]}..."
                )
        return True, ""

    async def load_dupefilter(self) -> DupefilterReport:
        """Load the dupefilter's fingerprints into the Bloom filter when the
        two fingerprints agree (module docstring); the key is left as it is
        either way."""
        report = DupefilterReport(self.dupefilter_key)
        kind = await self._type(self.dupefilter_key)
        if kind == "none":
            return report
        if kind != "set":
            report.why_not = (
                f"{self.dupefilter_key} is a {kind}, not scrapy-redis's set"
            )
            return report
        report.fingerprints = int(await self.client.scard(self.dupefilter_key))
        report.matched, report.why_not = self._fingerprints_match()
        if not report.matched:
            return report
        bloom = AsyncBloomFilter(
            self.client, self.name, BloomConfig.from_settings(self.settings)
        )
        await bloom.open()
        cursor = 0
        while True:
            cursor, members = await self.client.sscan(
                self.dupefilter_key, cursor, count=BATCH
            )
            fps = []
            for member in members:
                try:
                    text = (
                        member.decode("ascii") if isinstance(member, bytes) else member
                    )
                    fp = bytes.fromhex(text)
                except (UnicodeDecodeError, ValueError):
                    fp = b""
                if len(fp) == 20:
                    fps.append(fp)
                else:
                    report.malformed += 1
            for was in await bloom.test_and_set(fps) if fps else []:
                report.known += was
                report.loaded += not was
            if not cursor:
                break
        await bloom.flush()
        return report


async def frontier_for(
    client: aredis.Redis, prefix: str, settings: BaseSettings
) -> PartitionedFrontier:
    """The crawl's frontier (its recorded partition count, else
    ``FRONTIER_PARTITIONS``), with a worker of its own for the move: its
    heartbeat is what lets a live worker queue its write-ahead batches
    should it stop midway."""
    partitions = await recorded_partitions(client, prefix)
    lease_ms = int(settings.getfloat("FRONTIER_LEASE_TIMEOUT") * 1000)
    return PartitionedFrontier(
        client,
        prefix,
        partitions or settings.getint("FRONTIER_PARTITIONS"),
        Worker(f"migrate-{worker_id()}", lease_ms),
    )
