"""Managing what a broker's logs keep, through real clients and real processes: DeleteRecords
(from `kraft delete-records` in Kafka's JSON format and from kafka-python's admin) moving the log
start offset on every replica and kept across a kill -9."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import test_broker_cluster
from broker_processes import BrokerCluster
from quorum_processes import kraft_tool, wait_for
from test_broker_cluster import anomalies, read_back

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import OffsetOutOfRangeError, PolicyViolationError

pytestmark = [
    pytest.mark.process,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

brokers = test_broker_cluster.brokers  # three controllers and three brokers, per test


def _create(cluster: BrokerCluster, name: str, *, partitions: int, configs: dict[str, str]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.broker_bootstrap(), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, partitions, 3, topic_configs=configs)])
    finally:
        admin.close()
    for partition in range(partitions):
        cluster.wait_isr(name, partition, set(cluster.brokers))


def _produce(cluster: BrokerCluster, topic: str, *, partitions: int, count: int, size: int = 1000) -> list[tuple[int, int, bytes]]:
    send = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all", enable_idempotence=True,
                         linger_ms=5, request_timeout_ms=30000)
    try:
        futures = [(v, send.send(topic, value=v, partition=i % partitions))
                   for i, v in ((i, f"{topic}-{i}-".encode() + b"x" * size) for i in range(count))]
        send.flush()
        return [(m.partition, m.offset, v) for v, m in ((v, f.get(timeout=60)) for v, f in futures)]
    finally:
        send.close()


def _replicas_settle(cluster: BrokerCluster, topic: str, partition: int, *, log_start: int) -> None:
    """Every replica's log start at `log_start` and no segment wholly below it, as one settled read."""
    def settled() -> bool:
        for node_id in cluster.brokers:
            replica = cluster.partitions(node_id).get((topic, partition))
            if replica is None or replica["log_start_offset"] != log_start:
                return False
            segments = replica["segments"]
            if len(segments) > 1 and segments[1] <= log_start:
                return False
        return True
    wait_for(settled, timeout_s=90, what=f"every replica of {topic}-{partition} to start at {log_start}")


def test_delete_records_moves_the_log_start_on_every_replica_and_survives_kill_9(
        brokers: BrokerCluster, tmp_path: Path) -> None:
    topic = "trimmed"
    _create(brokers, topic, partitions=2, configs={"segment.bytes": str(1024 * 1024)})
    acked = _produce(brokers, topic, partitions=2, count=3000)
    assert len(acked) == 3000
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"partitions": [
        {"topic": topic, "partition": 0, "offset": 1000},
        {"topic": topic, "partition": 1, "offset": -1},
        {"topic": topic, "partition": 7, "offset": 3},
    ], "version": 1}))
    result = kraft_tool("delete-records", "--bootstrap-server", brokers.broker_bootstrap(),
                        "--offset-json-file", str(offsets))
    assert result.returncode == 1, result.stderr  # the partition that does not exist
    assert result.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 1000",
        f"partition: {topic}-1\tlow_watermark: 1500",
        f"partition: {topic}-7\terror: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
        "This server does not host this topic-partition.",
    ]
    # The low watermark was answered once every replica started there; the segments below are gone.
    _replicas_settle(brokers, topic, 0, log_start=1000)
    _replicas_settle(brokers, topic, 1, log_start=1500)

    # kafka-python's admin sends DeleteRecords to the leader too.
    admin = KafkaAdminClient(bootstrap_servers=brokers.broker_bootstrap(), request_timeout_ms=30000)
    try:
        answer = admin.delete_records({TopicPartition(topic, 0): 1200})
        assert answer[TopicPartition(topic, 0)]["low_watermark"] == 1200
        with pytest.raises(OffsetOutOfRangeError):  # past the high watermark: nothing moves
            admin.delete_records({TopicPartition(topic, 0): 1501})
    finally:
        admin.close()
    _replicas_settle(brokers, topic, 0, log_start=1200)

    # kill -9 of the leader right away: the restart keeps the log start (checkpointed at once).
    leader = next(n for n in brokers.brokers if brokers.partitions(n)[(topic, 0)]["leader"] == n)
    brokers.kill(leader)
    brokers.start(leader)
    brokers.wait_ready([leader])
    brokers.wait_isr(topic, 0, set(brokers.brokers))
    _replicas_settle(brokers, topic, 0, log_start=1200)

    consumer = KafkaConsumer(bootstrap_servers=brokers.broker_bootstrap(), enable_auto_commit=False, group_id=None)
    try:
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        assert consumer.beginning_offsets(tps) == {tps[0]: 1200, tps[1]: 1500}
    finally:
        consumer.close()
    kept = [(p, o, v) for p, o, v in acked if (p == 0 and o >= 1200)]
    stored = read_back(brokers, topic, 2)
    assert {k for k in stored if k[0] == 1} == set()  # all of partition 1 was deleted
    assert anomalies(kept, {k: v for k, v in stored.items() if k[1] >= 1200}) == {"lost": [], "duplicated": [], "reordered": []}
    assert min(o for p, o in stored if p == 0) == 1200  # the batch holding 1200 is trimmed by the consumer


def test_delete_records_on_a_compacted_topic_is_a_policy_violation(brokers: BrokerCluster) -> None:
    topic = "table"
    _create(brokers, topic, partitions=1, configs={"cleanup.policy": "compact"})
    send = KafkaProducer(bootstrap_servers=brokers.broker_bootstrap(), acks="all")
    for i in range(10):
        send.send(topic, key=b"k%d" % i, value=b"v", partition=0)
    send.flush()
    send.close()
    admin = KafkaAdminClient(bootstrap_servers=brokers.broker_bootstrap(), request_timeout_ms=30000)
    try:
        with pytest.raises(PolicyViolationError):
            admin.delete_records({TopicPartition(topic, 0): 5})
    finally:
        admin.close()
    for node_id in brokers.brokers:
        assert brokers.partitions(node_id)[(topic, 0)]["log_start_offset"] == 0
