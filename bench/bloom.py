"""Benchmark of the Bloom dupefilter against scrapy-redis's fingerprint SET.

Run: ``python -m bench.bloom --n 10000000`` (default ``--n 1000000``;
``--quick`` is 50,000 for CI). It starts a throw-away redis-server (no AOF),
sizes a Bloom filter for ``capacity = N`` at ``--error-rate``, inserts N
generated URLs through :class:`extensions.core.bloom.BloomFilter` (test-and-set, in
pipelines of ``--batch`` keys), probes N other URLs read-only, then stores the
same N fingerprints the way scrapy-redis does (40-character hex strings in one
SET) and prints:

* bytes per URL in Redis (``MEMORY USAGE`` of every shard and of the meta
  hash) against the optimal Bloom filter (``-ln p / (8 (ln 2)^2)``) and the
  information-theoretic minimum (``log2(1/p) / 8``), and against the SET;
* the measured false-positive rate against ``(1 - e^(-kn/m))^k`` and its 99%
  confidence interval for N probes (normal approximation of the binomial);
* URLs per second, test-and-set and probe, one client, batched.

Fingerprints are ``sha1(url)`` digests: the size and distribution of Scrapy's
``RequestFingerprinter`` output (also a SHA1), at a fraction of its cost.

Settings read: none (command-line options only).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import tempfile
import time
from typing import TYPE_CHECKING

import redis

from extensions.connection.embedded import RedisProcess
from extensions.core.bloom import (
    BloomConfig,
    BloomFilter,
    bloom_bound_bytes_per_item,
    expected_fp_rate,
    info_bound_bytes_per_item,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

Z99 = 2.5758293035489004  # two-sided 99% normal quantile


def fingerprints(start: int, stop: int, kind: str) -> Iterator[bytes]:
    """SHA1 fingerprints of generated URLs ``start..stop - 1`` of one kind.

    >>> len(next(fingerprints(0, 1, "page")))
    20
    """
    sha1 = hashlib.sha1
    for i in range(start, stop):
        url = f"https://www{i % 9973}.example{i % 97}.com/{kind}/{i}.html?id={i}"
        yield sha1(url.encode()).digest()


def batches(n: int, size: int, kind: str) -> Iterator[list[bytes]]:
    for start in range(0, n, size):
        yield list(fingerprints(start, min(n, start + size), kind))


def confidence_interval(p: float, trials: int, z: float = Z99) -> tuple[float, float]:
    """Normal-approximation interval of a binomial rate over ``trials``.

    >>> lo, hi = confidence_interval(0.001, 1_000_000)
    >>> round(lo, 6), round(hi, 6)
    (0.000919, 0.001081)
    """
    half = z * math.sqrt(p * (1 - p) / trials)
    return max(0.0, p - half), p + half


def memory_usage(client: redis.Redis, keys: list[str]) -> int:
    total = 0
    for key in keys:
        used = client.memory_usage(key, samples=0)
        total += int(used or 0)
    return total


def run(n: int, error_rate: float, batch: int, shard_bits: int) -> dict[str, float]:
    config = BloomConfig(
        capacity=n, error_rate=error_rate, shard_bits=shard_bits, scalable=False
    )
    layer = config.layer(0)
    out: dict[str, float] = {
        "n": n,
        "m": layer.bits,
        "k": layer.hashes,
        "shards": layer.shards,
    }
    with tempfile.TemporaryDirectory(prefix="bench-bloom-") as tmp:
        server = RedisProcess(tmp, appendonly=False).start()
        try:
            client = redis.Redis.from_url(server.url)
            bloom = BloomFilter(client, "bench", config)
            bloom.open()

            t0 = time.perf_counter()
            seen_on_insert = 0
            for keys in batches(n, batch, "page"):
                seen_on_insert += sum(bloom.test_and_set(keys))
            bloom.flush()
            out["insert_s"] = time.perf_counter() - t0
            out["inserted"] = n - seen_on_insert

            t0 = time.perf_counter()
            false_pos = 0
            for keys in batches(n, batch, "probe"):
                false_pos += sum(bloom.contains(keys))
            out["probe_s"] = time.perf_counter() - t0
            out["false_positives"] = false_pos

            stats = bloom.stats()
            out["fill_fp"] = stats.expected_fp_rate
            out["estimated_items"] = stats.estimated_items
            shard_keys = [bloom.core.shard_key(0, s) for s in range(layer.shards)] + [
                bloom.core.meta_key
            ]
            out["bloom_bytes"] = memory_usage(client, shard_keys)

            t0 = time.perf_counter()
            set_key = "bench:dupefilter"  # scrapy-redis: SADD <spider>:dupefilter <hex>
            for keys in batches(n, batch, "page"):
                client.sadd(set_key, *[fp.hex() for fp in keys])
            out["set_s"] = time.perf_counter() - t0
            out["set_bytes"] = memory_usage(client, [set_key])
            client.close()
        finally:
            server.stop()
    return out


def report(out: dict[str, float], error_rate: float) -> str:
    n = int(out["n"])
    m, k = int(out["m"]), int(out["k"])
    bloom_bpu = out["bloom_bytes"] / n
    set_bpu = out["set_bytes"] / n
    bound = bloom_bound_bytes_per_item(error_rate)
    info = info_bound_bytes_per_item(error_rate)
    measured = out["false_positives"] / n
    formula = expected_fp_rate(m, k, out["inserted"])
    lo, hi = confidence_interval(formula, n)
    rows = [
        ("URLs inserted / probed (N)", f"{n:,}"),
        ("filter: m bits, k hashes, shards", f"{m:,}, {k}, {int(out['shards'])}"),
        ("Bloom: MEMORY USAGE", f"{out['bloom_bytes']:,} B"),
        ("Bloom: bytes per URL", f"{bloom_bpu:.4f}"),
        (
            f"  optimal Bloom bound at p={error_rate:g}",
            f"{bound:.4f}  ({100 * (bloom_bpu / bound - 1):+.2f}%)",
        ),
        ("  information-theoretic minimum", f"{info:.4f}  (x{bloom_bpu / info:.2f})"),
        ("SET of hex fingerprints: MEMORY USAGE", f"{out['set_bytes']:,} B"),
        ("SET: bytes per URL", f"{set_bpu:.2f}"),
        ("SET / Bloom memory", f"{set_bpu / bloom_bpu:.1f}x"),
        ("false positives while inserting", f"{n - int(out['inserted']):,}"),
        ("false positives on N fresh probes", f"{int(out['false_positives']):,}"),
        ("measured false-positive rate", f"{measured:.6f}"),
        ("(1 - e^(-kn/m))^k", f"{formula:.6f}"),
        ("  99% interval for N probes", f"[{lo:.6f}, {hi:.6f}]"),
        ("  measured inside the interval", "yes" if lo <= measured <= hi else "NO"),
        ("fill-based rate (BITCOUNT)", f"{out['fill_fp']:.6f}"),
        ("estimated items (BITCOUNT)", f"{out['estimated_items']:,.0f}"),
        ("test-and-set URLs/s (1 client)", f"{n / out['insert_s']:,.0f}"),
        ("probe URLs/s (1 client)", f"{n / out['probe_s']:,.0f}"),
        ("SET SADD URLs/s (1 client)", f"{n / out['set_s']:,.0f}"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def geometry_report(
    points: tuple[int, ...] = (10_000, 1_600_000, 1_600_001, 10_000_000,
                               50_000_000, 100_000_000, 100_800_001, 200_000_000),
) -> str:  # fmt: skip
    """The default scalable geometry (``BloomConfig()``) at ``points`` items:
    its layers' bits against an optimal filter's for the same items at their
    compound bound (:meth:`extensions.core.bloom.BloomConfig.overhead`)."""
    config = BloomConfig()
    lines = ["items          layers  MB        compound bound  bits / optimal"]
    for n in points:
        layers = config.layers_for(n)
        mb = sum(x.bits for x in layers) / 8e6
        bound = sum(x.error_rate for x in layers)
        lines.append(
            f"{n:<14,} {len(layers):<7} {mb:<9.2f} {bound:<15.5f} "
            f"{config.overhead(n):.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bloom", description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000, help="URLs to insert")
    parser.add_argument("--quick", action="store_true", help="N = 50,000 (CI)")
    parser.add_argument("--error-rate", type=float, default=0.001)
    parser.add_argument("--batch", type=int, default=1000, help="keys per pipeline")
    parser.add_argument(
        "--shard-bits", type=int, default=2**32, help="most bits per Redis string"
    )
    parser.add_argument(
        "--geometry",
        action="store_true",
        help="only print the default scalable geometry's bits against optimal",
    )
    args = parser.parse_args(argv)
    if args.geometry:
        print(geometry_report())
        return 0
    n = 50_000 if args.quick else args.n
    out = run(n, args.error_rate, args.batch, args.shard_bits)
    print(report(out, args.error_rate))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
