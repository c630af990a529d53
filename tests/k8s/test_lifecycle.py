"""Lifecycle operations on a real Kubernetes, under a live workload: the operator installed by its
chart rolls a cluster after a spec change (controllers first, one pod at a time, each through its
controlled shutdown), says in status why the roll waits while a partition sits at min ISR, resumes
after the operator itself was stopped mid-roll, then adds a controller to the quorum (KIP-853)
and removes it again. A workload pod produces with acks=all and idempotence the whole time and
reads everything back in a consumer group: nothing acknowledged may be lost.

Every wait is for a settled state the cluster or the operator reports, with generous timeouts:
the machine this runs on is a loaded 2-core box.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .kube import Kube
from .steps import (
    EXAMPLE,
    apply_doc,
    condition_of,
    controllers_only_example,
    scale_operator,
    script_pod,
    wait_until,
)

pytestmark = pytest.mark.timeout(2400)

WORKLOAD = Path(__file__).with_name("workload.py")
NAME = "life"
STOP_FILE = "/tmp/stop"
# a topic whose only partition has replication factor 2 and min.insync.replicas 2 on brokers 3 and
# 4: restarting either would drop it below min ISR, so the roll must wait for it
PINNED = "pinned"


def _cluster_doc() -> dict[str, Any]:
    """Three controllers and three brokers of the engine (the example without the rack awareness,
    which needs a zoned node), with a short grace period."""
    doc = controllers_only_example()
    example = yaml.safe_load(EXAMPLE.read_text())
    brokers = example["spec"]["nodePools"][1]
    brokers.pop("rack", None)
    brokers["storage"] = {"volumes": [{"id": 0, "size": "1Gi", "deleteClaim": True}]}
    doc["spec"]["nodePools"].append(brokers)
    doc["metadata"]["name"] = NAME
    doc["spec"]["lifecycle"] = {"terminationGracePeriodSeconds": 30}
    return doc


def _resource(kube: Kube, ns: str) -> dict[str, Any]:
    return dict(kube.json("-n", ns, "get", "kc", NAME))


def _ready(kube: Kube, ns: str) -> dict[str, Any] | None:
    resource = _resource(kube, ns)
    condition = condition_of(resource, "Ready")
    status = resource.get("status", {})
    if condition is None or condition["status"] != "True" or status.get("operation"):
        return None
    return resource


def _pods(kube: Kube, ns: str) -> dict[int, dict[str, Any]]:
    items = kube.json("-n", ns, "get", "pods", "-l", f"kraftwerk.io/cluster={NAME},app.kubernetes.io/component!=format")
    return {int(p["metadata"]["labels"]["kraftwerk.io/node-id"]): p for p in items["items"]}


def _python_in(kube: Kube, ns: str, pod: str, code: str) -> str:
    """Run a Python snippet (kafka-python is in the image) inside one of the cluster's pods."""
    return str(kube.kubectl("-n", ns, "exec", pod, "--", "python3", "-c", code).stdout)


def _admin(code: str) -> str:
    return ("from kafka import KafkaAdminClient\nfrom kafka.admin import NewTopic\n"
            f"admin = KafkaAdminClient(bootstrap_servers='{NAME}-bootstrap:9092', request_timeout_ms=30000)\n"
            f"{code}\nadmin.close()\n")


class DisruptionWatch:
    """Samples the cluster's pods every second while the scenario runs, and keeps the largest number
    of nodes the operator had taken down at once: pods being deleted, or missing, among the nodes
    the spec asks for. The operator must never take two down together."""

    def __init__(self, kube: Kube, ns: str, node_ids: set[int]) -> None:
        self.kube, self.ns, self.node_ids = kube, ns, set(node_ids)
        self.worst: tuple[int, list[int]] = (0, [])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DisruptionWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                pods = _pods(self.kube, self.ns)
            except Exception:  # a failed sample (API server busy) is skipped, not counted
                continue
            down = sorted(i for i in self.node_ids
                          if i not in pods or pods[i]["metadata"].get("deletionTimestamp"))
            if len(down) > self.worst[0]:
                self.worst = (len(down), down)


@pytest.fixture
def workload(kube: Kube, operator_ns: str) -> Iterator[Callable[[], None]]:
    """Starts the workload pod (see workload.py) when called; removes it afterwards."""
    ns = operator_ns

    def start() -> None:
        pod = script_pod(kube, ns, name="workload", script=WORKLOAD,
                          args=[f"{NAME}-bootstrap:9092", "acked", STOP_FILE])
        kube.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(pod))

    try:
        yield start
    finally:
        kube.kubectl("-n", ns, "delete", "pod", "workload", "--wait=false", check=False)
        kube.kubectl("-n", ns, "delete", "configmap", "workload", check=False)


