"""`kraft sim`: run the deterministic KRaft simulation scenarios outside pytest.

CI runs a fixed set of seeds per scenario; this command is how anyone runs thousands more, and
how a failure is replayed: every violation is printed with its seed, its event index and the
exact command that reproduces it (`kraft sim --scenario X --seeds 1 --start SEED`).
"""

from __future__ import annotations

import argparse
import sys
import time

from kraft_engine.cli.main import CliError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sim",
        help="run seeded simulations of the KRaft quorum and check its invariants",
        description=(
            "Run seeded deterministic simulations of the KRaft quorum (crashes, partitions, "
            "message loss) and check the safety invariants after every event."
        ),
    )
    parser.add_argument("--scenario", default="all", help="scenario name, or 'all' (default)")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run (default 100)")
    parser.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument(
        "--network",
        default="lan",
        help="network profile the seeds draw loss, duplication and delay from: lan (default, CI) or wan",
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument(
        "--max-failures",
        type=int,
        default=5,
        help="stop a scenario after this many failing seeds (default 5)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kraft_engine.sim.scenarios import LIVENESS_BOUND_MS, NETWORK_PROFILES, SCENARIOS, use_network_profile

    if args.list:
        for name, scenario in SCENARIOS.items():
            print(f"{name:32} {scenario.description}")
        return 0
    if args.network not in NETWORK_PROFILES:
        raise CliError(f"unknown --network {args.network!r}; known: {', '.join(NETWORK_PROFILES)}")
    use_network_profile(args.network)
    if args.seeds < 1:
        raise CliError(f"--seeds must be at least 1, got {args.seeds}")
    if args.start < 0:
        raise CliError(f"--start must not be negative, got {args.start}")
    if args.scenario == "all":
        names = list(SCENARIOS)
    elif args.scenario in SCENARIOS:
        names = [args.scenario]
    else:
        raise CliError(f"unknown scenario {args.scenario!r}; known: {', '.join(SCENARIOS)}")

    from kraft_engine.sim.invariants import SimulationFailure

    any_failed = False
    for name in names:
        scenario = SCENARIOS[name]
        events = 0
        virtual_ms = 0
        slowest_wait_ms = 0
        failures: list[SimulationFailure] = []
        began = time.monotonic()
        run_count = 0
        for seed in range(args.start, args.start + args.seeds):
            run_count += 1
            try:
                outcome = scenario.run(seed)
            except SimulationFailure as failed:
                failures.append(failed)
                if len(failures) >= args.max_failures:
                    break
                continue
            events += outcome.events
            virtual_ms += outcome.virtual_ms
            slowest_wait_ms = max(slowest_wait_ms, outcome.slowest_wait_ms)
        elapsed_s = time.monotonic() - began
        last_seed = args.start + run_count - 1
        print(
            f"{name}: seeds {args.start}..{last_seed} ({run_count} run), {events} events, "
            f"{virtual_ms // 1000} s virtual, slowest recovery {slowest_wait_ms} ms "
            f"(bound {LIVENESS_BOUND_MS}), {len(failures)} violations, {elapsed_s:.1f} s"
        )
        for failure in failures:
            any_failed = True
            print(f"  VIOLATION {failure}", file=sys.stderr)
            network = "" if args.network == "lan" else f" --network {args.network}"
            print(
                f"  reproduce: kraft sim --scenario {name} --seeds 1 --start {failure.seed}{network}",
                file=sys.stderr,
            )
    return 1 if any_failed else 0
