"""The embedded page store: one SQLite file, two tables, no server.

Used when ``MONGO_URI`` is empty, at ``WEBCRAWL_HOME/pages.sqlite3``: tables
``pages_metadata`` (unique ``url``, indexes on ``domain``, ``fetched_at``,
``content_hash``, ``final_url``) and ``pages_content``, the columns of
:data:`pipelines.stores.base.METADATA_FIELDS` and ``CONTENT_FIELDS`` (``_id``
is the column ``id``), and ``pages_simhash`` (``band``, ``id``, ``simhash``:
four rows per original page, primary key ``(band, id)``, indexed by ``id``),
``recrawl_schedule`` (``url`` primary key, ``due`` indexed, ``record``:
the continuous crawl's store-side schedule, :mod:`pipelines.stores.schedule`)
and ``spilled_requests`` (``host``, ``score``, ``member``: requests waiting
outside Redis, see :class:`SpillStore`, primary key ``(host, score)``).
WAL journaling lets ``python -m pipelines.read`` read while a crawl writes.

Settings read (by :meth:`SQLiteStore.from_settings`): ``WEBCRAWL_HOME``,
``PAGE_HISTORY_MAX``, ``SQLITE_PATH`` (each also from the environment when the
settings leave it empty).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from extensions.connection.embedded import webcrawl_home
from extensions.settings.config import setting_or_env
from pipelines import defaults
from pipelines.stores.base import (
    CONTENT_FIELDS,
    ITER_CHUNK,
    METADATA_FIELDS,
    METADATA_INDEXES,
    NOT_MODIFIED,
    SPILL,
    VERSION_FIELDS,
    BatchResult,
    DocumentError,
    Original,
    PermanentStoreError,
    StoredPage,
    StoreNotFoundError,
    TransientStoreError,
    assemble_pages,
    decompress,
    is_original,
    nearest,
    replaces_version,
    simhash_bands,
    visit,
    with_visit,
)

if TYPE_CHECKING:
    import os
    from collections.abc import Iterator, Sequence

    from scrapy.settings import BaseSettings


# Primary result codes that mean "another connection holds the database, try
# again" (SQLITE_BUSY, SQLITE_LOCKED); every other error (read-only file, not a
# database, a table of another schema, disk I/O) will not pass by retrying.
_TRANSIENT_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def _store_error(error: sqlite3.Error, what: str) -> Exception:
    """The store error an ``sqlite3`` error stands for.

    >>> busy = sqlite3.OperationalError("database is locked")
    >>> busy.sqlite_errorcode = sqlite3.SQLITE_BUSY
    >>> type(_store_error(busy, "write")).__name__
    'TransientStoreError'
    >>> ro = sqlite3.OperationalError("attempt to write a readonly database")
    >>> ro.sqlite_errorcode = sqlite3.SQLITE_READONLY
    >>> type(_store_error(ro, "write")).__name__
    'PermanentStoreError'
    """
    code = getattr(error, "sqlite_errorcode", None)
    cls = (
        TransientStoreError
        if code is not None and code & 0xFF in _TRANSIENT_CODES
        else PermanentStoreError
    )
    return cls(f"sqlite {what}: {error}")


# Metadata columns added with continuous crawling, then the headers of
# non-HTML records (pipelines.stores.base): a store written before gains them.
HISTORY_COLUMNS = ("checked_at", "history")
ADDED_COLUMNS = (*HISTORY_COLUMNS, "headers", "filtered")
# Columns kept as JSON text (MongoDB keeps the lists themselves).
JSON_COLUMNS = ("history", "headers")

# The near-duplicate band index (see pipelines.stores.base): a page's rows go
# with its metadata row, in the same transaction.
SIMHASH_TABLE = (
    "CREATE TABLE IF NOT EXISTS pages_simhash (band INTEGER NOT NULL, "
    "id TEXT NOT NULL, simhash TEXT NOT NULL, PRIMARY KEY (band, id)) WITHOUT ROWID"
)


# Requests waiting outside Redis (pipelines.stores.base.SPILL): read by host
# in score order, so the primary key is the index.
SPILL_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {SPILL} (host TEXT NOT NULL, score INTEGER NOT "
    "NULL, member BLOB NOT NULL, PRIMARY KEY (host, score)) WITHOUT ROWID"
)

SCHEDULE_TABLE = (
    "CREATE TABLE IF NOT EXISTS recrawl_schedule (url TEXT PRIMARY KEY, "
    "due INTEGER NOT NULL, record TEXT NOT NULL)"
)


def _column(name: str) -> str:
    return "id" if name == "_id" else name


def _table_sql(table: str, fields: dict[str, str]) -> str:
    cols = ", ".join(f"{_column(n)} {t}" for n, t in fields.items())
    return f"CREATE TABLE IF NOT EXISTS {table} ({cols})"


def _upsert_sql(table: str, fields: dict[str, str]) -> str:
    """An idempotent upsert by id that keeps the UNIQUE(url) check.

    >>> _upsert_sql("t", {"_id": "TEXT", "a": "TEXT"})
    'INSERT INTO t (id, a) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET a = excluded.a'
    """
    cols = [_column(n) for n in fields]
    marks = ", ".join("?" for _ in cols)
    updates = ", ".join(f"{c} = excluded.{c}" for c in cols if c != "id")
    return (
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks}) "
        f"ON CONFLICT(id) DO UPDATE SET {updates}"
    )


def _insert_sql(table: str, fields: dict[str, str]) -> str:
    """An insert that leaves a stored row alone (a filtered record).

    >>> _insert_sql("t", {"_id": "TEXT", "a": "TEXT"})
    'INSERT INTO t (id, a) VALUES (?, ?) ON CONFLICT DO NOTHING'
    """
    cols = [_column(n) for n in fields]
    marks = ", ".join("?" for _ in cols)
    return (
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks}) "
        "ON CONFLICT DO NOTHING"
    )


class SQLiteStore:
    """:class:`~pipelines.stores.base.PageStore` on a SQLite file.

    One connection shared by the pipeline's writer thread and readers under a
    lock (``check_same_thread=False``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        timeout: float = 30.0,
        history_max: int = defaults.PAGE_HISTORY_MAX,
    ) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.history_max = history_max
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._meta_sql = _upsert_sql("pages_metadata", METADATA_FIELDS)
        self._filtered_sql = _insert_sql("pages_metadata", METADATA_FIELDS)
        self._content_sql = _upsert_sql("pages_content", CONTENT_FIELDS)
        self.side = SQLiteSideStores(self)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> SQLiteStore:
        path = setting_or_env(settings, "SQLITE_PATH")
        if not path:
            path = str(webcrawl_home(settings) / "pages.sqlite3")
        return cls(
            path,
            history_max=settings.getint("PAGE_HISTORY_MAX", defaults.PAGE_HISTORY_MAX),
        )

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    def open(self, create: bool = True) -> None:
        if self._conn is not None:
            return
        if not create and not self.path.is_file():
            raise StoreNotFoundError(f"no SQLite page store at {self.path}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as e:
            raise PermanentStoreError(f"cannot open {self.path}: {e}") from e
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            with conn:
                conn.execute(_table_sql("pages_metadata", METADATA_FIELDS))
                conn.execute(_table_sql("pages_content", CONTENT_FIELDS))
                conn.execute(_table_sql("pages_versions", VERSION_FIELDS))
                conn.execute(
                    "CREATE INDEX IF NOT EXISTS pages_versions_page_id "
                    "ON pages_versions (page_id, fetched_at)"
                )
                # A store written before continuous crawling (or before
                # headers were kept) lacks those columns: add them, empty.
                # Older schemas are still refused.
                have = {r[1] for r in conn.execute("PRAGMA table_info(pages_metadata)")}
                if have and "worker" in have:
                    for name in ADDED_COLUMNS:
                        if name not in have:
                            conn.execute(
                                f"ALTER TABLE pages_metadata ADD COLUMN {name} "
                                f"{METADATA_FIELDS[name]}"
                            )
                for name in METADATA_INDEXES:
                    if name not in have:
                        # A schema older than the ALTERs above: refused at its
                        # first write, with the column it lacks.
                        continue
                    conn.execute(
                        f"CREATE INDEX IF NOT EXISTS pages_metadata_{name} "
                        f"ON pages_metadata ({name})"
                    )
                conn.execute(SIMHASH_TABLE)
                conn.execute(SPILL_TABLE)
                conn.execute(SCHEDULE_TABLE)
                conn.execute(
                    "CREATE INDEX IF NOT EXISTS recrawl_schedule_due "
                    "ON recrawl_schedule (due)"
                )
                conn.execute(
                    "CREATE INDEX IF NOT EXISTS pages_simhash_id ON pages_simhash (id)"
                )
        except sqlite3.Error as e:  # not a database, read-only, locked
            conn.close()
            raise _store_error(e, f"open {self.path}") from e
        self._conn = conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self.open()
        assert self._conn is not None
        return self._conn

    def write_batch(
        self,
        metadata_docs: list[dict[str, Any]],
        content_docs: list[dict[str, Any]],
    ) -> BatchResult:
        result = BatchResult()
        with self._lock:
            conn = self._connection()
            try:
                with conn:  # one transaction per batch
                    written: set[str] = set()
                    stored = self._stored(conn, [d["_id"] for d in metadata_docs])
                    for doc in metadata_docs:
                        previous = stored.get(doc["_id"])
                        history = json.dumps(
                            with_visit(
                                json.loads(previous["history"] or "[]")
                                if previous
                                else None,
                                visit(doc, previous),
                                self.history_max,
                            )
                        )
                        if doc.get("filtered"):
                            # Never over a stored page (see base): one
                            # statement, whatever another worker wrote.
                            full = {**doc, "checked_at": doc.get("fetched_at"),
                                    "history": history}  # fmt: skip
                            conn.execute(
                                self._filtered_sql,
                                [full.get(n) for n in METADATA_FIELDS],
                            )
                            written.add(doc["_id"])
                            continue
                        if doc.get("status") == NOT_MODIFIED and previous:
                            # A visit only: the stored page and content stand.
                            conn.execute(
                                "UPDATE pages_metadata SET checked_at = ?, "
                                "history = ? WHERE id = ?",
                                (doc.get("fetched_at"), history, doc["_id"]),
                            )
                            written.add(doc["_id"])
                            continue
                        if replaces_version(doc, previous):
                            self._keep_version(conn, doc["_id"])
                        full = {
                            **doc,
                            "checked_at": doc.get("fetched_at"),
                            "history": history,
                            "headers": None
                            if doc.get("headers") is None
                            else json.dumps(doc["headers"]),
                        }
                        row = [full.get(n) for n in METADATA_FIELDS]
                        try:
                            conn.execute(self._meta_sql, row)
                        except sqlite3.IntegrityError as e:
                            result.errors.append(
                                DocumentError(
                                    doc["_id"], "pages_metadata", None, str(e)
                                )
                            )
                            continue
                        written.add(doc["_id"])
                        self._index_simhash(conn, doc)
                        if not doc.get("has_content"):
                            conn.execute(
                                "DELETE FROM pages_content WHERE id = ?",
                                (doc["_id"],),
                            )
                    result.written = len(written)
                    for doc in content_docs:
                        if doc["_id"] not in written:
                            continue
                        conn.execute(
                            self._content_sql, [doc.get(n) for n in CONTENT_FIELDS]
                        )
                        result.content_written += 1
            except sqlite3.Error as e:
                # The transaction was rolled back as a whole: "database is
                # locked" may pass, a read-only file or an old schema will not.
                raise _store_error(e, "write") from e
        return result

    @staticmethod
    def _stored(conn: sqlite3.Connection, ids: list[str]) -> dict[str, dict[str, Any]]:
        """Content hash and history of the pages ``ids`` already stored."""
        found: dict[str, dict[str, Any]] = {}
        for i in range(0, len(ids), 500):  # SQLite's bound-parameter limit
            chunk = ids[i : i + 500]
            marks = ", ".join("?" for _ in chunk)
            for pid, chash, history, has_content in conn.execute(
                "SELECT id, content_hash, history, has_content FROM pages_metadata "
                f"WHERE id IN ({marks})",
                chunk,
            ):
                found[pid] = {
                    "content_hash": chash,
                    "history": history,
                    "has_content": has_content,
                }
        return found

    def _keep_version(self, conn: sqlite3.Connection, page_id: str) -> None:
        """Copy the stored content of ``page_id`` to ``pages_versions`` (it
        is about to be replaced), keeping the newest ``history_max``."""
        conn.execute(
            "INSERT OR REPLACE INTO pages_versions (id, page_id, url, fetched_at, "
            "content_hash, html_compressed, encoding) "
            "SELECT c.id || '@' || m.fetched_at, c.id, m.url, m.fetched_at, "
            "m.content_hash, c.html_compressed, c.encoding "
            "FROM pages_content c JOIN pages_metadata m ON m.id = c.id "
            "WHERE c.id = ?",
            (page_id,),
        )
        conn.execute(
            "DELETE FROM pages_versions WHERE page_id = ? AND id NOT IN "
            "(SELECT id FROM pages_versions WHERE page_id = ? "
            "ORDER BY fetched_at DESC LIMIT ?)",
            (page_id, page_id, self.history_max),
        )

    def get_versions(self, url: str) -> list[StoredPage]:
        with self._lock:
            rows = (
                self._connection()
                .execute(
                    "SELECT v.id, v.fetched_at, v.content_hash, v.html_compressed, "
                    "v.encoding FROM pages_versions v JOIN pages_metadata m "
                    "ON m.id = v.page_id WHERE m.url = ? ORDER BY v.fetched_at DESC",
                    (url,),
                )
                .fetchall()
            )
        return [
            StoredPage(
                url,
                {"_id": vid, "fetched_at": at, "content_hash": chash, "encoding": enc},
                decompress(blob),
                vid,
            )
            for vid, at, chash, blob, enc in rows
        ]

    @staticmethod
    def _index_simhash(conn: sqlite3.Connection, doc: dict[str, Any]) -> None:
        conn.execute("DELETE FROM pages_simhash WHERE id = ?", (doc["_id"],))
        if is_original(doc):
            sh = doc["simhash"]
            conn.executemany(
                "INSERT INTO pages_simhash (band, id, simhash) VALUES (?, ?, ?)",
                [(band, doc["_id"], sh) for band in simhash_bands(sh)],
            )

    def find_original(
        self,
        page_id: str,
        content_hash: str | None,
        simhash: int | None,
        max_distance: int,
        max_candidates: int,
    ) -> Original | None:
        with self._lock:
            conn = self._connection()
            try:
                if content_hash:
                    row = conn.execute(
                        "SELECT id FROM pages_metadata WHERE content_hash = ? "
                        "AND has_content = 1 AND duplicate_of IS NULL AND id != ? "
                        "ORDER BY id LIMIT 1",
                        (content_hash, page_id),
                    ).fetchone()
                    if row is not None:
                        return Original("exact", row[0])
                if simhash is None:
                    return None
                rows: list[tuple[str, str]] = []
                for band in simhash_bands(f"{simhash:016x}"):
                    rows += conn.execute(
                        "SELECT id, simhash FROM pages_simhash WHERE band = ? "
                        "AND id != ? LIMIT ?",
                        (band, page_id, max_candidates),
                    ).fetchall()
            except sqlite3.Error as e:
                raise _store_error(e, "read") from e
        return nearest(simhash, rows, max_distance)

    def _metadata_rows(self, sql: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
        conn = self._connection()
        conn.row_factory = sqlite3.Row
        try:
            rows = conn.execute(sql, args).fetchall()
        finally:
            conn.row_factory = None
        docs = []
        for row in rows:
            doc = {("_id" if k == "id" else k): row[k] for k in row.keys()}  # noqa: SIM118
            # SQLite keeps the visit history and the headers as JSON text
            # (MongoDB: lists).
            doc["history"] = json.loads(doc.get("history") or "[]")
            if doc.get("headers") is not None:
                doc["headers"] = json.loads(doc["headers"])
            docs.append(doc)
        return docs

    def _compressed_bodies(self, ids: list[str]) -> dict[str, bytes]:
        marks = ", ".join("?" * len(ids))
        rows = self._connection().execute(
            f"SELECT id, html_compressed FROM pages_content WHERE id IN ({marks})",
            ids,
        )
        return {row[0]: row[1] for row in rows}

    def get_page(self, url: str) -> StoredPage | None:
        with self._lock:
            docs = self._metadata_rows(
                "SELECT * FROM pages_metadata WHERE url = ?", (url,)
            ) or self._metadata_rows(
                "SELECT * FROM pages_metadata WHERE final_url = ? "
                "ORDER BY fetched_at DESC LIMIT 1",
                (url,),
            )
            return assemble_pages(docs, self._compressed_bodies)[0] if docs else None

    def iter_pages(
        self, host: str | None = None, since: float | None = None
    ) -> Iterator[StoredPage]:
        where = ["(fetched_at, id) > (?, ?)"]
        base: list[Any] = []
        if host is not None:
            where.append("domain = ?")
            base.append(host.lower())
        if since is not None:
            where.append("fetched_at >= ?")
            base.append(since)
        sql = (
            f"SELECT * FROM pages_metadata WHERE {' AND '.join(where)} "
            f"ORDER BY fetched_at, id LIMIT {ITER_CHUNK}"
        )
        # Keyset pagination: the lock is held per chunk, never across a
        # yield, so a writer thread is not starved by a slow consumer.
        after: tuple[Any, ...] = (float("-inf"), "")
        while True:
            with self._lock:
                docs = self._metadata_rows(sql, (*after, *base))
                pages = assemble_pages(docs, self._compressed_bodies)
            yield from pages
            if len(docs) < ITER_CHUNK:
                return
            after = (docs[-1]["fetched_at"], docs[-1]["_id"])

    def count(self) -> int:
        return self._rows("pages_metadata")

    def content_count(self) -> int:
        return self._rows("pages_content")

    def _rows(self, table: str) -> int:
        with self._lock:
            row = self._connection().execute(f"SELECT COUNT(*) FROM {table}").fetchone()
            return int(row[0])


class SQLiteSideStores:
    """The page store's side stores in its file, on its connection and lock:
    the continuous crawl's schedule (``recrawl_schedule``, the
    ``ScheduleStore`` of :mod:`extensions.extensions.recrawl`) and the
    frontier spill (``spilled_requests``, the ``SpillStore`` of
    :mod:`extensions.core.frontier.spill`)."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    # -- the continuous crawl's store-side schedule

    def schedule_put(self, entries: Sequence[tuple[str, int, str]]) -> None:
        """Set the next visit (``due``, ms) and record of each ``url``."""
        self._write_many(
            "INSERT INTO recrawl_schedule (url, due, record) VALUES (?, ?, ?) "
            "ON CONFLICT (url) DO UPDATE SET due = excluded.due, "
            "record = excluded.record",
            entries,
            "write the schedule",
        )

    def schedule_due(self, until: int, limit: int) -> list[tuple[str, int, str]]:
        """Up to ``limit`` entries due at or before ``until`` (ms), earliest first."""
        with self._store._lock:
            try:
                rows = (
                    self._store._connection()
                    .execute(
                        "SELECT url, due, record FROM recrawl_schedule WHERE due <= ? "
                        "ORDER BY due LIMIT ?",
                        (until, limit),
                    )
                    .fetchall()
                )
            except sqlite3.Error as e:
                raise _store_error(e, "read the schedule") from e
        return [(str(u), int(d), str(r)) for u, d, r in rows]

    def schedule_delete(self, entries: Sequence[tuple[str, int]]) -> None:
        """Remove each ``(url, due)`` still due then (an entry rescheduled
        meanwhile has another ``due`` and stays)."""
        self._write_many(
            "DELETE FROM recrawl_schedule WHERE url = ? AND due = ?",
            entries,
            "write the schedule",
        )

    def schedule_count(self) -> int:
        return self._store._rows("recrawl_schedule")

    def _write_many(self, sql: str, rows: Sequence[tuple[Any, ...]], what: str) -> None:
        """Run ``sql`` over ``rows`` in one transaction."""
        if not rows:
            return
        with self._store._lock:
            try:
                with self._store._connection() as conn:
                    conn.executemany(sql, rows)
            except sqlite3.Error as e:
                raise _store_error(e, what) from e

    # -- the frontier spill

    def spill_append(self, host: str, entries: Sequence[tuple[int, bytes]]) -> None:
        self._write_many(
            f"INSERT OR IGNORE INTO {SPILL} (host, score, member) VALUES (?, ?, ?)",
            [(host, int(score), bytes(member)) for score, member in entries],
            "spill append",
        )

    def spill_take(self, host: str, n: int) -> list[tuple[int, bytes]]:
        with self._store._lock:
            try:
                rows = (
                    self._store._connection()
                    .execute(
                        f"SELECT score, member FROM {SPILL} WHERE host = ? "
                        "ORDER BY score LIMIT ?",
                        (host, int(n)),
                    )
                    .fetchall()
                )
            except sqlite3.Error as e:
                raise _store_error(e, "spill take") from e
        return [(int(score), bytes(member)) for score, member in rows]

    def spill_delete(self, host: str, scores: Sequence[int]) -> None:
        self._write_many(
            f"DELETE FROM {SPILL} WHERE host = ? AND score = ?",
            [(host, int(score)) for score in scores],
            "spill delete",
        )

    def spill_clear(self) -> int:
        with self._store._lock:
            conn = self._store._connection()
            try:
                with conn:
                    return int(conn.execute(f"DELETE FROM {SPILL}").rowcount)
            except sqlite3.Error as e:
                raise _store_error(e, "spill clear") from e

    def spill_count(self, host: str | None = None) -> int:
        sql, args = f"SELECT COUNT(*) FROM {SPILL}", cast("tuple[str, ...]", ())
        if host is not None:
            sql, args = sql + " WHERE host = ?", (host,)
        with self._store._lock:
            row = self._store._connection().execute(sql, args).fetchone()
        return int(row[0])
