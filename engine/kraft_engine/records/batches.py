"""Kafka v2 record batches: building them, and reading their headers without decoding records.

The raft log, the snapshot files and the Fetch/Produce paths all move whole batches around. Most of
them only need the fixed 61-byte header (offsets, epoch, record count, control flag) and a CRC check,
so this module reads that header directly. Records are built and read here too, field by field over
one buffer: kio's record reader and writer, which produce the same bytes, cost about ten times as
much per record and ran on raft's event loop for every batch of a 100k-partition fence (the bytes
are the ones Kafka's `MemoryRecordsBuilder` produces for an uncompressed, non-transactional batch;
`tests/records/test_record_batches.py` checks them against kio's writer and reader).

Layout of the v2 header (big-endian), as in Kafka's `DefaultRecordBatch`:

    offset  size  field
         0     8  base_offset
         8     4  batch_length            (bytes after this field)
        12     4  partition_leader_epoch
        16     1  magic                   (2)
        17     4  crc                     (CRC-32C of attributes .. end of batch)
        21     2  attributes
        23     4  last_offset_delta
        27     8  base_timestamp
        35     8  max_timestamp
        43     8  producer_id
        51     2  producer_epoch
        53     4  base_sequence
        57     4  record_count
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

from kraft_engine.errors import RecordsError

MAGIC = 2
"""The only record-batch format the engine reads or writes (Kafka's `RecordBatch.MAGIC_VALUE_V2`)."""

LOG_OVERHEAD = 12
"""base_offset + batch_length: the bytes not counted by batch_length."""

RECORD_BATCH_OVERHEAD = 61
"""Size of the fixed v2 header, and so of the smallest possible (empty) batch."""

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

# Attribute bits (Kafka's DefaultRecordBatch): 0-2 compression codec, 3 timestamp type,
# 4 transactional, 5 control, 6 delete horizon set.
_COMPRESSION_CODEC_MASK = 0x07
_TRANSACTIONAL_FLAG_MASK = 0x10
_CONTROL_FLAG_MASK = 0x20

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PRE_CRC = struct.Struct(">qiibI")
_POST_CRC = struct.Struct(">hiqqqhii")
_CRC_START = 21  # the CRC covers attributes .. end of batch
_HEADER_UP_TO_MAGIC = 17
_MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD



class CorruptBatchError(RecordsError, ValueError):
    """The bytes at a position are not a valid v2 batch. `reason` says which check failed."""

    def __init__(self, reason: str, *, position: int = 0) -> None:
        super().__init__(f"corrupt record batch at byte {position}: {reason}")
        self.reason = reason
        self.position = position


class IncompleteBatchError(CorruptBatchError):
    """The buffer ends before the batch does: a torn tail, not damage in the middle of a log."""


class UnsupportedBatchError(RecordsError, ValueError):
    """A well-formed batch the engine cannot decode (a compressed batch, for example)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed fields of a v2 batch, read without touching its records."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_FLAG_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_FLAG_MASK)

    @property
    def compression_codec(self) -> int:
        return self.attributes & _COMPRESSION_CODEC_MASK


class DecodedRecord(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None


def build_batch(
    *,
    base_offset: int,
    partition_leader_epoch: int,
    values: Sequence[bytes],
    timestamp_ms: int,
    keys: Sequence[bytes | None] | None = None,
    control: bool = False,
) -> bytes:
    """An uncompressed, non-transactional v2 batch holding `values` at base_offset, base_offset+1, ...

    All records share `timestamp_ms` (CreateTime), as in a KRaft leader's batches. The producer
    fields carry Kafka's "none" values, since neither metadata nor control batches are idempotent.
    """
    if not values:
        raise ValueError("a record batch needs at least one record")
    if keys is not None and len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys for {len(values)} values")
    if base_offset < 0:
        raise ValueError(f"base_offset must be non-negative, got {base_offset}")
    if timestamp_ms < 0:
        raise ValueError(f"timestamp_ms must be non-negative, got {timestamp_ms}")
    out = bytearray(RECORD_BATCH_OVERHEAD)
    for delta, value in enumerate(values):
        key = None if keys is None else keys[delta]
        # attributes 0, timestamp delta 0 (every record carries the batch's timestamp), offset delta
        body = b"\x00\x00" + _zigzag(delta) + (b"\x01" if key is None else _zigzag(len(key)) + key)
        body += _zigzag(len(value)) + value + b"\x00"  # no headers
        out += _zigzag(len(body))
        out += body
    _POST_CRC.pack_into(
        out, _CRC_START, _CONTROL_FLAG_MASK if control else 0, len(values) - 1, timestamp_ms, timestamp_ms,
        NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, len(values),
    )
    _PRE_CRC.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC,
                       crc32c(memoryview(out)[_CRC_START:]))
    data = bytes(out)
    if len(data) >= _REMEMBERED_MIN_BYTES and all(type(v) is bytes for v in values) and (
        keys is None or all(k is None or type(k) is bytes for k in keys)
    ):
        # The leader appends what it built to its log, which parses it, and hands it to its
        # listener: both read these records, which are known here without decoding them.
        _remember(data, tuple(
            DecodedRecord(base_offset + delta, None if keys is None else keys[delta], value)
            for delta, value in enumerate(values)
        ))
    return data


def _zigzag(value: int) -> bytes:
    """A signed varint (zigzag), as in the v2 record layout."""
    encoded = (value << 1) ^ (value >> 63)
    if encoded < 0x80:
        return _SMALL_VARINTS[encoded]
    out = bytearray()
    while encoded >= 0x80:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


_SMALL_VARINTS: tuple[bytes, ...] = tuple(bytes((n,)) for n in range(0x80))


def read_batch_header(buf: bytes | bytearray | memoryview, offset: int = 0) -> BatchHeader:
    """The header of the batch at `offset`, unchecked: use `validate_batch` for untrusted bytes."""
    if len(buf) - offset < RECORD_BATCH_OVERHEAD:
        raise IncompleteBatchError(
            f"{len(buf) - offset} bytes left, a batch header needs {RECORD_BATCH_OVERHEAD}",
            position=offset,
        )
    return BatchHeader(*_HEADER.unpack_from(buf, offset))


def validate_batch(buf: bytes | bytearray | memoryview, offset: int = 0) -> BatchHeader:
    """Check the batch at `offset` the way Kafka's log reader does, and return its header.

    The order of the checks matters to recovery: a buffer that simply stops early is reported as
    `IncompleteBatchError`, while bytes that can never become a valid batch (bad magic, impossible
    length, CRC mismatch) are `CorruptBatchError`.
    """
    available = len(buf) - offset
    if available < LOG_OVERHEAD:
        raise IncompleteBatchError(
            f"{available} bytes left, need {LOG_OVERHEAD} to read the batch length", position=offset
        )
    (batch_length,) = struct.unpack_from(">i", buf, offset + 8)
    if batch_length < _MIN_BATCH_LENGTH:
        raise CorruptBatchError(
            f"batch_length {batch_length} is below the minimum {_MIN_BATCH_LENGTH}", position=offset
        )
    if available >= _HEADER_UP_TO_MAGIC and buf[offset + 16] != MAGIC:
        raise CorruptBatchError(f"magic is {buf[offset + 16]}, expected {MAGIC}", position=offset)
    size = LOG_OVERHEAD + batch_length
    if available < size:
        raise IncompleteBatchError(
            f"batch declares {size} bytes but only {available} are present", position=offset
        )
    header = read_batch_header(buf, offset)
    actual_crc = crc32c(memoryview(buf)[offset + _CRC_START : offset + size])
    if actual_crc != header.crc:
        raise CorruptBatchError(
            f"CRC-32C is {actual_crc:#010x}, header says {header.crc:#010x}", position=offset
        )
    if header.record_count < 0:
        raise CorruptBatchError(f"record_count {header.record_count} is negative", position=offset)
    return header


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Each valid batch in `buf` with a view of its bytes, stopping quietly at a torn tail.

    Corruption before the tail raises `CorruptBatchError`; callers that recover a log use
    `validate_batch` directly to find where the valid prefix ends.
    """
    view = memoryview(buf)
    position = 0
    while position < len(view):
        try:
            header = validate_batch(view, position)
        except IncompleteBatchError:
            return
        yield header, view[position : position + header.size_bytes]
        position += header.size_bytes


def decode_records(batch_bytes: bytes | bytearray | memoryview) -> list[DecodedRecord]:
    """The (offset, key, value) of every record in one uncompressed batch.

    Record timestamps and headers are not returned (the KRaft log's records carry the batch's
    timestamp and no headers); a decoded batch is never re-encoded in place of its original bytes.
    """
    header = validate_batch(batch_bytes)
    if header.size_bytes != len(batch_bytes):
        raise ValueError(f"expected exactly one batch of {header.size_bytes} bytes, got {len(batch_bytes)} bytes")
    if header.compression_codec != 0:
        raise UnsupportedBatchError(
            f"batch at offset {header.base_offset} uses compression codec {header.compression_codec}; "
            "only uncompressed batches are supported"
        )
    data = bytes(batch_bytes)
    large = len(data) >= _REMEMBERED_MIN_BYTES
    if large:
        remembered = _REMEMBERED.get(data)
        if remembered is not None:
            return list(remembered)
    try:
        records = _read_records(data, header)
    except IndexError:
        raise CorruptBatchError("records do not decode: the batch ends inside a record") from None
    if large:
        _remember(data, tuple(records))
    return records


def remember_batches(data: bytes | bytearray | memoryview) -> int:
    """Decode every large uncompressed data batch in `data` (concatenated whole batches, as a Fetch
    response carries them) so that the next `decode_records` of each is a lookup; the number of
    batches decoded. Meant for a worker thread: a follower's raft loop then appends and delivers a
    fetched batch without decoding its records itself. Whatever does not decode is left alone
    (the caller's own read of the batch rejects it as ever)."""
    view = memoryview(data)
    decoded = 0
    try:
        for header, raw in iter_batches(view):
            if header.is_control or header.compression_codec != 0 or header.size_bytes < _REMEMBERED_MIN_BYTES:
                continue
            decode_records(raw)
            decoded += 1
    except ValueError:
        pass
    return decoded


def _remember(data: bytes, records: tuple[DecodedRecord, ...]) -> None:
    # Single dict and deque operations only: atomic, whichever thread builds or decodes.
    _REMEMBERED[data] = records
    _REMEMBERED_ORDER.append(data)
    while len(_REMEMBERED_ORDER) > _REMEMBERED_BATCHES:
        _REMEMBERED.pop(_REMEMBERED_ORDER.popleft(), None)


# The same large batch is decoded several times on raft's loop: a follower parses a Fetch response,
# then the log append parses it, then the listener reads it back; the leader parses what it appended
# and then reads it back for its listener. The last few large batches' records are kept, keyed by
# their bytes (a hash and a compare, about a millisecond per megabyte, instead of a decode), from
# their first decode or, for a batch built here (the leader's), from `build_batch`: a leader's
# 100k-record fence was otherwise decoded once on its raft loop, about as long as the fetch timeout
# under load.
_REMEMBERED_MIN_BYTES = 64 * 1024
_REMEMBERED_BATCHES = 16
_REMEMBERED: dict[bytes, tuple[DecodedRecord, ...]] = {}
_REMEMBERED_ORDER: deque[bytes] = deque()


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    """A zigzag varint (up to 64 bits) at `position`: (value, position after it)."""
    byte = data[position]
    position += 1
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), position
    raw = byte & 0x7F
    shift = 7
    while True:
        byte = data[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7
        if shift > 63:
            raise CorruptBatchError("records do not decode: a varint is longer than 10 bytes")


def _read_bytes(data: bytes, position: int, end: int, what: str) -> tuple[bytes | None, int]:
    length, position = _read_varint(data, position)
    if length == -1:
        return None, position
    if length < 0 or position + length > end:
        raise CorruptBatchError(f"records do not decode: invalid {what} length {length}")
    return data[position : position + length], position + length


def _read_records(data: bytes, header: BatchHeader) -> list[DecodedRecord]:
    """The records of one whole, uncompressed batch, read as Kafka's `DefaultRecord.readFrom` does:
    every record's length must match its fields, and the records must fill the batch exactly."""
    end = header.size_bytes
    base_offset = header.base_offset
    position = RECORD_BATCH_OVERHEAD
    records: list[DecodedRecord] = []
    append = records.append
    read_varint = _read_varint
    for _ in range(header.record_count):
        # One-byte varints (every length and delta below 64) are decoded inline.
        byte = data[position]
        if byte < 0x80:
            length, position = (byte >> 1) ^ -(byte & 1), position + 1
        else:
            length, position = read_varint(data, position)
        start = position
        if length < 0 or start + length > end:
            raise CorruptBatchError(f"records do not decode: invalid record length {length}")
        position += 1  # attributes
        if data[position] < 0x80:  # timestamp delta
            position += 1
        else:
            _, position = read_varint(data, position)
        byte = data[position]
        if byte < 0x80:
            offset_delta, position = (byte >> 1) ^ -(byte & 1), position + 1
        else:
            offset_delta, position = read_varint(data, position)
        if data[position] == 1:  # a null key, as every KRaft record has
            key: bytes | None = None
            position += 1
        else:
            key, position = _read_bytes(data, position, end, "key")
        byte = data[position]
        if byte < 0x80 and not byte & 1:
            value_end = position + 1 + (byte >> 1)
            if value_end > end:
                raise CorruptBatchError(f"records do not decode: invalid value length {byte >> 1}")
            value: bytes | None = data[position + 1 : value_end]
            position = value_end
        else:
            value, position = _read_bytes(data, position, end, "value")
        if data[position] == 0:  # no headers
            position += 1
        else:
            header_count, position = read_varint(data, position)
            if header_count < 0:
                raise CorruptBatchError(f"records do not decode: invalid header count {header_count}")
            for _ in range(header_count):
                _, position = _read_bytes(data, position, end, "header key")
                _, position = _read_bytes(data, position, end, "header value")
        if position != start + length:
            raise CorruptBatchError(
                "records do not decode: Record data contains inconsistently sized data that does not match "
                "the record length"
            )
        append(DecodedRecord(base_offset + offset_delta, key, value))
    if position != end:
        raise CorruptBatchError(
            f"header counts {header.record_count} records, but they end at byte {position} of {end}"
        )
    return records
