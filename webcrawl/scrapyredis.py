"""scrapy-redis's settings under webcrawl: kept, mapped, refused or replaced.

:data:`SETTINGS` is the one table of every setting scrapy-redis 0.9 reads
(its ``defaults`` module, scheduler, dupefilter, spiders, pipeline, stats
collector and connection), with what webcrawl does with it; the migration
page (``docs/migrating-from-scrapy-redis.md``) shows the same table, and
``tests/test_scrapy_redis_settings.py`` checks that they agree.

The add-on runs :func:`refusals` (a setting that would run the crawl on
scrapy-redis's components instead of webcrawl's: one line, exit 2) and
:func:`warnings` (a setting that webcrawl ignores: one line each, naming
what replaces it) before the crawl starts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.misc import load_object

from extensions.connection.params import IGNORED_KEYS, PARAM_SETTINGS, params_given
from extensions.settings.config import setting_or_env

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

KEPT = "kept"  # same name, same meaning
MAPPED = "mapped"  # understood, turned into webcrawl's equivalent
REFUSED = "refused"  # the worker does not start while it is set (exit 2)
REPLACED = "replaced"  # ignored with a warning naming what does its job

MIGRATION_PAGE = "docs/migrating-from-scrapy-redis.md"


@dataclass(frozen=True)
class Fate:
    """What webcrawl does with one scrapy-redis setting."""

    name: str
    fate: str
    note: str  # what replaces it, or how it is read


SETTINGS: tuple[Fate, ...] = (
    Fate(
        "SCHEDULER",
        REFUSED,
        "`scrapy_redis.scheduler.Scheduler` (any scheduler but webcrawl's, set "
        "above the add-on): remove it, the add-on sets webcrawl's frontier scheduler",
    ),
    Fate(
        "DUPEFILTER_CLASS",
        REFUSED,
        "`scrapy_redis.dupefilter.RFPDupeFilter` (any dupefilter but webcrawl's, "
        "set above the add-on): remove it, the add-on sets the Bloom dupefilter",
    ),
    Fate(
        "STATS_CLASS",
        REFUSED,
        "`scrapy_redis.stats.RedisStatsCollector`: remove it; fleet statistics "
        "are folded into Redis by the add-on's FleetStats (`scrapy status`)",
    ),
    Fate("SCHEDULER_PERSIST", KEPT, "default True here (scrapy-redis: False)"),
    Fate("SCHEDULER_FLUSH_ON_START", KEPT, "the frontier, Bloom filter and robots"),
    Fate(
        "SCHEDULER_QUEUE_CLASS",
        REPLACED,
        "per-host priority queues of the frontier (higher priority first, "
        "FIFO within one); read by `scrapy migrate_from_scrapy_redis`",
    ),
    Fate(
        "SCHEDULER_QUEUE_KEY",
        REPLACED,
        "the frontier's keys `<spider>:{<spider>}:*`; read by "
        "`scrapy migrate_from_scrapy_redis`",
    ),
    Fate(
        "SCHEDULER_SERIALIZER",
        REPLACED,
        "requests are stored as JSON, never pickle; read by "
        "`scrapy migrate_from_scrapy_redis`",
    ),
    Fate(
        "SCHEDULER_IDLE_BEFORE_CLOSE",
        REPLACED,
        "MAX_IDLE_TIME_BEFORE_CLOSE (the scheduler never waits on Redis on the "
        "reactor thread)",
    ),
    Fate(
        "SCHEDULER_DUPEFILTER_KEY",
        REPLACED,
        "the Bloom filter's keys `<spider>:bloom:*`; read by "
        "`scrapy migrate_from_scrapy_redis`",
    ),
    Fate(
        "SCHEDULER_DUPEFILTER_CLASS",
        REPLACED,
        "the add-on's Bloom dupefilter (what is a duplicate: "
        "REQUEST_FINGERPRINTER_CLASS)",
    ),
    Fate("DUPEFILTER_KEY", REPLACED, "the Bloom filter's keys `<spider>:bloom:*`"),
    Fate("DUPEFILTER_DEBUG", KEPT, "log every request the dupefilter drops"),
    Fate("STATS_KEY", REPLACED, "fleet statistics in `<spider>:stats:*`"),
    Fate("REDIS_URL", KEPT, "also from the environment or `REDIS_URL_FILE`"),
    Fate("REDIS_HOST", MAPPED, "into the Redis URL when REDIS_URL is empty"),
    Fate("REDIS_PORT", MAPPED, "into the Redis URL when REDIS_URL is empty"),
    Fate("REDIS_DB", MAPPED, "into the Redis URL when REDIS_URL is empty"),
    Fate(
        "REDIS_PARAMS",
        MAPPED,
        "into the Redis URL when REDIS_URL is empty: password, username, ssl, "
        "ssl_*, timeouts, client_name; `encoding`, `decode_responses`, "
        "`redis_cls` ignored with a warning; any other key refused",
    ),
    Fate(
        "REDIS_ENCODING",
        REPLACED,
        "seeds are read as UTF-8 (an entry that is not goes to the invalid list)",
    ),
    Fate("REDIS_DECODE_RESPONSES", REPLACED, "webcrawl's clients read bytes"),
    Fate(
        "REDIS_START_URLS_KEY",
        KEPT,
        "the seed key of a spider without `redis_key` (`%(name)s` formatted)",
    ),
    Fate("REDIS_START_URLS_AS_SET", KEPT, "seeds taken from a SET, reliably"),
    Fate("REDIS_START_URLS_AS_ZSET", KEPT, "seeds taken from a ZSET, highest first"),
    Fate("REDIS_START_URLS_BATCH_SIZE", REPLACED, "SEED_BATCH_SIZE"),
    Fate(
        "REDIS_KEY_CHECK_INTERVAL",
        REPLACED,
        "every take starts at the first key of a `redis_key` list",
    ),
    Fate(
        "MAX_IDLE_TIME_BEFORE_CLOSE",
        KEPT,
        "idle means the whole fleet's frontier is empty and no lease is out",
    ),
    Fate("REDIS_ITEMS_KEY", KEPT, "read by `scrapy_redis.pipelines.RedisPipeline`"),
    Fate(
        "REDIS_ITEMS_SERIALIZER", KEPT, "read by `scrapy_redis.pipelines.RedisPipeline`"
    ),
)
FATES = {fate.name: fate for fate in SETTINGS}

# The classes of scrapy-redis that would replace webcrawl's components.
FOREIGN = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "STATS_CLASS": "scrapy_redis.stats.RedisStatsCollector",
}
_PRIORITY_NAMES = {number: name for name, number in SETTINGS_PRIORITIES.items()}
_UTF8 = {"utf-8", "utf8", "utf_8"}


def _where(settings: BaseSettings, name: str) -> str:
    priority = settings.getpriority(name) or 0
    return {
        "project": "the project settings",
        "cmdline": "-s",
        "spider": "the spider's custom_settings",
    }.get(_PRIORITY_NAMES.get(priority, ""), f"priority {priority}")


def _is_subclass(path: object, base: type) -> bool:
    """Whether the class ``path`` names (or is) is ``base`` or a subclass;
    False for anything that does not load as a class."""
    try:
        cls = load_object(path) if isinstance(path, str) else path
    except (ImportError, NameError, AttributeError, ValueError):
        return False
    # By the MRO: Scrapy's BaseScheduler answers issubclass() by duck typing
    # (any class with a scheduler's methods "is" one).
    return isinstance(cls, type) and base in cls.__mro__


def _is_scrapy_redis(path: object, name: str) -> bool:
    """Whether ``path`` is scrapy-redis's class for ``name``, or a subclass."""
    if isinstance(path, str) and path.startswith("scrapy_redis."):
        return True
    return _is_subclass(path, load_object(FOREIGN[name]))


