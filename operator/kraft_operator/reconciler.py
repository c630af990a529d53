"""One reconcile of one KRaftCluster: observe (runtime, then the cluster through the admin client),
plan (pure), apply the actions in order. Both the kopf handlers and `kraftwerk up` call this; they
differ only in the runtime they pass and in where they publish the returned status.

An action the runtime fails to perform stops the rest of that reconcile; the published status then
says so (Degraded, reason ActionFailed) and the next reconcile decides afresh from what exists.
"""

from __future__ import annotations

import datetime
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.alter_partition_reassignments.v1.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.types import BrokerId, TopicName
from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest
from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest
from kio.static.primitive import i8, i16, i32, i32Timedelta

from kraft_engine.admin import QuorumAdmin, QuorumAdminError
from kraft_engine.admin.controller_admin import ControllerAdmin, ControllerAdminError
from kraft_engine.kafka_uuid import from_kafka_str
from kraft_engine.protocol.security import ClientSecurity
from kraft_engine.raft import Endpoint, ReplicaKey
from kraft_engine.records import metadata_version as mv
from kraft_operator.admin import AdminError, ClusterAdmin
from kraft_operator.certificates import CertificateError
from kraft_operator.config_rules import EngineConfigRules
from kraft_operator.metrics import OperatorMetrics
from kraft_operator.model import (
    Condition,
    ConditionStatus,
    ConditionType,
    KRaftCluster,
    MetadataVersionStatus,
)
from kraft_operator.observing import admin_addresses, broker_admin_listener, observe_cluster
from kraft_operator.plan import (
    THROTTLE_BROKER_KEYS,
    THROTTLE_TOPIC_KEYS,
    AddVoter,
    AlterReplicaLogDirs,
    ClearReassignmentThrottles,
    ConfigRules,
    Event,
    EventType,
    FinalizeMetadataVersion,
    Layout,
    Observed,
    Plan,
    PodPhase,
    ReassignPartitions,
    RemoveVoter,
    SetReassignmentThrottles,
    UnregisterBroker,
    desired_nodes,
    plan,
)
from kraft_operator.plan.security import security_problems
from kraft_operator.runtime.port import Runtime, RuntimeActionError
from kraft_operator.tls_material import TlsError, TlsState, ensure_tls
from kraft_operator.users import reconcile_users

__all__ = ["Reconciler"]

