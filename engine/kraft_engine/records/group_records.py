"""The records of `__consumer_offsets`, in Kafka's key and value formats.

The group coordinator keeps its state in that topic, so the bytes must be Kafka's: a Kafka broker
(or `kafka-dump-log --offsets-decoder`) reading a log we wrote sees committed offsets and group
metadata, and we read what a Kafka coordinator wrote. Every key and value starts with an int16
version; the fields follow in the non-flexible encoding (int16-length strings, -1 for null,
int32-length bytes), and version 4 of each value is the flexible one (compact strings and bytes,
tagged fields), which we read but do not write, as Kafka 4.1 does not for these values either.

- OffsetCommitKey (key versions 0 and 1): group, topic, partition. We write version 1.
- GroupMetadataKey (key version 2): group.
- OffsetCommitValue versions 0-4: offset, leaderEpoch (3+), metadata, commitTimestamp,
  expireTimestamp (version 1 only). We write version 3, or 1 when an expire timestamp is set (a
  v1 OffsetCommit request's retention), as Kafka does.
- GroupMetadataValue versions 0-4: protocolType, generation, protocol, leader,
  currentStateTimestamp (2+), members (memberId, groupInstanceId (3+), clientId, clientHost,
  rebalanceTimeout (1+), sessionTimeout, subscription, assignment). We write version 3.

A null value is a tombstone: the offset or the group is gone (compaction then drops the key).
Key versions 3 and above belong to KIP-848 and share groups, which we do not serve; they decode
as `UnknownKey` so a loader can skip them. Pure.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kraft_engine.errors import RecordsError

__all__ = [
    "GroupMetadataKey",
    "GroupMetadataValue",
    "GroupRecordError",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "UnknownKey",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
    "java_string_hash",
    "partition_for_group",
]

_OFFSET_KEY_VERSION = 1
_GROUP_KEY_VERSION = 2
_GROUP_VALUE_VERSION = 3
_FLEXIBLE_VALUE_VERSION = 4


class GroupRecordError(RecordsError, ValueError):
    """Bytes that are not a record of `__consumer_offsets` in any version we know."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key of a record type we do not serve (consumer groups of KIP-848, share groups)."""

    version: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp_ms: int
    leader_epoch: int = -1
    expire_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout_ms: int = -1
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    members: tuple[MemberMetadata, ...]
    current_state_timestamp_ms: int = -1


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_group(group: str, *, partitions: int) -> int:
    """Kafka's `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions` (Utils.abs maps
    Integer.MIN_VALUE to 0, any other hash to its absolute value)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# -- writing ----------------------------------------------------------------------------------


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _nullable_string(text: str | None) -> bytes:
    return struct.pack(">h", -1) if text is None else _string(text)


def _bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    return struct.pack(">h", _OFFSET_KEY_VERSION) + _string(key.group) + _string(key.topic) + struct.pack(">i", key.partition)


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    return struct.pack(">h", _GROUP_KEY_VERSION) + _string(key.group)


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    if value.expire_timestamp_ms >= 0:
        return (struct.pack(">hq", 1, value.offset) + _string(value.metadata)
                + struct.pack(">qq", value.commit_timestamp_ms, value.expire_timestamp_ms))
    return (struct.pack(">hqi", 3, value.offset, value.leader_epoch) + _string(value.metadata)
            + struct.pack(">q", value.commit_timestamp_ms))


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    out = bytearray(struct.pack(">h", _GROUP_VALUE_VERSION))
    out += _string(value.protocol_type)
    out += struct.pack(">i", value.generation)
    out += _nullable_string(value.protocol)
    out += _nullable_string(value.leader)
    out += struct.pack(">q", value.current_state_timestamp_ms)
    out += struct.pack(">i", len(value.members))
    for m in value.members:
        out += _string(m.member_id)
        out += _nullable_string(m.group_instance_id)
        out += _string(m.client_id)
        out += _string(m.client_host)
        out += struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms)
        out += _bytes(m.subscription)
        out += _bytes(m.assignment)
    return bytes(out)


# -- reading ----------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    def _take(self, size: int) -> bytes:
        if size < 0 or self._pos + size > len(self._data):
            raise GroupRecordError(f"{self._what} is truncated at byte {self._pos}")
        chunk = self._data[self._pos:self._pos + size]
        self._pos += size
        return chunk

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            byte = self._take(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise GroupRecordError(f"{self._what} has a varint longer than 5 bytes")

    def string(self, *, flexible: bool = False) -> str:
        text = self.nullable_string(flexible=flexible)
        if text is None:
            raise GroupRecordError(f"{self._what} has a null where a string must be")
        return text

    def nullable_string(self, *, flexible: bool = False) -> str | None:
        size = self.uvarint() - 1 if flexible else self.int16()
        if size < 0:
            return None
        try:
            return self._take(size).decode()
        except UnicodeDecodeError as error:
            raise GroupRecordError(f"{self._what} has a string that is not UTF-8: {error}") from None

    def bytes_(self, *, flexible: bool = False) -> bytes:
        size = self.uvarint() - 1 if flexible else self.int32()
        return b"" if size < 0 else self._take(size)

    def array_length(self, *, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.int32()

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    reader = _Reader(data, "a __consumer_offsets key")
    version = reader.int16()
    if version in (0, 1):
        return OffsetCommitKey(group=reader.string(), topic=reader.string(), partition=reader.int32())
    if version == _GROUP_KEY_VERSION:
        return GroupMetadataKey(group=reader.string())
    if version < 0:
        raise GroupRecordError(f"a __consumer_offsets key has the negative version {version}")
    return UnknownKey(version)


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    reader = _Reader(data, "an OffsetCommitValue")
    version = reader.int16()
    if not 0 <= version <= _FLEXIBLE_VALUE_VERSION:
        raise GroupRecordError(f"OffsetCommitValue version {version} is not one of 0-4")
    flexible = version >= _FLEXIBLE_VALUE_VERSION
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else -1
    metadata = reader.string(flexible=flexible)
    commit_timestamp_ms = reader.int64()
    expire_timestamp_ms = reader.int64() if version == 1 else -1
    if flexible:
        reader.skip_tagged_fields()
    return OffsetCommitValue(offset=offset, metadata=metadata, commit_timestamp_ms=commit_timestamp_ms,
                             leader_epoch=leader_epoch, expire_timestamp_ms=expire_timestamp_ms)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    reader = _Reader(data, "a GroupMetadataValue")
    version = reader.int16()
    if not 0 <= version <= _FLEXIBLE_VALUE_VERSION:
        raise GroupRecordError(f"GroupMetadataValue version {version} is not one of 0-4")
    flexible = version >= _FLEXIBLE_VALUE_VERSION
    protocol_type = reader.string(flexible=flexible)
    generation = reader.int32()
    protocol = reader.nullable_string(flexible=flexible)
    leader = reader.nullable_string(flexible=flexible)
    timestamp_ms = reader.int64() if version >= 2 else -1
    members = []
    for _ in range(max(0, reader.array_length(flexible=flexible))):
        member_id = reader.string(flexible=flexible)
        instance_id = reader.nullable_string(flexible=flexible) if version >= 3 else None
        client_id = reader.string(flexible=flexible)
        client_host = reader.string(flexible=flexible)
        rebalance_timeout_ms = reader.int32() if version >= 1 else -1
        session_timeout_ms = reader.int32()
        subscription = reader.bytes_(flexible=flexible)
        assignment = reader.bytes_(flexible=flexible)
        if flexible:
            reader.skip_tagged_fields()
        members.append(MemberMetadata(
            member_id=member_id, client_id=client_id, client_host=client_host, session_timeout_ms=session_timeout_ms,
            subscription=subscription, assignment=assignment, rebalance_timeout_ms=rebalance_timeout_ms,
            group_instance_id=instance_id,
        ))
    if flexible:
        reader.skip_tagged_fields()
    return GroupMetadataValue(protocol_type=protocol_type, generation=generation, protocol=protocol, leader=leader,
                              members=tuple(members), current_state_timestamp_ms=timestamp_ms)
