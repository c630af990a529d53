"""Scale-down against the simulated cluster (`sim.py`): controllers 5 -> 3 through RemoveRaftVoter
(the active controller last, handed over as Kafka does), a broker drained by reassignment,
stopped and unregistered; every step checked on the ground truth as the operator acts, with the
operator killed at every step; and hypothesis properties over random cluster states: the planner
never removes a voter below a caught-up majority of the voters that stay, never stops a node that
still votes or holds a replica, and never acts twice at once.
"""

from __future__ import annotations

import functools
import os
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kraft_operator.plan.scale_down as scale_down_module
from kraft_operator.model import (
    APPROVE_ANNOTATION,
    ConditionStatus,
    ConditionType,
    KRaftCluster,
    OperationStatus,
    ScaleDownStatus,
)
from kraft_operator.plan import (
    SCALE_DOWN_OPERATION,
    BrokerFacts,
    ClusterFacts,
    NodeFacts,
    Observed,
    PartitionDetail,
    PodPhase,
    QuorumFacts,
    ReassignPartitions,
    RemoveVoter,
    ReplicaFacts,
    StopNode,
    UnregisterBroker,
    plan,
)

from .sim import LAYOUT, RULES, ScaleScenario, SimNode, bootstrap, publish, reconcile, scaled, step

SEEDS = int(os.environ.get("KRAFTWERK_SIM_SEEDS", "150")) // 3


def _assert_kept(scenario: ScaleScenario) -> None:
    violations, finished = scenario.run()
    assert violations == [], f"seed {scenario.seed}: {violations}\n" + "\n".join(scenario.log[-30:])
    assert finished, f"seed {scenario.seed}: the scale-down did not finish\n" + "\n".join(scenario.log[-30:])


def _actions(scenario: ScaleScenario) -> list[tuple[str, int]]:
    return [(type(a).__name__, a.node.node_id) for r in scenario.results for a in r.actions
            if isinstance(a, RemoveVoter | ReassignPartitions | StopNode | UnregisterBroker)]


def test_controllers_five_to_three_and_a_broker_drained_in_order() -> None:
    scenario = ScaleScenario(seed=4, leaving_leader=True)
    _assert_kept(scenario)
    assert scenario.leaving == [6, 7, 8]
    # Controllers first, the active one (8) last, each removed from the voters before it stops;
    # then broker 6: reassigned, stopped, unregistered.
    assert _actions(scenario) == [
        ("RemoveVoter", 7), ("StopNode", 7), ("RemoveVoter", 8), ("StopNode", 8),
        ("ReassignPartitions", 6), ("StopNode", 6), ("UnregisterBroker", 6),
    ]
    steps = [f"{r.status.operation.name}/{r.status.operation.step}" for r in scenario.results
             if r.status.operation is not None and r.status.operation.name == SCALE_DOWN_OPERATION]
    assert "ScaleDown/drain-planned" in steps and steps.index("ScaleDown/drain-planned") < steps.index("ScaleDown/draining")
    events = [e.reason for r in scenario.results for e in r.events]
    assert {"RemoveVoter", "DrainPlanned", "ReassignPartitions", "Drained", "NodeRemoved", "ScaleDownFinished"} <= set(events)
    final = scenario.results[-1].status
    assert sorted(n.id for n in final.nodes) == [0, 1, 2, 3, 4, 5]
    assert final.quorum is not None and sorted(v.id for v in final.quorum.voters) == [0, 1, 2]


def test_random_scale_downs_with_faults_keep_every_promise_and_finish() -> None:
    removed_leader = 0
    for seed in range(SEEDS):
        scenario = ScaleScenario.random(seed)
        _assert_kept(scenario)
        removed_leader += bool(scenario.leaving_leader)
    assert removed_leader > SEEDS // 4  # the active controller was among the leaving ones often


@pytest.mark.parametrize("before_act", [True, False], ids=["dies-before-acting", "dies-before-status-write"])
def test_the_operator_killed_at_every_step_of_a_scale_down_still_finishes_it(before_act: bool) -> None:
    """Kill the operator at each reconcile of the scale-down in turn: before it acts, or after it
    acted but before its status write (the status it resumes from is one step old)."""
    clean = ScaleScenario(seed=4, leaving_leader=True)
    _assert_kept(clean)
    steps = len(clean.results)
    assert steps > 10  # voter removals, drain, stops, unregistration (no roll: the bootstrap list change needs none)
    for tick in range(steps + 2):
        _assert_kept(ScaleScenario(seed=4, leaving_leader=True, death_ticks=(tick,), death_before_act=before_act))
        _assert_kept(ScaleScenario(seed=5, death_ticks=(tick, tick + 1), death_before_act=before_act))