def _acked(kube: Kube, ns: str) -> int:
    lines = [line for line in kube.kubectl("-n", ns, "logs", "workload", check=False).stdout.splitlines()
             if line.startswith("acked ")]
    return int(lines[-1].split()[1]) if lines else 0


def _stop_workload(kube: Kube, ns: str) -> dict[str, Any]:
    kube.kubectl("-n", ns, "exec", "workload", "--", "touch", STOP_FILE)

    def ended() -> str | None:
        phase = kube.json("-n", ns, "get", "pod", "workload")["status"].get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_until("the workload to read everything back and finish", ended, timeout_s=400, every_s=2)
    logs = kube.kubectl("-n", ns, "logs", "workload").stdout
    report = dict(json.loads(logs.strip().splitlines()[-1]))
    assert phase == "Succeeded", logs[-3000:]
    return report


def _voters(kube: Kube, ns: str) -> list[int]:
    quorum = _resource(kube, ns).get("status", {}).get("quorum") or {}
    return sorted(v["id"] for v in quorum.get("voters", []))


def test_a_roll_under_load_waits_for_min_isr_resumes_after_the_operator_stops_then_a_controller_joins_and_leaves(
    kube: Kube, operator_ns: str, workload: Callable[[], None],
) -> None:
    ns = operator_ns
    apply_doc(kube, ns, _cluster_doc())
    try:
        _scenario(kube, ns, start_workload=workload)
    finally:
        kube.kubectl("-n", ns, "delete", "kc", NAME, "--wait=true", "--timeout=300s", check=False)
        kube.kubectl("-n", ns, "delete", "pvc", "-l", f"kraftwerk.io/cluster={NAME}", "--wait=false", check=False)


