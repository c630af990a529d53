"""`RecordParts` reads as the flat sequence of its parts, however they are cut and nested (the
active controller hands its loader a committed log batch's records as the parts it reserved)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kraft_engine.records import RecordParts

_PARTS = st.lists(st.lists(st.integers(0, 99), max_size=4).map(tuple), max_size=5)


@given(parts=_PARTS, more=_PARTS, cut=st.tuples(st.integers(-3, 25), st.integers(-3, 25)))
def test_parts_read_as_their_concatenation(parts: list[tuple[int, ...]], more: list[tuple[int, ...]],
                                           cut: tuple[int, int]) -> None:
    flat = [item for part in [*parts, *more] for item in part]
    records = RecordParts([RecordParts(parts), *more])  # a RecordParts inside is spliced in
    assert list(records) == flat
    assert len(records) == len(flat)
    assert [records[i] for i in range(len(flat))] == flat
    assert [records[i] for i in range(-len(flat), 0)] == flat
    assert list(records[cut[0]:cut[1]]) == flat[cut[0]:cut[1]]
    assert records == flat
    assert all(not isinstance(part, RecordParts) and len(part) for part in records.parts)
    for index in range(len(flat)):
        part, start = records.part_at(index)
        assert part[index - start] == flat[index]
