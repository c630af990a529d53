"""The lifecycle checker the process tests run (`lifecycle_checker.violations`), shown to fail: on
hand-made samples, and on the seeded simulation's ground truth sampled after every reconcile's
actions, where the real plan passes it and a plan with a gate disabled is caught."""

from __future__ import annotations

import pytest

import kraft_operator.plan.roll as roll_module

from .lifecycle_checker import PartitionSample, Sample, violations
from .sim import Scenario, SimCluster


def _sample(down: set[int], excused: frozenset[int] | set[int] = frozenset(), isr: tuple[int, ...] = (3, 4, 5)) -> Sample:
    return Sample(1.0, frozenset(down), frozenset(excused), (PartitionSample("t-0", (3, 4, 5), isr, 2),))


def test_two_nodes_down_at_once_is_a_violation_unless_the_test_took_one_down() -> None:
    assert violations([_sample({3})]) == []
    assert violations([_sample({0, 3}, excused={3})]) == []
    assert violations([_sample({3, 5}, excused={5}, isr=(3, 4))]) == []
    found = violations([_sample({0, 3}, isr=(4, 5))])
    assert len(found) == 1 and "nodes [0, 3] were down at once" in found[0], found


def test_under_min_isr_is_a_violation_when_a_replica_the_test_did_not_take_down_left_the_isr() -> None:
    full = _sample(set())
    assert violations([full, _sample({4, 5}, excused={4, 5}, isr=(3,))]) == []  # the test stopped both
    assert violations([full, _sample({4}, excused={5}, isr=(3, 5)), _sample({4, 5}, excused={5}, isr=(3,))]) == []
    found = violations([full, _sample({5}, excused={5}, isr=(3, 4)), _sample({4, 5}, excused={5}, isr=(3,))])
    assert len(found) == 1 and "t-0 ISR [3] was under min ISR 2" in found[0] and ": [4] left it" in found[0], found
    assert violations([Sample(1.0, frozenset(), frozenset(), None)]) == []  # no broker answered


def _sim_samples(monkeypatch: pytest.MonkeyPatch, seeds: range) -> list[str]:
    """The checker over the simulation's ground truth, sampled after each reconcile's actions (the
    sim's time moves on right after): down = a node started once that is not up (recovered),
    excused = a node down for a reason other than the operator (the scenario's crashes)."""
    found: list[str] = []
    samples: list[Sample] = []
    tick = SimCluster.tick

    def sampled_tick(sim: SimCluster) -> None:
        nodes = [n for n in sim.nodes.values() if not n.removed]
        down = frozenset(n.node_id for n in nodes if not n.up and n.started_at_ms >= 0)
        excused = frozenset(n.node_id for n in nodes if not n.up and not n.disrupted)
        samples.append(Sample((sim.now_ms % 1_000_000) / 1000, down, excused, tuple(
            PartitionSample(f"{p.topic}-{p.partition}", p.replicas, tuple(p.isr), p.min_isr) for p in sim.partitions)))
        tick(sim)

    monkeypatch.setattr(SimCluster, "tick", sampled_tick)
    for seed in seeds:
        samples.clear()
        Scenario.random(seed).run()
        found += [f"seed {seed}: {v}" for v in violations(samples)]
        if found:
            break
    return found


def test_the_real_plan_passes_the_checker_in_the_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _sim_samples(monkeypatch, range(30)) == []


@pytest.mark.parametrize(
    ("broken", "expected"),
    [("broker_gate", "was under min ISR"), ("not_recovered", "were down at once")],
)
def test_a_plan_with_a_gate_disabled_fails_the_checker(monkeypatch: pytest.MonkeyPatch, broken: str, expected: str) -> None:
    monkeypatch.setattr(roll_module, broken, lambda *a, **k: [])
    found = _sim_samples(monkeypatch, range(60))
    assert any(expected in v for v in found), found
