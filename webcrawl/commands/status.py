"""``scrapy status [--json] [--watch N] [--serve PORT]``: the fleet at a glance."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from webcrawl.operate import (
    OperatorCommand,
    dumps,
    gather_status,
    quiet_broken_pipe,
    render_status,
)

if TYPE_CHECKING:
    import argparse


class Command(OperatorCommand):
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
        parser.add_argument("--watch", type=float, metavar="N", help="repeat every N s")
        parser.add_argument(
            "--serve", type=int, metavar="PORT", help="serve a live page"
        )
        parser.add_argument("--bind", default="127.0.0.1", help="address of --serve")
        parser.add_argument(
            "--every", type=float, default=2.0, help="seconds between the page's polls"
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError("status takes no arguments")
        with quiet_broken_pipe():
            if opts.serve is not None:
                self.serve(opts)
                return
            self.show(opts)

    def show(self, opts: argparse.Namespace) -> None:
        while True:
            status = self.call(gather_status, opts.crawl)
            print(dumps(status) if opts.json else render_status(status), flush=True)
            if not opts.watch:
                return
            try:
                time.sleep(opts.watch)
            except KeyboardInterrupt:
                return
            if not opts.json:
                print()

    def serve(self, opts: argparse.Namespace) -> None:
        from webcrawl.statuspage import StatusServer

        address = (opts.bind, opts.serve)
        server = StatusServer(address, self.crawl_settings(), opts.crawl, opts.every)
        host, port = server.server_address[:2]
        print(f"Status page on http://{host!s}:{port}/ (Ctrl-C to stop)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
