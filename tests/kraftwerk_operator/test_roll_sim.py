"""The seeded simulation of rolling restarts (`sim.py`): the real planner against a simulated
cluster, with faults at exact points, and the operator's promises checked as it acts.

`KRAFTWERK_SIM_SEEDS` sets how many random seeds the broad test runs (default 150); the same
module runs thousands from `bench/operator_sim.py`.
"""

from __future__ import annotations

import os
import random

import pytest

import kraft_operator.plan.roll as roll_module
from kraft_operator.model import ConditionStatus, ConditionType
from kraft_operator.plan import RestartNode

from .sim import Scenario, bootstrap, publish, reconcile, step

SEEDS = int(os.environ.get("KRAFTWERK_SIM_SEEDS", "150"))


def _assert_kept(scenario: Scenario) -> None:
    violations, finished = scenario.run()
    assert violations == [], f"seed {scenario.seed}: {violations}\n" + "\n".join(scenario.log[-30:])
    assert finished, f"seed {scenario.seed}: the roll did not finish\n" + "\n".join(scenario.log[-30:])


def test_random_rolls_with_faults_keep_every_promise_and_finish() -> None:
    for seed in range(SEEDS):
        _assert_kept(Scenario.random(seed))


@pytest.mark.parametrize("before_act", [True, False], ids=["dies-before-acting", "dies-before-status-write"])
def test_the_operator_killed_at_every_step_of_a_roll_still_finishes_it(before_act: bool) -> None:
    """Kill the operator at each reconcile of a fault-free roll in turn: before it acts, or after
    it acted but before its status write (the status it resumes from is one step old)."""
    steps = len([r for r in _fault_free_results(seed=11) if r.status.operation is not None])
    assert steps > 10
    for tick in range(steps + 2):
        _assert_kept(Scenario(seed=11, death_ticks=(tick,), death_before_act=before_act))
        _assert_kept(Scenario(seed=12, manual=True, death_ticks=(tick, tick + 1), death_before_act=before_act))


def _fault_free_results(*, seed: int) -> list:
    scenario = Scenario(seed=seed)
    violations, finished = scenario.run()
    assert violations == [] and finished
    return scenario.results


def test_controllers_roll_first_followers_before_the_active_one_then_brokers() -> None:
    scenario = Scenario(seed=3)
    scenario.run()
    restarted = [a.node.node_id for r in scenario.results for a in r.actions if type(a).__name__ == "RestartNode"]
    assert sorted(restarted) == [0, 1, 2, 3, 4, 5]
    assert set(restarted[:3]) == {0, 1, 2} and restarted[3:] == [3, 4, 5]
    # The active controller at the time of its restart was the last controller to go.
    leaders = [r.status.quorum.leader_id for r in scenario.results if r.actions and
               type(r.actions[0]).__name__ == "RestartNode" and r.actions[0].node.node_id < 3]
    assert leaders[-1] == restarted[2] or restarted[2] not in leaders[:-1]


@pytest.mark.parametrize(
    "fault",
    ["second-voter-fails", "slow-broker", "dead-broker", "held-at-min-isr"],
)
def test_each_fault_over_many_seeds(fault: str) -> None:
    for seed in range(40):
        scenario = Scenario(
            seed=seed,
            second_voter_fails=fault == "second-voter-fails",
            slow_broker=fault == "slow-broker",
            dead_broker=fault == "dead-broker",
            held_at_min_isr=fault == "held-at-min-isr",
        )
        _assert_kept(scenario)


