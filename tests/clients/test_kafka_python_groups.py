"""kafka-python against three of our brokers: a consumer group of two that rebalances when one
member leaves and another joins (the workload and checks of `group_workload`), then a kill -9 of
the group coordinator's broker after which the committed offsets are still there and the group
resumes from them."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from broker_processes import BrokerCluster
from group_workload import PARTITIONS, PHASE_RECORDS, Ledger, check, value
from quorum_processes import wait_for

pytestmark = [
    pytest.mark.process,
    # kafka-python's admin client loads its schemas with importlib.resources' legacy calls.
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

TIMEOUT_S = 120


class Member:
    """One kafka-python consumer of the group, polling and committing in its own thread."""

    def __init__(self, name: str, *, bootstrap: str, topic: str, group: str, ledger: Ledger) -> None:
        from kafka import KafkaConsumer

        self.name = name
        self.assigned: set[int] = set()
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._ledger = ledger
        self._consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, client_id=name, enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=30_000, heartbeat_interval_ms=1000,
            max_poll_records=40, request_timeout_ms=60_000, retry_backoff_ms=200,
        )
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from kafka.errors import CommitFailedError, KafkaError
        from kafka.structs import OffsetAndMetadata

        consumer = self._consumer
        try:
            while not self._stop.is_set():
                polled = consumer.poll(timeout_ms=300)
                self.assigned = {tp.partition for tp in consumer.assignment()}
                batch = [(r.partition, r.offset, r.value) for records in polled.values() for r in records]
                if not batch:
                    continue
                offsets = {tp: OffsetAndMetadata(records[-1].offset + 1, "", -1) for tp, records in polled.items()}
                try:
                    consumer.commit(offsets)
                except (CommitFailedError, KafkaError):
                    # The group moved on before the commit: whoever owns these partitions now
                    # reads them again from the committed offsets.
                    for tp, records in polled.items():
                        if tp in consumer.assignment():
                            consumer.seek(tp, records[0].offset)
                    continue
                self._ledger.committed(self.name, batch)
        except BaseException as error:  # reported by the test
            self.errors.append(error)
        finally:
            consumer.close()  # LeaveGroup

    def leave(self) -> None:
        self._stop.set()
        self._thread.join(timeout=TIMEOUT_S)
        assert not self._thread.is_alive(), f"{self.name} did not stop"
        assert self.errors == [], self.errors


def produce(bootstrap: str, topic: str, numbers: range) -> list[tuple[int, int, bytes]]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                             request_timeout_ms=60_000)
    try:
        futures = [(i, producer.send(topic, value(i), partition=i % PARTITIONS)) for i in numbers]
        return [(m.partition, m.offset, value(i)) for i, f in futures for m in (f.get(timeout=TIMEOUT_S),)]
    finally:
        producer.close()


def create_topic(bootstrap: str, topic: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60_000)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 3)])
    finally:
        admin.close()


def committed_and_ends(bootstrap: str, topic: str, group: str) -> tuple[dict[int, int], dict[int, int]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             request_timeout_ms=60_000)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
        committed = {tp.partition: consumer.committed(tp) for tp in tps}
        return committed, ends  # type: ignore[return-value]
    finally:
        consumer.close()


def assignment_is(members: list[Member], predicate: Callable[[list[set[int]]], bool]) -> bool:
    for member in members:
        assert member.errors == [], (member.name, member.errors)
    return predicate([m.assigned for m in members])


def splits_all(assignments: list[set[int]]) -> bool:
    """Every member holds partitions, no partition twice, all of them held."""
    return all(assignments) and sum(len(a) for a in assignments) == PARTITIONS and \
        set().union(*assignments) == set(range(PARTITIONS))


def test_group_of_two_rebalances_on_leave_and_join_reading_every_record_once(group_brokers: BrokerCluster) -> None:
    bootstrap = group_brokers.broker_bootstrap()
    topic, group = "kp-group-orders", "kp-group"
    create_topic(bootstrap, topic)
    for partition in range(PARTITIONS):
        group_brokers.wait_isr(topic, partition, set(group_brokers.brokers))
    ledger = Ledger()
    a = Member("member-a", bootstrap=bootstrap, topic=topic, group=group, ledger=ledger)
    b = Member("member-b", bootstrap=bootstrap, topic=topic, group=group, ledger=ledger)
    wait_for(lambda: assignment_is([a, b], splits_all), timeout_s=TIMEOUT_S, what="a and b to share the partitions")
    acked = produce(bootstrap, topic, range(PHASE_RECORDS))
    wait_for(lambda: ledger.count() == PHASE_RECORDS, timeout_s=TIMEOUT_S, what="the first records read")
    assert ledger.members_with_reads() == {"member-a", "member-b"}

    b.leave()
    wait_for(lambda: assignment_is([a], splits_all), timeout_s=TIMEOUT_S, what="a to hold every partition")
    acked += produce(bootstrap, topic, range(PHASE_RECORDS, 2 * PHASE_RECORDS))
    wait_for(lambda: ledger.count() == 2 * PHASE_RECORDS, timeout_s=TIMEOUT_S, what="the second records read")

    c = Member("member-c", bootstrap=bootstrap, topic=topic, group=group, ledger=ledger)
    wait_for(lambda: assignment_is([a, c], splits_all), timeout_s=TIMEOUT_S, what="a and c to share the partitions")
    acked += produce(bootstrap, topic, range(2 * PHASE_RECORDS, 3 * PHASE_RECORDS))
    wait_for(lambda: ledger.count() == 3 * PHASE_RECORDS, timeout_s=TIMEOUT_S, what="the third records read")
    assert "member-c" in ledger.members_with_reads()
    a.leave()
    c.leave()
    committed, ends = committed_and_ends(bootstrap, topic, group)
    check(acked, ledger, committed, ends)
