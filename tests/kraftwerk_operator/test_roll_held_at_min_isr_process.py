"""A roll held at min ISR under a live producer, on engine processes: `kraftwerk up` runs three
controllers and three brokers; a kafka-python producer (acks=all, idempotence) in its own process
writes `held-0` (replicas 3, 4, 5, min.insync.replicas 2) all along. Broker 5 stalls (SIGSTOP: a
follower that stops fetching, still registered: the controllers' session outlasts the stall), so
the leader takes it out of the ISR after `replica.lag.time.max.ms`: ISR [3, 4], at min ISR. A roll
of the three brokers is then asked for (each broker's pod annotation).

What a user expects: the roll restarts no broker while that would take `held-0` below min ISR or
while it is under-replicated; status.operation.blockedBy names the partition with its replicas,
ISR and min ISR and the rule it would break, and a RollBlocked event says the same; the producer
keeps being acknowledged (ISR 2 >= min ISR 2). Once broker 5 fetches again (SIGCONT) and is back in
the ISR, the roll proceeds and restarts the three brokers one at a time; every acknowledged
record is read back by offset."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from kraft_operator.runtime.local import MANUAL_ROLL_FILE

from .live_cluster import LiveCluster, settled, three_and_three
from .workload import acked_count, read_partition

pytestmark = [pytest.mark.process, pytest.mark.timeout(1500)]

# The leader's lag check takes a stalled follower out of the ISR after 5 s, long before the
# controllers would fence it: the stall is a slow follower, not a dead one.
CLUSTER = three_and_three("held", config={"replica.lag.time.max.ms": "5000", "broker.session.timeout.ms": "300000"})

TOPIC = "held"


def test_a_roll_waits_at_min_isr_says_why_and_proceeds_once_the_isr_is_back(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path, CLUSTER, name="held")
    with cluster.running("--demo-topic", ""):
        bootstrap = cluster.ready_with_topic(TOPIC)
        pids = {i: cluster.pid(i) for i in range(6)}
        with cluster.workload(bootstrap, TOPIC) as checker:
            cluster.more_acks("the producer's first acks")
            cluster.signal(5, signal.SIGSTOP)
            try:
                cluster.wait("broker 5 out of held-0's ISR", lambda: cluster.partition(TOPIC, brokers=(3, 4))["isr"] == [3, 4],
                             timeout_s=120)
                for broker in (3, 4, 5):
                    (cluster.node_dir(broker) / MANUAL_ROLL_FILE).touch()  # the pod annotation

                def blocked() -> dict | None:
                    status = cluster.status()
                    operation = (status or {}).get("operation") or {}
                    if operation.get("name") != "RollingRestart" or operation.get("step") != "blocked":
                        return None
                    held = [b for b in operation.get("blockedBy", []) if b.get("topic") == TOPIC
                            and "would drop below min.insync.replicas=2 without broker 3" in b["message"]]
                    return held[0] if held else None

                blocker = cluster.wait("the roll blocked on held-0", blocked, timeout_s=300)
                assert blocker["kind"] == "partition" and blocker["partition"] == 0
                assert blocker["replicas"] == [3, 4, 5] and blocker["isr"] == [3, 4] and blocker["minIsr"] == 2
                assert "is under-replicated (replica(s) [5] out of its ISR" in blocker["message"], blocker
                # The roll waits and re-checks while the producer keeps being acknowledged.
                before = acked_count(cluster.acks)
                hold_until = time.monotonic() + 15
                while time.monotonic() < hold_until:
                    status = cluster.status()
                    assert status is None or (status.get("operation") or {}).get("name") == "RollingRestart", status
                    time.sleep(1)
                assert cluster.events("RestartNode") == []
                assert acked_count(cluster.acks) > before
                assert any(f"{TOPIC}-0" in e and "would drop below min.insync.replicas=2" in e
                           for e in cluster.events("RollBlocked"))
            finally:
                cluster.signal(5, signal.SIGCONT)

            def rolled() -> bool:
                return (settled(cluster.status()) and all(cluster.pid(i) != pids[i] for i in (3, 4, 5))
                        and not any((cluster.node_dir(i) / MANUAL_ROLL_FILE).exists() for i in (3, 4, 5)))

            cluster.wait("the roll to finish once broker 5 is back in the ISR", rolled, timeout_s=900)
            cluster.more_acks("acks after the roll")
        stored = read_partition(bootstrap, TOPIC)
        still = {i: cluster.pid(i) for i in range(3)}
    acked, lost, failed = cluster.outcome(stored)
    assert failed == [], failed[:5]
    assert acked > 60 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"
    restarts = [int(e.split("node ", 1)[1].split(":", 1)[0]) for e in cluster.events("RestartNode")]
    assert sorted(restarts) == [3, 4, 5], restarts  # each broker once
    assert still == {i: pids[i] for i in range(3)}  # the controllers were not part of it
    assert cluster.events("RollFinished")
    print(f"acks {acked}, the checker: {checker.summary()}")