def refusals(settings: BaseSettings, scheduler: str, dupefilter: str) -> list[str]:
    """One sentence per setting that would take a component away from
    webcrawl: a ``SCHEDULER`` or ``DUPEFILTER_CLASS`` set above the add-on's
    priority that is not the class ``scheduler``/``dupefilter`` name (or a
    subclass), and scrapy-redis's stats collector. Each says what to remove.
    Loads a class only when the user set one (a worker's start is not made
    slower)."""
    found = []
    addon = SETTINGS_PRIORITIES["addon"]
    for name, ours in (("SCHEDULER", scheduler), ("DUPEFILTER_CLASS", dupefilter)):
        value = settings.get(name)
        if (settings.getpriority(name) or 0) <= addon or value == ours:
            continue
        if _is_subclass(value, load_object(ours)):
            continue
        if name == "DUPEFILTER_CLASS" and not _is_scrapy_redis(value, name):
            # Any other dupefilter serves the scheduler (or is refused by
            # the add-on's own check, extensions.core.scheduler).
            continue
        what = "scrapy-redis's" if _is_scrapy_redis(value, name) else "another"
        found.append(
            f"{name}={value!r} ({_where(settings, name)}) is {what} and would "
            f"replace webcrawl's {ours}: remove it (the webcrawl add-on sets "
            f"{name}; see {MIGRATION_PAGE})"
        )
    stats = settings.get("STATS_CLASS")
    # Scrapy's own default (at "default" priority) is not scrapy-redis's.
    mine = (settings.getpriority("STATS_CLASS") or 0) > SETTINGS_PRIORITIES["default"]
    if mine and _is_scrapy_redis(stats, "STATS_CLASS"):
        found.append(
            f"STATS_CLASS={stats!r} ({_where(settings, 'STATS_CLASS')}) is "
            "scrapy-redis's, which fails on close under Scrapy 2.19 "
            "(rmax/scrapy-redis#303): remove it (webcrawl folds every worker's "
            f"stats into Redis itself: `scrapy status`; see {MIGRATION_PAGE})"
        )
    if settings.getbool("REDIS_START_URLS_AS_SET") and settings.getbool(
        "REDIS_START_URLS_AS_ZSET"
    ):
        found.append(
            "REDIS_START_URLS_AS_SET and REDIS_START_URLS_AS_ZSET are both True: "
            "set the one that says what the seed key is"
        )
    return found


