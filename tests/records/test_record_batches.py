"""v2 batches: what the raft log and snapshot readers rely on when they build, scan and recover logs."""

import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_engine.records import batches
from kraft_engine.records.batches import (
    BatchHeader,
    CorruptBatchError,
    DecodedRecord,
    IncompleteBatchError,
    UnsupportedBatchError,
    build_batch,
    decode_records,
    iter_batches,
    read_batch_header,
    remember_batches,
    validate_batch,
)

_MAX_TIMESTAMP_MS = 253402300799999  # 9999-12-31T23:59:59.999Z

values_strategy = st.lists(st.binary(max_size=64), min_size=1, max_size=20)


def _batch(**overrides: object) -> bytes:
    arguments: dict[str, object] = {
        "base_offset": 10,
        "partition_leader_epoch": 4,
        "values": [b"a", b"bc", b""],
        "timestamp_ms": 1_700_000_000_123,
    }
    arguments.update(overrides)
    return build_batch(**arguments)  # type: ignore[arg-type]


def _recrc(batch: bytearray) -> bytearray:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return batch


@given(
    base_offset=st.integers(min_value=0, max_value=2**62),
    epoch=st.integers(min_value=0, max_value=2**31 - 1),
    values=values_strategy,
    timestamp_ms=st.integers(min_value=0, max_value=_MAX_TIMESTAMP_MS),
    with_keys=st.booleans(),
    control=st.booleans(),
)
def test_built_batches_round_trip(
    base_offset: int, epoch: int, values: list[bytes], timestamp_ms: int, with_keys: bool, control: bool
) -> None:
    keys = [None if i % 3 == 0 else bytes([i % 256]) for i in range(len(values))] if with_keys else None
    data = build_batch(
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        values=values,
        timestamp_ms=timestamp_ms,
        keys=keys,
        control=control,
    )
    header = validate_batch(data)
    assert header == read_batch_header(data)
    assert header.size_bytes == len(data)
    assert header.base_offset == base_offset
    assert header.partition_leader_epoch == epoch
    assert header.last_offset == base_offset + len(values) - 1
    assert header.next_offset == base_offset + len(values)
    assert header.record_count == len(values)
    assert header.base_timestamp == header.max_timestamp == timestamp_ms
    assert header.is_control is control
    assert header.is_transactional is False
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    expected_keys = keys if keys is not None else [None] * len(values)
    assert decode_records(data) == [
        DecodedRecord(base_offset + i, key, value) for i, (key, value) in enumerate(zip(expected_keys, values, strict=True))
    ]


def test_header_layout_matches_kafkas_default_record_batch() -> None:
    data = _batch(control=True)
    # Fixed offsets from Kafka's DefaultRecordBatch.
    assert struct.unpack_from(">q", data, 0)[0] == 10
    assert struct.unpack_from(">i", data, 8)[0] == len(data) - 12
    assert struct.unpack_from(">i", data, 12)[0] == 4
    assert data[16] == 2
    assert struct.unpack_from(">I", data, 17)[0] == crc32c(data[21:])
    assert struct.unpack_from(">h", data, 21)[0] == 0x20  # control bit, CreateTime, no compression
    assert struct.unpack_from(">i", data, 23)[0] == 2
    assert struct.unpack_from(">qq", data, 27) == (1_700_000_000_123, 1_700_000_000_123)
    assert struct.unpack_from(">qhi", data, 43) == (-1, -1, -1)
    assert struct.unpack_from(">i", data, 57)[0] == 3
    assert batches.RECORD_BATCH_OVERHEAD == 61


def test_record_encoding_matches_kafkas_default_record() -> None:
    data = build_batch(base_offset=0, partition_leader_epoch=0, values=[b"xy"], timestamp_ms=0)
    # length 8 (zigzag 16), attributes 0, timestamp delta 0, offset delta 0, null key (-1 -> 1),
    # value length 2 (4), "xy", no headers.
    assert data[61:] == bytes([16, 0, 0, 0, 1, 4]) + b"xy" + bytes([0])


def test_build_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        _batch(values=[])
    with pytest.raises(ValueError, match="keys"):
        _batch(keys=[b"k"])
    with pytest.raises(ValueError, match="base_offset"):
        _batch(base_offset=-1)
    with pytest.raises(ValueError, match="timestamp_ms"):
        _batch(timestamp_ms=-1)


