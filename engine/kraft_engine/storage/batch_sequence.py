"""Checking and re-stamping a run of whole record batches handed to the log or a snapshot.

Both a leader's log append and a snapshot writer receive batches built elsewhere (offsets usually
starting at 0) and must place them at their own next offset under their own epoch. The base
offset and the partition leader epoch sit in the first 16 bytes of a v2 batch, outside the range
the CRC-32C covers (which starts at `attributes`), so they are patched in place — exactly what
Kafka's leader does — and the batch still verifies. Nothing else in the bytes changes, which
matters because kio cannot re-encode a batch without losing record timestamp precision.
"""

from __future__ import annotations

import struct

from kraft_engine.records.batches import BatchHeader, CorruptBatchError, read_batch_header, validate_batch

__all__ = ["restamp", "whole_batches"]

_BASE_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_EPOCH_POSITION = 12


def whole_batches(data: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Headers of the CRC-valid, complete batches that make up all of `data`; ValueError otherwise."""
    if not data:
        raise ValueError("no record batches")
    headers = []
    position = 0
    while position < len(data):
        try:
            header = validate_batch(data, position)
        except CorruptBatchError as e:
            raise ValueError(str(e)) from None
        if header.last_offset_delta < 0:
            raise ValueError(f"batch at byte {position} has a negative last offset delta")
        headers.append(header)
        position += header.size_bytes
    return headers


def restamp(
    data: bytes | bytearray | memoryview, headers: list[BatchHeader], *, base_offset: int, epoch: int
) -> tuple[bytes, list[BatchHeader]]:
    """The batches renumbered contiguously from `base_offset` and stamped with `epoch`."""
    buffer = bytearray(data)
    position = 0
    offset = base_offset
    stamped = []
    for header in headers:
        _BASE_OFFSET.pack_into(buffer, position, offset)
        _EPOCH.pack_into(buffer, position + _EPOCH_POSITION, epoch)
        stamped.append(read_batch_header(buffer, position))
        offset += header.last_offset_delta + 1
        position += header.size_bytes
    return bytes(buffer), stamped
