"""Test helpers shared by the unit tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.utils.test import get_crawler as scrapy_get_crawler

from webcrawl.addon import WebcrawlDefaults

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler


def get_crawler(
    spidercls: type[Spider] | None = None, settings_dict: dict[str, Any] | None = None
) -> Crawler:
    """Scrapy's ``get_crawler`` with every package's defaults installed at
    ``default`` priority, as the add-on does (without the add-on's other
    work: it would start an embedded Redis when ``REDIS_URL`` is empty)."""
    settings = dict(settings_dict or {})
    settings["ADDONS"] = {WebcrawlDefaults: 0, **settings.get("ADDONS", {})}
    return scrapy_get_crawler(spidercls, settings)
