"""A roll with a dead broker under a live producer, on engine processes: `kraftwerk up` runs three
controllers and three brokers; a kafka-python producer (acks=all, idempotence) in its own process
writes `kept-0` (replicas 3, 4, 5, min.insync.replicas 2) all along. Broker 5 is SIGKILLed and
cannot come back: every port it binds is held, so each start the operator makes fails at once (a
crash-looping pod). The controllers fence it; `kept-0` runs on ISR [3, 4], at min ISR. Then a
config change asks for a roll of every node.

What a demanding user expects: the dead broker is no reason to stop everything (the controllers
roll: their gate asks the quorum, which is whole); no live broker restarts while that takes
`kept-0` below min ISR (nor while it is under-replicated); status.operation.blockedBy names
`kept-0` with its replicas, ISR and min ISR and says both rules, a RollBlocked event says the same,
and once the roll has waited longer than `stuckRollAfterSeconds` the stuck-roll runbook opens.
The producer keeps being acknowledged throughout. Once broker 5 can start again it comes back with
the new config, rejoins the ISR, and the roll restarts brokers 3 and 4 and finishes; the runbook
closes. Every acknowledged record is read back by offset."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .live_cluster import LiveCluster, settled, three_and_three
from .workload import acked_count, producing, read_partition

pytestmark = [pytest.mark.process, pytest.mark.timeout(1500)]

CLUSTER = three_and_three("deadbroker", lifecycle={"stuckRollAfterSeconds": 20})

TOPIC = "kept"


def test_a_roll_with_a_dead_broker_restarts_no_live_broker_below_min_isr_and_says_why(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path, CLUSTER, name="deadbroker")
    with cluster.running("--demo-topic", ""):
        bootstrap = cluster.ready_with_topic(TOPIC)
        pids = {i: cluster.pid(i) for i in range(6)}
        with producing(bootstrap, TOPIC, cluster.acks):
            cluster.more_acks("the producer's first acks")
            with cluster.kept_down([5]):
                cluster.wait("broker 5 fenced, out of kept-0's ISR",
                             lambda: cluster.partition(TOPIC, brokers=(3, 4))["isr"] == [3, 4], timeout_s=120)
                cluster.edit(lambda doc: doc["spec"]["config"].update({"log.retention.hours": "100"}))

                def blocked() -> dict | None:
                    status = cluster.status()
                    operation = (status or {}).get("operation") or {}
                    if operation.get("name") != "RollingRestart" or operation.get("step") != "blocked":
                        return None
                    if not {0, 1, 2} <= set(operation["roll"].get("done", [])):
                        return None
                    held = [b for b in operation.get("blockedBy", []) if b.get("topic") == TOPIC
                            and "without broker 3" in b["message"]]
                    stuck = [r for r in status.get("runbooks", []) if r["name"] == "stuck-roll"]
                    return {"blocker": held[0], "stuck": stuck[0], "status": status} if held and stuck else None

                found = cluster.wait("the controllers rolled, the brokers held on kept-0, the stuck-roll runbook",
                                     blocked, timeout_s=900)
                blocker = found["blocker"]
                assert blocker["replicas"] == [3, 4, 5] and blocker["isr"] == [3, 4] and blocker["minIsr"] == 2
                assert "is under-replicated (replica(s) [5] out of its ISR" in blocker["message"], blocker
                assert "would drop below min.insync.replicas=2 without broker 3" in blocker["message"], blocker
                assert any(f"{TOPIC}-0" in line for line in found["stuck"]["evidence"]), found["stuck"]
                # It waits, re-checks, and restarts no live broker while the producer is acknowledged.
                before = acked_count(cluster.acks)
                time.sleep(10)
                restarted = {int(e.split("node ", 1)[1].split(":", 1)[0]) for e in cluster.events("RestartNode")}
                assert restarted <= {0, 1, 2}, restarted
                assert acked_count(cluster.acks) > before
                assert any(f"{TOPIC}-0" in e and "without broker 3" in e for e in cluster.events("RollBlocked"))

            def rolled() -> bool:
                status = cluster.status()
                return settled(status) and all(cluster.pid(i) != pids[i] for i in range(6))

            cluster.wait("broker 5 back, the roll finished", rolled, timeout_s=900)
            cluster.more_acks("acks after the roll")
        stored = read_partition(bootstrap, TOPIC)
    acked, lost, failed = cluster.outcome(stored)
    assert failed == [], failed[:5]
    assert acked > 60 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"
    restarts = [int(e.split("node ", 1)[1].split(":", 1)[0]) for e in cluster.events("RestartNode")]
    # Each live node once, controllers first; broker 5 came back by its own (failed, then good) starts,
    # or by one RestartNode when the operator saw it running between two of its failed starts (a node
    # already down is restarted first, and the roll does not wait for its recovery).
    live = [r for r in restarts if r != 5]
    assert sorted(live) == [0, 1, 2, 3, 4] and sorted(live[:3]) == [0, 1, 2] and restarts.count(5) <= 1, restarts
    assert [e for e in cluster.events("RunbookClosed") if "stuck-roll" in e], cluster.log.read_text()[-3000:]
