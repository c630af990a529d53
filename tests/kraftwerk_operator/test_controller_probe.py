"""The readiness rule of an Apache Kafka controller's pod (`runtime.controller_probe`): Ready when
raft says the node leads, or the leader saw it caught up within the fetch timeout; never because
it merely answers. The process-level half runs Kafka 4.1 controllers from the jars (skipped without
them): every controller of a formed quorum is ready, and once two of three are killed the survivor,
whose port still answers, is not."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from kraft_engine.admin import QuorumDescription
from kraft_engine.admin.quorum_admin import ReplicaDescription
from kraft_engine.storage.java_properties import parse_properties
from kraft_operator.runtime.controller_probe import controller_address, readiness
from kraft_operator.runtime.local import kafka_classpath

NOW_MS = 1_800_000_000_000
FETCH_TIMEOUT_MS = 2000
REPO = Path(__file__).resolve().parents[2]


def _replica(node_id: int, *, caught_up_ms_ago: int | None) -> ReplicaDescription:
    caught_up = -1 if caught_up_ms_ago is None else NOW_MS - caught_up_ms_ago
    return ReplicaDescription(replica_id=node_id, directory_id=uuid.uuid4(), log_end_offset=10,
                              last_fetch_timestamp_ms=caught_up, last_caught_up_timestamp_ms=caught_up)


def _quorum(*, leader_id: int, voters: list[ReplicaDescription],
            observers: list[ReplicaDescription] | None = None) -> QuorumDescription:
    return QuorumDescription(leader_id=leader_id, leader_epoch=3, high_watermark=10, voters=tuple(voters),
                             observers=tuple(observers or ()), nodes={})


def _ready(quorum: QuorumDescription, node_id: int) -> bool:
    return readiness(quorum, node_id=node_id, now_ms=NOW_MS, fetch_timeout_ms=FETCH_TIMEOUT_MS)[0]


def test_the_leader_and_caught_up_followers_and_observers_are_ready() -> None:
    quorum = _quorum(leader_id=0, voters=[_replica(0, caught_up_ms_ago=0), _replica(1, caught_up_ms_ago=400),
                                          _replica(2, caught_up_ms_ago=FETCH_TIMEOUT_MS)],
                     observers=[_replica(6, caught_up_ms_ago=100)])
    assert all(_ready(quorum, node_id) for node_id in (0, 1, 2, 6))


def test_a_lagging_never_caught_up_or_unlisted_node_or_a_leaderless_quorum_is_not_ready() -> None:
    quorum = _quorum(leader_id=0, voters=[_replica(0, caught_up_ms_ago=0), _replica(1, caught_up_ms_ago=5000),
                                          _replica(2, caught_up_ms_ago=None)])
    assert not _ready(quorum, 1)
    assert "5000 ms ago" in readiness(quorum, node_id=1, now_ms=NOW_MS, fetch_timeout_ms=FETCH_TIMEOUT_MS)[1]
    assert not _ready(quorum, 2)
    assert not _ready(quorum, 7)
    assert not _ready(_quorum(leader_id=-1, voters=[_replica(1, caught_up_ms_ago=0)]), 1)


needs_kafka = pytest.mark.skipif(kafka_classpath() is None,
                                 reason="Kafka jars not cached (run scripts/fetch-kafka-jars) or no java on PATH")
KRAFTWERK = [sys.executable, "-c", "import sys; from kraft_operator.cli import main; sys.exit(main())"]
PROBE = [sys.executable, "-m", "kraft_operator.runtime.controller_probe", "--timeout-ms", "5000", "--config"]


def _probe(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PROBE, str(config)], capture_output=True, text=True, timeout=120, check=False)


def _wait(what: str, check: object, *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


@needs_kafka
@pytest.mark.process
@pytest.mark.kafka_jars
@pytest.mark.timeout(900)
def test_kafka_controllers_are_ready_from_raft_and_a_survivor_without_a_quorum_is_not(tmp_path: Path) -> None:
    spec = tmp_path / "trio.yaml"
    spec.write_text(yaml.safe_dump({
        "apiVersion": "kraftwerk.io/v1alpha1", "kind": "KRaftCluster", "metadata": {"name": "trio"},
        "spec": {"nodePools": [{"name": "controllers", "roles": ["controller"], "replicas": 3,
                                "implementation": "apache-kafka", "storage": {"volumes": [{"id": 0, "size": "1Gi"}]}}]},
    }))
    state = tmp_path / "state"
    up = subprocess.Popen([*KRAFTWERK, "up", "-f", str(spec), "--state-dir", str(state)], cwd=REPO,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    cluster = state / "default" / "trio"
    configs = [cluster / f"node-{i}" / "server.properties" for i in range(3)]
    try:
        def ready() -> bool:
            status_file = cluster / "status.yaml"
            if not status_file.exists():
                return False
            status = (yaml.safe_load(status_file.read_text()) or {}).get("status") or {}
            return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))

        _wait("the three Kafka controllers to be Ready", ready, timeout_s=420)
        # `kraftwerk up` goes (SIGKILL: it cannot stop or restart its nodes); the controllers run on
        answers = [_probe(c) for c in configs]
        assert all(a.returncode == 0 for a in answers), [a.stdout + a.stderr for a in answers]
        assert sum("leads epoch" in a.stdout for a in answers) == 1, [a.stdout for a in answers]
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()
        leader = next(i for i, a in enumerate(answers) if "leads epoch" in a.stdout)
        survivor = (leader + 1) % 3
        for node_id in range(3):
            if node_id != survivor:
                os.kill(int((cluster / f"node-{node_id}" / "pid").read_text()), signal.SIGKILL)

        # the survivor still listens, yet without a quorum raft cannot call it caught up
        _wait("the lone survivor's probe to fail", lambda: _probe(configs[survivor]).returncode == 1, timeout_s=120)
        answer = _probe(configs[survivor])
        assert answer.returncode == 1 and answer.stdout.startswith("not ready: "), answer.stdout + answer.stderr
        # a port check (the probe this replaces) would still pass: the listener accepts
        host, port = controller_address(parse_properties(configs[survivor].read_text()))
        with socket.create_connection((host, port), timeout=10):
            pass
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        for pid_file in cluster.glob("node-*/pid"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
