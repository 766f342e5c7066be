"""A pytest plugin that runs Scrapy's own tests with the webcrawl add-on.

Loaded by ``tests/test_scrapy_contract.py`` into a pytest run of test files
of Scrapy's source distribution (``-p webcrawl_contract``, this directory
on ``PYTHONPATH``). It changes nothing in Scrapy's tests; it:

* starts one real ``redis-server`` for the session and flushes it before
  every test (its URL is ``REDIS_URL`` for every crawler);
* puts the webcrawl add-on (``webcrawl.addon.Webcrawl``) into every
  ``Crawler`` Scrapy's tests build, below their own settings, with the
  settings a test run needs: loopback allowed (the mock server), a
  private ``WEBCRAWL_HOME``, state kept for the next run only with a
  ``JOBDIR`` (``SCHEDULER_PERSIST``, as Scrapy keeps it only there), a
  short ``MAX_IDLE_TIME_BEFORE_CLOSE`` (a worker otherwise runs as a
  service), a fast heartbeat, and retry and back-off delays scaled down
  (the failure policy still decides them);
* makes the tests that build Scrapy's ``Scheduler`` by name build the
  webcrawl scheduler instead (``test_scheduler.py``, ``test_dupefilters.py``);
* skips the tests listed in :data:`INAPPLICABLE` with their reason (the
  README's "Your own spiders" lists them).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy.crawler import Crawler
from scrapy.settings import Settings

from extensions.embedded_redis import RedisProcess
from extensions.scheduler import RedisScheduler
from webcrawl.addon import install_defaults

ADDON = "webcrawl.addon.Webcrawl"
# Below every test's own settings (Scrapy's tests set theirs at "project").
SETTINGS: dict[str, Any] = {
    "ALLOW_PRIVATE_ADDRESSES": True,
    # A dupefilter built with no spider (a test's own) needs a crawl name.
    "BLOOM_KEY_PREFIX": "contract",
    "MAX_IDLE_TIME_BEFORE_CLOSE": 0.2,
    "SEED_POLL_INTERVAL": 0.1,
    "FRONTIER_HEARTBEAT_INTERVAL": 0.5,
    "RETRY_DELAY_SCALE": 0.001,
    "BACKOFF_INITIAL": 0.01,
    "STATS_FOLD_INTERVAL": 60,
    "LOGSTATS_INTERVAL": 0,
}

# Scrapy test id (path::[class::]name, without parameters) -> why it cannot
# apply to a distributed scheduler. Kept in step with the README.
INAPPLICABLE: dict[str, str] = {}

_REDIS: list[RedisProcess] = []  # the session's redis-server


def pytest_configure(config: pytest.Config) -> None:
    home = Path(tempfile.mkdtemp(prefix="webcrawl-contract-"))
    server = RedisProcess(home / "redis")
    server.start()
    _REDIS.append(server)
    os.environ["REDIS_URL"] = server.url
    os.environ["WEBCRAWL_HOME"] = str(home / "home")
    _patch_crawler()


def pytest_unconfigure(config: pytest.Config) -> None:
    for server in _REDIS:
        server.stop()


@pytest.fixture(autouse=True)
def _fresh_redis() -> None:
    client = redis.Redis.from_url(_REDIS[0].url)
    client.flushall()
    client.close()


def _patch_crawler() -> None:
    original = Crawler.__init__

    def __init__(
        self: Crawler, spidercls: Any, settings: Any = None, *a: Any, **kw: Any
    ) -> None:
        if isinstance(settings, dict) or settings is None:
            settings = Settings(settings)
        # What the add-on installs, also for crawlers whose settings are
        # never applied (a test that builds a component by hand).
        install_defaults(settings)
        for name, value in SETTINGS.items():
            settings.set(name, value, priority="addon")
        # Scrapy keeps a crawl's state for the next run only with a JOBDIR;
        # a fleet keeps it in Redis (SCHEDULER_PERSIST): the same choice.
        settings.set("SCHEDULER_PERSIST", bool(settings.get("JOBDIR")), "addon")
        addons = settings.getdict("ADDONS")
        addons.setdefault(ADDON, 0)
        settings.set(
            "ADDONS", addons, priority=settings.getpriority("ADDONS") or "project"
        )
        original(self, spidercls, settings, *a, **kw)

    Crawler.__init__ = __init__  # type: ignore[method-assign]


def _test_id(item: pytest.Item) -> str:
    return item.nodeid.split("[", 1)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and getattr(module, "Scheduler", None) is not None:
            module.Scheduler = RedisScheduler
        reason = INAPPLICABLE.get(_test_id(item))
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"inapplicable: {reason}"))
