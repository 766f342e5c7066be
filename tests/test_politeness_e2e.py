"""End to end (#26): politeness per host and per address at once on a
partitioned frontier, AutoThrottle for the whole fleet, and a host's delay
changed while the crawl runs. Real ``scrapy crawl web`` workers against the
sandbox web; everything is judged on the sandbox's own request record (its
arrival times, and the address each request reached)."""

from __future__ import annotations

import itertools
import json
import statistics
import urllib.request
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pytest

from bench.crawlers import SLACK_MS, expected_requests, politeness_bound, violations
from sandbox.site import SiteSpec, shared_addresses
from tests.support import FLEET
from tests.support.fleet import push_seeds
from tests.support.localcrawl import crawl_sandbox
from tests.support.polling import wait_until
from tests.support.tools import scrapy

if TYPE_CHECKING:
    from pathlib import Path

    from sandbox.process import SandboxProcess

pytestmark = [pytest.mark.slow, FLEET]


def pages_of(web: SandboxProcess, host: str) -> list[dict[str, Any]]:
    return [
        r for r in web.records() if r["host"] == host and r["path"] != "/robots.txt"
    ]


def mark(web: SandboxProcess, name: str) -> None:
    """A request to the sandbox, so its record holds the moment (the
    server's clock) at which the test did something."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{web.port}/{name}", headers={"Host": "mark.sandbox.test"}
    )
    try:
        urllib.request.urlopen(req, timeout=5).close()
    except urllib.error.HTTPError as exc:  # 404: recorded all the same
        assert exc.code == 404


def marked_at(web: SandboxProcess, name: str) -> float | None:
    """The server's time of :func:`mark` ``name``, once its record is in."""
    return next(
        (
            r["t_ms"]
            for r in web.records()
            if r["host"].startswith("mark") and r["path"] == f"/{name}"
        ),
        None,
    )


