"""Validating a producer's record batch before the leader appends it (Kafka's LogValidator).

A broker must never store what a client cannot read back, and must store what it accepts exactly
as received (the bytes a consumer fetches are the bytes the producer sent, apart from the fields
the leader owns: base offset, partition leader epoch). So every produced partition payload is
checked here, with Kafka's error for each failure, before anything is written:

- exactly one v2 batch (magic 2: Produce v3+ carries nothing else, and Kafka 4.x refuses a v0/v1
  message set with INVALID_RECORD, zstd below Produce v7 with UNSUPPORTED_COMPRESSION_TYPE, as its
  ProduceRequest.validateRecords does), whole, CRC-32C intact (CORRUPT_MESSAGE), no larger than
  `max.message.bytes` (MESSAGE_TOO_LARGE);
- no control batch from a client, a consistent offset range and record count, a valid sequence
  when a producer id is set (INVALID_RECORD);
- a compression codec Kafka defines: none, gzip, snappy, lz4 or zstd (UNSUPPORTED_COMPRESSION_TYPE
  otherwise), whose data decompresses (CORRUPT_MESSAGE otherwise; see records.compression);
- every record parsed with our own reader, so timestamps keep their milliseconds (kio's reader
  rounds them to seconds): record offsets deltas 0..n-1, lengths that add up, and no timestamp
  more than `message.timestamp.after.max.ms` in the future (INVALID_TIMESTAMP).

The batch's max timestamp is taken from the records, and if the header disagrees the header is
corrected in place (with its CRC), as Kafka's validator does for CreateTime; otherwise the bytes
are untouched.

One exception to "stored as received": a topic whose `compression.type` names a codec (or
`uncompressed`) other than the producer's gets the batch recompressed on the broker, as Kafka's
LogValidator does. The records section is the same bytes either way (a v2 record does not depend
on its batch's codec), so the section decompressed during validation is compressed again with
the topic's codec into a batch with the same header fields (producer id, epoch, sequence,
timestamps, transactional bit) and a new length, codec bits and CRC. The result must still fit
`max.message.bytes` (MESSAGE_TOO_LARGE otherwise, as Kafka's RecordTooLargeException). The
topic's per-codec level (KIP-390's `compression.gzip.level`, `compression.lz4.level`,
`compression.zstd.level`) is the level it is compressed at; a batch already in the topic's codec is
kept as received whatever level it was written at, as Kafka keeps it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from kraft_engine.errors import BrokerError
from kraft_engine.records.batches import (
    LOG_OVERHEAD,
    MAGIC,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CorruptBatchError,
    validate_batch,
)
from kraft_engine.records.compression import (
    CODEC_NONE,
    CODEC_ZSTD,
    CompressionError,
    UnsupportedCodecError,
    codec_by_name,
    compress,
    decompress,
)
from kraft_engine.records.record_fields import read_record_fields

__all__ = [
    "ProduceRefused",
    "ValidatedBatch",
    "parse_records",
    "topic_codec",
    "validate_produce_payload",
]

_TIMESTAMP_TYPE_MASK = 0x08
_CONTROL_MASK = 0x20
_MAX_TIMESTAMP_POSITION = 35
_ATTRIBUTES_POSITION = 21
_CRC_POSITION = 17
_RECORDS_POSITION = RECORD_BATCH_OVERHEAD

# Kafka's error codes (kio's ErrorCode values) for the refusals, by name.
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_TIMESTAMP = 32
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87


class ProduceRefused(BrokerError):
    """A partition's payload is refused; `error_code` is Kafka's code, nothing was written."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True, slots=True)
class ValidatedBatch:
    data: bytes
    header: BatchHeader
    max_timestamp_ms: int
    offset_of_max_timestamp_delta: int


@dataclass(frozen=True, slots=True)
class _Record:
    offset_delta: int
    timestamp_ms: int


