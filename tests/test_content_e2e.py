"""End to end: non-HTML responses and hostile charset labels.

One real ``scrapy crawl web`` worker crawls the sandbox's ``content`` corner
(:mod:`sandbox.hostile`). Pages labelled ``charset=base64`` (header) or
``<meta charset=rot13>`` are decoded with a fallback, stored with status 200
and their links followed. Of the files ``/content/files.html`` links, the PDF
and an extensionless ``application/octet-stream`` are fetched and stored as
metadata records (content type, size, hash, headers; no text), while the
PNG and the zip are never requested (``LINK_SKIP_EXTENSIONS``) and each skip is counted.
What was fetched is judged on the sandbox's request record.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

import pytest

from sandbox.hostile import CONTENT_FETCHED, CONTENT_FILES, HOSTILE_LABELS
from sandbox.site import SiteSpec
from tests.support.localcrawl import crawl_sandbox
from tests.support.outcomes import stored_urls
from tests.support.tools import run_tool

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


def test_hostile_labels_and_non_html_files(tmp_path: Path, redis_url: str) -> None:
    spec = SiteSpec(seed=8, hosts=1, pages_per_host=2, features={"content"})
    # One host: 0.1 s apart, not the project's 1 s (politeness is not the
    # claim here).
    report = crawl_sandbox(
        spec, redis_url, tmp_path, workers=1, timeout=90,
        settings={"DOWNLOAD_DELAY": 0.1},
    )  # fmt: skip
    assert report.exit_codes == [0], report.log_dir
    host = f"site-{spec.trap_host:03d}.sandbox.test"

    def url(path: str) -> str:
        return f"http://{host}:{report.port}{path}"

    pages = stored_urls(tmp_path)
    fetches = report.fetch_counts()
    for path, (_where, label) in HOSTILE_LABELS.items():
        record = pages[url(path)].metadata
        assert record["status"] == 200 and record["error"] is None, record
        assert record["encoding"] == "utf-8" and "déjà vu" in pages[url(path)].text
        # Its link was followed.
        reached = url(f"/content/reached-{label}.html")
        assert fetches[reached] == 1 and pages[reached].metadata["status"] == 200

    for path in CONTENT_FETCHED:
        ctype, body = CONTENT_FILES[path]
        record = pages[url(path)].metadata
        assert fetches[url(path)] == 1
        assert record["status"] == 200 and record["error"] is None, record
        assert record["content_type"] == ctype and record["size"] == len(body)
        assert record["content_hash"] == hashlib.sha256(body).hexdigest()
        assert record["text_length"] == 0 and record["links_count"] == 0
        # Its response headers are kept, and pipelines.read shows them.
        assert ["content-type", ctype] in record["headers"], record["headers"]
        read = run_tool("-m", "pipelines.read", "--headers", url(path),
                        "-s", f"WEBCRAWL_HOME={tmp_path}")  # fmt: skip
        assert read.returncode == 0, read.stderr.decode()
        assert f"content-type: {ctype}" in read.stdout.decode().splitlines()

    skipped = set(CONTENT_FILES) - set(CONTENT_FETCHED)
    assert all(fetches[url(path)] == 0 for path in skipped)
    logs = "".join(p.read_text() for p in report.log_dir.glob("*.log"))
    counted = dict(re.findall(r"'links/skipped/(\w+)': (\d+)", logs))
    assert counted == {"png": "1", "zip": "1"}, counted
