"""``scrapy status [--json] [--watch N] [--serve PORT]``: the fleet at a glance."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from webcrawl.operate import (
    DEFAULT_CRAWL,
    dumps,
    gather_status,
    render_status,
    run_command,
)

if TYPE_CHECKING:
    import argparse


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_LEVEL": "WARNING"}

    def syntax(self) -> str:
        return "[--json] [--watch N] [--serve PORT]"

    def short_desc(self) -> str:
        return "Show the fleet: workers, frontier, rates, store (--serve: a live page)"

    def long_desc(self) -> str:
        return (
            "Show the crawl's live workers (id, machine, pid, last beat, pages/s, "
            "metrics port), frontier (queued, hosts ready/waiting/parked, leases), "
            "DLQ, Bloom filter fill, Redis memory, store and fleet rates. --json "
            "prints one JSON object; --watch N repeats every N seconds; --serve "
            "PORT serves a live HTML page (and /status.json) on 127.0.0.1:PORT."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--watch", type=float, metavar="N", help="repeat every N seconds"
        )
        parser.add_argument(
            "--serve", type=int, metavar="PORT", help="serve the live page"
        )
        parser.add_argument(
            "--bind", default="127.0.0.1", help="address of --serve (default 127.0.0.1)"
        )
        parser.add_argument(
            "--every", type=float, default=2.0, help="seconds between the page's polls"
        )
        parser.add_argument(
            "--crawl", default=DEFAULT_CRAWL, help="crawl (spider) name"
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError("status takes no arguments")
        assert self.settings is not None
        if opts.serve is not None:
            from webcrawl.statuspage import StatusServer

            server = StatusServer(
                (opts.bind, opts.serve), self.settings, opts.crawl, opts.every
            )
            host, port = server.server_address[:2]
            print(
                f"Status page on http://{host!s}:{port}/ (Ctrl-C to stop)", flush=True
            )
            try:
                server.serve_forever()
            except KeyboardInterrupt:
                pass
            finally:
                server.server_close()
            return
        while True:
            status = run_command(
                self.settings, gather_status(self.settings, opts.crawl)
            )
            print(dumps(status) if opts.json else render_status(status), flush=True)
            if not opts.watch:
                return
            try:
                time.sleep(opts.watch)
            except KeyboardInterrupt:
                return
            if not opts.json:
                print()
