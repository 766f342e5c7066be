"""The host record's Lua helpers (:data:`extensions.core.frontier.lua.LUA_RECORD`),
which
every script reading the record includes, on a real Redis."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from extensions.core.frontier import lua as hosts

if TYPE_CHECKING:
    import redis

RECORD = "web:{web}:h:http://a.test:80"
READ = "return cjson.encode(host_record(KEYS[1]))"


def lua(client: redis.Redis, body: str, *args: int) -> Any:
    return client.eval(hosts.LUA_RECORD + body, 1, RECORD, *args)


def test_the_record_holds_every_named_field(redis_client: redis.Redis) -> None:
    assert hosts.RECORD_FIELDS[1] == hosts.DELAY  # host_record reads it as r[2]
    values = {field: i + 1 for i, field in enumerate(hosts.RECORD_FIELDS)}
    redis_client.hset(RECORD, mapping=values)
    assert json.loads(lua(redis_client, READ)) == values


def test_absent_fields_read_zero_and_an_absent_delay_unset(
    redis_client: redis.Redis,
) -> None:
    assert json.loads(lua(redis_client, READ)) == {
        field: 0
        for field in hosts.RECORD_FIELDS
        if field not in (hosts.DELAY, hosts.THROTTLE)
    }


# ARGV[1] default delay, ARGV[2] now, ARGV[3] quiet period, ARGV[4] the
# AutoThrottle start delay (-1: off).
SPACING = "return spacing(host_record(KEYS[1]), tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))"  # noqa: E501


OFF = -1  # AutoThrottle off


@pytest.mark.parametrize(
    ("record", "now", "start", "expected"),
    [
        pytest.param({}, 0, OFF, 250, id="the default"),
        pytest.param({"delay": 2000}, 0, OFF, 2000, id="robots delay"),
        # The record keeps the robots.txt delay alone (#26): the larger of
        # it and the host's own delay spaces the host.
        pytest.param({"delay": 100}, 0, OFF, 250, id="a shorter robots delay"),
        pytest.param(
            {"delay": 2000, "backoff": 9000, "backoff_at": 0}, 10, OFF, 9000,
            id="back-off",
        ),
        pytest.param(
            {"delay": 2000, "backoff": 500, "backoff_at": 0}, 10, OFF, 2000,
            id="smaller",
        ),
        pytest.param(
            {"backoff": 9000, "backoff_at": 0}, 1000, OFF, 250, id="forgiven back-off"
        ),
        pytest.param({"throttle": 3000}, 0, OFF, 250, id="AutoThrottle off"),
        pytest.param({"throttle": 3000}, 0, 800, 3000, id="AutoThrottle"),
        pytest.param({}, 0, 800, 800, id="AutoThrottle, no response yet"),
        pytest.param(
            {"throttle": 300, "delay": 2000}, 0, 800, 2000, id="never below robots"
        ),
    ],
)  # fmt: skip
def test_spacing(
    redis_client: redis.Redis,
    record: dict[str, int],
    now: int,
    start: int,
    expected: int,
) -> None:
    if record:
        redis_client.hset(RECORD, mapping=record)
    assert lua(redis_client, SPACING, 250, now, 1000, start) == expected


def test_park_only_moves_later(redis_client: redis.Redis) -> None:
    park = "return park_until(KEYS[1], host_record(KEYS[1]), tonumber(ARGV[1]))"
    assert lua(redis_client, park, 5000) == 5000
    assert lua(redis_client, park, 3000) == 5000
    assert lua(redis_client, park, 7000) == 7000
    assert redis_client.hget(RECORD, hosts.PARK) == b"7000"
