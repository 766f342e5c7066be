"""A server that stays down has a bounded total (issue 12): once it has failed
every connection for ``HOST_DOWN_AFTER``, it is judged down, its queued and
delayed requests are dead-lettered as ``host_down`` in one script, its new
requests go straight to the dead-letter queue while the verdict lasts, and a
response ends the verdict. Against a real redis-server."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.exceptions import DownloadConnectionRefusedError

from extensions import meta
from extensions.core.frontier import hostrecord as hosts
from extensions.core.frontier.deadletters import DeadLetters
from extensions.core.frontier.frontier import Frontier, QueuedRequest, Worker
from extensions.downloadermiddlewares.backoff import BackoffMiddleware
from extensions.downloadermiddlewares.failurepolicy import FailurePolicyMiddleware
from extensions.meta import FAILURE_META
from extensions.settings import defaults
from extensions.utils.failures import HostDown
from tests.support.hostdown import (
    DOWN,
    OTHER,
    K,
    failing_for,
    middleware_crawler,
    queue_some,
)
from tests.utils import run_redis

if TYPE_CHECKING:
    import redis
    import redis.asyncio as aredis

AFTER_MS = 900_000


def judge(redis_url: str, after_ms: int = AFTER_MS) -> tuple[int, int, bool]:
    async def body(client: aredis.Redis) -> tuple[int, int, bool]:
        return await DeadLetters(client, "web").host_down(
            DOWN, after_ms, 3_600_000, "host down: refused"
        )

    return run_redis(redis_url, body)


def test_a_host_failing_long_enough_is_swept_into_the_dlq(
    redis_url: str, redis_client: redis.Redis
) -> None:
    queue_some(redis_url)
    failing_for(redis_client, DOWN, AFTER_MS - 60_000)
    assert judge(redis_url) == (0, 0, False)  # not long enough: nothing moves
    assert redis_client.zcard(K.queue(DOWN)) == 2
    failing_for(redis_client, DOWN, AFTER_MS + 1000)
    swept, down, made = judge(redis_url)
    assert swept == 3 and down > 0 and made
    # Its queue, its place in the schedule and its delayed retry are gone;
    # the other host is untouched.
    assert not redis_client.exists(K.queue(DOWN))
    assert redis_client.zscore(K.ready, DOWN) is None
    assert redis_client.zcard(K.queue(OTHER)) == 1
    delayed = redis_client.zrange(K.delayed, 0, -1)
    assert [m.split(b"\n")[0] for m in delayed] == [OTHER.encode()]
    # Parked as long as the verdict: nothing of it is leased meanwhile.
    assert int(redis_client.hget(K.host(DOWN), "park")) == down
    entries = {
        e["url"]: e
        for e in (json.loads(v) for v in redis_client.hvals(K.dlq))  # type: ignore[union-attr]
    }
    assert set(entries) == {
        "http://down.test/a",
        "http://down.test/b",
        "http://down.test/retry",
    }
    assert {e["reason"] for e in entries.values()} == {"host_down"}
    assert entries["http://down.test/a"]["priority"] == 5
    assert entries["http://down.test/b"]["priority"] == -2
    assert entries["http://down.test/b"]["request"] == (
        'http://down.test/b\n{"m":{"depth":1}}'
    )
    assert entries["http://down.test/a"]["host"] == DOWN
    assert redis_client.hget(K.dlq_reasons, "host_down") == b"3"
    # A verdict in force: judging again moves nothing and says until when.
    assert judge(redis_url) == (0, down, False)


def test_new_requests_of_a_down_host_go_straight_to_the_dlq_until_it_answers(
    redis_url: str, redis_client: redis.Redis
) -> None:
    failing_for(redis_client, DOWN, AFTER_MS + 1000)
    assert judge(redis_url)[1] > 0

    async def commit(client: aredis.Redis) -> tuple[int, int]:
        return await Frontier(client, "web").commit(
            [
                QueuedRequest(DOWN, 0, b"http://down.test/new"),
                QueuedRequest(DOWN, 0, b"http://down.test/new-retry", delay_ms=5),
                QueuedRequest(OTHER, 0, b"http://up.test/new"),
            ]
        )

    assert run_redis(redis_url, commit) == (1, 0)
    assert not redis_client.exists(K.queue(DOWN))
    assert redis_client.zcard(K.delayed) == 0
    assert redis_client.hexists(K.dlq, "http://down.test/new")
    assert redis_client.hexists(K.dlq, "http://down.test/new-retry")
    assert redis_client.zcard(K.queue(OTHER)) == 1

    # A response ends the verdict: the host's requests are queued again.
    async def answer(client: aredis.Redis) -> None:
        await hosts.HostRecords(client, "web").succeed(DOWN)

    run_redis(redis_url, answer)
    assert redis_client.hget(K.host(DOWN), "down") is None
    # The park the verdict set goes with it: its requests may be leased now,
    # not at the verdict's end (HOST_DOWN_TTL later).
    assert redis_client.hget(K.host(DOWN), "park") is None
    assert run_redis(redis_url, commit) == (2, 0)
    assert redis_client.zcard(K.queue(DOWN)) == 1
    worker = Worker("w", 30_000)
    assert run_redis(redis_url, lambda c: Frontier(c, "web", worker).lease(5)).leases


def test_a_failure_under_a_verdict_is_given_up_as_host_down(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The back-off middleware (560) judges the host and marks the request;
    the failure policy (550) then gives it up instead of retrying it."""
    crawler = middleware_crawler(redis_url, HOST_DOWN_AFTER=AFTER_MS / 1000)
    backoff = BackoffMiddleware.from_crawler(crawler)
    policy = FailurePolicyMiddleware.from_crawler(crawler)
    failing_for(redis_client, DOWN, AFTER_MS + 1000, fails=defaults.BREAKER_THRESHOLD)
    queue_some(redis_url)
    request = Request("http://down.test/page")
    refused = DownloadConnectionRefusedError("refused")

    async def fail() -> Any:
        try:
            await backoff.process_exception(request, refused)
        finally:
            await backoff.records.client.aclose()

    asyncio.run(fail())
    assert request.meta.get(meta.HOST_DOWN) is True
    assert policy.process_exception(request, refused) is None
    assert request.meta[FAILURE_META]["reason"] == "host_down"
    assert request.meta[FAILURE_META]["terminal"]
    assert crawler.stats.get_value("dlq/host_down") == 3
    assert crawler.stats.get_value("backoff/host_down") == 1
    # Without a verdict the same failure is retried.
    fresh = Request("http://up.test/page")
    assert isinstance(policy.process_exception(fresh, refused), Request)


