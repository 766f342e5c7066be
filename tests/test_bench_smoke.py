"""Smoke test of the benchmark suite (``python -m bench.run --quick``).

It crawls the small quick-mode web with every crawler (bare Scrapy
included) and measures memory on 2,000 requests, then checks that the tables
and the goals came out with every crawler in them. It asserts no timing: the
machines are shared and noisy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from bench import run
from bench.crawlers import (
    Crawler,
    address_requests,
    expected_requests,
    host_delays,
    politeness_bound,
)

if TYPE_CHECKING:
    from pathlib import Path


def test_full_sizes_mean_something() -> None:
    """The full run crawls at least 5,000 pages unthrottled and keeps the
    polite crawls fetching for 60 s or more, with 2 and 4 webcrawl workers."""
    assert len(run.FULL.unthrottled.reachable_urls(1, True)) >= 5000
    assert Crawler("bare") in run.FULL.unthrottled_crawlers
    shapes = [
        (run.FULL.uniform, run.FULL.uniform_delay),
        (run.FULL.skewed, run.FULL.skewed_delay),
    ]
    for spec, delay in shapes:
        assert spec is not None
        bound = politeness_bound(expected_requests(spec, 1), host_delays(spec, delay))
        assert bound >= 60, (spec, bound)
    assert {Crawler("webcrawl", 2), Crawler("webcrawl", 4)} <= set(
        run.FULL.polite_crawlers
    )
    # The shared-IP web: its addresses bound it, 60 s or more.
    shared = run.FULL.shared_ip
    assert shared is not None
    delay, ip_delay = run.FULL.shared_ip_delays
    expected = expected_requests(shared, 1)
    per_ip = address_requests(shared, expected)
    assert len(per_ip) == 22  # two shared, twenty of their own
    ip_bound = politeness_bound(per_ip, dict.fromkeys(per_ip, ip_delay))
    assert ip_bound >= 60
    assert ip_bound > politeness_bound(expected, host_delays(shared, delay))


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
        for column in (
            "bare Scrapy",
            "stock Scrapy",
            "scrapy-redis x1",
            "webcrawl x1",
            "webcrawl x2",
        ):
            assert f" {column} |" in text
        assert "Failed runs" not in text  # every crawler ran to completion
        assert "| webcrawl x1 / bare Scrapy, pages/s |" in text  # the goals
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in written.splitlines()
        if line.startswith("| ")
    }
    # Every crawler fetched the whole quick web (the same count in each column).
    fetched = rows["pages fetched"]
    assert len(set(fetched)) == 1
    assert int(fetched[0]) > 0
    assert rows["reachable pages missed"] == ["0"] * 5
    assert rows["bytes per queued request"][0] != "n/a"


def test_freshness_simulation_ranks_the_policies() -> None:
    """The freshness benchmark on a small measured-like web at a tight
    budget: the default policy (its price measured from the simulated
    fetcher) beats uniform and adaptive and spends the budget, the optimum
    (true rates) bounds all, and its simulated freshness matches the closed
    form."""
    from bench.freshness import (
        UNIT_S,
        FleetPlanner,
        OraclePlanner,
        PolicyPlanner,
        build_web,
        closed_freshness,
        oracle_intervals,
        simulate,
    )
    from extensions.extensions.recrawl import (
        START_PRICE_SHARE,
        Bounds,
        adaptive_interval,
        uniform_interval,
    )

    budget = 400 / 30
    web = build_web(400, budget, seed=1, profile="measured")
    u, n = web.uniform, len(web.urls)
    bounds = Bounds(u / 8, u, u * 8)
    uni = simulate(PolicyPlanner(uniform_interval, bounds, n), "u", web, budget)
    ada = simulate(PolicyPlanner(adaptive_interval, bounds, n), "a", web, budget)
    fleet = FleetPlanner(web, bounds)
    bud = simulate(fleet, "b", web, budget)
    oracle = oracle_intervals(web, budget)
    best = simulate(OraclePlanner(oracle), "o", web, budget)
    assert max(r.fetches - r.budget for r in (uni, ada, bud, best)) <= 1
    assert bud.fetches > 0.97 * bud.budget  # the measured price spends it
    assert fleet.bounds.price != START_PRICE_SHARE * u * UNIT_S  # it was solved
    assert uni.freshness < bud.freshness < best.freshness
    assert ada.freshness < bud.freshness
    assert best.freshness == pytest.approx(closed_freshness(web, oracle), abs=0.03)
