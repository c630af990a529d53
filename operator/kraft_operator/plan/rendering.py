"""From a spec to nodes: which node ids exist, in which pool, and each node's server.properties.

Node ids are stable for a cluster's whole life. A node keeps the id and pool that the status
recorded for it; new nodes take the next ids above every id ever recorded, pool by pool in spec
order. So reordering pools, or an operator restart, never renumbers a node.

The rendered config uses Kafka's keys only (plus `kraftwerk.metrics.port` on engine nodes), so
the same file runs the engine and Apache Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kraft_engine.node_config_keys import NODE_WIRING_KEYS
from kraft_operator.model import (
    Implementation,
    KRaftClusterSpec,
    KRaftClusterStatus,
    NodePool,
    Role,
)
from kraft_operator.plan.facts import Layout, NodeRef
from kraft_operator.plan.security import REPLICATION_LISTENER, security_properties

__all__ = [
    "CONTROLLER_LISTENER",
    "MANAGED_KEYS",
    "DesiredNode",
    "controller_endpoint",
    "desired_nodes",
    "render_config",
]

CONTROLLER_LISTENER = "CONTROLLER"

# Keys the operator writes from the spec; an override of one would break the cluster's wiring. The
# node-wiring keys are the engine's own set; `broker.id` is the older name Apache Kafka's nodes
# still read for `node.id`, and `kraftwerk.metrics.port` is the engine's metrics port, which the
# operator places.
MANAGED_KEYS = NODE_WIRING_KEYS | {"broker.id", "kraftwerk.metrics.port"}


@dataclass(frozen=True, slots=True)
class DesiredNode:
    ref: NodeRef
    pool: NodePool

    @property
    def roles(self) -> frozenset[Role]:
        return frozenset(self.pool.roles)

    @property
    def is_controller(self) -> bool:
        return Role.CONTROLLER in self.pool.roles

    @property
    def is_broker(self) -> bool:
        return Role.BROKER in self.pool.roles

    @property
    def implementation(self) -> Implementation:
        return self.pool.implementation


def desired_nodes(
    *, namespace: str, cluster: str, spec: KRaftClusterSpec, status: KRaftClusterStatus | None
) -> tuple[DesiredNode, ...]:
    """The nodes the spec asks for: recorded ids first (lowest kept on scale-down), then new ids."""
    recorded = list(status.nodes) if status is not None else []
    used = {n.id for n in recorded}
    next_id = max(used, default=-1) + 1
    nodes: list[DesiredNode] = []
    for pool in spec.node_pools:
        ids = sorted(n.id for n in recorded if n.pool == pool.name)[: pool.replicas]
        while len(ids) < pool.replicas:
            ids.append(next_id)
            next_id += 1
        nodes.extend(DesiredNode(NodeRef(namespace, cluster, pool.name, node_id), pool) for node_id in ids)
    return tuple(sorted(nodes, key=lambda n: n.ref.node_id))


def controller_endpoint(node: DesiredNode, *, spec: KRaftClusterSpec, layout: Layout) -> tuple[str, int]:
    return (
        layout.advertised_host(node.ref),
        layout.port(node.ref, listener=CONTROLLER_LISTENER, spec_port=spec.controller_port),
    )


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def render_config(
    node: DesiredNode,
    *,
    spec: KRaftClusterSpec,
    controllers: Sequence[DesiredNode],
    layout: Layout,
    log_dirs: Sequence[str] | None = None,
) -> dict[str, str]:
    """The node's server.properties: wiring from the spec and layout, then the spec's overrides.
    `log_dirs` replaces the spec's volumes in `log.dirs` (a directory the spec dropped that still
    holds replicas stays until they are moved off: `log_dirs.retained_log_dirs`); the metadata log
    directory is the first volume's either way."""
    ref = node.ref
    bind = layout.bind_host(ref)
    advertised = layout.advertised_host(ref)
    names: list[str] = []
    listeners: list[str] = []
    advertised_listeners: list[str] = []
    if node.is_controller:
        port = layout.port(ref, listener=CONTROLLER_LISTENER, spec_port=spec.controller_port)
        names.append(CONTROLLER_LISTENER)
        listeners.append(f"{CONTROLLER_LISTENER}://{_host(bind)}:{port}")
        advertised_listeners.append(f"{CONTROLLER_LISTENER}://{_host(advertised)}:{port}")
    if node.is_broker:
        broker_listeners = [(listener.name, listener.port) for listener in spec.listeners]
        if spec.tls is not None:
            broker_listeners.append((REPLICATION_LISTENER, spec.tls.replication_port))
        for name, spec_port in broker_listeners:
            port = layout.port(ref, listener=name, spec_port=spec_port)
            names.append(name)
            listeners.append(f"{name}://{_host(bind)}:{port}")
            advertised_listeners.append(f"{name}://{_host(advertised)}:{port}")
    protocol_map = [f"{CONTROLLER_LISTENER}:PLAINTEXT"] + [f"{ln.name}:{ln.protocol}" for ln in spec.listeners]
    dirs = [layout.volume_path(ref, volume_id=v.id) for v in node.pool.storage.volumes]
    bootstrap = ",".join(
        f"{_host(host)}:{port}"
        for host, port in (controller_endpoint(c, spec=spec, layout=layout) for c in controllers)
    )
    roles = [r.value for r in (Role.BROKER, Role.CONTROLLER) if r in node.pool.roles]
    properties = {
        "process.roles": ",".join(roles),
        "node.id": str(ref.node_id),
        "controller.listener.names": CONTROLLER_LISTENER,
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(advertised_listeners),
        "listener.security.protocol.map": ",".join(protocol_map),
        "controller.quorum.bootstrap.servers": bootstrap,
        "log.dirs": ",".join(log_dirs if log_dirs is not None else dirs),
        "metadata.log.dir": dirs[0],
    }
    if node.is_broker:
        properties["inter.broker.listener.name"] = spec.listeners[0].name
    if node.implementation is Implementation.KRAFTWERK:
        metrics_port = layout.metrics_port(ref)
        if metrics_port is not None:
            properties["kraftwerk.metrics.port"] = str(metrics_port)
    properties.update(_overrides(spec.config))
    # Security keys come last: an override cannot weaken what spec.tls asks for.
    properties.update(security_properties(node_ref=ref, is_broker=node.is_broker, spec=spec, layout=layout,
                                          controller_listener=CONTROLLER_LISTENER))
    return properties


def _overrides(config: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in config.items() if key not in MANAGED_KEYS}
