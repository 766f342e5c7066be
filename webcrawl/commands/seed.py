"""``scrapy seed FILE|-``: push seeds (URLs or JSON lines) onto the seed list."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from extensions.core.seeds import seed_url_limit
from webcrawl.operate import OperatorCommand, check_seed_lines, push_seeds

if TYPE_CHECKING:
    import argparse


class Command(OperatorCommand):
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

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            raise UsageError("give one FILE, or - for stdin")
        if args[0] == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(args[0], encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        limit = seed_url_limit(self.crawl_settings())  # the spider's limit
        valid, invalid = check_seed_lines(lines, limit)
        for number, line, why in invalid:
            print(f"{args[0]}:{number}: {why}: {line[:200]}", file=sys.stderr)
        pushed = self.call(push_seeds, valid, opts.crawl) if valid else 0
        print(f"Pushed {pushed} seeds to crawl {opts.crawl!r}; {len(invalid)} invalid")
        if invalid:
            self.exitcode = 1
