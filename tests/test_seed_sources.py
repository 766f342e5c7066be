"""Seeds as scrapy-redis users push them (extensions.core.seeds): a
``redis_key`` or ``REDIS_START_URLS_KEY`` (one key or a list), SET and ZSET
keys taken with the same never-lose-a-seed hand-over as a LIST, the
scrapy-redis JSON shape, and a seed pushed again that the dupefilter drops
saying why. On a real redis-server."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import FormRequest, Request
from scrapy.settings import Settings

from extensions.core.seeds import (
    InvalidSeed,
    SeedKeyError,
    SeedList,
    SeedSource,
    Taken,
    parse_seed,
    push_seeds,
    seed_counts,
    seed_source,
)
from extensions.keys import invalid_seeds, seed_taken, seed_takers
from extensions.meta import SEED_TAKEN
from tests.support.scheduler import make_crawler, opened, wait_for
from tests.utils import run_redis

if TYPE_CHECKING:
    import redis
    import redis.asyncio as aredis

SHOP = "shop:urls"


def _list(client: aredis.Redis, taker: str, source: SeedSource, **kw: Any) -> SeedList:
    return SeedList(
        client, "shop", taker=taker, dead_after_ms=30_000, source=source, **kw
    )


def _urls(taken: Taken) -> list[str]:
    return [seed.url for seed, _ in taken.seeds]


# -- where the seeds are ---------------------------------------------------------


class RedisKeySpider:
    name = "shop"
    redis_key = "%(name)s:urls"


@pytest.mark.parametrize(
    ("redis_key", "setting", "keys"),
    [
        ("%(name)s:urls", None, ("shop:urls",)),
        (["%(name)s:hot", " shop:urls ", "shop:hot"], None, ("shop:hot", "shop:urls")),
        (None, "seeds:%(name)s", ("seeds:shop",)),
        (None, None, ("shop:start_urls",)),
    ],
)
def test_the_seed_keys_are_the_spiders_redis_key_else_the_setting(
    redis_key: Any, setting: str | None, keys: tuple[str, ...]
) -> None:
    spider = type("S", (), {"name": "shop", "redis_key": redis_key})
    s = Settings({"REDIS_START_URLS_KEY": setting} if setting else {})
    assert seed_source(spider, s).keys == keys


def test_an_empty_seed_key_is_refused() -> None:
    spider = type("S", (), {"name": "shop", "redis_key": ["  "]})
    with pytest.raises(ValueError, match="empty key"):
        seed_source(spider, Settings())


# -- SET and ZSET keys, reliably -------------------------------------------------


@pytest.mark.parametrize("kind", ["set", "zset"])
def test_a_set_or_zset_key_is_taken_into_the_taken_list_until_settled(
    redis_client: redis.Redis, redis_url: str, kind: str
) -> None:
    source = SeedSource((SHOP,), kind)
    urls = [f"http://a.test/{i}" for i in range(5)]
    if kind == "set":
        redis_client.sadd(SHOP, *urls, "ftp://x/")
    else:
        redis_client.zadd(SHOP, {u: i for i, u in enumerate(urls)} | {"ftp://x/": 9})

    async def body(client: aredis.Redis) -> tuple[Taken, list[Any], Taken]:
        seeds = _list(client, "w1", source)
        first = await seeds.take(4)
        held = await client.lrange(seed_taken("shop", "w1", SHOP), 0, -1)
        seeds.settle([entry for _, entry in first.seeds])
        return first, held, await seeds.take(10)

    first, held, second = run_redis(redis_url, body)
    taken = _urls(first) + _urls(second)
    assert sorted(taken) == urls  # each seed once, none lost
    assert [e for e, _ in first.invalid + second.invalid] == (
        [b"ftp://x/"] if kind == "set" else [b"9\nftp://x/"]
    )
    if kind == "zset":
        # Highest score first (scrapy-redis's order); the score rides with
        # the taken entry so that a give-back restores it.
        assert _urls(first) == urls[::-1][:3]
        assert held[-1] == b"9\nftp://x/"
    assert len(held) == 4
    record = json.loads(redis_client.lrange(invalid_seeds(SHOP), 0, -1)[0])
    assert record["entry"] == "ftp://x/"
    # What is left taken: the second batch, not yet settled.
    # (an invalid entry of it leaves at the next call, recorded by then).
    left = redis_client.lrange(seed_taken("shop", "w1", SHOP), 0, -1)
    pending = [e.encode() for _, e in second.seeds] + [e for e, _ in second.invalid]
    assert sorted(left) == sorted(pending)
    assert not redis_client.exists(SHOP)


@pytest.mark.parametrize("kind", ["list", "set", "zset"])
def test_a_dead_takers_seeds_go_back_where_they_came_from(
    redis_client: redis.Redis, redis_url: str, kind: str
) -> None:
    source = SeedSource((SHOP,), kind)
    entries = {"http://a.test/1": 5, '{"url": "http://a.test/2"}': 7}
    if kind == "list":
        redis_client.lpush(SHOP, *entries)
    elif kind == "set":
        redis_client.sadd(SHOP, *entries)
    else:
        redis_client.zadd(SHOP, entries)

    async def body(client: aredis.Redis) -> Taken:
        await _list(client, "w1", source).take(10)
        await client.zadd(seed_takers("shop", SHOP), {"w1": 0})  # silent long
        return await _list(client, "w2", source).take(0)  # a beat

    assert run_redis(redis_url, body).given_back == 2
    assert not redis_client.exists(seed_taken("shop", "w1", SHOP))
    if kind == "list":
        assert set(redis_client.lrange(SHOP, 0, -1)) == {e.encode() for e in entries}
    elif kind == "set":
        assert redis_client.smembers(SHOP) == {e.encode() for e in entries}
    else:
        # With the scores they were taken with.
        back: dict[Any, Any] = dict(redis_client.zrange(SHOP, 0, -1, withscores=True))
        assert back == {e.encode(): float(s) for e, s in entries.items()}


@pytest.mark.parametrize("kind", ["set", "zset"])
def test_release_gives_back_what_was_not_settled(
    redis_client: redis.Redis, redis_url: str, kind: str
) -> None:
    source = SeedSource((SHOP,), kind)
    urls = ["http://a.test/1", "http://a.test/2", "http://a.test/3"]

    async def body(client: aredis.Redis) -> int:
        await push_seeds(client, "shop", urls, source)
        seeds = _list(client, "w1", source)
        taken = await seeds.take(3)
        seeds.settle([taken.seeds[0][1]])
        return await seeds.release()

    assert run_redis(redis_url, body) == 2
    count = redis_client.scard if kind == "set" else redis_client.zcard
    assert count(SHOP) == 2
    assert not redis_client.exists(seed_taken("shop", "w1", SHOP))
    assert redis_client.zcard(seed_takers("shop", SHOP)) == 0


def test_keys_are_taken_in_order_and_every_key_is_beaten(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """scrapy-redis's list ``redis_key``: the first key that holds seeds
    first; a take beats on every key, so this taker's seeds of a key it did
    not reach are not handed to others as a dead taker's."""
    source = SeedSource(("shop:hot", SHOP), "list")
    redis_client.lpush(SHOP, "http://a.test/cold1", "http://a.test/cold2")
    redis_client.lpush("shop:hot", "http://a.test/hot")

    async def body(client: aredis.Redis) -> tuple[Taken, Taken]:
        seeds = _list(client, "w1", source)
        return await seeds.take(2), await seeds.take(5)

    first, second = run_redis(redis_url, body)
    assert _urls(first) == ["http://a.test/hot", "http://a.test/cold1"]
    assert _urls(second) == ["http://a.test/cold2"]
    for key in source.keys:
        assert redis_client.zscore(seed_takers("shop", key), "w1") is not None