_UPGRADE = 1  # UpdateFeatures upgrade types (KIP-584)
_SAFE_DOWNGRADE = 2
_TOPIC, _BROKER = 2, 4  # ConfigResource.Type
_SET, _DELETE = 0, 1  # AlterConfigOp.OpType


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Reconciler:
    runtime: Runtime
    rules: ConfigRules = field(default_factory=EngineConfigRules)
    rng: random.Random = field(default_factory=random.Random)
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    clock_ms: Callable[[], int] = _now_ms
    admin_timeout_ms: int = 2000
    act: bool = True
    # Per cluster (namespace, name): whether the last plan found nothing to do (a CA switch moves on
    # only then), and the TLS material in use (the operator's admin identity among it).
    _settled: dict[tuple[str, str], bool] = field(default_factory=dict)
    _tls: dict[tuple[str, str], TlsState] = field(default_factory=dict)
    _switched: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)

    def admin_security(self, cluster: KRaftCluster) -> ClientSecurity | None:
        """The operator's TLS identity for this cluster (None: plaintext, or not made yet)."""
        state = self._tls.get(_key(cluster))
        return state.admin_security if state is not None and cluster.spec.tls is not None else None

    async def _ensure_tls(self, cluster: KRaftCluster, *, layout: Layout, observed: Observed) -> tuple[Observed, str]:
        """The TLS material made or renewed before the plan (`tls_material`); its revisions go to
        the planner. ('' or why it could not be made.)"""
        if cluster.spec.tls is None or security_problems(cluster.spec) or not self.act:
            return observed, ""
        nodes = desired_nodes(namespace=cluster.metadata.namespace or "default", cluster=cluster.metadata.name,
                              spec=cluster.spec, status=cluster.status)
        try:
            state = await ensure_tls(cluster, secrets=self.runtime.secrets, layout=layout, nodes=nodes,
                                     now_ms=self.clock_ms(), settled=self._settled.get(_key(cluster), False))
        except (TlsError, CertificateError, OSError) as e:
            return observed, f"TLS material: {e}"
        self._tls[_key(cluster)] = state
        self._switched[_key(cluster)] = state.switched
        return replace(observed, tls_revisions=state.revisions), ""

    async def reconcile(self, cluster: KRaftCluster) -> Plan:
        started = time.monotonic()
        layout = self.runtime.layout(cluster)
        observed = await self.runtime.observe(cluster)
        observed, tls_problem = await self._ensure_tls(cluster, layout=layout, observed=observed)
        security = self.admin_security(cluster)
        facts = await observe_cluster(cluster, layout=layout, observed=observed, timeout_ms=self.admin_timeout_ms,
                                      security=security)
        observed = replace(observed, cluster=facts)
        result = plan(cluster, observed=observed, layout=layout, rules=self.rules, rng=self.rng, now_ms=self.clock_ms())
        failed = False
        switched = self._switched.pop(_key(cluster), ())
        if switched:
            events = tuple(Event(EventType.NORMAL, "CertificateAuthoritySwitch", step) for step in switched)
            result = replace(result, events=(*events, *result.events))
        if tls_problem:
            result = _action_failed(result, tls_problem)
            failed = True
        if self.act and not failed:
            for action in result.actions:
                try:
                    if isinstance(action, AddVoter | RemoveVoter):
                        await self._change_voter(cluster, action, observed=observed)
                    elif isinstance(action, ReassignPartitions | UnregisterBroker):
                        await self._send_to_active_controller(cluster, action, observed=observed)
                    elif isinstance(action, FinalizeMetadataVersion):
                        await self._finalize_metadata_version(cluster, action, observed=observed)
                    elif isinstance(action, SetReassignmentThrottles | ClearReassignmentThrottles):
                        await self._alter_throttles(cluster, action, observed=observed)
                    elif isinstance(action, AlterReplicaLogDirs):
                        await self._alter_replica_log_dirs(cluster, action)
                    else:
                        await self.runtime.apply(cluster, action)
                except (RuntimeActionError, AdminError, OSError) as e:
                    node = getattr(action, "node", None)
                    target = f"node {node.node_id}" if node is not None else "the cluster"
                    result = _action_failed(result, f"{type(action).__name__} for {target}: {e}")
                    if isinstance(action, FinalizeMetadataVersion):
                        result = _bump_failed(result, action, reason=str(e), now_ms=self.clock_ms())
                    failed = True
                    break
        if self.act and not failed and security is not None and facts is not None and facts.brokers:
            result, failed = await self._reconcile_users(cluster, result, observed=observed)
        # Settled (a CA switch may take its next step): the cluster answered, and its plan found
        # nothing to do, no operation running, every pod running.
        self._settled[_key(cluster)] = (not failed and facts is not None and not result.actions
                                        and result.status.operation is None
                                        and all(n.phase is PodPhase.RUNNING for n in observed.nodes.values()))
        self.metrics.record(
            namespace=cluster.metadata.namespace or "default",
            cluster=cluster.metadata.name,
            result=result,
            duration_s=time.monotonic() - started,
            now_s=time.monotonic(),
            failed=failed,
        )
        return result

    async def _reconcile_users(self, cluster: KRaftCluster, result: Plan, *, observed: Observed) -> tuple[Plan, bool]:
        """spec.users made real (`kraft_operator.users`); a failure is the reconcile's, said in status."""
        state = self._tls[_key(cluster)]
        controllers, brokers = admin_addresses(cluster, layout=self.runtime.layout(cluster), observed=observed)
        try:
            report = await reconcile_users(cluster, store=self.runtime.secrets, state=state, controllers=controllers,
                                           brokers=brokers, timeout_ms=max(self.admin_timeout_ms, 10_000),
                                           now_ms=self.clock_ms())
        except (AdminError, CertificateError, OSError) as e:
            return _action_failed(result, f"users: {e}"), True
        events = tuple(Event(EventType.NORMAL, "UserReconciled", change) for change in report.changes)
        return replace(result, events=(*result.events, *events)), False

    async def _change_voter(self, cluster: KRaftCluster, action: AddVoter | RemoveVoter, *, observed: Observed) -> None:
        """AddRaftVoter or RemoveRaftVoter through the active controller. DUPLICATE_VOTER (an add)
        or VOTER_NOT_FOUND (a removal) means an earlier attempt (an operator that died before seeing
        the answer) already made the change: done."""
        controllers, _ = admin_addresses(cluster, layout=self.runtime.layout(cluster), observed=observed)
        cluster_id = cluster.status.cluster_id if cluster.status is not None else None
        voter = ReplicaKey(action.node.node_id, from_kafka_str(action.directory_id))
        admin = QuorumAdmin(controllers, timeout_ms=max(self.admin_timeout_ms, 30_000),
                            security=self.admin_security(cluster))
        try:
            if isinstance(action, AddVoter):
                endpoints = tuple(Endpoint(name, host, port) for name, host, port in action.endpoints)
                await admin.add_raft_voter(cluster_id=cluster_id, voter=voter, endpoints=endpoints)
            else:
                await admin.remove_raft_voter(cluster_id=cluster_id, voter=voter)
        except QuorumAdminError as e:
            adding = isinstance(action, AddVoter)
            if e.error is not (ErrorCode.duplicate_voter if adding else ErrorCode.voter_not_found):
                raise AdminError(str(e), api="AddRaftVoter" if adding else "RemoveRaftVoter", error=e.error) from None
        finally:
            await admin.close()

    async def _send_to_active_controller(
        self, cluster: KRaftCluster, action: ReassignPartitions | UnregisterBroker, *, observed: Observed
    ) -> None:
        """AlterPartitionReassignments or UnregisterBroker on the active controller; any error in the
        answer becomes the action's failure (the next reconcile decides again)."""
        request: AlterPartitionReassignmentsRequest | UnregisterBrokerRequest
        if isinstance(action, ReassignPartitions):
            topics: dict[str, list[ReassignablePartition]] = {}
            for move in action.moves:
                topics.setdefault(move.topic, []).append(ReassignablePartition(
                    partition_index=i32(move.partition), replicas=tuple(BrokerId(r) for r in move.replicas)))
            request = AlterPartitionReassignmentsRequest(
                timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), allow_replication_factor_change=False,
                topics=tuple(ReassignableTopic(name=TopicName(name), partitions=tuple(parts)) for name, parts in topics.items()))
            api = "AlterPartitionReassignments"
        else:
            request = UnregisterBrokerRequest(broker_id=BrokerId(action.node.node_id))
            api = "UnregisterBroker"
        response = await self._on_active_controller(cluster, request, api=api, observed=observed)
        errors = [(ErrorCode(response.error_code), response.error_message)]
        for topic in getattr(response, "responses", ()):
            errors += [(ErrorCode(p.error_code), f"{topic.name}-{p.partition_index}: {p.error_message or ''}")
                       for p in topic.partitions]
        _raise_first_error(api, errors, ignore=ErrorCode.broker_id_not_registered if api == "UnregisterBroker" else None)

    async def _alter_throttles(
        self, cluster: KRaftCluster, action: SetReassignmentThrottles | ClearReassignmentThrottles, *,
        observed: Observed,
    ) -> None:
        """IncrementalAlterConfigs on the active controller: the reassignment throttle set (each
        topic's throttled replicas, both rates on each broker involved) or deleted. Deleting a
        deleted topic's keys finds no topic: nothing is left to remove there."""
        resources: list[AlterConfigsResource] = []
        if isinstance(action, SetReassignmentThrottles):
            rate = str(action.rate_bytes_per_second)
            for topic, leaders, followers in action.topics:
                resources.append(AlterConfigsResource(resource_type=i8(_TOPIC), resource_name=topic, configs=tuple(
                    AlterableConfig(name=key, config_operation=i8(_SET), value=value)
                    for key, value in zip(THROTTLE_TOPIC_KEYS, (leaders, followers), strict=True) if value)))
            for broker in action.brokers:
                resources.append(AlterConfigsResource(resource_type=i8(_BROKER), resource_name=str(broker), configs=tuple(
                    AlterableConfig(name=key, config_operation=i8(_SET), value=rate) for key in THROTTLE_BROKER_KEYS)))
        else:
            for topic in action.topics:
                resources.append(AlterConfigsResource(resource_type=i8(_TOPIC), resource_name=topic, configs=tuple(
                    AlterableConfig(name=key, config_operation=i8(_DELETE), value=None) for key in THROTTLE_TOPIC_KEYS)))
            for broker in action.brokers:
                resources.append(AlterConfigsResource(resource_type=i8(_BROKER), resource_name=str(broker), configs=tuple(
                    AlterableConfig(name=key, config_operation=i8(_DELETE), value=None) for key in THROTTLE_BROKER_KEYS)))
        request = IncrementalAlterConfigsRequest(resources=tuple(r for r in resources if r.configs), validate_only=False)
        response = await self._on_active_controller(cluster, request, api="IncrementalAlterConfigs", observed=observed)
        errors = [(ErrorCode(r.error_code), f"{r.resource_name}: {r.error_message or ''}") for r in response.responses]
        ignore = ErrorCode.unknown_topic_or_partition if isinstance(action, ClearReassignmentThrottles) else None
        _raise_first_error("IncrementalAlterConfigs", errors, ignore=ignore)

    async def _alter_replica_log_dirs(self, cluster: KRaftCluster, action: AlterReplicaLogDirs) -> None:
        """AlterReplicaLogDirs to the broker whose replicas move. REPLICA_NOT_AVAILABLE (a replica the
        broker does not host yet) is left for the next reconcile; any other error fails the action."""
        layout = self.runtime.layout(cluster)
        listener, spec_port = broker_admin_listener(cluster)
        address = (layout.advertised_host(action.node), layout.port(action.node, listener=listener, spec_port=spec_port))
        admin = ClusterAdmin(brokers=[address], timeout_ms=max(self.admin_timeout_ms, 30_000),
                             security=self.admin_security(cluster))
        try:
            answers = await admin.alter_replica_log_dirs(address, [(m.topic, m.partition, m.log_dir) for m in action.moves])
        finally:
            await admin.close()
        failed = {tp: e for tp, e in answers.items() if e is not None and e != "REPLICA_NOT_AVAILABLE"}
        if failed:
            detail = ", ".join(f"{t}-{p}: {e}" for (t, p), e in sorted(failed.items()))
            raise AdminError(f"AlterReplicaLogDirs: {detail}", api="AlterReplicaLogDirs")

    async def _finalize_metadata_version(
        self, cluster: KRaftCluster, action: FinalizeMetadataVersion, *, observed: Observed
    ) -> None:
        """UpdateFeatures with metadata.version alone, on the active controller; Kafka's refusal
        (INVALID_UPDATE_VERSION and its message) becomes the action's failure in status."""
        kind = _SAFE_DOWNGRADE if action.downgrade else _UPGRADE
        request = UpdateFeaturesRequest(
            feature_updates=(FeatureUpdateKey(feature=mv.FEATURE_NAME, max_version_level=i16(action.level),
                                              upgrade_type=i8(kind)),),
            validate_only=False,
        )
        response = await self._on_active_controller(cluster, request, api="UpdateFeatures", observed=observed)
        errors = [(ErrorCode(response.error_code), response.error_message)]
        errors += [(ErrorCode(r.error_code), r.error_message) for r in response.results]
        _raise_first_error("UpdateFeatures", errors)

    async def _on_active_controller(self, cluster: KRaftCluster, request: Any, *, api: str, observed: Observed) -> Any:
        """`request` answered by the active controller; no controller taking it is the action's failure."""
        controllers, _ = admin_addresses(cluster, layout=self.runtime.layout(cluster), observed=observed)
        try:
            async with ControllerAdmin(controllers, timeout_ms=max(self.admin_timeout_ms, 30_000),
                                       client_id="kraftwerk-operator", security=self.admin_security(cluster)) as admin:
                return await admin.send_to_active(request)
        except ControllerAdminError as e:
            raise AdminError(str(e), api=api) from None


