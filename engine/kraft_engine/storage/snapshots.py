"""KRaft snapshots on disk: `<20-digit end offset>-<10-digit epoch>.checkpoint` files.

A snapshot lets the log be trimmed and lets a lagging follower catch up without replaying it.
The file holds plain v2 record batches, as Kafka's `RecordsSnapshotWriter` writes them: offsets
from 0, every batch stamped with the snapshot's epoch, a first control batch holding the
SnapshotHeaderRecord (followed, when the caller supplies them, by KRaftVersionRecord and
VotersRecord in the same batch), data batches, and a last control batch holding the
SnapshotFooterRecord. The snapshot id is (end offset, epoch): the snapshot contains every log
offset below `end offset`, and `epoch` is the epoch of the last record it contains.

Lifecycle, as in Kafka:

- A snapshot is written to `<id>-<random>.checkpoint.part` and becomes visible only on
  `freeze()`: fsync the file, rename it to `<id>.checkpoint`, fsync the directory. A crash
  before that leaves a `.part` file, which `clean_snapshot_leftovers` (called when the log
  directory is opened) removes.
- Deleting renames to `<id>.checkpoint.deleted`, fsyncs the directory, then unlinks, so a crash
  never leaves a half-deleted snapshot that looks valid. `mark_snapshot_for_deletion` does only
  the rename, for a caller that unlinks later (Kafka's metadata log waits
  `internal.metadata.delete.delay.millis`).

API:

    SnapshotWriter(dir, snapshot_id=SnapshotId(end, epoch), last_contained_log_timestamp_ms=t)
        .append(values | batch bytes); .freeze() -> path; .abort()
    DownloadedSnapshotWriter(dir, snapshot_id).write(position, data); .freeze(); .abort()
        (FetchSnapshot: bytes arrive in order; freeze validates the whole file before renaming)
    SnapshotReader(dir, snapshot_id): .size_bytes, .read(position, max_bytes) (FetchSnapshot
        slices), .batches() (validated: CRC, offsets, header first, footer last),
        .last_contained_log_timestamp_ms
    list_snapshots(dir), latest_snapshot(dir), delete_snapshot(dir, id),
    mark_snapshot_for_deletion(dir, id), clean_snapshot_leftovers(dir)
"""

from __future__ import annotations

import os
import re
import secrets
import struct
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from kio.schema.snapshot_footer_record.v0 import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0 import SnapshotHeaderRecord
from kio.static.primitive import i16, i64

from kraft_engine.errors import SnapshotError
from kraft_engine.records.batches import (
    LOG_OVERHEAD,
    BatchHeader,
    CorruptBatchError,
    build_batch,
    validate_batch,
)
from kraft_engine.records.control import (
    ControlRecord,
    ControlRecordError,
    ControlRecordType,
    build_control_batch,
    decode_control_batch,
)
from kraft_engine.storage.atomic_file import fsync_dir
from kraft_engine.storage.batch_sequence import restamp, whole_batches
from kraft_engine.storage.storage_error import storage_io, write_fully

__all__ = [
    "DownloadedSnapshotWriter",
    "SnapshotId",
    "SnapshotReader",
    "SnapshotWriter",
    "clean_snapshot_leftovers",
    "delete_snapshot",
    "latest_snapshot",
    "list_snapshots",
    "mark_snapshot_for_deletion",
    "snapshot_file_name",
]

_SUFFIX = ".checkpoint"
_PARTIAL_SUFFIX = ".checkpoint.part"
_DELETED_SUFFIX = ".checkpoint.deleted"
_NAME = re.compile(r"^(\d{20})-(\d{10})")
_LENGTH = struct.Struct(">i")


class SnapshotId(NamedTuple):
    end_offset: int
    epoch: int


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{_SUFFIX}"


def _parse_name(name: str) -> SnapshotId | None:
    match = _NAME.match(name)
    return SnapshotId(int(match.group(1)), int(match.group(2))) if match else None


