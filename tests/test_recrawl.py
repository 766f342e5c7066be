"""The continuous crawl's schedule (real Redis), policy and revisit requests."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
import redis.asyncio as aredis
from scrapy.exceptions import DontCloseSpider, NotConfigured

from extensions.extensions.recrawl import (
    HISTORY_WINDOW,
    Bounds,
    History,
    Record,
    Recrawler,
    RecrawlSchedule,
    Visit,
    adaptive_interval,
    budgeted_interval,
    next_visit,
    optimal_interval,
    revisit_request,
    uniform_interval,
)
from extensions.meta import RECRAWL_RECORD, SITEMAP_CHANGEFREQ
from extensions.settings import defaults
from extensions.settings.config import SettingsError
from pipelines.items import PageItem
from tests.utils import get_crawler

if TYPE_CHECKING:
    import redis


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _schedule(url: str) -> RecrawlSchedule:
    return RecrawlSchedule(aredis.Redis.from_url(url), "web")


def test_claim_takes_due_urls_once_across_workers(redis_url: str) -> None:
    async def go() -> tuple[list[Any], list[Any], list[Any], int]:
        a, b = await _schedule(redis_url), await _schedule(redis_url)
        due = [(f"http://a.test/{n}", Record(0.0, f'"e{n}"')) for n in range(50)]
        later = [("http://a.test/later", Record(3600.0))]
        await a.schedule(due + later)
        # Two workers claim at once: every due URL goes to exactly one.
        got_a, got_b = await asyncio.gather(a.claim(30, 60_000), b.claim(30, 60_000))
        again = await a.claim(100, 60_000)
        size = await a.size()
        await a.client.aclose()
        await b.client.aclose()
        return got_a, got_b, again, size

    got_a, got_b, again, size = run(go())
    urls = [u for u, _ in got_a + got_b]
    assert len(urls) == len(set(urls)) == 50
    assert "http://a.test/later" not in urls
    assert again == []  # claimed URLs are held, not handed out twice
    assert size == 51  # a claim keeps the URL scheduled (a lost revisit returns)
    assert dict(got_a + got_b)["http://a.test/7"] == Record(0.0, '"e7"')


def test_a_claim_that_never_reached_the_frontier_comes_back(redis_url: str) -> None:
    async def go() -> tuple[list[Any], list[Any]]:
        s = await _schedule(redis_url)
        await s.schedule([("http://a.test/", Record(0.0, '"e"'))])
        first = await s.claim(10, 50)  # this worker dies with it
        await asyncio.sleep(0.2)  # the hold (50 ms, Redis TIME) is over
        again = await s.claim(10, 60_000)
        await s.client.aclose()
        return first, again

    first, again = run(go())
    assert [u for u, _ in first] == [u for u, _ in again] == ["http://a.test/"]


def test_schedule_scores_by_redis_time(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def go() -> None:
        s = await _schedule(redis_url)
        await s.schedule([("http://a.test/", Record(90.0))])
        await s.client.aclose()

    run(go())
    sec, usec = redis_client.time()
    now_ms = sec * 1000 + usec // 1000
    score = redis_client.zscore("web:{web}:recrawl", "http://a.test/")
    assert score is not None and 0 < score - now_ms <= 90_000


@pytest.mark.parametrize(
    ("changed", "status", "expected"),
    [(True, 200, 800.0), (False, 200, 1400.0), (False, 304, 1400.0), (None, 0, 1400.0)],
)
def test_adaptive_interval_moves_like_nutch(
    changed: bool | None, status: int, expected: float
) -> None:
    bounds = Bounds(10.0, 100.0, 10_000.0)
    assert adaptive_interval(Visit(1000.0, changed, status), bounds) == expected
    assert uniform_interval(Visit(1000.0, changed, status), bounds) == 100.0


def test_interval_stays_within_bounds() -> None:
    bounds = Bounds(10.0, 100.0, 1000.0)
    interval = 100.0
    for _ in range(50):
        interval = adaptive_interval(Visit(interval, False, 304), bounds)
    assert interval == 1000.0
    for _ in range(50):
        interval = adaptive_interval(Visit(interval, True, 200), bounds)
    assert interval == 10.0


def item(**kw: Any) -> PageItem:
    base: dict[str, Any] = {
        "url": "http://a.test/",
        "final_url": "http://a.test/",
        "status": 200,
        "fingerprint": "fp",
    }
    return PageItem(**{**base, **kw})


def test_next_visit_reads_what_the_fetch_learned() -> None:
    bounds = Bounds(10.0, 100.0, 10_000.0)
    headers = {"etag": ['"v1"'], "last-modified": ["Mon, 01 Jan 2024 00:00:00 GMT"]}
    h1, h2 = "1" * 64, "2" * 64  # SHA-256 hex digests
    first = next_visit(item(headers=headers, content_hash=h1), adaptive_interval,
                       bounds, 0.0)  # fmt: skip
    assert first == (
        "http://a.test/",
        Record(100.0, '"v1"', "Mon, 01 Jan 2024 00:00:00 GMT", "1" * 16),
    )
    # The revisit carries the record; the same hash counts as unchanged.
    request = revisit_request("http://a.test/", first[1])
    assert request.headers[b"If-None-Match"] == b'"v1"'
    assert request.headers[b"If-Modified-Since"] == b"Mon, 01 Jan 2024 00:00:00 GMT"
    assert request.meta["handle_httpstatus_list"] == [304] and request.dont_filter
    meta = request.meta[RECRAWL_RECORD]
    same = next_visit(item(headers=headers, content_hash=h1, recrawl=meta),
                      adaptive_interval, bounds, 0.0)  # fmt: skip
    assert same is not None and same[1].interval == 140.0
    changed = next_visit(item(content_hash=h2, recrawl=meta), adaptive_interval,
                         bounds, 0.0)  # fmt: skip
    assert changed is not None
    assert changed[1] == Record(80.0, None, None, "2" * 16, History(1, 1, 100.0))
    # A 304 keeps the validators and the hash of the last 200.
    nm = next_visit(item(status=304, recrawl=meta), adaptive_interval, bounds, 0.0)
    assert nm is not None
    assert nm[1] == Record(140.0, '"v1"', "Mon, 01 Jan 2024 00:00:00 GMT", "1" * 16,
                           History(1, 0, 100.0))  # fmt: skip
    # A Cache-Control max-age seeds a new page's interval.
    hinted = next_visit(item(headers={"cache-control": ["max-age=30"]}),
                        adaptive_interval, bounds, 0.0)  # fmt: skip
    assert hinted is not None and hinted[1].interval == 30.0
    # So does a sitemap's changefreq.
    sitemap = next_visit(item(changefreq="hourly"), adaptive_interval,
                         Bounds(10.0, 100.0, 86400.0), 0.0)  # fmt: skip
    assert sitemap is not None and sitemap[1].interval == 3600.0


def test_history_travels_with_the_revisits() -> None:
    """Each compared visit adds to the page's change history (what the
    budgeted policy estimates the rate from); a failed fetch adds nothing;
    the history goes through the request meta and the Redis record."""
    bounds = Bounds(10.0, 100.0, 10_000.0)
    outcomes = [("a", 200), ("a", 304), ("b", 200), (None, 500), ("c", 200)]
    meta = None
    seen = []
    for content, status in outcomes:
        chash = None if content is None else content * 64
        kw = {"recrawl": meta} if meta is not None else {}
        entry = next_visit(item(status=status, content_hash=chash, **kw),
                           uniform_interval, bounds, 0.0)  # fmt: skip
        assert entry is not None
        seen.append(entry[1].history)
        request = revisit_request(entry[0], Record.from_json(entry[1].to_json()))
        meta = request.meta[RECRAWL_RECORD]
    assert seen == [History(), History(1, 0, 100.0), History(2, 1, 200.0),
                    History(2, 1, 200.0), History(3, 2, 300.0)]  # fmt: skip


def test_history_keeps_a_window() -> None:
    h = History()
    for n in range(HISTORY_WINDOW):
        h = h.add(10.0, n % 2 == 0)
    assert h == History(HISTORY_WINDOW, HISTORY_WINDOW // 2, 10.0 * HISTORY_WINDOW)
    h = h.add(10.0, True)
    assert h.visits <= HISTORY_WINDOW // 2 + 1
    full = History(HISTORY_WINDOW, HISTORY_WINDOW // 2, 10.0 * HISTORY_WINDOW)
    assert h.rate() == pytest.approx(full.rate(), rel=0.1)


def test_a_record_written_before_histories_reads_with_an_empty_one() -> None:
    old = Record.from_json('[60.0,"e",null,"ab"]')
    assert old == Record(60.0, '"e"'[1:-1], None, "ab", History())
    request = revisit_request("http://a.test/", old)
    assert request.meta[RECRAWL_RECORD] == [60.0, "e", None, "ab", 0, 0, 0.0]


def test_cho_estimator_recovers_a_poisson_rate() -> None:
    """Visits every 10 s to a page changing 0.05/s: a visit sees a change
    with probability 1 - e^-0.5; the estimator returns the rate, where the
    naive changes / time would say 0.039."""
    n = 1000
    changes = round(n * (1 - 2.718281828459045**-0.5))
    assert History(n, changes, 10.0 * n).rate() == pytest.approx(0.05, rel=0.02)


def test_budgeted_interval_follows_the_optimum_and_gives_up() -> None:
    bounds = Bounds(1.0, 100.0, 10_000.0, give_up=10.0)
    # The optimum visits middling rates most often: static and fast pages
    # get the longest intervals (Cho and Garcia-Molina).
    assert optimal_interval(0.05, 10.0) < optimal_interval(0.005, 10.0)
    assert optimal_interval(0.05, 10.0) < optimal_interval(0.09, 10.0)
    assert optimal_interval(0.2, 10.0) == float("inf")
    # A page found changed at every visit 10 s apart, over 8 visits: faster
    # than the budget follows; it is revisited less often than any page the
    # budget chases (a change at every visit only says the rate is at least
    # ln(2n + 1) / interval, so it settles near 4 give-up intervals).
    interval = 10.0
    history = History(8, 8, 80.0)
    chased = min(optimal_interval(r / 100, 10.0) for r in range(1, 10))
    intervals = []
    for _ in range(40):
        visit = Visit(interval, True, 200, history=history)
        interval = budgeted_interval(visit, bounds)
        history = history.add(interval, True)
        intervals.append(interval)
    assert min(intervals[5:]) > chased
    # Half the visits 20 s apart changed: close to the optimum's interval.
    history = History(16, 8, 320.0)
    target = optimal_interval(history.rate(), 10.0)
    assert budgeted_interval(Visit(20.0, True, 200, history=history), bounds) == target
    # A failed fetch learns nothing: the interval lengthens as adaptive's.
    assert budgeted_interval(Visit(20.0, None, 500, history=history), bounds) == 28.0


def test_recrawler_is_off_by_default_and_checks_its_bounds() -> None:
    assert defaults.RECRAWL_ENABLED is False
    with pytest.raises(NotConfigured):
        Recrawler(get_crawler())
    with pytest.raises(SettingsError):
        Recrawler(
            get_crawler(settings_dict={
                "RECRAWL_ENABLED": True,
                "RECRAWL_MIN_INTERVAL": 100.0,
                "RECRAWL_DEFAULT_INTERVAL": 10.0,
            })
        )  # fmt: skip
    on = Recrawler(
        get_crawler(settings_dict={
            "RECRAWL_ENABLED": True,
            "RECRAWL_POLICY": "extensions.extensions.recrawl.uniform_interval",
        })
    )  # fmt: skip
    assert on.policy is uniform_interval
    default = Recrawler(get_crawler(settings_dict={"RECRAWL_ENABLED": True}))
    assert default.policy is budgeted_interval
    assert default.bounds.give_up == defaults.RECRAWL_GIVE_UP_INTERVAL
    hold = max(defaults.RECRAWL_MIN_INTERVAL, defaults.FRONTIER_LEASE_TIMEOUT)
    assert on.hold_ms == hold * 1000
    # A continuous crawl is a service: an idle spider stays open.
    with pytest.raises(DontCloseSpider):
        on._idle()


def test_addon_enables_the_extension_only_when_asked(redis_url: str) -> None:
    from scrapy.settings import Settings

    from webcrawl.addon import RECRAWL_EXTENSION, Webcrawl

    for enabled in (False, True):
        settings = Settings({"REDIS_URL": redis_url, "EXTENSIONS": {}})
        settings.set("RECRAWL_ENABLED", enabled, "cmdline")
        Webcrawl().update_settings(settings)
        on = set(RECRAWL_EXTENSION) <= set(settings.getdict("EXTENSIONS"))
        assert on is enabled


@pytest.mark.parametrize("enabled", [False, True])
def test_sitemap_changefreq_travels_only_when_revisits_are_on(enabled: bool) -> None:
    from scrapy.http import XmlResponse

    from webcrawl.spiders.web import WebSpider

    crawler = get_crawler(WebSpider, {"RECRAWL_ENABLED": enabled})
    spider = WebSpider.from_crawler(crawler)
    body = (
        b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/'
        b'sitemap/0.9"><url><loc>http://a.test/news</loc><changefreq>hourly'
        b"</changefreq></url></urlset>"
    )
    response = XmlResponse("http://a.test/sitemap.xml", body=body)
    (request,) = spider._sitemap_links(response)
    assert request.url == "http://a.test/news"
    assert request.meta.get(SITEMAP_CHANGEFREQ) == ("hourly" if enabled else None)


def test_a_malformed_record_gives_an_unconditional_revisit(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Before: the claim raised on a record that is not JSON, and the
    extension's loop died with it (no more revisits on that worker)."""
    redis_client.zadd("web:{web}:recrawl", {"http://a.test/": 0})
    redis_client.hset("web:{web}:recrawl:data", "http://a.test/", "{not json")

    async def go() -> list[Any]:
        s = await _schedule(redis_url)
        got = await s.claim(10, 60_000)
        await s.client.aclose()
        return got

    assert run(go()) == [("http://a.test/", None)]


