"""Kafka's cleanup delays on real broker processes: `file.delete.delay.ms` for segments, the
broker's `log.segment.delete.delay.ms` for a deleted topic's replicas, and `min.compaction.lag.ms`
and `max.compaction.lag.ms`.

Kafka never unlinks a segment the moment retention or DeleteRecords drops it: the files are
renamed `.deleted` and unlinked after the topic's `file.delete.delay.ms`, so a fetch that located
them a moment before is not cut off. A deleted topic's replica directory is renamed
`<topic>-<p>.<uuid>-delete` and removed after the broker's delay, also when the broker restarted
in between (the delay then counts from the start). Here: kafka-python's DeleteRecords on a topic
with a 30 s delay leaves `.deleted` files on every replica while the rest reads back whole, and
they are gone after the delay; the topic deleted leaves a `-delete` directory on every broker, a
kill -9 and restart of one keeps its copy until the delay passed again, and then none is left.

A compacted topic's records stay out of cleaning until they are `min.compaction.lag.ms` old, as
Kafka's LogCleanerManager keeps them out: kafka-python writes 200 keyed records stamped two hours
ago (they fill the first 1 MiB segment and start the second), then 200 more of the same 25 keys
stamped now, to a topic with a one-hour lag. Every replica compacts the old segment down to one
record per key, and nothing after it: the second segment holds a record younger than the lag, so
every recent record, superseded or not, stays readable at its offset. Without the lag the cleaner
would remove the superseded recent records in the sealed segments too.
"""

from __future__ import annotations

import random
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
from test_broker_storage import _latest_by_key, _replica_bytes

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient

pytestmark = [
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

_TOPIC_DELAY_MS = 30_000
_BROKER_DELAY_MS = 60_000  # Kafka's default
_HOUR_MS = 3_600_000
_VALUE_BYTES = 8_000


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[BrokerCluster]:
    cluster = BrokerCluster(root=tmp_path, broker_config={"log.segment.delete.delay.ms": str(_BROKER_DELAY_MS),
                                                          "log.cleaner.backoff.ms": "300"})
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


def test_records_younger_than_min_compaction_lag_are_not_compacted(brokers: BrokerCluster) -> None:
    topic = "lagged"
    create_topic(brokers, topic, partitions=1, replication_factor=3,
                 configs={"cleanup.policy": "compact", "segment.bytes": "1048576",
                          "min.compaction.lag.ms": str(_HOUR_MS)})
    written = _write_keyed(brokers, topic, count=400)
    segments = sorted(brokers.partitions(101)[(topic, 0)]["segments"])
    assert len(segments) >= 3 and segments[1] < 200, segments  # the first segment holds old records only
    first_segment_bytes = segments[1] * (_VALUE_BYTES + 80)  # at least what its records take
    written_bytes = 400 * _VALUE_BYTES
    # The old segment shrinks to one record per key on every replica (25 of its records).
    wait_for(lambda: all(_replica_bytes(brokers, n, topic) < written_bytes - first_segment_bytes / 2
                         for n in brokers.brokers), timeout_s=90,
             what="every replica to compact the segment older than min.compaction.lag.ms")
    time.sleep(2)  # several more cleaner passes (log.cleaner.backoff.ms=300): nothing else may go
    latest, offsets = _latest_by_key(brokers, topic)
    assert latest == written
    assert set(range(200, 400)) <= set(offsets)  # every recent record, superseded ones too
    assert len([o for o in offsets if o < segments[1]]) == 25  # the old segment: one record per key


def test_records_older_than_max_compaction_lag_are_compacted_whatever_the_dirty_ratio(brokers: BrokerCluster) -> None:
    """`max.compaction.lag.ms` (KIP-354): a topic whose `min.cleanable.dirty.ratio` of 1.0 never
    lets it be cleaned for dirtiness (Kafka cleans a log dirtier than the ratio, strictly) is
    cleaned once a dirty record is older than the lag; and the active segment of old records
    rolls when a record arrives more than the lag after its first one (Kafka's maxSegmentMs), so
    all of them are cleaned, not only the first segment's."""
    topic = "overdue"
    create_topic(brokers, topic, partitions=1, replication_factor=3,
                 configs={"cleanup.policy": "compact", "segment.bytes": "1048576", "min.cleanable.dirty.ratio": "1.0",
                          "max.compaction.lag.ms": str(_HOUR_MS)})
    written = _write_keyed(brokers, topic, count=201)  # 200 stamped two hours ago (two segments), one now
    segments = sorted(brokers.partitions(101)[(topic, 0)]["segments"])
    assert segments[-1] == 200 and len(segments) >= 3, segments  # the recent record rolled the old active segment
    # Both old segments shrink to one record per key (25 of 200) on every replica.
    wait_for(lambda: all(_replica_bytes(brokers, n, topic) < 30 * (_VALUE_BYTES + 80) for n in brokers.brokers),
             timeout_s=90, what="every replica to compact the records older than max.compaction.lag.ms")
    latest, offsets = _latest_by_key(brokers, topic)
    assert latest == written
    assert len([o for o in offsets if o < 200]) == 25 and 200 in offsets
    assert "below its dirty ratio" in brokers.nodes[101].log_path.read_text()


def _write_keyed(brokers: BrokerCluster, topic: str, *, count: int) -> dict[bytes, bytes]:
    """`count` records of 25 keys to partition 0, one at a time: the first 200 stamped two hours
    ago, the rest now; each key's latest value."""
    send = KafkaProducer(bootstrap_servers=brokers.broker_bootstrap(), acks="all", linger_ms=0,
                         request_timeout_ms=30000)
    written: dict[bytes, bytes] = {}
    try:
        now_ms = int(time.time() * 1000)
        for i in range(count):
            key, value = f"key-{i % 25}".encode(), f"value-{i}-".encode() + random.randbytes(_VALUE_BYTES)
            stamp = now_ms - 2 * _HOUR_MS if i < 200 else now_ms
            metadata = send.send(topic, key=key, value=value, partition=0, timestamp_ms=stamp).get(timeout=60)
            assert metadata.offset == i
            written[key] = value
    finally:
        send.close()
    return written
