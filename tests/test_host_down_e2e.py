"""End to end: a server that stays down ends within a bounded total.

One real ``scrapy crawl web`` worker crawls the sandbox's ``hostdown`` corner:
a page linking :data:`sandbox.hostile.HOST_DOWN_LINKS` pages of a host that
refuses every connection. Its robots.txt is tried ``ROBOTS_DOWN_AFTER``
times, then its pages fail (``HostDown``) and the circuit breaker opens,
parking it for ``BREAKER_COOLDOWN`` (300 s, left at its default). Before the
host-down verdict, its URLs then waited behind doubling parks, each with
four attempts of its own, and the crawl closed with them still waiting. Now
once it has failed for ``HOST_DOWN_AFTER`` every one of its URLs is
dead-lettered (``host_down``, in one script), the crawl closes by itself,
and the span from the host's first to its last dead letter, on Redis's
clock, stays within ``HOST_DOWN_AFTER`` plus the robots.txt tries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from extensions.utils.hosts import host_partition
from pipelines.stores.sqlite import SQLiteStore
from sandbox.hostile import DOWN_HOST, HOST_DOWN_LINKS
from sandbox.site import SiteSpec
from tests.support.localcrawl import crawl_sandbox
from tests.support.outcomes import dead_letters, waiting_urls

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

HOST_DOWN_AFTER = 5
# robots.txt tried at 0, 1, 3 and 7 s (ROBOTS_DOWN_AFTER=4), then pages.
ROBOTS_TRIES_SECONDS = 7


# With 3 partitions the down host lives in partition 2 (its queue, record
# and dead letters under another tag than {web}).
@pytest.mark.parametrize("partitions", [1, 3])
def test_a_host_that_stays_down_is_dead_lettered_as_a_whole(
    tmp_path: Path, redis_url: str, partitions: int
) -> None:
    spec = SiteSpec(seed=9, hosts=1, pages_per_host=2, features={"hostdown"})
    settings = {
        "RETRY_DELAY_SCALE": 0.1,
        "ROBOTS_RETRY_INITIAL": 1,
        "HOST_DOWN_AFTER": HOST_DOWN_AFTER,
        "DOWNLOAD_DELAY": 0.2,
        # Longer than the robots.txt tries' back-off (1 + 2 + 4 s), when
        # nothing is leased: the fleet must not close before the verdict.
        # (6 s held only while pages took the 5 s batch timer to be stored.)
        "MAX_IDLE_TIME_BEFORE_CLOSE": 10,
        "FRONTIER_PARTITIONS": partitions,
    }
    report = crawl_sandbox(
        spec, redis_url, tmp_path, workers=1, settings=settings, timeout=120
    )
    assert report.exit_codes == [0], report.log_dir
    urls = {f"http://{DOWN_HOST}/p/{n}.html" for n in range(HOST_DOWN_LINKS)}
    dead = dead_letters(redis_url, partitions)
    assert urls <= set(dead), sorted(urls - set(dead))[:5]
    reasons = [dead[url]["reason"] for url in urls]
    # The first few may end as connection failures before the verdict.
    assert reasons.count("host_down") >= HOST_DOWN_LINKS - 5, reasons
    assert set(reasons) <= {"host_down", "connection"}, reasons
    assert not urls & waiting_urls(redis_url, partitions)
    span = max(dead[u]["last_failure"] for u in urls) - min(
        dead[u]["first_failure"] or dead[u]["last_failure"] for u in urls
    )
    assert span <= HOST_DOWN_AFTER + ROBOTS_TRIES_SECONDS + 5, span
    logs = "".join(p.read_text() for p in report.log_dir.glob("*.log"))
    assert "judged down" in logs
    # Every dead letter has its failed-page record, those the verdict's
    # script and the commit wrote included (handed to the store by the
    # scheduler: dlq:unrecorded).
    store = SQLiteStore(tmp_path / "pages.sqlite3")
    missing = [u for u in sorted(urls) if store.get_page(u) is None]
    assert not missing, missing[:5]
    assert host_partition(f"http://{DOWN_HOST}", partitions) == partitions - 1
