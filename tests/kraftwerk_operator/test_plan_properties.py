"""Property tests of the planner (hypothesis): whatever happens, in any order, its safety rules hold.

A run is a random sequence of steps against the simulated world: reconciles whose status is
published, reconciles whose status write is lost, operator restarts that read an old status or
none at all (the resource recreated with its volumes kept), node crashes, lost volumes, failing
format jobs, scaling, pausing. After every step:
- no directory is ever formatted twice, and none without its config;
- every format of one cluster uses one cluster id, and every `--initial-controllers` format the
  same value (two values would be two voter sets);
- a published cluster id never changes;
- a paused spec gets no action.
And separately: any spec with a problem gets no action and a Degraded message naming each field;
a fault-free run always reaches Ready.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_operator.config_rules import EngineConfigRules
from kraft_operator.model import ConditionStatus, ConditionType, KRaftCluster
from kraft_operator.plan import Observed, desired_nodes, plan, validate_spec

from .builders import THREE_CONTROLLERS, WITH_BROKERS, FixedLayout, cluster_from
from .world import World, publish

RULES = EngineConfigRules()
LAYOUT = FixedLayout()

STEPS = st.one_of(
    st.just(("reconcile",)),
    st.just(("reconcile",)),
    st.just(("reconcile",)),
    st.just(("lose-status-write",)),
    st.tuples(st.just("restart-with-old-status"), st.integers(0, 6)),
    st.just(("recreate-keeping-volumes",)),
    st.tuples(st.just("crash"), st.integers(0, 6)),
    st.tuples(st.just("lose-volume"), st.integers(0, 6)),
    st.tuples(st.just("fail-next-format"), st.integers(0, 6)),
    st.tuples(st.just("scale"), st.integers(0, 1), st.integers(0, 5)),
    st.tuples(st.just("pause"), st.booleans()),
)


def _plan(cluster: KRaftCluster, world: World, rng: random.Random):
    return plan(cluster, observed=world.observe(cluster), layout=LAYOUT, rules=RULES, rng=rng, now_ms=1_700_000_000_000)


def _scaled(cluster: KRaftCluster, pool_index: int, replicas: int) -> KRaftCluster:
    pools = list(cluster.spec.node_pools)
    pool_index = min(pool_index, len(pools) - 1)
    if pool_index == 0:
        replicas = max(1, replicas)  # keep a controller: a spec without one is refused (tested below)
    pools[pool_index] = pools[pool_index].model_copy(update={"replicas": replicas})
    return cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"node_pools": pools})})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), with_brokers=st.booleans(), steps=st.lists(STEPS, min_size=1, max_size=40))
def test_safety_rules_hold_under_any_sequence_of_events(seed: int, with_brokers: bool, steps: list[tuple]) -> None:
    run_checked(seed=seed, with_brokers=with_brokers, steps=steps)


def test_a_planner_that_cannot_tell_a_formatted_volume_is_caught(monkeypatch) -> None:
    """The broken variant: every volume looks unformatted to the planner, and it ignores the status
    and the format jobs (its three records of a format). The same checks see a second format."""
    steps = [("reconcile",)] * 4
    run_checked(seed=5, with_brokers=False, steps=steps)  # the real planner: fine
    monkeypatch.setattr("kraft_operator.plan.facts.VolumeFacts.formatted", property(lambda self: False))
    monkeypatch.setattr("kraft_operator.model.KRaftClusterStatus.node", lambda self, node_id: None)
    phases = SimpleNamespace(SUCCEEDED=object(), RUNNING=object(), FAILED=object())
    monkeypatch.setattr("kraft_operator.plan.planning.JobPhase", phases)
    try:
        run_checked(seed=5, with_brokers=False, steps=steps)
    except AssertionError as e:
        assert "formatted twice" in str(e)
    else:
        raise AssertionError("the broken planner was not caught")


def run_checked(*, seed: int, with_brokers: bool, steps: list[tuple]) -> None:
    rng = random.Random(seed)
    world = World(random.Random(seed + 1))
    cluster = cluster_from(WITH_BROKERS if with_brokers else THREE_CONTROLLERS)
    published = [cluster.status]
    published_id: str | None = None
    for step in steps:
        kind = step[0]
        if kind in ("reconcile", "lose-status-write"):
            result = _plan(cluster, world, rng)
            if cluster.spec.paused:
                assert result.actions == ()
            for action in result.actions:
                world.apply(action)
            if kind == "reconcile":
                cluster = publish(cluster, result.status)
                published.append(result.status)
                if published_id is not None:
                    assert result.status.cluster_id == published_id, "a published cluster id changed"
                published_id = result.status.cluster_id
        elif kind == "restart-with-old-status":
            old = published[max(0, len(published) - 1 - step[1])]
            if old is not None and old.cluster_id is not None:
                cluster = cluster.model_copy(update={"status": old})
        elif kind == "recreate-keeping-volumes":
            cluster = cluster.model_copy(update={"status": None})
            # A new resource: it never sees the old one's status. Its id must still match the
            # volumes (one cluster id across every format, checked below).
            published, published_id = [None], None
        elif kind == "crash":
            world.crash(step[1])
        elif kind == "lose-volume":
            world.lose_volume(step[1])
        elif kind == "fail-next-format":
            world.fail_formats.add(step[1])
        elif kind == "scale":
            cluster = _scaled(cluster, step[1], step[2])
        elif kind == "pause":
            cluster = cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"paused": step[1]})})
        assert world.violations == [], world.violations
        assert len(world.cluster_ids) <= 1, f"formatted with two cluster ids: {world.cluster_ids}"
        assert len(world.initial_values) <= 1, f"two --initial-controllers values: {world.initial_values}"


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), with_brokers=st.booleans())
def test_a_fault_free_run_reaches_ready(seed: int, with_brokers: bool) -> None:
    rng = random.Random(seed)
    world = World(random.Random(seed))
    cluster = cluster_from(WITH_BROKERS if with_brokers else THREE_CONTROLLERS)
    for _ in range(8):
        result = _plan(cluster, world, rng)
        for action in result.actions:
            world.apply(action)
        cluster = publish(cluster, result.status)
    ready = result.status.condition(ConditionType.READY)
    assert ready is not None and ready.status is ConditionStatus.TRUE, result.status.conditions
    assert result.actions == () and world.violations == []


CONFIG_ENTRIES = st.sampled_from(
    [
        ("num.partitions", "3"), ("num.partitions", "zero"), ("bogus.key", "1"), ("node.id", "4"),
        ("log.retention.hours", "24"), ("log.retention.ms", "-7"), ("min.insync.replicas", "2"),
        ("controller.quorum.election.timeout.ms", "1500"), ("controller.quorum.fetch.timeout.ms", "-1"),
        ("broker.heartbeat.interval.ms", "9999"), ("listeners", "PLAINTEXT://:1"),
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    config=st.lists(CONFIG_ENTRIES, max_size=3).map(dict),
    metadata_version=st.sampled_from([None, "3.9-IV0", "4.1-IV1", "4.2-IV1", "4.3-IV0", "9.9"]),
    kafka_brokers=st.booleans(),
    controller_replicas=st.integers(0, 3),
    listener_port=st.sampled_from([9092, 9093, 9094]),
    seed=st.integers(0, 1000),
)
def test_a_spec_with_a_problem_is_never_acted_on_and_each_field_is_named(
    config: dict[str, str], metadata_version: str | None, kafka_brokers: bool, controller_replicas: int,
    listener_port: int, seed: int,
) -> None:
    text = WITH_BROKERS if kafka_brokers else WITH_BROKERS.replace("implementation: apache-kafka", "")
    cluster = cluster_from(text, config=config, metadataVersion=metadata_version,
                           listeners=[{"name": "PLAINTEXT", "port": listener_port}])
    pools = [cluster.spec.node_pools[0].model_copy(update={"replicas": controller_replicas}), cluster.spec.node_pools[1]]
    cluster = cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"node_pools": pools})})
    nodes = desired_nodes(namespace="ns", cluster="demo", spec=cluster.spec, status=None)
    problems = validate_spec(spec=cluster.spec, status=None, observed=Observed(), nodes=nodes, layout=LAYOUT, rules=RULES)
    world = World(random.Random(seed))
    result = _plan(cluster, world, random.Random(seed))
    degraded = result.status.condition(ConditionType.DEGRADED)
    assert degraded is not None
    if problems:
        assert result.actions == ()
        assert degraded.status is ConditionStatus.TRUE and degraded.reason == "InvalidSpec"
        for problem in problems:
            assert problem.field in degraded.message
        assert result.status.cluster_id is None
    else:
        assert degraded.status is ConditionStatus.FALSE
        assert result.status.cluster_id is not None
