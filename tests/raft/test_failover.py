"""Fast failover: a voter whose connection to its leader breaks and cannot be re-established
(reset or closed, then refused) starts pre-vote at once instead of waiting out the fetch timeout,
without ever disrupting a leader that the other voters still fetch from."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from raft_harness import Cluster, Envelope, directory, make_node, only_response

from kraft_engine.raft import ElectionState, RaftConfig, RaftNode, ReplicaKey, RequestFailure, Role
from kraft_engine.raft import messages as m
from kraft_engine.records.log_batch import OffsetAndEpoch

NOW = 1_000_000


def _empty_fetch_answer(*, leader_id: int, epoch: int) -> Any:
    return m.fetch_response(
        error=ErrorCode.none, leader_id=leader_id, epoch=epoch, high_watermark=0, log_start_offset=0, records=b"",
        diverging=None, snapshot_id=None, endpoints=(), listener="CONTROLLER",
    )


def _follower_that_has_fetched(node_id: int, voters: list[int], *, seed: int = 0) -> tuple[RaftNode, int]:
    """A follower of node 1 in epoch 3 with one successful Fetch behind it; returns it and the
    token of its next Fetch, now in flight."""
    follower = make_node(node_id, voters, persisted=ElectionState(epoch=3, leader_id=1), seed=seed)
    (fetch,) = follower.poll(NOW).requests
    (next_fetch,) = follower.handle_response(fetch.token, _empty_fetch_answer(leader_id=1, epoch=3), now_ms=NOW).requests
    assert follower.state.has_fetched_from_leader
    return follower, next_fetch.token


def _is_vote(envelope: Any) -> bool:
    return type(envelope.payload).__name__ in ("VoteRequest", "VoteResponse")


def _vote_requests(out: Any) -> list[Any]:
    return [r for r in out.requests if type(r.request).__name__ == "VoteRequest"]


def _lose_leader(follower: RaftNode, token: int, *, now_ms: int) -> Any:
    """The connection breaks, the immediate retry is refused."""
    (retry,) = follower.handle_response(token, RequestFailure.DISCONNECTED, now_ms=now_ms).requests
    return follower.handle_response(retry.token, RequestFailure.DISCONNECTED, now_ms=now_ms)


def test_a_broken_leader_connection_is_retried_at_once_and_a_working_reconnect_changes_nothing() -> None:
    follower, token = _follower_that_has_fetched(2, [1, 2, 3])
    out = follower.handle_response(token, RequestFailure.DISCONNECTED, now_ms=NOW + 10)
    assert follower.role is Role.FOLLOWER
    # The retry goes out at once, not after controller.quorum.retry.backoff.ms.
    (retry,) = out.requests
    assert retry.destination_id == 1 and type(retry.request).__name__ == "FetchRequest"
    # The reconnect works: a later single break is again only retried.
    (token,) = (r.token for r in follower.handle_response(retry.token, _empty_fetch_answer(leader_id=1, epoch=3), now_ms=NOW + 11).requests)
    out = follower.handle_response(token, RequestFailure.DISCONNECTED, now_ms=NOW + 12)
    assert follower.role is Role.FOLLOWER and len(out.requests) == 1
    assert out.persist is None and (follower.epoch, follower.leader_id) == (3, 1)


def test_a_broken_leader_connection_whose_reconnect_is_refused_makes_the_follower_prospective_and_pre_vote_follows_within_the_window() -> None:
    follower, token = _follower_that_has_fetched(2, [1, 2, 3])
    out = _lose_leader(follower, token, now_ms=NOW + 10)
    assert follower.role is Role.PROSPECTIVE
    # Pre-vote bumps nothing and persists nothing; it still remembers whom it followed.
    assert (follower.epoch, follower.leader_id) == (3, 1)
    assert out.persist is None
    window_ms = follower.config.election_timeout_ms // 4
    pre_vote_at = follower.state.pre_vote_start_ms
    assert NOW + 10 <= pre_vote_at < NOW + 10 + window_ms
    assert _vote_requests(out) == [] or pre_vote_at == NOW + 10
    assert out.next_deadline_ms <= pre_vote_at
    out = follower.poll(pre_vote_at)
    pre_votes = out.requests
    assert {r.destination_id for r in pre_votes} == {1, 3}
    assert all(r.request.topics[0].partitions[0].pre_vote for r in pre_votes)
    assert out.persist is None and follower.epoch == 3


def test_the_pre_vote_delay_is_random_within_a_quarter_of_the_election_timeout() -> None:
    delays = set()
    for seed in range(20):
        follower, token = _follower_that_has_fetched(2, [1, 2, 3], seed=seed)
        _lose_leader(follower, token, now_ms=NOW)
        delay = follower.state.pre_vote_start_ms - NOW
        assert 0 <= delay < follower.config.election_timeout_ms // 4
        delays.add(delay)
    assert len(delays) > 1


def test_a_request_timeout_to_the_leader_keeps_waiting_out_the_fetch_timeout() -> None:
    follower, token = _follower_that_has_fetched(2, [1, 2, 3])
    out = follower.handle_response(token, RequestFailure.TIMED_OUT, now_ms=NOW + 10)
    assert follower.role is Role.FOLLOWER
    assert _vote_requests(out) == []
    fetch_timeout_ms = follower.config.fetch_timeout_ms
    follower.poll(NOW + fetch_timeout_ms - 1)
    assert follower.role is Role.FOLLOWER
    follower.poll(NOW + fetch_timeout_ms)
    assert follower.role is Role.PROSPECTIVE


def test_an_observer_whose_leader_connection_breaks_does_not_stand() -> None:
    observer, token = _follower_that_has_fetched(4, [1, 2, 3])
    assert not observer.is_voter
    for _ in range(3):
        out = observer.handle_response(token, RequestFailure.DISCONNECTED, now_ms=NOW + 10)
        assert observer.role is Role.FOLLOWER and observer.leader_id == 1
        assert _vote_requests(out) == []
        token = observer.poll(observer.next_deadline_ms(NOW + 10)).requests[0].token


def test_a_follower_that_has_not_fetched_from_its_leader_waits_out_the_fetch_timeout() -> None:
    # Restarted as a follower and the leader refuses the first connection: Kafka's rule applies.
    follower = make_node(2, [1, 2, 3], persisted=ElectionState(epoch=3, leader_id=1))
    (fetch,) = follower.poll(NOW).requests
    follower.handle_response(fetch.token, RequestFailure.DISCONNECTED, now_ms=NOW + 10)
    assert follower.role is Role.FOLLOWER
    (fetch,) = follower.poll(follower.next_deadline_ms(NOW + 10)).requests
    follower.handle_response(fetch.token, RequestFailure.DISCONNECTED, now_ms=NOW + 40)
    assert follower.role is Role.FOLLOWER
    follower.poll(NOW + follower.config.fetch_timeout_ms)
    assert follower.role is Role.PROSPECTIVE


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_killed_leader_is_replaced_within_the_pre_vote_window_not_the_fetch_timeout(seed: int) -> None:
    cluster = Cluster([1, 2, 3], seed=seed)
    leader = cluster.elect()
    cluster.advance(500)
    old_epoch = leader.epoch
    survivors = [i for i in (1, 2, 3) if i != leader.node_id]
    assert all(cluster.node(i).state.has_fetched_from_leader for i in survivors)
    persisted = {i: list(cluster[i].persist_history) for i in survivors}

    cluster.kill(leader.node_id)  # both parked Fetches fail DISCONNECTED at once ...
    cluster.deliver_all()  # ... and the immediate reconnects are refused
    for i in survivors:
        assert cluster.node(i).role is Role.PROSPECTIVE
        assert cluster.node(i).epoch == old_epoch
        assert cluster[i].persist_history == persisted[i]

    # The survivors grant each other's pre-vote (both lost the leader); one stands and wins.
    cluster.advance(cluster.config.election_timeout_ms // 4)
    new_leader = cluster.leader()
    assert new_leader is not None and new_leader.node_id in survivors
    assert new_leader.epoch == old_epoch + 1
    other = next(i for i in survivors if i != new_leader.node_id)
    assert cluster.node(other).role is Role.FOLLOWER and cluster.node(other).leader_id == new_leader.node_id
    # ... well before a follower's fetch timeout would even have fired.
    assert cluster.config.election_timeout_ms // 4 < cluster.config.fetch_timeout_ms
    # And it commits.
    new_leader.append([b"after-failover"], epoch=new_leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(500)
    assert b"after-failover" in cluster[other].committed_values


def test_a_peer_that_still_fetches_from_the_leader_rejects_the_pre_vote_and_nothing_is_disrupted() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    cluster.advance(500)
    epoch = leader.epoch
    lost, fetching = (i for i in (1, 2, 3) if i != leader.node_id)
    persisted = {i: list(cluster[i].persist_history) for i in (1, 2, 3) if i != lost}
    mark = len(cluster.sent)

    # Only `lost`'s connection to the leader breaks and its reconnect is refused, for a moment;
    # the leader is alive and `fetching` fetches from it all along.
    def refused(source: int, destination: int) -> bool:
        return source == lost and destination == leader.node_id

    cluster.drop = lambda envelope: envelope.is_request and refused(envelope.source, envelope.destination)
    cluster.break_connections(refused)
    cluster.deliver_all()
    assert cluster.node(lost).role is Role.PROSPECTIVE
    cluster.drop = lambda envelope: False
    cluster.advance(cluster.config.election_timeout_ms // 4)

    votes = [e for e in cluster.sent[mark:] if _is_vote(e)]
    asked = [e for e in votes if e.is_request]
    assert {e.destination for e in asked} == {leader.node_id, fetching}
    assert all(e.source == lost and e.payload.topics[0].partitions[0].pre_vote for e in asked)
    answers = [e.payload.topics[0].partitions[0] for e in votes if not e.is_request]
    assert len(answers) == 2 and not any(a.vote_granted for a in answers)
    # No epoch moved, no vote was cast, the leader still leads and `lost` follows it again.
    assert leader.role is Role.LEADER
    assert all(cluster.node(i).epoch == epoch for i in (1, 2, 3))
    for i, history in persisted.items():
        assert cluster[i].persist_history == history
    assert cluster.node(lost).role is Role.FOLLOWER and cluster.node(lost).leader_id == leader.node_id
    leader.append([b"still-leading"], epoch=epoch, now_ms=cluster.now_ms)
    cluster.advance(500)
    assert b"still-leading" in cluster[lost].committed_values


def test_pre_vote_is_rejected_by_every_follower_with_a_live_leader_even_at_a_higher_epoch() -> None:
    # The rule that makes early pre-vote safe: a follower that has fetched from its leader
    # rejects pre-votes until its fetch timeout, whatever epoch the prospective names.
    follower, _ = _follower_that_has_fetched(3, [1, 2, 3])
    request = m.vote_request(
        cluster_id=follower.cluster_id, voter=ReplicaKey(3, directory(3)), replica=ReplicaKey(2, directory(2)),
        epoch=4, last=OffsetAndEpoch(epoch=3, offset=100), pre_vote=True,
    )
    out = follower.handle_request(request, token=7, now_ms=NOW + 1)
    answer = only_response(out).topics[0].partitions[0]
    assert not answer.vote_granted
    assert (int(answer.leader_id), int(answer.leader_epoch)) == (1, 3)
    assert out.persist is None and follower.role is Role.FOLLOWER and follower.epoch == 3


def test_the_pre_vote_window_scales_with_the_election_timeout() -> None:
    follower = make_node(2, [1, 2, 3], persisted=ElectionState(epoch=3, leader_id=1), config=RaftConfig(election_timeout_ms=40))
    (fetch,) = follower.poll(NOW).requests
    (fetch,) = follower.handle_response(fetch.token, _empty_fetch_answer(leader_id=1, epoch=3), now_ms=NOW).requests
    _lose_leader(follower, fetch.token, now_ms=NOW)
    assert follower.role is Role.PROSPECTIVE
    assert NOW <= follower.state.pre_vote_start_ms < NOW + 10


def test_a_crash_between_the_leader_change_batch_and_the_leaders_quorum_state_is_safe() -> None:
    # Becoming leader, the core appends and fsyncs its LeaderChange batch of epoch E, and the
    # driver then writes quorum-state (leader = itself) before any message of that Output leaves.
    # A kill -9 in between leaves epoch E in the log but "candidate of E, voted for itself" on
    # disk (docs/raft-rules.md, "Leader start"). Nobody saw the leadership, so on restart the
    # node is a candidate of E again and the quorum goes on with one consistent log.
    cluster = Cluster([1, 2, 3])
    crashed: list[int] = []

    def deliver_the_winning_vote_then_crash(envelope: Envelope) -> bool:
        payload = envelope.payload
        if crashed or envelope.is_request or type(payload).__name__ != "VoteResponse":
            return False
        node = cluster.node(envelope.destination)
        out = node.handle_response(envelope.token, payload, now_ms=cluster.now_ms)
        if node.role is not Role.LEADER:
            cluster.apply(envelope.destination, out)
            return True
        crashed.append(envelope.destination)
        assert out.persist is not None and out.persist.leader_id == envelope.destination  # never performed
        cluster.crash(envelope.destination)
        return True

    cluster.drop = deliver_the_winning_vote_then_crash
    while not crashed:
        cluster.advance(10)
    [winner] = crashed
    record = cluster[winner]
    epoch = record.node.epoch
    assert record.persisted is not None and record.persisted.epoch == epoch and record.persisted.leader_id is None
    assert record.log.end_offset().epoch == epoch  # the LeaderChange batch was flushed before the crash
    cluster.drop = lambda _: False
    restarted = cluster.restart(winner).node
    assert restarted.role is Role.CANDIDATE and restarted.epoch == epoch
    leader = cluster.elect()
    leader.append([b"after"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(3_000)
    assert all(cluster[n].committed_values == [b"after"] for n in (1, 2, 3))
