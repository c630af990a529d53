"""Each invariant fires on the state a broken core would produce, and stays quiet on a healthy one.

Without this, a checker with a bug (or one that never runs) would make every green simulation
meaningless; these views are what a core with that exact bug would expose.
"""

from __future__ import annotations

import pytest

from kraft_engine.sim.invariants import (
    ConsistentCommittedData,
    ElectionRecord,
    LeaderNeverLoadSnapshot,
    MajorityReachedHighWatermark,
    MonotonicEpoch,
    MonotonicHighWatermark,
    NodeView,
    SingleLeader,
    SnapshotAtLogStart,
    Violation,
    default_invariants,
)

VOTERS = frozenset({1, 2, 3})


def view(node_id: int, **kw: object) -> NodeView:
    defaults: dict[str, object] = {
        "running": True,
        "persisted": ElectionRecord(epoch=1, leader_id=1, voted_id=1),
        "log_start_offset": 0,
        "log_end_offset": 10,
        "epoch": 1,
        "voter_ids": VOTERS,
    }
    defaults.update(kw)
    return NodeView(node_id=node_id, **defaults)  # type: ignore[arg-type]


def healthy() -> list[NodeView]:
    return [view(1, is_leader=True, high_watermark=10), view(2), view(3)]


def test_healthy_cluster_passes_every_default_invariant() -> None:
    for invariant in default_invariants():
        invariant.check(healthy())


def test_two_leaders_in_one_epoch_in_quorum_state() -> None:
    views = healthy()
    views[2] = view(3, persisted=ElectionRecord(epoch=1, leader_id=3, voted_id=3))
    with pytest.raises(Violation, match="epoch 1 has two leaders: 1 and 3"):
        SingleLeader().check(views)


def test_two_leaders_in_one_epoch_across_events() -> None:
    invariant = SingleLeader()
    invariant.check(healthy())
    # Node 1 crashed and its quorum-state vanished; later someone else claims epoch 1.
    later = [view(2, persisted=ElectionRecord(epoch=1, leader_id=2, voted_id=2))]
    with pytest.raises(Violation, match="two leaders"):
        invariant.check(later)


def test_two_acting_leaders_in_memory() -> None:
    views = [view(1, is_leader=True), view(2, is_leader=True, persisted=None)]
    with pytest.raises(Violation, match="both lead epoch 1"):
        SingleLeader().check(views)


def test_epoch_going_back_on_disk() -> None:
    invariant = MonotonicEpoch()
    invariant.check([view(1, persisted=ElectionRecord(5, None, None), epoch=5)])
    with pytest.raises(Violation, match="went back 5 -> 4"):
        invariant.check([view(1, persisted=ElectionRecord(4, None, None), epoch=4)])


def test_epoch_in_memory_ahead_of_disk() -> None:
    with pytest.raises(Violation, match="runs in epoch 2 but persisted epoch 1"):
        MonotonicEpoch().check([view(1, epoch=2)])


def test_high_watermark_going_backwards() -> None:
    invariant = MonotonicHighWatermark()
    invariant.check([view(1, is_leader=True, high_watermark=10)])
    with pytest.raises(Violation, match="high watermark 7 after 10"):
        invariant.check([view(2, is_leader=True, epoch=2, high_watermark=7)])


def test_a_deposed_leader_that_has_not_heard_yet_is_not_the_clusters_high_watermark() -> None:
    invariant = MonotonicHighWatermark()
    invariant.check([view(2, is_leader=True, epoch=2, high_watermark=30)])
    # The epoch-2 leader steps down for a moment; the cut-off epoch-1 leader still leads in its head.
    invariant.check([view(1, is_leader=True, epoch=1, high_watermark=12)])
    with pytest.raises(Violation, match="high watermark 20 after 30"):
        invariant.check([view(3, is_leader=True, epoch=3, high_watermark=20)])


def test_high_watermark_beyond_the_majority() -> None:
    views = [view(1, is_leader=True, high_watermark=10), view(2, log_end_offset=4), view(3, log_end_offset=9)]
    with pytest.raises(Violation, match=r"only voters \[1\]"):
        MajorityReachedHighWatermark().check(views)


def test_log_start_without_snapshot() -> None:
    with pytest.raises(Violation, match="no snapshot at log start 5"):
        SnapshotAtLogStart().check([view(1, log_start_offset=5, earliest_snapshot=(8, 1))])
    with pytest.raises(Violation, match="beyond its oldest snapshot"):
        SnapshotAtLogStart().check([view(1, log_start_offset=8, earliest_snapshot=(6, 1))])
    with pytest.raises(Violation, match="disagrees with snapshot"):
        SnapshotAtLogStart().check([view(1, earliest_snapshot=(6, 1), earliest_snapshot_valid=False)])


def test_leader_loading_a_snapshot() -> None:
    with pytest.raises(Violation, match="loaded 1 snapshot"):
        LeaderNeverLoadSnapshot().check([view(1, writable=True, snapshot_loads_since_leader_change=1)])


def test_committed_value_changes_between_nodes_and_incarnations() -> None:
    invariant = ConsistentCommittedData()
    invariant.check([view(1, committed=[(1, 1), (2, 2)])])
    with pytest.raises(Violation, match="offset 2 committed as 2 on node 1 but as 5 on node 2"):
        invariant.check([view(1, committed=[(1, 1), (2, 2)]), view(2, committed=[(2, 5)])])
    # A restarted node (new incarnation) is re-read from its start, not from the old cursor.
    invariant = ConsistentCommittedData()
    invariant.check([view(1, committed=[(1, 1), (2, 2)])])
    with pytest.raises(Violation, match="offset 1"):
        invariant.check([view(1, committed=[(1, 9)], incarnation=1)])
