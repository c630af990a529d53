"""Vote granting, one request at a time (KafkaRaftClient.handleVoteRequest)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from raft_harness import CLUSTER_ID, Cluster, directory, make_node, only_response

from kraft_engine.raft import ElectionState, MemoryLog, RaftConfig, ReplicaKey, RequestFailure, Role
from kraft_engine.raft import messages as m
from kraft_engine.records.log_batch import OffsetAndEpoch, build_data_batch

NOW = 1_000_000
EMPTY_LOG_END = OffsetAndEpoch(epoch=0, offset=0)


def vote(
    *,
    candidate: int = 2,
    voter: int = 1,
    epoch: int = 1,
    last: OffsetAndEpoch = EMPTY_LOG_END,
    pre_vote: bool = False,
    cluster_id: str = CLUSTER_ID,
    voter_directory: object = "right",
) -> object:
    return m.vote_request(
        cluster_id=cluster_id,
        voter=ReplicaKey(voter, directory(voter) if voter_directory == "right" else voter_directory),  # type: ignore[arg-type]
        replica=ReplicaKey(candidate, directory(candidate)),
        epoch=epoch,
        last=last,
        pre_vote=pre_vote,
    )


def answer(node: object, request: object, token: int = 1) -> object:
    return only_response(node.handle_request(request, token=token, now_ms=NOW))  # type: ignore[attr-defined]


def part(response: object) -> object:
    return response.topics[0].partitions[0]  # type: ignore[attr-defined]


def log_with(epochs: list[int]) -> MemoryLog:
    log = MemoryLog()
    for offset, epoch in enumerate(epochs):
        log.append(build_data_batch([b"r"], base_offset=offset, epoch=epoch, timestamp_ms=0))
    log.flush()
    return log


def test_vote_is_granted_once_per_epoch_and_persisted() -> None:
    node = make_node(1, [1, 2, 3])
    out = node.handle_request(vote(candidate=2, epoch=1), token=1, now_ms=NOW)
    assert part(only_response(out)).vote_granted
    assert out.persist == ElectionState(epoch=1, leader_id=None, voted_key=ReplicaKey(2, directory(2)))
    # Same epoch, another candidate: refused. The same candidate asking again: granted again.
    assert not part(answer(node, vote(candidate=3, epoch=1), 2)).vote_granted
    assert part(answer(node, vote(candidate=2, epoch=1), 3)).vote_granted


def test_vote_needs_an_up_to_date_log() -> None:
    node = make_node(1, [1, 2, 3], log=log_with([1, 1, 2]))  # ends at (offset 3, epoch 2)
    shorter = vote(candidate=2, epoch=3, last=OffsetAndEpoch(epoch=2, offset=2))
    older_epoch = vote(candidate=2, epoch=3, last=OffsetAndEpoch(epoch=1, offset=10))
    assert not part(answer(node, shorter, 1)).vote_granted
    assert not part(answer(node, older_epoch, 2)).vote_granted
    assert node.voted_key is None
    equal = vote(candidate=3, epoch=3, last=OffsetAndEpoch(epoch=2, offset=3))
    assert part(answer(node, equal, 3)).vote_granted


def test_vote_for_a_stale_epoch_is_fenced() -> None:
    node = make_node(1, [1, 2, 3], persisted=ElectionState(epoch=5))
    response = answer(node, vote(epoch=4))
    assert part(response).error_code == ErrorCode.fenced_leader_epoch
    assert part(response).leader_epoch == 5


def test_vote_with_a_higher_epoch_steps_the_node_back() -> None:
    node = make_node(1, [1, 2, 3], persisted=ElectionState(epoch=3, leader_id=3))
    assert node.role is Role.FOLLOWER
    out = node.handle_request(vote(candidate=2, epoch=4), token=1, now_ms=NOW)
    assert part(only_response(out)).vote_granted
    assert node.epoch == 4
    assert node.role is Role.UNATTACHED
    assert out.persist is not None and out.persist.epoch == 4


def test_vote_addressed_to_another_directory_is_invalid_voter_key() -> None:
    node = make_node(1, [1, 2, 3])
    import uuid

    response = answer(node, vote(voter_directory=uuid.UUID(int=99)))
    assert part(response).error_code == ErrorCode.invalid_voter_key
    assert not part(response).vote_granted
    assert node.voted_key is None


def test_vote_with_another_cluster_id_is_refused() -> None:
    node = make_node(1, [1, 2, 3])
    response = answer(node, vote(cluster_id="other-cluster"))
    assert response.error_code == ErrorCode.inconsistent_cluster_id  # type: ignore[attr-defined]
    assert node.voted_key is None and node.epoch == 0


def test_vote_with_impossible_offsets_is_an_invalid_request() -> None:
    node = make_node(1, [1, 2, 3])
    # A standard vote's last epoch must be below the candidate's epoch.
    response = answer(node, vote(epoch=1, last=OffsetAndEpoch(epoch=1, offset=0)))
    assert part(response).error_code == ErrorCode.invalid_request


def test_pre_vote_is_not_persisted_and_does_not_change_the_epoch() -> None:
    node = make_node(1, [1, 2, 3], persisted=ElectionState(epoch=2))
    out = node.handle_request(vote(candidate=2, epoch=2, last=OffsetAndEpoch(epoch=0, offset=0), pre_vote=True), token=1, now_ms=NOW)
    assert part(only_response(out)).vote_granted
    assert out.persist is None
    assert node.epoch == 2 and node.voted_key is None


def test_follower_grants_pre_vote_only_before_it_has_fetched_from_its_leader() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    follower = next(cluster.node(i) for i in (1, 2, 3) if i != leader.node_id)
    other = next(i for i in (1, 2, 3) if i not in (leader.node_id, follower.node_id))
    end = follower.log.end_offset()
    request = vote(candidate=other, voter=follower.node_id, epoch=follower.epoch, last=end, pre_vote=True)
    cluster.advance(500)
    assert follower.state.has_fetched_from_leader
    assert not part(answer(follower, request, 9001)).vote_granted
    fresh = make_node(5, [5, 6, 7], persisted=ElectionState(epoch=3, leader_id=6))
    assert fresh.role is Role.FOLLOWER
    fresh_request = vote(candidate=7, voter=5, epoch=3, last=OffsetAndEpoch(epoch=0, offset=0), pre_vote=True)
    assert part(answer(fresh, fresh_request)).vote_granted


def test_a_replica_that_has_not_read_its_own_addition_votes_when_asked() -> None:
    # Node 4's log does not have the VotersRecord adding it yet (it sees itself as an observer),
    # but the candidate's voter set has it: refusing could stall the election (KIP-853).
    node = make_node(4, [1, 2, 3])
    assert not node.is_voter
    response = answer(node, vote(candidate=2, voter=4, epoch=1))
    assert part(response).vote_granted
    # It still never campaigns itself.
    node.poll(NOW + 100_000)
    assert node.role is Role.UNATTACHED and node.epoch == 1


def test_prospective_falls_back_to_candidacy_when_a_voter_does_not_know_pre_vote() -> None:
    node = make_node(1, [1, 2, 3], config=RaftConfig(election_timeout_ms=100))
    out = node.poll(NOW + 1_000)
    assert node.role is Role.PROSPECTIVE
    pre_votes = out.requests
    assert {r.destination_id for r in pre_votes} == {2, 3}
    assert all(r.request.topics[0].partitions[0].pre_vote for r in pre_votes)
    out = node.handle_response(pre_votes[0].token, RequestFailure.UNSUPPORTED_VERSION, now_ms=NOW + 1_001)
    assert node.role is Role.CANDIDATE
    assert node.epoch == 1
    assert out.persist is not None and out.persist.voted_key == node.local_key
    real_votes = [r for r in out.requests if not r.request.topics[0].partitions[0].pre_vote]
    assert {r.destination_id for r in real_votes} == {2, 3}


def test_prospective_that_loses_pre_vote_returns_without_bumping_the_epoch() -> None:
    node = make_node(1, [1, 2, 3], config=RaftConfig(election_timeout_ms=100), persisted=ElectionState(epoch=4))
    out = node.poll(NOW + 1_000)
    assert node.role is Role.PROSPECTIVE
    for request in out.requests:
        rejection = m.vote_response(
            error=ErrorCode.none, leader_id=None, epoch=4, granted=False, endpoints=(), listener="CONTROLLER"
        )
        node.handle_response(request.token, rejection, now_ms=NOW + 1_001)
    assert node.role is Role.UNATTACHED
    assert node.epoch == 4


def test_candidate_backoff_is_capped_by_election_backoff_max() -> None:
    config = RaftConfig(election_timeout_ms=100, election_backoff_max_ms=300)
    node = make_node(1, [1, 2, 3], config=config)
    now = NOW + 1_000
    out = node.poll(now)
    granted = m.vote_response(error=ErrorCode.none, leader_id=None, epoch=0, granted=True, endpoints=(), listener="CONTROLLER")
    node.handle_response(out.requests[0].token, granted, now_ms=now)
    assert node.role is Role.CANDIDATE
    for _ in range(6):
        epoch = node.epoch
        state = node.state
        # Let the candidacy time out: it backs off for at most election.backoff.max.ms.
        node.poll(state.election_deadline_ms)
        backoff = node.state.backoff_until_ms - state.election_deadline_ms
        assert 0 <= backoff <= 300
        out = node.poll(node.state.backoff_until_ms)
        assert node.role is Role.PROSPECTIVE
        pre = out.requests
        reply = m.vote_response(error=ErrorCode.none, leader_id=None, epoch=epoch, granted=True, endpoints=(), listener="CONTROLLER")
        now = node.state.election_deadline_ms - 1
        node.handle_response(pre[0].token, reply, now_ms=now)
        assert node.role is Role.CANDIDATE and node.epoch == epoch + 1


def test_backoff_after_a_lost_candidacy_is_binary_exponential() -> None:
    # Kafka's formula: after the r-th lost candidacy the candidate waits 100 ms x rand(2^r),
    # capped by controller.quorum.election.backoff.max.ms (set out of reach here).
    config = RaftConfig(election_timeout_ms=100, election_backoff_max_ms=1_000_000)
    observed: dict[int, list[int]] = {}
    for seed in range(40):
        node = make_node(1, [1, 2, 3], config=config, seed=seed)
        now = NOW + 1_000
        out = node.poll(now)
        granted = m.vote_response(error=ErrorCode.none, leader_id=None, epoch=0, granted=True, endpoints=(), listener="CONTROLLER")
        node.handle_response(out.requests[0].token, granted, now_ms=now)
        for retry in range(1, 7):
            epoch = node.epoch
            deadline = node.state.election_deadline_ms
            node.poll(deadline)
            backoff = node.state.backoff_until_ms - deadline
            assert backoff % 100 == 0 and 0 <= backoff < 100 * 2**retry, (retry, backoff)
            observed.setdefault(retry, []).append(backoff)
            out = node.poll(node.state.backoff_until_ms)
            reply = m.vote_response(error=ErrorCode.none, leader_id=None, epoch=epoch, granted=True, endpoints=(), listener="CONTROLLER")
            node.handle_response(out.requests[0].token, reply, now_ms=node.state.election_deadline_ms - 1)
            assert node.role is Role.CANDIDATE and node.epoch == epoch + 1
    # The range doubles with every lost candidacy: later retries reach past the earlier ranges.
    assert max(observed[1]) <= 100
    assert max(observed[6]) >= 100 * 2**4


def test_a_follower_that_has_not_fetched_still_refuses_a_pre_vote_from_a_stale_log() -> None:
    log = MemoryLog()
    log.append(build_data_batch([b"x", b"y"], base_offset=0, epoch=3, timestamp_ms=0))
    fresh = make_node(5, [5, 6, 7], log=log, persisted=ElectionState(epoch=3, leader_id=6))
    assert fresh.role is Role.FOLLOWER and not fresh.state.has_fetched_from_leader
    behind = vote(candidate=7, voter=5, epoch=3, last=OffsetAndEpoch(epoch=3, offset=1), pre_vote=True)
    assert not part(answer(fresh, behind)).vote_granted
    level = vote(candidate=7, voter=5, epoch=3, last=OffsetAndEpoch(epoch=3, offset=2), pre_vote=True)
    assert part(answer(fresh, level)).vote_granted
    # A pre-vote grant changes nothing durable: still following leader 6, no vote recorded.
    assert fresh.role is Role.FOLLOWER and fresh.voted_key is None
