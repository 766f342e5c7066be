"""``scrapy redis_url``: print the crawl's Redis URL, starting the embedded
Redis when no ``REDIS_URL`` is set (``redis-cli -u "$(scrapy redis_url)"``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from extensions.connection import resolve_redis_url
from webcrawl.operate import OperatorCommand

if TYPE_CHECKING:
    import argparse


class Command(OperatorCommand):
    def short_desc(self) -> str:
        return "Print the Redis URL of the crawl (starts the embedded Redis if needed)"

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError("redis_url takes no arguments")
        print(resolve_redis_url(self.crawl_settings()))
