"""Errors the consensus core raises to its callers (the state machine and the driver).

They are refusals of a request that is wrong *now* (stale epoch, full buffer) and leave the
node's state untouched; broken internal invariants raise `InvariantViolation` instead. Their base,
`RaftError`, and `SnapshotError` (shared with storage) live in the engine's root hierarchy,
`kraft_engine.errors`.
"""

from __future__ import annotations

from kraft_engine.errors import RaftError

__all__ = [
    "BufferFullError",
    "KRaftVersionUpgradeError",
    "NotLeaderError",
    "RecordBatchTooLargeError",
]


class NotLeaderError(RaftError):
    """An append or snapshot bound to an epoch in which this node is not (or no longer) leader.

    `leader_id` and `epoch` name the leader as the node knew it when it refused (None when the
    refusal did not say), so a caller can redirect."""

    def __init__(self, message: str, *, leader_id: int | None = None, epoch: int | None = None) -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.epoch = epoch


class RecordBatchTooLargeError(RaftError):
    """A single atomic append larger than the maximum batch size."""


class BufferFullError(RaftError):
    """The leader's accumulator already holds its maximum number of unwritten batches."""


class KRaftVersionUpgradeError(RaftError):
    """A kraft.version change the quorum cannot make (a voter lacks support or a directory id)."""
