"""Requests survive the frontier's JSON encoding; nothing else is accepted."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.http import FormRequest
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule

from extensions.core.frontier.serialization import (
    CorruptEntry,
    UnserializableRequest,
    request_from_bytes,
    request_to_bytes,
)


class MySpider(Spider):
    name = "web"

    def parse(self, response: Any, **kwargs: Any) -> None: ...

    def on_error(self, failure: Any) -> None: ...


SPIDER = MySpider()


@pytest.mark.parametrize(
    "request_",
    [
        Request("http://a.test/"),
        Request("http://a.test/p?q=1", errback=SPIDER.on_error, meta={"depth": 3}),
        Request("http://a.test/", callback=SPIDER.parse, dont_filter=True),
        Request("http://a.test/", headers={"Referer": "http://b.test/"}),
        Request("http://a.test/", method="POST", body=b"\x00\xff raw", flags=["x"]),
        Request("http://a.test/", cookies={"a": "b"}, cb_kwargs={"k": [1, 2]}),
        FormRequest("http://a.test/f", formdata={"a": "1"}),
        # Issue 23: served back as made.
        Request("http://a.test/?b=2&a=1&utm_source=x#frag", priority=-40_000),
        Request("http://a.test/", priority=7, meta={"download_slot": "slot-a"}),
    ],
)
def test_round_trip(request_: Request) -> None:
    back = request_from_bytes(request_to_bytes(request_, SPIDER), SPIDER)
    assert type(back) is type(request_)
    assert back.to_dict(spider=SPIDER) == request_.to_dict(spider=SPIDER)


def test_per_attempt_meta_is_not_stored() -> None:
    data = request_to_bytes(Request("http://a.test/", meta={"frontier_lease": "l"}))
    assert data == b"http://a.test/"


def test_identical_dont_filter_requests_stay_distinct() -> None:
    """Two identical dont_filter requests are two queue members (a ZSET
    would collapse equal bytes), and both come back unchanged."""
    a, b = (Request("http://a.test/", dont_filter=True) for _ in range(2))
    data_a, data_b = request_to_bytes(a), request_to_bytes(b)
    assert data_a != data_b
    assert request_to_bytes(Request("http://a.test/")) == b"http://a.test/"
    for data in (data_a, data_b):
        assert request_from_bytes(data).to_dict() == a.to_dict()


class Crawl(CrawlSpider):
    name = "shop"
    rules = (Rule(LinkExtractor(), callback="parse_item", follow=True),)

    def parse_item(self, response: Any) -> None: ...

    def _private_parse(self, response: Any) -> None: ...


def test_crawlspider_rule_callbacks_round_trip() -> None:
    spider = Crawl()
    for request_ in (
        Request(
            "http://a.test/",
            callback=spider._callback,
            errback=spider._errback,
            meta={"rule": 0, "link_text": "x"},
        ),
        Request("http://a.test/", callback=spider._private_parse),
    ):
        back = request_from_bytes(request_to_bytes(request_, spider), spider)
        assert back.to_dict(spider=spider) == request_.to_dict(spider=spider)
        assert back.callback == request_.callback


@pytest.mark.parametrize("name", ["_set_crawler", "close", "__init__", "_parse"])
def test_scrapy_internals_are_no_callbacks(name: str) -> None:
    with pytest.raises(CorruptEntry):
        request_from_bytes(b'http://a.test/\n{"c":"' + name.encode() + b'"}', Crawl())


@pytest.mark.parametrize(
    "request_",
    [
        Request("http://a.test/", callback=lambda r: None),
        Request("http://a.test/", meta={"obj": object()}),
    ],
)
def test_unserializable(request_: Request) -> None:
    with pytest.raises(UnserializableRequest):
        request_to_bytes(request_, SPIDER)
