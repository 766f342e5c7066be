"""The page store interface and the documents every store writes.

A store keeps two record kinds, after seed 000 section 4.6:

``pages_metadata``
    One small record per page, ``_id`` = the page id (the request fingerprint,
    so a re-fetch replaces its record): :data:`METADATA_FIELDS`. ``url`` (the
    URL that was scheduled, the key) is unique; ``final_url`` (the URL that
    answered, after redirects), ``domain``, ``fetched_at`` and
    ``content_hash`` are indexed.
``pages_content``
    The zlib-compressed body, ``_id`` = ``page_id`` = the metadata ``_id``
    (linked without a read-back): :data:`CONTENT_FIELDS`. Absent for failed
    pages, ``noindex`` pages and duplicates.
``pages_versions``
    The earlier contents of pages that changed (:data:`VERSION_FIELDS`): when
    a write replaces stored content by content of another hash, the stored
    one is copied here first (:func:`replaces_version`); the newest
    ``history_max`` per page are kept.
``spilled_requests``
    Requests waiting outside Redis (the frontier spill): ``host``,
    ``score``, ``member``, read per host in ``score`` order
    (``spill_append``, ``spill_take``, ``spill_delete``, ``spill_count``:
    the ``SpillStore`` protocol of :mod:`extensions.core.frontier.spill`).
``pages_simhash``
    The near-duplicate index: per original page (:func:`is_original`) with a
    SimHash, its four band values (:func:`simhash_bands`), indexed; rewritten
    with the page's metadata. With the ``content_hash`` index of
    ``pages_metadata`` it is the duplicate index of the whole crawl
    (:meth:`PageStore.find_original`); Redis only caches the newest pages.

Writes are idempotent upserts by ``_id``: a batch may be written twice (a retry
after a connection dropped mid-flush) with the same result.

``headers`` (non-HTML records: a PDF, an image...) holds the response's
headers as a list of ``[name, value]`` pairs (names lower-cased, in the
order received, ``Set-Cookie`` left out), at most
:data:`pipelines.batching.HEADERS_MAX_BYTES` of them; None for HTML pages
(their metadata is extracted) and failures. A list, not a mapping: a header
may repeat, and a name is never a MongoDB field name.

``filtered`` names the trap limit that refused a URL before it was ever
requested (``host_budget``, ``query_variants``, ``url_too_long``...; see
``extensions.spidermiddlewares.traps``): a *filtered record*, metadata only, with the
refusal in ``error``. It is written only where the page has no record yet:
a filtered record never replaces a stored page (a trap budget, counted in
a HyperLogLog, cannot tell a URL it admitted before), in one statement
(SQLite ``ON CONFLICT DO NOTHING``, MongoDB ``$setOnInsert``), so two
workers cannot race a fetched page out.

History (continuous crawling): each write of a page appends a visit to its
metadata's ``history`` list (:func:`visit`: fetched at, status, content hash,
changed or not), at most ``history_max`` (``PAGE_HISTORY_MAX``) of the most
recent kept. A ``304`` (not modified) is a visit only: the store sets
``checked_at`` and the history and leaves the stored page and content alone.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

# name -> SQL type (the SQLite store's columns; MongoDB keeps the same names).
METADATA_FIELDS: dict[str, str] = {
    "_id": "TEXT PRIMARY KEY",
    "url": "TEXT NOT NULL UNIQUE",
    "final_url": "TEXT",
    "domain": "TEXT",
    "status": "INTEGER",
    "error": "TEXT",
    "depth": "INTEGER",
    "referrer": "TEXT",
    "fetched_at": "REAL",
    "stored_at": "REAL",
    "content_type": "TEXT",
    "encoding": "TEXT",
    "size": "INTEGER",
    "compressed_size": "INTEGER",
    "compression_ratio": "REAL",
    "content_hash": "TEXT",
    "simhash": "TEXT",
    "text_length": "INTEGER",
    "links_count": "INTEGER",
    "title": "TEXT",
    "description": "TEXT",
    "canonical": "TEXT",
    "language": "TEXT",
    "etag": "TEXT",
    "last_modified": "TEXT",
    "noindex": "INTEGER",
    "nofollow": "INTEGER",
    "duplicate_of": "TEXT",
    "duplicate_kind": "TEXT",
    "duplicate_distance": "INTEGER",
    "has_content": "INTEGER",
    "worker": "TEXT",
    "checked_at": "REAL",
    "history": "TEXT",
    "headers": "TEXT",
    "filtered": "TEXT",
}
CONTENT_FIELDS: dict[str, str] = {
    "_id": "TEXT PRIMARY KEY",
    "page_id": "TEXT NOT NULL",
    "url": "TEXT",
    "html_compressed": "BLOB NOT NULL",
    "original_size": "INTEGER",
    "compressed_size": "INTEGER",
    "compression_ratio": "REAL",
    "encoding": "TEXT",
}
# Earlier contents of changed pages (continuous crawling): ``_id`` =
# "<page id>@<fetched_at of that version>", the newest ``history_max`` kept.
VERSION_FIELDS: dict[str, str] = {
    "_id": "TEXT PRIMARY KEY",
    "page_id": "TEXT NOT NULL",
    "url": "TEXT",
    "fetched_at": "REAL",
    "content_hash": "TEXT",
    "html_compressed": "BLOB NOT NULL",
    "encoding": "TEXT",
}
# The table / collection of requests waiting outside Redis (the frontier
# spill, extensions.core.frontier.spill): host, score (the frontier's order: priority,
# then
# arrival), member (the serialized request), indexed on (host, score). The
# store knows nothing of the frontier but this order.
SPILL = "spilled_requests"
# Indexed metadata fields besides _id and the unique url.
METADATA_INDEXES = ("domain", "fetched_at", "content_hash", "final_url")
BOOL_FIELDS = ("noindex", "nofollow", "has_content")
# Pages read per query by iter_pages: bounded memory, few round trips.
ITER_CHUNK = 200


class TransientStoreError(Exception):
    """The store could not take the batch now (network, failover, lock): the
    whole batch may be retried later, unchanged."""


class PermanentStoreError(Exception):
    """The store is unusable as configured (bad URI, no permission)."""


class StoreNotFoundError(PermanentStoreError):
    """``open(create=False)`` found no store where the settings point: no
    SQLite file, no MongoDB collection (readers say so rather than create an
    empty one)."""


@dataclass
class DocumentError:
    """One document the store refused for good (too large, duplicate url)."""

    page_id: str
    collection: str
    code: int | None
    message: str


@dataclass
class BatchResult:
    """What a :meth:`PageStore.write_batch` call did."""

    written: int = 0
    content_written: int = 0
    errors: list[DocumentError] = field(default_factory=list)


@dataclass
class StoredPage:
    """A page read back from a store: its metadata and decompressed body.

    ``content_from`` is the page id whose content ``body`` is: the page's own,
    or the original's when the page is a duplicate.
    """

    url: str
    metadata: dict[str, Any]
    body: bytes | None
    content_from: str | None = None

    @property
    def text(self) -> str | None:
        if self.body is None:
            return None
        return self.body.decode(self.metadata.get("encoding") or "utf-8", "replace")


@runtime_checkable
class PageStore(Protocol):
    """What the storage pipeline needs from a page store.

    ``write_batch`` runs in the pipeline's writer thread; it raises
    :class:`TransientStoreError` when the whole batch should be retried and
    reports per-document permanent errors in :class:`BatchResult`. Each
    content document is written only when its metadata document was, and a
    metadata document without content removes any content left by an earlier
    fetch of the page.

    Readers (``python -m pipelines.read``, ``scrapy export``) open with
    ``create=False``: a store that does not exist raises
    :class:`StoreNotFoundError` instead of being created empty.
    ``iter_pages`` yields pages in ``(fetched_at, _id)`` order, reading in
    chunks (never the whole store at once); ``host`` matches the metadata
    ``domain`` (the URL's lower-cased host name), ``since`` is a Unix time
    compared with ``fetched_at``.
    """

    def open(self, create: bool = True) -> None: ...

    def close(self) -> None: ...

    def write_batch(
        self,
        metadata_docs: list[dict[str, Any]],
        content_docs: list[dict[str, Any]],
    ) -> BatchResult: ...

    def get_page(self, url: str) -> StoredPage | None:
        """The page stored under ``url``, else the newest page whose
        redirects ended at ``url`` (its ``final_url``), else None."""
        ...

    def iter_pages(
        self, host: str | None = None, since: float | None = None
    ) -> Iterator[StoredPage]: ...

    def count(self) -> int: ...

    def get_versions(self, url: str) -> list[StoredPage]:
        """The earlier contents of ``url``, newest first (metadata:
        ``fetched_at``, ``content_hash``)."""
        ...

    def find_original(
        self,
        page_id: str,
        content_hash: str | None,
        simhash: int | None,
        max_distance: int,
        max_candidates: int,
    ) -> Original | None:
        """The stored original the page duplicates, if any: one whose
        content hash is ``content_hash`` (exact), else the nearest whose
        SimHash is within ``max_distance`` (near; candidates come from the
        SimHash band index, at most ``max_candidates`` per band). Originals
        are pages stored with their content; ``page_id`` itself never
        matches (a re-fetch is not its own duplicate). Runs in a thread."""
        ...


NOT_MODIFIED = 304


def visit(doc: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """The history entry of writing ``doc`` over ``previous`` (the stored
    metadata, None for a new page). ``changed``: None for a failed fetch
    (nothing to compare), True for a first fetch or a new content hash.

    >>> visit({"fetched_at": 2.0, "status": 200, "content_hash": "b"},
    ...       {"content_hash": "a"})["changed"]
    True
    >>> visit({"fetched_at": 2.0, "status": 304}, {"content_hash": "a"})
    {'fetched_at': 2.0, 'status': 304, 'content_hash': 'a', 'changed': False}
    """
    status = doc.get("status") or 0
    old = previous.get("content_hash") if previous else None
    if status == NOT_MODIFIED:
        return {"fetched_at": doc.get("fetched_at"), "status": status,
                "content_hash": old, "changed": False}  # fmt: skip
    new = doc.get("content_hash")
    changed = None if doc.get("error") or not new else (previous is None or new != old)
    return {"fetched_at": doc.get("fetched_at"), "status": status,
            "content_hash": new, "changed": changed}  # fmt: skip


def replaces_version(doc: dict[str, Any], previous: dict[str, Any] | None) -> bool:
    """Whether writing ``doc`` replaces stored content by another version
    (so the stored one is kept in ``pages_versions`` first).

    >>> replaces_version({"has_content": True, "content_hash": "b", "status": 200},
    ...                  {"has_content": True, "content_hash": "a"})
    True
    >>> replaces_version({"has_content": True, "content_hash": "a", "status": 200},
    ...                  {"has_content": True, "content_hash": "a"})
    False
    """
    return bool(
        previous
        and previous.get("has_content")
        and doc.get("has_content")
        and doc.get("status") != NOT_MODIFIED
        and doc.get("content_hash") != previous.get("content_hash")
    )


def with_visit(
    history: list[dict[str, Any]] | None, entry: dict[str, Any], limit: int
) -> list[dict[str, Any]]:
    """``history`` with ``entry`` appended, the ``limit`` most recent kept.

    >>> with_visit([{"fetched_at": 1}, {"fetched_at": 2}], {"fetched_at": 3}, 2)
    [{'fetched_at': 2}, {'fetched_at': 3}]
    >>> with_visit(None, {"fetched_at": 1}, 0)
    []
    >>> with_visit([{"fetched_at": 1, "changed": True}],
    ...            {"fetched_at": 1, "changed": False}, 5)  # a batch written twice
    [{'fetched_at': 1, 'changed': True}]
    """
    if limit <= 0:
        return []
    last = history[-1] if history else None
    if last is not None and last.get("fetched_at") == entry.get("fetched_at"):
        # The same fetch written again (a retried batch): it is recorded, and
        # its first entry knew whether it changed.
        return history[-limit:] if history else []
    return [*(history or []), entry][-limit:]


@dataclass(frozen=True)
class Original:
    """What :meth:`PageStore.find_original` found: ``kind`` is ``"exact"``
    or ``"near"``, ``page_id`` the original, ``distance`` the Hamming
    distance of the SimHashes (0 for an exact match)."""

    kind: str
    page_id: str
    distance: int = 0


def simhash_bands(simhash: str | None) -> list[int]:
    """The band index values of a SimHash (16 hex digits): ``band << 16 |
    block`` for its four 16-bit blocks, low block first. Two SimHashes
    within Hamming distance 3 share one of them (pigeonhole).

    >>> [hex(b) for b in simhash_bands("1111222233334444")]
    ['0x4444', '0x13333', '0x22222', '0x31111']
    >>> simhash_bands(None)
    []
    """
    if not simhash:
        return []
    value = int(simhash, 16)
    return [band << 16 | (value >> (16 * band)) & 0xFFFF for band in range(4)]


def is_original(doc: dict[str, Any]) -> bool:
    """A metadata document whose page other pages may duplicate: stored with
    its content (so not a failure, a ``noindex`` page nor a duplicate)."""
    return bool(doc.get("has_content")) and not doc.get("duplicate_of")


def nearest(
    simhash: int, candidates: Iterable[tuple[str, str]], max_distance: int
) -> Original | None:
    """The candidate ``(page id, SimHash hex)`` nearest ``simhash`` within
    ``max_distance`` (ties: the smallest page id, so every store agrees).

    >>> nearest(0b1011, [("b", "000000000000000f"), ("a", "0000000000000003")], 1)
    Original(kind='near', page_id='a', distance=1)
    >>> nearest(0, [("a", "00000000000000ff")], 3) is None
    True
    """
    best: tuple[int, str] | None = None
    for page_id, other in candidates:
        distance = (simhash ^ int(other, 16)).bit_count()
        if distance <= max_distance and (best is None or (distance, page_id) < best):
            best = (distance, page_id)
    return None if best is None else Original("near", best[1], best[0])


def content_source(meta: dict[str, Any]) -> str | None:
    """The page id whose content is this page's body: its own, or the
    original's for a duplicate (None: no content)."""
    if meta.get("has_content"):
        return str(meta["_id"])
    dup = meta.get("duplicate_of")
    return str(dup) if dup else None


def assemble_pages(
    metas: list[dict[str, Any]],
    compressed_bodies: Callable[[list[str]], dict[str, bytes]],
) -> list[StoredPage]:
    """The pages of metadata documents ``metas``, with their bodies: what
    every store's ``get_page`` and ``iter_pages`` return.
    ``compressed_bodies(ids)`` reads the ``html_compressed`` of the content
    documents ``ids`` (in one query; ids without content are left out).
    Boolean fields are made ``bool`` whatever the store keeps (SQLite: 0/1).

    >>> pages = assemble_pages(
    ...     [{"_id": "p", "url": "http://a.test/", "has_content": 1},
    ...      {"_id": "d", "url": "http://a.test/d", "duplicate_of": "p"},
    ...      {"_id": "e", "url": "http://a.test/e", "has_content": 0}],
    ...     lambda ids: {i: zlib.compress(b"hi") for i in ids if i == "p"})
    >>> [(p.body, p.content_from) for p in pages]
    [(b'hi', 'p'), (b'hi', 'p'), (None, None)]
    >>> pages[0].metadata["has_content"]
    True
    """
    for meta in metas:
        for name in BOOL_FIELDS:
            if meta.get(name) is not None:
                meta[name] = bool(meta[name])
    sources = [content_source(m) for m in metas]
    wanted = sorted({s for s in sources if s})
    bodies = compressed_bodies(wanted) if wanted else {}
    pages = []
    for meta, source in zip(metas, sources, strict=True):
        blob = bodies.get(source) if source else None
        body = None if blob is None else decompress(bytes(blob))
        pages.append(
            StoredPage(meta["url"], meta, body, source if body is not None else None)
        )
    return pages


def decompress(blob: bytes) -> bytes:
    """>>> decompress(zlib.compress(b"abc"))
    b'abc'
    """
    return zlib.decompress(blob)
