"""Kafka's striped replica placement: rack spreading, balanced leaders, never a fenced leader,
continuation after existing partitions, and its refusals."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from kio.schema.errors import ErrorCode

from kraft_engine.controller import ControllerApiError
from kraft_engine.controller.replica_placement import StripedReplicaPlacer, UsableBroker


def _brokers(racks: dict[int, str | None], fenced: frozenset[int] = frozenset()) -> list[UsableBroker]:
    return [UsableBroker(b, rack, b in fenced) for b, rack in sorted(racks.items())]


SIX_IN_THREE_RACKS = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}


def test_replicas_span_racks_and_leadership_is_balanced() -> None:
    placer = StripedReplicaPlacer(random.Random(7))
    assignments = placer.place(num_partitions=6, replication_factor=3, usable_brokers=_brokers(SIX_IN_THREE_RACKS))
    for replicas in assignments:
        assert len(set(replicas)) == 3
        assert {SIX_IN_THREE_RACKS[b] for b in replicas} == {"a", "b", "c"}
    assert Counter(r[0] for r in assignments) == dict.fromkeys(SIX_IN_THREE_RACKS, 1)
    assert Counter(b for r in assignments for b in r) == dict.fromkeys(SIX_IN_THREE_RACKS, 3)


def test_the_same_seed_places_the_same_way() -> None:
    def place(seed: int) -> list[list[int]]:
        return StripedReplicaPlacer(random.Random(seed)).place(
            num_partitions=10, replication_factor=2, usable_brokers=_brokers(SIX_IN_THREE_RACKS))

    assert place(3) == place(3)


def test_a_fenced_broker_never_leads_but_can_follow_when_a_rack_runs_out() -> None:
    brokers = _brokers({1: "a", 2: "b"}, fenced=frozenset({2}))
    for seed in range(20):
        [replicas] = StripedReplicaPlacer(random.Random(seed)).place(
            num_partitions=1, replication_factor=2, usable_brokers=brokers)
        assert replicas == [1, 2]
    leaders = {
        r[0]
        for seed in range(20)
        for r in StripedReplicaPlacer(random.Random(seed)).place(
            num_partitions=4, replication_factor=1, usable_brokers=_brokers({1: None, 2: None, 3: None},
                                                                             fenced=frozenset({3})))
    }
    assert leaders == {1, 2}


def test_placement_continues_after_the_existing_partitions() -> None:
    racks = {1: "a", 2: "b", 3: "c"}
    placer = StripedReplicaPlacer(random.Random(5))
    existing = placer.place(num_partitions=2, replication_factor=1, usable_brokers=_brokers(racks))
    [new] = StripedReplicaPlacer(random.Random(99)).place(
        num_partitions=1, replication_factor=1, usable_brokers=_brokers(racks), existing_assignments=existing)
    order = ["a", "b", "c"]
    assert racks[new[0]] == order[(order.index(racks[existing[-1][0]]) + 1) % 3]


@pytest.mark.parametrize(("rf", "fenced", "message"), [
    (4, frozenset(), "The target replication factor of 4 cannot be reached because only 3 broker(s) are registered."),
    (0, frozenset(), "Invalid replication factor 0: the replication factor must be positive."),
    (1, frozenset({1, 2, 3}), "All brokers are currently fenced."),
])
def test_refusals(rf: int, fenced: frozenset[int], message: str) -> None:
    with pytest.raises(ControllerApiError) as raised:
        StripedReplicaPlacer(random.Random(1)).place(
            num_partitions=1, replication_factor=rf, usable_brokers=_brokers({1: None, 2: None, 3: None}, fenced))
    assert raised.value.error_code == ErrorCode.invalid_replication_factor
    assert raised.value.message == message
