"""The file-backed KRaft metadata log: `__cluster_metadata-0` as the raft core sees it.

The consensus core (`kraft_engine.raft`) is written against the `RaftLog` protocol and tested on
an in-memory log. This is the same protocol over Kafka's real on-disk layout — a PartitionLog for
the batches plus `<offset>-<epoch>.checkpoint` snapshot files in the same directory — playing the
role of Kafka's `KafkaMetadataLog`. It satisfies the protocol structurally and imports nothing of
raft (storage sits below it); mypy checks the fit where the server hands it to the `RaftNode`.

Opening follows KafkaMetadataLog: leftovers are cleaned, the log is recovered (the report is
returned), and when the latest snapshot lies beyond the recovered log end (a follower crashed
after downloading a snapshot but before truncating) the log restarts at that snapshot.

The log start offset is not checkpointed: as in Kafka's metadata log (whose UnifiedLog is opened
with log start 0 and no log-start checkpoint), after a restart it is the first remaining
segment's base offset. `delete_before` removes whole segments only, so a restart can bring back
committed offsets between that base and the snapshot the log had been trimmed to; they are valid
data, and the next retention pass trims them again.

Deletion waits, as in Kafka's KafkaMetadataLog: a snapshot the core deletes is renamed
`<id>.checkpoint.deleted` at once (it is no longer listed) and unlinked after
`delete_delay_ms` (Kafka's internal `internal.metadata.delete.delay.millis`, 60 s), and trimmed
segments wait as `.deleted` files the same time (the segments' `file.delete.delay.ms`). The
owner calls `delete_due_files` now and then; a restart removes what is left at once. Kafka waits
so that a response already built over the file's channel can still be sent; this log reads the
bytes it answers with, so here the delay only keeps Kafka's on-disk behaviour.

The core asks for the snapshot list on every poll and every Fetch it serves, so the list is read
from the directory once, on open, and then kept in step by `store_snapshot` and
`delete_snapshot` (re-read from the directory if either fails part-way). While the log is open
it owns its directory: snapshots must be stored and deleted through it. Snapshot files never
change once frozen, so their sizes are remembered too.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from kraft_engine.errors import SnapshotError
from kraft_engine.records.log_batch import LogBatch, OffsetAndEpoch, parse_batches
from kraft_engine.storage.partition_log import (
    DEFAULT_SEGMENT_BYTES,
    PartitionLog,
    PendingFlush,
    RecoveryReport,
)
from kraft_engine.storage.snapshots import (
    DownloadedSnapshotWriter,
    SnapshotId,
    SnapshotReader,
    list_snapshots,
    mark_snapshot_for_deletion,
)

__all__ = ["FileMetadataLog", "holds_metadata_log"]


def holds_metadata_log(directory: Path) -> bool:
    """Whether a `__cluster_metadata-0` directory holds a log: a snapshot or a non-empty segment.

    A formatted controller always has at least its bootstrap checkpoint, so False on a formatted
    node means its metadata log was lost (a replaced disk, a deleted directory)."""
    if not directory.is_dir():
        return False
    return any(
        p.name.endswith(".checkpoint") or (p.name.endswith(".log") and p.stat().st_size > 0) for p in directory.iterdir()
    )


def _snapshot_id(value: OffsetAndEpoch) -> SnapshotId:
    return SnapshotId(end_offset=value.offset, epoch=value.epoch)


class FileMetadataLog:
    """A `kraft_engine.raft.log.RaftLog` stored in one partition directory."""

    def __init__(self, log: PartitionLog, *, delete_delay_ms: int = 0) -> None:
        if delete_delay_ms < 0:
            raise ValueError(f"the metadata log's delete delay must be at least 0, got {delete_delay_ms}")
        self._log = log
        self.directory = log.directory
        log.configure_deletes(file_delete_delay_ms=delete_delay_ms)
        self._snapshots: list[OffsetAndEpoch] = []
        self._snapshot_sizes: dict[OffsetAndEpoch, int] = {}
        # Snapshots written ahead by `prepare_snapshot` (another thread), by id: their bytes, to
        # know them again in `store_snapshot`, and their `.part` writer.
        self._prepared: dict[OffsetAndEpoch, tuple[bytes, DownloadedSnapshotWriter]] = {}
        self._prepared_lock = threading.Lock()
        self._reload_snapshots()

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        delete_delay_ms: int = 0,
        check: Callable[[FileMetadataLog], None] | None = None,
    ) -> tuple[FileMetadataLog, RecoveryReport]:
        """Open and recover; `segment_bytes` is Kafka's `metadata.log.segment.bytes`,
        `delete_delay_ms` its `internal.metadata.delete.delay.millis` (see the module docstring).

        `check` sees the recovered log before the log is cut to a snapshot beyond its end: a
        node that refuses a damaged snapshot must refuse before that cut, not after it."""
        log, report = PartitionLog.open(directory, segment_bytes=segment_bytes)
        try:
            metadata_log = cls(log, delete_delay_ms=delete_delay_ms)
            if check is not None:
                check(metadata_log)
            snapshots = metadata_log._snapshots
            if snapshots and snapshots[-1].offset > log.log_end_offset:
                log.truncate_fully_and_start_at(snapshots[-1].offset)
        except BaseException:
            log.close()
            raise
        return metadata_log, report

    def _reload_snapshots(self) -> None:
        # Oldest first, as list_snapshots orders them (by end offset): not OffsetAndEpoch's order.
        self._snapshots = [OffsetAndEpoch(epoch=s.epoch, offset=s.end_offset) for s in list_snapshots(self.directory)]
        self._snapshot_sizes = {k: v for k, v in self._snapshot_sizes.items() if k in self._snapshots}

    # -- offsets -------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    def _start_epoch(self) -> int:
        for snapshot in self._snapshots:
            if snapshot.offset == self._log.log_start_offset:
                return snapshot.epoch
        return 0

    def end_offset(self) -> OffsetAndEpoch:
        latest = self._log.latest_epoch
        epoch = latest if latest is not None and self._log.log_end_offset > self._log.log_start_offset else None
        return OffsetAndEpoch(
            epoch=self._start_epoch() if epoch is None else epoch, offset=self._log.log_end_offset
        )

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= `epoch` in the log and where it ends; below every epoch in the log,
        the epoch of the snapshot the log starts at and the offset of the first batch."""
        latest = self._log.latest_epoch
        if latest is not None and epoch >= latest:
            # Every Fetch from an up-to-date follower asks about the latest epoch: no list work.
            return OffsetAndEpoch(epoch=latest, offset=self._log.log_end_offset)
        entries = self._log.epoch_entries
        found = [(e, start) for e, start in entries if e <= epoch]
        if not found:
            first = entries[0][1] if entries else self._log.log_end_offset
            return OffsetAndEpoch(epoch=self._start_epoch(), offset=first)
        found_epoch, _ = found[-1]
        later = [start for e, start in entries if e > epoch]
        return OffsetAndEpoch(epoch=found_epoch, offset=later[0] if later else self._log.log_end_offset)

    @property
    def flushed_offset(self) -> int:
        return self._log.flushed_offset

    def size_in_bytes(self) -> int:
        return self._log.size_in_bytes()

    # -- batches -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> bytes:
        return self._log.read(offset, max_bytes=max_bytes)

    def batches(self) -> Iterator[LogBatch]:
        offset = self._log.log_start_offset
        while offset < self._log.log_end_offset:
            chunk = parse_batches(self._log.read(offset, max_bytes=1 << 20))
            yield from chunk
            offset = chunk[-1].next_offset

    def append(self, data: bytes) -> list[LogBatch]:
        """Append whole batches that continue the log (offsets and epochs already assigned)."""
        parsed = parse_batches(data)
        self._log.append_as_follower(data)
        return parsed

    def truncate_to(self, offset: int) -> None:
        self._log.truncate_to(offset)

    def flush(self) -> None:
        self._log.flush()

    def begin_flush(self) -> PendingFlush:
        """A flush whose fsync (`PendingFlush.sync`) may run on another thread; see PartitionLog."""
        return self._log.begin_flush()

    def complete_flush(self, pending: PendingFlush) -> None:
        self._log.complete_flush(pending)

    def delete_before(self, offset: int) -> None:
        self._log.delete_below(offset)

    def truncate_to_latest_snapshot(self) -> None:
        if not self._snapshots:
            raise SnapshotError(f"no snapshot in {self.directory} to truncate the log to")
        self._log.truncate_fully_and_start_at(self._snapshots[-1].offset)

    # -- snapshots -----------------------------------------------------------------------------

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return list(self._snapshots)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        with SnapshotReader(self.directory, _snapshot_id(snapshot_id)) as reader:
            return reader.read(position, max_bytes)

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        size = self._snapshot_sizes.get(snapshot_id)
        if size is None and snapshot_id in self._snapshots:
            try:
                with SnapshotReader(self.directory, _snapshot_id(snapshot_id)) as reader:
                    size = self._snapshot_sizes[snapshot_id] = reader.size_bytes
            except SnapshotError:
                return None
        return size

    def prepare_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Write, validate and fsync `data` as the `.part` file of `snapshot_id`, on any thread, so
        that a later `store_snapshot` of this very `data` object is only the rename and the
        directory's fsync (on raft's loop, a 100k-partition snapshot's write, CRC check and
        fsync took seconds under load). Raises as `store_snapshot` would; nothing is left
        behind then. A prepared snapshot never stored is removed by
        `discard_prepared_snapshot` or `close`."""
        writer = DownloadedSnapshotWriter(self.directory, _snapshot_id(snapshot_id))
        try:
            writer.write(0, data)
            writer.prepare()
        except BaseException:
            writer.abort()
            raise
        with self._prepared_lock:
            replaced = self._prepared.pop(snapshot_id, None)
            self._prepared[snapshot_id] = (data, writer)
        if replaced is not None:
            replaced[1].abort()

    def discard_prepared_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Remove the `.part` file `prepare_snapshot` left for `snapshot_id`, if it was never stored."""
        with self._prepared_lock:
            prepared = self._prepared.pop(snapshot_id, None)
        if prepared is not None:
            prepared[1].abort()

    def store_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Validate and durably freeze a complete snapshot (tmp `.part` + fsync + rename + dir fsync);
        of those, only the rename and the directory's fsync when `prepare_snapshot` did the rest
        for this very `data`."""
        with self._prepared_lock:
            prepared = self._prepared.pop(snapshot_id, None)
        if prepared is not None and prepared[0] is data:
            writer = prepared[1]
        else:
            if prepared is not None:
                prepared[1].abort()
            writer = DownloadedSnapshotWriter(self.directory, _snapshot_id(snapshot_id))
            try:
                writer.write(0, data)
            except BaseException:
                writer.abort()
                raise
        try:
            writer.freeze()
        except BaseException:
            # The rename may or may not have happened: ask the directory.
            self._reload_snapshots()
            raise
        bisect.insort(self._snapshots, snapshot_id, key=lambda s: (s.offset, s.epoch))
        self._snapshot_sizes[snapshot_id] = len(data)

    def delete_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        try:
            doomed = mark_snapshot_for_deletion(self.directory, _snapshot_id(snapshot_id))
            self._log.delete_later([] if doomed is None else [doomed])
        except BaseException:
            self._reload_snapshots()
            raise
        if snapshot_id in self._snapshots:
            self._snapshots.remove(snapshot_id)
        self._snapshot_sizes.pop(snapshot_id, None)

    def delete_due_files(self) -> list[str]:
        """Unlink the deleted snapshots and segments whose delay has passed; their names."""
        return self._log.delete_due_files()

    @property
    def files_awaiting_deletion(self) -> list[str]:
        """Names of the `.deleted` snapshot and segment files not yet unlinked."""
        return self._log.files_awaiting_deletion

    def close(self) -> None:
        with self._prepared_lock:
            prepared, self._prepared = list(self._prepared.values()), {}
        for _, writer in prepared:
            writer.abort()
        self._log.close()

    def __enter__(self) -> FileMetadataLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
