"""The rebalance onto brokers that joined (`spec.lifecycle.rebalanceOnScaleUp`).

Its plan, `rebalance_moves`, is a pure function; its promises are checked as invariants over many
seeded random clusters (brokers 2-8, topics with replication factors 1-3, skewed assignments,
brokers that hold nothing, partitions out of sync): every target keeps its partition's
replication factor and has no broker twice, lands only on the brokers given, moves only in-sync
partitions, never moves a replica onto a broker that loses replicas (no churn), stops only when
no replica can move from a broker to one holding two fewer, and after a plain scale-up (a
balanced cluster plus empty brokers) leaves every broker within one replica of every other. A
deliberately broken plan (one that may put a broker twice into a partition) is caught.

Against the simulated cluster (`sim.py`): brokers 3 -> 4 with the flag: the new broker is added,
then the Rebalance operation records its moves and throttle, sets the throttle before
AlterPartitionReassignments (the simulation refuses an unthrottled move), waits for the moves,
removes the throttle; the operator killed at every step still finishes it. Off (the default),
nothing moves.
"""

from __future__ import annotations

import os
import random
from collections import Counter

import pytest

import kraft_operator.plan.reassignment as reassignment_module
from kraft_operator.model import ConditionStatus, ConditionType, KRaftCluster, PartitionMoveStatus
from kraft_operator.plan import (
    ClearReassignmentThrottles,
    PartitionDetail,
    Plan,
    ReassignPartitions,
    SetReassignmentThrottles,
    rebalance_moves,
)

from .sim import SimCluster, bootstrap, operate, ready, reconcile, scaled

SEEDS = int(os.environ.get("KRAFTWERK_SIM_SEEDS", "150")) * 4


def _random_world(seed: int) -> tuple[list[PartitionDetail], list[int]]:
    r = random.Random(seed)
    brokers = sorted(r.sample(range(0, 20), r.randint(2, 8)))
    crowded = brokers[: r.randint(1, len(brokers))]  # where the existing replicas live (skew)
    details = []
    for t in range(r.randint(1, 6)):
        rf = r.randint(1, min(3, len(crowded)))
        for p in range(r.randint(1, 12)):
            replicas = tuple(r.sample(crowded, rf))
            isr = replicas if r.random() < 0.9 else replicas[:-1] or replicas
            details.append(PartitionDetail(f"t{t}", p, replicas[0], replicas, isr))
    return details, brokers


def _loads(details: list[PartitionDetail], brokers: list[int], moves: list[PartitionMoveStatus]) -> Counter[int]:
    targets = {(m.topic, m.partition): m.replicas for m in moves}
    load: Counter[int] = Counter(dict.fromkeys(brokers, 0))
    for p in details:
        for b in targets.get((p.topic, p.partition), p.replicas):
            load[b] += 1
    return load


def _violations(details: list[PartitionDetail], brokers: list[int], moves: list[PartitionMoveStatus]) -> list[str]:
    """The plan's promises, restated from their definitions."""
    found = []
    by_key = {(p.topic, p.partition): p for p in details}
    for m in moves:
        p = by_key[(m.topic, m.partition)]
        if len(m.replicas) != len(p.replicas) or len(set(m.replicas)) != len(m.replicas):
            found.append(f"{m.topic}-{m.partition}: {m.replicas} changes the RF or repeats a broker ({p.replicas})")
        if not set(m.replicas) <= set(brokers):
            found.append(f"{m.topic}-{m.partition}: {m.replicas} lands outside {brokers}")
        if not set(p.replicas) <= set(p.isr):
            found.append(f"{m.topic}-{m.partition} moved while out of sync (ISR {p.isr})")
        if list(m.replicas) == list(p.replicas):
            found.append(f"{m.topic}-{m.partition}: a move that changes nothing")
    before, after = _loads(details, brokers, []), _loads(details, brokers, moves)
    losing = {b for b in brokers if after[b] < before[b]}
    for m in moves:
        gained = set(m.replicas) - set(by_key[(m.topic, m.partition)].replicas)
        if gained & losing:
            found.append(f"{m.topic}-{m.partition}: gains broker(s) {sorted(gained & losing)} that lose replicas")
    targets = {(m.topic, m.partition): m.replicas for m in moves}
    for source in brokers:
        for destination in brokers:
            if after[source] - after[destination] < 2:
                continue
            for p in details:
                replicas = targets.get((p.topic, p.partition), list(p.replicas))
                if (set(p.replicas) <= set(p.isr) and set(p.replicas) <= set(brokers) and source in replicas
                        and destination not in replicas):
                    found.append(f"stopped although {p.topic}-{p.partition} could move from {source} "
                                 f"({after[source]}) to {destination} ({after[destination]})")
                    break
    return found


def test_the_rebalance_plan_keeps_its_promises_over_many_seeded_clusters() -> None:
    moved_somewhere = 0
    for seed in range(SEEDS):
        details, brokers = _random_world(seed)
        moves = rebalance_moves(details, brokers=brokers)
        assert _violations(details, brokers, moves) == [], f"seed {seed}"
        assert rebalance_moves(details, brokers=brokers) == moves, f"seed {seed}: not deterministic"
        moved_somewhere += bool(moves)
    assert moved_somewhere > SEEDS // 2  # the worlds are skewed: most need moves