def _to_five(seed: int) -> tuple[KRaftCluster, object, random.Random]:
    cluster, sim = bootstrap(seed, brokers=4)
    rng = random.Random(seed)
    cluster = scaled(cluster, controllers=5)
    for _ in range(200):
        cluster, result = step(cluster, sim, rng)
        if len(sim.voters) == 5 and result.status.operation is None and not result.actions:
            return cluster, sim, rng
    raise AssertionError(f"3 -> 5 did not finish: {result.waiting_for}")


def _lagging_removal(seed: int) -> tuple[list[str], list[str]]:
    """Two staying followers fall behind (slow disks) just as 5 -> 3 is about to remove its first
    voter: that would leave four voters with only two caught up. Returns the violations and the
    waiting texts."""
    cluster, sim, rng = _to_five(seed)
    cluster = scaled(cluster, controllers=3)
    # Followers only: the leader is caught up by definition.
    for voter in [v for v in (0, 1, 2) if v != sim.leader][:2]:
        sim.nodes[voter].recover_left = 25
        sim.nodes[voter].caught_up_at_ms -= 10_000
    waiting = []
    for _ in range(120):
        cluster, result = step(cluster, sim, rng)
        waiting.append(result.waiting_for)
        if set(sim.voters) == {0, 1, 2} and result.status.operation is None:
            break
    return sim.violations, waiting


def test_a_removal_waits_for_a_caught_up_majority_of_the_staying_voters_and_a_broken_gate_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    violations, waiting = _lagging_removal(2)
    assert violations == []
    assert any("to be a caught-up majority before RemoveRaftVoter" in w for w in waiting), waiting[:20]
    monkeypatch.setattr(scale_down_module, "removal_gate", lambda node_id, **kw: [])
    violations, _ = _lagging_removal(2)
    assert any("RemoveRaftVoter" in v and "caught up" in v for v in violations), violations


def test_a_broker_scale_down_the_topics_cannot_survive_is_refused_naming_them() -> None:
    cluster, sim = bootstrap(6, brokers=4)
    rng = random.Random(6)
    cluster = scaled(cluster, brokers=2)  # topics have replication factor 3
    for _ in range(5):
        cluster, result = step(cluster, sim, rng)
        assert not result.actions
    degraded = result.status.condition(ConditionType.DEGRADED)
    assert degraded is not None and degraded.status is ConditionStatus.TRUE
    assert "2 broker replicas cannot hold topic(s) topic-0 (replication factor 3)" in degraded.message
    assert all(n.running and n.registered for n in sim.nodes.values() if n.broker)


def test_an_even_controller_count_raises_a_warning_condition_and_event_not_a_refusal() -> None:
    cluster, sim, rng = _to_five(7)
    cluster = scaled(cluster, controllers=4)
    cluster, result = step(cluster, sim, rng)
    even = result.status.condition(ConditionType.EVEN_CONTROLLERS)
    assert even is not None and even.status is ConditionStatus.TRUE
    assert "4 controllers tolerate 1 failure(s), as 3 do" in even.message
    assert [e.reason for e in result.events].count("EvenControllerCount") == 1
    for _ in range(60):
        cluster, result = step(cluster, sim, rng)
        assert "EvenControllerCount" not in [e.reason for e in result.events]  # once, when it turns True
        if len(sim.voters) == 4 and result.status.operation is None:
            break
    assert len(sim.voters) == 4 and sim.violations == []
    cluster = scaled(cluster, controllers=3)
    cluster, result = step(cluster, sim, rng)
    odd = result.status.condition(ConditionType.EVEN_CONTROLLERS)
    assert odd is not None and odd.status is ConditionStatus.FALSE


# -- properties over random cluster states ---------------------------------------------------------

STAYING_CONTROLLERS = (0, 1, 2)
LEAVING_CONTROLLERS = (7, 8)
BROKERS = (3, 4, 5, 6)  # 6 leaves


