"""The topics sub-image: topics by id and by name, their partitions, and reverse indexes by broker.

Sharing is per topic: applying a delta that touches one partition builds one new `TopicImage` and
new top-level maps, and every other `TopicImage` is the same object as before.

The reverse indexes (broker -> partitions it leads / is in the ISR of / hosts) and the offline and
preferred-leader imbalance counts are built when first read, by one pass over the image, and kept
with it. Nothing on a node's commit path reads them (the controller keeps its own indexes in its
timeline, brokers work from each delta's `local_changes`), and keeping them current on every
publish cost one broker's fence at 100k partitions more than building the new image itself: a
set per (broker, topic) moved and sorted again for every topic the broker held.
"""
from __future__ import annotations

import bisect
import operator
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

from kraft_engine.metadata._maps import EMPTY_MAP, frozen_map, thawed
from kraft_engine.metadata.errors import MetadataReplayError
from kraft_engine.metadata.image_writer import ImageWriter, ImageWriterOptions
from kraft_engine.metadata.partition_registration import NO_LEADER, MergeMemo, PartitionRegistration
from kraft_engine.records.metadata_records import (
    ClearElrRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from kraft_engine.records.record_runs import PartitionChangeRun

__all__ = ["BrokerPartitionIndex", "TopicDelta", "TopicIdPartition", "TopicImage", "TopicsDelta", "TopicsImage"]


class TopicIdPartition(NamedTuple):
    topic_id: uuid.UUID
    partition_id: int


class TopicPartition(NamedTuple):
    """A partition by topic name, as brokers and clients name it."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    """What a delta changed for one broker's replicas (Kafka's LocalReplicaChanges).

    - deletes: partitions the broker no longer hosts (removed from the replicas, or topic deleted);
    - leaders: partitions the broker leads whose partition epoch changed;
    - elected_leaders: the subset of `leaders` whose leader epoch changed (newly elected);
    - followers: partitions the broker follows whose partition epoch changed;
    - topic_ids: name -> id of the topics in `leaders` and `followers`;
    - directory_ids: partitions whose directory for this broker is new or changed.
    """

    deletes: frozenset[TopicPartition]
    elected_leaders: Mapping[TopicPartition, tuple[uuid.UUID, PartitionRegistration]]
    leaders: Mapping[TopicPartition, tuple[uuid.UUID, PartitionRegistration]]
    followers: Mapping[TopicPartition, tuple[uuid.UUID, PartitionRegistration]]
    topic_ids: Mapping[str, uuid.UUID]
    directory_ids: Mapping[TopicIdPartition, uuid.UUID]


@dataclass(frozen=True, slots=True)
class TopicImage:
    """One topic: its name, id and partitions by partition id."""

    name: str
    id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        writer.write(TopicRecord(name=self.name, topic_id=self.id), 0)
        for partition_id in sorted(self.partitions):
            writer.write(*self.partitions[partition_id].to_record(self.id, partition_id, options=options))


_uuid_int = operator.attrgetter("int")

# broker id -> topic id -> partition ids, ascending. Two levels so that a change to one partition
# copies one broker's topic map and one topic's ids, not every partition the broker holds. The ids
# are a sorted tuple rather than a frozenset: a tuple of ints drops out of the garbage collector's
# tracking, while the 300k frozensets of a 100k-partition image (three indexes, ten brokers, 10k
# topics) were scanned by every full collection and doubled the cost of building an image.
_Index = Mapping[int, Mapping[uuid.UUID, tuple[int, ...]]]


@dataclass(frozen=True, slots=True)
class BrokerPartitionIndex:
    """An immutable reverse index from broker id to the partitions it holds some role in."""

    by_broker: _Index = field(default_factory=lambda: EMPTY_MAP)

    def partitions(self, broker_id: int) -> Iterator[TopicIdPartition]:
        """The broker's partitions, in (topic id, partition id) order."""
        topics = self.by_broker.get(broker_id, EMPTY_MAP)
        # Sorting on the Uuid's integer compares in C; Uuid.__lt__ would be a Python call per step.
        for topic_id in sorted(topics, key=_uuid_int):
            for partition_id in topics[topic_id]:
                yield TopicIdPartition(topic_id, partition_id)

    def count(self, broker_id: int) -> int:
        return sum(len(p) for p in self.by_broker.get(broker_id, EMPTY_MAP).values())

    def contains(self, broker_id: int, partition: TopicIdPartition) -> bool:
        partition_ids = self.by_broker.get(broker_id, EMPTY_MAP).get(partition.topic_id, ())
        index = bisect.bisect_left(partition_ids, partition.partition_id)
        return index < len(partition_ids) and partition_ids[index] == partition.partition_id

    def brokers(self) -> list[int]:
        return sorted(self.by_broker)


