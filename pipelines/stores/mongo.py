"""The production page store: MongoDB through pymongo.

Collections ``pages_metadata``, ``pages_content`` and ``pages_simhash``
(``{_id: page id, simhash: hex, bands: [int]}``, see
:mod:`pipelines.stores.base`), ``recrawl_schedule`` (``{_id: url, due:
ms, record: str}``, the continuous crawl's store-side schedule,
:mod:`pipelines.stores.schedule`) and ``spilled_requests`` (``{_id: "<host>
<score>", host, score, member}``: the frontier spill); indexes created at
open: ``url`` unique, ``domain``, ``fetched_at``, ``content_hash``,
``final_url``, ``bands`` (multikey), the schedule's ``due`` and the spill's
``(host, score)`` unique. A batch is three unordered bulk writes of
``ReplaceOne(upsert=True)`` by ``_id`` (metadata first, then the content and
the band index of the metadata that was written), so a retried batch is
harmless.

Errors: network errors, server selection timeouts, primary step-downs and
write errors labelled retryable raise
:class:`~pipelines.stores.base.TransientStoreError` (the pipeline retries the
batch); other per-document write errors (duplicate ``url``, document too
large) are reported in the :class:`~pipelines.stores.base.BatchResult`; any
other server or driver error raises
:class:`~pipelines.stores.base.PermanentStoreError` (never retried).

Settings read (by :meth:`MongoStore.from_settings`): ``MONGO_URI``,
``MONGO_DATABASE``, ``MONGO_TIMEOUT_MS``, ``PAGE_HISTORY_MAX``. The URI's
password never reaches a log (:func:`extensions.utils.redact.redact_url`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pymongo
from bson import BSON
from pymongo import DeleteOne, ReplaceOne, UpdateOne
from pymongo.errors import (
    BulkWriteError,
    ConfigurationError,
    ConnectionFailure,
    DocumentTooLarge,
    OperationFailure,
    PyMongoError,
    WriteConcernError,
)

from extensions.settings.config import setting_or_env
from extensions.utils.redact import redact_url
from pipelines import defaults
from pipelines.stores.base import (
    ITER_CHUNK,
    METADATA_INDEXES,
    NOT_MODIFIED,
    SPILL,
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
    from collections.abc import Callable, Iterator, Sequence

    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

# Server error codes that mean "not now" rather than "never" (step-down,
# shutdown, network, lock and time-limit errors).
TRANSIENT_CODES = frozenset(
    {6, 7, 89, 91, 112, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 50}
)
# BSON's limit is 16 MiB; leave room for the bulk command around a document.
MAX_DOCUMENT_SIZE = 16 * 1024 * 1024 - 16 * 1024


# What _with_history reads of a stored page, and a version's metadata.
STORED_FIELDS = ("content_hash", "history", "has_content", "fetched_at", "url")
VERSION_META = ("_id", "fetched_at", "content_hash", "encoding")


def _is_transient(code: int | None, labels: list[str] | None = None) -> bool:
    """>>> _is_transient(189), _is_transient(11000), _is_transient(None)
    (True, False, False)
    """
    if labels and "RetryableWriteError" in labels:
        return True
    return code in TRANSIENT_CODES


def fits(doc: dict[str, Any], collection: str, result: BatchResult) -> bool:
    size = len(BSON.encode(doc))
    if size <= MAX_DOCUMENT_SIZE:
        return True
    result.errors.append(
        DocumentError(
            doc["_id"], collection, 10334, f"document too large: {size} bytes"
        )
    )
    return False


def bulk_write(
    coll: Any,
    docs: list[dict[str, Any]],
    result: BatchResult,
    name: str,
    *,
    delete_ids: list[str] | None = None,
    visits: set[str] | frozenset[str] = frozenset(),
) -> set[str]:
    """Upsert ``docs`` (and delete ``delete_ids``) in one unordered bulk
    write; return the ids of the documents written. The ``visits`` ids
    update only the fields their document names; a filtered record is
    written only where none is stored."""
    ops: list[Any] = [
        UpdateOne({"_id": d["_id"]}, {"$set": d})
        if d["_id"] in visits
        # A filtered record never replaces a stored page (see base).
        else UpdateOne(
            {"_id": d["_id"]},
            {"$setOnInsert": {k: v for k, v in d.items() if k != "_id"}},
            upsert=True,
        )
        if d.get("filtered")
        else ReplaceOne({"_id": d["_id"]}, d, upsert=True)
        for d in docs
    ]
    ops += [DeleteOne({"_id": i}) for i in delete_ids or []]
    if not ops:
        return set()
    ok = {d["_id"] for d in docs}
    try:
        coll.bulk_write(ops, ordered=False)
    except BulkWriteError as e:
        details = e.details or {}
        if details.get("writeConcernErrors"):
            raise TransientStoreError(f"{name}: write concern error") from e
        for err in details.get("writeErrors", []):
            code = err.get("code")
            if _is_transient(code, err.get("errorLabels")):
                raise TransientStoreError(f"{name}: {err.get('errmsg')}") from e
            index = err.get("index", -1)
            if 0 <= index < len(docs):
                page_id = docs[index]["_id"]
                ok.discard(page_id)
                result.errors.append(
                    DocumentError(page_id, name, code, str(err.get("errmsg")))
                )
    except DocumentTooLarge as e:  # our size check should have caught it
        raise PermanentStoreError(f"{name}: {e}") from e
    except (ConnectionFailure, WriteConcernError) as e:
        # AutoReconnect, NetworkTimeout, NotPrimaryError,
        # ServerSelectionTimeoutError: the batch can be written later.
        raise TransientStoreError(f"{name}: {type(e).__name__}: {e}") from e
    except OperationFailure as e:
        if _is_transient(e.code, _labels(e)):
            raise TransientStoreError(f"{name}: {e}") from e
        # Unauthorized, quota, validation: the batch will never pass.
        raise PermanentStoreError(f"{name}: error {e.code}: {e}") from e
    except PyMongoError as e:
        if _labels(e) and "RetryableWriteError" in _labels(e):
            raise TransientStoreError(f"{name}: {e}") from e
        raise PermanentStoreError(f"{name}: {type(e).__name__}: {e}") from e
    return ok


class MongoStore:
    """:class:`~pipelines.stores.base.PageStore` on MongoDB (or any client
    with pymongo's API, e.g. mongomock in the contract tests)."""

    def __init__(
        self,
        uri: str = "",
        database: str = defaults.MONGO_DATABASE,
        *,
        client: Any = None,
        timeout_ms: int = defaults.MONGO_TIMEOUT_MS,
        history_max: int = defaults.PAGE_HISTORY_MAX,
    ) -> None:
        self.uri = uri
        self.history_max = history_max
        self.database_name = database
        self.timeout_ms = timeout_ms
        self._client = client
        self._own_client = client is None
        self._db: Any = None
        self.side = MongoSideStores(self)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> MongoStore:
        uri = setting_or_env(settings, "MONGO_URI")
        if not uri:
            raise PermanentStoreError("MONGO_URI is not set")
        return cls(
            str(uri),
            settings.get("MONGO_DATABASE") or defaults.MONGO_DATABASE,
            timeout_ms=settings.getint("MONGO_TIMEOUT_MS", defaults.MONGO_TIMEOUT_MS),
            history_max=settings.getint("PAGE_HISTORY_MAX", defaults.PAGE_HISTORY_MAX),
        )

    def __repr__(self) -> str:
        return f"MongoStore({redact_url(self.uri)!r}, {self.database_name!r})"

    def open(self, create: bool = True) -> None:
        if self._db is not None:
            return
        if self._client is None:
            try:
                self._client = pymongo.MongoClient(
                    self.uri,
                    serverSelectionTimeoutMS=self.timeout_ms,
                    connectTimeoutMS=self.timeout_ms,
                    socketTimeoutMS=max(self.timeout_ms, 30_000),
                    retryWrites=True,
                )
            except (ConfigurationError, ValueError) as e:
                raise PermanentStoreError(
                    f"bad MONGO_URI {redact_url(self.uri)}: {type(e).__name__}"
                ) from None
        db = self._client[self.database_name]
        try:
            if not create:
                if "pages_metadata" not in db.list_collection_names():
                    raise StoreNotFoundError(
                        f"no page store in MongoDB database {self.database_name!r}"
                        f" at {redact_url(self.uri)}"
                    )
                self._db = db
                return
            meta = db["pages_metadata"]
            meta.create_index("url", unique=True, name="url_unique")
            for name in METADATA_INDEXES:
                meta.create_index(name, name=name)
            db["pages_content"].create_index("page_id", name="page_id")
            db["pages_versions"].create_index(
                [("page_id", 1), ("fetched_at", -1)], name="page_id_fetched_at"
            )
            db["pages_versions"].create_index("url", name="url")
            db["pages_simhash"].create_index("bands", name="bands")
            db["recrawl_schedule"].create_index("due", name="due")
            db[SPILL].create_index(
                [("host", 1), ("score", 1)], unique=True, name="host_score"
            )
        except (ConnectionFailure, OperationFailure) as e:
            raise _store_error(e) from e
        self._db = db
        logger.info("Page store: MongoDB %s", self)

    def close(self) -> None:
        if self._client is not None and self._own_client:
            self._client.close()
            self._client = None
        self._db = None

    def _database(self) -> Any:
        if self._db is None:
            self.open()
        return self._db

    def write_batch(
        self,
        metadata_docs: list[dict[str, Any]],
        content_docs: list[dict[str, Any]],
    ) -> BatchResult:
        db = self._database()
        result = BatchResult()
        docs, visits, replaced = self._with_history(db["pages_metadata"], metadata_docs)
        if replaced:
            self._keep_versions(db, replaced)
        written = bulk_write(
            db["pages_metadata"],
            [d for d in docs if fits(d, "pages_metadata", result)],
            result,
            "pages_metadata",
            visits=visits,
        )
        result.written = len(written)
        # A filtered record leaves a stored page's content and bands alone
        # (its metadata write was an insert only, see _bulk).
        kept = visits | {d["_id"] for d in metadata_docs if d.get("filtered")}
        stale = [
            d["_id"]
            for d in metadata_docs
            if d["_id"] in written and not d.get("has_content") and d["_id"] not in kept
        ]
        content = [
            d
            for d in content_docs
            if d["_id"] in written and fits(d, "pages_content", result)
        ]
        done = bulk_write(
            db["pages_content"], content, result, "pages_content", delete_ids=stale
        )
        result.content_written = len(done)
        originals = [
            {
                "_id": d["_id"],
                "simhash": d["simhash"],
                "bands": simhash_bands(d["simhash"]),
            }
            for d in metadata_docs
            if d["_id"] in written
            and d["_id"] not in visits
            and is_original(d)
            and d.get("simhash")
        ]
        # A visit (a 304) keeps the stored content, so it keeps its bands.
        indexed = {d["_id"] for d in originals} | kept
        bulk_write(
            db["pages_simhash"],
            originals,
            result,
            "pages_simhash",
            delete_ids=[i for i in sorted(written) if i not in indexed],
        )
        return result

    def _with_history(
        self, coll: Any, metadata_docs: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], set[str], dict[str, dict[str, Any]]]:
        """The documents with their history appended (one read of the
        stored hashes and histories), and the ids of those that are a visit
        only (a 304 of a stored page: only ``checked_at`` and ``history``
        are written, see :func:`~pipelines.stores.base.visit`), and the
        stored metadata of the pages whose content is replaced by another
        version."""
        ids = [d["_id"] for d in metadata_docs]
        try:
            stored = {
                m["_id"]: m
                for m in coll.find(
                    {"_id": {"$in": ids}},
                    dict.fromkeys(STORED_FIELDS, 1),
                )
            }
        except ConnectionFailure as e:
            raise TransientStoreError(f"mongodb unreachable: {e}") from e
        docs, visits, replaced = [], set(), {}
        for doc in metadata_docs:
            previous = stored.get(doc["_id"])
            if previous is not None and replaces_version(doc, previous):
                replaced[doc["_id"]] = previous
            history = with_visit(
                previous.get("history") if previous else None,
                visit(doc, previous),
                self.history_max,
            )
            if doc.get("status") == NOT_MODIFIED and previous:
                visits.add(doc["_id"])
                docs.append(
                    {
                        "_id": doc["_id"],
                        "checked_at": doc.get("fetched_at"),
                        "history": history,
                    }
                )
            else:
                docs.append(
                    {**doc, "checked_at": doc.get("fetched_at"), "history": history}
                )
        return docs, visits, replaced

    def _keep_versions(self, db: Any, replaced: dict[str, dict[str, Any]]) -> None:
        """Copy the stored content of the ``replaced`` pages to
        ``pages_versions`` (idempotent upserts), keeping the newest
        ``history_max`` per page."""
        versions = db["pages_versions"]
        try:
            ops: list[Any] = []
            for content in db["pages_content"].find({"_id": {"$in": list(replaced)}}):
                meta = replaced[content["_id"]]
                vid = f"{content['_id']}@{meta.get('fetched_at')}"
                version = {
                    "_id": vid,
                    "page_id": content["_id"],
                    "url": meta.get("url"),
                    "fetched_at": meta.get("fetched_at"),
                    "content_hash": meta.get("content_hash"),
                    "html_compressed": content["html_compressed"],
                    "encoding": content.get("encoding"),
                }
                ops.append(ReplaceOne({"_id": vid}, version, upsert=True))
            if ops:
                versions.bulk_write(ops, ordered=False)
            for page_id in replaced:
                old = versions.find({"page_id": page_id}, {"_id": 1}).sort(
                    "fetched_at", -1
                )
                stale = [v["_id"] for v in list(old)[self.history_max :]]
                if stale:
                    versions.delete_many({"_id": {"$in": stale}})
        except ConnectionFailure as e:
            raise TransientStoreError(f"mongodb unreachable: {e}") from e

    def get_versions(self, url: str) -> list[StoredPage]:
        try:
            cursor = self._database()["pages_versions"].find({"url": url})
            docs = sorted(cursor, key=lambda d: d.get("fetched_at") or 0, reverse=True)
        except ConnectionFailure as e:
            raise TransientStoreError(f"mongodb unreachable: {e}") from e
        return [
            StoredPage(
                url,
                {
                    k: d.get(k)
                    for k in ("_id", "fetched_at", "content_hash", "encoding")
                },
                decompress(bytes(d["html_compressed"])),
                d["_id"],
            )
            for d in docs
        ]

    def find_original(
        self,
        page_id: str,
        content_hash: str | None,
        simhash: int | None,
        max_distance: int,
        max_candidates: int,
    ) -> Original | None:
        db = self._database()
        try:
            if content_hash:
                found = db["pages_metadata"].find_one(
                    {
                        "content_hash": content_hash,
                        "has_content": True,
                        "duplicate_of": None,
                        "_id": {"$ne": page_id},
                    },
                    {"_id": 1},
                    sort=[("_id", 1)],
                )
                if found is not None:
                    return Original("exact", str(found["_id"]))
            if simhash is None:
                return None
            rows: list[tuple[str, str]] = []
            for band in simhash_bands(f"{simhash:016x}"):
                cursor = db["pages_simhash"].find(
                    {"bands": band, "_id": {"$ne": page_id}}, {"simhash": 1}
                )
                rows += [(d["_id"], d["simhash"]) for d in cursor.limit(max_candidates)]
        except ConnectionFailure as e:
            raise TransientStoreError(f"mongodb unreachable: {e}") from e
        return nearest(simhash, rows, max_distance)

    def get_page(self, url: str) -> StoredPage | None:
        db = self._database()
        try:
            pages = db["pages_metadata"]
            meta = pages.find_one({"url": url}) or pages.find_one(
                {"final_url": url}, sort=[("fetched_at", -1)]
            )
            if meta is None:
                return None
            return self._pages([meta])[0]
        except ConnectionFailure as e:
            raise TransientStoreError(f"mongodb unreachable: {e}") from e

    def _pages(self, metas: list[dict[str, Any]]) -> list[StoredPage]:
        """Pages of ``metas`` with their bodies, read in one query."""
        return assemble_pages([dict(m) for m in metas], self._compressed_bodies)

    def _compressed_bodies(self, ids: list[str]) -> dict[str, bytes]:
        return {
            doc["_id"]: bytes(doc["html_compressed"])
            for doc in self._database()["pages_content"].find(
                {"_id": {"$in": ids}}, {"html_compressed": 1}
            )
        }

    def iter_pages(
        self, host: str | None = None, since: float | None = None
    ) -> Iterator[StoredPage]:
        query: dict[str, Any] = {}
        if host is not None:
            query["domain"] = host.lower()
        if since is not None:
            query["fetched_at"] = {"$gte": since}
        coll = self._database()["pages_metadata"]
        after: tuple[Any, Any] | None = None
        while True:
            # Keyset pagination on (fetched_at, _id): no cursor stays open
            # across a slow consumer (server cursors time out after 10 min).
            page_query = dict(query)
            if after is not None:
                page_query = {
                    "$and": [
                        query,
                        {
                            "$or": [
                                {"fetched_at": {"$gt": after[0]}},
                                {"fetched_at": after[0], "_id": {"$gt": after[1]}},
                            ]
                        },
                    ]
                }
            try:
                metas = list(
                    coll.find(page_query)
                    .sort([("fetched_at", 1), ("_id", 1)])
                    .limit(ITER_CHUNK)
                )
                pages = self._pages(metas)
            except ConnectionFailure as e:
                raise TransientStoreError(f"mongodb unreachable: {e}") from e
            yield from pages
            if len(metas) < ITER_CHUNK:
                return
            after = (metas[-1]["fetched_at"], metas[-1]["_id"])

    def count(self) -> int:
        return int(self._database()["pages_metadata"].count_documents({}))

    def content_count(self) -> int:
        return int(self._database()["pages_content"].count_documents({}))


