"""Read a stored page back: ``python -m pipelines.read [-s NAME=VALUE] URL``.

Settings read: those of :mod:`pipelines.stores` (``PAGE_STORE``,
``MONGO_URI``, ``MONGO_DATABASE``, ``SQLITE_PATH``, ``WEBCRAWL_HOME``): from
``-s``, else the project settings, else the environment (``SQLITE_PATH``,
``WEBCRAWL_HOME``, ``MONGO_URI``), as the workers read them. A store that does
not exist is reported (exit status 2), never created empty.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from pipelines.stores import store_from_settings
from pipelines.stores.base import PermanentStoreError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from pipelines.stores.base import StoredPage


def get_page(url: str, settings: BaseSettings) -> StoredPage | None:
    """The stored page of ``url`` (metadata and decompressed body), or None.

    A duplicate's body is its original's (``StoredPage.content_from``).
    Raises :class:`~pipelines.stores.base.StoreNotFoundError` when the
    settings point at no store.
    """
    store = store_from_settings(settings)
    store.open(create=False)
    try:
        return store.get_page(url)
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=str(__doc__).splitlines()[0])
    parser.add_argument("url")
    parser.add_argument(
        "--meta", action="store_true", help="print the metadata only, as JSON"
    )
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
    if page is None:
        print(f"not stored: {args.url}", file=sys.stderr)
        return 1
    print(json.dumps(page.metadata, indent=2, default=str, sort_keys=True))
    if not args.meta:
        print()
        print(page.text if page.text is not None else "(no content stored)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
