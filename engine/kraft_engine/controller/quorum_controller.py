"""The quorum controller: the raft listener that turns admin requests into metadata records.

`QuorumController` wires the control managers onto the event-handling core. The shell feeds it
events in the order its single asyncio task dequeues them — raft callbacks (`handle_commit`,
`handle_load_snapshot`, `handle_leader_change`), client requests, ticks of the clock — and after
each one performs `take_effects()`: appends to schedule on the raft layer (bound to the claim
epoch), completions to hand to waiting clients, and a resignation when leadership is lost.

Contract with the raft layer (as Kafka's RaftClient gives it):
- `handle_leader_change` naming this node arrives only once every batch before the new epoch's
  start has been delivered through `handle_commit`; the log end offset it carries is where this
  controller's first append will land.
- The bootstrap checkpoint (`00000000000000000000-0000000000.checkpoint`) is not delivered as a
  snapshot: the shell reads its records and passes them as `bootstrap_records`.
- If an append is refused or placed at another offset than `ScheduledAppend.base_offset`, the
  shell calls `renounce()`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kio.schema.alter_partition.v3.request import AlterPartitionRequest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest
from kio.schema.controller_registration.v0.request import ControllerRegistrationRequest
from kio.schema.create_topics.v7.request import CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.update_features.v1.request import UpdateFeaturesRequest

from kraft_engine.controller.cluster_control import ClusterControlManager
from kraft_engine.controller.configuration_control import ConfigurationControlManager
from kraft_engine.controller.event_handling import ControllerFault, EventHandling
from kraft_engine.controller.feature_control import (
    METADATA_VERSION_FEATURE,
    FeatureControlManager,
    KRaftVersionUpgrader,
    UpgradeType,
)
from kraft_engine.controller.periodic_tasks import PeriodicTask
from kraft_engine.controller.replication_control import ReplicationControlManager
from kraft_engine.controller.results import (
    MAX_RECORDS_PER_BATCH,
    ApiError,
    CommittedBatch,
    ControllerApiError,
    ControllerEffects,
    ControllerResult,
    RecordAndVersion,
)
from kraft_engine.metadata import VersionRange
from kraft_engine.records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataVersion,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    ZkMigrationStateRecord,
)

if TYPE_CHECKING:
    import random

_TOPIC_RESOURCE_TYPE = 2  # ConfigResource.Type.TOPIC

DEFAULT_SESSION_TIMEOUT_MS = 9000
"""broker.session.timeout.ms's default."""

__all__ = ["QuorumController", "bootstrap_metadata_version"]


def bootstrap_metadata_version(records: Sequence[RecordAndVersion]) -> MetadataVersion:
    """The metadata.version the bootstrap records pin. Kafka refuses to start without one."""
    for record, _ in records:
        if isinstance(record, FeatureLevelRecord) and record.name == METADATA_VERSION_FEATURE:
            return MetadataVersion.from_feature_level(int(record.feature_level))
    raise ValueError("The bootstrap metadata does not set metadata.version; format the storage first.")


