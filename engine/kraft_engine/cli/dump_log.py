"""`kraft dump-log`: print the batches and records of log segments and snapshots.

Kafka operators read metadata logs with `kafka-dump-log.sh --cluster-metadata-decoder`, and their
scripts and eyes know its line format. This tool prints the same lines (Kafka's DumpLogSegments),
so output from our files and Kafka's files can be compared side by side, and it keeps going as far
as the bytes allow: on damage it prints the valid prefix, then says where and why it stopped.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, TextIO

from kio.records.readers import read_record
from kio.serial.errors import DecodeError
from kio.serial.readers import read_signed_varint, read_signed_varlong
from kio.static.primitive import i64

from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.records import (
    BatchHeader,
    ControlRecordError,
    ControlRecordType,
    CorruptBatchError,
    decode_control_record,
    decode_metadata_record,
    read_batch_header,
    record_to_json,
    validate_batch,
)
from kraft_engine.records.batches import LOG_OVERHEAD, MAGIC, RECORD_BATCH_OVERHEAD
from kraft_engine.records.compression import CODEC_NAMES, CODEC_NONE, decompress

__all__ = ["dump_file", "register"]

_RECORD_INDENT = "|"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_LOG_NAME = re.compile(r"^(\d{20})\.log$")
# The file Kafka 3.x/4.1 `kafka-storage format` writes into every log dir (BootstrapDirectory).
_BINARY_BOOTSTRAP_NAME = "bootstrap.checkpoint"
_TIMESTAMP_TYPE_MASK = 0x08
_DELETE_HORIZON_MASK = 0x40
# How Kafka's DumpLogSegments labels each KRaft control record before its JSON form (sic: only the
# leader change has a colon).
_CONTROL_LABELS = {
    ControlRecordType.LEADER_CHANGE: "LeaderChange:",
    ControlRecordType.SNAPSHOT_HEADER: "SnapshotHeader",
    ControlRecordType.SNAPSHOT_FOOTER: "SnapshotFooter",
    ControlRecordType.KRAFT_VERSION: "KRaftVersion",
    ControlRecordType.KRAFT_VOTERS: "KRaftVoters",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "dump-log",
        help="print the batches and records of log segments and snapshots (like kafka-dump-log)",
        description="Print the record batches of .log segments and .checkpoint snapshots in Kafka's "
        "DumpLogSegments format. With --cluster-metadata-decoder every record is printed too: control "
        "records as Kafka prints them and metadata records as JSON.",
    )
    parser.add_argument(
        "--files",
        required=True,
        nargs="+",
        metavar="FILE",
        help="the .log or .checkpoint files to dump (space- or comma-separated, as in Kafka)",
    )
    parser.add_argument(
        "--cluster-metadata-decoder",
        action="store_true",
        help="decode every record as a __cluster_metadata record (implies --deep-iteration)",
    )
    parser.add_argument(
        "--deep-iteration", action="store_true", help="print each record's metadata, not just the batches"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    files = [name for item in args.files for name in item.split(",") if name]
    ok = True
    for name in files:
        ok = dump_file(
            Path(name),
            out=sys.stdout,
            err=sys.stderr,
            decode_metadata=args.cluster_metadata_decoder,
            deep=args.deep_iteration or args.cluster_metadata_decoder,
        ) and ok
    return 0 if ok else 1


def dump_file(path: Path, *, out: TextIO, err: TextIO, decode_metadata: bool, deep: bool) -> bool:
    """Print one file; False when it could not be read to its end (the readable prefix is printed)."""
    print(f"Dumping {path}", file=out)
    if (m := _LOG_NAME.match(path.name)) is not None:
        print(f"Log starting offset: {int(m.group(1))}", file=out)
    elif (m := _SNAPSHOT_NAME.match(path.name)) is not None:
        print(f"Snapshot end offset: {int(m.group(1))}, epoch: {int(m.group(2))}", file=out)
    elif path.name == _BINARY_BOOTSTRAP_NAME:
        print("KRaft bootstrap snapshot", file=out)
    else:
        print(f"Ignoring unknown file {path}: only .log segments and .checkpoint snapshots are read", file=err)
        return True
    try:
        data = path.read_bytes()
    except OSError as e:
        print(f"Error: cannot read {path}: {e.strerror or e}", file=err)
        return False

    ok = True
    for item in _scan(data):
        if isinstance(item, _Stop):
            print(f"Found {len(data) - item.position} invalid bytes at the end of {path.name}", file=out)
            print(f"Error: {path}: stopped at byte {item.position}: {item.reason}", file=err)
            return False
        print(_batch_line(item.header, position=item.position, crc_valid=item.crc_error is None), file=out)
        if item.crc_error is not None:
            print(f"Error: {path}: batch at byte {item.position} is corrupt: {item.crc_error}", file=err)
            ok = False
        elif deep:
            ok = _print_records(path, item.header, item.raw, out=out, err=err, decode_metadata=decode_metadata) and ok
    return ok


@dataclass(frozen=True, slots=True)
class _Batch:
    position: int
    header: BatchHeader
    raw: bytes
    crc_error: str | None


@dataclass(frozen=True, slots=True)
class _Stop:
    """Where the framing broke: nothing after `position` can be read as batches."""

    position: int
    reason: str


def _scan(data: bytes) -> Iterator[_Batch | _Stop]:
    """Batches framed by their length fields; a CRC failure is reported but does not stop the scan
    (like Kafka, which prints `isvalid: false`), a broken frame does."""
    position = 0
    while position < len(data):
        remaining = len(data) - position
        if remaining < RECORD_BATCH_OVERHEAD:
            yield _Stop(position, f"{remaining} bytes cannot hold a batch header")
            return
        header = read_batch_header(data, position)
        if header.magic != MAGIC:
            yield _Stop(position, f"magic is {header.magic}, only v2 batches (magic 2) are read")
            return
        if header.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
            yield _Stop(position, f"batch length {header.batch_length} is impossible")
            return
        if header.size_bytes > remaining:
            yield _Stop(
                position,
                f"batch declares {header.size_bytes} bytes but only {remaining} remain (torn write?)",
            )
            return
        raw = data[position : position + header.size_bytes]
        crc_error: str | None = None
        try:
            validate_batch(raw)
        except CorruptBatchError as e:
            crc_error = e.reason
        yield _Batch(position, header, raw, crc_error)
        position += header.size_bytes


def _batch_line(header: BatchHeader, *, position: int, crc_valid: bool) -> str:
    base_sequence = header.base_sequence
    last_sequence = -1 if base_sequence == -1 else (base_sequence + header.last_offset_delta) % (2**31)
    delete_horizon = (
        f"OptionalLong[{header.base_timestamp}]"
        if header.attributes & _DELETE_HORIZON_MASK
        else "OptionalLong.empty"
    )
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.record_count} "
        f"baseSequence: {base_sequence} lastSequence: {last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_bool(header.is_transactional)} isControl: {_bool(header.is_control)} "
        f"deleteHorizonMs: {delete_horizon} position: {position} {_timestamp_type(header)}: "
        f"{header.max_timestamp} size: {header.size_bytes} magic: {header.magic} "
        f"compresscodec: {CODEC_NAMES.get(header.compression_codec, str(header.compression_codec))} "
        f"crc: {header.crc} isvalid: {_bool(crc_valid)}"
    )


@dataclass(frozen=True, slots=True)
class _RecordView:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    header_keys: tuple[str, ...]


def _records(header: BatchHeader, raw: bytes) -> list[_RecordView]:
    """Every record of one uncompressed batch, with its exact timestamp.

    kio's reader rounds record timestamps down to whole seconds, so the millisecond timestamp is
    rebuilt from the batch's base timestamp and the record's own delta (its third field).
    """
    records = []
    position = RECORD_BATCH_OVERHEAD
    for _ in range(header.record_count):
        _, length_size = read_signed_varint(raw, position)
        # Skip the record length and the one-byte attributes to reach the timestamp delta.
        delta_ms, _ = read_signed_varlong(raw, position + length_size + 1)
        record, size = read_record(raw, i64(header.base_timestamp), i64(header.base_offset), position)
        records.append(
            _RecordView(
                offset=record.offset,
                timestamp_ms=header.base_timestamp + delta_ms,
                key=record.key,
                value=record.value,
                header_keys=tuple((h.key or b"").decode("utf-8", "replace") for h in record.headers),
            )
        )
        position += size
    if position != len(raw):
        raise ValueError(f"{len(raw) - position} bytes follow the last of the {header.record_count} records")
    return records


def _print_records(
    path: Path, header: BatchHeader, raw: bytes, *, out: TextIO, err: TextIO, decode_metadata: bool
) -> bool:
    try:
        if header.compression_codec != CODEC_NONE:
            # The records section decompressed behind the same header, as Kafka's tool iterates it.
            raw = raw[:RECORD_BATCH_OVERHEAD] + decompress(header.compression_codec, raw[RECORD_BATCH_OVERHEAD:])
        records = _records(header, raw)
    except (ValueError, OverflowError, DecodeError) as e:
        print(f"Error: {path}: records of the batch at offset {header.base_offset} do not decode: {e}", file=err)
        return False
    ok = True
    for record in records:
        line = (
            f"{_RECORD_INDENT} offset: {record.offset} {_timestamp_type(header)}: {record.timestamp_ms} "
            f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
            f"sequence: {_sequence(header, record.offset)} headerKeys: [{','.join(record.header_keys)}]"
        )
        if header.is_control:
            line += " " + _describe_control(record)
        elif decode_metadata:
            line += f" payload: {_describe_metadata(record)}"
        print(line, file=out)
    return ok


def _describe_control(record: _RecordView) -> str:
    try:
        record_type, entity = decode_control_record(record.key, record.value)
    except ControlRecordError as e:
        return f"controlType: unreadable ({e})"
    label = _CONTROL_LABELS.get(record_type)
    if label is None:
        return f"controlType: {record_type.name}({int(record_type)})"
    return f"{label} {json.dumps(_to_json(entity), separators=(',', ':'))}"


def _describe_metadata(record: _RecordView) -> str:
    if record.value is None:
        return f"Error at {record.offset}, skipping. The record has no value."
    try:
        decoded, version = decode_metadata_record(record.value)
        return json.dumps(record_to_json(decoded, version), separators=(",", ":"), ensure_ascii=False)
    except ValueError as e:
        return f"Error at {record.offset}, skipping. {e}"


def _to_json(value: Any) -> Any:
    """Kafka's JSON form of a message: camelCase field names, Uuids in Kafka's text form."""
    if is_dataclass(value) and not isinstance(value, type):
        return {_camel(f.name): _to_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple | list):
        return [_to_json(v) for v in value]
    if isinstance(value, uuid.UUID):
        return to_kafka_str(value)
    return value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _timestamp_type(header: BatchHeader) -> str:
    return "LogAppendTime" if header.attributes & _TIMESTAMP_TYPE_MASK else "CreateTime"


def _sequence(header: BatchHeader, offset: int) -> int:
    if header.base_sequence == -1:
        return -1
    return (header.base_sequence + offset - header.base_offset) % (2**31)


def _size(value: bytes | None) -> int:
    return -1 if value is None else len(value)


def _bool(value: bool) -> str:
    return "true" if value else "false"
