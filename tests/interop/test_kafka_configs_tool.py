"""Apache Kafka 4.1's `kafka-configs --describe` prints the same against our broker as against
Kafka's own node with the same settings.

The same static config (log.retention.hours=100, num.partitions=2), the same topic overrides
(retention.ms, cleanup.policy), the same dynamic broker config (log.retention.ms for the broker)
and cluster-wide dynamic defaults (log.retention.bytes, min.insync.replicas) are set with Kafka's
own tools on (1) our controller and our broker, answering DescribeConfigs itself, and (2) one
Apache Kafka 4.1 combined node. Every describe (a topic's dynamic configs and all of them, the
broker's dynamic configs, the cluster defaults, every broker, and `kafka-topics --describe`, which
asks DescribeTopicPartitions and shows the ELR columns) prints the same lines, value and
synonym chain for value and chain, the broker's id aside. A broker's `--all` listing (Kafka's 316
KafkaConfig keys) is compared line by line except the keys that name the node (its id, roles,
addresses and directories). Our broker refuses a
resource naming another broker and an unknown topic with Kafka's errors.

Needs the cached Kafka jars and a JDK; skips cleanly without them.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from kraft_engine.loopback_ports import free_loopback_ports
from kraft_engine.protocol import KafkaConnection

from .kafka_jars import needs_jars
from .single_nodes import kafka_node, kafka_started
from .test_mixed_brokers import (
    _DEADLINE_S,
    _LEVELS_OUR_BROKER_SUPPORTS,
    CLUSTER_ID,
    KRAFT,
    _java,
    _properties,
    _ready,
    _running,
    _until,
)

pytestmark = [pytest.mark.kafka_jars, pytest.mark.process, pytest.mark.slow]

OURS = 101
_STATIC = {"log.retention.hours": "100", "num.partitions": "2", "offsets.topic.replication.factor": "1"}
_DESCRIBES = {
    "topic": ["--entity-type", "topics", "--entity-name", "t1"],
    "topic-all": ["--entity-type", "topics", "--entity-name", "t1", "--all"],
    "broker": ["--entity-type", "brokers", "--entity-name", "{id}"],
    "default": ["--entity-type", "brokers", "--entity-default"],
    "brokers": ["--entity-type", "brokers"],
    "broker-all": ["--entity-type", "brokers", "--entity-name", "{id}", "--all"],
}
# A broker's --all lines: every one is compared except the keys that name the node itself (its
# id, roles, addresses, directories; and our metrics port, which Kafka has not).
_NODE_KEYS = frozenset({"advertised.listeners", "broker.id", "controller.quorum.bootstrap.servers", "kraftwerk.metrics.port",
                        "listeners", "log.dirs", "metadata.log.dir", "node.id", "process.roles"})


def _tool(main: str, bootstrap: str, *args: str) -> str:
    result = subprocess.run(_java("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", main, "--bootstrap-server",
                                  bootstrap, *args), capture_output=True, text=True, timeout=_DEADLINE_S, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _configure_and_describe(bootstrap: str, node_id: int) -> dict[str, list[str]]:
    _tool("org.apache.kafka.tools.TopicCommand", bootstrap, "--create", "--topic", "t1", "--partitions", "1",
          "--replication-factor", "1", "--config", "retention.ms=12345", "--config", "cleanup.policy=compact")
    _tool("kafka.admin.ConfigCommand", bootstrap, "--alter", "--entity-type", "brokers", "--entity-name", str(node_id),
          "--add-config", "log.retention.ms=777777,leader.replication.throttled.rate=1000000,"
          "replica.alter.log.dirs.io.max.bytes.per.second=3000000")
    _tool("kafka.admin.ConfigCommand", bootstrap, "--alter", "--entity-type", "brokers", "--entity-default",
          "--add-config", "log.retention.bytes=999999,min.insync.replicas=1,follower.replication.throttled.rate=2000000")

    def described() -> dict[str, list[str]]:
        out = {}
        for name, args in _DESCRIBES.items():
            text = _tool("kafka.admin.ConfigCommand", bootstrap, "--describe", *(a.format(id=node_id) for a in args))
            out[name] = text.replace(f"broker {node_id} ", "broker <id> ").splitlines()
        return out

    # The dynamic configs reach the broker through its metadata: wait until it shows them.
    result: dict[str, list[str]] = {}

    def settled() -> bool:
        result.update(described())
        return any("log.retention.bytes=999999" in line for line in result["default"]) and any(
            line.startswith("  log.retention.ms=777777") for line in result["broker"])

    _until(settled, "the dynamic configs in the broker's answer")
    # The throttle keys (DynamicConfig.Broker's, not KafkaConfig's) as DescribeConfigs gives them
    # to a client: value, source, read-only, sensitive and synonym chain, for the broker and the
    # cluster default.
    throttles = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                 "replica.alter.log.dirs.io.max.bytes.per.second")
    for name in (str(node_id), ""):
        result[f"throttles {name or 'default'}"] = _described(int(bootstrap.rsplit(":", 1)[1]), name, throttles)
    # Kafka 4.1's kafka-topics --describe: DescribeTopicPartitions (with the ELR columns) and the
    # topic's non-default configs from DescribeConfigs.
    described_topic = _tool("org.apache.kafka.tools.TopicCommand", bootstrap, "--describe", "--topic", "t1")
    described_topic = re.sub(r"TopicId: \S+", "TopicId: <id>", described_topic)
    result["kafka-topics"] = re.sub(r"(Leader|Replicas|Isr): \d+", r"\1: <id>", described_topic).splitlines()
    return result


def _described(port: int, broker: str, keys: tuple[str, ...]) -> list[str]:
    """One line per config a broker resource's DescribeConfigs (with synonyms) answers for `keys`."""
    async def exchange() -> list[str]:
        async with KafkaConnection("127.0.0.1", port) as connection:
            await connection.connect()
            response = await connection.send(DescribeConfigsRequest(resources=(DescribeConfigsResource(
                resource_type=i8(4), resource_name=broker, configuration_keys=keys),),
                include_synonyms=True, include_documentation=False))
        return sorted(
            f"{c.name}={c.value} source={int(c.config_source)} read_only={c.read_only} sensitive={c.is_sensitive}"
            f" type={int(c.config_type)} synonyms={[(s.name, s.value, int(s.source)) for s in c.synonyms]}"
            for r in response.results for c in r.configs)
    return asyncio.run(exchange())