class _Derived:
    """A `TopicsImage`'s reverse indexes and counts, built on first read (`_scan`) and kept."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: _Indexes | None = None


class _Indexes(NamedTuple):
    leaders: BrokerPartitionIndex
    isr_members: BrokerPartitionIndex
    replicas: BrokerPartitionIndex
    offline_partition_count: int
    preferred_replica_imbalance_count: int


def _scan(topics_by_id: Mapping[uuid.UUID, TopicImage]) -> _Indexes:
    """Every partition's roles, by broker, and the partition-health counts, in one pass."""
    roles: tuple[dict[int, dict[uuid.UUID, list[int]]], ...] = ({}, {}, {})
    offline = imbalanced = 0
    for topic_id, topic in topics_by_id.items():
        partitions = topic.partitions
        for partition_id in sorted(partitions):
            registration = partitions[partition_id]
            leader = registration.leader
            # Leaderless counts as offline, and never as having its preferred (first) replica lead.
            offline += leader == NO_LEADER
            imbalanced += leader == NO_LEADER or not registration.replicas or leader != registration.replicas[0]
            held = (() if leader == NO_LEADER else (leader,), registration.isr, registration.replicas)
            for index, brokers in zip(roles, held, strict=True):
                for broker_id in brokers:
                    index.setdefault(broker_id, {}).setdefault(topic_id, []).append(partition_id)
    leaders, isr_members, replicas = (
        BrokerPartitionIndex(frozen_map({
            broker_id: frozen_map({topic_id: tuple(ids) for topic_id, ids in topics.items()})
            for broker_id, topics in index.items()
        }))
        for index in roles
    )
    return _Indexes(leaders, isr_members, replicas, offline, imbalanced)


