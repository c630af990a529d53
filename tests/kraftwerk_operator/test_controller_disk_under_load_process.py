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

import shutil
import signal
import time
from pathlib import Path

import pytest

from kraft_operator.model import APPROVE_ANNOTATION

from .live_cluster import LiveCluster, assert_in_order, ready, settled, three_and_three
from .test_disk_replacement_process import APPROVAL
from .test_quorum_change_process import current_voters
from .workload import read_partition

pytestmark = [pytest.mark.process, pytest.mark.timeout(1500)]

CLUSTER = three_and_three("diskswap")

TOPIC = "written"


def test_a_lost_controller_disk_is_replaced_with_approval_under_a_live_producer(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path, CLUSTER, name="diskswap")
    voter_sets: list[list[str]] = []
    with cluster.running("--demo-topic", ""):
        bootstrap = cluster.ready_with_topic(TOPIC)
        status = cluster.wait("a quorum leader", lambda: (s := cluster.status()) and s["quorum"]["leaderId"] >= 0 and s,
                              timeout_s=120)
        leader = status["quorum"]["leaderId"]
        lost = next(i for i in (1, 2, 0) if i != leader)
        old_id = next(v["directoryId"] for v in status["quorum"]["voters"] if v["id"] == lost)
        others = [i for i in range(6) if i != lost]
        pids = {i: cluster.pid(i) for i in others}
        with cluster.workload(bootstrap, TOPIC) as checker:
            cluster.more_acks("the producer's first acks")
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
            cluster.more_acks("acks while the loss waits for approval")
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
            cluster.more_acks("acks after the swap")
        stored = read_partition(bootstrap, TOPIC)
        new_id = next(v["directoryId"] for v in status["quorum"]["voters"] if v["id"] == lost)
        voters_line = current_voters(cluster.controllers([i for i in range(3) if i != lost]))
        still = {i: cluster.pid(i) for i in others}
    acked, missing, failed = cluster.outcome(stored)
    assert failed == [], failed[:5]
    assert acked > 60 and missing == [], f"{len(missing)} acknowledged record(s) not read back, first {missing[:5]}"
    assert still == pids  # no other controller and no broker was restarted
    assert cluster.events("RestartNode") == []
    assert new_id in voters_line and old_id not in voters_line, voters_line
    # Never fewer than two voters listed: two of three, or both of the two during the swap.
    assert all(len(v) >= 2 for v in voter_sets if v), voter_sets
    assert_in_order(cluster.log.read_text(), [
        ("FormatStorage", f"node {lost}: format .* as a controller that joins the quorum later"),
        ("StartNode", f"node {lost}"),
        ("RemoveVoter", f"node {lost}: RemoveRaftVoter for its lost disk \\(directory id {old_id}\\)"),
        ("AddVoter", f"node {lost}: AddRaftVoter \\(directory id {new_id}\\)")])
    print(f"acks {acked}, the checker: {checker.summary()}")
