"""``scrapy seed FILE|-``: push seeds (URLs or JSON lines) onto the seed list."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from extensions.core.seeds import seed_meta_keys, seed_url_limit
from webcrawl.operate import OperatorCommand, check_seed_lines, push_seeds

if TYPE_CHECKING:
    import argparse


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class Command(OperatorCommand):
    def syntax(self) -> str:
        return "FILE|-"

    def short_desc(self) -> str:
        return "Push seeds (one URL or JSON object a line) from FILE or stdin"

    def long_desc(self) -> str:
        return (
            "Push seeds onto the crawl's seed key (its spider's redis_key, else "
            "REDIS_START_URLS_KEY; a set or zset with REDIS_START_URLS_AS_SET / "
            "AS_ZSET), first line first. A line is a URL or a JSON object "
            '{"url": ..., "priority": ..., "meta": {...}, "dont_filter": ...}; '
            "blank lines and # comments are skipped. Invalid lines (not UTF-8 "
            "among them) are reported with their line number and not pushed; the "
            "exit status is then 1 (2: FILE cannot be read)."
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            raise UsageError("give one FILE, or - for stdin")
        try:
            data = sys.stdin.buffer.read() if args[0] == "-" else _read(args[0])
        except OSError as exc:
            print(
                f"scrapy seed: cannot read {args[0]}: {exc.strerror}", file=sys.stderr
            )
            self.exitcode = 2
            return
        # Bytes: a line that is not UTF-8 is refused as the seed list refuses
        # it, not pushed with its bytes replaced.
        lines = data.splitlines()
        settings = self.crawl_settings()  # the spider's limit and meta keys
        valid, invalid = check_seed_lines(
            lines, seed_url_limit(settings), seed_meta_keys(settings)
        )
        for number, line, why in invalid:
            print(f"{args[0]}:{number}: {why}: {line[:200]}", file=sys.stderr)
        pushed = self.call(push_seeds, valid, opts.crawl) if valid else 0
        print(f"Pushed {pushed} seeds to crawl {opts.crawl!r}; {len(invalid)} invalid")
        if invalid:
            self.exitcode = 1
