"""Elections among several voters: pre-vote, votes, one leader per epoch, persistence first."""

from __future__ import annotations

from raft_harness import Cluster, Envelope

from kraft_engine.raft import ElectionState, Output, RaftConfig, Role


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
    deadlines = set()
    for seed in range(20):
        cluster = Cluster([1, 2, 3], config=config, seed=seed)
        state = cluster.node(1).state
        deadline = state.election_deadline_ms - cluster.now_ms
        assert 1000 <= deadline < 2000
        deadlines.add(deadline)
    # t + rand(t) from the injected random.Random: not a fixed timeout.
    assert len(deadlines) > 10


class _PersistenceCheckingCluster(Cluster):
    """Checks, after each Output is applied (persist first, then send), that nothing the node
    sent reveals an election state its quorum-state file does not already hold."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.violations: list[str] = []
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def apply(self, node_id: int, out: Output) -> Output:
        requests_by_inbound = {}
        for response in out.responses:
            source = self.inbound.get((node_id, response.token))
            if source is not None:
                requests_by_inbound[response.token] = source
        sent_before = len(self.sent)
        result = super().apply(node_id, out)
        record = self.records[node_id]
        persisted = record.persisted or ElectionState(epoch=0)
        if persisted.epoch != record.node.epoch:
            self.violations.append(f"node {node_id} is at epoch {record.node.epoch} but persisted {persisted}")
        for envelope in self.sent[sent_before:]:
            payload = envelope.payload
            name = type(payload).__name__
            if name == "VoteRequest":
                part = payload.topics[0].partitions[0]
                if not part.pre_vote and (persisted.epoch != part.replica_epoch or persisted.voted_key is None
                                          or persisted.voted_key.id != node_id):
                    self.violations.append(f"node {node_id} asked for votes in epoch {part.replica_epoch} with {persisted}")
            elif name == "VoteResponse" and payload.topics and payload.topics[0].partitions[0].vote_granted:
                request = self._request_of(envelope)
                part = request.topics[0].partitions[0]
                if not part.pre_vote and (persisted.epoch != part.replica_epoch or persisted.voted_key is None
                                          or persisted.voted_key.id != envelope.destination):
                    self.violations.append(f"node {node_id} granted {envelope.destination} a vote with {persisted}")
            elif name == "BeginQuorumEpochRequest":
                epoch = payload.topics[0].partitions[0].leader_epoch
                if persisted.epoch != epoch or persisted.leader_id != node_id:
                    self.violations.append(f"node {node_id} announced leadership of epoch {epoch} with {persisted}")
            elif name == "FetchRequest":
                epoch = payload.topics[0].partitions[0].current_leader_epoch
                if persisted.epoch != epoch:
                    self.violations.append(f"node {node_id} fetched in epoch {epoch} with {persisted}")
        return result

    def _request_of(self, response: Envelope) -> object:
        return next(e.payload for e in reversed(self.sent)
                    if e.is_request and e.source == response.destination and e.token == response.token)


def test_every_epoch_change_vote_and_leadership_is_persisted_before_any_message_reveals_it() -> None:
    # Elections, a partitioned leader, a re-election, a heal and a crash-restart, on several seeds:
    # whatever a node sends (real Vote, granted vote, BeginQuorumEpoch, Fetch) is backed by the
    # quorum-state it wrote first, and its persisted epoch always equals its in-memory epoch.
    checked = 0
    for seed in range(5):
        cluster = _PersistenceCheckingCluster([1, 2, 3], seed=seed)
        leader = cluster.elect()
        first_epoch = leader.epoch
        cluster.advance(500)
        cluster.drop = lambda e, old=leader.node_id: old in (e.source, e.destination)
        cluster.advance(10_000)
        cluster.drop = lambda e: False
        cluster.advance(3_000)
        survivor = cluster.leader()
        assert survivor is not None and survivor.epoch > first_epoch
        cluster.crash(survivor.node_id)
        cluster.advance(8_000)
        cluster.restart(survivor.node_id)
        cluster.advance(5_000)
        assert cluster.violations == []
        names = {type(e.payload).__name__ for e in cluster.sent}
        assert {"VoteRequest", "VoteResponse", "BeginQuorumEpochRequest", "FetchRequest"} <= names
        checked += len(cluster.sent)
    assert checked > 0


def test_the_checking_cluster_catches_a_vote_sent_before_it_is_persisted() -> None:
    # The check above can fail: a node whose Output loses its persist step is caught.
    cluster = _PersistenceCheckingCluster([1, 2, 3])
    original = cluster.apply

    def forgetful(node_id: int, out: Output) -> Output:
        out.persist = None
        return original(node_id, out)

    cluster.apply = forgetful  # type: ignore[method-assign]
    cluster.advance(5_000)
    assert cluster.violations