@pytest.mark.parametrize(
    ("kind", "wrong", "setting"),
    [
        ("list", "set", "REDIS_START_URLS_AS_SET=True"),
        ("set", "zset", "REDIS_START_URLS_AS_ZSET=True"),
        ("zset", "list", "neither REDIS_START_URLS_AS_SET nor"),
    ],
)
def test_a_seed_key_of_another_type_names_the_setting(
    redis_client: redis.Redis, redis_url: str, kind: str, wrong: str, setting: str
) -> None:
    {"set": lambda: redis_client.sadd(SHOP, "http://a.test/"),
     "zset": lambda: redis_client.zadd(SHOP, {"http://a.test/": 1}),
     "list": lambda: redis_client.lpush(SHOP, "http://a.test/")}[wrong]()  # fmt: skip

    async def body(client: aredis.Redis) -> None:
        await _list(client, "w1", SeedSource((SHOP,), kind)).take(1)

    with pytest.raises(SeedKeyError, match=f"is a {wrong}, not a {kind}") as info:
        run_redis(redis_url, body)
    assert setting in str(info.value)
    assert redis_client.exists(SHOP)  # nothing taken, nothing changed


@pytest.mark.parametrize("kind", ["list", "set", "zset"])
def test_push_and_count_follow_the_keys_type(redis_url: str, kind: str) -> None:
    source = SeedSource((SHOP,), kind)
    entries = ["http://a.test/low", '{"url": "http://a.test/high", "priority": 9}']

    async def body(
        client: aredis.Redis,
    ) -> tuple[tuple[int, int], tuple[int, int], list[str]]:
        await push_seeds(client, "shop", [*entries, "ftp://bad/"], source)
        before = await seed_counts(client, source)
        taken = await _list(client, "w1", source).take(3)
        return before, await seed_counts(client, source), _urls(taken)

    before, after, urls = run_redis(redis_url, body)
    assert (before, after) == ((3, 0), (0, 1))
    assert sorted(urls) == ["http://a.test/high", "http://a.test/low"]
    if kind == "list":  # the first pushed is the first taken
        assert urls == ["http://a.test/low", "http://a.test/high"]
    if kind == "zset":  # scored by priority, highest first
        assert urls == ["http://a.test/high", "http://a.test/low"]


