"""Controller disk replacement under a live producer: `kraftwerk up` runs three controller-only
engine nodes and three engine brokers; a kafka-python producer (acks=all, idempotence) in its own
process writes a partition on the brokers all along. A follower controller loses its metadata
volume (the directory deleted, the process SIGKILLed: a disk lost with its node). The operator
opens the controller-disk-loss runbook and waits for the approval annotation; approved, it formats
the new volume `--no-initial-controllers`, starts the node as an observer, and once it has caught
up swaps the voter (RemoveRaftVoter of the old directory id, then AddRaftVoter of the new one).

What the producer's user must see: no write fails, every acknowledged record is read back by
offset, no broker restarts, and the voter set never drops below two live voters."""

from __future__ import annotations

import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from kraft_operator.model import APPROVE_ANNOTATION

from .live_cluster import LiveCluster, create_topic, describe_partition, ready, settled
from .test_disk_replacement_process import APPROVAL
from .test_quorum_change_process import current_voters
from .workload import acked_count, lost_records, producing, read_partition

pytestmark = [pytest.mark.process, pytest.mark.timeout(1500)]

CLUSTER = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: diskswap}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 3
      storage: {volumes: [{id: 0, size: 1Gi}]}
    - name: brokers
      roles: [broker]
      replicas: 3
      storage: {volumes: [{id: 0, size: 1Gi}]}
  lifecycle: {terminationGracePeriodSeconds: 60}
  config:
    min.insync.replicas: "2"
"""

TOPIC = "written"


def test_a_lost_controller_disk_is_replaced_with_approval_under_a_live_producer(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path, CLUSTER, name="diskswap")
    voter_sets: list[list[str]] = []
    with cluster.running("--demo-topic", ""):
        status = cluster.wait("Ready with three brokers", lambda: settled(s := cluster.status()) and s["brokers"] == "3/3"
                              and s, timeout_s=600)
        bootstrap = cluster.bootstrap([3, 4, 5])
        create_topic(bootstrap, TOPIC, assignments={0: [3, 4, 5]}, min_isr=2)
        cluster.wait("the topic in sync", lambda: describe_partition(bootstrap, TOPIC)["isr"] == [3, 4, 5], timeout_s=120)
        status = cluster.wait("a quorum leader", lambda: (s := cluster.status()) and s["quorum"]["leaderId"] >= 0 and s,
                              timeout_s=120)
        leader = status["quorum"]["leaderId"]
        lost = next(i for i in (1, 2, 0) if i != leader)
        old_id = next(v["directoryId"] for v in status["quorum"]["voters"] if v["id"] == lost)
        others = [i for i in range(6) if i != lost]
        pids = {i: cluster.pid(i) for i in others}
        with producing(bootstrap, TOPIC, cluster.acks):
            cluster.wait("the producer's first acks", lambda: acked_count(cluster.acks) >= 20, timeout_s=120)
            shutil.rmtree(cluster.node_dir(lost) / "data-0")  # the disk is gone ...
            cluster.signal(lost, signal.SIGKILL)  # ... with its node

            def held() -> dict | None:
                status = cluster.status()
                operation = (status or {}).get("operation") or {}
                if operation.get("name") != "ControllerDiskReplacement" or operation.get("step") != "await-approval":
                    return None
                return status if any(r["name"] == "controller-disk-loss" for r in status.get("runbooks", [])) else None

            status = cluster.wait("the disk loss recorded, waiting for approval", held, timeout_s=300)
            assert f'{APPROVE_ANNOTATION}="{APPROVAL}"' in status["operation"]["blockedBy"][0]["message"]
            waiting = acked_count(cluster.acks)
            cluster.wait("acks while the loss waits for approval",
                         lambda: acked_count(cluster.acks) >= waiting + 20, timeout_s=120)
            time.sleep(3)
            assert not (cluster.node_dir(lost) / "data-0" / "meta.properties").exists()  # nothing formatted unapproved
            cluster.edit(lambda doc: doc["metadata"].setdefault("annotations", {}).update({APPROVE_ANNOTATION: APPROVAL}))

            def swapped() -> dict | None:
                status = cluster.status()
                if status is None:
                    return None
                voters = (status.get("quorum") or {}).get("voters", [])
                voter_sets.append([f"{v['id']}:{v['directoryId']}" for v in voters])
                if not settled(status) or not ready(status):
                    return None
                now = {v["id"]: v["directoryId"] for v in voters}
                return status if sorted(now) == [0, 1, 2] and now[lost] != old_id else None

            status = cluster.wait("the voter swapped to the new disk", swapped, timeout_s=900)
            before_end = acked_count(cluster.acks)
            cluster.wait("acks after the swap", lambda: acked_count(cluster.acks) >= before_end + 20, timeout_s=120)
        stored = read_partition(bootstrap, TOPIC)
        new_id = next(v["directoryId"] for v in status["quorum"]["voters"] if v["id"] == lost)
        voters_line = current_voters(cluster.controllers([i for i in range(3) if i != lost]))
        still = {i: cluster.pid(i) for i in others}
    acked, missing = lost_records(cluster.acks, stored)
    failed = [line for line in cluster.acks.read_text().splitlines() if '"error"' in line]
    assert failed == [], failed[:5]
    assert acked > 60 and missing == [], f"{len(missing)} acknowledged record(s) not read back, first {missing[:5]}"
    assert still == pids  # no other controller and no broker was restarted
    assert cluster.events("RestartNode") == []
    assert new_id in voters_line and old_id not in voters_line, voters_line
    # Never fewer than two voters listed: two of three, or both of the two during the swap.
    assert all(len(v) >= 2 for v in voter_sets if v), voter_sets
    output, at = cluster.log.read_text(), 0
    for step, text in (("FormatStorage", f"node {lost}: format .* as a controller that joins the quorum later"),
                       ("StartNode", f"node {lost}"),
                       ("RemoveVoter", f"node {lost}: RemoveRaftVoter for its lost disk \\(directory id {old_id}\\)"),
                       ("AddVoter", f"node {lost}: AddRaftVoter \\(directory id {new_id}\\)")):
        found = re.compile(rf"^\w+\s+{step}\s+.*{text}", re.M).search(output, at)
        assert found is not None, (step, output[at:][-4000:])
        at = found.end()
