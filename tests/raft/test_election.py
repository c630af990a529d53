"""Elections among several voters: pre-vote, votes, one leader per epoch, persistence first."""

from __future__ import annotations

from raft_harness import Cluster

from kraft_engine.raft import RaftConfig, Role


def test_three_voters_elect_exactly_one_leader_and_the_rest_follow() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    cluster.advance(500)
    roles = sorted(cluster.node(i).role.value for i in (1, 2, 3))
    assert roles == ["Follower", "Follower", "Leader"]
    for i in (1, 2, 3):
        assert cluster.node(i).epoch == leader.epoch
        assert cluster.node(i).leader_id == leader.node_id


def test_new_leader_commits_its_leader_change_on_every_voter() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    cluster.advance(1_000)
    for i in (1, 2, 3):
        node = cluster.node(i)
        assert node.high_watermark == leader.log_end_offset
        assert node.log_end_offset == leader.log_end_offset


def test_replication_commits_on_all_voters() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    cluster.advance(500)
    leader.append([b"one", b"two"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(1_000)
    for i in (1, 2, 3):
        assert cluster[i].committed_values == [b"one", b"two"]


def test_every_vote_and_candidacy_is_persisted_before_it_is_sent() -> None:
    cluster = Cluster([1, 2, 3])
    cluster.elect()
    # Replay the transcript: each node's persisted epoch at the moment it sent a message is the
    # epoch carried in that message (Vote / BeginQuorumEpoch) or newer.
    leader = cluster.leader()
    assert leader is not None
    for i in (1, 2, 3):
        history = cluster[i].persist_history
        assert history, f"node {i} never persisted its election state"
        epochs = [s.epoch for s in history]
        assert epochs == sorted(epochs)
    granted_by = [i for i in (1, 2, 3) if i != leader.node_id and any(
        s.voted_key is not None and s.voted_key.id == leader.node_id and s.epoch == leader.epoch
        for s in cluster[i].persist_history
    )]
    assert granted_by, "the winning votes were not persisted"


def test_higher_epoch_steps_a_leader_down() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    cluster.advance(500)
    old_epoch = leader.epoch
    # Partition the leader away; the others elect a new leader in a higher epoch.
    cluster.drop = lambda e: leader.node_id in (e.source, e.destination)
    cluster.advance(10_000)
    others = [cluster.node(i) for i in (1, 2, 3) if i != leader.node_id]
    new_leaders = [n for n in others if n.role is Role.LEADER]
    assert len(new_leaders) == 1
    assert new_leaders[0].epoch > old_epoch
    # The isolated leader resigned by check-quorum.
    assert leader.role is not Role.LEADER
    cluster.drop = lambda e: False
    cluster.advance(5_000)
    assert leader.epoch == new_leaders[0].epoch
    assert leader.leader_id == new_leaders[0].node_id


def test_partitioned_voter_does_not_disrupt_the_leader_with_pre_vote() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    cluster.advance(500)
    epoch = leader.epoch
    isolated = next(i for i in (1, 2, 3) if i != leader.node_id)
    cluster.drop = lambda e: isolated in (e.source, e.destination)
    cluster.advance(20_000)
    # It spins in pre-vote without bumping its epoch.
    assert cluster.node(isolated).epoch == epoch
    cluster.drop = lambda e: False
    cluster.advance(3_000)
    assert leader.role is Role.LEADER
    assert leader.epoch == epoch
    assert cluster.node(isolated).role is Role.FOLLOWER


def test_randomized_election_timeout_is_within_t_and_2t() -> None:
    config = RaftConfig(election_timeout_ms=1000)
    for seed in range(20):
        cluster = Cluster([1, 2, 3], config=config, seed=seed)
        state = cluster.node(1).state
        deadline = state.election_deadline_ms - cluster.now_ms
        assert 1000 <= deadline < 2000
