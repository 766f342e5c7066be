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
from tests.support.mongo import patch_mongomock

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from pipelines.stores.base import PageStore

MONGO_URI = os.environ.get("WEBCRAWL_TEST_MONGO_URI", "")


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


def test_a_redirected_page_is_found_by_either_url(store_factory: Any) -> None:
    """Issue 21: a seed ``http://b.test/`` redirected to ``https://b.test/``
    is stored under the URL that was scheduled; a look-up of the URL that
    answered found nothing. The newest of two that ended at one URL wins."""
    store, _ = store_factory
    old = prepare_page(
        PageItem("http://b.test/old", "https://b.test/", 200, "fp-old", body=b"<p>o")
    )
    old.metadata["fetched_at"] = 1.0
    seed = prepare_page(
        PageItem("http://b.test/", "https://b.test/", 200, "fp-seed", body=b"<p>s")
    )
    seed.metadata["fetched_at"] = 2.0
    write(store, [old, seed, page("https://b.test/direct")])
    by_key = store.get_page("http://b.test/")
    by_final = store.get_page("https://b.test/")
    assert by_key is not None and by_final is not None
    assert by_final.metadata["_id"] == by_key.metadata["_id"] == "fp-seed"
    assert by_final.url == "http://b.test/" and by_final.body == b"<p>s"
    # A URL that is itself a key is found as such.
    got = store.get_page("https://b.test/direct")
    assert got is not None and got.url == "https://b.test/direct"


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


PDF_HEADERS = {
    "Content-Type": ["application/pdf"],
    "Content-Length": ["9"],
    "Set-Cookie": ["sid=secret"],
    "Link": ['<http://a.test/a>; rel="alternate"', '<http://a.test/b>; rel="next"'],
    "X-Big": ["x" * 20_000],
}


def test_non_html_record_keeps_its_headers_html_none(store_factory: Any) -> None:
    """Issue 12: non-HTML records keep content type, length, hash and
    headers (before: the headers were not stored). Bounded, no cookies."""
    store, reopen = store_factory
    pdf = page("http://a.test/r.pdf", b"%PDF-1.4\n", headers=PDF_HEADERS)
    write(store, [pdf, page("http://a.test/")])
    for s in (store, reopen()):
        s.open(create=False)
        got = s.get_page("http://a.test/r.pdf")
        assert got is not None
        assert got.metadata["headers"] == [
            ["content-type", "application/pdf"],
            ["content-length", "9"],
            ["link", '<http://a.test/a>; rel="alternate"'],
            ["link", '<http://a.test/b>; rel="next"'],
        ]
        html = s.get_page("http://a.test/")
        assert html is not None and html.metadata["headers"] is None


def filtered_page(url: str, reason: str = "query_variants") -> Any:
    return prepare_page(
        PageItem(url, url, 0, f"fp-{url}", error=f"TrapFiltered: {reason}: full",
                 filtered=reason)
    )  # fmt: skip


def test_a_filtered_record_never_replaces_a_stored_page(store_factory: Any) -> None:
    """A trap budget (a HyperLogLog) refuses URLs it admitted before: their
    filtered record must leave the fetched page alone, and stands alone for
    a URL never fetched."""
    store, reopen = store_factory
    write(store, [page("http://a.test/kept")])
    result = write(
        store, [filtered_page("http://a.test/kept"), filtered_page("http://a.test/new")]
    )
    assert result.errors == []
    s = reopen()
    s.open(create=False)
    kept = s.get_page("http://a.test/kept")
    assert kept is not None and kept.metadata["status"] == 200
    assert kept.metadata["filtered"] is None and kept.body
    new = s.get_page("http://a.test/new")
    assert new is not None and new.body is None
    assert new.metadata["filtered"] == "query_variants"
    assert new.metadata["status"] == 0 and "query_variants" in new.metadata["error"]
    # A fetch of a URL on record as filtered replaces the filtered record.
    write(s, [page("http://a.test/new")])
    fetched = s.get_page("http://a.test/new")
    assert fetched is not None and fetched.metadata["filtered"] is None
    assert fetched.metadata["status"] == 200


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


def reopened(store: PageStore, reopen: Any) -> PageStore:
    """The store closed and opened again as a reader (persistence)."""
    store.close()
    again: PageStore = reopen()
    again.open(create=False)
    return again


