"""The produce validator refuses what Kafka's LogValidator refuses, with Kafka's error codes,
and accepts a good batch byte for byte."""

from __future__ import annotations

import gzip
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from crc32c import crc32c

from kraft_engine.broker import ProduceRefused, validate_produce_payload
from kraft_engine.broker.record_validation import parse_records
from kraft_engine.records.batches import build_batch
from kraft_engine.records.client_records import ProducedRecord, encode_client_batch
from kraft_engine.records.compression import CODEC_ZSTD

NOW_MS = 1_700_000_000_123


def batch(values: list[bytes], *, timestamp_ms: int = NOW_MS) -> bytes:
    return build_batch(base_offset=0, partition_leader_epoch=-1, values=values, timestamp_ms=timestamp_ms)


def refusal(data: bytes | None, **kwargs: int) -> int:
    with pytest.raises(ProduceRefused) as info:
        validate_produce_payload(data, max_message_bytes=kwargs.pop("max_message_bytes", 1 << 20), now_ms=NOW_MS, **kwargs)
    return info.value.error_code


def recrc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def test_a_good_batch_is_accepted_as_received_with_millisecond_timestamps() -> None:
    data = batch([b"a", b"bb", b"ccc"])
    validated = validate_produce_payload(data, max_message_bytes=1 << 20, now_ms=NOW_MS)
    assert validated.data == data
    assert validated.header.record_count == 3
    assert validated.max_timestamp_ms == NOW_MS  # kio's reader would have said ...123 -> ...000


def test_timestamps_keep_their_milliseconds() -> None:
    data = batch([b"x"], timestamp_ms=NOW_MS)
    records = parse_records(memoryview(data)[61:], count=1, base_timestamp_ms=NOW_MS)
    assert records[0].timestamp_ms == NOW_MS


@pytest.mark.parametrize(
    ("mangle", "code"),
    [
        (lambda d: d[:-1], 2),  # truncated: CORRUPT_MESSAGE
        (lambda d: d[:-1] + bytes([d[-1] ^ 1]), 2),  # wrong CRC
        (lambda d: d + d, 87),  # two batches: INVALID_RECORD
        (lambda d: d[:16] + b"\x01" + d[17:], 87),  # magic 1: INVALID_RECORD, as Kafka 4.x's validateRecords
        (lambda d: d[:16] + b"\x00" + d[17:], 87),  # magic 0
        (lambda d: d[:16] + b"\x07" + d[17:], 2),  # no such magic: CORRUPT_MESSAGE
        (lambda d: b"garbage" * 20, 2),
    ],
)
def test_bad_payloads_get_kafkas_error(mangle: object, code: int) -> None:
    assert refusal(mangle(batch([b"a", b"b"]))) == code  # type: ignore[operator]


def test_a_legacy_message_set_and_zstd_below_produce_v7_are_refused_as_kafka_4_refuses_them() -> None:
    legacy = batch([b"a"])[:16] + b"\x01" + batch([b"a"])[17:]
    with pytest.raises(ProduceRefused, match="Produce requests with version 5 are only allowed to contain record "
                                             "batches with magic version 2"):
        validate_produce_payload(legacy, max_message_bytes=1 << 20, now_ms=NOW_MS, produce_version=5)
    zstd = encode_client_batch([ProducedRecord(value=b"z", key=None, timestamp_ms=NOW_MS, headers=())], codec=CODEC_ZSTD)
    with pytest.raises(ProduceRefused, match="version 6 are not allowed to use ZStandard compression") as refused:
        validate_produce_payload(zstd, max_message_bytes=1 << 20, now_ms=NOW_MS, produce_version=6)
    assert refused.value.error_code == 76  # UNSUPPORTED_COMPRESSION_TYPE
    assert validate_produce_payload(zstd, max_message_bytes=1 << 20, now_ms=NOW_MS, produce_version=7).data == zstd


def test_no_records_is_corrupt() -> None:
    assert refusal(None) == 2
    assert refusal(b"") == 2


def test_an_oversized_batch_is_message_too_large() -> None:
    data = batch([b"x" * 1000])
    assert refusal(data, max_message_bytes=len(data) - 1) == 10


def test_a_control_batch_from_a_client_is_refused() -> None:
    data = build_batch(base_offset=0, partition_leader_epoch=-1, values=[b"\x00\x00\x00\x00"], timestamp_ms=NOW_MS, control=True)
    assert refusal(data) == 87


