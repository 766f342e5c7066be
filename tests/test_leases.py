"""When a leased request is done (extensions.core.scheduler.leases): the
book's rules."""

from __future__ import annotations

from extensions.core.scheduler.leases import LeaseBook


def test_a_lease_ends_when_its_output_ended_and_its_items_are_finished() -> None:
    done: list[str] = []
    book = LeaseBook(done.append)
    book.begin("w:1")
    a, b = {"n": 1}, {"n": 2}
    book.yielded("w:1", a)
    book.yielded("w:1", b)
    book.item_finished("w:1")
    book.output_ended("w:1")
    assert done == []  # b is still in the pipelines
    book.item_finished("w:1")
    assert done == ["w:1"]
    assert not book.tracks("w:1")


def test_a_held_item_waits_for_items_stored() -> None:
    done: list[str] = []
    book = LeaseBook(done.append)
    book.begin("w:1")
    item = {"n": 1}
    book.yielded("w:1", item)
    assert book.hold(item)  # found by identity, no lease named in the item
    book.item_finished("w:1")
    book.output_ended("w:1")
    assert done == [] and book.holding == 1
    book.stored(item)
    assert done == ["w:1"] and book.holding == 0


def test_nothing_yielded_and_items_of_no_lease() -> None:
    done: list[str] = []
    book = LeaseBook(done.append)
    book.begin("w:1")
    assert not book.hold({"lease": "w:9"})  # not a lease of this book
    book.output_ended("w:1")
    assert done == ["w:1"]
    book.stored({"lease": "w:7"})  # an item naming a lease it never saw
    assert done == ["w:1", "w:7"]
