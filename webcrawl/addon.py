"""The webcrawl add-on: one entry in ``ADDONS`` switches the whole system on.

It installs the defaults of every package (:mod:`extensions.defaults`,
:mod:`pipelines.defaults`, :mod:`webcrawl.defaults`) at ``default`` priority,
checks every value against its declared type and range, sets the Redis
scheduler, the Bloom dupefilter, the robots, back-off, failure-policy,
per-host lock and SSRF guard downloader middlewares, the trap filter spider
middleware, the batching storage pipeline and the fleet statistics extension, the page
store as the frontier's spill store (``FRONTIER_SPILL_STORE``),
and turns off what they replace (Scrapy's per-process robots middleware, its
immediate ``RetryMiddleware`` and its ``UrlLengthMiddleware``). Values a user
sets at a higher priority (``-s``, scrapyd ``setting=``, a spider's
``custom_settings``) still win, and are checked like the defaults.

It enables the Prometheus metrics extension when ``METRICS_PORT`` > 0, and
the continuous-crawl extension (:mod:`extensions.recrawl`) when
``RECRAWL_ENABLED``.

Settings read: ``METRICS_PORT``, ``RECRAWL_ENABLED``; ``REDIS_URL`` and
``WEBCRAWL_HOME`` (also from the environment, see
:func:`extensions.config.setting_or_env`): when no Redis is configured, the
add-on starts (or finds) the embedded one here, before the crawl starts,
so no component ever starts a process on the reactor thread. An embedded
Redis this add-on started is stopped again if the crawl fails before the
spider opens (:class:`~extensions.embedded_redis.StopIfNeverOpened`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NoReturn

from scrapy.utils.misc import load_object

import extensions.defaults
import pipelines.defaults
from extensions import (
    addresses,
    charsets,
    config,
    leases,
    politeness,
    seedfeed,
    traps,
)
from extensions.connection import RedisUnavailable, check_redis, resolve_redis_url
from extensions.embedded_redis import (
    StopIfNeverOpened,
    embedded_unless_configured,
    webcrawl_home,
)
from extensions.scheduler import dupefilter_problem
from webcrawl import defaults

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

SCHEDULER = "extensions.scheduler.RedisScheduler"
DUPEFILTER = "extensions.dupefilter.BloomDupeFilter"
ITEM_PIPELINES = {"pipelines.storage.StoragePipeline": 500}
# The failure policy schedules retries in Redis in place of Scrapy's
# immediate RetryMiddleware (same slot: below the back-off middleware).
RETRY_MIDDLEWARES = {
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "extensions.failures.FailurePolicyMiddleware": 550,
}
EXTENSIONS = {"extensions.fleetstats.FleetStats": 500}
SCRAPY_ROBOTS = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
METRICS_EXTENSION = {"extensions.metrics.PrometheusMetrics": 500}
RECRAWL_EXTENSION = {"extensions.recrawl.Recrawler": 500}
# Requests past the frontier's cap wait in the page store (extensions.spill).
SPILL_STORE = "pipelines.stores.spill.PageStoreSpill"
# Every package's defaults module, installed and checked in this order.
DEFAULTS = (extensions.defaults, pipelines.defaults, defaults)


def install_defaults(settings: BaseSettings) -> None:
    """Put every package's defaults into ``settings`` at ``default`` priority."""
    for module in DEFAULTS:
        config.install(settings, module)


def guarantee_problems(settings: BaseSettings) -> list[str]:
    """Values each in range that together would switch a guarantee off.

    A guarantee (politeness, robots.txt, storage) goes off only through its
    own ``*_ENABLED`` flag (robots.txt also through Scrapy's own
    ``ROBOTSTXT_OBEY=False``, said in a warning line), never as a side
    effect of another setting.
    """
    found = []
    dupefilter = settings.get("DUPEFILTER_CLASS")
    if settings.get("SCHEDULER") == SCHEDULER and dupefilter:
        try:
            cls = load_object(dupefilter)
        except (ImportError, NameError, ValueError) as exc:
            found.append(f"DUPEFILTER_CLASS={dupefilter!r} cannot be loaded: {exc}")
        else:
            if problem := dupefilter_problem(cls):
                found.append(problem)
    lease = settings.getfloat("FRONTIER_LEASE_TIMEOUT")
    heartbeat = settings.getfloat("FRONTIER_HEARTBEAT_INTERVAL")
    if lease <= heartbeat:
        # Leases would expire between two renewals and their requests be
        # handed to a second worker while the first still fetches them.
        found.append(
            f"FRONTIER_LEASE_TIMEOUT={lease:g} is not allowed: use a number "
            f"> FRONTIER_HEARTBEAT_INTERVAL ({heartbeat:g})"
        )
    return found


