"""A broker's own `compression.type` and KIP-390 level, set at run time with Apache Kafka 4.1's
`kafka-configs` (IncrementalAlterConfigs on the broker resource, forwarded to the controllers),
decide how the leader stores what producers send, with no restart; seen in the stored batches.

Three controllers and three brokers of ours. kafka-python sends uncompressed batches, one record
each. Kafka's resolution order holds for topics without their own `compression.type`: this
broker's dynamic config, then the cluster-wide dynamic default, then server.properties, then
`producer`; a topic's own setting wins over all of them. A level set on the broker reaches the
batches written after it (level 9 batches are smaller than level 1 batches of the same records),
and deleting the broker's setting falls back to the cluster default at once. Every record reads
back at its offset. Needs the cached Kafka jars and a JDK; skips cleanly without them.
"""

from __future__ import annotations

import asyncio
import re
import sys
import warnings
from pathlib import Path

import pytest
import test_broker_cluster
from broker_processes import BrokerCluster
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8
from quorum_processes import kraft_tool, wait_for
from record_checks import CLEAN, anomalies
from test_broker_cluster import read_back

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))
from kafka_jars import CLASSPATH, kafka_tool

from kraft_engine.protocol import KafkaConnection

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = [
    pytest.mark.process,
    pytest.mark.kafka_jars,
    pytest.mark.timeout(900),
    pytest.mark.skipif(CLASSPATH is None, reason="Kafka jars not cached (run scripts/fetch-kafka-jars) or no java"),
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

brokers = test_broker_cluster.brokers  # three controllers and three brokers, per test

_WORDS = [b"w%d" % (i * 7919 % 1000) for i in range(20_000)]
BODIES = [b" ".join(_WORDS[i * 500:] + _WORDS[: i * 500]) for i in range(6)]


def _configs(cluster: BrokerCluster, *args: str) -> str:
    # A JVM starting on a loaded machine: give each tool run five minutes.
    result = kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", cluster.broker_bootstrap(), *args,
                        timeout_s=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _create_led_by(cluster: BrokerCluster, topic: str, leader: int, configs: dict[str, str] | None = None) -> None:
    replicas = [leader] + [b for b in sorted(cluster.brokers) if b != leader]
    admin = KafkaAdminClient(bootstrap_servers=cluster.broker_bootstrap(), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: replicas}, topic_configs=configs or {})])
    finally:
        admin.close()
    wait_for(lambda: (p := cluster.partitions(leader).get((topic, 0))) is not None and p["leader"] == leader
             and set(p["isr"]) == set(cluster.brokers), timeout_s=90, what=f"{topic}-0 led by {leader} with a full ISR")


def _send_uncompressed(cluster: BrokerCluster, topic: str, *, first: int) -> list[tuple[int, int, bytes]]:
    """One uncompressed batch per body, numbered on from `first` * 6 in the checker's
    `<prefix>-<i>-` form; (partition, offset, value) of each acknowledged record."""
    send = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all", enable_idempotence=True,
                         linger_ms=0, max_request_size=2 << 20, request_timeout_ms=30000)
    acked = []
    try:
        for i, body in enumerate(BODIES):
            tagged = b"c-%d- " % (first * len(BODIES) + i) + body
            metadata = send.send(topic, value=tagged, partition=0).get(timeout=60)
            acked.append((metadata.partition, metadata.offset, tagged))
    finally:
        send.close()
    return acked


def _stored_batches(cluster: BrokerCluster, topic: str, leader: int) -> list[tuple[str, int]]:
    """(codec, size in bytes) of every batch of `topic`-0 in the leader's segments, in offset order."""
    paths = sorted((cluster.root / f"broker-{leader}").glob(f"data-*/{topic}-0/*.log"), key=lambda p: p.name)
    dump = "".join(kraft_tool("dump-log", "--files", str(p), check=True).stdout for p in paths)
    return [(codec, int(size)) for size, codec in re.findall(r" size: (\d+) magic: 2 compresscodec: (\w+) ", dump)]


