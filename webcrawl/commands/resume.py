"""``scrapy resume``: resume a paused fleet: workers lease again where they stopped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from webcrawl.operate import DEFAULT_CRAWL, run_command, set_paused

if TYPE_CHECKING:
    import argparse


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_LEVEL": "WARNING"}

    def short_desc(self) -> str:
        return "Resume a paused fleet: workers lease again where they stopped"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--crawl", default=DEFAULT_CRAWL, help="crawl (spider) name"
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError("resume takes no arguments")
        assert self.settings is not None
        changed = run_command(
            self.settings, set_paused(self.settings, False, opts.crawl)
        )
        print(
            f"Fleet resumed (crawl {opts.crawl!r})"
            if changed
            else f"Crawl {opts.crawl!r} was not paused"
        )
