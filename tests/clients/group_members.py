"""One consumer-group member and one producer per real client (kafka-python, aiokafka,
confluent-kafka), each in its own thread, so one test body drives all three.

A member polls, and after each batch commits the next offsets synchronously; a batch counts as
read (`Ledger.committed`) only once its commit succeeded. When a commit fails because the group
moved on, the member seeks back to the batch's first offsets for the partitions it still holds,
as an application that wants each record processed once does; a partition it lost is read again
by its next owner from the committed offset.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from group_workload import PARTITIONS, Ledger, value

TIMEOUT_S = 120
CLIENTS = ("kafka-python", "aiokafka", "confluent-kafka")


class Member:
    def __init__(self, client: str, name: str, *, bootstrap: str, topic: str, group: str, ledger: Ledger) -> None:
        self.client = client
        self.name = name
        self.assigned: set[int] = set()
        self.errors: list[BaseException] = []
        self._bootstrap, self._topic, self._group, self._ledger = bootstrap, topic, group, ledger
        self._stop = threading.Event()
        target = {"kafka-python": self._run_kafka_python, "aiokafka": self._run_aiokafka,
                  "confluent-kafka": self._run_confluent}[client]
        self._thread = threading.Thread(target=self._guarded, args=(target,), name=name, daemon=True)
        self._thread.start()

    def _guarded(self, target: Any) -> None:
        try:
            target()
        except BaseException as error:  # reported by the test
            self.errors.append(error)

    def leave(self) -> None:
        self._stop.set()
        self._thread.join(timeout=TIMEOUT_S)
        assert not self._thread.is_alive(), f"{self.name} did not stop"
        assert self.errors == [], self.errors

    # -- kafka-python ------------------------------------------------------------------------------
    def _run_kafka_python(self) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        consumer = KafkaConsumer(
            self._topic, bootstrap_servers=self._bootstrap, group_id=self._group, client_id=self.name,
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=30_000,
            heartbeat_interval_ms=1000, max_poll_records=40, request_timeout_ms=60_000, retry_backoff_ms=200,
        )
        try:
            while not self._stop.is_set():
                polled = consumer.poll(timeout_ms=300)
                self.assigned = {tp.partition for tp in consumer.assignment()}
                batch = [(r.partition, r.offset, r.value) for records in polled.values() for r in records]
                if not batch:
                    continue
                try:
                    consumer.commit({tp: OffsetAndMetadata(rs[-1].offset + 1, "", -1) for tp, rs in polled.items()})
                except KafkaError:
                    _rewind(consumer, polled)
                    continue
                self._ledger.committed(self.name, batch)
        finally:
            consumer.close()  # LeaveGroup

    # -- aiokafka ------------------------------------------------------------------------------------
    def _run_aiokafka(self) -> None:
        asyncio.run(self._aiokafka())

    async def _aiokafka(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.errors import KafkaError

        consumer = AIOKafkaConsumer(
            self._topic, bootstrap_servers=self._bootstrap, group_id=self._group, client_id=self.name,
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=30_000,
            heartbeat_interval_ms=1000, max_poll_records=40, request_timeout_ms=60_000, retry_backoff_ms=200,
        )
        await consumer.start()
        try:
            while not self._stop.is_set():
                polled = await consumer.getmany(timeout_ms=300)
                self.assigned = {tp.partition for tp in consumer.assignment()}
                batch = [(r.partition, r.offset, r.value) for records in polled.values() for r in records]
                if not batch:
                    continue
                try:
                    await consumer.commit({tp: rs[-1].offset + 1 for tp, rs in polled.items()})
                except KafkaError:
                    _rewind(consumer, polled)
                    continue
                self._ledger.committed(self.name, batch)
        finally:
            await consumer.stop()  # LeaveGroup

    # -- confluent-kafka (librdkafka) ----------------------------------------------------------------
    def _run_confluent(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({
            "bootstrap.servers": self._bootstrap, "group.id": self._group, "client.id": self.name,
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 30_000,
            "heartbeat.interval.ms": 1000, "partition.assignment.strategy": "range",
        })
        consumer.subscribe([self._topic])
        try:
            while not self._stop.is_set():
                messages = consumer.consume(num_messages=40, timeout=0.3)
                self.assigned = {tp.partition for tp in consumer.assignment()}
                records = [m for m in messages if m.error() is None]
                if not records:
                    continue
                first: dict[int, int] = {}
                last: dict[int, int] = {}
                for m in records:
                    first.setdefault(m.partition(), m.offset())
                    last[m.partition()] = m.offset()
                try:
                    consumer.commit(offsets=[TopicPartition(self._topic, p, o + 1) for p, o in last.items()],
                                    asynchronous=False)
                except KafkaException:
                    held = {tp.partition for tp in consumer.assignment()}
                    for p, o in first.items():
                        if p in held:
                            consumer.seek(TopicPartition(self._topic, p, o))
                    continue
                self._ledger.committed(self.name, [(m.partition(), m.offset(), m.value()) for m in records])
        finally:
            consumer.close()  # LeaveGroup


def _rewind(consumer: Any, polled: dict[Any, list[Any]]) -> None:
    """Seek back to a batch's first offsets on the partitions still held (kafka-python and aiokafka
    share the consumer calls used here)."""
    for tp, records in polled.items():
        if tp in consumer.assignment():
            consumer.seek(tp, records[0].offset)


def produce(client: str, bootstrap: str, topic: str, numbers: range) -> list[tuple[int, int, bytes]]:
    """Records `v-<i>` to partition i % PARTITIONS with acks=all and idempotence: (partition, offset, value) acked."""
    if client == "kafka-python":
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                                 request_timeout_ms=60_000)
        try:
            futures = [(i, producer.send(topic, value(i), partition=i % PARTITIONS)) for i in numbers]
            return [(m.partition, m.offset, value(i)) for i, f in futures for m in (f.get(timeout=TIMEOUT_S),)]
        finally:
            producer.close()
    if client == "aiokafka":
        return asyncio.run(_aiokafka_produce(bootstrap, topic, numbers))
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    reports: list[tuple[Any, int, int, bytes]] = []
    for i in numbers:
        producer.produce(topic, value=value(i), partition=i % PARTITIONS,
                         on_delivery=lambda err, msg: reports.append((err, msg.partition(), msg.offset(), msg.value())))
    assert producer.flush(TIMEOUT_S) == 0
    assert [r for r in reports if r[0] is not None] == []
    return [(p, o, v) for _, p, o, v in reports]


async def _aiokafka_produce(bootstrap: str, topic: str, numbers: range) -> list[tuple[int, int, bytes]]:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                                request_timeout_ms=60_000)
    await producer.start()
    try:
        futures = [(i, await producer.send(topic, value(i), partition=i % PARTITIONS)) for i in numbers]
        return [(m.partition, m.offset, value(i)) for i, f in futures for m in (await f,)]
    finally:
        await producer.stop()


def create_topic(bootstrap: str, topic: str, *, replication_factor: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, replication_factor)], request_timeout=60).values():
        future.result(timeout=TIMEOUT_S)


def committed_and_ends(bootstrap: str, topic: str, group: str) -> tuple[dict[int, int], dict[int, int]]:
    """The group's committed offsets (OffsetFetch) and the partitions' end offsets, read with librdkafka."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=60)}
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=60)[1] for p in range(PARTITIONS)}
        return committed, ends
    finally:
        consumer.close()