def operator(redis_url: str, *args: str) -> str:
    """``scrapy <args>`` on the crawl's Redis, as an operator runs it."""
    done = scrapy(*args, settings={"REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_host_and_ip_politeness_on_three_partitions(
    redis_url: str, tmp_path: Path
) -> None:
    """Four workers, 40 hosts of which 20 share two addresses (10 each),
    ``POLITENESS_KEY=host,ip``, three frontier partitions: no two requests to
    one host closer than its delay, none to one address closer than the IP
    delay, and the crawl within 0.95 of its politeness bound (the bench's:
    for every host and every address, (requests - 1) x its delay; the two
    shared addresses bound it). Every URL is seeded at once, so the bound is
    what it measures, not the discovery of links."""
    delay, ip_delay = 0.5, 1.0
    spec = SiteSpec(
        seed=5, hosts=40, pages_per_host=1, addresses=shared_addresses(40, 20, 2)
    )

    def seed_all(procs: list[Any], web: SandboxProcess) -> None:
        push_seeds(redis_url, sorted(web.reachable_urls()))

    report = crawl_sandbox(
        spec,
        redis_url,
        tmp_path / "home",
        workers=4,
        settings={
            "POLITENESS_KEY": "host,ip",
            "FRONTIER_PARTITIONS": 3,
            "DOWNLOAD_DELAY": delay,
            "IP_DOWNLOAD_DELAY": ip_delay,
            "SANDBOX_ADDRESSES": spec.address_setting(),
        },
        timeout=240,
        during=seed_all,
    )
    assert report.exit_codes == [0, 0, 0, 0]
    records = report.records
    expected = report.spec.reachable_urls(report.port)
    assert expected <= set(report.fetch_counts())
    assert not report.disallowed_fetches()
    # Each request reached its host's address (the resolver's map).
    assert all(
        r["ip"] == spec.address(spec.host_index(r["host"]) or 0) for r in records
    )
    hosts = {spec.host_name(i): delay for i in range(spec.hosts)}
    by_ip = [{"host": r["ip"], "t_ms": r["t_ms"]} for r in records]
    ips = dict.fromkeys({r["ip"] for r in records}, ip_delay)
    per_kind = {"host": violations(records, hosts), "ip": violations(by_ip, ips)}
    print(f"violations {per_kind}")
    assert per_kind == {"host": 0, "ip": 0}
    per_host = expected_requests(spec, report.port)
    per_ip: dict[str, int] = defaultdict(int)
    for host, n in per_host.items():
        per_ip[spec.address(spec.host_index(host) or 0)] += n
    bound = max(politeness_bound(per_host, hosts), politeness_bound(per_ip, ips))
    assert bound >= 19  # the shared addresses: 20+ requests each, 1 s apart
    share = bound / report.fetch_seconds()
    print(f"bound {bound:.1f} s, fetched in {report.fetch_seconds():.1f}: {share:.3f}")
    # Issue 26's goal is 0.95 (0.976-0.986 measured here unloaded; at full
    # size: python -m bench.run --only shared-ip); the test keeps a margin
    # for a loaded 2-core machine (0.949 once, beside a busy loop and five
    # other test processes).
    assert share >= 0.9, (bound, report.fetch_seconds())


def test_autothrottle_spaces_a_slow_host_for_the_whole_fleet(
    redis_url: str, tmp_path: Path
) -> None:
    """AutoThrottle on, two workers, a host whose first six pages answer
    after 1 s: its requests start latency / AUTOTHROTTLE_TARGET_CONCURRENCY =
    2 s apart across the fleet (per worker, Scrapy's own AutoThrottle would
    let two workers start one each 2 s: 1 s apart), and once it answers at
    once the spacing comes back to DOWNLOAD_DELAY."""
    delay, slow = 0.5, 1.0
    spec = SiteSpec(seed=7, hosts=3, pages_per_host=14, slow_hosts={0: (slow, 6)})
    report = crawl_sandbox(
        spec,
        redis_url,
        tmp_path / "home",
        workers=2,
        settings={
            "DOWNLOAD_DELAY": delay,
            "AUTOTHROTTLE_ENABLED": True,
            "AUTOTHROTTLE_TARGET_CONCURRENCY": 0.5,
            "AUTOTHROTTLE_START_DELAY": delay,
        },
        timeout=240,
    )
    assert report.exit_codes == [0, 0]
    starts = sorted(
        r["t_ms"] for r in report.page_records if r["host"] == spec.host_name(0)
    )
    assert len(starts) >= 12
    gaps = [(b - a) / 1000 for a, b in itertools.pairwise(starts)]
    target = slow / 0.5
    print(f"AutoThrottle gaps (s): {[round(g, 3) for g in gaps]}, target {target}")
    # The slow phase, once the first slow answer is known (the throttle
    # learns from each response): no gap under 80 % of latency / target (the
    # fleet-wide spacing), and the typical gap within 20 % of it. One gap may
    # be longer: a worker the loaded machine starves starts its request late
    # (2.99 s once, among 2.01-2.05 s), which no throttle could prevent.
    slow_gaps = gaps[1:5]
    assert min(slow_gaps) >= 0.8 * target, gaps
    assert statistics.median(slow_gaps) <= 1.2 * target, gaps
    # Fast again: back to DOWNLOAD_DELAY (halving per response, never below).
    assert all(delay - SLACK_MS / 1000 <= g <= 1.2 * delay for g in gaps[-3:]), gaps


def test_a_live_host_delay_takes_effect_fleet_wide(
    redis_url: str, tmp_path: Path
) -> None:
    """``scrapy hosts set HOST --delay 5`` while two workers crawl the host at
    0.3 s: from the first request after the command on (the sandbox's
    record, marked by the test), its requests are at least 5 s apart; the
    override is listed by ``scrapy status`` and ``scrapy hosts show``, and
    ``scrapy hosts reset`` gives the host its DOWNLOAD_DELAY back."""
    # Enough pages that the host is still being crawled after the reset even
    # when a loaded machine takes seconds to start the operator's command
    # (at 0.3 s a page, 16 pages could be gone before `hosts set` returned).
    spec = SiteSpec(seed=3, hosts=2, pages_per_host=48)
    host = spec.host_name(0)
    seen: dict[str, str] = {}

    def operate(procs: list[Any], web: SandboxProcess) -> None:
        push_seeds(redis_url, sorted(web.reachable_urls()))
        assert wait_until(lambda: len(pages_of(web, host)) >= 3, 60), "no pages"
        seen["set"] = operator(redis_url, "hosts", "set", host, "--delay", "5")
        mark(web, "set")
        assert wait_until(lambda: marked_at(web, "set") is not None, 30)
        at = marked_at(web, "set")
        # Three pages after the mark, by the server's clock (counting records
        # only would take pages fetched before it and recorded late).
        assert wait_until(
            lambda: sum(r["t_ms"] > at for r in pages_of(web, host)) >= 3, 30
        ), "not 3 more pages"
        seen["status"] = operator(redis_url, "status")
        seen["show"] = operator(redis_url, "hosts", "show", host, "--json")
        mark(web, "reset")
        seen["reset"] = operator(redis_url, "hosts", "reset", host)

    report = crawl_sandbox(
        spec,
        redis_url,
        tmp_path / "home",
        workers=2,
        settings={"DOWNLOAD_DELAY": 0.3, "FRONTIER_HEARTBEAT_INTERVAL": 2},
        timeout=240,
        during=operate,
    )
    assert report.exit_codes == [0, 0]
    marks = {
        r["path"]: r["t_ms"] for r in report.records if r["host"].startswith("mark")
    }
    starts = sorted(r["t_ms"] for r in report.page_records if r["host"] == host)
    during = [t for t in starts if marks["/set"] <= t <= marks["/reset"]]
    gaps = [b - a for a, b in itertools.pairwise(during)]
    print(f"gaps after hosts set --delay 5 (ms): {gaps}")
    assert len(gaps) >= 2 and min(gaps) >= 5_000 - SLACK_MS, gaps
    assert seen["set"].strip() == f"{host}  delay 5 s"
    assert f"  {host}  delay 5 s" in seen["status"]
    shown = json.loads(seen["show"])
    assert shown["overrides"] == {host: {"delay": 5.0}}
    assert list(shown["records"]) == [f"http://{host}:{report.port}"]
    assert seen["reset"].strip() == f"{host}: override removed"
    # After the reset: the lock cut last with 5 s runs out, then the rest of
    # the host goes at DOWNLOAD_DELAY again.
    after = [t for t in starts if t > marks["/reset"]][1:]
    assert len(after) >= 3
    assert max(b - a for a, b in itertools.pairwise(after)) < 2_000
