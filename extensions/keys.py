"""The Redis key layout of a crawl: every key webcrawl uses is named here.

All keys start with the crawl's prefix, the spider name (``web``). Keys that a
Lua script touches together carry the same hash tag, ``{web}``, so a Redis
Cluster keeps them in one slot; keys that are only ever used alone (robots,
Bloom shards) carry their own tag or none, so a cluster spreads them.

Partitions (``FRONTIER_PARTITIONS`` = P): each host belongs to one partition
(:func:`extensions.hosts.host_partition`), and every ``web:{web}:...`` key of
the table but three exists once per partition, under that partition's tag:
partition 0 keeps ``{web}`` (so P=1 is exactly the one-partition layout), and
partition i > 0 uses ``{web:p<i>}`` or ``{web:p<i>.<n>}``
(``web:{web:p2.1}:q:<host>``), a tag no other key family uses (the Bloom
shards' ``{web:<n>}`` has no ``p``); :func:`partition_tag` picks ``n`` so the
partitions spread evenly over a cluster's slots. The three are the recrawl
schedule (``recrawl``, ``recrawl:data``), keyed by URL and never touched with
a host's queue, and ``partitions``, the partition count itself: they stay in
partition 0's ``{web}`` slot whatever P is. The dead-letter queue is per
partition: the frontier's commit and the host-down sweep write a host's dead
letters in the script that reads its queue and record. A host's download lock
``lock:<id>`` lives in its host's partition (the lock script reads the host
record with it), and so do the spill's ``refill`` SET and refill lock
``spill:lock:<host>`` (the commit and refill scripts read them with the
host's queue and record).

==============================  ======  =========================================
key                             type    what it holds
==============================  ======  =========================================
``web:start_urls``              LIST    seeds: a URL or a JSON object per entry
``web:start_urls:invalid``      LIST    seeds that could not be used, with why
``web:{web:start_urls}:``       LIST    seeds one worker took, until its
``taken:<worker>``                      scheduler queued them (or they were
                                        refused); a live worker puts a dead
                                        worker's back on the seed list
``web:{web:start_urls}:``       ZSET    seed takers: worker id -> last
``takers``                              heartbeat (ms)
``web:{web}:q:<host>``          ZSET    one host's queue: request -> score
                                        (priority, then arrival order)
``web:{web}:ready``             ZSET    hosts with queued requests -> the time
                                        (ms) they may next be fetched from
``web:{web}:h:<host>``          HASH    one host's record (ms): ``next``,
                                        ``delay``, ``backoff``, ``backoff_at``,
                                        ``park``, ``fails``, ``breaker``,
                                        ``failing_since``, ``down``,
                                        ``down_reason``, and the spill's
                                        ``spilled``, ``spilling``,
                                        ``spill_low``; each field is
                                        documented by its owner,
                                        :mod:`extensions.hosts`
``web:{web}:delayed``           ZSET    retries not due yet: host, priority
                                        and request -> due time (ms)
``web:{web}:dlq``               HASH    dead-letter queue: URL -> JSON entry
                                        (reason, status/error, attempts,
                                        first/last failure, request)
``web:{web}:dlq:reasons``       HASH    dead letters per reason class
``web:{web}:dlq:unrecorded``    LIST    URLs dead-lettered with no page
                                        record yet (the scheduler hands them
                                        to the page store)
``web:{web}:leases``            ZSET    lease id -> deadline (ms)
``web:{web}:lease``             HASH    lease id -> host, score and request
``web:{web}:seq``               STRING  arrival counter (FIFO within a priority)
``web:{web}:workers``           ZSET    worker id -> last heartbeat (ms)
``web:{web}:wal:<worker>``      HASH    batches written ahead of the
                                        dupefilter, until queued
``web:{web}:paused``            STRING  exists while the fleet is paused
                                        (``scrapy pause``): nothing is leased
``web:{web}:poison``            LIST    malformed entries moved aside (JSON:
                                        key, field, entry, length, reason);
                                        the newest 10,000
``web:{web}:partitions``        STRING  the crawl's ``FRONTIER_PARTITIONS``,
                                        set by its first worker
``web:{web}:poison:<key>``      any     a frontier key of the wrong type,
                                        renamed aside
``web:{web}:recrawl``           ZSET    stored URL -> its next visit (ms)
                                        (``RECRAWL_ENABLED``)
``web:{web}:recrawl:data``      HASH    stored URL -> JSON [interval s, etag,
                                        last-modified, content hash, change
                                        history, rate bin]
``web:{web}:recrawl:stats``     HASH    the fleet's freshness figures: known
                                        pages per rate bin, scheduled revisit
                                        rate, expected freshness, price,
                                        counters since the crawl began
``web:{web}:recrawl:w:<n>``     HASH    revisit counters of window bucket n
                                        (Redis time); expire after the window
``web:{web}:recrawl:claimed``   HASH    claimed URL -> the time it was first
                                        due, until its next visit is written
``web:{web}:lock:<id>``         STRING  per-host download lock (token, PX);
                                        id: host, registered domain or IP
``web:{web}:refill``            SET     hosts with spilled requests
                                        (``FRONTIER_SPILL_STORE``) and a queue
                                        shorter than ``FRONTIER_SPILL_BATCH``
``web:{web}:spill:lock:<host>`` STRING  short lock: one refill of a host at
                                        a time (token, PX)
``web:stats:{web:stats}:fleet``  HASH    fleet totals: counter -> value
``web:stats:{web:stats}:w:<id>`` HASH   one worker's totals and beat (machine,
                                        pid, pages/s...); expires when silent
``web:stats:{web:stats}:m:<n>`` HASH    counters of minute n (Redis time);
                                        expires after 18 minutes
``web:robots:<host>``           HASH    cached robots.txt: status, body, time
``web:robots:fetch:<host>``     STRING  short lock: one robots fetch per fleet
``web:bloom:{web:<n>}:<layer>`` STRING  Bloom filter bitmap shard n of a layer
``web:bloom:meta``              HASH    Bloom filter geometry and layer count
``web:traps:{web:traps:<h>}:``  HLL     distinct URLs of host h admitted by the
``pages``                               trap filter (``HOST_MAX_PAGES``)
``web:traps:{web:traps:<h>}:``  HLL     distinct query strings (or dated /
``v:<path>``                            session-id variants) of one path
                                        (``TRAP_MAX_QUERY_VARIANTS``)
``web:simhash:{web:simhash}:``  HASH    near-duplicate band index:
``bands``                               "<band>:<block>" -> the page ids (space
                                        separated) whose SimHash has that
                                        16-bit block in that band
``web:simhash:{web:simhash}:``  HASH    page id -> "<simhash> <content hash>"
``pages``                               of the indexed (original) pages
``web:simhash:{web:simhash}:``  HASH    content hash (SHA-256 of the text) ->
``sha``                                 page id (exact duplicates)
``web:simhash:{web:simhash}:``  LIST    page ids in the order they were indexed:
``order``                               the three above are a cache of the
                                        newest ``NEARDUP_CACHE_PAGES`` pages
                                        (the page store holds the rest)
==============================  ======  =========================================

``<host>`` is the frontier's dispatch key, :func:`extensions.hosts.host_key`:
``scheme://host:port`` lowercased with the default port made explicit, the
identity RFC 9309 gives a robots.txt (it applies to one scheme, host and port),
so the robots cache, the queues and the host records all share it. Scrapy's
downloader keys its local slots differently (``Downloader.get_slot_key``: the
bare hostname, without scheme and port, unless ``download_slot`` is set), so
two ports of one host share a Scrapy slot but have two frontier queues; the
lock (``POLITENESS_KEY``) can be widened to the registered domain or the IP.
"""

