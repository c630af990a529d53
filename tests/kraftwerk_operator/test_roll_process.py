"""A rolling restart on the local runtime: `kraftwerk up` as a user runs it, three engine
controllers and three engine brokers as real processes with a topic of RF 3 and min ISR 2; the
spec file is edited and the operator rolls every node, one at a time, each with SIGTERM, while a
kafka-python producer (acks=all, idempotence) writes to the topic; nothing it saw acknowledged is
lost.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kraft_engine.storage.java_properties import parse_properties

from .local_state import written_status
from .test_up_process import KRAFTWERK, REPO
from .workload import acked_count, lost_records, read_partition, terminate

pytestmark = [pytest.mark.process, pytest.mark.timeout(1200)]


CLUSTER = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: rolling}
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
    offsets.topic.replication.factor: "3"
    offsets.topic.num.partitions: "1"
"""


def _status(state: Path) -> dict | None:
    return written_status(state, "rolling")


def _ready(status: dict | None) -> bool:
    return status is not None and any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])


def _started(state: Path) -> dict[int, dict]:
    found = {}
    for path in (state / "default" / "rolling").glob("node-*/started.json"):
        found[int(path.parent.name.removeprefix("node-"))] = json.loads(path.read_text())
    return found


def _wait(what: str, check, *, timeout_s: float, up: subprocess.Popen, log: Path):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        assert up.poll() is None, f"kraftwerk up exited while waiting for {what}:\n{log.read_text()[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def start_up(spec: Path, state: Path, log: Path, *extra: str) -> subprocess.Popen:
    """`kraftwerk up -f spec` started in the background, its output in `log`."""
    with log.open("w") as out:
        return subprocess.Popen([*KRAFTWERK, "up", "-f", str(spec), "--state-dir", str(state), *extra], stdout=out,
                                stderr=subprocess.STDOUT, cwd=REPO)


@contextlib.contextmanager
def kraftwerk_up(spec: Path, state: Path, log: Path) -> Iterator[subprocess.Popen]:
    """`kraftwerk up -f spec` running in the background, stopped with SIGTERM (as Ctrl-C would)."""
    up = start_up(spec, state, log)
    try:
        yield up
    finally:
        terminate(up, timeout_s=120)


def test_a_config_change_rolls_every_node_once_controllers_first_with_sigterm(tmp_path: Path) -> None:
    from .live_cluster import LiveCluster  # it imports this module's `_wait` and `start_up`

    cluster = LiveCluster(tmp_path, CLUSTER, name="rolling")
    spec, state, log, acks = cluster.spec, cluster.state, cluster.log, cluster.acks
    with cluster.running() as running:
        up = running.up
        assert up is not None
        status = _wait("Ready with the demo topic",
                       lambda: (s := _status(state)) is not None and _ready(s) and (s.get("partitions") or {}).get("total", 0) >= 3
                       and s, timeout_s=600, up=up, log=log)
        before = _started(state)
        assert sorted(before) == [0, 1, 2, 3, 4, 5] and all(b["revision"] for b in before.values())
        assert status.get("operation") is None
        bootstrap = ",".join(
            parse_properties((state / "default" / "rolling" / f"node-{i}" / "server.properties").read_text())
            ["advertised.listeners"].split("//", 1)[1] for i in (3, 4, 5))
        # The producer, a consumer in a group and the lifecycle checker all through the roll.
        workload = contextlib.ExitStack()
        checker = workload.enter_context(cluster.workload(bootstrap, "demo"))
        _wait("the producer's first acks", lambda: acked_count(acks) >= 20, timeout_s=120, up=up, log=log)
        # `kubectl apply` of a changed config: every node's server.properties changes.
        changed = yaml.safe_load(spec.read_text())
        changed["spec"]["config"]["log.retention.hours"] = "100"
        spec.write_text(yaml.safe_dump(changed))
        seen: list[dict] = []

        def rolled() -> bool:
            current = _status(state)
            if current is not None:
                seen.append(current)
            after = _started(state)
            return (current is not None and current.get("operation") is None and _ready(current)
                    and all(after.get(i, {}).get("revision") not in (None, before[i]["revision"]) for i in before))

        with workload:
            _wait("the roll to finish", rolled, timeout_s=600, up=up, log=log)
            before_end = acked_count(acks)
            _wait("acks after the roll", lambda: acked_count(acks) >= before_end + 20, timeout_s=120, up=up, log=log)
        stored = read_partition(bootstrap, "demo")
    output = log.read_text()
    acked, lost = lost_records(acks, stored)
    assert acked > 40 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"
    after = _started(state)
    # Each node was restarted exactly once (a new process), by a RestartNode the operator announced.
    restarts = [int(line.split("node ", 1)[1].split(":", 1)[0]) for line in output.splitlines()
                if " RestartNode " in line and "controlled restart" in line]
    # A node whose process exits on its own during the roll is started again by the bootstrap with
    # the new config (no gate needed): it then needs no RestartNode. Every other node gets one.
    assert len(restarts) == len(set(restarts)) and len(restarts) >= 4, output[-4000:]
    controllers = [n for n in restarts if n in (0, 1, 2)]
    assert restarts[: len(controllers)] == controllers, restarts  # controllers before brokers
    assert all(after[i]["pid"] != before[i]["pid"] for i in before)
    # Controlled shutdowns: every node stopped on SIGTERM within its grace period, none was killed.
    for node_id in restarts:
        node_log = (state / "default" / "rolling" / f"node-{node_id}" / "server.log").read_text(errors="replace")
        assert "[kraftwerk local runtime] stopped by SIGTERM: exit code 0" in node_log, node_id
        assert "killed (SIGKILL)" not in node_log
    # Never two nodes out at once because of the roll: every status seen counts at most one short.
    for snapshot in seen:
        controllers_ready = int(snapshot["controllers"].split("/")[0])
        brokers_ready = int(snapshot["brokers"].split("/")[0])
        assert controllers_ready + brokers_ready >= 5, snapshot
    # The roll waited for each node's recovery as the cluster reported it.
    assert "to recover after its restart" in output
    assert "RollFinished" in output
    print(f"acks {acked}, restarts {restarts}, the checker: {checker.summary()}")