def test_transactional_attribute_is_reported() -> None:
    data = bytearray(_batch())
    struct.pack_into(">h", data, 21, 0x10)
    assert validate_batch(_recrc(data)).is_transactional


def test_short_buffer_is_an_incomplete_batch() -> None:
    data = _batch()
    for cut in (0, 5, 11, 12, 30, 61, len(data) - 1):
        with pytest.raises(IncompleteBatchError):
            validate_batch(data[:cut])


def test_read_header_needs_the_whole_header() -> None:
    with pytest.raises(IncompleteBatchError):
        read_batch_header(_batch()[:60])


def test_wrong_magic_is_corrupt() -> None:
    data = bytearray(_batch())
    data[16] = 1
    with pytest.raises(CorruptBatchError, match="magic") as caught:
        validate_batch(data)
    assert not isinstance(caught.value, IncompleteBatchError)


def test_wrong_magic_is_corrupt_even_when_the_batch_is_cut_short() -> None:
    data = bytearray(_batch())
    data[16] = 0
    with pytest.raises(CorruptBatchError, match="magic") as caught:
        validate_batch(data[:20])
    assert not isinstance(caught.value, IncompleteBatchError)


@pytest.mark.parametrize("batch_length", [-1, 0, 48])
def test_batch_length_below_minimum_is_corrupt(batch_length: int) -> None:
    data = bytearray(_batch())
    struct.pack_into(">i", data, 8, batch_length)
    with pytest.raises(CorruptBatchError, match="below the minimum") as caught:
        validate_batch(data)
    assert not isinstance(caught.value, IncompleteBatchError)


def test_zero_filled_tail_is_corrupt_not_incomplete() -> None:
    with pytest.raises(CorruptBatchError, match="below the minimum"):
        validate_batch(bytes(100))


def test_flipped_bit_fails_the_crc() -> None:
    data = _batch()
    for position in (21, 30, 60, len(data) - 1):
        damaged = bytearray(data)
        damaged[position] ^= 0x01
        with pytest.raises(CorruptBatchError, match="CRC-32C"):
            validate_batch(damaged)


def test_fields_outside_the_crc_can_change() -> None:
    # Kafka leaves base_offset and partition_leader_epoch out of the CRC so they can be rewritten.
    data = bytearray(_batch())
    struct.pack_into(">qii", data, 0, 99, len(data) - 12, 7)
    header = validate_batch(data)
    assert (header.base_offset, header.partition_leader_epoch) == (99, 7)


def test_negative_record_count_is_corrupt() -> None:
    data = bytearray(_batch())
    struct.pack_into(">i", data, 57, -1)
    with pytest.raises(CorruptBatchError, match="record_count"):
        validate_batch(_recrc(data))


def test_validate_at_an_offset_reports_the_position() -> None:
    first = _batch(base_offset=0)
    second = bytearray(_batch(base_offset=3))
    second[40] ^= 0xFF
    with pytest.raises(CorruptBatchError) as caught:
        validate_batch(first + second, len(first))
    assert caught.value.position == len(first)
    assert str(len(first)) in str(caught.value)


@given(st.lists(values_strategy, min_size=1, max_size=5), st.integers(min_value=0, max_value=200))
def test_iter_batches_yields_each_batch_and_stops_at_a_torn_tail(value_lists: list[list[bytes]], cut: int) -> None:
    log = b""
    offset = 0
    for values in value_lists:
        log += build_batch(base_offset=offset, partition_leader_epoch=1, values=values, timestamp_ms=5)
        offset += len(values)
    found = list(iter_batches(log))
    assert [bytes(view) for _, view in found] == [bytes(view) for _, view in iter_batches(log)]
    assert sum(header.size_bytes for header, _ in found) == len(log)
    assert [header.record_count for header, _ in found] == [len(values) for values in value_lists]
    assert [decode_records(view)[-1].offset + 1 for _, view in found] == [h.next_offset for h, _ in found]

    torn = log[: max(0, len(log) - cut)]
    kept = list(iter_batches(torn))
    kept_size = sum(header.size_bytes for header, _ in kept)
    assert kept_size <= len(torn)
    assert [header for header, _ in kept] == [header for header, _ in found][: len(kept)]
    # Whatever was cut is no more than one batch's tail.
    assert len(torn) - kept_size < (found[len(kept)][0].size_bytes if len(kept) < len(found) else 1)


