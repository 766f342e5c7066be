"""Smoke test of the benchmark suite (``python -m bench.run --quick``).

It crawls the small quick-mode web with every crawler and measures memory on
2,000 requests, then checks that the tables came out with the three crawlers
in them. It asserts no timing: the machines are shared and noisy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from bench import run

if TYPE_CHECKING:
    from pathlib import Path


def test_quick_sizes_fit_the_crawlers() -> None:
    # The quick web is small enough for CI yet has robots.txt, several hosts
    # and pages behind the root page.
    assert run.QUICK.repeats == 1
    assert run.QUICK.unthrottled.hosts > 1
    assert len(run.QUICK.unthrottled.reachable_urls(1, True)) > 20


@pytest.mark.slow
def test_quick_run_prints_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "latest.md"
    code = run.main(["--quick", "--only", "unthrottled,memory", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    written = out.read_text()
    for text in (printed, written):
        assert "### unthrottled" in text
        assert "### memory" in text
        for column in ("stock Scrapy", "scrapy-redis x1", "webcrawl x1", "webcrawl x2"):
            assert f" {column} |" in text
        assert "Failed runs" not in text  # every crawler ran to completion
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in written.splitlines()
        if line.startswith("| ")
    }
    # Every crawler fetched the whole quick web (the same count in each column).
    fetched = rows["pages fetched"]
    assert len(set(fetched)) == 1
    assert int(fetched[0]) > 0
    assert rows["reachable pages missed"] == ["0"] * 4
    assert rows["bytes per queued request"][0] != "n/a"