def validate_produce_payload(
    data: bytes | None,
    *,
    max_message_bytes: int,
    now_ms: int,
    timestamp_after_max_ms: int = 3_600_000,
    timestamp_before_max_ms: int = 2**63 - 1,
    compacted: bool = False,
    target_codec: int | None = None,
    target_level: int | None = None,
    produce_version: int = 13,
) -> ValidatedBatch:
    """The batch checked as Kafka's LogValidator checks it; `compacted` (a topic whose
    cleanup.policy includes compact) also refuses records without a key, as Kafka does;
    `target_codec` (the topic's compression.type, None for `producer`) recompresses a batch in
    another codec, at `target_level` (the topic's `compression.<codec>.level`, None for Kafka's
    default); a batch already in the topic's codec is kept whatever level it was written at."""
    if not data:
        raise ProduceRefused(CORRUPT_MESSAGE, "the produce request carries no records")
    if len(data) < LOG_OVERHEAD + 5:
        raise ProduceRefused(CORRUPT_MESSAGE, f"{len(data)} bytes cannot hold a record batch")
    (batch_length,) = struct.unpack_from(">i", data, 8)
    if batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or LOG_OVERHEAD + batch_length > len(data):
        raise ProduceRefused(
            CORRUPT_MESSAGE, f"record batch length {batch_length} does not fit the {len(data)} bytes received"
        )
    if data[16] > MAGIC:
        raise ProduceRefused(CORRUPT_MESSAGE, f"Invalid magic found in record: {data[16]}")
    if data[16] != MAGIC:  # a v0/v1 message set: Kafka's ProduceRequest.validateRecords
        raise ProduceRefused(
            INVALID_RECORD, f"Produce requests with version {produce_version} are only allowed to contain record "
                            "batches with magic version 2"
        )
    (attributes,) = struct.unpack_from(">h", data, _ATTRIBUTES_POSITION)
    if produce_version < 7 and attributes & _CODEC_MASK == CODEC_ZSTD:
        raise ProduceRefused(
            UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {produce_version} are not allowed to use ZStandard compression",
        )
    try:
        header = validate_batch(data)
    except CorruptBatchError as error:
        raise ProduceRefused(CORRUPT_MESSAGE, f"corrupt record batch: {error}") from None
    if header.size_bytes != len(data):
        raise ProduceRefused(INVALID_RECORD, "one and only one record batch is expected per partition")
    if header.size_bytes > max_message_bytes:
        raise ProduceRefused(
            MESSAGE_TOO_LARGE,
            f"the record batch is {header.size_bytes} bytes, larger than max.message.bytes {max_message_bytes}",
        )
    if header.attributes & _CONTROL_MASK:
        raise ProduceRefused(INVALID_RECORD, "clients are not allowed to write control records")
    if header.record_count <= 0 or header.last_offset_delta + 1 != header.record_count:
        raise ProduceRefused(
            INVALID_RECORD,
            f"inconsistent batch: {header.record_count} records, last offset delta {header.last_offset_delta}",
        )
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise ProduceRefused(INVALID_RECORD, "invalid sequence number for a batch with a producer id")
    if header.is_transactional and header.producer_id < 0:
        raise ProduceRefused(INVALID_RECORD, "a transactional batch must carry a producer id")
    body = memoryview(data)[_RECORDS_POSITION:]
    if header.compression_codec != CODEC_NONE:
        try:
            body = memoryview(decompress(header.compression_codec, body))
        except UnsupportedCodecError as error:
            raise ProduceRefused(UNSUPPORTED_COMPRESSION_TYPE, str(error)) from None
        except CompressionError as error:
            raise ProduceRefused(CORRUPT_MESSAGE, str(error)) from None
    try:
        fields = read_record_fields(body, count=header.record_count)
    except ValueError as error:
        raise ProduceRefused(INVALID_RECORD, f"records do not parse: {error}") from None
    max_timestamp = -1
    max_delta = 0
    if compacted and any(f.key is None for f in fields):
        raise ProduceRefused(INVALID_RECORD, "a compacted topic cannot accept a record without a key")
    for expected, fieldset in enumerate(fields):
        record = _Record(fieldset.offset_delta, header.base_timestamp + fieldset.timestamp_delta_ms)
        if record.offset_delta != expected:
            raise ProduceRefused(
                INVALID_RECORD, f"record {expected} has offset delta {record.offset_delta}; deltas must be 0..n-1"
            )
        if record.timestamp_ms - now_ms > timestamp_after_max_ms:
            raise ProduceRefused(
                INVALID_TIMESTAMP,
                f"timestamp {record.timestamp_ms} of record {expected} is more than "
                f"message.timestamp.after.max.ms {timestamp_after_max_ms} ahead of the broker's time {now_ms}",
            )
        if now_ms - record.timestamp_ms > timestamp_before_max_ms:
            raise ProduceRefused(
                INVALID_TIMESTAMP,
                f"timestamp {record.timestamp_ms} of record {expected} is more than "
                f"message.timestamp.before.max.ms {timestamp_before_max_ms} behind the broker's time {now_ms}",
            )
        if record.timestamp_ms > max_timestamp:
            max_timestamp = record.timestamp_ms
            max_delta = record.offset_delta
    if header.attributes & _TIMESTAMP_TYPE_MASK == 0 and header.max_timestamp != max_timestamp:
        data = _with_max_timestamp(data, max_timestamp)
        header = validate_batch(data)
    if target_codec is not None and target_codec != header.compression_codec:
        data = _recompressed(data, body, codec=target_codec, level=target_level)
        header = validate_batch(data)
        if header.size_bytes > max_message_bytes:
            raise ProduceRefused(
                MESSAGE_TOO_LARGE,
                f"the record batch recompressed to the topic's codec is {header.size_bytes} bytes, larger than "
                f"max.message.bytes {max_message_bytes}",
            )
    return ValidatedBatch(data, header, max_timestamp, max_delta)


