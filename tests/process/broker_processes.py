"""Real controller and broker processes on loopback: three controllers running the quorum
controller and our brokers (`process.roles=broker`), for the broker process tests.

`BrokerCluster` extends the controller harness: controller ids come first, broker ids get a
PLAINTEXT listener, two log directories each (JBOD layout, so each has its own directory id) and
the controllers as `controller.quorum.bootstrap.servers`. Everything `ProcessCluster` offers
(start, kill -9, SIGTERM, status over HTTP, SIGKILL cleanup) works for both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from quorum_processes import FAST_TIMEOUTS, HOST, Node, ProcessCluster, free_ports, wait_for

from kraft_engine.records import feature_versions, metadata_version

# Kafka's defaults are 2000/9000 ms; shorter keeps fencing and unfencing quick in tests while a
# loaded machine still heartbeats in time.
BROKER_TIMEOUTS = {
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "10000",
    # Kafka's 60 s would leave `-delete` directories for a minute where tests check a deleted or
    # moved replica is gone; test_broker_cleanup_delays.py runs with delays of its own.
    "log.segment.delete.delay.ms": "0",
    # The recovery-point and log-start checkpoints every 5 s, as the broker wrote them before it
    # read Kafka's intervals (60 s each): the restart tests were written against that cadence.
    "log.flush.offset.checkpoint.interval.ms": "5000",
    "log.flush.start.offset.checkpoint.interval.ms": "5000",
}


@dataclass
class BrokerCluster(ProcessCluster):
    brokers: set[int] = field(default_factory=set)
    broker_ports: dict[int, int] = field(default_factory=dict)
    broker_config: dict[str, str] = field(default_factory=dict)

    def add_broker(self, node_id: int) -> Node:
        port, http_port, broker_port = free_ports(3)
        node_dir = self.root / f"broker-{node_id}"
        node_dir.mkdir(parents=True, exist_ok=True)
        node = Node(node_id=node_id, port=port, http_port=http_port, data_dir=node_dir / "metadata",
                    config_path=node_dir / "server.properties", log_path=node_dir / "server.log")
        self.brokers.add(node_id)
        self.broker_ports[node_id] = broker_port
        self.nodes[node_id] = node
        self.write_config(node)
        return node

    def bootstrap_servers(self, node_ids: list[int] | None = None) -> str:
        ids = sorted(i for i in self.nodes if i not in self.brokers) if node_ids is None else node_ids
        return ",".join(self.nodes[i].address for i in ids)

    def broker_bootstrap(self, node_ids: list[int] | None = None) -> str:
        ids = sorted(self.brokers) if node_ids is None else node_ids
        return ",".join(f"{HOST}:{self.broker_ports[i]}" for i in ids)

    def write_config(self, node: Node, *, bootstrap_ids: list[int] | None = None) -> None:
        if node.node_id not in self.brokers:
            super().write_config(node, bootstrap_ids=bootstrap_ids)
            return
        root = node.config_path.parent
        properties = {
            "process.roles": "broker",
            "node.id": str(node.node_id),
            "listeners": f"PLAINTEXT://{HOST}:{self.broker_ports[node.node_id]}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "controller.quorum.bootstrap.servers": self.bootstrap_servers(),
            "log.dirs": f"{root / 'data-a'},{root / 'data-b'}",
            "metadata.log.dir": str(node.data_dir),
            "kraftwerk.metrics.port": str(node.http_port),
            **FAST_TIMEOUTS,
            **BROKER_TIMEOUTS,
            **self.broker_config,
        }
        node.config_path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()), encoding="utf-8")

    def ready(self, node_id: int) -> bool:
        answer = self.http(node_id, "/readyz")
        return answer is not None and answer[0] == 200

    def wait_ready(self, node_ids: list[int], *, timeout_s: float = 90) -> None:
        for node_id in node_ids:
            wait_for(lambda node_id=node_id: self.ready(node_id), timeout_s=timeout_s,
                     what=f"broker {node_id} to be RUNNING (caught up and unfenced)")

    def partitions(self, node_id: int) -> dict[tuple[str, int], dict[str, Any]]:
        status = self.status_of(node_id)
        return {(p["topic"], p["partition"]): p for p in status["partitions"]}

    def wait_isr(self, topic: str, partition: int, isr: set[int], *, timeout_s: float = 90) -> None:
        def holds() -> bool:
            for node_id in self.brokers:
                if self.status(node_id) is None:
                    continue
                found = self.partitions(node_id).get((topic, partition))
                if found is not None and found["leader"] == node_id and set(found["isr"]) == isr:
                    return True
            return False

        wait_for(holds, timeout_s=timeout_s, what=f"the ISR of {topic}-{partition} to be {sorted(isr)}")


def start_cluster(cluster: BrokerCluster, *, controllers: int = 3, brokers: int = 3,
                  before_format: Callable[[int], None] | None = None,
                  release: metadata_version.MetadataVersion | None = None, ready_timeout_s: float = 90) -> None:
    """Controllers 1..n (a dynamic quorum, real quorum controller) and brokers 101.. running.
    `before_format(node_id)` runs for each broker between its configuration and its format (to
    put a log directory on a disk of its own, say). `release`: format at that metadata.version
    (`--release-version`) instead of the latest, to upgrade it later."""
    cluster.extra_config["kraftwerk.test.state.machine.enable"] = "false"
    controller_ids = list(range(1, controllers + 1))
    for node_id in controller_ids:
        cluster.add_node(node_id)
    # The engine's broker lacks some of the levels Kafka's defaults finalize: format with the
    # levels every node supports, or the brokers are refused at registration.
    levels = feature_versions.levels_every_node_supports(release or metadata_version.latest(), [
        feature_versions.supported_ranges(unstable_enabled=False),
        feature_versions.supported_ranges(unstable_enabled=False, broker=True),
    ])
    release_flags = () if release is None else ("--release-version", str(release))
    cluster.format_initial(controller_ids, *release_flags,
                           *(f for name, level in levels.items() for f in ("-f", f"{name}={level}")))
    broker_ids = list(range(101, 101 + brokers))
    for node_id in broker_ids:
        cluster.add_broker(node_id)
        if before_format is not None:
            before_format(node_id)
        cluster.format(node_id)
    cluster.start_all(controller_ids + broker_ids)
    cluster.wait_ready(broker_ids, timeout_s=ready_timeout_s)
