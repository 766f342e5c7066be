"""The partitioned frontier (``FRONTIER_PARTITIONS``) on a real redis-server:
each partition under its own hash tag, routed by host, leased fairly."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
import redis.asyncio as aredis
from redis.commands.core import AsyncScript
from redis.crc import key_slot
from scrapy import Request, Spider
from scrapy.settings import Settings
from scrapy.statscollectors import MemoryStatsCollector

from extensions import meta
from extensions.core.frontier import frontier as frontier_module
from extensions.core.frontier.deadletters import DeadLetter, DeadLetters
from extensions.core.frontier.frontier import (
    PartitionedFrontier,
    PartitionMismatch,
    QueuedRequest,
    Worker,
    lease_token,
    split_lease,
)
from extensions.core.frontier.hostrecord import HostRecords
from extensions.core.frontier.serialization import request_from_bytes, request_to_bytes
from extensions.downloadermiddlewares.politeness import HostLock, PolitenessMiddleware
from extensions.extensions.metrics import PrometheusMetrics
from extensions.keys import FrontierKeys, host_lock, partition_tag
from extensions.meta import FRONTIER_LEASE
from extensions.signals import items_stored
from extensions.utils.hosts import host_partition
from pipelines.items import PageItem
from tests.support.polling import until
from tests.support.scheduler import make_crawler, opened
from tests.utils import get_crawler, run_redis
from webcrawl.addon import install_defaults
from webcrawl.operate import gather_status, reset, set_paused

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import redis
    from scrapy.crawler import Crawler

    from extensions.core.scheduler import RedisScheduler

P = 4
HOSTS = [f"http://h{i}.test:80" for i in range(24)]


@pytest.fixture(autouse=True)
def single_slot_scripts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every script call of these tests names keys of one cluster slot, as
    a Redis Cluster demands (a single server would run a cross-slot script)."""
    crossed: list[list[str]] = []
    call = AsyncScript.__call__

    def checked(self: AsyncScript, keys: Any = None, *a: Any, **kw: Any) -> Any:
        names = [k.decode() if isinstance(k, bytes) else str(k) for k in keys or ()]
        if len({key_slot(k.encode()) for k in names}) > 1:
            crossed.append(names)
        return call(self, keys, *a, **kw)

    monkeypatch.setattr(AsyncScript, "__call__", checked)
    yield
    assert crossed == []


def q(host: str, path: str, priority: int = 0) -> QueuedRequest:
    url = host.removesuffix(":80") + path
    return QueuedRequest(host, priority, request_to_bytes(Request(url)))


def url_of(member: bytes) -> str:
    return request_from_bytes(member).url


def worker(name: str, lease_ms: int = 60_000) -> Worker:
    return Worker(name, lease_ms)


def test_every_partition_has_the_hosts_a_stable_hash_gives_it() -> None:
    spread = Counter(host_partition(h, P) for h in HOSTS)
    assert sorted(spread) == list(range(P))
    # Stable across processes (not Python's salted hash): a fixed value.
    assert host_partition("http://a.test:80", P) == 2
    assert all(host_partition(h, 1) == 0 for h in HOSTS)


def test_one_partition_keeps_todays_key_names() -> None:
    assert FrontierKeys("web", 0).ready == "web:{web}:ready"
    assert host_lock("web", "http://a.test:80") == "web:{web}:lock:http://a.test:80"
    assert partition_tag("web", 1, 2).startswith("{web:p1")
    assert lease_token(0, "w:1") == "w:1"
    assert split_lease(lease_token(3, "w-host-1:17")) == (3, "w-host-1:17")


