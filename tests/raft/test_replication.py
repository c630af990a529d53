"""Pull replication: fetch validation, divergence, truncation, the high watermark."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from raft_harness import CLUSTER_ID, Cluster, directory, make_node, only_response, voter_set

from kraft_engine.invariant import InvariantViolation
from kraft_engine.raft import ElectionState, LeaderState, MemoryLog, RaftConfig, ReplicaKey, Role
from kraft_engine.raft import messages as m
from kraft_engine.records.log_batch import OffsetAndEpoch, build_data_batch

NOW = 1_000_000


def log_with(epochs: list[int]) -> MemoryLog:
    log = MemoryLog()
    for offset, epoch in enumerate(epochs):
        log.append(build_data_batch([f"r{offset}".encode()], base_offset=offset, epoch=epoch, timestamp_ms=0))
    log.flush()
    return log


def fetch(*, replica: int, epoch: int, offset: int, last_epoch: int, cluster_id: str = CLUSTER_ID, max_wait_ms: int = 0) -> object:
    return m.fetch_request(
        cluster_id=cluster_id,
        replica=ReplicaKey(replica, directory(replica)),
        epoch=epoch,
        fetch_offset=offset,
        last_fetched_epoch=last_epoch,
        high_watermark=None,
        max_wait_ms=max_wait_ms,
        max_bytes=1 << 20,
    )


def fetch_response(*, leader: int, epoch: int, hwm: int, records: bytes = b"", diverging: OffsetAndEpoch | None = None) -> object:
    return m.fetch_response(
        error=ErrorCode.none,
        leader_id=leader,
        epoch=epoch,
        high_watermark=hwm,
        log_start_offset=0,
        records=records,
        diverging=diverging,
        snapshot_id=None,
        endpoints=(),
        listener="CONTROLLER",
    )


def partition(response: object) -> object:
    return response.responses[0].partitions[0]  # type: ignore[attr-defined]


def three_node_leader() -> tuple[Cluster, object]:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect()
    cluster.advance(500)
    return cluster, leader


def test_uncommitted_entries_of_a_deposed_leader_are_truncated_and_never_committed() -> None:
    cluster, leader = three_node_leader()
    old = leader.node_id
    cluster.drop = lambda e: old in (e.source, e.destination)
    leader.append([b"lost-1", b"lost-2"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(10_000)
    new_leader = cluster.leader()
    assert new_leader is not None and new_leader.node_id != old
    new_leader.append([b"kept"], epoch=new_leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(1_000)
    cluster.drop = lambda e: False
    cluster.advance(5_000)
    logs = {i: [(b.base_offset, b.epoch, b.raw) for b in cluster[i].log.batches()] for i in (1, 2, 3)}
    assert logs[1] == logs[2] == logs[3]
    for i in (1, 2, 3):
        assert b"lost-1" not in cluster[i].committed_values
        assert cluster[i].committed_values[-1:] == [b"kept"]


def test_leader_answers_a_diverging_fetch_with_the_epoch_end_offset() -> None:
    # Leader log: epochs 1,1,3,3 ; follower last fetched epoch 2 at offset 3.
    log = log_with([1, 1, 3, 3])
    node = make_node(1, [1], log=log, persisted=ElectionState(epoch=3, leader_id=1, voted_key=ReplicaKey(1, directory(1))))
    assert node.role is Role.LEADER
    out = node.handle_request(fetch(replica=2, epoch=node.epoch, offset=3, last_epoch=2), token=1, now_ms=NOW)
    diverging = partition(only_response(out)).diverging_epoch
    assert (diverging.epoch, diverging.end_offset) == (1, 2)


def test_follower_truncates_to_the_diverging_epoch_then_refetches() -> None:
    follower = make_node(2, [1, 2, 3], log=log_with([1, 1, 2, 2]), persisted=ElectionState(epoch=3, leader_id=1))
    assert follower.role is Role.FOLLOWER
    out = follower.poll(NOW)
    (request,) = out.requests
    assert request.request.topics[0].partitions[0].fetch_offset == 4
    out = follower.handle_response(request.token, fetch_response(leader=1, epoch=3, hwm=-1, diverging=OffsetAndEpoch(epoch=1, offset=2)), now_ms=NOW)
    assert follower.log_end_offset == 2
    (again,) = out.requests
    partition_request = again.request.topics[0].partitions[0]
    assert (partition_request.fetch_offset, partition_request.last_fetched_epoch) == (2, 1)


def test_follower_refuses_to_truncate_below_its_high_watermark() -> None:
    follower = make_node(2, [1, 2, 3], log=log_with([1, 1, 2, 2]), persisted=ElectionState(epoch=3, leader_id=1))
    out = follower.poll(NOW)
    out = follower.handle_response(out.requests[0].token, fetch_response(leader=1, epoch=3, hwm=3), now_ms=NOW)
    assert follower.high_watermark == 3
    with pytest.raises(InvariantViolation):
        follower.handle_response(
            out.requests[0].token, fetch_response(leader=1, epoch=3, hwm=3, diverging=OffsetAndEpoch(epoch=1, offset=2)), now_ms=NOW
        )


def test_follower_hwm_is_the_leader_hwm_capped_by_its_own_log_end() -> None:
    follower = make_node(2, [1, 2, 3], log=log_with([1, 1]), persisted=ElectionState(epoch=3, leader_id=1))
    out = follower.poll(NOW)
    follower.handle_response(out.requests[0].token, fetch_response(leader=1, epoch=3, hwm=10), now_ms=NOW)
    assert follower.high_watermark == 2


def test_follower_hwm_never_moves_back() -> None:
    # The leader's HWM only grows, so a lower one is a broken invariant (as Kafka's FollowerState
    # throws on a non-monotonic update): the follower raises and keeps the HWM it had.
    follower = make_node(2, [1, 2, 3], log=log_with([1, 1, 1, 1]), persisted=ElectionState(epoch=3, leader_id=1))
    out = follower.poll(NOW)
    out = follower.handle_response(out.requests[0].token, fetch_response(leader=1, epoch=3, hwm=3), now_ms=NOW)
    assert follower.high_watermark == 3
    out = follower.handle_response(out.requests[0].token, fetch_response(leader=1, epoch=3, hwm=3), now_ms=NOW)
    assert follower.high_watermark == 3
    with pytest.raises(InvariantViolation, match="move back"):
        follower.handle_response(out.requests[0].token, fetch_response(leader=1, epoch=3, hwm=2), now_ms=NOW)
    assert follower.high_watermark == 3


def test_fetch_with_another_cluster_id_is_refused() -> None:
    node = make_node(1, [1])
    response = only_response(node.handle_request(fetch(replica=2, epoch=1, offset=0, last_epoch=0, cluster_id="x"), token=1, now_ms=NOW))
    assert response.error_code == ErrorCode.inconsistent_cluster_id


def test_fetch_to_a_non_leader_names_the_leader() -> None:
    follower = make_node(2, [1, 2, 3], persisted=ElectionState(epoch=3, leader_id=1))
    response = only_response(follower.handle_request(fetch(replica=9, epoch=3, offset=0, last_epoch=0), token=1, now_ms=NOW))
    p = partition(response)
    assert p.error_code == ErrorCode.not_leader_or_follower
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (1, 3)
    assert [(n.node_id, n.port) for n in response.node_endpoints] == [(1, 19001)]


def test_fetch_with_a_stale_epoch_is_fenced_and_a_future_one_is_unknown() -> None:
    node = make_node(1, [1])
    fenced = only_response(node.handle_request(fetch(replica=2, epoch=0, offset=0, last_epoch=0), token=1, now_ms=NOW))
    assert partition(fenced).error_code == ErrorCode.fenced_leader_epoch
    future = only_response(node.handle_request(fetch(replica=2, epoch=9, offset=0, last_epoch=0), token=2, now_ms=NOW))
    assert partition(future).error_code == ErrorCode.unknown_leader_epoch


def test_an_idle_fetch_is_parked_until_new_data_arrives() -> None:
    node = make_node(1, [1], config=RaftConfig(append_linger_ms=0))
    node.poll(NOW)  # the flush of its LeaderChange batch completes: the high watermark moves
    end = node.log_end_offset
    out = node.handle_request(fetch(replica=5, epoch=1, offset=end, last_epoch=1, max_wait_ms=500), token=7, now_ms=NOW)
    assert out.responses == []
    node.append([b"new"], epoch=1, now_ms=NOW + 10)
    out = node.poll(NOW + 10)
    (response,) = out.responses
    assert response.token == 7
    assert partition(response.response).records


def test_an_idle_fetch_is_answered_empty_at_its_max_wait() -> None:
    node = make_node(1, [1])
    node.poll(NOW)  # the flush of its LeaderChange batch completes: the high watermark moves
    end = node.log_end_offset
    node.handle_request(fetch(replica=5, epoch=1, offset=end, last_epoch=1, max_wait_ms=500), token=7, now_ms=NOW)
    assert node.next_deadline_ms(NOW) <= NOW + 500
    assert node.poll(NOW + 499).responses == []
    (response,) = node.poll(NOW + 500).responses
    assert not partition(response.response).records


def test_a_follower_never_has_two_fetches_in_flight() -> None:
    follower = make_node(2, [1, 2, 3], persisted=ElectionState(epoch=3, leader_id=1))
    first = follower.poll(NOW).requests
    assert len(first) == 1
    for step in range(1, 10):
        assert follower.poll(NOW + step * 100).requests == []
    # Only after the request times out does a new one go out.
    later = follower.poll(NOW + follower.config.request_timeout_ms + follower.config.retry_backoff_ms)
    assert len([r for r in later.requests if r.destination_id == 1]) <= 1


def test_leader_hwm_waits_for_a_record_of_its_own_epoch() -> None:
    voters = voter_set([1, 2, 3])
    leader = LeaderState(
        local_key=ReplicaKey(1, directory(1)),
        epoch=5,
        epoch_start_offset=10,
        granting_voters=frozenset({1, 2}),
        voters=voters,
        config=RaftConfig(),
        now_ms=NOW,
    )
    # Old-epoch records up to the epoch start are on a majority, but that commits nothing yet.
    assert not leader.update_local_state(10)
    assert not leader.update_replica_state(ReplicaKey(2, directory(2)), fetch_offset=10, leader_end_offset=10, now_ms=NOW)
    assert leader.high_watermark is None
    assert not leader.update_local_state(11)
    assert leader.update_replica_state(ReplicaKey(2, directory(2)), fetch_offset=11, leader_end_offset=11, now_ms=NOW)
    assert leader.high_watermark == 11


def test_leader_hwm_is_the_majority_offset_and_never_moves_back() -> None:
    voters = voter_set([1, 2, 3, 4, 5])
    leader = LeaderState(
        local_key=ReplicaKey(1, directory(1)),
        epoch=1,
        epoch_start_offset=0,
        granting_voters=frozenset({1, 2, 3}),
        voters=voters,
        config=RaftConfig(),
        now_ms=NOW,
    )
    leader.update_local_state(20)
    leader.update_replica_state(ReplicaKey(2, directory(2)), fetch_offset=15, leader_end_offset=20, now_ms=NOW)
    assert leader.high_watermark is None  # 2 of 5 is not a majority
    leader.update_replica_state(ReplicaKey(3, directory(3)), fetch_offset=12, leader_end_offset=20, now_ms=NOW)
    assert leader.high_watermark == 12
    # A voter fetching from a lower offset (it truncated) never drags the HWM back.
    leader.update_replica_state(ReplicaKey(3, directory(3)), fetch_offset=5, leader_end_offset=20, now_ms=NOW)
    assert leader.high_watermark == 12


def test_an_observer_fetches_but_does_not_count_toward_the_hwm() -> None:
    voters = voter_set([1, 2, 3])
    leader = LeaderState(
        local_key=ReplicaKey(1, directory(1)),
        epoch=1,
        epoch_start_offset=0,
        granting_voters=frozenset({1, 2}),
        voters=voters,
        config=RaftConfig(),
        now_ms=NOW,
    )
    leader.update_local_state(10)
    leader.update_replica_state(ReplicaKey(9, directory(9)), fetch_offset=10, leader_end_offset=10, now_ms=NOW)
    assert leader.high_watermark is None
    assert ReplicaKey(9, directory(9)) in leader.observer_states


def test_observer_discovers_the_leader_and_replicates() -> None:
    cluster = Cluster([1, 2, 3], observers=[7])
    leader = cluster.elect()
    leader.append([b"seen-by-observer"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(5_000)
    observer = cluster.node(7)
    assert not observer.is_voter
    assert observer.role is Role.FOLLOWER
    assert observer.leader_id == leader.node_id
    assert cluster[7].committed_values == [b"seen-by-observer"]
    # It never voted.
    assert all(s.voted_key is None for s in cluster[7].persist_history)


def test_an_observer_waiting_for_a_bootstrap_answer_does_not_ask_to_be_polled_at_once() -> None:
    cluster = Cluster([1, 2, 3], observers=[7])
    observer = cluster.node(7)
    assert observer.role is Role.UNATTACHED
    fetches = [e for e in cluster.queue if e.source == 7]
    assert len(fetches) == 1
    assert observer.next_deadline_ms(cluster.now_ms) > cluster.now_ms


def test_an_observer_that_loses_its_leader_forgets_it_and_rediscovers_it() -> None:
    cluster = Cluster([1, 2, 3], observers=[7])
    leader = cluster.elect()
    cluster.advance(2_000)
    observer = cluster.node(7)
    assert observer.role is Role.FOLLOWER
    cluster.drop = lambda e: 7 in (e.source, e.destination)
    cluster.advance(cluster.config.fetch_timeout_ms + 100)
    assert observer.role is Role.UNATTACHED
    assert observer.leader_id is None
    assert cluster[7].persisted is not None and cluster[7].persisted.leader_id is None
    cluster.drop = lambda e: False
    cluster.advance(2_000)
    assert observer.role is Role.FOLLOWER
    assert observer.leader_id == leader.node_id


def test_the_leader_counts_a_fetch_only_for_the_voter_with_that_directory_id() -> None:
    # The Fetch's replica id and directory id together name the replica: the same id from
    # another directory (a re-formatted disk) is not the voter and does not commit anything.
    cluster = Cluster([1, 2, 3], static=False)
    leader = cluster.elect()
    cluster.advance(1_000)
    leader.append([b"x"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.now_ms += 100
    cluster.apply(leader.node_id, leader.poll(cluster.now_ms))  # written, nobody has fetched it
    end = leader.log_end_offset
    assert leader.high_watermark == end - 1
    follower = next(i for i in (1, 2, 3) if i != leader.node_id)

    def fetch_from(directory_id: object) -> object:
        return m.fetch_request(
            cluster_id=CLUSTER_ID, replica=ReplicaKey(follower, directory_id), epoch=leader.epoch,  # type: ignore[arg-type]
            fetch_offset=end, last_fetched_epoch=leader.epoch, high_watermark=end - 1, max_wait_ms=0, max_bytes=1 << 20,
        )

    cluster.apply(leader.node_id, leader.handle_request(fetch_from(directory(follower + 50)), token=10_001, now_ms=cluster.now_ms))
    assert leader.high_watermark == end - 1
    cluster.apply(leader.node_id, leader.handle_request(fetch_from(directory(follower)), token=10_002, now_ms=cluster.now_ms))
    assert leader.high_watermark == end


def test_a_restarted_observer_that_remembers_the_leader_only_by_id_follows_it_again() -> None:
    # A dynamic quorum's observer knows no voter endpoints (it bootstraps through
    # controller.quorum.bootstrap.servers). Restarted with its quorum-state (epoch, leader id)
    # and an empty log, it is Unattached with a leader it cannot fetch from; the leader's answer
    # to its bootstrap Fetch names the leader's endpoints, and it must follow (found by the
    # simulation: voter-changes seed 39 on the slow-WAN profile).
    cluster = Cluster([1, 2, 3], observers=[4], static=False)
    leader = cluster.elect()
    cluster.advance(3_000)
    assert cluster.node(4).role is Role.FOLLOWER
    persisted = cluster[4].persisted
    assert persisted is not None and persisted.leader_id == leader.node_id
    cluster.crash(4)
    cluster.records[4].alive = True
    observer = cluster.start(4, MemoryLog(), persisted, static_voters=False).node
    assert observer.role is Role.UNATTACHED and observer.leader_id == leader.node_id
    leader.append([b"after-restart"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(5_000)
    assert observer.role is Role.FOLLOWER and observer.leader_id == leader.node_id
    assert b"after-restart" in cluster[4].committed_values


def test_a_follower_appends_and_delivers_fetched_batches_without_decoding_their_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Raft moves a follower's fetched batches by their headers; the records are decoded only when
    the state machine reads them (on its own thread in a node), never on the way to the next Fetch."""
    from kraft_engine.records import log_batch

    cluster, leader = three_node_leader()
    follower = next(i for i in (1, 2, 3) if i != leader.node_id)  # type: ignore[attr-defined]
    decoded: list[int] = []
    real_decode = log_batch.decode_records

    def counting_decode(data: bytes) -> object:
        decoded.append(len(data))
        return real_decode(data)

    monkeypatch.setattr(log_batch, "decode_records", counting_decode)
    values = [f"value-{i}".encode() for i in range(500)]
    leader.append(values, epoch=leader.epoch, now_ms=cluster.now_ms)  # type: ignore[attr-defined]
    cluster.advance(1_000)
    delivered = [b for b in cluster[follower].committed if b.base_offset <= leader.high_watermark - 1]  # type: ignore[attr-defined]
    batch = next(b for b in delivered if b.last_offset - b.base_offset + 1 == len(values))
    assert decoded == []  # appended, committed and delivered: not one batch decoded
    assert batch.records == tuple(values)  # the state machine's first read decodes them
    assert len(decoded) == 1
    assert batch.records == tuple(values)  # and only once
    assert len(decoded) == 1
