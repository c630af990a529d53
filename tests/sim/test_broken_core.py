"""A deliberately broken core must be caught by the simulation, not just by hand-made views.

The vote rule is broken the way a careless implementation would break it (grant every vote,
whatever the candidate's log and whoever we already voted for). The unchanged scenarios must then
report two leaders in one epoch, with the seed that shows it.
"""

from __future__ import annotations

from collections import Counter

import pytest

from kraft_engine.raft.elections import Elections
from kraft_engine.raft.fetching import Fetching
from kraft_engine.sim.invariants import SimulationFailure
from kraft_engine.sim.scenarios import SCENARIOS


def test_a_core_that_grants_every_vote_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def grant_everything(self: Elections, candidate: object, *, up_to_date: bool, pre_vote: bool) -> bool:
        return True

    monkeypatch.setattr(Elections, "can_grant_vote", grant_everything)
    seen: Counter[str] = Counter()
    for name in ("leader-kill", "split-2-3"):
        for seed in range(8):
            try:
                SCENARIOS[name].run(seed)
            except SimulationFailure as failure:
                assert f"seed {seed}:" in str(failure)
                seen[failure.invariant] += 1
    assert seen["SingleLeader"] > 0, seen


def test_a_snapshot_holding_another_value_fails_the_final_validation() -> None:
    from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
    from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
    from kio.static.primitive import i16, i64

    from kraft_engine.raft import BOOTSTRAP_SNAPSHOT_ID
    from kraft_engine.records.control import build_control_batch
    from kraft_engine.records.log_batch import build_data_batch
    from kraft_engine.sim.invariants import Violation
    from kraft_engine.sim.replicated_counter import encode_value
    from kraft_engine.sim.scenarios import lagging_follower_snapshot

    run = lagging_follower_snapshot(0)
    run.cluster.validate_committed_logs()  # the healthy run passes
    node_id, snapshot_id = next(
        (i, s) for i, d in run.cluster.disks.items() for s in d.log.snapshot_ids() if s != BOOTSTRAP_SNAPSHOT_ID
    )
    forged = b"".join(
        [
            build_control_batch(
                base_offset=0,
                partition_leader_epoch=snapshot_id.epoch,
                timestamp_ms=0,
                records=[SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(0))],
            ),
            build_data_batch([encode_value(999_999)], base_offset=1, epoch=snapshot_id.epoch, timestamp_ms=0),
            build_control_batch(
                base_offset=2,
                partition_leader_epoch=snapshot_id.epoch,
                timestamp_ms=0,
                records=[SnapshotFooterRecord(version=i16(0))],
            ),
        ]
    )
    run.cluster.disks[node_id].log.store_snapshot(snapshot_id, forged)
    with pytest.raises(Violation, match=f"snapshot .* on node {node_id} holds 999999"):
        run.cluster.validate_committed_logs()


def test_a_core_without_fast_failover_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fast-failover scenario requires every surviving voter to stand before its fetch timeout
    # fires; a core that, like Kafka, waits out controller.quorum.fetch.timeout.ms fails it.
    monkeypatch.setattr(Elections, "maybe_fail_over", lambda self, inflight, now_ms: False)
    for seed in range(3):
        with pytest.raises(SimulationFailure) as excinfo:
            SCENARIOS["fast-failover"].run(seed)
        assert excinfo.value.invariant == "FastFailover"
        assert "stood only at its fetch timeout" in str(excinfo.value)


def test_a_leader_that_counts_itself_before_its_flush_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The overlap of the leader's fsync with replication is safe only because the leader counts
    # its own end offset once the fsync completed. A leader that counts what it merely appended
    # commits data a crash then loses: crash-before-flush must catch it (on its single-voter
    # seeds at least, where no follower's durable copy can save the day).
    from kraft_engine.raft import LeaderState

    drain = Fetching.drain_accumulator

    def counts_itself_before_flush(self: Fetching, state: LeaderState, now_ms: int, *,
                                   max_bytes: int | None = None) -> None:
        drain(self, state, now_ms, max_bytes=max_bytes)
        leader = self._ctx.quorum.state
        if isinstance(leader, LeaderState) and leader.update_local_state(self._ctx.log.end_offset().offset):
            self._on_leader_hwm_advanced(leader, now_ms)

    monkeypatch.setattr(Fetching, "drain_accumulator", counts_itself_before_flush)
    caught = []
    for seed in range(13):
        try:
            SCENARIOS["crash-before-flush"].run(seed)
        except SimulationFailure as failure:
            caught.append((seed, failure.invariant))
    assert caught, "no seed caught a leader counting unflushed offsets"
    assert all(invariant == "MonotonicHighWatermark" for _, invariant in caught), caught
