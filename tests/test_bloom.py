"""The Bloom filter: bit math (properties) and behaviour on a real redis-server."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import threading

import pytest
import redis
import redis.asyncio as aredis
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.exceptions import NotConfigured
from scrapy.statscollectors import MemoryStatsCollector

from extensions import keys
from extensions.core.bloom import (
    ENSURE_META,
    MAX_SHARD_BITS,
    AsyncBloomFilter,
    BloomConfig,
    BloomFilter,
    estimate_items,
    expected_fp_rate,
    key_hash,
    optimal_bits,
    optimal_hashes,
)
from extensions.settings import defaults
from tests.utils import get_crawler


def fps(kind: str, n: int, start: int = 0) -> list[bytes]:
    return [hashlib.sha1(f"{kind}/{i}".encode()).digest() for i in range(start, n)]


# --- bit math --------------------------------------------------------------------


def test_seed_design_numbers() -> None:
    m = optimal_bits(10_000_000, 0.001)
    assert abs(m - 143_775_874) <= 2  # seed 000: 143,775,874 bits, 17.2 MB
    assert round(m / 8 / 2**20, 1) == 17.1  # MiB (17.97 MB)
    assert optimal_hashes(m, 10_000_000) == 10


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=10**10),
    st.floats(min_value=1e-9, max_value=0.5),
)
def test_optimal_filter_meets_its_rate(n: int, p: float) -> None:
    m = optimal_bits(n, p)
    k = optimal_hashes(m, n)
    # Rounding k to an integer costs at most a few percent of the rate.
    assert expected_fp_rate(m, k, n) <= p * 1.1 + 1e-12
    assert optimal_bits(n, p / 2) > m
    assert optimal_bits(n + 1, p) >= m


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=64, max_value=10**9),
    st.integers(min_value=1, max_value=30),
    st.floats(min_value=0.0, max_value=0.95),
)
def test_estimate_inverts_the_fill(m: int, k: int, fill: float) -> None:
    # After n insertions the expected fill is 1 - e^(-kn/m); the estimator
    # maps that fill back to n.
    n = -m / k * math.log1p(-fill)
    bits_set = round(m * (1 - math.exp(-k * n / m)))
    # rounding X to a whole bit moves the estimate by at most dn/dX / 2
    slack = m / (k * (m - bits_set))
    assert estimate_items(m, k, bits_set) == pytest.approx(n, rel=1e-6, abs=slack)


@settings(max_examples=300, deadline=None)
@given(
    st.binary(min_size=1, max_size=40),
    st.integers(min_value=1, max_value=10**8),
    st.sampled_from([0.1, 0.01, 0.001, 1e-6]),
    st.sampled_from([64, 4096, 10**6, MAX_SHARD_BITS]),
    st.integers(min_value=0, max_value=3),
)
def test_positions_fall_in_one_shard(
    key: bytes, capacity: int, rate: float, shard_bits: int, index: int
) -> None:
    config = BloomConfig(capacity=capacity, error_rate=rate, shard_bits=shard_bits)
    layer = config.layer(index)
    assert layer.shard_bits <= shard_bits
    assert layer.bits >= optimal_bits(layer.capacity, layer.error_rate)
    assert layer.bits - optimal_bits(layer.capacity, layer.error_rate) < layer.shards
    shard, offsets = layer.locate(*key_hash(key))
    assert 0 <= shard < layer.shards
    assert len(offsets) == layer.hashes
    assert all(0 <= o < layer.shard_bits for o in offsets)


def test_positions_are_spread() -> None:
    # Enhanced double hashing: positions collide no more often than k
    # independent ones would (birthday bound), every shard used about equally.
    layer = BloomConfig(capacity=10_000, error_rate=0.001, shard_bits=4096).layer(0)
    shards = [0] * layer.shards
    collisions = 0
    for key in fps("spread", 20_000):
        shard, offsets = layer.locate(*key_hash(key))
        shards[shard] += 1
        collisions += len(offsets) - len(set(offsets))
    birthday = 20_000 * layer.hashes * (layer.hashes - 1) / 2 / layer.shard_bits
    assert collisions < 1.5 * birthday
    mean = 20_000 / layer.shards
    assert all(abs(c - mean) < 6 * math.sqrt(mean) for c in shards)


def test_scalable_layers_keep_the_compound_rate_bounded() -> None:
    config = BloomConfig(capacity=1000, error_rate=0.01, growth=2, tightening=0.5)
    layers = [config.layer(i) for i in range(8)]
    assert [layer.capacity for layer in layers[:3]] == [1000, 2000, 4000]
    compound = 1 - math.prod(1 - layer.error_rate for layer in layers)
    assert compound < 0.01 / (1 - 0.5)


@pytest.mark.parametrize(
    "override",
    [
        {"BLOOM_CAPACITY": 0},
        {"BLOOM_ERROR_RATE": 0},
        {"BLOOM_ERROR_RATE": 1.5},
        {"BLOOM_SHARD_BITS": 8},
        {"BLOOM_SHARD_BITS": 2**32 + 8},
        {"BLOOM_GROWTH": 0.5},
        {"BLOOM_TIGHTENING": 1},
        {"BLOOM_MAX_LAYERS": 0},
    ],
)
def test_bad_settings_are_not_configured(override: dict[str, float]) -> None:
    crawler = get_crawler(settings_dict=override)
    with pytest.raises(NotConfigured):
        BloomConfig.from_settings(crawler.settings)


def test_settings_defaults() -> None:
    config = BloomConfig.from_settings(get_crawler().settings)
    assert config.capacity == defaults.BLOOM_CAPACITY
    assert config.error_rate == defaults.BLOOM_ERROR_RATE
    assert config.shard_bits == defaults.BLOOM_SHARD_BITS == MAX_SHARD_BITS
    assert config.scalable is defaults.BLOOM_SCALABLE


# --- on a real redis-server --------------------------------------------------


SMALL = BloomConfig(capacity=2000, error_rate=0.01, shard_bits=4096, scalable=False)


def test_test_and_set(redis_client: redis.Redis) -> None:
    bloom = BloomFilter(redis_client, "t", SMALL)
    bloom.open()
    first, second = fps("a", 500), fps("b", 500)
    assert sum(bloom.test_and_set(first)) <= 2  # false positives at low fill
    assert all(bloom.test_and_set(first))
    assert all(bloom.contains(first))
    # duplicates inside one batch: only the first is new
    assert bloom.test_and_set([second[0], second[0], second[1]]) == [False, True, False]
    assert sum(bloom.contains(second[2:])) <= 3


def test_shards_are_separate_tagged_keys_of_bounded_size(
    redis_client: redis.Redis,
) -> None:
    bloom = BloomFilter(redis_client, "t", SMALL)
    bloom.open()
    bloom.test_and_set(fps("a", 2000))
    layer = bloom.layers[0]
    assert layer.shards == 5
    for shard in range(layer.shards):
        key = keys.bloom_shard("t", 0, shard)
        assert f"{{t:{shard}}}" in key
        # preallocated at its exact size, never more
        assert redis_client.strlen(key) == -(-layer.shard_bits // 8)
    assert set(redis_client.keys("t:bloom:*")) == {
        keys.bloom_shard("t", 0, s).encode() for s in range(5)
    } | {keys.bloom_meta("t").encode()}


def test_meta_is_created_once_and_the_stored_geometry_wins(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    BloomFilter(redis_client, "t", SMALL).open()
    meta = redis_client.hgetall(keys.bloom_meta("t"))
    assert meta[b"capacity"] == b"2000"
    assert meta[b"layers"] == b"1"
    other = BloomConfig(capacity=9999, error_rate=0.05, shard_bits=4096)
    bloom = BloomFilter(redis_client, "t", other)
    with caplog.at_level(logging.WARNING, logger="extensions.core.bloom"):
        bloom.open()
    assert "another geometry" in caplog.text
    assert "capacity=2000 (settings: 9999)" in caplog.text
    assert bloom.core.config.capacity == 2000
    assert bloom.layers[0] == SMALL.layer(0)


def test_workers_racing_accept_each_key_once(redis_url: str) -> None:
    # Four workers, each its own connection, insert the same 3000 keys in
    # shuffled batches at once: every key is accepted by exactly one worker
    # (up to false positives, which make a key accepted by none).
    items = fps("race", 3000)
    config = BloomConfig(capacity=3000, error_rate=0.001, shard_bits=8192)
    accepted: list[list[bytes]] = []
    barrier = threading.Barrier(4)

    def worker(seed: int) -> None:
        client = redis.Redis.from_url(redis_url)
        bloom = BloomFilter(client, "race", config)
        bloom.open()
        order = items[seed:] + items[:seed]
        mine = []
        barrier.wait()
        for start in range(0, len(order), 50):
            batch = order[start : start + 50]
            seen = bloom.test_and_set(batch)
            mine += [k for k, s in zip(batch, seen, strict=True) if not s]
        accepted.append(mine)
        client.close()

    threads = [threading.Thread(target=worker, args=(i * 7,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_accepted = [k for mine in accepted for k in mine]
    assert len(all_accepted) == len(set(all_accepted))  # never twice
    assert len(all_accepted) >= 3000 - 15  # at most a few false positives


def test_scalable_filter_adds_layers(redis_client: redis.Redis) -> None:
    stats = MemoryStatsCollector(get_crawler())
    config = BloomConfig(500, 0.01, shard_bits=4096, tightening=0.5)
    bloom = BloomFilter(redis_client, "g", config, stats)
    bloom.open()
    batches = [fps("g", 50 * (i + 1), 50 * i) for i in range(40)]
    new = 0
    for batch in batches:
        new += len(batch) - sum(bloom.test_and_set(batch))
    bloom.flush()
    assert len(bloom.layers) >= 2
    assert stats.get_value("dupefilter/layers") == len(bloom.layers)
    assert (
        redis_client.hget(keys.bloom_meta("g"), "layers")
        == str(len(bloom.layers)).encode()
    )
    # a layer is added at the end of the batch that filled the newest one, so
    # it overshoots by a batch: the rate stays near the 2% compound bound
    assert new >= 2000 * (1 - 0.025)
    # every key inserted, in whichever layer, is still seen
    for batch in batches:
        assert all(bloom.test_and_set(batch))
    # a key of an old layer is not new again (and not counted as inserted)
    counted = bloom.stats().counted_items
    assert bloom.test_and_set(batches[0][:10]) == [True] * 10
    bloom.flush()
    assert bloom.stats().counted_items == counted
    # a second worker adopts the layers from the meta hash
    other = BloomFilter(redis_client, "g", config)
    assert all(other.contains(batches[0]))
    assert len(other.layers) == len(bloom.layers)
    # the measured rate on fresh keys stays under the compound bound
    fresh = fps("fresh", 4000)
    assert sum(bloom.contains(fresh)) / 4000 < 0.01 / (1 - 0.5) * 1.5


def test_stale_worker_cannot_accept_what_a_fresh_one_accepted(
    redis_client: redis.Redis,
) -> None:
    # Worker A still believes layer 0 is the newest while worker B, having
    # added layer 1, accepts key X there after checking layer 0. A then
    # writes X into layer 0 and finds it new there; its batch's layer count
    # shows the new layer, so it tests X again in layer 1 and drops it.
    config = BloomConfig(capacity=100, error_rate=0.01, shard_bits=4096)
    a = BloomFilter(redis_client, "s", config)
    b = BloomFilter(redis_client, "s", config)
    a.open()
    b.open()
    redis_client.hincrby(keys.bloom_meta("s"), "layers", 1)
    b.open()  # b sees two layers; a still one
    assert (len(a.layers), len(b.layers)) == (1, 2)
    x, y = fps("x", 2)
    assert b.test_and_set([x]) == [False]
    assert a.test_and_set([x, y]) == [True, False]
    assert len(a.layers) == 2
    assert b.test_and_set([y]) == [True]


def test_over_capacity_warns_once_with_a_stat(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    stats = MemoryStatsCollector(get_crawler())
    bloom = BloomFilter(redis_client, "o", SMALL, stats)
    with caplog.at_level(logging.WARNING, logger="extensions.core.bloom"):
        for i in range(6):
            bloom.test_and_set(fps("o", 500 * (i + 1), 500 * i))
        bloom.flush()
    assert caplog.text.count("past its capacity") == 1
    assert stats.get_value("dupefilter/over_capacity") == 1
    assert len(bloom.layers) == 1


def test_stats_estimate_items_and_rate(redis_client: redis.Redis) -> None:
    config = BloomConfig(capacity=5000, error_rate=0.01, shard_bits=16384)
    bloom = BloomFilter(redis_client, "e", config)
    first = bloom.test_and_set(fps("e", 4000))
    bloom.flush()
    stats = bloom.stats()
    assert stats.estimated_items == pytest.approx(4000, rel=0.05)
    assert stats.counted_items == 4000 - sum(first)
    layer = bloom.layers[0]
    formula = expected_fp_rate(layer.bits, layer.hashes, 4000)
    assert stats.expected_fp_rate == pytest.approx(formula, rel=0.25)
    measured = sum(bloom.contains(fps("e-probe", 20_000))) / 20_000
    # 99% interval of a binomial rate over 20,000 probes
    half = 2.576 * math.sqrt(formula * (1 - formula) / 20_000)
    assert abs(measured - formula) <= half + 0.0005


def test_recovers_from_a_flushed_script_cache_and_flushed_keys(
    redis_client: redis.Redis,
) -> None:
    bloom = BloomFilter(redis_client, "r", SMALL)
    bloom.open()
    redis_client.script_flush()
    BloomFilter(redis_client, "r2", SMALL).open()  # NOSCRIPT -> load, retry
    key = fps("r", 1)
    assert bloom.test_and_set(key) == [False]
    redis_client.flushdb()  # another worker started the crawl afresh
    bloom.test_and_set(fps("r-other", 1))  # notices the meta hash is gone
    assert bloom.test_and_set(key) == [False]
    assert redis_client.exists(keys.bloom_meta("r"))


def test_asyncio_client(redis_url: str) -> None:
    async def scenario() -> tuple[list[bool], list[bool], int]:
        client = aredis.Redis.from_url(redis_url)
        try:
            bloom = AsyncBloomFilter(client, "a", SMALL)
            await bloom.open()
            first = await bloom.test_and_set(fps("a", 100))
            again = await bloom.test_and_set(fps("a", 100))
            await bloom.flush()
            stats = await bloom.stats()
            return first, again, stats.counted_items
        finally:
            await client.aclose()

    first, again, counted = asyncio.run(scenario())
    assert sum(first) <= 1
    assert all(again)
    assert counted == 100 - sum(first)


def test_asyncio_client_reloads_its_scripts_after_a_flush(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The scripts go through the one registry: a server that lost them
    (restarted, or a promoted replica) answers NOSCRIPT once, and the script
    runs again alone, loaded."""
    sha = hashlib.sha1(ENSURE_META.encode()).hexdigest()

    async def scenario() -> int:
        client = aredis.Redis.from_url(redis_url)
        try:
            await AsyncBloomFilter(client, "f", SMALL).open()
            redis_client.script_flush()
            assert redis_client.script_exists(sha) == [False]
            grown = AsyncBloomFilter(client, "g", SMALL)
            await grown.open()  # ensure_meta: NOSCRIPT, then loaded and run
            return len(grown.layers)
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == 1
    assert redis_client.script_exists(sha) == [True]
    assert redis_client.hget(keys.bloom_meta("g"), "layers") == b"1"


