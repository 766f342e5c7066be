"""One parse per page, one robots rule: the ``web`` spider's links and the
storage pipeline's record come from the same :func:`pipelines.processing.extract`
result (issue 10 "One rule for robots meta", issue 13 "One parse per page")."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse, XmlResponse
from scrapy.utils.test import get_crawler

from pipelines import batching
from pipelines.batching import prepare_page
from pipelines.items import PageItem
from webcrawl.spiders import web
from webcrawl.spiders.web import WebSpider

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

TEXT = " ".join(f"word{i}" for i in range(40))


def page(meta: str | None, headers: dict[str, str] | None = None) -> HtmlResponse:
    head = f'<meta name="robots" content="{meta}">' if meta is not None else ""
    body = (
        f"<html><head><title>t</title>{head}</head><body><main><p>{TEXT}</p>"
        '<p><a href="/next.html">next</a> <a href="/image.png">png</a> '
        '<a href="/next.html">again</a> <a href="/x" rel="nofollow">x</a> '
        '<a href="http://elsewhere.test/">out</a></p></main></body></html>'
    )
    url = "http://a.test/page.html"
    return HtmlResponse(
        url,
        body=body.encode(),
        headers={"Content-Type": "text/html; charset=utf-8", **(headers or {})},
        request=Request(url),
    )


def crawl(response: HtmlResponse) -> tuple[list[str], PageItem]:
    crawler = get_crawler(WebSpider, {"WEB_ALLOWED_DOMAINS": ["a.test"]})
    spider = WebSpider.from_crawler(crawler)
    crawler.spider = spider
    out: AsyncIterator[Any] = spider.parse(response)
    results = asyncio.run(collect(out))
    item = results[-1]
    assert isinstance(item, PageItem)
    urls = [r.url for r in results if isinstance(r, Request)]
    return urls, item


@pytest.mark.parametrize(
    ("meta", "headers", "noindex", "nofollow"),
    [
        (None, None, False, False),
        ("index, follow", None, False, False),
        ("none", None, True, True),
        ("NONE", None, True, True),
        ("nofollow", None, False, True),
        ("noindex", None, True, False),
        ("otherbot: none", None, False, False),
        (None, {"X-Robots-Tag": "none"}, True, True),
        (None, {"X-Robots-Tag": "nofollow, noarchive"}, False, True),
    ],
)
def test_spider_and_pipeline_apply_one_robots_rule(
    meta: str | None,
    headers: dict[str, str] | None,
    noindex: bool,
    nofollow: bool,
) -> None:
    urls, item = crawl(page(meta, headers))
    prepared = prepare_page(item)
    # The pipeline records what the spider obeyed: no links followed from a
    # nofollow page (``none`` included), every in-scope page link otherwise.
    assert prepared.metadata["nofollow"] is nofollow
    assert prepared.metadata["noindex"] is noindex
    assert urls == ([] if nofollow else ["http://a.test/next.html"])
    assert (prepared.content is None) is noindex


def test_pipeline_reuses_the_spiders_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    _, item = crawl(page(None))
    assert item.extracted is not None

    def parse_again(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the pipeline parsed the page a second time")

    monkeypatch.setattr(batching, "extract", parse_again)
    prepared = prepare_page(item)
    assert prepared.words == 40 + 5  # the text and its link words
    assert prepared.simhash is not None


def _sitemap_spider() -> WebSpider:
    crawler = get_crawler(WebSpider, {"WEB_ALLOWED_DOMAINS": ["a.test"]})
    spider = WebSpider.from_crawler(crawler)
    crawler.spider = spider
    crawler.stats.open_spider()
    return spider


@pytest.mark.parametrize("body", [b"", b"plain text, no XML", b"\xff\xfe\x00<"])
def test_a_sitemap_with_no_xml_is_counted_unparseable(body: bytes) -> None:
    spider = _sitemap_spider()
    response = XmlResponse("http://a.test/sitemap.xml", body=body)
    assert list(spider._sitemap_links(response)) == []
    assert spider.crawler.stats.get_value("web/sitemap_unparseable") == 1


def test_a_sitemap_entry_that_is_no_url_is_skipped_not_the_rest() -> None:
    """Before: urljoin's ValueError on the first entry was a spider error,
    and every later entry of the sitemap was lost."""
    spider = _sitemap_spider()
    body = (
        b"<urlset><url><loc>http://[oops/x</loc></url>"
        b"<url><loc>http://a.test/ok</loc></url></urlset>"
    )
    response = XmlResponse("http://a.test/sitemap.xml", body=body)
    assert [r.url for r in spider._sitemap_links(response)] == ["http://a.test/ok"]
    assert spider.crawler.stats.get_value("web/sitemap_invalid_loc") == 1


def test_a_bug_in_the_sitemap_parse_surfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: ``except Exception`` took any error for hostile XML."""

    def broken(body: bytes) -> Any:
        raise TypeError("a bug")

    monkeypatch.setattr(web, "Sitemap", broken)
    spider = _sitemap_spider()
    response = XmlResponse("http://a.test/sitemap.xml", body=b"<urlset/>")
    with pytest.raises(TypeError):
        list(spider._sitemap_links(response))


async def collect(items: AsyncIterator[Any]) -> list[Any]:
    return [x async for x in items]


BAD_PORT_LINKS = ["http://a.test:99999/", "http://a.test:65536/x"]


def test_a_link_scrapy_refuses_is_counted_and_skipped_not_the_page() -> None:
    """Issue 21: ``http://a.test:99999/`` passes the extractor, then
    ``Request()`` raised ``Port out of range``: the page lost its record and
    every later link, and was dead-lettered ``unparseable``."""
    anchors = "".join(f'<a href="{url}">bad</a>' for url in BAD_PORT_LINKS)
    body = (
        f"<html><body><p>{TEXT}</p><a href='/before'>b</a>{anchors}"
        "<a href='/after'>a</a></body></html>"
    )
    url = "http://a.test/page.html"
    response = HtmlResponse(
        url,
        body=body.encode(),
        headers={"Content-Type": "text/html; charset=utf-8"},
        request=Request(url),
    )
    crawler = get_crawler(WebSpider, {"WEB_ALLOWED_DOMAINS": ["a.test"]})
    spider = WebSpider.from_crawler(crawler)
    crawler.spider = spider
    crawler.stats.open_spider()
    results = asyncio.run(collect(spider.parse(response)))
    assert isinstance(results[-1], PageItem)
    assert results[-1].error is None
    assert [r.url for r in results if isinstance(r, Request)] == [
        "http://a.test/before",
        "http://a.test/after",
    ]
    assert crawler.stats.get_value("links/invalid") == len(BAD_PORT_LINKS)


def test_a_sitemap_entry_scrapy_refuses_is_skipped_not_the_rest() -> None:
    spider = _sitemap_spider()
    locs = [*BAD_PORT_LINKS, "http://a.test/ok"]
    body = "<urlset>{}</urlset>".format(
        "".join(f"<url><loc>{loc}</loc></url>" for loc in locs)
    ).encode()
    response = XmlResponse("http://a.test/sitemap.xml", body=body)
    assert [r.url for r in spider._sitemap_links(response)] == ["http://a.test/ok"]
    assert spider.crawler.stats.get_value("web/sitemap_invalid_loc") == 2
