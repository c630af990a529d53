"""The controller's narrow window onto the raft log: raft, and only raft, says where records land.

The active controller applies its records to memory before they commit, at the offsets they
will have in the log. Those offsets are not the controller's to predict: the raft layer writes
control batches of its own between the controller's batches (the LeaderChangeMessage that opens
an epoch, the VotersRecord of every AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter, the
KRaftVersionRecord of an upgrade), and each takes an offset. So, as Kafka's QuorumController does
with `RaftClient.prepareAppend` / `schedulePreparedAppend`, every batch goes through three steps:

1. `prepare_appends` reserves the offsets of the write's batches in the raft layer and returns
   the last one of each; the raft layer holds them (and anything after them) back from the log;
2. the controller replays the records at exactly those offsets, and keys its in-memory snapshots
   (one per batch) and its purgatory on the last ones;
3. `schedule_prepared_append` lets the batches go to the log.

All the batches of one write go in one call (Kafka's controller, too, schedules a write's
prepared batches once, after replaying them all): on a node each call is a hop onto raft's event
loop, and a fence at 100k partitions is eleven batches, which one by one cost 22 hops, each a
wait for the other thread under load, and reached the followers one after another.

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

    def prepare_appends(self, *, epoch: int, batches: Sequence[Sequence[RecordAndVersion]]) -> list[int]:
        """Reserve offsets for each of `batches` as one batch of leader epoch `epoch`, in order;
        the offset of each one's last record. Raises AppendRefused (then nothing was reserved)."""
        ...

    def schedule_prepared_append(self) -> None:
        """Let the prepared batches reach the log."""
        ...
