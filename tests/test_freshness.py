"""The freshness model (extensions.utils.freshness, and
extensions.extensions.recrawl.next_visit):
the price of a fetch from the fleet's measured capacity, and change rates
from every signal a server gives."""

from __future__ import annotations

from email.utils import formatdate
from typing import Any

import pytest

from extensions.extensions.recrawl import (
    MAX_STEP,
    START_PRICE_SHARE,
    Claimed,
    Planned,
    Visit,
    budgeted_interval,
    next_visit,
)
from extensions.utils.freshness import (
    LATE_TOLERANCE,
    MIN_BIN,
    Bounds,
    Demand,
    History,
    Priors,
    Window,
    interval_at,
    rate_bin,
    revisit_target,
)
from pipelines.items import PageItem

# The user's bounds of issue 25, at the price a fleet starts with.
BOUNDS = Bounds(3.0, 10.0, 120.0, START_PRICE_SHARE * 10.0)
FAST, MIDDLING, SLOW = 1 / 2, 1 / 30, 1 / 600  # changes per second


def fleet(capacity: float, demand: Demand, rounds: int = 40) -> float:
    """The price a fleet that fetches at most ``capacity`` revisits a second
    settles on: each round it measures a window (revisits fetched, how late),
    solves the price, and its pages follow the new price."""
    price = BOUNDS.default
    for _ in range(rounds):
        asked = demand.revisits_at(price, BOUNDS)
        fetched = min(asked, capacity)
        # Asked for more than it can fetch, the fleet's revisits come later
        # and later; otherwise on time.
        late = 0.0 if asked <= capacity else 2 * LATE_TOLERANCE
        window = Window(60.0, round(60 * fetched), round(60 * fetched), timed=600,
                        late=600 * late)  # fmt: skip
        target = revisit_target(window, asked, share=1.0)
        assert target is not None
        price = demand.price_for(target, BOUNDS)
    return price


def test_spare_capacity_chases_a_changing_page_to_the_minimum() -> None:
    """A fleet that can fetch far more than the schedule asks finds it out
    (its revisits come on time, it offers more) until every page that
    changes is visited at RECRAWL_MIN_INTERVAL; a static page stays at the
    maximum."""
    demand = Demand({rate_bin(MIDDLING): 36, MIN_BIN: 150})
    price = fleet(capacity=100.0, demand=demand)
    assert interval_at(MIDDLING, price, BOUNDS) == BOUNDS.min
    assert interval_at(SLOW, price, BOUNDS) == BOUNDS.min
    assert interval_at(0.0, price, BOUNDS) == BOUNDS.max
    # The policy takes the page there, at most halving its interval a visit.
    interval, steps = BOUNDS.max, 0
    while interval > BOUNDS.min:
        interval = budgeted_interval(
            Visit(interval, True, 200, rate=MIDDLING),
            Bounds(3.0, 10.0, 120.0, price),
        )
        steps += 1
    assert steps == 6  # 120 -> 60 -> 30 -> 15 -> 7.5 -> 3.75 -> 3


def test_saturation_lets_the_fastest_go_first() -> None:
    """A saturated fleet (its revisits late) asks for what it fetched, less
    a little, until the schedule fits: the price rises. The optimum's shape
    follows: the slow pages leave the minimum interval first (they are worth
    little to chase), and the pages that change too fast to keep are let go
    first, to the longest intervals, while the middling ones are still
    chased."""
    demand = Demand({rate_bin(FAST): 10, rate_bin(MIDDLING): 10, rate_bin(SLOW): 10})
    spare = fleet(capacity=100.0, demand=demand)
    assert {interval_at(r, spare, BOUNDS) for r in (FAST, MIDDLING, SLOW)} == {3.0}

    def intervals(capacity: float) -> tuple[float, float, float]:
        price = fleet(capacity, demand)
        # The schedule fits what the fleet fetches.
        asked = demand.revisits_at(price, BOUNDS)
        assert asked == pytest.approx(capacity, rel=0.2), (capacity, asked)
        fast, middling, slow = (
            interval_at(r, price, BOUNDS) for r in (FAST, MIDDLING, SLOW)
        )
        return fast, middling, slow

    fast, middling, slow = intervals(5.0)
    assert fast < middling < slow  # pressure: the slow ones wait first
    fast, middling, _ = intervals(1.0)
    assert fast > middling  # the fastest is let go before the middling
    fast, middling, _ = intervals(0.5)
    assert fast == BOUNDS.max and middling < BOUNDS.max / 2


