"""Client-side v2 batches (`records.client_records`): what we write, kafka-python's reader (a
reader not written here) reads the same; what kafka-python writes, we read the same; the broker's
validator accepts ours; every codec, keys, headers, null values and exact millisecond timestamps."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_engine.broker import validate_produce_payload
from kraft_engine.records.batches import build_batch
from kraft_engine.records.client_records import ProducedRecord, encode_client_batch, read_client_records
from kraft_engine.records.compression import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
_NOW_MS = 1_700_000_123_456

_records = st.lists(
    st.builds(
        ProducedRecord,
        value=st.one_of(st.none(), st.binary(max_size=40)),
        key=st.one_of(st.none(), st.binary(max_size=10)),
        timestamp_ms=st.integers(min_value=_NOW_MS - 5000, max_value=_NOW_MS + 5000),
        headers=st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2).map(tuple),
    ),
    min_size=1, max_size=8,
)


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=25, deadline=None)
@given(records=_records)
def test_kafka_python_reads_our_batches_exactly(codec: int, records: list[ProducedRecord]) -> None:
    data = encode_client_batch(records, producer_id=7, producer_epoch=2, base_sequence=40, codec=codec)
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.compression_type) == (7, 2, 40, codec)
    theirs = [(r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers)) for r in batch]
    assert theirs == [(i, r.timestamp_ms, r.key, r.value, r.headers) for i, r in enumerate(records)]
    ours = [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in read_client_records(data)]
    assert ours == theirs


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_what_kafka_python_writes(codec: int) -> None:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=3,
                                        producer_epoch=0, base_sequence=0, batch_size=1 << 20)
    for i in range(5):
        builder.append(i, timestamp=_NOW_MS + i, key=None if i % 2 else b"k%d" % i, value=b"v%d" % i,
                       headers=[("h", b"x")] if i == 3 else [])
    data = bytes(builder.build())
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in read_client_records(data)] == [
        (i, _NOW_MS + i, None if i % 2 else b"k%d" % i, b"v%d" % i, (("h", b"x"),) if i == 3 else ()) for i in range(5)]


@pytest.mark.parametrize("codec", CODECS)
def test_the_broker_validator_accepts_our_batches(codec: int) -> None:
    data = encode_client_batch([ProducedRecord(value=b"a", timestamp_ms=_NOW_MS), ProducedRecord(value=b"b", timestamp_ms=_NOW_MS + 3)],
                               producer_id=1, producer_epoch=0, base_sequence=0, codec=codec)
    validated = validate_produce_payload(data, max_message_bytes=1 << 20, now_ms=_NOW_MS)
    assert (validated.max_timestamp_ms, validated.header.record_count) == (_NOW_MS + 3, 2)


def test_a_batch_cut_short_by_fetch_ends_the_records_and_a_control_batch_is_skipped() -> None:
    first = encode_client_batch([ProducedRecord(value=b"a", timestamp_ms=_NOW_MS)])
    marker = build_batch(base_offset=1, partition_leader_epoch=0, values=[b"\x00\x00\x00\x00"], timestamp_ms=_NOW_MS,
                         keys=[b"\x00\x00\x00\x01"], control=True)
    second = encode_client_batch([ProducedRecord(value=b"b", timestamp_ms=_NOW_MS)])
    assert [r.value for r in read_client_records(first + marker + second)] == [b"a", b"b"]
    assert [r.value for r in read_client_records(first + marker + second[:-3])] == [b"a"]
