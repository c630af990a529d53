"""What the Kubernetes runtime reads off a node's claim: the directory id its format reported (kept
on the claim), and none once the claim is `Lost` (its PersistentVolume gone, the disk with it),
which is what raises the broker-disk-loss runbook on Kubernetes. Claims are the client's own models,
shaped as the API server returns them."""

from __future__ import annotations

from kubernetes import client as k8s

from kraft_operator.runtime.kubernetes import _volume_facts

PATH = "/var/lib/kraftwerk/data-1"


def _claim(phase: str) -> k8s.V1PersistentVolumeClaim:
    return k8s.V1PersistentVolumeClaim(
        metadata=k8s.V1ObjectMeta(name="data-1-demo-brokers-5", annotations={
            "kraftwerk.io/directory-id": "VrKYvhzmdrgpUYznUkNkiw", "kraftwerk.io/cluster-id": "MkU3OEVBNTcwNTJENDM2Qg"}),
        spec=k8s.V1PersistentVolumeClaimSpec(resources=k8s.V1VolumeResourceRequirements(requests={"storage": "1Gi"})),
        status=k8s.V1PersistentVolumeClaimStatus(phase=phase, capacity={"storage": "1Gi"} if phase == "Bound" else None),
    )


def test_a_bound_claim_reports_the_directory_id_recorded_on_it() -> None:
    facts = _volume_facts(_claim("Bound"), volume_id=1, path=PATH, node_id=5, job=None, job_cluster_id=None)
    assert facts.formatted and facts.directory_id == "VrKYvhzmdrgpUYznUkNkiw" and facts.node_id == 5
    assert facts.size_bytes == 2**30


def test_a_lost_claim_reports_an_unformatted_volume() -> None:
    facts = _volume_facts(_claim("Lost"), volume_id=1, path=PATH, node_id=5, job=None, job_cluster_id=None)
    assert not facts.formatted and facts.directory_id is None and facts.cluster_id is None
