"""The topics sub-image: topics by id and by name, their partitions, and reverse indexes by broker.

Sharing is per topic: applying a delta that touches one partition builds one new `TopicImage` and
new top-level maps, and every other `TopicImage` is the same object as before. The reverse indexes
(broker -> partitions it leads / is in the ISR of / hosts) and the offline and preferred-leader
imbalance counts are maintained incrementally from each delta's partition changes, so that the
controller can find "every partition broker 3 leads" without scanning 100k partitions, and fencing
one broker costs in proportion to that broker's partitions, not the cluster's.
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


class _IndexBuilder:
    """Accumulates (broker, topic, partition) additions and removals, then builds a new index
    copying only the brokers and topics that changed."""

    def __init__(self, base: BrokerPartitionIndex) -> None:
        self._base = base
        self._touched: dict[int, dict[uuid.UUID, set[int]]] = {}
        # The sets of the topic being updated, by broker: a topic's partitions arrive together, so
        # each (broker, topic) set is found once per topic instead of once per partition, which
        # spares hashing the Uuid (a Python-level __hash__) for every replica of every partition.
        self._topic_id: uuid.UUID | None = None
        self._topic_sets: dict[int, set[int]] = {}

    def _set(self, broker_id: int) -> set[int]:
        topic_id = self._topic_id
        if topic_id is None:
            raise MetadataReplayError("reverse index update without a topic")
        topics = self._touched.setdefault(broker_id, {})
        found = topics.get(topic_id)
        if found is None:
            found = set(self._base.by_broker.get(broker_id, EMPTY_MAP).get(topic_id, ()))
            topics[topic_id] = found
        self._topic_sets[broker_id] = found
        return found

    def move(
        self, topic_id: uuid.UUID, partition_ids: Sequence[int], *, leave: tuple[int, ...], join: tuple[int, ...]
    ) -> None:
        """Each of a topic's `partition_ids` leaves the brokers in `leave` and joins those in `join`."""
        if topic_id is not self._topic_id:
            self._topic_id = topic_id
            self._topic_sets = {}
        sets = self._topic_sets
        for broker_id in leave:
            (sets.get(broker_id) or self._set(broker_id)).difference_update(partition_ids)
        for broker_id in join:
            (sets.get(broker_id) or self._set(broker_id)).update(partition_ids)

    def build(self) -> BrokerPartitionIndex:
        if not self._touched:
            return self._base
        by_broker = thawed(self._base.by_broker)
        for broker_id, topics in self._touched.items():
            inner = thawed(by_broker.get(broker_id, EMPTY_MAP))
            for topic_id, partitions in topics.items():
                if partitions:
                    inner[topic_id] = tuple(sorted(partitions))
                else:
                    inner.pop(topic_id, None)
            if inner:
                by_broker[broker_id] = frozen_map(inner)
            else:
                by_broker.pop(broker_id, None)
        return BrokerPartitionIndex(frozen_map(by_broker))


@dataclass(frozen=True, slots=True, repr=False)
class TopicsImage:
    """All topics, by id and by name, plus reverse indexes and partition-health counts."""

    EMPTY: ClassVar[TopicsImage]

    topics_by_id: Mapping[uuid.UUID, TopicImage]
    topics_by_name: Mapping[str, TopicImage]
    leaders: BrokerPartitionIndex = field(default_factory=BrokerPartitionIndex, compare=False)
    isr_members: BrokerPartitionIndex = field(default_factory=BrokerPartitionIndex, compare=False)
    replicas: BrokerPartitionIndex = field(default_factory=BrokerPartitionIndex, compare=False)
    offline_partition_count: int = field(default=0, compare=False)
    preferred_replica_imbalance_count: int = field(default=0, compare=False)

    def __repr__(self) -> str:
        return f"TopicsImage(topics={len(self.topics_by_id)}, offline={self.offline_partition_count})"

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
        last = self._last_topic
        if last is not None and last[0] == topic_id.int:
            return last[1]
        delta = self.changed_topics.get(topic_id)
        if delta is None:
            topic = self.image.topics_by_id.get(topic_id)
            if topic is None or topic_id in self.deleted_topic_ids:
                raise MetadataReplayError(
                    f"{type(record).__name__} {record.partition_id} for unknown topic id {topic_id}"
                )
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
        accounts = _Accounts(base)
        account = accounts.account

        for topic_id in self.deleted_topic_ids:
            topic = by_id.pop(topic_id)
            if by_name.get(topic.name) is topic:
                del by_name[topic.name]
            for partition_id, partition in topic.partitions.items():
                account(topic_id, partition_id, old=partition, new=None)

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
            if delta.replaces_existing and previous is not None:
                for partition_id in previous.partitions.keys() | topic.partitions.keys():
                    account(
                        topic_id,
                        partition_id,
                        old=previous.partitions.get(partition_id),
                        new=topic.partitions.get(partition_id),
                    )
            else:
                accounts.account_changes(topic_id, delta.image.partitions, delta.partition_changes)

        return TopicsImage(
            frozen_map(by_id),
            frozen_map(by_name),
            leaders=accounts.leaders.build(),
            isr_members=accounts.isr_members.build(),
            replicas=accounts.replicas.build(),
            offline_partition_count=accounts.offline,
            preferred_replica_imbalance_count=accounts.imbalanced,
        )