@pytest.mark.parametrize("added", [1, 2, 3])
def test_after_a_plain_scale_up_every_broker_is_within_one_replica(added: int) -> None:
    for seed in range(SEEDS // 4):
        r = random.Random(seed)
        old = list(range(3, 3 + r.randint(3, 5)))
        details = []
        for t in range(r.randint(2, 6)):
            for p in range(r.randint(3, 12)):
                start = (t * 7 + p) % len(old)
                replicas = tuple(old[(start + i) % len(old)] for i in range(3))  # round robin: balanced
                details.append(PartitionDetail(f"t{t}", p, replicas[0], replicas, replicas))
        brokers = [*old, *range(100, 100 + added)]
        moves = rebalance_moves(details, brokers=brokers)
        load = _loads(details, brokers, moves)
        assert _violations(details, brokers, moves) == [], f"seed {seed}"
        assert max(load.values()) - min(load.values()) <= 1, f"seed {seed}: {load}"
        moved = sum(len(set(m.replicas) - set(p.replicas)) for m in moves
                    for p in details if (p.topic, p.partition) == (m.topic, m.partition))
        assert moved == sum(load[b] for b in range(100, 100 + added)), f"seed {seed}: replicas moved needlessly"


def test_a_plan_that_may_repeat_a_broker_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(load, movable, targets, leaders):  # the "not already a replica" rule forgotten
        by_load = sorted(load, key=lambda b: (-load[b], b))
        source, destination = by_load[0], by_load[-1]
        if load[source] - load[destination] < 2:
            return None
        key = next(((p.topic, p.partition) for p in movable if source in targets[(p.topic, p.partition)]), None)
        return None if key is None else (key, source, destination)

    monkeypatch.setattr(reassignment_module, "_best_move", broken)
    caught = 0
    for seed in range(SEEDS // 4):
        details, brokers = _random_world(seed)
        caught += bool(_violations(details, brokers, rebalance_moves(details, brokers=brokers)))
    assert caught > 0


# -- against the simulated cluster -----------------------------------------------------------------

def _with_flag(cluster: KRaftCluster, flag: bool) -> KRaftCluster:
    lifecycle = cluster.spec.lifecycle.model_copy(update={"rebalance_on_scale_up": flag})
    return cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"lifecycle": lifecycle})})


def _scale_up(seed: int, *, flag: bool, deaths: tuple[int, ...] = (), before_act: bool = True,
              ) -> tuple[SimCluster, list[Plan], list[str]]:
    cluster, sim = bootstrap(seed, topics=6)
    rng = random.Random(seed + 2)
    cluster = _with_flag(scaled(cluster, brokers=4), flag)
    results: list[Plan] = []
    log: list[str] = []
    for tick in range(300):
        result = reconcile(cluster, sim, rng)
        results.append(result)
        cluster = operate(cluster, sim, result, tick=tick, death=tick in deaths, before_act=before_act, log=log)
        holds = any(6 in p.replicas for p in sim.partitions)
        settled = all(p.target is None for p in sim.partitions) and not sim.broker_rates and not sim.topic_throttles
        if (tick > max(deaths, default=0) and ready(result) and not result.actions
                and result.status.operation is None and sim.nodes.get(6) is not None and sim.nodes[6].up
                and settled and (holds or not flag)):
            return sim, results, log
    raise AssertionError(f"seed {seed}: the scale-up did not settle\n" + "\n".join(log[-30:]))


def test_with_the_flag_a_broker_that_joins_gets_replicas_through_a_throttled_reassignment() -> None:
    sim, results, _ = _scale_up(3, flag=True)
    assert sim.violations == [], sim.violations
    load = Counter(b for p in sim.partitions for b in p.replicas)
    assert max(load.values()) - min(load.values()) <= 1 and load[6] > 0, load
    names = [type(a).__name__ for r in results for a in r.actions
             if isinstance(a, SetReassignmentThrottles | ReassignPartitions | ClearReassignmentThrottles)]
    assert names == ["SetReassignmentThrottles", "ReassignPartitions", "ClearReassignmentThrottles"], names
    steps = [r.status.operation.step for r in results if r.status.operation is not None
             and r.status.operation.name == "Rebalance"]
    assert steps[0] == "planned" and "reassigning" in steps and steps[-1] == "clear-throttles", steps
    reassigning = next(r.status.operation for r in results if r.status.operation is not None
                       and r.status.operation.step == "reassigning")
    assert reassigning.rebalance is not None and reassigning.rebalance.brokers == [6]
    assert reassigning.rebalance.throttle is not None and "throttled at" in reassigning.waiting_for
    events = [e.reason for r in results for e in r.events]
    assert "RebalancePlanned" in events and "RebalanceFinished" in events


def test_without_the_flag_nothing_moves() -> None:
    sim, results, _ = _scale_up(3, flag=False)
    assert sim.violations == []
    assert not any(6 in p.replicas for p in sim.partitions)
    assert not any(isinstance(a, ReassignPartitions) for r in results for a in r.actions)
    idle = results[-1].status.condition(ConditionType.IDLE_BROKERS)
    assert idle is not None and idle.status is ConditionStatus.TRUE and "rebalanceOnScaleUp" in idle.message


@pytest.mark.parametrize("before_act", [True, False], ids=["dies-before-acting", "dies-before-status-write"])
def test_the_operator_killed_at_every_step_of_a_rebalance_still_finishes_it(before_act: bool) -> None:
    _, clean, _ = _scale_up(3, flag=True)
    first = next(i for i, r in enumerate(clean) if r.status.operation is not None
                 and r.status.operation.name == "Rebalance")
    for tick in range(first - 1, len(clean) + 1):
        sim, _, log = _scale_up(3, flag=True, deaths=(tick,), before_act=before_act)
        assert sim.violations == [], f"death at {tick}: {sim.violations}\n" + "\n".join(log[-20:])
