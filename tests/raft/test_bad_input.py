"""Bad input gets a clear refusal and changes nothing."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from raft_harness import CLUSTER_ID, directory, make_node, only_response

from kraft_engine.raft import ElectionState, ReplicaKey, Role, build_data_batch
from kraft_engine.raft import messages as m

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
    from kraft_engine.raft import OffsetAndEpoch

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
