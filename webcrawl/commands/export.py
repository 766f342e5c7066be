"""``scrapy export --format jsonl|warc -o FILE [--host H] [--since T] [--body]``

Writes the stored pages (read through the page store's ``iter_pages``, see
:mod:`pipelines.export`) as JSON lines of metadata and extracted text, or as
WARC 1.1 (``.warc.gz``: gzip per record; ``.warc``: plain). ``-o -`` writes
to standard output. ``--since`` takes Unix seconds, an ISO 8601 date or time
(UTC unless it says otherwise) or an age such as ``90m``, ``6h``, ``2d``.

A WARC file's ``warcinfo`` record names the crawl's politeness settings:
``robots``, ``http-header-user-agent``, and webcrawl's own fields
``webcrawl-download-delay``, ``webcrawl-politeness-key`` and
``webcrawl-host-overrides`` (the operators' per-host settings, ``scrapy
hosts``, as JSON, read from the crawl's Redis when it answers; left out,
with a note on stderr, when it does not).

Settings read: those of :mod:`pipelines.stores` (``PAGE_STORE``,
``MONGO_URI``, ``MONGO_DATABASE``, ``SQLITE_PATH``, ``WEBCRAWL_HOME``), from
``-s``, the project settings and the environment; for the ``warcinfo``
record ``USER_AGENT``, ``ROBOTS_ENABLED``, ``DOWNLOAD_DELAY``,
``POLITENESS_KEY`` and ``REDIS_URL`` (else the embedded Redis, if it runs).
A store that does not exist is an error (exit status 2), never created empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

import redis.asyncio as aredis
from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from extensions.connection import TRANSIENT_REDIS_ERRORS
from extensions.connection.embedded import running_url, webcrawl_home
from extensions.core.frontier.overrides import HostOverrides
from extensions.keys import DEFAULT_CRAWL
from extensions.settings.config import SettingsError, setting_or_env
from pipelines.export import write_jsonl, write_warc
from pipelines.stores import store_from_settings
from pipelines.stores.base import PermanentStoreError
from webcrawl.operate import quiet_broken_pipe

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(value: str, now: float | None = None) -> float:
    """A ``--since`` value as Unix seconds.

    >>> parse_since("1700000000"), parse_since("2h", now=10000.0)
    (1700000000.0, 2800.0)
    >>> parse_since("2023-11-14"), parse_since("2023-11-14T22:13:20+00:00")
    (1699920000.0, 1700000000.0)
    """
    with contextlib.suppress(ValueError):
        return float(value)
    age = _AGE.match(value.strip().lower())
    if age:
        current = time.time() if now is None else now
        return current - float(age.group(1)) * _UNIT[age.group(2)]
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise UsageError(
            f"--since {value!r}: not Unix seconds, an ISO date or an age (6h, 2d)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def crawl_info(settings: Any) -> dict[str, str]:
    """The ``warcinfo`` fields of the crawl's politeness settings and its
    host overrides (see the module docstring)."""
    info = {
        "robots": "obey" if settings.getbool("ROBOTS_ENABLED", True) else "ignore",
        "http-header-user-agent": str(settings.get("USER_AGENT") or ""),
        "webcrawl-download-delay": f"{settings.getfloat('DOWNLOAD_DELAY'):g}",
        "webcrawl-politeness-key": str(settings.get("POLITENESS_KEY") or "host"),
    }
    url = setting_or_env(settings, "REDIS_URL") or running_url(webcrawl_home(settings))
    if not url:
        print("scrapy export: no Redis: host overrides not exported", file=sys.stderr)
        return info

    async def read() -> dict[str, Any]:
        client = aredis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
        try:
            table = await HostOverrides(client, DEFAULT_CRAWL).all()
        finally:
            await client.aclose()
        return {host: conf.as_dict() for host, conf in table.items()}

    try:
        overrides = asyncio.run(read())
    except TRANSIENT_REDIS_ERRORS as exc:
        print(
            f"scrapy export: Redis unreachable ({type(exc).__name__}): host "
            "overrides not exported",
            file=sys.stderr,
        )
        return info
    info["webcrawl-host-overrides"] = json.dumps(overrides, sort_keys=True)
    return info


@contextlib.contextmanager
def _output(path: str) -> Iterator[IO[bytes]]:
    if path == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    with open(path, "wb") as out:
        yield out


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "WARNING"}

    def syntax(self) -> str:
        return "--format jsonl|warc -o FILE [--host H] [--since T] [--body]"

    def short_desc(self) -> str:
        return "Export stored pages as JSON lines or WARC 1.1"

    def long_desc(self) -> str:
        # The module docstring without its first line (the syntax) and the
        # list of settings.
        return str(__doc__).split("Settings read")[0].split("\n", 1)[1].strip()

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--format", choices=("jsonl", "warc"), required=True, help="output format"
        )
        parser.add_argument(
            "-o", "--output", required=True, metavar="FILE",
            help="file to write ('-': stdout; .warc.gz: gzip per record)",
        )  # fmt: skip
        parser.add_argument("--host", help="only pages of this host name")
        parser.add_argument(
            "--since", help="only pages fetched since (Unix time, ISO date, 6h, 2d)"
        )
        parser.add_argument(
            "--body", action="store_true", help="jsonl: add the decoded body"
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError(f"unexpected arguments: {' '.join(args)}")
        since = parse_since(opts.since) if opts.since else None
        assert self.settings is not None
        try:
            store = store_from_settings(self.settings)
            store.open(create=False)
        except (PermanentStoreError, SettingsError) as e:
            print(f"scrapy export: {e}", file=sys.stderr)
            self.exitcode = 2
            return
        # A reader of stdout that goes away (| head) ends the command once the
        # store is closed.
        with quiet_broken_pipe():
            try:
                summary = self.write(store, opts, since)
            finally:
                store.close()
        print(f"exported {summary} to {opts.output}", file=sys.stderr)

    def write(self, store: Any, opts: argparse.Namespace, since: float | None) -> str:
        """Write the pages to ``opts.output``; what was written, in words."""
        pages = store.iter_pages(host=opts.host, since=since)
        with _output(opts.output) as out:
            if opts.format == "jsonl":
                n = write_jsonl(pages, out, with_body=opts.body)
                return f"{n} pages"
            gzip = opts.output.endswith(".gz")
            counts = write_warc(
                pages,
                out,
                gzip=gzip,
                filename=Path(opts.output).name,
                info=crawl_info(self.settings),
            )
            return ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