@dataclass(frozen=True, slots=True, repr=False)
class TopicsImage:
    """All topics, by id and by name, plus reverse indexes and partition-health counts."""

    EMPTY: ClassVar[TopicsImage]

    topics_by_id: Mapping[uuid.UUID, TopicImage]
    topics_by_name: Mapping[str, TopicImage]
    _derived: _Derived = field(default_factory=_Derived, compare=False)

    def _indexes(self) -> _Indexes:
        # Two threads reading at once may both scan: the results are equal, either may stay.
        found = self._derived.value
        if found is None:
            found = self._derived.value = _scan(self.topics_by_id)
        return found

    @property
    def leaders(self) -> BrokerPartitionIndex:
        return self._indexes().leaders

    @property
    def isr_members(self) -> BrokerPartitionIndex:
        return self._indexes().isr_members

    @property
    def replicas(self) -> BrokerPartitionIndex:
        return self._indexes().replicas

    @property
    def offline_partition_count(self) -> int:
        """Partitions without a leader."""
        return self._indexes().offline_partition_count

    @property
    def preferred_replica_imbalance_count(self) -> int:
        """Partitions not led by their preferred (first) replica."""
        return self._indexes().preferred_replica_imbalance_count

    def __repr__(self) -> str:
        return f"TopicsImage(topics={len(self.topics_by_id)})"

    def is_empty(self) -> bool:
        return not self.topics_by_id

    def get_topic(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.topics_by_id.get(topic_id)

    def get_topic_by_name(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def get_partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        topic = self.topics_by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    def partitions_led_by(self, broker_id: int) -> Iterator[TopicIdPartition]:
        return self.leaders.partitions(broker_id)

    def partitions_with_isr_member(self, broker_id: int) -> Iterator[TopicIdPartition]:
        return self.isr_members.partitions(broker_id)

    def partitions_with_replica(self, broker_id: int) -> Iterator[TopicIdPartition]:
        return self.replicas.partitions(broker_id)

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics_by_id.values())

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        # By name: deterministic on every node, and readable in a dump.
        for name in sorted(self.topics_by_name):
            self.topics_by_name[name].write(writer, options)


TopicsImage.EMPTY = TopicsImage(EMPTY_MAP, EMPTY_MAP)


class _LocalChangesBuilder:
    def __init__(self) -> None:
        self.deletes: set[TopicPartition] = set()
        self.elected_leaders: dict[TopicPartition, tuple[uuid.UUID, PartitionRegistration]] = {}
        self.leaders: dict[TopicPartition, tuple[uuid.UUID, PartitionRegistration]] = {}
        self.followers: dict[TopicPartition, tuple[uuid.UUID, PartitionRegistration]] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.directory_ids: dict[TopicIdPartition, uuid.UUID] = {}

    def build(self) -> LocalReplicaChanges:
        return LocalReplicaChanges(
            frozenset(self.deletes),
            self.elected_leaders,
            self.leaders,
            self.followers,
            self.topic_ids,
            self.directory_ids,
        )


class TopicDelta:
    """Partition changes within one topic. `image` is the topic as the delta started it."""

    def __init__(self, image: TopicImage, *, replaces_existing: bool = False) -> None:
        self.image = image
        self.partition_changes: dict[int, PartitionRegistration] = {}
        # True when a TopicRecord re-declared a topic id the base image already held (a snapshot
        # being loaded over an image): the topic's partitions start again from nothing.
        self.replaces_existing = replaces_existing

    @property
    def name(self) -> str:
        return self.image.name

    @property
    def id(self) -> uuid.UUID:
        return self.image.id

    def partition(self, partition_id: int) -> PartitionRegistration | None:
        found = self.partition_changes.get(partition_id)
        return found if found is not None else self.image.partitions.get(partition_id)

    def replay_partition(self, record: PartitionRecord) -> None:
        self.partition_changes[int(record.partition_id)] = PartitionRegistration.from_record(record)

    def replay_partition_change(self, record: PartitionChangeRecord) -> None:
        partition_id = int(record.partition_id)
        current = self.partition(partition_id)
        if current is None:
            raise MetadataReplayError(
                f"PartitionChangeRecord for unknown partition {partition_id} of topic "
                f"{self.name!r} ({record.topic_id})"
            )
        self.partition_changes[partition_id] = current.merge(record)

    def replay_clear_elr(self) -> int:
        """ClearElrRecord for this topic: every partition holding an ELR or a last known ELR gets
        both emptied, as a PartitionChangeRecord merged in place would (its partition epoch moves);
        the number of partitions changed."""
        cleared = 0
        for partition_id in sorted({*self.image.partitions, *self.partition_changes}):
            current = self.partition(partition_id)
            if current is not None and (without_elr := current.with_elr_cleared(self.id, partition_id)) is not None:
                self.partition_changes[partition_id] = without_elr
                cleared += 1
        return cleared

    def _local_changes_into(self, broker_id: int, out: _LocalChangesBuilder) -> None:
        for partition_id, new in self.partition_changes.items():
            tp = TopicPartition(self.name, partition_id)
            previous = self.image.partitions.get(partition_id)
            if broker_id not in new.replicas:
                if previous is not None and broker_id in previous.replicas:
                    out.deletes.add(tp)
                continue
            if previous is None or previous.partition_epoch != new.partition_epoch:
                info = (self.id, new)
                if new.leader == broker_id:
                    out.leaders[tp] = info
                    if previous is None or previous.leader_epoch != new.leader_epoch:
                        out.elected_leaders[tp] = info
                else:
                    out.followers[tp] = info
                out.topic_ids.setdefault(self.name, self.id)
            directory = new.directory(broker_id)
            if previous is None or broker_id not in previous.replicas or previous.directory(broker_id) != directory:
                out.directory_ids[TopicIdPartition(self.id, partition_id)] = directory

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        out = _LocalChangesBuilder()
        self._local_changes_into(broker_id, out)
        return out.build()

    def new_partitions(self) -> dict[int, PartitionRegistration]:
        return {p: r for p, r in self.partition_changes.items() if p not in self.image.partitions}

    def apply(self) -> TopicImage:
        if not self.partition_changes:
            return self.image
        partitions = thawed(self.image.partitions)
        partitions.update(self.partition_changes)
        return TopicImage(self.image.name, self.image.id, frozen_map(partitions))


class TopicsDelta:
    """Topic creations, partition changes and deletions on top of a `TopicsImage`."""

    def __init__(self, image: TopicsImage) -> None:
        self.image = image
        self.changed_topics: dict[uuid.UUID, TopicDelta] = {}
        # Topics of the base image that are gone. A topic created and deleted within this delta
        # leaves no trace in either set.
        self.deleted_topic_ids: set[uuid.UUID] = set()
        self.created_topic_ids: set[uuid.UUID] = set()
        # The topic delta the last partition record went to, by the topic id's integer: a topic's
        # partition records come together (a fence writes them in topic order), and finding the
        # delta by Uuid hashes it through a Python call per record. Reset whenever a topic record
        # or a removal replaces or drops a topic's delta.
        self._last_topic: tuple[int, TopicDelta] | None = None

    def replay_topic(self, record: TopicRecord) -> None:
        self._last_topic = None
        topic_id = record.topic_id
        empty = TopicImage(record.name, topic_id, EMPTY_MAP)
        existed = topic_id in self.image.topics_by_id and topic_id not in self.deleted_topic_ids
        self.changed_topics[topic_id] = TopicDelta(empty, replaces_existing=existed)
        self.created_topic_ids.add(topic_id)

    def _topic_delta(self, topic_id: uuid.UUID, record: PartitionRecord | PartitionChangeRecord) -> TopicDelta:
        delta = self._topic_delta_of(topic_id)
        if delta is None:
            raise MetadataReplayError(f"{type(record).__name__} {record.partition_id} for unknown topic id {topic_id}")
        return delta

    def _topic_delta_of(self, topic_id: uuid.UUID) -> TopicDelta | None:
        """The delta of a topic this delta knows (started here if need be), None for an unknown one."""
        last = self._last_topic
        if last is not None and last[0] == topic_id.int:
            return last[1]
        delta = self.changed_topics.get(topic_id)
        if delta is None:
            topic = self.image.topics_by_id.get(topic_id)
            if topic is None or topic_id in self.deleted_topic_ids:
                return None
            delta = TopicDelta(topic)
            self.changed_topics[topic_id] = delta
        self._last_topic = (topic_id.int, delta)
        return delta

    def replay_partition(self, record: PartitionRecord) -> None:
        self._topic_delta(record.topic_id, record).replay_partition(record)

    def replay_partition_change(self, record: PartitionChangeRecord) -> None:
        delta = self._topic_delta(record.topic_id, record)
        delta.replay_partition_change(record)

    def replay_partition_changes(self, records: Sequence[PartitionChangeRecord]) -> None:
        """`replay_partition_change` of each record in turn, all or nothing: every merge is done
        before the delta changes, so a record that cannot be replayed raises with the delta as it
        was (bar an empty topic delta, which changes nothing). One broker's fence writes a record
        per partition it held, a topic's together: each costs a merge and a store here."""
        merged: dict[tuple[int, int], tuple[dict[int, PartitionRegistration], int, PartitionRegistration]] = {}
        merge = MergeMemo().merge
        topic_int = -1
        changes: dict[int, PartitionRegistration] = {}
        partitions: Mapping[int, PartitionRegistration] = EMPTY_MAP
        name = ""
        for record in records:
            topic_id = record.topic_id
            if topic_id.int != topic_int:
                delta = self._topic_delta(topic_id, record)
                topic_int, changes, partitions, name = topic_id.int, delta.partition_changes, delta.image.partitions, delta.name
            partition_id = int(record.partition_id)
            key = (topic_int, partition_id)
            found = merged.get(key)
            current = found[2] if found is not None else changes.get(partition_id) or partitions.get(partition_id)
            if current is None:
                raise MetadataReplayError(
                    f"PartitionChangeRecord for unknown partition {partition_id} of topic {name!r} ({topic_id})"
                )
            merged[key] = (changes, partition_id, merge(current, record))
        for changes, partition_id, registration in merged.values():
            changes[partition_id] = registration

    def replay_partition_change_run(self, run: PartitionChangeRun) -> None:
        """`replay_partition_changes` of a fan-out's run (`records.record_runs`), without building
        its records: per partition a lookup, and one merge per distinct (change, registration)
        pair. All or nothing, as `replay_partition_changes`."""
        changes_of = run.changes
        merged: dict[tuple[int, int], tuple[PartitionRegistration, PartitionRegistration]] = {}
        merge = MergeMemo().merge
        # Per topic (by its id's integer) its delta's changes, its image's partitions, its name and
        # the merges staged for it; a topic's records usually come together, but need not.
        staged_topics: dict[int, tuple[dict[int, PartitionRegistration], Mapping[int, PartitionRegistration], str,
                                       dict[int, PartitionRegistration]]] = {}
        topic: uuid.UUID | None = None
        staged: dict[int, PartitionRegistration] = {}
        changes: dict[int, PartitionRegistration] = {}
        partitions: Mapping[int, PartitionRegistration] = EMPTY_MAP
        name = ""
        for kind, partition_id, topic_id in zip(run.kinds, run.partition_ids, run.topic_ids, strict=True):
            if topic_id is not topic:
                topic = topic_id
                found_topic = staged_topics.get(topic_id.int)
                if found_topic is None:
                    delta = self._topic_delta_of(topic_id)
                    if delta is None:
                        raise MetadataReplayError(
                            f"PartitionChangeRecord {partition_id} for unknown topic id {topic_id}")
                    found_topic = staged_topics[topic_id.int] = (
                        delta.partition_changes, delta.image.partitions, delta.name, {})
                changes, partitions, name, staged = found_topic
            current = staged.get(partition_id) or changes.get(partition_id) or partitions.get(partition_id)
            if current is None:
                raise MetadataReplayError(
                    f"PartitionChangeRecord for unknown partition {partition_id} of topic {name!r} ({topic_id})"
                )
            # `merged` holds `current`, so its id stays its own while the memo lives.
            found = merged.get((kind, id(current)))
            if found is None:
                found = merged[kind, id(current)] = (current, merge(current, changes_of[kind]))
            staged[partition_id] = found[1]
        for changes, _, _, staged in staged_topics.values():
            changes.update(staged)

    def replay_clear_elr(self, record: ClearElrRecord) -> None:
        """Kafka's TopicsDelta.replay(ClearElrRecord): the named topic (created in this delta or in
        the image; an unknown name is an error), or every topic when the name is empty."""
        if record.topic_name:
            topic_id = next((d.id for d in self.changed_topics.values()
                             if d.name == record.topic_name and d.id in self.created_topic_ids), None)
            if topic_id is None:
                topic = self.image.topics_by_name.get(record.topic_name)
                if topic is None or topic.id in self.deleted_topic_ids:
                    raise MetadataReplayError(f"ClearElrRecord for unknown topic {record.topic_name!r}")
                topic_id = topic.id
            self._clear_elr_of(topic_id)
            return
        for topic_id in [*self.image.topics_by_id, *self.created_topic_ids]:
            if topic_id not in self.deleted_topic_ids:
                self._clear_elr_of(topic_id)

    def _clear_elr_of(self, topic_id: uuid.UUID) -> None:
        delta = self.changed_topics.get(topic_id)
        if delta is None:
            delta = TopicDelta(self.image.topics_by_id[topic_id])
            if delta.replay_clear_elr():
                self.changed_topics[topic_id] = delta
            return
        delta.replay_clear_elr()

    def replay_remove_topic(self, record: RemoveTopicRecord) -> str:
        """Delete the topic; returns its name (its configs go with it)."""
        self._last_topic = None
        topic_id = record.topic_id
        delta = self.changed_topics.pop(topic_id, None)
        if delta is not None:
            if topic_id in self.image.topics_by_id:
                self.deleted_topic_ids.add(topic_id)
            self.created_topic_ids.discard(topic_id)
            return delta.name
        topic = self.image.topics_by_id.get(topic_id)
        if topic is None or topic_id in self.deleted_topic_ids:
            raise MetadataReplayError(f"RemoveTopicRecord for unknown topic id {topic_id}")
        self.deleted_topic_ids.add(topic_id)
        return topic.name

    def changed_topic(self, topic_id: uuid.UUID) -> TopicDelta | None:
        return self.changed_topics.get(topic_id)

    def topic_was_deleted(self, name: str) -> bool:
        """True when the base image's topic called `name` was deleted (even if a new one took the name)."""
        topic = self.image.topics_by_name.get(name)
        return topic is not None and topic.id in self.deleted_topic_ids

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """How this delta changes the replicas `broker_id` hosts, for its replica manager."""
        out = _LocalChangesBuilder()
        for delta in self.changed_topics.values():
            delta._local_changes_into(broker_id, out)
        for topic_id in self.deleted_topic_ids:
            topic = self.image.topics_by_id[topic_id]
            for partition_id, registration in topic.partitions.items():
                if broker_id in registration.replicas:
                    out.deletes.add(TopicPartition(topic.name, partition_id))
        return out.build()

    def finish_snapshot(self) -> None:
        for topic_id in self.image.topics_by_id:
            if topic_id not in self.changed_topics:
                self.deleted_topic_ids.add(topic_id)

    def apply(self) -> TopicsImage:
        base = self.image
        by_id = thawed(base.topics_by_id)
        by_name = thawed(base.topics_by_name)

        for topic_id in self.deleted_topic_ids:
            topic = by_id.pop(topic_id)
            if by_name.get(topic.name) is topic:
                del by_name[topic.name]

        for topic_id, delta in self.changed_topics.items():
            previous = base.topics_by_id.get(topic_id) if topic_id not in self.deleted_topic_ids else None
            topic = delta.apply()
            if previous is not None and previous.name != topic.name and by_name.get(previous.name) is previous:
                del by_name[previous.name]
            holder = by_name.get(topic.name)
            if holder is not None and holder.id != topic_id and holder.id in by_id:
                raise MetadataReplayError(
                    f"topic {topic.name!r} ({topic_id}) collides with existing topic id {holder.id}"
                )
            by_id[topic_id] = topic
            by_name[topic.name] = topic

        return TopicsImage(frozen_map(by_id), frozen_map(by_name))
