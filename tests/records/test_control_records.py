"""KRaft control records: the leader-change, snapshot and voter records raft writes and replays."""

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage
from kio.schema.leader_change_message.v0.data import Voter as LeaderChangeVoter
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.schema.types import BrokerId
from kio.schema.voters_record.v0.data import VotersRecord
from kio.static.primitive import i16, i32, i64
from record_strategies import sample_voters_record

from kraft_engine.records.batches import build_batch, validate_batch
from kraft_engine.records.control import (
    ControlRecord,
    ControlRecordError,
    ControlRecordType,
    DecodedControlRecord,
    build_control_batch,
    control_record_type_of,
    decode_control_batch,
    decode_control_key,
    decode_control_record,
    encode_control_record,
)

_ENTITIES: list[type[ControlRecord]] = [
    LeaderChangeMessage,
    SnapshotHeaderRecord,
    SnapshotFooterRecord,
    KRaftVersionRecord,
    VotersRecord,
]

control_records = st.one_of(*(st.from_type(entity) for entity in _ENTITIES))


def test_control_types_have_kafkas_ids() -> None:
    assert [(t.name, t.value) for t in ControlRecordType] == [
        ("ABORT", 0),
        ("COMMIT", 1),
        ("LEADER_CHANGE", 2),
        ("SNAPSHOT_HEADER", 3),
        ("SNAPSHOT_FOOTER", 4),
        ("KRAFT_VERSION", 5),
        ("KRAFT_VOTERS", 6),
    ]


@pytest.mark.parametrize("entity", _ENTITIES, ids=lambda entity: entity.__name__)
@given(data=st.data())
def test_control_records_round_trip(entity: type[ControlRecord], data: st.DataObject) -> None:
    # One test per control type, so every type is exercised whatever hypothesis happens to draw.
    record = data.draw(st.from_type(entity))
    record_type = control_record_type_of(record)
    key, value = encode_control_record(record_type, record)
    decoded_type, decoded = decode_control_record(key, value)
    assert decoded_type is record_type
    # kio reads a zero directory id back as None; compare through a second encoding.
    assert encode_control_record(decoded_type, decoded) == (key, value)


@given(st.lists(control_records, min_size=1, max_size=5), st.integers(min_value=0, max_value=2**40))
def test_control_batches_round_trip(records: list[ControlRecord], base_offset: int) -> None:
    data = build_control_batch(
        base_offset=base_offset, partition_leader_epoch=3, timestamp_ms=1_000, records=records
    )
    header = validate_batch(data)
    assert header.is_control
    assert not header.is_transactional
    decoded = decode_control_batch(data)
    assert [item.offset for item in decoded] == list(range(base_offset, base_offset + len(records)))
    assert [item.type for item in decoded] == [control_record_type_of(record) for record in records]
    assert [encode_control_record(item.type, item.record) for item in decoded] == [
        encode_control_record(control_record_type_of(record), record) for record in records
    ]


def test_leader_change_bytes_match_kafka() -> None:
    message = LeaderChangeMessage(
        version=i16(0),
        leader_id=BrokerId(1),
        voters=(LeaderChangeVoter(voter_id=i32(1)), LeaderChangeVoter(voter_id=i32(2))),
        granting_voters=(LeaderChangeVoter(voter_id=i32(1)),),
    )
    key, value = encode_control_record(ControlRecordType.LEADER_CHANGE, message)
    assert key == bytes.fromhex("0000 0002")
    # version, leaderId, compact array of 2 voters (each with empty tagged fields), compact array of 1,
    # empty top-level tagged fields. No voter directory ids: Kafka writes this message at version 0.
    assert value == bytes.fromhex("0000 00000001 03 00000001 00 00000002 00 02 00000001 00 00")


def test_snapshot_header_bytes_match_kafka() -> None:
    header = SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(0x0102))
    key, value = encode_control_record(ControlRecordType.SNAPSHOT_HEADER, header)
    assert key == bytes.fromhex("0000 0003")
    assert value == bytes.fromhex("0000 0000000000000102 00")


def test_voters_record_bytes_match_kafka() -> None:
    key, value = encode_control_record(ControlRecordType.KRAFT_VOTERS, sample_voters_record())
    assert key == bytes.fromhex("0000 0006")
    expected = (
        bytes.fromhex("0000 02 00000001")
        + uuid.UUID(int=7).bytes
        + bytes.fromhex("02 0b")
        + b"CONTROLLER"
        + bytes.fromhex("0a")
        + b"localhost"
        + bytes.fromhex("2385 00 0000 0001 00 00 00")
    )
    assert value == expected


def test_entity_must_match_the_type() -> None:
    with pytest.raises(TypeError, match="LEADER_CHANGE"):
        encode_control_record(ControlRecordType.LEADER_CHANGE, sample_voters_record())
    with pytest.raises(TypeError, match="COMMIT"):
        encode_control_record(ControlRecordType.COMMIT, sample_voters_record())
    with pytest.raises(TypeError, match="not a KRaft control record"):
        control_record_type_of(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00"])
def test_short_key_is_refused(key: bytes | None) -> None:
    with pytest.raises(ControlRecordError, match="at least 4"):
        decode_control_key(key)


def test_negative_key_version_is_refused() -> None:
    with pytest.raises(ControlRecordError, match="negative"):
        decode_control_key(struct.pack(">hh", -1, 2))


def test_newer_key_versions_are_read_as_version_zero() -> None:
    # Kafka parses unknown key versions as version 0 (and ignores extra key bytes).
    assert decode_control_key(struct.pack(">hhh", 1, 3, 9)) is ControlRecordType.SNAPSHOT_HEADER


def test_unknown_type_is_refused() -> None:
    with pytest.raises(ControlRecordError, match="unknown control record type 7"):
        decode_control_key(struct.pack(">hh", 0, 7))


def test_transaction_markers_are_not_decoded() -> None:
    with pytest.raises(ControlRecordError, match="COMMIT control records are not supported"):
        decode_control_record(struct.pack(">hh", 0, 1), b"\x00\x00\x00\x00\x00\x00")


def test_missing_truncated_or_overlong_values_are_refused() -> None:
    key, value = encode_control_record(ControlRecordType.KRAFT_VOTERS, sample_voters_record())
    with pytest.raises(ControlRecordError, match="no value"):
        decode_control_record(key, None)
    with pytest.raises(ControlRecordError, match="does not decode"):
        decode_control_record(key, value[:-3])
    with pytest.raises(ControlRecordError, match="1 bytes after"):
        decode_control_record(key, value + b"\x00")


def test_decode_control_batch_refuses_data_batches() -> None:
    data = build_batch(base_offset=0, partition_leader_epoch=1, values=[b"x"], timestamp_ms=0)
    with pytest.raises(ControlRecordError, match="not a control batch"):
        decode_control_batch(data)


def test_decoded_control_record_carries_its_offset() -> None:
    footer = SnapshotFooterRecord(version=i16(0))
    data = build_control_batch(base_offset=41, partition_leader_epoch=2, timestamp_ms=0, records=[footer])
    assert decode_control_batch(data) == [DecodedControlRecord(41, ControlRecordType.SNAPSHOT_FOOTER, footer)]