def _scenario(kube: Kube, ns: str, *, start_workload: Callable[[], None]) -> None:
    before = wait_until("the cluster to be Ready", lambda: _ready(kube, ns), timeout_s=900, every_s=3)
    uid = before["metadata"]["uid"]
    # the pods were started with the revision they run: the annotation a roll compares
    first_pods = _pods(kube, ns)
    assert sorted(first_pods) == [0, 1, 2, 3, 4, 5]
    assert all(p["metadata"]["annotations"].get("kraftwerk.io/revision") for p in first_pods.values())
    assert all(p["spec"]["terminationGracePeriodSeconds"] == 30 for p in first_pods.values())

    # the workload runs from now to the end: wait until it acknowledges
    start_workload()
    wait_until("the workload's first acknowledged records", lambda: _acked(kube, ns) >= 100, timeout_s=300, every_s=2)
    _python_in(kube, ns, f"{NAME}-brokers-3", _admin(
        f"admin.create_topics([NewTopic('{PINNED}', replica_assignments={{0: [3, 4]}}, "
        "topic_configs={'min.insync.replicas': '2'})])"))

    with DisruptionWatch(kube, ns, set(first_pods)) as watch:
        # a spec change every node's server.properties carries: the whole cluster rolls
        kube.kubectl("-n", ns, "patch", "kc", NAME, "--type=merge", "-p",
                     json.dumps({"spec": {"config": {"log.retention.ms": "86400000"}}}))

        def roll() -> dict[str, Any] | None:
            operation = _resource(kube, ns).get("status", {}).get("operation") or {}
            return operation if operation.get("name") == "RollingRestart" else None

        def restarted_one() -> dict[str, Any] | None:
            operation = roll()
            return operation if operation and operation["roll"].get("done") else None

        operation = wait_until("the roll to restart its first node", restarted_one, timeout_s=600, every_s=2)
        assert operation["roll"]["done"][0] in (0, 1, 2), operation  # controllers first

        # the operator stops mid-roll; nobody acts while it is gone; a new one resumes from status
        scale_operator(kube, ns, 0)
        stopped_at = roll()
        time.sleep(5)
        assert roll() is not None
        scale_operator(kube, ns, 2)

        # the roll reaches broker 3 or 4 and waits on the pinned partition, saying why in status
        def blocked() -> dict[str, Any] | None:
            operation = roll()
            blockers = (operation or {}).get("blockedBy") or []
            return operation if any(b.get("kind") == "partition" and b.get("topic") == PINNED for b in blockers) else None

        operation = wait_until("the roll to be blocked by the pinned partition", blocked, timeout_s=900, every_s=2)
        blocker = next(b for b in operation["blockedBy"] if b["topic"] == PINNED)
        assert blocker["replicas"] == [3, 4] and sorted(blocker["isr"]) == [3, 4] and blocker["minIsr"] == 2, blocker
        assert set(operation["roll"]["done"]) >= {0, 1, 2}, operation  # every controller rolled before it
        time.sleep(10)
        still = blocked()
        assert still is not None, "the roll moved past a partition at min ISR"
        events = kube.json("-n", ns, "get", "events", "--field-selector",
                           f"involvedObject.uid={uid},reason=RollBlocked")["items"]
        assert any(PINNED in e["message"] and e["type"] == "Warning" for e in events), [e["message"] for e in events]

        # fixed: the topic goes; the roll proceeds and finishes
        _python_in(kube, ns, f"{NAME}-brokers-5", _admin(f"admin.delete_topics(['{PINNED}'])"))
        wait_until("the roll to finish and the cluster to be Ready", lambda: _ready(kube, ns), timeout_s=900, every_s=3)

    events = kube.json("-n", ns, "get", "events", "--field-selector",
                       f"involvedObject.uid={uid},reason=RollFinished")["items"]
    assert events, "no RollFinished event"
    rolled = _pods(kube, ns)
    for node_id, pod in rolled.items():
        assert pod["metadata"]["uid"] != first_pods[node_id]["metadata"]["uid"], f"node {node_id} was not restarted"
        assert pod["metadata"]["annotations"]["kraftwerk.io/revision"] != (
            first_pods[node_id]["metadata"]["annotations"]["kraftwerk.io/revision"])
    assert watch.worst[0] <= 1, f"the operator had nodes {watch.worst[1]} down at once"

    # controllers are Ready because raft says so: the leader, or a follower caught up with it
    for node_id in (0, 1, 2):
        answer = json.loads(_python_in(kube, ns, f"{NAME}-controllers-{node_id}", (
            "import urllib.request, urllib.error\n"
            "try:\n print(urllib.request.urlopen('http://127.0.0.1:9404/readyz').read().decode())\n"
            "except urllib.error.HTTPError as e:\n print(e.read().decode())\n")))
        pod = rolled[node_id]
        assert pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert answer["ready"] is True and answer["reason"] in ("leader", "caught up"), answer

    # KIP-853: a fourth controller is formatted --no-initial-controllers, joins as an observer, then a voter
    assert _voters(kube, ns) == [0, 1, 2]
    kube.kubectl("-n", ns, "patch", "kc", NAME, "--type=json", "-p",
                 json.dumps([{"op": "replace", "path": "/spec/nodePools/0/replicas", "value": 4}]))
    wait_until("node 6 to become a voter", lambda: _voters(kube, ns) == [0, 1, 2, 6], timeout_s=600, every_s=3)
    job = next(j for j in kube.json("-n", ns, "get", "jobs", "-l", f"kraftwerk.io/cluster={NAME},kraftwerk.io/node-id=6")["items"])
    assert "--no-initial-controllers" in job["spec"]["template"]["spec"]["containers"][0]["command"], job
    resource = wait_until("the four-controller cluster to be Ready", lambda: _ready(kube, ns), timeout_s=600, every_s=3)
    even = condition_of(resource, "EvenControllerCount")
    assert even is not None and even["status"] == "True", resource["status"]["conditions"]

    # and leaves again: RemoveRaftVoter, then its pod goes, and its claim with it (the controllers'
    # volume says deleteClaim: true: the user's standing decision, carried out by StopNode)
    kube.kubectl("-n", ns, "patch", "kc", NAME, "--type=json", "-p",
                 json.dumps([{"op": "replace", "path": "/spec/nodePools/0/replicas", "value": 3}]))
    wait_until("node 6 to leave the voters", lambda: _voters(kube, ns) == [0, 1, 2], timeout_s=600, every_s=3)
    wait_until("node 6's pod to go", lambda: 6 not in _pods(kube, ns), timeout_s=300, every_s=3)
    wait_until("the three-controller cluster to be Ready", lambda: _ready(kube, ns), timeout_s=600, every_s=3)
    wait_until("node 6's claim to be deleted (deleteClaim: true)",
          lambda: not [c for c in kube.json("-n", ns, "get", "pvc", "-l",
                                            f"kraftwerk.io/cluster={NAME},kraftwerk.io/node-id=6")["items"]
                       if not c["metadata"].get("deletionTimestamp")], timeout_s=120, every_s=2)
    kept = kube.json("-n", ns, "get", "pvc", "-l", f"kraftwerk.io/cluster={NAME},kraftwerk.io/node-id=0")["items"]
    assert kept, "a staying controller's claim was deleted"

    # nothing acknowledged was lost through all of it
    acked_before_stop = _acked(kube, ns)
    report = _stop_workload(kube, ns)
    assert report["acknowledged"] >= acked_before_stop > 100, report
    assert report["lostCount"] == 0 and report["read"] == report["acknowledged"], report
    print(f"workload: {report}; operator stopped at {stopped_at}")
