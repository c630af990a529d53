"""The operator's metrics, read back through prometheus-client's own exposition format."""

from __future__ import annotations

import random
from dataclasses import replace

from prometheus_client import generate_latest

from kraft_operator.metrics import OperatorMetrics
from kraft_operator.model import BlockerStatus, OperationStatus
from kraft_operator.plan import plan

from .builders import THREE_CONTROLLERS, FixedLayout, cluster_from
from .world import World, publish


def _sample(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    value = metrics.registry.get_sample_value(name, labels)
    return value


def test_reconciles_actions_operation_blocked_time_and_ready_per_cluster(rules) -> None:
    metrics = OperatorMetrics()
    world = World(random.Random(0))
    cluster = cluster_from(THREE_CONTROLLERS)
    now_s = 100.0
    for _ in range(4):
        result = plan(cluster, observed=world.observe(cluster), layout=FixedLayout(), rules=rules,
                      rng=random.Random(1), now_ms=int(now_s * 1000))
        for action in result.actions:
            world.apply(action)
        metrics.record(namespace="ns", cluster="demo", result=result, duration_s=0.02, now_s=now_s)
        cluster = publish(cluster, result.status)
        now_s += 1
    labels = {"namespace": "ns", "cluster": "demo"}
    assert _sample(metrics, "kraftwerk_operator_reconciles_total", **labels, result="acted") == 2
    assert _sample(metrics, "kraftwerk_operator_reconciles_total", **labels, result="idle") == 2
    assert _sample(metrics, "kraftwerk_operator_actions_total", **labels, action="FormatStorage") == 3
    assert _sample(metrics, "kraftwerk_operator_actions_total", **labels, action="StartNode") == 3
    assert _sample(metrics, "kraftwerk_operator_reconcile_duration_seconds_count", **labels) == 4
    assert _sample(metrics, "kraftwerk_operator_cluster_ready", **labels) == 1
    # Ready: no operation left, so no operation series either.
    assert "kraftwerk_operator_operation{" not in generate_latest(metrics.registry).decode()

    # A refused spec: the operation is gone, and the time until the next reconcile counts as blocked.
    bad = cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"config": {"bogus.key": "1"}})})
    for _ in range(3):
        result = plan(bad, observed=world.observe(bad), layout=FixedLayout(), rules=rules,
                      rng=random.Random(1), now_ms=int(now_s * 1000))
        metrics.record(namespace="ns", cluster="demo", result=result, duration_s=0.01, now_s=now_s)
        now_s += 2.5
    assert _sample(metrics, "kraftwerk_operator_reconciles_total", **labels, result="refused") == 3
    assert _sample(metrics, "kraftwerk_operator_blocked_seconds_total", **labels) == 5.0


def test_time_a_gate_holds_an_operation_counts_as_blocked(rules) -> None:
    metrics = OperatorMetrics()
    world = World(random.Random(0))
    cluster = cluster_from(THREE_CONTROLLERS)
    result = plan(cluster, observed=world.observe(cluster), layout=FixedLayout(), rules=rules,
                  rng=random.Random(1), now_ms=0)
    blocker = BlockerStatus(kind="partition", message="demo-0 would drop below min ISR 2", topic="demo",
                            partition=0, replicas=[3, 4, 5], isr=[3, 4], min_isr=2)
    held = replace(result, status=result.status.model_copy(
        update={"operation": OperationStatus(name="roll", step="gating", blocked_by=[blocker])}))
    labels = {"namespace": "ns", "cluster": "demo"}
    metrics.record(namespace="ns", cluster="demo", result=held, duration_s=0.01, now_s=10.0)
    metrics.record(namespace="ns", cluster="demo", result=held, duration_s=0.01, now_s=13.0)
    # The gate opens: the time up to this reconcile counts, nothing after it.
    metrics.record(namespace="ns", cluster="demo", result=result, duration_s=0.01, now_s=14.5)
    metrics.record(namespace="ns", cluster="demo", result=result, duration_s=0.01, now_s=20.0)
    assert _sample(metrics, "kraftwerk_operator_blocked_seconds_total", **labels) == 4.5


def test_the_operation_in_progress_is_one_series_that_moves_with_its_step(rules) -> None:
    metrics = OperatorMetrics()
    world = World(random.Random(0))
    cluster = cluster_from(THREE_CONTROLLERS)
    steps = []
    for _ in range(3):
        result = plan(cluster, observed=world.observe(cluster), layout=FixedLayout(), rules=rules,
                      rng=random.Random(1), now_ms=0)
        for action in result.actions:
            world.apply(action)
        metrics.record(namespace="ns", cluster="demo", result=result, duration_s=0.01, now_s=0)
        cluster = publish(cluster, result.status)
        text = generate_latest(metrics.registry).decode()
        series = [line for line in text.splitlines() if line.startswith("kraftwerk_operator_operation{")]
        assert len(series) == 1, series
        steps.append(series[0])
    assert 'operation="Bootstrap",step="assign-cluster-id"' in steps[0]
    assert 'step="write-config"' in steps[1]
    assert 'step="start"' in steps[2]
