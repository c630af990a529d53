"""Errors the consensus core raises to its callers (the state machine and the driver).

They are refusals of a request that is wrong *now* (stale epoch, full buffer) and leave the
node's state untouched; broken internal invariants raise `InvariantViolation` instead.
"""

from __future__ import annotations

__all__ = [
    "BufferFullError",
    "KRaftVersionUpgradeError",
    "NotLeaderError",
    "RaftError",
    "RecordBatchTooLargeError",
    "SnapshotError",
]


class RaftError(Exception):
    """Base class of the core's refusals."""


class NotLeaderError(RaftError):
    """An append or snapshot bound to an epoch in which this node is not (or no longer) leader."""


class RecordBatchTooLargeError(RaftError):
    """A single atomic append larger than the maximum batch size."""


class BufferFullError(RaftError):
    """The leader's accumulator already holds its maximum number of unwritten batches."""


class SnapshotError(RaftError):
    """A snapshot request the log cannot satisfy (offset not committed, not on a batch boundary...)."""


class KRaftVersionUpgradeError(RaftError):
    """A kraft.version change the quorum cannot make (a voter lacks support or a directory id)."""
