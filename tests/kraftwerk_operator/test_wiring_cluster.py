"""The KRaftCluster the kopf wiring hands the planner carries the resource's annotations: the plan
reads `kraftwerk.io/approve`, `kraftwerk.io/pause-reconciliation` and the cluster's
`kraftwerk.io/manual-rolling-update` from them (on Kubernetes they were dropped, so an approval
never reached the plan)."""

from __future__ import annotations

import kopf

from kraft_operator.handlers.wiring import _cluster


def test_the_cluster_from_a_kopf_body_keeps_its_annotations() -> None:
    body = kopf.Body({
        "apiVersion": "kraftwerk.io/v1alpha1", "kind": "KRaftCluster",
        "metadata": {"name": "demo", "namespace": "ns", "uid": "u-1", "generation": 2,
                     "annotations": {"kraftwerk.io/approve": "broker-disk-loss/replace-volume",
                                     "kraftwerk.io/pause-reconciliation": "true"}},
        "spec": {"nodePools": [{"name": "controllers", "roles": ["controller"], "replicas": 3,
                                "storage": {"volumes": [{"id": 0, "size": "1Gi"}]}}]},
    })
    cluster = _cluster(body)
    assert cluster.metadata.annotations["kraftwerk.io/approve"] == "broker-disk-loss/replace-volume"
    assert cluster.metadata.annotations["kraftwerk.io/pause-reconciliation"] == "true"
    assert cluster.metadata.uid == "u-1" and cluster.metadata.generation == 2
