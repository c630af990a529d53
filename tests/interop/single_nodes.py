"""One Apache Kafka 4.1 combined node on loopback, for the interop tests that ask our broker
(`test_kafka_configs_tool.our_controller_and_broker`) and Kafka's the same thing with the same
static keys: the command to run (with `_running`) and where to reach it."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from kraft_engine.loopback_ports import free_loopback_ports

from .test_mixed_brokers import (
    _DEADLINE_S,
    CLUSTER_ID,
    _java,
    _properties,
)

__all__ = ["SingleNode", "kafka_node", "kafka_started"]


@dataclass(frozen=True)
class SingleNode:
    commands: list[tuple[list[str], Path]]  # (command line, its log file) for `_running`
    port: int  # the broker's PLAINTEXT listener
    node_id: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def kafka_node(tmp_path: Path, static: dict[str, str]) -> SingleNode:
    """One Apache Kafka 4.1 node, broker and controller (node 1), formatted; it serves once
    `kafka_started(tmp_path)`."""
    port, controller_port = free_loopback_ports(2)
    kafka = _properties(tmp_path / "kafka.properties", {
        "process.roles": "broker,controller", "node.id": "1",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}", "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}", "log.dirs": str(tmp_path / "kafka"),
        **static,
    })
    subprocess.run(_java("kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c", str(kafka), "--standalone"),
                   check=True, capture_output=True, timeout=_DEADLINE_S)
    return SingleNode(commands=[(_java("kafka.Kafka", str(kafka)), tmp_path / "kafka.log")], port=port, node_id=1)


def kafka_started(tmp_path: Path) -> bool:
    return "Kafka Server started" in (tmp_path / "kafka.log").read_text()
