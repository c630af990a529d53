"""The operator on a real Kubernetes: installed by its Helm chart, running as a pod under its own
ServiceAccount, reconciling KRaftClusters through the real API server, kubelet and containerd.

One operator release per module (two replicas, peering), in a namespace of its own that it watches.
The end-to-end test applies `examples/kraftcluster.yaml` as it is: three engine controllers and
three engine brokers (JBOD, rack-aware), then a client pod produces and consumes through the
bootstrap Service with kafka-python. Another runs the example's brokers on Apache Kafka 4.1.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from .conftest import RELEASE
from .kube import Kube
from .steps import (
    EXAMPLE,
    apply_doc,
    condition_of,
    controllers_only_example,
    scale_operator,
    script_pod,
    wait_ready,
    wait_until,
)

pytestmark = pytest.mark.timeout(900)

CLIENT = Path(__file__).with_name("client_check.py")
ZONE_LABEL = "topology.kubernetes.io/zone"
ZONE = "e2e-zone-a"
EXPANDABLE_CLASS = "kraftwerk-e2e-expandable"


def test_operator_runs_as_pods_under_its_own_service_account(kube: Kube, operator_ns: str) -> None:
    deployment = kube.json("-n", operator_ns, "get", "deployment", RELEASE)
    assert deployment["status"]["readyReplicas"] == 2
    pods = kube.json("-n", operator_ns, "get", "pods", "-l", "app.kubernetes.io/component=operator")["items"]
    assert len(pods) == 2
    for pod in pods:
        assert pod["spec"]["serviceAccountName"] == RELEASE
        assert pod["status"]["phase"] == "Running"
        container = pod["spec"]["containers"][0]
        assert container["command"] == ["kraftwerk", "operator"]
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_peering_lets_exactly_one_replica_act(kube: Kube, operator_ns: str) -> None:
    """Both replicas register in the KopfPeering with distinct random priorities; kopf starts each
    paused, and only the one with the highest priority resumes."""
    def peers() -> dict[str, Any] | None:
        status = kube.json("-n", operator_ns, "get", "kopfpeering", "kraftwerk").get("status") or {}
        return status if len(status) == 2 else None

    status = wait_until("both replicas in the KopfPeering", peers, timeout_s=120)
    priorities = {identity.split("@", 1)[1].split("/", 1)[0]: peer["priority"] for identity, peer in status.items()}
    assert len(set(priorities.values())) == 2, f"replicas tie on priority: {status}"
    leader = max(priorities, key=lambda pod: priorities[pod])

    def last_peering_word(pod: str) -> str:
        lines = [line for line in kube.kubectl("-n", operator_ns, "logs", pod).stdout.splitlines()
                 if "Resuming operations" in line or "Pausing operations" in line]
        return ("paused" if "Pausing" in lines[-1] else "acting") if lines else "never resumed"

    def settled() -> dict[str, str] | None:
        words = {pod: last_peering_word(pod) for pod in priorities}
        return words if words[leader] == "acting" and list(words.values()).count("acting") == 1 else None

    wait_until("the highest-priority replica alone to act", settled, timeout_s=120)
    time.sleep(3)
    assert settled() is not None, {pod: last_peering_word(pod) for pod in priorities}


def test_the_chart_grants_no_verb_it_does_not_need(kube: Kube, operator_ns: str, tmp_path: Path) -> None:
    """The operator's own ServiceAccount token, used directly: what the chart's Role grants works,
    a verb it does not grant answers HTTP 403."""
    token = kube.kubectl("-n", operator_ns, "create", "token", RELEASE).stdout.strip()
    cluster = yaml.safe_load(Path(kube.env["KUBECONFIG"]).read_text())["clusters"][0]["cluster"]
    configuration = k8s.Configuration()
    configuration.host = cluster["server"]
    if "certificate-authority" in cluster:
        configuration.ssl_ca_cert = cluster["certificate-authority"]
    else:  # kind embeds the CA
        ca_file = tmp_path / "ca.crt"
        ca_file.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        configuration.ssl_ca_cert = str(ca_file)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    with k8s.ApiClient(configuration) as api:
        core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        assert core.list_namespaced_pod(operator_ns).items is not None
        custom.list_namespaced_custom_object("kraftwerk.io", "v1alpha1", operator_ns, "kraftclusters")
        refused = {
            # secrets are read and written (the CAs, users' credentials), never patched
            "patch secrets": lambda: core.patch_namespaced_secret("x", operator_ns, {"metadata": {"labels": {"a": "b"}}}),
            "delete events": lambda: core.delete_namespaced_event("x", operator_ns),
            "update pods": lambda: core.replace_namespaced_pod("x", operator_ns, {"metadata": {"name": "x"}}),
            "delete kraftclusters": lambda: custom.delete_namespaced_custom_object(
                "kraftwerk.io", "v1alpha1", operator_ns, "kraftclusters", "x"),
            "list pods in kube-system": lambda: core.list_namespaced_pod("kube-system"),
            "create namespaces": lambda: core.create_namespace({"metadata": {"name": "kw-forbidden"}}),
        }
        for what, call in refused.items():
            with pytest.raises(ApiException) as refusal:
                call()
            assert refusal.value.status == 403, f"{what}: {refusal.value.status} {refusal.value.reason}"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.update(nodePools=[{**s["nodePools"][0], "roles": ["broker"]}]),
         "at least one node pool must have the controller role"),
        (lambda s: s["nodePools"][0].update(replicas=-1), "spec.nodePools[0].replicas"),
        (lambda s: s.update(listeners=[{"name": "PLAINTEXT", "port": 9092}, {"name": "OTHER", "port": 9092}]),
         "listener ports must be distinct"),
        (lambda s: s.update(clusterId="not-a-kafka-uuid"), "spec.clusterId"),
    ],
    ids=["no-controller-pool", "negative-replicas", "duplicate-ports", "bad-cluster-id"],
)
def test_the_api_server_rejects_invalid_specs(kube: Kube, operator_ns: str, mutate: Any, message: str) -> None:
    doc = controllers_only_example()
    doc["metadata"]["name"] = "invalid"
    mutate(doc["spec"])
    result = apply_doc(kube, operator_ns, doc, check=False)
    assert result.returncode != 0, "the API server accepted an invalid KRaftCluster"
    assert "is invalid" in result.stderr and message in result.stderr, result.stderr
    assert kube.kubectl("-n", operator_ns, "get", "kc", "invalid", check=False).returncode != 0


def test_immutable_fields_are_refused_by_the_api_server(kube: Kube, operator_ns: str) -> None:
    doc = controllers_only_example()
    doc["metadata"]["name"] = "immutable"
    doc["spec"]["paused"] = True  # the operator only observes: this test is about the API server
    apply_doc(kube, operator_ns, doc)
    try:
        changed = json.loads(json.dumps(doc))
        changed["spec"]["nodePools"][0]["roles"] = ["controller", "broker"]
        result = apply_doc(kube, operator_ns, changed, check=False)
        assert result.returncode != 0 and "a node pool's roles are immutable" in result.stderr, result.stderr
        shrunk = json.loads(json.dumps(doc))
        shrunk["spec"]["nodePools"][0]["storage"]["volumes"][0]["size"] = "512Mi"
        result = apply_doc(kube, operator_ns, shrunk, check=False)
        assert result.returncode != 0 and "a volume cannot shrink" in result.stderr, result.stderr
    finally:
        kube.kubectl("-n", operator_ns, "delete", "kc", "immutable", "--wait=true", "--timeout=60s", check=False)


@pytest.fixture
def zoned_node(kube: Kube) -> Iterator[str]:
    """The e2e node labelled with a zone, as a cloud provider labels its nodes; unlabelled afterwards."""
    node = kube.json("get", "nodes")["items"][0]["metadata"]["name"]
    kube.kubectl("label", "node", node, f"{ZONE_LABEL}={ZONE}", "--overwrite")
    yield node
    kube.kubectl("label", "node", node, f"{ZONE_LABEL}-", check=False)


def _run_client(kube: Kube, ns: str, *, bootstrap: str, topic: str, count: int) -> dict[str, Any]:
    """A client pod (the project's image, kafka-python) that produces and consumes through `bootstrap`;
    its JSON report."""
    pod = script_pod(kube, ns, name="client-check", script=CLIENT,
                      args=[bootstrap, topic, str(count)])
    kube.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(pod))
    try:
        def ended() -> str | None:
            phase = kube.json("-n", ns, "get", "pod", "client-check")["status"].get("phase")
            return phase if phase in ("Succeeded", "Failed") else None

        phase = wait_until("the client pod to finish", ended, timeout_s=300, every_s=2)
        logs = kube.kubectl("-n", ns, "logs", "client-check").stdout
        assert phase == "Succeeded", logs
        return dict(json.loads(logs.strip().splitlines()[-1]))
    finally:
        kube.kubectl("-n", ns, "delete", "pod", "client-check", "--wait=false", check=False)
        kube.kubectl("-n", ns, "delete", "configmap", "client-check", check=False)


def test_apply_to_ready_then_produce_and_consume_then_delete_keeps_claims_per_policy(
    kube: Kube, operator_ns: str, zoned_node: str,
) -> None:
    ns = operator_ns
    doc = yaml.safe_load(EXAMPLE.read_text())
    name = doc["metadata"]["name"]
    doc["spec"]["nodePools"][0]["storage"]["volumes"][0]["deleteClaim"] = False
    applied_at = time.monotonic()
    apply_doc(kube, ns, doc)

    # format Jobs, one per node, complete and report each directory id
    def formatted() -> list[dict[str, Any]] | None:
        jobs = kube.json("-n", ns, "get", "jobs", "-l", f"kraftwerk.io/cluster={name}")["items"]
        done = [j for j in jobs if j.get("status", {}).get("succeeded")]
        return jobs if len(done) == 6 else None

    jobs = wait_until("six format Jobs to complete", formatted, timeout_s=600, every_s=2)

    resource = wait_ready(kube, ns, name)
    print(f"apply -> Ready (3 controllers, 3 brokers): {time.monotonic() - applied_at:.1f}s")
    status = resource["status"]
    uid = resource["metadata"]["uid"]

    # status: the quorum the engine reports, every node with its directory ids, brokers registered
    assert status["observedGeneration"] == resource["metadata"]["generation"]
    assert status["clusterId"]
    assert status["controllers"] == "3/3" and status["brokers"] == "3/3"
    quorum = status["quorum"]
    assert quorum["leaderId"] in {0, 1, 2} and quorum["leaderEpoch"] >= 1
    assert sorted(v["id"] for v in quorum["voters"]) == [0, 1, 2]

    def observers() -> list[int] | None:
        # DescribeQuorum lists an observer once it has fetched from the current leader: a moment
        # after Ready (registration goes through the controller, not raft) it may still miss one
        quorum = kube.json("-n", ns, "get", "kc", name)["status"]["quorum"]
        found = sorted(o["id"] for o in quorum.get("observers", []))
        return found if found == [3, 4, 5] else None

    wait_until("brokers 3-5 as the quorum's observers", observers, timeout_s=120, every_s=2)
    nodes = {n["id"]: n for n in status["nodes"]}
    assert sorted(nodes) == [0, 1, 2, 3, 4, 5]
    for node in nodes.values():
        assert node["phase"] == "Running"
        assert node["directories"] and all(d.get("directoryId") for d in node["directories"])
    for broker_id in (3, 4, 5):
        broker = nodes[broker_id]
        assert broker["pool"] == "brokers" and broker["registered"] is True and broker["fenced"] is False
        assert len(broker["directories"]) == 2  # JBOD: each log dir formatted with its own id
        assert len({d["directoryId"] for d in broker["directories"]}) == 2
    voter_dirs = {v["id"]: v["directoryId"] for v in quorum["voters"]}
    for node_id in (0, 1, 2):
        assert voter_dirs[node_id] in {d["directoryId"] for d in nodes[node_id]["directories"]}
    for kind in ("Progressing", "Degraded"):
        condition = condition_of(resource, kind)
        assert condition is not None and condition["status"] == "False", condition
        assert condition["lastTransitionTime"] and condition["reason"]

    # the objects: one pod per node running the engine, owned by the KRaftCluster, labelled
    pods = kube.json("-n", ns, "get", "pods", "-l", f"kraftwerk.io/cluster={name},app.kubernetes.io/name=kraft")
    by_id = {p["metadata"]["labels"]["kraftwerk.io/node-id"]: p for p in pods["items"]
             if p["metadata"]["labels"]["app.kubernetes.io/component"] != "format"}
    assert sorted(by_id) == ["0", "1", "2", "3", "4", "5"]
    for node_id, pod in by_id.items():
        labels = pod["metadata"]["labels"]
        broker = int(node_id) >= 3
        assert labels["kraftwerk.io/pool"] == ("brokers" if broker else "controllers")
        assert labels["app.kubernetes.io/component"] == ("broker" if broker else "controller")
        assert labels["app.kubernetes.io/instance"] == name
        assert labels["app.kubernetes.io/part-of"] == "kraftwerk"
        assert labels["app.kubernetes.io/managed-by"] == "kraftwerk-operator"
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("KRaftCluster", uid, True)
        assert pod["spec"]["containers"][0]["command"][:3] == ["kraft", "server", "start"]
        assert pod["status"]["phase"] == "Running"
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])
        if broker:
            # rack-aware: the init container wrote broker.rack from the node's zone label
            assert pod["metadata"]["annotations"]["kraftwerk.io/broker-rack"] == ZONE
            assert [c["name"] for c in pod["spec"]["initContainers"]] == ["rack"]
            assert pod["spec"]["nodeName"] == zoned_node
    for job in jobs:
        assert job["metadata"]["ownerReferences"][0]["uid"] == uid
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        assert "--cluster-id" in command
        is_broker = job["metadata"]["labels"]["kraftwerk.io/pool"] == "brokers"
        assert ("--initial-controllers" in command) is not is_broker, command
    for kind in ("configmaps", "services", "poddisruptionbudgets"):
        items = kube.json("-n", ns, "get", kind, "-l", f"kraftwerk.io/cluster={name}")["items"]
        assert items, kind
        assert all(i["metadata"]["ownerReferences"][0]["uid"] == uid for i in items), kind
    assert kube.json("-n", ns, "get", "pdb", f"{name}-controllers")["spec"]["minAvailable"] == 2
    assert kube.json("-n", ns, "get", "pdb", f"{name}-brokers")["spec"]["maxUnavailable"] == 1
    headless = kube.json("-n", ns, "get", "service", f"{name}-nodes")
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    broker_ips = {p["status"]["podIP"] for i, p in by_id.items() if int(i) >= 3}
    slices = kube.json("-n", ns, "get", "endpointslices", "-l", f"kubernetes.io/service-name={name}-bootstrap")
    ready_ips = {address for s in slices["items"] for e in s.get("endpoints") or []
                 if e.get("conditions", {}).get("ready") for address in e["addresses"]}
    assert ready_ips == broker_ips, (ready_ips, broker_ips)
    claims = kube.json("-n", ns, "get", "pvc", "-l", f"kraftwerk.io/cluster={name}")["items"]
    assert len(claims) == 9 and all("ownerReferences" not in c["metadata"] for c in claims)
    assert all(c["status"]["phase"] == "Bound" for c in claims)

    # the engine answers its own tool inside a pod: the quorum it describes is the status's
    described = kube.kubectl("-n", ns, "exec", f"{name}-controllers-0", "--", "kraft", "metadata-quorum",
                             "--bootstrap-controller", f"{name}-controllers-0.{name}-nodes:9093",
                             "describe", "--status").stdout
    assert f"ClusterId:              {status['clusterId']}" in described, described

    # a client pod produces and consumes through the bootstrap Service
    report = _run_client(kube, ns, bootstrap=f"{name}-bootstrap:9092", topic="e2e", count=200)
    assert report["acknowledged"] == 200 and report["read"] == 200 and report["same"] is True, report
    assert [b["id"] for b in report["brokers"]] == [3, 4, 5]
    assert all(b["rack"] == ZONE for b in report["brokers"]), report
    assert all(b["host"] == f"{name}-brokers-{b['id']}.{name}-nodes.{ns}.svc.cluster.local" for b in report["brokers"])

    # Events for the actions taken
    events = kube.json("-n", ns, "get", "events", "--field-selector", f"involvedObject.uid={uid}")["items"]
    reasons = {e["reason"] for e in events}
    assert {"FormatStorage", "StartNode", "WriteConfig"} <= reasons, reasons

    # delete: everything owned goes, the claims stay (deleteClaim: false)
    kube.kubectl("-n", ns, "delete", "kc", name, "--wait=true", "--timeout=300s")
    wait_until("the owned pods to be garbage-collected",
          lambda: not kube.json("-n", ns, "get", "pods", "-l", f"kraftwerk.io/cluster={name}")["items"],
          timeout_s=300, every_s=2)
    kept = kube.json("-n", ns, "get", "pvc", "-l", f"kraftwerk.io/cluster={name}")["items"]
    assert sorted(c["metadata"]["name"] for c in kept) == sorted(c["metadata"]["name"] for c in claims)
    kube.kubectl("-n", ns, "delete", "pvc", "-l", f"kraftwerk.io/cluster={name}", "--wait=false")


def test_delete_claim_true_removes_the_claims(kube: Kube, operator_ns: str) -> None:
    ns = operator_ns
    doc = controllers_only_example()
    doc["metadata"]["name"] = "ephemeral"
    pool = doc["spec"]["nodePools"][0]
    pool["replicas"] = 1
    pool["storage"]["volumes"][0]["deleteClaim"] = True
    apply_doc(kube, ns, doc)
    wait_until("the claim of node 0", lambda: kube.json("-n", ns, "get", "pvc", "-l", "kraftwerk.io/cluster=ephemeral")["items"],
          timeout_s=300, every_s=2)
    kube.kubectl("-n", ns, "delete", "kc", "ephemeral", "--wait=true", "--timeout=180s")
    wait_until("the claim to be deleted",
          lambda: not [c for c in kube.json("-n", ns, "get", "pvc", "-l", "kraftwerk.io/cluster=ephemeral")["items"]
                       if not c["metadata"].get("deletionTimestamp")],
          timeout_s=120, every_s=2)
    events = kube.json("-n", ns, "get", "events", "--field-selector", "reason=VolumesReleased")["items"]
    assert any("data-0-ephemeral-controllers-" in e["message"] for e in events), [e["message"] for e in events]


def test_apache_kafka_brokers_on_engine_controllers_reach_ready_serve_clients_and_roll(
    kube: Kube, operator_ns: str, zoned_node: str,
) -> None:
    """The example with its broker pool on Apache Kafka 4.1 (the jars and Java runtime in the
    image), its controllers on the engine: Kafka's StorageTool formats the brokers, Kafka's broker
    runs from the same rendered config (rack-aware, JBOD), registers with our controllers, the
    cluster is Ready, a client produces and consumes through the bootstrap Service; a broker
    restarted by the manual-roll annotation (Kafka's controlled shutdown on SIGTERM) comes back and
    serves again."""
    ns = operator_ns
    doc = yaml.safe_load(EXAMPLE.read_text())
    name = "kafka-brokers"
    doc["metadata"]["name"] = name
    doc["spec"]["nodePools"][1]["implementation"] = "apache-kafka"
    applied_at = time.monotonic()
    apply_doc(kube, ns, doc)
    try:
        resource = wait_ready(kube, ns, name)
        print(f"apply -> Ready (3 engine controllers, 3 Kafka 4.1 brokers): {time.monotonic() - applied_at:.1f}s")
        status = resource["status"]
        assert status["controllers"] == "3/3" and status["brokers"] == "3/3", status
        nodes = {n["id"]: n for n in status["nodes"]}
        for broker_id in (3, 4, 5):
            broker = nodes[broker_id]
            assert broker["implementation"] == "apache-kafka" and broker["version"] == "kafka 4.1.0", broker
            assert broker["registered"] is True and broker["fenced"] is False, broker
            assert len({d["directoryId"] for d in broker["directories"]}) == 2, broker  # JBOD, Kafka's ids
        assert all(nodes[c]["implementation"] == "kraftwerk" for c in (0, 1, 2))

        # the brokers' pods run Kafka's own server, formatted by Kafka's own StorageTool
        pods = kube.json("-n", ns, "get", "pods", "-l", f"kraftwerk.io/cluster={name},kraftwerk.io/pool=brokers")
        running = {p["metadata"]["labels"]["kraftwerk.io/node-id"]: p for p in pods["items"]
                   if p["metadata"]["labels"]["app.kubernetes.io/component"] != "format"}
        assert sorted(running) == ["3", "4", "5"]
        for pod in running.values():
            command = pod["spec"]["containers"][0]["command"]
            assert command[0] == "java" and "kafka.Kafka" in command, command
            assert pod["spec"]["containers"][0]["readinessProbe"]["tcpSocket"]["port"] == 9092
        jobs = kube.json("-n", ns, "get", "jobs", "-l", f"kraftwerk.io/cluster={name},kraftwerk.io/pool=brokers")
        assert len(jobs["items"]) == 3
        for job in jobs["items"]:
            assert "--kafka-classpath" in job["spec"]["template"]["spec"]["containers"][0]["command"]
        log = kube.kubectl("-n", ns, "logs", f"{name}-brokers-3").stdout
        assert "Kafka version: 4.1.0" in log and "[KafkaRaftServer nodeId=3] Kafka Server started" in log, log[-2000:]

        # Kafka's brokers answer a client through the bootstrap Service, with the rack from the zone
        report = _run_client(kube, ns, bootstrap=f"{name}-bootstrap:9092", topic="on-kafka", count=200)
        assert report["acknowledged"] == 200 and report["read"] == 200 and report["same"] is True, report
        assert [b["id"] for b in report["brokers"]] == [3, 4, 5]
        assert all(b["rack"] == ZONE for b in report["brokers"]), report

        # one broker restarted through the manual-roll annotation: its pod is replaced (SIGTERM:
        # Kafka's controlled shutdown), it registers again and the cluster serves as before
        before = running["4"]["metadata"]["uid"]
        kube.kubectl("-n", ns, "annotate", "pod", f"{name}-brokers-4", "kraftwerk.io/manual-rolling-update=true")

        def restarted() -> dict[str, Any] | None:
            pod = kube.json("-n", ns, "get", "pods", "-l",
                            f"kraftwerk.io/cluster={name},kraftwerk.io/node-id=4,app.kubernetes.io/component=broker")
            items = [p for p in pod["items"] if p["metadata"]["uid"] != before and not p["metadata"].get("deletionTimestamp")]
            if not items or not any(c["type"] == "Ready" and c["status"] == "True"
                                    for c in items[0]["status"].get("conditions", [])):
                return None
            node = {n["id"]: n for n in kube.json("-n", ns, "get", "kc", name)["status"]["nodes"]}[4]
            return items[0] if node.get("registered") and node.get("fenced") is False else None

        wait_until("broker 4's new pod to be Ready and registered", restarted, timeout_s=420, every_s=2)
        events = kube.json("-n", ns, "get", "events", "--field-selector", f"involvedObject.name={name}")["items"]
        assert any(e["reason"] == "RestartNode" and "node 4" in e["message"] for e in events), \
            sorted({(e["reason"], e["message"][:80]) for e in events})
        again = _run_client(kube, ns, bootstrap=f"{name}-bootstrap:9092", topic="after-restart", count=100)
        assert again["acknowledged"] == 100 and again["read"] == 100 and again["same"] is True, again
    finally:
        kube.kubectl("-n", ns, "delete", "kc", name, "--wait=true", "--timeout=300s", check=False)
        kube.kubectl("-n", ns, "delete", "pvc", "-l", f"kraftwerk.io/cluster={name}", "--wait=false", check=False)


def test_apache_kafka_controllers_are_ready_from_raft(kube: Kube, operator_ns: str) -> None:
    """Three Apache Kafka 4.1 controllers under the operator: formatted by Kafka's StorageTool with
    the initial controllers, their pods Ready through the exec probe that asks raft (DescribeQuorum
    of the leader), not a port; the quorum in status is Kafka's."""
    ns = operator_ns
    doc = controllers_only_example()
    name = "kafka-controllers"
    doc["metadata"]["name"] = name
    doc["spec"]["nodePools"][0]["implementation"] = "apache-kafka"
    apply_doc(kube, ns, doc)
    try:
        status = wait_ready(kube, ns, name)["status"]
        assert status["controllers"] == "3/3", status
        quorum = status["quorum"]
        assert quorum["leaderId"] in {0, 1, 2} and sorted(v["id"] for v in quorum["voters"]) == [0, 1, 2], quorum
        assert all(n["version"] == "kafka 4.1.0" and n["implementation"] == "apache-kafka" for n in status["nodes"])
        pods = kube.json("-n", ns, "get", "pods", "-l", f"kraftwerk.io/cluster={name},app.kubernetes.io/component=controller")
        assert len(pods["items"]) == 3
        for pod in pods["items"]:
            container = pod["spec"]["containers"][0]
            assert container["command"][0] == "java" and "kafka.Kafka" in container["command"], container["command"]
            probe = container["readinessProbe"]["exec"]["command"]
            assert probe[:3] == ["python3", "-m", "kraft_operator.runtime.controller_probe"], probe
            # the probe's own answer, run as the kubelet runs it
            answer = kube.kubectl("-n", ns, "exec", pod["metadata"]["name"], "--", *probe).stdout
            assert answer.startswith("ready: node ") and ("leads epoch" in answer or "caught up with leader" in answer), answer
    finally:
        kube.kubectl("-n", ns, "delete", "kc", name, "--wait=true", "--timeout=180s", check=False)
        kube.kubectl("-n", ns, "delete", "pvc", "-l", f"kraftwerk.io/cluster={name}", "--wait=false", check=False)


def _jbod_cluster(name: str) -> dict[str, Any]:
    """The example cluster named `name`, its broker pool without a rack and with 1Gi volumes
    whose claims go with the cluster."""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = name
    brokers = doc["spec"]["nodePools"][1]
    brokers.pop("rack", None)
    for volume in brokers["storage"]["volumes"]:
        volume.update({"size": "1Gi", "deleteClaim": True})
    return doc


def test_a_lost_jbod_volume_is_replaced_with_approval_by_a_new_claim_and_reformatted(kube: Kube, operator_ns: str) -> None:
    """A broker's second JBOD volume dies under it: its PersistentVolume goes (the claim turns
    `Lost`) and its files with it. The operator raises the broker-disk-loss runbook and waits for
    the approval annotation; approved, the broker stops, a new claim of the same name replaces the
    lost one, it is formatted with a new directory id, the broker starts, re-replicates, and the
    runbook closes. Clients are served before and after."""
    ns = operator_ns
    name = "jbod"
    doc = _jbod_cluster(name)
    apply_doc(kube, ns, doc)
    claim = f"data-1-{name}-brokers-5"
    try:
        status = wait_ready(kube, ns, name)["status"]
        report = _run_client(kube, ns, bootstrap=f"{name}-bootstrap:9092", topic="before-loss", count=100)
        assert report["acknowledged"] == 100 and report["same"] is True, report
        lost_id = next(d["directoryId"] for n in status["nodes"] if n["id"] == 5
                       for d in n["directories"] if d["volumeId"] == 1)
        old = kube.json("-n", ns, "get", "pvc", claim)

        # the disk dies: its files go under the running broker, its PersistentVolume goes
        kube.kubectl("-n", ns, "exec", f"{name}-brokers-5", "--", "sh", "-c",
                     "rm -rf /var/lib/kraftwerk/data-1/* /var/lib/kraftwerk/data-1/.[!.]*", check=False)
        # (deleted first, then its protection finalizers dropped: while it is bound and not deleting,
        # the protection controller adds them back at once)
        volume = old["spec"]["volumeName"]
        kube.kubectl("delete", "pv", volume, "--wait=false")
        kube.kubectl("patch", "pv", volume, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
        wait_until("the claim to be Lost", lambda: kube.json("-n", ns, "get", "pvc", claim)["status"].get("phase") == "Lost",
              timeout_s=120, every_s=2)

        def held() -> dict[str, Any] | None:
            status = kube.json("-n", ns, "get", "kc", name).get("status", {})
            operation = status.get("operation") or {}
            if operation.get("name") != "BrokerVolumeReplacement" or operation.get("step") != "await-approval":
                return None
            return status if any(r["name"] == "broker-disk-loss" for r in status.get("runbooks", [])) else None

        status = wait_until("the lost volume recorded, waiting for approval", held, timeout_s=300, every_s=2)
        assert status["operation"]["volume"]["nodeId"] == 5 and status["operation"]["volume"]["volumeId"] == 1
        assert status["operation"]["volume"]["lostDirectoryId"] == lost_id, status["operation"]
        assert status["operation"]["blockedBy"][0]["kind"] == "approval", status["operation"]
        assert kube.json("-n", ns, "get", "pvc", claim)["metadata"]["uid"] == old["metadata"]["uid"]  # nothing yet

        kube.kubectl("-n", ns, "annotate", "kc", name, "kraftwerk.io/approve=broker-disk-loss/replace-volume")

        def replaced() -> dict[str, Any] | None:
            resource = kube.json("-n", ns, "get", "kc", name)
            status = resource.get("status", {})
            ready = condition_of(resource, "Ready")
            if status.get("operation") or ready is None or ready["status"] != "True":
                return None
            if any(r["name"] == "broker-disk-loss" for r in status.get("runbooks", [])):
                return None
            node = next(n for n in status["nodes"] if n["id"] == 5)
            directory = next(d for d in node["directories"] if d["volumeId"] == 1)
            return status if directory.get("directoryId") not in (None, lost_id) else None

        status = wait_until("the volume replaced, formatted anew and re-replicated", replaced, timeout_s=900, every_s=3)
        new = kube.json("-n", ns, "get", "pvc", claim)
        assert new["metadata"]["uid"] != old["metadata"]["uid"] and new["status"]["phase"] == "Bound", new["status"]
        assert new["metadata"]["annotations"]["kraftwerk.io/directory-id"] not in (None, lost_id)
        assert status["partitions"]["underReplicated"] == 0, status["partitions"]
        reasons = [e["reason"] for e in sorted(
            kube.json("-n", ns, "get", "events", "--field-selector", f"involvedObject.name={name}")["items"],
            key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")]
        assert "ReplaceVolume" in reasons and "RunbookClosed" in reasons, reasons
        after = _run_client(kube, ns, bootstrap=f"{name}-bootstrap:9092", topic="after-loss", count=100)
        assert after["acknowledged"] == 100 and after["same"] is True, after
    finally:
        kube.kubectl("-n", ns, "delete", "kc", name, "--wait=true", "--timeout=300s", check=False)
        kube.kubectl("-n", ns, "delete", "pvc", "-l", f"kraftwerk.io/cluster={name}", "--wait=false", check=False)


def test_a_jbod_volume_is_removed_then_another_added_on_a_running_broker_pool(kube: Kube, operator_ns: str) -> None:
    """JBOD brokers lose volume 1 from the spec: the operator moves every replica off each broker's
    data-1 with AlterReplicaLogDirs (LogDirRemoval in status), and only once the brokers report it
    empty rolls them with `log.dirs` without it. Then volume 2 is added: a new claim per pod, a
    roll with the new `log.dirs`, and each broker formats the new, empty volume at its start (a
    meta.properties with a new directory id) and registers it. Clients are served throughout."""
    ns = operator_ns
    name = "jbodmove"
    doc = _jbod_cluster(name)
    apply_doc(kube, ns, doc)
    pods = [f"{name}-brokers-{b}" for b in (3, 4, 5)]

    def config_of(pod: str) -> str:
        return kube.kubectl("-n", ns, "exec", pod, "--", "cat", "/etc/kraftwerk/server.properties").stdout

    def log_dirs(pod: str) -> list[str]:
        line = next(line for line in config_of(pod).splitlines() if line.startswith("log.dirs="))
        return line.split("=", 1)[1].split(",")

    def settled() -> dict[str, Any] | None:
        resource = kube.json("-n", ns, "get", "kc", name)
        ready = condition_of(resource, "Ready")
        status = resource.get("status", {})
        if status.get("operation") or ready is None or ready["status"] != "True":
            return None
        return status if (status.get("partitions") or {}).get("underReplicated", 1) == 0 else None

    try:
        wait_ready(kube, ns, name)
        report = _run_client(kube, ns, bootstrap=f"{name}-bootstrap:9092", topic="before-move", count=100)
        assert report["acknowledged"] == 100 and report["same"] is True, report
        held = {pod: kube.kubectl("-n", ns, "exec", pod, "--", "ls", "/var/lib/kraftwerk/data-1").stdout.split()
                for pod in pods}
        assert any(n.startswith("before-move-") or n.startswith("__consumer_offsets-") for names in held.values()
                   for n in names), held

        # -- remove volume 1 ----------------------------------------------------------------------
        kube.kubectl("-n", ns, "patch", "kc", name, "--type=json",
                     "-p", '[{"op": "remove", "path": "/spec/nodePools/1/storage/volumes/1"}]')
        seen: set[str] = set()

        def removed() -> dict[str, Any] | None:
            status = kube.json("-n", ns, "get", "kc", name).get("status", {})
            operation = status.get("operation") or {}
            if operation.get("name") == "LogDirRemoval":
                seen.add(operation.get("step", ""))
            if settled() is None:
                return None
            return status if all(log_dirs(pod) == ["/var/lib/kraftwerk/data-0"] for pod in pods) else None

        wait_until("volume 1 emptied and the brokers rolled without it", removed, timeout_s=900, every_s=2)
        reasons = [e["reason"] for e in sorted(
            kube.json("-n", ns, "get", "events", "--field-selector", f"involvedObject.name={name}")["items"],
            key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")]
        assert "LogDirRemovalPlanned" in reasons and "LogDirDrained" in reasons, reasons
        assert reasons.index("LogDirRemovalPlanned") < reasons.index("LogDirDrained") < len(reasons) - 1 - reasons[::-1].index("RestartNode"), reasons
        after = _run_client(kube, ns, bootstrap=f"{name}-bootstrap:9092", topic="after-removal", count=100)
        assert after["acknowledged"] == 100 and after["same"] is True, after

        # -- add volume 2 -------------------------------------------------------------------------
        kube.kubectl("-n", ns, "patch", "kc", name, "--type=json",
                     "-p", '[{"op": "add", "path": "/spec/nodePools/1/storage/volumes/-", '
                           '"value": {"id": 2, "size": "1Gi", "deleteClaim": true}}]')

        def added() -> bool:
            if settled() is None:
                return False
            return all(log_dirs(pod) == ["/var/lib/kraftwerk/data-0", "/var/lib/kraftwerk/data-2"] for pod in pods)

        wait_until("volume 2 in every broker's log.dirs, rolled", added, timeout_s=900, every_s=2)
        for pod in pods:
            meta = kube.kubectl("-n", ns, "exec", pod, "--", "cat", "/var/lib/kraftwerk/data-2/meta.properties").stdout
            assert "directory.id=" in meta and "node.id=" in meta, meta
            claim = kube.json("-n", ns, "get", "pvc", f"data-2-{pod}")
            assert claim["status"]["phase"] == "Bound", claim["status"]
        last = _run_client(kube, ns, bootstrap=f"{name}-bootstrap:9092", topic="after-add", count=100)
        assert last["acknowledged"] == 100 and last["same"] is True, last
    finally:
        kube.kubectl("-n", ns, "delete", "kc", name, "--wait=true", "--timeout=300s", check=False)
        kube.kubectl("-n", ns, "delete", "pvc", "-l", f"kraftwerk.io/cluster={name}", "--wait=false", check=False)


def test_operator_metrics_are_served(kube: Kube, operator_ns: str) -> None:
    pod = kube.json("-n", operator_ns, "get", "pods", "-l", "app.kubernetes.io/component=operator")["items"][0]
    raw = kube.kubectl("get", "--raw",
                       f"/api/v1/namespaces/{operator_ns}/pods/{pod['metadata']['name']}:8080/proxy/metrics").stdout
    assert "kraftwerk_operator_reconcile_duration_seconds" in raw



@pytest.fixture(scope="module")
def expandable_class(kube: Kube) -> str:
    """A StorageClass like the default one, but allowing volume expansion (the API server refuses to
    grow a claim of a class that does not). The in-tree hostPath provisioner has no expander: a grown
    claim stays pending with its old capacity, which is what a driver that expands offline shows
    until the pod restarts."""
    kube.kubectl("apply", "-f", "-", stdin=yaml.safe_dump({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": EXPANDABLE_CLASS},
        "provisioner": "kubernetes.io/host-path", "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate", "allowVolumeExpansion": True,
    }))
    return EXPANDABLE_CLASS


def test_a_grown_volume_is_expanded_by_the_update_handler_and_a_restarted_operator_resumes(
    kube: Kube, operator_ns: str, expandable_class: str,
) -> None:
    """Update: a larger volume in the spec patches the PVC, and the status shows the request above
    the capacity. Resume: with the operator stopped, the spec grows again; the operator started
    afresh picks it up from the resource and its status, formats nothing again and keeps the
    cluster id."""
    ns = operator_ns
    doc = controllers_only_example()
    doc["metadata"]["name"] = "growing"
    pool = doc["spec"]["nodePools"][0]
    pool["replicas"] = 1
    pool["storage"]["volumes"][0].update({"size": "1Gi", "class": expandable_class, "deleteClaim": True})
    apply_doc(kube, ns, doc)
    claim = "data-0-growing-controllers-0"
    try:
        before = wait_ready(kube, ns, "growing")
        jobs_before = sorted(j["metadata"]["name"] for j in kube.json(
            "-n", ns, "get", "jobs", "-l", "kraftwerk.io/cluster=growing")["items"])

        def requested(size: str) -> Any:
            pvc = kube.json("-n", ns, "get", "pvc", claim)
            return pvc if pvc["spec"]["resources"]["requests"]["storage"] == size else None

        def directory_reports(requested_bytes: int) -> dict[str, Any] | None:
            resource = kube.json("-n", ns, "get", "kc", "growing")
            nodes = resource.get("status", {}).get("nodes", [])
            directory = nodes[0]["directories"][0] if nodes and nodes[0].get("directories") else {}
            return directory if directory.get("requestedBytes") == requested_bytes else None

        # update handler: the spec grows, the claim follows, the status tells request and capacity
        kube.kubectl("-n", ns, "patch", "kc", "growing", "--type=json", "-p",
                     json.dumps([{"op": "replace", "path": "/spec/nodePools/0/storage/volumes/0/size", "value": "2Gi"}]))
        wait_until("the claim to ask for 2Gi", lambda: requested("2Gi"), timeout_s=120, every_s=2)
        directory = wait_until("status to show the 2Gi request", lambda: directory_reports(2 * 2**30), timeout_s=120,
                          every_s=2)
        assert directory["capacityBytes"] == 2**30  # the hostPath class cannot grow it: pending, and said so
        uid = before["metadata"]["uid"]
        events = kube.json("-n", ns, "get", "events", "--field-selector",
                           f"involvedObject.uid={uid},reason=ResizeVolume")["items"]
        assert events and "grow volume 0" in events[0]["message"], events

        # resume: the spec changes while no operator runs; a fresh operator picks it up
        scale_operator(kube, ns, 0)
        kube.kubectl("-n", ns, "patch", "kc", "growing", "--type=json", "-p",
                     json.dumps([{"op": "replace", "path": "/spec/nodePools/0/storage/volumes/0/size", "value": "3Gi"}]))
        time.sleep(3)
        assert requested("2Gi") is not None  # nobody acted while the operator was gone
        scale_operator(kube, ns, 2)
        wait_until("the resumed operator to grow the claim to 3Gi", lambda: requested("3Gi"), timeout_s=240, every_s=2)
        wait_until("status to show the 3Gi request", lambda: directory_reports(3 * 2**30), timeout_s=120, every_s=2)
        after = wait_ready(kube, ns, "growing")
        assert after["status"]["clusterId"] == before["status"]["clusterId"]
        assert after["status"]["observedGeneration"] == after["metadata"]["generation"]
        jobs_after = sorted(j["metadata"]["name"] for j in kube.json(
            "-n", ns, "get", "jobs", "-l", "kraftwerk.io/cluster=growing")["items"])
        assert jobs_after == jobs_before  # nothing formatted again
    finally:
        scale_operator(kube, ns, 2)
        kube.kubectl("-n", ns, "delete", "kc", "growing", "--wait=true", "--timeout=180s", check=False)
