"""Handing the committed log to the state machine: handleLoadSnapshot, handleCommit and
handleLeaderChange as `Output.events` (Kafka's ListenerContext, one listener per node).

The listener sees a snapshot when its next offset fell below the log start (or it starts from
nothing), then every batch below the high watermark in order, at most `_BATCH_BYTES` of log per
call (the node polls again at once while the listener is behind); a new local leader is
announced only once every record before its epoch start was delivered.
"""

from __future__ import annotations

from typing import Final

from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord

from kraft_engine.raft.leader_state import LeaderState
from kraft_engine.raft.log import control_batches, read_snapshot_bytes
from kraft_engine.raft.output import CommittedBatch, LeaderAndEpoch, LeaderChange, SnapshotLoad
from kraft_engine.raft.replica_context import RaftContext
from kraft_engine.records.log_batch import OffsetAndEpoch, parse_batches

__all__ = ["ListenerDelivery"]

# How much of the log the listener is handed per call (more follows on the next poll at once).
_BATCH_BYTES: Final = 1024 * 1024


class ListenerDelivery:
    """Where the listener is in the log, and which leader it was last told about."""

    def __init__(self, ctx: RaftContext) -> None:
        self._ctx = ctx
        self.next_offset: int | None = None
        self._last_fired_leader: LeaderAndEpoch | None = None

    def is_behind(self) -> bool:
        log = self._ctx.log
        hwm = self._ctx.high_watermark
        next_offset = self.next_offset
        if next_offset is None:
            return True
        if next_offset < log.log_start_offset:
            return True
        return hwm is not None and next_offset < hwm

    def poll(self) -> None:
        ctx = self._ctx
        log = ctx.log
        outbox = ctx.outbox
        snapshots = log.snapshot_ids()
        next_offset = self.next_offset
        if next_offset is None or next_offset < log.log_start_offset:
            if snapshots and (next_offset is None or next_offset < snapshots[-1].offset):
                outbox.deliver(self._snapshot_load(snapshots[-1]))
                next_offset = snapshots[-1].offset
            else:
                next_offset = log.log_start_offset if next_offset is None else next_offset
        hwm = ctx.high_watermark
        if hwm is not None and next_offset < hwm:
            data = log.read(next_offset, _BATCH_BYTES)
            for batch in parse_batches(data):
                if batch.last_offset >= hwm:
                    break
                if batch.next_offset <= next_offset:
                    continue
                outbox.deliver(CommittedBatch.of(batch))
                next_offset = batch.next_offset
        self.next_offset = next_offset
        current = LeaderAndEpoch(ctx.leader_id, ctx.epoch)
        if current != self._last_fired_leader:
            state = ctx.quorum.state
            if isinstance(state, LeaderState) and next_offset < state.epoch_start_offset:
                return  # a new leader is announced only once the listener has caught up to its epoch
            self._last_fired_leader = current
            outbox.deliver(LeaderChange(current))

    def _snapshot_load(self, snapshot_id: OffsetAndEpoch) -> SnapshotLoad:
        # Only the control batches are parsed here; the data batches are parsed by the state
        # machine, on its own thread (`SnapshotLoad.batches`).
        data = read_snapshot_bytes(self._ctx.log, snapshot_id)
        timestamp_ms = -1
        for batch in control_batches(data):
            for record in batch.control_records:
                if isinstance(record, SnapshotHeaderRecord):
                    timestamp_ms = int(record.last_contained_log_timestamp)
        return SnapshotLoad(snapshot_id=snapshot_id, last_contained_log_timestamp_ms=timestamp_ms, data=data)
