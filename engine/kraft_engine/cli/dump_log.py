"""`kraft dump-log`: print the batches and records of log segments and snapshots.

Kafka operators read metadata logs with `kafka-dump-log.sh --cluster-metadata-decoder`, and their
scripts and eyes know its line format. This tool prints the same lines (Kafka's DumpLogSegments),
so output from our files and Kafka's files can be compared side by side, and it keeps going as far
as the bytes allow: on damage it prints the valid prefix, then says where and why it stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, TextIO

from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.records import (
    BatchHeader,
    ControlRecordError,
    ControlRecordType,
    decode_control_record,
    decode_metadata_record,
    record_to_json,
)
from kraft_engine.records.compression import CODEC_NAMES
from kraft_engine.storage.log_file_reader import (
    BatchRecord,
    LogFileKind,
    ScanStop,
    classify_log_file,
    read_batch_records,
    read_log_file,
    scan_batches,
)

__all__ = ["dump_file", "register"]

_RECORD_INDENT = "|"
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
    kind = classify_log_file(path.name)
    if kind is None:
        print(f"Ignoring unknown file {path}: only .log segments and .checkpoint snapshots are read", file=err)
        return True
    if kind.kind is LogFileKind.SEGMENT:
        print(f"Log starting offset: {kind.offset}", file=out)
    elif kind.kind is LogFileKind.SNAPSHOT:
        print(f"Snapshot end offset: {kind.offset}, epoch: {kind.epoch}", file=out)
    else:
        print("KRaft bootstrap snapshot", file=out)
    try:
        data = read_log_file(path)
    except OSError as e:
        print(f"Error: cannot read {path}: {e.strerror or e}", file=err)
        return False

    ok = True
    for item in scan_batches(data):
        if isinstance(item, ScanStop):
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


def _print_records(
    path: Path, header: BatchHeader, raw: bytes, *, out: TextIO, err: TextIO, decode_metadata: bool
) -> bool:
    try:
        records = read_batch_records(header, raw)
    except ValueError as e:
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


def _describe_control(record: BatchRecord) -> str:
    try:
        record_type, entity = decode_control_record(record.key, record.value)
    except ControlRecordError as e:
        return f"controlType: unreadable ({e})"
    label = _CONTROL_LABELS.get(record_type)
    if label is None:
        return f"controlType: {record_type.name}({int(record_type)})"
    return f"{label} {json.dumps(_to_json(entity), separators=(',', ':'))}"


def _describe_metadata(record: BatchRecord) -> str:
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
