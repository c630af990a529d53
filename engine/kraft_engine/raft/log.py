"""The replicated log the consensus core reads and mutates, and an in-memory implementation.

`RaftLog` is deliberately close to what a segment-file log offers (append whole batches, read
whole batches, truncate at a batch boundary, flush, snapshots as immutable files), so the
storage engineer's file log adapts to it directly. The core mutates the log in place but never
flushes it: it asks its driver to (`Output.flush`), and counts an offset toward the high
watermark (leader) or reports it in a Fetch (follower) only once the driver said it is flushed;
only flushed data may be acknowledged. Truncation is durable when it returns.

`MemoryLog` is pure and complete; tests use it directly and the simulation wraps it to lose
unflushed data on a crash.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from kraft_engine.invariant import require
from kraft_engine.records.batches import iter_batches
from kraft_engine.records.log_batch import LogBatch, OffsetAndEpoch, parse_batches

__all__ = [
    "BOOTSTRAP_SNAPSHOT_ID",
    "MemoryLog",
    "RaftLog",
    "ValidOffsetAndEpoch",
    "ValidationKind",
    "control_batches",
    "read_snapshot_bytes",
    "validate_offset_and_epoch",
]


BOOTSTRAP_SNAPSHOT_ID = OffsetAndEpoch(epoch=0, offset=0)


class ValidationKind(Enum):
    VALID = "valid"
    DIVERGING = "diverging"
    SNAPSHOT = "snapshot"


@dataclass(frozen=True, slots=True)
class ValidOffsetAndEpoch:
    kind: ValidationKind
    offset_and_epoch: OffsetAndEpoch


class RaftLog(Protocol):
    """The operations the core needs from the metadata log (Kafka's ReplicatedLog)."""

    @property
    def log_start_offset(self) -> int: ...

    def end_offset(self) -> OffsetAndEpoch:
        """Log end offset and the epoch of the last batch (or of the snapshot the log starts at)."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= `epoch` in the log and the offset at which it ends."""
        ...

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches starting with the one holding `offset`; at least one batch if any exists."""
        ...

    def append(self, data: bytes) -> list[LogBatch]:
        """Append whole batches that start exactly at the log end offset; returns them parsed."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or above `offset` (a batch boundary)."""
        ...

    def flush(self) -> None:
        """Make everything appended so far durable (the driver calls it, never the core)."""
        ...

    @property
    def flushed_offset(self) -> int: ...

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        """Frozen snapshots, oldest first."""
        ...

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes: ...

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None: ...

    def store_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Atomically freeze a complete snapshot (tmp + fsync + rename in a file log)."""
        ...

    def delete_snapshot(self, snapshot_id: OffsetAndEpoch) -> None: ...

    def delete_before(self, offset: int) -> None:
        """Advance the log start offset to `offset` (a snapshot's end offset), dropping older batches."""
        ...

    def truncate_to_latest_snapshot(self) -> None:
        """Empty the log so that it starts where the latest snapshot ends (after a snapshot download)."""
        ...

    def size_in_bytes(self) -> int: ...


def validate_offset_and_epoch(log: RaftLog, *, offset: int, epoch: int) -> ValidOffsetAndEpoch:
    """Check a follower's (fetch offset, last fetched epoch) against this log (ReplicatedLog rule)."""
    if log.log_start_offset == 0 and offset == 0:
        return ValidOffsetAndEpoch(ValidationKind.VALID, OffsetAndEpoch(epoch=0, offset=0))
    snapshots = log.snapshot_ids()
    if snapshots:
        earliest = snapshots[0]
        if offset < log.log_start_offset or (offset == log.log_start_offset and epoch != earliest.epoch) or (
            epoch < earliest.epoch
        ):
            return ValidOffsetAndEpoch(ValidationKind.SNAPSHOT, snapshots[-1])
    end = log.end_offset_for_epoch(epoch)
    if end.epoch != epoch or end.offset < offset:
        return ValidOffsetAndEpoch(ValidationKind.DIVERGING, end)
    return ValidOffsetAndEpoch(ValidationKind.VALID, OffsetAndEpoch(epoch=epoch, offset=offset))


def read_snapshot_bytes(log: RaftLog, snapshot_id: OffsetAndEpoch) -> bytes:
    """A stored snapshot's bytes, whole (empty when the log does not hold it)."""
    size = log.snapshot_size(snapshot_id) or 0
    return log.read_snapshot(snapshot_id, 0, size)


def control_batches(data: bytes) -> list[LogBatch]:
    """The control batches of a snapshot's bytes (header, kraft.version, voters, footer), parsed;
    the data batches are only checked (CRC) and skipped, not decoded."""
    return [batch for header, view in iter_batches(data) if header.is_control for batch in parse_batches(view)]


class MemoryLog:
    """A pure, in-memory `RaftLog` that tracks which prefix has been flushed."""

    def __init__(self) -> None:
        self._batches: list[LogBatch] = []
        self._base_offsets: list[int] = []
        self._start_offset = 0
        self._flushed_offset = 0
        self._snapshots: dict[OffsetAndEpoch, bytes] = {}
        self._truncations = 0

    # -- offsets -------------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self._start_offset

    def _end(self) -> int:
        return self._batches[-1].next_offset if self._batches else self._start_offset

    def _start_epoch(self) -> int:
        for snapshot_id in self._snapshots:
            if snapshot_id.offset == self._start_offset:
                return snapshot_id.epoch
        return 0

    def end_offset(self) -> OffsetAndEpoch:
        epoch = self._batches[-1].epoch if self._batches else self._start_epoch()
        return OffsetAndEpoch(epoch=epoch, offset=self._end())

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        found: OffsetAndEpoch | None = None
        for batch in self._batches:
            if batch.epoch > epoch:
                return found if found is not None else OffsetAndEpoch(epoch=self._start_epoch(), offset=batch.base_offset)
            found = OffsetAndEpoch(epoch=batch.epoch, offset=batch.next_offset)
        if found is not None:
            return found
        return OffsetAndEpoch(epoch=self._start_epoch(), offset=self._start_offset)

    # -- batches -------------------------------------------------------------------------------
    def batches(self) -> Iterator[LogBatch]:
        return iter(list(self._batches))

    def read(self, offset: int, max_bytes: int) -> bytes:
        require(self._start_offset <= offset <= self._end(), f"read at {offset} outside the log")
        index = bisect.bisect_right(self._base_offsets, offset) - 1
        index = max(index, 0)
        chunks: list[bytes] = []
        size = 0
        for batch in self._batches[index:]:
            if batch.last_offset < offset:
                continue
            if chunks and size + batch.size_in_bytes > max_bytes:
                break
            chunks.append(batch.raw)
            size += batch.size_in_bytes
        return b"".join(chunks)

    def append(self, data: bytes) -> list[LogBatch]:
        parsed = parse_batches(data)
        expected = self._end()
        last_epoch = self.end_offset().epoch
        for batch in parsed:
            if batch.base_offset != expected:
                raise ValueError(f"batch at offset {batch.base_offset} does not start at log end {expected}")
            if batch.epoch < last_epoch:
                raise ValueError(f"batch epoch {batch.epoch} is below the log's last epoch {last_epoch}")
            expected = batch.next_offset
            last_epoch = batch.epoch
        for batch in parsed:
            self._batches.append(batch)
            self._base_offsets.append(batch.base_offset)
        return parsed

    def truncate_to(self, offset: int) -> None:
        require(offset >= self._start_offset, f"cannot truncate to {offset} below log start {self._start_offset}")
        index = bisect.bisect_left(self._base_offsets, offset)
        if index > 0:
            require(self._batches[index - 1].next_offset <= offset, f"truncation offset {offset} splits a batch")
        del self._batches[index:]
        del self._base_offsets[index:]
        self._flushed_offset = min(self._flushed_offset, self._end())
        self._truncations += 1

    def flush(self) -> None:
        self._flushed_offset = self._end()

    def flush_to(self, end_offset: int) -> None:
        """Make the log durable below `end_offset` only (an fsync that began when the log ended
        there; what was appended after it is not covered)."""
        self._flushed_offset = max(self._flushed_offset, min(end_offset, self._end()))

    @property
    def truncations(self) -> int:
        """How many times the tail was cut: an fsync begun before a cut says nothing after it."""
        return self._truncations

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    def size_in_bytes(self) -> int:
        return sum(b.size_in_bytes for b in self._batches)

    # -- snapshots -----------------------------------------------------------------------------
    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return sorted(self._snapshots, key=lambda s: (s.offset, s.epoch))

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        data = self._snapshots[snapshot_id]
        return data[position : position + max_bytes]

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        data = self._snapshots.get(snapshot_id)
        return None if data is None else len(data)

    def store_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self._snapshots[snapshot_id] = bytes(data)

    def delete_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        self._snapshots.pop(snapshot_id, None)

    def delete_before(self, offset: int) -> None:
        require(offset <= self._end(), f"cannot start the log at {offset} past its end {self._end()}")
        if offset <= self._start_offset:
            return
        keep = [b for b in self._batches if b.last_offset >= offset]
        self._batches = keep
        self._base_offsets = [b.base_offset for b in keep]
        self._start_offset = offset

    def truncate_to_latest_snapshot(self) -> None:
        snapshots = self.snapshot_ids()
        require(bool(snapshots), "no snapshot to truncate the log to")
        latest = snapshots[-1]
        self._batches = []
        self._base_offsets = []
        self._start_offset = latest.offset
        self._flushed_offset = latest.offset
        self._truncations += 1
