"""Broker sessions across controller failovers in the simulation (issue 16).

`broker-liveness` (engine/kraft_engine/sim/broker_liveness.py and scenarios.py) runs the real
quorum controller on three voters with four brokers heartbeating it, silencing and reviving
brokers while the active controller is killed (restarting Resigned in its old epoch, often) or
cut off. The sweep in test_scenarios.py runs it for seeds 0-199 like every scenario; this module
runs seeds 200-499, so 500 distinct seeds hold its invariants in CI (about a minute of CPU per 100
seeds on a quiet core: both tests are `slow`). `KRAFT_SIM_SEEDS` shortens both for a local run.

The two broken variants the issue names are caught: a controller that activates without giving
registered brokers a contact time (a broker silenced before a failover is never fenced), and one
that activates when raft names it leader of an epoch it does not hold (a Resigned restart).
"""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import Executor

import pytest

from kraft_engine.controller import cluster_control, partition_change, quorum_controller
from kraft_engine.controller.broker_heartbeat import BrokerHeartbeatManager
from kraft_engine.sim import broker_liveness, scenarios
from kraft_engine.sim.controller_machine import ControllerMachine
from kraft_engine.sim.invariants import SimulationFailure
from kraft_engine.sim.scenarios import SCENARIOS

SWEEP_SEEDS = int(os.environ.get("KRAFT_SIM_SEEDS", "200"))
EXTRA_SEEDS = 300 if "KRAFT_SIM_SEEDS" not in os.environ else SWEEP_SEEDS
_CHUNK = 10


def _run_seeds(job: tuple[int, int]) -> list[str]:
    start, count = job
    failures: list[str] = []
    for seed in range(start, start + count):
        try:
            SCENARIOS["broker-liveness"].run(seed)
        except SimulationFailure as failure:
            failures.append(f"{failure}\n  reproduce: kraft sim --scenario broker-liveness --seeds 1 --start {seed}")
    return failures


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_broker_liveness_holds_for_the_seeds_after_the_sweeps(pool: Executor) -> None:
    first = SWEEP_SEEDS
    jobs = [(start, min(_CHUNK, first + EXTRA_SEEDS - start)) for start in range(first, first + EXTRA_SEEDS, _CHUNK)]
    failures = [failure for chunk in pool.map(_run_seeds, jobs) for failure in chunk]
    assert not failures, f"{len(failures)} of {EXTRA_SEEDS} seeds failed:\n" + "\n".join(failures[:5])


def _failures(seeds: range) -> Counter[str]:
    seen: Counter[str] = Counter()
    for seed in seeds:
        try:
            SCENARIOS["broker-liveness"].run(seed)
        except SimulationFailure as failure:
            assert f"seed {seed}:" in str(failure)
            seen[failure.invariant] += 1
    return seen


def _activate_without_contact_times(self: cluster_control.ClusterControlManager, now_ms: int) -> None:
    """ClusterControlManager.activate before the fix: no broker has a contact time."""
    manager = BrokerHeartbeatManager(self.tracker)
    for broker_id, registration in self._brokers.items():
        manager.register(broker_id, fenced=registration.fenced)
    self.heartbeat_manager = manager


@pytest.mark.slow
def test_a_controller_that_activates_without_contact_times_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_control.ClusterControlManager, "activate", _activate_without_contact_times)
    seen = _failures(range(30))
    assert seen["SilentBrokerFenced"] >= 10, seen


@pytest.mark.slow
def test_a_controller_that_activates_for_an_epoch_raft_does_not_hold_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    claim = quorum_controller.QuorumController.handle_leader_change

    def trusting(self: quorum_controller.QuorumController, **arguments: object) -> None:
        # Before the fix: a leader change naming this node was enough (raft may be Resigned).
        claim(self, **{**arguments, "raft_is_leader": True})  # type: ignore[arg-type]

    monkeypatch.setattr(quorum_controller.QuorumController, "handle_leader_change", trusting)
    seen = _failures(range(10))
    assert seen["ControllerWrite"] + seen["ControllerActivation"] >= 5, seen


def test_the_runs_exercise_failovers_resigned_restarts_and_fences(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards the scenario against silently testing less: across a few seeds, restarted leaders
    declined an activation raft did not back, and silent brokers were fenced."""
    made = _recording_brokers(monkeypatch)
    declined = fences = 0
    for seed in range(8):
        run = SCENARIOS["broker-liveness"].story(seed)
        run.finish()
        declined += sum(n.counter.declined_activations for n in run.cluster.running.values()
                        if isinstance(n.counter, ControllerMachine))
        fences += len(made[-1].fences_checked)
    assert declined >= 2 and fences >= 8, (declined, fences)


def _recording_brokers(monkeypatch: pytest.MonkeyPatch) -> list[broker_liveness.SimBrokers]:
    """Every SimBrokers the scenario makes from now on, in order."""
    made: list[broker_liveness.SimBrokers] = []
    original = broker_liveness.SimBrokers

    def recording(*args: object, **kwargs: object) -> broker_liveness.SimBrokers:
        brokers = original(*args, **kwargs)  # type: ignore[arg-type]
        made.append(brokers)
        return brokers

    monkeypatch.setattr(scenarios, "SimBrokers", recording)
    return made


def _elr_states_seen(seeds: range, monkeypatch: pytest.MonkeyPatch) -> int:
    made = _recording_brokers(monkeypatch)
    for seed in seeds:
        SCENARIOS["broker-liveness"].run(seed)
    return sum(b.elr_states_seen for b in made)


def test_the_runs_fill_eligible_leader_replicas_under_kip_966s_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards the ELR half of the scenario: with two of four brokers silenced, partitions of the
    min-ISR-2 topic drop below min ISR and keep their fenced replicas eligible, on committed
    states that hold EligibleLeaderReplicas (the seeds pass)."""
    assert _elr_states_seen(range(10), monkeypatch) > 0


@pytest.mark.slow
def test_a_controller_that_keeps_isr_members_in_the_elr_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = partition_change.PartitionChangeBuilder._populate_target_elr

    def broken(self: partition_change.PartitionChangeBuilder) -> None:
        real(self)
        if self.target_elr:  # the ISR members are left in the ELR too
            self.target_elr = tuple(dict.fromkeys((*self.target_elr, *self.target_isr)))

    monkeypatch.setattr(partition_change.PartitionChangeBuilder, "_populate_target_elr", broken)
    seen = _failures(range(20))
    assert seen["EligibleLeaderReplicas"] >= 3, seen
