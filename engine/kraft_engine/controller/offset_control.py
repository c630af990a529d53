"""The controller's three offsets and its metadata transactions.

The active controller applies records before they commit, so it must know, at every moment,
the last offset raft gave one of its batches (`last_scheduled_offset`: offsets are raft's to
assign, see raft_port), the Raft high watermark (`last_committed_offset`) and the highest offset
readers may observe (`last_stable_offset`, which stops short of an open metadata transaction). It keeps an in-memory snapshot at the
stable offset so that losing leadership throws away exactly the uncommitted suffix, and one
just before each transaction so that an AbortTransactionRecord can undo it. This mirrors
Kafka's OffsetControlManager.
"""

from __future__ import annotations

from kraft_engine.controller.timeline import SnapshotRegistry
from kraft_engine.invariant import require

__all__ = ["OffsetControlManager"]


class OffsetControlManager:
    def __init__(self, registry: SnapshotRegistry) -> None:
        self._registry = registry
        self._active = False
        self.last_scheduled_offset = -1
        self.last_committed_offset = -1
        self.last_committed_epoch = -1
        self.last_stable_offset = -1
        self.transaction_start_offset = -1
        # Reads at the stable offset need a snapshot there, even before anything committed.
        self._registry.get_or_create_snapshot(-1)

    def active(self) -> bool:
        return self._active

    def activate(self) -> None:
        """Become the writer. The snapshot at the stable offset is what `deactivate` reverts to."""
        require(not self.active(), "can't activate: already active")
        self._registry.get_or_create_snapshot(self.last_stable_offset)
        self._active = True
        self.last_scheduled_offset = self.last_committed_offset

    def deactivate(self) -> None:
        """Stop writing and discard every applied-but-uncommitted record."""
        require(self.active(), "can't deactivate: not active")
        self._registry.revert_to_snapshot(self.last_stable_offset)
        self._registry.delete_snapshots_up_to(self.last_stable_offset)
        self._active = False
        # Records of an open transaction past the stable offset were just reverted; a
        # transaction that began at or before it stays open for the next leader to finish.
        if self.transaction_start_offset > self.last_stable_offset + 1:
            self.transaction_start_offset = -1

    def handle_schedule_append(self, end_offset: int) -> None:
        """The active controller applied and scheduled a batch raft placed ending at `end_offset`."""
        require(self.active(), "only the active controller schedules appends")
        self.last_scheduled_offset = end_offset
        self._registry.get_or_create_snapshot(end_offset)

    def handle_commit_batch(self, *, last_offset: int, epoch: int) -> None:
        self.last_committed_offset = last_offset
        self.last_committed_epoch = epoch
        self._maybe_advance_last_stable_offset()

    def _maybe_advance_last_stable_offset(self) -> None:
        if self.transaction_start_offset == -1:
            new_stable = self.last_committed_offset
        else:
            new_stable = min(self.transaction_start_offset - 1, self.last_committed_offset)
        if new_stable > self.last_stable_offset:
            self.last_stable_offset = new_stable
            self._registry.delete_snapshots_up_to(new_stable)
            if not self.active():
                self._registry.get_or_create_snapshot(new_stable)

    # -- snapshot load ---------------------------------------------------------------------

    def begin_load_snapshot(self) -> None:
        require(not self.active(), "the active controller never loads a snapshot")
        self._registry.reset()
        self.transaction_start_offset = -1

    def end_load_snapshot(self, *, last_contained_offset: int, epoch: int) -> None:
        self.last_committed_offset = last_contained_offset
        self.last_committed_epoch = epoch
        self.last_stable_offset = last_contained_offset
        self._registry.get_or_create_snapshot(last_contained_offset)

    # -- metadata transactions (KIP-868) ---------------------------------------------------

    def replay_begin_transaction(self, offset: int) -> None:
        if self.transaction_start_offset != -1:
            raise RuntimeError(
                f"Can't replay a BeginTransactionRecord at {offset} because the transaction at "
                f"{self.transaction_start_offset} was never closed."
            )
        self._registry.get_or_create_snapshot(offset - 1)
        self.transaction_start_offset = offset

    def replay_end_transaction(self, offset: int) -> None:
        if self.transaction_start_offset == -1:
            raise RuntimeError(
                f"Can't replay an EndTransactionRecord at {offset} because there is no open transaction."
            )
        self.transaction_start_offset = -1

    def replay_abort_transaction(self, offset: int) -> None:
        if self.transaction_start_offset == -1:
            raise RuntimeError(
                f"Can't replay an AbortTransactionRecord at {offset} because there is no open transaction."
            )
        self._registry.revert_to_snapshot(self.transaction_start_offset - 1)
        self.transaction_start_offset = -1
