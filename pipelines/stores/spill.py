"""The page store as the frontier's spill store.

``FRONTIER_SPILL_STORE = "pipelines.stores.spill.PageStoreSpill"`` (the
webcrawl add-on sets it): requests past the frontier's cap wait in the page
store the settings select (:func:`pipelines.stores.store_from_settings`: the
SQLite file or MongoDB), in its ``spilled_requests`` table or collection,
through a connection of its own. It satisfies the ``SpillStore`` protocol of
:mod:`extensions.core.frontier.spill` (host, score, serialized request: nothing of
Redis).

Settings read: those of the page store (``PAGE_STORE``, ``MONGO_URI``,
``WEBCRAWL_HOME``, ``SQLITE_PATH``, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines.stores import LazyPageStore

if TYPE_CHECKING:
    from collections.abc import Sequence


class PageStoreSpill(LazyPageStore):
    """Spilled requests in the configured page store, opened on first use
    (in the spill's own thread)."""

    def spill_append(self, host: str, entries: Sequence[tuple[int, bytes]]) -> None:
        self._store().side.spill_append(host, entries)

    def spill_take(self, host: str, n: int) -> list[tuple[int, bytes]]:
        return list(self._store().side.spill_take(host, n))

    def spill_delete(self, host: str, scores: Sequence[int]) -> None:
        self._store().side.spill_delete(host, scores)

    def spill_count(self, host: str | None = None) -> int:
        return int(self._store().side.spill_count(host))

    def spill_clear(self) -> int:
        return int(self._store().side.spill_clear())
