"""Bad input gets a clear refusal and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from raft_harness import CLUSTER_ID, Cluster, directory, endpoint, make_node, only_response, wire

from kraft_engine.raft import ElectionState, LeaderState, RaftNode, ReplicaKey, Role
from kraft_engine.raft import messages as m
from kraft_engine.records.log_batch import OffsetAndEpoch, build_data_batch

NOW = 1_000_000


def test_a_request_the_raft_node_does_not_serve_is_a_value_error_and_changes_nothing() -> None:
    node = make_node(1, [1, 2, 3])
    before = (node.role, node.epoch, node.election_state)
    with pytest.raises(ValueError, match="MetadataRequest"):
        node.handle_request(MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False), token=1, now_ms=NOW)
    assert (node.role, node.epoch, node.election_state) == before


def test_a_fetch_with_a_negative_offset_is_an_invalid_request() -> None:
    node = make_node(1, [1])
    request = m.fetch_request(
        cluster_id=CLUSTER_ID, replica=ReplicaKey(2, directory(2)), epoch=node.epoch, fetch_offset=-5,
        last_fetched_epoch=0, high_watermark=None, max_wait_ms=0, max_bytes=100,
    )
    response = only_response(node.handle_request(request, token=1, now_ms=NOW))
    assert response.responses[0].partitions[0].error_code == ErrorCode.invalid_request
    assert node.state.voter_states[1].end_offset == node.log_end_offset


def test_corrupt_records_in_a_fetch_response_are_not_appended() -> None:
    follower = make_node(2, [1, 2, 3], persisted=ElectionState(epoch=3, leader_id=1))
    (fetch,) = follower.poll(NOW).requests
    batch = bytearray(build_data_batch([b"value"], base_offset=0, epoch=3, timestamp_ms=0))
    batch[-1] ^= 0xFF  # breaks the CRC
    response = m.fetch_response(
        error=ErrorCode.none, leader_id=1, epoch=3, high_watermark=1, log_start_offset=0, records=bytes(batch),
        diverging=None, snapshot_id=None, endpoints=(), listener="CONTROLLER",
    )
    out = follower.handle_response(fetch.token, response, now_ms=NOW)
    assert follower.log_end_offset == 0
    assert follower.high_watermark is None
    assert follower.role is Role.FOLLOWER
    # It backs off before fetching again instead of spinning.
    assert out.requests == []
    assert follower.next_deadline_ms(NOW) >= NOW + follower.config.retry_backoff_ms


def test_records_that_do_not_start_at_the_log_end_are_not_appended() -> None:
    follower = make_node(2, [1, 2, 3], persisted=ElectionState(epoch=3, leader_id=1))
    (fetch,) = follower.poll(NOW).requests
    gap = build_data_batch([b"value"], base_offset=5, epoch=3, timestamp_ms=0)
    response = m.fetch_response(
        error=ErrorCode.none, leader_id=1, epoch=3, high_watermark=6, log_start_offset=0, records=gap,
        diverging=None, snapshot_id=None, endpoints=(), listener="CONTROLLER",
    )
    follower.handle_response(fetch.token, response, now_ms=NOW)
    assert follower.log_end_offset == 0


def test_served_requests_match_the_versions_the_core_itself_sends() -> None:
    from kraft_engine.records.log_batch import OffsetAndEpoch

    node = make_node(1, [1])
    key = ReplicaKey(1, directory(1))
    built = [
        m.vote_request(cluster_id=CLUSTER_ID, voter=key, replica=key, epoch=1, last=OffsetAndEpoch(epoch=0, offset=0), pre_vote=True),
        m.begin_quorum_epoch_request(cluster_id=CLUSTER_ID, voter=key, leader_id=1, epoch=1, leader_endpoints=()),
        m.end_quorum_epoch_request(cluster_id=CLUSTER_ID, leader_id=1, epoch=1, preferred=(), leader_endpoints=()),
        m.fetch_request(cluster_id=CLUSTER_ID, replica=key, epoch=1, fetch_offset=0, last_fetched_epoch=0,
                        high_watermark=None, max_wait_ms=0, max_bytes=1),
        m.fetch_snapshot_request(cluster_id=CLUSTER_ID, replica=key, epoch=1, snapshot_id=OffsetAndEpoch(epoch=1, offset=1),
                                 position=0, max_bytes=1),
        m.describe_quorum_request(),
        m.add_voter_request(cluster_id=CLUSTER_ID, voter=key, endpoints=(), timeout_ms=1),
        m.remove_voter_request(cluster_id=CLUSTER_ID, voter=key),
        m.update_voter_request(cluster_id=CLUSTER_ID, epoch=1, voter=key, endpoints=(), min_kraft_version=0, max_kraft_version=1),
    ]
    assert {int(r.__api_key__): int(r.__version__) for r in built} == node.served_requests
    # Every served request is dispatched (none is refused as unknown).
    for request in built:
        node.handle_request(request, token=99, now_ms=NOW)


# -- a leader of a dynamic quorum, and everything about it a bad request could change -------------
def _dynamic_leader() -> tuple[Cluster, RaftNode]:
    cluster = Cluster([1, 2, 3], static=False)
    leader = cluster.elect()
    cluster.advance(1_000)
    leader.append([b"committed"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(1_000)
    return cluster, leader


def _observable(node: RaftNode) -> tuple[Any, ...]:
    state = node.state
    progress: tuple[Any, ...] = ()
    if isinstance(state, LeaderState):
        progress = (
            sorted((i, s.end_offset) for i, s in state.voter_states.items()),
            sorted(str(k) for k in state.observer_states),
        )
    return (
        node.role, node.epoch, node.leader_id, node.election_state, node.log_end_offset, node.high_watermark,
        sorted(node.voters.ids), node.log.snapshot_ids(), progress,
    )


def _key(node_id: int) -> ReplicaKey:
    return ReplicaKey(node_id, directory(node_id))


_OTHER_CLUSTER: dict[str, Callable[[RaftNode], Any]] = {
    "Vote": lambda n: m.vote_request(
        cluster_id="other", voter=n.local_key, replica=_key(2), epoch=n.epoch + 1,
        last=OffsetAndEpoch(epoch=n.epoch, offset=n.log_end_offset + 100), pre_vote=False,
    ),
    "BeginQuorumEpoch": lambda n: m.begin_quorum_epoch_request(
        cluster_id="other", voter=n.local_key, leader_id=2, epoch=n.epoch + 1, leader_endpoints=(endpoint(2),)
    ),
    "EndQuorumEpoch": lambda n: m.end_quorum_epoch_request(
        cluster_id="other", leader_id=2, epoch=n.epoch + 1, preferred=(), leader_endpoints=(endpoint(2),)
    ),
    "Fetch": lambda n: m.fetch_request(
        cluster_id="other", replica=_key(2), epoch=n.epoch, fetch_offset=n.log_end_offset, last_fetched_epoch=n.epoch,
        high_watermark=None, max_wait_ms=0, max_bytes=1 << 20,
    ),
    "FetchSnapshot": lambda n: m.fetch_snapshot_request(
        cluster_id="other", replica=_key(2), epoch=n.epoch, snapshot_id=OffsetAndEpoch(epoch=0, offset=0), position=0,
        max_bytes=1 << 20,
    ),
    "AddRaftVoter": lambda n: m.add_voter_request(cluster_id="other", voter=_key(9), endpoints=(endpoint(9),), timeout_ms=1_000),
    "RemoveRaftVoter": lambda n: m.remove_voter_request(cluster_id="other", voter=_key(2)),
    "UpdateRaftVoter": lambda n: m.update_voter_request(
        cluster_id="other", epoch=n.epoch, voter=_key(2), endpoints=(endpoint(7),), min_kraft_version=0, max_kraft_version=1,
    ),
}


@pytest.mark.parametrize("api", sorted(_OTHER_CLUSTER))
def test_every_raft_request_from_another_cluster_is_inconsistent_cluster_id_and_changes_nothing(api: str) -> None:
    # Each request would otherwise act: a higher epoch, a new leader, a fetch, a voter change.
    cluster, leader = _dynamic_leader()
    before = _observable(leader)
    out = leader.handle_request(wire(_OTHER_CLUSTER[api](leader)), token=77, now_ms=cluster.now_ms)
    response = only_response(out)
    assert response.error_code == ErrorCode.inconsistent_cluster_id
    assert out.persist is None
    assert _observable(leader) == before
    cluster.apply(leader.node_id, out)
    cluster.advance(500)
    assert (leader.role, leader.epoch, sorted(leader.voters.ids)) == before[:1] + before[1:2] + (before[6],)


def test_end_quorum_epoch_for_a_stale_epoch_is_fenced_and_changes_nothing() -> None:
    follower = make_node(2, [1, 2, 3], persisted=ElectionState(epoch=5, leader_id=1))
    follower.poll(NOW)
    before = (_observable(follower), follower.state.fetch_deadline_ms)
    request = m.end_quorum_epoch_request(cluster_id=CLUSTER_ID, leader_id=1, epoch=4, preferred=(_key(2),), leader_endpoints=())
    out = follower.handle_request(wire(request), token=1, now_ms=NOW + 1)
    answer = only_response(out).topics[0].partitions[0]
    assert answer.error_code == ErrorCode.fenced_leader_epoch
    assert (int(answer.leader_id), int(answer.leader_epoch)) == (1, 5)
    # It did not shorten its fetch timeout for a leader of an epoch long gone.
    assert (_observable(follower), follower.state.fetch_deadline_ms) == before
    assert out.persist is None


def test_a_fetch_beyond_the_log_end_is_answered_with_the_diverging_epoch_and_records_no_progress() -> None:
    cluster, leader = _dynamic_leader()
    follower = next(i for i in (1, 2, 3) if i != leader.node_id)
    end = leader.log_end_offset
    before = _observable(leader)
    request = m.fetch_request(
        cluster_id=CLUSTER_ID, replica=_key(follower), epoch=leader.epoch, fetch_offset=end + 50,
        last_fetched_epoch=leader.epoch, high_watermark=None, max_wait_ms=0, max_bytes=1 << 20,
    )
    response = only_response(leader.handle_request(wire(request), token=1, now_ms=cluster.now_ms))
    partition = response.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    # Kafka's answer: the end of the epoch the follower named, so it truncates back to it.
    assert (int(partition.diverging_epoch.epoch), int(partition.diverging_epoch.end_offset)) == (leader.epoch, end)
    assert bytes(partition.records or b"") == b""
    assert _observable(leader) == before


def test_a_fetch_from_a_non_replica_is_served_but_records_no_progress() -> None:
    # Replica id -1 is how Kafka marks a fetch from something that is not a replica.
    cluster, leader = _dynamic_leader()
    before = _observable(leader)
    request = m.fetch_request(
        cluster_id=CLUSTER_ID, replica=ReplicaKey(-1, None), epoch=leader.epoch, fetch_offset=0, last_fetched_epoch=0,
        high_watermark=None, max_wait_ms=0, max_bytes=1 << 20,
    )
    response = only_response(leader.handle_request(wire(request), token=1, now_ms=cluster.now_ms))
    partition = response.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.none and bytes(partition.records or b"")
    assert _observable(leader) == before


def test_a_fetch_that_claims_to_come_from_the_leader_itself_is_an_invalid_request_and_changes_nothing() -> None:
    cluster, leader = _dynamic_leader()
    before = _observable(leader)
    for directory_id in (directory(leader.node_id), directory(42), None):
        request = m.fetch_request(
            cluster_id=CLUSTER_ID, replica=ReplicaKey(leader.node_id, directory_id), epoch=leader.epoch, fetch_offset=0,
            last_fetched_epoch=0, high_watermark=None, max_wait_ms=0, max_bytes=1 << 20,
        )
        response = only_response(leader.handle_request(wire(request), token=1, now_ms=cluster.now_ms))
        assert response.responses[0].partitions[0].error_code == ErrorCode.invalid_request
        assert _observable(leader) == before
