"""The broker's storage layer seen through real clients and real processes: every compression codec
Kafka defines, produced by kafka-python and by librdkafka (confluent-kafka, its own codec code),
stored as received and read back by both."""

from __future__ import annotations

import warnings

import pytest
import test_broker_cluster
from broker_processes import BrokerCluster
from quorum_processes import kraft_tool
from test_broker_cluster import anomalies, create_topic, read_back

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = [
    pytest.mark.process,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

CODECS = ("gzip", "snappy", "lz4", "zstd")

brokers = test_broker_cluster.brokers  # three controllers and three brokers, per test


def _kafka_python_send(cluster: BrokerCluster, topic: str, codec: str, values: list[bytes]) -> list[tuple[int, int, bytes]]:
    send = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all", enable_idempotence=True,
                         compression_type=codec, linger_ms=20, request_timeout_ms=30000)
    try:
        futures = [(value, send.send(topic, value=value, partition=0)) for value in values]
        send.flush()
        return [(m.partition, m.offset, value) for value, m in ((v, f.get(timeout=60)) for v, f in futures)]
    finally:
        send.close()


def _librdkafka_send(cluster: BrokerCluster, topic: str, codec: str, values: list[bytes]) -> list[tuple[int, int, bytes]]:
    acked: list[tuple[int, int, bytes]] = []
    errors: list[str] = []

    def delivered(error: object, message: object) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            acked.append((message.partition(), message.offset(), message.value()))  # type: ignore[attr-defined]

    send = confluent_kafka.Producer({"bootstrap.servers": cluster.broker_bootstrap(), "acks": "all",
                                     "enable.idempotence": True, "compression.codec": codec, "linger.ms": 20})
    for value in values:
        send.produce(topic, value=value, partition=0, on_delivery=delivered)
        send.poll(0)
    assert send.flush(60) == 0
    assert errors == []
    return acked


def _librdkafka_read(cluster: BrokerCluster, topic: str, count: int) -> dict[tuple[int, int], bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.broker_bootstrap(), "group.id": "unused",
                                         "enable.auto.commit": False})
    stored: dict[tuple[int, int], bytes] = {}
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        idle = 0
        while len(stored) < count and idle < 30:
            message = consumer.poll(2.0)
            if message is None:
                idle += 1
                continue
            assert message.error() is None, message.error()
            stored[(message.partition(), message.offset())] = message.value()
    finally:
        consumer.close()
    return stored


def test_every_codec_from_kafka_python_and_librdkafka_is_stored_as_received_and_read_back(brokers: BrokerCluster) -> None:
    topic = "codecs"
    create_topic(brokers, topic, partitions=1, replication_factor=3)
    acked: list[tuple[int, int, bytes]] = []
    number = 0
    for codec in CODECS:
        for client, send in (("kafkapython", _kafka_python_send), ("librdkafka", _librdkafka_send)):
            values = [f"{client}.{codec}-{number + i}-".encode() + b"x" * (i % 50) for i in range(150)]
            number += len(values)
            acked += send(brokers, topic, codec, values)
    assert len(acked) == number
    stored = read_back(brokers, topic, 1)
    assert anomalies(acked, stored) == {"lost": [], "duplicated": [], "reordered": []}
    assert len(stored) == number
    assert _librdkafka_read(brokers, topic, number) == stored
    # Stored as received: every replica's segment holds batches of each codec, with every record
    # decodable by `kraft dump-log --deep-iteration` (which decompresses them as Kafka's tool does).
    for node_id in brokers.brokers:
        segments = list((brokers.root / f"broker-{node_id}").glob(f"data-*/{topic}-0/*.log"))
        assert len(segments) == 1
        dump = kraft_tool("dump-log", "--deep-iteration", "--files", str(segments[0]), check=True).stdout
        for codec in CODECS:
            assert f"compresscodec: {codec}" in dump
        assert dump.count("valueSize:") == number
