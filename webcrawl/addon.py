"""The webcrawl add-on: one entry in ``ADDONS`` switches the whole system on.

It sets the Redis scheduler, the Bloom dupefilter, the robots, back-off and
per-host lock downloader middlewares, the batching storage pipeline and the
fleet statistics extension, and
turns off what they replace (Scrapy's per-process robots middleware). Values
a user sets at a higher priority (``-s``, scrapyd ``setting=``, a spider's
``custom_settings``) still win.

Settings read: ``REDIS_URL`` and ``WEBCRAWL_HOME``: when no Redis is
configured, the add-on starts (or finds) the embedded one here, before the
crawl starts, so no component ever starts a process on the reactor thread.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from extensions.embedded_redis import ensure_embedded
from extensions.politeness import DOWNLOADER_MIDDLEWARES
from webcrawl import defaults

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

SCHEDULER = "extensions.scheduler.RedisScheduler"
DUPEFILTER = "extensions.dupefilter.BloomDupeFilter"
ITEM_PIPELINES = {"pipelines.storage.StoragePipeline": 500}
EXTENSIONS = {"extensions.fleetstats.FleetStats": 500}


class Webcrawl:
    """Scrapy add-on (``ADDONS = {"webcrawl.addon.Webcrawl": 0}``)."""

    def update_settings(self, settings: BaseSettings) -> None:
        settings.set("SCHEDULER", SCHEDULER, "addon")
        settings.set("DUPEFILTER_CLASS", DUPEFILTER, "addon")
        # Our robots middleware shares one robots.txt fetch per host across
        # the fleet and replaces Scrapy's per-process one.
        settings.set("ROBOTSTXT_OBEY", False, "addon")
        settings["DOWNLOADER_MIDDLEWARES"].update(DOWNLOADER_MIDDLEWARES)
        settings["ITEM_PIPELINES"].update(ITEM_PIPELINES)
        settings["EXTENSIONS"].update(EXTENSIONS)
        if not settings.get("REDIS_URL") and not os.environ.get("REDIS_URL"):
            home = (
                settings.get("WEBCRAWL_HOME")
                or os.environ.get("WEBCRAWL_HOME")
                or defaults.WEBCRAWL_HOME
            )
            settings.set("REDIS_URL", ensure_embedded(home), "addon")
