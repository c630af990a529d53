"""Every rule a spec must pass before the operator acts on it, each problem naming its field.

The API server refuses what the CRD's schema and CEL rules can say. This module re-checks those
(a spec can arrive from a file through `kraftwerk plan`/`up`, or from an API server with an older
CRD), and adds what only the operator can know: a `server.properties` override against the
engine's config rules, a metadata.version some pool cannot run, a pool whose roles changed under
recorded nodes, a volume that would shrink, fewer brokers than a topic's replication factor.
A spec with any problem is never acted on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kraft_engine.records import feature_versions
from kraft_engine.records import metadata_version as mv
from kraft_operator.model import Implementation, KRaftClusterSpec, KRaftClusterStatus, Role
from kraft_operator.plan.facts import ConfigRules, Layout, Observed, replication_factors
from kraft_operator.plan.rendering import CONTROLLER_LISTENER, MANAGED_KEYS, DesiredNode, render_config
from kraft_operator.plan.security import security_problems

__all__ = [
    "LATEST_PRODUCTION",
    "SpecProblem",
    "parse_quantity_bytes",
    "supported_features",
    "target_feature_levels",
    "target_metadata_version",
    "validate_spec",
]

# The newest production metadata.version each implementation runs (Kafka 4.1: 4.1-IV1).
LATEST_PRODUCTION: dict[Implementation, mv.MetadataVersion] = {
    Implementation.KRAFTWERK: mv.LATEST_PRODUCTION,
    Implementation.APACHE_KAFKA: mv.IBP_4_1_IV1,
}

_SUFFIXES = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


@dataclass(frozen=True, slots=True)
class SpecProblem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def parse_quantity_bytes(text: str) -> int | None:
    """A Kubernetes quantity (10Gi, 500M, 1.5Ti) in bytes; None when it is not one."""
    match = _QUANTITY.match(text)
    if match is None:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    whole, _, fraction = number.partition(".")
    scale = _SUFFIXES[suffix]
    return int(whole) * scale + (int(fraction) * scale) // (10 ** len(fraction)) if fraction else int(whole) * scale


def supported_features(implementation: Implementation, roles: Iterable[Role]) -> dict[str, tuple[int, int]]:
    """What a node of this implementation and these roles supports of each finalizable feature.
    Apache Kafka 4.1 supports its whole table (feature_versions is that table); the engine's
    controller does too, and its broker only the levels it implements."""
    broker = implementation is Implementation.KRAFTWERK and Role.BROKER in set(roles)
    return feature_versions.supported_ranges(unstable_enabled=False, broker=broker)


def target_feature_levels(spec: KRaftClusterSpec) -> dict[str, int]:
    """The features whose default level for the target metadata.version some pool does not
    support, each at the highest level every pool supports: format passes them as `--feature`,
    or the cluster would finalize a level some node's software lacks and refuse that node's
    registration (UNSUPPORTED_VERSION)."""
    return feature_versions.levels_every_node_supports(
        target_metadata_version(spec), [supported_features(p.implementation, p.roles) for p in spec.node_pools]
    )


def target_metadata_version(spec: KRaftClusterSpec) -> mv.MetadataVersion:
    """spec.metadataVersion, else the newest production level every pool's implementation runs."""
    if spec.metadata_version is not None:
        return mv.from_version_string(spec.metadata_version)
    return min(LATEST_PRODUCTION[p.implementation] for p in spec.node_pools)


def validate_spec(
    *,
    spec: KRaftClusterSpec,
    status: KRaftClusterStatus | None,
    observed: Observed,
    nodes: Sequence[DesiredNode],
    layout: Layout,
    rules: ConfigRules,
    rendered: Mapping[int, Mapping[str, str]] | None = None,
) -> list[SpecProblem]:
    """What is wrong with the spec, field by field. `rendered` (node id -> server.properties) saves
    rendering the nodes again when the caller already has."""
    problems: list[SpecProblem] = []
    problems += _pools(spec, status)
    problems += _listeners(spec)
    problems += [SpecProblem(field, message) for field, message in security_problems(spec)]
    problems += _storage(spec, observed, nodes, status)
    problems += _cluster_id(spec, status)
    problems += _metadata_version(spec)
    problems += _brokers_vs_topics(spec, observed, status)
    override_problems = _overrides(spec, rules)
    problems += override_problems
    if not problems:
        # Only a spec whose parts are each fine is rendered whole and checked as the node would.
        controllers = [n for n in nodes if n.is_controller]
        for node in nodes:
            properties = (rendered.get(node.ref.node_id) if rendered is not None else None) or render_config(
                node, spec=spec, controllers=controllers, layout=layout)
            problem = rules.node_problem(properties)
            if problem is not None:
                index = _pool_index(spec, node.ref.pool)
                problems.append(
                    SpecProblem(f"spec.config (node {node.ref.node_id} of spec.nodePools[{index}])", problem)
                )
                break
    return problems


