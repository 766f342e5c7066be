"""Read a stored page back: ``python -m pipelines.read URL``.

Settings read: those of :mod:`pipelines.stores` (``PAGE_STORE``,
``MONGO_URI``, ``MONGO_DATABASE``, ``SQLITE_PATH``, ``WEBCRAWL_HOME``), from
the project settings and the environment.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from pipelines.stores import store_from_settings

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from pipelines.stores.base import StoredPage


def get_page(url: str, settings: BaseSettings) -> StoredPage | None:
    """The stored page of ``url`` (metadata and decompressed body), or None.

    A duplicate's body is its original's (``StoredPage.content_from``).
    """
    store = store_from_settings(settings)
    store.open()
    try:
        return store.get_page(url)
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument(
        "--meta", action="store_true", help="print the metadata only, as JSON"
    )
    args = parser.parse_args(argv)
    from scrapy.utils.project import get_project_settings

    page = get_page(args.url, get_project_settings())
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
