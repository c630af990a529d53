"""Broker-side `compression.type`: a batch in another codec than the topic's is recompressed on
the broker (Kafka's LogValidator), keeping every record and the producer's header fields, and
kafka-python (its own codec code) reads the result."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_engine.broker import ProduceRefused, validate_produce_payload
from kraft_engine.broker.record_validation import topic_codec
from kraft_engine.records.client_records import ProducedRecord, encode_client_batch
from kraft_engine.records.compression import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
NOW_MS = 1_700_000_123_456

_records = st.lists(
    st.builds(ProducedRecord, value=st.one_of(st.none(), st.binary(max_size=60)),
              key=st.one_of(st.none(), st.binary(max_size=10)),
              timestamp_ms=st.integers(min_value=NOW_MS - 5000, max_value=NOW_MS),
              headers=st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
                               max_size=2).map(tuple)),
    min_size=1, max_size=8,
)


@pytest.mark.parametrize("source", CODECS)
@pytest.mark.parametrize("target", CODECS)
@settings(max_examples=10, deadline=None)
@given(records=_records)
def test_a_batch_is_stored_in_the_topics_codec_with_every_record_and_header_field(
        source: int, target: int, records: list[ProducedRecord]) -> None:
    data = encode_client_batch(records, producer_id=9, producer_epoch=3, base_sequence=70, codec=source)
    stored = validate_produce_payload(data, max_message_bytes=1 << 20, now_ms=NOW_MS, target_codec=target)
    if source == target:
        assert stored.data == data  # already in the topic's codec: kept as received
    batch = DefaultRecordBatch(bytearray(stored.data))
    assert batch.validate_crc()
    assert (batch.compression_type, batch.producer_id, batch.producer_epoch, batch.base_sequence) == (target, 9, 3, 70)
    assert stored.header.compression_codec == target
    assert [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch] == [
        (i, r.timestamp_ms, r.key, r.value, r.headers) for i, r in enumerate(records)]


def test_producer_keeps_the_producers_codec() -> None:
    data = encode_client_batch([ProducedRecord(value=b"v" * 100, key=None, timestamp_ms=NOW_MS, headers=())],
                               codec=CODEC_GZIP)
    assert validate_produce_payload(data, max_message_bytes=1 << 20, now_ms=NOW_MS,
                                    target_codec=topic_codec("producer")).data == data


def test_compression_type_names_are_kafkas() -> None:
    assert [topic_codec(n) for n in ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")] == [
        None, CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]


def test_a_batch_too_large_once_decompressed_for_an_uncompressed_topic_is_refused() -> None:
    data = encode_client_batch([ProducedRecord(value=b"z" * 50_000, key=None, timestamp_ms=NOW_MS, headers=())],
                               codec=CODEC_ZSTD)
    assert len(data) < 1000
    with pytest.raises(ProduceRefused) as refused:
        validate_produce_payload(data, max_message_bytes=10_000, now_ms=NOW_MS, target_codec=CODEC_NONE)
    assert refused.value.error_code == 10  # MESSAGE_TOO_LARGE
    assert "recompressed to the topic's codec" in str(refused.value)


_TEXT = b" ".join(b"%d-%s" % (i, b"abcdefgh"[i % 8:]) for i in range(4000))


@pytest.mark.parametrize(("codec", "fast", "strong"), [(CODEC_GZIP, 1, 9), (CODEC_LZ4, 9, 12), (CODEC_ZSTD, -5, 19)])
def test_a_batch_is_recompressed_at_the_topics_level(codec: int, fast: int, strong: int) -> None:
    records = [ProducedRecord(value=_TEXT[i::5], key=b"k%d" % i, timestamp_ms=NOW_MS, headers=()) for i in range(5)]
    data = encode_client_batch(records, producer_id=9, producer_epoch=3, base_sequence=70, codec=CODEC_NONE)
    stored = {level: validate_produce_payload(data, max_message_bytes=1 << 20, now_ms=NOW_MS, target_codec=codec,
                                              target_level=level) for level in (fast, strong)}
    assert len(stored[strong].data) < len(stored[fast].data)
    for batch in stored.values():
        read = DefaultRecordBatch(bytearray(batch.data))
        assert read.validate_crc() and read.compression_type == codec
        assert [(r.key, r.value) for r in read] == [(r.key, r.value) for r in records]


def test_a_batch_already_in_the_topics_codec_is_kept_whatever_its_level() -> None:
    records = [ProducedRecord(value=_TEXT, key=None, timestamp_ms=NOW_MS, headers=())]
    data = encode_client_batch(records, codec=CODEC_GZIP)  # the client's own (default) level
    assert validate_produce_payload(data, max_message_bytes=1 << 20, now_ms=NOW_MS, target_codec=CODEC_GZIP,
                                    target_level=1).data == data