def _ask(port: int, request: DescribeConfigsRequest) -> list[tuple[ErrorCode, str | None]]:
    async def exchange() -> list[tuple[ErrorCode, str | None]]:
        async with KafkaConnection("127.0.0.1", port) as connection:
            await connection.connect()
            response = await connection.send(request)
            return [(ErrorCode(r.error_code), r.error_message) for r in response.results]
    return asyncio.run(exchange())


@contextmanager
def our_controller_and_broker(tmp_path: Path, static: dict[str, str]) -> Iterator[tuple[int, int]]:
    """Our controller (1) and our broker (`OURS`, with `static` in its server.properties) running
    on plaintext listeners until the block ends: (the broker's port, the controller's port)."""
    controller_port, controller_http, ours_port, ours_http = free_loopback_ports(4)
    controller = _properties(tmp_path / "controller.properties", {
        "process.roles": "controller", "node.id": "1", "listeners": f"CONTROLLER://127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER", "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "log.dirs": str(tmp_path / "controller"), "kraftwerk.metrics.port": str(controller_http),
    })
    subprocess.run([KRAFT, "storage", "format", "-c", str(controller), "-t", CLUSTER_ID, "--standalone", "-r", "4.0",
                    *_LEVELS_OUR_BROKER_SUPPORTS], check=True, capture_output=True)
    ours = _properties(tmp_path / "ours.properties", {
        "process.roles": "broker", "node.id": str(OURS), "listeners": f"PLAINTEXT://127.0.0.1:{ours_port}",
        "controller.listener.names": "CONTROLLER", "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}", "log.dirs": str(tmp_path / "ours"),
        "metadata.log.dir": str(tmp_path / "ours-meta"), "kraftwerk.metrics.port": str(ours_http), **static,
    })
    subprocess.run([KRAFT, "storage", "format", "-c", str(ours), "-t", CLUSTER_ID], check=True, capture_output=True)
    with _running([([KRAFT, "server", "start", "--config", str(controller)], tmp_path / "controller.log"),
                   ([KRAFT, "server", "start", "--config", str(ours)], tmp_path / "ours.log")]):
        _until(lambda: _ready(ours_http), "our broker to be RUNNING")
        yield ours_port, controller_port


