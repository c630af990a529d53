"""The simulation's state machine: a counter that only ever grows by one.

It is the raft listener every simulated node runs (after Kafka's ReplicatedCounter). Each data
record is the next integer, so the committed stream must read 1, 2, 3, ... with no gap or repeat
on every node: a lost, duplicated or reordered commit shows up immediately. It also exercises the
snapshot path: every `SNAPSHOT_EVERY_RECORDS` committed offsets it asks for a snapshot holding
its single value, and it counts snapshot loads so `LeaderNeverLoadSnapshot` can be checked.

The counter never calls the raft node itself; the driver asks it what to append and when to
snapshot, which keeps every call into the core inside the driver, in one place.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Protocol

from kraft_engine.raft import CommittedBatch, LeaderChange, ListenerEvent, SnapshotLoad
from kraft_engine.sim.invariants import Violation

__all__ = ["SNAPSHOT_EVERY_RECORDS", "ReplicatedCounter", "SnapshotRequest", "decode_value", "encode_value"]

SNAPSHOT_EVERY_RECORDS = 10

_INT32 = struct.Struct(">i")


def encode_value(value: int) -> bytes:
    return _INT32.pack(value)


def decode_value(data: bytes) -> int:
    if len(data) != _INT32.size:
        raise Violation("CounterRecord", f"a counter record is 4 bytes, got {len(data)}")
    return int(_INT32.unpack(data)[0])


@dataclass(frozen=True)
class SnapshotRequest:
    end_offset: int
    records: list[bytes]
    last_contained_log_timestamp_ms: int


class SimStateMachine(Protocol):
    """What the simulation's driver asks of a raft listener: the replicated counter by default, or
    any deterministic state machine a test plugs in through `SimCluster(state_machine_factory=)`
    (for example a node running the metadata loader)."""

    claimed_epoch: int | None
    snapshot_loads_since_leader_change: int
    # (offset, value) pairs the final ConsistentCommittedData check compares across nodes.
    applied: list[tuple[int, int]]

    @property
    def writable(self) -> bool: ...

    def handle(self, event: ListenerEvent) -> None: ...

    def next_append(self) -> bytes: ...

    def append_failed(self, count: int = 1) -> None: ...

    def snapshot_due(self) -> SnapshotRequest | None: ...

    def snapshot_taken(self, end_offset: int) -> None: ...


@dataclass
class ReplicatedCounter:
    node_id: int
    committed: int = 0
    uncommitted: int = 0
    claimed_epoch: int | None = None
    snapshot_loads_since_leader_change: int = 0
    last_offset_snapshotted: int = -1
    # (offset, value) for every data record applied, plus the value a loaded snapshot ends with.
    applied: list[tuple[int, int]] = field(default_factory=list)
    _last_committed: tuple[int, int] | None = None  # (offset, timestamp) of the last committed batch

    @property
    def writable(self) -> bool:
        return self.claimed_epoch is not None

    def handle(self, event: ListenerEvent) -> None:
        if isinstance(event, CommittedBatch):
            self._commit(event)
        elif isinstance(event, SnapshotLoad):
            self._load_snapshot(event)
        elif isinstance(event, LeaderChange):
            if event.leader.leader_id == self.node_id:
                self.claimed_epoch = event.leader.epoch
                self.uncommitted = self.committed
            else:
                self.claimed_epoch = None
                self.uncommitted = -1
            self.snapshot_loads_since_leader_change = 0

    def _commit(self, batch: CommittedBatch[bytes]) -> None:
        for delta, data in enumerate(batch.records):
            value = decode_value(data)
            if value != self.committed + 1:
                raise Violation(
                    "ConsistentCommittedData",
                    f"node {self.node_id} committed value {value} at offset {batch.base_offset + delta}, "
                    f"expected {self.committed + 1}",
                )
            self.committed = value
            self.applied.append((batch.base_offset + delta, value))
        self._last_committed = (batch.last_offset, batch.append_timestamp_ms)

    def _load_snapshot(self, load: SnapshotLoad) -> None:
        values = [decode_value(v) for batch in load.batches for v in batch.records]
        if len(values) > 1:
            raise Violation(
                "SnapshotContent", f"snapshot {load.snapshot_id} on node {self.node_id} holds {len(values)} values"
            )
        # The bootstrap snapshot (0-0) written by the formatter holds no state-machine record:
        # the counter starts from zero.
        self.committed = self.uncommitted = values[0] if values else 0
        self.last_offset_snapshotted = load.snapshot_id.offset - 1
        if values:
            self.applied.append((load.snapshot_id.offset - 1, values[0]))
        self.snapshot_loads_since_leader_change += 1

    def next_append(self) -> bytes:
        """The record to append as leader (call only while `writable`)."""
        self.uncommitted += 1
        return encode_value(self.uncommitted)

    def append_failed(self, count: int = 1) -> None:
        self.uncommitted -= count

    def snapshot_due(self) -> SnapshotRequest | None:
        if self._last_committed is None:
            return None
        last_offset, timestamp_ms = self._last_committed
        if self.last_offset_snapshotted + SNAPSHOT_EVERY_RECORDS >= last_offset:
            return None
        return SnapshotRequest(last_offset + 1, [encode_value(self.committed)], timestamp_ms)

    def snapshot_taken(self, end_offset: int) -> None:
        self.last_offset_snapshotted = end_offset - 1
