"""Apache Kafka 4.1's own nodes as processes on loopback: three combined (broker and controller)
nodes of a dynamic quorum, formatted by Kafka's StorageTool with `--initial-controllers` (at a
chosen metadata.version if asked), and controller-only nodes added later (formatted with
`--no-initial-controllers`, to join the quorum as observers and then voters), for the pipeline's
scenario on logs Kafka wrote. Our `kraft` tools (run in this process) ask Kafka's nodes what they
know: the quorum's status and the partitions' leaders and ISRs.

Each node keeps Kafka's own layout: `log.dirs` holds the topics' partition directories beside
`__cluster_metadata-0` and `meta.properties`.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from interop.kafka_jars import CLASSPATH
from quorum_processes import kraft_tool, wait_for

from kraft_engine.kafka_uuid import random_uuid, to_kafka_str
from kraft_engine.loopback_ports import free_loopback_ports

HOST = "127.0.0.1"
NODES = (1, 2, 3)
# JVM starts and elections on a loaded 2-core machine: bounds each wait, never asserted on.
WAIT_S = 180


@dataclass
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    directory_id: str | None  # chosen here for the initial voters; StorageTool's for nodes added later
    root: Path
    process: subprocess.Popen[bytes] | None = None
    output: IO[bytes] | None = None
    roles: str = "broker,controller"

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles.split(",")

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def config_path(self) -> Path:
        return self.root / "server.properties"


@dataclass
class KafkaCluster:
    root: Path
    nodes: dict[int, KafkaNode] = field(default_factory=dict)
    cluster_id: str = field(default_factory=lambda: to_kafka_str(random_uuid()))

    def __post_init__(self) -> None:
        ports = free_loopback_ports(2 * len(NODES))
        for index, node_id in enumerate(NODES):
            self.nodes[node_id] = KafkaNode(node_id=node_id, port=ports[2 * index],
                                            controller_port=ports[2 * index + 1],
                                            directory_id=to_kafka_str(random_uuid()), root=self.root / f"kafka-{node_id}")

    def _write_config(self, node: KafkaNode) -> None:
        node.root.mkdir(parents=True)
        controller = f"CONTROLLER://{HOST}:{node.controller_port}"
        listeners = f"PLAINTEXT://{HOST}:{node.port},{controller}" if node.is_broker else controller
        properties = {
            "process.roles": node.roles,
            "node.id": str(node.node_id),
            "listeners": listeners,
            "advertised.listeners": listeners,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "controller.quorum.bootstrap.servers": ",".join(f"{HOST}:{n.controller_port}" for n in self.nodes.values()
                                                            if n.node_id in NODES),
            "log.dirs": str(node.data_dir),
        }
        if node.is_broker:
            properties |= {
                "inter.broker.listener.name": "PLAINTEXT",
                "offsets.topic.replication.factor": "3",
                "replica.lag.time.max.ms": "10000",
                # the preferred leader is elected back soon after its broker returns
                "leader.imbalance.check.interval.seconds": "5",
            }
        node.config_path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()), encoding="utf-8")

    def _format(self, nodes: list[KafkaNode], *flags: str) -> None:
        """Kafka's StorageTool on each of `nodes` at once (a JVM start each)."""
        formats = [subprocess.Popen(
            _java("kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(node.config_path), *flags,
                  "--ignore-formatted"),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for node in nodes]
        try:
            for process in formats:
                out, _ = process.communicate(timeout=WAIT_S)
                if process.returncode != 0:
                    raise AssertionError(f"Kafka's StorageTool failed: {out.decode(errors='replace')}")
        finally:
            for process in formats:
                if process.poll() is None:
                    process.kill()
                    process.communicate()

    def format(self, *, release_version: str | None = None) -> None:
        """Each node's config, then Kafka's StorageTool on all three, at `release_version` (Kafka's
        `--release-version`, the metadata.version the cluster starts at) or Kafka's default."""
        initial = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}:{n.directory_id}" for n in self.nodes.values())
        for node in self.nodes.values():
            self._write_config(node)
        release = ("--release-version", release_version) if release_version is not None else ()
        self._format(list(self.nodes.values()), "--initial-controllers", initial, *release)

    def add_controller_node(self, node_id: int) -> KafkaNode:
        """A controller-only node, formatted to join the running cluster: it starts as an observer
        of the quorum, until `kafka-metadata-quorum add-controller` makes it a voter."""
        (port,) = free_loopback_ports(1)
        node = KafkaNode(node_id=node_id, port=-1, controller_port=port, directory_id=None,
                         root=self.root / f"kafka-{node_id}", roles="controller")
        self.nodes[node_id] = node
        self._write_config(node)
        self._format([node], "--no-initial-controllers")
        return node

    def start(self, node_id: int) -> None:
        node = self.nodes[node_id]
        node.output = (node.root / "server.log").open("ab")
        node.process = subprocess.Popen(_java("kafka.Kafka", str(node.config_path)),
                                        stdout=node.output, stderr=subprocess.STDOUT)

    def kill(self, node_id: int) -> None:
        """SIGKILL, and wait for it to be gone."""
        node = self.nodes[node_id]
        if node.process is not None:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(timeout=60)
            node.process = None
        if node.output is not None:
            node.output.close()
            node.output = None

    def stop_all(self) -> None:
        """SIGTERM to every running node at once (each broker's controlled shutdown while the
        quorum still stands), then SIGKILL whatever has not exited within 90 s."""
        running = [n for n in self.nodes.values() if n.process is not None]
        for node in running:
            assert node.process is not None
            node.process.terminate()
        for node in running:
            assert node.process is not None
            try:
                node.process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait()
            node.process = None
            if node.output is not None:
                node.output.close()
                node.output = None

    def running(self) -> list[int]:
        return [n.node_id for n in self.nodes.values() if n.process is not None]

    def controllers(self, node_ids: list[int] | None = None) -> str:
        return ",".join(f"{HOST}:{self.nodes[i].controller_port}" for i in node_ids or self.running())

    def brokers(self, node_ids: list[int] | None = None) -> str:
        return ",".join(f"{HOST}:{self.nodes[i].port}" for i in node_ids or self.running() if self.nodes[i].is_broker)

    def quorum_status(self) -> dict[str, Any]:
        """`kafka-metadata-quorum describe --status` as JSON, asked of the running controllers."""
        answer = kraft_tool("metadata-quorum", "--bootstrap-controller", self.controllers(), "--output", "json",
                            "describe", "--status", check=True)
        return dict(json.loads(answer.stdout))

    def leader_hwm(self) -> int:
        """The high watermark the quorum's leader reports (every offset below it is committed)."""

        def found() -> int | None:
            status = self.quorum_status()
            hwm = int(status["highWatermark"])
            return hwm if int(status["leaderId"]) in self.running() and hwm > 0 else None

        return wait_for(found, timeout_s=WAIT_S, interval_s=0.5, what="the Kafka quorum leader's high watermark")

    def quorum_leader(self) -> int:
        def found() -> int | None:
            leader = int(self.quorum_status()["leaderId"])
            return leader if leader in self.running() else None

        return wait_for(found, timeout_s=WAIT_S, interval_s=0.5, what="a running Kafka quorum leader")

    def partitions(self, topic: str) -> dict[int, tuple[int | None, list[int]]]:
        """(leader, ISR) of each partition, from a running broker's metadata (`kafka-topics --describe`)."""
        answer = kraft_tool("topics", "--bootstrap-server", self.brokers(), "--describe", "--topic", topic, check=True)
        found: dict[int, tuple[int | None, list[int]]] = {}
        for match in re.finditer(r"Partition: (\d+)\tLeader: (\w+)\tReplicas: [\d,]*\tIsr: ([\d,]*)", answer.stdout):
            leader = None if match[2] == "none" else int(match[2])
            found[int(match[1])] = (leader, [int(i) for i in match[3].split(",") if i])
        return found

    def wait_partitions(self, topic: str, expected: dict[int, tuple[int, set[int]]], *, what: str) -> None:
        def holds() -> bool:
            now = self.partitions(topic)
            return all(p in now and now[p][0] == leader and set(now[p][1]) == isr
                       for p, (leader, isr) in expected.items())

        wait_for(holds, timeout_s=WAIT_S, interval_s=1, what=what)


def _java(*args: str) -> list[str]:
    if CLASSPATH is None:
        raise AssertionError("Kafka's jars are not cached (scripts/fetch-kafka-jars)")
    return ["java", "-Xmx384m", "-cp", CLASSPATH, *args]
