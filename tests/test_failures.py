"""The failure policy (extensions.utils.failures): each class's decision, delay and
budgets, and the middleware that replaces Scrapy's RetryMiddleware."""

from __future__ import annotations

import time
from email.utils import formatdate
from typing import Any

import pytest
from scrapy import Spider
from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadCancelledError,
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
    IgnoreRequest,
    NotConfigured,
    ResponseDataLossError,
)
from scrapy.http import HtmlResponse, Request, Response
from scrapy.settings import Settings
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils._compression import _DecompressionMaxSizeExceeded

from extensions.downloadermiddlewares.failurepolicy import FailurePolicyMiddleware
from extensions.meta import DELAY_META, FAILURE_META
from extensions.settings import defaults
from extensions.utils.failures import POLICIES, classify_exception
from tests.utils import get_crawler
from webcrawl.addon import Webcrawl

RA = "Retry-After"


def _mw(**settings: Any) -> FailurePolicyMiddleware:
    # The project's RETRY_TIMES (webcrawl.settings): room for every class's
    # own attempt count, which these tests check.
    settings.setdefault("RETRY_TIMES", 4)
    crawler = get_crawler(Spider, settings_dict=settings)
    crawler.spider = Spider("web")
    crawler.stats = MemoryStatsCollector(crawler)
    return FailurePolicyMiddleware.from_crawler(crawler)


def _response(request: Request, status: int, **headers: str) -> Response:
    return HtmlResponse(request.url, status=status, headers=headers, request=request)


def _fail_until_final(mw: FailurePolicyMiddleware, answer: Any) -> list[Request]:
    """Feed the same failure until the middleware gives up; the retries."""
    request = Request("http://a.test/")
    retries: list[Request] = []
    for _ in range(500):
        out = answer(mw, request)
        if not isinstance(out, Request):
            return retries
        retries.append(out)
        request = out
    raise AssertionError("never gave up")


def test_disabled_and_add_on_replaces_scrapy_retry(redis_url: str) -> None:
    with pytest.raises(NotConfigured):
        _mw(FAILURE_POLICY_ENABLED=False)
    s = Settings()
    s.set("REDIS_URL", redis_url, "cmdline")
    Webcrawl().update_settings(s)
    mws = s.getdict("DOWNLOADER_MIDDLEWARES")
    # Scrapy's RetryMiddleware re-schedules at once and gives a 429 up after
    # RETRY_TIMES: it no longer decides anything.
    assert mws["scrapy.downloadermiddlewares.retry.RetryMiddleware"] is None
    assert (
        mws["extensions.downloadermiddlewares.failurepolicy.FailurePolicyMiddleware"]
        == 550
    )


def test_unresolvable_host_is_given_up_within_about_a_minute() -> None:
    mw = _mw()
    retries = _fail_until_final(
        mw, lambda m, r: m.process_exception(r, CannotResolveHostError("x"))
    )
    assert len(retries) == POLICIES["dns"].attempts - 1 == 1
    total = sum(r.meta[DELAY_META] for r in retries) / 1000
    assert 20 <= total <= 60
    assert retries[0].dont_filter


@pytest.mark.parametrize(
    "exc", [DownloadConnectionRefusedError("x"), DownloadTimeoutError("x")]
)
def test_connection_failures_back_off_exponentially_then_end(exc: Exception) -> None:
    mw = _mw(RETRY_DELAY_JITTER=0.0)
    retries = _fail_until_final(mw, lambda m, r: m.process_exception(r, exc))
    delays = [r.meta[DELAY_META] / 1000 for r in retries]
    assert delays == [15.0, 30.0, 60.0]
    # The last retry failed too: marked final, four attempts in all.
    last = retries[-1].meta[FAILURE_META]
    assert (last["reason"], last["attempts"], last["terminal"]) == (
        "connection",
        4,
        True,
    )


def test_retry_after_is_honoured_until_the_time_budget_not_an_attempt_count() -> None:
    """Three 429s with Retry-After in 16 s left the home page a final 429
    under Scrapy's RETRY_TIMES; a server that says when to come back is
    honoured until RETRY_THROTTLED_TIME_BUDGET."""
    mw = _mw(RETRY_THROTTLED_TIME_BUDGET=600.0)
    retries = _fail_until_final(
        mw,
        lambda m, r: m.process_response(r, _response(r, 429, **{"Retry-After": "5"})),
    )
    # 600 s of budget at 5 s (+ up to 20% jitter) per answer: ~100 answers.
    assert 95 <= len(retries) <= 120
    delays = [r.meta[DELAY_META] for r in retries]
    assert all(5000 <= d <= 6000 for d in delays)


def test_retry_after_as_http_date_and_capped() -> None:
    mw = _mw(RETRY_AFTER_MAX=60.0, RETRY_DELAY_JITTER=0.0)
    request = Request("http://a.test/")
    soon = formatdate(time.time() + 30, usegmt=True)
    out = mw.process_response(request, _response(request, 503, **{RA: soon}))
    assert isinstance(out, Request) and 28_000 <= out.meta[DELAY_META] <= 31_000
    later = formatdate(time.time() + 7200, usegmt=True)
    out = mw.process_response(
        request, _response(request, 503, **{"Retry-After": later})
    )
    assert isinstance(out, Request) and out.meta[DELAY_META] == 60_000


