"""End to end: a host whose name does not resolve ends within about a minute.

One real ``scrapy crawl web`` worker crawls the sandbox's ``dnsdown``
corner: a page linking :data:`sandbox.hostile.DNS_DOWN_LINKS` pages of a
host whose name does not resolve. Its robots.txt fetch fails to resolve and
each page then fails at once (``HostUnresolvable``), one per host spacing
(``DOWNLOAD_DELAY``, 1 s here), each retried once: before the DNS verdict
the host's last URL was given up about 2 x 40 spacings after its first (80
s here). Now once its name has failed to resolve for ``DNS_DOWN_AFTER``
every URL of it still waiting is dead-lettered as ``dns`` in one script,
and every dead letter, those of the script included, has its failed-page
record in the page store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pipelines.stores.sqlite import SQLiteStore
from sandbox.hostile import DNS_DOWN_HOST, DNS_DOWN_LINKS
from sandbox.site import SiteSpec
from tests.support.localcrawl import crawl_sandbox
from tests.support.outcomes import dead_letters, waiting_urls

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

DNS_DOWN_AFTER = 4
DOWNLOAD_DELAY = 1.0


def test_an_unresolvable_host_is_dead_lettered_as_a_whole(
    tmp_path: Path, redis_url: str
) -> None:
    spec = SiteSpec(seed=9, hosts=1, pages_per_host=2, features={"dnsdown"})
    settings = {
        "DNS_DOWN_AFTER": DNS_DOWN_AFTER,
        "DOWNLOAD_DELAY": DOWNLOAD_DELAY,
        "RANDOMIZE_DOWNLOAD_DELAY": False,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 6,
        "FRONTIER_HEARTBEAT_INTERVAL": 1,
    }
    report = crawl_sandbox(
        spec, redis_url, tmp_path, workers=1, settings=settings, timeout=150
    )
    assert report.exit_codes == [0], report.log_dir
    urls = {f"http://{DNS_DOWN_HOST}/p/{n}.html" for n in range(DNS_DOWN_LINKS)}
    dead = dead_letters(redis_url)
    assert urls <= set(dead), sorted(urls - set(dead))[:5]
    assert {dead[url]["reason"] for url in urls} == {"dns"}
    assert not urls & waiting_urls(redis_url)
    # Most were swept by the verdict (attempts 0), not fetched one by one.
    swept = [u for u in urls if dead[u]["attempts"] == 0]
    assert len(swept) >= DNS_DOWN_LINKS // 2, len(swept)
    span = max(dead[u]["last_failure"] for u in urls) - min(
        dead[u]["first_failure"] or dead[u]["last_failure"] for u in urls
    )
    # The verdict comes DNS_DOWN_AFTER after the robots.txt fetch, plus a
    # spacing and the retry of the page that failed first.
    assert span <= DNS_DOWN_AFTER + 6 * DOWNLOAD_DELAY, span
    logs = "".join(p.read_text() for p in report.log_dir.glob("*.log"))
    assert "does not resolve (for DNS_DOWN_AFTER" in logs
    # Every dead letter has its failed-page record, the swept ones included.
    store = SQLiteStore(tmp_path / "pages.sqlite3")
    for url in urls:
        page = store.get_page(url)
        assert page is not None, url
        assert page.metadata["status"] == 0
        assert page.metadata["error"], url