def test_spill_keeps_each_hosts_requests_in_score_order(store_factory: Any) -> None:
    """The frontier spill's part of the store
    (extensions.core.frontier.spill.SpillStore):
    per host, in score order, idempotent, persistent."""
    store, reopen = store_factory
    a, b = "http://a.test:80", "http://b.test:80"
    big = 2**52 - 1  # the largest frontier score: kept exactly
    store.side.spill_append(a, [(big, b"last"), (10, b"ten"), (20, b"twenty")])
    store.side.spill_append(b, [(15, b"b")])
    store.side.spill_append(a, [(10, b"ten")])  # written twice: kept once
    assert (
        store.side.spill_count(),
        store.side.spill_count(a),
        store.side.spill_count(b),
    ) == (
        4,
        3,
        1,
    )
    assert store.side.spill_take(a, 2) == [(10, b"ten"), (20, b"twenty")]
    assert store.side.spill_take(a, 2) == [(10, b"ten"), (20, b"twenty")]  # not removed
    store.side.spill_delete(a, [10, 20])
    store.side.spill_delete(a, [10])  # deleted twice: harmless
    again = reopened(store, reopen)
    try:
        assert again.side.spill_take(a, 5) == [(big, b"last")]  # type: ignore[attr-defined]
        assert again.side.spill_take(b, 5) == [(15, b"b")]  # type: ignore[attr-defined]
        assert again.side.spill_take("http://c.test:80", 5) == []  # type: ignore[attr-defined]
        assert again.side.spill_clear() == 2  # type: ignore[attr-defined]
        assert again.side.spill_count() == 0  # type: ignore[attr-defined]
    finally:
        again.close()


def test_history_records_each_visit_and_a_304_keeps_the_page(
    store_factory: Any,
) -> None:
    store, reopen = store_factory
    url = "http://a.test/news"
    v1 = page(url, b"<html><body><p>first version of the news</p></body></html>")
    v1.metadata["fetched_at"] = 1.0
    write(store, [v1])
    same = page(url, b"<html><body><p>first version of the news</p></body></html>")
    same.metadata["fetched_at"] = 2.0
    write(store, [same])
    not_modified = page(url, b"", status=304)
    not_modified.metadata["fetched_at"] = 3.0
    write(store, [not_modified])
    write(store, [not_modified])  # a batch retried: not a second visit
    v2 = page(url, b"<html><body><p>second version of the news</p></body></html>")
    v2.metadata["fetched_at"] = 4.0
    write(store, [v2])
    store = reopened(store, reopen)
    got = store.get_page(url)
    assert got is not None and b"second version" in (got.body or b"")
    history = got.metadata["history"]
    assert [(h["fetched_at"], h["status"], h["changed"]) for h in history] == [
        (1.0, 200, True),
        (2.0, 200, False),
        (3.0, 304, False),
        (4.0, 200, True),
    ]
    assert history[0]["content_hash"] == history[2]["content_hash"]
    assert history[3]["content_hash"] == got.metadata["content_hash"]
    assert got.metadata["checked_at"] == 4.0
    store.close()


def test_a_304_leaves_content_and_metadata_but_sets_checked_at(
    store_factory: Any,
) -> None:
    store, _ = store_factory
    url = "http://a.test/static"
    first = page(url)
    first.metadata["fetched_at"] = 1.0
    write(store, [first])
    nm = page(url, b"", status=304)
    nm.metadata["fetched_at"] = 9.0
    assert write(store, [nm]).written == 1
    got = store.get_page(url)
    assert got is not None and got.body == first.item.body
    assert (got.metadata["status"], got.metadata["fetched_at"]) == (200, 1.0)
    assert got.metadata["checked_at"] == 9.0
    assert got.metadata["title"] == f"T {url}"


def test_history_is_bounded(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "h.sqlite3", history_max=3)
    client: Any = mongomock.MongoClient()
    for s in (store, MongoStore(client=client, history_max=3)):
        s.open()
        for n in range(6):
            p = page("http://a.test/", f"<p>version {n} of it</p>".encode())
            p.metadata["fetched_at"] = float(n)
            write(s, [p])
        got = s.get_page("http://a.test/")
        assert got is not None
        assert [h["fetched_at"] for h in got.metadata["history"]] == [3.0, 4.0, 5.0]
        s.close()


def test_sqlite_store_from_before_history_gains_its_columns(tmp_path: Path) -> None:
    import sqlite3

    from pipelines.stores.base import METADATA_FIELDS
    from pipelines.stores.sqlite import ADDED_COLUMNS, _table_sql

    path = tmp_path / "old.sqlite3"
    before = {k: v for k, v in METADATA_FIELDS.items() if k not in ADDED_COLUMNS}
    with sqlite3.connect(path) as conn:
        conn.execute(_table_sql("pages_metadata", before))
    conn.close()
    store = SQLiteStore(path)
    store.open()
    pdf_headers = {"Content-Type": ["application/pdf"]}
    pdf = page("http://a.test/r.pdf", b"%PDF", headers=pdf_headers)
    write(store, [page("http://a.test/"), pdf])
    got = store.get_page("http://a.test/")
    assert got is not None and len(got.metadata["history"]) == 1
    back = store.get_page("http://a.test/r.pdf")
    assert back is not None
    assert back.metadata["headers"] == [["content-type", "application/pdf"]]
    store.close()