# --- memory: starts small, grows with the crawl ---------------------------------


def test_default_geometry_stays_within_1_3x_of_optimal_at_100m() -> None:
    """Pure arithmetic on the layer geometry: the bits of the layers that
    hold 100 M items against n ln(1/p) / (ln 2)^2 at their compound bound.
    (Before: the old defaults, one 100 M layer at 0.001 halving per layer,
    were within bound at 100 M but preallocated 180 MB for any crawl; the
    test below holds that half.)"""
    config = BloomConfig()
    n = 100_000_000
    layers = config.layers_for(n)
    bits = sum(layer.bits for layer in layers)
    bound = sum(layer.error_rate for layer in layers)
    optimal = n * math.log(1 / bound) / math.log(2) ** 2
    assert bits / optimal <= 1.3
    assert config.overhead(n) == pytest.approx(bits / optimal, rel=1e-6)
    # The compound rate stays at the old default's bound, 0.002.
    assert bound < defaults.BLOOM_ERROR_RATE / (1 - defaults.BLOOM_TIGHTENING)
    assert bound <= 0.002
    assert len(layers) <= defaults.BLOOM_MAX_LAYERS


def test_10000_urls_hold_under_10_mb_of_redis(redis_client: redis.Redis) -> None:
    """The default filter for a 10,000-page crawl: every key of the crawl's
    filter, by MEMORY USAGE (before: 180 MB preallocated at the default
    capacity of 100 M)."""
    bloom = BloomFilter(redis_client, "t", BloomConfig())
    bloom.open()
    for start in range(0, 10_000, 1000):
        assert not any(bloom.test_and_set(fps("u", start + 1000, start)))
    bloom.flush()
    used = sum(
        redis_client.memory_usage(key, samples=0) or 0
        for key in redis_client.scan_iter("*")
    )
    assert used < 10 * 2**20
    assert bloom.stats().counted_items == 10_000


def test_a_crawl_started_with_the_old_defaults_keeps_its_geometry(
    redis_client: redis.Redis,
) -> None:
    old = BloomConfig(capacity=100_000_000, error_rate=0.001, tightening=0.5)
    redis_client.hset(keys.bloom_meta("t"), mapping={**old.to_meta(), "layers": 1})
    bloom = BloomFilter(redis_client, "t", BloomConfig(preallocate=False))
    bloom.open()
    assert bloom.core.config == BloomConfig(
        capacity=100_000_000, error_rate=0.001, tightening=0.5, preallocate=False
    )
    assert bloom.layers == [old.layer(0)]