def list_snapshots(directory: Path) -> list[SnapshotId]:
    """Frozen snapshots in `directory`, oldest first."""
    found = []
    for path in directory.glob(f"*{_SUFFIX}"):
        snapshot_id = _parse_name(path.name)
        if snapshot_id is not None and path.name == snapshot_file_name(snapshot_id):
            found.append(snapshot_id)
    return sorted(found)


def latest_snapshot(directory: Path) -> SnapshotId | None:
    snapshots = list_snapshots(directory)
    return snapshots[-1] if snapshots else None


def clean_snapshot_leftovers(directory: Path) -> list[str]:
    """Remove `.checkpoint.part` and `.checkpoint.deleted` files left by a crash; returns their names."""
    removed = []
    for path in sorted(directory.iterdir()):
        if (path.name.endswith((_PARTIAL_SUFFIX, _DELETED_SUFFIX))) and _parse_name(path.name):
            path.unlink()
            removed.append(path.name)
    return removed


def delete_snapshot(directory: Path, snapshot_id: SnapshotId) -> bool:
    """Rename to `.checkpoint.deleted`, fsync the directory, unlink. False when it did not exist."""
    doomed = mark_snapshot_for_deletion(directory, snapshot_id)
    if doomed is None:
        return False
    with storage_io("deleting", doomed):
        doomed.unlink()
    return True


def mark_snapshot_for_deletion(directory: Path, snapshot_id: SnapshotId) -> Path | None:
    """Rename to `.checkpoint.deleted` and fsync the directory (Kafka's Snapshots.markForDelete):
    no longer a snapshot, its file unlinked later by the caller (or removed by
    `clean_snapshot_leftovers` at the next open). The new path; None when it did not exist."""
    path = directory / snapshot_file_name(snapshot_id)
    doomed = path.with_name(path.name + ".deleted")
    with storage_io("renaming for deletion", path):
        try:
            os.replace(path, doomed)
        except FileNotFoundError:
            return None
    fsync_dir(directory)
    return doomed