def test_a_record_count_that_disagrees_with_the_offsets_is_refused() -> None:
    data = bytearray(batch([b"a", b"b"]))
    struct.pack_into(">i", data, 57, 3)  # record_count
    assert refusal(recrc(data)) == 87


def test_a_timestamp_an_hour_in_the_future_is_refused() -> None:
    assert refusal(batch([b"a"], timestamp_ms=NOW_MS + 3_600_001)) == 32
    validate_produce_payload(batch([b"a"], timestamp_ms=NOW_MS + 3_600_000), max_message_bytes=1 << 20, now_ms=NOW_MS)


def test_a_wrong_max_timestamp_is_corrected_and_the_crc_redone() -> None:
    data = bytearray(batch([b"a"]))
    struct.pack_into(">q", data, 35, 5)
    validated = validate_produce_payload(recrc(data), max_message_bytes=1 << 20, now_ms=NOW_MS)
    assert validated.header.max_timestamp == NOW_MS
    assert struct.unpack_from(">q", validated.data, 35)[0] == NOW_MS


def compressed_batch(codec: int, records: bytes, plain: bytes) -> bytes:
    data = bytearray(plain[:61] + records)
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">h", data, 21, codec)
    return recrc(data)


def xerial_snappy(data: bytes) -> bytes:
    """Java's framing: magic, two versions, then length-prefixed raw snappy blocks (two here)."""
    blocks = [snappy.compress(data[: len(data) // 2]), snappy.compress(data[len(data) // 2 :])]
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"".join(struct.pack(">i", len(b)) + b for b in blocks)


def zstd_streamed(data: bytes) -> bytes:
    """A zstd frame without the content size, as a streaming producer writes it."""
    compressor = zstandard.ZstdCompressor().compressobj()
    return compressor.compress(data) + compressor.flush()


# Each codec's records written by the Python bindings the clients use, not by the broker's library.
_CLIENT_CODECS = {1: gzip.compress, 2: xerial_snappy, 3: lz4.frame.compress, 4: zstd_streamed}


@pytest.mark.parametrize("codec", sorted(_CLIENT_CODECS))
def test_every_kafka_codec_is_read_and_the_batch_kept_as_received(codec: int) -> None:
    plain = batch([b"a", b"bb" * 100, b"c"])
    data = compressed_batch(codec, _CLIENT_CODECS[codec](plain[61:]), plain)
    validated = validate_produce_payload(data, max_message_bytes=1 << 20, now_ms=NOW_MS)
    assert validated.data == data
    assert validated.header.compression_codec == codec
    assert validated.max_timestamp_ms == NOW_MS


def test_raw_snappy_without_xerial_framing_is_read() -> None:
    plain = batch([b"a", b"b"])
    data = compressed_batch(2, snappy.compress(plain[61:]), plain)
    assert validate_produce_payload(data, max_message_bytes=1 << 20, now_ms=NOW_MS).data == data


@pytest.mark.parametrize("codec", sorted(_CLIENT_CODECS))
def test_data_that_does_not_decompress_is_corrupt(codec: int) -> None:
    plain = batch([b"a", b"b"])
    good = _CLIENT_CODECS[codec](plain[61:])
    assert refusal(compressed_batch(codec, good[: len(good) // 2], plain)) == 2


def test_compressed_records_that_lie_are_invalid() -> None:
    plain = bytearray(batch([b"abc"]))
    plain[61] += 2  # the record's length varint no longer matches its fields
    assert refusal(compressed_batch(4, zstd_streamed(bytes(plain[61:])), bytes(plain))) == 87


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_a_codec_kafka_does_not_define_is_unsupported(codec: int) -> None:
    plain = batch([b"a"])
    assert refusal(compressed_batch(codec, plain[61:], plain)) == 76


def test_a_record_whose_length_lies_is_invalid() -> None:
    data = bytearray(batch([b"abc"]))
    data[61] = data[61] + 2  # the first record's length varint (zig-zag: +1)
    assert refusal(recrc(data)) == 87


def test_a_compacted_topic_refuses_a_record_without_a_key() -> None:
    keyless = batch([b"a"])
    assert refusal(keyless, compacted=True) == 87
    with_key = build_batch(base_offset=0, partition_leader_epoch=-1, values=[b"a"], keys=[b"k"], timestamp_ms=NOW_MS)
    assert validate_produce_payload(with_key, max_message_bytes=1 << 20, now_ms=NOW_MS, compacted=True).data == with_key
