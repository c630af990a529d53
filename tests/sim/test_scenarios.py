"""The simulation sweep: every scenario over a fixed set of seeds, invariants checked per event.

The seeds are fixed (0..199 by default) so CI is reproducible; `KRAFT_SIM_SEEDS` changes the
count for a quick local run, and `kraft sim` runs any number. The runs are spread over two
worker processes (the CI machine has two cores). A failure names its seed, its event index and
the broken invariant, plus the command that replays it.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import pytest

from kraft_engine.sim.invariants import SimulationFailure
from kraft_engine.sim.scenarios import SCENARIOS

SEEDS = int(os.environ.get("KRAFT_SIM_SEEDS", "200"))


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


@pytest.fixture(scope="module")
def sweep() -> dict[str, tuple[int, list[str]]]:
    chunk = max(SEEDS // 10, 1)
    jobs = [(name, start, min(chunk, SEEDS - start)) for name in SCENARIOS for start in range(0, SEEDS, chunk)]
    results: dict[str, tuple[int, list[str]]] = {name: (0, []) for name in SCENARIOS}
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        for (name, _, _), (events, failures) in zip(jobs, pool.map(_run_seeds, jobs), strict=True):
            total, seen = results[name]
            results[name] = (total + events, seen + failures)
    return results


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_holds_every_invariant_for_every_seed(
    name: str, sweep: dict[str, tuple[int, list[str]]]
) -> None:
    events, failures = sweep[name]
    assert not failures, f"{len(failures)} of {SEEDS} seeds failed:\n" + "\n".join(failures[:5])
    assert events > 0
