"""A stand-in state machine for the raft listener until the quorum controller runs in the node.

The node process needs *something* deterministic behind the raft listener to exercise commits,
snapshots and restarts end to end: this is an append-only log of opaque entries, keyed by the
offset raft committed them at. It is deliberately trivial so that any disagreement between nodes
(or with what a client was told) is a consensus bug, not a state-machine bug.

It is NOT Kafka's metadata state machine and writes no metadata records: the entries are the
state machine's own record values inside ordinary data batches of `__cluster_metadata`. It is
only enabled by `kraftwerk.test.state.machine.enable=true`; tests and the benchmark reach it
through the node's HTTP endpoint (see `http_endpoint.py`).

Snapshot format: each data record of the snapshot is `offset (int64, big-endian) || value`, so
a node that starts from a snapshot knows at which offsets the entries were committed.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from kraft_engine.raft import BOOTSTRAP_SNAPSHOT_ID, CommittedBatch, SnapshotLoad

__all__ = ["AppendOnlyStore", "SnapshotRequest"]

_OFFSET = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """A snapshot of the store as of `end_offset`: what the driver builds (off raft's loop) and
    stores. `entries` is a copy of the store's entries taken when it was asked for, so that the
    records can be encoded on another thread while the store keeps applying."""

    end_offset: int
    entries: list[tuple[int, bytes]]
    last_contained_log_timestamp_ms: int

    @property
    def records(self) -> list[bytes]:
        """The snapshot's data records: `offset || value` per entry (see the module docstring)."""
        pack = _OFFSET.pack
        return [pack(offset) + value for offset, value in self.entries]


class AppendOnlyStore:
    """Committed entries in offset order; snapshots every `snapshot_interval_bytes` of records."""

    def __init__(self, *, snapshot_interval_bytes: int) -> None:
        if snapshot_interval_bytes <= 0:
            raise ValueError("metadata.log.max.record.bytes.between.snapshots must be positive")
        self.snapshot_interval_bytes = snapshot_interval_bytes
        self._entries: list[tuple[int, bytes]] = []
        self._bytes_since_snapshot = 0
        self.next_offset = 0  # every committed offset below this has been applied
        self._last_timestamp_ms = -1
        self.snapshots_loaded = 0

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self, *, from_offset: int = 0, limit: int | None = None) -> list[tuple[int, bytes]]:
        """Committed (offset, value) pairs at or above `from_offset`, oldest first."""
        start = bisect.bisect_left(self._entries, (from_offset, b""))
        end = len(self._entries) if limit is None else min(len(self._entries), start + limit)
        return self._entries[start:end]

    # -- raft listener ---------------------------------------------------------------------------
    def load_snapshot(self, event: SnapshotLoad) -> None:
        """handleLoadSnapshot: replace everything with the snapshot's content."""
        entries: list[tuple[int, bytes]] = []
        # The bootstrap snapshot (0-0.checkpoint, written by `kraft storage format`) holds the
        # quorum controller's bootstrap metadata records, not entries of this store.
        batches = () if event.snapshot_id == BOOTSTRAP_SNAPSHOT_ID else event.batches
        for batch in batches:
            for record in batch.records:
                if len(record) < _OFFSET.size:
                    raise ValueError(f"snapshot {event.snapshot_id} holds a record without its offset")
                (offset,) = _OFFSET.unpack_from(record)
                entries.append((offset, record[_OFFSET.size :]))
        self._entries = entries
        self.next_offset = event.snapshot_id.offset
        self._bytes_since_snapshot = 0
        self._last_timestamp_ms = event.last_contained_log_timestamp_ms
        self.snapshots_loaded += 1

    def apply(self, batch: CommittedBatch[bytes]) -> None:
        """handleCommit: control batches consume offsets but hold no entries."""
        if batch.last_offset < self.next_offset:
            return
        for index, value in enumerate(batch.records):
            offset = batch.base_offset + index
            if offset >= self.next_offset:
                self._entries.append((offset, value))
                self._bytes_since_snapshot += len(value)
        self.next_offset = batch.last_offset + 1
        self._last_timestamp_ms = batch.append_timestamp_ms

    def snapshot_due(self) -> SnapshotRequest | None:
        """A snapshot of everything applied so far, once enough bytes accumulated since the last."""
        if self._bytes_since_snapshot < self.snapshot_interval_bytes or self.next_offset == 0:
            return None
        self._bytes_since_snapshot = 0
        return SnapshotRequest(
            end_offset=self.next_offset,
            entries=self._entries[:],  # pointers only: the records are encoded where they are built
            last_contained_log_timestamp_ms=self._last_timestamp_ms,
        )
