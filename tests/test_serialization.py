"""Requests survive the frontier's JSON encoding; nothing else is accepted."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.http import FormRequest

from extensions.core.frontier.serialization import (
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
    ],
)
def test_round_trip(request_: Request) -> None:
    back = request_from_bytes(request_to_bytes(request_, SPIDER), SPIDER)
    assert type(back) is type(request_)
    expected = request_.to_dict(spider=SPIDER)
    expected.pop("priority")  # kept in the frontier's score
    got = back.to_dict(spider=SPIDER)
    got.pop("priority")
    assert got == expected


def test_per_attempt_meta_is_not_stored() -> None:
    data = request_to_bytes(
        Request("http://a.test/", meta={"download_slot": "x", "frontier_lease": "l"})
    )
    assert data == b"http://a.test/"


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
