"""Leadership upkeep: BeginQuorumEpoch resends, EndQuorumEpoch hand-over, shutdown, listener gating."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from raft_harness import CLUSTER_ID, Cluster, directory, make_node, only_response

from kraft_engine.raft import (
    ElectionState,
    LeaderChange,
    RaftConfig,
    ReplicaKey,
    Role,
)
from kraft_engine.raft import messages as m

NOW = 1_000_000


def elected_leader_of_three(config: RaftConfig | None = None) -> tuple[object, list[object]]:
    """Node 1 leads epoch 1 of {1,2,3}; returns it and the requests of its first poll."""
    node = make_node(1, [1, 2, 3], config=config or RaftConfig(election_timeout_ms=100))
    out = node.poll(NOW + 500)
    pre = out.requests
    ok = m.vote_response(error=ErrorCode.none, leader_id=None, epoch=0, granted=True, endpoints=(), listener="CONTROLLER")
    out = node.handle_response(pre[0].token, ok, now_ms=NOW + 500)
    votes = out.requests
    ok1 = m.vote_response(error=ErrorCode.none, leader_id=None, epoch=1, granted=True, endpoints=(), listener="CONTROLLER")
    out = node.handle_response(votes[0].token, ok1, now_ms=NOW + 500)
    assert node.role is Role.LEADER
    return node, out.requests


def test_new_leader_sends_begin_quorum_epoch_to_every_other_voter() -> None:
    _node, requests = elected_leader_of_three()
    begins = [r for r in requests if type(r.request).__name__ == "BeginQuorumEpochRequest"]
    assert sorted(r.destination_id for r in begins) == [2, 3]


def test_begin_quorum_epoch_is_resent_every_half_fetch_timeout_until_the_voter_fetches() -> None:
    config = RaftConfig(election_timeout_ms=100, fetch_timeout_ms=2000)
    node, _requests = elected_leader_of_three(config)
    start = NOW + 500
    # Voter 2 fetches (acknowledges the leader); voter 3 never answers.
    fetch = m.fetch_request(
        cluster_id=CLUSTER_ID, replica=ReplicaKey(2, directory(2)), epoch=1, fetch_offset=0,
        last_fetched_epoch=0, high_watermark=None, max_wait_ms=0, max_bytes=1 << 20,
    )
    node.handle_request(fetch, token=1, now_ms=start + 10)
    assert node.poll(start + 999).requests == []
    # The first one to 3 times out after the request timeout; the next goes out once the
    # half-fetch-timeout resend period has passed and the connection is free.
    resend = [r for r in node.poll(start + 2100).requests if type(r.request).__name__ == "BeginQuorumEpochRequest"]
    assert [r.destination_id for r in resend] == [3]


def test_graceful_shutdown_of_a_leader_sends_end_quorum_epoch_with_successors_by_fetch_offset() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    leader.append([b"a"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(1_000)
    cluster.sent.clear()
    out = cluster.apply(leader.node_id, leader.shutdown(5_000, now_ms=cluster.now_ms))
    assert leader.role is Role.RESIGNED
    assert out.persist is None
    ends = [e for e in cluster.sent if type(e.payload).__name__ == "EndQuorumEpochRequest"]
    assert sorted(e.destination for e in ends) == sorted(i for i in (1, 2, 3) if i != leader.node_id)
    preferred = [c.candidate_id for c in ends[0].payload.topics[0].partitions[0].preferred_candidates]
    assert sorted(preferred) == sorted(i for i in (1, 2, 3) if i != leader.node_id)
    cluster.advance(3_000)
    new_leader = cluster.leader()
    assert new_leader is not None and new_leader.node_id != leader.node_id
    assert leader.is_shutdown_complete


def test_end_quorum_epoch_shortens_the_election_timeout_by_successor_position() -> None:
    config = RaftConfig(fetch_timeout_ms=2000, election_backoff_max_ms=1000)
    first = make_node(2, [1, 2, 3], persisted=ElectionState(epoch=3, leader_id=1), config=config)
    second = make_node(3, [1, 2, 3], persisted=ElectionState(epoch=3, leader_id=1), config=config)
    request = m.end_quorum_epoch_request(
        cluster_id=CLUSTER_ID, leader_id=1, epoch=3,
        preferred=(ReplicaKey(2, directory(2)), ReplicaKey(3, directory(3))), leader_endpoints=(),
    )
    assert only_response(first.handle_request(request, token=1, now_ms=NOW)).topics[0].partitions[0].error_code == ErrorCode.none
    only_response(second.handle_request(request, token=1, now_ms=NOW))
    # The first preferred successor starts its (pre-)election at once, the next one waits
    # by the strict exponential backoff of its position.
    assert first.role is Role.PROSPECTIVE
    assert second.role is Role.FOLLOWER
    assert second.state.fetch_deadline_ms == NOW + (1000 >> 1)


def test_follower_and_observer_shut_down_at_once() -> None:
    follower = make_node(2, [1, 2, 3], persisted=ElectionState(epoch=3, leader_id=1))
    assert follower.shutdown(1_000, now_ms=NOW).shutdown_complete
    observer = make_node(9, [1, 2, 3])
    assert observer.shutdown(1_000, now_ms=NOW).shutdown_complete


def test_leader_change_fires_only_after_the_listener_caught_up_to_the_epoch_start() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    leader.append([b"e1"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(1_000)
    first_epoch = leader.epoch
    cluster.drop = lambda e: leader.node_id in (e.source, e.destination)
    cluster.advance(10_000)
    new_leader = cluster.leader()
    assert new_leader is not None and new_leader.epoch > first_epoch
    record = cluster[new_leader.node_id]
    events = record.events
    change_index = next(
        i for i, e in enumerate(events)
        if isinstance(e, LeaderChange) and e.leader.leader_id == new_leader.node_id
    )
    epoch_start = new_leader.state.epoch_start_offset
    delivered_before = [e for e in events[:change_index] if hasattr(e, "last_offset")]
    assert delivered_before and delivered_before[-1].last_offset == epoch_start - 1


def test_check_quorum_resigns_after_one_and_a_half_fetch_timeouts() -> None:
    config = RaftConfig(election_timeout_ms=100, fetch_timeout_ms=2000)
    node, _ = elected_leader_of_three(config)
    start = NOW + 500
    node.poll(start + 2999)
    assert node.role is Role.LEADER
    node.poll(start + 3000)
    assert node.role is Role.RESIGNED


def test_describe_quorum_reports_voters_and_observers_on_the_leader_only() -> None:
    cluster = Cluster([1, 2, 3], observers=[7])
    leader = cluster.elect()
    cluster.advance(3_000)
    response = only_response(leader.handle_request(m.describe_quorum_request(), token=1, now_ms=cluster.now_ms))
    partition = response.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    assert partition.leader_id == leader.node_id
    assert partition.high_watermark == leader.high_watermark
    assert sorted(v.replica_id for v in partition.current_voters) == [1, 2, 3]
    assert [o.replica_id for o in partition.observers] == [7]
    assert all(v.log_end_offset == leader.log_end_offset for v in partition.current_voters)
    assert sorted(n.node_id for n in response.nodes) == [1, 2, 3]
    follower = cluster.node(next(i for i in (1, 2, 3) if i != leader.node_id))
    other = only_response(follower.handle_request(m.describe_quorum_request(), token=1, now_ms=cluster.now_ms))
    assert other.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
    assert other.topics[0].partitions[0].leader_id == leader.node_id


def test_resign_steps_down_only_for_the_leaders_own_epoch() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    cluster.advance(500)
    cluster.apply(leader.node_id, leader.resign(leader.epoch - 1, now_ms=cluster.now_ms))
    assert leader.role is Role.LEADER
    cluster.sent.clear()
    cluster.apply(leader.node_id, leader.resign(leader.epoch, now_ms=cluster.now_ms))
    assert leader.role is Role.RESIGNED
    assert any(type(e.payload).__name__ == "EndQuorumEpochRequest" for e in cluster.sent)
    cluster.advance(5_000)
    new_leader = cluster.leader()
    assert new_leader is not None and new_leader.epoch > 1


def test_a_leader_that_cannot_hand_over_completes_shutdown_at_the_timeout() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    cluster.advance(500)
    cluster.drop = lambda e: True  # nobody hears the hand-over
    out = cluster.apply(leader.node_id, leader.shutdown(1_000, now_ms=cluster.now_ms))
    assert not out.shutdown_complete
    assert leader.next_deadline_ms(cluster.now_ms) <= cluster.now_ms + 1_000
    cluster.advance(999)
    assert not leader.is_shutdown_complete
    cluster.advance(2)
    assert leader.is_shutdown_complete


def test_end_quorum_epoch_backoff_doubles_with_each_successor_position() -> None:
    # Strict exponential by position among 4 preferred successors, capped by
    # controller.quorum.election.backoff.max.ms: 0, max/8, max/4, max/2; not listed: max.
    config = RaftConfig(fetch_timeout_ms=5_000, election_backoff_max_ms=1_000)
    preferred = tuple(ReplicaKey(i, directory(i)) for i in (2, 3, 4, 5))
    request = m.end_quorum_epoch_request(cluster_id=CLUSTER_ID, leader_id=1, epoch=3, preferred=preferred, leader_endpoints=())
    waits = {}
    for node_id in (3, 4, 5, 6):
        node = make_node(node_id, [1, 2, 3, 4, 5, 6], persisted=ElectionState(epoch=3, leader_id=1), config=config)
        only_response(node.handle_request(request, token=1, now_ms=NOW))
        waits[node_id] = node.state.fetch_deadline_ms - NOW
    assert waits == {3: 125, 4: 250, 5: 500, 6: 1_000}