def test_a_brokers_dynamic_compression_type_and_level_decide_how_its_led_partitions_are_stored(
        brokers: BrokerCluster) -> None:
    _create_led_by(brokers, "plain", 101)
    _create_led_by(brokers, "elsewhere", 102)
    _create_led_by(brokers, "own", 101, {"compression.type": "lz4"})

    # Cluster-wide default zstd, broker 101 gzip at level 1.
    _configs(brokers, "--alter", "--entity-type", "brokers", "--entity-default", "--add-config", "compression.type=zstd")
    _configs(brokers, "--alter", "--entity-type", "brokers", "--entity-name", "101", "--add-config",
             "compression.type=gzip,compression.gzip.level=1")
    described = _configs(brokers, "--describe", "--entity-type", "brokers", "--entity-name", "101")
    assert ("compression.type=gzip sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:compression.type=gzip, "
            "DYNAMIC_DEFAULT_BROKER_CONFIG:compression.type=zstd, DEFAULT_CONFIG:compression.type=producer}") in described

    # Every broker applies what the metadata says once it has it: wait until each has it in its
    # DescribeConfigs answer (answered from its own image), then write.
    def applied(broker: int, **expected: str) -> bool:
        configs = _broker_configs(brokers, broker)
        return all(configs.get(key.replace("_", ".")) == value for key, value in expected.items())

    wait_for(lambda: applied(101, compression_type="gzip", compression_gzip_level="1"), timeout_s=60,
             what="broker 101 to have its dynamic compression config")
    wait_for(lambda: applied(102, compression_type="zstd"), timeout_s=60, what="broker 102 to have the cluster default")
    acked = {topic: _send_uncompressed(brokers, topic, first=0) for topic in ("plain", "elsewhere", "own")}
    assert [c for c, _ in _stored_batches(brokers, "plain", 101)] == ["gzip"] * 6  # the broker's own setting
    assert [c for c, _ in _stored_batches(brokers, "elsewhere", 102)] == ["zstd"] * 6  # the cluster default
    assert [c for c, _ in _stored_batches(brokers, "own", 101)] == ["lz4"] * 6  # the topic's own setting

    # Level 9 on broker 101, at run time: the same records are stored smaller from then on.
    _configs(brokers, "--alter", "--entity-type", "brokers", "--entity-name", "101", "--add-config",
             "compression.gzip.level=9")
    wait_for(lambda: applied(101, compression_gzip_level="9"), timeout_s=60, what="broker 101 to have level 9")
    acked["plain"] += _send_uncompressed(brokers, "plain", first=1)
    batches = _stored_batches(brokers, "plain", 101)
    assert [c for c, _ in batches] == ["gzip"] * 12
    level_1, level_9 = [s for _, s in batches[:6]], [s for _, s in batches[6:]]
    assert all(nine < one for one, nine in zip(level_1, level_9, strict=True)), (level_1, level_9)

    # Deleting the broker's setting falls back to the cluster default with no restart.
    _configs(brokers, "--alter", "--entity-type", "brokers", "--entity-name", "101", "--delete-config",
             "compression.type,compression.gzip.level")
    wait_for(lambda: applied(101, compression_type="zstd", compression_gzip_level="-1"), timeout_s=60,
             what="broker 101 to drop its own compression settings")
    acked["plain"] += _send_uncompressed(brokers, "plain", first=2)
    assert [c for c, _ in _stored_batches(brokers, "plain", 101)] == ["gzip"] * 12 + ["zstd"] * 6

    # Followers store the leader's batches as they are; every record reads back at its offset.
    for topic, leader in (("plain", 101), ("elsewhere", 102), ("own", 101)):
        wait_for(lambda t=topic: all(brokers.partitions(b)[(t, 0)]["log_end_offset"] == len(acked[t])
                                     for b in brokers.brokers), timeout_s=90, what=f"every replica of {topic} to catch up")
        mine = _stored_batches(brokers, topic, leader)
        assert all(_stored_batches(brokers, topic, b) == mine for b in brokers.brokers)
        assert anomalies(acked[topic], read_back(brokers, topic, 1)) == CLEAN


def _broker_configs(cluster: BrokerCluster, broker: int) -> dict[str, str | None]:
    """Broker `broker`'s configs as it answers DescribeConfigs from its own image (what it applies)."""
    async def describe() -> dict[str, str | None]:
        async with KafkaConnection("127.0.0.1", cluster.broker_ports[broker]) as connection:
            response = await connection.send(DescribeConfigsRequest(
                resources=(DescribeConfigsResource(resource_type=i8(4), resource_name=str(broker),
                                                   configuration_keys=None),),
                include_synonyms=False, include_documentation=False))
            [result] = response.results
            assert result.error_code == ErrorCode.none, result
            return {c.name: c.value for c in result.configs}
    return asyncio.run(describe())
