"""The Redis key layout of a crawl: every key webcrawl uses is named here.

All keys start with the crawl's prefix, its spider's name
(:func:`crawl_prefix`). Keys that one Lua script touches together share a
hash tag, so a Redis Cluster keeps them in one slot: ``{web}`` for the
frontier (``{web:p<i>[.<n>]}`` for partition i > 0, :func:`partition_tag`),
``{web:start_urls}`` for the seed hand-over, ``{web:stats}``,
``{web:simhash}``, ``{web:traps:<host>}``; keys only ever used alone (robots,
Bloom shards) carry their own tag or none, so a cluster spreads them.
``<host>`` is the frontier's dispatch key,
:func:`extensions.utils.hosts.host_key` (``scheme://host:port``, RFC 9309's
identity of a robots.txt), which the robots cache, the queues and the host
records share; Scrapy's own download slots key by bare hostname.

The table of every key, its type and what it holds is the README's "Redis
key layout" (``tests/test_docs.py`` checks it against the functions here);
who writes each structure, its "Who writes what"; the protocols,
``docs/frontier.md``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from redis.crc import REDIS_CLUSTER_HASH_SLOTS as CLUSTER_SLOTS
from redis.crc import key_slot

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scrapy.crawler import Crawler

# The prefix of a crawl whose spider is not known (a component used outside
# a crawl, an operator command given no spider name).
DEFAULT_CRAWL = "web"


def crawl_prefix(crawler: Crawler) -> str:
    """The prefix of every key of the crawler's crawl: its spider's name (the
    convention ``<spider>:start_urls`` comes from), :data:`DEFAULT_CRAWL`
    before a spider is known."""
    spider = crawler.spider
    return spider.name if spider is not None else DEFAULT_CRAWL


@lru_cache(maxsize=4096)
def partition_tag(prefix: str, partition: int = 0, partitions: int = 1) -> str:
    """The hash tag of one of ``partitions`` frontier partitions.

    Partition 0 keeps the crawl's own tag, so one partition is the
    unpartitioned layout. Partition i > 0 takes the first of ``<prefix>:p<i>``,
    ``<prefix>:p<i>.1``, ``<prefix>:p<i>.2``, ... whose cluster slot (CRC16
    mod 16384) lies in the middle quarter of the i-th of P equal ranges of
    the slots, counted on from partition 0's range: the P tags are evenly
    spaced over the slots, so a cluster whose N masters hold equal slot
    ranges (as ``redis-cli --cluster create`` assigns them) gets about P/N
    partitions on each master, and every master one as soon as P >= N
    (plain names would land where CRC16 puts them: ``{web}``, ``{web:p1}``
    and ``{web:p2}`` fall on two of three masters).

    >>> partition_tag("web"), partition_tag("web", 1, 3), partition_tag("web", 2, 3)
    ('{web}', '{web:p1.50}', '{web:p2.1}')
    >>> [key_slot(partition_tag("web", i, 3).encode()) for i in range(3)]
    [9635, 13102, 2458]
    """
    if partition == 0:
        return f"{{{prefix}}}"
    width = CLUSTER_SLOTS / partitions
    first = key_slot(f"{{{prefix}}}".encode()) // width
    center = ((first + partition) % partitions + 0.5) * width
    n = 0
    while True:
        name = f"{prefix}:p{partition}" + (f".{n}" if n else "")
        if abs(key_slot(name.encode()) - center) < width / 8:
            return f"{{{name}}}"
        n += 1


class FrontierKeys:
    """Names of the frontier keys of one partition of a crawl (the hash-tagged
    ones; partition 0 by default).

    >>> k = FrontierKeys("web")
    >>> k.queue("http://a.test:80")
    'web:{web}:q:http://a.test:80'
    >>> k.ready, k.leases, k.lease_data
    ('web:{web}:ready', 'web:{web}:leases', 'web:{web}:lease')
    >>> k.queue_prefix
    'web:{web}:q:'
    >>> FrontierKeys("web", 2, 3).ready
    'web:{web:p2.1}:ready'
    """

    def __init__(self, prefix: str, partition: int = 0, partitions: int = 1) -> None:
        self.prefix = prefix
        self.partition = partition
        tagged = f"{prefix}:{partition_tag(prefix, partition, partitions)}:"
        self.tagged = tagged
        self.queue_prefix = tagged + "q:"
        self.host_prefix = tagged + "h:"
        self.ready = tagged + "ready"
        self.leases = tagged + "leases"
        self.lease_data = tagged + "lease"
        self.seq = tagged + "seq"
        self.workers = tagged + "workers"
        self.wal_prefix = tagged + "wal:"
        self.delayed = tagged + "delayed"
        self.paused = tagged + "paused"
        self.poison = tagged + "poison"
        self.dlq = tagged + "dlq"
        self.dlq_reasons = tagged + "dlq:reasons"
        self.dlq_unrecorded = self.dlq + ":unrecorded"
        self.refill = tagged + "refill"
        # Operators' per-host settings (``scrapy hosts``): the same in every
        # partition, so the lease and lock scripts read them in their slot.
        self.overrides = tagged + "overrides"
        # Addresses busy now -> until when (POLITENESS_KEY naming ``ip``).
        self.ip_schedule = tagged + "ipsched"
        # Not per host: the recrawl schedule of every partition lives in
        # partition 0's slot (see the module docstring).
        base = f"{prefix}:{partition_tag(prefix)}:"
        self.recrawl = base + "recrawl"
        self.recrawl_data = base + "recrawl:data"
        self.recrawl_stats = base + "recrawl:stats"
        self.recrawl_claimed = base + "recrawl:claimed"
        self.partitions = base + "partitions"

    def queue(self, host: str) -> str:
        return self.queue_prefix + host

    def host(self, host: str) -> str:
        return self.host_prefix + host

    def recrawl_window(self, bucket: int) -> str:
        """The recrawl counters of one window bucket
        (:mod:`extensions.extensions.recrawl`).

        >>> FrontierKeys("web").recrawl_window(7)
        'web:{web}:recrawl:w:7'
        """
        return self.recrawl_stats[: -len("stats")] + f"w:{bucket}"

    def spill_lock(self, host: str) -> str:
        """The refill lock of one host (:mod:`extensions.core.frontier.spill`).

        >>> FrontierKeys("web").spill_lock("http://a.test:80")
        'web:{web}:spill:lock:http://a.test:80'
        """
        return self.tagged + "spill:lock:" + host

    def wal(self, worker: str) -> str:
        """A worker's write-ahead batches (entry id -> JSON)."""
        return self.wal_prefix + worker

    def lock(self, lock_id: str) -> str:
        """A host's download lock, in its host's partition (see
        :func:`host_lock`)."""
        return self.tagged + "lock:" + lock_id

    def inflight(self, lock_id: str) -> str:
        """The downloads in flight of a lock whose host allows more than one
        at a time (see :func:`host_inflight`)."""
        return self.tagged + "inflight:" + lock_id

    def pattern(self) -> str:
        """A SCAN pattern matching every frontier key of the partition."""
        return self.tagged + "*"


