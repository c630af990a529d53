"""PartitionRegistration: built from PartitionRecord, evolved by PartitionChangeRecord, written back."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metadata_log_helpers import change, dir_id, partition, topic_id

from kraft_engine.metadata import (
    MIGRATING_DIRECTORY,
    NO_LEADER,
    ImageWriterOptions,
    LeaderRecoveryState,
    MergeMemo,
    MetadataReplayError,
    PartitionRegistration,
    UnwritableMetadataError,
)
from kraft_engine.records.framing import decode_metadata_record, encode_metadata_record


def registration(**overrides: object) -> PartitionRegistration:
    fields: dict[str, object] = {
        "replicas": (1, 2, 3),
        "directories": (dir_id(1), dir_id(2), dir_id(3)),
        "isr": (1, 2, 3),
        "leader": 1,
        "leader_epoch": 5,
        "partition_epoch": 9,
    }
    fields.update(overrides)
    return PartitionRegistration(**fields)  # type: ignore[arg-type]


def test_from_record_without_directories_marks_every_replica_migrating() -> None:
    reg = PartitionRegistration.from_record(partition(1, 0, replicas=(4, 5, 6)))
    assert reg.replicas == (4, 5, 6)
    assert reg.directories == (MIGRATING_DIRECTORY,) * 3
    assert reg.leader == 4
    assert reg.leader_recovery_state is LeaderRecoveryState.RECOVERED
    assert (reg.leader_epoch, reg.partition_epoch) == (0, 0)


def test_from_record_refuses_directories_that_do_not_match_replicas() -> None:
    record = partition(1, 0, replicas=(1, 2), directories=(dir_id(1),))
    with pytest.raises(MetadataReplayError, match="2 replicas but 1 directories"):
        PartitionRegistration.from_record(record)


def test_merge_with_no_fields_set_changes_only_the_partition_epoch() -> None:
    reg = registration()
    merged = reg.merge(change(1, 0))
    assert merged.partition_epoch == reg.partition_epoch + 1
    assert merged.leader_epoch == reg.leader_epoch
    assert (merged.replicas, merged.isr, merged.leader, merged.directories) == (
        reg.replicas,
        reg.isr,
        reg.leader,
        reg.directories,
    )


def test_isr_change_without_leader_field_keeps_the_leader_epoch() -> None:
    merged = registration().merge(change(1, 0, isr=(1, 2)))
    assert merged.isr == (1, 2)
    assert merged.leader == 1
    assert merged.leader_epoch == 5
    assert merged.partition_epoch == 10


def test_naming_the_same_leader_bumps_the_leader_epoch() -> None:
    # This is how the controller forces a leader epoch bump (ISR shrink before 3.6-IV0, replicas
    # removed by a reassignment) without electing anyone new.
    merged = registration().merge(change(1, 0, leader=1, isr=(1, 2)))
    assert merged.leader == 1
    assert merged.leader_epoch == 6
    assert merged.partition_epoch == 10


def test_leader_minus_one_means_no_leader_and_bumps_the_epoch() -> None:
    merged = registration().merge(change(1, 0, leader=NO_LEADER, isr=(2,)))
    assert merged.leader == NO_LEADER
    assert not merged.has_leader
    assert merged.leader_epoch == 6


def test_leader_recovery_state_minus_one_is_unchanged_and_other_values_apply() -> None:
    reg = registration()
    assert reg.merge(change(1, 0)).leader_recovery_state is LeaderRecoveryState.RECOVERED
    recovering = reg.merge(change(1, 0, leader=3, leader_recovery_state=1))
    assert recovering.leader_recovery_state is LeaderRecoveryState.RECOVERING
    assert recovering.merge(change(1, 0)).leader_recovery_state is LeaderRecoveryState.RECOVERING
    with pytest.raises(MetadataReplayError, match="7 is not a valid leader recovery state"):
        reg.merge(change(1, 0, leader_recovery_state=7))


def test_replica_change_with_real_directories_must_restate_them() -> None:
    reg = registration()
    with pytest.raises(MetadataReplayError, match="sets 4 replicas but leaves 3 directories"):
        reg.merge(change(1, 0, replicas=(1, 2, 3, 4)))
    grown = reg.merge(change(1, 0, replicas=(1, 2, 3, 4), directories=(dir_id(1), dir_id(2), dir_id(3), dir_id(4))))
    assert grown.directory(4) == dir_id(4)


def test_replica_change_with_unknown_directories_stretches_them() -> None:
    reg = registration(directories=(MIGRATING_DIRECTORY,) * 3)
    grown = reg.merge(change(1, 0, replicas=(1, 2, 3, 4), adding_replicas=(4,)))
    assert grown.directories == (MIGRATING_DIRECTORY,) * 4
    assert grown.adding_replicas == (4,)


def test_elr_fields_merge_independently() -> None:
    merged = registration().merge(change(1, 0, eligible_leader_replicas=(2,), last_known_elr=(3,)))
    assert (merged.elr, merged.last_known_elr) == ((2,), (3,))
    assert merged.merge(change(1, 0, isr=(1,))).elr == (2,)


def test_preferred_leader_predicates() -> None:
    assert registration().has_preferred_leader
    assert not registration(leader=2).has_preferred_leader
    assert not registration(leader=NO_LEADER).has_preferred_leader
    assert registration().preferred_replica == 1


def test_directory_of_a_non_replica_is_an_error() -> None:
    with pytest.raises(ValueError, match="broker 9 is not a replica"):
        registration().directory(9)


@pytest.mark.parametrize(("level", "version"), [(7, 0), (16, 0), (17, 1), (22, 1), (23, 2), (25, 2)])
def test_to_record_round_trips_at_the_version_the_metadata_version_allows(level: int, version: int) -> None:
    reg = registration(directories=(MIGRATING_DIRECTORY,) * 3) if level < 17 else registration()
    record, record_version = reg.to_record(topic_id(1), 0, options=ImageWriterOptions(level))
    assert record_version == version
    decoded, decoded_version = decode_metadata_record(encode_metadata_record(record, record_version))
    assert decoded_version == version
    assert PartitionRegistration.from_record(decoded) == reg  # type: ignore[arg-type]


def test_to_record_refuses_to_drop_directories_or_elr_unless_told_to() -> None:
    with pytest.raises(UnwritableMetadataError, match="directory assignment"):
        registration().to_record(topic_id(1), 0, options=ImageWriterOptions(16))
    with pytest.raises(UnwritableMetadataError, match="eligible leader replicas"):
        registration(elr=(2,)).to_record(topic_id(1), 0, options=ImageWriterOptions(22))
    lost: list[str] = []
    record, _ = registration(elr=(2,)).to_record(topic_id(1), 0, options=ImageWriterOptions(16, lost.append))
    assert record.directories == ()
    assert record.eligible_leader_replicas is None
    assert len(lost) == 2


def test_registrations_are_values() -> None:
    assert registration() == registration()
    assert registration() != registration(isr=(1, 2))
    # Kafka's DirectoryId.MIGRATING is Uuid (0, 0); (0, 1) is UNASSIGNED.
    assert uuid.UUID(int=0) == MIGRATING_DIRECTORY


def test_replayed_registrations_are_the_same_frozen_values_the_constructor_builds() -> None:
    replayed = PartitionRegistration.from_record(partition(1, 0, replicas=(1, 2, 3), leader=2))
    built = PartitionRegistration(
        replicas=(1, 2, 3), directories=(MIGRATING_DIRECTORY,) * 3, isr=(1, 2, 3), leader=2, leader_epoch=0,
        partition_epoch=0,
    )
    merged = replayed.merge(change(1, 0, isr=(2, 3)))
    assert replayed == built and hash(replayed) == hash(built) and repr(replayed) == repr(built)
    assert merged == dataclasses.replace(built, isr=(2, 3), partition_epoch=1)
    for value in (replayed, merged):
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.leader = 3  # type: ignore[misc]
    with pytest.raises(MetadataReplayError, match="has 3 replicas but 2 directories"):
        registration().merge(change(1, 0, directories=(dir_id(1), dir_id(2))))


@settings(max_examples=200, deadline=None)
@given(
    isr=st.none() | st.lists(st.integers(0, 5), max_size=4).map(tuple),
    leader=st.sampled_from([-2, -1, 0, 1, 2, 3]),
    elr=st.lists(st.integers(0, 5), max_size=2).map(tuple),
    recovery=st.sampled_from(list(LeaderRecoveryState)),
)
def test_an_isr_or_leader_change_merges_as_every_other_change_does(
    isr: tuple[int, ...] | None, leader: int, elr: tuple[int, ...], recovery: LeaderRecoveryState
) -> None:
    """`merge` takes a shortcut for a record that sets only the ISR and the leader (a fence's);
    it builds what the field-by-field merge of every other record builds, and an equal frozen value."""
    base = registration(elr=elr, last_known_elr=elr[:1], leader_recovery_state=recovery, removing_replicas=(3,))
    record = change(1, 0, isr=isr, leader=leader)
    merged = base.merge(record)
    assert merged == base._merged(record)
    assert hash(merged) == hash(base._merged(record)) and repr(merged) == repr(base._merged(record))
    with pytest.raises(dataclasses.FrozenInstanceError):
        merged.isr = ()  # type: ignore[misc]


@settings(max_examples=80, deadline=None)
@given(
    changes=st.lists(
        st.tuples(
            st.integers(0, 2),
            st.none() | st.sampled_from([(1,), (1, 2), (2, 3), (1, 2, 3)]),
            st.sampled_from([-2, -1, 1, 2, 3]),
            st.booleans(),
        ),
        max_size=40,
    )
)
def test_a_merge_memo_gives_what_merge_gives_and_one_object_per_distinct_merge(
    changes: list[tuple[int, tuple[int, ...] | None, int, bool]],
) -> None:
    """`MergeMemo.merge` (a fence's records replayed in the controller and every image) returns an
    equal registration to `merge` for every record; registrations that were one object before and
    take the same ISR/leader change are one object after; other records merge field by field."""
    states = [registration(), registration(isr=(1, 2)), registration(leader=2, leader_epoch=6)]
    memo = MergeMemo()
    seen: dict[tuple[int, tuple[int, ...] | None, int], PartitionRegistration] = {}
    for state, isr, leader, with_elr in changes:
        extra: dict[str, object] = {"eligible_leader_replicas": (3,)} if with_elr else {}
        record = change(1, state, isr=isr, leader=leader, **extra)
        merged = memo.merge(states[state], record)
        assert merged == states[state].merge(record)
        if not with_elr:
            first = seen.setdefault((state, isr, leader), merged)
            assert first is merged


def test_equal_partition_records_load_as_one_registration() -> None:
    """Partitions in one state hold one registration object (so a memo finds their merges by
    identity); records that differ in any field load as different values."""
    first = PartitionRegistration.from_record(partition(1, 0, replicas=(1, 2, 3)))
    assert PartitionRegistration.from_record(partition(2, 5, replicas=(1, 2, 3))) is first
    other = PartitionRegistration.from_record(partition(1, 1, replicas=(1, 2, 3), leader=2))
    assert other is not first and other != first
