"""The NetworkPolicy a secured cluster gets (`runtime.network_policy`): who may reach which port."""

from __future__ import annotations

from kraft_operator.runtime.network_policy import OPERATOR_POD_LABELS, network_policy, wants_network_policy

from .builders import cluster_from

SPEC = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: sec, namespace: prod}
spec:
  nodePools:
    - {name: controllers, roles: [controller], replicas: 3, storage: {volumes: [{id: 0, size: 1Gi}]}}
  listeners:
    - name: SCRAM
      port: 9094
      protocol: SASL_SSL
      networkPolicyPeers:
        - podSelector: {matchLabels: {app: orders}}
        - namespaceSelector: {matchLabels: {team: payments}}
    - {name: MTLS, port: 9095, protocol: SSL}
  tls: {}
"""


def _policy(cluster):
    return network_policy(cluster, namespace="prod", cluster_label="kraftwerk.io/cluster", metrics_port=9404,
                          labels={}, owner=[])


def test_internal_listeners_admit_only_the_clusters_pods_and_the_operator() -> None:
    policy = _policy(cluster_from(SPEC))
    assert policy["spec"]["podSelector"] == {"matchLabels": {"kraftwerk.io/cluster": "sec"}}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    internal, scram, mtls, metrics = policy["spec"]["ingress"]
    assert internal["ports"] == [{"port": 9093, "protocol": "TCP"}, {"port": 9091, "protocol": "TCP"}]
    assert internal["from"] == [{"podSelector": {"matchLabels": {"kraftwerk.io/cluster": "sec"}}},
                                {"namespaceSelector": {}, "podSelector": {"matchLabels": OPERATOR_POD_LABELS}}]
    assert scram["ports"] == [{"port": 9094, "protocol": "TCP"}]
    assert scram["from"] == [{"podSelector": {"matchLabels": {"app": "orders"}}},
                             {"namespaceSelector": {"matchLabels": {"team": "payments"}}},
                             {"podSelector": {"matchLabels": {"kraftwerk.io/cluster": "sec"}}}]
    assert "from" not in mtls, "a listener that lists no peers is open to every client"
    assert metrics == {"ports": [{"port": 9404, "protocol": "TCP"}]}


def test_a_plaintext_cluster_without_peers_gets_none() -> None:
    plain = cluster_from(SPEC.split("  listeners:", maxsplit=1)[0])
    assert not wants_network_policy(plain)
    assert wants_network_policy(cluster_from(SPEC))


def test_the_chart_labels_its_operator_pods_as_the_policy_expects() -> None:
    from pathlib import Path

    helpers = (Path(__file__).resolve().parents[2] / "charts" / "kraftwerk" / "templates" / "_helpers.tpl").read_text()
    chart = (Path(__file__).resolve().parents[2] / "charts" / "kraftwerk" / "Chart.yaml").read_text()
    assert "name: kraftwerk" in chart
    assert "app.kubernetes.io/name: {{ .Chart.Name }}" in helpers
    assert "app.kubernetes.io/component: operator" in helpers
    assert OPERATOR_POD_LABELS == {"app.kubernetes.io/name": "kraftwerk", "app.kubernetes.io/component": "operator"}
