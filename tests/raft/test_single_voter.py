"""A single-voter quorum elects itself at once, appends, and commits on its own flush."""

from __future__ import annotations

import random

import pytest
from raft_harness import Cluster

from kraft_engine.invariant import InvariantViolation
from kraft_engine.raft import (
    BufferFullError,
    CommittedBatch,
    LeaderChange,
    MemoryLog,
    NotLeaderError,
    RaftConfig,
    RaftNode,
    Role,
)
from kraft_engine.records.log_batch import parse_batches


def test_single_voter_becomes_leader_without_any_message() -> None:
    cluster = Cluster([1])
    node = cluster.node(1)
    assert node.role is Role.LEADER
    assert node.epoch == 1
    assert cluster.sent == []
    # The candidacy and the leadership were both persisted before anything could be sent.
    assert cluster[1].persisted is not None
    assert cluster[1].persisted.epoch == 1
    assert cluster[1].persisted.leader_id == 1


def test_single_voter_leader_writes_leader_change_and_commits_it() -> None:
    cluster = Cluster([1])
    node = cluster.node(1)
    batches = parse_batches(cluster[1].log.read(0, 1 << 20))
    assert len(batches) == 1
    assert batches[0].is_control
    assert batches[0].epoch == 1
    assert node.high_watermark == 1
    assert cluster[1].leader_changes == [LeaderChange(node.leader_and_epoch)]


def test_single_voter_append_commits_after_linger() -> None:
    cluster = Cluster([1], config=RaftConfig(append_linger_ms=25))
    node = cluster.node(1)
    last = node.append([b"a", b"b"], epoch=node.epoch, now_ms=cluster.now_ms)
    assert last == 2
    # Nothing is in the log before the linger time passes.
    assert node.log_end_offset == 1
    assert node.next_deadline_ms(cluster.now_ms) == cluster.now_ms + 25
    cluster.advance(25)
    assert node.log_end_offset == 3
    assert node.high_watermark == 3
    assert cluster[1].committed_values == [b"a", b"b"]
    data_batches = [b for b in cluster[1].committed if not b.control_records]
    assert [(b.base_offset, b.last_offset) for b in data_batches] == [(1, 2)]


def test_each_append_is_one_batch_and_appends_are_coalesced_until_linger() -> None:
    cluster = Cluster([1])
    node = cluster.node(1)
    node.append([b"x"], epoch=1, now_ms=cluster.now_ms)
    node.append([b"y", b"z"], epoch=1, now_ms=cluster.now_ms + 5)
    cluster.advance(30)
    data = [b for b in cluster[1].committed if isinstance(b, CommittedBatch) and not b.control_records]
    assert [b.records for b in data] == [(b"x", b"y", b"z")]


def test_append_with_a_stale_epoch_is_refused() -> None:
    cluster = Cluster([1])
    node = cluster.node(1)
    with pytest.raises(NotLeaderError):
        node.append([b"x"], epoch=node.epoch - 1, now_ms=cluster.now_ms)
    with pytest.raises(NotLeaderError):
        node.append([b"x"], epoch=node.epoch + 1, now_ms=cluster.now_ms)
    assert node.log_end_offset == 1


def test_single_voter_leader_never_resigns_on_check_quorum() -> None:
    cluster = Cluster([1], config=RaftConfig(fetch_timeout_ms=100))
    cluster.advance(10_000)
    assert cluster.node(1).role is Role.LEADER
    assert cluster.node(1).epoch == 1


def test_restarted_single_voter_resigns_then_leads_a_new_epoch() -> None:
    cluster = Cluster([1])
    cluster.node(1).append([b"v"], epoch=1, now_ms=cluster.now_ms)
    cluster.advance(30)
    record = cluster[1]
    restarted = cluster.restart(1)
    # Was leader in epoch 1: restarts Resigned in epoch 1, never leader again in that epoch.
    assert restarted.node.epoch >= 1
    cluster.advance(5_000)
    node = cluster.node(1)
    assert node.role is Role.LEADER
    assert node.epoch == 2
    assert record.log.end_offset().epoch == 2
    assert cluster[1].committed_values == [b"v"]


def test_bad_config_is_refused_with_the_kafka_key() -> None:
    with pytest.raises(ValueError, match=r"controller\.quorum\.election\.timeout\.ms"):
        RaftConfig(election_timeout_ms=0)


def test_node_starts_unattached_without_voters() -> None:
    node = RaftNode(
        config=RaftConfig(),
        node_id=7,
        directory_id=None,
        cluster_id="c",
        log=MemoryLog(),
        persisted=None,
        static_voters=None,
        rng=random.Random(1),
        now_ms=0,
    )
    assert node.role is Role.UNATTACHED
    assert not node.is_voter


def test_an_append_larger_than_a_batch_is_refused_and_nothing_is_written() -> None:
    from kraft_engine.raft import RecordBatchTooLargeError

    cluster = Cluster([1], config=RaftConfig(max_batch_size_bytes=1024))
    node = cluster.node(1)
    with pytest.raises(RecordBatchTooLargeError):
        node.append([b"x" * 2048], epoch=1, now_ms=cluster.now_ms)
    cluster.advance(100)
    assert node.log_end_offset == 1