def test_the_share_caps_revisits_only_while_saturated() -> None:
    late = Window(60.0, 600, 600, timed=600, late=600 * 2 * LATE_TOLERANCE)
    on_time = Window(60.0, 600, 600, timed=600)
    target = revisit_target(late, 10.0, 0.5)
    assert target is not None and target <= 5.0
    target = revisit_target(on_time, 10.0, 0.5)
    assert target is not None and target > 10.0


# -- signals ------------------------------------------------------------------

T = 1_800_000_000.0  # a time after every date below


def page(t: float, **kw: Any) -> PageItem:
    base: dict[str, Any] = {
        "url": "http://a.test/news/today.html",
        "final_url": "http://a.test/news/today.html",
        "status": 200,
        "fingerprint": "fp",
        "fetched_at": t,
    }
    return PageItem(**{**base, **kw})


def http(t: float) -> str:
    return formatdate(t, usegmt=True)


def revisits(since: float, visits_every: float, n: int, dated: bool) -> Planned:
    """``n`` visits, ``visits_every`` s apart, of a page rewritten ``since``
    s before each (so changed at every visit): with dates (its
    Last-Modified) or without (the content hash only)."""
    planned = None
    meta = None
    for k in range(n):
        t = T + k * visits_every
        changed_at = t - since
        headers = {"date": [http(t)], "etag": [f'"{k}"']}
        if dated:
            headers["last-modified"] = [http(changed_at)]
        kw = {"recrawl": meta} if meta is not None else {}
        chash = f"{k:016x}" * 4  # a new content hash at every visit
        planned = next_visit(page(t, headers=headers, content_hash=chash, **kw),
                             budgeted_interval, BOUNDS, t)  # fmt: skip
        assert planned is not None
        # Due one interval on; fetched visits_every on (late if longer).
        due = int((t + planned.record.interval) * 1000)
        meta = [*planned.record.fields(), {"due": due}]
    assert planned is not None
    return planned


def test_last_modified_dates_tell_how_fast_a_page_changes() -> None:
    """A page found changed at every visit 100 s apart says only "faster
    than once per 100 s" without dates (Cho and Garcia-Molina's estimate,
    ln(2n + 1) / 100 s); with Last-Modified, each change 10 s before the
    visit, the time known unchanged gives the rate itself (one change per
    10 s known unchanged)."""
    dated = revisits(10.0, 100.0, 12, dated=True).record.history
    blind = revisits(10.0, 100.0, 12, dated=False).record.history
    assert dated.blind == 0 and blind.blind == blind.changes == 11
    assert blind.rate() < 0.05
    # The first visit's date and the 11 changes, over 12 x 10 s.
    assert dated.rate() == pytest.approx(1 / 10, rel=0.01)


def test_a_new_page_is_dated_by_its_last_modified_or_its_sitemap_lastmod() -> None:
    """A page written 5 s before its first visit starts fast; one unchanged
    for a year says no more than "unchanged for longer than the first
    interval" (a static page may start changing), so it starts at most
    MAX_STEP x the default; a sitemap's <lastmod> dates a page the same
    way (W3C datetime)."""
    fresh = next_visit(page(T, headers={"last-modified": [http(T - 5)]}),
                       budgeted_interval, BOUNDS, T)  # fmt: skip
    old = next_visit(page(T, headers={"last-modified": [http(T - 365 * 86400)]}),
                     budgeted_interval, BOUNDS, T)  # fmt: skip
    sitemap = next_visit(page(T, lastmod="2020-01-15T08:00:00+00:00"),
                         budgeted_interval, BOUNDS, T)  # fmt: skip
    undated = next_visit(page(T), budgeted_interval, BOUNDS, T)
    assert fresh is not None and old is not None
    assert sitemap is not None and undated is not None
    assert fresh.record.history.rate() == pytest.approx(1 / 5)
    assert fresh.record.interval < BOUNDS.default < old.record.interval
    assert old.record.history.changes == 0 and old.record.history.rate() == 0
    assert old.record.interval == BOUNDS.default * MAX_STEP
    assert sitemap.record.history.changes == 0  # 2020: long before T
    recent = next_visit(page(T, lastmod=_w3c(T - 4)), budgeted_interval, BOUNDS, T)
    assert recent is not None and recent.record.history.rate() == pytest.approx(1 / 4)
    assert undated.record.history == History()


