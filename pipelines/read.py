"""Read a stored page back: ``python -m pipelines.read [-s NAME=VALUE] URL``.

``--history`` prints the page's visits instead (continuous crawling): one
line each, oldest first: when it was fetched (UTC), the status, whether the
content changed, the content hash. ``--version N`` prints the N-th earlier
content of a page that changed (1: the one before the stored one).
``--headers`` prints the response headers a non-HTML record keeps (a PDF,
an image...), one ``name: value`` line each; the ``--meta`` JSON has them
too, as ``[name, value]`` pairs.

Settings read: those of :mod:`pipelines.stores` (``PAGE_STORE``,
``MONGO_URI``, ``MONGO_DATABASE``, ``SQLITE_PATH``, ``WEBCRAWL_HOME``): from
``-s``, else the project settings, else the environment (``SQLITE_PATH``,
``WEBCRAWL_HOME``, ``MONGO_URI``), as the workers read them. A store that does
not exist is reported (exit status 2), never created empty.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from extensions.settings.config import SettingsError
from pipelines.stores import store_from_settings
from pipelines.stores.base import PermanentStoreError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy.settings import BaseSettings

    from pipelines.stores.base import PageStore, StoredPage


def get_page(url: str, settings: BaseSettings) -> StoredPage | None:
    """The stored page of ``url`` (metadata and decompressed body), or None.

    A duplicate's body is its original's (``StoredPage.content_from``).
    Raises :class:`~pipelines.stores.base.StoreNotFoundError` when the
    settings point at no store.
    """
    with _reader(settings) as store:
        return store.get_page(url)


def get_versions(url: str, settings: BaseSettings) -> list[StoredPage]:
    """The earlier contents of ``url``, newest first (see :func:`get_page`)."""
    with _reader(settings) as store:
        return store.get_versions(url)


@contextlib.contextmanager
def _reader(settings: BaseSettings) -> Iterator[PageStore]:
    store = store_from_settings(settings)
    store.open(create=False)
    try:
        yield store
    finally:
        store.close()


def history_lines(history: list[dict[str, Any]]) -> list[str]:
    """One line per visit.

    >>> history_lines([{"fetched_at": 0, "status": 304, "changed": False,
    ...                 "content_hash": "ab"}])
    ['1970-01-01T00:00:00Z  304  unchanged  ab']
    """
    marks = {True: "changed", False: "unchanged", None: "-"}
    lines = []
    for h in history:
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(h.get("fetched_at") or 0))
        chash = h.get("content_hash") or "-"
        lines.append(f"{at}  {h.get('status')}  {marks[h.get('changed')]}  {chash}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=str(__doc__).splitlines()[0])
    parser.add_argument("url")
    parser.add_argument(
        "--meta", action="store_true", help="print the metadata only, as JSON"
    )
    parser.add_argument(
        "--history", action="store_true",
        help="print the page's visits: fetched at, status, changed, content hash",
    )  # fmt: skip
    parser.add_argument(
        "--headers", action="store_true",
        help="print the response headers of a non-HTML record, one per line",
    )  # fmt: skip
    parser.add_argument(
        "--version", type=int, default=0, metavar="N",
        help="print the N-th earlier content of a changed page (1: the last one)",
    )  # fmt: skip
    parser.add_argument(
        "-s", "--set", action="append", default=[], metavar="NAME=VALUE",
        help="set a setting, as with scrapy (e.g. -s SQLITE_PATH=pages.sqlite3)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    from scrapy.utils.project import get_project_settings

    settings = get_project_settings()
    for pair in args.set:
        name, sep, value = pair.partition("=")
        if not sep:
            parser.error(f"-s {pair!r}: expected NAME=VALUE")
        settings.set(name, value, priority="cmdline")
    try:
        page = get_page(args.url, settings)
    except PermanentStoreError as e:
        print(f"pipelines.read: {e} (set SQLITE_PATH, WEBCRAWL_HOME or MONGO_URI)",
              file=sys.stderr)  # fmt: skip
        return 2
    except SettingsError as e:
        print(f"pipelines.read: {e}", file=sys.stderr)
        return 2
    if page is None:
        print(f"not stored: {args.url}", file=sys.stderr)
        return 1
    if args.history:
        for line in history_lines(page.metadata.get("history") or []):
            print(line)
        return 0
    if args.headers:
        headers = page.metadata.get("headers")
        if headers is None:
            print(f"no headers stored for {args.url} (an HTML page or a failure)",
                  file=sys.stderr)  # fmt: skip
            return 1
        for name, value in headers:
            print(f"{name}: {value}")
        return 0
    if args.version > 0:
        versions = get_versions(page.url, settings)  # args.url may be final
        if len(versions) < args.version:
            print(f"{len(versions)} earlier versions of {args.url}", file=sys.stderr)
            return 1
        page = versions[args.version - 1]
    print(json.dumps(page.metadata, indent=2, default=str, sort_keys=True))
    if not args.meta:
        print()
        print(page.text if page.text is not None else "(no content stored)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
