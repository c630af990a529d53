"""Step-down rules: any role learning of a higher epoch or of its epoch's leader falls back."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from raft_harness import CLUSTER_ID, directory, endpoint, make_node, only_response

from kraft_engine.raft import ElectionState, RaftConfig, ReplicaKey, Role
from kraft_engine.raft import messages as m
from kraft_engine.records.log_batch import OffsetAndEpoch

NOW = 1_000_000


def candidate_of_three() -> tuple[object, list[object]]:
    """Node 1 as a candidate in epoch 1, and its outstanding Vote requests."""
    node = make_node(1, [1, 2, 3], config=RaftConfig(election_timeout_ms=100))
    out = node.poll(NOW + 500)
    ok = m.vote_response(error=ErrorCode.none, leader_id=None, epoch=0, granted=True, endpoints=(), listener="CONTROLLER")
    out = node.handle_response(out.requests[0].token, ok, now_ms=NOW + 500)
    assert node.role is Role.CANDIDATE and node.epoch == 1
    return node, out.requests


def begin_epoch(*, voter: int, leader: int, epoch: int) -> object:
    return m.begin_quorum_epoch_request(
        cluster_id=CLUSTER_ID, voter=ReplicaKey(voter, directory(voter)), leader_id=leader, epoch=epoch,
        leader_endpoints=(endpoint(leader),),
    )


def test_a_candidate_follows_the_leader_of_its_own_epoch_and_keeps_its_vote() -> None:
    node, _ = candidate_of_three()
    out = node.handle_request(begin_epoch(voter=1, leader=2, epoch=1), token=1, now_ms=NOW + 501)
    assert node.role is Role.FOLLOWER
    assert (node.epoch, node.leader_id) == (1, 2)
    assert out.persist == ElectionState(epoch=1, leader_id=2, voted_key=ReplicaKey(1, directory(1)))


def test_a_candidate_learning_a_higher_epoch_from_a_response_steps_back() -> None:
    node, votes = candidate_of_three()
    higher = m.vote_response(error=ErrorCode.none, leader_id=3, epoch=5, granted=False, endpoints=(endpoint(3),), listener="CONTROLLER")
    node.handle_response(votes[0].token, higher, now_ms=NOW + 502)
    assert node.role is Role.FOLLOWER
    assert (node.epoch, node.leader_id) == (5, 3)


def test_begin_quorum_epoch_with_a_stale_epoch_is_fenced() -> None:
    node = make_node(1, [1, 2, 3], persisted=ElectionState(epoch=4))
    response = only_response(node.handle_request(begin_epoch(voter=1, leader=2, epoch=3), token=1, now_ms=NOW))
    assert response.topics[0].partitions[0].error_code == ErrorCode.fenced_leader_epoch
    assert node.epoch == 4


def test_begin_quorum_epoch_addressed_to_another_directory_is_invalid_voter_key() -> None:
    import uuid

    node = make_node(1, [1, 2, 3])
    request = m.begin_quorum_epoch_request(
        cluster_id=CLUSTER_ID, voter=ReplicaKey(1, uuid.UUID(int=5)), leader_id=2, epoch=1, leader_endpoints=(endpoint(2),)
    )
    response = only_response(node.handle_request(request, token=1, now_ms=NOW))
    assert response.topics[0].partitions[0].error_code == ErrorCode.invalid_voter_key
    assert node.role is Role.UNATTACHED and node.epoch == 0


def test_following_a_new_epoch_is_persisted_with_the_leader() -> None:
    node = make_node(1, [1, 2, 3])
    out = node.handle_request(begin_epoch(voter=1, leader=3, epoch=2), token=1, now_ms=NOW)
    assert node.role is Role.FOLLOWER
    assert out.persist == ElectionState(epoch=2, leader_id=3, voted_key=None)


def test_fetch_snapshot_for_a_cleaned_snapshot_sends_the_follower_back_to_fetch() -> None:
    follower = make_node(2, [1, 2, 3], persisted=ElectionState(epoch=3, leader_id=1))
    (fetch,) = follower.poll(NOW).requests
    redirect = m.fetch_response(
        error=ErrorCode.none, leader_id=1, epoch=3, high_watermark=50, log_start_offset=40, records=b"",
        diverging=None, snapshot_id=OffsetAndEpoch(epoch=3, offset=40), endpoints=(), listener="CONTROLLER",
    )
    out = follower.handle_response(fetch.token, redirect, now_ms=NOW)
    (snapshot_request,) = out.requests
    assert type(snapshot_request.request).__name__ == "FetchSnapshotRequest"
    assert snapshot_request.request.topics[0].partitions[0].position == 0
    gone = m.fetch_snapshot_response(
        error=ErrorCode.snapshot_not_found, leader_id=1, epoch=3, snapshot_id=OffsetAndEpoch(epoch=3, offset=40),
        size=-1, position=-1, data=b"", endpoints=(), listener="CONTROLLER",
    )
    out = follower.handle_response(snapshot_request.token, gone, now_ms=NOW + 1)
    (again,) = out.requests
    assert type(again.request).__name__ == "FetchRequest"


def test_fetch_snapshot_errors_on_the_leader() -> None:
    node = make_node(1, [1])
    request = m.fetch_snapshot_request(
        cluster_id=CLUSTER_ID, replica=ReplicaKey(2, directory(2)), epoch=node.epoch,
        snapshot_id=OffsetAndEpoch(epoch=1, offset=1), position=0, max_bytes=100,
    )
    response = only_response(node.handle_request(request, token=1, now_ms=NOW))
    assert response.topics[0].partitions[0].error_code == ErrorCode.snapshot_not_found
    snapshot_id = node.create_snapshot(end_offset=1, records=[b"s"], last_contained_log_timestamp_ms=0, now_ms=NOW)
    beyond = m.fetch_snapshot_request(
        cluster_id=CLUSTER_ID, replica=ReplicaKey(2, directory(2)), epoch=node.epoch,
        snapshot_id=snapshot_id, position=10_000, max_bytes=100,
    )
    response = only_response(node.handle_request(beyond, token=2, now_ms=NOW))
    assert response.topics[0].partitions[0].error_code == ErrorCode.position_out_of_range
    stale = m.fetch_snapshot_request(
        cluster_id=CLUSTER_ID, replica=ReplicaKey(2, directory(2)), epoch=node.epoch - 1,
        snapshot_id=snapshot_id, position=0, max_bytes=100,
    )
    response = only_response(node.handle_request(stale, token=3, now_ms=NOW))
    assert response.topics[0].partitions[0].error_code == ErrorCode.fenced_leader_epoch


def test_update_voter_with_a_stale_epoch_or_unknown_voter_is_refused() -> None:
    node = make_node(1, [1])
    stale = m.update_voter_request(
        cluster_id=CLUSTER_ID, epoch=node.epoch - 1, voter=ReplicaKey(1, directory(1)), endpoints=(endpoint(1),),
        min_kraft_version=0, max_kraft_version=1,
    )
    assert only_response(node.handle_request(stale, token=1, now_ms=NOW)).error_code == ErrorCode.fenced_leader_epoch
    unknown = m.update_voter_request(
        cluster_id=CLUSTER_ID, epoch=node.epoch, voter=ReplicaKey(9, directory(9)), endpoints=(endpoint(9),),
        min_kraft_version=0, max_kraft_version=1,
    )
    assert only_response(node.handle_request(unknown, token=2, now_ms=NOW)).error_code == ErrorCode.voter_not_found


def test_a_wiped_node_told_it_leads_an_epoch_it_forgot_adopts_the_epoch_without_leading() -> None:
    # Node 1 lost its disk; its peers still follow its previous incarnation, leader of epoch 7.
    node = make_node(1, [1, 2, 3])
    assert node.epoch == 0
    pre_vote = node.poll(NOW + 10_000).requests[0]
    answer = m.vote_response(error=ErrorCode.none, leader_id=1, epoch=7, granted=False, endpoints=(), listener="CONTROLLER")
    node.handle_response(pre_vote.token, answer, now_ms=NOW + 10_001)
    assert node.epoch == 7
    assert node.role is Role.UNATTACHED
    assert node.leader_id is None