def partition_patterns(prefix: str) -> list[str]:
    """SCAN patterns for the frontier keys of every partition, whatever the
    number of partitions was when they were written.

    >>> partition_patterns("web")
    ['web:{web}:*', 'web:{web:p*}:*']
    """
    return [FrontierKeys(prefix).pattern(), f"{prefix}:{{{prefix}:p*}}:*"]


class StatsKeys:
    """Names of one crawl's fleet statistics keys
    (:mod:`extensions.extensions.fleetstats`).

    All share the ``{<prefix>:stats}`` hash tag: one script updates them.

    >>> k = StatsKeys("web")
    >>> k.fleet
    'web:stats:{web:stats}:fleet'
    >>> k.worker("w1"), k.minute(29000000)
    ('web:stats:{web:stats}:w:w1', 'web:stats:{web:stats}:m:29000000')
    """

    def __init__(self, prefix: str) -> None:
        tagged = f"{prefix}:stats:{{{prefix}:stats}}:"
        self.fleet = tagged + "fleet"
        self.worker_prefix = tagged + "w:"
        self.minute_prefix = tagged + "m:"

    def worker(self, worker: str) -> str:
        return self.worker_prefix + worker

    def minute(self, minute: int) -> str:
        return f"{self.minute_prefix}{minute}"