def test_a_roll_held_by_a_partition_at_min_isr_waits_says_why_and_proceeds_once_fixed() -> None:
    cluster, sim = bootstrap(21)
    rng = random.Random(0)
    held = sim.partitions[0]
    held.min_isr = len(held.replicas)  # RF 3, min ISR 3: no broker of it may restart
    cluster = cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"config": {"log.retention.hours": "1"}})})
    blocked = None
    for _ in range(60):
        cluster, result = step(cluster, sim, rng)
        if result.status.operation is not None and result.status.operation.step == "blocked":
            blocked = result
            break
    assert blocked is not None, "the roll never blocked"
    operation = blocked.status.operation
    assert operation is not None and operation.roll is not None
    # The controllers went first; the brokers wait, and status names the partition exactly.
    assert set(operation.roll.done) == {0, 1, 2}
    partitions = [b for b in operation.blocked_by if b.kind == "partition"]
    assert partitions and partitions[0].topic == held.topic and partitions[0].partition == held.partition
    assert partitions[0].replicas == list(held.replicas) and partitions[0].isr == list(held.isr)
    assert partitions[0].min_isr == 3
    assert f"{held.topic}-{held.partition}" in operation.waiting_for
    warnings = [e for e in blocked.events if e.reason == "RollBlocked"]
    assert warnings and f"{held.topic}-{held.partition} would drop below min.insync.replicas=3" in warnings[0].message
    progressing = blocked.status.condition(ConditionType.PROGRESSING)
    assert progressing is not None and progressing.reason == "RollBlocked"
    # It waits and re-checks: nothing happens while the topic stays as it is.
    for _ in range(10):
        result = reconcile(cluster, sim, rng)
        assert result.actions == ()
        cluster = publish(cluster, result)
        sim.tick()
    held.min_isr = 2  # the user fixes the topic
    for _ in range(80):
        cluster, result = step(cluster, sim, rng)
        if result.status.operation is None and any(e.reason == "RollFinished" for e in result.events):
            break
    else:
        raise AssertionError("the roll did not finish once the topic was fixed")
    assert sim.violations == []
    ready = result.status.condition(ConditionType.READY)
    assert ready is not None and ready.status is ConditionStatus.TRUE


def _roll_with_broker_4_dead(*, starts_fail: bool, reconciles: int) -> tuple[object, object, list[int]]:
    """Broker 4 crashed; its pod is there but not ready (seen running, never recovering); a config
    change starts a roll. With `starts_fail` every start from then on fails too. Returns the cluster,
    the simulation and the RestartNode order."""
    cluster, sim = bootstrap(5)
    rng = random.Random(0)
    sim.crash(4, crash_loops=0)
    sim.nodes[4].failed = False
    sim.nodes[4].running = True
    sim.nodes[4].recover_left = 10_000
    if starts_fail:
        sim.nodes[4].crash_on_start = 10_000
    for p in sim.partitions:
        if 4 in p.isr and len(p.isr) > 1:
            p.isr.remove(4)
    cluster = cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"config": {"log.retention.hours": "2"}})})
    restarted: list[int] = []
    for _ in range(reconciles):
        result = reconcile(cluster, sim, rng)
        for action in result.actions:
            if isinstance(action, RestartNode):
                restarted.append(action.node.node_id)
            sim.apply(action)
        cluster = publish(cluster, result)
        sim.tick()
    return cluster, sim, restarted


def test_a_dead_broker_is_restarted_first_without_gates() -> None:
    _, sim, restarted = _roll_with_broker_4_dead(starts_fail=False, reconciles=14)
    # URP is above 0 (broker 4 is out of its ISRs), so every gate is closed, yet the dead broker
    # restarts, first, and the roll then goes on.
    assert restarted[0] == 4 and {0, 1, 2} <= set(restarted)
    assert sim.violations == []


def test_a_dead_broker_restarted_first_that_stays_down_does_not_hold_the_roll() -> None:
    """The operator saw the dead broker running between two of its failed starts, so the roll
    restarted it first; it keeps failing. Waiting for its recovery would hold the roll for as long as
    it stays down (the Koperator #533 deadlock): the controllers roll, the live brokers stay gated
    (broker 4 is out of its ISRs), and the roll does not finish while broker 4 is down."""
    cluster, sim, restarted = _roll_with_broker_4_dead(starts_fail=True, reconciles=30)
    assert restarted[0] == 4 and restarted.count(4) == 1, restarted
    assert sorted(restarted[1:]) == [0, 1, 2], restarted  # the controllers; brokers 3 held by URP
    assert cluster.status is not None and cluster.status.operation is not None, "the roll ended with broker 4 down"
    assert sim.violations == []


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        ("broker_gate", "drops below min ISR"),
        ("controller_gate", "caught up"),
        ("not_recovered", "still down"),
        ("is_down", "restarted"),
    ],
)
def test_a_broken_gate_is_caught(monkeypatch, broken: str, expected: str) -> None:
    """The same simulation with one gate disabled finds a broken promise within a few seeds."""
    if broken == "is_down":
        monkeypatch.setattr(roll_module, broken, lambda *a, **k: True)  # every node looks dead: no gates
    else:
        monkeypatch.setattr(roll_module, broken, lambda *a, **k: [])
    found: list[str] = []
    for seed in range(60):
        violations, _ = Scenario.random(seed).run()
        found += violations
        if found:
            break
    assert any(expected in v for v in found), found
