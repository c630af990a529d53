"""A broker's drain is a throttled reassignment, as Kafka's `kafka-reassign-partitions --execute
--throttle` runs one: against the simulated cluster (`sim.py`), the throttle is recorded in
status with the moves, set before AlterPartitionReassignments (the simulation refuses a move that
starts unthrottled), shown while the drain runs, and removed before the broker stops (the
simulation refuses a stop with a throttle left); a plan that forgets either is caught. The throttle
itself is Kafka's: the sources on the leader side, the added replicas on the follower side.
"""

from __future__ import annotations

import pytest

import kraft_operator.plan.scale_down as scale_down_module
from kraft_operator.model import PartitionMoveStatus
from kraft_operator.plan import (
    SCALE_DOWN_OPERATION,
    ClearReassignmentThrottles,
    PartitionDetail,
    ReassignPartitions,
    SetReassignmentThrottles,
    StopNode,
    reassignment_throttle,
)

from .sim import ScaleScenario


def test_kafkas_throttle_lists_the_sources_as_leaders_and_the_added_replicas_as_followers() -> None:
    current = [PartitionDetail("t", 0, 1, (1, 2, 6), (1, 2, 6)), PartitionDetail("t", 1, 6, (6, 3, 1), (6, 3, 1)),
               PartitionDetail("u", 0, 2, (2, 6), (2, 6))]
    moves = [PartitionMoveStatus(topic="t", partition=0, replicas=[1, 2, 3]),
             PartitionMoveStatus(topic="t", partition=1, replicas=[2, 3, 1]),
             PartitionMoveStatus(topic="u", partition=0, replicas=[2, 4])]
    throttle = reassignment_throttle(moves, current=current, rate_bytes_per_second=1000)
    assert throttle.rate_bytes_per_second == 1000
    assert throttle.brokers == [1, 2, 3, 4, 6]
    assert [(t.topic, t.leader_replicas, t.follower_replicas) for t in throttle.topics] == [
        ("t", "0:1,0:2,0:6,1:1,1:3,1:6", "0:3,1:2"),
        ("u", "0:2,0:6", "0:4"),
    ]


def _drain_actions(scenario: ScaleScenario) -> list[str]:
    return [type(a).__name__ for r in scenario.results for a in r.actions
            if isinstance(a, SetReassignmentThrottles | ReassignPartitions | ClearReassignmentThrottles)
            or (isinstance(a, StopNode) and a.node.node_id == 6)]


def test_the_drain_is_throttled_shown_in_status_and_unthrottled_before_the_broker_stops() -> None:
    scenario = ScaleScenario(seed=4, leaving_leader=True)
    violations, finished = scenario.run()
    assert violations == [] and finished, "\n".join(scenario.log[-30:])
    assert _drain_actions(scenario) == ["SetReassignmentThrottles", "ReassignPartitions",
                                        "ClearReassignmentThrottles", "StopNode"]
    draining = [r.status.operation for r in scenario.results if r.status.operation is not None
                and r.status.operation.name == SCALE_DOWN_OPERATION and r.status.operation.step == "draining"]
    assert draining
    for operation in draining:
        assert operation.scale_down is not None and operation.scale_down.throttle is not None
        assert operation.scale_down.throttle.rate_bytes_per_second == 52428800  # the spec's default
        assert "throttled at 52428800 B/s" in operation.waiting_for
    steps = [r.status.operation.step for r in scenario.results if r.status.operation is not None
             and r.status.operation.name == SCALE_DOWN_OPERATION]
    last_stop = len(steps) - 1 - steps[::-1].index("stop")  # the broker's (the controllers stop first)
    assert steps.index("draining") < steps.index("clear-throttles") < last_stop
    events = [e.reason for r in scenario.results for e in r.events]
    assert "SetReassignmentThrottles" in events and "ClearReassignmentThrottles" in events


@pytest.mark.parametrize("broken", ["never-set", "never-cleared"])
def test_a_drain_that_forgets_its_throttle_is_caught(broken: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if broken == "never-set":
        monkeypatch.setattr(scale_down_module, "set_throttles",
                            lambda throttle, *, reason: ClearReassignmentThrottles(brokers=(), topics=(), reason=reason))
    else:
        monkeypatch.setattr(scale_down_module, "throttle_removal", lambda throttle, **_: ("done", []))
    violations, _ = ScaleScenario(seed=4, leaving_leader=True).run()
    expected = "started unthrottled" if broken == "never-set" else "with reassignment throttles left"
    assert any(expected in v for v in violations), violations


def test_an_unthrottled_spec_sends_no_throttle() -> None:
    scenario = ScaleScenario(seed=5, throttle_bytes_per_second=None)
    violations, finished = scenario.run()
    assert violations == [] and finished
    names = _drain_actions(scenario)
    assert names == ["ReassignPartitions", "StopNode"]
