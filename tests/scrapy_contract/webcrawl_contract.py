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
* makes the tests that build Scrapy's ``Scheduler``, ``RobotsTxtMiddleware``
  or ``RetryMiddleware`` by name build webcrawl's replacements instead
  (:data:`REPLACED`);
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

from extensions.connection.embedded import RedisProcess
from extensions.core.scheduler import RedisScheduler
from extensions.downloadermiddlewares.failurepolicy import FailurePolicyMiddleware
from extensions.downloadermiddlewares.robotstxt import SharedRobotsTxtMiddleware
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

# Scrapy's classes that webcrawl's replace: their test files test ours.
REPLACED = {
    "Scheduler": RedisScheduler,
    "RobotsTxtMiddleware": SharedRobotsTxtMiddleware,
    "RetryMiddleware": FailurePolicyMiddleware,
}

_SYNC = (
    "calls next_request() right after enqueue_request(), with no turn of the "
    "event loop: a distributed scheduler hands out only what it leased from "
    "Redis, a round trip later"
)
_REOPENED = (
    "calls next_request() (or len()) right after the scheduler reopened: "
    "what the crawl holds in Redis is pending at once, but leased in the "
    "background, a round trip later"
)
_MOCKED_ROBOTS = (
    "drives Scrapy's per-process middleware on a MagicMock crawler (bare "
    "settings, no Redis, a mocked engine.download_async); the fleet-wide "
    "middleware that replaces it is tested on real servers by tests/test_robots*.py"
)
_DNS_ONCE = (
    "the failure policy retries a name that does not resolve once, within "
    "its time budget: RETRY_TIMES and max_retry_times bound a class's "
    "attempts, they do not raise them past the policy's"
)
# Scrapy test id (path::[class::]name[params]) -> why it cannot apply to a
# distributed scheduler. The README's "Your own spiders" lists the same.
INAPPLICABLE: dict[str, str] = {
    "tests/test_scheduler.py::TestSchedulerInMemory::test_dequeue": _SYNC,
    "tests/test_scheduler.py::TestSchedulerInMemory::test_dequeue_priorities": _SYNC,
    "tests/test_scheduler.py::TestSchedulerWithDownloaderAwareInMemory::test_dequeue": _SYNC,  # noqa: E501
    "tests/test_scheduler.py::TestSchedulerWithDownloaderAwareInMemory::"
    "test_dequeue_priorities": _SYNC,
    "tests/test_scheduler.py::TestSchedulerWithDownloaderAwareInMemory::test_logic": _SYNC,  # noqa: E501
    **{
        f"tests/test_scheduler.py::{cls}::{t}": _REOPENED
        for cls in ("TestSchedulerOnDisk", "TestSchedulerWithDownloaderAwareOnDisk")
        for t in ("test_length", "test_dequeue", "test_dequeue_priorities")
    },
    "tests/test_scheduler.py::TestSchedulerWithDownloaderAwareOnDisk::test_logic": (
        "fairness across download_slot names: the frontier queues and spaces "
        "requests per host, its politeness unit (the six requests share one host)"
    ),
    "tests/test_scheduler.py::TestMigration::test_migration": (
        "a JOBDIR queue written with one SCHEDULER_PRIORITY_QUEUE, read with "
        "another: the frontier keeps no JOBDIR queue, uses no priority queue class"
    ),
    "tests/test_scheduler.py::TestIncompatibility::test_incompatibility": (
        "SCHEDULER_PRIORITY_QUEUE with CONCURRENT_REQUESTS_PER_IP: a setting of "
        "a priority queue class the frontier does not use"
    ),
    "tests/test_scheduler.py::test_scheduler_without_crawler": (
        "a scheduler without a crawler: the Redis scheduler reads REDIS_URL "
        "and the frontier's settings from the crawler"
    ),
    "tests/test_dupefilters.py::TestRFPDupeFilter::test_df_direct_scheduler": (
        "a DUPEFILTER_CLASS that is no BaseDupeFilter (no request_seen()) is "
        "refused at start, in one line"
    ),
    "tests/test_dupefilters.py::TestRFPDupeFilter::test_seenreq_truncated": (
        "truncates JOBDIR/requests.seen: the Bloom dupefilter's seen set is in Redis"
    ),
    "tests/test_dupefilters.py::TestRFPDupeFilter::test_log_debug[None]": (
        "the default (Bloom) dupefilter logs Scrapy's lines under its own "
        "logger, extensions.dupefilters"
    ),
    "tests/test_dupefilters.py::TestRFPDupeFilter::test_fingerprints_deprecation": (
        "RFPDupeFilter.fingerprints: the in-memory set the Bloom dupefilter "
        "does not keep"
    ),
    "tests/test_crawl.py::TestCrawl::test_retry_dns_error": _DNS_ONCE,
    "tests/test_engine.py::TestMisuse::test_invalid_scheduler_class": (
        "a SCHEDULER of another package set above the add-on is refused at "
        "start in one line, exit 2 (a left-over scrapy-redis setting would "
        "otherwise replace the fleet's scheduler in silence: issue 24)"
    ),
    "tests/test_engine.py::TestSpiderIdle::test_dont_close_spider": (
        "a fleet worker waits MAX_IDLE_TIME_BEFORE_CLOSE with nothing to do "
        "before it closes (other workers may hand it work), asking spider_idle "
        "again meanwhile: the handler runs more than twice"
    ),
    **{
        f"tests/test_downloadermiddleware_robotstxt.py::TestRobotsTxtMiddleware::{t}": (
            _MOCKED_ROBOTS
        )
        for t in (
            "test_robotstxt_settings",
            "test_robotstxt",
            "test_robotstxt_emits_robots_parsed_signal",
            "test_robotstxt_multiple_reqs",
            "test_robotstxt_multiple_reqs_asyncio",
            "test_robotstxt_ready_parser",
            "test_robotstxt_meta",
            "test_robotstxt_garbage",
            "test_robotstxt_empty_response",
            "test_robotstxt_error",
            "test_robotstxt_immediate_error",
            "test_ignore_robotstxt_request",
            "test_robotstxt_user_agent_setting",
            "test_robotstxt_local_file",
        )
    },
    "tests/test_downloadermiddleware_retry.py::TestRetry::test_give_up_log_level_setting": (  # noqa: E501
        "RETRY_GIVE_UP_LOG_LEVEL: the failure policy logs a give-up at INFO "
        "(its dead letter is the record)"
    ),
    "tests/test_downloadermiddleware_retry.py::TestRetry::test_give_up_log_level_meta": (  # noqa: E501
        "the give_up_log_level meta key: the failure policy logs a give-up at "
        "INFO (its dead letter is the record)"
    ),
    "tests/test_downloadermiddleware_retry.py::TestRetry::test_twistederrors": _DNS_ONCE,  # noqa: E501
    "tests/test_downloadermiddleware_retry.py::TestMaxRetryTimes::test_without_metakey": (  # noqa: E501
        _DNS_ONCE
    ),
    "tests/test_downloadermiddleware_retry.py::TestMaxRetryTimes::"
    "test_with_metakey_greater": _DNS_ONCE,
    "tests/test_downloadermiddleware_retry.py::TestMaxRetryTimes::"
    "test_with_metakey_lesser": _DNS_ONCE,
}

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        for name, ours in REPLACED.items():
            if module is not None and getattr(module, name, None) is not None:
                setattr(module, name, ours)
        reason = INAPPLICABLE.get(item.nodeid) or INAPPLICABLE.get(
            item.nodeid.split("[", 1)[0]
        )
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"inapplicable: {reason}"))
