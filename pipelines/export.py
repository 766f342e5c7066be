"""Export stored pages: JSON lines of metadata and text, or WARC 1.1.

Both read through :meth:`~pipelines.stores.base.PageStore.iter_pages`, so
they work on any page store. ``scrapy export`` (``webcrawl.commands.export``)
is the command line; these functions take an open store and a binary file.

WARC (written with warcio, read back by ``warcio check`` / ``warcio index``):

- one ``warcinfo`` record first;
- per page with its own stored body: a ``response`` record for the URL that
  answered (``final_url``) whose HTTP payload is the stored body, byte for
  byte (the body Scrapy received, after any Content-Encoding was undone). The
  store keeps the status, ``Content-Type``, ``ETag`` and ``Last-Modified`` of
  a page, not every header, so the HTTP header block is rebuilt from those and
  ``Content-Length``; no request record is written, since the store does not
  keep the request headers that were sent;
- per page: a ``metadata`` record (``application/json``: the page's record of
  :mod:`pipelines.records`, without the text) for the URL that was scheduled,
  ``WARC-Concurrent-To`` its response record. Failed, ``noindex`` and
  duplicate pages (whose own body is not stored) get only this one: no
  ``revisit`` record, since a duplicate here means the same extracted text
  (or a near one), not an identical payload.

Reads no settings.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from http import HTTPStatus
from typing import IO, TYPE_CHECKING, Any

from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

from pipelines.dedup import EXACT
from pipelines.processing import extract
from pipelines.records import decode_body, page_record

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pipelines.stores.base import StoredPage

WARC_VERSION = "WARC/1.1"
SOFTWARE = "webcrawl (warcio)"


def own_body(page: StoredPage) -> bytes | None:
    """The body stored for the page itself. None for a duplicate: the store
    kept its original's body, and even an exact duplicate (same extracted
    text) may differ in its bytes (a title, a date)."""
    return page.body if page.metadata.get("has_content") else None


def page_text(page: StoredPage) -> str | None:
    """The page's extracted text, recomputed from the stored body (the store
    keeps the body, not the text): its own, or an exact duplicate's original's
    (the same text by definition); None for a non-HTML body."""
    meta = page.metadata
    if page.body is None or not (
        meta.get("has_content") or meta.get("duplicate_kind") == EXACT
    ):
        return None
    ctype = meta.get("content_type")
    if ctype and "html" not in ctype.lower():
        return None
    headers = {"content-type": [ctype]} if ctype else {}
    url = meta.get("final_url") or page.url
    return extract(page.body, url, headers, meta.get("encoding")).text


def write_jsonl(
    pages: Iterable[StoredPage], out: IO[bytes], with_body: bool = False
) -> int:
    """One JSON object per page (:func:`pipelines.records.page_record`);
    returns the number written."""
    n = 0
    for page in pages:
        decoded = None
        if with_body:
            decoded = decode_body(own_body(page), page.metadata.get("encoding"))
        record = page_record(page.metadata, page_text(page), decoded)
        out.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
        n += 1
    return n


def warc_date(timestamp: float | None) -> str:
    """>>> warc_date(0.5)
    '1970-01-01T00:00:00.500000Z'
    """
    when = datetime.fromtimestamp(timestamp or 0.0, UTC)
    return str(datetime_to_iso_date(when.replace(tzinfo=None), use_micros=True))


def http_headers(meta: dict[str, Any], body: bytes) -> StatusAndHeaders:
    """The HTTP response header block rebuilt from the stored metadata."""
    status = int(meta.get("status") or 200)
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    headers = []
    for name, field in (
        ("Content-Type", "content_type"),
        ("ETag", "etag"),
        ("Last-Modified", "last_modified"),
    ):
        if meta.get(field):
            headers.append((name, str(meta[field])))
    headers.append(("Content-Length", str(len(body))))
    return StatusAndHeaders(f"{status} {reason}".strip(), headers, protocol="HTTP/1.1")


class WarcExport:
    """Writes pages as WARC records (module docstring) to a binary file;
    ``gzip`` compresses each record as its own member (``.warc.gz``)."""

    def __init__(self, out: IO[bytes], gzip: bool = True, filename: str = "") -> None:
        self.writer = WARCWriter(out, gzip=gzip, warc_version=WARC_VERSION)
        self.filename = filename
        self.counts: dict[str, int] = {}

    def write_warcinfo(self, info: dict[str, str] | None = None) -> None:
        fields = {"software": SOFTWARE, "format": "WARC File Format 1.1"}
        fields.update(info or {})
        self._write(self.writer.create_warcinfo_record(self.filename, fields))

    def write_page(self, page: StoredPage) -> None:
        meta = page.metadata
        date = warc_date(meta.get("fetched_at"))
        uri = str(meta.get("final_url") or page.url)
        body = own_body(page)
        extra = {"WARC-Date": date}
        if body is not None:
            response = self.writer.create_warc_record(
                uri,
                "response",
                payload=io.BytesIO(body),
                length=len(body),
                http_headers=http_headers(meta, body),
                warc_headers_dict={"WARC-Date": date},
            )
            self._write(response)
            extra["WARC-Concurrent-To"] = response.rec_headers.get_header(
                "WARC-Record-ID"
            )
        record = page_record(meta, None)
        del record["text"]
        data = json.dumps(record, ensure_ascii=False, sort_keys=True).encode("utf-8")
        self._write(
            self.writer.create_warc_record(
                page.url,
                "metadata",
                payload=io.BytesIO(data),
                length=len(data),
                warc_content_type="application/json",
                warc_headers_dict=extra,
            )
        )

    def _write(self, record: Any) -> None:
        self.writer.write_record(record)
        kind = record.rec_type
        self.counts[kind] = self.counts.get(kind, 0) + 1


def write_warc(
    pages: Iterable[StoredPage],
    out: IO[bytes],
    gzip: bool = True,
    filename: str = "",
    info: dict[str, str] | None = None,
) -> dict[str, int]:
    """Write ``pages`` as one WARC file (``info``: more ``warcinfo`` fields);
    returns the records written by type."""
    export = WarcExport(out, gzip=gzip, filename=filename)
    export.write_warcinfo(info)
    for page in pages:
        export.write_page(page)
    return export.counts
