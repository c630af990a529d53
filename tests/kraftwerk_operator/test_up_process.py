"""`kraftwerk up` as a user runs it: a real process, real `kraft storage format` runs and `kraft server
start` processes (or Apache Kafka 4.1 from the jars), real sockets, real files; status read back
from the state directory and from the cluster itself with the engine's own tools.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from kraft_engine.storage.java_properties import parse_properties
from kraft_operator.runtime.local import kafka_classpath

# Bounds, not assertions: on a loaded 2-core machine a JVM or a quorum can take minutes to come up.
pytestmark = [pytest.mark.process, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
KRAFTWERK = [sys.executable, "-c", "import sys; from kraft_operator.cli import main; sys.exit(main())"]
needs_kafka = pytest.mark.skipif(
    kafka_classpath() is None, reason="Kafka jars not cached (run scripts/fetch-kafka-jars) or no java on PATH"
)

CONTROLLERS = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: trio}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 3
      storage: {volumes: [{id: 0, size: 1Gi}]}
"""


def _up(spec: Path, state: Path, *extra: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [*KRAFTWERK, "up", "-f", str(spec), "--state-dir", str(state), "--until-ready", *extra],
            capture_output=True, text=True, timeout=timeout_s, check=False, cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        # `kraftwerk up` was killed before it could stop its nodes (each in a session of its own)
        _kill_nodes(state)
        raise


def _kill_nodes(state: Path) -> None:
    for pid_file in state.glob("*/*/node-*/pid"):
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline")
        if cmdline.exists() and str(pid_file.parent / "server.properties").encode() in cmdline.read_bytes():
            os.kill(pid, signal.SIGKILL)


def _status(state: Path, name: str) -> dict:
    return yaml.safe_load((state / "default" / name / "status.yaml").read_text())["status"]


def _conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status["conditions"]}


def _no_node_left(state: Path, name: str) -> None:
    for pid_file in (state / "default" / name).glob("node-*/pid"):
        pid = int(pid_file.read_text())
        assert not Path(f"/proc/{pid}").exists() or b"server.properties" not in Path(f"/proc/{pid}/cmdline").read_bytes()


def test_up_takes_three_engine_controllers_from_nothing_to_ready_and_a_second_run_resumes(tmp_path: Path) -> None:
    spec = tmp_path / "trio.yaml"
    spec.write_text(textwrap.dedent(CONTROLLERS))
    state = tmp_path / "state"
    first = _up(spec, state)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Ready after" in first.stdout
    assert "$ kubectl describe kc trio" in first.stdout
    status = _status(state, "trio")
    conditions = _conditions(status)
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Degraded"]["status"] == "False"
    assert status["controllers"] == "3/3"
    assert status["quorum"]["leaderId"] in (0, 1, 2)
    assert sorted(v["id"] for v in status["quorum"]["voters"]) == [0, 1, 2]
    assert status["metadataVersion"]["finalized"] == status["metadataVersion"]["target"]
    directory_ids = {n["id"]: n["directories"][0]["directoryId"] for n in status["nodes"]}
    # The voters are the directories the format wrote, as `kraft storage info` reads them back.
    assert {v["id"]: v["directoryId"] for v in status["quorum"]["voters"]} == directory_ids
    for node_id in range(3):
        info = subprocess.run(
            [sys.executable, "-c", "import sys; from kraft_engine.cli.main import main; sys.exit(main())",
             "storage", "info", "-c", str(state / "default" / "trio" / f"node-{node_id}" / "server.properties")],
            capture_output=True, text=True, check=False, timeout=60,
        )
        assert f"cluster.id={status['clusterId']}, directory.id={directory_ids[node_id]}, node.id={node_id}" \
            in info.stdout, info.stdout
    _no_node_left(state, "trio")

    # A second `up` resumes from status.yaml: same cluster, nothing formatted again.
    second = _up(spec, state)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "FormatStorage" not in second.stdout and "ClusterIdAssigned" not in second.stdout
    again = _status(state, "trio")
    assert again["clusterId"] == status["clusterId"]
    assert {n["id"]: n["directories"][0]["directoryId"] for n in again["nodes"]} == directory_ids
    assert _conditions(again)["Ready"]["status"] == "True"


