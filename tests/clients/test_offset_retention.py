"""Offset retention on a real broker: a simple group's committed offsets expire
`offsets.retention.minutes` after their commit (Kafka's rule for groups without a protocol
type), the coordinator writes tombstones for them and for the group, and a broker restarted with
kill -9 after that reloads `__consumer_offsets` without them. A consumer group's offsets follow
Kafka's other two rules (KIP-211): while the group is Stable, only the offsets of topics no member
subscribes to expire (a minute after their commit); once it is Empty, all of them expire a minute
after it became Empty, and the group goes with them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_processes import BrokerCluster, start_cluster
from group_members import TIMEOUT_S, committed_and_ends, create_topic, produce
from group_workload import PARTITIONS
from quorum_processes import kraft, wait_for

pytestmark = [pytest.mark.process]


@pytest.fixture
def one_broker(tmp_path: Path) -> Iterator[BrokerCluster]:
    processes = BrokerCluster(root=tmp_path)
    processes.broker_config.update({
        "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "2",
        "offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "1000",
        "group.initial.rebalance.delay.ms": "0",
    })
    try:
        start_cluster(processes, controllers=1, brokers=1)
        yield processes
    finally:
        processes.cleanup()


def test_a_simple_groups_offsets_expire_after_retention_and_stay_gone_after_a_restart(one_broker: BrokerCluster) -> None:
    bootstrap = one_broker.broker_bootstrap()
    topic, group = "retained-orders", "simple-group"
    create_topic(bootstrap, topic, replication_factor=1)
    produce("confluent-kafka", bootstrap, topic, range(20))
    # A simple commit (no members, generation -1), as an admin's reset makes it.
    committed_at = time.monotonic()
    kraft("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", group, "--topic", topic,
          "--to-latest", "--execute", timeout_s=TIMEOUT_S, check=True)
    # Each look is a tool's process; on a loaded machine the minute can pass before they are done.
    # Until it has, the offsets are there and the group is listed; after it, either may be gone.
    committed, ends = committed_and_ends(bootstrap, topic, group)
    assert committed == ends or _retention_passed(committed_at), (committed, ends)
    listed = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--list", timeout_s=TIMEOUT_S,
                   check=True).stdout.split()
    assert group in listed or _retention_passed(committed_at), listed

    _wait_expired(bootstrap, topic, group, since=committed_at)
    assert group not in kraft("consumer-groups", "--bootstrap-server", bootstrap, "--list", timeout_s=TIMEOUT_S,
                              check=True).stdout.split()

    broker = next(iter(one_broker.brokers))
    one_broker.kill(broker)
    # Restarted with no expiry check for 10 minutes: only the tombstones can keep the offsets gone.
    one_broker.broker_config["offsets.retention.check.interval.ms"] = "600000"
    one_broker.write_config(one_broker.nodes[broker])
    one_broker.start(broker)
    one_broker.wait_ready([broker])
    offsets, _ = committed_and_ends(bootstrap, topic, group)
    assert all(o < 0 for o in offsets.values()), "the tombstones were written: a reload does not bring them back"


def _wait_expired(bootstrap: str, topic: str, group: str, *, since: float,
                  meanwhile: Callable[[], object] = lambda: None) -> None:
    """Wait until the group has no committed offset of the topic, then check that
    offsets.retention.minutes (1) had passed since `since` (taken before the clock started)."""
    def expired() -> bool:
        meanwhile()
        offsets, _ = committed_and_ends(bootstrap, topic, group)
        return all(o < 0 for o in offsets.values())
    wait_for(expired, timeout_s=60 + TIMEOUT_S, what=f"the offsets of {topic} to expire", interval_s=2)
    assert time.monotonic() - since >= 60, "expired before offsets.retention.minutes passed"


def _retention_passed(committed_at: float) -> bool:
    """Whether offsets.retention.minutes (1) has passed since just before the commit was sent."""
    return time.monotonic() - committed_at >= 60


@pytest.mark.timeout(900)
def test_a_consumer_groups_offsets_expire_when_unsubscribed_or_a_minute_after_the_group_is_empty(
        one_broker: BrokerCluster) -> None:
    from confluent_kafka import Consumer, TopicPartition

    bootstrap = one_broker.broker_bootstrap()
    subscribed, unsubscribed, group = "subscribed-orders", "unsubscribed-orders", "consumer-group"
    for topic in (subscribed, unsubscribed):
        create_topic(bootstrap, topic, replication_factor=1)
        produce("confluent-kafka", bootstrap, topic, range(20))
    # A session long enough that a loaded machine never drops the member: the group stays Stable.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 60000, "heartbeat.interval.ms": 2000,
                         "max.poll.interval.ms": 600000})
    try:
        consumer.subscribe([subscribed])
        read: list[object] = []

        def read_all() -> bool:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                read.append(message)
            return len(read) == 20
        wait_for(read_all, timeout_s=TIMEOUT_S, what="the consumer to read its topic", interval_s=0)
        before_commits = time.monotonic()
        consumer.commit(asynchronous=False)
        consumer.commit(offsets=[TopicPartition(unsubscribed, p, 3) for p in range(PARTITIONS)], asynchronous=False)
        after_commits = time.monotonic()

        _wait_expired(bootstrap, unsubscribed, group, since=before_commits, meanwhile=lambda: consumer.poll(0.2))

        def a_minute_past_the_commits() -> bool:
            consumer.poll(0.5)
            return time.monotonic() - after_commits >= 65  # the retention check runs every second
        wait_for(a_minute_past_the_commits, timeout_s=70 + TIMEOUT_S, what="a minute past the commits", interval_s=0)
        committed, ends = committed_and_ends(bootstrap, subscribed, group)
        assert committed == ends, "a Stable group's subscribed offsets do not expire"
    finally:
        left_at = time.monotonic()
        consumer.close()

    committed, ends = committed_and_ends(bootstrap, subscribed, group)
    assert committed == ends or time.monotonic() - left_at >= 60, (committed, ends)

    _wait_expired(bootstrap, subscribed, group, since=left_at)  # a minute after the group became Empty
    assert group not in kraft("consumer-groups", "--bootstrap-server", bootstrap, "--list", timeout_s=TIMEOUT_S,
                              check=True).stdout.split()