def test_store_side_schedule_keeps_only_the_window_in_redis(
    redis_url: str, tmp_path: Any
) -> None:
    """RECRAWL_SCHEDULE_STORE: a next visit beyond RECRAWL_WINDOW waits in
    the page store (and leaves Redis); a refill brings what falls due within
    the window back into Redis with its due time."""
    from pipelines.stores.schedule import PageStoreSchedule

    crawler = get_crawler(settings_dict={
        "RECRAWL_ENABLED": True,
        "REDIS_URL": redis_url,
        "RECRAWL_SCHEDULE_STORE": "pipelines.stores.schedule.PageStoreSchedule",
        "RECRAWL_WINDOW": 60.0,
        "SQLITE_PATH": str(tmp_path / "pages.sqlite3"),
    })  # fmt: skip
    rec = Recrawler(crawler)
    assert isinstance(rec.store, PageStoreSchedule)

    async def go() -> tuple[Any, ...]:
        rec.schedule = schedule = await _schedule(redis_url)
        client = schedule.client
        keys = schedule.keys
        # A claimed page (in Redis, held) rescheduled far, a new page far,
        # one page near.
        await schedule.schedule([("http://a.test/held", Record(0.0))])
        await schedule.claim(10, 600_000)
        rec._out = [
            ("http://a.test/held", Record(86400.0, '"h"')),
            ("http://a.test/new", Record(3600.0)),
            ("http://a.test/near", Record(30.0)),
        ]
        await rec._flush()
        in_redis = {m.decode() for m in await client.zrange(keys.recrawl, 0, -1)}
        in_data = {m.decode() for m in await client.hkeys(keys.recrawl_data)}
        assert rec.store is not None
        stored = await rec._in_thread(rec.store.due, 2**62, 100)
        # One comes due within the window: a refill loads it with its time.
        now = await schedule.now_ms()
        soon = [("http://a.test/soon", now + 30_000, "[1]")]
        await rec._in_thread(rec.store.put, soon)
        await rec._refill()
        score = await client.zscore(keys.recrawl, "http://a.test/soon")
        record = await client.hget(keys.recrawl_data, "http://a.test/soon")
        left = await rec._in_thread(rec.store.count)
        await rec._closed(None)
        return in_redis, in_data, stored, now, score, record, left

    in_redis, in_data, stored, now, score, record, left = run(go())
    assert in_redis == in_data == {"http://a.test/near"}
    assert {u for u, _, _ in stored} == {"http://a.test/held", "http://a.test/new"}
    held = next(e for e in stored if e[0] == "http://a.test/held")
    assert Record.from_json(held[2]).etag == '"h"'
    assert held[1] - now <= 86_400_000 and held[1] - now > 86_300_000
    assert score == now + 30_000 and record == b"[1]"
    assert left == 2  # the far ones stay in the store
