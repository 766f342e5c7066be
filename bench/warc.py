"""Benchmark of the WARC writers: warcio (used) against FastWARC.

Run: ``python -m bench.warc [--pages 2000] [--size 20000]``. Writes the same
response records (HTTP header block + a random body of ``--size`` bytes) to
memory with warcio's ``WARCWriter`` (WARC/1.1, block and payload digests) and,
when the ``fastwarc`` package is installed (it is not a dependency), with
FastWARC's ``WarcRecord.write(checksum_data=True)``; uncompressed and gzip
(one member per record), and prints records per second. Also times
:class:`pipelines.export.WarcExport`, which adds a metadata record per page.

Settings read: none (command-line options only).
"""

from __future__ import annotations

import argparse
import io
import os
import time
from typing import Any

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from pipelines.export import WarcExport
from pipelines.stores.base import StoredPage


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f} records/s"


def bench_warcio(bodies: list[bytes], gzip: bool) -> float:
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=gzip, warc_version="WARC/1.1")
    start = time.perf_counter()
    for i, body in enumerate(bodies):
        headers = StatusAndHeaders(
            "200 OK",
            [("Content-Type", "text/html"), ("Content-Length", str(len(body)))],
            protocol="HTTP/1.1",
        )
        record = writer.create_warc_record(
            f"http://a.test/{i}", "response", payload=io.BytesIO(body),
            length=len(body), http_headers=headers,
        )  # fmt: skip
        writer.write_record(record)
    return time.perf_counter() - start


def bench_fastwarc(bodies: list[bytes], gzip: bool) -> float | None:
    try:
        from fastwarc.stream_io import GzipWriter
        from fastwarc.warc import WarcRecord, WarcRecordType
    except ImportError:
        return None
    out: Any = io.BytesIO()
    # FastWARC 2's GzipWriter, at zlib's default level as warcio uses.
    stream = GzipWriter(out, compression_level=6) if gzip else out
    start = time.perf_counter()
    for i, body in enumerate(bodies):
        http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
        http += b"Content-Length: %d\r\n\r\n" % len(body)
        record = WarcRecord()
        record.init_headers(WarcRecordType.response)
        record.set_bytes_content(http + body)
        record.headers["WARC-Target-URI"] = f"http://a.test/{i}"
        record.headers["Content-Type"] = "application/http; msgtype=response"
        record.write(stream, checksum_data=True)
    if gzip:
        stream.close()
    return time.perf_counter() - start


def bench_export(bodies: list[bytes]) -> float:
    pages = [
        StoredPage(f"http://a.test/{i}", {
            "_id": f"id{i}", "url": f"http://a.test/{i}", "status": 200,
            "content_type": "text/html", "fetched_at": 1e9 + i, "has_content": True,
        }, body)
        for i, body in enumerate(bodies)
    ]  # fmt: skip
    export = WarcExport(io.BytesIO(), gzip=False)
    start = time.perf_counter()
    for page in pages:
        export.write_page(page)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=str(__doc__).splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--size", type=int, default=20_000)
    args = parser.parse_args(argv)
    bodies = [os.urandom(args.size // 2).hex().encode() for _ in range(args.pages)]
    for gzip in (False, True):
        label = "gzip" if gzip else "plain"
        print(f"warcio   {label:5} {_rate(args.pages, bench_warcio(bodies, gzip))}")
        fast = bench_fastwarc(bodies, gzip)
        shown = _rate(args.pages, fast) if fast else "(fastwarc not installed)"
        print(f"fastwarc {label:5} {shown}")
    seconds = bench_export(bodies)
    print(f"WarcExport plain {_rate(args.pages, seconds)} (pages; 2 records each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
