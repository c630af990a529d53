"""Recompute one partition's leader, ISR and assignment: Kafka's PartitionChangeBuilder.

Every change to a partition — an AlterPartition from its leader, a broker fenced or shutting
down, a reassignment step, a preferred or unclean election — funnels through this one
algorithm, so that the rules (who may lead, when the leader epoch must bump, when a
reassignment completes) live in one place. The result is a `PartitionChange` holding only the
fields that change (None = unchanged), or None when nothing does; the replication manager turns
it into a PartitionChangeRecord.

Eligible leader replicas (KIP-966) are not implemented: the builder runs with ELR disabled,
which clears any ELR/last-known-ELR it finds, exactly as Kafka does when ELR is off.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kraft_engine.records import MetadataVersion

__all__ = [
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "Election",
    "PartitionChange",
    "PartitionChangeBuilder",
    "PartitionLike",
    "complete_reassignment",
]

NO_LEADER = -1
NO_LEADER_CHANGE = -2

_RECOVERED = 0
_RECOVERING = 1



class Election(enum.Enum):
    """Which replicas may become leader."""

    PREFERRED = "preferred"
    """Only the first replica, if it is in the ISR (used by leader balancing)."""
    ONLINE = "online"
    """Any ISR member: keep the partition online without losing data (the default)."""
    UNCLEAN = "unclean"
    """Any live replica, even outside the ISR: may lose data; only when the topic allows it."""


class PartitionLike(Protocol):
    """What the builder reads from a partition registration."""

    @property
    def replicas(self) -> Sequence[int]: ...
    @property
    def directories(self) -> Sequence[uuid.UUID]: ...
    @property
    def isr(self) -> Sequence[int]: ...
    @property
    def removing_replicas(self) -> Sequence[int]: ...
    @property
    def adding_replicas(self) -> Sequence[int]: ...
    @property
    def elr(self) -> Sequence[int]: ...
    @property
    def last_known_elr(self) -> Sequence[int]: ...
    @property
    def leader(self) -> int: ...
    @property
    def leader_recovery_state(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChange:
    """The fields of a PartitionChangeRecord; None (or NO_LEADER_CHANGE, -1 recovery state)
    means unchanged, matching the record's defaults."""

    isr: tuple[int, ...] | None = None
    leader: int = NO_LEADER_CHANGE
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    leader_recovery_state: int = -1
    directories: tuple[uuid.UUID, ...] | None = None
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None


def complete_reassignment(
    *, isr: Sequence[int], replicas: Sequence[int], removing: Sequence[int], adding: Sequence[int]
) -> tuple[list[int], list[int]] | None:
    """If a reassignment is in progress and every target replica is in the ISR, the (replicas,
    ISR) after it completes: the removing replicas dropped from both. Otherwise None."""
    if not removing and not adding:
        return None
    new_isr = list(isr)
    new_replicas = list(replicas)
    if removing:
        new_isr = [r for r in isr if r not in removing]
        if not new_isr:
            return None
        new_replicas = [r for r in replicas if r not in removing]
        if not new_replicas:
            return None
    if not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