@pytest.mark.parametrize("masters", [2, 3, 5])
@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 6, 8, 16, 31])
def test_partitions_spread_over_the_masters_of_a_cluster(
    masters: int, partitions: int
) -> None:
    """Masters holding equal slot ranges (``redis-cli --cluster create``)
    get every partition they can: all of them once P >= N, and no master
    more than one above its share."""
    tags = [partition_tag("web", i, partitions) for i in range(partitions)]
    per_master = Counter(key_slot(t.encode()) * masters // 16384 for t in tags)
    assert len(per_master) == min(masters, partitions)
    assert max(per_master.values()) <= -(-partitions // masters) + 1


def test_keys_land_in_one_slot_per_partition(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def body(client: aredis.Redis) -> None:
        f = PartitionedFrontier(client, "web", P, worker("w1"))
        await f.beat()
        reqs = [q(h, f"/{i}") for h in HOSTS for i in range(2)]
        await f.log_ahead("w1", "e1", reqs[:5])
        await f.commit(reqs)
        batch = await f.lease(6)
        assert len(batch.leases) == 6
        records = HostRecords(client, "web", P)
        locks = HostLock(client, "web", 1_800_000, P)
        dlq = DeadLetters(client, "web", P)
        for h in HOSTS:
            await records.set_delay(h, 10)
            await locks.acquire(h, h, "token", 1_000)
            await records.fail(h, threshold=9, cooldown_ms=1, max_cooldown_ms=1)
            await dlq.host_down(h, 0, 60_000, "refused")  # queue -> DLQ

    run_redis(redis_url, body)
    keys = [k.decode() for k in redis_client.scan_iter("web:*")]
    slots: dict[int, set[int]] = {}
    for key in keys:
        tag = key[key.index("{") + 1 : key.index("}")]
        partition = int(tag.split(":p")[1].split(".")[0]) if ":p" in tag else 0
        slots.setdefault(partition, set()).add(key_slot(key.encode()))
    # Every partition is used, each in exactly one slot, four distinct slots.
    assert sorted(slots) == list(range(P))
    assert all(len(s) == 1 for s in slots.values())
    assert len(set().union(*slots.values())) == P
    # The host-down sweep dead-lettered every queued request in its partition.
    for p in range(P):
        assert redis_client.hlen(FrontierKeys("web", p, P).dlq) > 0
    # A host's queue, record and lock share its partition's slot.
    for h in HOSTS:
        k = FrontierKeys("web", host_partition(h, P), P)
        assert key_slot(k.host(h).encode()) == key_slot(k.ready.encode())
        assert key_slot(host_lock("web", h, k.partition, P).encode()) == key_slot(
            k.queue(h).encode()
        )
        assert redis_client.exists(k.host(h))


def test_every_request_is_leased_exactly_once_by_two_workers(redis_url: str) -> None:
    async def body(client: aredis.Redis) -> None:
        a = PartitionedFrontier(client, "web", P, worker("wa"))
        b = PartitionedFrontier(client, "web", P, worker("wb"))
        queued = [q(h, f"/{i}") for h in HOSTS for i in range(5)]
        added, _ = await a.commit(queued)
        assert added == len(queued)
        got: list[str] = []
        for _ in range(200):
            ba, bb = await asyncio.gather(a.lease(7), b.lease(5))
            got += [url_of(m) for _, m in ba.leases + bb.leases]
            for f, batch in ((a, ba), (b, bb)):
                tokens = [t for t, _ in batch.leases]
                assert await f.commit((), tokens) == (0, len(tokens))
            if len(got) >= len(queued):
                break
            await asyncio.sleep(0.01)  # let a skipped partition come due
        assert Counter(got) == Counter(url_of(r.member) for r in queued)
        assert await a.counts() == (0, 0)

    run_redis(redis_url, body)


def test_no_partition_starves_behind_a_large_one(redis_url: str) -> None:
    """Partition of host ``big`` holds 200 requests over 20 hosts, every other
    partition one host with 3: a worker leasing 8 at a time still reaches
    every partition within its first P calls, and the small partitions
    drain early, interleaved with the large one."""

    async def body(client: aredis.Redis) -> None:
        f = PartitionedFrontier(client, "web", P, worker("w1"))
        by_part: dict[int, list[str]] = {}
        for i in range(400):
            h = f"http://n{i}.test:80"
            by_part.setdefault(host_partition(h, P), []).append(h)
        big = by_part[0][:20]
        small = [hs[0] for p, hs in sorted(by_part.items()) if p != 0]
        await f.commit([q(h, f"/{i}") for h in big for i in range(10)])
        await f.commit([q(h, f"/{i}") for h in small for i in range(3)])
        order: list[int] = []
        for _ in range(60):
            batch = await f.lease(8)
            order += [host_partition(q_host(m), P) for _, m in batch.leases]
            await f.commit((), [t for t, _ in batch.leases])
            if not batch.leases and batch.wait_ms < 0:
                break
        assert len(order) == 200 + 3 * (P - 1)
        assert set(order[: 8 * P]) == set(range(P))
        # The small partitions were done before the large one was half done.
        last_small = max(i for i, p in enumerate(order) if p != 0)
        assert last_small < len(order) // 2

    run_redis(redis_url, body)


def q_host(member: bytes) -> str:
    url = url_of(member)
    return url.split("/", 3)[0] + "//" + url.split("/", 3)[2] + ":80"


def test_a_dead_workers_write_ahead_spanning_partitions_is_recovered(
    redis_url: str,
) -> None:
    async def body(client: aredis.Redis) -> None:
        dead = PartitionedFrontier(client, "web", P, worker("dead"))
        live = PartitionedFrontier(client, "web", P, worker("live"))
        await dead.beat()
        await dead.commit([q(HOSTS[0], "/parent")])
        (parent,) = (await dead.lease(1)).leases
        batch = [q(h, "/child") for h in HOSTS[:8]]
        assert len({host_partition(r.host, P) for r in batch}) == P
        await dead.log_ahead("dead", "e1", batch)
        # "dead" stops here: it never commits, never beats again.
        await asyncio.sleep(0.05)
        queued, poisoned, reclaimed = await live.recover(dead_after_ms=20)
        assert (queued, poisoned, reclaimed) == (len(batch), 0, 1)
        got = []
        for _ in range(20):
            got += [url_of(m) for _, m in (await live.lease(20)).leases]
            await asyncio.sleep(0.02)
        assert sorted(got) == sorted(
            [url_of(parent[1])] + [url_of(r.member) for r in batch]
        )
        for f in live.parts:
            assert not await client.exists(f.keys.wal("dead"))
            assert await client.zscore(f.keys.workers, "dead") is None

    run_redis(redis_url, body)


def cross_partition_pair() -> tuple[str, str]:
    parent = HOSTS[0]
    child = next(h for h in HOSTS if host_partition(h, P) != host_partition(parent, P))
    return parent, child


def test_a_cross_partition_redirect_hands_over_its_lease(redis_url: str) -> None:
    async def body(client: aredis.Redis) -> None:
        parent_host, child_host = cross_partition_pair()
        f = PartitionedFrontier(client, "web", P, worker("w1"))
        await f.beat()
        await f.commit([q(parent_host, "/old")])
        ((token, _),) = (await f.lease(1)).leases
        assert split_lease(token)[0] == host_partition(parent_host, P)
        child = q(child_host, "/new")
        await f.log_ahead("w1", "e1", [child])
        assert await f.commit([child], [token], ("w1", "e1")) == (1, 1)
        (lease,) = (await f.lease(5)).leases
        assert url_of(lease[1]) == url_of(child.member)
        assert split_lease(lease[0])[0] == host_partition(child_host, P)
        assert (await f.counts())[1] == 1  # only the child's lease is out
        for part in f.parts:
            assert not await client.exists(part.keys.wal("w1"))

    run_redis(redis_url, body)


@pytest.mark.parametrize("first", ["child", "parent"])
def test_a_redirect_stopped_between_its_two_partitions_loses_nothing(
    redis_url: str, first: str
) -> None:
    """The child is written ahead; of the two partitions' commits only one
    lands (``first``), then the worker dies. Either way the parent's lease
    ended or came back, and the child is queued (at least once)."""

    async def body(client: aredis.Redis) -> None:
        parent_host, child_host = cross_partition_pair()
        dead = PartitionedFrontier(client, "web", P, worker("dead"))
        await dead.beat()
        await dead.commit([q(parent_host, "/old")])
        ((token, _),) = (await dead.lease(1)).leases  # the parent, leased
        child = q(child_host, "/new")
        await dead.log_ahead("dead", "e1", [child])
        p_parent, parent_lease = split_lease(token)
        if first == "child":
            p_child = dead.part(host_partition(child_host, P))
            await p_child.commit([child], (), ("dead", "e1"))
        else:
            await dead.part(p_parent).commit((), [parent_lease], ("dead", "e1"))
        await asyncio.sleep(0.05)
        live = PartitionedFrontier(client, "web", P, worker("live"))
        queued, _, reclaimed = await live.recover(dead_after_ms=20)
        # child first: the parent's lease comes back; parent first: the
        # child comes back from its write-ahead entry.
        assert (queued, reclaimed) == ((0, 1) if first == "child" else (1, 0))
        got = []
        for _ in range(10):
            got += [url_of(m) for _, m in (await live.lease(10)).leases]
            await asyncio.sleep(0.02)
        want = [url_of(child.member)]
        if first == "child":
            want.append("http://h0.test/old")
        assert sorted(got) == sorted(want)

    run_redis(redis_url, body)


def test_pause_status_and_dlq_see_every_partition(
    redis_url: str, tmp_path: Path
) -> None:
    settings = Settings(
        {
            "REDIS_URL": redis_url,
            "FRONTIER_PARTITIONS": P,
            "WEBCRAWL_HOME": str(tmp_path),
        }
    )
    install_defaults(settings)

    async def body(client: aredis.Redis) -> None:
        f = PartitionedFrontier(client, "web", P, worker("w1"))
        await f.commit([q(h, "/a") for h in HOSTS])
        status = await gather_status(settings)
        assert status["queued"] == len(HOSTS)
        assert await set_paused(settings, True)
        for part in f.parts:
            assert await client.exists(part.keys.paused)
        batch = await f.lease(10)
        assert batch.paused and not batch.leases
        assert (await gather_status(settings))["paused"]
        assert await set_paused(settings, False)
        for _ in range(40):
            batch = await f.lease(30)
            if batch.leases:
                break
            await asyncio.sleep(0.05)
        assert batch.leases
        # Dead letters: each in its host's partition, read over all of them;
        # a requeue puts each request back in its host's partition.
        dlq = DeadLetters(client, "web", P)
        letters = []
        for h in HOSTS[:8]:
            url = h.removesuffix(":80") + "/gone"
            member = request_to_bytes(Request(url)).decode()
            letters.append(DeadLetter(url, h, "http_4xx", member, status=404))
        await dlq.add(letters)
        assert (await gather_status(settings))["dlq_by_reason"] == {"http_4xx": 8}
        for letter in letters:
            k = FrontierKeys("web", host_partition(letter.host, P), P)
            assert await client.hexists(k.dlq, letter.url)
        assert len({host_partition(h, P) for h in HOSTS[:8]}) > 1
        assert len(await dlq.entries(host="h1.test")) == 1
        assert await dlq.requeue() == 8
        for h in HOSTS[:8]:
            k = FrontierKeys("web", host_partition(h, P), P)
            members = await client.zrange(k.queue(h), 0, -1)
            assert h.removesuffix(":80") + "/gone" in {url_of(m) for m in members}
        # reset counts and deletes every partition's keys.
        kinds = await reset(settings, delete=True)
        assert kinds["frontier q"] == 8  # the requeued; the rest are leased
        assert kinds["frontier ready"] == len({host_partition(h, P) for h in HOSTS[:8]})
        assert kinds["frontier leases"] == P
        assert await reset(settings, delete=False) == {}

    run_redis(redis_url, body)


@pytest.mark.parametrize("mode", ["domain", "ip", "host,ip"])
def test_a_lock_wider_than_a_host_lives_in_its_own_partition(
    redis_url: str, redis_client: redis.Redis, mode: str
) -> None:
    """Issue 26: POLITENESS_KEY domain or ip was refused with P > 1 (one
    script could not set the lock with each host's record). Each lock now
    lives in the partition of its id and is taken by a script of its own."""
    crawler = get_crawler(
        Spider,
        settings_dict={
            "POLITENESS_KEY": mode,
            "FRONTIER_PARTITIONS": P,
            "DOWNLOAD_DELAY": 1.0,
            "REDIS_URL": redis_url,
        },
    )
    crawler.spider = Spider("web")
    crawler.stats = MemoryStatsCollector(crawler)
    mw = PolitenessMiddleware(crawler)

    async def main() -> list[str]:
        request = Request("http://localhost:8080/x")
        try:
            assert await mw.process_request(request) is None
        finally:
            await mw.lock.client.aclose()
        return [lock["id"] for lock in request.meta[meta.POLITENESS_LOCK]["locks"]]

    ids = asyncio.run(main())
    assert len(ids) == len(mode.split(","))
    for lock_id in ids:
        key = host_lock("web", lock_id, host_partition(lock_id, P), P)
        assert redis_client.pttl(key) > 1000  # spacing + hold


def test_write_ahead_batches_are_json_per_partition(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def body(client: aredis.Redis) -> None:
        f = PartitionedFrontier(client, "web", P, worker("w1"))
        await f.log_ahead("w1", "e1", [q(h, "/x") for h in HOSTS])

    run_redis(redis_url, body)
    total = 0
    for p in range(P):
        raw = redis_client.hget(FrontierKeys("web", p, P).wal("w1"), "e1")
        batch = json.loads(raw) if raw else []
        assert all(host_partition(r[0], P) == p for r in batch)
        total += len(batch)
    assert total == len(HOSTS)


def test_an_idle_worker_does_not_spin_on_empty_partitions(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition with nothing due is asked once, then skipped until its
    re-check (judged on Redis's own count of script calls); the batch says
    when to come back, so the scheduler sleeps instead of polling."""
    monkeypatch.setattr(frontier_module, "PARTITION_RECHECK", 60.0)

    async def body(client: aredis.Redis) -> None:
        f = PartitionedFrontier(client, "web", P, Worker("w1", 60_000, 60_000))
        host = next(h for h in HOSTS if host_partition(h, P) == 1)
        await f.commit([q(host, f"/{i}") for i in range(3)])
        await f.parts[0].lease(0)  # the lease script is loaded (SCRIPT LOAD)
        redis_client.config_resetstat()
        got = []
        for _ in range(10):
            batch = await f.lease(5)
            got += batch.leases
        # One lease from the host, which then waits out its 60 s delay: the
        # three empty partitions were asked once each, partition 1 twice.
        assert len(got) == 1
        stats = redis_client.info("commandstats")
        assert stats["cmdstat_evalsha"]["calls"] == P + 1
        assert 59_000 < batch.wait_ms <= 60_000

    run_redis(redis_url, body)


def test_a_crawl_keeps_the_partition_count_it_started_with(
    redis_url: str, tmp_path: Path
) -> None:
    async def body(client: aredis.Redis) -> None:
        await PartitionedFrontier(client, "web", P).pin()
        await PartitionedFrontier(client, "web", P).pin()  # the same: fine
        with pytest.raises(PartitionMismatch, match="started with 4"):
            await PartitionedFrontier(client, "web", 2).pin()
        with pytest.raises(PartitionMismatch):
            await PartitionedFrontier(client, "web", 1).pin()
        f = PartitionedFrontier(client, "web", P)
        await f.commit([q(h, "/a") for h in HOSTS])
        # The operator's settings lack the workers' count: the recorded wins.
        operator = Settings({"REDIS_URL": redis_url, "WEBCRAWL_HOME": str(tmp_path)})
        install_defaults(operator)
        assert (await gather_status(operator))["queued"] == len(HOSTS)
        # Start afresh: any count again.
        await f.flush()
        await PartitionedFrontier(client, "web", 2).pin()

    run_redis(redis_url, body)


def test_partitions_refused_on_a_crawl_written_with_one(redis_url: str) -> None:
    """Frontier work in ``{web}`` and no record: a crawl of before partitions."""

    async def body(client: aredis.Redis) -> None:
        await PartitionedFrontier(client, "web", 1).commit([q(HOSTS[0], "/a")])
        await client.delete(FrontierKeys("web").partitions)
        with pytest.raises(PartitionMismatch, match="started with 1"):
            await PartitionedFrontier(client, "web", P).pin()
        await PartitionedFrontier(client, "web", 1).pin()

    run_redis(redis_url, body)


def test_metrics_gauges_sum_the_partitions(redis_url: str) -> None:
    crawler = get_crawler(settings_dict={"REDIS_URL": redis_url, "METRICS_PORT": 1})
    metrics = PrometheusMetrics(crawler)  # never served: no port is bound

    async def body(client: aredis.Redis) -> None:
        f = PartitionedFrontier(client, "web", P, worker("w1"))
        await f.commit([q(h, f"/{i}") for h in HOSTS for i in range(2)])
        assert len((await f.lease(10)).leases) == 10
        await metrics.refresh_frontier(f)
        ready.extend([await client.zcard(part.keys.ready) for part in f.parts])

    ready: list[int] = []
    run_redis(redis_url, body)
    assert metrics.gauges["webcrawl_frontier_queued"] == 2 * len(HOSTS) - 10
    assert metrics.gauges["webcrawl_frontier_leases"] == 10
    assert all(ready)  # hosts waiting in every partition, all counted
    assert metrics.gauges["webcrawl_frontier_hosts_ready"] == sum(ready)


def test_two_schedulers_share_a_partitioned_frontier(redis_url: str) -> None:
    """Scrapy's scheduler contract over P=4: what one worker enqueues, the
    two lease once each; acknowledged through the items_stored signal,
    nothing stays leased; a third worker with another count may not join."""

    async def body() -> None:
        ca = make_crawler(redis_url, FRONTIER_PARTITIONS=P)
        cb = make_crawler(redis_url, FRONTIER_PARTITIONS=P)
        a, b = await opened(ca), await opened(cb)
        urls = [h.removesuffix(":80") + f"/{i}" for h in HOSTS for i in range(3)]
        for url in urls:
            assert a.enqueue_request(Request(url))
        got: list[tuple[RedisScheduler, Crawler, Request]] = []
        for _ in range(1000):
            for s, c in ((a, ca), (b, cb)):
                request = s.next_request()
                if request is not None:
                    got.append((s, c, request))
            if len(got) == len(urls):
                break
            await asyncio.sleep(0.01)
        assert Counter(r.url for _, _, r in got) == Counter(urls)
        assert {s for s, _, _ in got} == {a, b}  # both leased
        for s, c, r in got:
            item = PageItem(url=r.url, final_url=r.url, status=200,
                            fingerprint="00", lease=r.meta[FRONTIER_LEASE])  # fmt: skip
            # The response's output ended (as the leases spider middleware
            # reports it) and its item is durable: the lease may end.
            s.leases.output_ended(r.meta[FRONTIER_LEASE])
            c.signals.send_catch_log(items_stored, items=[item])
        async with aredis.Redis.from_url(redis_url) as client:
            f = PartitionedFrontier(client, "web", P)

            async def drained() -> bool:
                return await f.counts() == (0, 0)

            # The acks go with the schedulers' next rounds: 500 polls of
            # 10 ms were not enough on a loaded machine (9 leases left).
            assert await until(drained, timeout=60), await f.counts()
        with pytest.raises(PartitionMismatch):
            await opened(make_crawler(redis_url, FRONTIER_PARTITIONS=2))
        await a.close_async("finished")
        await b.close_async("finished")

    asyncio.run(body())


def test_the_spill_caps_and_refills_each_partitions_hosts(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The frontier spill over P=3 through the scheduler contract: hosts of
    every partition spill past a cap of 4 and come back each once, in
    priority then arrival order per host; their spill counters and refill
    SET live in their own partition's tag (the autouse guard checks every
    commit, refill and confirm script names one slot)."""
    from tests.support.scheduler import drain

    parts, hosts = 3, []
    for p in range(parts):
        hosts += [h for h in HOSTS if host_partition(h, parts) == p][:2]
    prios = [0, 0, 5, 0, -3, 5, 0, 1, 0, 0, 7, 0]

    async def body() -> None:
        crawler = make_crawler(
            redis_url,
            FRONTIER_PARTITIONS=parts,
            FRONTIER_HOST_QUEUE_MAX=4,
            FRONTIER_SPILL_BATCH=3,
            FRONTIER_SPILL_STORE="pipelines.stores.spill.PageStoreSpill",
            SQLITE_PATH=str(tmp_path / "pages.sqlite3"),
            FRONTIER_BATCH_SIZE=2,
            FRONTIER_BUFFER_SIZE=2,
        )
        s = await opened(crawler)
        for i, prio in enumerate(prios):
            for h in hosts:
                url = h.removesuffix(":80") + f"/{i}"
                s.enqueue_request(Request(url, priority=prio))
        got = await drain(s, len(prios) * len(hosts), timeout=60)
        urls = [r.url for r in got]
        assert len(urls) == len(set(urls)) == len(prios) * len(hosts)
        want = sorted(range(len(prios)), key=lambda i: (-prios[i], i))
        for h in hosts:
            base = h.removesuffix(":80")
            mine = [u for u in urls if u.startswith(base + "/")]
            assert mine == [f"{base}/{i}" for i in want]
        assert crawler.stats is not None
        assert crawler.stats.get_value("frontier/spilled") > 0
        assert crawler.stats.get_value("frontier/refilled") > 0
        await s.close_async("finished")

    asyncio.run(body())
    for h in hosts:
        k = FrontierKeys("web", host_partition(h, parts), parts)
        # Counted in its partition's record, back to 0: every one refilled.
        assert redis_client.hget(k.host(h), "spilled") == b"0"
        assert not redis_client.sismember(k.refill, h)
        if host_partition(h, parts) > 0:
            assert not redis_client.exists(FrontierKeys("web").host(h))
