"""The add-on switches the whole system on, and user settings still win."""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING

import pytest
import redis
from scrapy.crawler import Crawler
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler, get_reactor_settings

from extensions.connection.embedded import (
    StopIfNeverOpened,
    find_or_start,
    stop_embedded,
)
from extensions.core.scheduler import RedisScheduler
from webcrawl.addon import (
    DUPEFILTER,
    ITEM_PIPELINES,
    SCHEDULER,
    SCRAPY_REMOTE_CONTROL,
    Webcrawl,
    setting_typos,
)
from webcrawl.spiders.web import WebSpider

if TYPE_CHECKING:
    from pathlib import Path


def settings(**values: object) -> Settings:
    s = Settings()
    s.setdict(values, priority="cmdline")
    return s


def test_switches_components_on(redis_url: str) -> None:
    s = settings(REDIS_URL=redis_url)
    Webcrawl().update_settings(s)
    assert s["SCHEDULER"] == SCHEDULER
    assert s["DUPEFILTER_CLASS"] == DUPEFILTER
    assert s.getbool("ROBOTSTXT_OBEY") is False
    mws = s.getdict("DOWNLOADER_MIDDLEWARES")
    assert (
        mws["extensions.downloadermiddlewares.politeness.PolitenessMiddleware"] == 950
    )
    assert mws["scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"] is None
    assert s.getdict("ITEM_PIPELINES") == ITEM_PIPELINES


class MyScheduler(RedisScheduler):
    """A project's own subclass of webcrawl's scheduler."""


def test_command_line_wins(redis_url: str) -> None:
    own = f"{__name__}.MyScheduler"
    s = settings(REDIS_URL=redis_url, SCHEDULER=own, FRONTIER_SPILL_STORE="")
    Webcrawl().update_settings(s)
    assert s["SCHEDULER"] == own
    assert s["FRONTIER_SPILL_STORE"] == ""


def test_a_scheduler_of_another_package_is_refused(redis_url: str) -> None:
    """It would run the crawl without the frontier (tests/test_scrapy_redis_settings.py
    runs the real worker)."""
    s = settings(REDIS_URL=redis_url, SCHEDULER="scrapy.core.scheduler.Scheduler")
    with pytest.raises(SystemExit) as info:
        Webcrawl().update_settings(s)
    assert info.value.code == 2


def test_starts_the_embedded_redis_without_redis_url(
    webcrawl_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    s = settings()
    try:
        Webcrawl().update_settings(s)
        url = s["REDIS_URL"]
        assert url.startswith("redis://127.0.0.1:")
        assert redis.Redis.from_url(url).ping()
        # A second worker on the machine finds the same server.
        again = settings()
        Webcrawl().update_settings(again)
        assert again["REDIS_URL"] == url
        assert (webcrawl_home / "redis" / "appendonly.aof").exists() or any(
            (webcrawl_home / "redis").glob("appendonly*")
        )
    finally:
        assert stop_embedded(webcrawl_home)


def project_crawler(redis_url: str, **cmdline: object) -> Crawler:
    s = Settings()
    s.setmodule("webcrawl.settings", priority="project")
    s.setdict({"REDIS_URL": redis_url, **cmdline}, priority="cmdline")
    s.setdict(get_reactor_settings(), priority="cmdline")  # as get_crawler does
    crawler = Crawler(WebSpider, s)
    crawler._apply_settings()
    return crawler


def test_project_settings_leave_no_remote_code_endpoint_on(redis_url: str) -> None:
    """Scrapy 2.19's RemoteControl (an HTTP endpoint that runs Python) and the
    telnet console are off in a worker built from the project settings; the
    RemoteControl class is not even loaded (its module imports aiohttp)."""
    crawler = project_crawler(redis_url)
    enabled = {type(ext).__name__ for ext in crawler.extensions.middlewares}
    assert "CoreStats" in enabled  # the extension list is the real one
    assert "RemoteControl" not in enabled
    assert "TelnetConsole" not in enabled
    extensions = crawler.settings.getwithbase("EXTENSIONS")
    assert extensions[SCRAPY_REMOTE_CONTROL] is None


def test_remote_control_switched_on_by_its_setting_is_left_to_scrapy(
    redis_url: str,
) -> None:
    crawler = project_crawler(redis_url, REMOTE_CONTROL_ENABLED=True)
    extensions = crawler.settings.getwithbase("EXTENSIONS")
    assert extensions[SCRAPY_REMOTE_CONTROL] == 0  # Scrapy's own order


def test_embedded_redis_is_stopped_only_when_the_crawl_never_opened(
    webcrawl_home: Path,
) -> None:
    url, started = find_or_start(webcrawl_home)
    assert started
    try:
        opened = StopIfNeverOpened(get_crawler(), webcrawl_home)
        atexit.unregister(opened.stop_unless_opened)  # called here instead
        opened.spider_opened()
        opened.stop_unless_opened()
        # A crawl that ran keeps its Redis: the frontier survives restarts.
        assert redis.Redis.from_url(url).ping()
        failed = StopIfNeverOpened(get_crawler(), webcrawl_home)
        atexit.unregister(failed.stop_unless_opened)
        failed.stop_unless_opened()
        with pytest.raises(redis.ConnectionError):
            redis.Redis.from_url(url).ping()
    finally:
        stop_embedded(webcrawl_home)


def test_only_command_line_names_close_to_a_known_one_are_typos() -> None:
    """Known: Scrapy's defaults, webcrawl's three defaults modules, and any
    name the project (or a spider, or the add-on) sets below the command
    line, even if the command line overrides it."""
    s = Settings()
    s.setdict({"MY_PROJECT_OPTION": 1, "MY_OVERRIDDEN": 1}, priority="project")
    s.setdict(
        {
            "DOWNLOAD_DELAY": 2,  # Scrapy's
            "FRONTIER_BATCH_SIZE": 8,  # extensions.settings.defaults
            "PIPELINE_BATCH_SIZE": 8,  # pipelines.defaults
            "SEED_BATCH_SIZE": 8,  # webcrawl.defaults
            "MY_OVERRIDDEN": 2,
            "MY_PROJECT_OPTIONS": 2,  # one letter from the project's own
            "CONCURRENT_REQUEST": 4,
            "SOMETHING_ELSE": 1,
        },
        priority="cmdline",
    )
    assert setting_typos(s) == {
        "MY_PROJECT_OPTIONS": "MY_PROJECT_OPTION",
        "CONCURRENT_REQUEST": "CONCURRENT_REQUESTS",
    }
