"""Offset retention on a real broker: a simple group's committed offsets expire
`offsets.retention.minutes` after their commit (Kafka's rule for groups without a protocol
type), the coordinator writes tombstones for them and for the group, and a broker restarted with
kill -9 after that reloads `__consumer_offsets` without them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_processes import BrokerCluster, start_cluster
from group_members import TIMEOUT_S, committed_and_ends, create_topic, produce
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

    def expired() -> bool:
        offsets, _ = committed_and_ends(bootstrap, topic, group)
        return all(o < 0 for o in offsets.values())

    wait_for(expired, timeout_s=60 + TIMEOUT_S, what="the offsets to expire", interval_s=2)
    assert time.monotonic() - committed_at >= 60, "expired before offsets.retention.minutes passed"
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


def _retention_passed(committed_at: float) -> bool:
    """Whether offsets.retention.minutes (1) has passed since just before the commit was sent."""
    return time.monotonic() - committed_at >= 60