def test_a_hostdown_page_failure_is_judged_but_not_counted_again(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The robots middleware's HostDown (its robots.txt fetches were the
    counted failures) must not park the host behind the breaker, but the run
    of failures it continues reaches the verdict."""
    crawler = middleware_crawler(redis_url, HOST_DOWN_AFTER=AFTER_MS / 1000)
    backoff = BackoffMiddleware.from_crawler(crawler)
    failing_for(redis_client, DOWN, AFTER_MS + 1000, fails=2)
    request = Request("http://down.test/page")

    async def fail() -> None:
        try:
            await backoff.process_exception(request, HostDown("down"))
        finally:
            await backoff.records.client.aclose()

    asyncio.run(fail())
    assert redis_client.hget(K.host(DOWN), "fails") == b"2"
    assert int(redis_client.hget(K.host(DOWN), "down") or 0) > 0
    assert request.meta.get(meta.HOST_DOWN) is True


def test_a_requeue_while_the_verdict_lasts_loses_nothing(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """``scrapy dlq requeue`` commits the request, which the frontier puts
    straight back in the DLQ while its host is down: the requeue must not
    then delete that new entry (the URL would be neither queued nor
    dead-lettered)."""
    queue_some(redis_url)
    failing_for(redis_client, DOWN, AFTER_MS + 1000)
    assert judge(redis_url)[0] == 3

    async def requeue(client: aredis.Redis) -> int:
        return await DeadLetters(client, "web").requeue(reason="host_down")

    assert run_redis(redis_url, requeue) == 0
    assert redis_client.hlen(K.dlq) == 3
    assert redis_client.hget(K.dlq_reasons, "host_down") == b"3"
    assert not redis_client.exists(K.queue(DOWN))


def test_dead_letter_scripts_write_only_the_keys_they_are_given(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The sweep and the commit list their dead letters in the unrecorded
    LIST passed in KEYS, not in one they derive from the dlq's name."""
    elsewhere = K.tagged + "elsewhere"
    queue_some(redis_url)
    failing_for(redis_client, DOWN, AFTER_MS + 1000)

    async def body(client: aredis.Redis) -> None:
        dlq = DeadLetters(client, "web")
        dlq.parts[0].dlq_unrecorded = elsewhere
        assert (await dlq.host_down(DOWN, AFTER_MS, 3_600_000, "refused"))[0] == 3
        frontier = Frontier(client, "web")
        frontier.keys.dlq_unrecorded = elsewhere
        await frontier.commit([QueuedRequest(DOWN, 0, b"http://down.test/new")])

    run_redis(redis_url, body)
    assert not redis_client.exists(K.dlq_unrecorded)
    assert sorted(redis_client.lrange(elsewhere, 0, -1)) == [
        b"http://down.test/a",
        b"http://down.test/b",
        b"http://down.test/new",
        b"http://down.test/retry",
    ]
