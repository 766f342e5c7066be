"""A plain CrawlSpider, as ``scrapy genspider -t crawl`` writes one."""

from __future__ import annotations

from typing import Any

from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class ShopSpider(CrawlSpider):
    name = "shop"
    allowed_domains = ["sandbox.test"]

    rules = (
        Rule(
            LinkExtractor(allow=r"/(news|blog|docs|products)/"),
            callback="parse_item",
            follow=True,
        ),
        # A callback that yields nothing.
        Rule(
            LinkExtractor(allow=r"/(guides|events)/"),
            callback="parse_nothing",
            follow=True,
        ),
        Rule(LinkExtractor(), follow=True),
    )

    def parse_item(self, response: Any) -> Any:
        yield {"url": response.url, "title": response.css("title::text").get()}

    def parse_nothing(self, response: Any) -> None:
        return None
