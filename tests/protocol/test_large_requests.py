"""`large_requests`: parking a large request's objects out of the collector's walks, and freeing
them a slice at a time."""

from __future__ import annotations

import dataclasses
import gc

import pytest

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
    # Relative: a controller run earlier in this process may have frozen its image (server.collector).
    before = gc.get_freeze_count()
    park()
    assert gc.get_freeze_count() == before


def test_objects_stay_parked_until_the_last_large_request_ends() -> None:
    with large_request():
        with large_request():
            kept = [_Item(str(i)) for i in range(1000)]
            park()
            assert gc.get_freeze_count() >= len(kept)
        # The outer request is still in flight: still parked.
        assert gc.get_freeze_count() >= len(kept)
    assert gc.get_freeze_count() == 0


def test_a_failed_large_request_still_unparks() -> None:
    with pytest.raises(RuntimeError), large_request():
        park()
        raise RuntimeError("handler failed")
    assert gc.get_freeze_count() == 0


def test_disown_takes_the_long_arrays_and_release_frees_them() -> None:
    request = _Request(items=tuple(_Item(str(i)) for i in range(5000)), few=(_Item("a"),), label="x")
    parts = disown(request)
    assert [len(p) for p in parts] == [5000]  # the short array is left to the entity
    assert parts[0][0] is request.items[0]
    del request
    release(parts)
    assert parts == [[]]