class MongoSideStores:
    """The page store's side stores in its database, on its client: the
    continuous crawl's schedule (``recrawl_schedule``, the ``ScheduleStore``
    of :mod:`extensions.extensions.recrawl`) and the frontier spill
    (``spilled_requests``, the ``SpillStore`` of
    :mod:`extensions.core.frontier.spill`)."""

    def __init__(self, store: MongoStore) -> None:
        self._store = store

    # -- the continuous crawl's store-side schedule

    def schedule_put(self, entries: Sequence[tuple[str, int, str]]) -> None:
        """Set the next visit (``due``, ms) and record of each ``url``."""
        ops = [ReplaceOne({"_id": u}, {"_id": u, "due": d, "record": r}, upsert=True)
               for u, d, r in entries]  # fmt: skip
        if ops:
            self._schedule(lambda c: c.bulk_write(ops, ordered=False))

    def schedule_due(self, until: int, limit: int) -> list[tuple[str, int, str]]:
        """Up to ``limit`` entries due at or before ``until`` (ms), earliest first."""
        docs = self._schedule(
            lambda c: list(c.find({"due": {"$lte": until}}).sort("due", 1).limit(limit))
        )
        return [(str(d["_id"]), int(d["due"]), str(d["record"])) for d in docs]

    def schedule_delete(self, entries: Sequence[tuple[str, int]]) -> None:
        """Remove each ``(url, due)`` still due then (an entry rescheduled
        meanwhile has another ``due`` and stays)."""
        ops = [DeleteOne({"_id": u, "due": d}) for u, d in entries]
        if ops:
            self._schedule(lambda c: c.bulk_write(ops, ordered=False))

    def schedule_count(self) -> int:
        return int(self._schedule(lambda c: c.count_documents({})))

    def _schedule(self, call: Callable[[Any], Any]) -> Any:
        try:
            return call(self._store._database()["recrawl_schedule"])
        except (ConnectionFailure, OperationFailure) as e:
            raise _store_error(e) from e

    # -- the frontier spill

    def spill_append(self, host: str, entries: Sequence[tuple[int, bytes]]) -> None:
        spill_append(self._store._database(), host, entries)

    def spill_take(self, host: str, n: int) -> list[tuple[int, bytes]]:
        return spill_take(self._store._database(), host, n)

    def spill_delete(self, host: str, scores: Sequence[int]) -> None:
        spill_delete(self._store._database(), host, scores)

    def spill_count(self, host: str | None = None) -> int:
        return spill_count(self._store._database(), host)

    def spill_clear(self) -> int:
        return spill_clear(self._store._database())