@functools.cache
def _five_voters() -> tuple[KRaftCluster, dict[int, NodeFacts]]:
    """Five voters, the spec asking for three controllers and three brokers, and the roll that the
    new bootstrap list brings finished: the scale-down is what the planner does next."""
    cluster, sim, rng = _to_five(1)
    cluster = scaled(cluster, controllers=3, brokers=3)
    for _ in range(80):
        result = reconcile(cluster, sim, rng)
        if result.status.operation is not None and result.status.operation.name == SCALE_DOWN_OPERATION:
            return cluster, dict(sim.observe(cluster).nodes)
        for action in result.actions:
            sim.apply(action)
        cluster = publish(cluster, result)
        sim.tick()
    raise AssertionError(f"the scale-down never came next: {result.waiting_for}")


def _disk(nodes: dict[int, NodeFacts], node_id: int) -> str:
    """The directory id of the node's metadata volume: the one its voter entry (ReplicaKey) holds."""
    volume = nodes[node_id].volume(0)
    assert volume is not None and volume.directory_id
    return volume.directory_id


@st.composite
def scale_down_worlds(draw: st.DrawFn) -> tuple[KRaftCluster, Observed, int]:
    cluster, base = _five_voters()
    now = 1_700_000_500_000
    nodes = {}
    for node_id, facts in base.items():
        # A staying node that is down keeps the bootstrap busy (it restarts it first), so staying
        # nodes are mostly up; leaving ones are anything.
        weights = [PodPhase.RUNNING] * (4 if node_id in (6, *LEAVING_CONTROLLERS) else 40)
        phase = draw(st.sampled_from([*weights, PodPhase.FAILED, PodPhase.ABSENT]))
        nodes[node_id] = replace(facts, phase=phase, ready=phase is PodPhase.RUNNING,
                                 started_at_ms=now - draw(st.integers(0, 10_000)) if phase is PodPhase.RUNNING else None)
    voter_ids = sorted(draw(st.sets(st.sampled_from(LEAVING_CONTROLLERS))) | set(STAYING_CONTROLLERS))
    leader = draw(st.sampled_from([*voter_ids, -1]))
    voters = tuple(ReplicaFacts(v, _disk(base, v), 1000, draw(st.sampled_from([-1, now - 5000, now - 1500, now - 100, now])))
                   for v in voter_ids)
    quorum = QuorumFacts(leader, 5, 1000, voters, ()) if leader >= 0 else None
    brokers = {b: BrokerFacts(b, fenced=draw(st.booleans())) for b in BROKERS if draw(st.booleans() | st.just(True))}
    details = []
    for index in range(draw(st.integers(0, 4))):
        replicas = tuple(draw(st.permutations(BROKERS)))[:3]
        isr = tuple(r for r in replicas if draw(st.booleans() | st.just(True))) or replicas[:1]
        details.append(PartitionDetail("t", index, isr[0], replicas, isr, 2))
    facts = ClusterFacts(cluster_id="x", quorum=quorum, brokers=brokers, partition_details=tuple(details))
    moves = []
    if draw(st.booleans()):
        current = draw(st.sampled_from([6, *LEAVING_CONTROLLERS]))
        if current == 6 and details:
            moves = [{"topic": p.topic, "partition": p.partition,
                      "replicas": [3 if r == 6 and 3 not in p.replicas else r for r in p.replicas]} for p in details]
        status = ScaleDownStatus.model_validate({"leaving": [6, 7, 8], "current": current, "moves": moves})
        operation = OperationStatus(name=SCALE_DOWN_OPERATION, step=draw(st.sampled_from(
            ["remove-voter", "drain-planned", "draining", "stop", "unregister"])), scale_down=status)
        assert cluster.status is not None
        cluster = cluster.model_copy(update={"status": cluster.status.model_copy(update={"operation": operation})})
    return cluster, Observed(nodes=nodes, format_jobs={}, cluster=facts), now


def _caught_up(replica: ReplicaFacts, *, quorum: QuorumFacts, nodes: dict[int, NodeFacts], now: int) -> bool:
    """Kafka's rule restated: the leader, or a voter whose pod runs and that caught up within the
    fetch timeout (2000 ms) after its process started."""
    facts = nodes.get(replica.replica_id)
    if facts is None or facts.phase is not PodPhase.RUNNING or not facts.ready:
        return False
    if replica.replica_id == quorum.leader_id:
        return True
    started = facts.started_at_ms if facts.started_at_ms is not None else -1
    return replica.last_caught_up_timestamp_ms > started and now - replica.last_caught_up_timestamp_ms <= 2000


