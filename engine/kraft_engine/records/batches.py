"""Kafka v2 record batches: building them, and reading their headers without decoding records.

The raft log, the snapshot files and the Fetch/Produce paths all move whole batches around. Most of
them only need the fixed 61-byte header (offsets, epoch, record count, control flag) and a CRC check,
so this module reads that header directly and leaves record decoding to kio, which is slower and
lossy (see `decode_records`). Batches are always built through kio's writer so that the bytes are
the same ones Kafka's `MemoryRecordsBuilder` produces for an uncompressed, non-transactional batch.

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

import datetime
import io
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_batch
from kio.serial.errors import DecodeError
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

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
_CRC_START = 21  # the CRC covers attributes .. end of batch
_HEADER_UP_TO_MAGIC = 17
_MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD

# kio's writer turns a record's datetime into milliseconds with `int(ts.timestamp() * 1000)`, whose
# float rounding loses a millisecond for about 1% of values. Placing the datetime half a millisecond
# past the intended instant makes the truncation land on exactly that millisecond.
_HALF_MS = datetime.timedelta(microseconds=500)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class CorruptBatchError(ValueError):
    """The bytes at a position are not a valid v2 batch. `reason` says which check failed."""

    def __init__(self, reason: str, *, position: int = 0) -> None:
        super().__init__(f"corrupt record batch at byte {position}: {reason}")
        self.reason = reason
        self.position = position


class IncompleteBatchError(CorruptBatchError):
    """The buffer ends before the batch does: a torn tail, not damage in the middle of a log."""


class UnsupportedBatchError(ValueError):
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
    timestamp = TZAwareMicros.parse(_EPOCH + datetime.timedelta(milliseconds=timestamp_ms) + _HALF_MS)
    records = tuple(
        Record(
            attributes=i8(0),
            timestamp=timestamp,
            offset=i64(base_offset + delta),
            key=None if keys is None else keys[delta],
            value=value,
            headers=(),
        )
        for delta, value in enumerate(values)
    )
    batch = NewRecordBatch(
        producer_id=i64(NO_PRODUCER_ID),
        producer_epoch=i16(NO_PRODUCER_EPOCH),
        partition_leader_epoch=i32(partition_leader_epoch),
        base_sequence=i32(NO_SEQUENCE),
        records=records,
        attributes=i16(_CONTROL_FLAG_MASK if control else 0),
    )
    with io.BytesIO() as buffer:
        write_batch(buffer, batch)
        return buffer.getvalue()


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

    Record timestamps are deliberately not returned: kio's reader truncates them to whole seconds,
    so the batch header's base/max timestamps are the only trustworthy ones, and a decoded batch
    must never be re-encoded in place of its original bytes.
    """
    header = validate_batch(batch_bytes)
    if header.size_bytes != len(batch_bytes):
        raise ValueError(f"expected exactly one batch of {header.size_bytes} bytes, got {len(batch_bytes)} bytes")
    if header.compression_codec != 0:
        raise UnsupportedBatchError(
            f"batch at offset {header.base_offset} uses compression codec {header.compression_codec}; "
            "only uncompressed batches are supported"
        )
    try:
        batch, _ = read_batch(batch_bytes, 0)
    except (ValueError, DecodeError) as error:
        raise CorruptBatchError(f"records do not decode: {error}") from error
    if len(batch.records) != header.record_count:
        raise CorruptBatchError(f"header counts {header.record_count} records, found {len(batch.records)}")
    return [DecodedRecord(record.offset, record.key, record.value) for record in batch.records]
