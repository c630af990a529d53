"""Restart initialisation and transition rules of QuorumState."""

from __future__ import annotations

import random

import pytest
from raft_harness import directory, endpoint, make_node, voter_set

from kraft_engine.invariant import InvariantViolation
from kraft_engine.raft import (
    ElectionState,
    MemoryLog,
    QuorumState,
    RaftConfig,
    ReplicaKey,
    Role,
    VoterNode,
    VoterSet,
)
from kraft_engine.records.log_batch import OffsetAndEpoch, build_data_batch

NOW = 1_000_000


def test_stale_file_starts_unattached_at_the_log_epoch() -> None:
    log = MemoryLog()
    log.append(build_data_batch([b"x"], base_offset=0, epoch=7, timestamp_ms=0))
    node = make_node(1, [1, 2, 3], log=log, persisted=ElectionState(epoch=3, leader_id=2))
    assert node.role is Role.UNATTACHED
    assert node.epoch == 7
    out = node.poll(NOW)
    assert out.persist == ElectionState(epoch=7)


def test_former_leader_restarts_resigned_in_the_same_epoch_and_persists_nothing() -> None:
    node = make_node(1, [1, 2, 3], persisted=ElectionState(epoch=4, leader_id=1, voted_key=ReplicaKey(1, directory(1))))
    assert node.role is Role.RESIGNED
    assert node.epoch == 4
    assert node.poll(NOW).persist is None


def test_voter_that_voted_for_itself_restarts_as_candidate() -> None:
    node = make_node(1, [1, 2, 3], persisted=ElectionState(epoch=4, voted_key=ReplicaKey(1, directory(1))))
    assert node.role is Role.CANDIDATE
    assert node.epoch == 4


def test_known_leader_with_an_endpoint_restarts_as_follower() -> None:
    node = make_node(1, [1, 2, 3], persisted=ElectionState(epoch=4, leader_id=2, voted_key=ReplicaKey(3, directory(3))))
    assert node.role is Role.FOLLOWER
    assert node.leader_id == 2
    assert node.voted_key == ReplicaKey(3, directory(3))


def test_known_leader_without_an_endpoint_restarts_unattached() -> None:
    node = make_node(1, [1, 2, 3], persisted=ElectionState(epoch=4, leader_id=9))
    assert node.role is Role.UNATTACHED
    assert node.leader_id == 9


def test_no_file_starts_unattached_at_epoch_zero() -> None:
    node = make_node(1, [1, 2, 3])
    assert node.role is Role.UNATTACHED
    assert node.epoch == 0


def quorum(voters: VoterSet, local: int = 1) -> QuorumState:
    state = QuorumState(local_key=ReplicaKey(local, directory(local)), voters=lambda: voters, config=RaftConfig(), rng=random.Random(0))
    state.initialize(None, log_end=OffsetAndEpoch(epoch=0, offset=0), now_ms=NOW)
    return state


def test_prospective_and_resigned_are_never_persisted() -> None:
    state = quorum(voter_set([1, 2, 3]))
    state.pending_persist = None
    state.transition_to_prospective(now_ms=NOW)
    assert state.pending_persist is None
    prospective = state.state
    prospective.election.record_granted(2)  # type: ignore[union-attr]
    candidate = state.transition_to_candidate(now_ms=NOW)
    assert state.pending_persist == ElectionState(epoch=1, voted_key=ReplicaKey(1, directory(1)))
    with pytest.raises(InvariantViolation):
        state.transition_to_leader(epoch_start_offset=0, now_ms=NOW)  # no majority yet
    candidate.election.record_granted(3)
    state.transition_to_leader(epoch_start_offset=0, now_ms=NOW)
    assert state.pending_persist == ElectionState(epoch=1, leader_id=1, voted_key=ReplicaKey(1, directory(1)))
    state.pending_persist = None
    state.transition_to_resigned((), now_ms=NOW)
    assert state.pending_persist is None


def test_illegal_transitions_are_invariant_violations() -> None:
    state = quorum(voter_set([1, 2, 3]))
    with pytest.raises(InvariantViolation):
        state.transition_to_candidate(now_ms=NOW)  # only from Prospective
    with pytest.raises(InvariantViolation):
        state.transition_to_leader(epoch_start_offset=0, now_ms=NOW)
    state.transition_to_follower(2, leader_id=2, endpoints=(endpoint(2),), now_ms=NOW)
    with pytest.raises(InvariantViolation):
        state.transition_to_follower(2, leader_id=3, endpoints=(endpoint(3),), now_ms=NOW)
    with pytest.raises(InvariantViolation):
        state.transition_to_unattached(1, now_ms=NOW)


def test_an_observer_cannot_start_an_election() -> None:
    state = quorum(voter_set([2, 3, 4]), local=1)
    with pytest.raises(InvariantViolation):
        state.transition_to_prospective(now_ms=NOW)


def test_a_voter_with_another_directory_is_not_a_voter() -> None:
    voters = VoterSet([VoterNode(key=ReplicaKey(1, directory(50)), endpoints=(endpoint(1),))])
    state = quorum(voters, local=1)
    assert not state.is_voter()
