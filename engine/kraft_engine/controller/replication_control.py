"""Topics, partitions, ISR and leadership: the core of Kafka's ReplicationControlManager.

Every broker lifecycle event that affects partitions (fencing, unfencing, controlled shutdown,
unregistration, a new incarnation after an unclean shutdown) fans out through one primitive,
`_leader_and_isr_updates`, over a broker → partitions reverse index of ISR membership (and,
with KIP-966's eligible leader replicas, of ELR membership), and runs the PartitionChangeBuilder
per partition. Generation and replay are separate: only the
replay methods change the timeline state.
"""

from __future__ import annotations

import datetime
import operator
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Generic, TypeVar

from kio.schema.alter_partition.v3 import request as alter_partition_request
from kio.schema.alter_partition.v3 import response as alter_partition_response
from kio.schema.alter_partition_reassignments.v1 import request as reassignments_request
from kio.schema.alter_partition_reassignments.v1 import response as reassignments_response
from kio.schema.assign_replicas_to_dirs.v0 import request as dirs_request
from kio.schema.assign_replicas_to_dirs.v0 import response as dirs_response
from kio.schema.create_partitions.v3 import response as create_partitions_response
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.create_topics.v7.response import CreatableTopicConfigs, CreatableTopicResult
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest
from kio.schema.delete_topics.v6.response import DeletableTopicResult
from kio.schema.elect_leaders.v2 import request as elect_leaders_request
from kio.schema.elect_leaders.v2 import response as elect_leaders_response
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0 import request as list_reassignments_request
from kio.schema.list_partition_reassignments.v0 import response as list_reassignments_response
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from kraft_engine.controller.broker_heartbeat import BrokerControlState
from kraft_engine.controller.cluster_control import ClusterControlManager
from kraft_engine.controller.config_schema import parse_bool
from kraft_engine.controller.configuration_control import ConfigurationControlManager
from kraft_engine.controller.feature_control import FeatureControlManager
from kraft_engine.controller.partition_change import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    Election,
    PartitionChange,
    PartitionChangeBuilder,
)
from kraft_engine.controller.replica_placement import StripedReplicaPlacer, UsableBroker
from kraft_engine.controller.results import (
    MAX_PARTITIONS_PER_BATCH,
    ApiError,
    ControllerApiError,
    ControllerResult,
    RecordAndVersion,
    RecordList,
    RecordSink,
    check_request_size,
    check_user_op_size,
)
from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap, TimelineHashSet
from kraft_engine.kafka_uuid import ONE_UUID, ZERO_UUID
from kraft_engine.metadata import LeaderRecoveryState, MergeMemo, PartitionRegistration
from kraft_engine.records import (
    BrokerRegistrationChangeRecord,
    ClearElrRecord,
    ConfigRecord,
    MetadataVersion,
    PartitionChangeRecord,
    PartitionChangeRun,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)

if TYPE_CHECKING:
    import random

__all__ = ["BrokerHeartbeatReply", "ReplicationControlManager"]

_TOPIC_RESOURCE_TYPE = 2  # ConfigResource.Type.TOPIC
_MIN_ISR = "min.insync.replicas"
_UNCLEAN = "unclean.leader.election.enable"
_MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
# Kafka's DirectoryId: MIGRATING (0, 0), UNASSIGNED (0, 1), LOST (0, 2).
_MIGRATING_DIRECTORY = ZERO_UUID
_UNASSIGNED_DIRECTORY = ONE_UUID
_LOST_DIRECTORY = uuid.UUID(int=2)
_RESERVED_DIRECTORIES = frozenset({_UNASSIGNED_DIRECTORY, _MIGRATING_DIRECTORY, _LOST_DIRECTORY})

# ElectLeaders' election_type codes.
_ELECTION_PREFERRED = 0
_ELECTION_UNCLEAN = 1

MAX_ELECTIONS_PER_IMBALANCE = 1000
"""Kafka's maxElectionsPerImbalance: the most elections one balancing or recovery run writes."""

TopicPartition = tuple[uuid.UUID, int]

M = TypeVar("M")
T = TypeVar("T")

_NO_BROKERS: tuple[int, ...] = ()
_NO_DIRECTORIES: tuple[uuid.UUID, ...] = ()


PackedPartition = int
"""A partition as one int, (topic id's integer << 32) | partition id, in the controller's
partition sets and reverse indexes. Hashing a (Uuid, int) tuple calls Uuid.__hash__, a Python
function, and the sets hash their key several times per change (membership, the timeline's
saved value, the store): an int hashes in C. Packed partitions also sort as plain ints in
Kafka's order of partitions, by topic id then partition id (a Uuid's text is its integer in
fixed-width hex, so the integers order as the text does)."""

_PARTITION_BITS = 32
_PARTITION_MASK = (1 << _PARTITION_BITS) - 1


def _pack(key: TopicPartition) -> PackedPartition:
    return key[0].int << _PARTITION_BITS | key[1]


def _pack_ids(topic_id: uuid.UUID, partition_id: int) -> PackedPartition:
    # A negative partition id packs to itself (its sign bits cover the topic's), which no stored
    # partition is: lookups of ids outside int32 (which kio refuses to decode) simply miss.
    return topic_id.int << _PARTITION_BITS | partition_id


def _is_imbalanced(partition: PartitionRegistration) -> bool:
    return partition.leader != NO_LEADER and bool(partition.replicas) and partition.leader != partition.replicas[0]


def _is_reassigning(partition: PartitionRegistration) -> bool:
    return bool(partition.adding_replicas or partition.removing_replicas)


def _move(members: TimelineHashSet[PackedPartition], key: PackedPartition, *, now: bool) -> None:
    if now:
        members.add(key)
    else:
        members.discard(key)


class _PartitionsByMember(Generic[M]):
    """A reverse index (broker or directory -> partitions), revertible membership by membership.

    One timeline set per member rather than one timeline map of member -> frozenset: replacing a
    frozenset copies every partition the member holds, which made each PartitionRecord or
    PartitionChangeRecord cost O(partitions per broker), and creating or fencing at 100k
    partitions quadratic. A member whose set empties keeps its (empty) set; that reads the same
    as having none, at every snapshot.
    """

    def __init__(self, registry: SnapshotRegistry, *, ignored: frozenset[M] = frozenset()) -> None:
        self._registry = registry
        self._ignored = ignored
        self._sets: dict[M, TimelineHashSet[PackedPartition]] = {}

    def members(self, member: M) -> Iterable[PackedPartition]:
        found = self._sets.get(member)
        return () if found is None else found

    def update_many(self, keys: list[PackedPartition], *, old: Sequence[M], new: Sequence[M]) -> None:
        """`update` of each key, every one moving from `old` members to `new` ones."""
        if old == new:
            return
        for member in old:
            if member not in new and member not in self._ignored:
                self._sets[member].discard_many(keys)
        for member in new:
            if member not in old and member not in self._ignored:
                found = self._sets.get(member)
                if found is None:
                    found = self._sets[member] = TimelineHashSet(self._registry)
                found.add_many(keys)

    def update(self, key: PackedPartition, *, old: Sequence[M], new: Sequence[M]) -> None:
        if old == new:
            return
        for member in old:
            if member not in new and member not in self._ignored:
                self._sets[member].discard(key)
        for member in new:
            if member not in old and member not in self._ignored:
                found = self._sets.get(member)
                if found is None:
                    found = self._sets[member] = TimelineHashSet(self._registry)
                found.add(key)


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatReply:
    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


