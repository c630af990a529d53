"""What the cluster says about itself, gathered into the planner's `ClusterFacts`.

One reconcile asks, with a short timeout each: DescribeQuorum (leader, epoch, high watermark,
voters and observers), DescribeCluster on the brokers (registered and fenced brokers), Metadata
(partitions with their replicas and ISR; DescribeConfigs for every topic's min.insync.replicas,
which the roll's min-ISR rule needs) and ApiVersions
(the finalized metadata.version), and DescribeLogDirs of each running broker (its directories:
offline or not, total and usable bytes). The replication throttles an operator reassignment sets
are read back too: each topic's throttled replicas (with min.insync.replicas) and each running
broker's own throttled rates (DescribeConfigs of its broker resource, asked of it). Only nodes the runtime reports running are asked. A question
that gets no answer leaves its part None and says why in `errors`: during bootstrap most of them
have no answer yet, and that is not a failure.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from kraft_engine.admin import ReplicaDescription
from kraft_engine.kafka_uuid import ZERO_UUID, to_kafka_str
from kraft_engine.protocol.security import ClientSecurity
from kraft_engine.raft import Endpoint
from kraft_engine.records import metadata_version as mv
from kraft_operator.admin import AdminError, ClusterAdmin, under_min_isr
from kraft_operator.model import KRaftCluster
from kraft_operator.plan import (
    CONTROLLER_LISTENER,
    THROTTLE_BROKER_KEYS,
    THROTTLE_TOPIC_KEYS,
    BrokerFacts,
    ClusterFacts,
    DesiredNode,
    Layout,
    LogDirFacts,
    LogDirReplica,
    Observed,
    PartitionDetail,
    PartitionFacts,
    PodPhase,
    QuorumFacts,
    ReplicaFacts,
    ThrottleFacts,
    desired_nodes,
    replication_factors,
)
from kraft_operator.plan.security import REPLICATION_LISTENER

__all__ = ["admin_addresses", "broker_admin_listener", "observe_cluster"]


def admin_addresses(
    cluster: KRaftCluster, *, layout: Layout, observed: Observed
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(controllers, brokers) to ask: the running nodes' controller and first client listener."""
    nodes = _running_nodes(cluster, observed)
    controllers = [_address(cluster, layout, n, controller=True) for n in nodes if n.is_controller]
    brokers = [_address(cluster, layout, n, controller=False) for n in nodes if n.is_broker]
    return controllers, brokers


def _running_nodes(cluster: KRaftCluster, observed: Observed) -> list[DesiredNode]:
    """The nodes of the spec that the runtime reports running: the only ones worth asking."""
    nodes = desired_nodes(namespace=cluster.metadata.namespace or "default", cluster=cluster.metadata.name,
                          spec=cluster.spec, status=cluster.status)
    running = []
    for node in nodes:
        facts = observed.nodes.get(node.ref.node_id)
        if facts is not None and facts.phase is PodPhase.RUNNING:
            running.append(node)
    return running


def _address(cluster: KRaftCluster, layout: Layout, node: DesiredNode, *, controller: bool) -> tuple[str, int]:
    """Where to reach `node`: its controller listener, else the spec's first (client) listener, or
    under spec.tls the REPLICATION listener (mTLS, where the operator's certificate is a super user)."""
    spec = cluster.spec
    listener, port = (CONTROLLER_LISTENER, spec.controller_port) if controller else broker_admin_listener(cluster)
    return (layout.advertised_host(node.ref), layout.port(node.ref, listener=listener, spec_port=port))


def broker_admin_listener(cluster: KRaftCluster) -> tuple[str, int]:
    """(name, spec port) of the broker listener the operator's admin calls use: the spec's first
    listener, or under spec.tls the REPLICATION listener (mTLS, where the operator is a super user)."""
    spec = cluster.spec
    if spec.tls is not None:
        return REPLICATION_LISTENER, spec.tls.replication_port
    return spec.listeners[0].name, spec.listeners[0].port


