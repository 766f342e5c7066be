"""A worker that cannot start says why in one line, within seconds, and exits 2.

Against real processes: a redis-server that asks for a password, a closed
port, a socket that accepts connections and never answers, and ``scrapy
crawl web`` itself with settings or arguments outside their range.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
import redis.asyncio

from extensions.connection import (
    RedisUnavailable,
    async_client,
    check_redis,
    retry_redis,
)
from extensions.connection.embedded import RedisProcess, free_port
from extensions.settings.config import SettingsError
from tests.support.tools import run_scrapy
from tests.utils import get_crawler

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "s3cr3t-pw"


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL (without password) of a real redis-server with ``requirepass``."""
    server = RedisProcess(tmp_path_factory.mktemp("locked"), appendonly=False)
    server.start()
    redis.Redis.from_url(server.url).config_set("requirepass", PASSWORD)
    yield f"127.0.0.1:{server.port}/0"
    server.stop()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_wrong_password_is_named_and_masked(locked_redis: str) -> None:
    with pytest.raises(RedisUnavailable, match="refused the credentials") as info:
        check_redis(f"redis://:wrong-{PASSWORD}@{locked_redis}")
    assert PASSWORD not in str(info.value)
    assert "redis://:***@127.0.0.1:" in str(info.value)


def test_missing_password_is_named(locked_redis: str) -> None:
    with pytest.raises(RedisUnavailable, match="requires a password"):
        check_redis(f"redis://{locked_redis}")


def test_right_password_passes(locked_redis: str) -> None:
    check_redis(f"redis://:{PASSWORD}@{locked_redis}")
    check_redis(f"redis://{locked_redis}?password={PASSWORD}")


def test_closed_port_is_unreachable() -> None:
    with pytest.raises(RedisUnavailable, match=r"unreachable.*refused"):
        check_redis(f"redis://127.0.0.1:{free_port()}/0")


def test_a_server_that_never_answers_fails_within_the_timeout(silent_port: int) -> None:
    with pytest.raises(RedisUnavailable, match=r"no answer within 0\.5s"):
        check_redis(f"redis://127.0.0.1:{silent_port}/0", timeout=0.5)


