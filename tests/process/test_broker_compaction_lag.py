"""`min.compaction.lag.ms` on real broker processes: a compacted topic's records stay out of
cleaning until they are that old, as Kafka's LogCleanerManager keeps them out.

kafka-python writes 200 keyed records stamped two hours ago (they fill the first 1 MiB segment
and start the second), then 200 more of the same 25 keys stamped now, to a topic with
`min.compaction.lag.ms` of one hour. Every replica compacts the old segment down to one record per
key, and nothing after it: the second segment holds a record younger than the lag, so every
recent record, superseded or not, stays readable at its offset. Without the lag the cleaner would
remove the superseded recent records in the sealed segments too.
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
from test_broker_cluster import create_topic
from test_broker_storage import _latest_by_key, _replica_bytes

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer

pytestmark = [
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

_HOUR_MS = 3_600_000
_VALUE_BYTES = 8_000


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[BrokerCluster]:
    cluster = BrokerCluster(root=tmp_path, broker_config={"log.cleaner.backoff.ms": "300"})
    try:
        start_cluster(cluster)
        yield cluster
    finally:
        cluster.cleanup()


def test_records_younger_than_min_compaction_lag_are_not_compacted(brokers: BrokerCluster) -> None:
    topic = "lagged"
    create_topic(brokers, topic, partitions=1, replication_factor=3,
                 configs={"cleanup.policy": "compact", "segment.bytes": "1048576",
                          "min.compaction.lag.ms": str(_HOUR_MS)})
    send = KafkaProducer(bootstrap_servers=brokers.broker_bootstrap(), acks="all", linger_ms=0,
                         request_timeout_ms=30000)
    written: dict[bytes, bytes] = {}
    try:
        now_ms = int(time.time() * 1000)
        for i in range(400):
            key, value = f"key-{i % 25}".encode(), f"value-{i}-".encode() + random.randbytes(_VALUE_BYTES)
            stamp = now_ms - 2 * _HOUR_MS if i < 200 else now_ms
            metadata = send.send(topic, key=key, value=value, partition=0, timestamp_ms=stamp).get(timeout=60)
            assert metadata.offset == i
            written[key] = value
    finally:
        send.close()
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
