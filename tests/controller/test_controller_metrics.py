"""The controller's metrics snapshot: what an operator's dashboard reads off the active controller
and off a standby."""

from __future__ import annotations

import uuid

from kraft_engine.raft import CommittedBatch
from kraft_engine.records import TopicRecord

from .harness import Harness
from .test_producer_ids_and_replay import _standby


def test_the_active_controller_reports_brokers_topics_partitions_and_offsets() -> None:
    h = Harness().unfenced(1, 2, 3)
    h.create_topic("orders", assignments=[[1, 2], [1, 2], [3, 1]])
    h.create_topic("payments", assignments=[[2], [3]])
    h.alter_isr("orders", 0, [1])
    h.now_ms = 5000
    h.heartbeat(1, want_fence=True)
    metrics = h.controller.metrics(now_ms=5250)
    assert (metrics.active_controller_count, metrics.new_active_controllers_count) == (1, 1)
    assert (metrics.fenced_broker_count, metrics.active_broker_count) == (1, 2)
    assert (metrics.global_topic_count, metrics.global_partition_count) == (2, 5)
    # orders-0 lost its only in-sync replica; orders-1 is now led by its second replica.
    assert metrics.offline_partitions_count == 1
    assert metrics.preferred_replica_imbalance_count == 1
    assert metrics.metadata_error_count == 0
    assert metrics.last_applied_record_offset == metrics.last_committed_record_offset
    assert metrics.last_applied_record_offset == h.controller.last_committed_record_offset()
    assert metrics.last_applied_record_timestamp_ms == 5000 and metrics.last_applied_record_lag_ms == 250


def test_a_standby_reports_what_it_applied_and_when_it_was_appended() -> None:
    standby = _standby()
    standby.handle_commit(CommittedBatch(0, 1, (TopicRecord(name="orders", topic_id=uuid.uuid4()),), 0,
                                         append_timestamp_ms=1000))
    metrics = standby.metrics(now_ms=1600)
    assert metrics.active_controller_count == 0 and metrics.new_active_controllers_count == 0
    assert metrics.global_topic_count == 1
    assert (metrics.last_applied_record_offset, metrics.last_committed_record_offset) == (0, 0)
    assert metrics.last_applied_record_lag_ms == 600
