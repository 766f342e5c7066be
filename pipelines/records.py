"""The exported form of a page: what feeds (``scrapy crawl web -o``) and
``scrapy export --format jsonl`` write.

One flat record per page: the stored metadata, minus the store's
bookkeeping (:data:`INTERNAL_FIELDS`), plus the extracted ``text``; the body
(decoded with the page's encoding) only when asked. Never a lease token, raw
headers (a non-HTML record's are shown by ``python -m pipelines.read
--headers``) or bytes: every value is a string, a number, a bool or None, so the
JSON, JSON lines, CSV and XML exporters all take it and every record has the
same fields in the same order (CSV takes its header from the first record).
"""

from __future__ import annotations

from typing import Any

from pipelines.stores.base import METADATA_FIELDS

# Store bookkeeping, meaningless outside the store.
INTERNAL_FIELDS = frozenset(
    {
        "_id",
        "stored_at",
        "compressed_size",
        "compression_ratio",
        "has_content",
        "history",  # a list: not a flat value (python -m pipelines.read --history)
        "headers",  # a list too (python -m pipelines.read --headers)
    }
)
# The fields of a record, in order: "id" (the page id, the store's _id) first.
RECORD_FIELDS: tuple[str, ...] = (
    "id",
    *(name for name in METADATA_FIELDS if name not in INTERNAL_FIELDS),
    "text",
)


def page_record(
    metadata: dict[str, Any], text: str | None, body: str | None = None
) -> dict[str, Any]:
    """The exported record of a page; ``body`` is added only when given.

    >>> r = page_record({"_id": "ab", "url": "http://a.test/", "stored_at": 1.0}, "hi")
    >>> r["id"], r["url"], r["text"], "stored_at" in r, "body" in r, r["title"]
    ('ab', 'http://a.test/', 'hi', False, False, None)
    """
    record: dict[str, Any] = {"id": metadata.get("_id")}
    for name in RECORD_FIELDS[1:-1]:
        record[name] = metadata.get(name)
    record["text"] = text or None
    if body is not None:
        record["body"] = body
    return record


def decode_body(body: bytes | None, encoding: str | None) -> str | None:
    """A body as text, with the page's encoding (undecodable bytes replaced).

    >>> decode_body("é".encode("latin-1"), "latin-1"), decode_body(None, None)
    ('é', None)
    """
    if body is None:
        return None
    return body.decode(encoding or "utf-8", "replace")
