"""One contract suite for every page store: SQLite, MongoStore on mongomock
(the pymongo-level logic), and a real MongoDB when WEBCRAWL_TEST_MONGO_URI is
set."""

from __future__ import annotations

import os
import zlib
from typing import TYPE_CHECKING, Any

import mongomock
import pytest

from pipelines.batching import prepare_page
from pipelines.items import PageItem
from pipelines.stores.mongo import MongoStore
from pipelines.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from pipelines.stores.base import PageStore

MONGO_URI = os.environ.get("WEBCRAWL_TEST_MONGO_URI", "")


def patch_mongomock() -> None:
    """mongomock 4.3 predates pymongo 4.9's ``sort`` argument of
    ``ReplaceOne``, which pymongo passes through (as None) to the bulk
    builder: accept and ignore it, as the server does without a sort."""
    from mongomock.collection import BulkOperationBuilder

    original = BulkOperationBuilder.add_replace
    if getattr(original, "_webcrawl_patched", False):
        return

    def add_replace(self: Any, *args: Any, sort: Any = None, **kw: Any) -> Any:
        return original(self, *args, **kw)

    add_replace._webcrawl_patched = True  # type: ignore[attr-defined]
    BulkOperationBuilder.add_replace = add_replace  # type: ignore[method-assign]


patch_mongomock()


def _sqlite(tmp_path: Path) -> tuple[PageStore, Any]:
    path = tmp_path / "pages.sqlite3"
    return SQLiteStore(path), lambda: SQLiteStore(path)


def _mongomock(tmp_path: Path) -> tuple[PageStore, Any]:
    client: Any = mongomock.MongoClient()
    return MongoStore(client=client), lambda: MongoStore(client=client)


def _mongo(tmp_path: Path) -> tuple[PageStore, Any]:
    db = f"webcrawl_test_{os.getpid()}_{tmp_path.name}"[:60]
    return MongoStore(MONGO_URI, db), lambda: MongoStore(MONGO_URI, db)


@pytest.fixture(
    params=[
        "sqlite",
        "mongomock",
        pytest.param(
            "mongodb",
            marks=[
                pytest.mark.mongo,
                pytest.mark.skipif(
                    not MONGO_URI,
                    reason="real MongoDB layer: WEBCRAWL_TEST_MONGO_URI is not set",
                ),
            ],
        ),
    ]
)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    make = {"sqlite": _sqlite, "mongomock": _mongomock, "mongodb": _mongo}
    store, reopen = make[request.param](tmp_path)
    store.open()
    yield store, reopen
    if request.param == "mongodb":
        import pymongo

        pymongo.MongoClient(MONGO_URI).drop_database(store.database_name)  # type: ignore[attr-defined]
    store.close()


def page(url: str, body: bytes = b"", fp: str = "", **kw: Any) -> Any:
    html = (
        body
        or (
            f"<html><head><title>T {url}</title></head><body><p>"
            + " ".join(f"word{i} of {url}" for i in range(40))
            + "</p></body></html>"
        ).encode()
    )
    item = PageItem(url, url, kw.pop("status", 200), fp or f"fp-{url}", body=html, **kw)
    return prepare_page(item)


def write(store: PageStore, pages: list[Any]) -> Any:
    return store.write_batch(
        [p.metadata for p in pages], [p.content for p in pages if p.content]
    )


def test_write_and_read_back(store_factory: Any) -> None:
    store, _ = store_factory
    pages = [page(f"http://a.test/{i}") for i in range(5)]
    result = write(store, pages)
    assert (result.written, result.content_written, result.errors) == (5, 5, [])
    assert store.count() == 5
    got = store.get_page("http://a.test/3")
    assert got is not None
    assert got.body == pages[3].item.body
    assert got.metadata["_id"] == "fp-http://a.test/3"
    assert got.metadata["title"] == "T http://a.test/3"
    assert got.metadata["has_content"] is True
    assert got.metadata["compressed_size"] < got.metadata["size"]
    assert store.get_page("http://a.test/missing") is None