class PartitionChangeBuilder:
    """Set targets on a partition, then `build()` the change. `is_acceptable_leader(broker)`
    says whether a broker may lead at all (registered, unfenced, not shutting down, its
    directory online)."""

    def __init__(
        self,
        partition: PartitionLike,
        *,
        is_acceptable_leader: Callable[[int], bool],
        metadata_version: MetadataVersion,
        default_directory: Callable[[int], uuid.UUID] | None = None,
    ) -> None:
        self._partition = partition
        self._is_acceptable_leader = is_acceptable_leader
        self._metadata_version = metadata_version
        self._default_directory = default_directory
        # Tuples: a registration's own tuples are taken as they are (no copy per builder, and
        # one is made for every partition a fenced broker is in), and compare without copying.
        self.target_isr: tuple[int, ...] = tuple(partition.isr)
        self.target_replicas: tuple[int, ...] = tuple(partition.replicas)
        self.target_removing: tuple[int, ...] = tuple(partition.removing_replicas)
        self.target_adding: tuple[int, ...] = tuple(partition.adding_replicas)
        self.target_leader_recovery_state = int(partition.leader_recovery_state)
        self.election = Election.ONLINE
        # Built on first use: most changes (ISR shrinks, leader moves) never look at directories.
        self._target_directories: dict[int, uuid.UUID] | None = None
        # Whether a caller placed any replica on a directory; until then, an unchanged replica
        # list keeps its directories and `build` need not recompute them.
        self._directories_set = False

    # -- targets ---------------------------------------------------------------------------

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        self.target_isr = tuple(isr)
        return self

    def set_target_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        self.target_replicas = tuple(replicas)
        return self

    def set_target_removing(self, removing: Sequence[int]) -> PartitionChangeBuilder:
        self.target_removing = tuple(removing)
        return self

    def set_target_adding(self, adding: Sequence[int]) -> PartitionChangeBuilder:
        self.target_adding = tuple(adding)
        return self

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self.election = election
        return self

    def set_target_leader_recovery_state(self, state: int) -> PartitionChangeBuilder:
        self.target_leader_recovery_state = state
        return self

    def _directories(self) -> dict[int, uuid.UUID]:
        if self._target_directories is None:
            partition = self._partition
            self._target_directories = dict(zip(partition.replicas, partition.directories, strict=False))
        return self._target_directories

    def set_directory(self, broker_id: int, directory: uuid.UUID) -> PartitionChangeBuilder:
        self._directories()[broker_id] = directory
        self._directories_set = True
        return self

    def set_directories(self, directories: Mapping[int, uuid.UUID]) -> PartitionChangeBuilder:
        self._directories().update(directories)
        self._directories_set = True
        return self

    # -- election --------------------------------------------------------------------------

    def _is_valid_new_leader(self, replica: int) -> bool:
        return replica in self.target_isr and self._is_acceptable_leader(replica)

    def elect_leader(self) -> tuple[int, bool]:
        """(new leader or NO_LEADER, whether the election was unclean)."""
        current = self._partition.leader
        if self.election is Election.PREFERRED:
            preferred = self.target_replicas[0] if self.target_replicas else NO_LEADER
            if self._is_valid_new_leader(preferred):
                return preferred, False
            if self._is_valid_new_leader(current):
                return current, False
            for replica in self.target_replicas[1:]:
                if self._is_valid_new_leader(replica):
                    return replica, False
            return NO_LEADER, False
        if self._is_valid_new_leader(current):
            # Keep a leader that still meets every constraint: no needless leadership moves.
            return current, False
        for replica in self.target_replicas:
            if self._is_valid_new_leader(replica):
                return replica, False
        if self.election is Election.UNCLEAN:
            for replica in self.target_replicas:
                if self._is_acceptable_leader(replica):
                    return replica, True
        return NO_LEADER, False

    # -- build -----------------------------------------------------------------------------

    def build(self) -> PartitionChange | None:
        partition = self._partition
        if self.target_removing or self.target_adding:
            completed = complete_reassignment(
                isr=self.target_isr,
                replicas=self.target_replicas,
                removing=self.target_removing,
                adding=self.target_adding,
            )
            if completed is not None:
                self.target_replicas, self.target_isr = tuple(completed[0]), tuple(completed[1])
                self.target_removing, self.target_adding = (), ()

        leader = NO_LEADER_CHANGE
        isr: tuple[int, ...] | None = None
        recovery = -1
        new_leader, unclean = self.elect_leader()
        if new_leader != partition.leader:
            leader = new_leader
            if unclean:
                # An unclean leader starts a new history: the ISR is just itself, and it must
                # recover before it may let others join.
                isr = (new_leader,)
                if partition.leader_recovery_state != _RECOVERING:
                    recovery = _RECOVERING

        same_replicas = self.target_replicas == tuple(partition.replicas)
        # Dropping replicas from the assignment must fence their fetches: bump the leader epoch.
        if leader == NO_LEADER_CHANGE and not same_replicas and not set(partition.replicas) <= set(self.target_replicas):
            leader = partition.leader

        # ELR disabled: clear whatever ELR the partition carries. (Kafka leaves the last-known
        # ELR alone when ELR is off, since it may hold the last known leader.)
        elr = () if partition.elr else None

        if isr is None and self.target_isr and self.target_isr != tuple(partition.isr):
            isr = self.target_isr

        if (
            leader == NO_LEADER_CHANGE
            and isr is not None
            and self._metadata_version.is_leader_epoch_bump_required_on_isr_shrink
            and not set(partition.isr) <= set(isr)
        ):
            # Before 3.6-IV0 brokers needed a leader epoch bump on every ISR shrink (KAFKA-15021).
            leader = partition.leader

        replicas: tuple[int, ...] | None = None
        directories: tuple[uuid.UUID, ...] | None = None
        if self.target_replicas:
            if (self._directories_set or not same_replicas) and (
                self._metadata_version.is_directory_assignment_supported
            ):
                target_directories = tuple(self._directory_of(r) for r in self.target_replicas)
                if target_directories != tuple(partition.directories):
                    directories = target_directories
            if not same_replicas:
                replicas = self.target_replicas
        removing = self.target_removing if self.target_removing != tuple(partition.removing_replicas) else None
        adding = self.target_adding if self.target_adding != tuple(partition.adding_replicas) else None
        if self.target_leader_recovery_state != partition.leader_recovery_state:
            recovery = self.target_leader_recovery_state

        if (
            isr is None and leader == NO_LEADER_CHANGE and replicas is None and removing is None
            and adding is None and recovery == -1 and directories is None and elr is None
        ):
            return None
        return PartitionChange(
            isr=isr,
            leader=leader,
            replicas=replicas,
            removing_replicas=removing,
            adding_replicas=adding,
            leader_recovery_state=recovery,
            directories=directories,
            eligible_leader_replicas=elr,
        )

    def _directory_of(self, replica: int) -> uuid.UUID:
        directory = self._directories().get(replica)
        if directory is not None:
            return directory
        if self._default_directory is None:
            raise RuntimeError(f"no directory known for new replica {replica}")
        return self._default_directory(replica)
