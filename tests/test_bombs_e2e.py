"""End to end: compression bombs are cut off early, with bounded memory.

One real ``scrapy crawl web`` worker crawls the sandbox's ``bomb`` corner
(:data:`sandbox.hostile.BOMB_PATHS`): a gzip, a deflate and a brotli body of
a few hundred KB to 2 MB, each inflating to 2 GiB. Scrapy's
HttpCompressionMiddleware decompresses in chunks and stops once
``DOWNLOAD_MAXSIZE`` is passed, so each URL ends in the dead-letter queue as
``too_large`` and the worker's peak resident memory (``VmHWM`` of
``/proc/<pid>/status``, read while it runs) stays far below a bomb's size.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from sandbox.hostile import BOMB_PATHS, BOMB_SIZE
from sandbox.site import SiteSpec
from tests.support.localcrawl import crawl_sandbox
from tests.support.outcomes import dead_letters

if TYPE_CHECKING:
    from pathlib import Path

    from sandbox.process import SandboxProcess

pytestmark = pytest.mark.slow

# A worker peaks at ~170 MB here; DOWNLOAD_MAXSIZE (16 MiB, webcrawl.settings)
# bounds a decompressed body. A bomb inflated in full would be 2 GiB.
PEAK_RSS_LIMIT = 400 * 1024**2


def _peak_rss(pid: int) -> int:
    """The process's peak resident set size in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


def test_bombs_are_dead_lettered_too_large_with_bounded_memory(
    tmp_path: Path, redis_url: str
) -> None:
    peaks: list[int] = []

    def watch(procs: list[Any], web: SandboxProcess) -> None:
        (proc,) = procs
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _peak_rss(proc.pid))
            time.sleep(0.05)
        peaks.append(peak)

    spec = SiteSpec(seed=5, hosts=1, pages_per_host=2, features={"bomb"})
    # One host: 0.1 s apart, not the project's 1 s (politeness is not the
    # claim here; the host lock still fetches one bomb at a time).
    report = crawl_sandbox(
        spec, redis_url, tmp_path, workers=1, timeout=120, during=watch,
        settings={"DOWNLOAD_DELAY": 0.1},
    )  # fmt: skip
    assert report.exit_codes == [0], report.log_dir
    host = f"site-{spec.trap_host:03d}.sandbox.test"
    urls = [f"http://{host}:{report.port}{path}" for path in BOMB_PATHS]
    fetches = report.fetch_counts()
    assert all(fetches[url] == 1 for url in urls), fetches
    dead = dead_letters(redis_url)
    assert {url: dead[url]["reason"] for url in urls if url in dead} == dict.fromkeys(
        urls, "too_large"
    )
    assert 0 < peaks[0] < PEAK_RSS_LIMIT < BOMB_SIZE, peaks
