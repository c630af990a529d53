"""KRaft control records: leader changes, snapshot header/footer, kraft.version and the voter set.

Raft writes these into the same log as metadata records, in batches with the control attribute
set, and snapshots begin and end with them. Their encoding follows Kafka's `ControlRecordType` and
`MemoryRecordsBuilder.appendControlRecord`:

- key: int16 key version (0) followed by int16 control type, 4 bytes in all. kio's
  `ControlRecordTypeSchema` models only the type, so the key is packed here.
- value: the message body in flexible encoding at the schema version Kafka writes and reads
  (`ControlRecordUtils.*_CURRENT_VERSION`, all 0). Each of these messages begins with its own
  int16 `version` data field, so the value starts with that version.

The bodies are kio's entities. LeaderChangeMessage is handled at schema version 0 as in Kafka:
the version-1 voter directory ids are never written, and Kafka reads the value as version 0.
"""

from __future__ import annotations

import enum
import io
import struct
from collections.abc import Sequence
from typing import NamedTuple

from kio.schema.k_raft_version_record.v0 import KRaftVersionRecord
from kio.schema.leader_change_message.v0 import LeaderChangeMessage
from kio.schema.snapshot_footer_record.v0 import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0 import SnapshotHeaderRecord
from kio.schema.voters_record.v0 import VotersRecord
from kio.serial import entity_writer
from kio.serial.errors import DecodeError

from kraft_engine.errors import RecordsError
from kraft_engine.records.batches import build_batch, decode_records, validate_batch
from kraft_engine.records.tagged_fields import tolerant_reader


class ControlRecordType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


ControlRecord = LeaderChangeMessage | SnapshotHeaderRecord | SnapshotFooterRecord | KRaftVersionRecord | VotersRecord
"""The control messages KRaft writes. ABORT/COMMIT transaction markers belong to data partitions
and are not produced or decoded by the engine."""

CONTROL_KEY_VERSION = 0

_KEY = struct.Struct(">hh")

_ENTITY_BY_TYPE: dict[ControlRecordType, type[ControlRecord]] = {
    ControlRecordType.LEADER_CHANGE: LeaderChangeMessage,
    ControlRecordType.SNAPSHOT_HEADER: SnapshotHeaderRecord,
    ControlRecordType.SNAPSHOT_FOOTER: SnapshotFooterRecord,
    ControlRecordType.KRAFT_VERSION: KRaftVersionRecord,
    ControlRecordType.KRAFT_VOTERS: VotersRecord,
}
_TYPE_BY_ENTITY = {entity: record_type for record_type, entity in _ENTITY_BY_TYPE.items()}


class ControlRecordError(RecordsError, ValueError):
    """A control record whose key or value cannot be decoded."""


class DecodedControlRecord(NamedTuple):
    offset: int
    type: ControlRecordType
    record: ControlRecord


def control_record_type_of(record: ControlRecord) -> ControlRecordType:
    try:
        return _TYPE_BY_ENTITY[type(record)]
    except KeyError:
        raise TypeError(f"{type(record).__name__} is not a KRaft control record") from None


def encode_control_key(record_type: ControlRecordType) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, record_type)


def decode_control_key(key: bytes | None) -> ControlRecordType:
    """The control type in a control record's key, checked the way Kafka's `ControlRecordType.parse` does."""
    if key is None or len(key) < _KEY.size:
        size = 0 if key is None else len(key)
        raise ControlRecordError(f"control record key has {size} bytes, needs at least {_KEY.size}")
    key_version, type_id = _KEY.unpack_from(key)
    if key_version < 0:
        raise ControlRecordError(f"control record key version {key_version} is negative")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        raise ControlRecordError(f"unknown control record type {type_id}") from None


def encode_control_record(record_type: ControlRecordType, entity: ControlRecord) -> tuple[bytes, bytes]:
    """The (key, value) pair Kafka writes for `entity` as a control record of `record_type`."""
    expected = _ENTITY_BY_TYPE.get(record_type)
    if expected is None or not isinstance(entity, expected):
        raise TypeError(f"{type(entity).__name__} cannot be written as a {record_type.name} control record")
    with io.BytesIO() as buffer:
        entity_writer(type(entity))(buffer, entity)
        return encode_control_key(record_type), buffer.getvalue()


def decode_control_record(key: bytes | None, value: bytes | None) -> tuple[ControlRecordType, ControlRecord]:
    record_type = decode_control_key(key)
    entity_type = _ENTITY_BY_TYPE.get(record_type)
    if entity_type is None:
        raise ControlRecordError(f"{record_type.name} control records are not supported by the engine")
    if value is None:
        raise ControlRecordError(f"{record_type.name} control record has no value")
    try:
        entity, size = tolerant_reader(entity_type)(value, 0)
    except (ValueError, DecodeError, KeyError) as error:  # KeyError: an unknown tag in bytes that do not walk
        raise ControlRecordError(f"{record_type.name} control record value does not decode: {error}") from error
    if size != len(value):
        raise ControlRecordError(
            f"{record_type.name} control record value has {len(value) - size} bytes after the message"
        )
    return record_type, entity


def build_control_batch(
    *,
    base_offset: int,
    partition_leader_epoch: int,
    timestamp_ms: int,
    records: Sequence[ControlRecord],
) -> bytes:
    """A control batch holding `records` in order, each keyed by the type of its entity."""
    keys = []
    values = []
    for record in records:
        key, value = encode_control_record(control_record_type_of(record), record)
        keys.append(key)
        values.append(value)
    return build_batch(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        values=values,
        timestamp_ms=timestamp_ms,
        keys=keys,
        control=True,
    )


def decode_control_batch(batch_bytes: bytes | bytearray | memoryview) -> list[DecodedControlRecord]:
    """Every control record in one control batch, with its offset."""
    header = validate_batch(batch_bytes)
    if not header.is_control:
        raise ControlRecordError(f"batch at offset {header.base_offset} is not a control batch")
    return [
        DecodedControlRecord(offset, *decode_control_record(key, value))
        for offset, key, value in decode_records(batch_bytes)
    ]
