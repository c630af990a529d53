"""Producer-state snapshots: `<offset>.snapshot` files, Kafka's ProducerStateManager format.

The idempotent producer's dedup state (per producer: epoch, last sequence, last offsets) is
derived from the log, but rebuilding it means reading every batch header of the partition. Kafka
writes the state at a log offset to `<offset, 20 digits>.snapshot` in the partition directory;
on open it loads the newest snapshot at or below the log end and replays only the batches after
it. After a clean shutdown the snapshot is at the log end and nothing is replayed.

The layout is Kafka's (version 1): int16 version, uint32 CRC-32C of everything after it, then an
int32 count of entries, each: int64 producer id, int16 epoch, int32 last sequence, int64 last
offset, int32 offset delta (last offset - first offset of the producer's last batch), int64
timestamp, int32 coordinator epoch, int64 current transaction first offset (-1 for none).
A snapshot that does not parse or fails its CRC is deleted and an older one is used, as Kafka does.
"""

from __future__ import annotations

import contextlib
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from kraft_engine.storage.atomic_file import atomic_replace

__all__ = [
    "ProducerSnapshotEntry",
    "decode_snapshot",
    "delete_producer_snapshots",
    "encode_snapshot",
    "latest_producer_snapshot",
    "producer_snapshot_offsets",
    "write_producer_snapshot",
]

_VERSION = 1
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_NAME = re.compile(r"^(\d{20})\.snapshot$")
_CRC_START = 6


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp_ms: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1


def _path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}.snapshot"


def encode_snapshot(entries: list[ProducerSnapshotEntry]) -> bytes:
    body = b"".join(
        _ENTRY.pack(e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta, e.timestamp_ms,
                    e.coordinator_epoch, e.current_txn_first_offset)
        for e in entries
    )
    tail = struct.pack(">i", len(entries)) + body
    return struct.pack(">hI", _VERSION, crc32c(tail)) + tail


def decode_snapshot(data: bytes) -> list[ProducerSnapshotEntry]:
    """The entries; ValueError when the bytes are not a whole, intact version-1 snapshot."""
    if len(data) < _HEAD.size:
        raise ValueError(f"{len(data)} bytes cannot hold a producer snapshot header")
    version, crc, count = _HEAD.unpack_from(data)
    if version != _VERSION:
        raise ValueError(f"producer snapshot version {version} (only {_VERSION} is known)")
    if crc32c(data[_CRC_START:]) != crc:
        raise ValueError("producer snapshot CRC mismatch")
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise ValueError(f"producer snapshot of {len(data)} bytes does not hold {count} entries")
    return [ProducerSnapshotEntry(*_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size)) for i in range(count)]


def write_producer_snapshot(directory: Path, offset: int, entries: list[ProducerSnapshotEntry]) -> None:
    """The state as of `offset` (every batch below it applied), written atomically."""
    atomic_replace(_path(directory, offset), encode_snapshot(entries))


def producer_snapshot_offsets(directory: Path) -> list[int]:
    found = []
    with contextlib.suppress(FileNotFoundError):
        for path in directory.iterdir():
            match = _NAME.match(path.name)
            if match:
                found.append(int(match.group(1)))
    return sorted(found)


def latest_producer_snapshot(directory: Path, *, at_most: int) -> tuple[int, list[ProducerSnapshotEntry]] | None:
    """The newest intact snapshot at or below `at_most`; damaged ones met on the way are deleted."""
    for offset in reversed(producer_snapshot_offsets(directory)):
        if offset > at_most:
            continue
        try:
            return offset, decode_snapshot(_path(directory, offset).read_bytes())
        except ValueError:
            _path(directory, offset).unlink(missing_ok=True)
    return None


def delete_producer_snapshots(directory: Path, *, above: int | None = None, keep_newest: int | None = None) -> None:
    """Remove snapshots past `above` (the log was cut there) and all but the `keep_newest` newest."""
    offsets = producer_snapshot_offsets(directory)
    doomed = [o for o in offsets if above is not None and o > above]
    kept = [o for o in offsets if o not in doomed]
    if keep_newest is not None and len(kept) > keep_newest:
        doomed += kept[: len(kept) - keep_newest]
    for offset in doomed:
        _path(directory, offset).unlink(missing_ok=True)