def scrapy_crawl(
    tmp_path: Path, redis_url: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``scrapy crawl web ARGS`` in the project; it must end within 30 s
    (a worker that hung on a silent Redis took about 2 minutes)."""
    environ = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WEBCRAWL_HOME": str(tmp_path),
        "REDIS_URL": redis_url,
        **(env or {}),
    }
    return run_scrapy(["crawl", "web", *args], environ, timeout=30)


def assert_one_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if "CRITICAL" in line]
    assert len(lines) == 1, output
    for word in words:
        assert word in lines[0], lines[0]
    assert PASSWORD not in output
    return lines[0]


@pytest.mark.slow
def test_worker_with_a_wrong_password_exits_in_one_line(
    tmp_path: Path, locked_redis: str
) -> None:
    result = scrapy_crawl(tmp_path, f"redis://:wrong-{PASSWORD}@{locked_redis}")
    assert_one_line(result, "refused the credentials", "redis://:***@")


@pytest.mark.slow
def test_worker_with_a_password_in_the_query_keeps_it_out_of_the_log(
    tmp_path: Path, locked_redis: str
) -> None:
    result = scrapy_crawl(tmp_path, f"redis://{locked_redis}?password=x{PASSWORD}")
    assert_one_line(result, "password=***")


@pytest.mark.slow
def test_worker_on_a_closed_port_exits_in_one_line(tmp_path: Path) -> None:
    result = scrapy_crawl(tmp_path, f"redis://127.0.0.1:{free_port()}/0")
    assert_one_line(result, "unreachable")


@pytest.mark.slow
def test_worker_on_a_silent_redis_exits_within_seconds(
    tmp_path: Path, silent_port: int
) -> None:
    result = scrapy_crawl(tmp_path, f"redis://127.0.0.1:{silent_port}/0")
    assert_one_line(result, "no answer within 5s")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-s", "POLITENESS_KEY=bogus"], ["POLITENESS_KEY='bogus'", "'host'"]),
        (["-s", "PIPELINE_BATCH_SIZE=0"], ["PIPELINE_BATCH_SIZE=0", ">= 1"]),
        (["-s", "DOWNLOAD_DELAY=-1"], ["DOWNLOAD_DELAY=-1", ">= 0"]),
        (["-s", "BACKOFF_INITIAL=-5"], ["BACKOFF_INITIAL=-5", "> 0"]),
        (["-s", "ROBOTS_MAX_SIZE=0"], ["ROBOTS_MAX_SIZE=0"]),
        (["-s", "FRONTIER_BATCH_SIZE=ten"], ["FRONTIER_BATCH_SIZE=ten", "integer"]),
        (["-a", "max_depth=0"], ["max_depth=0", ">= 1"]),
        (
            ["-s", "DUPEFILTER_CLASS=builtins.object"],
            ["DUPEFILTER_CLASS='builtins.object'", "BaseDupeFilter"],
        ),
        (
            ["-s", "FRONTIER_LEASE_TIMEOUT=5"],
            ["FRONTIER_LEASE_TIMEOUT=5", "FRONTIER_HEARTBEAT_INTERVAL"],
        ),
    ],
)
def test_a_setting_out_of_range_stops_the_worker_before_any_request(
    tmp_path: Path, redis_url: str, args: list[str], words: list[str]
) -> None:
    assert_one_line(scrapy_crawl(tmp_path, redis_url, *args), *words)


def test_retry_redis_surfaces_a_wrong_password_at_once(locked_redis: str) -> None:
    """Waiting does not fix credentials: no retry loop, the error surfaces."""
    client = redis.asyncio.Redis.from_url(f"redis://:wrong@{locked_redis}")

    async def main() -> None:
        try:
            await asyncio.wait_for(retry_redis(client.ping, "test", 0.01, 0.01), 10)
        finally:
            await client.aclose()

    with pytest.raises(redis.AuthenticationError):
        asyncio.run(main())


def test_retry_redis_surfaces_an_os_error_that_is_no_outage() -> None:
    async def broken() -> None:
        raise PermissionError("not a Redis outage")

    with pytest.raises(PermissionError):
        asyncio.run(asyncio.wait_for(retry_redis(broken, "test", 0.01, 0.01), 10))


def test_a_component_never_starts_the_embedded_redis(
    webcrawl_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without REDIS_URL a component raises instead of starting redis-server
    (a blocking subprocess on the reactor thread); only the add-on may."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    crawler = get_crawler()
    with pytest.raises(SettingsError, match="REDIS_URL is not set"):
        async_client(crawler)
    assert not (webcrawl_home / "redis").exists()


@pytest.mark.slow
def test_a_working_worker_never_logs_the_password_in_the_query(
    tmp_path: Path, locked_redis: str
) -> None:
    url = f"redis://{locked_redis}?password={PASSWORD}"
    result = scrapy_crawl(tmp_path, url, "-s", "MAX_IDLE_TIME_BEFORE_CLOSE=1")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Connecting to Redis at redis://127.0.0.1:" in output
    assert "?password=***" in output
    assert PASSWORD not in output


@pytest.mark.slow
def test_credentials_changed_mid_crawl_stop_the_worker(tmp_path: Path) -> None:
    """Redis starts refusing a running worker: the worker stops (finish
    reason ``redis_auth``, exit 2) rather than wait for an outage to end."""
    server = RedisProcess(tmp_path / "redis", appendonly=False).start()
    admin = redis.Redis.from_url(server.url)
    admin.config_set("requirepass", PASSWORD)
    admin = redis.Redis.from_url(server.url, password=PASSWORD)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WEBCRAWL_HOME": str(tmp_path),
        "REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0",
    }
    log = tmp_path / "worker.log"
    try:
        with log.open("w") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "scrapy", "crawl", "web"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            for _ in range(300):  # until the worker's first heartbeat
                if admin.zcard("web:{web}:workers") or worker.poll() is not None:
                    break
                time.sleep(0.1)
            if not admin.zcard("web:{web}:workers"):
                pytest.fail(log.read_text())
            admin.config_set("requirepass", "another-" + PASSWORD)
            admin.client_kill_filter(_type="normal", skipme=True)
            returncode = worker.wait(60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    finally:
        server.stop()
    output = log.read_text()
    assert returncode == 2, output
    assert "Redis refused this worker" in output
    assert "'finish_reason': 'redis_auth'" in output
    assert PASSWORD not in output


@pytest.mark.slow
def test_a_mistyped_setting_is_named_with_the_one_it_resembles(
    tmp_path: Path, redis_url: str
) -> None:
    """Issue 21: ``-s DOWNLOAD_DELAYY=2`` crawled at the default delay and
    ``-s MAX_IDLE_TIME_BEFORE_CLOS=5`` never closed, without a word. A name
    close to no known one (a setting of your own) is left alone."""
    result = scrapy_crawl(
        tmp_path, redis_url,
        "-s", "DOWNLOAD_DELAYY=2", "-s", "MAX_IDLE_TIME_BEFORE_CLOS=5",
        "-s", "MY_PIPELINE_OPTION=1", "-s", "MAX_IDLE_TIME_BEFORE_CLOSE=1",
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    lines = [line for line in output.splitlines() if "did you mean" in line]
    assert len(lines) == 1, output
    assert "WARNING" in lines[0]
    assert "DOWNLOAD_DELAYY (did you mean DOWNLOAD_DELAY?)" in lines[0]
    assert (
        "MAX_IDLE_TIME_BEFORE_CLOS (did you mean MAX_IDLE_TIME_BEFORE_CLOSE?)"
        in lines[0]
    )
    assert "MY_PIPELINE_OPTION" not in output


@pytest.mark.slow
def test_settings_strict_makes_a_mistyped_setting_fatal(
    tmp_path: Path, redis_url: str
) -> None:
    result = scrapy_crawl(
        tmp_path, redis_url, "-s", "DOWNLOAD_DELAYY=2", "-s", "SETTINGS_STRICT=True"
    )
    assert_one_line(result, "DOWNLOAD_DELAYY (did you mean DOWNLOAD_DELAY?)")
