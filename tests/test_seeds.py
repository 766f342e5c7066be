"""The seed list's hand-over (extensions.core.seeds): take, settle, give back,
release, on a real redis-server."""

from __future__ import annotations

import asyncio
from typing import Any

import redis
import redis.asyncio as aredis
from scrapy import Request, signals

from extensions.core.seeds import SeedList, Taken
from extensions.keys import FrontierKeys, seed_taken, seed_takers, start_urls
from extensions.meta import SEED_TAKEN
from extensions.signals import seeds_settled
from tests.support.scheduler import drain, make_crawler, opened, wait_for
from tests.utils import run_redis

SEEDS, TAKERS = start_urls("web"), seed_takers("web")


def _list(client: aredis.Redis, taker: str, dead_after_ms: int = 30_000) -> SeedList:
    return SeedList(client, "web", taker=taker, dead_after_ms=dead_after_ms)


def _urls(taken: Taken) -> list[str]:
    return [seed.url for seed, _ in taken.seeds]


def test_take_moves_entries_to_the_taken_list_until_settled(
    redis_client: redis.Redis, redis_url: str
) -> None:
    redis_client.lpush(SEEDS, "http://a.test/1", "http://a.test/2", "ftp://x/")
    redis_client.lpush(SEEDS, "http://a.test/3")

    async def body(client: aredis.Redis) -> tuple[Taken, list[bytes], Taken]:
        seeds = _list(client, "w1")
        first = await seeds.take(3)
        held = await client.lrange(seed_taken("web", "w1"), 0, -1)
        seeds.settle([entry for _, entry in first.seeds])
        return first, held, await seeds.take(10)

    first, held, second = run_redis(redis_url, body)
    # Oldest first; the entries moved, not copied; the invalid one recorded.
    assert _urls(first) == ["http://a.test/1", "http://a.test/2"]
    assert [entry for _, entry in first.seeds] == ["http://a.test/1", "http://a.test/2"]
    assert first.invalid == [(b"ftp://x/", "scheme must be http or https, not 'ftp'")]
    assert held == [b"ftp://x/", b"http://a.test/2", b"http://a.test/1"]
    assert redis_client.llen("web:start_urls:invalid") == 1
    # The next take removed the settled and the recorded entries; it took the
    # last seed, which stays taken until settled.
    assert _urls(second) == ["http://a.test/3"]
    assert redis_client.lrange(seed_taken("web", "w1"), 0, -1) == [b"http://a.test/3"]
    assert redis_client.llen(SEEDS) == 0
    assert redis_client.zscore(TAKERS, "w1") is not None


