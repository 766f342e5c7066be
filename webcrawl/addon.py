"""The webcrawl add-on: one entry in ``ADDONS`` switches the whole system on.

It installs the defaults of every package (:mod:`extensions.defaults`,
:mod:`pipelines.defaults`, :mod:`webcrawl.defaults`) at ``default`` priority,
checks every value against its declared type and range, sets the Redis
scheduler, the Bloom dupefilter, the robots, back-off, per-host lock and SSRF
guard downloader middlewares, the trap filter spider middleware and the
batching storage pipeline, and turns off what they replace (Scrapy's
per-process robots middleware and its ``UrlLengthMiddleware``). Values a user sets at a
higher priority (``-s``, scrapyd ``setting=``, a spider's ``custom_settings``)
still win, and are checked like the defaults.

It enables the Prometheus metrics extension when ``METRICS_PORT`` > 0, and
the continuous-crawl extension (:mod:`extensions.recrawl`) when
``RECRAWL_ENABLED``.

Settings read: ``METRICS_PORT``, ``RECRAWL_ENABLED``; ``REDIS_URL`` and
``WEBCRAWL_HOME`` (also from the environment, see
:func:`extensions.config.setting_or_env`): when no Redis is configured, the
add-on starts (or finds) the embedded one here, before the crawl starts,
so no component ever starts a process on the reactor thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import extensions.defaults
import pipelines.defaults
from extensions import addresses, config, politeness, traps
from extensions.embedded_redis import ensure_embedded, webcrawl_home
from webcrawl import defaults

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

SCHEDULER = "extensions.scheduler.RedisScheduler"
DUPEFILTER = "extensions.dupefilter.BloomDupeFilter"
ITEM_PIPELINES = {"pipelines.storage.StoragePipeline": 500}
METRICS_EXTENSION = {"extensions.metrics.PrometheusMetrics": 500}
RECRAWL_EXTENSION = {"extensions.recrawl.Recrawler": 500}
# Every package's defaults module, installed and checked in this order.
DEFAULTS = (extensions.defaults, pipelines.defaults, defaults)


def install_defaults(settings: BaseSettings) -> None:
    """Put every package's defaults into ``settings`` at ``default`` priority."""
    for module in DEFAULTS:
        config.install(settings, module)


class Webcrawl:
    """Scrapy add-on (``ADDONS = {"webcrawl.addon.Webcrawl": 0}``)."""

    def update_settings(self, settings: BaseSettings) -> None:
        install_defaults(settings)
        config.check(settings, *DEFAULTS)
        settings.set("SCHEDULER", SCHEDULER, "addon")
        settings.set("DUPEFILTER_CLASS", DUPEFILTER, "addon")
        # Our robots middleware shares one robots.txt fetch per host across
        # the fleet and replaces Scrapy's per-process one.
        settings.set("ROBOTSTXT_OBEY", False, "addon")
        settings["DOWNLOADER_MIDDLEWARES"].update(politeness.DOWNLOADER_MIDDLEWARES)
        settings["DOWNLOADER_MIDDLEWARES"].update(addresses.DOWNLOADER_MIDDLEWARES)
        settings["SPIDER_MIDDLEWARES"].update(traps.SPIDER_MIDDLEWARES)
        settings["ITEM_PIPELINES"].update(ITEM_PIPELINES)
        if settings.getint("METRICS_PORT") > 0:
            settings["EXTENSIONS"].update(METRICS_EXTENSION)
        if settings.getbool("RECRAWL_ENABLED"):
            settings["EXTENSIONS"].update(RECRAWL_EXTENSION)
        if not config.setting_or_env(settings, "REDIS_URL"):
            settings.set("REDIS_URL", ensure_embedded(webcrawl_home(settings)), "addon")
