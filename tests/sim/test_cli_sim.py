"""`kraft sim`: one line per scenario, non-zero exit and a replay command on any violation."""

from __future__ import annotations

import pytest

from kraft_engine.cli.main import main
from kraft_engine.sim import scenarios
from kraft_engine.sim.invariants import SimulationFailure
from kraft_engine.sim.scenarios import RunOutcome, Scenario


class Healthy(Scenario):
    def run(self, seed: int) -> RunOutcome:
        return RunOutcome(events=100 + seed, virtual_ms=2000)


def test_runs_a_scenario_and_reports_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(scenarios.SCENARIOS, "healthy", Healthy("healthy", "never fails", scenarios.first_election))
    assert main(["sim", "--scenario", "healthy", "--seeds", "2", "--start", "4"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    assert out[0].startswith("healthy: seeds 4..5 (2 run), 209 events, 4 s virtual, slowest recovery 0 ms")
    assert " 0 violations" in out[0]


def test_violation_exits_non_zero_with_seed_and_replay_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken(Scenario):
        def run(self, seed: int) -> RunOutcome:
            if seed == 7:
                raise SimulationFailure(seed=7, event_index=12, now_ms=300, invariant="SingleLeader", detail="two")
            return RunOutcome(events=1, virtual_ms=1)

    monkeypatch.setitem(scenarios.SCENARIOS, "broken", Broken("broken", "fails on seed 7", scenarios.first_election))
    assert main(["sim", "--scenario", "broken", "--seeds", "3", "--start", "6"]) == 1
    captured = capsys.readouterr()
    assert "1 violations" in captured.out
    assert "seed 7: invariant SingleLeader violated at event 12" in captured.err
    assert "reproduce: kraft sim --scenario broken --seeds 1 --start 7" in captured.err


def test_unknown_scenario_and_bad_counts_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--scenario", "nope"]) == 1
    assert "unknown scenario 'nope'" in capsys.readouterr().err
    assert main(["sim", "--seeds", "0"]) == 1
    assert "--seeds must be at least 1" in capsys.readouterr().err
    assert main(["sim", "--network", "moon"]) == 1
    assert "unknown --network 'moon'" in capsys.readouterr().err


def test_list_names_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--list"]) == 0
    out = capsys.readouterr().out
    for name in scenarios.SCENARIOS:
        assert name in out