@needs_jars
@pytest.mark.timeout(900)
def test_kafka_configs_describes_our_broker_as_it_describes_kafkas(tmp_path: Path) -> None:
    with our_controller_and_broker(tmp_path, _STATIC) as (ours_port, _):
        bootstrap = f"127.0.0.1:{ours_port}"
        our_lines = _configure_and_describe(bootstrap, OURS)
        # Kafka 4.1's own producer names the topic by id (Produce v13) once its metadata has the
        # topic id; its --sync sends fail the tool on any refusal. Read back by Kafka's consumer.
        _tool("org.apache.kafka.tools.TopicCommand", bootstrap, "--create", "--topic", "java", "--partitions", "1",
              "--replication-factor", "1")
        produced = subprocess.run(
            _java("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "org.apache.kafka.tools.ConsoleProducer",
                  "--bootstrap-server", bootstrap, "--topic", "java", "--sync"),
            input="java-1\njava-2\njava-3\n", capture_output=True, text=True, timeout=_DEADLINE_S, check=False)
        assert produced.returncode == 0, produced.stdout + produced.stderr
        consumed = _tool("org.apache.kafka.tools.consumer.ConsoleConsumer", bootstrap, "--topic", "java", "--partition",
                         "0", "--offset", "0", "--max-messages", "3")
        assert consumed.splitlines() == ["java-1", "java-2", "java-3"]
        refused = _ask(ours_port, DescribeConfigsRequest(resources=(
            DescribeConfigsResource(resource_type=i8(4), resource_name="7", configuration_keys=None),
            DescribeConfigsResource(resource_type=i8(2), resource_name="nope", configuration_keys=None),
            DescribeConfigsResource(resource_type=i8(2), resource_name="t1", configuration_keys=("retention.ms",)),
        ), include_synonyms=True, include_documentation=False))
    assert refused == [
        (ErrorCode.invalid_request, f"Unexpected broker id, expected {OURS} or empty string, but received 7"),
        (ErrorCode.unknown_topic_or_partition, "Topic nope does not exist."),
        (ErrorCode.none, None),
    ]

    kafka = kafka_node(tmp_path, _STATIC)
    with _running(kafka.commands):
        _until(lambda: kafka_started(tmp_path), "the Kafka node to start")
        kafka_lines = _configure_and_describe(kafka.bootstrap, kafka.node_id)

    assert len(our_lines["kafka-topics"]) == 2 and "Elr: " in our_lines["kafka-topics"][1], our_lines["kafka-topics"]
    # Kafka reports the throttle keys read-only, typed LONG (KafkaConfig defines them as internal).
    assert (our_lines[f"throttles {OURS}"], our_lines["throttles default"]) == (
        kafka_lines["throttles 1"], kafka_lines["throttles default"])
    for name in ("topic", "topic-all", "broker", "default", "brokers", "kafka-topics"):
        assert our_lines[name] == kafka_lines[name], name
    # Every topic config is there, with its chain (a sample the reader can see in the diff if not).
    assert ("  retention.ms=12345 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=12345, "
            "DYNAMIC_BROKER_CONFIG:log.retention.ms=777777, STATIC_BROKER_CONFIG:log.retention.hours=100, "
            "DEFAULT_CONFIG:log.retention.hours=168}") in our_lines["topic-all"]

    def keyed(lines: list[str]) -> dict[str, str]:
        return {line.split("=", 1)[0].strip(): line for line in lines if line.startswith("  ")}

    ours_all, kafka_all = keyed(our_lines["broker-all"]), keyed(kafka_lines["broker-all"])
    assert len(kafka_all) > 300  # Kafka 4.1 lists every KafkaConfig key that is not internal
    assert {k: v for k, v in ours_all.items() if k not in _NODE_KEYS} == {
        k: v for k, v in kafka_all.items() if k not in _NODE_KEYS}
    assert ours_all["broker.id"] == f"  broker.id={OURS} sensitive=false synonyms={{STATIC_BROKER_CONFIG:broker.id={OURS}, " \
                                    "DEFAULT_CONFIG:broker.id=-1}"
