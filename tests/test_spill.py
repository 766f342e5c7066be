"""The frontier spill (extensions.core.frontier.spill) against a real redis-server and
the
SQLite page store: in order, exactly once, nothing lost when a worker dies."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest
import redis.asyncio as aredis
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from extensions.core.frontier.frontier import Frontier, QueuedRequest, Worker
from extensions.core.frontier.serialization import request_from_bytes, request_to_bytes
from extensions.core.frontier.spill import FrontierSpill, SpillStore
from pipelines.stores.spill import PageStoreSpill
from pipelines.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

HOST = "http://a.test:80"
# Priorities of the requests, in arrival order: boosts and demotions mixed
# in, so spilled requests must come back ahead of some queued ones' arrival.
PRIORITIES = [0, 0, 5, 0, -3, 5, 0, 1, 0, 0, 7, -3, 0, 0, 5, 0, 1, 1, 0, 9] * 3


def spill_for(tmp_path: Path, **settings: Any) -> FrontierSpill:
    crawler = get_crawler(
        Spider,
        {
            "FRONTIER_HOST_QUEUE_MAX": 4,
            "FRONTIER_MAX_MEMORY": 0,
            "FRONTIER_SPILL_BATCH": 3,
            "FRONTIER_SPILL_STORE": "pipelines.stores.spill.PageStoreSpill",
            "SQLITE_PATH": str(tmp_path / "pages.sqlite3"),
            **settings,
        },
    )
    return FrontierSpill(crawler)


def run(
    redis_url: str,
    tmp_path: Path,
    body: Callable[[Frontier, Frontier, FrontierSpill], Awaitable[None]],
    **settings: Any,
) -> None:
    """``body(capped frontier, reference frontier without a cap, spill)``."""

    async def main() -> None:
        client = aredis.Redis.from_url(redis_url)
        spill = spill_for(tmp_path, **settings)
        worker = Worker("w1", 60_000, 0, 1_800_000, spill.refill_below)
        capped = Frontier(client, "web", worker)
        reference = Frontier(client, "ref", Worker("w1", 60_000, 0, 1_800_000))
        spill.open([capped])
        try:
            await body(capped, reference, spill)
        finally:
            await spill.close()
            await client.aclose()

    asyncio.run(main())


def requests(start: int, priorities: list[int]) -> list[QueuedRequest]:
    return [
        QueuedRequest(HOST, p, request_to_bytes(Request(f"http://a.test/{start + i}")))
        for i, p in enumerate(priorities)
    ]


async def commit(
    f: Frontier, spill: FrontierSpill | None, batch: list[QueuedRequest], entry: str
) -> int:
    """Commit as the scheduler does: written ahead, committed under the cap,
    refused requests written to the store. Returns how many were refused."""
    await f.log_ahead("w1", entry, batch)
    if spill is None:
        await f.commit(batch, wal=("w1", entry))
        return 0
    _, _, refused = await f.commit_capped(
        batch, (), ("w1", entry), spill.cap(), spill.refill_below
    )
    if refused:
        await spill.write(refused, entry, "w1")
    return len(refused)


async def take(f: Frontier, spill: FrontierSpill | None, n: int) -> list[str]:
    """Lease ``n`` (refilling first, as a worker's round does) and ack them."""
    if spill is not None:
        await spill.refill()
    batch = await f.lease(n)
    await f.commit(acks=[lease for lease, _ in batch.leases])
    return [request_from_bytes(m).url for _, m in batch.leases]


async def drain(f: Frontier, spill: FrontierSpill | None) -> list[str]:
    out: list[str] = []
    while got := await take(f, spill, 2):
        out += got
    return out


async def spill_state(f: Frontier) -> tuple[int, int, int]:
    """(queued in Redis, `spilled`, `spilling`) of HOST."""
    spilled, spilling = await f.client.hmget(f.keys.host(HOST), "spilled", "spilling")
    return (
        int(await f.client.zcard(f.keys.queue(HOST))),
        int(spilled or 0),
        int(spilling or 0),
    )


def test_the_page_store_spill_is_a_spill_store(tmp_path: Path) -> None:
    assert isinstance(spill_for(tmp_path).store, PageStoreSpill)
    assert isinstance(spill_for(tmp_path).store, SpillStore)


def test_spilled_requests_come_back_in_order_exactly_once(
    redis_url: str, tmp_path: Path
) -> None:
    async def body(f: Frontier, ref: Frontier, spill: FrontierSpill) -> None:
        first, second = requests(0, PRIORITIES[:35]), requests(35, PRIORITIES[35:])
        got, want = [], []
        refused = 0
        for i in range(0, len(first), 7):
            refused += await commit(f, spill, first[i : i + 7], f"a{i}")
            await commit(ref, None, first[i : i + 7], f"a{i}")
        assert refused == len(first) - 4
        queued, spilled, spilling = await spill_state(f)
        assert (queued, spilled, spilling) == (4, len(first) - 4, 0)
        assert spill.store is not None
        assert spill.store.spill_count(HOST) == spilled
        # Drain a little, then more requests arrive while some are spilled.
        for _ in range(4):
            got += await take(f, spill, 3)
            want += await take(ref, None, 3)
        for i in range(0, len(second), 5):
            await commit(f, spill, second[i : i + 5], f"b{i}")
            await commit(ref, None, second[i : i + 5], f"b{i}")
        got += await drain(f, spill)
        want += await drain(ref, None)
        assert got == want  # the order Redis alone gives: priority, then arrival
        assert len(got) == len(set(got)) == len(PRIORITIES)  # each exactly once
        assert await spill_state(f) == (0, 0, 0)
        assert spill.store.spill_count() == 0
        assert not await f.client.smembers(f.keys.refill)

    run(redis_url, tmp_path, body)


def test_a_request_ahead_of_the_queue_takes_the_last_ones_place(
    redis_url: str, tmp_path: Path
) -> None:
    async def body(f: Frontier, _ref: Frontier, spill: FrontierSpill) -> None:
        await commit(f, spill, requests(0, [0, 0, 0, 0]), "a")
        _, _, refused = await f.commit_capped(
            requests(4, [10]), cap=spill.cap(), refill_below=spill.refill_below
        )
        # The boosted request is queued; the queue's last (/3) is spilled.
        assert [request_from_bytes(r.member).url for r in refused] == [
            "http://a.test/3"
        ]
        assert refused[0].priority == 0
        members = await f.client.zrange(f.keys.queue(HOST), 0, -1)
        assert [request_from_bytes(m).url for m in members] == [
            "http://a.test/4",
            "http://a.test/0",
            "http://a.test/1",
            "http://a.test/2",
        ]

    run(redis_url, tmp_path, body)


def test_a_down_hosts_requests_go_to_the_dlq_never_to_the_spill(
    redis_url: str, tmp_path: Path
) -> None:
    """The commit script judges a host down (HOST_DOWN_AFTER) before its
    cap: past the cap, its new requests are dead-lettered, not spilled (a
    spilled request of a down host would be refilled and fetched)."""

    async def body(f: Frontier, _ref: Frontier, spill: FrontierSpill) -> None:
        await commit(f, spill, requests(0, [0] * 4), "a")  # at the cap
        await f.client.hset(f.keys.host(HOST), "down", 2**50)
        await f.log_ahead("w1", "b", requests(4, [0, 5, 0]))
        added, _, refused = await f.commit_capped(
            requests(4, [0, 5, 0]), (), ("w1", "b"), spill.cap(), spill.refill_below
        )
        assert (added, refused) == (0, [])
        assert await spill_state(f) == (4, 0, 0)
        assert not await f.client.hexists(f.keys.wal("w1"), "b")
        dead = await f.client.hgetall(f.keys.dlq)
        assert sorted(dead) == [f"http://a.test/{i}".encode() for i in (4, 5, 6)]
        assert await f.client.hget(f.keys.dlq_reasons, "host_down") == b"3"
        assert spill.store is not None and spill.store.spill_count() == 0

    run(redis_url, tmp_path, body)


@pytest.mark.parametrize("reason", ["host_down", "dns"])
def test_a_refill_of_a_down_host_dead_letters_what_it_reads(
    redis_url: str, tmp_path: Path, reason: str
) -> None:
    """Requests spilled before the host was judged down leave the store for
    the DLQ with the verdict's reason (the host record's ``down_reason``)
    and their priority, not for fetches of a host that is down."""

    async def body(f: Frontier, _ref: Frontier, spill: FrontierSpill) -> None:
        prios = [0, 0, 0, 0, 5, 0, -3, 1, 0, 2]
        await commit(f, spill, requests(0, prios), "a")  # 6 spilled
        taken = await take(f, spill, 4)  # the queue drains: a refill is due
        await f.client.hset(
            f.keys.host(HOST), mapping={"down": 2**50, "down_reason": reason}
        )
        assert await spill.refill() == 3
        assert await spill.refill() == 3
        assert await spill_state(f) == (0, 0, 0)
        assert spill.store is not None and spill.store.spill_count() == 0
        dead = await f.client.hgetall(f.keys.dlq)
        urls = {f"http://a.test/{i}" for i in range(len(prios))}
        assert {u.decode() for u in dead} == urls - set(taken)
        assert json.loads(dead[b"http://a.test/6"])["priority"] == -3
        assert json.loads(dead[b"http://a.test/8"])["priority"] == 0
        assert await f.client.hgetall(f.keys.dlq_reasons) == {reason.encode(): b"6"}
        # Listed for their page records (DeadLetters.unrecorded).
        assert await f.client.llen(f.keys.dlq_unrecorded) == 6
        assert not await f.client.smembers(f.keys.refill)

    run(redis_url, tmp_path, body)


def test_a_worker_that_dies_before_writing_loses_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    async def body(f: Frontier, ref: Frontier, spill: FrontierSpill) -> None:
        batch = requests(0, PRIORITIES[:12])
        await f.log_ahead("w1", "e1", batch)
        _, _, refused = await f.commit_capped(
            batch, (), ("w1", "e1"), spill.cap(), spill.refill_below
        )
        assert len(refused) == 8
        # Killed here: refused, never written to the store. The write-ahead
        # entry still holds them.
        assert await f.client.hexists(f.keys.wal("w1"), "e1")
        assert await spill_state(f) == (4, 8, 8)
        # A refill must not move anything while requests are on their way.
        assert await spill.refill() == 0
        await f.client.zadd(f.keys.workers, {"w1": 0})
        queued, _, _ = await f.recover(dead_after_ms=1)
        assert queued == 8
        assert await spill_state(f) == (12, 0, 0)
        await commit(ref, None, batch, "e1")
        assert await drain(f, spill) == await drain(ref, None)

    run(redis_url, tmp_path, body)


def test_refill_waits_for_requests_on_their_way(redis_url: str, tmp_path: Path) -> None:
    async def body(f: Frontier, _ref: Frontier, spill: FrontierSpill) -> None:
        await commit(f, spill, requests(0, [0] * 8), "a")  # 4 queued, 4 spilled
        _, _, late = await f.commit_capped(
            requests(8, [0]), (), ("w1", "b"), spill.cap(), spill.refill_below
        )
        await take(f, spill, 4)  # the queue drains: the host wants a refill
        assert await f.client.sismember(f.keys.refill, HOST)
        assert await spill.refill() == 0  # /8 is not in the store yet
        await spill.write(late, "b", "w1")
        assert await spill.refill() == 3
        assert await drain(f, spill) == [f"http://a.test/{i}" for i in range(4, 9)]

    run(redis_url, tmp_path, body)


def test_over_memory_caps_every_host_at_the_batch(
    redis_url: str, tmp_path: Path
) -> None:
    async def body(f: Frontier, _ref: Frontier, spill: FrontierSpill) -> None:
        assert spill.cap() == 0
        await spill.sample()
        assert spill.over_memory
        assert spill.cap() == 3
        assert await commit(f, spill, requests(0, [0] * 5), "a") == 2

    run(
        redis_url,
        tmp_path,
        body,
        FRONTIER_HOST_QUEUE_MAX=0,
        FRONTIER_MAX_MEMORY=1,
    )


@pytest.mark.parametrize(
    "settings",
    [
        {"FRONTIER_SPILL_STORE": ""},
        {"FRONTIER_HOST_QUEUE_MAX": 0},
    ],
)
def test_without_a_store_or_a_cap_nothing_spills(
    tmp_path: Path, settings: dict[str, Any]
) -> None:
    spill = spill_for(tmp_path, **settings)
    assert not spill.enabled
    assert spill.cap() == 0
    assert spill.refill_below == 0


def test_a_refill_never_moves_requests_ahead_of_one_spilled_meanwhile(
    redis_url: str, tmp_path: Path
) -> None:
    """A request of higher priority spilled while a refill reads the store
    (between its start and its script) keeps its place: the refill moves
    back only what scores below it."""

    async def body(f: Frontier, ref: Frontier, spill: FrontierSpill) -> None:
        first, boosted = requests(0, [0] * 10), requests(10, [5])
        for target, cap in ((f, spill), (ref, None)):
            await commit(target, cap, first, "a")
            await take(target, cap, 4)
        assert spill.store is not None
        store_take = spill.store.spill_take
        call = spill._call
        interleaved: list[int] = []

        async def racing_call(func: Any, *args: Any) -> Any:
            result = await call(func, *args)
            if func == store_take and not interleaved:
                interleaved.append(await commit(f, spill, boosted, "late"))
            return result

        spill._call = racing_call  # type: ignore[method-assign]
        assert await spill.refill() == 0  # all it read scores above /10
        assert interleaved == [1]
        await commit(ref, None, boosted, "late")
        got = await drain(f, spill)
        assert got == await drain(ref, None)
        assert got[0] == "http://a.test/10"

    run(redis_url, tmp_path, body)


def test_the_scheduler_spills_and_refills_in_order(
    redis_url: str, tmp_path: Path
) -> None:
    """Through Scrapy's scheduler contract: 30 requests of one host with a
    cap of 4 come back each once, in priority then arrival order, and the
    crawl is pending while any wait in the store."""
    from tests.support.scheduler import drain as take_requests
    from tests.support.scheduler import make_crawler, opened

    async def body() -> None:
        crawler = make_crawler(
            redis_url,
            FRONTIER_HOST_QUEUE_MAX=4,
            FRONTIER_SPILL_BATCH=3,
            FRONTIER_SPILL_STORE="pipelines.stores.spill.PageStoreSpill",
            SQLITE_PATH=str(tmp_path / "pages.sqlite3"),
            FRONTIER_BATCH_SIZE=2,
            FRONTIER_BUFFER_SIZE=2,
        )
        s = await opened(crawler)
        priorities = PRIORITIES[:30]
        for i, prio in enumerate(priorities):
            s.enqueue_request(Request(f"http://a.test/{i}", priority=prio))
        got = await take_requests(s, 30, timeout=30)
        want = sorted(range(30), key=lambda i: (-priorities[i], i))
        assert [r.url for r in got] == [f"http://a.test/{i}" for i in want]
        assert crawler.stats is not None
        assert crawler.stats.get_value("frontier/spilled") > 0
        assert crawler.stats.get_value("frontier/refilled") > 0
        await s.close_async("finished")

    asyncio.run(body())


def test_starting_afresh_empties_the_spill_store(
    redis_url: str, tmp_path: Path
) -> None:
    """SCHEDULER_FLUSH_ON_START deletes the crawl's keys, the arrival counter
    among them: spilled requests left in the store would come back with
    stale scores (or collide with new ones), so they go too."""
    from tests.support.scheduler import make_crawler, opened

    async def spill_some(f: Frontier, _ref: Frontier, spill: FrontierSpill) -> None:
        await commit(f, spill, requests(0, [0] * 10), "a")

    run(redis_url, tmp_path, spill_some)
    assert spilled_rows(tmp_path) == 6

    async def body(**settings: Any) -> Any:
        crawler = make_crawler(
            redis_url,
            FRONTIER_SPILL_STORE="pipelines.stores.spill.PageStoreSpill",
            SQLITE_PATH=str(tmp_path / "pages.sqlite3"),
            **settings,
        )
        s = await opened(crawler)
        await s.close_async("finished")
        return crawler.stats

    # Kept (and reported on close) by a run that persists.
    stats = asyncio.run(body(FRONTIER_HOST_QUEUE_MAX=0))
    assert stats.get_value("frontier/waiting_spilled") == 6
    assert spilled_rows(tmp_path) == 6
    asyncio.run(body(SCHEDULER_FLUSH_ON_START=True))
    assert spilled_rows(tmp_path) == 0


def spilled_rows(tmp_path: Path) -> int:
    """The spill rows of the SQLite store under ``tmp_path``."""
    store = SQLiteStore(tmp_path / "pages.sqlite3")
    store.open()
    try:
        return store.side.spill_count()
    finally:
        store.close()
