"""An Apache Kafka 4.1 broker on our controller forwards admin requests in an Envelope.

One of our controllers (the quorum controller, formatted at 4.0-IV3 so a 4.1 broker may join) and
one Kafka 4.1 broker from the jars. kafka-python creates, grows and deletes a topic through the
Kafka broker, which forwards each request to our controller wrapped in an Envelope (KIP-590).
Before Envelope was served, the broker answered "The node does not support ENVELOPE". The broker
also advertises the admin version ranges our controller serves (it intersects them with its own).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraft_engine.loopback_ports import free_loopback_ports
from kraft_engine.protocol import KafkaConnection

from .kafka_jars import CLASSPATH, needs_jars

pytestmark = [pytest.mark.kafka_jars, pytest.mark.process, pytest.mark.slow]

KRAFT = str(Path(sys.executable).parent / "kraft")
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"
_DEADLINE_S = 120  # a JVM start on a loaded 2-core machine; bounds the wait, never asserted on


def _until(condition: object, what: str) -> None:
    deadline = time.monotonic() + _DEADLINE_S
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def kafka_broker_on_our_controller(tmp_path: Path) -> Iterator[tuple[int, int]]:
    controller_port, http_port, broker_port = free_loopback_ports(3)
    controller = tmp_path / "controller.properties"
    controller.write_text(
        "process.roles=controller\nnode.id=1\n"
        f"listeners=CONTROLLER://127.0.0.1:{controller_port}\ncontroller.listener.names=CONTROLLER\n"
        f"controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}\nlog.dirs={tmp_path / 'controller'}\n"
        f"kraftwerk.metrics.port={http_port}\n"
    )
    broker = tmp_path / "broker.properties"
    broker.write_text(
        "process.roles=broker\nnode.id=2\n"
        f"listeners=PLAINTEXT://127.0.0.1:{broker_port}\ncontroller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"
        f"controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}\nlog.dirs={tmp_path / 'broker'}\n"
        "offsets.topic.replication.factor=1\n"
    )
    subprocess.run([KRAFT, "storage", "format", "-c", str(controller), "-t", CLUSTER_ID, "--standalone", "-r", "4.0"],
                   check=True, capture_output=True)
    assert CLASSPATH is not None
    subprocess.run(["java", "-cp", CLASSPATH, "kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c", str(broker)],
                   check=True, capture_output=True, timeout=_DEADLINE_S)
    processes = []
    with (tmp_path / "controller.log").open("w") as controller_log, (tmp_path / "broker.log").open("w") as broker_log:
        processes.append(subprocess.Popen([KRAFT, "server", "start", "--config", str(controller)],
                                          stdout=controller_log, stderr=subprocess.STDOUT))
        processes.append(subprocess.Popen(["java", "-Xmx384m", "-cp", CLASSPATH, "kafka.Kafka", str(broker)],
                                          stdout=broker_log, stderr=subprocess.STDOUT))
        try:
            _until(lambda: "Transition from STARTING to STARTED" in (tmp_path / "broker.log").read_text(),
                   "the Kafka broker to start on our controller")
            yield broker_port, http_port
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


async def _admin_versions(port: int) -> dict[int, tuple[int, int]]:
    async with KafkaConnection("127.0.0.1", port) as connection:
        await connection.connect()
        return dict(connection.peer_api_versions)


@needs_jars
def test_kafka_python_through_a_kafka_broker_reaches_our_controller_in_envelopes(
    kafka_broker_on_our_controller: tuple[int, int],
) -> None:
    broker_port, http_port = kafka_broker_on_our_controller
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic

    versions = asyncio.run(_admin_versions(broker_port))
    assert versions[19] == (2, 7) and versions[20] == (1, 6) and versions[37] == (0, 3)

    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{broker_port}", client_id="envelope-test")
    try:
        created = admin.create_topics([NewTopic("through-kafka", num_partitions=3, replication_factor=1)])
        assert [(t["name"], t["error_code"]) for t in created["topics"]] == [("through-kafka", 0)]
        grown = admin.create_partitions({"through-kafka": NewPartitions(total_count=5)})
        assert [r.error_code for r in grown.results] == [0]
        admin.delete_topics(["through-kafka"])  # kafka-python raises on an error code
        _until(lambda: "through-kafka" not in admin.list_topics(), "the deletion to reach the broker")
    finally:
        admin.close()
    envelopes = _metric(http_port, 'kafka_network_requests_total{listener="CONTROLLER",request="Envelope"}')
    assert envelopes >= 3
