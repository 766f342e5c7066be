"""``scrapy dlq list|requeue|purge [--reason R] [--host H] [--json] [--all]``

The dead-letter queue of a crawl (:mod:`extensions.core.frontier.deadletters`): every
URL whose
story ended in a terminal failure, with its reason class, last status or
error, attempts and failure times.

- ``list`` prints one line per entry and the count per reason (``--json``: a
  JSON list of entries, each with ``url``, ``reason``, ``attempts``,
  ``status``, ``error``, ``first_failure``, ``last_failure``, ``host`` and
  ``request``).
- ``requeue`` puts the matching requests back in the frontier exactly as
  they were first queued, past the dupefilter, with a fresh failure budget,
  and removes their entries; running workers pick them up.
- ``purge`` deletes the matching entries (``--all`` when no filter is given).

``--reason`` takes a reason class (``dns``, ``connection``, ``http_5xx``,
... see the README's failure table), ``--host`` a host name or host key
(``http://a.test:80``). ``--crawl`` names the crawl (the spider name,
``web``).

Settings read: those of :class:`webcrawl.operate.OperatorCommand` (the
workers' settings: ``REDIS_URL``, its ``_FILE``, ``WEBCRAWL_HOME``).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import UsageError

from extensions.core.frontier.deadletters import DeadLetters
from webcrawl.operate import (
    OperatorCommand,
    client_for,
    partitions_of,
    quiet_broken_pipe,
)

if TYPE_CHECKING:
    import argparse

    from scrapy.settings import BaseSettings

ACTIONS = ("list", "requeue", "purge")


def describe(entry: dict[str, Any]) -> str:
    """One line of ``dlq list``.

    >>> describe({"reason": "dns", "attempts": 2, "status": None,
    ...           "error": "DNSLookupError: x", "url": "http://a.test/"})
    'dns\\t2\\tDNSLookupError: x\\thttp://a.test/'
    """
    last = entry.get("status") or entry.get("error") or ""
    return f"{entry['reason']}\t{entry['attempts']}\t{last}\t{entry['url']}"


async def dlq_action(
    settings: BaseSettings, action: str, opts: argparse.Namespace
) -> None:
    client = client_for(settings)
    try:
        partitions = await partitions_of(settings, client, opts.crawl)
        dlq = DeadLetters(client, opts.crawl, partitions)
        if action == "list":
            entries = await dlq.entries(opts.reason, opts.host)
            if opts.json:
                json.dump(entries, sys.stdout, indent=1)
                print()
                return
            for entry in entries:
                print(describe(entry))
            sizes: dict[str, int] = {}
            for entry in entries:
                sizes[entry["reason"]] = sizes.get(entry["reason"], 0) + 1
            summary = ", ".join(f"{r}: {n}" for r, n in sorted(sizes.items()))
            print(f"{len(entries)} dead letters ({summary or 'none'})")
        elif action == "requeue":
            n = await dlq.requeue(opts.reason, opts.host)
            print(f"{n} requests re-queued")
        else:
            n = await dlq.purge(opts.reason, opts.host)
            print(f"{n} dead letters purged")
    finally:
        await client.aclose()


class Command(OperatorCommand):
    def syntax(self) -> str:
        return "list|requeue|purge [--reason R] [--host H] [--json] [--all]"

    def short_desc(self) -> str:
        return "List, re-queue or purge the dead-letter queue"

    def long_desc(self) -> str:
        return str(__doc__).split("Settings read")[0].split("\n", 1)[1].strip()

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--reason", help="only entries of this reason class")
        parser.add_argument("--host", help="only entries of this host")
        parser.add_argument("--json", action="store_true", help="list: JSON output")
        parser.add_argument(
            "--all", action="store_true", help="purge: every entry (no filter)"
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1 or args[0] not in ACTIONS:
            raise UsageError(f"give one action: {', '.join(ACTIONS)}")
        action = args[0]
        if action == "purge" and not (opts.reason or opts.host or opts.all):
            raise UsageError("purge: give --reason, --host or --all")
        with quiet_broken_pipe():
            self.call(dlq_action, action, opts)