# A partition's change as the indexes and counts see it: (offline delta, imbalance delta, and per
# reverse index whose holders change, the brokers it leaves and those it joins).
_Move = tuple[int, int, tuple[tuple["_IndexBuilder", tuple[int, ...], tuple[int, ...]], ...]]


class _Accounts:
    """The reverse indexes and partition-health counts of a new image, moved from the base
    image's by the partitions that changed: per distinct (old, new) registration pair and topic,
    not per partition (one broker's fence at 100k partitions changes 100k partitions through a
    few pairs)."""

    def __init__(self, base: TopicsImage) -> None:
        self.leaders = _IndexBuilder(base.leaders)
        self.isr_members = _IndexBuilder(base.isr_members)
        self.replicas = _IndexBuilder(base.replicas)
        self.offline = base.offline_partition_count
        self.imbalanced = base.preferred_replica_imbalance_count
        self._moves: dict[tuple[int, int], tuple[PartitionRegistration | None, PartitionRegistration | None, _Move]] = {}

    def account_changes(
        self, topic_id: uuid.UUID, old: Mapping[int, PartitionRegistration], new: Mapping[int, PartitionRegistration]
    ) -> None:
        """`account` of every partition in `new` against its registration in `old`. Partitions in
        the same state share their registration (`MergeMemo`), so each distinct (old, new) pair is
        accounted once for all its partitions, and what it moves is worked out once per apply."""
        pairs: dict[tuple[int, int], tuple[PartitionRegistration | None, PartitionRegistration, list[int]]] = {}
        for partition_id, registration in new.items():
            # Both registrations are held by `old` and `new`, so their ids stay theirs meanwhile.
            before = old.get(partition_id)
            group = pairs.get((id(before), id(registration)))
            if group is None:
                pairs[id(before), id(registration)] = (before, registration, [partition_id])
            else:
                group[2].append(partition_id)
        for before, registration, partition_ids in pairs.values():
            self._account_all(topic_id, partition_ids, old=before, new=registration)

    def account(
        self, topic_id: uuid.UUID, partition_id: int, *, old: PartitionRegistration | None,
        new: PartitionRegistration | None,
    ) -> None:
        self._account_all(topic_id, (partition_id,), old=old, new=new)

    def _account_all(
        self, topic_id: uuid.UUID, partition_ids: Sequence[int], *, old: PartitionRegistration | None,
        new: PartitionRegistration | None,
    ) -> None:
        offline, imbalanced, moves = self._move_of(old, new)
        count = len(partition_ids)
        self.offline += count * offline
        self.imbalanced += count * imbalanced
        for index, leave, join in moves:
            index.move(topic_id, partition_ids, leave=leave, join=join)

    def _move_of(self, old: PartitionRegistration | None, new: PartitionRegistration | None) -> _Move:
        """What a partition going from `old` to `new` (None: absent) changes: the offline and
        imbalance counts, and per reverse index the brokers it leaves and joins. Remembered per
        (old, new) pair, which the entry holds (so the ids in its key stay theirs)."""
        found = self._moves.get((id(old), id(new)))
        if found is not None:
            return found[2]
        offline = imbalanced = 0
        old_roles: tuple[tuple[int, ...], ...] = ((), (), ())
        new_roles: tuple[tuple[int, ...], ...] = ((), (), ())
        if old is not None:
            # Leaderless counts as offline, and never as having its preferred (first) replica lead.
            offline -= old.leader == NO_LEADER
            imbalanced -= old.leader == NO_LEADER or not old.replicas or old.leader != old.replicas[0]
            old_roles = (() if old.leader == NO_LEADER else (old.leader,), old.isr, old.replicas)
        if new is not None:
            offline += new.leader == NO_LEADER
            imbalanced += new.leader == NO_LEADER or not new.replicas or new.leader != new.replicas[0]
            new_roles = (() if new.leader == NO_LEADER else (new.leader,), new.isr, new.replicas)
        moves = []
        for index, before, after in zip((self.leaders, self.isr_members, self.replicas), old_roles, new_roles,
                                        strict=True):
            leave = tuple(b for b in before if b not in after)
            join = tuple(b for b in after if b not in before)
            if leave or join:
                moves.append((index, leave, join))
        move = (offline, imbalanced, tuple(moves))
        self._moves[id(old), id(new)] = (old, new, move)
        return move
