"""Kafka's `ApiMessageAndVersion` framing: how a metadata record sits in a record's value.

Every record in the `__cluster_metadata` log (and in its snapshots) has a null key and a value of

    unsigned varint  frame version   (always 1)
    unsigned varint  api key         (which metadata record)
    unsigned varint  record version
    ...              the record body in flexible encoding at that version

as written by Kafka's `AbstractApiMessageSerde`. The checks on read follow that class too: frame
version 0 (the 2.8 KRaft preview) and unknown frame versions are refused, and trailing bytes after
the body are an error rather than being ignored.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from kio.serial.errors import DecodeError
from kio.serial.readers import read_unsigned_varint

from kraft_engine.records.fast_writer import entity_writer_into, write_uvarint
from kraft_engine.records.metadata_records import MetadataRecord, PartitionChangeRecord
from kraft_engine.records.metadata_registry import (
    MetadataRecordError,
    normalise_decoded,
    record_type_for_api_key,
    record_type_of,
    record_version_of,
    to_latest,
    to_version,
)
from kraft_engine.records.record_runs import PartitionChangeRun, RecordParts
from kraft_engine.records.tagged_fields import tolerant_reader

FRAME_VERSION = 1
_SHORT_MAX = 32767


def encode_metadata_record(record: object, version: int | None = None) -> bytes:
    """The framed bytes of `record` at `version` (default: the version of the record's class, i.e.
    the latest for `TopicRecord`). Raises UnsupportedRecordVersionError when `version` does not
    exist or cannot hold one of the record's non-default values."""
    record_type = record_type_of(record)
    if version is None:
        version = record_version_of(record)
    entity = to_version(record, version)
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    write_uvarint(out, record_type.api_key)
    write_uvarint(out, version)
    entity_writer_into(type(entity))(out, entity)
    return bytes(out)


_PARTITION_AND_TOPIC_SIZE = 4 + 16  # PartitionChangeRecord's first two fields: int32 PartitionId, uuid TopicId
_pack_partition_id = struct.Struct(">i").pack


def encode_metadata_records(records: Iterable[tuple[object, int]]) -> list[bytes]:
    """`encode_metadata_record` of each (record, version), the same bytes, for a whole batch.

    A fence or a controlled shutdown writes one PartitionChangeRecord per partition, all alike
    but for their PartitionId and TopicId, which are the body's first two fields (fixed-width
    int32 and uuid; every other field is tagged). So the records that share their other fields'
    values, held as the very same objects (the controller builds one change per partition state
    and gives every partition of that state its field values), are encoded once: each further
    one is the same frame with its own 20 bytes of ids. Sameness is asked by identity, which
    costs no hashing of their contents and is sound because each shape keeps its first record
    (and so the objects whose ids are its key) alive until the call ends."""
    out: list[bytes] = []
    append = out.append
    shapes: dict[tuple[int, ...], tuple[bytes, bytes, object]] = {}
    # A topic's partitions come together: its id's bytes (a Python-level property) are read once.
    topic_id: object = None
    topic_bytes = b""
    for record, version in records:
        if type(record) is not PartitionChangeRecord:
            append(encode_metadata_record(record, version))
            continue
        key = (
            version, record.leader, record.leader_recovery_state, id(record.isr), id(record.replicas),
            id(record.removing_replicas), id(record.adding_replicas), id(record.directories),
            id(record.eligible_leader_replicas), id(record.last_known_elr),
        )
        shape = shapes.get(key)
        if shape is None:
            # Encoded in full (so every check of the ordinary path runs), then split around the ids.
            encoded = encode_metadata_record(record, version)
            append(encoded)
            head = len(encoded) - len(_encoded_tail(record, version, encoded))
            shapes[key] = (encoded[:head], encoded[head + _PARTITION_AND_TOPIC_SIZE :], record)
            continue
        if record.topic_id is not topic_id:
            topic_id = record.topic_id
            topic_bytes = record.topic_id.bytes
        append(b"".join((shape[0], _pack_partition_id(record.partition_id), topic_bytes, shape[1])))
    return out


def encode_partition_change_run(run: PartitionChangeRun) -> list[bytes]:
    """`encode_metadata_record` of each record of `run`, the same bytes, without building them:
    each distinct change is encoded once, in full (every check of the ordinary path runs on its
    values), and split around its 20 bytes of ids (PartitionId and TopicId are the body's first,
    fixed-width fields; every other field is tagged), so a record is that frame with its own ids."""
    shapes: dict[int, tuple[bytes, bytes]] = {}
    kind_shapes: list[tuple[bytes, bytes]] = []
    for change in run.changes:
        shape = shapes.get(id(change))
        if shape is None:
            encoded = encode_metadata_record(change, run.version)
            ids_at = len(encoded) - len(_encoded_tail(change, run.version, encoded))
            shape = shapes[id(change)] = (encoded[:ids_at], encoded[ids_at + _PARTITION_AND_TOPIC_SIZE :])
        kind_shapes.append(shape)
    out: list[bytes] = []
    append = out.append
    pack = _pack_partition_id
    topic_id: object = None
    topic_bytes = b""
    for kind, partition_id, topic in zip(run.kinds, run.partition_ids, run.topic_ids, strict=True):
        if topic is not topic_id:
            topic_id = topic
            topic_bytes = topic.bytes
        before, after = kind_shapes[kind]
        append(before + pack(partition_id) + topic_bytes + after)
    return out


def encode_metadata_record_parts(parts: Iterable[Iterable[tuple[object, int]] | PartitionChangeRun]) -> list[bytes]:
    """`encode_metadata_records` of records held in parts, some of them runs (`record_runs`)."""
    out: list[bytes] = []
    for part in parts:
        out.extend(encode_partition_change_run(part) if isinstance(part, PartitionChangeRun)
                   else encode_metadata_records(part))
    return out


