"""The continuous crawl's schedule (real Redis), policy and revisit requests."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis.asyncio as aredis
from scrapy.exceptions import DontCloseSpider, NotConfigured

from extensions.extensions.recrawl import (
    START_PRICE_SHARE,
    WINDOW_BUCKETS,
    Claimed,
    Planned,
    Record,
    Recrawler,
    RecrawlSchedule,
    Visit,
    adaptive_interval,
    budgeted_interval,
    figures,
    next_visit,
    revisit_request,
    uniform_interval,
)
from extensions.meta import RECRAWL_RECORD, SITEMAP_LASTMOD
from extensions.settings import defaults
from extensions.settings.config import SettingsError
from extensions.utils.freshness import (
    HISTORY_WINDOW,
    MIN_BIN,
    Bounds,
    History,
    optimal_interval,
    rate_bin,
)
from pipelines.items import PageItem
from tests.utils import get_crawler

if TYPE_CHECKING:
    import redis


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _schedule(url: str) -> RecrawlSchedule:
    return RecrawlSchedule(aredis.Redis.from_url(url), "web")


def due_in(entries: list[tuple[str, Record]]) -> list[Planned]:
    """Next visits as the extension plans them: due one interval on."""
    return [Planned(u, r, delay=r.interval, old_bin=None) for u, r in entries]


async def write(s: RecrawlSchedule, entries: list[tuple[str, Record]]) -> int:
    return await s.schedule(due_in(entries), await s.now_ms(), 1000)


def test_claim_takes_due_urls_once_across_workers(redis_url: str) -> None:
    async def go() -> tuple[list[Any], list[Any], list[Any], int]:
        a, b = await _schedule(redis_url), await _schedule(redis_url)
        due = [(f"http://a.test/{n}", Record(0.0, f'"e{n}"')) for n in range(50)]
        later = [("http://a.test/later", Record(3600.0))]
        await write(a, due + later)
        # Two workers claim at once: every due URL goes to exactly one.
        got_a, got_b = await asyncio.gather(a.claim(30, 60_000), b.claim(30, 60_000))
        again = await a.claim(100, 60_000)
        size = await a.size()
        await a.client.aclose()
        await b.client.aclose()
        return got_a, got_b, again, size

    got_a, got_b, again, size = run(go())
    urls = [c.url for c in got_a + got_b]
    assert len(urls) == len(set(urls)) == 50
    assert "http://a.test/later" not in urls
    assert again == []  # claimed URLs are held, not handed out twice
    assert size == 51  # a claim keeps the URL scheduled (a lost revisit returns)
    seventh = next(c for c in got_a + got_b if c.url == "http://a.test/7")
    assert seventh.record == Record(0.0, '"e7"')
    assert seventh.due_ms is not None and seventh.due_ms > 0


def test_a_claim_that_never_reached_the_frontier_comes_back(redis_url: str) -> None:
    async def go() -> tuple[list[Any], list[Any]]:
        s = await _schedule(redis_url)
        await write(s, [("http://a.test/", Record(0.0, '"e"'))])
        first = await s.claim(10, 50)  # this worker dies with it
        await asyncio.sleep(0.2)  # the hold (50 ms, Redis TIME) is over
        again = await s.claim(10, 60_000)
        await s.client.aclose()
        return first, again

    first, again = run(go())
    assert [c.url for c in first] == [c.url for c in again] == ["http://a.test/"]


def test_schedule_scores_by_redis_time(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def go() -> None:
        s = await _schedule(redis_url)
        await write(s, [("http://a.test/", Record(90.0))])
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


LM1 = "Mon, 01 Jan 2024 00:00:00 GMT"
T0 = 1_704_067_200.0  # LM1 as epoch seconds


def test_next_visit_reads_what_the_fetch_learned() -> None:
    bounds = Bounds(10.0, 100.0, 10_000.0)
    headers = {"etag": ['"v1"'], "last-modified": [LM1]}
    h1, h2 = "1" * 64, "2" * 64  # SHA-256 hex digests
    # A first visit a year after the page's Last-Modified: unchanged for
    # longer than the first interval can be (no change counted).
    year = T0 + 365 * 86400
    first = next_visit(item(headers=headers, content_hash=h1, fetched_at=year),
                       adaptive_interval, bounds, year)  # fmt: skip
    assert first is not None and first.url == "http://a.test/"
    assert first.record == Record(
        100.0, '"v1"', LM1, "1" * 16, History(1, 0, 200.0, 200.0, 0), MIN_BIN
    )
    assert first.outcome == "first" and first.prev_json == ""
    assert first.old_bin is None and first.scheduled == pytest.approx(1 / 100)
    # The revisit carries the record as Redis holds it, and its due time;
    # the same hash counts as unchanged.
    due = int(year * 1000)  # fetched when due (Redis clock = this clock)
    claimed = Claimed("http://a.test/", json.loads(first.record.to_json()), due)
    request = revisit_request("http://a.test/", claimed)
    assert request.headers[b"If-None-Match"] == b'"v1"'
    assert request.headers[b"If-Modified-Since"] == LM1.encode()
    assert request.meta["handle_httpstatus_list"] == [304] and request.dont_filter
    meta = request.meta[RECRAWL_RECORD]
    assert meta[-1] == {"due": due}
    again = item(headers=headers, content_hash=h1, recrawl=meta, fetched_at=year)
    same = next_visit(again, adaptive_interval, bounds, year)
    assert same is not None and same.record.interval == 140.0
    assert same.outcome == "unchanged" and same.prev_json == first.record.to_json()
    assert same.old_bin == MIN_BIN
    changed = next_visit(item(content_hash=h2, recrawl=meta, fetched_at=year),
                         adaptive_interval, bounds, year)  # fmt: skip
    assert changed is not None and changed.outcome == "changed"
    assert changed.record.interval == 80.0 and changed.record.content_hash == "2" * 16
    assert changed.record.history.blind == 1  # no date: a blind change
    # A 304 keeps the validators and the hash of the last 200.
    nm = next_visit(item(status=304, recrawl=meta, fetched_at=year),
                    adaptive_interval, bounds, year)  # fmt: skip
    assert nm is not None and nm.outcome == "not_modified"
    assert (nm.record.etag, nm.record.last_modified, nm.record.content_hash) == (
        '"v1"', LM1, "1" * 16)  # fmt: skip
    assert nm.record.history.exposure == first.record.history.exposure + 100.0
    # A Cache-Control max-age seeds a new page's interval.
    hinted = next_visit(item(headers={"cache-control": ["max-age=30"]}),
                        adaptive_interval, bounds, 0.0)  # fmt: skip
    assert hinted is not None and hinted.record.interval == 30.0


def test_a_revisit_is_timed_from_its_due_time() -> None:
    """The claim's due time (Redis clock) and the fetch time (this clock,
    less the offset) give the gap the history counts and how late the
    revisit came, beyond the poll, relative to its interval."""
    bounds = Bounds(10.0, 100.0, 10_000.0)
    record = Record(100.0, '"v1"', None, "1" * 16, History(), MIN_BIN)
    meta = [*json.loads(record.to_json()), {"due": 1_000_000}]
    # Due at 1,000 s Redis time; fetched at 1,032 s here, this clock 2 s
    # ahead of Redis's: 30 s late, 29 beyond a 1 s poll.
    fetched = item(status=304, recrawl=meta, fetched_at=1032.0)
    planned = next_visit(fetched, budgeted_interval, bounds, 1032.0,
                         clock_offset=2.0, poll=1.0)  # fmt: skip
    assert planned is not None
    assert planned.late == pytest.approx(0.29)
    assert planned.record.history.observed == pytest.approx(130.0)


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
        seen.append(entry.record.history)
        claimed = Claimed(entry.url, json.loads(entry.record.to_json()))
        meta = revisit_request(entry.url, claimed).meta[RECRAWL_RECORD]
    blind_once = History(2, 1, 200.0, 100.0, 1)
    assert seen == [History(), History(1, 0, 100.0, 100.0), blind_once, blind_once,
                    History(3, 2, 300.0, 100.0, 2)]  # fmt: skip


def test_history_keeps_a_window() -> None:
    h = History()
    for n in range(HISTORY_WINDOW):
        h = h.add(10.0, n % 2 == 0)
    half = HISTORY_WINDOW // 2
    assert h == History(HISTORY_WINDOW, half, 10.0 * HISTORY_WINDOW, 10.0 * half, half)
    h = h.add(10.0, True)
    assert h.visits <= HISTORY_WINDOW // 2 + 1
    full = History(HISTORY_WINDOW, half, 10.0 * HISTORY_WINDOW, 10.0 * half, half)
    assert h.rate() == pytest.approx(full.rate(), rel=0.1)


def test_records_written_before_dates_and_bins_still_read() -> None:
    oldest = Record.from_json('[60.0,"e",null,"ab"]')
    assert oldest == Record(60.0, "e", None, "ab", History(), None)
    # Visits, changes, observed: the changes read as blind ones, the rest
    # of the time as known unchanged; not counted in any bin yet.
    old = Record.from_json('[60.0,"e",null,"ab",4,1,240.0]')
    assert old.history == History(4, 1, 240.0, 180.0, 1) and old.bin is None
    request = revisit_request("http://a.test/", Claimed("u", [60.0, "e", None, "ab"]))
    assert request.meta[RECRAWL_RECORD] == [60.0, "e", None, "ab", {}]


def test_a_record_is_carried_exactly_as_redis_holds_it() -> None:
    """The schedule script compares the record a visit started from with
    the one Redis holds, byte for byte: the round trip through the claim,
    the request meta and the item must not change it."""
    history = History(23, 7, 1987200.125, 1209600.5, 2)
    record = Record(86400.0, '"e"', LM1, "ab" * 8, history, -70)
    stored = record.to_json()
    claimed = Claimed("http://a.test/", json.loads(stored), 1)
    meta = revisit_request("http://a.test/", claimed).meta[RECRAWL_RECORD]
    planned = next_visit(item(status=304, recrawl=json.loads(json.dumps(meta))),
                         uniform_interval, Bounds(1, 10, 100), 0.0)  # fmt: skip
    assert planned is not None and planned.prev_json == stored


def test_cho_estimator_recovers_a_poisson_rate() -> None:
    """Visits every 10 s to a page changing 0.05/s, no dates: a visit sees
    a change with probability 1 - e^-0.5; the estimator returns the rate,
    where the naive changes / time would say 0.039."""
    n = 1000
    changes = round(n * (1 - 2.718281828459045**-0.5))
    blind = History(n, changes, 10.0 * n, 10.0 * (n - changes), changes)
    assert blind.rate() == pytest.approx(0.05, rel=0.02)


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
    # Until the fleet has measured a price: a page changing once per default
    # interval is revisited about every default interval.
    assert default.bounds.price == START_PRICE_SHARE * defaults.RECRAWL_DEFAULT_INTERVAL
    rate = 1 / defaults.RECRAWL_DEFAULT_INTERVAL
    target = optimal_interval(rate, default.bounds.price)
    assert target == pytest.approx(defaults.RECRAWL_DEFAULT_INTERVAL, rel=0.15)
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


def test_a_hand_set_price_is_refused_in_one_line() -> None:
    """RECRAWL_GIVE_UP_INTERVAL was the price of a fetch, set by hand; the
    price is measured now, and a value left in a deployment must not be
    silently ignored."""
    crawler = get_crawler(settings_dict={
        "RECRAWL_ENABLED": True, "RECRAWL_GIVE_UP_INTERVAL": 7200})  # fmt: skip
    with pytest.raises(SettingsError) as raised:
        Recrawler(crawler)
    message = str(raised.value)
    assert "RECRAWL_GIVE_UP_INTERVAL" in message and "\n" not in message


@pytest.mark.parametrize("enabled", [False, True])
def test_sitemap_lastmod_travels_only_when_revisits_are_on(enabled: bool) -> None:
    from scrapy.http import XmlResponse

    from webcrawl.spiders.web import WebSpider

    crawler = get_crawler(WebSpider, {"RECRAWL_ENABLED": enabled})
    spider = WebSpider.from_crawler(crawler)
    body = (
        b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/'
        b'sitemap/0.9"><url><loc>http://a.test/news</loc><changefreq>hourly'
        b"</changefreq><lastmod>2024-01-01T00:00:00Z</lastmod></url></urlset>"
    )
    response = XmlResponse("http://a.test/sitemap.xml", body=body)
    (request,) = spider._sitemap_links(response)
    assert request.url == "http://a.test/news"
    lastmod = "2024-01-01T00:00:00Z" if enabled else None
    assert request.meta.get(SITEMAP_LASTMOD) == lastmod
    assert "changefreq" not in request.meta  # search engines ignore it; so do we


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

    assert run(go()) == [Claimed("http://a.test/", None, 0)]


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
        await write(schedule, [("http://a.test/held", Record(0.0))])
        await schedule.claim(10, 600_000)
        rec._out = [(p, time.monotonic()) for p in due_in([
            ("http://a.test/held", Record(86400.0, '"h"')),
            ("http://a.test/new", Record(3600.0)),
            ("http://a.test/near", Record(30.0)),
        ])]  # fmt: skip
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


def test_figures_count_each_page_once_and_the_window_its_revisits(
    redis_url: str,
) -> None:
    """The schedule script keeps the fleet's figures: pages per rate bin
    (moved, not added, when a page's estimate changes), the scheduled
    revisit rate, the expected freshness, and the window's counters. A
    second schedule of the visit (a second fetch of one claim) writes its
    record but counts nothing twice."""
    fast, slow = rate_bin(0.1), MIN_BIN

    async def go() -> tuple[Any, Any]:
        s = await _schedule(redis_url)
        now = await s.now_ms()
        first = Record(10.0, '"a"', None, "aa", History(), slow)
        await s.schedule([Planned("http://a.test/", first, "", None, 0.1, 1.0, 10.0)],
                         now, 5000)  # fmt: skip
        changed = Record(5.0, '"b"', None, "bb", History(1, 1, 10.0, 0.0, 1), fast)
        revisit = Planned(
            "http://a.test/", changed,
            prev_json=first.to_json(), old_bin=slow, scheduled=0.1, freshness=-0.2,
            delay=5.0, outcome="changed", late=0.5,
        )  # fmt: skip
        await s.schedule([revisit], now, 5000)
        await s.schedule([revisit], now, 5000)  # the same claim, fetched twice
        found = await figures(s.client, "web", now + 1000)
        await s.client.aclose()
        return found, found.as_dict()

    found, shown = run(go())
    assert found.demand.pages == {fast: 1.0}  # moved from the slow bin
    assert found.pages == 1
    assert found.scheduled == pytest.approx(0.2)  # 1/10 + (1/5 - 1/10)
    assert found.freshness == pytest.approx(0.8)
    # Counters are of events: the second fetch happened, it is counted.
    w = found.window
    assert (w.stored, w.revisits, w.changed, w.not_modified) == (3, 2, 2, 0)
    assert w.timed == 2 and w.late == pytest.approx(1.0)
    assert shown["changed_share"] == 1.0 and shown["not_modified_share"] == 0.0
    assert shown["estimated_freshness"] == pytest.approx(0.8)


def test_the_price_is_solved_from_the_fleets_window(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The extension reads the fleet's figures each window bucket and solves
    the price: a fleet that fetched 20 pages/s with its revisits on time
    (spare capacity) takes a changing page to RECRAWL_MIN_INTERVAL; one
    whose revisits come half their interval late (saturated) raises the
    price until the schedule asks for less than it fetched."""
    settings = {"RECRAWL_ENABLED": True, "REDIS_URL": redis_url,
                "RECRAWL_MIN_INTERVAL": 3.0, "RECRAWL_DEFAULT_INTERVAL": 10.0,
                "RECRAWL_MAX_INTERVAL": 120.0}  # fmt: skip
    rec = Recrawler(get_crawler(settings_dict=settings))
    changing = 1 / 30

    async def window(late: float, new_pages: int) -> tuple[float, float]:
        rec.schedule = schedule = await _schedule(redis_url)
        rec.prefix = "web"
        await schedule.client.flushdb()
        # Mid-bucket, and read at the time they were written, however slowly
        # a loaded machine runs this: the window's length is the time since
        # its first bucket began, so where "now" fell in its bucket moved the
        # measured rate, and the price with it (0.14 to 0.18).
        now = (await schedule.now_ms()) // rec.bucket_ms * rec.bucket_ms
        now += rec.bucket_ms // 2

        async def written_at() -> int:
            return now

        monkeypatch.setattr(rec, "_now_ms", written_at)
        # 36 changing pages at 10 s, 150 static ones at 60 s: 6.1 revisits/s.
        pages = [Planned(f"http://a.test/c{k}", Record(10.0, bin=rate_bin(changing)),
                         scheduled=0.1, delay=10.0) for k in range(36)]  # fmt: skip
        static = Record(60.0, bin=MIN_BIN)
        pages += [Planned(f"http://a.test/s{k}", static, scheduled=1 / 60, delay=60.0)
                  for k in range(150)]  # fmt: skip
        await schedule.schedule(pages, now, rec.bucket_ms)
        # A window of revisits, as many as scheduled (one per page over the
        # window's 30 s), this late.
        revisits = [Planned(p.url, p.record, outcome="unchanged", late=late,
                            delay=p.delay) for p in pages]  # fmt: skip
        # And pages fetched for the first time.
        revisits += [Planned(f"http://b.test/{k}", Record(10.0, bin=MIN_BIN),
                             delay=10.0) for k in range(new_pages)]  # fmt: skip
        for b in range(WINDOW_BUCKETS):
            ago = (WINDOW_BUCKETS - 1 - b) * rec.bucket_ms
            await schedule.schedule(revisits[b::WINDOW_BUCKETS], now - ago,
                                    rec.bucket_ms)  # fmt: skip
        rec._reprice_due = 0.0
        await rec._reprice()
        await schedule.client.aclose()
        return rec.bounds.price, budgeted_interval(
            Visit(rec.bounds.min * 2, True, 200, rate=changing), rec.bounds
        )

    spare_price, spare = run(window(0.0, new_pages=600))
    tight_price, tight = run(window(0.5, new_pages=0))
    assert spare == rec.bounds.min
    assert tight_price > spare_price and tight > spare
    stats = rec.crawler.stats
    assert stats is not None and stats.get_value("recrawl/price") == round(
        tight_price, 6
    )


def test_a_claim_after_the_hold_makes_the_same_revisit_request(redis_url: str) -> None:
    """A revisit still queued when its claim's hold ends is claimed again:
    the request must be the one already queued (the frontier queues a
    member once), so it carries the time the URL was first due, until its
    next visit is written. Before: each claim carried its own due time, and
    a saturated host's queue filled with copies of the same revisit."""

    async def go() -> tuple[Any, Any, Any]:
        s = await _schedule(redis_url)
        await write(s, [("http://a.test/", Record(0.0, '"e"'))])
        (first,) = await s.claim(10, 50)
        await asyncio.sleep(0.2)  # the hold (50 ms, Redis TIME) is over
        (again,) = await s.claim(10, 50)
        # Its visit is written: the next claim is a new visit.
        await write(s, [("http://a.test/", Record(0.0, '"f"'))])
        await asyncio.sleep(0.05)
        (later,) = await s.claim(10, 60_000)
        await s.client.aclose()
        return first, again, later

    first, again, later = run(go())
    one, two = (revisit_request(c.url, c) for c in (first, again))
    assert one.meta == two.meta and one.priority == two.priority
    assert later.due_ms is not None and first.due_ms is not None
    assert later.due_ms > first.due_ms


def test_revisits_likely_changed_go_first_and_a_page_seen_once_at_even_odds() -> None:
    fast = Record(60.0, bin=rate_bin(1 / 30), history=History(5, 5, 300.0, 50.0, 0))
    static = Record(60.0, bin=MIN_BIN, history=History(5, 0, 300.0, 300.0, 0))
    once = Record(20.0, bin=MIN_BIN, history=History(1, 0, 20.0, 20.0, 0))
    fast_p, static_p, once_p = (
        revisit_request("http://a.test/", r).priority for r in (fast, static, once)
    )
    assert fast_p > once_p > static_p


def test_closing_does_not_send_a_batch_twice(redis_url: str) -> None:
    """A worker closing while a schedule script is on its way waits for its
    reply. Before, the loop was cancelled there: the batch stayed in the
    outbox, the last flush sent it again, and the window's counters (events,
    not guarded like the per-page figures) counted it twice."""
    rec = Recrawler(get_crawler(settings_dict={"RECRAWL_ENABLED": True,
                                               "REDIS_URL": redis_url}))  # fmt: skip
    real = RecrawlSchedule.schedule
    sent = asyncio.Event()

    async def slow(self: RecrawlSchedule, *args: Any, **kw: Any) -> int:
        done = await real(self, *args, **kw)
        sent.set()
        await asyncio.sleep(0.5)  # the reply is slow to come back
        return done

    async def no_feed() -> None:  # no engine in this test: nothing to feed
        return None

    async def go() -> dict[bytes, bytes]:
        rec._feed = no_feed  # type: ignore[method-assign]
        rec._opened(type("Spider", (), {"name": "web"})())
        assert rec.schedule is not None
        await rec.schedule.client.flushdb()
        rec._out = [
            (p, time.monotonic())
            for p in due_in(
                [(f"http://a.test/{k}", Record(60.0, bin=MIN_BIN)) for k in range(7)]
            )
        ]
        await sent.wait()
        await rec._closed(None)
        client = aredis.Redis.from_url(redis_url)
        stats = await client.hgetall("web:{web}:recrawl:stats")
        await client.aclose()
        return stats

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RecrawlSchedule, "schedule", slow)
        stats = run(go())
    assert int(stats[b"stored"]) == 7
    assert int(stats[b"b" + str(MIN_BIN).encode()]) == 7
