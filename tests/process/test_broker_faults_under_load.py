"""Two of the issue's faults under a live acks=all idempotent workload, on real processes: a kill -9
of the active controller, and a controlled shutdown (SIGTERM) of a partition leader.

The workload is kafka-python in a process of its own (`kafka_python_producer.py`: one record at a
time, idempotent, acks=all, retries), so a failed connection's socket dies with it. The active
controller is killed by the producer itself between two acknowledged writes; the broker is sent
SIGTERM once a hundred records of its partition are acknowledged. Every record must be
acknowledged (no error reaches the client), the controlled shutdown must exit 0 after its
leaderships moved, and every partition read back must hold exactly what was acknowledged: no lost,
duplicated or reordered record, no offset with two values. Both come back and the ISRs fill again.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import test_broker_cluster
from broker_processes import BrokerCluster
from quorum_processes import wait_for
from record_checks import CLEAN, anomalies
from test_broker_cluster import create_topic, read_back

pytestmark = [pytest.mark.process, pytest.mark.timeout(900)]

brokers = test_broker_cluster.brokers  # three controllers and three brokers, per test
PRODUCER = Path(__file__).with_name("kafka_python_producer.py")
CONTROLLERS = [1, 2, 3]


def _parse(lines: list[str]) -> tuple[list[tuple[int, int, bytes]], list[dict[str, object]]]:
    records = [json.loads(line) for line in lines if line.strip()]
    acked = [(r["partition"], r["offset"], f"v-{r['i']}".encode()) for r in records if "offset" in r]
    return acked, [r for r in records if "error" in r]


def test_kill_9_of_the_active_controller_and_a_controlled_shutdown_under_acks_all_lose_nothing(
        brokers: BrokerCluster) -> None:
    create_topic(brokers, "ctl", partitions=1, replication_factor=3)
    create_topic(brokers, "stop", partitions=1, replication_factor=3)

    # 1. kill -9 of the active controller, by the producer, before its 100th of 400 records.
    controller = brokers.wait_for_leader(CONTROLLERS, timeout_s=60)
    process = brokers.nodes[controller].process
    assert process is not None
    result = subprocess.run([sys.executable, str(PRODUCER), brokers.broker_bootstrap(), "ctl", "0", "400", "100",
                             str(process.pid)], capture_output=True, text=True, timeout=600, check=True)
    brokers.kill(controller)  # reaps it
    acked, failed = _parse(result.stdout.splitlines())
    assert failed == [] and len(acked) == 400, result.stderr[-2000:]
    successor = brokers.wait_for_leader([c for c in CONTROLLERS if c != controller], timeout_s=90)
    assert successor != controller
    assert anomalies(acked, read_back(brokers, "ctl", 1)) == CLEAN

    # 2. SIGTERM of the leader of `stop`-0 while 600 records are written to it.
    victim = next(n for n in sorted(brokers.brokers) if brokers.partitions(n)[("stop", 0)]["leader"] == n)
    writer = subprocess.Popen([sys.executable, str(PRODUCER), brokers.broker_bootstrap(), "stop", "0", "600"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None
        lines = [writer.stdout.readline() for _ in range(100)]  # a hundred answers, then the shutdown
        brokers.signal(victim, signal.SIGTERM)
        victim_process = brokers.nodes[victim].process
        assert victim_process is not None
        assert victim_process.wait(timeout=180) == 0
        rest, errors = writer.communicate(timeout=600)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.communicate()
    assert "is now SHUTTING_DOWN" in brokers.log(victim)
    stopped_acked, failed = _parse(lines + rest.splitlines())
    assert failed == [] and len(stopped_acked) == 600, errors[-2000:]
    survivors = sorted(brokers.brokers - {victim})
    assert anomalies(stopped_acked, read_back(brokers, "stop", 1, bootstrap=brokers.broker_bootstrap(survivors))) \
        == CLEAN

    # 3. Both come back: the ISRs fill again and the partitions read the same.
    brokers.start(controller)
    brokers.start(victim)
    brokers.wait_ready([victim])
    for topic, records in (("ctl", acked), ("stop", stopped_acked)):
        brokers.wait_isr(topic, 0, set(brokers.brokers), timeout_s=120)
        count = len(records)
        wait_for(lambda t=topic, n=count: all(brokers.partitions(b)[(t, 0)]["log_end_offset"] == n
                                              for b in brokers.brokers),
                 timeout_s=120, what=f"every replica of {topic}-0 to hold its {count} records")
        assert anomalies(records, read_back(brokers, topic, 1)) == CLEAN
