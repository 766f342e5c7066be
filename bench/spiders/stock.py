"""A plain Scrapy spider for the benchmarks: what a user writes without webcrawl.

``scrapy runspider bench/spiders/stock.py -a seeds=FILE`` (one URL per line).
It follows every in-scope link (host name under ``allowed_domains``, port
ignored) with :class:`~scrapy.linkextractors.LinkExtractor` and yields one
:class:`~pipelines.items.PageItem` per page, the item webcrawl's spider yields,
so the same storage pipeline can write both.

Run under scrapy-redis's Scheduler (``-a idle_close=3``), every worker yields
all seeds (the shared RFPDupeFilter drops the repeats) and the spider stays
open ``idle_close`` seconds after its queue runs dry, as webcrawl's
``MAX_IDLE_TIME_BEFORE_CLOSE`` does: with two workers, one that finds the
shared queue empty for a moment would otherwise close while the other still
adds requests.

Settings read: none (spider arguments only: ``seeds``, ``allowed_domains``,
``idle_close``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider
from scrapy.http import HtmlResponse, Response
from scrapy.linkextractors import LinkExtractor

from pipelines.items import PageItem

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from scrapy.crawler import Crawler


class StockSpider(Spider):
    name = "stock"

    def __init__(
        self,
        *args: Any,
        seeds: str = "",
        allowed_domains: str = "sandbox.test",
        idle_close: str | float = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.seed_file = seeds
        self.allowed_domains = [d for d in allowed_domains.split(",") if d]
        self.idle_close = float(idle_close)
        self.links = LinkExtractor(unique=True)
        self._idle_since: float | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> StockSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider._on_idle, signal=signals.spider_idle)
        crawler.signals.connect(spider._on_activity, signal=signals.response_received)
        return spider

    async def start(self) -> AsyncIterator[Any]:
        for line in Path(self.seed_file).read_text().splitlines():
            if line.strip():
                yield Request(line.strip())

    def _on_activity(self, *args: Any, **kwargs: Any) -> None:
        self._idle_since = None

    def _on_idle(self) -> None:
        if self.idle_close <= 0:
            return
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        if now - self._idle_since < self.idle_close:
            raise DontCloseSpider

    def _in_scope(self, url: str) -> bool:
        host = (urlsplit(url).hostname or "").lower()
        return any(host == d or host.endswith("." + d) for d in self.allowed_domains)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if isinstance(response, HtmlResponse):
            for link in self.links.extract_links(response):
                if not link.nofollow and self._in_scope(link.url):
                    yield Request(link.url)
        request = response.request
        assert request is not None
        yield PageItem(
            url=request.url,
            final_url=response.url,
            status=response.status,
            fingerprint=self.crawler.request_fingerprinter.fingerprint(request).hex(),
            depth=int(request.meta.get("depth", 0)),
            fetched_at=time.time(),
            headers={
                k.decode("latin-1").lower(): [v.decode("latin-1") for v in vs]
                for k, vs in response.headers.items()
            },
            body=response.body,
            encoding=getattr(response, "encoding", None),
        )
