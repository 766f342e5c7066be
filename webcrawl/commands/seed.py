"""``scrapy seed FILE|-``: push seeds (URLs or JSON lines) onto the seed list."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from webcrawl.operate import DEFAULT_CRAWL, check_seed_lines, push_seeds, run_command

if TYPE_CHECKING:
    import argparse


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_LEVEL": "WARNING"}

    def syntax(self) -> str:
        return "FILE|-"

    def short_desc(self) -> str:
        return "Push seeds (one URL or JSON object a line) from FILE or stdin"

    def long_desc(self) -> str:
        return (
            "Push seeds onto the crawl's seed list, first line first. A line is a "
            'URL or a JSON object {"url": ..., "priority": ..., "meta": {...}}; '
            "blank lines and # comments are skipped. Invalid lines are reported "
            "with their line number and not pushed; the exit status is then 1."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--crawl", default=DEFAULT_CRAWL, help="crawl (spider) name"
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            raise UsageError("give one FILE, or - for stdin")
        assert self.settings is not None
        if args[0] == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(args[0], encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        valid, invalid = check_seed_lines(lines)
        for number, line, why in invalid:
            print(f"{args[0]}:{number}: {why}: {line[:200]}", file=sys.stderr)
        pushed = (
            run_command(self.settings, push_seeds(self.settings, valid, opts.crawl))
            if valid
            else 0
        )
        print(
            f"Pushed {pushed} seeds to crawl {opts.crawl!r}; "
            f"{len(invalid)} invalid lines"
        )
        if invalid:
            self.exitcode = 1
