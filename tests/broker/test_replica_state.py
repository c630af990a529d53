"""The leader's ISR and high-watermark rules."""

from __future__ import annotations

from kraft_engine.broker import LeaderReplicaState

LAG_MS = 30_000


def leader(*, isr: tuple[int, ...] = (1, 2, 3), hwm: int = 0, epoch_start: int = 0) -> LeaderReplicaState:
    return LeaderReplicaState(
        local_id=1, replicas=(1, 2, 3), isr=isr, partition_epoch=5, high_watermark=hwm,
        leader_epoch_start_offset=epoch_start, now_ms=0,
    )


def test_the_high_watermark_is_the_smallest_log_end_of_the_isr() -> None:
    state = leader()
    assert not state.follower_fetched(2, fetch_offset=10, leader_log_end=10, now_ms=1)
    assert state.high_watermark == 0  # replica 3 has not fetched past 0
    assert state.follower_fetched(3, fetch_offset=7, leader_log_end=10, now_ms=2)
    assert state.high_watermark == 7
    state.follower_fetched(3, fetch_offset=10, leader_log_end=10, now_ms=3)
    assert state.high_watermark == 10


def test_a_replica_outside_the_isr_does_not_hold_the_high_watermark_back() -> None:
    state = leader(isr=(1, 2))
    state.follower_fetched(2, fetch_offset=10, leader_log_end=10, now_ms=1)
    assert state.high_watermark == 10


def test_the_high_watermark_never_moves_back() -> None:
    state = leader(isr=(1, 2), hwm=8)
    state.follower_fetched(2, fetch_offset=5, leader_log_end=10, now_ms=1)
    assert state.high_watermark == 8


def test_a_pending_shrink_still_counts_the_replica_it_removes() -> None:
    state = leader()
    state.follower_fetched(2, fetch_offset=10, leader_log_end=10, now_ms=1)
    state.propose(frozenset({1, 2}))
    assert not state.maybe_advance_high_watermark(leader_log_end=10)
    assert state.high_watermark == 0
    state.committed(isr=(1, 2), partition_epoch=6)
    assert state.maybe_advance_high_watermark(leader_log_end=10)
    assert state.high_watermark == 10


def test_a_pending_expansion_counts_at_once() -> None:
    state = leader(isr=(1, 2))
    state.follower_fetched(2, fetch_offset=10, leader_log_end=10, now_ms=1)
    state.propose(frozenset({1, 2, 3}))
    state.follower_fetched(3, fetch_offset=10, leader_log_end=12, now_ms=2)
    assert state.high_watermark == 10
    state.follower_fetched(2, fetch_offset=12, leader_log_end=12, now_ms=3)
    assert state.high_watermark == 10  # replica 3 at 10 holds it


def test_a_follower_that_stops_catching_up_leaves_the_isr_after_the_lag_time() -> None:
    state = leader()
    state.follower_fetched(2, fetch_offset=10, leader_log_end=10, now_ms=1000)
    state.follower_fetched(3, fetch_offset=10, leader_log_end=10, now_ms=1000)
    # Replica 3 keeps fetching but stays behind a leader that keeps growing.
    for t in range(2000, 40_000, 1000):
        state.follower_fetched(2, fetch_offset=10 + t, leader_log_end=10 + t, now_ms=t)
        state.follower_fetched(3, fetch_offset=10, leader_log_end=10 + t, now_ms=t)
    assert state.shrink_candidates(leader_log_end=40_010, now_ms=31_001, lag_max_ms=LAG_MS) == {3}
    assert state.shrink_candidates(leader_log_end=40_010, now_ms=31_000, lag_max_ms=LAG_MS) == set()


def test_a_follower_that_reaches_the_previous_log_end_is_caught_up_as_of_that_fetch() -> None:
    state = leader()
    state.follower_fetched(3, fetch_offset=5, leader_log_end=10, now_ms=20_000)
    # It reached 10 (the log end at its previous fetch) while the leader grew to 12.
    state.follower_fetched(3, fetch_offset=10, leader_log_end=12, now_ms=45_000)
    assert state.followers[3].last_caught_up_ms == 20_000
    assert 3 in state.shrink_candidates(leader_log_end=12, now_ms=50_001, lag_max_ms=LAG_MS)


def test_expansion_needs_the_high_watermark_and_the_leader_epoch_start() -> None:
    state = leader(isr=(1, 2), hwm=10, epoch_start=12)
    state.follower_fetched(3, fetch_offset=11, leader_log_end=15, now_ms=1)
    assert state.expand_candidates() == set()
    state.follower_fetched(3, fetch_offset=12, leader_log_end=15, now_ms=2)
    assert state.expand_candidates() == {3}
    assert state.expand_candidates(eligible=frozenset({2})) == set()  # fenced brokers never join


def test_a_stale_committed_state_is_ignored() -> None:
    state = leader()
    state.committed(isr=(1,), partition_epoch=4)
    assert state.isr == {1, 2, 3}
    assert state.partition_epoch == 5


def test_with_elr_the_high_watermark_holds_while_the_isr_is_below_min_isr() -> None:
    # KIP-966: ISR {1, 2} with an effective min ISR of 3 commits nothing, though both have fetched.
    state = leader(isr=(1, 2))
    state.min_isr_to_advance = 3
    assert not state.follower_fetched(2, fetch_offset=10, leader_log_end=10, now_ms=1)
    assert state.high_watermark == 0
    # The ISR back at min ISR: the high watermark moves at once to what all three have.
    state.committed(isr=(1, 2, 3), partition_epoch=6)
    state.follower_fetched(3, fetch_offset=10, leader_log_end=10, now_ms=2)
    assert state.high_watermark == 10
    # Without ELR (no floor) the same ISR of two commits, as before.
    plain = leader(isr=(1, 2))
    plain.follower_fetched(2, fetch_offset=10, leader_log_end=10, now_ms=1)
    assert plain.high_watermark == 10