def test_a_bad_spec_is_refused_with_degraded_naming_the_field_and_nothing_is_created(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(textwrap.dedent(CONTROLLERS) + "  config:\n    controller.quorum.election.timeout.ms: soon\n")
    state = tmp_path / "state"
    planned = subprocess.run([*KRAFTWERK, "plan", "-f", str(spec), "--state-dir", str(state)],
                             capture_output=True, text=True, timeout=120, check=False)
    assert planned.returncode == 1
    assert "Degraded=True (InvalidSpec): spec.config[controller.quorum.election.timeout.ms]: Invalid value soon" \
        in planned.stdout
    up = _up(spec, state, "--duration-s", "3")
    assert up.returncode == 1
    assert "InvalidSpec" in up.stdout and "spec.config[controller.quorum.election.timeout.ms]" in up.stdout
    status = _status(state, "trio")
    assert _conditions(status)["Degraded"]["reason"] == "InvalidSpec"
    assert "clusterId" not in status
    assert not list((state / "default" / "trio").glob("node-*"))

    # A schema error (what the API server would refuse) names the field too.
    schema = tmp_path / "schema.yaml"
    schema.write_text(textwrap.dedent(CONTROLLERS).replace("replicas: 3", "replicas: -1"))
    refused = _up(schema, state)
    assert refused.returncode == 1
    assert "spec.nodePools[0].replicas: Input should be greater than or equal to 0" in refused.stderr


def test_up_restarts_a_killed_controller(tmp_path: Path) -> None:
    spec = tmp_path / "trio.yaml"
    spec.write_text(textwrap.dedent(CONTROLLERS))
    state = tmp_path / "state"
    process = subprocess.Popen(
        [*KRAFTWERK, "up", "-f", str(spec), "--state-dir", str(state)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 180
        status_file = state / "default" / "trio" / "status.yaml"
        while time.monotonic() < deadline:
            if status_file.exists() and _conditions(_status(state, "trio")).get("Ready", {}).get("status") == "True":
                break
            time.sleep(0.5)
        else:
            pytest.fail("not Ready within 180 s")
        pid_file = state / "default" / "trio" / "node-1" / "pid"
        victim = int(pid_file.read_text())
        os.kill(victim, signal.SIGKILL)
        while time.monotonic() < deadline + 60:
            new_pid = int(pid_file.read_text())
            if new_pid != victim and _conditions(_status(state, "trio"))["Ready"]["status"] == "True":
                break
            time.sleep(0.5)
        else:
            pytest.fail("node 1 was not restarted to Ready")
    finally:
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=120)
    assert "node 1 exited" in out
    formats = [line for line in out.splitlines() if re.match(r"^Normal\s+FormatStorage\s", line)]
    assert len(formats) == 3  # formatted once each, never again
    _no_node_left(state, "trio")


def test_quickstart_three_engine_controllers_and_three_engine_brokers_reach_ready_and_describe_the_demo_topic(
    tmp_path: Path,
) -> None:
    """The README's main job: every node the engine, no jars; the demo topic shown by `kraft topics`."""
    state = tmp_path / "state"
    result = _up(REPO / "examples" / "quickstart.yaml", state, timeout_s=280)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    status = _status(state, "quickstart")
    assert _conditions(status)["Ready"]["status"] == "True"
    assert status["controllers"] == "3/3" and status["brokers"] == "3/3"
    brokers = [n for n in status["nodes"] if n["pool"] == "brokers"]
    assert [n["id"] for n in brokers] == [3, 4, 5]
    assert all(n["registered"] and n["fenced"] is False and n["version"].startswith("kraftwerk ") for n in brokers)
    assert sorted(o["id"] for o in status["quorum"]["observers"]) == [3, 4, 5]
    for node in brokers:
        config = parse_properties((state / "default" / "quickstart" / f"node-{node['id']}" / "server.properties").read_text())
        assert config["process.roles"] == "broker" and config["advertised.listeners"].startswith("PLAINTEXT://127.0.0.1:")
        assert config["log.dirs"].endswith(f"node-{node['id']}/data-0")
        # The broker's log dir was formatted by `kraft storage format` with its own directory id.
        assert node["directories"][0]["directoryId"]
        # ... and the broker itself describes it (DescribeLogDirs): online, with the space it has.
        assert node["directories"][0]["offline"] is False and node["directories"][0]["usableBytes"] > 0, node
    assert "Created topic demo (3 partitions, RF 3)" in result.stdout
    describe = result.stdout[result.stdout.index("$ kraft topics --bootstrap-server"):]
    assert re.search(r"^Topic: demo\tTopicId: \S+\tPartitionCount: 3\tReplicationFactor: 3", describe, re.M), describe
    partitions = re.findall(r"^\tTopic: demo\tPartition: (\d)\tLeader: (\d)\tReplicas: ([\d,]+)\tIsr: ([\d,]+)",
                            describe, re.M)
    assert sorted(p[0] for p in partitions) == ["0", "1", "2"], describe
    for _, leader, replicas, isr in partitions:
        assert sorted(replicas.split(",")) == ["3", "4", "5"] and leader in isr.split(","), describe
    assert status["partitions"]["total"] >= 3 and status["partitions"]["offline"] == 0
    assert status["metadataVersion"]["finalized"] == status["metadataVersion"]["target"]
    _no_node_left(state, "quickstart")


@needs_kafka
@pytest.mark.kafka_jars
@pytest.mark.parametrize("kafka_pools", [("brokers",), ("controllers", "brokers")], ids=["brokers", "every-node"])
def test_the_quickstart_with_apache_kafka_pools_from_the_jars_reaches_ready_with_a_demo_topic(
    tmp_path: Path, kafka_pools: tuple[str, ...],
) -> None:
    """The same planner and runtime with Apache Kafka 4.1 from the jars in place of the engine: the
    broker pool only (engine controllers), or every node."""
    quickstart = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    for pool in quickstart["spec"]["nodePools"]:
        if pool["name"] in kafka_pools:
            pool["implementation"] = "apache-kafka"
    spec = tmp_path / "quickstart.yaml"
    spec.write_text(yaml.safe_dump(quickstart))
    state = tmp_path / "state"
    result = _up(spec, state, timeout_s=280)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    status = _status(state, "quickstart")
    assert _conditions(status)["Ready"]["status"] == "True"
    assert status["controllers"] == "3/3" and status["brokers"] == "3/3"
    for node in status["nodes"]:
        assert node["version"].startswith("kafka " if node["pool"] in kafka_pools else "kraftwerk "), node
    brokers = [n for n in status["nodes"] if n["pool"] == "brokers"]
    assert [n["id"] for n in brokers] == [3, 4, 5]
    assert all(n["registered"] and n["fenced"] is False for n in brokers)
    # DescribeLogDirs answered by Kafka's brokers or ours: every broker directory online, with its space.
    assert all(d["offline"] is False and d["usableBytes"] > 0 for n in brokers for d in n["directories"]), brokers
    assert sorted(v["id"] for v in status["quorum"]["voters"]) == [0, 1, 2]
    assert sorted(o["id"] for o in status["quorum"]["observers"]) == [3, 4, 5]
    assert "Created topic demo (3 partitions, RF 3)" in result.stdout
    assert status["partitions"]["total"] >= 3 and status["partitions"]["offline"] == 0
    assert status["metadataVersion"]["finalized"] == "4.1-IV1"