def _pool_index(spec: KRaftClusterSpec, name: str) -> int:
    return next(i for i, p in enumerate(spec.node_pools) if p.name == name)


def _pools(spec: KRaftClusterSpec, status: KRaftClusterStatus | None) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    if not any(Role.CONTROLLER in p.roles and p.replicas > 0 for p in spec.node_pools):
        problems.append(
            SpecProblem("spec.nodePools", "at least one node pool must have the controller role and replicas > 0")
        )
    seen: set[str] = set()
    for i, pool in enumerate(spec.node_pools):
        field = f"spec.nodePools[{i}]"
        if pool.name in seen:
            problems.append(SpecProblem(f"{field}.name", f"pool name {pool.name!r} appears twice"))
        seen.add(pool.name)
        if len(set(pool.roles)) != len(pool.roles):
            problems.append(SpecProblem(f"{field}.roles", "a role appears twice"))
        if status is not None:
            recorded = {frozenset(n.roles) for n in status.nodes if n.pool == pool.name}
            if recorded and recorded != {frozenset(pool.roles)}:
                was = ",".join(sorted(r.value for r in next(iter(recorded))))
                problems.append(
                    SpecProblem(f"{field}.roles", f"a node pool's roles are immutable (its nodes run as {was})")
                )
            impls = {n.implementation for n in status.nodes if n.pool == pool.name}
            if impls and impls != {pool.implementation}:
                problems.append(
                    SpecProblem(
                        f"{field}.implementation",
                        f"a node pool's implementation is immutable (its nodes run {next(iter(impls)).value})",
                    )
                )
    return problems


def _listeners(spec: KRaftClusterSpec) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    names = [ln.name for ln in spec.listeners]
    ports = [ln.port for ln in spec.listeners]
    for i, listener in enumerate(spec.listeners):
        if listener.name == CONTROLLER_LISTENER:
            problems.append(SpecProblem(f"spec.listeners[{i}].name", "CONTROLLER is the controllers' own listener"))
        if names.count(listener.name) > 1:
            problems.append(SpecProblem(f"spec.listeners[{i}].name", f"listener {listener.name} appears twice"))
        if ports.count(listener.port) > 1 or listener.port == spec.controller_port:
            problems.append(SpecProblem(f"spec.listeners[{i}].port", f"port {listener.port} is used twice"))
    return problems


def _storage(spec: KRaftClusterSpec, observed: Observed, nodes: Sequence[DesiredNode],
             status: KRaftClusterStatus | None) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    for i, pool in enumerate(spec.node_pools):
        field = f"spec.nodePools[{i}].storage"
        ids = [v.id for v in pool.storage.volumes]
        if pool.storage.type == "single" and len(ids) != 1:
            problems.append(
                SpecProblem(f"{field}.volumes", "storage of type single has exactly one volume; use type jbod for more")
            )
        if len(set(ids)) != len(ids):
            problems.append(SpecProblem(f"{field}.volumes", "volume ids must be distinct"))
        for j, volume in enumerate(pool.storage.volumes):
            wanted = parse_quantity_bytes(volume.size)
            if wanted is None:
                problems.append(SpecProblem(f"{field}.volumes[{j}].size", f"{volume.size!r} is not a quantity"))
                continue
            for node in nodes:
                if node.ref.pool != pool.name:
                    continue
                facts = observed.nodes.get(node.ref.node_id)
                existing = facts.volume(volume.id) if facts is not None else None
                if existing is not None and existing.size_bytes is not None and wanted < existing.size_bytes:
                    problems.append(
                        SpecProblem(
                            f"{field}.volumes[{j}].size",
                            f"{volume.size} is smaller than node {node.ref.node_id}'s volume "
                            f"({existing.size_bytes} bytes); a volume cannot shrink",
                        )
                    )
                    break
        for node in nodes:
            recorded = status.node(node.ref.node_id) if status is not None else None
            if node.ref.pool != pool.name or recorded is None or not recorded.directories:
                continue
            # The first volume holds the metadata log (metadata.log.dir), which AlterReplicaLogDirs
            # cannot move: it stays first. Other volumes may come and go (`log_dirs`).
            metadata = recorded.directories[0]
            if metadata.directory_id and ids and ids[0] != metadata.volume_id:
                problems.append(
                    SpecProblem(
                        f"{field}.volumes",
                        f"volume {metadata.volume_id} of node {node.ref.node_id} holds its metadata log "
                        f"(metadata.log.dir {metadata.path}); it must stay the pool's first volume and cannot be "
                        "removed (only other JBOD volumes can: their replicas are moved off first)",
                    )
                )
                break
            if not node.is_broker and sorted(ids) != sorted(d.volume_id for d in recorded.directories):
                problems.append(
                    SpecProblem(f"{field}.volumes", f"node {node.ref.node_id} is a controller only: its volumes "
                                "cannot change (a JBOD volume is added to or removed from brokers)"))
                break
    return problems