def test_a_changed_page_keeps_its_earlier_versions(store_factory: Any) -> None:
    store, reopen = store_factory
    url = "http://a.test/news"
    bodies = [f"<html><body><p>edition {n} of the news</p></body></html>".encode()
              for n in range(3)]  # fmt: skip
    for n, body in enumerate(bodies):
        p = page(url, body)
        p.metadata["fetched_at"] = float(n)
        write(store, [p])
        write(store, [p])  # a retried batch adds no version
    unchanged = page(url, bodies[2])
    unchanged.metadata["fetched_at"] = 5.0
    write(store, [unchanged])
    store = reopened(store, reopen)
    got = store.get_page(url)
    assert got is not None and got.body == bodies[2]
    versions = store.get_versions(url)
    assert [(v.metadata["fetched_at"], v.body) for v in versions] == [
        (1.0, bodies[1]),
        (0.0, bodies[0]),
    ]
    assert (
        versions[0].metadata["content_hash"]
        == got.metadata["history"][1]["content_hash"]
    )
    assert store.get_versions("http://a.test/other") == []
    store.close()


def test_versions_are_bounded(tmp_path: Path) -> None:
    client: Any = mongomock.MongoClient()
    stores: list[PageStore] = [SQLiteStore(tmp_path / "v.sqlite3", history_max=2),
                               MongoStore(client=client, history_max=2)]  # fmt: skip
    for s in stores:
        s.open()
        for n in range(6):
            p = page("http://a.test/", f"<p>version {n} of it</p>".encode())
            p.metadata["fetched_at"] = float(n)
            write(s, [p])
        assert [v.metadata["fetched_at"] for v in s.get_versions("http://a.test/")] == [
            4.0,
            3.0,
        ]
        s.close()


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
    store = reopened(store, reopen)
    try:
        found = find(words_page("http://a.test/third", words))
        assert found is not None and found.page_id == orig.page_id
        # The original changes: its old text now matches nothing.
        write(store, [words_page("http://a.test/orig", [f"z{i}" for i in range(600)])])
        assert find(words_page("http://a.test/fourth", words)) is None
        assert find(near) is None
    finally:
        store.close()


def test_find_original_across_versions_and_304_visits(store_factory: Any) -> None:
    """A recrawled page is never its own duplicate: not of its stored
    version, nor of an earlier one kept in ``pages_versions`` (only the
    newest content is an original); its band rows follow its content, and a
    304 visit keeps them (the stored content stands)."""
    store, reopen = store_factory
    url = "http://a.test/news"
    old = [f"w{i}" for i in range(600)]
    new = [f"v{i}" for i in range(600)]

    def find(p: Any) -> Any:
        return store.find_original(p.page_id, p.content_hash, p.simhash, 3, 64)

    def fetched(words: list[str], at: float, **kw: Any) -> Any:
        p = words_page(url, words) if words else page(url, b"", **kw)
        p.metadata["fetched_at"] = at
        return p

    v1 = fetched(old, 1.0)
    write(store, [v1])
    v2 = fetched(new, 2.0)
    assert find(v2) is None
    write(store, [v2])
    assert len(store.get_versions(url)) == 1
    assert find(v2) is None and find(fetched(old, 2.5)) is None
    near_new = words_page("http://a.test/near", [*new[:100], "x", *new[101:]])
    for visit in (fetched([], 3.0, status=304), fetched([], 4.0, status=304)):
        write(store, [visit])
        store = reopened(store, reopen)
        assert find(fetched(new, 5.0)) is None
        assert find(words_page("http://a.test/old-copy", old)) is None
        found = find(words_page("http://a.test/copy", new))
        assert found is not None and (found.kind, found.page_id) == (
            "exact",
            v2.page_id,
        )
        found = find(near_new)
        assert found is not None and (found.kind, found.page_id) == ("near", v2.page_id)
    store.close()


def test_recrawl_schedule_keeps_next_visits_by_url(store_factory: Any) -> None:
    """The store-side recrawl schedule: one entry per URL (a reschedule
    replaces it), read earliest first up to a time, deleted only while still
    due then (a reschedule meanwhile survives), persistent."""
    store, reopen = store_factory
    assert store.side.schedule_count() == 0
    store.side.schedule_put(
        [(f"http://a.test/{n}", 1000 * n, f"r{n}") for n in range(10)]
    )
    store.side.schedule_put([("http://a.test/3", 50_000, "r3b")])  # rescheduled later
    assert store.side.schedule_count() == 10
    due = store.side.schedule_due(4500, 3)
    assert due == [("http://a.test/0", 0, "r0"), ("http://a.test/1", 1000, "r1"),
                   ("http://a.test/2", 2000, "r2")]  # fmt: skip
    assert [u for u, _, _ in store.side.schedule_due(4500, 100)][
        -1
    ] == "http://a.test/4"
    # http://a.test/1 was rescheduled between the read and the delete.
    store.side.schedule_put([("http://a.test/1", 70_000, "r1b")])
    store.side.schedule_delete([(u, d) for u, d, _ in due])
    assert store.side.schedule_count() == 8
    store.close()
    again = reopen()
    again.open()
    try:
        assert again.side.schedule_due(4500, 100) == [("http://a.test/4", 4000, "r4")]
        later = again.side.schedule_due(10**9, 100)
        assert ("http://a.test/1", 70_000, "r1b") in later
        assert later[-1] == ("http://a.test/1", 70_000, "r1b")
        assert ("http://a.test/3", 50_000, "r3b") in later
    finally:
        again.close()
        store.open()  # the fixture closes it (and drops a real database)
