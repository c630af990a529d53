"""`large_requests`: parking a large request's objects out of the collector's walks, and freeing
them a slice at a time."""

from __future__ import annotations

import dataclasses
import gc

from kraft_engine.protocol.large_requests import disown, large_request, park, release


@dataclasses.dataclass(frozen=True, slots=True)
class _Item:
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Request:
    items: tuple[_Item, ...]
    few: tuple[_Item, ...]
    label: str


def test_park_outside_a_large_request_parks_nothing() -> None:
    before = gc.get_freeze_count()
    kept = [_Item(str(i)) for i in range(1000)]
    park()
    assert gc.get_freeze_count() == before
    assert kept


def test_parked_objects_leave_the_permanent_generation_when_they_die() -> None:
    before = gc.get_freeze_count()
    with large_request():
        kept = [_Item(str(i)) for i in range(5000)]
        park()
        parked = gc.get_freeze_count()
        assert parked >= before + len(kept)
    # Parking is for good (never unfrozen), but reference counting still frees what dies.
    del kept
    assert gc.get_freeze_count() <= parked - 5000


def test_disown_takes_the_long_arrays_and_release_frees_them() -> None:
    request = _Request(items=tuple(_Item(str(i)) for i in range(5000)), few=(_Item("a"),), label="x")
    parts = disown(request)
    assert [len(p) for p in parts] == [5000]  # the short array is left to the entity
    assert parts[0][0] is request.items[0]
    del request
    release(parts)
    assert parts == [[]]
