"""Recompute one partition's leader, ISR and assignment: Kafka's PartitionChangeBuilder.

Every change to a partition — an AlterPartition from its leader, a broker fenced or shutting
down, a reassignment step, a preferred or unclean election — funnels through this one
algorithm, so that the rules (who may lead, when the leader epoch must bump, when a
reassignment completes) live in one place. The result is a `PartitionChange` holding only the
fields that change (None = unchanged), or None when nothing does; the replication manager turns
it into a PartitionChangeRecord.

With eligible.leader.replicas.version >= 1 finalized the builder also keeps KIP-966's eligible
leader replicas: while the ISR is below min.insync.replicas, the replicas that were in the ISR
(and did not shut down uncleanly) stay eligible to lead in the ELR, a leader is elected from the
ELR when the ISR is empty, and the last-known-ELR field remembers the last leader of a partition
whose ISR and ELR both emptied (Kafka 4.1's "last known leader in balanced recovery"), which is
elected back when it returns. With ELR off the builder clears any ELR it finds, as Kafka does.
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

_JAVA_MIN_CAPACITY = 16
_JAVA_LOAD_FACTOR = 0.75


def _java_hash_set_order(initial: Sequence[int], added: Sequence[int]) -> list[int]:
    """The distinct ints of `initial` then `added` in the order a java.util.HashSet built as
    `new HashSet<>(initial)` then given `added` iterates them: by bucket (the int's hash folded
    and masked by the table's final capacity), then by insertion within a bucket. Kafka's builder
    lists its ELR and last-known ELR straight out of such a set; keeping its order keeps the
    records the same as Kafka's (ascending for broker ids below the capacity)."""
    values: list[int] = []
    seen: set[int] = set()
    capacity = 1
    wanted = max(int(len(initial) / _JAVA_LOAD_FACTOR) + 1, _JAVA_MIN_CAPACITY)
    while capacity < wanted:
        capacity <<= 1
    for value in (*initial, *added):
        if value in seen:
            continue
        seen.add(value)
        values.append(value)
        if len(values) > capacity * _JAVA_LOAD_FACTOR:
            capacity <<= 1

    def bucket(value: int) -> int:
        h = value & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(values, key=bucket)



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
        min_isr: int = 1,
        eligible_leader_replicas_enabled: bool = False,
        default_directory: Callable[[int], uuid.UUID] | None = None,
    ) -> None:
        self._partition = partition
        self._is_acceptable_leader = is_acceptable_leader
        self._metadata_version = metadata_version
        self._min_isr = min_isr
        self._elr_enabled = eligible_leader_replicas_enabled
        # Kafka 4.1's controller never turns this off: the last-known-ELR field holds the last
        # leader, elected back when the ISR and ELR are both empty.
        self.use_last_known_leader = True
        self._default_directory = default_directory
        # Tuples: a registration's own tuples are taken as they are (no copy per builder, and
        # one is made for every partition a fenced broker is in), and compare without copying.
        self.target_isr: tuple[int, ...] = tuple(partition.isr)
        self.target_replicas: tuple[int, ...] = tuple(partition.replicas)
        self.target_removing: tuple[int, ...] = tuple(partition.removing_replicas)
        self.target_adding: tuple[int, ...] = tuple(partition.adding_replicas)
        self.target_leader_recovery_state = int(partition.leader_recovery_state)
        self.target_elr: tuple[int, ...] = tuple(partition.elr)
        self.target_last_known_elr: tuple[int, ...] = tuple(partition.last_known_elr)
        self.unclean_shutdown_replicas: tuple[int, ...] = ()
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

    def set_unclean_shutdown_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        """Replicas whose broker came back without a clean shutdown: they leave the ELR too."""
        self.unclean_shutdown_replicas = tuple(replicas)
        return self

    def set_use_last_known_leader(self, use: bool) -> PartitionChangeBuilder:
        """False: the last-known-ELR field lists every replica that left the ELR-tracked set
        (KIP-966's original last known ELR) instead of the last leader."""
        self.use_last_known_leader = use
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
        # An ISR member, or an ELR member when the ISR is empty, that may lead at all.
        return (
            replica in self.target_isr or (not self.target_isr and replica in self.target_elr)
        ) and self._is_acceptable_leader(replica)

    def _can_elect_last_known_leader(self) -> bool:
        """ISR and ELR both empty, the last-known-ELR field holds one replica (the last leader)
        and it may lead again."""
        if not self._elr_enabled or not self.use_last_known_leader:
            return False
        if self.target_elr or self.target_isr:
            return False
        last_known = self._partition.last_known_elr
        return len(last_known) == 1 and self._is_acceptable_leader(last_known[0])

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
            if self._can_elect_last_known_leader():
                return self._partition.last_known_elr[0], True
            return NO_LEADER, False
        if self._is_valid_new_leader(current):
            # Keep a leader that still meets every constraint: no needless leadership moves.
            return current, False
        for replica in self.target_replicas:
            if self._is_valid_new_leader(replica):
                return replica, False
        if self._can_elect_last_known_leader():
            return self._partition.last_known_elr[0], True
        if self.election is Election.UNCLEAN:
            for replica in self.target_replicas:
                if self._is_acceptable_leader(replica):
                    return replica, True
        return NO_LEADER, False

    def _populate_target_elr(self) -> None:
        """KIP-966: below min.insync.replicas, whoever was in the ISR and is not in the target ISR
        stays eligible (unless it shut down uncleanly); at or above it, nothing is kept."""
        if not self._elr_enabled:
            return
        if len(self.target_isr) >= self._min_isr:
            self.target_elr = ()
            self.target_last_known_elr = ()
            return
        isr = set(self.target_isr)
        unclean = set(self.unclean_shutdown_replicas)
        # Kafka builds one java.util.HashSet: the ELR, then the old ISR; the new ELR is read off
        # it; then the last-known ELR is added and the new last-known ELR read off it.
        previous_elr = self.target_elr
        candidates = _java_hash_set_order(previous_elr, self._partition.isr)
        self.target_elr = tuple(r for r in candidates if r not in isr and r not in unclean)
        elr = set(self.target_elr)
        candidates = _java_hash_set_order(previous_elr, (*self._partition.isr, *self.target_last_known_elr))
        self.target_last_known_elr = tuple(r for r in candidates if r not in isr and r not in elr)

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

        self._populate_target_elr()

        leader = NO_LEADER_CHANGE
        isr: tuple[int, ...] | None = None
        recovery = -1
        new_leader, unclean = self.elect_leader()
        if new_leader != partition.leader:
            leader = new_leader
            if new_leader in self.target_elr:
                # Elected from the ELR (the ISR is empty): it becomes the ISR, and leaves the ELR.
                self.target_isr = (new_leader,)
                self.target_elr = tuple(r for r in self.target_elr if r != new_leader)
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

        elr, last_known_elr = self._record_elr(clean=isr is None)

        # With ELR on, the ISR may empty (the ELR remembers who may lead); without, the last
        # member stays so that an unclean election still knows whom to prefer.
        if (
            isr is None
            and (self.target_isr or self._elr_enabled)
            and self.target_isr != tuple(partition.isr)
        ):
            isr = self.target_isr

        if (
            leader == NO_LEADER_CHANGE
            and isr is not None
            and self._metadata_version.is_leader_epoch_bump_required_on_isr_shrink
            and not set(partition.isr) <= set(isr)
        ):
            # Before 3.6-IV0 brokers needed a leader epoch bump on every ISR shrink (KAFKA-15021).
            leader = partition.leader

        last_known_elr = self._last_known_leader(leader, isr, last_known_elr)

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
            and last_known_elr is None
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
            last_known_elr=last_known_elr,
        )

    def _record_elr(self, *, clean: bool) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
        """The ELR and last-known-ELR fields of the record (None: unchanged). An unclean
        election, or ELR off, clears both targets."""
        partition = self._partition
        if not clean or not self._elr_enabled:
            self.target_elr = ()
            self.target_last_known_elr = ()
        elr = self.target_elr if self.target_elr != tuple(partition.elr) else None
        if self.use_last_known_leader:
            # The field holds the last leader; `_last_known_leader` writes it.
            return elr, None
        target = self.target_last_known_elr
        return elr, (target if target != tuple(partition.last_known_elr) else None)

    def _last_known_leader(
        self, leader: int, isr: tuple[int, ...] | None, last_known_elr: tuple[int, ...] | None
    ) -> tuple[int, ...] | None:
        """With the last known leader in use: when the ISR first empties, remember the leader
        it had; once the partition has (or keeps) a leader, forget it."""
        if not self.use_last_known_leader or not self._elr_enabled:
            return last_known_elr
        partition = self._partition
        remembered = partition.last_known_elr
        if isr is not None and not isr and (len(remembered) != 1 or remembered[0] != partition.leader):
            return (partition.leader,)
        if (leader >= 0 or NO_LEADER not in (partition.leader, leader)) and remembered:
            return ()
        return last_known_elr

    def _directory_of(self, replica: int) -> uuid.UUID:
        directory = self._directories().get(replica)
        if directory is not None:
            return directory
        if self._default_directory is None:
            raise RuntimeError(f"no directory known for new replica {replica}")
        return self._default_directory(replica)
