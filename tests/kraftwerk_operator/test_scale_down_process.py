"""Scale-down on the local runtime with engine nodes, under a live producer: `kraftwerk up` with
three controllers and four brokers, a topic whose partition 0 lives on (and is led by) broker 6,
a kafka-python producer (acks=all, idempotence) writing to it all the while; the spec drops to
three brokers. Broker 6 is drained by reassignment, stopped and unregistered, and every record
the producer saw acknowledged is read back afterwards. Then the spec drops from five controllers to
three on a controller-only cluster: RemoveRaftVoter, one at a time, the engine's own `kraft
metadata-quorum` reporting the voters that stay."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import yaml

from kraft_engine.storage.java_properties import parse_properties

from .local_state import written_status
from .test_quorum_change_process import current_voters
from .test_roll_process import _wait, kraftwerk_up, start_up
from .workload import acked_count, lost_records, producing, read_partition, terminate

pytestmark = [pytest.mark.process, pytest.mark.timeout(1500)]

CLUSTER = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: shrinking}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 3
      storage: {volumes: [{id: 0, size: 1Gi}]}
    - name: brokers
      roles: [broker]
      replicas: 4
      storage: {volumes: [{id: 0, size: 1Gi}]}
  lifecycle: {terminationGracePeriodSeconds: 60}
  config:
    min.insync.replicas: "2"
    offsets.topic.replication.factor: "3"
"""

FIVE_CONTROLLERS = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: shrinking}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 5
      storage: {volumes: [{id: 0, size: 1Gi}]}
  lifecycle: {terminationGracePeriodSeconds: 60}
"""

TOPIC = "drained"


def _status(state: Path) -> dict | None:
    return written_status(state, "shrinking")


def _settled(status: dict | None) -> bool:
    """Ready, nothing under way, and no partition short of replicas: a state that no longer moves."""
    return (status is not None and status.get("operation") is None
            and any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])
            and (status.get("partitions") or {}).get("underReplicated", 1) == 0)


def _bootstrap(state: Path, node_ids: list[int]) -> str:
    addresses = []
    for node_id in node_ids:
        config = parse_properties((state / "default" / "shrinking" / f"node-{node_id}" / "server.properties").read_text())
        addresses.append(config["advertised.listeners"].split("//", 1)[1])
    return ",".join(addresses)


def _layout(bootstrap: str) -> list[int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            partition = admin.describe_topics([TOPIC])[0]["partitions"][0]
            return sorted(partition["replica_nodes"])
        finally:
            admin.close()


def _create_topic(bootstrap: str) -> None:
    """Partition 0 on brokers 6, 3, 4 (6 first: its preferred leader), min ISR 2."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            admin.create_topics([NewTopic(TOPIC, replica_assignments={0: [6, 3, 4]},
                                          topic_configs={"min.insync.replicas": "2"})])
        finally:
            admin.close()


def ready_with_the_topic_on_broker_6(state: Path, *, up: subprocess.Popen, log: Path) -> str:
    """Wait until the four brokers are Ready, create the topic on brokers 6, 3, 4; its bootstrap."""
    _wait("Ready with four brokers", lambda: _settled(s := _status(state)) and s["brokers"] == "4/4",
          timeout_s=600, up=up, log=log)
    bootstrap = _bootstrap(state, [3, 4, 5])
    _create_topic(bootstrap)
    _wait("the topic on broker 6", lambda: _layout(bootstrap) == [3, 4, 6], timeout_s=120, up=up, log=log)
    return bootstrap


