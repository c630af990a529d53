"""The controller's narrow window onto the raft log: raft, and only raft, says where records land.

The active controller applies its records to memory before they commit, at the offsets they
will have in the log. Those offsets are not the controller's to predict: the raft layer writes
control batches of its own between the controller's batches (the LeaderChangeMessage that opens
an epoch, the VotersRecord of every AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter, the
KRaftVersionRecord of an upgrade), and each takes an offset. So, as Kafka's QuorumController does
with `RaftClient.prepareAppend` / `schedulePreparedAppend`, every batch goes through three steps:

1. `prepare_append` reserves the batch's offsets in the raft layer and returns the last one; the
   raft layer holds the batch (and anything after it) back from the log;
2. the controller replays the records at exactly those offsets, and keys its in-memory snapshot
   and its purgatory on the last one;
3. `schedule_prepared_append` lets the batch go to the log.

A record the controller cannot replay is a fatal fault found before the batch is replicated. See
docs/controller-offsets.md for the bug this replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kraft_engine.controller.results import RecordAndVersion
from kraft_engine.errors import ControllerError

__all__ = ["AppendRefused", "RaftAppendPort"]


class AppendRefused(ControllerError):
    """The raft layer did not take the batch: this node is not the leader of the epoch any more
    (it learns so before the controller does), or the leader's write buffer is full."""


class RaftAppendPort(Protocol):
    """What the controller asks of the raft layer when it writes; the shell implements it."""

    def next_append_offset(self) -> int:
        """Where the next prepared batch would start (a broker's epoch is the offset of its
        registration; a controlled shutdown completes once brokers saw the leadership moves)."""
        ...

    def prepare_append(self, *, epoch: int, records: Sequence[RecordAndVersion]) -> int:
        """Reserve offsets for `records` as one batch of leader epoch `epoch`; the offset of the
        last one. Raises AppendRefused (then nothing was reserved)."""
        ...

    def schedule_prepared_append(self) -> None:
        """Let the prepared batch reach the log."""
        ...