def _store_error(
    error: ConnectionFailure | OperationFailure, what: str = ""
) -> Exception:
    """The store error a connection failure or a refused operation (of
    ``what``, named in the message) stands for."""
    where = f"mongodb {what}" if what else "mongodb"
    if isinstance(error, ConnectionFailure):
        return TransientStoreError(f"{where} unreachable: {error}")
    if _is_transient(error.code, _labels(error)):
        return TransientStoreError(f"{where}: {error}")
    return PermanentStoreError(f"{where}: {error}")


def _labels(error: PyMongoError) -> list[str]:
    labels = getattr(error, "_error_labels", None)
    return sorted(labels) if labels else []


class _SpillErrors:
    """Map a driver error of a spill call to a store error."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        if isinstance(error, (ConnectionFailure, OperationFailure)):
            raise _store_error(error, self.what) from error


def _spill_id(host: str, score: int) -> str:
    """>>> _spill_id("http://a.test:80", 12)
    'http://a.test:80 12'
    """
    return f"{host} {score}"


def spill_append(db: Any, host: str, entries: Sequence[tuple[int, bytes]]) -> None:
    """Upsert by ``_id`` (host and score): a batch written twice is kept once."""
    if not entries:
        return
    ops = [
        ReplaceOne(
            {"_id": _spill_id(host, score)},
            {"host": host, "score": int(score), "member": bytes(member)},
            upsert=True,
        )
        for score, member in entries
    ]
    with _SpillErrors("spill append"):
        db[SPILL].bulk_write(ops, ordered=False)


def spill_take(db: Any, host: str, n: int) -> list[tuple[int, bytes]]:
    with _SpillErrors("spill take"):
        docs = list(
            db[SPILL]
            .find({"host": host}, {"score": 1, "member": 1})
            .sort([("score", 1)])
            .limit(int(n))
        )
    return [(int(d["score"]), bytes(d["member"])) for d in docs]


def spill_delete(db: Any, host: str, scores: Sequence[int]) -> None:
    if not scores:
        return
    with _SpillErrors("spill delete"):
        db[SPILL].delete_many({"_id": {"$in": [_spill_id(host, s) for s in scores]}})


def spill_clear(db: Any) -> int:
    with _SpillErrors("spill clear"):
        return int(db[SPILL].delete_many({}).deleted_count)


def spill_count(db: Any, host: str | None = None) -> int:
    with _SpillErrors("spill count"):
        return int(db[SPILL].count_documents({} if host is None else {"host": host}))