async def observe_cluster(
    cluster: KRaftCluster, *, layout: Layout, observed: Observed, timeout_ms: int = 2000,
    security: ClientSecurity | None = None,
) -> ClusterFacts | None:
    controllers, brokers = admin_addresses(cluster, layout=layout, observed=observed)
    if not controllers and not brokers:
        return None
    errors: list[str] = []
    quorum = None
    broker_facts = None
    partitions = None
    details = None
    finalized = None
    cluster_id = None
    topic_throttles: dict[str, dict[str, str]] | None = None
    async with ClusterAdmin(controllers=controllers, brokers=brokers, timeout_ms=timeout_ms,
                            security=security) as admin:
        if controllers:
            try:
                described = await admin.describe_quorum()
                answered_at_ms = time.time_ns() // 1_000_000
                quorum = QuorumFacts(
                    leader_id=described.leader_id,
                    leader_epoch=described.leader_epoch,
                    high_watermark=described.high_watermark,
                    voters=tuple(_replica(r, described.nodes) for r in described.voters),
                    observers=tuple(_replica(r, described.nodes) for r in described.observers),
                    answered_at_ms=answered_at_ms,
                )
            except AdminError as e:
                errors.append(str(e))
        if brokers:
            try:
                cluster_id, _, nodes = await admin.describe_cluster(brokers=True)
                broker_facts = {n.node_id: BrokerFacts(n.node_id, n.fenced) for n in nodes}
            except AdminError as e:
                errors.append(str(e))
        try:
            metadata = await admin.metadata()
            cluster_id = cluster_id or metadata.cluster_id
            # Every topic's effective min.insync.replicas: the roll's min-ISR rule needs it for all.
            names = [t.name for t in metadata.topics]
            configs = await admin.describe_topic_configs(names, keys=["min.insync.replicas", *THROTTLE_TOPIC_KEYS]) if (
                names) else {}
            min_isr = {name: int(c.get("min.insync.replicas", "1")) for name, c in configs.items()}
            topic_throttles = {name: {k: c[k] for k in THROTTLE_TOPIC_KEYS if c.get(k)} for name, c in configs.items()}
            all_partitions = [p for t in metadata.topics for p in t.partitions]
            details = tuple(
                PartitionDetail(topic=t.name, partition=p.partition, leader_id=p.leader_id, replicas=p.replicas,
                                isr=p.isr, min_isr=min_isr.get(t.name, 1))
                for t in metadata.topics for p in t.partitions
            )
            partitions = PartitionFacts(
                total=len(all_partitions),
                under_replicated=sum(1 for p in all_partitions if len(p.isr) < len(p.replicas)),
                under_min_isr=under_min_isr(metadata.topics, min_isr),
                offline=sum(1 for p in all_partitions if p.leader_id < 0),
                max_replication_factor=max(replication_factors(details).values(), default=0),
            )
        except AdminError as e:
            errors.append(str(e))
        log_dirs = await _log_dirs(admin, cluster, layout=layout, observed=observed)
        throttles = None if topic_throttles is None else ThrottleFacts(
            broker_rates=await _broker_throttles(admin, cluster, layout=layout, observed=observed,
                                                 answered=set(log_dirs)),
            topic_replicas={name: found for name, found in topic_throttles.items() if found})
        supported = await _supported_metadata_versions(admin, cluster, layout=layout, observed=observed,
                                                       errors=errors)
        try:
            features = await admin.finalized_features()
            level = features.get(mv.FEATURE_NAME)
            if level is not None:
                finalized = str(mv.from_feature_level(level))
        except (AdminError, ValueError) as e:
            errors.append(str(e))
    return ClusterFacts(
        cluster_id=cluster_id,
        quorum=quorum,
        brokers=broker_facts,
        partitions=partitions,
        finalized_metadata_version=finalized,
        errors=tuple(errors),
        partition_details=details,
        supported_metadata_versions=supported,
        log_dirs=log_dirs,
        throttles=throttles,
    )


