"""Real clients not written here against three of our brokers and three controllers, all real
processes: aiokafka (pure Python, asyncio) and confluent-kafka (librdkafka, the C client), each
creating its topic through a broker (forwarded to the active controller in an Envelope),
producing with acks=all and idempotence, and reading every partition back by offset. kafka-python
runs the same path in test_broker_cluster.py.

These clients found what our own tests had not: librdkafka negotiates CreateTopics v4 and aiokafka
v3, so a broker that forwarded only the controller's newest version was refused as "not
supported"; and librdkafka's Metadata request for all topics carries three bytes after its body,
which Kafka ignores and our listener closed the connection over.

One cluster serves the module (a cluster start is most of a test's time on a loaded machine);
each test has its own topic.
"""

from __future__ import annotations

import asyncio

import pytest
from broker_processes import BrokerCluster
from quorum_processes import wait_for
from record_checks import CLEAN, add_read, anomalies

pytestmark = [pytest.mark.process]

PARTITIONS = 3
RECORDS = 300
_TIMESTAMP_BASE_MS = 1_700_000_000_000
_TIMESTAMP_STEP_MS = 10


@pytest.fixture
def cluster(module_brokers: BrokerCluster) -> BrokerCluster:
    return module_brokers


def _wait_replicated(cluster: BrokerCluster, topic: str) -> None:
    for partition in range(PARTITIONS):
        cluster.wait_isr(topic, partition, set(cluster.brokers))


def _value(i: int) -> bytes:
    return f"v-{i}".encode()


# --- aiokafka -----------------------------------------------------------------------------------


async def test_aiokafka_creates_produces_idempotently_with_acks_all_and_reads_back_by_offset(cluster: BrokerCluster) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = "aiokafka-orders"
    bootstrap = cluster.broker_bootstrap()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    await admin.start()
    try:
        created = await admin.create_topics([NewTopic(topic, PARTITIONS, 3)])
    finally:
        await admin.close()
    assert [(t, code) for t, code, *_ in created.topic_errors] == [(topic, 0)]
    await asyncio.to_thread(_wait_replicated, cluster, topic)

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                compression_type="gzip", linger_ms=5, request_timeout_ms=30000)
    await producer.start()
    try:
        futures = [await producer.send(topic, _value(i), partition=i % PARTITIONS) for i in range(RECORDS)]
        acked = [(m.partition, m.offset, _value(i)) for i, m in enumerate(await asyncio.gather(*futures))]
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, request_timeout_ms=30000)
    await consumer.start()
    try:
        assignment = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(assignment)
        ends = await consumer.end_offsets(assignment)
        assert set(ends.values()) == {RECORDS // PARTITIONS}
        for tp in assignment:
            consumer.seek(tp, 0)
        stored: dict[tuple[int, int], bytes] = {}
        while [tp for tp in assignment if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=2000)).values():
                for record in records:
                    add_read(stored, partition=record.partition, offset=record.offset, value=record.value)
        # From an offset in the middle: the first record there is the one acknowledged at it.
        middle = TopicPartition(topic, 1)
        consumer.seek(middle, 42)
        first = await consumer.getone(middle)
    finally:
        await consumer.stop()
    assert anomalies(acked, stored) == CLEAN
    assert len(stored) == RECORDS
    assert (first.offset, first.value) == (42, stored[(1, 42)])


# --- confluent-kafka (librdkafka) ---------------------------------------------------------------


def test_librdkafka_creates_produces_idempotently_with_acks_all_and_reads_back_by_offset(cluster: BrokerCluster) -> None:
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    topic = "librdkafka-orders"
    bootstrap = cluster.broker_bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 3)], request_timeout=30).values():
        future.result(timeout=60)
    _wait_replicated(cluster, topic)
    described = admin.list_topics(topic, timeout=30).topics[topic]
    assert described.error is None
    assert sorted(described.partitions) == list(range(PARTITIONS))
    assert all(sorted(p.replicas) == sorted(cluster.brokers) for p in described.partitions.values())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "request.timeout.ms": 30000})
    reports: list[tuple[object, int, int, bytes]] = []
    for i in range(RECORDS):
        producer.produce(topic, value=_value(i), partition=i % PARTITIONS,
                         timestamp=_TIMESTAMP_BASE_MS + i * _TIMESTAMP_STEP_MS,
                         on_delivery=lambda err, msg: reports.append((err, msg.partition(), msg.offset(), msg.value())))
    assert producer.flush(120) == 0
    assert [r for r in reports if r[0] is not None] == []
    acked = [(partition, offset, value) for _, partition, offset, value in reports]

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        per_partition = RECORDS // PARTITIONS
        for partition in range(PARTITIONS):
            assert consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30) == (0, per_partition)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        stored: dict[tuple[int, int], bytes] = {}
        at_end: set[int] = set()
        while len(at_end) < PARTITIONS:
            message = consumer.poll(30)
            assert message is not None, "no record and no end of partition within 30 s"
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
                continue
            add_read(stored, partition=message.partition(), offset=message.offset(), value=message.value())
        # ListOffsets by timestamp: partition 0 holds records 0, 3, 6, ... (offset k holds 3k).
        target = _TIMESTAMP_BASE_MS + 3 * 7 * _TIMESTAMP_STEP_MS - 1
        found = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=30)
        assert [(tp.partition, tp.offset) for tp in found] == [(0, 7)]
        # A partition read from an offset in the middle.
        consumer.assign([TopicPartition(topic, 2, 42)])
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        assert (message.offset(), message.value()) == (42, _value(3 * 42 + 2))
    finally:
        consumer.close()
    assert anomalies(acked, stored) == CLEAN
    assert len(stored) == RECORDS

    # CreatePartitions, forwarded in an Envelope at the version librdkafka negotiates.
    for future in admin.create_partitions([NewPartitions(topic, PARTITIONS + 1)], request_timeout=30).values():
        future.result(timeout=60)
    wait_for(lambda: len(admin.list_topics(topic, timeout=30).topics[topic].partitions) == PARTITIONS + 1,
             timeout_s=60, what="the fourth partition in Metadata")
