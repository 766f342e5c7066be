"""``scrapy pause``: the whole fleet stops leasing; workers finish what they
hold and stay alive."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from webcrawl.operate import OperatorCommand, set_paused

if TYPE_CHECKING:
    import argparse


class Command(OperatorCommand):
    def short_desc(self) -> str:
        return "Pause the whole fleet: workers finish what they hold and lease nothing"

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError("pause takes no arguments")
        if self.call(set_paused, True, opts.crawl):
            print(
                f"Fleet paused (crawl {opts.crawl!r}): workers finish what they "
                "hold, then wait; `scrapy resume` to continue"
            )
        else:
            print(f"Crawl {opts.crawl!r} was already paused")
