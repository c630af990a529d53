"""The quorum controller under voter changes in the simulation, and the broken design it replaced.

`controller-voter-changes` (run over 200 seeds by the sweep in test_scenarios.py) runs the real
quorum controller on every node with client writes and voter changes interleaved, and fails on
any renounce that no leadership change explains. Here: the old design, which predicted its own
offsets and renounced when raft placed a batch elsewhere, is caught by it; and a run's client
writes are acknowledged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from kraft_engine.controller import AppendRefused, RecordAndVersion
from kraft_engine.sim import controller_machine
from kraft_engine.sim.controller_machine import ControllerMachine, SimRaftAppends
from kraft_engine.sim.invariants import SimulationFailure
from kraft_engine.sim.scenarios import SCENARIOS


class _PredictingAppends(SimRaftAppends):
    """The controller before the fix: it applied each batch at the offset after its previous one
    (the log end at its claim for the first) and renounced when raft had placed the batch
    elsewhere, i.e. whenever raft had written a control record (a VotersRecord) in between."""

    def __init__(self, machine: ControllerMachine) -> None:
        super().__init__(machine)
        self._predicted_next: dict[int, int] = {}

    def prepare_appends(self, *, epoch: int, batches: Sequence[Sequence[RecordAndVersion]]) -> list[int]:
        placed = super().prepare_appends(epoch=epoch, batches=batches)
        for records, last_offset in zip(batches, placed, strict=True):
            base = last_offset - len(records) + 1
            predicted = self._predicted_next.setdefault(epoch, base)
            self._predicted_next[epoch] = predicted + len(records)
            if base != predicted:
                self.schedule_prepared_append()  # the old shell had already handed raft the batch
                raise AppendRefused(f"Raft placed the batch ending at {last_offset}, "
                                    f"expected {predicted + len(records) - 1}")
        return placed


def test_a_controller_that_predicts_its_own_offsets_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_machine, "SimRaftAppends", _PredictingAppends)
    seen: Counter[str] = Counter()
    for seed in range(5):
        try:
            SCENARIOS["controller-voter-changes"].run(seed)
        except SimulationFailure as failure:
            assert f"seed {seed}:" in str(failure)
            seen[failure.invariant] += 1
    assert seen["ControllerRenounce"] >= 4, seen


def test_client_writes_are_acknowledged_through_voter_changes() -> None:
    run = SCENARIOS["controller-voter-changes"].story(3)
    run.finish()
    machines = [n.counter for n in run.cluster.running.values() if isinstance(n.counter, ControllerMachine)]
    outcomes = Counter(w.outcome for m in machines for w in m.writes)
    assert outcomes["ok"] > 20, outcomes