def _encoded_tail(record: PartitionChangeRecord, version: int, encoded: bytes) -> bytes:
    """The bytes of `encoded` from the record body's PartitionId on: the frame header is three
    unsigned varints (frame version, api key, version)."""
    offset = 0
    for _ in range(3):
        _, size = read_unsigned_varint(encoded, offset)
        offset += size
    body = encoded[offset:]
    if body[:_PARTITION_AND_TOPIC_SIZE] != _pack_partition_id(record.partition_id) + record.topic_id.bytes:
        raise MetadataRecordError(f"PartitionChangeRecord v{version} does not start with its PartitionId and TopicId")
    return body


def _read_short(data: bytes | bytearray | memoryview, offset: int, what: str) -> tuple[int, int]:
    try:
        value, size = read_unsigned_varint(data, offset)
    except (ValueError, DecodeError, KeyError) as error:  # kio: KeyError for a tagged field it does not know
        raise MetadataRecordError(f"metadata record is truncated while reading the {what}") from error
    if value > _SHORT_MAX:
        raise MetadataRecordError(f"metadata record {what} {value} is too large")
    return value, offset + size


def decode_metadata_record(data: bytes | bytearray | memoryview) -> tuple[MetadataRecord, int]:
    """The record in a framed value, as the latest version's class, and the version it was written at."""
    frame_version, offset = _read_short(data, 0, "frame version")
    if frame_version == 0:
        raise MetadataRecordError(
            "metadata record has frame version 0, from the KRaft preview in Kafka 2.8, which is not supported"
        )
    if frame_version != FRAME_VERSION:
        raise MetadataRecordError(
            f"metadata record has unknown frame version {frame_version} (only {FRAME_VERSION} is supported)"
        )
    api_key, offset = _read_short(data, offset, "api key")
    version, offset = _read_short(data, offset, "version")
    record_type = record_type_for_api_key(api_key)
    cls: type[Any] = record_type.class_for_version(version)
    try:
        entity, size = tolerant_reader(cls)(data, offset)
    except (ValueError, DecodeError, KeyError) as error:  # KeyError: an unknown tag in bytes that do not walk
        raise MetadataRecordError(
            f"{record_type.name} version {version} body does not decode (truncated or corrupt): {error}"
        ) from error
    trailing = len(data) - offset - size
    if trailing:
        raise MetadataRecordError(f"found {trailing} byte(s) of garbage after {record_type.name}")
    return to_latest(normalise_decoded(entity)), version


_PARTITION_CHANGE_API_KEY = PartitionChangeRecord.__api_key__
_HEADER_SIZE = 3  # frame version, api key and record version: one byte each for these values
_IDS_END = _HEADER_SIZE + _PARTITION_AND_TOPIC_SIZE


def decode_metadata_records(values: Sequence[bytes]) -> Sequence[object]:
    """`decode_metadata_record(value)[0]` of each value, the same records, for a whole batch.

    A fence's batch is 10,000 PartitionChangeRecords alike but for their 20 bytes of ids (see
    `encode_metadata_records`). A value whose bytes around the ids equal an earlier one's is that
    record with its own ids: PartitionId and TopicId are fixed-width fields that any bytes decode
    to, and every other field is tagged, after them. So each distinct shape is decoded in full
    once, and stretches of such records come back as `PartitionChangeRun`s (inside a
    `RecordParts`), which the controller's and the loader's replays take whole."""
    parts: list[Sequence[object]] = []
    plain: list[object] = []
    shapes: dict[bytes, int] = {}
    changes: list[PartitionChangeRecord] = []
    kinds: list[int] = []
    partition_ids: list[int] = []
    topic_ids: list[uuid.UUID] = []
    topics: dict[bytes, uuid.UUID] = {}
    run_version = -1

    def close_run() -> None:
        nonlocal kinds, partition_ids, topic_ids
        if not kinds:
            return
        if plain:
            parts.append(tuple(plain))
            plain.clear()
        parts.append(PartitionChangeRun(changes=changes, version=run_version, kinds=kinds,
                                        partition_ids=partition_ids, topic_ids=topic_ids))
        kinds, partition_ids, topic_ids = [], [], []

    for value in values:
        if len(value) < _IDS_END or value[0] != FRAME_VERSION or value[1] != _PARTITION_CHANGE_API_KEY or value[2] > 0x7F:
            close_run()
            plain.append(decode_metadata_record(value)[0])
            continue
        if value[2] != run_version:
            close_run()
            shapes.clear()
            changes = []
            run_version = value[2]
        shape = value[:_HEADER_SIZE] + value[_IDS_END:]
        kind = shapes.get(shape)
        if kind is None:
            record, _ = decode_metadata_record(value)  # every check of the ordinary path, once per shape
            if type(record) is not PartitionChangeRecord:
                raise MetadataRecordError(f"api key {_PARTITION_CHANGE_API_KEY} decoded as {type(record).__name__}")
            kind = shapes[shape] = len(changes)
            changes.append(record)
        topic_bytes = value[_HEADER_SIZE + 4 : _IDS_END]
        topic_id = topics.get(topic_bytes)
        if topic_id is None:
            topic_id = topics[topic_bytes] = uuid.UUID(bytes=topic_bytes)
        kinds.append(kind)
        partition_ids.append(int.from_bytes(value[_HEADER_SIZE : _HEADER_SIZE + 4], "big", signed=True))
        topic_ids.append(topic_id)
    close_run()
    if not parts:
        return tuple(plain)
    if plain:
        parts.append(tuple(plain))
    return RecordParts(parts)
