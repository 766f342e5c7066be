"""Settings: one home per package, typed and ranged, checked before the crawl."""

from __future__ import annotations

import pytest
from scrapy.utils.test import get_crawler as bare_crawler

from extensions.backoff import BackoffMiddleware
from extensions.config import SettingsError
from extensions.politeness import PolitenessMiddleware
from extensions.robots import SharedRobotsTxtMiddleware


@pytest.mark.parametrize(
    "component", [SharedRobotsTxtMiddleware, PolitenessMiddleware, BackoffMiddleware]
)
def test_a_component_without_its_defaults_refuses_to_start(component: type) -> None:
    """Without the defaults, ``ROBOTS_ENABLED`` would read False: a guarantee
    switched off in silence. The component names what is missing instead."""
    crawler = bare_crawler(settings_dict={"REDIS_URL": "redis://127.0.0.1:1/0"})
    with pytest.raises(SettingsError, match=r"extensions\.defaults are not installed"):
        component.from_crawler(crawler)
