"""A host whose name does not resolve is given up as a whole within about
``DNS_DOWN_AFTER`` (issue 12): once its name has failed to resolve that
long (two failures at least that far apart), its queued and delayed
requests are dead-lettered as ``dns`` in one script, the failing request is
given up at once, and its new URLs go straight to the dead-letter queue as
``dns`` while the verdict lasts. Against a real redis-server."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import Request
from twisted.internet.error import DNSLookupError

from extensions import meta
from extensions.core.frontier import hostrecord as hosts
from extensions.core.frontier.frontier import Frontier, QueuedRequest
from extensions.downloadermiddlewares.backoff import BackoffMiddleware
from extensions.downloadermiddlewares.failurepolicy import FailurePolicyMiddleware
from extensions.meta import FAILURE_META
from extensions.settings.defaults import DNS_DOWN_AFTER
from extensions.utils.failures import HostUnresolvable
from tests.support.hostdown import (
    DOWN,
    K,
    failing_for,
    middleware_crawler,
    queue_some,
)
from tests.utils import run_redis

if TYPE_CHECKING:
    import redis
    import redis.asyncio as aredis

AFTER_MS = round(DNS_DOWN_AFTER * 1000)


def dlq_entries(redis_client: redis.Redis) -> dict[str, Any]:
    raw = redis_client.hgetall(K.dlq)
    return {k.decode(): json.loads(v) for k, v in raw.items()}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "error",
    [
        # A page of a host whose robots.txt fetch did not resolve (the
        # robots middleware's; that fetch began the run of failures).
        HostUnresolvable("down.test does not resolve (robots.txt fetch)"),
        # A page fetched without robots.txt (ROBOTS_OBEY off).
        DNSLookupError("down.test"),
    ],
    ids=["robots", "page"],
)
def test_an_unresolvable_host_is_given_up_whole(
    redis_url: str, redis_client: redis.Redis, error: Exception
) -> None:
    crawler = middleware_crawler(redis_url)
    backoff = BackoffMiddleware.from_crawler(crawler)
    policy = FailurePolicyMiddleware.from_crawler(crawler)
    queue_some(redis_url)  # 2 queued and 1 delayed request of DOWN

    async def fail(request: Request) -> None:
        await backoff.process_exception(request, error)

    async def fail_twice() -> tuple[Request, Request]:
        try:
            # Failing for less than DNS_DOWN_AFTER: an ordinary dns retry.
            failing_for(redis_client, DOWN, AFTER_MS - 10_000, fails=1)
            early = Request("http://down.test/early")
            await fail(early)
            # At least DNS_DOWN_AFTER since the first failure: the verdict.
            failing_for(redis_client, DOWN, AFTER_MS + 1000, fails=1)
            late = Request("http://down.test/late")
            await fail(late)
            return early, late
        finally:
            await backoff.records.client.aclose()

    early, late = asyncio.run(fail_twice())
    assert meta.HOST_DOWN not in early.meta
    assert isinstance(policy.process_exception(early, error), Request)
    assert late.meta[meta.HOST_DOWN] == "dns"
    assert policy.process_exception(late, error) is None  # given up at once
    assert late.meta[FAILURE_META]["reason"] == "dns"
    assert late.meta[FAILURE_META]["terminal"]
    stats = crawler.stats
    assert stats.get_value("backoff/dns_down") == 1
    assert stats.get_value("dlq/dns") == 3
    entries = dlq_entries(redis_client)
    assert set(entries) == {
        "http://down.test/a",
        "http://down.test/b",
        "http://down.test/retry",
    }
    assert {e["reason"] for e in entries.values()} == {"dns"}
    assert redis_client.hget(K.dlq_reasons, "dns") == b"3"
    assert not redis_client.exists(K.queue(DOWN))
    assert redis_client.hget(K.host(DOWN), "down_reason") == b"dns"

    # Its new URLs go straight to the DLQ, as dns, while the verdict lasts.
    async def commit(client: aredis.Redis) -> tuple[int, int]:
        return await Frontier(client, "web").commit(
            [QueuedRequest(DOWN, 0, b"http://down.test/new")]
        )

    assert run_redis(redis_url, commit) == (0, 0)
    new = dlq_entries(redis_client)["http://down.test/new"]
    assert new["reason"] == "dns" and "DNS_DOWN_AFTER" in new["error"]
    assert redis_client.hget(K.dlq_reasons, "dns") == b"4"

    # An answer ends the verdict and its reason.
    async def answer(client: aredis.Redis) -> None:
        await hosts.HostRecords(client, "web").succeed(DOWN)

    run_redis(redis_url, answer)
    assert redis_client.hget(K.host(DOWN), "down_reason") is None
    assert run_redis(redis_url, commit) == (1, 0)


def test_dns_down_after_zero_never_judges(
    redis_url: str, redis_client: redis.Redis
) -> None:
    crawler = middleware_crawler(redis_url, DNS_DOWN_AFTER=0)
    backoff = BackoffMiddleware.from_crawler(crawler)
    queue_some(redis_url)
    failing_for(redis_client, DOWN, 3_600_000, fails=1)
    request = Request("http://down.test/late")

    async def fail() -> None:
        try:
            await backoff.process_exception(request, DNSLookupError("down.test"))
        finally:
            await backoff.records.client.aclose()

    asyncio.run(fail())
    assert meta.HOST_DOWN not in request.meta
    assert redis_client.zcard(K.queue(DOWN)) == 2
