"""The leader's write buffer: it groups state-machine appends into batches and assigns offsets.

Appends are accepted at once (their offsets are fixed when accepted, so the state machine can
wait for exactly that offset to commit) but reach the log only when the linger time has passed
or a batch is full, which amortises the flush over many writes (Kafka's BatchAccumulator with
`controller.quorum.append.linger.ms`). Each append call lands in a single batch, so a group of
records the state machine must apply together is committed together.

A prepared append (Kafka's `prepareAppend` with delayed drain) reserves its offsets but holds
back everything from its first offset on until `release_hold`: the quorum controller learns
where its records land, applies them there, and only then lets them reach the log, so a record
it cannot apply (a fatal fault) is never replicated. One prepared append may carry several
groups (`append_groups`): all of one controller write's batches, reserved in one call and
released together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from kraft_engine.raft.errors import BufferFullError, RecordBatchTooLargeError
from kraft_engine.records.control import ControlRecord

__all__ = ["BatchAccumulator", "PendingBatch"]

# Per-record framing overhead in a v2 batch (length, attributes, deltas, key/value lengths,
# header count) plus the 61-byte batch header, used to keep batches under the size cap.
_RECORD_OVERHEAD_BYTES: Final = 21
_BATCH_OVERHEAD_BYTES: Final = 61


@dataclass(slots=True)
class PendingBatch:
    """A batch waiting to be written: data values, or control records."""

    base_offset: int
    append_time_ms: int
    values: list[bytes] = field(default_factory=list)
    control_records: list[ControlRecord] = field(default_factory=list)
    size_bytes: int = _BATCH_OVERHEAD_BYTES

    @property
    def is_control(self) -> bool:
        return bool(self.control_records)

    @property
    def record_count(self) -> int:
        return len(self.control_records) if self.control_records else len(self.values)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1


class BatchAccumulator:
    """Buffers one leader epoch's appends until they are drained into the log."""

    def __init__(
        self,
        *,
        epoch: int,
        next_offset: int,
        linger_ms: int,
        max_batch_size_bytes: int,
        max_number_of_batches: int,
        preferred_batch_size_bytes: int | None = None,
    ) -> None:
        self.epoch = epoch
        self._next_offset = next_offset
        self._linger_ms = linger_ms
        self._max_batch_size_bytes = max_batch_size_bytes
        # A batch is closed once the next group would take it past this (a group larger than it
        # still gets a batch of its own, up to the maximum): a follower then takes a large write
        # in Fetch-sized steps, and the leader builds it one step per poll, instead of one
        # multi-megabyte batch that holds both sides' loops at once.
        self._preferred_batch_size_bytes = min(preferred_batch_size_bytes or max_batch_size_bytes,
                                               max_batch_size_bytes)
        # What the buffer may hold (Kafka's MAX_NUMBER_OF_BATCHES full batches), counted in bytes,
        # so that closing batches early never refuses a write a buffer of full batches would take.
        self._capacity_bytes = max_number_of_batches * max_batch_size_bytes
        self._completed: list[PendingBatch] = []
        self._completed_bytes = 0
        self._current: PendingBatch | None = None
        self._drain_deadline_ms: int | None = None
        # The first offset of a prepared append not yet released: nothing from it on drains.
        self._hold_from_offset: int | None = None

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def holding(self) -> bool:
        return self._hold_from_offset is not None

    def append(self, values: list[bytes], *, now_ms: int, hold: bool = False) -> int:
        """Accept `values` as one atomic group; returns the offset of the last one. With `hold`,
        nothing from their first offset on drains until `release_hold`."""
        return self.append_groups([values], now_ms=now_ms, hold=hold)[0]

    def append_groups(self, groups: Sequence[list[bytes]], *, now_ms: int, hold: bool = False) -> list[int]:
        """Accept each of `groups` as one atomic group, in order and all or none (nothing is
        accepted when one is refused); the offset of each group's last value. With `hold`,
        nothing from the first group's first offset on drains until `release_hold`.

        One call for many groups is how the quorum controller hands raft all the batches of one
        write at once (a fence at 100k partitions is eleven), so they cost one call and reach the
        log, and the followers, together."""
        sizes = [self._group_size(values) for values in groups]
        # Where the groups would go, checked before anything is accepted.
        current = self._current.size_bytes if self._current is not None else None
        waiting = buffered = self._completed_bytes + (current or 0)
        for size in sizes:
            if current is None or self._closes(current, size):
                current = _BATCH_OVERHEAD_BYTES
                buffered += _BATCH_OVERHEAD_BYTES
            current += size
            buffered += size
            if buffered > self._capacity_bytes:
                raise BufferFullError(
                    f"{waiting} bytes are waiting to be written; {sum(sizes)} more exceed the buffer's "
                    f"{self._capacity_bytes}"
                )
        if hold and self._hold_from_offset is None and groups:
            self._hold_from_offset = self._next_offset
        last_offsets = []
        for values, size in zip(groups, sizes, strict=True):
            last_offsets.append(self._place(values, size=size, now_ms=now_ms))
        return last_offsets

    def _closes(self, batch_size: int, group_size: int) -> bool:
        """Whether a group of `group_size` bytes starts a new batch after one of `batch_size`."""
        return batch_size > _BATCH_OVERHEAD_BYTES and batch_size + group_size > self._preferred_batch_size_bytes

    def _group_size(self, values: list[bytes]) -> int:
        if not values:
            raise ValueError("cannot append an empty list of records")
        size = sum(map(len, values)) + _RECORD_OVERHEAD_BYTES * len(values)
        if size + _BATCH_OVERHEAD_BYTES > self._max_batch_size_bytes:
            raise RecordBatchTooLargeError(
                f"{len(values)} records of {size} bytes exceed the maximum batch size {self._max_batch_size_bytes}"
            )
        return size

    def _place(self, values: list[bytes], *, size: int, now_ms: int) -> int:
        current = self._current
        if current is not None and self._closes(current.size_bytes, size):
            self._complete_current()
            current = None
        if current is None:
            current = PendingBatch(base_offset=self._next_offset, append_time_ms=now_ms)
            self._current = current
        current.values.extend(values)
        current.size_bytes += size
        self._next_offset += len(values)
        if self._drain_deadline_ms is None:
            self._drain_deadline_ms = now_ms + self._linger_ms
        return self._next_offset - 1

    def append_control(self, records: list[ControlRecord], *, now_ms: int) -> int:
        """Queue a control batch behind everything accepted so far; it forces a drain."""
        self._complete_current()
        batch = PendingBatch(base_offset=self._next_offset, append_time_ms=now_ms, control_records=list(records))
        self._completed.append(batch)
        self._completed_bytes += batch.size_bytes
        self._next_offset += len(records)
        self._drain_deadline_ms = now_ms
        return self._next_offset - 1

    def release_hold(self) -> None:
        """The prepared records may go to the log now (Kafka's `schedulePreparedAppend`)."""
        self._hold_from_offset = None

    def _complete_current(self) -> None:
        if self._current is not None:
            self._completed.append(self._current)
            self._completed_bytes += self._current.size_bytes
            self._current = None

    def is_empty(self) -> bool:
        return self._current is None and not self._completed

    def _completed_before_hold(self) -> bool:
        """A completed batch may be written now: a held append never holds back what is before it
        (the rest of a large write still going out while the next write is being applied)."""
        hold = self._hold_from_offset
        return bool(self._completed) and (hold is None or self._completed[0].last_offset < hold)

    def needs_drain(self, now_ms: int) -> bool:
        if self._completed_before_hold():
            return True
        if self._hold_from_offset is not None:
            return False
        return self._drain_deadline_ms is not None and now_ms >= self._drain_deadline_ms

    def drain_deadline_ms(self) -> int | None:
        if self._completed_before_hold():
            return 0
        if self._hold_from_offset is not None:
            return None
        return self._drain_deadline_ms

    def drain(self, *, max_bytes: int | None = None) -> list[PendingBatch]:
        """Everything accepted so far, in offset order; while a prepared append is held, only
        the completed batches that end before it (the rest never reach the log unreleased).
        With `max_bytes`, only as many batches as fit in it (at least one): the rest wait for the
        next drain, which is due at once (`drain_deadline_ms`)."""
        hold = self._hold_from_offset
        if hold is None:
            self._complete_current()
        completed = self._completed
        ready = size = 0
        while ready < len(completed):
            batch = completed[ready]
            if hold is not None and batch.last_offset >= hold:
                break
            if max_bytes is not None and ready and size + batch.size_bytes > max_bytes:
                break
            size += batch.size_bytes
            ready += 1
        drained = completed[:ready]
        del completed[:ready]
        self._completed_bytes -= size
        if hold is None and not completed:
            self._drain_deadline_ms = None
        return drained