class QuorumController:
    def __init__(
        self,
        *,
        node_id: int,
        quorum_node_ids: Sequence[int],
        bootstrap_records: Sequence[RecordAndVersion],
        local_supported_features: Mapping[str, VersionRange],
        cluster_id: str,
        rng: random.Random,
        kraft_version_upgrader: KRaftVersionUpgrader | None = None,
        max_records_per_batch: int = MAX_RECORDS_PER_BATCH,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        default_num_partitions: int = 1,
        default_replication_factor: int = 1,
    ) -> None:
        self.node_id = node_id
        self._bootstrap_records = list(bootstrap_records)
        self._bootstrap_metadata_version = bootstrap_metadata_version(self._bootstrap_records)
        self.events = EventHandling(node_id=node_id, max_records_per_batch=max_records_per_batch)
        registry = self.events.snapshot_registry
        self.cluster_control = ClusterControlManager(
            registry,
            cluster_id=cluster_id,
            session_timeout_ms=session_timeout_ms,
            directory_assignment_supported=lambda: self.feature_control.metadata_version_or_raise()
            .is_directory_assignment_supported,
        )
        self.feature_control = FeatureControlManager(
            registry,
            node_id=node_id,
            local_supported=local_supported_features,
            quorum_node_ids=quorum_node_ids,
            broker_supported=self.cluster_control.broker_supported,
            controller_supported=self.cluster_control.controller_supported,
            kraft_version_upgrader=kraft_version_upgrader,
        )
        self.configuration_control = ConfigurationControlManager(registry)
        self.replication_control = ReplicationControlManager(
            registry,
            cluster_control=self.cluster_control,
            feature_control=self.feature_control,
            rng=rng,
            topic_configs=lambda name: self.configuration_control.configs(_TOPIC_RESOURCE_TYPE, name),
            default_num_partitions=default_num_partitions,
            default_replication_factor=default_replication_factor,
        )
        self._register_replayers()
        # Sampling 8 times per session timeout fences a dead broker within ~112.5% of it.
        self.events.register_periodic_task(PeriodicTask(
            "maybeFenceStaleBroker", max(1, session_timeout_ms // 8), self._maybe_fence_stale_broker
        ))

    def _register_replayers(self) -> None:
        events = self.events
        offsets = events.offset_control
        events.register_replayer(FeatureLevelRecord, self.feature_control.replay)
        cluster = self.cluster_control
        events.register_replayer(RegisterBrokerRecord, cluster.replay_register_broker)
        events.register_replayer(UnregisterBrokerRecord, cluster.replay_unregister_broker)
        events.register_replayer(FenceBrokerRecord, cluster.replay_fence_broker)
        events.register_replayer(UnfenceBrokerRecord, cluster.replay_unfence_broker)
        events.register_replayer(BrokerRegistrationChangeRecord, cluster.replay_broker_registration_change)
        events.register_replayer(RegisterControllerRecord, cluster.replay_register_controller)
        replication = self.replication_control
        events.register_replayer(TopicRecord, replication.replay_topic)
        events.register_replayer(PartitionRecord, replication.replay_partition)
        events.register_replayer(PartitionChangeRecord, replication.replay_partition_change)
        events.register_replayer(RemoveTopicRecord, replication.replay_remove_topic)
        events.register_replayer(ConfigRecord, self.configuration_control.replay)
        events.register_replayer(BeginTransactionRecord, lambda _, offset: offsets.replay_begin_transaction(offset))
        events.register_replayer(EndTransactionRecord, lambda _, offset: offsets.replay_end_transaction(offset))
        events.register_replayer(AbortTransactionRecord, lambda _, offset: offsets.replay_abort_transaction(offset))
        # Records that carry no state: the no-op keeps the log moving, and the ZK migration
        # state is a vestige kept so logs of clusters migrated under 3.x still replay.
        events.register_replayer(NoOpRecord, lambda _, __: None)
        events.register_replayer(ZkMigrationStateRecord, lambda _, __: None)

    # -- shell interface -------------------------------------------------------------------

    def take_effects(self) -> ControllerEffects:
        return self.events.take_effects()

    def is_active(self) -> bool:
        return self.events.is_active()

    def handle_commit(self, batch: CommittedBatch) -> None:
        self.events.handle_commit(batch)

    def handle_load_snapshot(self, *, last_contained_offset: int, epoch: int, records: Sequence[object]) -> None:
        self.events.handle_load_snapshot(last_contained_offset=last_contained_offset, epoch=epoch, records=records)

    def handle_leader_change(self, *, leader_id: int | None, epoch: int, log_end_offset: int, now_ms: int) -> None:
        """Raft elected `leader_id` (None: no leader known) for `epoch`."""
        self.events.leader_id = leader_id
        self.events.leader_epoch = epoch
        if self.events.is_active() and epoch > self.events.cur_claim_epoch:
            self.renounce()
        if leader_id == self.node_id and not self.events.is_active():
            self._claim(epoch=epoch, log_end_offset=log_end_offset, now_ms=now_ms)

    def renounce(self) -> None:
        """Give up leadership (lost it, or the raft layer refused an append)."""
        self.events.renounce()
        self.cluster_control.deactivate()

    def next_deadline_ms(self) -> int | None:
        return self.events.next_deadline_ms()

    def tick(self, now_ms: int) -> None:
        self.events.run_due_tasks(now_ms)

    # -- activation ------------------------------------------------------------------------

    def _claim(self, *, epoch: int, log_end_offset: int, now_ms: int) -> None:
        self.events.claim(epoch=epoch, log_end_offset=log_end_offset)
        self.cluster_control.activate()
        # Nothing else runs between the claim and the activation records: this is Kafka's
        # "prepend the activation event".
        try:
            result = self._activation_records()
        except Exception as error:
            raise ControllerFault(f"exception while completing controller activation: {error}") from error
        if result.records:
            self.events.append_records(result)
        self.events.periodic.activate(now_ms)

    def _activation_records(self) -> ControllerResult[None]:
        transaction_start = self.events.offset_control.transaction_start_offset
        if not self.events.log_replayed_any_record:
            level = self._bootstrap_metadata_version
            transactional = level.is_metadata_transaction_supported
            records: list[RecordAndVersion] = []
            if transaction_start != -1:
                # A previous leader died inside the bootstrap transaction: abort and redo it.
                if not transactional:
                    raise RuntimeError(
                        f"Detected partial bootstrap records transaction at {transaction_start}, but the "
                        f"metadata.version {level} does not support transactions. Cannot continue."
                    )
                records.append(RecordAndVersion(AbortTransactionRecord(reason="Controller failover"), 0))
            if transactional:
                records.append(RecordAndVersion(BeginTransactionRecord(name="Bootstrap records"), 0))
            records.extend(self._bootstrap_records)
            if transactional:
                records.append(RecordAndVersion(EndTransactionRecord(), 0))
                return ControllerResult(records, None)
            return ControllerResult(records, None, is_atomic=True)
        if transaction_start != -1:
            level = self.feature_control.metadata_version_or_raise()
            if not level.is_metadata_transaction_supported:
                raise RuntimeError(
                    f"Detected in-progress transaction at offset {transaction_start}, but the "
                    f"metadata.version {level} does not support transactions. Cannot continue."
                )
            return ControllerResult([RecordAndVersion(AbortTransactionRecord(reason="Controller failover"), 0)], None,
                                    is_atomic=True)
        return ControllerResult((), None)

    # -- metrics (plain data; the shell exports them) --------------------------------------

    def active_controller_count(self) -> int:
        return self.events.active_controller_count()

    def new_active_controllers_count(self) -> int:
        return self.events.new_active_controllers_count

    def last_committed_record_offset(self) -> int:
        return self.events.offset_control.last_committed_offset

    def last_stable_offset(self) -> int:
        return self.events.offset_control.last_stable_offset

    # -- UpdateFeatures --------------------------------------------------------------------

    def update_features(self, request: UpdateFeaturesRequest) -> int:
        """Returns the token; its completion carries an ApiError (NONE on success)."""

        def operation() -> ControllerResult[ApiError]:
            updates = {u.feature: int(u.max_version_level) for u in request.feature_updates}
            upgrade_types = {u.feature: UpgradeType.of(int(u.upgrade_type)) for u in request.feature_updates}
            return self.feature_control.update_features(
                updates, upgrade_types=upgrade_types, validate_only=bool(request.validate_only)
            )

        return self.events.write("updateFeatures", operation)

    def finalized_features(self) -> dict[str, int]:
        """Finalized feature levels as of the stable offset."""
        return self.events.read(self.feature_control.finalized_features)

    # -- broker and controller lifecycle ---------------------------------------------------

    def track_broker_heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int) -> None:
        """Record a heartbeat's arrival at once, before its event is queued (and again if that
        event times out in the queue): a busy controller must not fence live brokers."""
        self.cluster_control.tracker.update_contact_time(broker_id, broker_epoch, now_ms)

    def register_broker(self, request: BrokerRegistrationRequest, *, now_ms: int) -> int:
        """Completion: BrokerRegistrationReply (the new broker epoch)."""

        def operation() -> ControllerResult[object]:
            mv = self.feature_control.metadata_version_or_raise()
            result = self.cluster_control.register_broker(
                request,
                new_broker_epoch=self.events.offset_control.next_write_offset,
                finalized_features=self.feature_control.finalized_features(),
                record_version=mv.register_broker_record_version,
                now_ms=now_ms,
                add_unclean_shutdown_records=self.replication_control.handle_broker_unclean_shutdown,
            )
            self.cluster_control.tracker.update_contact_time(
                int(request.broker_id), result.response.broker_epoch, now_ms
            )
            return result  # type: ignore[return-value]

        return self.events.write("registerBroker", operation)

    def broker_heartbeat(self, request: BrokerHeartbeatRequest, *, now_ms: int) -> int:
        """Completion: BrokerHeartbeatReply."""
        self.track_broker_heartbeat(int(request.broker_id), int(request.broker_epoch), now_ms)

        def operation() -> ControllerResult[object]:
            return self.replication_control.process_broker_heartbeat(  # type: ignore[return-value]
                broker_id=int(request.broker_id),
                broker_epoch=int(request.broker_epoch),
                current_metadata_offset=int(request.current_metadata_offset),
                want_fence=bool(request.want_fence),
                want_shut_down=bool(request.want_shut_down),
                next_write_offset=self.events.offset_control.next_write_offset,
            )

        return self.events.write("processBrokerHeartbeat", operation)

    def register_controller(self, request: ControllerRegistrationRequest) -> int:
        def operation() -> ControllerResult[None]:
            mv = self.feature_control.metadata_version_or_raise()
            if not mv.is_controller_registration_supported:
                raise ControllerApiError(
                    ErrorCode.unsupported_version,
                    f"The current MetadataVersion {mv} is too old to support controller registrations.",
                )
            return self.cluster_control.register_controller(request, record_version=mv.register_controller_record_version)

        return self.events.write("registerController", operation)

    def unregister_broker(self, broker_id: int) -> int:
        return self.events.write("unregisterBroker", lambda: self.replication_control.unregister_broker(broker_id))

    def _maybe_fence_stale_broker(self, now_ms: int) -> tuple[ControllerResult[None], bool]:
        return self.replication_control.maybe_fence_one_stale_broker(now_ms), False

    # -- topics and partitions -------------------------------------------------------------

    def create_topics(self, request: CreateTopicsRequest) -> int:
        """Completion: a tuple of CreatableTopicResult (kio create_topics v7)."""
        return self.events.write("createTopics", lambda: self.replication_control.create_topics(request))

    def delete_topics(self, request: DeleteTopicsRequest) -> int:
        """Completion: a tuple of DeletableTopicResult (kio delete_topics v6)."""
        return self.events.write("deleteTopics", lambda: self.replication_control.delete_topics(request))

    def alter_partition(self, request: AlterPartitionRequest) -> int:
        """Completion: an AlterPartitionResponse (kio alter_partition v3)."""
        return self.events.write("alterPartition", lambda: self.replication_control.alter_partition(request))

    def fenced_broker_count(self) -> int:
        return self.cluster_control.fenced_broker_count()

    def active_broker_count(self) -> int:
        return self.cluster_control.active_broker_count()

    def offline_partitions_count(self) -> int:
        return self.replication_control.offline_partition_count()