def _topic_name_error(name: str) -> str | None:
    """Kafka's Topic.validate message, or None for a legal name."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > _MAX_TOPIC_NAME_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {_MAX_TOPIC_NAME_LENGTH} characters, "
            f"topic name: {name}"
        )
    if any(c not in _LEGAL_TOPIC_CHARS for c in name):
        return (
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, "
            "'.', '_' and '-'"
        )
    return None


class ReplicationControlManager:
    def __init__(
        self,
        registry: SnapshotRegistry,
        *,
        cluster_control: ClusterControlManager,
        feature_control: FeatureControlManager,
        rng: random.Random,
        default_num_partitions: int = 1,
        default_replication_factor: int = 1,
        configuration_control: ConfigurationControlManager | None = None,
    ) -> None:
        self._cluster = cluster_control
        self._features = feature_control
        self._rng = rng
        self._placer = StripedReplicaPlacer(rng)
        self._configuration = configuration_control
        self.default_num_partitions = default_num_partitions
        self.default_replication_factor = default_replication_factor
        self._topics_by_name: TimelineHashMap[str, uuid.UUID] = TimelineHashMap(registry)
        self._topic_names: TimelineHashMap[uuid.UUID, str] = TimelineHashMap(registry)
        self._partition_counts: TimelineHashMap[uuid.UUID, int] = TimelineHashMap(registry)
        self._partitions: TimelineHashMap[PackedPartition, PartitionRegistration] = TimelineHashMap(registry)
        # Reverse index: broker id -> partitions whose ISR holds it (leaders are always in it).
        self._brokers_to_isrs: _PartitionsByMember[int] = _PartitionsByMember(registry)
        # Reverse index: broker id -> partitions whose ELR holds it (Kafka's BrokersToElrs).
        self._brokers_to_elrs: _PartitionsByMember[int] = _PartitionsByMember(registry)
        self._leaderless: TimelineHashSet[PackedPartition] = TimelineHashSet(registry)
        self._imbalanced: TimelineHashSet[PackedPartition] = TimelineHashSet(registry)
        self._reassigning: TimelineHashSet[PackedPartition] = TimelineHashSet(registry)
        # The topic ids of packed partitions, by their integer: revertible like the sets, so that
        # every packed partition a set holds, at any epoch, unpacks to its topic.
        self._topic_ids_by_int: TimelineHashMap[int, uuid.UUID] = TimelineHashMap(registry)
        # Reverse index: log directory -> partitions with a replica assigned to it (JBOD).
        self._directories_to_partitions: _PartitionsByMember[uuid.UUID] = _PartitionsByMember(
            registry, ignored=_RESERVED_DIRECTORIES
        )

    # -- reads -----------------------------------------------------------------------------

    def topic_id(self, name: str, epoch: int | None = None) -> uuid.UUID | None:
        return self._topics_by_name.get(name, epoch)

    def partition(self, topic_id: uuid.UUID, partition_id: int, epoch: int | None = None) -> PartitionRegistration | None:
        if not 0 <= partition_id <= _PARTITION_MASK >> 1:
            return None
        return self._partitions.get(_pack_ids(topic_id, partition_id), epoch)

    def _unpack(self, packed: PackedPartition, epoch: int | None = None) -> TopicPartition:
        topic_id = self._topic_ids_by_int.get(packed >> _PARTITION_BITS, epoch)
        if topic_id is None:
            raise RuntimeError(f"partition set holds partition {packed & _PARTITION_MASK} of an unknown topic")
        return topic_id, packed & _PARTITION_MASK

    def _unpacked(self, packed: Iterable[PackedPartition]) -> list[TopicPartition]:
        """In Kafka's partition order."""
        return [self._unpack(p) for p in sorted(packed)]

    def partitions_with_broker_in_isr(self, broker_id: int) -> list[TopicPartition]:
        return self._unpacked(self._brokers_to_isrs.members(broker_id))

    def partitions_with_broker_in_elr(self, broker_id: int) -> list[TopicPartition]:
        return self._unpacked(self._brokers_to_elrs.members(broker_id))

    def _in_isr(self, broker_id: int) -> list[PackedPartition]:
        return sorted(self._brokers_to_isrs.members(broker_id))

    def _in_elr(self, broker_id: int) -> list[PackedPartition]:
        return sorted(self._brokers_to_elrs.members(broker_id))

    def has_leaderships(self, broker_id: int) -> bool:
        return any(
            (p := self._partitions.get(packed)) is not None and p.leader == broker_id
            for packed in self._brokers_to_isrs.members(broker_id)
        )

    def offline_partition_count(self) -> int:
        """Kafka's OfflinePartitionsCount metric."""
        return len(self._leaderless)

    def preferred_replica_imbalance_count(self) -> int:
        """Kafka's PreferredReplicaImbalanceCount metric."""
        return len(self._imbalanced)

    def global_topic_count(self) -> int:
        return len(self._topics_by_name)

    def global_partition_count(self) -> int:
        return len(self._partitions)

    # -- replay ----------------------------------------------------------------------------

    def replay_topic(self, record: TopicRecord, offset: int) -> None:
        self._topics_by_name.put(record.name, record.topic_id)
        self._topic_names.put(record.topic_id, record.name)
        self._partition_counts.put(record.topic_id, 0)
        self._topic_ids_by_int.put(record.topic_id.int, record.topic_id)

    def replay_partition(self, record: PartitionRecord, offset: int) -> None:
        if record.topic_id not in self._topic_names:
            raise RuntimeError(f"PartitionRecord at offset {offset} names unknown topic {record.topic_id}")
        if not 0 <= record.partition_id <= _PARTITION_MASK >> 1:
            raise RuntimeError(f"PartitionRecord at offset {offset} has invalid partition id {record.partition_id}")
        key = (record.topic_id, int(record.partition_id))
        previous = self._partitions.get(_pack(key))
        if previous is None:
            self._partition_counts.put(record.topic_id, (self._partition_counts.get(record.topic_id) or 0) + 1)
        self._set_partition(key, previous, PartitionRegistration.from_record(record))

    def replay_partition_change(self, record: PartitionChangeRecord, offset: int) -> None:
        key = (record.topic_id, int(record.partition_id))
        previous = self._partitions.get(_pack(key))
        if previous is None:
            raise RuntimeError(f"PartitionChangeRecord at offset {offset} names unknown partition {key}")
        self._set_partition(key, previous, previous.merge(record))

    def replay_partition_changes(self, records: Sequence[PartitionChangeRecord], base_offset: int) -> None:
        """`replay_partition_change` of each record in turn (record i at `base_offset + i`), all or
        nothing: every merge is done before anything changes, so a record that cannot be applied
        raises with the controller's state as it was. A fence writes one record per partition of
        the broker; here they cost a merge each and one pass over the partitions map and the
        reverse indexes, not a timeline write and an index move per record."""
        latest = self._partitions.latest()
        merge = MergeMemo().merge
        changed: dict[PackedPartition, tuple[PartitionRegistration, PartitionRegistration]] = {}
        for index, record in enumerate(records):
            packed = record.topic_id.int << _PARTITION_BITS | record.partition_id
            found = changed.get(packed)
            if found is None:
                previous = latest.get(packed)
                if previous is None:
                    raise RuntimeError(
                        f"PartitionChangeRecord at offset {base_offset + index} names unknown partition "
                        f"{(record.topic_id, int(record.partition_id))}"
                    )
                changed[packed] = (previous, merge(previous, record))
            else:
                changed[packed] = (found[0], merge(found[1], record))
        self._partitions.put_many({packed: pair[1] for packed, pair in changed.items()})
        self._reindex_many(changed)

    def replay_partition_change_run(self, run: PartitionChangeRun, base_offset: int) -> None:
        """`replay_partition_changes` of a fan-out's run (`records.record_runs`), without building
        its records: the partitions of one change whose registrations are one object (as the
        fan-out groups them) get one merge, one bulk store and one reverse-index move between
        them. All or nothing; it raises (and changes nothing) on a partition it does not know or
        that the run names twice, and the caller replays the records one by one."""
        latest_get = self._partitions.latest().get
        bits = _PARTITION_BITS
        packeds = [topic_id.int << bits | partition_id
                   for topic_id, partition_id in zip(run.topic_ids, run.partition_ids, strict=True)]
        if len(set(packeds)) != len(packeds):
            raise RuntimeError(f"a run from offset {base_offset} changes a partition twice")
        members: list[list[PackedPartition]] = [[] for _ in run.changes]
        adders = [group.append for group in members]
        for kind, packed in zip(run.kinds, packeds, strict=True):
            adders[kind](packed)
        merge = MergeMemo().merge
        groups: list[tuple[PartitionRegistration, PartitionRegistration, list[PackedPartition]]] = []
        for change, group in zip(run.changes, members, strict=True):
            if not group:
                continue
            first = latest_get(group[0])
            if first is not None and all(map(operator.is_, map(latest_get, group), repeat(first))):
                groups.append((first, merge(first, change), group))
                continue
            by_previous: dict[int, tuple[PartitionRegistration, PartitionRegistration, list[PackedPartition]]] = {}
            for packed in group:
                registration = latest_get(packed)
                if registration is None:
                    raise RuntimeError(f"a run from offset {base_offset} names an unknown partition")
                found = by_previous.get(id(registration))
                if found is None:
                    found = by_previous[id(registration)] = (registration, merge(registration, change), [])
                found[2].append(packed)
            groups.extend(by_previous.values())
        # Every merge is done: from here on nothing can fail half way.
        for previous, current, packed_group in groups:
            self._partitions.put_same(packed_group, current, previous=previous)
        self._reindex_groups(groups)

    def _reindex_many(self, changed: dict[PackedPartition, tuple[PartitionRegistration, PartitionRegistration]]) -> None:
        """`_reindex` of every (previous, current) pair, with each reverse-index move done once per
        distinct (old ISR, new ISR) pair and each partition set changed once. Partitions share
        registrations (`MergeMemo`), so the pairs are grouped by identity first and each distinct
        pair is looked at once."""
        pairs: dict[tuple[int, int], tuple[PartitionRegistration, PartitionRegistration, list[PackedPartition]]] = {}
        for packed, (previous, current) in changed.items():
            # `changed` holds both registrations, so their ids are theirs until this returns.
            group = pairs.get((id(previous), id(current)))
            if group is None:
                pairs[id(previous), id(current)] = (previous, current, [packed])
            else:
                group[2].append(packed)
        self._reindex_groups(pairs.values())

    def _reindex_groups(
        self, groups: Iterable[tuple[PartitionRegistration, PartitionRegistration, list[PackedPartition]]],
    ) -> None:
        """`_reindex` of each group's partitions, all going from the group's previous registration
        to its current one."""
        isr_moves: dict[tuple[tuple[int, ...], tuple[int, ...]], list[PackedPartition]] = {}
        leaderless: tuple[list[PackedPartition], list[PackedPartition]] = ([], [])
        imbalanced: tuple[list[PackedPartition], list[PackedPartition]] = ([], [])
        for previous, current, packeds in groups:
            if (
                previous.replicas is not current.replicas or previous.directories is not current.directories
                or previous.elr != current.elr or previous.adding_replicas != current.adding_replicas
                or previous.removing_replicas != current.removing_replicas
            ):
                # The rarer changes (assignment, directories, ELR, reassignment) one by one.
                for packed in packeds:
                    self._reindex(packed, previous, current)
                continue
            if previous.isr != current.isr:
                moves = isr_moves.get((previous.isr, current.isr))
                if moves is None:
                    isr_moves[previous.isr, current.isr] = list(packeds)
                else:
                    moves.extend(packeds)
            if previous.leader != current.leader:
                was = previous.leader == NO_LEADER
                if was != (current.leader == NO_LEADER):
                    leaderless[was].extend(packeds)
                was = _is_imbalanced(previous)
                if was != _is_imbalanced(current):
                    imbalanced[was].extend(packeds)
        for (old, new), partitions in isr_moves.items():
            self._brokers_to_isrs.update_many(partitions, old=old, new=new)
        for moved, members in ((leaderless, self._leaderless), (imbalanced, self._imbalanced)):
            if moved[0]:
                members.add_many(moved[0])
            if moved[1]:
                members.discard_many(moved[1])

    def replay_clear_elr(self, record: ClearElrRecord, offset: int) -> None:
        """Kafka's replay(ClearElrRecord): the ELR and last known ELR of the named topic's partitions
        (every topic's, for the empty name) are emptied in place, each merged as a
        PartitionChangeRecord would be (the partition epoch moves)."""
        if record.topic_name:
            topic_id = self._topics_by_name.get(record.topic_name)
            if topic_id is None:
                raise RuntimeError(f"ClearElrRecord at offset {offset} names unknown topic {record.topic_name!r}")
            topic_ids = [topic_id]
        else:
            topic_ids = list(self._topic_names.keys())
        for topic_id in topic_ids:
            for partition_id in range(self._partition_counts.get(topic_id) or 0):
                key = (topic_id, partition_id)
                previous = self._partitions.get(_pack(key))
                if previous is not None and (cleared := previous.with_elr_cleared(topic_id, partition_id)) is not None:
                    self._set_partition(key, previous, cleared)

    def replay_remove_topic(self, record: RemoveTopicRecord, offset: int) -> None:
        name = self._topic_names.get(record.topic_id)
        if name is None:
            raise RuntimeError(f"RemoveTopicRecord at offset {offset} names unknown topic {record.topic_id}")
        for partition_id in range(self._partition_counts.get(record.topic_id) or 0):
            key = (record.topic_id, partition_id)
            previous = self._partitions.get(_pack(key))
            if previous is not None:
                self._unindex(key, previous)
                self._partitions.remove(_pack(key))
        self._topics_by_name.remove(name)
        self._topic_names.remove(record.topic_id)
        self._partition_counts.remove(record.topic_id)
        self._topic_ids_by_int.remove(record.topic_id.int)
        if self._configuration is not None:
            self._configuration.delete_topic_configs(name)

    def _set_partition(self, key: TopicPartition, previous: PartitionRegistration | None,
                       current: PartitionRegistration) -> None:
        packed = _pack(key)
        self._partitions.put(packed, current)
        self._reindex(packed, previous, current)

    def _unindex(self, key: TopicPartition, previous: PartitionRegistration) -> None:
        self._reindex(_pack(key), previous, None)

    def _reindex(self, packed: PackedPartition, previous: PartitionRegistration | None,
                 current: PartitionRegistration | None) -> None:
        """Move the partition between the reverse indexes and partition sets it belongs to, touching only
        the memberships that change (a leader move leaves the ISR index alone). This runs for
        every partition record replayed, so each role is compared before anything is called."""
        old_isr = _NO_BROKERS if previous is None else previous.isr
        new_isr = _NO_BROKERS if current is None else current.isr
        if old_isr != new_isr:
            self._brokers_to_isrs.update(packed, old=old_isr, new=new_isr)
        old_elr = _NO_BROKERS if previous is None else previous.elr
        new_elr = _NO_BROKERS if current is None else current.elr
        if old_elr != new_elr:
            self._brokers_to_elrs.update(packed, old=old_elr, new=new_elr)
        old_directories = _NO_DIRECTORIES if previous is None else previous.directories
        new_directories = _NO_DIRECTORIES if current is None else current.directories
        if old_directories != new_directories:
            self._directories_to_partitions.update(packed, old=old_directories, new=new_directories)
        was = previous is not None and previous.leader == NO_LEADER
        now = current is not None and current.leader == NO_LEADER
        if was != now:
            _move(self._leaderless, packed, now=now)
        was = previous is not None and _is_imbalanced(previous)
        now = current is not None and _is_imbalanced(current)
        if was != now:
            _move(self._imbalanced, packed, now=now)
        was = previous is not None and _is_reassigning(previous)
        now = current is not None and _is_reassigning(current)
        if was != now:
            _move(self._reassigning, packed, now=now)

    # -- CreateTopics ----------------------------------------------------------------------

    def _check_create_topics_size(self, request: CreateTopicsRequest) -> None:
        """Kafka's validateTotalNumberOfPartitions, then the records the request would need at
        least, both before any record is built."""
        total_partitions = 0
        records = 0
        for topic in request.topics:
            if topic.assignments:
                partitions = len(topic.assignments)
            elif topic.num_partitions == -1:
                partitions = self.default_num_partitions
            else:
                partitions = max(int(topic.num_partitions), 0)
            total_partitions += partitions
            if partitions and topic.name not in self._topics_by_name:
                records += 1 + partitions + len(topic.configs)
        if total_partitions > MAX_PARTITIONS_PER_BATCH:
            raise ControllerApiError(ErrorCode.policy_violation, "Excessively large number of partitions per request.")
        check_request_size(len(request.topics))
        check_request_size(records)

    def create_topics(self, request: CreateTopicsRequest) -> ControllerResult[tuple[CreatableTopicResult, ...]]:
        self._check_create_topics_size(request)
        records: list[RecordAndVersion] = []
        results: list[CreatableTopicResult] = []
        names = Counter(t.name for t in request.topics)
        facts = _ClusterFacts(self)
        for topic in request.topics:
            if names[topic.name] > 1:
                results.append(self._topic_error(topic.name, ErrorCode.invalid_request,
                                                 "Duplicate topic name."))
                continue
            try:
                topic_records, result = self._create_topic(topic, facts)
            except ControllerApiError as error:
                results.append(self._topic_error(topic.name, error.error_code, error.message))
                continue
            records.extend(topic_records)
            results.append(result)
        check_user_op_size(records)
        if request.validate_only:
            return ControllerResult((), tuple(results))
        return ControllerResult(records, tuple(results), is_atomic=True)

    @staticmethod
    def _topic_error(name: str, code: ErrorCode, message: str | None) -> CreatableTopicResult:
        return CreatableTopicResult(name=TopicName(name), topic_id=ZERO_UUID, error_code=code, error_message=message,
                                    configs=None)

    def _create_topic(
        self, topic: CreatableTopic, facts: _ClusterFacts
    ) -> tuple[list[RecordAndVersion], CreatableTopicResult]:
        error = _topic_name_error(topic.name)
        if error is not None:
            raise ControllerApiError(ErrorCode.invalid_topic_exception, error)
        if topic.name in self._topics_by_name:
            raise ControllerApiError(ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists.")
        mv = self._features.metadata_version_or_raise()
        if topic.assignments:
            if topic.replication_factor != -1:
                raise ControllerApiError(ErrorCode.invalid_request, "A manual partition assignment was specified, "
                                         "but replication factor was not set to -1.")
            if topic.num_partitions != -1:
                raise ControllerApiError(ErrorCode.invalid_request, "A manual partition assignment was specified, "
                                         "but numPartitions was not set to -1.")
            assignments = self._manual_assignments(topic)
        else:
            if topic.replication_factor < -1 or topic.replication_factor == 0:
                raise ControllerApiError(ErrorCode.invalid_replication_factor,
                                         "Replication factor must be larger than 0, or -1 to use the default value.")
            if topic.num_partitions < -1 or topic.num_partitions == 0:
                raise ControllerApiError(ErrorCode.invalid_partitions,
                                         "Number of partitions was set to an invalid non-positive value.")
            num_partitions = self.default_num_partitions if topic.num_partitions == -1 else int(topic.num_partitions)
            replication_factor = (
                self.default_replication_factor if topic.replication_factor == -1 else int(topic.replication_factor)
            )
            try:
                assignments = self._placer.place(num_partitions=num_partitions, replication_factor=replication_factor,
                                                 usable_brokers=facts.usable_brokers())
            except ControllerApiError as failure:
                raise ControllerApiError(
                    failure.error_code,
                    f"Unable to replicate the partition {replication_factor} time(s): {failure.message}",
                ) from None
        configs = {c.name: c.value for c in topic.configs if c.value is not None}
        if self._configuration is not None:
            self._configuration.validate_new_topic_configs(configs, replication_factor=len(assignments[0]))
        topic_id = uuid.UUID(bytes=self._rng.randbytes(16))
        while topic_id in (ZERO_UUID, ONE_UUID) or topic_id in self._topic_names:
            topic_id = uuid.UUID(bytes=self._rng.randbytes(16))
        records = [RecordAndVersion(TopicRecord(name=topic.name, topic_id=topic_id), 0)]
        for config in topic.configs:
            records.append(RecordAndVersion(ConfigRecord(resource_type=_TOPIC_RESOURCE_TYPE, resource_name=topic.name,
                                                         name=config.name, value=config.value), 0))
        for partition_id, replicas in enumerate(assignments):
            records.append(self._new_partition_record(topic_id, partition_id, replicas, mv=mv, manual=bool(
                topic.assignments), facts=facts))
        replication_factor = len(assignments[0]) if assignments else 0
        result = CreatableTopicResult(
            name=topic.name, topic_id=topic_id, error_code=ErrorCode.none, error_message=None,
            num_partitions=i32(len(assignments)), replication_factor=i16(replication_factor),
            configs=facts.effective_topic_configs(configs),
        )
        return records, result

    def _new_partition_record(
        self, topic_id: uuid.UUID, partition_id: int, replicas: list[int], *, mv: MetadataVersion, manual: bool,
        facts: _ClusterFacts,
    ) -> RecordAndVersion:
        """A new partition led by its first active replica; the ISR is its active replicas."""
        isr = tuple(r for r in replicas if facts.is_active_broker(r))
        if not isr:
            if manual:
                raise ControllerApiError(
                    ErrorCode.invalid_replica_assignment,
                    f"All brokers specified in the manual partition assignment for partition {partition_id} are "
                    "fenced or in controlled shutdown.",
                )
            raise ControllerApiError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {len(replicas)} time(s): All brokers are currently fenced "
                "or in controlled shutdown.",
            )
        directories: tuple[uuid.UUID, ...] = ()
        if mv.is_directory_assignment_supported:
            directories = tuple(facts.default_directory(r) for r in replicas)
        record = PartitionRecord(
            partition_id=partition_id, topic_id=topic_id, replicas=tuple(replicas), isr=isr,
            removing_replicas=(), adding_replicas=(), leader=isr[0], leader_recovery_state=0,
            leader_epoch=0, partition_epoch=0, directories=directories,
        )
        return RecordAndVersion(record, mv.partition_record_version)

    def _manual_assignments(self, topic: CreatableTopic) -> list[list[int]]:
        by_index: dict[int, list[int]] = {}
        replication_factor: int | None = None
        for assignment in topic.assignments:
            index = int(assignment.partition_index)
            if index in by_index:
                raise ControllerApiError(ErrorCode.invalid_replica_assignment,
                                         f"Found multiple manual partition assignments for partition {index}")
            replicas = [int(b) for b in assignment.broker_ids]
            self.validate_manual_assignment(replicas, replication_factor=replication_factor)
            replication_factor = len(replicas)
            by_index[index] = replicas
        if sorted(by_index) != list(range(len(by_index))):
            raise ControllerApiError(ErrorCode.invalid_replica_assignment,
                                     "partitions should be a consecutive 0-based integer sequence")
        return [by_index[i] for i in range(len(by_index))]

    def validate_manual_assignment(self, replicas: list[int], *, replication_factor: int | None) -> None:
        """Kafka's checks of an assignment given by an admin (CreateTopics, CreatePartitions,
        AlterPartitionReassignments)."""
        if not replicas:
            raise ControllerApiError(ErrorCode.invalid_replica_assignment,
                                     "The manual partition assignment includes an empty replica list.")
        previous: int | None = None
        for broker in sorted(replicas):
            if self._cluster.broker(broker) is None:
                raise ControllerApiError(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes broker {broker}, but no such broker is registered.",
                )
            if broker == previous:
                raise ControllerApiError(ErrorCode.invalid_replica_assignment,
                                         f"The manual partition assignment includes the broker {broker} more than once.")
            previous = broker
        if replication_factor is not None and len(replicas) != replication_factor:
            raise ControllerApiError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
                f"this is not consistent with previous partitions, which have {replication_factor} replica(s).",
            )

    def _usable_brokers(self) -> list[UsableBroker]:
        """Registered brokers that are not shutting down, in id order (Kafka's usableBrokers)."""
        heartbeat = self._cluster.heartbeat_manager
        return [
            UsableBroker(broker_id, registration.rack, registration.fenced)
            for broker_id, registration in sorted(self._cluster.brokers().items())
            if not registration.in_controlled_shutdown
            and (heartbeat is None or not heartbeat.is_shutting_down(broker_id))
        ]

    def _default_directory(self, broker_id: int) -> uuid.UUID:
        """Kafka's ClusterControlManager.defaultDir: a broker with one directory gets it; one with
        several picks and reports it (AssignReplicasToDirs); one that never reported any (before
        3.7-IV2) is migrating."""
        registration = self._cluster.broker(broker_id)
        if registration is None:
            return _UNASSIGNED_DIRECTORY
        if not registration.directories:
            return _MIGRATING_DIRECTORY
        if len(registration.directories) == 1:
            return registration.directories[0]
        return _UNASSIGNED_DIRECTORY

    def _has_online_dir(self, broker_id: int, directory: uuid.UUID) -> bool:
        """Kafka's DirectoryId.isOnline against the broker's registered online directories."""
        # The reserved ids compared as integers: Uuid.__eq__ is a Python call, and elections ask
        # this for every candidate leader of every partition in a fan-out.
        marker = directory.int
        if marker in (_UNASSIGNED_DIRECTORY.int, _MIGRATING_DIRECTORY.int):
            return True
        if marker == _LOST_DIRECTORY.int:
            return False
        registration = self._cluster.broker(broker_id)
        if registration is None:
            return False
        return not registration.directories or directory in registration.directories

    # -- CreatePartitions ------------------------------------------------------------------

    def create_partitions(
        self, request: CreatePartitionsRequest
    ) -> ControllerResult[create_partitions_response.CreatePartitionsResponse]:
        check_request_size(len(request.topics))
        additional = 0
        for topic in request.topics:
            topic_id = self._topics_by_name.get(topic.name)
            if topic_id is not None:
                additional += max(int(topic.count) - (self._partition_counts.get(topic_id) or 0), 0)
        check_request_size(additional)
        records: list[RecordAndVersion] = []
        results: list[create_partitions_response.CreatePartitionsTopicResult] = []
        names = Counter(t.name for t in request.topics)
        facts = _ClusterFacts(self)
        for topic in request.topics:
            error = ApiError.NONE
            if names[topic.name] > 1:
                error = ApiError(ErrorCode.invalid_request, "Duplicate topic name.")
            else:
                try:
                    records.extend(self._create_partitions(topic, facts))
                except ControllerApiError as failure:
                    error = ApiError(failure.error_code, failure.message)
            results.append(create_partitions_response.CreatePartitionsTopicResult(
                name=topic.name, error_code=error.error_code, error_message=error.message,
            ))
        check_user_op_size(records)
        response = create_partitions_response.CreatePartitionsResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), results=tuple(results),
        )
        if request.validate_only:
            return ControllerResult((), response)
        return ControllerResult(records, response, is_atomic=True)

    def _create_partitions(self, topic: CreatePartitionsTopic, facts: _ClusterFacts) -> list[RecordAndVersion]:
        topic_id = self._topics_by_name.get(topic.name)
        if topic_id is None:
            raise ControllerApiError(ErrorCode.unknown_topic_or_partition)
        existing = self._partition_counts.get(topic_id) or 0
        count = int(topic.count)
        if count == existing:
            raise ControllerApiError(ErrorCode.invalid_partitions, f"Topic already has {existing} partition(s).")
        if count < existing:
            raise ControllerApiError(
                ErrorCode.invalid_partitions,
                f"The topic {topic.name} currently has {existing} partition(s); {count} would not be an increase.",
            )
        additional = count - existing
        if topic.assignments is not None and len(topic.assignments) != additional:
            raise ControllerApiError(
                ErrorCode.invalid_replica_assignment,
                f"Attempted to add {additional} additional partition(s), but only {len(topic.assignments)} "
                "assignment(s) were specified.",
            )
        current = [self._partitions.get(_pack_ids(topic_id, p)) for p in range(existing)]
        first = current[0] if current else None
        if first is None:
            raise ControllerApiError(ErrorCode.unknown_server_error,
                                     f"Invalid state: topic {topic.name} appears to have no partitions.")
        replication_factor = len(first.replicas)
        mv = self._features.metadata_version_or_raise()
        if topic.assignments is not None:
            assignments = []
            for index, assignment in enumerate(topic.assignments):
                replicas = [int(b) for b in assignment.broker_ids]
                self.validate_manual_assignment(replicas, replication_factor=replication_factor)
                if not any(facts.is_active_broker(r) for r in replicas):
                    raise ControllerApiError(
                        ErrorCode.invalid_replica_assignment,
                        f"All brokers specified in the manual partition assignment for partition "
                        f"{existing + index} are fenced or in controlled shutdown.",
                    )
                assignments.append(replicas)
        else:
            assignments = self._placer.place(
                num_partitions=additional, replication_factor=replication_factor,
                usable_brokers=facts.usable_brokers(),
                existing_assignments=[list(p.replicas) for p in current if p is not None],
            )
        return [
            self._new_partition_record(topic_id, existing + index, replicas, mv=mv,
                                       manual=topic.assignments is not None, facts=facts)
            for index, replicas in enumerate(assignments)
        ]

    # -- DeleteTopics ----------------------------------------------------------------------

    def delete_topics(self, request: DeleteTopicsRequest) -> ControllerResult[tuple[DeletableTopicResult, ...]]:
        """Delete topics named by name or by id (v6); the topic's configs go with it on replay."""
        check_request_size(len(request.topics))
        records: list[RecordAndVersion] = []
        results: list[DeletableTopicResult] = []
        seen: set[uuid.UUID] = set()
        for state in request.topics:
            by_id = state.topic_id not in (None, ZERO_UUID)
            topic_id = state.topic_id if by_id else self._topics_by_name.get(state.name or "")
            name = self._topic_names.get(topic_id) if topic_id is not None else None
            if topic_id is None or name is None:
                code = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
                results.append(DeletableTopicResult(name=state.name, topic_id=state.topic_id, error_code=code,
                                                    error_message=None))
                continue
            if topic_id in seen:
                results.append(DeletableTopicResult(name=TopicName(name), topic_id=topic_id,
                                                    error_code=ErrorCode.invalid_request,
                                                    error_message="Duplicate topic in request."))
                continue
            seen.add(topic_id)
            # Like Kafka, only the RemoveTopicRecord: its replay drops the topic's configs.
            records.append(RecordAndVersion(RemoveTopicRecord(topic_id=topic_id), 0))
            results.append(DeletableTopicResult(name=TopicName(name), topic_id=topic_id, error_code=ErrorCode.none))
        check_user_op_size(records)
        return ControllerResult(records, tuple(results), is_atomic=True)

    # -- the fan-out primitive -------------------------------------------------------------

    def _change_record(
        self, key: TopicPartition, change: PartitionChange, *, mv: MetadataVersion | None = None
    ) -> RecordAndVersion:
        if mv is None:
            mv = self._features.metadata_version_or_raise()
        return RecordAndVersion(_change_record_of(key, change), mv.partition_change_record_version)

    def _builder(
        self, partition: PartitionRegistration, *, min_isr: int, exclude: int | None = None,
        unclean_shutdown: int | None = None, include: int | None = None, mv: MetadataVersion | None = None,
        elr_enabled: bool | None = None,
    ) -> PartitionChangeBuilder:
        """A builder whose acceptable leaders are active brokers whose replica's directory is
        online (Kafka's LeaderAcceptor); `exclude` and `unclean_shutdown` are never acceptable,
        `include` is even while the cluster state still shows it fenced. `min_isr` is the
        topic's effective min.insync.replicas (`_effective_min_isr`), which ELR tracking needs."""

        def acceptable(broker: int) -> bool:
            if broker in (exclude, unclean_shutdown):
                return False
            if broker != include and not self._cluster.is_active_broker(broker):
                return False
            try:
                directory = partition.directory(broker)
            except ValueError:
                return False
            return self._has_online_dir(broker, directory)

        builder = PartitionChangeBuilder(
            partition,
            is_acceptable_leader=acceptable,
            metadata_version=self._features.metadata_version_or_raise() if mv is None else mv,
            min_isr=min_isr,
            eligible_leader_replicas_enabled=self._features.is_elr_enabled() if elr_enabled is None else elr_enabled,
            default_directory=self._default_directory,
        )
        if unclean_shutdown is not None:
            builder.set_unclean_shutdown_replicas((unclean_shutdown,))
        return builder

    def _effective_min_isr(self, topic_id: uuid.UUID) -> int:
        """Kafka's getTopicEffectiveMinIsr: the topic's min.insync.replicas in force, capped at its
        replication factor (that of partition 0)."""
        name = self._topic_names.get(topic_id)
        configuration = self._configuration
        return self._capped_min_isr(
            topic_id, None if name is None or configuration is None else configuration.topic_config(name, _MIN_ISR))

    def _capped_min_isr(self, topic_id: uuid.UUID, configured: str | None) -> int:
        """The topic's min.insync.replicas `configured` (1 when unset), capped at its replication
        factor (that of partition 0)."""
        min_isr = 1 if configured is None else int(configured)
        first = self._partitions.get(_pack_ids(topic_id, 0))
        return min_isr if first is None else min(min_isr, len(first.replicas))

    def _topic_settings_reader(self) -> Callable[[uuid.UUID], tuple[int, bool]]:
        """A topic's (`_effective_min_isr`, `unclean_leader_election_enabled`) for one generation,
        which changes no config: the config layers every topic without an override inherits are
        resolved once, not per topic."""
        configuration = self._configuration
        read_min_isr: Callable[[str], str | None] = _no_config
        read_unclean: Callable[[str], str | None] = _no_config
        if configuration is not None:
            read_min_isr = configuration.topic_config_reader(_MIN_ISR)
            read_unclean = configuration.topic_config_reader(_UNCLEAN)

        def settings(topic_id: uuid.UUID) -> tuple[int, bool]:
            name = self._topic_names.get(topic_id)
            if name is None:
                return self._capped_min_isr(topic_id, None), False
            unclean = read_unclean(name)
            return self._capped_min_isr(topic_id, read_min_isr(name)), unclean is not None and parse_bool(unclean) is True

        return settings

    def _unclean_election_lookup(self) -> Callable[[uuid.UUID], bool]:
        return _once_per_topic(self.unclean_leader_election_enabled)

    def unclean_leader_election_enabled(self, topic_id: uuid.UUID) -> bool:
        """The topic's unclean.leader.election.enable, falling back to the broker-level setting."""
        name = self._topic_names.get(topic_id)
        return name is not None and self._configuration is not None and (
            self._configuration.unclean_leader_election_enabled_for_topic(name)
        )

    def _leader_and_isr_updates(
        self, *, broker_to_remove: int | None, broker_to_add: int | None, partitions: Iterable[PackedPartition],
        records: RecordSink, broker_with_unclean_shutdown: int | None = None,
    ) -> None:
        """Kafka's generateLeaderAndIsrUpdates over `partitions` (packed, in Kafka's order).
        `broker_to_remove` leaves the ISR and may not lead; `broker_to_add` may lead though still
        fenced; `broker_with_unclean_shutdown` leaves the ISR and the ELR and may not lead.

        The builder's change depends on a partition only through its state (assignment,
        directories, ISR, ELR, last known ELR, leader, recovery state) and its topic's min ISR and
        unclean-election setting: which candidates may lead is the same question for the same
        replicas on the same directories, and generation changes no state. So the change is
        built once per distinct state, and the records are a `PartitionChangeRun`: the distinct
        changes and, per partition, which one (a kind per distinct registration object, so that
        a replay merges once per kind) and the partition's ids. One broker's fence at 100k
        partitions over a few brokers runs a handful of builders and builds no record object; a
        `RecordList` keeps the run whole, a plain list gets its records.
        `tests/controller/test_broker_lifecycle.py` checks the records against a builder per
        partition."""
        mv = self._features.metadata_version_or_raise()
        elr_enabled = self._features.is_elr_enabled()
        version = mv.partition_change_record_version
        leaving = [r for r in (broker_to_remove, broker_with_unclean_shutdown) if r is not None]
        latest_get = self._partitions.latest().get
        topic_settings = self._topic_settings_reader()
        templates: dict[tuple[object, ...], PartitionChangeRecord | None] = {}
        changes: list[PartitionChangeRecord] = []
        kinds: list[int] = []
        partition_ids: list[int] = []
        topic_ids: list[uuid.UUID] = []
        add_kind, add_partition_id, add_topic_id = kinds.append, partition_ids.append, topic_ids.append
        # Partitions in one state usually share one registration (`MergeMemo`): the kind is found
        # by the registration's identity (the entry holds it, so its id stays its own), per topic
        # settings, and the state is only spelled out for a registration not seen yet.
        by_settings: dict[tuple[int, bool], dict[int, tuple[PartitionRegistration, int]]] = {}
        seen: dict[int, tuple[PartitionRegistration, int]] = {}
        topic_int = -1
        topic_id = ZERO_UUID
        settings: tuple[int, bool] = (1, False)
        mask = _PARTITION_MASK
        for packed in partitions:
            partition = latest_get(packed)
            if partition is None:
                raise RuntimeError(f"Partition {packed & _PARTITION_MASK} of topic {packed >> _PARTITION_BITS:032x} "
                                   "is indexed but not in the partitions map.")
            if packed >> _PARTITION_BITS != topic_int:
                # A topic's partitions are neighbours in Kafka's order: its settings are read once.
                topic_int = packed >> _PARTITION_BITS
                topic_id = self._unpack(packed)[0]
                settings = topic_settings(topic_id)
                seen = by_settings.setdefault(settings, {})
            found = seen.get(id(partition))
            if found is None:
                # Directories by their integers: a Uuid hashes through a Python call, an int in C.
                state = (
                    partition.replicas, tuple(map(_uuid_int, partition.directories)), partition.isr,
                    partition.removing_replicas, partition.adding_replicas, partition.elr, partition.last_known_elr,
                    partition.leader, int(partition.leader_recovery_state), settings,
                )
                if state in templates:
                    template = templates[state]
                else:
                    builder = self._builder(partition, min_isr=settings[0], exclude=broker_to_remove,
                                            unclean_shutdown=broker_with_unclean_shutdown, include=broker_to_add,
                                            mv=mv, elr_enabled=elr_enabled)
                    if settings[1]:
                        builder.set_election(Election.UNCLEAN)
                    if leaving:
                        builder.set_target_isr([r for r in partition.isr if r not in leaving])
                    change = builder.build()
                    template = templates[state] = None if change is None else _change_record_of((ZERO_UUID, 0), change)
                kind = -1
                if template is not None:
                    kind = len(changes)
                    changes.append(template)
                found = seen[id(partition)] = (partition, kind)
            if found[1] >= 0:
                add_kind(found[1])
                add_partition_id(packed & mask)
                add_topic_id(topic_id)
        run = PartitionChangeRun(changes=changes, version=version, kinds=kinds, partition_ids=partition_ids,
                                 topic_ids=topic_ids)
        if isinstance(records, RecordList):
            records.append_run(run)
        else:
            records.extend(RecordAndVersion(record, version) for record in run)

    # -- broker lifecycle ------------------------------------------------------------------

    def handle_broker_fenced(self, broker_id: int, records: RecordSink) -> None:
        registration = self._cluster.broker(broker_id)
        if registration is None:
            raise RuntimeError(f"Can't fence unknown broker {broker_id}")
        self._leader_and_isr_updates(broker_to_remove=broker_id, broker_to_add=None,
                                     partitions=self._in_isr(broker_id), records=records)
        records.append(RecordAndVersion(
            BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=registration.epoch, fenced=1), 0,
        ))

    def handle_broker_unfenced(self, broker_id: int, broker_epoch: int, records: RecordSink) -> None:
        records.append(RecordAndVersion(
            BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch, fenced=-1), 0,
        ))
        # Every leaderless partition may come back online with this broker (the cluster state
        # still shows it fenced while these records are generated, hence broker_to_add).
        self._leader_and_isr_updates(broker_to_remove=None, broker_to_add=broker_id,
                                     partitions=sorted(self._leaderless), records=records)

    def handle_broker_in_controlled_shutdown(self, broker_id: int, broker_epoch: int,
                                             records: RecordSink) -> None:
        registration = self._cluster.broker(broker_id)
        if registration is None or not registration.in_controlled_shutdown:
            records.append(RecordAndVersion(
                BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                               in_controlled_shutdown=1), 1,
            ))
        self._leader_and_isr_updates(broker_to_remove=broker_id, broker_to_add=None,
                                     partitions=self._in_isr(broker_id), records=records)

    def handle_broker_shutdown(self, broker_id: int, *, clean: bool, records: RecordSink) -> None:
        """A new incarnation registered (Kafka's handleBrokerShutdown). With ELR on and no clean
        shutdown (the broker did not present the epoch its last incarnation closed with), the old
        incarnation's replicas leave every ISR and ELR: their logs may have lost acknowledged
        data. Otherwise they leave the ISRs as on a fence, and keep their ELR places."""
        if self._features.is_elr_enabled() and not clean:
            self._leader_and_isr_updates(broker_to_remove=None, broker_to_add=None,
                                         broker_with_unclean_shutdown=broker_id,
                                         partitions=self._in_isr(broker_id), records=records)
            self._leader_and_isr_updates(broker_to_remove=None, broker_to_add=None,
                                         broker_with_unclean_shutdown=broker_id,
                                         partitions=self._in_elr(broker_id), records=records)
        else:
            self._leader_and_isr_updates(broker_to_remove=broker_id, broker_to_add=None,
                                         partitions=self._in_isr(broker_id), records=records)

    def handle_directories_offline(
        self, broker_id: int, broker_epoch: int, offline_dirs: Iterable[uuid.UUID], records: RecordSink,
    ) -> None:
        """A broker reported log directories offline: move leadership off (and take the broker
        out of the ISR of) every partition whose replica there lives there, then record the
        directories still online."""
        registration = self._cluster.broker(broker_id)
        if registration is None:
            raise RuntimeError(f"Can't handle offline directories of unknown broker {broker_id}")
        offline = set(offline_dirs)
        newly_offline = [d for d in registration.directories if d in offline]
        if not newly_offline:
            return
        for directory in newly_offline:
            self._leader_and_isr_updates(broker_to_remove=broker_id, broker_to_add=None,
                                         partitions=sorted(self._directories_to_partitions.members(directory)),
                                         records=records)
        online = tuple(d for d in registration.directories if d not in offline)
        records.append(RecordAndVersion(
            BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch, log_dirs=online), 2,
        ))

    def leaderless_partitions(self) -> list[TopicPartition]:
        return self._unpacked(self._leaderless)

    def process_broker_heartbeat(
        self, *, broker_id: int, broker_epoch: int, current_metadata_offset: int, want_fence: bool,
        want_shut_down: bool, next_write_offset: int, offline_log_dirs: Iterable[uuid.UUID] = (),
    ) -> ControllerResult[BrokerHeartbeatReply]:
        self._cluster.check_broker_epoch(broker_id, broker_epoch)
        heartbeat = self._cluster.heartbeat_manager_or_raise()
        registration_offset = self._cluster.registration_offset(broker_id)
        if registration_offset is None:
            raise RuntimeError(f"broker {broker_id} has no registration offset")
        current, nxt = heartbeat.calculate_next_state(
            broker_id, want_fence=want_fence, want_shut_down=want_shut_down,
            current_metadata_offset=current_metadata_offset, registration_offset=registration_offset,
            has_leaderships=lambda: self.has_leaderships(broker_id),
        )
        records = RecordList()
        if current is not nxt:
            if nxt in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW):
                self.handle_broker_fenced(broker_id, records)
            elif nxt is BrokerControlState.UNFENCED:
                self.handle_broker_unfenced(broker_id, broker_epoch, records)
            elif nxt is BrokerControlState.CONTROLLED_SHUTDOWN:
                self.handle_broker_in_controlled_shutdown(broker_id, broker_epoch, records)
        heartbeat.touch(broker_id, fenced=nxt.fenced, metadata_offset=current_metadata_offset)
        if self._features.metadata_version_or_raise().is_directory_assignment_supported:
            self.handle_directories_offline(broker_id, broker_epoch, offline_log_dirs, records)
        if nxt is BrokerControlState.CONTROLLED_SHUTDOWN:
            # The broker may finish once every active broker has seen the leadership moves.
            heartbeat.update_controlled_shutdown_offset(broker_id, next_write_offset + len(records) - 1)
        reply = BrokerHeartbeatReply(
            is_caught_up=current_metadata_offset >= registration_offset,
            is_fenced=nxt.fenced,
            in_controlled_shutdown=nxt.in_controlled_shutdown,
            should_shut_down=nxt.should_shut_down,
        )
        return ControllerResult(records, reply)

    def maybe_fence_one_stale_broker(self, now_ms: int) -> ControllerResult[None]:
        """Fence at most one broker whose session expired, so each fence's effect (leadership
        moves) is visible before the next."""
        heartbeat = self._cluster.heartbeat_manager_or_raise()
        records = RecordList()
        expired = heartbeat.tracker.maybe_remove_expired(now_ms)
        if expired is not None:
            broker_id, epoch = expired
            registration = self._cluster.broker(broker_id)
            if registration is not None and registration.epoch == epoch and not registration.fenced:
                self.handle_broker_fenced(broker_id, records)
                heartbeat.touch(broker_id, fenced=True, metadata_offset=-1)
        return ControllerResult(records, None)

    def unregister_broker(self, broker_id: int) -> ControllerResult[None]:
        registration = self._cluster.broker(broker_id)
        if registration is None:
            raise ControllerApiError(ErrorCode.broker_id_not_registered, f"Broker ID {broker_id} is not currently registered")
        records = RecordList()
        self._leader_and_isr_updates(broker_to_remove=broker_id, broker_to_add=None,
                                     partitions=self._in_isr(broker_id), records=records)
        # As Kafka's handleBrokerUnregistered: the partitions whose ELR holds it are rebuilt too.
        self._leader_and_isr_updates(broker_to_remove=broker_id, broker_to_add=None,
                                     partitions=self._in_elr(broker_id), records=records)
        records.append(RecordAndVersion(UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=registration.epoch), 0))
        return ControllerResult(records, None, is_atomic=True)

    # -- AlterPartition --------------------------------------------------------------------

    def alter_partition(
        self, request: alter_partition_request.AlterPartitionRequest
    ) -> ControllerResult[alter_partition_response.AlterPartitionResponse]:
        broker_id = int(request.broker_id)
        self._cluster.check_broker_epoch(broker_id, int(request.broker_epoch))
        check_request_size(sum(len(t.partitions) for t in request.topics))
        records: list[RecordAndVersion] = []
        topics = []
        for topic in request.topics:
            topic_id = topic.topic_id or ZERO_UUID
            results = []
            for data in topic.partitions:
                results.append(self._alter_one(broker_id, topic_id, data, records))
            topics.append(alter_partition_response.TopicData(topic_id=topic_id, partitions=tuple(results)))
        response = alter_partition_response.AlterPartitionResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none, topics=tuple(topics)
        )
        return ControllerResult(records, response)

    def _alter_one(self, broker_id: int, topic_id: uuid.UUID, data: alter_partition_request.PartitionData,
                   records: list[RecordAndVersion]) -> alter_partition_response.PartitionData:
        partition_id = int(data.partition_index)

        def error(code: ErrorCode) -> alter_partition_response.PartitionData:
            return alter_partition_response.PartitionData(
                partition_index=i32(partition_id), error_code=code, leader_id=BrokerId(NO_LEADER),
                leader_epoch=i32(-1), partition_epoch=i32(-1),
            )

        if topic_id not in self._topic_names:
            return error(ErrorCode.unknown_topic_id)
        partition = self._partitions.get(_pack_ids(topic_id, partition_id))
        if partition is None:
            return error(ErrorCode.unknown_topic_or_partition)
        if partition.leader != broker_id:
            return error(ErrorCode.not_leader_or_follower)
        if int(data.leader_epoch) != partition.leader_epoch:
            return error(ErrorCode.fenced_leader_epoch)
        if int(data.partition_epoch) != partition.partition_epoch:
            return error(ErrorCode.invalid_update_version)
        new_isr = [int(s.broker_id) for s in data.new_isr_with_epochs]
        recovery = int(data.leader_recovery_state)
        if recovery == LeaderRecoveryState.RECOVERING and len(new_isr) > 1:
            return error(ErrorCode.invalid_request)
        if partition.leader_recovery_state == LeaderRecoveryState.RECOVERED and recovery == LeaderRecoveryState.RECOVERING:
            return error(ErrorCode.invalid_request)
        for state in data.new_isr_with_epochs:
            replica = int(state.broker_id)
            registration = self._cluster.broker(replica)
            if replica not in partition.replicas:
                return error(ErrorCode.invalid_request)
            # A fenced or shutting-down broker, or a stale incarnation, never joins an ISR.
            if (registration is None or registration.fenced or registration.in_controlled_shutdown
                    or (int(state.broker_epoch) != -1 and int(state.broker_epoch) != registration.epoch)):
                return error(ErrorCode.ineligible_replica)
        builder = self._builder(partition, min_isr=self._effective_min_isr(topic_id))
        builder.set_target_isr(new_isr).set_target_leader_recovery_state(recovery)
        change = builder.build()
        after = partition
        if change is not None:
            record = self._change_record((topic_id, partition_id), change)
            records.append(record)
            if isinstance(record.record, PartitionChangeRecord):
                after = partition.merge(record.record)
            if change.leader not in (NO_LEADER_CHANGE, broker_id):
                # The ISR change completed a reassignment that moved leadership away: tell the
                # old leader to refetch metadata rather than act on stale leadership.
                return error(ErrorCode.new_leader_elected)
        return alter_partition_response.PartitionData(
            partition_index=i32(partition_id), error_code=ErrorCode.none, leader_id=BrokerId(after.leader),
            leader_epoch=i32(after.leader_epoch), isr=tuple(BrokerId(b) for b in after.isr),
            leader_recovery_state=i8(int(after.leader_recovery_state)), partition_epoch=i32(after.partition_epoch),
        )


    # -- AlterPartitionReassignments / ListPartitionReassignments --------------------------

    def alter_partition_reassignments(
        self, request: reassignments_request.AlterPartitionReassignmentsRequest
    ) -> ControllerResult[reassignments_response.AlterPartitionReassignmentsResponse]:
        """Start, change or (replicas = None) cancel reassignments, each partition on its own;
        the records of all that succeed are written atomically."""
        check_request_size(sum(len(t.partitions) for t in request.topics))
        records: list[RecordAndVersion] = []
        topics = []
        for topic in request.topics:
            partitions = []
            for target in topic.partitions:
                error = ApiError.NONE
                try:
                    self._alter_reassignment(topic.name, target, records,
                                             allow_rf_change=bool(request.allow_replication_factor_change))
                except ControllerApiError as failure:
                    error = ApiError(failure.error_code, failure.message)
                partitions.append(reassignments_response.ReassignablePartitionResponse(
                    partition_index=target.partition_index, error_code=error.error_code,
                    error_message=error.message,
                ))
            topics.append(reassignments_response.ReassignableTopicResponse(name=topic.name,
                                                                           partitions=tuple(partitions)))
        check_user_op_size(records)
        response = reassignments_response.AlterPartitionReassignmentsResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
            allow_replication_factor_change=bool(request.allow_replication_factor_change),
            error_code=ErrorCode.none, error_message=None, responses=tuple(topics),
        )
        return ControllerResult(records, response, is_atomic=True)

    def _alter_reassignment(
        self, topic_name: str, target: reassignments_request.ReassignablePartition, records: list[RecordAndVersion],
        *, allow_rf_change: bool,
    ) -> None:
        topic_id = self._topics_by_name.get(topic_name)
        if topic_id is None:
            raise ControllerApiError(ErrorCode.unknown_topic_or_partition,
                                     f"Unable to find a topic named {topic_name}.")
        partition_id = int(target.partition_index)
        partition = self._partitions.get(_pack_ids(topic_id, partition_id))
        if partition is None:
            raise ControllerApiError(ErrorCode.unknown_topic_or_partition,
                                     f"Unable to find partition {topic_name}:{partition_id}.")
        key = (topic_id, partition_id)
        if target.replicas is None:
            change = self._cancel_reassignment(topic_name, key, partition)
        else:
            change = self._change_reassignment(topic_id, partition, [int(r) for r in target.replicas],
                                               allow_rf_change=allow_rf_change)
        if change is not None:
            records.append(self._change_record(key, change))

    def _cancel_reassignment(
        self, topic_name: str, key: TopicPartition, partition: PartitionRegistration
    ) -> PartitionChange | None:
        if not (partition.adding_replicas or partition.removing_replicas):
            raise ControllerApiError(ErrorCode.no_reassignment_in_progress,
                                     "No partition reassignment is in progress for this topic or partition.")
        # Revert: drop the replicas being added, keep those being removed.
        adding = set(partition.adding_replicas)
        replicas = [r for r in partition.replicas if r not in adding]
        isr = [r for r in partition.isr if r not in adding]
        unclean = not isr
        if unclean:
            # Only added replicas are in sync: reverting makes an out-of-sync replica leader.
            if not replicas:
                raise ControllerApiError(ErrorCode.invalid_replica_assignment,
                                         "Invalid replica assignment: addingReplicas contains all replicas.")
            isr = [replicas[0]]
            if not self.unclean_leader_election_enabled(key[0]):
                raise ControllerApiError(
                    ErrorCode.invalid_replica_assignment,
                    f"Unable to revert partition assignment for {topic_name}:{key[1]} because it would require "
                    "an unclean leader election.",
                )
        builder = self._builder(partition, min_isr=self._effective_min_isr(key[0]))
        if self.unclean_leader_election_enabled(key[0]):
            builder.set_election(Election.UNCLEAN)
        builder.set_target_isr(isr).set_target_replicas(replicas).set_target_removing([]).set_target_adding([])
        return builder.build()

    def _change_reassignment(
        self, topic_id: uuid.UUID, partition: PartitionRegistration, target: list[int], *, allow_rf_change: bool
    ) -> PartitionChange | None:
        """Stage 1 of a reassignment: the replica set becomes target + removing, with the new
        replicas as adding. The AlterPartition that brings every target into the ISR completes
        it (stage 3, in the builder); if the ISR already holds them all, this completes it now."""
        self.validate_manual_assignment(target, replication_factor=None)
        # KIP-860: the replicas the partition had before any ongoing reassignment set the factor.
        original = [r for r in partition.replicas if r not in partition.adding_replicas]
        if not allow_rf_change and len(target) != len(original):
            raise ControllerApiError(ErrorCode.invalid_replication_factor,
                                     f"The replication factor is changed from {len(original)} to {len(target)}")
        current = list(partition.replicas)
        removing = sorted(set(current) - set(target))
        adding = sorted(set(target) - set(current))
        replicas = target + removing
        builder = self._builder(partition, min_isr=self._effective_min_isr(topic_id))
        if replicas != current:
            builder.set_target_replicas(replicas)
        if removing:
            builder.set_target_removing(removing)
        if adding:
            builder.set_target_adding(adding)
        return builder.build()

    def list_partition_reassignments(
        self, request: list_reassignments_request.ListPartitionReassignmentsRequest, *, epoch: int | None = None,
    ) -> list_reassignments_response.ListPartitionReassignmentsResponse:
        """Ongoing reassignments as of `epoch` (the stable offset): all of them, or of the
        partitions asked for (unknown topics and partitions are left out, as in Kafka)."""
        wanted: dict[uuid.UUID, list[int]] = {}
        if request.topics is None:
            for topic_id, partition_id in (self._unpack(p, epoch) for p in self._reassigning.elements(epoch)):
                wanted.setdefault(topic_id, []).append(partition_id)
            for partition_ids in wanted.values():
                partition_ids.sort()
        else:
            for topic in request.topics:
                found = self._topics_by_name.get(topic.name, epoch)
                if found is not None:
                    wanted.setdefault(found, []).extend(int(p) for p in topic.partition_indexes)
        topics = []
        for topic_id, partition_ids in sorted(wanted.items(), key=lambda item: self._topic_names.get(item[0], epoch) or ""):
            name = self._topic_names.get(topic_id, epoch)
            if name is None:
                continue
            ongoing = []
            for partition_id in partition_ids:
                partition = self._partitions.get(_pack_ids(topic_id, partition_id), epoch)
                if partition is None or not (partition.adding_replicas or partition.removing_replicas):
                    continue
                ongoing.append(list_reassignments_response.OngoingPartitionReassignment(
                    partition_index=i32(partition_id),
                    replicas=tuple(BrokerId(r) for r in partition.replicas),
                    adding_replicas=tuple(BrokerId(r) for r in partition.adding_replicas),
                    removing_replicas=tuple(BrokerId(r) for r in partition.removing_replicas),
                ))
            if ongoing:
                topics.append(list_reassignments_response.OngoingTopicReassignment(name=TopicName(name),
                                                                                  partitions=tuple(ongoing)))
        return list_reassignments_response.ListPartitionReassignmentsResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none, error_message=None,
            topics=tuple(topics),
        )

    # -- ElectLeaders ----------------------------------------------------------------------

    def elect_leaders(
        self, request: elect_leaders_request.ElectLeadersRequest
    ) -> ControllerResult[elect_leaders_response.ElectLeadersResponse]:
        election_type = int(request.election_type)
        if election_type not in (_ELECTION_PREFERRED, _ELECTION_UNCLEAN):
            raise ControllerApiError(ErrorCode.invalid_request, f"Unknown election type {election_type}")
        if request.topic_partitions is not None:
            check_request_size(sum(len(t.partitions) for t in request.topic_partitions))
        records: list[RecordAndVersion] = []
        results = []
        if request.topic_partitions is None:
            # Every partition; those that already have the leader asked for are left out.
            for name, topic_id in sorted(self._topics_by_name.items()):
                partition_results = []
                for partition_id in range(self._partition_counts.get(topic_id) or 0):
                    error = self._elect_leader(name, partition_id, election_type, records)
                    if error.error_code != ErrorCode.election_not_needed:
                        partition_results.append(_election_result(partition_id, error))
                results.append(elect_leaders_response.ReplicaElectionResult(
                    topic=TopicName(name), partition_result=tuple(partition_results)))
        else:
            for topic in request.topic_partitions:
                partition_results = [
                    _election_result(int(p), self._elect_leader(topic.topic, int(p), election_type, records))
                    for p in topic.partitions
                ]
                results.append(elect_leaders_response.ReplicaElectionResult(
                    topic=topic.topic, partition_result=tuple(partition_results)))
        check_user_op_size(records)
        response = elect_leaders_response.ElectLeadersResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none,
            replica_election_results=tuple(results),
        )
        return ControllerResult(records, response)

    def _elect_leader(self, topic: str, partition_id: int, election_type: int,
                      records: list[RecordAndVersion]) -> ApiError:
        topic_id = self._topics_by_name.get(topic)
        if topic_id is None:
            return ApiError(ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}")
        partition = self._partitions.get(_pack_ids(topic_id, partition_id))
        if partition is None:
            return ApiError(ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{partition_id}")
        if (election_type == _ELECTION_PREFERRED and partition.has_preferred_leader) or (
            election_type == _ELECTION_UNCLEAN and partition.has_leader
        ):
            return ApiError(ErrorCode.election_not_needed)
        election = Election.PREFERRED if election_type == _ELECTION_PREFERRED else Election.UNCLEAN
        change = self._builder(partition, min_isr=self._effective_min_isr(topic_id)).set_election(election).build()
        if change is None:
            if election_type == _ELECTION_PREFERRED:
                return ApiError(ErrorCode.preferred_leader_not_available)
            return ApiError(ErrorCode.eligible_leaders_not_available)
        records.append(self._change_record((topic_id, partition_id), change))
        return ApiError.NONE

    # -- periodic elections ----------------------------------------------------------------

    def maybe_balance_partition_leaders(
        self, max_elections: int = MAX_ELECTIONS_PER_IMBALANCE
    ) -> ControllerResult[bool]:
        """Move leadership back to preferred replicas where they are in the ISR and able to
        lead. The response says whether the cap was hit (run again at once)."""
        records: list[RecordAndVersion] = []
        for key in self._unpacked(self._imbalanced):
            if len(records) >= max_elections:
                break
            partition = self._partitions.get(_pack(key))
            if partition is None:
                continue
            change = self._builder(partition, min_isr=self._effective_min_isr(key[0])).set_election(
                Election.PREFERRED).build()
            if change is not None:
                records.append(self._change_record(key, change))
        return ControllerResult(records, len(records) >= max_elections)

    def maybe_elect_unclean_leaders(self, max_elections: int = MAX_ELECTIONS_PER_IMBALANCE) -> ControllerResult[bool]:
        """Bring leaderless partitions of topics that allow unclean election back online with
        any live replica. The response says whether the cap was hit."""
        records: list[RecordAndVersion] = []
        # With every broker down, all 100k partitions are leaderless: look the setting up per topic.
        unclean_enabled = self._unclean_election_lookup()
        for key in self.leaderless_partitions():
            if len(records) >= max_elections:
                break
            name = self._topic_names.get(key[0])
            if name is not None and unclean_enabled(key[0]):
                self._elect_leader(name, key[1], _ELECTION_UNCLEAN, records)
        return ControllerResult(records, len(records) >= max_elections)

    def are_partition_leaders_imbalanced(self) -> bool:
        return len(self._imbalanced) > 0

    def are_some_partitions_leaderless(self) -> bool:
        return len(self._leaderless) > 0

    # -- AssignReplicasToDirs --------------------------------------------------------------

    def assign_replicas_to_dirs(
        self, request: dirs_request.AssignReplicasToDirsRequest
    ) -> ControllerResult[dirs_response.AssignReplicasToDirsResponse]:
        """A broker reports which of its log directories holds each of its replicas. A replica
        placed on a directory that is already offline loses leadership and ISR membership."""
        if not self._features.metadata_version_or_raise().is_directory_assignment_supported:
            raise ControllerApiError(ErrorCode.unsupported_version, "Directory assignment is not supported yet.")
        broker_id = int(request.broker_id)
        self._cluster.check_broker_epoch(broker_id, int(request.broker_epoch))
        registration = self._cluster.broker(broker_id)
        if registration is None:
            raise ControllerApiError(ErrorCode.broker_id_not_registered,
                                     f"Broker ID {broker_id} is not currently registered")
        records: list[RecordAndVersion] = []
        offline_partitions: list[TopicPartition] = []
        directories = []
        for directory_data in request.directories:
            directory = directory_data.id_ or ZERO_UUID
            offline = not self._has_online_dir(broker_id, directory)
            topics = []
            for topic in directory_data.topics:
                topic_id = topic.topic_id or ZERO_UUID
                known = topic_id in self._topic_names
                partitions = []
                for data in topic.partitions:
                    partition_id = int(data.partition_index)
                    code = ErrorCode.none if known else ErrorCode.unknown_topic_id
                    partition = self._partitions.get(_pack_ids(topic_id, partition_id)) if known else None
                    if known and partition is None:
                        code = ErrorCode.unknown_topic_or_partition
                    elif partition is not None and broker_id not in partition.replicas:
                        code = ErrorCode.not_leader_or_follower
                    elif partition is not None:
                        change = self._builder(partition, min_isr=self._effective_min_isr(topic_id)).set_directory(
                            broker_id, directory).build()
                        if change is not None:
                            records.append(self._change_record((topic_id, partition_id), change))
                        if offline:
                            offline_partitions.append((topic_id, partition_id))
                    partitions.append(dirs_response.PartitionData(partition_index=i32(partition_id), error_code=code))
                topics.append(dirs_response.TopicData(topic_id=topic_id, partitions=tuple(partitions)))
            directories.append(dirs_response.DirectoryData(id_=directory, topics=tuple(topics)))
        if offline_partitions:
            # Generate the leadership moves against the partitions as the records above leave
            # them: the directory is part of what makes a leader acceptable.
            self._leader_and_isr_updates_after(records, broker_to_remove=broker_id, partitions=offline_partitions)
        response = dirs_response.AssignReplicasToDirsResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none,
            directories=tuple(directories),
        )
        return ControllerResult(records, response)

    def _leader_and_isr_updates_after(
        self, records: list[RecordAndVersion], *, broker_to_remove: int, partitions: list[TopicPartition],
    ) -> None:
        pending: dict[TopicPartition, PartitionRegistration] = {}
        for key in partitions:
            partition = self._partitions.get(_pack(key))
            if partition is not None:
                pending[key] = partition
        for record, _ in records:
            if isinstance(record, PartitionChangeRecord):
                changed: TopicPartition = (record.topic_id, int(record.partition_id))
                if changed in pending:
                    pending[changed] = pending[changed].merge(record)
        for key, partition in pending.items():
            builder = self._builder(partition, min_isr=self._effective_min_isr(key[0]), exclude=broker_to_remove)
            if self.unclean_leader_election_enabled(key[0]):
                builder.set_election(Election.UNCLEAN)
            builder.set_target_isr([r for r in partition.isr if r != broker_to_remove])
            change = builder.build()
            if change is not None:
                merged = self._change_record(key, change)
                records.append(merged)


