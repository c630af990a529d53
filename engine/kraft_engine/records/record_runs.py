"""Runs of PartitionChangeRecords held as columns, and record sequences made of such runs.

One broker's fence at 100k partitions writes a PartitionChangeRecord per partition the broker
held, yet the controller builds only a handful of distinct changes (one per distinct partition
state, `ReplicationControlManager._leader_and_isr_updates`): every record is one of those changes
with its own PartitionId and TopicId. Building, encoding and replaying 100k record objects cost
the fence most of its time, so a fan-out hands its records on as a `PartitionChangeRun`: the
distinct changes, and per record which change and which partition. The run is a sequence of
PartitionChangeRecords (a record is built when someone reads it), so every consumer that reads
records one by one still works unchanged; the hot consumers (the encoder for raft, the
controller's replay, the loader's delta) read the columns instead and work per change, falling
back to the records where a run is not what they can take in one step. What reaches the log is
byte for byte what a record per partition encodes to (`encode_metadata_record_parts`).

`RecordParts` is a sequence of records made of parts, some of them runs: the records of a write
as the active controller hands them from its own memory to its loader.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import TypeVar, overload

from kraft_engine.invariant import require
from kraft_engine.records.metadata_records import PartitionChangeRecord
from kraft_engine.slot_setters import slot_setters

__all__ = ["PartitionChangeRun", "RecordParts"]

T = TypeVar("T")

_CHANGE_FIELDS = (
    "partition_id", "topic_id", "isr", "leader", "replicas", "removing_replicas", "adding_replicas",
    "leader_recovery_state", "directories", "eligible_leader_replicas", "last_known_elr",
)
# A record is built from its change through the slot descriptors (as `PartitionRegistration`'s
# `_built`): the change was checked by the record class's own constructor, and the class has no
# __post_init__ that this would skip.
require(not hasattr(PartitionChangeRecord, "__post_init__"), "PartitionChangeRecord checks itself in __post_init__")
(
    _set_partition_id, _set_topic_id, _set_isr, _set_leader, _set_replicas, _set_removing, _set_adding,
    _set_recovery, _set_directories, _set_elr, _set_last_known_elr,
) = slot_setters(PartitionChangeRecord, _CHANGE_FIELDS)
_new = object.__new__


def record_with_ids(change: PartitionChangeRecord, partition_id: int, topic_id: uuid.UUID) -> PartitionChangeRecord:
    """`change` for another partition: every field the same object but the two ids."""
    record: PartitionChangeRecord = _new(PartitionChangeRecord)
    _set_partition_id(record, partition_id)
    _set_topic_id(record, topic_id)
    _set_isr(record, change.isr)
    _set_leader(record, change.leader)
    _set_replicas(record, change.replicas)
    _set_removing(record, change.removing_replicas)
    _set_adding(record, change.adding_replicas)
    _set_recovery(record, change.leader_recovery_state)
    _set_directories(record, change.directories)
    _set_elr(record, change.eligible_leader_replicas)
    _set_last_known_elr(record, change.last_known_elr)
    return record


class PartitionChangeRun(Sequence[PartitionChangeRecord]):
    """PartitionChangeRecords of one record version, as columns: record i is `changes[kinds[i]]`
    with PartitionId `partition_ids[i]` and TopicId `topic_ids[i]` (the ids `changes` themselves
    carry are not used). Immutable; slices are runs too.

    Writers put partitions whose old registration is the same object under the same kind (a
    kind's partitions then change alike, so a replay merges once per kind); readers may use that
    as a hint only, and must check it."""

    __slots__ = ("changes", "kinds", "partition_ids", "topic_ids", "version")

    def __init__(
        self, *, changes: Sequence[PartitionChangeRecord], version: int, kinds: Sequence[int],
        partition_ids: Sequence[int], topic_ids: Sequence[uuid.UUID],
    ) -> None:
        require(len(kinds) == len(partition_ids) == len(topic_ids),
                f"a run's columns differ in length: {len(kinds)}, {len(partition_ids)}, {len(topic_ids)}")
        require(not kinds or (min(kinds) >= 0 and max(kinds) < len(changes)), "a run names a change it lacks")
        require(all(type(change) is PartitionChangeRecord for change in changes), "a run's changes are not records")
        self.changes = tuple(changes)
        self.version = version
        self.kinds = kinds
        self.partition_ids = partition_ids
        self.topic_ids = topic_ids

    def __len__(self) -> int:
        return len(self.kinds)

    @overload
    def __getitem__(self, index: int) -> PartitionChangeRecord: ...

    @overload
    def __getitem__(self, index: slice) -> PartitionChangeRun: ...

    def __getitem__(self, index: int | slice) -> PartitionChangeRecord | PartitionChangeRun:
        if isinstance(index, slice):
            return PartitionChangeRun(changes=self.changes, version=self.version, kinds=self.kinds[index],
                                      partition_ids=self.partition_ids[index], topic_ids=self.topic_ids[index])
        return record_with_ids(self.changes[self.kinds[index]], self.partition_ids[index], self.topic_ids[index])

    def __iter__(self) -> Iterator[PartitionChangeRecord]:
        changes = self.changes
        for kind, partition_id, topic_id in zip(self.kinds, self.partition_ids, self.topic_ids, strict=True):
            yield record_with_ids(changes[kind], partition_id, topic_id)

    def __repr__(self) -> str:
        return f"PartitionChangeRun({len(self)} records, {len(self.changes)} changes, v{self.version})"


class RecordParts(Sequence[T]):
    """A sequence of items held as consecutive parts (some of them `PartitionChangeRun`s, which
    build their records when read): what a consumer that can take a run whole reads through
    `parts`, and anyone else reads item by item."""

    __slots__ = ("_length", "_parts", "_starts")

    def __init__(self, parts: Iterable[Sequence[T]]) -> None:
        # Parts that are themselves RecordParts are spliced in, so that a run stays a part.
        self._parts = tuple(
            inner for part in parts if len(part)
            for inner in (part.parts if isinstance(part, RecordParts) else (part,))
        )
        starts = []
        length = 0
        for part in self._parts:
            starts.append(length)
            length += len(part)
        self._starts = tuple(starts)
        self._length = length

    @property
    def parts(self) -> tuple[Sequence[T], ...]:
        return self._parts

    def part_at(self, index: int) -> tuple[Sequence[T], int]:
        """The part holding item `index` (0 <= index < len), and the index of its first item."""
        if not 0 <= index < self._length:
            raise IndexError("record index out of range")
        for part, part_start in zip(reversed(self._parts), reversed(self._starts), strict=True):
            if index >= part_start:
                return part, part_start
        raise IndexError("record index out of range")

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> RecordParts[T]: ...

    def __getitem__(self, index: int | slice) -> T | RecordParts[T]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            require(step == 1, "record parts are sliced with step 1 only")
            parts = []
            for part, part_start in zip(self._parts, self._starts, strict=True):
                lo, hi = max(start - part_start, 0), min(stop - part_start, len(part))
                if lo < hi:
                    parts.append(part[lo:hi])
            return RecordParts(parts)
        if index < 0:
            index += self._length
        part, part_start = self.part_at(index)
        return part[index - part_start]

    def __iter__(self) -> Iterator[T]:
        return chain.from_iterable(self._parts)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RecordParts, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordParts({list(self._parts)!r})"
