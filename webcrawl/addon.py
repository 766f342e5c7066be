"""The webcrawl add-on: one entry in ``ADDONS`` switches the whole system on.

It installs the defaults of every package (:mod:`extensions.settings.defaults`,
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

It enables the Prometheus metrics extension when ``METRICS_PORT`` > 0, the
continuous-crawl extension (:mod:`extensions.extensions.recrawl`) when
``RECRAWL_ENABLED``, and the fleet-wide AutoThrottle
(:mod:`extensions.extensions.throttle`) in place of Scrapy's per-process one
when ``AUTOTHROTTLE_ENABLED``.

scrapy-redis's settings (:mod:`webcrawl.scrapyredis`): a ``SCHEDULER`` or
``DUPEFILTER_CLASS`` of another package set above the add-on's priority, or
scrapy-redis's ``STATS_CLASS``, stops the worker with one line saying what
to remove (exit 2); a scrapy-redis setting webcrawl ignores is named in one
warning each, with what replaces it.

A setting given on the command line (``-s``, scrapyd's ``setting=``) that no
one knows and whose name is close to a known one is named in one warning
(``did you mean DOWNLOAD_DELAY?``), or stops the worker under
``SETTINGS_STRICT`` (:func:`check_typos`).

Settings read: ``METRICS_PORT``, ``RECRAWL_ENABLED``, ``AUTOTHROTTLE_ENABLED``,
``SETTINGS_STRICT``, ``FRONTIER_PARTITIONS`` (on a Redis Cluster, see
:func:`cluster_partitions`);
``REDIS_URL`` and
``WEBCRAWL_HOME`` (also from the environment, see
:func:`extensions.settings.config.setting_or_env`): when no Redis is configured, the
add-on starts (or finds) the embedded one here, before the crawl starts,
so no component ever starts a process on the reactor thread. An embedded
Redis this add-on started is stopped again if the crawl fails before the
spider opens (:class:`~extensions.connection.embedded.StopIfNeverOpened`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from importlib import import_module
from typing import TYPE_CHECKING, NoReturn

from scrapy.settings import SETTINGS_PRIORITIES, default_settings
from scrapy.utils.misc import load_object

import extensions.settings.defaults
import pipelines.defaults
from extensions.connection import (
    TRANSIENT_REDIS_ERRORS,
    RedisUnavailable,
    check_redis,
    resolve_redis_url,
    sync_client,
)
from extensions.connection.embedded import (
    StopIfNeverOpened,
    embedded_unless_configured,
    webcrawl_home,
)
from extensions.core.frontier.frontier import first_partitions
from extensions.core.scheduler import dupefilter_problem
from extensions.core.seeds import meta_key_problems
from extensions.downloadermiddlewares import (
    DOWNLOADER_MIDDLEWARES,
)
from extensions.settings import config
from extensions.spidermiddlewares import SPIDER_MIDDLEWARES
from pipelines.stores import store_class
from webcrawl import defaults, scrapyredis

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

SCHEDULER = "extensions.core.scheduler.RedisScheduler"
DUPEFILTER = "extensions.dupefilters.BloomDupeFilter"
ITEM_PIPELINES = {"pipelines.storage.StoragePipeline": 500}
EXTENSIONS = {
    "extensions.extensions.fleetstats.FleetStats": 500,
    # A scrapy-redis spider's own seed reading off (it does nothing for others).
    "extensions.extensions.redismixin.RedisMixinSeeds": 500,
}
SCRAPY_ROBOTS = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
METRICS_EXTENSION = {"extensions.extensions.metrics.PrometheusMetrics": 500}
RECRAWL_EXTENSION = {"extensions.extensions.recrawl.Recrawler": 500}
# AutoThrottle fleet-wide, in Scrapy's own extension's place (which would
# throttle each worker apart: N workers, N times the rate).
SCRAPY_THROTTLE = "scrapy.extensions.throttle.AutoThrottle"
# Scrapy 2.19's RemoteControl imports aiohttp (~0.1 s of CPU) before it reads
# REMOTE_CONTROL_ENABLED: off, it is not loaded at all, and every worker and
# every `scrapy crawl` starts that much sooner.
SCRAPY_REMOTE_CONTROL = "scrapy.extensions.remote_control.RemoteControl"
THROTTLE_EXTENSION = {"extensions.extensions.throttle.FleetAutoThrottle": 0}
# Requests past the frontier's cap wait in the page store (the frontier
# spill, extensions.core.frontier.spill).
SPILL_STORE = "pipelines.stores.spill.PageStoreSpill"
# Every package's defaults module, installed and checked in this order.
DEFAULTS = (extensions.settings.defaults, pipelines.defaults, defaults)


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
    # A seed that could set webcrawl's own state (a lease, a failure record).
    found += meta_key_problems(settings.getlist("SEED_META_KEYS"))
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


def known_settings(settings: BaseSettings) -> set[str]:
    """Setting names a worker knows: Scrapy's defaults, every package's
    defaults module, the project's settings module (``SCRAPY_SETTINGS_MODULE``)
    and whatever is set below the command line (the project, a spider's
    ``custom_settings``, the add-on)."""
    known = {name for name in dir(default_settings) if name.isupper()}
    known |= {spec.name for module in DEFAULTS for spec in config.specs(module)}
    known |= scrapyredis.known()
    project = os.environ.get("SCRAPY_SETTINGS_MODULE")
    if project:
        with contextlib.suppress(ImportError):
            known |= {n for n in dir(import_module(project)) if n.isupper()}
    cmdline = SETTINGS_PRIORITIES["cmdline"]
    known |= {n for n in settings if (settings.getpriority(n) or 0) < cmdline}
    return known


def setting_typos(settings: BaseSettings) -> dict[str, str]:
    """The names given on the command line (``-s``; scrapyd's ``setting=``
    is passed as ``-s``) that no one knows and that are close to a known
    name, each with that name (:func:`extensions.settings.config.misspelled`)."""
    cmdline = SETTINGS_PRIORITIES["cmdline"]
    given = [n for n in settings if settings.getpriority(n) == cmdline]
    return config.misspelled(given, known_settings(settings))


def check_typos(settings: BaseSettings) -> None:
    """Warn in one line about :func:`setting_typos`; refuse to start with
    that line instead under ``SETTINGS_STRICT``."""
    typos = setting_typos(settings)
    if not typos:
        return
    line = "unknown settings, ignored: " + ", ".join(
        f"{name} (did you mean {known}?)" for name, known in sorted(typos.items())
    )
    if settings.getbool("SETTINGS_STRICT"):
        refuse(config.SettingsError(line + " (SETTINGS_STRICT)"))
    logger.warning("%s%s", line[0].upper(), line[1:])


def cluster_partitions(settings: BaseSettings, crawl: str) -> None:
    """On a Redis Cluster, a ``FRONTIER_PARTITIONS`` left at its default
    becomes the crawl's recorded count, else one per master
    (:func:`extensions.core.frontier.frontier.first_partitions`), at ``addon`` priority:
    with one partition the frontier of a crawl sits on one master. Every
    component reads the setting after this, so all agree.
    """
    priority = settings.getpriority("FRONTIER_PARTITIONS")
    if (priority or 0) > SETTINGS_PRIORITIES["default"]:
        return  # set by the user: it wins (and the frontier's pin checks it)
    client = sync_client(settings)
    try:
        partitions = first_partitions(client, crawl)
    except TRANSIENT_REDIS_ERRORS as exc:
        raise RedisUnavailable(
            f"Redis Cluster did not answer the partition count of crawl "
            f"{crawl!r}: {type(exc).__name__}"
        ) from None
    finally:
        client.close()
    settings.set("FRONTIER_PARTITIONS", partitions, "addon")
    logger.info(
        "Redis Cluster: FRONTIER_PARTITIONS=%s for crawl %r (its record, else "
        "one partition per master; set it to choose)",
        partitions,
        crawl,
    )


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
        foreign = scrapyredis.refusals(settings, SCHEDULER, DUPEFILTER)
        if foreign:
            refuse(config.SettingsError("; ".join(foreign)))
        for line in scrapyredis.warnings(settings):
            logger.warning("%s", line)
        check_typos(settings)
        try:
            store_class(settings)  # a class it cannot load: one line, not 45
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
        # of Scrapy's per-process one (the tables name what each replaces).
        settings["DOWNLOADER_MIDDLEWARES"].update(DOWNLOADER_MIDDLEWARES)
        settings["SPIDER_MIDDLEWARES"].update(SPIDER_MIDDLEWARES)
        if not settings.getbool("ROBOTS_ENABLED"):
            # Switched off explicitly: Scrapy's own obeys ROBOTSTXT_OBEY again.
            settings["DOWNLOADER_MIDDLEWARES"].pop(SCRAPY_ROBOTS, None)
        settings["ITEM_PIPELINES"].update(ITEM_PIPELINES)
        settings["EXTENSIONS"].update(EXTENSIONS)
        if settings.getint("METRICS_PORT") > 0:
            settings["EXTENSIONS"].update(METRICS_EXTENSION)
        if settings.getbool("RECRAWL_ENABLED"):
            settings["EXTENSIONS"].update(RECRAWL_EXTENSION)
        settings["EXTENSIONS"][SCRAPY_THROTTLE] = None
        if not settings.getbool("REMOTE_CONTROL_ENABLED"):
            settings["EXTENSIONS"][SCRAPY_REMOTE_CONTROL] = None
        if settings.getbool("AUTOTHROTTLE_ENABLED"):
            settings["EXTENSIONS"].update(THROTTLE_EXTENSION)
        try:
            started = embedded_unless_configured(settings, "addon")
            if started and self.crawler is not None:
                StopIfNeverOpened(self.crawler, webcrawl_home(settings))
            # One ping with short timeouts: a wrong password, a closed port or
            # a server that never answers stops the worker in seconds.
            if check_redis(resolve_redis_url(settings)):
                cluster_partitions(settings, self._crawl_name())
        except (config.SettingsError, RedisUnavailable) as exc:
            refuse(exc)

    def _crawl_name(self) -> str:
        """The crawl's key prefix: its spider's name (the scheduler's)."""
        spidercls = getattr(self.crawler, "spidercls", None)
        return str(getattr(spidercls, "name", None) or "web")