from __future__ import annotations

from functools import lru_cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS as CLUSTER_SLOTS
from redis.crc import key_slot


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
        """The recrawl counters of one window bucket (:mod:`extensions.recrawl`).

        >>> FrontierKeys("web").recrawl_window(7)
        'web:{web}:recrawl:w:7'
        """
        return self.recrawl_stats[: -len("stats")] + f"w:{bucket}"

    def spill_lock(self, host: str) -> str:
        """The refill lock of one host (:mod:`extensions.spill`).

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
    """Names of one crawl's fleet statistics keys (:mod:`extensions.fleetstats`).

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
    """>>> start_urls("web")
    'web:start_urls'
    """
    return f"{prefix}:start_urls"


def invalid_start_urls(prefix: str) -> str:
    return f"{prefix}:start_urls:invalid"


def seed_takers(prefix: str) -> str:
    """The workers that take seeds, with their heartbeats (ms). Tagged
    ``{<prefix>:start_urls}``: the slot of the untagged seed list itself
    (whose name the operators' ``lpush`` fixes), so one script moves entries
    between them on a cluster too.

    >>> seed_takers("web")
    'web:{web:start_urls}:takers'
    >>> key_slot(seed_takers("web").encode()) == key_slot(start_urls("web").encode())
    True
    """
    return f"{prefix}:{{{start_urls(prefix)}}}:takers"


def seed_taken(prefix: str, worker: str) -> str:
    """The seeds one worker took and its scheduler has not yet queued.

    >>> seed_taken("web", "w1")
    'web:{web:start_urls}:taken:w1'
    >>> key_slot(seed_taken("web", "w1").encode()) == key_slot(b"web:start_urls")
    True
    """
    return f"{prefix}:{{{start_urls(prefix)}}}:taken:{worker}"


def seed_patterns(prefix: str) -> list[str]:
    """SCAN patterns for the seed-list keys besides the list itself (the
    takers and their taken seeds)."""
    return [f"{prefix}:{{{start_urls(prefix)}}}:*"]


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
    the latter two need one partition, see :mod:`extensions.politeness`).

    >>> host_lock("web", "http://a.test:80")
    'web:{web}:lock:http://a.test:80'
    >>> host_lock("web", "http://a.test:80", 2, 3)
    'web:{web:p2.1}:lock:http://a.test:80'
    """
    return FrontierKeys(prefix, partition, partitions).lock(lock_id)


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