async def _broker_throttles(
    admin: ClusterAdmin, cluster: KRaftCluster, *, layout: Layout, observed: Observed, answered: set[int]
) -> dict[int, dict[str, str]]:
    """Each running broker's throttled rates set for it; a broker that does not answer is left out,
    and so is one that just gave DescribeLogDirs no answer (still starting: not waited for twice)."""
    found: dict[int, dict[str, str]] = {}
    for node in _running_nodes(cluster, observed):
        if not node.is_broker or node.ref.node_id not in answered:
            continue
        address = _address(cluster, layout, node, controller=False)
        try:
            found[node.ref.node_id] = await admin.dynamic_broker_configs(address, broker_id=node.ref.node_id,
                                                                         keys=THROTTLE_BROKER_KEYS)
        except AdminError:
            continue
    return found


async def _log_dirs(
    admin: ClusterAdmin, cluster: KRaftCluster, *, layout: Layout, observed: Observed
) -> dict[int, tuple[LogDirFacts, ...]]:
    """Each running broker's log directories, from the broker itself (DescribeLogDirs), with the
    replicas each holds. A broker that does not answer (still starting, stopping) is left out: its
    directories are unknown this time, not offline."""
    found: dict[int, tuple[LogDirFacts, ...]] = {}
    for node in _running_nodes(cluster, observed):
        if not node.is_broker:
            continue
        address = _address(cluster, layout, node, controller=False)
        try:
            described = await admin.describe_log_dirs(address)
        except AdminError:
            continue
        volumes = [layout.volume_path(node.ref, volume_id=v.id) for v in node.pool.storage.volumes]
        # and the directories its stored config still lists (a volume the spec dropped, being emptied)
        facts = observed.nodes.get(node.ref.node_id)
        stored = (facts.config or {}).get("log.dirs", "") if facts is not None else ""
        configured = volumes + [d for d in stored.split(",") if d and d not in volumes]
        found[node.ref.node_id] = tuple(
            LogDirFacts(path=_as_configured(d.path, configured), error=d.error, total_bytes=d.total_bytes,
                        usable_bytes=d.usable_bytes,
                        replicas=tuple(LogDirReplica(r.topic, r.partition, r.size_bytes, r.future) for r in d.replicas))
            for d in described
        )
    return found


def _as_configured(reported: str, volumes: list[str]) -> str:
    """The node's own name for a directory its broker reports: the engine reports the resolved path
    (a volume mounted through a symlink shows as its target), the plan knows the configured one.
    Where the operator cannot see the path (another machine, a pod), both resolve to themselves."""
    wanted = os.path.realpath(reported)
    return next((v for v in volumes if v.rstrip("/") == reported.rstrip("/") or os.path.realpath(v) == wanted),
                reported)


async def _supported_metadata_versions(
    admin: ClusterAdmin, cluster: KRaftCluster, *, layout: Layout, observed: Observed, errors: list[str]
) -> dict[int, tuple[int, int]] | None:
    """Each running node's supported metadata.version range (ApiVersions), None when some running
    node did not answer (the bump then waits: it must know every node's range)."""
    found: dict[int, tuple[int, int]] = {}
    for node in _running_nodes(cluster, observed):
        address = _address(cluster, layout, node, controller=node.is_controller)
        try:
            ranges = await admin.supported_features(address)
        except AdminError as e:
            errors.append(f"node {node.ref.node_id}: {e}")
            return None
        if mv.FEATURE_NAME in ranges:
            found[node.ref.node_id] = ranges[mv.FEATURE_NAME]
    return found


def _replica(replica: ReplicaDescription, nodes: Mapping[int, tuple[Endpoint, ...]]) -> ReplicaFacts:
    endpoints = tuple(f"{e.name}://{e.host}:{e.port}" for e in nodes.get(replica.replica_id, ()))
    directory = replica.directory_id
    return ReplicaFacts(
        replica_id=replica.replica_id,
        directory_id=to_kafka_str(directory) if directory != ZERO_UUID else "",
        log_end_offset=replica.log_end_offset,
        last_caught_up_timestamp_ms=replica.last_caught_up_timestamp_ms,
        endpoints=endpoints,
    )