def _w3c(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).isoformat()


def test_an_etag_change_is_a_change_when_no_content_hash_tells() -> None:
    first = next_visit(page(T, headers={"etag": ['"a"']}), budgeted_interval,
                       BOUNDS, T)  # fmt: skip
    assert first is not None
    meta = [*first.record.fields(), {}]
    same = next_visit(page(T + 10, headers={"etag": ['"a"']}, recrawl=meta),
                      budgeted_interval, BOUNDS, T + 10)  # fmt: skip
    other = next_visit(page(T + 10, headers={"etag": ['"b"']}, recrawl=meta),
                       budgeted_interval, BOUNDS, T + 10)  # fmt: skip
    assert same is not None and same.outcome == "unchanged"
    assert other is not None and other.outcome == "changed"


def test_a_late_last_modified_or_one_without_a_change_dates_nothing() -> None:
    """A server that sets Last-Modified to the time of every answer (a
    dynamic page) while its content stays the same: the content hash says
    unchanged, and the date is not counted as a change."""
    lm = {"last-modified": [http(T)], "date": [http(T)]}
    first = next_visit(page(T, headers=lm, content_hash="a" * 64),
                       budgeted_interval, BOUNDS, T)  # fmt: skip
    assert first is not None
    meta = [*first.record.fields(), {}]
    later = {"last-modified": [http(T + 10)], "date": [http(T + 10)]}
    item = page(T + 10, headers=later, content_hash="a" * 64, recrawl=meta)
    again = next_visit(item, budgeted_interval, BOUNDS, T + 10)
    assert again is not None and again.outcome == "unchanged"
    assert again.record.history.changes == first.record.history.changes


def test_a_new_page_of_a_fast_changing_section_starts_fast() -> None:
    """Priors pooled over the URL's directory (then its host, then the
    crawl): once the worker has seen the pages of /news/ change every 10 s
    or so, a new /news/ page starts shorter than the default interval, and
    a new page of the same host's static /docs/ at the longest first
    interval."""
    priors = Priors()
    for k in range(10):
        meta = None
        for v in range(3):
            t = T + v * 30
            url = f"http://a.test/news/{k}.html"
            item = page(t, url=url, content_hash=f"{k}{v}".ljust(64, "0"),
                        headers={"date": [http(t)], "last-modified": [http(t - 10)]},
                        **({"recrawl": meta} if meta else {}))  # fmt: skip
            planned = next_visit(item, budgeted_interval, BOUNDS, t, priors)
            assert planned is not None
            meta = [*planned.record.fields(), {"due": int((t + 30) * 1000)}]
        for v in range(3):
            t = T + v * 10
            url = f"http://a.test/docs/{k}.html"
            item = page(t, url=url, status=200 if v == 0 else 304,
                        content_hash="d" * 64 if v == 0 else None,
                        **({"recrawl": meta} if v else {}))  # fmt: skip
            planned = next_visit(item, budgeted_interval, BOUNDS, t, priors)
            assert planned is not None
            meta = [*planned.record.fields(), {}]

    def first_interval(url: str) -> float:
        planned = next_visit(page(T, url=url), budgeted_interval, BOUNDS, T, priors)
        assert planned is not None
        return planned.record.interval

    news = first_interval("http://a.test/news/new.html")
    docs = first_interval("http://a.test/docs/new.html")
    assert news < BOUNDS.default < docs
    assert docs == BOUNDS.default * MAX_STEP
    # A page's own history outweighs its pool as its visits add up.
    assert priors.prior("http://a.test/news/new.html")[0] > 0
    assert priors.prior("http://b.test/x.html") == priors.prior("http://a.test/x.html")


def test_a_revisit_carries_what_the_claim_held() -> None:
    planned = next_visit(page(T, content_hash="c" * 64), budgeted_interval, BOUNDS, T)
    assert planned is not None
    assert Claimed("u", planned.record.fields()).record == planned.record