def test_iter_batches_raises_on_corruption_before_the_tail() -> None:
    damaged = bytearray(_batch(base_offset=0))
    damaged[-1] ^= 0x01
    log = _batch(base_offset=0) + bytes(damaged) + _batch(base_offset=6)
    found = iter_batches(log)
    assert next(found)[0].base_offset == 0
    with pytest.raises(CorruptBatchError, match="CRC"):
        next(found)


def test_iter_batches_of_nothing_is_empty() -> None:
    assert list(iter_batches(b"")) == []


def test_decode_refuses_anything_but_one_whole_batch() -> None:
    data = _batch()
    with pytest.raises(ValueError, match="exactly one batch"):
        decode_records(data + data)
    with pytest.raises(IncompleteBatchError):
        decode_records(data[:-1])


def test_decode_refuses_compressed_batches() -> None:
    data = bytearray(_batch())
    struct.pack_into(">h", data, 21, 1)  # gzip
    with pytest.raises(UnsupportedBatchError, match="compression"):
        decode_records(_recrc(data))


def test_decode_reports_records_that_disagree_with_the_header() -> None:
    data = bytearray(_batch())
    struct.pack_into(">i", data, 57, 2)
    with pytest.raises(CorruptBatchError, match="records"):
        decode_records(_recrc(data))


def test_header_is_a_value() -> None:
    header = read_batch_header(_batch())
    assert isinstance(header, BatchHeader)
    assert header == read_batch_header(_batch())
    assert hash(header) == hash(read_batch_header(_batch()))


def _kio_batch(*, base_offset: int, epoch: int, values: list[bytes], keys: list[bytes | None] | None,
               timestamp_ms: int, control: bool) -> bytes:
    """The same batch through kio's writer: the reference the engine's own builder must match."""
    import datetime
    import io

    from kio.records.schema import NewRecordBatch, Record
    from kio.records.writers import write_batch
    from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

    # kio turns the datetime into milliseconds through a float; half a millisecond past the instant
    # makes its truncation land on exactly that millisecond.
    timestamp = TZAwareMicros.parse(
        datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
        + datetime.timedelta(milliseconds=timestamp_ms, microseconds=500)
    )
    batch = NewRecordBatch(
        producer_id=i64(-1), producer_epoch=i16(-1), partition_leader_epoch=i32(epoch), base_sequence=i32(-1),
        records=tuple(
            Record(attributes=i8(0), timestamp=timestamp, offset=i64(base_offset + delta),
                   key=None if keys is None else keys[delta], value=value, headers=())
            for delta, value in enumerate(values)
        ),
        attributes=i16(0x20 if control else 0),
    )
    with io.BytesIO() as buffer:
        write_batch(buffer, batch)
        return buffer.getvalue()


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    base_offset=st.integers(min_value=0, max_value=2**62),
    epoch=st.integers(min_value=0, max_value=2**31 - 1),
    values=st.lists(st.binary(max_size=300), min_size=1, max_size=200),
    timestamp_ms=st.integers(min_value=0, max_value=_MAX_TIMESTAMP_MS),
    with_keys=st.booleans(),
    control=st.booleans(),
)
def test_built_batches_are_the_bytes_kios_writer_produces_and_kios_reader_reads(
    base_offset: int, epoch: int, values: list[bytes], timestamp_ms: int, with_keys: bool, control: bool
) -> None:
    from kio.records.readers import read_batch

    keys = [None if i % 3 == 0 else bytes(i % 200) for i in range(len(values))] if with_keys else None
    data = build_batch(base_offset=base_offset, partition_leader_epoch=epoch, values=values, keys=keys,
                       timestamp_ms=timestamp_ms, control=control)
    assert data == _kio_batch(base_offset=base_offset, epoch=epoch, values=values, keys=keys,
                              timestamp_ms=timestamp_ms, control=control)
    read, _ = read_batch(data, 0)
    assert decode_records(data) == [DecodedRecord(r.offset, r.key, r.value) for r in read.records]


