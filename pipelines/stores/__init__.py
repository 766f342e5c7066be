"""Page stores: :class:`~pipelines.stores.base.PageStore` implementations.

Settings read: ``PAGE_STORE`` (dotted path of a store class with a
``from_settings(settings)`` class method; empty: chosen by ``MONGO_URI``),
``MONGO_URI`` (set: :class:`~pipelines.stores.mongo.MongoStore`; empty:
:class:`~pipelines.stores.sqlite.SQLiteStore` at
``WEBCRAWL_HOME/pages.sqlite3``). ``MONGO_URI`` and ``WEBCRAWL_HOME`` are also
taken from the environment (or a ``*_FILE`` secret), see
:func:`extensions.settings.config.setting_or_env`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self, cast

from scrapy.utils.misc import load_object

from extensions.settings.config import SettingsError, setting_or_env
from pipelines.stores.base import (
    BatchResult,
    DocumentError,
    PageStore,
    PermanentStoreError,
    StoredPage,
    TransientStoreError,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

__all__ = [
    "BatchResult",
    "DocumentError",
    "LazyPageStore",
    "PageStore",
    "PermanentStoreError",
    "StoredPage",
    "TransientStoreError",
    "store_class",
    "store_class_path",
    "store_from_settings",
]


def store_class_path(settings: BaseSettings) -> str:
    """The dotted path of the store class the settings select."""
    path = settings.get("PAGE_STORE") or ""
    if path:
        return str(path)
    if setting_or_env(settings, "MONGO_URI"):
        return "pipelines.stores.mongo.MongoStore"
    return "pipelines.stores.sqlite.SQLiteStore"


def store_class(settings: BaseSettings) -> Any:
    """The page store class the settings select; a path that names none
    (``PAGE_STORE=nope.Store``) raises :class:`SettingsError`, one line."""
    path = store_class_path(settings)
    try:
        return load_object(path)
    except (ImportError, NameError, ValueError) as exc:
        raise SettingsError(f"PAGE_STORE={path!r} cannot be loaded: {exc}") from None


def store_from_settings(settings: BaseSettings) -> PageStore:
    """Build (not open) the page store the settings select.

    ``settings`` may be a crawler's frozen settings: nothing is written to
    them (each store reads its environment fallbacks itself).
    """
    return cast("PageStore", store_class(settings).from_settings(settings))


class LazyPageStore:
    """The page store the crawler's settings select, through a connection of
    its own, opened on first use (in the thread of its one caller: a store's
    connection may be bound to a thread). The base of the page store's
    side-stores (the recrawl schedule, the frontier spill)."""

    def __init__(self, crawler: Crawler) -> None:
        self.store: Any = store_from_settings(crawler.settings)
        self._open = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def _store(self) -> Any:
        if not self._open:
            self.store.open()
            self._open = True
        return self.store

    def close(self) -> None:
        if self._open:
            self.store.close()
            self._open = False