def test_a_broker_is_drained_stopped_and_unregistered_under_a_live_producer_losing_nothing(tmp_path: Path) -> None:
    spec = tmp_path / "shrinking.yaml"
    spec.write_text(textwrap.dedent(CLUSTER))
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    acks = tmp_path / "acks.jsonl"
    with kraftwerk_up(spec, state, log) as up:
        bootstrap = ready_with_the_topic_on_broker_6(state, up=up, log=log)
        with producing(bootstrap, TOPIC, acks):
            _wait("the producer's first acks", lambda: acked_count(acks) >= 20, timeout_s=120, up=up, log=log)
            shrunk = yaml.safe_load(spec.read_text())
            shrunk["spec"]["nodePools"][1]["replicas"] = 3
            spec.write_text(yaml.safe_dump(shrunk))

            def drained() -> dict | None:
                status = _status(state)
                if not _settled(status) or sorted(n["id"] for n in status["nodes"]) != [0, 1, 2, 3, 4, 5]:
                    return None
                return status

            status = _wait("broker 6 removed", drained, timeout_s=900, up=up, log=log)
            before = acked_count(acks)
            _wait("acks after the removal", lambda: acked_count(acks) >= before + 20, timeout_s=120, up=up, log=log)
        layout = _layout(bootstrap)
        stored = read_partition(bootstrap, TOPIC)
    output = log.read_text()
    assert status["brokers"] == "3/3", status
    assert 6 not in layout and len(layout) == 3, layout
    order = []
    for step in ("ReassignPartitions", "StopNode", "UnregisterBroker"):
        found = re.search(rf"^Normal\s+{step}\s+(?:node|broker) 6: ", output, re.M)
        assert found is not None, (step, output[-4000:])
        order.append(found.start())
    assert order == sorted(order), output[-4000:]
    node_log = (state / "default" / "shrinking" / "node-6" / "server.log").read_text()
    assert "stopped by SIGTERM" in node_log and "removed from the cluster" in node_log, node_log[-2000:]
    acked, lost = lost_records(acks, stored)
    assert acked > 40 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"


def test_controllers_five_to_three_leave_the_voter_set_one_at_a_time(tmp_path: Path) -> None:
    spec = tmp_path / "shrinking.yaml"
    spec.write_text(textwrap.dedent(FIVE_CONTROLLERS))
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    with kraftwerk_up(spec, state, log) as up:
        _wait("Ready with five voters", lambda: _settled(s := _status(state)) and len(s["quorum"]["voters"]) == 5,
              timeout_s=600, up=up, log=log)
        shrunk = yaml.safe_load(spec.read_text())
        shrunk["spec"]["nodePools"][0]["replicas"] = 3
        spec.write_text(yaml.safe_dump(shrunk))

        def three_voters() -> dict | None:
            status = _status(state)
            if not _settled(status) or sorted(v["id"] for v in status["quorum"]["voters"]) != [0, 1, 2]:
                return None
            return status if sorted(n["id"] for n in status["nodes"]) == [0, 1, 2] else None

        status = _wait("three voters", three_voters, timeout_s=900, up=up, log=log)
        bootstrap = _bootstrap(state, [0])
        voters_line = current_voters(bootstrap)
    output = log.read_text()
    assert all(f'"id": {i}' in voters_line for i in range(3)) and '"id": 3' not in voters_line \
        and '"id": 4' not in voters_line, voters_line
    removals = [int(line.split("node ", 1)[1].split(":", 1)[0]) for line in output.splitlines() if " RemoveVoter " in line]
    assert sorted(set(removals)) == [3, 4], output[-4000:]
    even = [line for line in output.splitlines() if line.startswith("Warning") and "EvenControllerCount" in line]
    assert even == [], even  # 5 and 3 are odd: no warning
    for node_id in (3, 4):
        node_log = (state / "default" / "shrinking" / f"node-{node_id}" / "server.log").read_text()
        assert "removed from the cluster" in node_log
    assert status["controllers"] == "3/3"