def test_rewrite_is_idempotent_and_persists(store_factory: Any) -> None:
    store, reopen = store_factory
    pages = [page(f"http://a.test/{i}") for i in range(3)]
    write(store, pages)
    write(store, pages)  # a retried batch
    newer = page("http://a.test/1", b"<p>changed page</p>")
    write(store, [newer])
    assert store.count() == 3
    store.close()
    again = reopen()
    again.open()
    try:
        assert again.count() == 3
        got = again.get_page("http://a.test/1")
        assert got is not None and got.body == b"<p>changed page</p>"
    finally:
        again.close()


def test_failed_page_is_metadata_only(store_factory: Any) -> None:
    store, _ = store_factory
    failed = prepare_page(
        PageItem("http://a.test/x", "http://a.test/x", 0, "fpx", error="DNSLookupError")
    )
    result = write(store, [failed])
    assert (result.written, result.content_written) == (1, 0)
    got = store.get_page("http://a.test/x")
    assert got is not None and got.body is None
    assert got.metadata["error"] == "DNSLookupError"
    assert got.metadata["status"] == 0


def test_duplicate_url_is_a_per_document_error(store_factory: Any) -> None:
    store, _ = store_factory
    write(store, [page("http://a.test/same", fp="one")])
    result = write(
        store, [page("http://a.test/same", fp="two"), page("http://a.test/ok")]
    )
    assert result.written == 1
    assert [e.page_id for e in result.errors] == ["two"]
    assert store.count() == 2


def test_duplicate_reads_the_originals_content(store_factory: Any) -> None:
    from pipelines.dedup import Duplicate

    store, _ = store_factory
    original = page("http://a.test/orig")
    dup = page("http://a.test/copy", original.item.body)
    dup.mark_duplicate(Duplicate("exact", original.page_id))
    result = write(store, [original, dup])
    assert (result.written, result.content_written) == (2, 1)
    got = store.get_page("http://a.test/copy")
    assert got is not None
    assert got.metadata["duplicate_of"] == original.page_id
    assert got.body == original.item.body
    assert got.content_from == original.page_id


def test_content_is_zlib_and_refetch_as_noindex_drops_it(store_factory: Any) -> None:
    store, _ = store_factory
    p = page("http://a.test/n")
    assert zlib.decompress(p.content["html_compressed"]) == p.item.body
    write(store, [p])
    hidden = page(
        "http://a.test/n",
        b'<meta name="robots" content="noindex"><p>secret</p>',
    )
    assert hidden.content is None and hidden.metadata["noindex"]
    write(store, [hidden])
    got = store.get_page("http://a.test/n")
    assert got is not None and got.body is None and got.metadata["noindex"] is True


