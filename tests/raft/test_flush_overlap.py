"""The log's flush is an effect the driver performs while the leader replicates (Raft lets the
leader's own fsync overlap the followers' fetches); only flushed offsets are ever counted.

- the leader counts itself toward the high watermark only once its fsync completed;
- a follower sends the Fetch that reports a new end offset only once that offset is flushed;
- a node whose log holds unflushed entries at start (a process crash kept the page cache)
  flushes them before reporting them.
"""

from __future__ import annotations

import random

from raft_harness import CLUSTER_ID, Cluster, directory, endpoint, voter_set

from kraft_engine.raft import ElectionState, MemoryLog, RaftConfig, RaftNode, Role
from kraft_engine.records.log_batch import build_data_batch

NOW = 1_000_000


def three_voters() -> tuple[Cluster, RaftNode]:
    cluster = Cluster([1, 2, 3], config=RaftConfig(append_linger_ms=0))
    leader = cluster.elect()
    cluster.advance(100)
    return cluster, leader


def test_followers_commit_while_the_leaders_own_fsync_is_still_running() -> None:
    cluster, leader = three_voters()
    cluster.hold_flushes.add(leader.node_id)
    leader.append([b"a", b"b"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(50)
    end = leader.log_end_offset
    # The batch went out to both followers before the leader's fsync finished, and their two
    # durable copies are a majority: committed, while the leader's own disk still lags.
    assert leader.durable_offset < end
    assert leader.high_watermark == end
    assert leader.state.voter_states[leader.node_id].end_offset < end
    cluster.complete_held_flushes(leader.node_id)
    assert leader.durable_offset == end
    assert leader.state.voter_states[leader.node_id].end_offset == end


def test_only_flushed_offsets_count_toward_the_high_watermark() -> None:
    cluster, leader = three_voters()
    follower, away = (i for i in (1, 2, 3) if i != leader.node_id)
    cluster.crash(away)
    cluster.hold_flushes.update({leader.node_id, follower})
    before = leader.high_watermark
    leader.append([b"x"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(200)
    end = leader.log_end_offset
    assert cluster.node(follower).log_end_offset == end  # replicated, but on no disk yet
    assert leader.high_watermark == before
    # The leader's fsync completes: one durable copy of three is no majority.
    cluster.complete_held_flushes(leader.node_id)
    cluster.advance(200)
    assert leader.high_watermark == before
    # The follower's fsync completes: its next Fetch reports the offset, and it commits.
    cluster.complete_held_flushes(follower)
    cluster.advance(200)
    assert leader.high_watermark == end


def test_a_follower_fetches_again_only_once_its_append_is_flushed() -> None:
    cluster, leader = three_voters()
    follower = next(i for i in (1, 2, 3) if i != leader.node_id)
    cluster.hold_flushes.add(follower)
    leader.append([b"y"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(500)
    fetches = [e for e in cluster.sent if e.source == follower and type(e.payload).__name__ == "FetchRequest"]
    end = cluster.node(follower).log_end_offset
    assert end == leader.log_end_offset
    assert all(e.payload.topics[0].partitions[0].fetch_offset < end for e in fetches)
    cluster.complete_held_flushes(follower)
    cluster.advance(10)
    fetches = [e for e in cluster.sent if e.source == follower and type(e.payload).__name__ == "FetchRequest"]
    assert fetches[-1].payload.topics[0].partitions[0].fetch_offset == end


def test_a_follower_restarted_on_an_unflushed_log_flushes_it_before_its_first_fetch() -> None:
    log = MemoryLog()
    log.append(b"".join(build_data_batch([b"v"], base_offset=o, epoch=1, timestamp_ms=0) for o in range(3)))
    follower = RaftNode(
        config=RaftConfig(), node_id=2, directory_id=directory(2), cluster_id=CLUSTER_ID, log=log,
        persisted=ElectionState(epoch=3, leader_id=1), static_voters=voter_set([1, 2, 3], with_directories=False),
        rng=random.Random(0), now_ms=NOW, local_endpoints=(endpoint(2),),
    )
    assert follower.role is Role.FOLLOWER
    out = follower.poll(NOW)
    assert out.requests == []
    assert out.flush is not None and out.flush.end_offset == 3
    log.flush_to(out.flush.end_offset)
    (fetch,) = follower.handle_log_flushed(out.flush, now_ms=NOW).requests
    assert fetch.request.topics[0].partitions[0].fetch_offset == 3