def test_a_dead_takers_seeds_go_back_to_the_head_of_the_list(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """w1 took three seeds and went silent; w2's next take puts them back at
    the taking end, oldest first, and takes them before the newer seeds."""
    redis_client.lpush(SEEDS, "http://a.test/1", "http://a.test/2", "http://a.test/3")

    async def body(client: aredis.Redis) -> tuple[Taken, Taken, Taken]:
        dead = await _list(client, "w1").take(3)
        alive = await _list(client, "w3").take(0)  # beats now: alive
        await client.lpush(SEEDS, "http://a.test/new")
        # w1 last beat long ago (Redis time 0): silent for far longer than
        # the 30 s dead_after.
        await client.zadd(TAKERS, {"w1": 0})
        return dead, alive, await _list(client, "w2").take(2)

    dead, alive, taken = run_redis(redis_url, body)
    assert _urls(dead) == ["http://a.test/1", "http://a.test/2", "http://a.test/3"]
    assert taken.given_back == 3 and alive.given_back == 0
    assert _urls(taken) == ["http://a.test/1", "http://a.test/2"]
    assert redis_client.lrange(SEEDS, 0, -1) == [
        b"http://a.test/new",
        b"http://a.test/3",
    ]
    assert not redis_client.exists(seed_taken("web", "w1"))
    assert set(redis_client.zrange(TAKERS, 0, -1)) == {b"w2", b"w3"}


def test_a_live_takers_seeds_stay_taken(
    redis_client: redis.Redis, redis_url: str
) -> None:
    redis_client.lpush(SEEDS, "http://a.test/1")

    async def body(client: aredis.Redis) -> Taken:
        await _list(client, "w1").take(1)
        return await _list(client, "w2").take(5)

    taken = run_redis(redis_url, body)
    assert taken.seeds == [] and taken.given_back == 0
    assert redis_client.lrange(seed_taken("web", "w1"), 0, -1) == [b"http://a.test/1"]


def test_release_settles_gives_back_the_rest_and_leaves(
    redis_client: redis.Redis, redis_url: str
) -> None:
    redis_client.lpush(SEEDS, "http://a.test/1", "http://a.test/2", "http://a.test/3")

    async def body(client: aredis.Redis) -> int:
        seeds = _list(client, "w1")
        taken = await seeds.take(3)
        seeds.settle([taken.seeds[1][1]])  # only the second was queued
        return await seeds.release()

    assert run_redis(redis_url, body) == 2
    assert redis_client.lrange(SEEDS, 0, -1) == [b"http://a.test/3", b"http://a.test/1"]
    assert not redis_client.exists(seed_taken("web", "w1"))
    assert redis_client.zcard(TAKERS) == 0


def test_a_broken_taken_key_is_left_alone(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """A dead taker's key of the wrong type costs nobody a take."""
    redis_client.set(seed_taken("web", "w1"), "not a list")
    redis_client.zadd(TAKERS, {"w1": 0})
    redis_client.lpush(SEEDS, "http://a.test/1")

    taken = run_redis(redis_url, lambda client: _list(client, "w2").take(1))
    assert (taken.broken, taken.given_back, _urls(taken)) == (1, 0, ["http://a.test/1"])
    assert redis_client.get(seed_taken("web", "w1")) == b"not a list"
    assert redis_client.zscore(TAKERS, "w1") is None


def test_settled_entries_survive_a_failed_take(redis_url: str) -> None:
    """Entries to settle are kept when Redis fails, and sent with the next
    call."""

    async def body(client: aredis.Redis) -> list[bytes | str]:
        seeds = _list(client, "w1")
        seeds.settle(["http://a.test/1"])
        broken = aredis.Redis(port=1)  # nothing listens there
        seeds.client = broken
        try:
            await seeds.take(1)
        except aredis.ConnectionError:
            pass
        finally:
            await broken.aclose()
        return list(seeds._settled)

    assert run_redis(redis_url, body) == ["http://a.test/1"]


def test_scheduler_settles_seeds_once_queued_or_refused(redis_url: str) -> None:
    """The scheduler sends ``seeds_settled`` for a seed once its batch is
    committed (queued, or filtered as seen), for a repeat dropped in
    ``enqueue_request``, and for a seed refused in ``request_scheduled``
    (never enqueued); the entry does not travel on in the queued request."""
    sync = redis.Redis.from_url(redis_url)
    settled: list[tuple[list[str], int]] = []

    def on_settled(entries: list[str], **_: Any) -> None:
        # Queued by now: the frontier holds the host.
        settled.append((list(entries), sync.zcard(FrontierKeys("web").ready)))

    async def body() -> list[Request]:
        crawler = make_crawler(redis_url)
        crawler.signals.connect(on_settled, signal=seeds_settled)
        s = await opened(crawler)
        for n, url in enumerate(["http://a.test/", "http://a.test/"]):
            s.enqueue_request(Request(url, meta={SEED_TAKEN: f"e{n}"}))
        got = await drain(s, 1)
        await wait_for(lambda: len(settled) == 1)
        # A repeat the dupefilter had answered for is refused at once; the
        # engine then sends request_dropped (as it does here).
        repeat = Request("http://a.test/", meta={SEED_TAKEN: "e3"})
        assert not s.enqueue_request(repeat)
        crawler.signals.send_catch_log(
            signals.request_dropped, request=repeat, spider=crawler.spider
        )
        # Announced, then refused by a request_scheduled handler.
        refused = Request("http://b.test/", meta={SEED_TAKEN: "e2"})
        crawler.signals.send_catch_log(
            signals.request_scheduled, request=refused, spider=crawler.spider
        )
        await wait_for(lambda: len(settled) == 3)
        await s.close_async("finished")
        return got

    try:
        got = asyncio.run(body())
    finally:
        sync.close()
    # (The second ready count is 0: a.test is leased by then.)
    assert [entries for entries, _ in settled] == [["e0", "e1"], ["e3"], ["e2"]]
    assert settled[0][1] == 1
    assert [r.url for r in got] == ["http://a.test/"]
    assert SEED_TAKEN not in got[0].meta
