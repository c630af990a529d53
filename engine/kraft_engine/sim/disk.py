"""A node's disk in the simulation: what survives a crash, and what a wipe throws away.

Two things live on a KRaft controller's metadata disk and they fail differently:

- the `quorum-state` file is written tmp + fsync + rename, so once the driver has written it,
  it is durable: a crash never loses (or half-writes) an election state;
- the log is durable only up to its last `flush()`; a crash drops every batch after the flushed
  offset, exactly as an unsynced page cache would. Frozen snapshots are durable (they are
  renamed into place after an fsync).

A wipe models an operator re-formatting the node: empty log, no quorum-state, and a new
directory id, so KIP-853 sees a different replica with the same node id.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kraft_engine.raft import ElectionState, MemoryLog

__all__ = ["SimDisk"]


@dataclass
class SimDisk:
    directory_id: uuid.UUID
    log: MemoryLog = field(default_factory=MemoryLog)
    quorum_state: ElectionState | None = None
    # How often the quorum-state was written, for transcripts and tests of the driver order.
    quorum_state_writes: int = 0
    # Bumped by every wipe; lets invariants tell a legitimately fresh disk from lost state.
    generation: int = 0

    def write_quorum_state(self, state: ElectionState) -> None:
        """tmp + fsync + rename: durable the moment it returns."""
        self.quorum_state = state
        self.quorum_state_writes += 1

    def crash(self) -> int:
        """Lose every log batch after the last flush; returns how many offsets were lost."""
        log = self.log
        durable = max(log.flushed_offset, log.log_start_offset)
        lost = log.end_offset().offset - durable
        if lost > 0:
            log.truncate_to(durable)
        return max(lost, 0)

    def wipe(self, directory_id: uuid.UUID) -> None:
        """Re-format: nothing survives, and the node comes back with a new directory id."""
        self.log = MemoryLog()
        self.quorum_state = None
        self.directory_id = directory_id
        self.generation += 1
