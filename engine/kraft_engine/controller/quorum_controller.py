"""The quorum controller: the raft listener that turns admin requests into metadata records.

`QuorumController` wires the control managers onto the event-handling core. The shell feeds it
events in the order its single asyncio task dequeues them — raft callbacks (`handle_commit`,
`handle_load_snapshot`, `handle_leader_change`), client requests, ticks of the clock — and after
each one performs `take_effects()`: completions to hand to waiting clients, failures, and a
resignation when leadership is lost. Records reach the raft layer during the event, through the
`RaftAppendPort` the shell hands in: raft reserves their offsets, the controller applies them
there, then raft may write them (Kafka's prepareAppend / schedulePreparedAppend).

Contract with the raft layer (as Kafka's RaftClient gives it):
- `handle_leader_change` naming this node arrives only once every batch before the new epoch's
  start has been delivered through `handle_commit`.
- Raft assigns every offset, its own control batches' included; it delivers control batches as
  commits without records, which the controller does not count as its own offsets.
- The bootstrap checkpoint (`00000000000000000000-0000000000.checkpoint`) is not delivered as a
  snapshot: the shell reads its records and passes them as `bootstrap_records`.
- If raft refuses an append (`AppendRefused`), the controller renounces by itself.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest
from kio.schema.allocate_producer_ids.v0.response import AllocateProducerIdsResponse
from kio.schema.alter_partition.v3.request import AlterPartitionRequest
from kio.schema.alter_partition_reassignments.v1.request import AlterPartitionReassignmentsRequest
from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest
from kio.schema.assign_replicas_to_dirs.v0.request import AssignReplicasToDirsRequest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest
from kio.schema.controller_registration.v0.request import ControllerRegistrationRequest
from kio.schema.create_acls.v3.request import CreateAclsRequest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest
from kio.schema.create_topics.v7.request import CreateTopicsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest
from kio.schema.describe_configs.v4.response import DescribeConfigsResponse
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import IncrementalAlterConfigsRequest
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.list_partition_reassignments.v0.response import ListPartitionReassignmentsResponse
from kio.schema.types import ProducerId
from kio.schema.update_features.v1.request import UpdateFeaturesRequest
from kio.static.primitive import i32, i32Timedelta

from kraft_engine.controller.client_quota_control import ClientQuotaControlManager
from kraft_engine.controller.cluster_control import ClusterControlManager
from kraft_engine.controller.configuration_control import ConfigurationControlManager
from kraft_engine.controller.controller_metrics import ControllerMetrics
from kraft_engine.controller.event_handling import ControllerFault, EventHandling
from kraft_engine.controller.feature_control import (
    METADATA_VERSION_FEATURE,
    FeatureControlManager,
    KRaftVersionUpgrader,
    UpgradeType,
)
from kraft_engine.controller.periodic_tasks import PeriodicTask
from kraft_engine.controller.producer_ids_control import ProducerIdsControlManager
from kraft_engine.controller.raft_port import AppendRefused, RaftAppendPort
from kraft_engine.controller.replication_control import ReplicationControlManager
from kraft_engine.controller.results import (
    MAX_RECORDS_PER_BATCH,
    ApiError,
    ControllerApiError,
    ControllerEffects,
    ControllerResult,
    RecordAndVersion,
)
from kraft_engine.controller.security_control import (
    AclControlManager,
    DelegationTokenControlManager,
    ScramControlManager,
)
from kraft_engine.metadata import VersionRange
from kraft_engine.raft import CommittedBatch
from kraft_engine.records import (
    AbortTransactionRecord,
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ClearElrRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataVersion,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    ZkMigrationStateRecord,
)

if TYPE_CHECKING:
    import random


DEFAULT_SESSION_TIMEOUT_MS = 9000
"""broker.session.timeout.ms's default."""

DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS = 300 * 1000
"""leader.imbalance.check.interval.seconds' default (300), in ms."""

DEFAULT_METADATA_MAX_IDLE_INTERVAL_MS = 500
"""metadata.max.idle.interval.ms' default."""

