"""A deliberately broken core must be caught by the simulation, not just by hand-made views.

The vote rule is broken the way a careless implementation would break it (grant every vote,
whatever the candidate's log and whoever we already voted for). The unchanged scenarios must then
report two leaders in one epoch, with the seed that shows it.
"""

from __future__ import annotations

from collections import Counter

import pytest

from kraft_engine.raft import RaftNode
from kraft_engine.sim.invariants import SimulationFailure
from kraft_engine.sim.scenarios import SCENARIOS


def test_a_core_that_grants_every_vote_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def grant_everything(self: RaftNode, candidate: object, *, up_to_date: bool, pre_vote: bool) -> bool:
        return True

    monkeypatch.setattr(RaftNode, "_can_grant_vote", grant_everything)
    seen: Counter[str] = Counter()
    for name in ("leader-kill", "split-2-3"):
        for seed in range(8):
            try:
                SCENARIOS[name].run(seed)
            except SimulationFailure as failure:
                assert f"seed {seed}:" in str(failure)
                seen[failure.invariant] += 1
    assert seen["SingleLeader"] > 0, seen
