"""Settings: one home per package, typed and ranged, checked before the crawl."""

from __future__ import annotations

import pytest
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler as bare_crawler

from extensions.downloadermiddlewares.backoff import BackoffMiddleware
from extensions.downloadermiddlewares.politeness import PolitenessMiddleware
from extensions.downloadermiddlewares.robotstxt import SharedRobotsTxtMiddleware
from extensions.settings.config import SettingsError, check, problems
from webcrawl.addon import DEFAULTS, SCRAPY_ROBOTS, Webcrawl, install_defaults


@pytest.mark.parametrize(
    "component", [SharedRobotsTxtMiddleware, PolitenessMiddleware, BackoffMiddleware]
)
def test_a_component_without_its_defaults_refuses_to_start(component: type) -> None:
    """Without the defaults, ``ROBOTS_ENABLED`` would read False: a guarantee
    switched off in silence. The component names what is missing instead."""
    crawler = bare_crawler(settings_dict={"REDIS_URL": "redis://127.0.0.1:1/0"})
    missing = r"extensions\.settings\.defaults are not installed"
    with pytest.raises(SettingsError, match=missing):
        component.from_crawler(crawler)


def test_every_default_is_within_its_own_range() -> None:
    settings = Settings()
    install_defaults(settings)
    for module in DEFAULTS:
        assert problems(settings, module) == []


@pytest.mark.parametrize(
    ("values", "sentence"),
    [
        ({"POLITENESS_KEY": "bogus"}, "POLITENESS_KEY='bogus' is not allowed"),
        ({"PIPELINE_BATCH_SIZE": 0}, "PIPELINE_BATCH_SIZE=0 is not allowed"),
        ({"DOWNLOAD_DELAY": "-0.5"}, "DOWNLOAD_DELAY=-0.5 is not allowed"),
        (
            {"BACKOFF_JITTER": 1},
            "BACKOFF_JITTER=1 is not allowed: use a number >= 0 and < 1",
        ),
        (
            {"BACKOFF_HTTP_CODES": "429,99"},
            "BACKOFF_HTTP_CODES=429,99 is not allowed",
        ),
        ({"SEED_BATCH_SIZE": "1.5"}, "SEED_BATCH_SIZE=1.5 is not an integer"),
        ({"ROBOTS_ENABLED": "maybe"}, "ROBOTS_ENABLED=maybe is not True or False"),
        ({"DEPTH_LIMIT": -1}, "DEPTH_LIMIT=-1 is not allowed"),
    ],
)
def test_a_value_outside_its_range_is_refused_in_one_sentence(
    values: dict[str, object], sentence: str
) -> None:
    settings = Settings()
    install_defaults(settings)
    settings.setdict(values, priority="cmdline")
    with pytest.raises(SettingsError) as info:
        check(settings, *DEFAULTS)
    assert str(info.value).startswith(sentence)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "values",
    [
        {"DUPEFILTER_CLASS": "builtins.object"},
        {"FRONTIER_LEASE_TIMEOUT": 10, "FRONTIER_HEARTBEAT_INTERVAL": 10},
    ],
)
def test_a_guarantee_goes_off_only_by_its_own_flag(
    values: dict[str, object], redis_url: str
) -> None:
    settings = Settings()
    settings.setdict({"REDIS_URL": redis_url, **values}, priority="cmdline")
    with pytest.raises(SystemExit):
        Webcrawl().update_settings(settings)


def test_robots_enabled_false_hands_robots_back_to_scrapy(redis_url: str) -> None:
    settings = Settings()
    settings.setdict(
        {"REDIS_URL": redis_url, "ROBOTSTXT_OBEY": True, "ROBOTS_ENABLED": False},
        priority="cmdline",
    )
    Webcrawl().update_settings(settings)
    assert SCRAPY_ROBOTS not in settings.getdict("DOWNLOADER_MIDDLEWARES")
