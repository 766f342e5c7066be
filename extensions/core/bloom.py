"""A (scalable) Bloom filter in Redis bitmaps, shared by every worker of a crawl.

Settings read (by :meth:`BloomConfig.from_settings`): ``BLOOM_CAPACITY``,
``BLOOM_ERROR_RATE``, ``BLOOM_SHARD_BITS``, ``BLOOM_SCALABLE``,
``BLOOM_GROWTH``, ``BLOOM_TIGHTENING``, ``BLOOM_MAX_LAYERS``,
``BLOOM_PREALLOCATE``.

Bit math (Bloom 1970; Kirsch and Mitzenmacher 2006; Almeida et al. 2007): for a
capacity of ``n`` items at a false-positive rate ``p`` a layer has ``m = -n ln
p / (ln 2)^2`` bits and ``k = (m / n) ln 2`` hash functions; after ``n``
insertions a probe is a false positive with probability ``(1 - e^(-kn/m))^k``.
The ``k`` positions of a key come from one MurmurHash3 x64-128 digest split in
two 64-bit halves ``h1, h2`` by enhanced double hashing, ``g_i = h1 + i h2 +
(i^3 - i) / 6 (mod m)``, not from ``k`` hash calls.

Layout (see :mod:`extensions.keys`): a layer of ``m`` bits is split into
``ceil(m / BLOOM_SHARD_BITS)`` equal shards, Redis strings of at most 2^32
bits (512 MB), each with its own hash tag so a Redis Cluster spreads them.
A key lives wholly in one shard, picked from the high bits of ``h1``; its
``k`` positions fall in that shard. So "seen?" and "mark seen" are one
``BITFIELD shard SET u1 g_1 1 ... SET u1 g_k 1`` command whose reply holds the
old bits: the key was new iff one of them was 0, and of two workers racing on
one URL exactly one sees a 0. A batch of keys is one pipeline, one round trip.

Layers (scalable Bloom filter): layer ``i`` holds ``BLOOM_CAPACITY *
BLOOM_GROWTH^i`` items at ``BLOOM_ERROR_RATE * BLOOM_TIGHTENING^i``, so the
compounded false-positive rate stays below ``BLOOM_ERROR_RATE / (1 -
BLOOM_TIGHTENING)``. The defaults start at 1.6 M items (3.5 MB) and double, at
a rate falling by 0.9 per layer: a demo crawl holds 3.5 MB of filter, six
layers hold 100.8 M items in 1.29 times the bits of an optimal filter sized
for 100 M at the same compound bound (:meth:`BloomConfig.overhead`; a
tightening of 0.5 costs 1.46 times). Right after a layer is added the newest
one is nearly empty and the ratio peaks (2.6 at 50 M items): a Bloom filter
cannot be resized, so a growing one pays for its newest layer whole. Only the
newest layer is written; older (full) layers are
read with ``BITFIELD_RO`` in the same pipeline, and a key found there is not
new. The geometry and the layer count live in the ``keys.bloom_meta`` HASH:
the first worker creates it atomically, the others adopt it (a worker whose
settings differ logs a warning: the stored geometry wins, changing it would
corrupt the filter). Each batch also reads the layer count *after* its
``BITFIELD`` commands; when it grew meanwhile, the keys this worker found new
are tested-and-set again in the layers it had not seen, so two workers that
disagree on the newest layer still cannot both accept a URL. Items inserted
per layer are counted in the meta hash (``items:<layer>``, sent with the next
batch); when the newest layer reaches its capacity a layer is added (or, with
``BLOOM_SCALABLE`` off or ``BLOOM_MAX_LAYERS`` reached, a warning is logged
once and ``dupefilter/over_capacity`` set).

All I/O goes through one sans-IO core driven by a synchronous
(:class:`BloomFilter`) or an asyncio (:class:`AsyncBloomFilter`) redis client;
each ``yield`` of the core is one pipeline, one round trip.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import mmh3
from scrapy.exceptions import NotConfigured

from extensions import keys
from extensions.connection.scripts import (
    run_pipelined,
    run_pipelined_sync,
    script,
    sync_script,
)
from extensions.settings import defaults

if TYPE_CHECKING:
    import redis
    import redis.asyncio as aredis
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

    from extensions.connection.scripts import Call

logger = logging.getLogger(__name__)

LN2 = math.log(2)
#: A Redis string holds at most 512 MB, i.e. 2^32 bits (BITFIELD offsets < 2^32).
MAX_SHARD_BITS = 2**32
#: Version of the hashing scheme, stored in the meta hash: a filter written by
#: one scheme cannot be read by another.
HASH_SCHEME = "mmh3-x64-128/edh/v1"

Command = tuple[Any, ...]
_R = TypeVar("_R")
# One round trip of the core: it yields the commands of a pipeline and is sent
# their results.
Step = Generator[list[Command], list[Any], _R]


# --- Bit math -----------------------------------------------------------------


def optimal_bits(capacity: int, error_rate: float) -> int:
    """Bits ``m = -n ln p / (ln 2)^2`` of a Bloom filter for ``n`` items at
    false-positive rate ``p`` (rounded up).

    >>> optimal_bits(10_000_000, 0.001)  # 17.97 MB
    143775876
    >>> optimal_bits(1, 0.5)
    2
    """
    return math.ceil(-capacity * math.log(error_rate) / (LN2 * LN2))


def optimal_hashes(bits: int, capacity: int) -> int:
    """Hash functions ``k = (m / n) ln 2``, rounded, at least one.

    >>> optimal_hashes(143775876, 10_000_000)
    10
    >>> optimal_hashes(10, 1000)
    1
    """
    return max(1, round(bits / capacity * LN2))


def expected_fp_rate(bits: int, hashes: int, items: float) -> float:
    """False-positive rate ``(1 - e^(-kn/m))^k`` after ``n`` insertions.

    >>> round(expected_fp_rate(143775876, 10, 10_000_000), 6)
    0.001
    >>> expected_fp_rate(1000, 3, 0)
    0.0
    """
    return float((1.0 - math.exp(-hashes * items / bits)) ** hashes)


def estimate_items(bits: int, hashes: int, bits_set: int) -> float:
    """Items in a filter with ``X`` of its ``m`` bits set (Swamidass and Baldi
    2007): ``-(m / k) ln(1 - X / m)``; infinite when every bit is set.

    >>> estimate_items(1000, 1, 0) == 0, round(estimate_items(1000, 2, 200), 1)
    (True, 111.6)
    >>> estimate_items(8, 2, 8)
    inf
    """
    if bits_set >= bits:
        return math.inf
    return -bits / hashes * math.log1p(-bits_set / bits)


def bloom_bound_bytes_per_item(error_rate: float) -> float:
    """Bytes per item of an optimal Bloom filter at ``p``: ``-ln p / (8 (ln
    2)^2)``, 1.44 times the information-theoretic ``log2(1/p) / 8``.

    >>> round(bloom_bound_bytes_per_item(0.001), 4)
    1.7972
    """
    return -math.log(error_rate) / (8 * LN2 * LN2)


def info_bound_bytes_per_item(error_rate: float) -> float:
    """The information-theoretic minimum ``log2(1/p) / 8`` bytes per item of
    any approximate-membership structure at false-positive rate ``p``.

    >>> round(info_bound_bytes_per_item(0.001), 4)
    1.2457
    """
    return -math.log2(error_rate) / 8


# k <= 64 in practice (p = 1e-19); the cubic offsets of enhanced double hashing.
_CUBES = tuple((i * i * i - i) // 6 for i in range(128))


def key_hash(key: bytes) -> tuple[int, int]:
    """The two 64-bit halves of the MurmurHash3 x64-128 digest of ``key``.

    >>> key_hash(b"abc")
    (13012657714217449575, 4297124817637354834)
    """
    h1, h2 = mmh3.hash64(key, seed=0, x64arch=True, signed=False)
    return h1, h2


@dataclass(frozen=True)
class Layer:
    """The geometry of one layer: ``shards`` strings of ``shard_bits`` bits."""

    index: int
    capacity: int
    error_rate: float
    hashes: int
    shards: int
    shard_bits: int

    @property
    def bits(self) -> int:
        return self.shards * self.shard_bits

    def locate(self, h1: int, h2: int) -> tuple[int, list[int]]:
        """The shard of a key and its ``k`` bit offsets in that shard.

        The shard comes from the high bits of ``h1`` (Lemire's multiply-shift
        range reduction), the offsets from ``h1 mod m`` onwards, so the two are
        independent for any ``shard_bits`` well below 2^64 / shards.

        >>> layer = Layer(0, 100, 0.01, 3, shards=4, shard_bits=240)
        >>> layer.locate(2**63, 5)
        (2, [128, 133, 139])
        """
        shard = (h1 * self.shards) >> 64
        m = self.shard_bits
        return shard, [(h1 + i * h2 + _CUBES[i]) % m for i in range(self.hashes)]


@dataclass(frozen=True)
class BloomConfig:
    """The filter's geometry: capacity and rate of layer 0, growth rules."""

    capacity: int = defaults.BLOOM_CAPACITY
    error_rate: float = defaults.BLOOM_ERROR_RATE
    shard_bits: int = defaults.BLOOM_SHARD_BITS
    scalable: bool = defaults.BLOOM_SCALABLE
    growth: float = defaults.BLOOM_GROWTH
    tightening: float = defaults.BLOOM_TIGHTENING
    max_layers: int = defaults.BLOOM_MAX_LAYERS
    preallocate: bool = defaults.BLOOM_PREALLOCATE

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise NotConfigured(f"BLOOM_CAPACITY must be >= 1, not {self.capacity}")
        if not 0.0 < self.error_rate < 1.0:
            raise NotConfigured(
                f"BLOOM_ERROR_RATE must be in (0, 1), not {self.error_rate}"
            )
        if not 64 <= self.shard_bits <= MAX_SHARD_BITS:
            raise NotConfigured(
                f"BLOOM_SHARD_BITS must be in [64, 2**32], not {self.shard_bits}"
            )
        if self.growth < 1.0:
            raise NotConfigured(f"BLOOM_GROWTH must be >= 1, not {self.growth}")
        if not 0.0 < self.tightening < 1.0:
            raise NotConfigured(
                f"BLOOM_TIGHTENING must be in (0, 1), not {self.tightening}"
            )
        if self.max_layers < 1:
            raise NotConfigured(f"BLOOM_MAX_LAYERS must be >= 1, not {self.max_layers}")

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> BloomConfig:
        return cls(
            capacity=settings.getint("BLOOM_CAPACITY"),
            error_rate=settings.getfloat("BLOOM_ERROR_RATE"),
            shard_bits=settings.getint("BLOOM_SHARD_BITS"),
            scalable=settings.getbool("BLOOM_SCALABLE"),
            growth=settings.getfloat("BLOOM_GROWTH"),
            tightening=settings.getfloat("BLOOM_TIGHTENING"),
            max_layers=settings.getint("BLOOM_MAX_LAYERS"),
            preallocate=settings.getbool("BLOOM_PREALLOCATE"),
        )

    def layer(self, index: int) -> Layer:
        """The geometry of layer ``index``.

        >>> cfg = BloomConfig(capacity=10_000_000, error_rate=0.001)
        >>> cfg.layer(0)
        Layer(index=0, capacity=10000000, error_rate=0.001, hashes=10, shards=1,
              shard_bits=143775876)
        >>> small = BloomConfig(1000, 0.01, shard_bits=4096, tightening=0.5)
        >>> small.layer(0).shards, small.layer(0).shard_bits, small.layer(0).bits
        (3, 3196, 9588)
        >>> small.layer(1).capacity, small.layer(1).error_rate, small.layer(1).hashes
        (2000, 0.005, 8)
        """
        capacity = max(1, round(self.capacity * self.growth**index))
        rate = self.error_rate * self.tightening**index
        bits = optimal_bits(capacity, rate)
        shards = -(-bits // self.shard_bits)
        shard_bits = -(-bits // shards)
        return Layer(
            index=index,
            capacity=capacity,
            error_rate=rate,
            hashes=optimal_hashes(bits, capacity),
            shards=shards,
            shard_bits=shard_bits,
        )

    def layers_for(self, items: int) -> list[Layer]:
        """The layers a scalable filter has once it holds ``items`` (a layer
        is added when the newest is full; at least one, at most
        ``max_layers``).

        >>> [x.capacity for x in BloomConfig(capacity=10).layers_for(35)]
        [10, 20, 40]
        """
        layers = [self.layer(0)]
        held = layers[0].capacity
        while held < items and len(layers) < self.max_layers and self.scalable:
            layers.append(self.layer(len(layers)))
            held += layers[-1].capacity
        return layers

    def overhead(self, items: int) -> float:
        """Bits of the layers holding ``items`` over the bits an optimal
        (one-layer, exactly sized) filter needs for ``items`` at the
        compound false-positive bound of those layers (the union bound, the
        sum of their rates): the price of starting small and growing.

        The newest layer is counted whole (preallocated, or reached by its
        first random bits anyway). With the defaults, six layers hold 100.8 M
        items, so at 100 M the newest is nearly full:

        >>> round(BloomConfig().overhead(100_000_000), 3)
        1.294
        """
        layers = self.layers_for(items)
        bits = sum(x.bits for x in layers)
        bound = min(sum(x.error_rate for x in layers), 0.5)
        return bits / optimal_bits(items, bound)

    def to_meta(self) -> dict[str, str]:
        """The fields stored in the meta hash (all workers must agree on them)."""
        return {
            "capacity": str(self.capacity),
            "error_rate": repr(self.error_rate),
            "shard_bits": str(self.shard_bits),
            "scalable": "1" if self.scalable else "0",
            "growth": repr(self.growth),
            "tightening": repr(self.tightening),
            "max_layers": str(self.max_layers),
            "hash": HASH_SCHEME,
        }

    @classmethod
    def from_meta(cls, meta: dict[str, str], preallocate: bool) -> BloomConfig:
        return cls(
            capacity=int(meta["capacity"]),
            error_rate=float(meta["error_rate"]),
            shard_bits=int(meta["shard_bits"]),
            scalable=meta["scalable"] == "1",
            growth=float(meta["growth"]),
            tightening=float(meta["tightening"]),
            max_layers=int(meta["max_layers"]),
            preallocate=preallocate,
        )


@dataclass
class BloomStats:
    """What BITCOUNT says about the filter (see :meth:`BloomFilter.stats`)."""

    layers: int
    bits: int
    bits_set: int
    estimated_items: float
    counted_items: int
    expected_fp_rate: float
    per_layer: list[dict[str, float]] = field(default_factory=list)


# --- Lua scripts ----------------------------------------------------------------

# KEYS[1]: the meta hash. ARGV: field, value, field, value, ... (the geometry,
# "layers" included). Writes these fields unless the hash has a layer count.
# Returns: the stored hash, flat (HGETALL).
ENSURE_META = """
if redis.call('HEXISTS', KEYS[1], 'layers') == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV))
end
return redis.call('HGETALL', KEYS[1])
"""

# KEYS[1]: the meta hash. ARGV[1]: the layer count the caller found full,
# ARGV[2]: the most layers allowed. Adds a layer if the count is still ARGV[1].
# Returns: the layer count afterwards (0: the hash is gone).
ADD_LAYER = """
local n = tonumber(redis.call('HGET', KEYS[1], 'layers') or '0')
if n > 0 and n == tonumber(ARGV[1]) and n < tonumber(ARGV[2]) then
  n = redis.call('HINCRBY', KEYS[1], 'layers', 1)
end
return n
"""

SCRIPTS = {"ensure_meta": ENSURE_META, "add_layer": ADD_LAYER}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _as_dict(reply: Any) -> dict[str, str]:
    """A hash reply as text: a dict (client callbacks) or a flat list (Lua).

    >>> _as_dict([b"a", b"1", b"b", b"2"]), _as_dict({b"a": b"1"})
    ({'a': '1', 'b': '2'}, {'a': '1'})
    """
    if isinstance(reply, dict):
        return {_text(k): _text(v) for k, v in reply.items()}
    flat = [_text(x) for x in reply]
    return dict(zip(flat[::2], flat[1::2], strict=True))


class BloomCore:
    """The filter's logic without I/O: generators that yield one pipeline of
    commands per round trip and are sent back its results."""

    def __init__(
        self,
        prefix: str,
        config: BloomConfig,
        stats: StatsCollector | None = None,
    ) -> None:
        self.prefix = prefix
        self.wanted = config
        self.config = config
        self.stats = stats
        self.meta_key = keys.bloom_meta(prefix)
        self.layers: list[Layer] = []
        self.items: dict[int, int] = {}  # layer -> items counted in the meta
        self._pending: dict[int, int] = {}  # layer -> new items not yet sent
        self._full_logged = False
        self._grow = False

    @property
    def opened(self) -> bool:
        return bool(self.layers)

    def shard_key(self, layer: int, shard: int) -> str:
        return keys.bloom_shard(self.prefix, layer, shard)

    # --- meta ---------------------------------------------------------------

    def _preallocate(self, first: int, last: int) -> list[Command]:
        """Commands sizing the shards of layers ``first..last - 1`` exactly.

        ``BITFIELD key INCRBY u1 <last bit> 0`` changes no bit but creates a
        missing key at its full length in one allocation. Written lazily, a
        string grows by Redis's greedy reallocation (up to 1 MB too much per
        shard); and a Bloom filter's first random bits reach its end anyway.
        """
        if not self.config.preallocate:
            return []
        cmds: list[Command] = []
        for index in range(first, last):
            layer = self.config.layer(index)
            for shard in range(layer.shards):
                key = self.shard_key(index, shard)
                cmds.append(("BITFIELD", key, "INCRBY", "u1", layer.shard_bits - 1, 0))
        return cmds

    def _set_layers(self, count: int) -> None:
        old = len(self.layers)
        self.layers = [self.config.layer(i) for i in range(count)]
        if self.stats is not None:
            self.stats.set_value("dupefilter/layers", count)
        if old and count > old:
            newest = self.layers[-1]
            logger.info(
                "Bloom filter %s: layer %s added (capacity %s, error rate %.3g, "
                "%s bits in %s shards)",
                self.prefix, newest.index, newest.capacity, newest.error_rate,
                newest.bits, newest.shards,
            )  # fmt: skip

    def ensure_meta(self) -> Step[None]:
        """Create the meta hash or adopt the geometry stored in it."""
        fields = self.wanted.to_meta()
        fields["layers"] = "1"
        argv = [x for item in fields.items() for x in item]
        cmds: list[Command] = [("SCRIPT:ensure_meta", [self.meta_key], argv)]
        result = yield cmds
        stored = _as_dict(result[0])
        if stored.get("hash") != HASH_SCHEME:
            raise RuntimeError(
                f"Bloom filter {self.meta_key} uses hash scheme "
                f"{stored.get('hash')!r}, not {HASH_SCHEME!r}: flush it first"
            )
        self.config = BloomConfig.from_meta(stored, self.wanted.preallocate)
        differ = {
            name: (value, stored.get(name))
            for name, value in self.wanted.to_meta().items()
            if stored.get(name) != value and name != "hash"
        }
        if differ:
            logger.warning(
                "Bloom filter %s exists with another geometry; keeping the stored "
                "one (changing it would corrupt the filter): %s",
                self.meta_key,
                ", ".join(f"{k}={s} (settings: {w})" for k, (w, s) in differ.items()),
            )
        for name, value in stored.items():
            if name.startswith("items:"):
                self.items[int(name[6:])] = int(value)
        self._set_layers(int(stored["layers"]))
        # Idempotent: also sizes a layer whose creator died before sizing it.
        prealloc = self._preallocate(0, len(self.layers))
        if prealloc:
            yield prealloc

    # --- test-and-set -------------------------------------------------------

    def _flush_counts(self) -> tuple[list[Command], list[int]]:
        pending = sorted((k, v) for k, v in self._pending.items() if v)
        self._pending.clear()
        cmds: list[Command] = [
            ("HINCRBY", self.meta_key, f"items:{layer}", n) for layer, n in pending
        ]
        return cmds, [layer for layer, _ in pending]

    def _note_counts(self, layers: list[int], totals: Sequence[Any]) -> None:
        for layer, total in zip(layers, totals, strict=True):
            self.items[layer] = int(total)

    def _check_capacity(self) -> None:
        """Plan a new layer (or warn) once the newest layer is past capacity:
        the fleet's count at the last flush plus this worker's pending ones."""
        newest = self.layers[-1]
        filled = self.items.get(newest.index, 0) + self._pending.get(newest.index, 0)
        if filled <= newest.capacity:
            return
        if self.config.scalable and len(self.layers) < self.config.max_layers:
            self._grow = True
            return
        if self.stats is not None:
            self.stats.set_value("dupefilter/over_capacity", 1)
        if not self._full_logged:
            self._full_logged = True
            logger.warning(
                "Bloom filter %s is past its capacity (%s items in layer %s, "
                "capacity %s): its false-positive rate now grows beyond %.3g "
                "(raise BLOOM_CAPACITY for the next crawl%s)",
                self.prefix, filled, newest.index, newest.capacity,
                newest.error_rate,
                "" if self.config.scalable else " or set BLOOM_SCALABLE",
            )  # fmt: skip

    def _add_layer(self) -> Step[None]:
        """Send the counts and add a layer unless another worker just did."""
        self._grow = False
        count = len(self.layers)
        cmds, layers = self._flush_counts()
        args = [count, self.config.max_layers]
        result = yield [*cmds, ("SCRIPT:add_layer", [self.meta_key], args)]
        self._note_counts(layers, result[:-1])
        new_count = int(result[-1])
        if new_count > count:
            prealloc = self._preallocate(count, new_count)
            if prealloc:
                yield prealloc
            self._set_layers(new_count)

    def flush(self) -> Step[None]:
        """Send the pending item counts (and add a layer if one is due)."""
        cmds, layers = self._flush_counts()
        if cmds:
            result = yield cmds
            self._note_counts(layers, result)
        if self.layers:
            self._check_capacity()
        if self._grow and self.layers:
            yield from self._add_layer()

    def test_and_set(self, items: Sequence[bytes]) -> Step[list[bool]]:
        """Mark ``items`` seen; for each, whether it was seen before.

        One pipeline: per key, ``BITFIELD_RO`` on every older layer and one
        ``BITFIELD SET`` on the newest, then the pending item counts, then the
        layer count. A key is new iff it is in no older layer and one of the
        newest layer's old bits was 0.
        """
        if not self.opened:
            yield from self.ensure_meta()
        hashes = [key_hash(item) for item in items]
        seen = [False] * len(items)
        todo = list(range(len(items)))
        first = 0  # layers below this one were already tested for every key
        while todo:
            layers = self.layers[first:]
            old, newest = layers[:-1], layers[-1]
            cmds: list[Command] = []
            for i in todo:
                h1, h2 = hashes[i]
                for layer in old:
                    shard, offsets = layer.locate(h1, h2)
                    args: list[Any] = []
                    for offset in offsets:
                        args += ("GET", "u1", offset)
                    cmds.append(
                        ("BITFIELD_RO", self.shard_key(layer.index, shard), *args)
                    )
                shard, offsets = newest.locate(h1, h2)
                args = []
                for offset in offsets:
                    args += ("SET", "u1", offset, 1)
                cmds.append(("BITFIELD", self.shard_key(newest.index, shard), *args))
            count_cmds, count_layers = self._flush_counts()
            cmds += count_cmds
            cmds.append(("HGET", self.meta_key, "layers"))
            result = yield cmds
            per_key = len(layers)
            fresh: list[int] = []
            inserted = 0
            for j, i in enumerate(todo):
                replies = result[j * per_key : (j + 1) * per_key]
                was_new = 0 in replies[-1]
                inserted += was_new
                if was_new and all(0 in bits for bits in replies[:-1]):
                    fresh.append(i)
                else:
                    seen[i] = True
            self._pending[newest.index] = self._pending.get(newest.index, 0) + inserted
            base = len(todo) * per_key
            self._note_counts(count_layers, result[base:-1])
            stored_layers = result[-1]
            if stored_layers is None:
                # The hash was flushed under us (a worker started the crawl
                # afresh): recreate it on the next call.
                self.layers = []
                break
            count = int(stored_layers)
            if count < len(self.layers):  # flushed and recreated: re-read it
                self.layers = []
                break
            if count == len(self.layers):
                break
            # Layers were added while we wrote: test-and-set the keys we
            # found new again in the layers we did not see.
            first = len(self.layers)
            self._set_layers(count)
            todo = fresh
        if self.layers:
            self._check_capacity()
        if self._grow and self.layers:
            yield from self._add_layer()
        return seen

    def contains(self, items: Sequence[bytes]) -> Step[list[bool]]:
        """Whether each of ``items`` is in the filter (read-only)."""
        if not self.opened:
            yield from self.ensure_meta()
        layers = self.layers
        cmds: list[Command] = []
        for item in items:
            h1, h2 = key_hash(item)
            for layer in layers:
                shard, offsets = layer.locate(h1, h2)
                args: list[Any] = []
                for offset in offsets:
                    args += ("GET", "u1", offset)
                cmds.append(("BITFIELD_RO", self.shard_key(layer.index, shard), *args))
        result = yield cmds
        n = len(layers)
        return [
            any(0 not in bits for bits in result[j * n : (j + 1) * n])
            for j in range(len(items))
        ]

    def bitcounts(self) -> Step[BloomStats]:
        """Count set bits per shard (BITCOUNT: O(size), a few ms per 10 MB)."""
        if not self.opened:
            yield from self.ensure_meta()
        cmds: list[Command] = [("HGETALL", self.meta_key)]
        for layer in self.layers:
            cmds += [
                ("BITCOUNT", self.shard_key(layer.index, s))
                for s in range(layer.shards)
            ]
        result = yield cmds
        meta = _as_dict(result[0])
        pos = 1
        total_bits = total_set = counted = 0
        estimate = 0.0
        log_no_fp = 0.0  # log P(no layer gives a false positive)
        per_layer = []
        for layer in self.layers:
            counts = [int(x) for x in result[pos : pos + layer.shards]]
            pos += layer.shards
            m, k = layer.shard_bits, layer.hashes
            est = sum(estimate_items(m, k, c) for c in counts)
            # A probe lands in one shard, chosen uniformly.
            fp = sum((c / m) ** k for c in counts) / layer.shards
            items = int(meta.get(f"items:{layer.index}", 0))
            per_layer.append(
                {
                    "bits": layer.bits,
                    "bits_set": sum(counts),
                    "estimated_items": est,
                    "counted_items": items,
                    "fp_rate": fp,
                }
            )
            total_bits += layer.bits
            total_set += sum(counts)
            estimate += est
            counted += items
            log_no_fp += math.log1p(-fp) if fp < 1.0 else -math.inf
        return BloomStats(
            layers=len(self.layers),
            bits=total_bits,
            bits_set=total_set,
            estimated_items=estimate,
            counted_items=counted,
            expected_fp_rate=-math.expm1(log_no_fp),
            per_layer=per_layer,
        )


# --- Drivers --------------------------------------------------------------------


class _Driver:
    def __init__(
        self,
        client: Any,
        prefix: str,
        config: BloomConfig | None = None,
        stats: StatsCollector | None = None,
    ) -> None:
        self.client = client
        self.core = BloomCore(prefix, config or BloomConfig(), stats)

    @property
    def layers(self) -> list[Layer]:
        return self.core.layers

    def _calls(self, cmds: list[Command], register: Any) -> list[Call]:
        """The core's commands as pipeline calls, its scripts registered on
        this driver's client (``"SCRIPT:<name>"``, keys, args)."""
        return [
            (register(self.client, SCRIPTS[cmd[0][7:]]), cmd[1], cmd[2])
            if cmd[0].startswith("SCRIPT:")
            else cmd
            for cmd in cmds
        ]


class BloomFilter(_Driver):
    """The filter on a synchronous client (threads, commands, benchmarks).

    Each call is one round trip (plus one the first time, to read the meta
    hash, and one when a layer is added).
    """

    client: redis.Redis

    def _execute(self, cmds: list[Command]) -> list[Any]:
        if not cmds:
            return []
        # A script answered NOSCRIPT (a restarted server) runs again alone:
        # the script steps are idempotent.
        return run_pipelined_sync(self.client, self._calls(cmds, sync_script))

    def _run(self, step: Step[_R]) -> _R:
        try:
            cmds = next(step)
            while True:
                cmds = step.send(self._execute(cmds))
        except StopIteration as stop:
            return stop.value

    def open(self) -> None:
        self._run(self.core.ensure_meta())

    def test_and_set(self, items: Sequence[bytes]) -> list[bool]:
        """For each item: True if it was already in the filter (and mark it)."""
        return self._run(self.core.test_and_set(items))

    def contains(self, items: Sequence[bytes]) -> list[bool]:
        """For each item: True if it is in the filter (read-only)."""
        return self._run(self.core.contains(items))

    def flush(self) -> None:
        """Send the pending item counts (close calls it)."""
        self._run(self.core.flush())

    def stats(self) -> BloomStats:
        return self._run(self.core.bitcounts())


class AsyncBloomFilter(_Driver):
    """The filter on a redis.asyncio client: never blocks the reactor."""

    client: aredis.Redis

    async def _execute(self, cmds: list[Command]) -> list[Any]:
        if not cmds:
            return []
        return await run_pipelined(self.client, self._calls(cmds, script))

    async def _run(self, step: Step[_R]) -> _R:
        try:
            cmds = next(step)
            while True:
                cmds = step.send(await self._execute(cmds))
        except StopIteration as stop:
            return stop.value

    async def open(self) -> None:
        await self._run(self.core.ensure_meta())

    async def test_and_set(self, items: Sequence[bytes]) -> list[bool]:
        """For each item: True if it was already in the filter (and mark it)."""
        return await self._run(self.core.test_and_set(items))

    async def contains(self, items: Sequence[bytes]) -> list[bool]:
        """For each item: True if it is in the filter (read-only)."""
        return await self._run(self.core.contains(items))

    async def flush(self) -> None:
        """Send the pending item counts (close calls it)."""
        await self._run(self.core.flush())

    async def stats(self) -> BloomStats:
        return await self._run(self.core.bitcounts())
