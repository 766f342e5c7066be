"""End to end: a response nobody can decode ends in the dead-letter queue.

One real ``scrapy crawl web`` worker crawls the sandbox's ``unparseable``
corner (:data:`sandbox.hostile.UNPARSEABLE_PATHS`): a corrupt gzip stream,
plain bytes labelled gzip and bytes no brotli decoder takes. Scrapy's
HttpCompressionMiddleware fails on each; the failure policy classes it
``unparseable`` (README failure table: terminal, one attempt), so each URL is
fetched exactly once (judged on the sandbox's request record), dead-lettered
with that reason and the request as first queued, and stored with its error;
the crawl closes by itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sandbox.hostile import UNPARSEABLE_PATHS
from sandbox.site import SiteSpec
from tests.support.localcrawl import crawl_sandbox
from tests.support.outcomes import dead_letters, stored_urls

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


def test_undecodable_responses_are_dead_lettered_unparseable(
    tmp_path: Path, redis_url: str
) -> None:
    spec = SiteSpec(seed=6, hosts=1, pages_per_host=2, features={"unparseable"})
    report = crawl_sandbox(
        spec,
        redis_url,
        tmp_path,
        workers=1,
        timeout=90,
        # One host: 0.1 s apart, not the project's 1 s.
        settings={"DOWNLOAD_DELAY": 0.1},
    )
    assert report.exit_codes == [0], report.log_dir
    host = f"site-{spec.trap_host:03d}.sandbox.test"
    urls = [f"http://{host}:{report.port}{path}" for path in UNPARSEABLE_PATHS]
    fetches = report.fetch_counts()
    assert {url: fetches[url] for url in urls} == dict.fromkeys(urls, 1)
    dead = dead_letters(redis_url)
    for url in urls:
        letter = dead[url]
        assert letter["reason"] == "unparseable" and letter["attempts"] == 1, letter
        assert letter["error"], letter
        assert url in letter["request"]
    pages = stored_urls(tmp_path)
    for url in urls:
        record = pages[url].metadata
        assert record["error"] and not record["has_content"], record
    # The rest of the site was crawled as usual.
    assert report.spec.reachable_urls(report.port) <= set(pages)