def _cluster_id(spec: KRaftClusterSpec, status: KRaftClusterStatus | None) -> list[SpecProblem]:
    if status is None or status.cluster_id is None or spec.cluster_id is None:
        return []
    if spec.cluster_id != status.cluster_id:
        return [
            SpecProblem(
                "spec.clusterId",
                f"{spec.cluster_id} differs from the cluster's id {status.cluster_id}; a cluster id is immutable",
            )
        ]
    return []


def _metadata_version(spec: KRaftClusterSpec) -> list[SpecProblem]:
    if spec.metadata_version is None:
        return []
    try:
        wanted = mv.from_version_string(spec.metadata_version)
    except ValueError as e:
        return [SpecProblem("spec.metadataVersion", str(e))]
    problems = []
    for i, pool in enumerate(spec.node_pools):
        newest = LATEST_PRODUCTION[pool.implementation]
        if wanted > newest:
            problems.append(
                SpecProblem(
                    "spec.metadataVersion",
                    f"{wanted} is newer than {newest}, the newest that spec.nodePools[{i}] "
                    f"({pool.implementation.value}) runs",
                )
            )
    return problems


def _brokers_vs_topics(spec: KRaftClusterSpec, observed: Observed, status: KRaftClusterStatus | None) -> list[SpecProblem]:
    cluster = observed.cluster
    partitions = cluster.partitions if cluster is not None else None
    if partitions is None or partitions.max_replication_factor == 0:
        return []
    brokers = sum(p.replicas for p in spec.node_pools if Role.BROKER in p.roles)
    if brokers >= partitions.max_replication_factor:
        return []
    details = cluster.partition_details if cluster is not None else None
    if details:
        # A partition the operator's own drain is moving counts with its target replicas, not with
        # the adding and removing ones Metadata lists together while it moves.
        operation = status.operation if status is not None else None
        moving = {(m.topic, m.partition): tuple(m.replicas)
                  for m in (operation.scale_down.moves if operation is not None and operation.scale_down else ())}
        details = tuple(replace(p, replicas=moving.get((p.topic, p.partition), p.replicas)) for p in details)
        too_big = sorted((t, rf) for t, rf in replication_factors(details).items() if rf > brokers)
        if too_big:
            named = ", ".join(f"{t} (replication factor {rf})" for t, rf in too_big[:10])
            more = f" and {len(too_big) - 10} more" if len(too_big) > 10 else ""
            return [SpecProblem("spec.nodePools", f"{brokers} broker replicas cannot hold topic(s) {named}{more}; "
                                "nothing is removed until brokers are kept or those topics' replication factor is lowered")]
        return []
    return [
        SpecProblem(
            "spec.nodePools",
            f"{brokers} broker replicas are fewer than the replication factor "
            f"{partitions.max_replication_factor} of an existing topic",
        )
    ]


def _overrides(spec: KRaftClusterSpec, rules: ConfigRules) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    for key in sorted(spec.config):
        field = f"spec.config[{key}]"
        if key in MANAGED_KEYS:
            problems.append(
                SpecProblem(field, "is managed by the operator (from spec.nodePools, spec.listeners and the runtime)")
            )
            continue
        problem = rules.override_problem(key, spec.config[key])
        if problem is not None:
            problems.append(SpecProblem(field, problem))
    return problems
