"""Reading log segments and snapshot checkpoints without changing them.

`PartitionLog.open` is for a node that is about to write: it recovers a torn tail by truncating,
rebuilds indexes, rewrites checkpoints and deletes stray segments. Tools that only look at a
directory (`kraft dump-log`, the PySpark pipeline reading a fleet's disks, a person after an
incident) must never do that: the bytes they were handed are the evidence. This module reads
bytes and names files, and nothing else; it opens files read-only and never creates, renames or
deletes one.

It also keeps going as far as the bytes allow. A batch whose CRC does not match is reported and the
scan continues past it (its length still frames the next batch, as Kafka's DumpLogSegments does);
a broken frame (torn tail, bad magic, impossible length) ends the scan with the byte position and
the reason. Nothing is skipped silently: every byte is either in a batch or after a stop.

API:

    classify_log_file(name) -> LogFileName | None     segment, snapshot or Kafka's bootstrap file
    list_log_files(directory) -> list[LogFileName]    segments by base offset, then snapshots
    read_log_file(path) -> bytes                      opened O_RDONLY
    scan_batches(data) -> Iterator[ScannedBatch | ScanStop]
    read_batch_records(header, raw) -> list[BatchRecord]   every record of one batch, decompressed
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kio.records.readers import read_record
from kio.serial.errors import DecodeError
from kio.serial.readers import read_signed_varint, read_signed_varlong
from kio.static.primitive import i64

from kraft_engine.records.batches import (
    LOG_OVERHEAD,
    MAGIC,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CorruptBatchError,
    read_batch_header,
    validate_batch,
)
from kraft_engine.records.compression import CODEC_NONE, decompress

__all__ = [
    "BatchRecord",
    "LogFileKind",
    "LogFileName",
    "ScanStop",
    "ScannedBatch",
    "classify_log_file",
    "list_log_files",
    "read_batch_records",
    "read_log_file",
    "scan_batches",
]

_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
# The file Kafka 3.x/4.1 `kafka-storage format` writes into every log dir (BootstrapDirectory).
BOOTSTRAP_FILE_NAME = "bootstrap.checkpoint"


class LogFileKind(enum.Enum):
    SEGMENT = "segment"
    SNAPSHOT = "snapshot"
    BOOTSTRAP = "bootstrap"


@dataclass(frozen=True, slots=True)
class LogFileName:
    """What a file's name says: a segment's base offset, or a snapshot's id (end offset, epoch)."""

    name: str
    kind: LogFileKind
    # The segment's base offset, or the snapshot's end offset (0 for the bootstrap file).
    offset: int
    # The snapshot's epoch (-1 for segments and the bootstrap file).
    epoch: int = -1


def classify_log_file(name: str) -> LogFileName | None:
    """The kind of a file by its name alone; None for anything else (indexes, `.part`, `.deleted`)."""
    if (m := _SEGMENT_NAME.match(name)) is not None:
        return LogFileName(name, LogFileKind.SEGMENT, int(m.group(1)))
    if (m := _SNAPSHOT_NAME.match(name)) is not None:
        return LogFileName(name, LogFileKind.SNAPSHOT, int(m.group(1)), int(m.group(2)))
    if name == BOOTSTRAP_FILE_NAME:
        return LogFileName(name, LogFileKind.BOOTSTRAP, 0)
    return None


def list_log_files(directory: Path) -> list[LogFileName]:
    """The segments (by base offset) and snapshots (by id) in one partition directory."""
    found = [f for entry in sorted(os.listdir(directory)) if (f := classify_log_file(entry)) is not None]
    order = {LogFileKind.BOOTSTRAP: 0, LogFileKind.SEGMENT: 1, LogFileKind.SNAPSHOT: 2}
    return sorted(found, key=lambda f: (order[f.kind], f.offset, f.epoch))


def read_log_file(path: Path) -> bytes:
    """The whole file, opened read-only (no index, no checkpoint, nothing beside it is touched)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class ScannedBatch:
    """One framed batch: its byte position in the file, header and bytes; `crc_error` says why its
    checksum (or record count) is wrong, None when it is valid."""

    position: int
    header: BatchHeader
    raw: bytes
    crc_error: str | None


@dataclass(frozen=True, slots=True)
class ScanStop:
    """Where the framing broke: nothing from `position` on can be read as batches."""

    position: int
    reason: str
    # True when the bytes simply end inside a batch (a torn write), False for garbage.
    torn: bool


def scan_batches(data: bytes) -> Iterator[ScannedBatch | ScanStop]:
    """Batches framed by their length fields. A CRC failure is reported but does not stop the scan
    (like Kafka, which prints `isvalid: false`); a broken frame does, with one final ScanStop."""
    position = 0
    while position < len(data):
        remaining = len(data) - position
        if remaining < RECORD_BATCH_OVERHEAD:
            yield ScanStop(position, f"{remaining} bytes cannot hold a batch header", torn=True)
            return
        header = read_batch_header(data, position)
        if header.magic != MAGIC:
            yield ScanStop(position, f"magic is {header.magic}, only v2 batches (magic 2) are read", torn=False)
            return
        if header.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
            yield ScanStop(position, f"batch length {header.batch_length} is impossible", torn=False)
            return
        if header.size_bytes > remaining:
            yield ScanStop(
                position,
                f"batch declares {header.size_bytes} bytes but only {remaining} remain (torn write?)",
                torn=True,
            )
            return
        raw = data[position : position + header.size_bytes]
        crc_error: str | None = None
        try:
            validate_batch(raw)
        except CorruptBatchError as e:
            crc_error = e.reason
        yield ScannedBatch(position, header, raw, crc_error)
        position += header.size_bytes


@dataclass(frozen=True, slots=True)
class BatchRecord:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    header_keys: tuple[str, ...]


def read_batch_records(header: BatchHeader, raw: bytes) -> list[BatchRecord]:
    """Every record of one batch (decompressed first when it is compressed), with exact timestamps.

    kio's reader rounds record timestamps down to whole seconds, so the millisecond timestamp is
    rebuilt from the batch's base timestamp and the record's own delta (its third field).
    ValueError when the records do not fill the batch exactly or do not decode.
    """
    try:
        if header.compression_codec != CODEC_NONE:
            # The records section decompressed behind the same header, as Kafka's tools iterate it.
            raw = raw[:RECORD_BATCH_OVERHEAD] + decompress(header.compression_codec, raw[RECORD_BATCH_OVERHEAD:])
        records = []
        position = RECORD_BATCH_OVERHEAD
        for _ in range(header.record_count):
            _, length_size = read_signed_varint(raw, position)
            # Skip the record length and the one-byte attributes to reach the timestamp delta.
            delta_ms, _ = read_signed_varlong(raw, position + length_size + 1)
            record, size = read_record(raw, i64(header.base_timestamp), i64(header.base_offset), position)
            records.append(
                BatchRecord(
                    offset=record.offset,
                    timestamp_ms=header.base_timestamp + delta_ms,
                    key=record.key,
                    value=record.value,
                    header_keys=tuple((h.key or b"").decode("utf-8", "replace") for h in record.headers),
                )
            )
            position += size
    except (OverflowError, DecodeError, IndexError) as e:
        raise ValueError(str(e) or type(e).__name__) from e
    if position != len(raw):
        raise ValueError(f"{len(raw) - position} bytes follow the last of the {header.record_count} records")
    return records