def test_the_accumulator_refuses_appends_beyond_its_batch_limit() -> None:
    from kraft_engine.raft import BufferFullError

    cluster = Cluster([1], config=RaftConfig(max_batch_size_bytes=200, max_number_of_batches=2, append_linger_ms=1000))
    node = cluster.node(1)
    node.append([b"a" * 100], epoch=1, now_ms=cluster.now_ms)
    node.append([b"b" * 100], epoch=1, now_ms=cluster.now_ms)
    # Each record needs its own batch here; a third batch buffer is more than the limit of two.
    with pytest.raises(BufferFullError):
        node.append([b"c" * 100], epoch=1, now_ms=cluster.now_ms)
    cluster.advance(1_000)
    assert cluster[1].committed_values == [b"a" * 100, b"b" * 100]


def test_a_prepared_append_reaches_the_log_only_once_scheduled() -> None:
    # Kafka's prepareAppend / schedulePreparedAppend: raft reserves the offsets (after its own
    # control records) and writes nothing from the prepared batch on until it is scheduled.
    cluster = Cluster([1], config=RaftConfig(append_linger_ms=0))
    node = cluster.node(1)
    assert node.next_append_offset == 1  # the LeaderChangeMessage took offset 0
    assert node.prepare_append([b"a", b"b"], epoch=node.epoch, now_ms=cluster.now_ms) == 2
    assert node.next_append_offset == 3
    cluster.advance(100)
    assert node.log_end_offset == 1 and cluster[1].committed_values == []
    node.schedule_prepared_append()
    cluster.advance(1)
    assert node.log_end_offset == 3 and cluster[1].committed_values == [b"a", b"b"]


def test_a_prepared_append_never_scheduled_is_never_written() -> None:
    # The controller could not apply the records (a fatal fault): they must not be replicated,
    # even if the node resigns and drains its buffer on the way out.
    cluster = Cluster([1], config=RaftConfig(append_linger_ms=0))
    node = cluster.node(1)
    node.append([b"before"], epoch=node.epoch, now_ms=cluster.now_ms)
    cluster.advance(1)
    node.prepare_append([b"poison"], epoch=node.epoch, now_ms=cluster.now_ms)
    with pytest.raises(InvariantViolation, match="already waiting"):
        node.prepare_append([b"again"], epoch=node.epoch, now_ms=cluster.now_ms)
    cluster.apply(1, node.shutdown(1000, now_ms=cluster.now_ms))
    cluster.advance(2000)
    assert b"poison" not in cluster[1].log.read(0, 1 << 20)
    assert cluster[1].committed_values == [b"before"]


def test_a_writes_batches_prepared_in_one_call_are_placed_in_order_and_reach_the_log_together() -> None:
    # The quorum controller hands raft all the batches of one write in one call: each gets its
    # own offsets, in order, and none reaches the log before the one schedule.
    cluster = Cluster([1], config=RaftConfig(append_linger_ms=0))
    node = cluster.node(1)
    last_offsets = node.prepare_appends([[b"a", b"b"], [b"c"], [b"d", b"e"]], epoch=node.epoch, now_ms=cluster.now_ms)
    assert last_offsets == [2, 3, 5] and node.next_append_offset == 6
    cluster.advance(100)
    assert node.log_end_offset == 1 and cluster[1].committed_values == []
    node.schedule_prepared_append()
    cluster.advance(1)
    assert node.log_end_offset == 6 and cluster[1].committed_values == [b"a", b"b", b"c", b"d", b"e"]


def test_batches_the_write_buffer_cannot_hold_are_refused_whole() -> None:
    # All or none: a write whose third batch does not fit reserves nothing and holds nothing back.
    cluster = Cluster([1], config=RaftConfig(append_linger_ms=0, max_batch_size_bytes=300, max_number_of_batches=1))
    node = cluster.node(1)
    cluster.advance(1)  # the LeaderChangeMessage is written: the buffer is empty
    before = node.next_append_offset
    with pytest.raises(BufferFullError):
        node.prepare_appends([[b"x" * 100], [b"y" * 100], [b"z" * 100]], epoch=node.epoch, now_ms=cluster.now_ms)
    assert node.next_append_offset == before
    node.append([b"after"], epoch=node.epoch, now_ms=cluster.now_ms)
    cluster.advance(1)
    assert cluster[1].committed_values == [b"after"]


def test_a_held_append_does_not_hold_back_the_batches_completed_before_it() -> None:
    # The rest of a large write keeps going out while the next write is being applied: only what
    # comes from the held append on waits for its schedule. (Batches close at one Fetch's worth.)
    cluster = Cluster([1], config=RaftConfig(append_linger_ms=1000, fetch_max_bytes=200))
    node = cluster.node(1)
    cluster.advance(1)
    node.append([b"a" * 150], epoch=node.epoch, now_ms=cluster.now_ms)
    node.prepare_append([b"b" * 150], epoch=node.epoch, now_ms=cluster.now_ms)  # its own batch: the first closes
    cluster.advance(10)  # well inside the linger: only a completed batch goes out
    assert cluster[1].committed_values == [b"a" * 150]
    node.schedule_prepared_append()
    cluster.advance(1000)
    assert cluster[1].committed_values == [b"a" * 150, b"b" * 150]