def start_urls(prefix: str) -> str:
    """The seed list of a crawl whose spider names no other key (scrapy-redis's
    convention, ``REDIS_START_URLS_KEY``).

    >>> start_urls("web")
    'web:start_urls'
    """
    return f"{prefix}:start_urls"


def invalid_start_urls(prefix: str) -> str:
    return invalid_seeds(start_urls(prefix))


def invalid_seeds(seed_key: str) -> str:
    """Where the entries of seed key ``seed_key`` that are refused go (the
    first key's, when a spider reads several).

    >>> invalid_seeds("shop:urls")
    'shop:urls:invalid'
    """
    return f"{seed_key}:invalid"


def slot_tag(key: str) -> str:
    """The hash tag that puts another key in the cluster slot of ``key``:
    ``key``'s own tag when it has one (Redis hashes only that part), else
    ``key`` itself in braces.

    >>> slot_tag("web:start_urls"), slot_tag("{shop}:urls"), slot_tag("a{}b")
    ('{web:start_urls}', '{shop}', '{a{}b}')
    >>> key_slot(b"x" + slot_tag("{shop}:urls").encode()) == key_slot(b"{shop}:urls")
    True
    """
    start = key.find("{")
    if start != -1:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start : end + 1]
    return "{" + key + "}"


def seed_takers(prefix: str, seed_key: str | None = None) -> str:
    """The workers that take seeds from ``seed_key`` (default: the crawl's
    seed list), with their heartbeats (ms). Tagged by the seed key's slot
    (:func:`slot_tag`; the operators' ``lpush`` fixes its name), so one
    script moves entries between them on a cluster too.

    >>> seed_takers("web")
    'web:{web:start_urls}:takers'
    >>> key_slot(seed_takers("web").encode()) == key_slot(start_urls("web").encode())
    True
    >>> seed_takers("shop", "shop:urls")
    'shop:{shop:urls}:takers'
    """
    return f"{prefix}:{slot_tag(seed_key or start_urls(prefix))}:takers"


def seed_taken(prefix: str, worker: str, seed_key: str | None = None) -> str:
    """The seeds one worker took from ``seed_key`` and its scheduler has not
    yet queued.

    >>> seed_taken("web", "w1")
    'web:{web:start_urls}:taken:w1'
    >>> key_slot(seed_taken("web", "w1").encode()) == key_slot(b"web:start_urls")
    True
    """
    return f"{prefix}:{slot_tag(seed_key or start_urls(prefix))}:taken:{worker}"


def seed_patterns(prefix: str, seed_keys: Sequence[str] = ()) -> list[str]:
    """SCAN patterns for the seed-list keys besides the lists themselves (the
    takers and their taken seeds) of the crawl's seed list and of
    ``seed_keys``.

    >>> seed_patterns("web", ["web:start_urls", "{hot}:urls"])
    ['web:{web:start_urls}:*', 'web:{hot}:*']
    """
    tags = dict.fromkeys(slot_tag(k) for k in [start_urls(prefix), *seed_keys])
    return [f"{prefix}:{glob_escape(tag)}:*" for tag in tags]


def glob_escape(text: str) -> str:
    r"""``text`` as a literal in a SCAN pattern.

    >>> print(glob_escape("a*b[c]?"))
    a\*b\[c\]\?
    """
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def robots(prefix: str, host: str) -> str:
    return f"{prefix}:robots:{host}"