def test_5xx_is_retried_then_final_and_404_is_an_answer() -> None:
    mw = _mw()
    retries = _fail_until_final(
        mw, lambda m, r: m.process_response(r, _response(r, 502))
    )
    assert len(retries) == POLICIES["http_5xx"].attempts - 1
    request = Request("http://a.test/missing")
    response = _response(request, 404)
    assert mw.process_response(request, response) is response
    assert FAILURE_META not in request.meta


def test_final_failure_is_marked_for_the_errback() -> None:
    mw = _mw()
    request = Request(
        "http://a.test/", meta={FAILURE_META: {"attempts": 1, "first": 1.0}}
    )
    assert mw.process_exception(request, CannotResolveHostError("x")) is None
    record = request.meta[FAILURE_META]
    assert record["terminal"] and record["reason"] == "dns" and record["attempts"] == 2
    assert record["first"] == 1.0


def test_size_limits_are_terminal_too_large() -> None:
    assert classify_exception(DownloadCancelledError("over maxsize")) == "too_large"
    try:
        try:
            raise _DecompressionMaxSizeExceeded(2**31, 2**24)
        except _DecompressionMaxSizeExceeded as cause:
            raise IgnoreRequest("decompressed too much") from cause
    except IgnoreRequest as exc:
        assert classify_exception(exc) == "too_large"
    assert not POLICIES["too_large"].retried


def _corrupt(encoding: bytes, body: bytes) -> Exception:
    """What Scrapy's HttpCompressionMiddleware raises on a corrupt body."""
    crawler = get_crawler(Spider)
    crawler.spider = Spider("web")
    mw = HttpCompressionMiddleware.from_crawler(crawler)
    response = Response(
        "http://a.test/", body=body, headers={"Content-Encoding": encoding}
    )
    try:
        mw.process_response(Request("http://a.test/"), response)
    except Exception as exc:
        return exc
    raise AssertionError("decoded")


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        (b"gzip", b"\x1f\x8b\x08\x00garbage, not deflate"),
        (b"gzip", b"not gzip at all"),
        (b"br", b"not brotli"),
    ],
)
def test_a_body_that_does_not_decode_is_unparseable_and_terminal(
    encoding: bytes, body: bytes
) -> None:
    """Before: no class (None), so never dead-lettered: stored only."""
    exc = _corrupt(encoding, body)
    assert classify_exception(exc) == "unparseable"
    mw = _mw()
    request = Request("http://a.test/")
    assert mw.process_exception(request, exc) is None
    assert request.meta[FAILURE_META]["terminal"]


def test_a_body_cut_short_is_retried() -> None:
    """Before: unclassified, never retried (Scrapy's RetryMiddleware retries
    it)."""
    exc = ResponseDataLossError("short body")
    assert classify_exception(exc) == "connection"
    assert isinstance(_mw().process_exception(Request("http://a.test/"), exc), Request)


def test_filters_are_not_failures_and_refusals_name_their_reason() -> None:
    assert classify_exception(IgnoreRequest("Forbidden by robots.txt")) is None

    class Refused(IgnoreRequest):
        failure_reason = "blocked_address"

    assert classify_exception(Refused("10.0.0.1")) == "blocked_address"
    mw = _mw()
    request = Request("http://a.test/")
    assert mw.process_exception(request, Refused("10.0.0.1")) is None
    assert request.meta[FAILURE_META]["terminal"]


def test_defaults_are_declared() -> None:
    assert defaults.RETRY_AFTER_MAX > 0 and defaults.FAILURE_POLICY_ENABLED


def _exc_retries(mw: FailurePolicyMiddleware, exc: Exception) -> list[Request]:
    return _fail_until_final(mw, lambda m, r: m.process_exception(r, exc))


def _status_retries(mw: FailurePolicyMiddleware, status: int) -> list[Request]:
    return _fail_until_final(
        mw, lambda m, r: m.process_response(r, _response(r, status))
    )


def test_scrapy_retry_settings_bound_the_policy() -> None:
    """Issue 23: Scrapy's retry settings bound attempts and classes; the
    policy still decides the delays."""
    refused = ConnectionRefusedError()
    # RETRY_TIMES (Scrapy's default 2) bounds the connection class's 3 retries.
    retries = _exc_retries(_mw(RETRY_TIMES=2), refused)
    assert [r.meta["retry_times"] for r in retries] == [1, 2]
    assert [r.priority for r in retries] == [-1, -2]  # RETRY_PRIORITY_ADJUST
    assert all(r.meta[DELAY_META] > 0 for r in retries)  # the policy's delays
    assert len(_exc_retries(_mw(RETRY_ENABLED=False), refused)) == 0
    assert len(_exc_retries(_mw(RETRY_PRIORITY_ADJUST=5), refused)) == 3
    # max_retry_times meta wins, even 0.
    request = Request("http://a.test/", meta={"max_retry_times": 0})
    assert _mw().process_exception(request, refused) is None
    assert request.meta[FAILURE_META]["terminal"]
    # A status or exception Scrapy's lists leave out is not retried.
    assert len(_status_retries(_mw(), 502)) == 2
    assert len(_status_retries(_mw(RETRY_HTTP_CODES=[500]), 502)) == 0
    assert len(_exc_retries(_mw(RETRY_EXCEPTIONS=[]), refused)) == 0