class _PartFile:
    """An open `.checkpoint.part` file that becomes `<id>.checkpoint` on freeze."""

    def __init__(self, directory: Path, snapshot_id: SnapshotId) -> None:
        if snapshot_id.end_offset < 0 or snapshot_id.epoch < 0:
            raise SnapshotError(f"invalid snapshot id {snapshot_id}")
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.snapshot_id = snapshot_id
        self.final_path = directory / snapshot_file_name(snapshot_id)
        if self.final_path.exists():
            raise SnapshotError(f"snapshot {self.final_path} already exists")
        stem = self.final_path.name[: -len(_SUFFIX)]
        self.path = directory / f"{stem}-{secrets.token_hex(8)}{_PARTIAL_SUFFIX}"
        with storage_io("creating", self.path):
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self.size_bytes = 0
        self.frozen = False
        self.synced = False

    def append(self, data: bytes) -> None:
        if self.fd < 0:
            raise SnapshotError(f"snapshot {self.snapshot_id} is {'frozen' if self.frozen else 'aborted'}")
        self.synced = False
        write_fully(self.fd, data, path=self.path)
        self.size_bytes += len(data)

    def sync(self) -> None:
        """Make what was appended durable (`freeze` then skips its own fsync)."""
        if self.fd < 0:
            raise SnapshotError(f"snapshot {self.snapshot_id} is {'frozen' if self.frozen else 'aborted'}")
        with storage_io("fsyncing", self.path):
            os.fsync(self.fd)
        self.synced = True

    def freeze(self) -> Path:
        if self.fd < 0:
            raise SnapshotError(f"snapshot {self.snapshot_id} is {'frozen' if self.frozen else 'aborted'}")
        if not self.synced:
            with storage_io("fsyncing", self.path):
                os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        with storage_io(f"renaming {self.path.name} to", self.final_path):
            os.replace(self.path, self.final_path)
        fsync_dir(self.directory)
        self.frozen = True
        return self.final_path

    def abort(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            self.path.unlink(missing_ok=True)


class SnapshotWriter:
    """Writes a new snapshot: header batch at construction, footer batch at `freeze()`."""

    def __init__(
        self,
        directory: Path,
        *,
        snapshot_id: SnapshotId,
        last_contained_log_timestamp_ms: int,
        control_records: Sequence[ControlRecord] = (),
        timestamp_ms: int | None = None,
    ) -> None:
        """`control_records` go into the header batch after the header (KRaftVersionRecord,
        VotersRecord for kraft.version 1); `timestamp_ms` stamps the batches (default: now)."""
        self._timestamp_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        self._file = _PartFile(directory, snapshot_id)
        self._next_offset = 0
        try:
            self._append_bytes(
                build_control_batch(
                    base_offset=0,
                    partition_leader_epoch=snapshot_id.epoch,
                    timestamp_ms=self._timestamp_ms,
                    records=[
                        SnapshotHeaderRecord(
                            version=i16(0), last_contained_log_timestamp=i64(last_contained_log_timestamp_ms)
                        ),
                        *control_records,
                    ],
                )
            )
        except BaseException:
            self._file.abort()
            raise

    @property
    def snapshot_id(self) -> SnapshotId:
        return self._file.snapshot_id

    @property
    def size_bytes(self) -> int:
        return self._file.size_bytes

    def append(self, records: Sequence[bytes] | bytes) -> None:
        """Append one batch of record values, or whole pre-built batches (given as bytes), which
        are renumbered to follow the snapshot's last offset and stamped with its epoch."""
        if isinstance(records, bytes):
            try:
                headers = whole_batches(records)
            except ValueError as e:
                raise SnapshotError(f"cannot append to snapshot {self.snapshot_id}: {e}") from None
            data, _ = restamp(records, headers, base_offset=self._next_offset, epoch=self.snapshot_id.epoch)
        else:
            data = build_batch(
                base_offset=self._next_offset,
                partition_leader_epoch=self.snapshot_id.epoch,
                values=list(records),
                timestamp_ms=self._timestamp_ms,
            )
        self._append_bytes(data)

    def freeze(self) -> Path:
        """Write the footer, make the snapshot durable and visible; returns its path."""
        self._append_bytes(
            build_control_batch(
                base_offset=self._next_offset,
                partition_leader_epoch=self.snapshot_id.epoch,
                timestamp_ms=self._timestamp_ms,
                records=[SnapshotFooterRecord(version=i16(0))],
            )
        )
        return self._file.freeze()

    def abort(self) -> None:
        """Discard the unfinished snapshot (a no-op after freeze)."""
        self._file.abort()

    def _append_bytes(self, data: bytes) -> None:
        headers = whole_batches(data)
        self._file.append(data)
        self._next_offset = headers[-1].next_offset


class DownloadedSnapshotWriter:
    """Receives a snapshot from the leader (FetchSnapshot) chunk by chunk, in order."""

    def __init__(self, directory: Path, snapshot_id: SnapshotId) -> None:
        self._file = _PartFile(directory, snapshot_id)
        self._validated = False

    @property
    def size_bytes(self) -> int:
        return self._file.size_bytes

    def write(self, position: int, data: bytes) -> None:
        """Append `data`, which must start where the previous chunk ended (Kafka checks the same)."""
        if position != self._file.size_bytes:
            raise SnapshotError(
                f"snapshot {self._file.snapshot_id} chunk at position {position}, expected {self._file.size_bytes}"
            )
        self._validated = False
        self._file.append(data)

    def prepare(self) -> None:
        """The slow part of `freeze` (validate the whole file, fsync it), on any thread: `freeze`
        is then only the rename and the directory's fsync. An invalid file is discarded and
        raises SnapshotError."""
        self._validate()
        self._file.sync()

    def _validate(self) -> None:
        if self._validated:
            return
        try:
            _validate_snapshot_file(self._file.path)
        except SnapshotError:
            self._file.abort()
            raise
        self._validated = True

    def freeze(self) -> Path:
        """Validate the whole file (CRC, offsets, header first, footer last), then make it visible.

        An invalid download is discarded and raises SnapshotError: it never becomes a snapshot.
        """
        self._validate()
        return self._file.freeze()

    def abort(self) -> None:
        self._file.abort()


class SnapshotReader:
    """Reads a frozen snapshot, raw (for FetchSnapshot) or as validated batches."""

    def __init__(self, directory: Path, snapshot_id: SnapshotId) -> None:
        self.snapshot_id = snapshot_id
        self.path = directory / snapshot_file_name(snapshot_id)
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise SnapshotError(f"no snapshot {self.path}") from None
        self.size_bytes = os.fstat(self._fd).st_size

    def read(self, position: int, max_bytes: int) -> bytes:
        """Raw bytes [position, position + max_bytes), as FetchSnapshot sends them."""
        if not 0 <= position <= self.size_bytes:
            raise SnapshotError(f"position {position} is outside snapshot {self.path} of {self.size_bytes} bytes")
        return os.pread(self._fd, max(0, min(max_bytes, self.size_bytes - position)), position)

    def batches(self) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every batch, header and footer included, checked as it is read."""
        return _iter_validated(self.path, self._fd)

    @property
    def last_contained_log_timestamp_ms(self) -> int:
        # Validation of the first batch guarantees it starts with the header record.
        _, raw = next(self.batches())
        record = decode_control_batch(raw)[0].record
        if not isinstance(record, SnapshotHeaderRecord):
            raise SnapshotError(f"{self.path}: first record is not a SnapshotHeaderRecord")
        return int(record.last_contained_log_timestamp)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SnapshotReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _validate_snapshot_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in _iter_validated(path, fd):
            pass
    finally:
        os.close(fd)


def _iter_validated(path: Path, fd: int) -> Iterator[tuple[BatchHeader, bytes]]:
    """Stream the batches of a snapshot file one at a time (snapshots can be large)."""
    size = os.fstat(fd).st_size
    position = 0
    expected_offset = 0
    footer_seen = False
    epoch: int | None = None
    if not size:
        raise SnapshotError(f"{path} is empty: a snapshot starts with a SnapshotHeaderRecord batch")
    while position < size:
        if footer_seen:
            raise SnapshotError(f"{path}: bytes after the SnapshotFooterRecord at byte {position}")
        head = os.pread(fd, LOG_OVERHEAD, position)
        declared = LOG_OVERHEAD + max(_LENGTH.unpack_from(head, 8)[0], 0) if len(head) == LOG_OVERHEAD else 0
        raw = os.pread(fd, max(min(declared, size - position), len(head)), position)
        try:
            header = validate_batch(raw)
        except CorruptBatchError as e:
            raise SnapshotError(f"{path}: batch at byte {position}: {e.reason}") from None
        if header.base_offset != expected_offset:
            raise SnapshotError(
                f"{path}: batch at byte {position} has base offset {header.base_offset}, expected {expected_offset}"
            )
        if epoch is not None and header.partition_leader_epoch != epoch:
            raise SnapshotError(f"{path}: batch at byte {position} has epoch {header.partition_leader_epoch}, expected {epoch}")
        epoch = header.partition_leader_epoch
        types = _control_types(path, header, raw)
        if position == 0 and (not types or types[0] != ControlRecordType.SNAPSHOT_HEADER):
            raise SnapshotError(f"{path}: the first batch does not start with a SnapshotHeaderRecord")
        if ControlRecordType.SNAPSHOT_FOOTER in types:
            if types != [ControlRecordType.SNAPSHOT_FOOTER]:
                raise SnapshotError(f"{path}: the footer batch at byte {position} holds other records")
            footer_seen = True
        yield header, raw
        expected_offset = header.next_offset
        position += header.size_bytes
    if not footer_seen:
        raise SnapshotError(f"{path}: no SnapshotFooterRecord at the end (incomplete snapshot)")


def _control_types(path: Path, header: BatchHeader, raw: bytes) -> list[ControlRecordType]:
    if not header.is_control:
        return []
    try:
        return [record.type for record in decode_control_batch(raw)]
    except (ControlRecordError, CorruptBatchError, ValueError) as e:
        raise SnapshotError(f"{path}: control batch at offset {header.base_offset} does not decode: {e}") from None