DEFAULT_UNCLEAN_LEADER_ELECTION_INTERVAL_MS = 5 * 60 * 1000
"""How often leaderless partitions of topics that allow unclean election are checked (Kafka's
unclean.leader.election.interval.ms, 5 minutes)."""

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
        raft: RaftAppendPort,
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
        static_config: Mapping[str, str] | None = None,
        auto_leader_rebalance_enable: bool = True,
        leader_imbalance_check_interval_ms: int = DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS,
        metadata_max_idle_interval_ms: int = DEFAULT_METADATA_MAX_IDLE_INTERVAL_MS,
        unclean_leader_election_interval_ms: int = DEFAULT_UNCLEAN_LEADER_ELECTION_INTERVAL_MS,
    ) -> None:
        """`static_config` is this node's server.properties (Kafka's keys): the broker-level
        fallbacks of topic configs such as unclean.leader.election.enable. A
        `metadata_max_idle_interval_ms` of 0 disables the NoOpRecord writer, and
        `auto_leader_rebalance_enable=False` the preferred-leader balancing, as in Kafka.
        `raft` is the raft layer's append port: the only source of the offsets records land at."""
        self.node_id = node_id
        self._rng = rng
        self._quorum_node_ids = frozenset(quorum_node_ids)
        self._bootstrap_records = list(bootstrap_records)
        self._bootstrap_metadata_version = bootstrap_metadata_version(self._bootstrap_records)
        self.events = EventHandling(node_id=node_id, raft=raft, max_records_per_batch=max_records_per_batch)
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
        self.configuration_control = ConfigurationControlManager(
            registry,
            node_id=node_id,
            static_config=static_config,
            topic_exists=lambda name: self.replication_control.topic_id(name) is not None,
            node_exists=lambda node: self.cluster_control.broker(node) is not None or node in self._quorum_node_ids,
            elr_enabled=self.feature_control.is_elr_enabled,
        )
        self.replication_control = ReplicationControlManager(
            registry,
            cluster_control=self.cluster_control,
            feature_control=self.feature_control,
            rng=rng,
            default_num_partitions=default_num_partitions,
            default_replication_factor=default_replication_factor,
            configuration_control=self.configuration_control,
        )
        self.producer_ids_control = ProducerIdsControlManager(registry, cluster_control=self.cluster_control)
        self.acl_control = AclControlManager(registry)
        self.scram_control = ScramControlManager(registry)
        self.delegation_token_control = DelegationTokenControlManager(registry)
        self.client_quota_control = ClientQuotaControlManager(registry)
        self._register_replayers()
        self.events.register_deactivator(self.cluster_control.deactivate)
        # Kafka samples 8 times per session timeout, which fences a dead broker within ~112.5% of
        # it. Here the check also runs when the oldest session expires, if that is sooner, so the
        # fence starts at the session timeout itself (issue 16: within 10 % of the session timeout
        # plus the fence's cost). Once a broker is fenced, the next expired one waits a period, as
        # in Kafka: one fence per run, each visible before the next.
        self.events.register_periodic_task(PeriodicTask(
            "maybeFenceStaleBroker", max(1, session_timeout_ms // 8), self._maybe_fence_stale_broker,
            due_ms=self._next_session_expiry_ms,
        ))
        if auto_leader_rebalance_enable:
            self.events.register_periodic_task(PeriodicTask(
                "maybeBalancePartitionLeaders", leader_imbalance_check_interval_ms, self._maybe_balance_leaders
            ))
        self.events.register_periodic_task(PeriodicTask(
            "maybeElectUncleanLeaders", unclean_leader_election_interval_ms, self._maybe_elect_unclean_leaders
        ))
        if metadata_max_idle_interval_ms > 0:
            self.events.register_periodic_task(PeriodicTask(
                "writeNoOpRecord", metadata_max_idle_interval_ms, self._write_no_op_record
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
        events.register_run_replayer(PartitionChangeRecord, replication.replay_partition_changes)
        events.register_change_run_replayer(replication.replay_partition_change_run)
        events.register_replayer(RemoveTopicRecord, replication.replay_remove_topic)
        events.register_replayer(ClearElrRecord, replication.replay_clear_elr)
        events.register_replayer(ConfigRecord, self.configuration_control.replay)
        events.register_replayer(ProducerIdsRecord, self.producer_ids_control.replay)
        events.register_replayer(AccessControlEntryRecord, self.acl_control.replay)
        events.register_replayer(RemoveAccessControlEntryRecord, self.acl_control.replay_remove)
        events.register_replayer(UserScramCredentialRecord, self.scram_control.replay)
        events.register_replayer(RemoveUserScramCredentialRecord, self.scram_control.replay_remove)
        events.register_replayer(DelegationTokenRecord, self.delegation_token_control.replay)
        events.register_replayer(RemoveDelegationTokenRecord, self.delegation_token_control.replay_remove)
        events.register_replayer(ClientQuotaRecord, self.client_quota_control.replay)
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

    @property
    def raft_port(self) -> RaftAppendPort:
        """The raft append port this controller writes through (the shell routes its calls)."""
        return self.events.raft_port

    def is_active(self) -> bool:
        return self.events.is_active()

    def handle_commit(self, batch: CommittedBatch[object]) -> None:
        self.events.handle_commit(batch)

    def set_quorum_node_ids(self, node_ids: Iterable[int]) -> None:
        """The raft voter set changed: the controllers that must register before a feature update
        (and that count as existing nodes for broker configs) are the new voters."""
        ids = frozenset(node_ids)
        self._quorum_node_ids = ids
        self.feature_control.set_quorum_node_ids(ids)

    def handle_load_snapshot(self, *, last_contained_offset: int, epoch: int, records: Sequence[object]) -> None:
        self.events.handle_load_snapshot(last_contained_offset=last_contained_offset, epoch=epoch, records=records)

    def handle_leader_change(self, *, leader_id: int | None, epoch: int, now_ms: int, raft_is_leader: bool) -> None:
        """Raft elected `leader_id` (None: no leader known) for `epoch`.

        `raft_is_leader` is whether raft itself holds this epoch's leadership (its role is
        Leader in `epoch`, and it fired this change only once the listener caught up to the
        epoch's start). A node restarted from a quorum-state that names itself leader is
        Resigned in that epoch: raft names it leader but will refuse every append, so it must
        not activate, append, or renounce on that account."""
        self._observe_time(now_ms)
        self.events.leader_id = leader_id
        self.events.leader_epoch = epoch
        if self.events.is_active() and epoch > self.events.cur_claim_epoch:
            self.renounce()
        if leader_id == self.node_id and raft_is_leader and not self.events.is_active():
            self._claim(epoch=epoch, now_ms=now_ms)

    def renounce(self) -> None:
        """Give up leadership (lost it, or the raft layer refused an append)."""
        self.events.renounce()

    def next_deadline_ms(self) -> int | None:
        return self.events.next_deadline_ms()

    def tick(self, now_ms: int) -> None:
        self._observe_time(now_ms)
        self.events.run_due_tasks(now_ms)

    def _observe_time(self, now_ms: int) -> None:
        self.events.clock_ms = max(self.events.clock_ms, now_ms)

    # -- activation ------------------------------------------------------------------------

    def _claim(self, *, epoch: int, now_ms: int) -> None:
        self.events.claim(epoch=epoch)
        self.cluster_control.activate(now_ms)
        # Nothing else runs between the claim and the activation records: this is Kafka's
        # "prepend the activation event".
        try:
            result = self._activation_records()
        except Exception as error:
            raise ControllerFault(f"exception while completing controller activation: {error}") from error
        if result.records:
            try:
                self.events.append_records(result)
            except AppendRefused:
                self.renounce()  # raft moved on before we heard; its next leader change follows
                return
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
        event times out in the queue: Kafka's processExpiredBrokerHeartbeat): a busy controller
        must not fence live brokers for its own slowness. Safe to call from outside the
        controller's event loop: it touches only the tracker."""
        self.cluster_control.tracker.update_contact_time(broker_id, broker_epoch, now_ms)

    def register_broker(
        self, request: BrokerRegistrationRequest, *, now_ms: int, clean_shutdown_detection: bool = True
    ) -> int:
        """Completion: BrokerRegistrationReply (the new broker epoch). `clean_shutdown_detection`:
        the request's version (3 and later) carries the broker's previous epoch."""
        self._observe_time(now_ms)

        def operation() -> ControllerResult[object]:
            mv = self.feature_control.metadata_version_or_raise()
            result = self.cluster_control.register_broker(
                request,
                new_broker_epoch=self.events.next_write_offset(),
                finalized_features=self.feature_control.finalized_features(),
                record_version=mv.register_broker_record_version,
                now_ms=now_ms,
                add_shutdown_records=lambda broker_id, clean, records: self.replication_control.handle_broker_shutdown(
                    broker_id, clean=clean, records=records),
                clean_shutdown_detection=clean_shutdown_detection,
            )
            self.cluster_control.tracker.update_contact_time(
                int(request.broker_id), result.response.broker_epoch, now_ms
            )
            return result  # type: ignore[return-value]

        return self.events.write("registerBroker", operation)

    def broker_heartbeat(self, request: BrokerHeartbeatRequest, *, now_ms: int) -> int:
        """Completion: BrokerHeartbeatReply."""
        self._observe_time(now_ms)
        self.track_broker_heartbeat(int(request.broker_id), int(request.broker_epoch), now_ms)

        def operation() -> ControllerResult[object]:
            return self.replication_control.process_broker_heartbeat(  # type: ignore[return-value]
                broker_id=int(request.broker_id),
                broker_epoch=int(request.broker_epoch),
                current_metadata_offset=int(request.current_metadata_offset),
                want_fence=bool(request.want_fence),
                want_shut_down=bool(request.want_shut_down),
                next_write_offset=self.events.next_write_offset(),
                offline_log_dirs=[d for d in request.offline_log_dirs if d is not None],
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

    def _next_session_expiry_ms(self, now_ms: int) -> int | None:
        return self.cluster_control.tracker.next_expiry_ms()

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

    def create_partitions(self, request: CreatePartitionsRequest) -> int:
        """Completion: a CreatePartitionsResponse (kio create_partitions v3)."""
        return self.events.write("createPartitions", lambda: self.replication_control.create_partitions(request))

    def alter_partition_reassignments(self, request: AlterPartitionReassignmentsRequest) -> int:
        """Completion: an AlterPartitionReassignmentsResponse (kio alter_partition_reassignments v1)."""
        return self.events.write("alterPartitionReassignments",
                                 lambda: self.replication_control.alter_partition_reassignments(request))

    def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        """Ongoing reassignments as of the stable offset."""
        return self.events.read(lambda epoch: self.replication_control.list_partition_reassignments(
            request, epoch=epoch))

    def elect_leaders(self, request: ElectLeadersRequest) -> int:
        """Completion: an ElectLeadersResponse (kio elect_leaders v2)."""
        return self.events.write("electLeaders", lambda: self.replication_control.elect_leaders(request))

    def assign_replicas_to_dirs(self, request: AssignReplicasToDirsRequest) -> int:
        """Completion: an AssignReplicasToDirsResponse (kio assign_replicas_to_dirs v0)."""
        return self.events.write("assignReplicasToDirs",
                                 lambda: self.replication_control.assign_replicas_to_dirs(request))

    def _maybe_balance_leaders(self, now_ms: int) -> tuple[ControllerResult[None], bool]:
        result = self.replication_control.maybe_balance_partition_leaders()
        return ControllerResult(result.records, None), result.response

    def _maybe_elect_unclean_leaders(self, now_ms: int) -> tuple[ControllerResult[None], bool]:
        result = self.replication_control.maybe_elect_unclean_leaders()
        return ControllerResult(result.records, None), result.response

    def _write_no_op_record(self, now_ms: int) -> tuple[ControllerResult[None], bool]:
        # Keeps the log moving so brokers can tell a live controller from a stalled one.
        if not self.feature_control.metadata_version_or_raise().is_no_op_record_supported:
            return ControllerResult((), None), False
        return ControllerResult([RecordAndVersion(NoOpRecord(), 0)], None), False

    # -- ACLs ------------------------------------------------------------------------------

    def create_acls(self, request: CreateAclsRequest) -> int:
        """Completion: a CreateAclsResponse (kio create_acls v3)."""
        return self.events.write("createAcls", lambda: self.acl_control.create_acls(request, rng=self._rng))

    def delete_acls(self, request: DeleteAclsRequest) -> int:
        """Completion: a DeleteAclsResponse (kio delete_acls v3)."""
        return self.events.write("deleteAcls", lambda: self.acl_control.delete_acls(request))

    # -- SCRAM credentials -----------------------------------------------------------------

    def alter_user_scram_credentials(self, request: AlterUserScramCredentialsRequest) -> int:
        """Completion: an AlterUserScramCredentialsResponse (kio alter_user_scram_credentials v0)."""
        return self.events.write("alterUserScramCredentials", lambda: self.scram_control.alter_credentials(
            request, scram_supported=self.feature_control.metadata_version_or_raise().is_scram_supported))

    # -- configs ---------------------------------------------------------------------------

    def incremental_alter_configs(self, request: IncrementalAlterConfigsRequest) -> int:
        """Completion: an IncrementalAlterConfigsResponse (kio incremental_alter_configs v1)."""

        def min_replication_factor(topic_name: str) -> int | None:
            topic_id = self.replication_control.topic_id(topic_name)
            partition = self.replication_control.partition(topic_id, 0) if topic_id is not None else None
            return len(partition.replicas) if partition is not None else None

        return self.events.write("incrementalAlterConfigs", lambda: self.configuration_control.incremental_alter_configs(
            request, min_replication_factor=min_replication_factor))

    def describe_configs(self, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
        """Configs in force as of the stable offset, with sources (and synonyms when asked)."""
        return self.events.read(lambda epoch: self.configuration_control.describe_configs(request, epoch=epoch))

    # -- producer ids ----------------------------------------------------------------------

    def allocate_producer_ids(self, request: AllocateProducerIdsRequest) -> int:
        """Completion: an AllocateProducerIdsResponse (kio allocate_producer_ids v0)."""

        def operation() -> ControllerResult[AllocateProducerIdsResponse]:
            result = self.producer_ids_control.generate_next_producer_id(int(request.broker_id),
                                                                        int(request.broker_epoch))
            block = result.response
            return ControllerResult(result.records, AllocateProducerIdsResponse(
                throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none,
                producer_id_start=ProducerId(block.first_producer_id), producer_id_len=i32(block.size),
            ))

        return self.events.write("allocateProducerIds", operation)

    # -- metrics ---------------------------------------------------------------------------

    def metrics(self, now_ms: int) -> ControllerMetrics:
        """A snapshot of Kafka's controller metrics; lag is measured against `now_ms`."""
        events = self.events
        replication = self.replication_control
        timestamp_ms = events.last_applied_timestamp_ms
        return ControllerMetrics(
            active_controller_count=events.active_controller_count(),
            new_active_controllers_count=events.new_active_controllers_count,
            fenced_broker_count=self.cluster_control.fenced_broker_count(),
            active_broker_count=self.cluster_control.active_broker_count(),
            global_topic_count=replication.global_topic_count(),
            global_partition_count=replication.global_partition_count(),
            offline_partitions_count=replication.offline_partition_count(),
            preferred_replica_imbalance_count=replication.preferred_replica_imbalance_count(),
            metadata_error_count=events.metadata_error_count,
            last_applied_record_offset=events.last_applied_offset,
            last_committed_record_offset=events.offset_control.last_committed_offset,
            last_applied_record_timestamp_ms=timestamp_ms,
            last_applied_record_lag_ms=max(0, now_ms - timestamp_ms) if timestamp_ms >= 0 else 0,
        )
