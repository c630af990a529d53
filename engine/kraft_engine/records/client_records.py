"""v2 record batches as a Kafka client writes and reads them: what `kraft console-producer` sends
and `kraft console-consumer` prints.

kio's batch writer covers the engine's own batches (uncompressed, no producer id, one timestamp);
a client needs more: the idempotent producer's id, epoch and base sequence, a compression codec,
one timestamp per record, keys and headers; and reading needs every codec and exact millisecond
timestamps (kio's reader rounds them to seconds). Both directions follow the v2 layout byte for
byte (the 61-byte header, then varint-framed records, compressed as a whole). Pure.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from crc32c import crc32c

from kraft_engine.records.batches import (
    LOG_OVERHEAD,
    MAGIC,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CorruptBatchError,
    iter_batches,
)
from kraft_engine.records.compression import CODEC_NONE, CompressionError, compress, decompress

__all__ = ["ClientRecord", "ProducedRecord", "encode_client_batch", "read_client_records"]

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_START = 21


@dataclass(frozen=True, slots=True)
class ProducedRecord:
    value: bytes | None
    key: bytes | None = None
    timestamp_ms: int = 0
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class ClientRecord:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def _zigzag(value: int) -> bytes:
    """A zig-zag varint (varlong) of `value`."""
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(data: bytes | None) -> bytes:
    return _zigzag(-1) if data is None else _zigzag(len(data)) + data


def _record(record: ProducedRecord, *, offset_delta: int, base_timestamp_ms: int) -> bytes:
    body = bytearray(b"\x00")  # attributes: unused in v2 records
    body += _zigzag(record.timestamp_ms - base_timestamp_ms)
    body += _zigzag(offset_delta)
    body += _bytes_field(record.key)
    body += _bytes_field(record.value)
    body += _zigzag(len(record.headers))
    for name, value in record.headers:
        body += _bytes_field(name.encode())
        body += _bytes_field(value)
    return _zigzag(len(body)) + bytes(body)


def encode_client_batch(
    records: Sequence[ProducedRecord],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    codec: int = CODEC_NONE,
) -> bytes:
    """One batch at base offset 0 (the leader assigns offsets), CreateTime, the records section
    compressed with `codec`."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    base_timestamp_ms = min(r.timestamp_ms for r in records)
    max_timestamp_ms = max(r.timestamp_ms for r in records)
    section = b"".join(_record(r, offset_delta=i, base_timestamp_ms=base_timestamp_ms) for i, r in enumerate(records))
    section = compress(codec, section)
    batch_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(section)
    header = bytearray(_HEADER.pack(
        0, batch_length, -1, MAGIC, 0, codec, len(records) - 1, base_timestamp_ms, max_timestamp_ms,
        producer_id, producer_epoch, base_sequence, len(records),
    ))
    data = header + section
    struct.pack_into(">I", data, 17, crc32c(bytes(data[_CRC_START:])))
    return bytes(data)


def _varint_at(view: memoryview, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(view):
            raise CorruptBatchError("a varint runs past the end of the records", position=position)
        byte = view[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
        if shift > 63:
            raise CorruptBatchError("a varint is longer than 10 bytes", position=position)


def _bytes_at(view: memoryview, position: int) -> tuple[bytes | None, int]:
    size, position = _varint_at(view, position)
    if size < 0:
        return None, position
    if position + size > len(view):
        raise CorruptBatchError("a field runs past the end of the records", position=position)
    return bytes(view[position:position + size]), position + size


def _records_of(header: BatchHeader, batch: memoryview) -> Iterator[ClientRecord]:
    try:
        section = memoryview(decompress(header.compression_codec, batch[RECORD_BATCH_OVERHEAD:]))
    except CompressionError as error:
        raise CorruptBatchError(str(error), position=0) from error
    position = 0
    for _ in range(header.record_count):
        _length, position = _varint_at(section, position)
        position += 1  # attributes
        timestamp_delta, position = _varint_at(section, position)
        offset_delta, position = _varint_at(section, position)
        key, position = _bytes_at(section, position)
        value, position = _bytes_at(section, position)
        count, position = _varint_at(section, position)
        headers = []
        for _header in range(count):
            name, position = _bytes_at(section, position)
            header_value, position = _bytes_at(section, position)
            headers.append(((name or b"").decode(errors="replace"), header_value))
        yield ClientRecord(offset=header.base_offset + offset_delta, timestamp_ms=header.base_timestamp + timestamp_delta,
                           key=key, value=value, headers=tuple(headers))


def read_client_records(data: bytes | memoryview) -> Iterator[ClientRecord]:
    """Every data record of the batches in a Fetch answer, in offset order; control batches
    (transaction markers) are skipped, a torn last batch (Fetch may cut one) ends the iteration."""
    for header, batch in iter_batches(data):
        if header.is_control:
            continue
        yield from _records_of(header, batch)
