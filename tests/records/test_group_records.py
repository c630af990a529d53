"""`__consumer_offsets` records in Kafka's formats: round trips, the versions Kafka wrote before
(v0-v2 values, the flexible v4), Java's hash for a group's partition, and refused garbage."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft_engine.records.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecordError,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hash,
    partition_for_group,
)

texts = st.text(max_size=20)


@pytest.mark.parametrize(("group", "java_hash", "partition"), [
    # String.hashCode and Utils.abs(hash) % 50, printed by Kafka 4.1's own classes.
    ("test-group", 627841412, 12), ("orders-app", 772757305, 5), ("", 0, 0),
    ("ünïcode-组", -1471461023, 23), ("kp-group", -494749673, 23), ("\U0001F600-smile", -1187512802, 2),
])
def test_a_groups_partition_is_kafkas(group: str, java_hash: int, partition: int) -> None:
    assert java_string_hash(group) == java_hash
    assert partition_for_group(group, partitions=50) == partition


@given(group=texts, topic=texts, partition=st.integers(0, 2**31 - 1), offset=st.integers(-1, 2**63 - 1),
       epoch=st.integers(-1, 2**31 - 1), metadata=texts, timestamp=st.integers(0, 2**62),
       expire=st.one_of(st.just(-1), st.integers(0, 2**62)))
def test_offset_records_round_trip(group: str, topic: str, partition: int, offset: int, epoch: int, metadata: str,
                                   timestamp: int, expire: int) -> None:
    key = OffsetCommitKey(group, topic, partition)
    assert decode_key(encode_offset_commit_key(key)) == key
    value = OffsetCommitValue(offset=offset, metadata=metadata, commit_timestamp_ms=timestamp,
                              leader_epoch=epoch if expire < 0 else -1, expire_timestamp_ms=expire)
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == value


members = st.builds(MemberMetadata, member_id=texts, client_id=texts, client_host=texts,
                    session_timeout_ms=st.integers(0, 2**31 - 1), subscription=st.binary(max_size=30),
                    assignment=st.binary(max_size=30), rebalance_timeout_ms=st.integers(-1, 2**31 - 1),
                    group_instance_id=st.one_of(st.none(), texts))


@given(group=texts, value=st.builds(GroupMetadataValue, protocol_type=texts, generation=st.integers(0, 2**31 - 1),
                                    protocol=st.one_of(st.none(), texts), leader=st.one_of(st.none(), texts),
                                    members=st.lists(members, max_size=4).map(tuple),
                                    current_state_timestamp_ms=st.integers(-1, 2**62)))
def test_group_records_round_trip(group: str, value: GroupMetadataValue) -> None:
    assert decode_key(encode_group_metadata_key(GroupMetadataKey(group))) == GroupMetadataKey(group)
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_older_versions_kafka_wrote_are_read() -> None:
    # OffsetCommitValue v0: offset, metadata, commitTimestamp.
    v0 = struct.pack(">hq", 0, 7) + _s("meta") + struct.pack(">q", 123)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(offset=7, metadata="meta", commit_timestamp_ms=123)
    # GroupMetadataValue v0: no rebalance timeout, no state timestamp, no instance id.
    member = _s("m-1") + _s("client") + _s("/10.0.0.1") + struct.pack(">i", 10_000) + struct.pack(">i", 1) + b"S" + \
        struct.pack(">i", 1) + b"A"
    v0_group = struct.pack(">h", 0) + _s("consumer") + struct.pack(">i", 3) + _s("range") + _s("m-1") + \
        struct.pack(">i", 1) + member
    decoded = decode_group_metadata_value(v0_group)
    assert (decoded.generation, decoded.protocol, decoded.leader, decoded.current_state_timestamp_ms) == (3, "range", "m-1", -1)
    assert decoded.members == (MemberMetadata(member_id="m-1", client_id="client", client_host="/10.0.0.1",
                                              session_timeout_ms=10_000, subscription=b"S", assignment=b"A"),)
    # The flexible v4: compact strings (length + 1) and tagged fields.
    v4 = struct.pack(">hqi", 4, 9, 2) + bytes([5]) + b"meta" + struct.pack(">q", 55) + bytes([0])
    assert decode_offset_commit_value(v4) == OffsetCommitValue(offset=9, metadata="meta", commit_timestamp_ms=55,
                                                               leader_epoch=2)


def test_keys_of_groups_we_do_not_serve_are_recognised_and_garbage_is_refused() -> None:
    assert decode_key(struct.pack(">h", 3) + _s("consumer-group")) == UnknownKey(3)
    with pytest.raises(GroupRecordError):
        decode_key(struct.pack(">h", 1) + _s("g"))  # truncated: no topic, no partition
    with pytest.raises(GroupRecordError):
        decode_offset_commit_value(struct.pack(">hq", 9, 1))
    with pytest.raises(GroupRecordError):
        decode_group_metadata_value(struct.pack(">h", 3) + struct.pack(">h", 50) + b"short")
