"""Snapshots of the state machine and the log retention they allow (Kafka's createSnapshot and
KafkaRaftLog.maybeClean / RaftMetadataLogCleanerManager): freezing a snapshot at a committed
batch boundary, and dropping the log prefix and older snapshots behind the latest one.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.static.primitive import i16

from kraft_engine.errors import SnapshotError
from kraft_engine.raft.replica_context import RaftContext
from kraft_engine.raft.snapshot_builder import SnapshotBuilder
from kraft_engine.raft.voter_set import KRAFT_VERSION_1
from kraft_engine.records.log_batch import OffsetAndEpoch, parse_batches

__all__ = ["Snapshotting"]

# How often retention runs (Kafka's metadata log cleaner runs every 60 s).
_CLEAN_INTERVAL_MS: Final = 60_000


class Snapshotting:
    """Snapshot creation and retention for one replica's log."""

    def __init__(self, ctx: RaftContext, *, now_ms: int) -> None:
        self._ctx = ctx
        self.next_clean_ms = now_ms + _CLEAN_INTERVAL_MS

    def builder(self, *, end_offset: int) -> SnapshotBuilder | OffsetAndEpoch:
        """See `RaftNode.snapshot_builder`."""
        ctx = self._ctx
        log = ctx.log
        hwm = ctx.high_watermark
        if hwm is None or end_offset > hwm:
            raise SnapshotError(f"snapshot offset {end_offset} is not committed (high watermark {hwm})")
        if end_offset <= 0:
            raise SnapshotError("a snapshot must contain at least one offset")
        if end_offset > ctx.durability.offset:
            # A follower's high watermark may run ahead of its own flush; a snapshot (durable at
            # once) past the flushed log would outlive the log it summarises in a crash.
            raise SnapshotError(f"snapshot offset {end_offset} is not flushed yet (flushed below {ctx.durability.offset})")
        if end_offset < log.log_start_offset:
            raise SnapshotError(f"snapshot offset {end_offset} is below the log start {log.log_start_offset}")
        epoch = self._epoch_of_offset(end_offset - 1)
        if epoch is None:
            raise SnapshotError(f"offset {end_offset} is not a batch boundary in the log")
        snapshot_id = OffsetAndEpoch(epoch=epoch, offset=end_offset)
        if snapshot_id in log.snapshot_ids():
            return snapshot_id
        at = snapshot_id.offset - 1
        kraft_version = ctx.history.kraft_version_at(at)
        control: tuple[Any, ...] = ()
        if kraft_version >= KRAFT_VERSION_1:
            control = (KRaftVersionRecord(version=i16(0), k_raft_version=i16(kraft_version)),
                       ctx.history.voter_set_at(at).to_record())
        return SnapshotBuilder(snapshot_id, control, ctx.config.max_batch_size_bytes)

    def store(self, snapshot_id: OffsetAndEpoch, data: bytes, *, now_ms: int) -> OffsetAndEpoch:
        """See `RaftNode.store_snapshot`."""
        log = self._ctx.log
        if snapshot_id in log.snapshot_ids():
            return snapshot_id
        if snapshot_id.offset < log.log_start_offset:
            raise SnapshotError(f"snapshot offset {snapshot_id.offset} fell below the log start {log.log_start_offset}")
        log.store_snapshot(snapshot_id, data)
        self.maybe_clean(now_ms)
        return snapshot_id

    def _epoch_of_offset(self, offset: int) -> int | None:
        """Epoch of the batch ending exactly at `offset` (a snapshot must end on a batch boundary)."""
        log = self._ctx.log
        for snapshot_id in log.snapshot_ids():
            if snapshot_id.offset == offset + 1:
                return snapshot_id.epoch
        if offset < log.log_start_offset:
            return None
        for batch in parse_batches(log.read(offset, 1)):
            if batch.base_offset <= offset <= batch.last_offset:
                return batch.epoch if batch.last_offset == offset else None
        return None

    def maybe_clean(self, now_ms: int) -> None:
        """Retention (KafkaRaftLog.maybeClean). Above `retention_max_bytes` the log prefix and every
        older snapshot behind the latest snapshot go; snapshots whose last contained record is older
        than `retention_max_ms` go with the log before the next snapshot. The latest snapshot is
        always kept, and nothing above the high watermark is dropped."""
        ctx = self._ctx
        log = ctx.log
        self.next_clean_ms = now_ms + _CLEAN_INTERVAL_MS
        snapshots = log.snapshot_ids()
        hwm = ctx.high_watermark
        if not snapshots or hwm is None:
            return
        total = log.size_in_bytes() + sum(log.snapshot_size(s) or 0 for s in snapshots)
        max_bytes, max_ms = ctx.config.retention_max_bytes, ctx.config.retention_max_ms
        # A negative limit means unlimited, as in Kafka.
        if 0 <= max_bytes < total:
            keep = snapshots[-1]
        else:
            expired = [
                i for i, s in enumerate(snapshots[:-1])
                if max_ms >= 0 and self._snapshot_timestamp_ms(s) < now_ms - max_ms
            ]
            if not expired:
                return
            keep = snapshots[expired[-1] + 1]
        if keep.offset > hwm:
            return
        if keep.offset > log.log_start_offset:
            log.delete_before(keep.offset)
        for old in snapshots:
            if old.offset < keep.offset or (old.offset == keep.offset and old != keep):
                log.delete_snapshot(old)
        ctx.history.truncate_old_entries(keep.offset - 1)

    def _snapshot_timestamp_ms(self, snapshot_id: OffsetAndEpoch) -> int:
        """The SnapshotHeaderRecord's last contained log timestamp (-1 if it has none)."""
        log = self._ctx.log
        head = log.read_snapshot(snapshot_id, 0, 12)
        if len(head) < 12:
            return -1
        size = 12 + int.from_bytes(head[8:12], "big", signed=True)
        for batch in parse_batches(log.read_snapshot(snapshot_id, 0, size)):
            for record in batch.control_records:
                if isinstance(record, SnapshotHeaderRecord):
                    return int(record.last_contained_log_timestamp)
        return -1