def test_iter_pages_filters_and_pages_through_chunks(store_factory: Any) -> None:
    from pipelines.stores.base import ITER_CHUNK

    store, _ = store_factory
    n = ITER_CHUNK + 7  # more than one chunk
    pages = []
    for i in range(n):
        host = "a.test" if i % 2 else "B.test"
        # Every third page shares a fetch time: the order breaks ties by id.
        pages.append(page(f"http://{host}/{i}", fetched_at=1000.0 + i // 3))
    for i in range(0, n, 50):
        write(store, pages[i : i + 50])
    got = list(store.iter_pages())
    assert len(got) == n
    assert [p.url for p in got] == [
        p.item.url
        for p in sorted(pages, key=lambda p: (p.metadata["fetched_at"], p.page_id))
    ]
    by_url = {p.item.url: p for p in pages}
    assert all(g.body == by_url[g.url].item.body for g in got)
    assert all(g.metadata["has_content"] is True for g in got)
    only_a = list(store.iter_pages(host="A.TEST"))
    assert {p.metadata["domain"] for p in only_a} == {"a.test"}
    assert len(only_a) == n // 2
    late = list(store.iter_pages(since=1000.0 + 60))
    assert {p.url for p in late} == {
        p.item.url for p in pages if p.metadata["fetched_at"] >= 1060.0
    }
    assert list(store.iter_pages(host="b.test", since=1e12)) == []


def test_iter_pages_reads_a_duplicates_original_and_failures(
    store_factory: Any,
) -> None:
    from pipelines.dedup import Duplicate

    store, _ = store_factory
    original = page("http://a.test/orig", fetched_at=1.0)
    dup = page("http://a.test/copy", original.item.body, fetched_at=2.0)
    dup.mark_duplicate(Duplicate("exact", original.page_id))
    failed = prepare_page(
        PageItem("http://a.test/x", "http://a.test/x", 0, "fpx", fetched_at=3.0,
                 error="DNSLookupError")
    )  # fmt: skip
    write(store, [original, dup, failed])
    got = {p.url: p for p in store.iter_pages()}
    assert got["http://a.test/copy"].body == original.item.body
    assert got["http://a.test/copy"].content_from == original.page_id
    assert got["http://a.test/x"].body is None
    assert got["http://a.test/x"].metadata["error"] == "DNSLookupError"


def test_open_without_create_refuses_a_missing_store(tmp_path: Path) -> None:
    from pipelines.stores.base import StoreNotFoundError

    path = tmp_path / "none" / "pages.sqlite3"
    with pytest.raises(StoreNotFoundError, match="no SQLite page store"):
        SQLiteStore(path).open(create=False)
    assert not path.parent.exists()  # nothing was created
    client: Any = mongomock.MongoClient()
    with pytest.raises(StoreNotFoundError, match="no page store"):
        MongoStore(client=client, database="empty").open(create=False)
    full = SQLiteStore(path)
    full.open()
    write(full, [page("http://a.test/")])
    full.close()
    reader = SQLiteStore(path)
    reader.open(create=False)
    assert reader.get_page("http://a.test/") is not None
    reader.close()


def words_page(url: str, words: list[str]) -> Any:
    return page(url, f"<html><body><p>{' '.join(words)}</p></body></html>".encode())


def test_find_original_exact_near_and_after_a_change(store_factory: Any) -> None:
    """The store is the crawl's duplicate index: exact by content hash,
    near by the SimHash band index; never the page itself, never a
    duplicate, a failure or a page whose text changed since."""
    from pipelines.dedup import Duplicate

    store, reopen = store_factory
    words = [f"w{i}" for i in range(600)]
    orig = words_page("http://a.test/orig", words)
    copy = words_page("http://a.test/copy", words)
    near = words_page("http://a.test/near", [*words[:100], "changed", *words[101:]])
    far = words_page("http://a.test/far", [f"v{i}" for i in range(600)])
    assert orig.content_hash == copy.content_hash and orig.simhash is not None

    def find(p: Any) -> Any:
        return store.find_original(p.page_id, p.content_hash, p.simhash, 3, 64)

    assert find(orig) is None  # an empty store
    write(store, [orig])
    assert find(orig) is None  # a re-fetch is not its own duplicate
    found = find(copy)
    assert found is not None and (found.kind, found.page_id) == ("exact", orig.page_id)
    found = find(near)
    assert found is not None and (found.kind, found.page_id) == ("near", orig.page_id)
    assert 0 < found.distance <= 3
    assert find(far) is None
    # A duplicate stored as such is nobody's original.
    copy.mark_duplicate(Duplicate("exact", orig.page_id))
    write(store, [copy])
    store.close()
    store = reopen()
    store.open()
    try:
        found = find(words_page("http://a.test/third", words))
        assert found is not None and found.page_id == orig.page_id
        # The original changes: its old text now matches nothing.
        write(store, [words_page("http://a.test/orig", [f"z{i}" for i in range(600)])])
        assert find(words_page("http://a.test/fourth", words)) is None
        assert find(near) is None
    finally:
        store.close()