_uuid_int = operator.attrgetter("int")


def _change_record_of(key: TopicPartition, change: PartitionChange) -> PartitionChangeRecord:
    return PartitionChangeRecord(
        partition_id=key[1], topic_id=key[0],
        isr=change.isr, leader=change.leader, replicas=change.replicas,
        removing_replicas=change.removing_replicas, adding_replicas=change.adding_replicas,
        leader_recovery_state=change.leader_recovery_state, directories=change.directories,
        eligible_leader_replicas=change.eligible_leader_replicas, last_known_elr=change.last_known_elr,
    )


def _no_config(name: str) -> str | None:
    return None


def _once_per_topic(lookup: Callable[[uuid.UUID], T]) -> Callable[[uuid.UUID], T]:
    """`lookup`, asked once per topic: for one generation, which changes no state, while a fan-out
    asks for each of a topic's partitions in turn (a topic's min ISR, its unclean election)."""
    found: dict[uuid.UUID, T] = {}

    def once(topic_id: uuid.UUID) -> T:
        if topic_id in found:
            return found[topic_id]
        value = found[topic_id] = lookup(topic_id)
        return value

    return once


class _ClusterFacts:
    """What generating new partitions reads about brokers and configs, read once per request.

    Generating records changes no state, so every topic of one CreateTopics or CreatePartitions
    request sees the same brokers and the same config defaults. Reading them per topic (usable
    brokers, the effective configs the response lists) and per replica (active?, default
    directory) cost more than the rest of generating a ten-partition topic.
    """

    def __init__(self, manager: ReplicationControlManager) -> None:
        self._manager = manager
        self._usable: tuple[UsableBroker, ...] | None = None
        self._active: dict[int, bool] = {}
        self._directories: dict[int, uuid.UUID] = {}
        self._effective: dict[tuple[tuple[str, str], ...], tuple[CreatableTopicConfigs, ...]] = {}

    def usable_brokers(self) -> tuple[UsableBroker, ...]:
        if self._usable is None:
            self._usable = tuple(self._manager._usable_brokers())
        return self._usable

    def is_active_broker(self, broker_id: int) -> bool:
        found = self._active.get(broker_id)
        if found is None:
            found = self._active[broker_id] = self._manager._cluster.is_active_broker(broker_id)
        return found

    def default_directory(self, broker_id: int) -> uuid.UUID:
        found = self._directories.get(broker_id)
        if found is None:
            found = self._directories[broker_id] = self._manager._default_directory(broker_id)
        return found

    def effective_topic_configs(self, configs: dict[str, str]) -> tuple[CreatableTopicConfigs, ...]:
        """The configs CreateTopics reports for a new topic created with `configs`."""
        key = tuple(sorted(configs.items()))
        found = self._effective.get(key)
        if found is None:
            configuration = self._manager._configuration
            effective = configuration.effective_topic_configs(configs) if configuration is not None else []
            found = self._effective[key] = tuple(
                CreatableTopicConfigs(name=name, value=value, read_only=False, config_source=i8(source),
                                      is_sensitive=False)
                for name, value, source in effective
            )
        return found


def _election_result(partition_id: int, error: ApiError) -> elect_leaders_response.PartitionResult:
    return elect_leaders_response.PartitionResult(partition_id=i32(partition_id), error_code=error.error_code,
                                                  error_message=error.message)
