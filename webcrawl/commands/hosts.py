"""``scrapy hosts set|show|reset [HOST] [--delay S] [--concurrency N] [--max-pages N]``

Per-host settings, changed while the crawl runs, for the whole fleet:

- ``set HOST`` writes the host's override: ``--delay S`` (seconds between two
  downloads from it, in ``DOWNLOAD_DELAY``'s place: a robots.txt
  ``Crawl-delay``, a back-off and AutoThrottle still apply above it),
  ``--concurrency N`` (its downloads in flight at once, fleet-wide; 1 by
  default) and ``--max-pages N`` (its distinct URLs admitted, in
  ``HOST_MAX_PAGES``' place); ``none`` removes one field, the others are
  kept. The frontier and the download locks apply a delay and a
  concurrency at their next step; every worker uses a page budget within
  one ``FRONTIER_HEARTBEAT_INTERVAL``.
- ``show`` lists every override; ``show HOST`` its override and the host's
  records (its robots.txt delay, AutoThrottle delay, back-off, park and
  address, per scheme and port); ``--json`` one JSON object.
- ``reset HOST`` removes the host's override.

``HOST`` is a host name (``example.com``), a host key or a URL: the override
holds for every scheme and port of the name (Scrapy's download slot key).
Overrides live in Redis with the crawl (they survive restarts of the workers
and of Redis; ``scrapy reset`` and ``SCHEDULER_FLUSH_ON_START`` delete them),
are shown by ``scrapy status`` and written into the ``warcinfo`` record of
``scrapy export --format warc``.

Settings read: those of :class:`webcrawl.operate.OperatorCommand` (the
workers' settings: ``REDIS_URL``, its ``_FILE``, ``WEBCRAWL_HOME``).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import UsageError

from extensions.core.frontier.overrides import host_name
from webcrawl.operate import (
    OperatorCommand,
    quiet_broken_pipe,
    render_override,
    reset_host,
    set_host,
    show_hosts,
)

if TYPE_CHECKING:
    from collections.abc import Callable

ACTIONS = ("set", "show", "reset")


def _value(kind: Callable[[str], Any], low: float, name: str) -> Callable[[str], Any]:
    """An argparse type: a number >= ``low``, or ``none`` (remove it)."""

    def parse(text: str) -> Any:
        if text.strip().lower() == "none":
            return None
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(
                f"{text!r}: use a number >= {low:g} or none"
            )
        return value

    return parse


def describe_record(hostkey: str, record: dict[str, str], now_ms: int) -> str:
    """One line of ``scrapy hosts show HOST`` per host key.

    >>> describe_record("http://a.test:80", {"delay": "2000", "throttle": "1500",
    ...                 "park": "5000", "ip": "10.0.0.1"}, 1000)
    'http://a.test:80  robots.txt delay 2 s, AutoThrottle 1.5 s, parked 4 s, ip 10...'
    """
    parts = []
    if "delay" in record:
        parts.append(f"robots.txt delay {int(record['delay']) / 1000:g} s")
    if "throttle" in record:
        parts.append(f"AutoThrottle {int(record['throttle']) / 1000:g} s")
    if "backoff" in record:
        parts.append(f"back-off {int(record['backoff']) / 1000:g} s")
    park = int(record.get("park", 0)) - now_ms
    if park > 0:
        parts.append(f"parked {park / 1000:.0f} s")
    if "ip" in record:
        parts.append(f"ip {record['ip']}")
    return f"{hostkey}  " + (", ".join(parts) or "(nothing recorded)")


class Command(OperatorCommand):
    def syntax(self) -> str:
        return (
            "set|show|reset [HOST] [--delay S] [--concurrency N] [--max-pages N] "
            "[--json]"
        )

    def short_desc(self) -> str:
        return "Set, show or reset a host's own delay, concurrency, page budget"

    def long_desc(self) -> str:
        return str(__doc__).split("Settings read")[0].split("\n", 1)[1].strip()

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        # Absent unless given (SUPPRESS): "none" gives None, which removes it.
        parser.add_argument(
            "--delay", type=_value(float, 0, "delay"), metavar="S",
            default=argparse.SUPPRESS,
            help="set: seconds between two downloads from the host (none: unset)",
        )  # fmt: skip
        parser.add_argument(
            "--concurrency", type=_value(int, 1, "concurrency"), metavar="N",
            default=argparse.SUPPRESS,
            help="set: the host's downloads in flight at once, fleet-wide",
        )  # fmt: skip
        parser.add_argument(
            "--max-pages", type=_value(int, 0, "max-pages"), metavar="N",
            dest="max_pages", default=argparse.SUPPRESS,
            help="set: distinct URLs of the host admitted (0: no limit)",
        )  # fmt: skip
        parser.add_argument("--json", action="store_true", help="show: JSON output")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not args or args[0] not in ACTIONS:
            raise UsageError(f"give one action: {', '.join(ACTIONS)}")
        action, rest = args[0], args[1:]
        if len(rest) > 1 or (action != "show" and len(rest) != 1):
            raise UsageError(f"{action} takes one HOST")
        try:
            host = host_name(rest[0]) if rest else None
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        given = {
            field: getattr(opts, field)
            for field in ("delay", "concurrency", "max_pages")
            if hasattr(opts, field)
        }
        with quiet_broken_pipe():
            if action == "set":
                assert host is not None
                if not given:
                    raise UsageError("set: give --delay, --concurrency or --max-pages")
                conf = self.call(set_host, host, given, opts.crawl)
                print(render_override(host, conf.as_dict()))
            elif action == "reset":
                assert host is not None
                had = self.call(reset_host, host, opts.crawl)
                print(f"{host}: override removed" if had else f"{host}: none set")
            else:
                self.show(host, opts)

    def show(self, host: str | None, opts: argparse.Namespace) -> None:
        found = self.call(show_hosts, host, opts.crawl)
        if opts.json:
            print(json.dumps(found, sort_keys=True))
            return
        overrides = found["overrides"]
        for name, fields in sorted(overrides.items()):
            print(render_override(name, fields))
        if host is None:
            print(f"{len(overrides)} hosts overridden")
            return
        if not overrides:
            print(f"{host}  no override")
        now_ms = found.get("time_ms") or int(time.time() * 1000)
        for hostkey, record in found["records"].items():
            print("  " + describe_record(hostkey, record, now_ms))
