"""Hostile data in the shared Redis and in the seed list (issue 10), against a
real redis-server: every entry ends used or set aside with its reason, none
costs its neighbours, and none makes a worker import or call anything.

The worker-level effects (a whole crawl going on around the poison) are in
``tests/test_hostile_e2e.py``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest
import redis.asyncio as aredis
from scrapy import Request, Spider

from extensions.core.frontier.frontier import Frontier, QueuedRequest, Worker
from extensions.core.frontier.lua import priority_from_score
from extensions.core.frontier.scoring import LocalHostCounts, seed_priority
from extensions.core.frontier.serialization import (
    CorruptEntry,
    request_from_bytes,
    request_to_bytes,
)
from extensions.core.seeds import (
    SEED_USER_META_MAX,
    URL_LENGTH_LIMIT,
    InvalidSeed,
    SeedList,
    parse_seed,
)
from tests.support.polling import until
from tests.support.scheduler import drain, make_crawler, opened, run, wait_for

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import redis

GOOD = [
    "http://a.test/1",
    '{"url": "http://a.test/2", "priority": 7}',
    '{"url": "https://a.test/3", "meta": {"user": {"campaign": "x"}}}',
    "http://a.test/4",
]
# Entry -> the words its reason must contain.
HOSTILE: dict[bytes, str] = {
    b"http://[::1": "Invalid IPv6",
    b"http://h:99999/": "Port out of range",
    b"\xff\xfe\x00garbage": "not UTF-8",
    b"http://a.test/" + b"a" * 100_000: "too long",
    b"http://a.test/" + b"a" * (URL_LENGTH_LIMIT + 1): "longer than 2083",
    b"[1,2]": "scheme",
    b"null": "scheme",
    b"": "scheme",
    b'{"url": ["http://a.test/"]}': '"url" string',
    b'{"url": "http://a.test/", "priority": "high"}': "integer",
    b'{"url": "http://a.test/", "priority": 1e400}': "integer",
    b'{"url": "http://a.test/", "priority": NaN}': "NaN",
    b'{"url": "http://a.test/", "priority": 99999999}': "-32768..32767",
    b'{"url": "http://a.test/", "meta": [1]}': '"meta" must be an object',
    b'{"url": "http://a.test/", "extra": 1}': "field 'extra' is not one of",
    b'{"url": "http://a.test/", "dont_filter": "yes"}': '"dont_filter" must be',
    b'{"url": "http://a.test/", "method": "GET /x"}': "HTTP method",
    b'{"url": "http://a.test/", "meta": {"a": 1, "user": 2}}': '"user" must be an',
    b'{"url": "http://a.test/", "meta": {"frontier_lease": "w:1"}}': "frontier_lease",
    b'{"url": "http://a.test/", "meta": {"download_maxsize": 0}}': "download_maxsize",
    b'{"url": "http://a.test/", "meta": {"dont_obey_robotstxt": true}}': "dont_obey",
    b'{"url": "http://a.test/", "meta": {"proxy": "http://evil.test:1"}}': "'proxy'",
    b'{"url": "http://a.test/", "meta": {"user": "'
    + b"u" * SEED_USER_META_MAX
    + b'"}}': "at most 1024",
    b"{" * 5000: "not JSON",
    b'"http://a.test/"': "scheme",
    b"http://a.test/x y": "whitespace",
    b"javascript:alert(1)": "scheme",
}


def test_every_seed_entry_is_taken_or_refused_with_its_reason(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """A bad entry costs nothing but itself: the good entries taken in the
    same batch are all seeds, each bad one is in the invalid list with why."""
    entries: list[bytes] = []
    for i, good in enumerate(GOOD):
        entries.append(good.encode())
        entries += list(HOSTILE)[i::4]
    redis_client.lpush("web:start_urls", *entries)

    async def body() -> tuple[list[Any], list[tuple[bytes, str]]]:
        client = aredis.Redis.from_url(redis_url)
        try:
            taken = await SeedList(
                client, "web", taker="w1", dead_after_ms=30_000
            ).take(len(entries) + 10)
            return [s for s, _ in taken.seeds], taken.invalid
        finally:
            await client.aclose()

    seeds, invalid = asyncio.run(body())
    assert [s.url for s in seeds] == [
        "http://a.test/1",
        "http://a.test/2",
        "https://a.test/3",
        "http://a.test/4",
    ]
    assert seeds[1].priority == 7
    assert seeds[2].meta == {"user": {"campaign": "x"}}
    assert redis_client.llen("web:start_urls") == 0
    records = [
        json.loads(r) for r in redis_client.lrange("web:start_urls:invalid", 0, -1)
    ]
    assert len(records) == len(HOSTILE) == len(invalid)
    for (entry, why), record in zip(invalid, records, strict=True):
        assert HOSTILE[entry] in why, (entry[:60], why)
        assert record["reason"] == why
        # The record keeps the entry (cut when huge, with its length).
        assert record["entry"][:20] == entry[:20].decode("utf-8", "replace")
        assert record.get("length", len(entry)) == len(entry)


@pytest.mark.parametrize("entry", list(HOSTILE))
def test_parse_seed_raises_invalid_seed_only(entry: bytes) -> None:
    with pytest.raises(InvalidSeed):
        parse_seed(entry)


def test_queue_entry_naming_a_module_is_not_imported() -> None:
    """``url\\n{"C": "this.s"}`` in a host queue made the worker import
    ``this`` (Scrapy's ``request_from_dict`` loads ``_class``). Run in a
    fresh interpreter, where ``this`` is surely not imported yet."""
    code = (
        "import sys\n"
        "from extensions.core.frontier.serialization import (\n"
        "    CorruptEntry, request_from_bytes)\n"
        "try:\n"
        '    request_from_bytes(b\'https://a.test/\\n{"C":"this.s"}\')\n'
        "except CorruptEntry as exc:\n"
        "    print('refused:', exc)\n"
        "print('imported' if 'this' in sys.modules else 'not imported')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "Beautiful is better than ugly" not in out
    assert out.splitlines()[-2:] == [
        "refused: request class 'this.s' is not allowed",
        "not imported",
    ]


class CallbackSpider(Spider):
    name = "web"

    def parse_item(self, response: Any) -> None:  # pragma: no cover
        pass

    def _private(self, response: Any) -> None:  # pragma: no cover
        pass


@pytest.mark.parametrize(
    "name", ["close", "_set_crawler", "__init__", "start", "log", "nope", "crawler"]
)
def test_callbacks_must_be_the_spiders_own_methods(name: str) -> None:
    """Scrapy's own attributes (public or private), dunders and names the
    spider does not have are refused: a shared Redis holds data, and must
    not choose what a worker runs. The spider's own methods, private ones
    too (CrawlSpider rules call back ``_callback``), are its code."""
    spider = CallbackSpider()
    with pytest.raises(CorruptEntry, match="is not a spider method"):
        request_from_bytes(f'http://a.test/\n{{"c":"{name}"}}'.encode(), spider)
    with pytest.raises(CorruptEntry, match="is not a spider method"):
        request_from_bytes(f'http://a.test/\n{{"e":"{name}"}}'.encode(), spider)


def test_a_private_method_of_the_spiders_own_code_is_a_callback() -> None:
    spider = CallbackSpider()
    request = request_from_bytes(b'http://a.test/\n{"c":"_private"}', spider)
    assert request.callback == spider._private


def test_known_request_classes_and_callbacks_round_trip() -> None:
    from scrapy.http import FormRequest, JsonRequest

    spider = CallbackSpider()
    for request in (
        Request("http://a.test/", callback=spider.parse_item),
        Request("http://a.test/", callback=spider.parse),
        FormRequest("http://a.test/", formdata={"a": "1"}),
        JsonRequest("http://a.test/", data={"a": 1}),
    ):
        back = request_from_bytes(request_to_bytes(request, spider), spider)
        assert type(back) is type(request)
        assert back.callback == request.callback


@pytest.mark.parametrize(
    "member",
    [
        b"\xff\xfe",
        b"http://a.test/\nnot json",
        b"http://a.test/\n[1]",
        b'http://a.test/\n{"h": 5}',
        b'http://a.test/\n{"m": {"$b": 5}}',
        b'http://a.test/\n{"b": {"$b": "\\u20ac"}}',
        b'http:// [\n{"M": "GET"}',
    ],
)
def test_undecodable_members_raise_corrupt_entry(member: bytes) -> None:
    with pytest.raises(CorruptEntry):
        request_from_bytes(member, CallbackSpider())


# -- poison in the frontier's Lua scripts ---------------------------------------


def frontier_run(redis_url: str, body: Callable[[Frontier], Awaitable[None]]) -> None:
    async def main() -> None:
        client = aredis.Redis.from_url(redis_url)
        try:
            await body(Frontier(client, "web"))
        finally:
            await client.aclose()

    asyncio.run(main())


def q(url: str) -> QueuedRequest:
    return QueuedRequest("http://a.test:80", 0, request_to_bytes(Request(url)))


async def poison_records(f: Frontier) -> list[dict[str, Any]]:
    return [json.loads(r) for r in await f.client.lrange(f.keys.poison, 0, -1)]


def test_malformed_write_ahead_is_quarantined_not_fatal(redis_url: str) -> None:
    """``hset web:{web}:wal:ghost e1 'not json'`` made the recover script
    fail on every heartbeat of every worker."""

    async def body(f: Frontier) -> None:
        await f.client.zadd(f.keys.workers, {"ghost": 0})
        await f.client.hset(f.keys.wal("ghost"), "e1", "not json")
        await f.client.hset(f.keys.wal("ghost"), "e2", '{"a": 1}')
        await f.log_ahead("ghost", "e3", [q("http://a.test/ok")])
        bad = json.dumps([["http://a.test:80", 0, "http://a.test/2"], [1, "x"], 5])
        await f.client.hset(f.keys.wal("ghost"), "e4", bad)
        assert await f.recover(dead_after_ms=60_000) == (2, 3, 0)
        got = await Frontier(f.client, "web", Worker("w", 60_000)).lease(10)
        assert sorted(request_from_bytes(m).url for _, m in got.leases) == [
            "http://a.test/2",
            "http://a.test/ok",
        ]
        records = await poison_records(f)
        assert [(r["field"], r["reason"]) for r in records] == [
            ("e1", "write-ahead batch is not a JSON list"),
            ("e2", "write-ahead batch is not a JSON list"),
            ("e4", "2 malformed requests in a write-ahead batch"),
        ]
        assert records[0] == {
            "key": f.keys.wal("ghost"),
            "field": "e1",
            "entry": "not json",
            "length": 8,
            "reason": "write-ahead batch is not a JSON list",
        }
        assert await f.client.exists(f.keys.wal("ghost")) == 0
        assert await f.recover(dead_after_ms=60_000) == (0, 0, 0)

    frontier_run(redis_url, body)


def test_malformed_lease_record_and_wrong_typed_queue_are_set_aside(
    redis_url: str,
) -> None:
    async def body(f: Frontier) -> None:
        await f.commit([q("http://a.test/1")])
        # An expired lease whose record is not "host\nscore\nmember".
        await f.client.zadd(f.keys.leases, {"ghost:1": 0})
        await f.client.hset(f.keys.lease_data, "ghost:1", "garbage")
        # A host whose queue is a string, scheduled before the good host.
        await f.client.set(f.keys.queue("http://b.test:80"), "oops")
        await f.client.zadd(f.keys.ready, {"http://b.test:80": 0})
        got = await Frontier(f.client, "web", Worker("w", 60_000)).lease(10)
        assert [request_from_bytes(m).url for _, m in got.leases] == ["http://a.test/1"]
        assert got.poisoned == 2
        reasons = [r["reason"] for r in await poison_records(f)]
        assert reasons[0] == "malformed lease record"
        assert reasons[1].startswith("renamed to web:{web}:poison:web:{web}:q:")
        assert (
            await f.client.get("web:{web}:poison:web:{web}:q:http://b.test:80")
            == b"oops"
        )
        assert await f.client.zscore(f.keys.ready, "http://b.test:80") is None
        # Handing back a lease whose record was spoiled meanwhile.
        (lease, _), *_ = got.leases
        await f.client.hset(f.keys.lease_data, lease, "no newlines")
        assert await f.release([lease]) == 0
        assert len(await poison_records(f)) == 3

    frontier_run(redis_url, body)


def test_wrong_typed_keys_are_set_aside_when_queueing(redis_url: str) -> None:
    """A host queue or host record of the wrong type made every commit that
    touched the host fail, so the worker's outbox could never be pushed."""

    async def body(f: Frontier) -> None:
        host = "http://c.test:80"
        await f.client.set(f.keys.queue(host), "oops")
        await f.client.rpush(f.keys.host(host), "a", "list")
        request = QueuedRequest(host, 0, b"http://c.test/1")
        assert await f.commit([request]) == (1, 0)
        reasons = [r["reason"] for r in await poison_records(f)]
        assert len(reasons) == 2
        assert all("WRONGTYPE" in r for r in reasons)
        got = await Frontier(f.client, "web", Worker("w", 60_000)).lease(10)
        assert [m for _, m in got.leases] == [b"http://c.test/1"]
        assert await f.client.lrange(f"{f.keys.poison}:{f.keys.host(host)}", 0, -1) == [
            b"a",
            b"list",
        ]

    frontier_run(redis_url, body)


def test_scheduler_quarantines_a_poisoned_queue_entry(redis_url: str) -> None:
    """A queued member naming a class is moved to the poison list, its lease
    ends, and the good request next to it is served."""

    async def body() -> None:
        crawler = make_crawler(redis_url)
        s = await opened(crawler)
        assert s.frontier is not None
        f = s.frontier
        await f.commit(
            [
                QueuedRequest(
                    "http://a.test:80", 5, b'http://a.test/x\n{"C":"this.s"}'
                ),
                q("http://a.test/good"),
            ]
        )
        s.buffer.poll_now()
        s.task.wake()
        got = await drain(s, 1)
        assert [r.url for r in got] == ["http://a.test/good"]
        records = await poison_records(f)
        assert [r["reason"] for r in records] == [
            "request class 'this.s' is not allowed"
        ]
        assert records[0]["key"] == f.keys.lease_data
        # Counted once the quarantine script has answered the worker's task
        # (the record is in Redis a moment before).
        stats = crawler.stats
        assert await until(lambda: stats.get_value("scheduler/poison") == 1)

        # Its lease ended: only the good request's lease is out.
        async def one_lease() -> bool:
            return int(await f.client.zcard(f.keys.leases)) == 1

        assert await until(one_lease), await f.client.zcard(f.keys.leases)
        await s.close_async("finished")

    run(body)


def test_a_failing_step_does_not_starve_the_others(redis_url: str) -> None:
    """A worker whose heartbeat script fails every time (here: the workers
    key holds a string) still pushes and leases requests."""

    async def body() -> None:
        crawler = make_crawler(redis_url)
        s = await opened(crawler)
        assert s.frontier is not None
        # Once the worker has beaten (it pushes only after its first beat):
        while await s.frontier.client.zscore(s.frontier.keys.workers, s.worker) is None:
            await asyncio.sleep(0.01)
        await s.frontier.client.delete(s.frontier.keys.workers)
        await s.frontier.client.set(s.frontier.keys.workers, "oops")
        s.buffer._next_heartbeat = 0.0
        for i in range(3):
            s.enqueue_request(Request(f"http://a.test/{i}"))
        got = await drain(s, 3)
        assert sorted(r.url for r in got) == [f"http://a.test/{i}" for i in range(3)]
        # The beat due at once may come a round after the pushes and leases
        # (a round under way when it fell due, on a loaded machine).
        stats = crawler.stats
        assert await until(
            lambda: (stats.get_value("scheduler/step_errors/heartbeat") or 0) >= 1
        )
        await s.frontier.client.delete(s.frontier.keys.workers)
        await s.close_async("finished")

    run(body)


# -- scoring ------------------------------------------------------------------------


def test_new_host_bonus_wears_off_after_ten_requests(redis_url: str) -> None:
    """The scheduler counted hosts as ``http://a.test:80`` and the scoring
    looked them up as ``a.test``: all 20 requests scored as a new host."""

    async def body() -> None:
        crawler = make_crawler(
            redis_url,
            FRONTIER_PRIORITY_FUNCTION="extensions.core.frontier.scoring.seed_priority",
        )
        s = await opened(crawler)
        assert s.frontier is not None
        for i in range(20):
            s.enqueue_request(Request(f"http://a.test/{i}", meta={"depth": 1}))
        await wait_for(lambda: crawler.stats.get_value("scheduler/enqueued") == 20)
        # Scores as stored in Redis: queued, or leased already.
        f = s.frontier
        scores = dict(
            await f.client.zrange(
                f.keys.queue("http://a.test:80"), 0, -1, withscores=True
            )
        )
        for record in (await f.client.hgetall(f.keys.lease_data)).values():
            _host, score, member = record.split(b"\n", 2)
            scores[member] = float(score)
        by_url = {
            request_from_bytes(m).url: priority_from_score(v) for m, v in scores.items()
        }
        # Depth 1 scores 90, +5 while the host has had fewer than 10.
        assert [by_url[f"http://a.test/{i}"] for i in range(20)] == [95] * 10 + [
            90
        ] * 10
        await s.close_async("finished")

    run(body)


def test_host_counts_are_bounded() -> None:
    counts = LocalHostCounts(max_hosts=1000)
    for i in range(5000):
        counts.add(f"http://h{i}.test:80")
    assert len(counts) == 1000
    assert counts.host_count("http://h4999.test:80") == 1
    assert counts.host_count("http://h0.test:80") == 0
    # The same key the scheduler counts under is the one scored.
    for _ in range(10):
        counts.add("http://a.test:80")
    assert seed_priority(Request("http://A.test/x", meta={"depth": 1}), counts) == 90