def topic_codec(compression_type: str) -> int | None:
    """The codec a topic's `compression.type` asks the broker to store (None: the producer's)."""
    if compression_type == "producer":
        return None
    if compression_type == "uncompressed":
        return CODEC_NONE
    return codec_by_name(compression_type)


_CODEC_MASK = 0x07


def _recompressed(data: bytes, records_section: memoryview, *, codec: int, level: int | None) -> bytes:
    """The batch with its (uncompressed) records section compressed with `codec` instead."""
    section = compress(codec, records_section, level=level) if codec != CODEC_NONE else bytes(records_section)
    buffer = bytearray(data[:_RECORDS_POSITION])
    struct.pack_into(">i", buffer, 8, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(section))
    (attributes,) = struct.unpack_from(">h", buffer, _ATTRIBUTES_POSITION)
    struct.pack_into(">h", buffer, _ATTRIBUTES_POSITION, (attributes & ~_CODEC_MASK) | codec)
    buffer += section
    struct.pack_into(">I", buffer, _CRC_POSITION, crc32c(memoryview(buffer)[_ATTRIBUTES_POSITION:]))
    return bytes(buffer)


def _with_max_timestamp(data: bytes, max_timestamp: int) -> bytes:
    buffer = bytearray(data)
    struct.pack_into(">q", buffer, _MAX_TIMESTAMP_POSITION, max_timestamp)
    struct.pack_into(">I", buffer, _CRC_POSITION, crc32c(memoryview(buffer)[_ATTRIBUTES_POSITION:]))
    return bytes(buffer)


def parse_records(body: memoryview, *, count: int, base_timestamp_ms: int) -> list[_Record]:
    """Walk `count` v2 records; offsets deltas and exact timestamps (ms). ValueError when malformed."""
    return [
        _Record(fields.offset_delta, base_timestamp_ms + fields.timestamp_delta_ms)
        for fields in read_record_fields(body, count=count)
    ]
