"""`kraftwerk operator` run from a kubeconfig, outside any pod, as a developer runs it.

The chart's operator runs in a pod under its ServiceAccount (`test_operator.py`). Here the same
command runs as a plain process with `--kubeconfig`, standalone, watching one namespace: it must
bring a KRaftCluster to Ready, which needs both the API server (objects, status) and the admin
client reaching the nodes by their pod DNS names. A process on the machine reaches those names the
way any machine on the cluster's network does: inside the cluster's network namespace
(`e2e/cluster/cluster exec`, which also hands it the in-namespace kubeconfig) with the cluster DNS
as its resolver (a private mount namespace whose /etc/resolv.conf names CoreDNS's Service).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .conftest import CHART
from .kube import REPO, Kube
from .steps import apply_doc, controllers_only_example, wait_ready

CLUSTER = REPO / "e2e" / "cluster" / "cluster"
KRAFTWERK = Path(sys.executable).parent / "kraftwerk"


def test_the_operator_run_from_a_kubeconfig_brings_a_cluster_to_ready(
    kube: Kube, namespace: str, tmp_path: Path
) -> None:
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", f"{CHART}/crds/")
    dns_ip = kube.kubectl("-n", "kube-system", "get", "service", "kube-dns", "-o", "jsonpath={.spec.clusterIP}").stdout
    assert dns_ip, "the cluster has no kube-dns Service"
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(f"nameserver {dns_ip}\nsearch svc.cluster.local cluster.local\noptions ndots:5\n")
    # `cluster exec` sets KUBECONFIG to the in-namespace kubeconfig; the operator is handed it by flag.
    script = (f'mount --bind {resolv} /etc/resolv.conf && exec {KRAFTWERK} operator --kubeconfig "$KUBECONFIG" '
              f"--namespace {namespace} --standalone --log-level info")
    log_path = tmp_path / "operator.log"
    with log_path.open("wb") as log:
        operator = subprocess.Popen(
            [str(CLUSTER), "exec", "unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ},
        )
    try:
        doc = controllers_only_example()
        name = doc["metadata"]["name"]
        apply_doc(kube, namespace, doc)
        resource = wait_ready(kube, namespace, name)
        status = resource["status"]
        assert operator.poll() is None, log_path.read_text()[-3000:]
        # Facts only the admin client can give (through the pods' DNS names): a leader and voters.
        assert status["quorum"]["leaderId"] >= 0
        assert sorted(v["id"] for v in status["quorum"]["voters"]) == sorted(
            n["id"] for n in status["nodes"] if "controller" in n["roles"])
        assert status["observedGeneration"] == resource["metadata"]["generation"]
        # Its objects carry the operator's labels and the resource as owner.
        # (The format Jobs' pods are the Jobs'; the node pods are the resource's own.)
        pods = kube.json("-n", namespace, "get", "pods", "-l", f"kraftwerk.io/cluster={name}")["items"]
        owners = [(o["kind"], o["name"]) for p in pods for o in p["metadata"]["ownerReferences"] if o["kind"] != "Job"]
        assert owners == [("KRaftCluster", name)] * len(status["nodes"]), owners
        # The finalizer is the operator's: deleting the resource completes while it runs.
        kube.kubectl("-n", namespace, "delete", "kc", name, "--wait=true", "--timeout=180s", timeout_s=200)
    finally:
        if operator.poll() is None:
            os.killpg(operator.pid, signal.SIGTERM)
            try:
                operator.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(operator.pid, signal.SIGKILL)
                operator.wait(timeout=30)
        kube.kubectl("-n", namespace, "delete", "kc", "--all", "--wait=false", check=False)
