"""The operator simulation at scale: how many seeded rolls with faults (tests/kraftwerk_operator/sim.py,
the real planner against a simulated cluster) run per second, and whether any broke a promise or
failed to finish. Prints figures; never passes or fails.

    .venv/bin/python bench/operator_sim.py --seeds 2000
    .venv/bin/python bench/operator_sim.py --seeds 500 --first 10000
    .venv/bin/python bench/operator_sim.py --seeds 2000 --jobs 2   # one process per core
    .venv/bin/python bench/operator_sim.py --seeds 1000 --jobs 2 --scenario scale

Each seed is independent, so `--jobs` spreads them over processes. A simulated reconcile is one
whole `plan()` call (about 0.5 ms on a quiet core, by a cProfile reading whose command and load
were not recorded): the planner itself is what is being checked.

Timing on a shared machine is noisy: the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.kraftwerk_operator.sim import ScaleScenario, Scenario


def _run(job: tuple[str, int]) -> tuple[int, int, list[str], bool]:
    kind, seed = job
    scenario = Scenario.random(seed) if kind == "roll" else ScaleScenario.random(seed)
    violations, finished = scenario.run()
    return seed, len(scenario.results), violations, finished


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--jobs", type=int, default=1, help="processes to spread the seeds over")
    parser.add_argument("--scenario", choices=["roll", "scale"], default="roll",
                        help="rolls with faults, or controllers 3 -> 5 -> 3 with a broker drained")
    args = parser.parse_args()
    started = time.monotonic()
    reconciles = 0
    broken: list[tuple[int, list[str]]] = []
    unfinished: list[int] = []
    jobs = [(args.scenario, seed) for seed in range(args.first, args.first + args.seeds)]
    if args.jobs > 1:
        with multiprocessing.Pool(args.jobs) as pool:
            outcomes = pool.map(_run, jobs, chunksize=16)
    else:
        outcomes = [_run(job) for job in jobs]
    for seed, count, violations, finished in outcomes:
        reconciles += count
        if violations:
            broken.append((seed, violations))
        if not finished:
            unfinished.append(seed)
    elapsed = time.monotonic() - started
    load = os.getloadavg()
    print(f"{args.scenario}: {args.seeds} seeds ({args.first}..{args.first + args.seeds - 1}) in {elapsed:.1f} s: "
          f"{args.seeds / elapsed:.1f} seeds/s, {reconciles} reconciles ({reconciles / elapsed:.0f}/s), "
          f"{args.jobs} process(es)")
    print(f"violations: {len(broken)} seed(s) {[s for s, _ in broken[:10]]}; unfinished: {len(unfinished)} {unfinished[:10]}")
    for seed, violations in broken[:3]:
        print(f"  seed {seed}: {violations[:3]}")
    print(f"load average: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
