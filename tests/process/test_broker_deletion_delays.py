"""Kafka's deletion delays on real broker processes: `file.delete.delay.ms` for segments and the
broker's `log.segment.delete.delay.ms` for a deleted topic's replicas.

Kafka never unlinks a segment the moment retention or DeleteRecords drops it: the files are
renamed `.deleted` and unlinked after the topic's `file.delete.delay.ms`, so a fetch that located
them a moment before is not cut off. A deleted topic's replica directory is renamed
`<topic>-<p>.<uuid>-delete` and removed after the broker's delay, also when the broker restarted
in between (the delay then counts from the start). Here: kafka-python's DeleteRecords on a topic
with a 30 s delay leaves `.deleted` files on every replica while the rest reads back whole, and
they are gone after the delay; the topic deleted leaves a `-delete` directory on every broker, a
kill -9 and restart of one keeps its copy until the delay passed again, and then none is left.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_processes import BrokerCluster, start_cluster
from quorum_processes import wait_for
from record_checks import CLEAN, anomalies
from test_broker_cluster import create_topic, read_back
from test_broker_log_management import produce_numbered

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

pytestmark = [
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

_TOPIC_DELAY_MS = 30_000
_BROKER_DELAY_MS = 60_000  # Kafka's default


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[BrokerCluster]:
    cluster = BrokerCluster(root=tmp_path, broker_config={"log.segment.delete.delay.ms": str(_BROKER_DELAY_MS)})
    try:
        start_cluster(cluster)
        yield cluster
    finally:
        cluster.cleanup()


def _files(cluster: BrokerCluster, broker: int, pattern: str) -> list[str]:
    return sorted(p.name for p in (cluster.root / f"broker-{broker}").glob(pattern))


def test_deleted_segments_and_a_deleted_topics_replicas_wait_out_kafkas_delays(brokers: BrokerCluster) -> None:
    topic = "aging"
    create_topic(brokers, topic, partitions=1, replication_factor=3,
                 configs={"segment.bytes": str(1024 * 1024), "file.delete.delay.ms": str(_TOPIC_DELAY_MS)})
    acked = produce_numbered(brokers, topic, partitions=1, count=3000)
    segments = _files(brokers, 101, f"data-*/{topic}-0/*.log")
    assert len(segments) >= 3, segments

    admin = KafkaAdminClient(bootstrap_servers=brokers.broker_bootstrap(), request_timeout_ms=30000)
    try:
        # Answered once every replica starts at 2000: each has renamed its segments below it.
        asked_at = time.monotonic()  # no replica renamed anything before this
        assert admin.delete_records({TopicPartition(topic, 0): 2000})[TopicPartition(topic, 0)]["low_watermark"] == 2000
        for broker in sorted(brokers.brokers):
            waiting = _files(brokers, broker, f"data-*/{topic}-0/*.log.deleted")
            live = [int(name.split(".")[0]) for name in _files(brokers, broker, f"data-*/{topic}-0/*.log")]
            assert waiting and len(live) + len(waiting) == len(segments), (broker, waiting, live)
            assert all(int(name.split(".")[0]) < min(live) <= 2000 for name in waiting), (broker, waiting, live)
        stored = read_back(brokers, topic, 1)
        assert anomalies([a for a in acked if a[1] >= 2000], {k: v for k, v in stored.items() if k[1] >= 2000}) == CLEAN
        wait_for(lambda: all(_files(brokers, b, f"data-*/{topic}-0/*.deleted") == [] for b in brokers.brokers),
                 timeout_s=150, what="every replica to unlink its .deleted files after file.delete.delay.ms")
        assert time.monotonic() - asked_at >= _TOPIC_DELAY_MS / 1000  # not before the delay

        asked_at = time.monotonic()
        admin.delete_topics([topic], timeout_ms=30000)
    finally:
        admin.close()
    wait_for(lambda: all(_files(brokers, b, f"data-*/{topic}-0") == [] for b in brokers.brokers), timeout_s=90,
             what="every broker to rename its replica of the deleted topic")
    pending = {b: _files(brokers, b, f"data-*/{topic}-0.*-delete") for b in brokers.brokers}
    assert all(len(names) == 1 for names in pending.values()), pending

    # A broker killed and restarted meanwhile keeps its renamed copy until the delay passes again.
    brokers.kill(102)
    restarted_at = time.monotonic()  # the restarted broker counts its delay from after this
    brokers.start(102)
    brokers.wait_ready([102])
    assert _files(brokers, 102, f"data-*/{topic}-0.*-delete") == pending[102]
    wait_for(lambda: all(_files(brokers, b, f"data-*/{topic}-0*") == [] for b in brokers.brokers), timeout_s=240,
             what="every broker to remove the deleted topic's replica after log.segment.delete.delay.ms")
    assert time.monotonic() - restarted_at >= _BROKER_DELAY_MS / 1000
    assert time.monotonic() - asked_at >= _BROKER_DELAY_MS / 1000
