"""``scrapy resume``: a paused fleet leases again, where it stopped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from webcrawl.operate import OperatorCommand, set_paused

if TYPE_CHECKING:
    import argparse


class Command(OperatorCommand):
    def short_desc(self) -> str:
        return "Resume a paused fleet: workers lease again where they stopped"

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError("resume takes no arguments")
        if self.call(set_paused, False, opts.crawl):
            print(f"Fleet resumed (crawl {opts.crawl!r})")
        else:
            print(f"Crawl {opts.crawl!r} was not paused")
