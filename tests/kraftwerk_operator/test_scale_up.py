"""Broker scale-up against the simulated cluster: the new broker starts and registers, and the
status says that Kafka does not rebalance by itself (condition BrokersWithoutReplicas, an Event
once) until replicas are moved onto it."""

from __future__ import annotations

import random

from kraft_operator.model import ConditionStatus, ConditionType

from .sim import bootstrap, scaled, step


def test_a_broker_added_holds_no_replica_and_the_status_says_kafka_does_not_rebalance() -> None:
    cluster, sim = bootstrap(5)
    rng = random.Random(5)
    cluster, result = step(cluster, sim, rng)
    idle = result.status.condition(ConditionType.IDLE_BROKERS)
    assert idle is not None and idle.status is ConditionStatus.FALSE  # every broker holds replicas
    cluster = scaled(cluster, brokers=4)
    events = []
    for _ in range(40):
        cluster, result = step(cluster, sim, rng)
        events += [e for e in result.events if e.reason == "BrokersWithoutReplicas"]
        idle = result.status.condition(ConditionType.IDLE_BROKERS)
        if idle is not None and idle.status is ConditionStatus.TRUE and result.status.operation is None:
            break
    assert idle is not None and idle.status is ConditionStatus.TRUE, result.waiting_for
    assert "broker(s) [6] hold no replica: Kafka does not move existing replicas" in idle.message
    assert sim.nodes[6].running and sim.nodes[6].registered
    for _ in range(3):
        cluster, result = step(cluster, sim, rng)
        events += [e for e in result.events if e.reason == "BrokersWithoutReplicas"]
    assert len(events) == 1  # said once, when it turned True
    # A reassignment puts a replica on broker 6: the condition clears.
    moved = sim.partitions[0]
    moved.replicas = (*moved.replicas[:2], 6)
    moved.isr = [r for r in moved.isr if r in moved.replicas] + [6]
    cluster, result = step(cluster, sim, rng)
    idle = result.status.condition(ConditionType.IDLE_BROKERS)
    assert idle is not None and idle.status is ConditionStatus.FALSE
    assert sim.violations == []
