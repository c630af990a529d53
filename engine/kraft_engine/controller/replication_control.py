"""Topics, partitions, ISR and leadership: the core of Kafka's ReplicationControlManager.

Every broker lifecycle event that affects partitions (fencing, unfencing, controlled shutdown,
unregistration, a new incarnation after an unclean shutdown) fans out through one primitive,
`_leader_and_isr_updates`, over a broker → partitions reverse index of ISR membership, and
runs the PartitionChangeBuilder per partition. Generation and replay are separate: only the
replay methods change the timeline state.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.alter_partition.v3 import request as alter_partition_request
from kio.schema.alter_partition.v3 import response as alter_partition_response
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.create_topics.v7.response import CreatableTopicResult
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest
from kio.schema.delete_topics.v6.response import DeletableTopicResult
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from kraft_engine.controller.broker_heartbeat import BrokerControlState
from kraft_engine.controller.cluster_control import ClusterControlManager
from kraft_engine.controller.feature_control import FeatureControlManager
from kraft_engine.controller.partition_change import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    PartitionChange,
    PartitionChangeBuilder,
)
from kraft_engine.controller.results import (
    ControllerApiError,
    ControllerResult,
    RecordAndVersion,
    check_user_op_size,
)
from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap, TimelineHashSet
from kraft_engine.kafka_uuid import ONE_UUID, ZERO_UUID
from kraft_engine.metadata import LeaderRecoveryState, PartitionRegistration
from kraft_engine.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)

if TYPE_CHECKING:
    import random

__all__ = ["BrokerHeartbeatReply", "ReplicationControlManager"]

_TOPIC_RESOURCE_TYPE = 2  # ConfigResource.Type.TOPIC
_MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_MIGRATING_DIRECTORY = ONE_UUID

TopicPartition = tuple[uuid.UUID, int]


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
        topic_configs: Callable[[str], Iterable[str]] = lambda _: (),
        default_num_partitions: int = 1,
        default_replication_factor: int = 1,
    ) -> None:
        self._cluster = cluster_control
        self._features = feature_control
        self._rng = rng
        self._topic_configs = topic_configs
        self.default_num_partitions = default_num_partitions
        self.default_replication_factor = default_replication_factor
        self._topics_by_name: TimelineHashMap[str, uuid.UUID] = TimelineHashMap(registry)
        self._topic_names: TimelineHashMap[uuid.UUID, str] = TimelineHashMap(registry)
        self._partition_counts: TimelineHashMap[uuid.UUID, int] = TimelineHashMap(registry)
        self._partitions: TimelineHashMap[TopicPartition, PartitionRegistration] = TimelineHashMap(registry)
        # Reverse index: broker id -> partitions whose ISR holds it (leaders are always in it).
        self._brokers_to_isrs: TimelineHashMap[int, frozenset[TopicPartition]] = TimelineHashMap(registry)
        self._leaderless: TimelineHashSet[TopicPartition] = TimelineHashSet(registry)
        self._imbalanced: TimelineHashSet[TopicPartition] = TimelineHashSet(registry)

    # -- reads -----------------------------------------------------------------------------

    def topic_id(self, name: str, epoch: int | None = None) -> uuid.UUID | None:
        return self._topics_by_name.get(name, epoch)

    def partition(self, topic_id: uuid.UUID, partition_id: int, epoch: int | None = None) -> PartitionRegistration | None:
        return self._partitions.get((topic_id, partition_id), epoch)

    def partitions_with_broker_in_isr(self, broker_id: int) -> list[TopicPartition]:
        return sorted(self._brokers_to_isrs.get(broker_id) or (), key=lambda tp: (str(tp[0]), tp[1]))

    def has_leaderships(self, broker_id: int) -> bool:
        return any(
            (p := self._partitions.get(tp)) is not None and p.leader == broker_id
            for tp in self._brokers_to_isrs.get(broker_id) or ()
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

    def replay_partition(self, record: PartitionRecord, offset: int) -> None:
        if record.topic_id not in self._topic_names:
            raise RuntimeError(f"PartitionRecord at offset {offset} names unknown topic {record.topic_id}")
        key = (record.topic_id, int(record.partition_id))
        previous = self._partitions.get(key)
        if previous is None:
            self._partition_counts.put(record.topic_id, (self._partition_counts.get(record.topic_id) or 0) + 1)
        self._set_partition(key, previous, PartitionRegistration.from_record(record))

    def replay_partition_change(self, record: PartitionChangeRecord, offset: int) -> None:
        key = (record.topic_id, int(record.partition_id))
        previous = self._partitions.get(key)
        if previous is None:
            raise RuntimeError(f"PartitionChangeRecord at offset {offset} names unknown partition {key}")
        self._set_partition(key, previous, previous.merge(record))

    def replay_remove_topic(self, record: RemoveTopicRecord, offset: int) -> None:
        name = self._topic_names.get(record.topic_id)
        if name is None:
            raise RuntimeError(f"RemoveTopicRecord at offset {offset} names unknown topic {record.topic_id}")
        for partition_id in range(self._partition_counts.get(record.topic_id) or 0):
            key = (record.topic_id, partition_id)
            previous = self._partitions.get(key)
            if previous is not None:
                self._unindex(key, previous)
                self._partitions.remove(key)
        self._topics_by_name.remove(name)
        self._topic_names.remove(record.topic_id)
        self._partition_counts.remove(record.topic_id)

    def _set_partition(self, key: TopicPartition, previous: PartitionRegistration | None,
                       current: PartitionRegistration) -> None:
        if previous is not None:
            self._unindex(key, previous)
        self._partitions.put(key, current)
        for broker in current.isr:
            self._brokers_to_isrs.put(broker, (self._brokers_to_isrs.get(broker) or frozenset()) | {key})
        if current.leader == NO_LEADER:
            self._leaderless.add(key)
        if current.leader != NO_LEADER and current.replicas and current.leader != current.replicas[0]:
            self._imbalanced.add(key)

    def _unindex(self, key: TopicPartition, previous: PartitionRegistration) -> None:
        for broker in previous.isr:
            remaining = (self._brokers_to_isrs.get(broker) or frozenset()) - {key}
            if remaining:
                self._brokers_to_isrs.put(broker, remaining)
            else:
                self._brokers_to_isrs.remove(broker)
        self._leaderless.discard(key)
        self._imbalanced.discard(key)

    # -- CreateTopics ----------------------------------------------------------------------

    def create_topics(self, request: CreateTopicsRequest) -> ControllerResult[tuple[CreatableTopicResult, ...]]:
        records: list[RecordAndVersion] = []
        results: list[CreatableTopicResult] = []
        names = [t.name for t in request.topics]
        for topic in request.topics:
            if names.count(topic.name) > 1:
                results.append(self._topic_error(topic.name, ErrorCode.invalid_request,
                                                 "Duplicate topic name."))
                continue
            try:
                topic_records, result = self._create_topic(topic)
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

    def _create_topic(self, topic: CreatableTopic) -> tuple[list[RecordAndVersion], CreatableTopicResult]:
        error = _topic_name_error(topic.name)
        if error is not None:
            raise ControllerApiError(ErrorCode.invalid_topic_exception, error)
        if topic.name in self._topics_by_name:
            raise ControllerApiError(ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists.")
        mv = self._features.metadata_version_or_raise()
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise ControllerApiError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but numPartitions or replicationFactor "
                    "was not set to -1.",
                )
            assignments = self._manual_assignments(topic)
        else:
            num_partitions = self.default_num_partitions if topic.num_partitions == -1 else int(topic.num_partitions)
            replication_factor = (
                self.default_replication_factor if topic.replication_factor == -1 else int(topic.replication_factor)
            )
            if num_partitions <= 0:
                raise ControllerApiError(ErrorCode.invalid_partitions,
                                         "Number of partitions was set to an invalid non-positive value.")
            if replication_factor <= 0:
                raise ControllerApiError(ErrorCode.invalid_replication_factor,
                                         "Replication factor must be larger than 0, or -1 to use the default value.")
            assignments = self._place(num_partitions, replication_factor)
        topic_id = uuid.UUID(bytes=self._rng.randbytes(16))
        while topic_id in (ZERO_UUID, ONE_UUID) or topic_id in self._topic_names:
            topic_id = uuid.UUID(bytes=self._rng.randbytes(16))
        records = [RecordAndVersion(TopicRecord(name=topic.name, topic_id=topic_id), 0)]
        for config in topic.configs:
            records.append(RecordAndVersion(ConfigRecord(resource_type=_TOPIC_RESOURCE_TYPE, resource_name=topic.name,
                                                         name=config.name, value=config.value), 0))
        for partition_id, replicas in enumerate(assignments):
            isr = tuple(r for r in replicas if self._cluster.is_active_broker(r))
            leader = isr[0] if isr else NO_LEADER
            if leader == NO_LEADER:
                raise ControllerApiError(
                    ErrorCode.invalid_replication_factor,
                    f"Unable to create topic {topic.name} because partition {partition_id} would have no "
                    "unfenced replica to lead it.",
                )
            directories: tuple[uuid.UUID, ...] = ()
            if mv.is_directory_assignment_supported:
                directories = tuple(self._default_directory(r) for r in replicas)
            record = PartitionRecord(
                partition_id=partition_id, topic_id=topic_id, replicas=tuple(replicas), isr=isr,
                removing_replicas=(), adding_replicas=(), leader=leader, leader_recovery_state=0,
                leader_epoch=0, partition_epoch=0, directories=directories,
            )
            records.append(RecordAndVersion(record, mv.partition_record_version))
        replication_factor = len(assignments[0]) if assignments else 0
        result = CreatableTopicResult(
            name=topic.name, topic_id=topic_id, error_code=ErrorCode.none, error_message=None,
            num_partitions=i32(len(assignments)), replication_factor=i16(replication_factor), configs=None,
        )
        return records, result

    def _manual_assignments(self, topic: CreatableTopic) -> list[list[int]]:
        by_index = {int(a.partition_index): [int(b) for b in a.broker_ids] for a in topic.assignments}
        if sorted(by_index) != list(range(len(by_index))):
            raise ControllerApiError(ErrorCode.invalid_replica_assignment,
                                     "partitions should be a consecutive 0-based integer sequence")
        assignments = [by_index[i] for i in range(len(by_index))]
        for replicas in assignments:
            if not replicas:
                raise ControllerApiError(ErrorCode.invalid_replica_assignment,
                                         "The manual partition assignment includes an empty replica list.")
            if len(set(replicas)) != len(replicas):
                raise ControllerApiError(ErrorCode.invalid_replica_assignment,
                                         f"The manual partition assignment includes the broker {replicas} more than once.")
            for broker in replicas:
                if self._cluster.broker(broker) is None:
                    raise ControllerApiError(
                        ErrorCode.invalid_replica_assignment,
                        f"The manual partition assignment includes broker {broker}, but no such broker is registered.",
                    )
            if len(replicas) != len(assignments[0]):
                raise ControllerApiError(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
                    f"this is not consistent with previous partitions, which have {len(assignments[0])} replica(s).",
                )
        return assignments

    def _place(self, num_partitions: int, replication_factor: int) -> list[list[int]]:
        """Striped, rack-aware placement (Kafka's StripedReplicaPlacer, in outline): replicas
        spread across racks first, then brokers; leaders only on unfenced brokers."""
        heartbeat = self._cluster.heartbeat_manager
        registrations = self._cluster.brokers()
        usable = [
            b for b, r in sorted(registrations.items())
            if not r.fenced and not r.in_controlled_shutdown and (heartbeat is None or not heartbeat.is_shutting_down(b))
        ]
        if replication_factor > len(usable):
            raise ControllerApiError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
                f"of {replication_factor} cannot be reached because only {len(usable)} broker(s) are registered.",
            )
        racks: dict[str | None, list[int]] = {}
        for broker in usable:
            racks.setdefault(registrations[broker].rack, []).append(broker)
        rack_names = sorted(racks, key=lambda r: (r is None, r or ""))
        # Interleave racks so consecutive picks land on different racks.
        order: list[int] = []
        depth = max(len(brokers) for brokers in racks.values())
        for level in range(depth):
            order.extend(racks[r][level] for r in rack_names if level < len(racks[r]))
        start = self._rng.randrange(len(order))
        assignments = []
        for partition in range(num_partitions):
            first = (start + partition) % len(order)
            shift = partition // len(order)
            replicas = [order[first]]
            for i in range(1, replication_factor):
                replicas.append(order[(first + shift + i) % len(order)])
            # Stepping with a shift can land twice on a broker; fall back to the next free one.
            unique: list[int] = []
            for broker in replicas:
                candidate = broker
                while candidate in unique:
                    candidate = order[(order.index(candidate) + 1) % len(order)]
                unique.append(candidate)
            assignments.append(unique)
        return assignments

    def _default_directory(self, broker_id: int) -> uuid.UUID:
        registration = self._cluster.broker(broker_id)
        if registration is None or len(registration.directories) != 1:
            # With several (or unknown) directories the broker picks one and reports it.
            return _MIGRATING_DIRECTORY
        return registration.directories[0]

    # -- DeleteTopics ----------------------------------------------------------------------

    def delete_topics(self, request: DeleteTopicsRequest) -> ControllerResult[tuple[DeletableTopicResult, ...]]:
        """Delete topics named by name or by id (v6); the topic's configs go with it."""
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
            records.append(RecordAndVersion(RemoveTopicRecord(topic_id=topic_id), 0))
            for config_name in self._topic_configs(name):
                records.append(RecordAndVersion(ConfigRecord(resource_type=_TOPIC_RESOURCE_TYPE, resource_name=name,
                                                             name=config_name, value=None), 0))
            results.append(DeletableTopicResult(name=TopicName(name), topic_id=topic_id, error_code=ErrorCode.none))
        check_user_op_size(records)
        return ControllerResult(records, tuple(results), is_atomic=True)

    # -- the fan-out primitive -------------------------------------------------------------

    def _change_record(self, key: TopicPartition, change: PartitionChange) -> RecordAndVersion:
        mv = self._features.metadata_version_or_raise()
        record = PartitionChangeRecord(
            partition_id=key[1], topic_id=key[0],
            isr=change.isr, leader=change.leader, replicas=change.replicas,
            removing_replicas=change.removing_replicas, adding_replicas=change.adding_replicas,
            leader_recovery_state=change.leader_recovery_state, directories=change.directories,
            eligible_leader_replicas=change.eligible_leader_replicas, last_known_elr=change.last_known_elr,
        )
        return RecordAndVersion(record, mv.partition_change_record_version)

    def _builder(self, partition: PartitionRegistration, *, exclude: int | None = None) -> PartitionChangeBuilder:
        return PartitionChangeBuilder(
            partition,
            is_acceptable_leader=lambda b: b != exclude and self._cluster.is_active_broker(b),
            metadata_version=self._features.metadata_version_or_raise(),
            default_directory=self._default_directory,
        )

    def _leader_and_isr_updates(
        self, *, broker_to_remove: int | None, broker_to_add: int | None, partitions: Iterable[TopicPartition],
        records: list[RecordAndVersion],
    ) -> None:
        for key in partitions:
            partition = self._partitions.get(key)
            if partition is None:
                continue
            builder = self._builder(partition, exclude=broker_to_remove)
            if broker_to_remove is not None:
                builder.set_target_isr([r for r in partition.isr if r != broker_to_remove])
            change = builder.build()
            if change is not None:
                records.append(self._change_record(key, change))
        del broker_to_add

    # -- broker lifecycle ------------------------------------------------------------------

    def handle_broker_fenced(self, broker_id: int, records: list[RecordAndVersion]) -> None:
        registration = self._cluster.broker(broker_id)
        if registration is None:
            raise RuntimeError(f"Can't fence unknown broker {broker_id}")
        self._leader_and_isr_updates(broker_to_remove=broker_id, broker_to_add=None,
                                     partitions=self.partitions_with_broker_in_isr(broker_id), records=records)
        records.append(RecordAndVersion(
            BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=registration.epoch, fenced=1),
            self._registration_change_version(),
        ))

    def handle_broker_unfenced(self, broker_id: int, broker_epoch: int, records: list[RecordAndVersion]) -> None:
        records.append(RecordAndVersion(
            BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch, fenced=-1),
            self._registration_change_version(),
        ))
        # Leaderless partitions whose ISR holds this broker can come back online with it. The
        # acceptability check sees the broker as still fenced, so elect explicitly.
        for key in self.partitions_with_broker_in_isr(broker_id):
            partition = self._partitions.get(key)
            if partition is not None and partition.leader == NO_LEADER:
                builder = PartitionChangeBuilder(
                    partition,
                    is_acceptable_leader=lambda b: b == broker_id or self._cluster.is_active_broker(b),
                    metadata_version=self._features.metadata_version_or_raise(),
                    default_directory=self._default_directory,
                )
                change = builder.build()
                if change is not None:
                    records.append(self._change_record(key, change))

    def handle_broker_in_controlled_shutdown(self, broker_id: int, broker_epoch: int,
                                             records: list[RecordAndVersion]) -> None:
        records.append(RecordAndVersion(
            BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch, in_controlled_shutdown=1),
            self._registration_change_version(),
        ))
        self._leader_and_isr_updates(broker_to_remove=broker_id, broker_to_add=None,
                                     partitions=self.partitions_with_broker_in_isr(broker_id), records=records)

    def handle_broker_unclean_shutdown(self, broker_id: int, records: list[RecordAndVersion]) -> None:
        """A new incarnation registered: the old one's ISR memberships are not to be trusted."""
        self._leader_and_isr_updates(broker_to_remove=broker_id, broker_to_add=None,
                                     partitions=self.partitions_with_broker_in_isr(broker_id), records=records)

    def _registration_change_version(self) -> int:
        mv = self._features.metadata_version_or_raise()
        if mv.is_directory_assignment_supported:
            return 2
        return 1 if mv.is_in_controlled_shutdown_state_supported else 0

    def process_broker_heartbeat(
        self, *, broker_id: int, broker_epoch: int, current_metadata_offset: int, want_fence: bool,
        want_shut_down: bool, next_write_offset: int,
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
        records: list[RecordAndVersion] = []
        if current is not nxt:
            if nxt in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW):
                self.handle_broker_fenced(broker_id, records)
            elif nxt is BrokerControlState.UNFENCED:
                self.handle_broker_unfenced(broker_id, broker_epoch, records)
            elif nxt is BrokerControlState.CONTROLLED_SHUTDOWN:
                self.handle_broker_in_controlled_shutdown(broker_id, broker_epoch, records)
        heartbeat.touch(broker_id, fenced=nxt.fenced, metadata_offset=current_metadata_offset)
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
        records: list[RecordAndVersion] = []
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
        records: list[RecordAndVersion] = []
        self._leader_and_isr_updates(broker_to_remove=broker_id, broker_to_add=None,
                                     partitions=self.partitions_with_broker_in_isr(broker_id), records=records)
        records.append(RecordAndVersion(UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=registration.epoch), 0))
        return ControllerResult(records, None, is_atomic=True)

    # -- AlterPartition --------------------------------------------------------------------

    def alter_partition(
        self, request: alter_partition_request.AlterPartitionRequest
    ) -> ControllerResult[alter_partition_response.AlterPartitionResponse]:
        broker_id = int(request.broker_id)
        self._cluster.check_broker_epoch(broker_id, int(request.broker_epoch))
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
        partition = self._partitions.get((topic_id, partition_id))
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
        builder = self._builder(partition).set_target_isr(new_isr).set_target_leader_recovery_state(recovery)
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

