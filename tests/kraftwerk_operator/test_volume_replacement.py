"""A broker's lost JBOD volume replaced, against the simulated cluster (`sim.py`): the planner
records the loss in status and raises the broker-disk-loss runbook, waits for the approval
annotation, waits until stopping the broker is safe (min ISR, no other replica missing) and says
why in blockedBy, replaces the volume (ReplaceVolume), formats only it with a new directory id,
starts the broker, and closes the runbook once every replica is back in its ISR and URP is 0.

Over many seeds with faults at exact points: the operator dying before acting or before its
status write, a partition held at min ISR, another broker crashing, the approval coming late, the
metadata volume (the broker halts) or a data volume failing. The ground truth is checked as the
operator acts (`SimCluster._check_replace`, the format checks); a planner without the gate is
caught.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

import pytest

import kraft_operator.plan.volume_replacement as volume_module
from kraft_operator.model import APPROVE_ANNOTATION, KRaftCluster
from kraft_operator.plan import FormatStorage, Plan, ReplaceVolume
from kraft_operator.plan.volume_replacement import VOLUME_REPLACEMENT_APPROVAL, VOLUME_REPLACEMENT_OPERATION

from .sim import SimCluster, bootstrap, operate, ready, reconcile

SEEDS = int(os.environ.get("KRAFTWERK_SIM_SEEDS", "150"))


def _approved(cluster: KRaftCluster) -> KRaftCluster:
    meta = cluster.metadata.model_copy(update={"annotations": {APPROVE_ANNOTATION: VOLUME_REPLACEMENT_APPROVAL}})
    return cluster.model_copy(update={"metadata": meta})


@dataclass
class VolumeScenario:
    """One broker loses one volume at tick 0; the approval comes at `approval_tick`. `run` returns
    the violations and whether the cluster ended whole (replicas back, runbook closed)."""

    seed: int
    volume_id: int = 1
    approval_tick: int = 3
    operator_deaths: int = 0
    held_until: int = -1  # a partition the broker is in the ISR of sits at min ISR until then
    other_crash_tick: int = -1  # another broker crashes then
    offline: bool = False  # the volume's files stay: only the broker's DescribeLogDirs says it failed
    death_ticks: tuple[int, ...] | None = None
    death_before_act: bool | None = None
    max_ticks: int = 300
    log: list[str] = field(default_factory=list)
    results: list[Plan] = field(default_factory=list)
    sim: SimCluster | None = None
    broker: int = -1
    lost_directory_id: str = ""

    @classmethod
    def random(cls, seed: int) -> VolumeScenario:
        r = random.Random(seed * 4481 + 7)
        volume_id = r.choice([0, 1, 1])
        return cls(seed=seed, volume_id=volume_id, approval_tick=r.randint(0, 15),
                   operator_deaths=r.choice([0, 0, 1, 2, 4]), held_until=r.choice([-1, -1, r.randint(5, 40)]),
                   other_crash_tick=r.choice([-1, -1, r.randint(1, 40)]), offline=volume_id == 1 and r.random() < 0.4)

    def run(self) -> tuple[list[str], bool]:
        cluster, sim = bootstrap(self.seed)
        self.sim = sim
        rng = random.Random(self.seed + 2)
        faults = random.Random(self.seed + 3)
        brokers = sorted(n.node_id for n in sim.nodes.values() if n.broker)
        self.broker = faults.choice(brokers)
        self.lost_directory_id = sim.nodes[self.broker].volumes[self.volume_id].directory_id or ""
        held = None
        if self.held_until >= 0:
            held = next(p for p in sim.partitions if self.broker in p.isr
                        and sim.replica_volume(p) != self.volume_id)
            held.min_isr = len(held.replicas)  # the user raised min.insync.replicas to the replication factor
        sim.lose_volume(self.broker, self.volume_id, keep_files=self.offline)
        deaths = sorted(faults.sample(range(1, 50), self.operator_deaths))
        if self.death_ticks is not None:
            deaths = list(self.death_ticks)
        quiet_from = max([*deaths, self.held_until, self.other_crash_tick, self.approval_tick, 0]) + 1
        for tick in range(self.max_ticks):
            if tick == self.approval_tick:
                cluster = _approved(cluster)
            if held is not None and tick == self.held_until:
                held.min_isr = 2  # fixed
            if tick == self.other_crash_tick:
                sim.crash(faults.choice([b for b in brokers if b != self.broker]), crash_loops=faults.randint(0, 2))
            result = reconcile(cluster, sim, rng)
            self.results.append(result)
            if tick < self.approval_tick and any(isinstance(a, ReplaceVolume) for a in result.actions):
                sim.violations.append(f"tick {tick}: ReplaceVolume before the approval")
            before = faults.random() < 0.5 if self.death_before_act is None else self.death_before_act
            cluster = operate(cluster, sim, result, tick=tick, death=tick in deaths, before_act=before, log=self.log)
            if tick > quiet_from and self.done(sim, result):
                return sim.violations, True
        return sim.violations, False

    def done(self, sim: SimCluster, result: Plan) -> bool:
        if not ready(result) or result.actions or result.status.operation is not None or result.status.runbooks:
            return False
        node = sim.nodes[self.broker]
        volume = node.volumes.get(self.volume_id)
        if volume is None or not volume.formatted or volume.directory_id == self.lost_directory_id:
            return False
        recorded = result.status.node(self.broker)
        directory = next((d for d in recorded.directories if d.volume_id == self.volume_id), None) if recorded else None
        if directory is None or directory.directory_id != volume.directory_id:
            return False
        return all(sorted(p.isr) == sorted(p.replicas) for p in sim.partitions)


def _assert_kept(scenario: VolumeScenario) -> None:
    violations, finished = scenario.run()
    assert violations == [], f"seed {scenario.seed}: {violations}\n" + "\n".join(scenario.log[-30:])
    assert finished, f"seed {scenario.seed}: the replacement did not finish\n" + "\n".join(scenario.log[-30:])


def _steps(scenario: VolumeScenario) -> list[str]:
    seen: list[str] = []
    for r in scenario.results:
        op = r.status.operation
        if op is not None and op.name == VOLUME_REPLACEMENT_OPERATION and (not seen or seen[-1] != op.step):
            seen.append(op.step)
    return seen


def test_a_lost_data_volume_waits_for_approval_then_is_replaced_and_re_replicated() -> None:
    scenario = VolumeScenario(seed=1, approval_tick=4)
    _assert_kept(scenario)
    assert _steps(scenario) == ["await-approval", "replace", "format", "await-replication"]
    first = scenario.results[0]
    assert first.status.operation is not None and first.status.operation.volume is not None
    assert first.status.operation.volume.lost_directory_id == scenario.lost_directory_id
    blocker = first.status.operation.blocked_by[0]
    assert blocker.kind == "approval" and VOLUME_REPLACEMENT_APPROVAL in blocker.message
    book = next(r for r in first.status.runbooks if r.name == "broker-disk-loss")
    assert any(f"volume {scenario.volume_id}" in e for e in book.evidence)
    assert "VolumeLost" in [e.reason for e in first.events]
    # Only the lost directory is formatted, the broker's other one kept (--ignore-formatted).
    formats = [a for r in scenario.results for a in r.actions if isinstance(a, FormatStorage)]
    assert len(formats) == 1 and formats[0].ignore_formatted and formats[0].node.node_id == scenario.broker
    replaced = [a for r in scenario.results for a in r.actions if isinstance(a, ReplaceVolume)]
    assert [(a.node.node_id, a.volume_id, a.lost_directory_id) for a in replaced] == [
        (scenario.broker, scenario.volume_id, scenario.lost_directory_id)]
    # The runbook stays open through the re-replication, its steps marked, then closes.
    waiting = [r for r in scenario.results if r.status.operation is not None
               and r.status.operation.step == "await-replication"]
    assert waiting
    steps = {s.id: s.state for s in next(b for b in waiting[0].status.runbooks if b.name == "broker-disk-loss").steps}
    assert steps["replace-volume"] == "done" and steps["format-and-restart"] == "done"
    assert steps["await-replication"] == "pending"
    events = [e.reason for r in scenario.results for e in r.events]
    assert "VolumeReplaced" in events and "RunbookClosed" in events


def test_a_volume_its_broker_reports_offline_is_detected_and_replaced_though_its_files_remain() -> None:
    """No volume vanished: the directory failed an I/O and the broker took it offline. The status
    (DescribeLogDirs' KAFKA_STORAGE_ERROR, already shown as offline in status) drives the same
    replacement, with no human marking it."""
    scenario = VolumeScenario(seed=1, approval_tick=4, offline=True)
    _assert_kept(scenario)
    assert _steps(scenario) == ["await-approval", "replace", "format", "await-replication"]
    first = scenario.results[0]
    assert first.status.operation is not None and first.status.operation.blocked_by
    assert "offline (KAFKA_STORAGE_ERROR, reported by the broker)" in first.status.operation.blocked_by[0].message
    book = next(r for r in first.status.runbooks if r.name == "broker-disk-loss")
    assert any("KAFKA_STORAGE_ERROR" in e for e in book.evidence), book.evidence
    replaced = [a for r in scenario.results for a in r.actions if isinstance(a, ReplaceVolume)]
    assert [(a.volume_id, a.lost_directory_id) for a in replaced] == [(scenario.volume_id, scenario.lost_directory_id)]
    assert "replace the offline" in replaced[0].reason


def test_without_reading_the_offline_directories_the_failure_goes_unseen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(volume_module, "_offline", lambda observed, node_id, path: None)
    scenario = VolumeScenario(seed=1, approval_tick=4, offline=True, max_ticks=60)
    _, finished = scenario.run()
    assert not finished
    assert not any(isinstance(a, ReplaceVolume) for r in scenario.results for a in r.actions)


def test_a_partition_at_min_isr_holds_the_replacement_names_it_and_it_proceeds_once_fixed() -> None:
    scenario = VolumeScenario(seed=2, approval_tick=0, held_until=25)
    _assert_kept(scenario)
    held = [r for r in scenario.results if r.status.operation is not None
            and r.status.operation.step == "await-safety"]
    assert len(held) >= 20
    blocker = held[0].status.operation.blocked_by[0] if held[0].status.operation else None
    assert blocker is not None and blocker.kind == "partition" and blocker.min_isr == 3
    assert "would drop below min.insync.replicas=3" in blocker.message
    assert "unsafe" in held[0].status.operation.waiting_for


def test_the_gate_removed_is_caught_stopping_a_broker_below_min_isr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(volume_module, "volume_replacement_gate", lambda broker_id, **kw: [])
    violations, _ = VolumeScenario(seed=2, approval_tick=0, held_until=25).run()
    assert any("drops below min ISR" in v for v in violations), violations


@pytest.mark.parametrize("volume_id", [0, 1])
@pytest.mark.parametrize("before_act", [True, False], ids=["dies-before-acting", "dies-before-status-write"])
def test_the_operator_killed_at_every_step_of_a_replacement_still_finishes_it(volume_id: int, before_act: bool) -> None:
    clean = VolumeScenario(seed=3, volume_id=volume_id, approval_tick=2)
    _assert_kept(clean)
    for tick in range(len(clean.results) + 2):
        _assert_kept(VolumeScenario(seed=3, volume_id=volume_id, approval_tick=2, death_ticks=(tick,),
                                    death_before_act=before_act))


def test_random_volume_losses_with_faults_keep_every_promise_and_finish() -> None:
    for seed in range(SEEDS):
        _assert_kept(VolumeScenario.random(seed))
