"""`process.roles=broker,controller`: three combined nodes as real processes serve kafka-python,
and SIGTERM runs the broker's controlled shutdown before the controller stops."""

from __future__ import annotations

import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from quorum_processes import HOST, KRAFT, free_ports, kraft_tool, wait_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = [
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"


@pytest.fixture
def combined(tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], int, Path]]]:
    ports = free_ports(9)
    voters = ",".join(f"{i}@{HOST}:{ports[i - 1]}" for i in (1, 2, 3))
    nodes = []
    for i in (1, 2, 3):
        controller_port, broker_port, http_port = ports[i - 1], ports[2 + i], ports[5 + i]
        config = tmp_path / f"node-{i}.properties"
        config.write_text("\n".join([
            "process.roles=broker,controller",
            f"node.id={i}",
            f"listeners=PLAINTEXT://{HOST}:{broker_port},CONTROLLER://{HOST}:{controller_port}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{broker_port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"controller.quorum.voters={voters}",
            f"log.dirs={tmp_path / f'node-{i}'}",
            "broker.heartbeat.interval.ms=500",
            "broker.session.timeout.ms=6000",
            f"kraftwerk.metrics.port={http_port}",
        ]) + "\n", encoding="utf-8")
        kraft_tool("storage", "format", "-c", str(config), "-t", CLUSTER_ID, check=True)
        log = tmp_path / f"node-{i}.log"
        with log.open("ab") as out:
            process = subprocess.Popen([KRAFT, "server", "start", "--config", str(config)], stdout=out,
                                       stderr=subprocess.STDOUT)
        nodes.append((process, broker_port, log))
    try:
        yield nodes
    finally:
        for process, _, _ in nodes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=60)


def test_three_combined_nodes_serve_kafka_python_and_stop_in_order(
    combined: list[tuple[subprocess.Popen[bytes], int, Path]],
) -> None:
    bootstrap = ",".join(f"{HOST}:{port}" for _, port, _ in combined)
    for _, _, log in combined:
        wait_for(lambda log=log: "is now RUNNING" in log.read_text(errors="replace"), timeout_s=90,
                 what="every broker half RUNNING")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("events", 2, 3)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2, request_timeout_ms=30000)
    acked = {}
    for i in range(100):
        metadata = producer.send("events", value=f"e-{i}".encode(), partition=i % 2).get(timeout=60)
        acked[(metadata.partition, metadata.offset)] = f"e-{i}".encode()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        assignment = [TopicPartition("events", p) for p in (0, 1)]
        consumer.assign(assignment)
        consumer.seek_to_beginning()
        stored = {}
        while len(stored) < len(acked):
            for records in consumer.poll(timeout_ms=2000).values():
                for record in records:
                    stored[(record.partition, record.offset)] = record.value
    finally:
        consumer.close()
    assert stored == acked

    process, _, log = combined[1]
    process.terminate()
    assert process.wait(timeout=120) == 0
    text = log.read_text(errors="replace")
    assert text.index("is now SHUTTING_DOWN") < text.index("Controller 2 stopped")
