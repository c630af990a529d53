"""The NetworkPolicy of a secured cluster: only the clients its spec allows reach its listeners.

A cluster with `spec.tls` (or a listener that names `networkPolicyPeers`) gets one NetworkPolicy
over its node pods, as Strimzi generates one per Kafka cluster:
- the controller listener and the brokers' REPLICATION listener: only the cluster's own pods and
  the operator's pods (any namespace, by the chart's labels);
- each client listener: the peers its `networkPolicyPeers` lists (Kubernetes NetworkPolicyPeers,
  as written), or everyone when it lists none;
- the engine's /metrics port: everyone (Prometheus scrapes it).
Anything else is refused by the policy. It needs a network plugin that enforces NetworkPolicies.
"""

from __future__ import annotations

from typing import Any

from kraft_operator.model import KRaftCluster

__all__ = ["OPERATOR_POD_LABELS", "network_policy", "network_policy_name", "wants_network_policy"]

# The operator's pods as the chart labels them (`kraftwerk.selectorLabels`).
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "kraftwerk", "app.kubernetes.io/component": "operator"}


def network_policy_name(cluster: str) -> str:
    return f"{cluster}-network-policy"


def wants_network_policy(cluster: KRaftCluster) -> bool:
    return cluster.spec.tls is not None or any(ln.network_policy_peers is not None for ln in cluster.spec.listeners)


def network_policy(
    cluster: KRaftCluster, *, namespace: str, cluster_label: str, metrics_port: int, labels: dict[str, str],
    owner: list[dict[str, Any]],
) -> dict[str, Any]:
    spec = cluster.spec
    own_pods = {"podSelector": {"matchLabels": {cluster_label: cluster.metadata.name}}}
    operator = {"namespaceSelector": {}, "podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)}}
    internal = [{"port": spec.controller_port, "protocol": "TCP"}]
    if spec.tls is not None:
        internal.append({"port": spec.tls.replication_port, "protocol": "TCP"})
    rules: list[dict[str, Any]] = [{"ports": internal, "from": [own_pods, operator]}]
    for listener in spec.listeners:
        rule: dict[str, Any] = {"ports": [{"port": listener.port, "protocol": "TCP"}]}
        if listener.network_policy_peers is not None:
            # The cluster's own pods too: a broker's tools and its peers may dial any listener.
            rule["from"] = [*listener.network_policy_peers, own_pods]
        rules.append(rule)
    rules.append({"ports": [{"port": metrics_port, "protocol": "TCP"}]})
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": network_policy_name(cluster.metadata.name), "namespace": namespace, "labels": labels,
                     "ownerReferences": owner},
        "spec": {"podSelector": {"matchLabels": {cluster_label: cluster.metadata.name}},
                 "policyTypes": ["Ingress"], "ingress": rules},
    }