def _key(cluster: KRaftCluster) -> tuple[str, str]:
    return cluster.metadata.namespace or "default", cluster.metadata.name


def _action_failed(result: Plan, message: str) -> Plan:
    conditions = []
    for condition in result.status.conditions:
        if condition.type is ConditionType.DEGRADED:
            conditions.append(
                Condition(
                    type=ConditionType.DEGRADED,
                    status=ConditionStatus.TRUE,
                    reason="ActionFailed",
                    message=message,
                    last_transition_time=condition.last_transition_time,
                    observed_generation=condition.observed_generation,
                )
            )
        else:
            conditions.append(condition)
    status = result.status.model_copy(update={"conditions": conditions})
    events = (*result.events, Event(EventType.WARNING, "ActionFailed", message))
    return replace(result, status=status, events=events, waiting_for=message)


def _bump_failed(result: Plan, action: FinalizeMetadataVersion, *, reason: str, now_ms: int) -> Plan:
    """A refused metadata.version bump, recorded in status.metadataVersion: the next plan raises
    the failed-metadata-version-bump runbook from it and keeps it until the target is finalized."""
    now = datetime.datetime.fromtimestamp(now_ms / 1000, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    current = result.status.metadata_version or MetadataVersionStatus()
    recorded = current.model_copy(update={"failed_bump": f"UpdateFeatures metadata.version={action.version} "
                                          f"(level {action.level}) refused: {reason}", "failed_at": now})
    return replace(result, status=result.status.model_copy(update={"metadata_version": recorded}))


def _raise_first_error(api: str, errors: Sequence[tuple[ErrorCode, str | None]], *, ignore: ErrorCode | None = None) -> None:
    """The first error of an answer (its top-level one, then its entries') as the action's failure."""
    for code, message in errors:
        if code is not ErrorCode.none and code is not ignore:
            raise AdminError(f"{api}: {code.name.upper()}: {message or ''}", api=api, error=code)
