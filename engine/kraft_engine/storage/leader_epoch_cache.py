"""Which leader epoch began at which offset: the map that lets a follower find where its log
diverged from the leader's.

A KRaft follower's Fetch carries its last fetched epoch; the leader answers with the end offset
of that epoch in *its* log (`end_offset_for`), and the follower truncates there. The answer
follows Kafka's `LeaderEpochFileCache.endOffsetFor` exactly:

- requested epoch -1 (undefined)           -> (-1, -1)
- requested epoch is the latest epoch       -> (epoch, log end offset)
- some epoch above the requested one exists -> (largest epoch <= requested, start offset of the
  next higher epoch); when no epoch <= requested is known (the log start moved past it) Kafka
  answers (requested epoch, start offset of the first higher epoch), and so do we
- requested epoch above every known epoch   -> (-1, -1)

The cache is persisted in `leader-epoch-checkpoint` after every change, atomically. The log
keeps it in step: a new epoch is assigned when the first batch of that epoch is appended,
entries at or above a truncation point are dropped, entries below a new log start are folded.
"""

from __future__ import annotations

import bisect
import itertools
from pathlib import Path

from kraft_engine.invariant import require
from kraft_engine.storage.checkpoint_file import EpochEntry, write_leader_epoch_checkpoint

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "LeaderEpochCache"]

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Ordered (epoch, start offset) entries, strictly increasing in both, backed by a file."""

    def __init__(self, path: Path, entries: list[EpochEntry]) -> None:
        for (e1, o1), (e2, o2) in itertools.pairwise(entries):
            require(e1 < e2 and o1 <= o2, f"leader epoch entries out of order: {entries}")
        self.path = path
        self._entries = list(entries)

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1][0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; a no-op when it is already the latest.

        Returns whether the cache changed (and was written). Going back to an older epoch is a
        bug in the caller: the log rejects such batches before they get here.
        """
        if self._entries and self._entries[-1][0] == epoch:
            return False
        require(
            not self._entries or (epoch > self._entries[-1][0] and start_offset >= self._entries[-1][1]),
            f"leader epoch {epoch} at offset {start_offset} does not follow {self._entries[-1:]}",
        )
        # As in Kafka, an older epoch that claims the same start offset never held a batch: drop it.
        if self._entries and self._entries[-1][1] == start_offset:
            self._entries.pop()
        self._entries.append((epoch, start_offset))
        self.flush()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop every entry whose epoch starts at or after `end_offset` (log truncated there)."""
        kept = [(e, o) for e, o in self._entries if o < end_offset]
        if len(kept) != len(self._entries):
            self._entries = kept
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly below a new log start; the epoch covering it now starts there."""
        below = [(e, o) for e, o in self._entries if o <= start_offset]
        if not below:
            return
        kept = [(below[-1][0], start_offset)] + [(e, o) for e, o in self._entries if o > start_offset]
        if kept != self._entries:
            self._entries = kept
            self.flush()

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self.flush()

    def end_offset_for(self, requested_epoch: int, *, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetsForLeaderEpoch / a diverging Fetch; see module doc."""
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries and self._entries[-1][0] == requested_epoch:
            return requested_epoch, log_end_offset
        epochs = [e for e, _ in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher_start = self._entries[higher][1]
        if higher == 0:
            return requested_epoch, higher_start
        return self._entries[higher - 1][0], higher_start

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch in which `offset` was written, or None when it precedes every entry."""
        starts = [o for _, o in self._entries]
        index = bisect.bisect_right(starts, offset)
        return self._entries[index - 1][0] if index else None

    def flush(self) -> None:
        """Write the entries to leader-epoch-checkpoint (atomically; changes already do this)."""
        write_leader_epoch_checkpoint(self.path, self._entries)