# -- the scrapy-redis JSON shape -------------------------------------------------


def test_scrapy_redis_json_seed_keeps_its_meta_as_the_users_data() -> None:
    """The entry of scrapy-redis's README: its meta keys arrive under
    ``request.meta["user"]``, its other fields as form data."""
    seed = parse_seed(
        '{"url": "https://example.com", "meta": {"job-id": "123xsd",'
        ' "start-date": "dd/mm/yy"}, "url_cookie_key": "fertxsas"}'
    )
    request = seed.request("entry")
    assert isinstance(request, FormRequest)
    assert request.url == "https://example.com/?url_cookie_key=fertxsas"
    assert request.meta == {
        "user": {"job-id": "123xsd", "start-date": "dd/mm/yy"},
        SEED_TAKEN: "entry",
    }


def test_a_post_seed_sends_its_form_as_the_body() -> None:
    seed = parse_seed('{"url": "http://a.test/s", "method": "post", "q": "x y"}')
    request = seed.request("e")
    assert (request.method, request.body, request.url) == (
        "POST",
        b"q=x+y",
        "http://a.test/s",
    )


@pytest.mark.parametrize("key", ["proxy", "download_maxsize", "cookiejar"])
def test_a_control_key_is_refused_unless_seed_meta_keys_lists_it(key: str) -> None:
    entry = json.dumps({"url": "http://a.test/", "meta": {key: 1, "mine": 2}})
    with pytest.raises(InvalidSeed, match=f"meta key '{key}'.*SEED_META_KEYS"):
        parse_seed(entry)
    seed = parse_seed(entry, meta_keys=frozenset({key}))
    assert seed.meta == {key: 1, "user": {"mine": 2}}


def test_webcrawls_own_meta_keys_are_refused_even_when_listed() -> None:
    entry = '{"url": "http://a.test/", "meta": {"frontier_lease": "w:1"}}'
    with pytest.raises(InvalidSeed, match="frontier_lease"):
        parse_seed(entry, meta_keys=frozenset({"frontier_lease"}))


def test_user_data_and_other_keys_merge_or_are_refused() -> None:
    seed = parse_seed('{"url": "http://a.test/", "meta": {"user": {"a": 1}, "b": 2}}')
    assert seed.meta == {"user": {"a": 1, "b": 2}}
    with pytest.raises(InvalidSeed, match="given twice"):
        parse_seed('{"url": "http://a.test/", "meta": {"user": {"a": 1}, "a": 2}}')


# -- a seed pushed again ---------------------------------------------------------


def test_a_seed_the_crawl_has_seen_is_dropped_with_a_line_saying_how_to_recrawl(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The dupefilter drops a re-pushed seed; the log says so, with the
    entry that crawls it again (``dont_filter``), and that one is queued."""

    async def body() -> tuple[int, int]:
        crawler = make_crawler(redis_url)
        s = await opened(crawler)
        s.enqueue_request(Request("http://a.test/x", meta={SEED_TAKEN: "e1"}))
        await wait_for(lambda: crawler.stats.get_value("scheduler/enqueued") == 1)
        # The same seed pushed again, taken by another worker: the batch path.
        other = await opened(make_crawler(redis_url))
        other.enqueue_request(Request("http://a.test/x", meta={SEED_TAKEN: "e2"}))
        stats = other.stats
        await wait_for(lambda: stats.get_value("seeds/filtered") == 1)
        again = parse_seed('{"url": "http://a.test/x", "dont_filter": true}')
        other.enqueue_request(again.request("e3"))
        await wait_for(lambda: (stats.get_value("scheduler/enqueued") or 0) == 1)
        await s.close_async("finished")
        await other.close_async("finished")
        return stats.get_value("seeds/filtered"), stats.get_value("scheduler/enqueued")

    with caplog.at_level(logging.INFO, logger="extensions.core.scheduler"):
        assert asyncio.run(body()) == (1, 1)
    lines = [r.getMessage() for r in caplog.records if "Seed " in r.getMessage()]
    assert lines == [
        "Seed http://a.test/x dropped: the crawl has seen it (its dupefilter "
        'knows the URL). To crawl it again, push it with "dont_filter": true: '
        '{"url": "http://a.test/x", "dont_filter": true} (docs/seeds.md); '
        "further seeds dropped as seen are counted in seeds/filtered "
        "(DUPEFILTER_DEBUG logs each)"
    ]


def test_seed_meta_keys_naming_webcrawls_own_state_stop_the_worker() -> None:
    from webcrawl.addon import guarantee_problems, install_defaults

    s = Settings()
    install_defaults(s)
    s.set("SEED_META_KEYS", ["cookiejar", "frontier_lease"], priority="cmdline")
    assert guarantee_problems(s) == [
        "SEED_META_KEYS names 'frontier_lease', webcrawl's own state: no seed may "
        "set it"
    ]
