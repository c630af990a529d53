"""The fields of v2 records inside a batch's (decompressed) records section, read exactly.

kio's reader rounds record timestamps to whole seconds and decodes every field into objects; the
broker needs exact millisecond deltas (validation, ListOffsets by time) and the log cleaner needs
each record's key, whether its value is null (a tombstone), and its own bytes, so a record that is
kept can be copied into a rewritten batch unchanged (its offset and timestamp are deltas from the
batch's base, which the cleaner keeps). One walk over the varints serves both.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RecordFields", "read_record_fields"]


@dataclass(frozen=True, slots=True)
class RecordFields:
    offset_delta: int
    timestamp_delta_ms: int
    key: bytes | None
    value_is_null: bool
    # The record's bytes in the records section, length prefix included: [start, end).
    start: int
    end: int


def _varint(view: memoryview, position: int) -> tuple[int, int]:
    """A zig-zag varint (up to 64 bits) at `position`; (value, next position)."""
    result = 0
    shift = 0
    while True:
        if position >= len(view):
            raise ValueError("a varint runs past the end of the records")
        byte = view[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("a varint is longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), position


def _skip_bytes(view: memoryview, position: int) -> tuple[int, int]:
    """A varint-length byte field (-1 = null); (its length, the position after it)."""
    size, position = _varint(view, position)
    if size < -1:
        raise ValueError(f"a field length of {size}")
    return size, position + max(size, 0)


def read_record_fields(body: bytes | memoryview, *, count: int) -> list[RecordFields]:
    """Walk `count` v2 records filling `body` exactly; ValueError when malformed."""
    view = memoryview(body)
    records = []
    position = 0
    for _ in range(count):
        start = position
        length, position = _varint(view, position)
        end = position + length
        if length < 0 or end > len(view):
            raise ValueError(f"a record of {length} bytes runs past the end of the batch")
        position += 1  # attributes
        timestamp_delta, position = _varint(view, position)
        offset_delta, position = _varint(view, position)
        key_size, key_end = _skip_bytes(view, position)
        key = None if key_size < 0 else bytes(view[key_end - key_size : key_end])
        value_size, position = _skip_bytes(view, key_end)
        headers, position = _varint(view, position)
        if headers < 0:
            raise ValueError("a negative header count")
        for _header in range(headers):
            size, position = _skip_bytes(view, position)
            if size < 0:
                raise ValueError("a header key cannot be null")
            _, position = _skip_bytes(view, position)
        if position != end:
            raise ValueError(f"a record declared {length} bytes but its fields take {length + position - end}")
        records.append(RecordFields(offset_delta, timestamp_delta, key, value_size < 0, start, end))
    if position != len(view):
        raise ValueError(f"{len(view) - position} bytes follow the last record")
    return records