def warnings(settings: BaseSettings) -> list[str]:
    """One sentence per scrapy-redis setting that is set and that webcrawl
    ignores, naming what does its job (:data:`SETTINGS`, ``replaced``); the
    connection settings when ``REDIS_URL`` names the Redis anyway, and the
    ``REDIS_PARAMS`` keys that only concern scrapy-redis's client."""
    found = []
    for fate in SETTINGS:
        if fate.fate != REPLACED or settings.get(fate.name) is None:
            continue
        if (
            fate.name == "REDIS_ENCODING"
            and str(settings.get(fate.name)).lower() in _UTF8
        ):
            continue  # what webcrawl reads anyway
        found.append(
            f"{fate.name} is scrapy-redis's and is ignored here: {fate.note} "
            f"(see {MIGRATION_PAGE})"
        )
    given = params_given(settings)
    if given and setting_or_env(settings, "REDIS_URL"):
        found.append(
            f"{', '.join(given)} ignored: REDIS_URL names the Redis "
            "(put its options in the URL)"
        )
    elif "REDIS_PARAMS" in given:
        ignored = sorted(set(settings.getdict("REDIS_PARAMS")) & set(IGNORED_KEYS))
        for key in ignored:
            found.append(f"REDIS_PARAMS {key!r} ignored: {IGNORED_KEYS[key]}")
    return found


def known() -> set[str]:
    """Every scrapy-redis setting name: none is a typo of a webcrawl one."""
    return {*FATES, *PARAM_SETTINGS}
