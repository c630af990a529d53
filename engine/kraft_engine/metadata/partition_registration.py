"""One partition as the image holds it: replicas, ISR, ELR, leader and the two epochs.

A `PartitionRegistration` is built from a `PartitionRecord` and evolved only by
`merge(PartitionChangeRecord)`, exactly as every node replays them, so two nodes that replayed the
same records hold equal registrations. The split between the leader epoch (bumped whenever a change
record names a leader, even the same one) and the partition epoch (bumped on every change) is what
lets a broker tell "I became leader" from "my ISR changed while I lead".

When the *controller* must bump the leader epoch without electing anyone (an ISR shrink under
metadata.version < 3.6-IV0, or a reassignment that drops replicas), it writes the current leader
into the change record; `merge` then bumps the epoch. That decision belongs to the controller's
partition-change builder; this module only gives the record its meaning.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kraft_engine.kafka_uuid import ZERO_UUID
from kraft_engine.metadata.errors import MetadataReplayError
from kraft_engine.metadata.image_writer import ImageWriterOptions
from kraft_engine.records.metadata_records import PartitionChangeRecord, PartitionRecord
from kraft_engine.slot_setters import slot_setters

__all__ = [
    "MIGRATING_DIRECTORY",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "LeaderRecoveryState",
    "MergeMemo",
    "PartitionRegistration",
]

# Leader sentinels of PartitionRecord/PartitionChangeRecord: -1 is "no leader" (the partition is
# offline), -2 (the change record's default) is "the leader is unchanged".
NO_LEADER = -1
NO_LEADER_CHANGE = -2

# Kafka's DirectoryId.MIGRATING, Uuid (0, 0): the replica's directory is not known yet (records
# written before metadata.version 3.7-IV2). Kafka's other reserved directory ids are UNASSIGNED,
# (0, 1), a replica still to be placed, and LOST, (0, 2), an unspecified offline directory.
MIGRATING_DIRECTORY = ZERO_UUID

# PartitionChangeRecord.LeaderRecoveryState default: the recovery state is unchanged.
_RECOVERY_STATE_NO_CHANGE = -1


class LeaderRecoveryState(enum.IntEnum):
    """Whether the leader came from a clean election (RECOVERED) or is recovering from an unclean one."""

    RECOVERED = 0
    RECOVERING = 1

    @classmethod
    def of(cls, value: int) -> LeaderRecoveryState:
        # A table lookup: calling the enum class costs more than the rest of replaying a record.
        found = _RECOVERY_STATES.get(value)
        if found is None:
            raise MetadataReplayError(f"{value} is not a valid leader recovery state")
        return found


_RECOVERY_STATES = {int(state): state for state in LeaderRecoveryState}


def _directories(directories: Sequence[uuid.UUID] | None, replica_count: int) -> tuple[uuid.UUID, ...]:
    # Kafka stores "no directory information" (a v0 record, or all-MIGRATING) as one MIGRATING
    # entry per replica, so the two spellings of "unknown" compare equal after replay.
    if not directories or all(d == MIGRATING_DIRECTORY for d in directories):
        return _all_migrating(replica_count)
    return tuple(directories)


_ALL_MIGRATING: dict[int, tuple[uuid.UUID, ...]] = {}


def _all_migrating(replica_count: int) -> tuple[uuid.UUID, ...]:
    # One shared tuple per replica count: every partition of a cluster without directory
    # assignment holds one, and 100k copies cost memory and garbage-collector time for nothing.
    found = _ALL_MIGRATING.get(replica_count)
    if found is None:
        found = _ALL_MIGRATING[replica_count] = (MIGRATING_DIRECTORY,) * replica_count
    return found


def _ints(values: Sequence[int] | None) -> tuple[int, ...]:
    if values is None:
        return ()
    # Records already hold tuples of ints; reuse them rather than rebuilding per merge.
    return values if isinstance(values, tuple) else tuple(values)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRegistration:
    """The state of one partition. Immutable; equality is field-by-field."""

    replicas: tuple[int, ...]
    directories: tuple[uuid.UUID, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    leader: int
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    leader_epoch: int
    partition_epoch: int

    def __post_init__(self) -> None:
        _check_directories(self.replicas, self.directories)

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        replicas = _ints(record.replicas)
        if record.directories and len(record.directories) != len(replicas):
            raise MetadataReplayError(
                f"PartitionRecord for {record.topic_id}:{record.partition_id} has "
                f"{len(replicas)} replicas but {len(record.directories)} directories"
            )
        directories = _directories(record.directories, len(replicas))
        isr = _ints(record.isr)
        removing, adding = _ints(record.removing_replicas), _ints(record.adding_replicas)
        elr, last_known_elr = _ints(record.eligible_leader_replicas), _ints(record.last_known_elr)
        leader, leader_epoch, partition_epoch = int(record.leader), int(record.leader_epoch), int(record.partition_epoch)
        recovery = LeaderRecoveryState.of(record.leader_recovery_state)
        key = (replicas, directories, isr, removing, adding, elr, last_known_elr, leader,
               record.leader_recovery_state, leader_epoch,
               partition_epoch)
        found = _INTERNED.get(key)
        if found is not None:
            return found
        if len(_INTERNED) >= _INTERNED_MAX:
            _INTERNED.clear()
        registration = _INTERNED[key] = _built(
            replicas=replicas, directories=directories, isr=isr, removing_replicas=removing,
            adding_replicas=adding, elr=elr, last_known_elr=last_known_elr, leader=leader,
            leader_recovery_state=recovery, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
        )
        return registration

    def merge(self, record: PartitionChangeRecord) -> PartitionRegistration:
        """The registration after `record`: absent (None / sentinel) fields keep their value.

        Naming any leader (including the current one, or -1 for "none") bumps the leader epoch;
        every change record bumps the partition epoch.
        """
        if _isr_or_leader_only(record):
            # The ISR or the leader alone (every change of a fence or a controlled shutdown): the
            # assignment, the ELR and the recovery state stand as they are, already checked.
            return self._with_isr_and_leader(record.isr, int(record.leader))
        return self._merged(record)

    def _merged(self, record: PartitionChangeRecord) -> PartitionRegistration:
        """`merge` for any record, field by field."""
        replicas = self.replicas if record.replicas is None else _ints(record.replicas)
        if record.directories is None and len(replicas) == len(self.directories):
            # The common case (ISR and leader changes): the placements stand as they are.
            directories = self.directories
        elif record.directories is None:
            # Unknown placements stretch to the new replica count; real ones must be restated by
            # any record that changes the replica count (checked in __post_init__), as in Kafka.
            directories = _directories(self.directories, len(replicas))
            if len(directories) != len(replicas):
                raise MetadataReplayError(
                    f"PartitionChangeRecord for {record.topic_id}:{record.partition_id} sets "
                    f"{len(replicas)} replicas but leaves {len(directories)} directories"
                )
        else:
            if record.directories and len(record.directories) != len(replicas):
                raise MetadataReplayError(
                    f"PartitionChangeRecord for {record.topic_id}:{record.partition_id} has "
                    f"{len(replicas)} replicas but {len(record.directories)} directories"
                )
            directories = _directories(record.directories, len(replicas))
        if record.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = int(record.leader), self.leader_epoch + 1
        if record.leader_recovery_state == _RECOVERY_STATE_NO_CHANGE:
            recovery = self.leader_recovery_state
        else:
            recovery = LeaderRecoveryState.of(record.leader_recovery_state)
        return _built(
            replicas=replicas,
            directories=directories,
            isr=self.isr if record.isr is None else _ints(record.isr),
            removing_replicas=(
                self.removing_replicas if record.removing_replicas is None else _ints(record.removing_replicas)
            ),
            adding_replicas=(
                self.adding_replicas if record.adding_replicas is None else _ints(record.adding_replicas)
            ),
            elr=self.elr if record.eligible_leader_replicas is None else _ints(record.eligible_leader_replicas),
            last_known_elr=(
                self.last_known_elr if record.last_known_elr is None else _ints(record.last_known_elr)
            ),
            leader=leader,
            leader_recovery_state=recovery,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
        )

    def _with_isr_and_leader(self, isr: Sequence[int] | None, leader: int) -> PartitionRegistration:
        registration: PartitionRegistration = _new(PartitionRegistration)
        _set_replicas(registration, self.replicas)
        _set_directories(registration, self.directories)
        _set_isr(registration, self.isr if isr is None else _ints(isr))
        _set_removing(registration, self.removing_replicas)
        _set_adding(registration, self.adding_replicas)
        _set_elr(registration, self.elr)
        _set_last_known_elr(registration, self.last_known_elr)
        if leader == NO_LEADER_CHANGE:
            _set_leader(registration, self.leader)
            _set_leader_epoch(registration, self.leader_epoch)
        else:
            _set_leader(registration, leader)
            _set_leader_epoch(registration, self.leader_epoch + 1)
        _set_recovery(registration, self.leader_recovery_state)
        _set_partition_epoch(registration, self.partition_epoch + 1)
        return registration

    def with_elr_cleared(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        """Kafka's replay of a ClearElrRecord on this partition, in the controller and in the image
        alike: the ELR and the last known ELR emptied as a merged PartitionChangeRecord empties them
        (the partition epoch moves); None when it holds neither, which leaves it as it is."""
        if not (self.elr or self.last_known_elr):
            return None
        return self.merge(PartitionChangeRecord(
            partition_id=partition_id, topic_id=topic_id, eligible_leader_replicas=(), last_known_elr=()))

    # -- predicates the controller and brokers use ------------------------------------------------

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    @property
    def preferred_replica(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def has_preferred_leader(self) -> bool:
        """True when the first replica leads. A leaderless partition never has its preferred leader."""
        return self.has_leader and self.leader == self.preferred_replica

    def directory(self, replica: int) -> uuid.UUID:
        """The log directory assigned to `replica`; ValueError when it is not a replica here."""
        for broker, directory in zip(self.replicas, self.directories, strict=True):
            if broker == replica:
                return directory
        raise ValueError(f"broker {replica} is not a replica of this partition {list(self.replicas)}")

    def has_same_assignment(self, other: PartitionRegistration) -> bool:
        return (
            self.replicas == other.replicas
            and self.directories == other.directories
            and self.adding_replicas == other.adding_replicas
            and self.removing_replicas == other.removing_replicas
        )

    # -- back to records -------------------------------------------------------------------------

    def to_record(
        self, topic_id: uuid.UUID, partition_id: int, *, options: ImageWriterOptions
    ) -> tuple[PartitionRecord, int]:
        """The PartitionRecord (and its version) that recreates this registration under `options`.

        ELR fields exist only from metadata.version 4.0-IV1 and directories from 3.7-IV2; below
        that, real directory assignments cannot be written and are reported as a loss.
        """
        directories: tuple[uuid.UUID, ...] = ()
        if options.directory_assignment_supported:
            directories = self.directories
        elif any(d != MIGRATING_DIRECTORY for d in self.directories):
            options.handle_loss("the directory assignment state of one or more replicas")
        elr: tuple[int, ...] | None = None
        last_known_elr: tuple[int, ...] | None = None
        if options.elr_supported:
            # Tagged fields: written only when non-empty, as Kafka does, to keep records small.
            elr = self.elr or None
            last_known_elr = self.last_known_elr or None
        elif self.elr or self.last_known_elr:
            options.handle_loss("the eligible leader replicas of one or more partitions")
        record = PartitionRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            replicas=self.replicas,
            isr=self.isr,
            removing_replicas=self.removing_replicas,
            adding_replicas=self.adding_replicas,
            leader=self.leader,
            leader_recovery_state=int(self.leader_recovery_state),
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            directories=directories,
            eligible_leader_replicas=elr,
            last_known_elr=last_known_elr,
        )
        return record, options.partition_record_version


def _isr_or_leader_only(record: PartitionChangeRecord) -> bool:
    return (
        record.replicas is None and record.directories is None and record.removing_replicas is None
        and record.adding_replicas is None and record.eligible_leader_replicas is None
        and record.last_known_elr is None and record.leader_recovery_state == _RECOVERY_STATE_NO_CHANGE
    )


class MergeMemo:
    """`PartitionRegistration.merge` over a run of records, each distinct merge done once.

    Registrations are immutable and compare by value, so partitions in the same state may hold
    the same registration object: `from_record` returns one object per distinct state (a bounded
    table), and a memo hands every partition whose old registration and ISR/leader change are the
    same the same merged registration. One broker's fence at 100k partitions then merges a few
    hundred times, not 100k, in the controller and in every node's image alike, and the states
    stay shared for the next change. The memo keys on the old registration's identity and holds
    it, so no other object can take its id while the memo lives; keep one memo for one run."""

    __slots__ = ("_merged",)

    def __init__(self) -> None:
        self._merged: dict[tuple[int, tuple[int, ...] | None, int],
                           tuple[PartitionRegistration, PartitionRegistration]] = {}

    def merge(self, registration: PartitionRegistration, record: PartitionChangeRecord) -> PartitionRegistration:
        isr = record.isr
        if (isr is not None and type(isr) is not tuple) or not _isr_or_leader_only(record):
            return registration.merge(record)
        leader = int(record.leader)
        key = (id(registration), isr, leader)
        found = self._merged.get(key)
        if found is not None:
            return found[1]
        merged = registration._with_isr_and_leader(isr, leader)
        self._merged[key] = (registration, merged)
        return merged


# One registration per distinct state read from PartitionRecords (creation, snapshot loads): a
# cluster's partitions are in few states, so 100k partitions hold a few hundred objects, and the
# memo above finds their merges by identity. Bounded: past the limit the table starts again,
# which only costs sharing (equality is by value, never identity).
_INTERNED: dict[tuple[object, ...], PartitionRegistration] = {}
_INTERNED_MAX = 1 << 14


def _check_directories(replicas: tuple[int, ...], directories: tuple[uuid.UUID, ...]) -> None:
    if len(directories) != len(replicas):
        raise MetadataReplayError(
            f"partition has {len(replicas)} replicas {list(replicas)} but {len(directories)} directories"
        )


# Replay builds one registration per PartitionRecord and PartitionChangeRecord: hundreds of
# thousands when an image is built from a snapshot. A frozen dataclass's __init__ stores each field
# through object.__setattr__, which made construction three times the cost of storing the fields
# through their slot descriptors, as `_built` does. The result is the same frozen object.
_FIELD_NAMES = (
    "replicas", "directories", "isr", "removing_replicas", "adding_replicas", "elr", "last_known_elr",
    "leader", "leader_recovery_state", "leader_epoch", "partition_epoch",
)
(
    _set_replicas, _set_directories, _set_isr, _set_removing, _set_adding, _set_elr, _set_last_known_elr,
    _set_leader, _set_recovery, _set_leader_epoch, _set_partition_epoch,
) = slot_setters(PartitionRegistration, _FIELD_NAMES)
_new = object.__new__


def _built(
    *,
    replicas: tuple[int, ...],
    directories: tuple[uuid.UUID, ...],
    isr: tuple[int, ...],
    removing_replicas: tuple[int, ...],
    adding_replicas: tuple[int, ...],
    elr: tuple[int, ...],
    last_known_elr: tuple[int, ...],
    leader: int,
    leader_recovery_state: LeaderRecoveryState,
    leader_epoch: int,
    partition_epoch: int,
) -> PartitionRegistration:
    """`PartitionRegistration(...)` with the same check, at a third of the cost."""
    _check_directories(replicas, directories)
    registration: PartitionRegistration = _new(PartitionRegistration)
    _set_replicas(registration, replicas)
    _set_directories(registration, directories)
    _set_isr(registration, isr)
    _set_removing(registration, removing_replicas)
    _set_adding(registration, adding_replicas)
    _set_elr(registration, elr)
    _set_last_known_elr(registration, last_known_elr)
    _set_leader(registration, leader)
    _set_recovery(registration, leader_recovery_state)
    _set_leader_epoch(registration, leader_epoch)
    _set_partition_epoch(registration, partition_epoch)
    return registration
