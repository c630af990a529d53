"""KIP-853 dynamic quorums: voter history, AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter, auto-join,
and the kraft.version 0 -> 1 upgrade."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from raft_harness import CLUSTER_ID, Cluster, bootstrap_log, directory, endpoint, voter_set

from kraft_engine.raft import (
    KRAFT_VERSION_1,
    ElectionState,
    Endpoint,
    MemoryLog,
    NotLeaderError,
    RaftConfig,
    ReplicaKey,
    Role,
)
from kraft_engine.raft import messages as m
from kraft_engine.raft.errors import KRaftVersionUpgradeError
from kraft_engine.raft.voter_set_history import VoterSetHistory
from kraft_engine.records.control import build_control_batch

NOW = 1_000_000


def add_request(node_id: int, *, dir_id: object = "right") -> object:
    return m.add_voter_request(
        cluster_id=CLUSTER_ID,
        voter=ReplicaKey(node_id, directory(node_id) if dir_id == "right" else dir_id),  # type: ignore[arg-type]
        endpoints=(endpoint(node_id),),
        timeout_ms=5_000,
    )


def dynamic_cluster(observers: list[int] = (), config: RaftConfig | None = None) -> tuple[Cluster, object]:  # type: ignore[assignment]
    cluster = Cluster([1, 2, 3], observers=list(observers), static=False, config=config)
    leader = cluster.elect()
    cluster.advance(3_000)
    return cluster, leader


# -- voter history -------------------------------------------------------------------------------
def test_voter_history_takes_uncommitted_sets_and_reverts_them_on_truncation() -> None:
    history = VoterSetHistory(None)
    first, second = voter_set([1, 2, 3]), voter_set([1, 2, 3, 4])
    history.add_voter_set(5, first)
    history.add_voter_set(9, second)
    assert history.latest_voter_set() == second
    assert history.voter_set_at(8) == first
    assert history.truncate_new_entries(9)
    assert history.latest_voter_set() == first


def test_a_follower_uses_an_uncommitted_voters_record_as_soon_as_it_reads_it() -> None:
    import random

    from kraft_engine.raft import RaftNode
    from kraft_engine.records.log_batch import OffsetAndEpoch

    follower = RaftNode(
        config=RaftConfig(), node_id=2, directory_id=directory(2), cluster_id=CLUSTER_ID,
        log=bootstrap_log(voter_set([1, 2, 3])), persisted=ElectionState(epoch=3, leader_id=1), static_voters=None,
        rng=random.Random(0), now_ms=NOW, local_endpoints=(endpoint(2),),
    )
    assert follower.role is Role.FOLLOWER
    grown = voter_set([1, 2, 3, 4])
    batch = build_control_batch(base_offset=0, partition_leader_epoch=3, timestamp_ms=0, records=[grown.to_record()])

    def answer(records: bytes, diverging: OffsetAndEpoch | None) -> object:
        return m.fetch_response(error=ErrorCode.none, leader_id=1, epoch=3, high_watermark=0, log_start_offset=0,
                                records=records, diverging=diverging, snapshot_id=None, endpoints=(), listener="CONTROLLER")

    (fetch,) = follower.poll(NOW).requests
    out = follower.handle_response(fetch.token, answer(batch, None), now_ms=NOW)
    # Read, not committed (HWM 0), and already in force.
    assert follower.high_watermark == 0
    assert follower.voters == grown
    # The next Fetch reports the new end offset, so it waits for the flush the driver runs.
    assert out.requests == []
    assert out.flush is not None and out.flush.end_offset == 1
    follower.log.flush()
    (fetch,) = follower.handle_log_flushed(out.flush, now_ms=NOW).requests
    follower.handle_response(fetch.token, answer(b"", OffsetAndEpoch(epoch=0, offset=0)), now_ms=NOW)
    assert follower.log_end_offset == 0
    assert follower.voters == voter_set([1, 2, 3])


def test_dynamic_voter_set_is_read_from_the_bootstrap_snapshot_not_config() -> None:
    _cluster, leader = dynamic_cluster()
    assert leader.kraft_version == KRAFT_VERSION_1
    assert leader.voters == voter_set([1, 2, 3])
    assert all(v.key.directory_id is not None for v in leader.voters)


# -- AddRaftVoter ----------------------------------------------------------------------------------
def test_add_voter_after_the_observer_caught_up_commits_under_the_new_majority() -> None:
    cluster, leader = dynamic_cluster(observers=[4])
    assert cluster.node(4).role is Role.FOLLOWER
    token = cluster.client_request(leader.node_id, add_request(4))
    cluster.advance(2_000)
    assert cluster.client_responses[token].error_code == ErrorCode.none
    assert 4 in leader.voters.ids
    assert cluster.node(4).is_voter
    assert cluster.node(4).voters == leader.voters
    # The new voter's offset counts toward the HWM now.
    leader.append([b"after-add"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(1_000)
    assert b"after-add" in cluster[4].committed_values


def test_add_voter_gates_in_order() -> None:
    static = Cluster([1, 2, 3])
    static_leader = static.elect()
    static.advance(1_000)
    token = static.client_request(static_leader.node_id, add_request(4))
    assert static.client_responses[token].error_code == ErrorCode.unsupported_version

    cluster, leader = dynamic_cluster()
    duplicate = cluster.client_request(leader.node_id, add_request(2))
    assert cluster.client_responses[duplicate].error_code == ErrorCode.duplicate_voter
    # Node 9 never fetched: not caught up.
    lagging = cluster.client_request(leader.node_id, add_request(9))
    cluster.advance(100)
    assert cluster.client_responses[lagging].error_code == ErrorCode.request_timed_out
    follower = next(i for i in (1, 2, 3) if i != leader.node_id)
    not_leader = cluster.client_request(follower, add_request(9))
    assert cluster.client_responses[not_leader].error_code == ErrorCode.not_leader_or_follower
    wrong_cluster = m.add_voter_request(cluster_id="other", voter=ReplicaKey(9, directory(9)), endpoints=(endpoint(9),), timeout_ms=1)
    refused = cluster.client_request(leader.node_id, wrong_cluster)
    assert cluster.client_responses[refused].error_code == ErrorCode.inconsistent_cluster_id


def test_only_one_voter_change_at_a_time() -> None:
    cluster, leader = dynamic_cluster(observers=[4, 5])
    first = cluster.client_request(leader.node_id, add_request(4))
    second = cluster.client_request(leader.node_id, add_request(5))
    assert cluster.client_responses[second].error_code == ErrorCode.request_timed_out
    cluster.advance(2_000)
    assert cluster.client_responses[first].error_code == ErrorCode.none


def test_a_written_voter_change_past_its_timeout_waits_for_its_commit_without_asking_to_be_polled_at_once() -> None:
    cluster, leader = dynamic_cluster(observers=[4])
    request = m.add_voter_request(cluster_id=CLUSTER_ID, voter=ReplicaKey(4, directory(4)), endpoints=(endpoint(4),), timeout_ms=100)
    token = cluster.client_request(leader.node_id, request)
    while 4 not in leader.voters.ids:  # until ApiVersions is answered and the VotersRecord written
        assert cluster.deliver_one() is not None
    held, cluster.queue = cluster.queue, []  # then nobody fetches it for a while
    start = cluster.now_ms
    for now in (start + 30, start + 150, start + 400):  # linger, then well past the 100 ms timeout
        out = leader.poll(now)
        held.extend(cluster.apply(leader.node_id, out) and cluster.queue)
        cluster.queue = []
        assert token not in cluster.client_responses
        assert leader.next_deadline_ms(now) > now, "a written change past its deadline must not spin"
    cluster.queue = held
    cluster.now_ms = start + 400
    cluster.advance(1_000)
    assert cluster.client_responses[token].error_code == ErrorCode.none


def test_add_voter_refuses_a_voter_that_does_not_support_the_finalized_kraft_version() -> None:
    cluster, leader = dynamic_cluster(observers=[4])
    cluster.supported_kraft[4] = (0, 0)
    token = cluster.client_request(leader.node_id, add_request(4))
    cluster.advance(500)
    assert cluster.client_responses[token].error_code == ErrorCode.invalid_request
    assert 4 not in leader.voters.ids


# -- RemoveRaftVoter -------------------------------------------------------------------------------
def test_remove_a_follower_voter() -> None:
    cluster, leader = dynamic_cluster()
    gone = next(i for i in (1, 2, 3) if i != leader.node_id)
    token = cluster.client_request(leader.node_id, m.remove_voter_request(cluster_id=CLUSTER_ID, voter=ReplicaKey(gone, directory(gone))))
    cluster.advance(2_000)
    assert cluster.client_responses[token].error_code == ErrorCode.none
    assert gone not in leader.voters.ids
    assert not cluster.node(gone).is_voter


def test_remove_an_unknown_voter_is_voter_not_found() -> None:
    cluster, leader = dynamic_cluster()
    token = cluster.client_request(leader.node_id, m.remove_voter_request(cluster_id=CLUSTER_ID, voter=ReplicaKey(2, directory(77))))
    assert cluster.client_responses[token].error_code == ErrorCode.voter_not_found


def test_a_leader_that_removes_itself_resigns_after_the_commit() -> None:
    cluster, leader = dynamic_cluster()
    me = leader.node_id
    token = cluster.client_request(me, m.remove_voter_request(cluster_id=CLUSTER_ID, voter=ReplicaKey(me, directory(me))))
    cluster.advance(10_000)
    assert cluster.client_responses[token].error_code == ErrorCode.none
    new_leader = cluster.leader()
    assert new_leader is not None and new_leader.node_id != me
    assert me not in new_leader.voters.ids
    assert len(new_leader.voters) == 2


# -- UpdateRaftVoter and auto-join -----------------------------------------------------------------
def test_a_voter_whose_endpoint_changed_updates_its_entry() -> None:
    cluster, leader = dynamic_cluster()
    mover = next(i for i in (1, 2, 3) if i != leader.node_id)
    record = cluster[mover]
    cluster.crash(mover)
    moved = Endpoint("CONTROLLER", "127.0.0.1", 19000 + mover)  # same port, new host name
    moved = Endpoint("CONTROLLER", "localhost", moved.port)
    cluster.start(mover, record.log, record.persisted, static_voters=False, endpoints=(moved,))
    cluster.advance(5_000)
    assert leader.voters.get(mover).endpoints == (moved,)  # type: ignore[union-attr]


def test_auto_join_observer_becomes_a_voter() -> None:
    cluster, leader = dynamic_cluster()
    cluster.start(4, MemoryLog(), static_voters=False, config=RaftConfig(auto_join_enable=True))
    cluster.advance(10_000)
    assert 4 in leader.voters.ids
    assert cluster.node(4).is_voter


def test_auto_join_removes_a_stale_entry_with_the_same_id_first() -> None:
    cluster, leader = dynamic_cluster()
    reformatted = next(i for i in (1, 2, 3) if i != leader.node_id)
    cluster.crash(reformatted)
    # Same node id, new disk (new directory id).
    from raft_harness import directory as dir_of

    new_dir = dir_of(reformatted + 50)
    import random

    from kraft_engine.raft import RaftNode

    node = RaftNode(
        config=RaftConfig(auto_join_enable=True), node_id=reformatted, directory_id=new_dir, cluster_id=CLUSTER_ID,
        log=MemoryLog(), persisted=None, static_voters=None, rng=random.Random(3), now_ms=cluster.now_ms,
        local_endpoints=(endpoint(reformatted),), bootstrap_servers=tuple(endpoint(i) for i in (1, 2, 3)),
    )
    from raft_harness import NodeRecord

    cluster.records[reformatted] = NodeRecord(node=node, log=node.log)  # type: ignore[arg-type]
    cluster.apply(reformatted, node.poll(cluster.now_ms))
    cluster.advance(20_000)
    entry = leader.voters.get(reformatted)
    assert entry is not None and entry.key.directory_id == new_dir
    assert node.is_voter


# -- kraft.version upgrade -------------------------------------------------------------------------
def test_kraft_version_upgrade_requires_every_voter_to_be_known_then_writes_the_voter_set() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    with pytest.raises(NotLeaderError):
        leader.upgrade_kraft_version(leader.epoch - 1, 1, validate_only=True, now_ms=cluster.now_ms)
    # Right after the election the followers have not told the leader their directory ids yet.
    fresh = Cluster([1, 2, 3], seed=5)
    fresh_leader = fresh.elect()
    with pytest.raises(KRaftVersionUpgradeError):
        fresh_leader.upgrade_kraft_version(fresh_leader.epoch, 1, validate_only=True, now_ms=fresh.now_ms)
    cluster.advance(5_000)
    cluster.apply(leader.node_id, leader.upgrade_kraft_version(leader.epoch, 1, validate_only=False, now_ms=cluster.now_ms))
    cluster.advance(2_000)
    for i in (1, 2, 3):
        node = cluster.node(i)
        assert node.kraft_version == KRAFT_VERSION_1
        assert all(v.key.directory_id == directory(v.key.id) for v in node.voters)


def test_kraft_version_upgrade_refuses_a_voter_without_support() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    cluster.advance(5_000)
    follower = next(i for i in (1, 2, 3) if i != leader.node_id)
    # The follower tells the leader it only supports kraft.version 0.
    old_style = m.update_voter_request(
        cluster_id=CLUSTER_ID, epoch=leader.epoch, voter=ReplicaKey(follower, directory(follower)),
        endpoints=(endpoint(follower),), min_kraft_version=0, max_kraft_version=0,
    )
    token = cluster.client_request(leader.node_id, old_style)
    assert cluster.client_responses[token].error_code == ErrorCode.none
    with pytest.raises(KRaftVersionUpgradeError, match="does not support"):
        leader.upgrade_kraft_version(leader.epoch, 1, validate_only=True, now_ms=cluster.now_ms)
    assert leader.kraft_version == 0


def test_static_quorum_ignores_election_state_voters() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    assert leader.kraft_version == 0
    assert leader.voters == voter_set([1, 2, 3], with_directories=False)
    assert isinstance(cluster[leader.node_id].persisted, ElectionState)


# -- the AddRaftVoter / RemoveRaftVoter gates, each ahead of the next (the seed's order) --------
def is_fetch_from(*sources: int) -> object:
    return lambda e: e.is_request and type(e.payload).__name__ == "FetchRequest" and e.source in sources


def remove_request(node_id: int) -> object:
    return m.remove_voter_request(cluster_id=CLUSTER_ID, voter=ReplicaKey(node_id, directory(node_id)))


def test_a_leader_without_a_high_watermark_answers_request_timed_out_before_the_kraft_version_gate() -> None:
    # Static quorum (kraft.version 0) whose followers cannot fetch yet: no HWM. Gate 1 answers
    # first; once the HWM exists, gate 2 (kraft.version < 1) does.
    cluster = Cluster([1, 2, 3])
    cluster.drop = is_fetch_from(1, 2, 3)  # type: ignore[assignment]
    leader = cluster.elect()
    assert leader.high_watermark is None
    for request in (add_request(4), remove_request(2)):
        token = cluster.client_request(leader.node_id, request)
        assert cluster.client_responses[token].error_code == ErrorCode.request_timed_out
    cluster.drop = lambda e: False
    cluster.advance(3_000)
    assert leader.high_watermark is not None
    for request in (add_request(4), remove_request(2)):
        token = cluster.client_request(leader.node_id, request)
        assert cluster.client_responses[token].error_code == ErrorCode.unsupported_version


def test_an_uncommitted_voters_record_answers_request_timed_out_before_duplicate_voter_or_voter_not_found() -> None:
    # The kraft.version upgrade writes the first VotersRecord without a pending voter change;
    # until it commits, gate 3 refuses every change, even one gate 4 would refuse otherwise.
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    cluster.advance(5_000)
    cluster.apply(leader.node_id, leader.upgrade_kraft_version(leader.epoch, 1, validate_only=False, now_ms=cluster.now_ms))
    # Past the linger, with nothing delivered: the records are in the leader's log, not committed.
    cluster.now_ms += 100
    cluster.apply(leader.node_id, leader.poll(cluster.now_ms))
    assert leader.high_watermark < leader.log_end_offset
    assert leader.kraft_version == KRAFT_VERSION_1
    follower = next(i for i in (1, 2, 3) if i != leader.node_id)
    duplicate = cluster.client_request(leader.node_id, add_request(follower))
    unknown = cluster.client_request(leader.node_id, remove_request(9))
    assert cluster.client_responses[duplicate].error_code == ErrorCode.request_timed_out
    assert cluster.client_responses[unknown].error_code == ErrorCode.request_timed_out
    cluster.advance(2_000)
    duplicate = cluster.client_request(leader.node_id, add_request(follower))
    unknown = cluster.client_request(leader.node_id, remove_request(9))
    assert cluster.client_responses[duplicate].error_code == ErrorCode.duplicate_voter
    assert cluster.client_responses[unknown].error_code == ErrorCode.voter_not_found


def test_a_duplicate_voter_is_refused_without_asking_it_for_api_versions() -> None:
    cluster, leader = dynamic_cluster()
    cluster.sent.clear()
    token = cluster.client_request(leader.node_id, add_request(2))
    cluster.advance(100)
    assert cluster.client_responses[token].error_code == ErrorCode.duplicate_voter
    assert not any(type(e.payload).__name__ == "ApiVersionsRequest" for e in cluster.sent)


def test_the_new_voters_kraft_version_is_checked_before_whether_it_caught_up() -> None:
    # Observer 4 never fetched (not caught up). Told it supports only kraft.version 0, the leader
    # refuses it for the version (INVALID_REQUEST, as Kafka); supporting 1, for the lag.
    cluster = Cluster([1, 2, 3], observers=[4], static=False)
    cluster.drop = is_fetch_from(4)  # type: ignore[assignment]
    leader = cluster.elect()
    cluster.advance(3_000)
    cluster.supported_kraft[4] = (0, 0)
    token = cluster.client_request(leader.node_id, add_request(4))
    cluster.advance(100)
    assert cluster.client_responses[token].error_code == ErrorCode.invalid_request
    cluster.supported_kraft[4] = (0, 1)
    token = cluster.client_request(leader.node_id, add_request(4))
    cluster.advance(100)
    assert cluster.client_responses[token].error_code == ErrorCode.request_timed_out
    assert 4 not in leader.voters.ids


def test_add_voter_is_answered_only_after_commit_under_the_new_majority() -> None:
    # {1,2,3} + 4 needs 3 of 4 to commit the VotersRecord. With the new voter and one old follower
    # not fetching, the old majority (leader + the other follower) is not enough: no answer.
    cluster, leader = dynamic_cluster(observers=[4])
    silent = next(i for i in (1, 2, 3) if i != leader.node_id)
    token = cluster.client_request(leader.node_id, add_request(4))
    while 4 not in leader.voters.ids:  # ApiVersions answered, caught up, VotersRecord written
        assert cluster.deliver_one() is not None
    cluster.drop = is_fetch_from(4, silent)  # type: ignore[assignment]
    cluster.advance(1_000)
    assert token not in cluster.client_responses
    voters_offset = leader.log_end_offset - 1
    assert leader.high_watermark is not None and leader.high_watermark <= voters_offset
    cluster.drop = lambda e: False
    cluster.advance(1_000)
    assert cluster.client_responses[token].error_code == ErrorCode.none
    assert leader.high_watermark > voters_offset


def test_a_voter_whose_supported_kraft_versions_changed_updates_its_entry() -> None:
    # A voter restarted on a build supporting kraft.version 1 only (version drift, same endpoint
    # and directory) sends UpdateRaftVoter once it follows; the committed entry then says 1..1.
    import random

    from raft_harness import NodeRecord

    from kraft_engine.raft import RaftNode

    cluster, leader = dynamic_cluster()
    upgraded = next(i for i in (1, 2, 3) if i != leader.node_id)
    assert (leader.voters.get(upgraded).min_kraft_version, leader.voters.get(upgraded).max_kraft_version) == (0, 1)  # type: ignore[union-attr]
    old = cluster[upgraded]
    cluster.crash(upgraded)
    node = RaftNode(
        config=RaftConfig(), node_id=upgraded, directory_id=directory(upgraded), cluster_id=CLUSTER_ID,
        log=old.log, persisted=old.persisted, static_voters=None, rng=random.Random(7), now_ms=cluster.now_ms,
        local_endpoints=(endpoint(upgraded),), supported_kraft_versions=(1, 1),
    )
    cluster.records[upgraded] = NodeRecord(node=node, log=old.log, persisted=old.persisted)
    cluster.sent.clear()
    cluster.apply(upgraded, node.poll(cluster.now_ms))
    cluster.advance(5_000)
    assert any(type(e.payload).__name__ == "UpdateRaftVoterRequest" and e.source == upgraded for e in cluster.sent)
    entry = leader.voters.get(upgraded)
    assert entry is not None and (entry.min_kraft_version, entry.max_kraft_version) == (1, 1)
    assert entry.key.directory_id == directory(upgraded) and entry.endpoints == (endpoint(upgraded),)
    assert leader.high_watermark == leader.log_end_offset  # the update is committed


def test_the_last_voter_cannot_be_removed() -> None:
    cluster = Cluster([1], static=False)
    leader = cluster.elect()
    cluster.advance(1_000)
    token = cluster.client_request(leader.node_id, remove_request(1))
    assert cluster.client_responses[token].error_code == ErrorCode.invalid_request
    assert leader.voters.ids == {1}


def test_a_removed_leader_hands_over_with_end_quorum_epoch_without_anyone_waiting_out_a_timeout() -> None:
    # Removing the leader is the one voter change that moves leadership. Once its removal commits
    # the leader resigns and sends EndQuorumEpoch to the remaining voters with its preferred
    # successors, and each stands after Kafka's backoff by its position (0 ms for the most caught
    # up, then election.backoff.max.ms >> (n - 1) << (position - 1)): the new leader is elected
    # within election.backoff.max.ms of the commit, never after a voter's fetch timeout. (With two
    # voters left the first one's pre-vote is refused by the other, which heard from the leader
    # within its fetch timeout (KIP-996), so the second one's 500 ms slot elects.)
    config = RaftConfig()
    cluster, leader = dynamic_cluster(config=config)
    me, epoch = leader.node_id, leader.epoch
    remaining = {1, 2, 3} - {me}
    token = cluster.client_request(me, m.remove_voter_request(cluster_id=CLUSTER_ID, voter=ReplicaKey(me, directory(me))))
    sent_before = len(cluster.sent)
    committed_ms = None
    for _ in range(1000):
        cluster.advance(1)
        if token in cluster.client_responses:
            committed_ms = cluster.now_ms
            break
    assert committed_ms is not None and cluster.client_responses[token].error_code == ErrorCode.none
    while (new_leader := cluster.leader()) is None or new_leader.node_id == me:
        cluster.advance(1)
        assert cluster.now_ms - committed_ms < config.election_timeout_ms, "no leader within an election timeout"
    elected_ms = cluster.now_ms
    end_epochs = [e for e in cluster.sent[sent_before:]
                  if e.is_request and e.source == me and type(e.payload).__name__ == "EndQuorumEpochRequest"]
    assert {e.destination for e in end_epochs} == remaining
    assert elected_ms - committed_ms <= config.election_backoff_max_ms < config.fetch_timeout_ms
    assert new_leader.epoch == epoch + 1 and new_leader.node_id in remaining
    assert me not in new_leader.voters.ids


def test_committed_voters_leave_out_a_change_until_it_commits() -> None:
    # The quorum controller follows `committed_voters` (the UpdateFeatures "every controller
    # registered" check, broker-config node lookups): a VotersRecord past the high watermark may
    # still be truncated away, so it must not count yet.
    cluster, leader = dynamic_cluster(observers=[4])
    token = cluster.client_request(leader.node_id, add_request(4))
    seen_uncommitted = False
    for _ in range(10_000):
        if 4 in leader.voters.ids and 4 not in leader.committed_voters.ids:
            seen_uncommitted = True
        if token in cluster.client_responses:
            break
        if cluster.deliver_one() is None:
            cluster.advance(1)
    assert cluster.client_responses[token].error_code == ErrorCode.none
    assert seen_uncommitted
    assert leader.committed_voters.ids == {1, 2, 3, 4}
