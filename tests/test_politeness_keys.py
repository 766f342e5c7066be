"""Politeness that adapts and scales (#26), on a real redis-server: a
request's host and IP locks taken in order and given back, a worker killed
between them, the lease script's IP schedule, per-host overrides and
``DOWNLOAD_SLOTS``, a concurrency above 1, and the fleet-wide AutoThrottle
script."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import Request, Spider
from scrapy.statscollectors import MemoryStatsCollector

from extensions import keys, meta
from extensions.core.frontier.frontier import Frontier, Worker
from extensions.core.frontier.hostrecord import HostRecords
from extensions.core.frontier.overrides import HostConf, HostOverrides, slots_json
from extensions.downloadermiddlewares.politeness import (
    HostLock,
    LockState,
    PolitenessMiddleware,
)
from extensions.utils.hosts import host_partition
from tests.support.frontier import q, urls
from tests.utils import get_crawler, run_redis
from webcrawl.addon import SCRAPY_THROTTLE, THROTTLE_EXTENSION, Webcrawl

if TYPE_CHECKING:
    import redis
    import redis.asyncio as aredis

ROOT = Path(__file__).resolve().parent.parent
P = 3
A, B, C = "http://a.test:80", "http://b.test:80", "http://c.test:80"
IP = "10.0.0.7"
HOLD = 2_000
ACQUIRED, HELD = LockState.ACQUIRED, LockState.HELD


def lock_key(lock_id: str, partitions: int = P) -> str:
    return keys.host_lock(
        "web", lock_id, host_partition(lock_id, partitions), partitions
    )


def pttl(client: redis.Redis, lock_id: str, partitions: int = P) -> int:
    return int(client.pttl(lock_key(lock_id, partitions)))


# -- two locks ------------------------------------------------------------------


def test_host_and_ip_locks_are_taken_in_their_partitions_and_cut_apart(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def body(client: aredis.Redis) -> None:
        lock = HostLock(client, "web", 1_800_000, P)
        grant = await lock.take(
            A, [("ip", IP, 300)], "t1", default_ms=500, hold_ms=HOLD
        )
        assert grant.state == ACQUIRED and grant.ms == 500
        assert [(t.kind, t.id, t.spacing_ms) for t in grant.taken] == [
            ("host", A, 500),
            ("ip", IP, 300),
        ]
        # Held through the fetch: spacing + hold each.
        assert 2_000 < pttl(redis_client, A) <= 2_500
        assert 1_800 < pttl(redis_client, IP) <= 2_300
        # The answer: each cut to its own spacing.
        for taken in grant.taken:
            await lock.cut(taken, "t1", default_ms=500)
        assert 400 < pttl(redis_client, A) <= 500
        assert 200 < pttl(redis_client, IP) <= 300

    run_redis(redis_url, body)
    # The two locks live in two partitions here (two slots on a cluster).
    assert host_partition(A, P) != host_partition(IP, P)


def test_the_host_lock_is_given_back_when_the_ip_is_busy(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Another host on the same address holds the IP lock: the request gets
    HELD with the address's wait, and holds nothing meanwhile (its host lock
    is given back, so its host's other requests are not blocked by it)."""

    async def body(client: aredis.Redis) -> None:
        lock = HostLock(client, "web", 1_800_000, P)
        first = await lock.take(
            A, [("ip", IP, 300)], "t1", default_ms=500, hold_ms=HOLD
        )
        assert first.state == ACQUIRED
        second = await lock.take(
            B, [("ip", IP, 300)], "t2", default_ms=500, hold_ms=HOLD
        )
        assert second.state == HELD and 0 < second.ms <= 300 and second.taken == []
        assert redis_client.exists(lock_key(B)) == 0
        # Cut at the answer, the address is free after its spacing.
        for taken in first.taken:
            await lock.cut(taken, "t1", default_ms=500)
        await asyncio.sleep(0.35)
        third = await lock.take(
            B, [("ip", IP, 300)], "t2", default_ms=500, hold_ms=HOLD
        )
        assert third.state == ACQUIRED and len(third.taken) == 2

    run_redis(redis_url, body)