def robots_fetch_lock(prefix: str, host: str) -> str:
    return f"{prefix}:robots:fetch:{host}"


def bloom_shard(prefix: str, layer: int, shard: int) -> str:
    """Each shard has its own hash tag so a cluster spreads a large filter.

    >>> bloom_shard("web", 0, 3)
    'web:bloom:{web:3}:0'
    """
    return f"{prefix}:bloom:{{{prefix}:{shard}}}:{layer}"


def bloom_meta(prefix: str) -> str:
    return f"{prefix}:bloom:meta"


def simhash_bands(prefix: str) -> str:
    """All duplicate-index keys share the ``{<prefix>:simhash}`` tag: one Lua
    script checks and updates them together (pipelines.dedup).

    >>> simhash_bands("web")
    'web:simhash:{web:simhash}:bands'
    """
    return f"{prefix}:simhash:{{{prefix}:simhash}}:bands"


def crawl_patterns(prefix: str) -> list[str]:
    """SCAN patterns for every key of a crawl except its seed list (used to
    start a crawl afresh)."""
    return [
        *partition_patterns(prefix),
        f"{prefix}:robots:*",
        f"{prefix}:bloom:*",
        f"{prefix}:simhash:*",
        f"{prefix}:stats:*",
        f"{prefix}:traps:*",
    ]


def trap_pages(prefix: str, host: str) -> str:
    """Distinct URLs of a host admitted (HyperLogLog); tagged by host so one
    script reads it with the host's variant keys on a cluster too.

    >>> trap_pages("web", "http://a.test:80")
    'web:traps:{web:traps:http://a.test:80}:pages'
    """
    return f"{prefix}:traps:{{{prefix}:traps:{host}}}:pages"


def trap_variants(prefix: str, host: str, path: str) -> str:
    """Distinct query strings (or date variants) of one path of a host (HLL).

    >>> trap_variants("web", "http://a.test:80", "/search")
    'web:traps:{web:traps:http://a.test:80}:v:/search'
    """
    return f"{prefix}:traps:{{{prefix}:traps:{host}}}:v:{path}"


def host_lock(
    prefix: str, lock_id: str, partition: int = 0, partitions: int = 1
) -> str:
    """The per-host download lock under the hash tag of its host's partition,
    so the lock script can read the host record and set the lock in one call
    on a cluster too (``lock_id``: a host key, a registered domain or an IP;
    the latter two need one partition, see
    :mod:`extensions.downloadermiddlewares.politeness`).

    >>> host_lock("web", "http://a.test:80")
    'web:{web}:lock:http://a.test:80'
    >>> host_lock("web", "http://a.test:80", 2, 3)
    'web:{web:p2.1}:lock:http://a.test:80'
    """
    return FrontierKeys(prefix, partition, partitions).lock(lock_id)


def host_inflight(
    prefix: str, lock_id: str, partition: int = 0, partitions: int = 1
) -> str:
    """The downloads in flight of a download lock (a ZSET: token -> until
    when it counts, ms) when its host's concurrency is above 1, beside the
    lock in its partition.

    >>> host_inflight("web", "http://a.test:80")
    'web:{web}:inflight:http://a.test:80'
    """
    return FrontierKeys(prefix, partition, partitions).inflight(lock_id)


def simhash_pages(prefix: str) -> str:
    """>>> simhash_pages("web")
    'web:simhash:{web:simhash}:pages'
    """
    return f"{prefix}:simhash:{{{prefix}:simhash}}:pages"


def content_hashes(prefix: str) -> str:
    """>>> content_hashes("web")
    'web:simhash:{web:simhash}:sha'
    """
    return f"{prefix}:simhash:{{{prefix}:simhash}}:sha"


def simhash_order(prefix: str) -> str:
    """>>> simhash_order("web")
    'web:simhash:{web:simhash}:order'
    """
    return f"{prefix}:simhash:{{{prefix}:simhash}}:order"
