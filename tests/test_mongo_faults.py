"""Wire-level faults: the real pymongo driver against mockupdb (MongoDB's own
wire-protocol test server), scripted to drop a connection mid-flush, step
down, answer with duplicate-key write errors, or be unreachable."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from extensions.connection.embedded import free_port
from pipelines.batching import PageBatcher, prepare_page
from pipelines.items import PageItem
from pipelines.stores.base import PermanentStoreError, TransientStoreError
from pipelines.stores.mongo import MongoStore
from tests.support.mongo import FakeMongo

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow


@pytest.fixture
def fake_mongo(request: pytest.FixtureRequest) -> Iterator[FakeMongo]:
    fake = FakeMongo(getattr(request, "param", []))
    fake.server.run()
    yield fake
    fake.server.stop()


def pages(n: int) -> list[Any]:
    return [
        prepare_page(
            PageItem(
                f"http://a.test/{i}",
                f"http://a.test/{i}",
                200,
                f"fp{i}",
                body=f"<p>page {i} {' filler' * 30}</p>".encode(),
            )
        )
        for i in range(n)
    ]


def run_batcher(store: MongoStore, n: int, **kw: Any) -> tuple[list[str], list[Any]]:
    stored: list[str] = []

    async def main() -> list[Any]:
        b = PageBatcher(
            store,
            batch_size=4,
            flush_interval=0.05,
            retry_initial=0.05,
            retry_max=0.2,
            on_stored=lambda ps, r: stored.extend(p.page_id for p in ps),
            **kw,
        )
        await b.open()
        for p in pages(n):
            await b.put(p)
        return await b.close()

    return stored, asyncio.run(main())


@pytest.mark.parametrize("fake_mongo", [["hangup"], ["stepdown"]], indirect=True)
def test_transient_fault_mid_flush_is_retried_without_loss(
    fake_mongo: FakeMongo,
) -> None:
    store = MongoStore(fake_mongo.server.uri, "db", timeout_ms=2000)
    stored, unstored = run_batcher(store, 10)
    assert unstored == []
    assert sorted(stored) == sorted(f"fp{i}" for i in range(10))  # each once
    assert sorted(fake_mongo.docs["pages_metadata"]) == sorted(stored)
    assert sorted(fake_mongo.docs["pages_content"]) == sorted(stored)
    assert fake_mongo.updates > 6  # 3 batches x 2 collections + the retry


@pytest.mark.parametrize("fake_mongo", [["unauthorized"] * 3], indirect=True)
def test_permanent_fault_is_not_retried(fake_mongo: FakeMongo) -> None:
    """Before: an error the store does not declare transient was retried
    until close with the engine paused."""
    store = MongoStore(fake_mongo.server.uri, "db", timeout_ms=2000)
    failed: list[BaseException] = []
    stored, unstored = run_batcher(
        store, 10, on_failed=lambda ps, e: failed.append(e), close_timeout=5.0
    )
    assert stored == []
    assert sorted(p.page_id for p in unstored) == sorted(f"fp{i}" for i in range(10))
    assert fake_mongo.updates == 3  # one try per batch of 4, 4, 2
    assert len(failed) == 3 and all(
        isinstance(e, PermanentStoreError) and "13" in str(e) for e in failed
    )


@pytest.mark.parametrize("fake_mongo", [["dupkey"]], indirect=True)
def test_duplicate_key_is_a_per_document_error(fake_mongo: FakeMongo) -> None:
    store = MongoStore(fake_mongo.server.uri, "db", timeout_ms=2000)
    store.open()
    batch = pages(3)
    result = store.write_batch(
        [p.metadata for p in batch], [p.content for p in batch if p.content]
    )
    store.close()
    assert [(e.page_id, e.code) for e in result.errors] == [("fp1", 11000)]
    assert result.written == 2
    # The refused page's content is not written without its metadata.
    assert sorted(fake_mongo.docs["pages_content"]) == ["fp0", "fp2"]


def test_oversized_document_does_not_fail_the_batch(fake_mongo: FakeMongo) -> None:
    store = MongoStore(fake_mongo.server.uri, "db", timeout_ms=2000)
    store.open()
    batch = pages(2)
    assert batch[1].content is not None
    batch[1].content["html_compressed"] = b"x" * (17 * 1024 * 1024)
    result = store.write_batch(
        [p.metadata for p in batch], [p.content for p in batch if p.content]
    )
    store.close()
    assert [(e.page_id, e.collection) for e in result.errors] == [
        ("fp1", "pages_content")
    ]
    assert sorted(fake_mongo.docs["pages_metadata"]) == ["fp0", "fp1"]
    assert sorted(fake_mongo.docs["pages_content"]) == ["fp0"]


def test_unreachable_server_applies_backpressure_and_loses_nothing() -> None:
    store = MongoStore(f"mongodb://127.0.0.1:{free_port()}/", "db", timeout_ms=100)
    pressure: list[bool] = []
    stored, unstored = run_batcher(
        store, 6, max_buffer=8, close_timeout=1.0, on_pressure=pressure.append
    )
    assert stored == []  # nothing acknowledged to the frontier
    assert sorted(p.page_id for p in unstored) == sorted(f"fp{i}" for i in range(6))
    assert pressure and pressure[0] is True


@pytest.mark.parametrize("fake_mongo", [["hangup"]], indirect=True)
def test_spill_append_over_a_dropped_connection_is_transient(
    fake_mongo: FakeMongo,
) -> None:
    """The frontier spill's write: a dropped connection is a transient
    error (the worker writes again), and the second write stores each entry
    once, by host and score."""
    store = MongoStore(fake_mongo.server.uri, "db", timeout_ms=2000)
    store.open()
    entries = [(2**52 - 1, b'{"url": "http://a.test/1"}'), (7, b"{}")]
    with pytest.raises(TransientStoreError):
        store.side.spill_append("http://a.test:80", entries)
    store.side.spill_append("http://a.test:80", entries)
    store.side.spill_append("http://a.test:80", entries)  # written twice: kept once
    store.close()
    docs = fake_mongo.docs["spilled_requests"]
    assert sorted(docs) == ["http://a.test:80 4503599627370495", "http://a.test:80 7"]
    assert docs["http://a.test:80 4503599627370495"]["score"] == 2**52 - 1
    assert bytes(docs["http://a.test:80 7"]["member"]) == b"{}"


@pytest.mark.parametrize("fake_mongo", [["unauthorized"]], indirect=True)
def test_spill_append_refused_is_permanent(fake_mongo: FakeMongo) -> None:
    store = MongoStore(fake_mongo.server.uri, "db", timeout_ms=2000)
    store.open()
    with pytest.raises(PermanentStoreError):
        store.side.spill_append("http://a.test:80", [(1, b"{}")])
    store.close()