def test_records_with_headers_are_read_and_their_headers_skipped() -> None:
    import datetime
    import io

    from kio.records.schema import NewRecordBatch, Record, RecordHeader
    from kio.records.writers import write_batch
    from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

    batch = NewRecordBatch(
        producer_id=i64(-1), producer_epoch=i16(-1), partition_leader_epoch=i32(1), base_sequence=i32(-1),
        records=tuple(
            Record(attributes=i8(0), timestamp=TZAwareMicros.parse(datetime.datetime.now(datetime.UTC)),
                   offset=i64(7 + n), key=b"k", value=b"v" * n,
                   headers=(RecordHeader(key=b"h", value=b"x" * n), RecordHeader(key=b"g", value=None)))
            for n in range(3)
        ),
        attributes=i16(0),
    )
    with io.BytesIO() as buffer:
        write_batch(buffer, batch)
        data = buffer.getvalue()
    assert decode_records(data) == [DecodedRecord(7 + n, b"k", b"v" * n) for n in range(3)]


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        # The first record's length says one byte more than its fields take.
        (lambda b: b[:61] + bytes([b[61] + 2]) + b[62:], "record length"),
        # Its value length runs past the end of the batch.
        (lambda b: b[:66] + b"\x7e" + b[67:], "value length"),
        # A varint that never ends.
        (lambda b: b[:61] + b"\xff" * (len(b) - 61), "varint|ends inside"),
    ],
)
def test_a_record_that_does_not_fit_its_batch_is_corrupt(patch: object, reason: str) -> None:
    data = build_batch(base_offset=0, partition_leader_epoch=0, values=[b"ab", b"cd"], timestamp_ms=0)
    broken = _recrc(bytearray(patch(data)))  # type: ignore[operator]
    with pytest.raises(CorruptBatchError, match=reason):
        decode_records(bytes(broken))


def test_a_large_batch_decoded_again_gives_the_same_records_and_callers_cannot_change_them() -> None:
    values = [bytes([n % 256]) * 40 for n in range(3000)]  # above the size whose records are remembered
    data = build_batch(base_offset=5, partition_leader_epoch=1, values=values, timestamp_ms=0)
    first = decode_records(data)
    first.clear()
    again = decode_records(bytes(bytearray(data)))  # equal bytes, another object
    assert again == [DecodedRecord(5 + n, None, value) for n, value in enumerate(values)]
    # A corrupt copy is still refused, whatever was remembered for the good one.
    broken = bytearray(data)
    broken[-1] ^= 1
    with pytest.raises(CorruptBatchError, match="CRC"):
        decode_records(bytes(broken))


@pytest.mark.parametrize("with_keys", [False, True])
def test_the_records_a_large_built_batch_remembers_are_the_ones_its_bytes_decode_to(with_keys: bool) -> None:
    """`build_batch` remembers a large batch's records so that the leader's own log append and
    listener need not decode them; they are exactly what decoding its bytes gives."""
    values = [bytes([n % 256]) * (n % 70) for n in range(3000)]
    keys = [None if n % 3 else bytes([n % 7]) * (n % 5) for n in range(3000)] if with_keys else None
    data = build_batch(base_offset=7, partition_leader_epoch=2, values=values, timestamp_ms=3, keys=keys)
    remembered = decode_records(data)
    batches._REMEMBERED.clear()
    batches._REMEMBERED_ORDER.clear()
    decoded = decode_records(data)
    assert remembered == decoded
    assert [type(r.value) for r in remembered] == [bytes] * len(values)


def test_batches_remembered_ahead_off_the_loop_decode_again_without_being_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """`remember_batches` (a follower's driver, on a worker thread, before its core sees a Fetch
    response) decodes each large data batch of a response once; the core's reads of those batches
    then find the same records without decoding them. Small, control or damaged batches are
    left for the reader, which rejects the damaged ones as ever."""
    big = [build_batch(base_offset=base, partition_leader_epoch=1, values=[b"v%d" % n * 9 for n in range(4000)],
                       timestamp_ms=3) for base in (0, 4000)]
    small = build_batch(base_offset=8000, partition_leader_epoch=1, values=[b"s"], timestamp_ms=3)
    expected = [decode_records(b) for b in big]
    batches._REMEMBERED.clear()
    batches._REMEMBERED_ORDER.clear()
    assert remember_batches(big[0] + big[1] + small) == 2
    monkeypatch.setattr(batches, "_read_records", lambda *_: pytest.fail("a remembered batch was decoded again"))
    assert [decode_records(b) for b in big] == expected
    monkeypatch.undo()
    damaged = bytearray(big[1])
    damaged[-1] ^= 1
    batches._REMEMBERED.clear()
    batches._REMEMBERED_ORDER.clear()
    assert remember_batches(big[0] + bytes(damaged)) == 1
    with pytest.raises(ValueError):
        decode_records(bytes(damaged))
