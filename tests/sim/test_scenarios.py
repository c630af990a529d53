"""The simulation sweep: every scenario over a fixed set of seeds, invariants checked per event.

The seeds are fixed (0..199 by default) so CI is reproducible; `KRAFT_SIM_SEEDS` changes the
count for a quick local run, and `kraft sim` runs any number. Each scenario's seeds are spread
over two worker processes (the CI machine has two cores). A failure names its seed, its event
index and the broken invariant, plus the command that replays it.
"""

from __future__ import annotations

import os
from concurrent.futures import Executor

import pytest

from kraft_engine.sim.invariants import SimulationFailure
from kraft_engine.sim.scenarios import SCENARIOS

SEEDS = int(os.environ.get("KRAFT_SIM_SEEDS", "200"))
_CHUNK = 10


def _run_seeds(job: tuple[str, int, int]) -> tuple[int, list[str]]:
    name, start, count = job
    events = 0
    failures: list[str] = []
    for seed in range(start, start + count):
        try:
            events += SCENARIOS[name].run(seed).events
        except SimulationFailure as failure:
            failures.append(f"{failure}\n  reproduce: kraft sim --scenario {name} --seeds 1 --start {seed}")
    return events, failures


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_holds_every_invariant_for_every_seed(name: str, pool: Executor) -> None:
    jobs = [(name, start, min(_CHUNK, SEEDS - start)) for start in range(0, SEEDS, _CHUNK)]
    events = 0
    failures: list[str] = []
    for chunk_events, chunk_failures in pool.map(_run_seeds, jobs):
        events += chunk_events
        failures += chunk_failures
    assert not failures, f"{len(failures)} of {SEEDS} seeds failed:\n" + "\n".join(failures[:5])
    assert events > 0