def test_kraftwerk_up_killed_at_every_step_of_a_broker_drain_resumes_it_and_loses_nothing(tmp_path: Path) -> None:
    """The operator process itself (`kraftwerk up`) is SIGKILLed each time status shows a new
    scale-down step, and started again: the nodes keep running (each in its own session), the new
    operator adopts them and resumes from status.yaml. The drain still finishes, no running node is
    restarted by a resumed operator, and every acknowledged record is read back."""
    spec = tmp_path / "shrinking.yaml"
    spec.write_text(textwrap.dedent(CLUSTER))
    state = tmp_path / "state"
    acks = tmp_path / "acks.jsonl"
    logs: list[Path] = []

    def start() -> subprocess.Popen:
        logs.append(tmp_path / f"up-{len(logs)}.log")
        return start_up(spec, state, logs[-1], "--demo-topic", "")

    workload = contextlib.ExitStack()
    up = start()
    try:
        bootstrap = ready_with_the_topic_on_broker_6(state, up=up, log=logs[-1])
        pids = {i: _pid(state, i) for i in range(7)}
        workload.enter_context(producing(bootstrap, TOPIC, acks))
        shrunk = yaml.safe_load(spec.read_text())
        shrunk["spec"]["nodePools"][1]["replicas"] = 3
        spec.write_text(yaml.safe_dump(shrunk))
        killed_at: list[str] = []
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            status = _status(state)
            operation = (status or {}).get("operation") or {}
            step = f"{operation.get('name')}/{operation.get('step')}" if operation else ""
            if operation.get("name") == "ScaleDown" and step not in killed_at:
                up.kill()  # SIGKILL: no status write, no node stopped
                up.wait()
                killed_at.append(step)
                up = start()
            elif _settled(status) and sorted(n["id"] for n in status["nodes"]) == [0, 1, 2, 3, 4, 5]:
                break
            assert up.poll() is None, logs[-1].read_text()[-3000:]
            time.sleep(0.2)
        else:
            raise AssertionError(f"the drain did not finish; killed at {killed_at}:\n{logs[-1].read_text()[-3000:]}")
        before = acked_count(acks)
        _wait("acks after the removal", lambda: acked_count(acks) >= before + 20, timeout_s=120, up=up, log=logs[-1])
        workload.close()  # the producer stops
        layout = _layout(bootstrap)
        stored = read_partition(bootstrap, TOPIC)
        # No node the spec keeps was restarted by a resumed operator: the same processes run.
        assert {i: _pid(state, i) for i in range(6)} == {i: pids[i] for i in range(6)}
    finally:
        workload.close()
        terminate(up, timeout_s=120)
        _stop_nodes(state)
    assert len(killed_at) >= 3 and "ScaleDown/drain-planned" in killed_at, killed_at
    assert 6 not in layout and len(layout) == 3, layout
    acked, lost = lost_records(acks, stored)
    assert acked > 40 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"


def _pid(state: Path, node_id: int) -> int | None:
    path = state / "default" / "shrinking" / f"node-{node_id}" / "pid"
    return int(path.read_text()) if path.exists() else None


def _stop_nodes(state: Path) -> None:
    """Stop every node process left (adopted processes are not stopped by `kraftwerk up`): brokers
    first while the controllers still answer their controlled shutdown, then the controllers;
    SIGKILL for any still running after 60 s (a broker whose controllers are gone never finishes
    its controlled shutdown)."""
    def alive(pid_file: Path) -> int | None:
        pid = int(pid_file.read_text())
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        return pid if str(pid_file.parent / "server.properties").encode() in cmdline else None

    pid_files = sorted(state.glob("default/shrinking/node-*/pid"))
    brokers = [f for f in pid_files if "process.roles=broker" in (f.parent / "server.properties").read_text()]
    for group in (brokers, [f for f in pid_files if f not in brokers]):
        for pid_file in group:
            if (pid := alive(pid_file)) is not None:
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(alive(f) is not None for f in group):
            time.sleep(0.2)
        for pid_file in group:
            if (pid := alive(pid_file)) is not None:
                os.kill(pid, signal.SIGKILL)
