"""The page store as the continuous crawl's store-side schedule.

``RECRAWL_SCHEDULE_STORE = "pipelines.stores.schedule.PageStoreSchedule"``:
next visits beyond ``RECRAWL_WINDOW`` wait in the page store the settings
select (:func:`pipelines.stores.store_from_settings`: the SQLite file or
MongoDB), in its ``recrawl_schedule`` table or collection (url, due time in
ms, record), through a connection of its own; only the due window is in
Redis. It satisfies the ``ScheduleStore`` protocol of
:mod:`extensions.extensions.recrawl` (url, due, opaque record: nothing of Redis): a
:class:`~pipelines.stores.base.TransientStoreError` reaches it as the
``ConnectionError`` the protocol names (the extension retries at its next
poll); a permanent error propagates.

Settings read: those of the page store (``PAGE_STORE``, ``MONGO_URI``,
``WEBCRAWL_HOME``, ``SQLITE_PATH``, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipelines.stores import LazyPageStore, TransientStoreError

if TYPE_CHECKING:
    from collections.abc import Sequence


class PageStoreSchedule(LazyPageStore):
    """The schedule in the configured page store, opened on first use (in
    the recrawl extension's own thread)."""

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._store().side, method)(*args)
        except TransientStoreError as e:
            raise ConnectionError(f"page store: {e}") from e

    def put(self, entries: Sequence[tuple[str, int, str]]) -> None:
        self._call("schedule_put", entries)

    def due(self, until: int, limit: int) -> list[tuple[str, int, str]]:
        return list(self._call("schedule_due", until, limit))

    def delete(self, entries: Sequence[tuple[str, int]]) -> None:
        self._call("schedule_delete", entries)

    def count(self) -> int:
        return int(self._call("schedule_count"))