def refuse(error: Exception) -> NoReturn:
    """Stop the worker before its first request with one line saying why.

    A worker that cannot start must exit non-zero (scrapyd and process
    supervisors see it), and a wall of tracebacks hides the one sentence
    that matters: log that sentence and exit with status 2, like a usage
    error of the ``scrapy`` command.
    """
    logger.critical("webcrawl cannot start: %s", error)
    raise SystemExit(2)


class WebcrawlDefaults:
    """Add-on that installs every package's defaults and switches nothing on.

    For a project that wires some webcrawl components itself (the bench's
    stock crawlers use only the storage pipeline) or for tests that build one
    component: the components read their settings without a fallback.
    """

    def update_settings(self, settings: BaseSettings) -> None:
        install_defaults(settings)


class Webcrawl:
    """Scrapy add-on (``ADDONS = {"webcrawl.addon.Webcrawl": 0}``)."""

    def __init__(self, crawler: Crawler | None = None) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Webcrawl:
        return cls(crawler)

    def update_settings(self, settings: BaseSettings) -> None:
        install_defaults(settings)
        try:
            config.check(settings, *DEFAULTS)
        except config.SettingsError as exc:
            refuse(exc)
        settings.set("SCHEDULER", SCHEDULER, "addon")
        settings.set("DUPEFILTER_CLASS", DUPEFILTER, "addon")
        if problems := guarantee_problems(settings):
            refuse(config.SettingsError("; ".join(problems)))
        # At "addon" priority: a FRONTIER_SPILL_STORE the project or the
        # command line sets (even empty: no spill) wins.
        settings.set("FRONTIER_SPILL_STORE", SPILL_STORE, "addon")
        # ROBOTSTXT_OBEY keeps Scrapy's meaning; our robots middleware obeys
        # it with one robots.txt fetch per host for the whole fleet, in place
        # of Scrapy's per-process one (politeness.DOWNLOADER_MIDDLEWARES).
        settings["DOWNLOADER_MIDDLEWARES"].update(politeness.DOWNLOADER_MIDDLEWARES)
        settings["DOWNLOADER_MIDDLEWARES"].update(addresses.DOWNLOADER_MIDDLEWARES)
        settings["DOWNLOADER_MIDDLEWARES"].update(RETRY_MIDDLEWARES)
        settings["DOWNLOADER_MIDDLEWARES"].update(charsets.DOWNLOADER_MIDDLEWARES)
        settings["SPIDER_MIDDLEWARES"].update(traps.SPIDER_MIDDLEWARES)
        # Seeds from <spider>:start_urls and the idle rule, for any spider.
        settings["SPIDER_MIDDLEWARES"].update(seedfeed.SPIDER_MIDDLEWARES)
        # Where a leased request's processing is seen to end (outermost).
        settings["SPIDER_MIDDLEWARES"].update(leases.SPIDER_MIDDLEWARES)
        settings["DOWNLOADER_MIDDLEWARES"].update(leases.DOWNLOADER_MIDDLEWARES)
        if not settings.getbool("ROBOTS_ENABLED"):
            # Switched off explicitly: Scrapy's own obeys ROBOTSTXT_OBEY again.
            settings["DOWNLOADER_MIDDLEWARES"].pop(SCRAPY_ROBOTS, None)
        settings["ITEM_PIPELINES"].update(ITEM_PIPELINES)
        settings["EXTENSIONS"].update(EXTENSIONS)
        if settings.getint("METRICS_PORT") > 0:
            settings["EXTENSIONS"].update(METRICS_EXTENSION)
        if settings.getbool("RECRAWL_ENABLED"):
            settings["EXTENSIONS"].update(RECRAWL_EXTENSION)
        try:
            started = embedded_unless_configured(settings, "addon")
            if started and self.crawler is not None:
                StopIfNeverOpened(self.crawler, webcrawl_home(settings))
            # One ping with short timeouts: a wrong password, a closed port or
            # a server that never answers stops the worker in seconds.
            check_redis(resolve_redis_url(settings))
        except (config.SettingsError, RedisUnavailable) as exc:
            refuse(exc)