def _check(cluster: KRaftCluster, observed: Observed, now: int, *, planner=plan) -> None:
    result = planner(cluster, observed=observed, layout=LAYOUT, rules=RULES, rng=random.Random(0), now_ms=now)
    disruptive = [a for a in result.actions if isinstance(a, RemoveVoter | StopNode | ReassignPartitions | UnregisterBroker)]
    assert len(disruptive) <= 1, disruptive
    facts = observed.cluster
    assert facts is not None
    for action in disruptive:
        node_id = action.node.node_id
        if isinstance(action, RemoveVoter):
            quorum = facts.quorum
            assert quorum is not None
            staying = [v for v in quorum.voters if v.replica_id != node_id]
            caught_up = [v for v in staying if _caught_up(v, quorum=quorum, nodes=dict(observed.nodes), now=now)]
            assert staying and len(caught_up) >= len(staying) // 2 + 1, (node_id, staying, caught_up)
        if isinstance(action, StopNode):
            voters = {v.replica_id for v in facts.quorum.voters} if facts.quorum is not None else set()
            assert node_id not in voters
            assert not any(node_id in p.replicas for p in facts.partition_details or ()), node_id
        if isinstance(action, ReassignPartitions):
            assert all(node_id not in m.replicas for m in action.moves)
            by_key = {(p.topic, p.partition): p for p in facts.partition_details or ()}
            assert all(len(set(m.replicas)) == len(by_key[(m.topic, m.partition)].replicas) for m in action.moves)
        if isinstance(action, UnregisterBroker):
            assert observed.nodes[node_id].phase is not PodPhase.RUNNING


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(scale_down_worlds())
def test_the_scale_down_never_removes_a_voter_below_a_caught_up_majority_nor_stops_a_busy_node(
    world: tuple[KRaftCluster, Observed, int],
) -> None:
    _check(*world)


def test_a_planner_without_the_removal_gate_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same property catches a planner whose removal gate is gone: a world where only the gate
    stands in the way (leader 0, voters 1 and 2 lagging, 7 and 8 leaving)."""
    cluster, base = _five_voters()
    now = 1_700_000_500_000
    nodes = {i: replace(f, phase=PodPhase.RUNNING, ready=True, started_at_ms=now - 60_000) for i, f in base.items()}
    voters = tuple(ReplicaFacts(v, _disk(base, v), 1000, now if v in (0, 7, 8) else now - 9000) for v in (0, 1, 2, 7, 8))
    facts = ClusterFacts(cluster_id="x", quorum=QuorumFacts(0, 5, 1000, voters, ()),
                         brokers={b: BrokerFacts(b, fenced=False) for b in BROKERS}, partition_details=())
    observed = Observed(nodes=nodes, format_jobs={}, cluster=facts)
    _check(cluster, observed, now)  # the real planner waits
    assert "caught-up majority before RemoveRaftVoter" in plan(
        cluster, observed=observed, layout=LAYOUT, rules=RULES, rng=random.Random(0), now_ms=now).waiting_for
    monkeypatch.setattr(scale_down_module, "removal_gate", lambda node_id, **kw: [])
    with pytest.raises(AssertionError):
        _check(cluster, observed, now)



def test_a_stale_broker_registration_is_named_and_unregistered_only_with_approval() -> None:
    """A registration the cluster holds for broker 42, which is no node of this cluster (a broker
    removed by hand without UnregisterBroker): status names it and the approval it waits for;
    approved, the operator unregisters it."""
    cluster, sim = bootstrap(8)
    rng = random.Random(8)
    sim.nodes[42] = SimNode(42, "", roles=frozenset({"broker"}), registered=True)
    for _ in range(5):
        cluster, result = step(cluster, sim, rng)
        assert not any(isinstance(a, UnregisterBroker) for a in result.actions)
    operation = result.status.operation
    assert operation is not None and (operation.name, operation.step) == ("StaleRegistrations", "await-approval")
    assert [(b.kind, b.node_id) for b in operation.blocked_by] == [("approval", 42)]
    assert 'kraftwerk.io/approve="stale-registration/unregister"' in result.waiting_for
    assert sim.nodes[42].registered
    meta = cluster.metadata.model_copy(update={"annotations": {APPROVE_ANNOTATION: "stale-registration/unregister"}})
    cluster = cluster.model_copy(update={"metadata": meta})
    for _ in range(5):
        cluster, result = step(cluster, sim, rng)
        if result.status.operation is None:
            break
    assert not sim.nodes[42].registered and result.status.operation is None and sim.violations == []