def test_a_busy_host_takes_no_ip_lock(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def body(client: aredis.Redis) -> None:
        lock = HostLock(client, "web", 1_800_000, P)
        assert (await lock.take(A, [], "t1", default_ms=500, hold_ms=HOLD)).taken
        held = await lock.take(A, [("ip", IP, 300)], "t2", default_ms=500, hold_ms=HOLD)
        assert held.state == HELD and held.taken == []
        assert redis_client.exists(lock_key(IP)) == 0

    run_redis(redis_url, body)


def test_a_retry_with_the_same_token_gets_both_locks_back(redis_url: str) -> None:
    """A take whose reply was lost (a Redis error between the two locks, or
    after both) is retried with the same token: it is their holder, not one
    more waiter behind its own locks for spacing + hold."""

    async def body(client: aredis.Redis) -> None:
        lock = HostLock(client, "web", 1_800_000, P)
        again = [("ip", IP, 300)]
        assert (await lock.take(A, again, "t1", default_ms=500, hold_ms=HOLD)).taken
        retry = await lock.take(A, again, "t1", default_ms=500, hold_ms=HOLD)
        assert retry.state == ACQUIRED and len(retry.taken) == 2

    run_redis(redis_url, body)


def test_without_host_a_wider_lock_carries_the_host_spacing(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """POLITENESS_KEY=ip alone (any number of partitions): no host lock is
    set, but the host's park and spacing (its robots.txt delay here) still
    hold, on the address's lock."""
    redis_client.hset(keys.FrontierKeys("web", host_partition(A, P), P).host(A),
                      "delay", 1_500)  # fmt: skip

    async def body(client: aredis.Redis) -> None:
        lock = HostLock(client, "web", 1_800_000, P)
        grant = await lock.take(
            A, [("ip", IP, 300)], "t1", default_ms=500, hold_ms=HOLD, take_host=False
        )
        assert [(t.kind, t.spacing_ms) for t in grant.taken] == [("ip", 1_500)]

    run_redis(redis_url, body)
    assert redis_client.exists(lock_key(A)) == 0
    assert 3_000 < pttl(redis_client, IP) <= 3_500


BETWEEN = textwrap.dedent(
    """
    import asyncio, sys
    import redis.asyncio as aredis
    from extensions.downloadermiddlewares.politeness import HostLock

    async def main():
        client = aredis.Redis.from_url(sys.argv[1])
        lock = HostLock(client, "web", 1_800_000, 3)
        async def stuck(*args, **kwargs):
            print("between", flush=True)  # the host lock is taken
            await asyncio.sleep(3600)
        lock.acquire_coarse = stuck
        await lock.take("http://a.test:80", [("ip", "10.0.0.7", 300)], "dead",
                        default_ms=int(sys.argv[2]), hold_ms=int(sys.argv[3]))

    asyncio.run(main())
    """
)


def test_a_worker_killed_between_the_two_locks_leaks_neither(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """A worker SIGKILLed after its host lock and before its IP lock: the
    host lock lapses within its spacing + one hold (heartbeat), untouched by
    anyone, and the next request takes both locks then. Judged on Redis's
    clock (PTTL), polled."""
    spacing, hold = 500, 1_500
    proc = subprocess.Popen(
        [sys.executable, "-c", BETWEEN, redis_url, str(spacing), str(hold)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "between"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The dead worker's host lock, never renewed: spacing + hold at most.
    left = pttl(redis_client, A)
    assert 0 < left <= spacing + hold
    assert redis_client.exists(lock_key(IP)) == 0

    async def body(client: aredis.Redis) -> tuple[LockState, int]:
        lock = HostLock(client, "web", 1_800_000, P)
        deadline = time.monotonic() + 10
        while True:
            grant = await lock.take(
                A, [("ip", IP, 300)], "live", default_ms=spacing, hold_ms=hold
            )
            if grant.state == ACQUIRED or time.monotonic() > deadline:
                return grant.state, len(grant.taken)
            await asyncio.sleep(grant.ms / 1000)

    assert run_redis(redis_url, body) == (ACQUIRED, 2)


def _middleware(redis_url: str, **settings: Any) -> PolitenessMiddleware:
    crawler = get_crawler(Spider, settings_dict={"REDIS_URL": redis_url, **settings})
    crawler.spider = Spider("web")
    crawler.stats = MemoryStatsCollector(crawler)
    return PolitenessMiddleware.from_crawler(crawler)


def test_a_worker_killed_mid_download_holds_both_locks_a_heartbeat(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Both locks are renewed while the download runs (spacing + one
    heartbeat); the renewal stopping (the worker gone) lets each lapse
    within that."""
    mw = _middleware(
        redis_url,
        POLITENESS_KEY="host,ip",
        FRONTIER_PARTITIONS=P,
        DOWNLOAD_DELAY=0.4,
        IP_DOWNLOAD_DELAY=0.2,
        FRONTIER_HEARTBEAT_INTERVAL=0.6,
    )

    async def main() -> dict[str, Any]:
        request = Request("http://localhost:8080/x")
        assert await mw.process_request(request) is None
        held: dict[str, Any] = request.meta[meta.POLITENESS_LOCK]
        await asyncio.sleep(1.5)  # longer than spacing + hold: renewed
        alive = {t["id"]: pttl(redis_client, t["id"]) for t in held["locks"]}
        for task in mw._renewers.values():  # the worker dies: no renewal
            task.cancel()
        await mw.lock.client.aclose()
        return alive

    alive = asyncio.run(main())
    # 1.5 s after the take, without renewals both would have lapsed (after
    # 1.0 and 0.8 s): each is alive, for at most its spacing + hold.
    assert 0 < alive["http://localhost:8080"] <= 1_000
    assert 0 < alive["127.0.0.1"] <= 800
    deadline = time.monotonic() + 5
    while any(redis_client.exists(lock_key(i)) for i in alive):
        assert time.monotonic() < deadline
        time.sleep(0.05)


# -- a host's own concurrency ------------------------------------------------------


def test_a_concurrency_above_one_counts_downloads_in_flight(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """An override of concurrency 2: two downloads of the host in flight at
    once (starts a spacing apart), a third waits until one answers."""

    async def body(client: aredis.Redis) -> None:
        await HostOverrides(client, "web", P).set("a.test", concurrency=2, delay=0.1)
        lock = HostLock(client, "web", 1_800_000, P)
        one = await lock.take(A, [], "t1", default_ms=500, hold_ms=HOLD)
        assert one.state == ACQUIRED and one.ms == 100
        assert one.taken[0].through is False  # start to start
        # The next start waits the spacing (100 ms), not the first answer.
        assert (
            await lock.take(A, [], "t2", default_ms=500, hold_ms=HOLD)
        ).state == HELD
        await asyncio.sleep(0.12)
        two = await lock.take(A, [], "t2", default_ms=500, hold_ms=HOLD)
        assert two.state == ACQUIRED
        await asyncio.sleep(0.12)
        three = await lock.take(A, [], "t3", default_ms=500, hold_ms=HOLD)
        assert three.state == HELD  # two in flight
        await lock.cut(one.taken[0], "t1", default_ms=500)
        three = await lock.take(A, [], "t3", default_ms=500, hold_ms=HOLD)
        assert three.state == ACQUIRED

    run_redis(redis_url, body)


# -- per-host settings --------------------------------------------------------------


def test_an_override_is_in_every_partition_and_both_scripts_apply_it(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def body(client: aredis.Redis) -> None:
        overrides = HostOverrides(client, "web", P)
        conf = await overrides.set("a.test", delay=5.0, max_pages=7)
        assert conf == HostConf(delay=5.0, max_pages=7)
        for i in range(P):
            raw = await client.hget(keys.FrontierKeys("web", i, P).overrides, "a.test")
            assert json.loads(raw) == {"delay": 5.0, "max_pages": 7}
        # The lock script: the override replaces DOWNLOAD_DELAY (0.2 s).
        lock = HostLock(client, "web", 1_800_000, P)
        grant = await lock.take(A, [], "t1", default_ms=200, hold_ms=0)
        assert grant.ms == 5_000
        # The lease script (of the host's partition).
        k = host_partition(A, P)
        frontier = Frontier(client, "web", Worker("w", 60_000, 200), k, P)
        await frontier.commit([q("http://a.test/1"), q("http://a.test/2")])
        batch = await frontier.lease(10)
        assert len(batch.leases) == 1 and 4_000 < batch.wait_ms <= 5_000
        # Removed field by field; the last one removes the host.
        assert await overrides.set("a.test", delay=None) == HostConf(max_pages=7)
        assert await overrides.reset("a.test")
        assert await overrides.all() == {}
        assert not await overrides.reset("a.test")

    run_redis(redis_url, body)


def test_download_slots_space_a_host_in_both_scripts(redis_url: str) -> None:
    """DOWNLOAD_SLOTS (Scrapy's per-slot settings) by host name."""
    slot = HostConf(delay=2.0)

    async def body(client: aredis.Redis) -> None:
        lock = HostLock(client, "web", 1_800_000)
        grant = await lock.take(A, [], "t1", default_ms=200, hold_ms=0, slot=slot)
        assert grant.ms == 2_000
        worker = Worker("w", 60_000, 200, slots=slots_json({"b.test": slot}))
        frontier = Frontier(client, "web", worker)
        await frontier.commit(
            [q("http://b.test/1", host=B), q("http://b.test/2", host=B)]
        )
        batch = await frontier.lease(10)
        assert len(batch.leases) == 1 and 1_500 < batch.wait_ms <= 2_000

    run_redis(redis_url, body)


def test_the_middleware_reads_download_slots(redis_url: str) -> None:
    mw = _middleware(
        redis_url, DOWNLOAD_DELAY=0.2, DOWNLOAD_SLOTS={"a.test": {"delay": 1.5}}
    )

    async def main() -> int:
        request = Request("http://a.test/x")
        assert await mw.process_request(request) is None
        await mw.lock.client.aclose()
        return int(request.meta[meta.POLITENESS_LOCK]["spacing_ms"])

    assert asyncio.run(main()) == 1_500


# -- the lease script's IP schedule ---------------------------------------------------


def test_the_lease_script_passes_over_a_host_whose_address_is_busy(
    redis_url: str,
) -> None:
    """No head-of-line blocking: hosts a and b share an address that is busy
    (another host of it is being fetched), c has its own: c is leased, a and
    b wait in `ready` until half an IP delay before the address frees. Then
    one of a and b is leased, and its lease marks the address busy for the
    IP delay, so the other waits again (it would only wait at the IP lock in
    a worker), while c, whose address is free enough, is leased again."""

    async def body(client: aredis.Redis) -> None:
        worker = Worker("w", 60_000, 100, ip_delay_ms=2_000)
        frontier = Frontier(client, "web", worker)
        records = HostRecords(client, "web")
        for host, ip in ((A, IP), (B, IP), (C, "10.0.0.8")):
            await records.set_ip(host, ip)
        await frontier.commit(
            [
                q(f"{h.removesuffix(':80')}/{n}", host=h)
                for h in (A, B, C)
                for n in range(3)
            ]
        )
        await records.ip_busy(IP, 3_000)
        first = await frontier.lease(10)
        assert urls(first.leases) == ["http://c.test/0"]
        assert first.wait_ms <= 100  # c's own spacing
        await asyncio.sleep(0.15)
        # c: its address busy (its own lease) for 2 s, less the 1 s lead.
        assert (await frontier.lease(10)).leases == []
        await asyncio.sleep(2.0)  # a and b's address: 3 s, less the lead
        got = sorted(urls((await frontier.lease(10)).leases))
        assert got in (
            ["http://a.test/0", "http://c.test/1"],
            ["http://b.test/0", "http://c.test/1"],
        ), got

    run_redis(redis_url, body)


# -- AutoThrottle ----------------------------------------------------------------------


def test_the_throttle_follows_scrapys_algorithm_fleet_wide(redis_url: str) -> None:
    async def body(client: aredis.Redis) -> list[tuple[int, int]]:
        records = HostRecords(client, "web")
        common = {"target_concurrency": 0.5, "min_ms": 200, "max_ms": 10_000}

        async def fold(latency: int, ok: bool = True) -> tuple[int, int]:
            return await records.throttle(
                A, latency_ms=latency, start_ms=500, ok=ok, **common
            )

        return [
            await fold(1_000),  # target 2 s, above the start: at once
            await fold(1_000),
            await fold(10, ok=False),  # an error page never lowers it
            await fold(10),  # then halfway down, per response
            await fold(10),
            await fold(10),
            await fold(10),  # never below DOWNLOAD_DELAY
            await fold(20_000),  # never above AUTOTHROTTLE_MAX_DELAY
        ]

    assert run_redis(redis_url, body) == [
        (500, 2_000),
        (2_000, 2_000),
        (2_000, 2_000),
        (2_000, 1_010),
        (1_010, 515),
        (515, 267),
        (267, 200),
        (200, 10_000),
    ]


def test_the_spacing_includes_the_throttle_when_autothrottle_is_on(
    redis_url: str, redis_client: redis.Redis
) -> None:
    record = keys.FrontierKeys("web").host(A)

    async def body(client: aredis.Redis) -> tuple[int, int, int]:
        on = HostLock(client, "web", 1_800_000, throttle_start_ms=800)
        off = HostLock(client, "web", 1_800_000)
        new = (await on.take(A, [], "t0", default_ms=200, hold_ms=0)).ms
        redis_client.delete(lock_key(A, 1))
        redis_client.hset(record, "throttle", 3_000)
        known = (await on.take(A, [], "t1", default_ms=200, hold_ms=0)).ms
        redis_client.delete(lock_key(A, 1))
        return new, known, (await off.take(A, [], "t2", default_ms=200, hold_ms=0)).ms

    # A host with no response yet: the start delay; then its throttle; off:
    # DOWNLOAD_DELAY whatever the record holds.
    assert run_redis(redis_url, body) == (800, 3_000, 200)


def test_the_add_on_replaces_scrapys_autothrottle() -> None:
    from scrapy.settings import Settings

    for enabled in (False, True):
        settings = Settings()
        settings.setdict(
            {"REDIS_URL": "redis://127.0.0.1:1", "AUTOTHROTTLE_ENABLED": enabled},
            priority="cmdline",
        )
        with pytest.raises(SystemExit):  # no Redis there: refused after wiring
            Webcrawl().update_settings(settings)
        extensions = settings["EXTENSIONS"]
        assert extensions[SCRAPY_THROTTLE] is None
        assert (set(THROTTLE_EXTENSION) <= set(extensions)) == enabled
