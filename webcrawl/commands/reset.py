"""``scrapy reset --yes``: delete every Redis key of a crawl."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from webcrawl.operate import OperatorCommand, reset

if TYPE_CHECKING:
    import argparse


class Command(OperatorCommand):
    def syntax(self) -> str:
        return "--yes"

    def short_desc(self) -> str:
        return "Delete a crawl's Redis keys (frontier, seeds, Bloom, robots, stats)"

    def long_desc(self) -> str:
        return (
            "Delete every Redis key of the crawl (found with SCAN). Without --yes "
            "it deletes nothing: it says what it would delete, by kind, and exits "
            "with status 1. The page store is left alone."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--yes", action="store_true", help="really delete")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError("reset takes no arguments")
        kinds = self.call(reset, opts.yes, opts.crawl)
        verb = "Deleted" if opts.yes else "Would delete"
        print(f"{verb} {sum(kinds.values())} keys of crawl {opts.crawl!r}")
        for kind, n in kinds.items():
            print(f"  {n:>10}  {kind}")
        if not opts.yes:
            print("Nothing deleted: run `scrapy reset --yes` to delete them")
            self.exitcode = 1
