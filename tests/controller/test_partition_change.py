"""PartitionChangeBuilder: online, preferred and unclean elections, epoch bumps, reassignment."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kraft_engine.controller.partition_change import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    Election,
    PartitionChange,
    PartitionChangeBuilder,
)
from kraft_engine.records import MetadataVersion

_MV_LATEST = 25


def _mv(level: int) -> MetadataVersion:
    return MetadataVersion.from_feature_level(level)

_MIGRATING = uuid.UUID(int=0)  # Kafka's DirectoryId.MIGRATING


@dataclass(frozen=True)
class _Partition:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    directories: tuple[uuid.UUID, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.directories:
            object.__setattr__(self, "directories", (_MIGRATING,) * len(self.replicas))


def _builder(partition: _Partition, *, alive: set[int], mv: int = _MV_LATEST) -> PartitionChangeBuilder:
    return PartitionChangeBuilder(partition, is_acceptable_leader=alive.__contains__, metadata_version=_mv(mv))


def test_nothing_to_change_builds_nothing() -> None:
    assert _builder(_Partition((1, 2, 3), (1, 2, 3), 1), alive={1, 2, 3}).build() is None


def test_a_fenced_leader_is_replaced_by_the_next_isr_member() -> None:
    partition = _Partition((1, 2, 3), (1, 2, 3), 1)
    change = _builder(partition, alive={2, 3}).set_target_isr([2, 3]).build()
    assert change == PartitionChange(leader=2, isr=(2, 3))


def test_an_isr_shrink_bumps_the_leader_epoch_only_before_3_6() -> None:
    partition = _Partition((1, 2, 3), (1, 2, 3), 1)
    assert _builder(partition, alive={1, 2, 3}).set_target_isr([1, 2]).build() == PartitionChange(isr=(1, 2))
    old = _builder(partition, alive={1, 2, 3}, mv=11).set_target_isr([1, 2]).build()
    assert old == PartitionChange(isr=(1, 2), leader=1)
    # Expansions never bump it.
    grown = _builder(_Partition((1, 2, 3), (1, 2), 1), alive={1, 2, 3}, mv=11).set_target_isr([1, 2, 3]).build()
    assert grown == PartitionChange(isr=(1, 2, 3))


def test_preferred_election_moves_leadership_back_only_to_an_in_sync_preferred_replica() -> None:
    partition = _Partition((1, 2, 3), (1, 2, 3), 2)
    builder = _builder(partition, alive={1, 2, 3}).set_election(Election.PREFERRED)
    assert builder.build() == PartitionChange(leader=1)
    out_of_sync = _Partition((1, 2, 3), (2, 3), 2)
    assert _builder(out_of_sync, alive={1, 2, 3}).set_election(Election.PREFERRED).build() is None
    # An online election never moves a healthy leader.
    assert _builder(partition, alive={1, 2, 3}).build() is None


def test_losing_the_last_isr_member_leaves_the_partition_offline_but_keeps_its_isr() -> None:
    partition = _Partition((1, 2), (1,), 1)
    change = _builder(partition, alive={2}).set_target_isr([]).build()
    assert change == PartitionChange(leader=NO_LEADER)


def test_unclean_election_picks_a_live_replica_outside_the_isr_and_marks_it_recovering() -> None:
    partition = _Partition((1, 2), (1,), NO_LEADER)
    assert _builder(partition, alive={2}).build() is None
    change = _builder(partition, alive={2}).set_election(Election.UNCLEAN).build()
    assert change == PartitionChange(leader=2, isr=(2,), leader_recovery_state=1)


def test_a_finished_reassignment_drops_the_removing_replicas_and_their_leadership() -> None:
    partition = _Partition((1, 2, 3, 4), (1, 2, 3, 4), 1, removing_replicas=(1,), adding_replicas=(4,))
    change = _builder(partition, alive={1, 2, 3, 4}).build()
    assert change == PartitionChange(
        leader=2, isr=(2, 3, 4), replicas=(2, 3, 4), removing_replicas=(), adding_replicas=(),
        directories=(_MIGRATING,) * 3,
    )
    # Not every target replica is in sync yet: nothing completes.
    waiting = _Partition((1, 2, 3, 4), (1, 2, 3), 1, removing_replicas=(1,), adding_replicas=(4,))
    assert _builder(waiting, alive={1, 2, 3, 4}).build() is None


def test_replacing_replicas_bumps_the_leader_epoch_even_when_the_leader_stays() -> None:
    partition = _Partition((1, 2, 3), (1, 2, 3), 1)
    change = _builder(partition, alive={1, 2, 3}, mv=16).set_target_replicas([1, 2]).set_target_isr([1, 2]).build()
    assert change == PartitionChange(leader=1, isr=(1, 2), replicas=(1, 2))
    assert change.leader != NO_LEADER_CHANGE


def test_directories_are_restated_from_3_7_iv2() -> None:
    disk = uuid.uuid4()
    partition = _Partition((1, 2), (1, 2), 1)
    change = _builder(partition, alive={1, 2}).set_directory(2, disk).build()
    assert change == PartitionChange(directories=(_MIGRATING, disk))
    assert _builder(partition, alive={1, 2}, mv=16).set_directory(2, disk).build() is None


def test_elr_left_behind_is_cleared() -> None:
    partition = _Partition((1, 2, 3), (1, 2, 3), 1, elr=(3,))
    assert _builder(partition, alive={1, 2, 3}).build() == PartitionChange(eligible_leader_replicas=())
