"""The node's role and epoch, and the only code allowed to change them.

Kafka's QuorumState: every transition goes through one method here, which validates it and, when
the persisted election state (epoch, leader, vote) changes, records that state as
`pending_persist` *before* the in-memory role switches. The node hands `pending_persist` to the
driver in the same Output as any message the new role sends, and the driver writes the
quorum-state file durably before sending anything, so a vote or a candidacy is never forgotten
across a crash. Prospective and Resigned never change persisted state and are never persisted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kraft_engine.invariant import require
from kraft_engine.raft.config import RaftConfig
from kraft_engine.raft.leader_state import LeaderState
from kraft_engine.raft.role import Role
from kraft_engine.raft.voter_set import Endpoint, ReplicaKey, VoterSet
from kraft_engine.records.log_batch import OffsetAndEpoch

if TYPE_CHECKING:
    import random

__all__ = [
    "CandidateState",
    "ElectionState",
    "EpochElection",
    "EpochState",
    "FollowerState",
    "ProspectiveState",
    "QuorumState",
    "ResignedState",
    "SnapshotDownload",
    "UnattachedState",
]


@dataclass(frozen=True, slots=True)
class ElectionState:
    """What the quorum-state file stores: epoch, elected leader, and this node's vote."""

    epoch: int
    leader_id: int | None = None
    voted_key: ReplicaKey | None = None


class EpochElection:
    """Vote tally of one (pre-)election: each voter is unrecorded, granted or rejected."""

    def __init__(self, voters: VoterSet, *, local_id: int) -> None:
        self._voters = voters
        self._granted: set[int] = {local_id}
        self._rejected: set[int] = set()

    @property
    def voters(self) -> VoterSet:
        return self._voters

    def record_granted(self, voter_id: int) -> None:
        if voter_id in self._voters.ids:
            self._rejected.discard(voter_id)
            self._granted.add(voter_id)

    def record_rejected(self, voter_id: int) -> None:
        if voter_id in self._voters.ids and voter_id not in self._granted:
            self._rejected.add(voter_id)

    @property
    def granted(self) -> frozenset[int]:
        return frozenset(self._granted)

    @property
    def rejected(self) -> frozenset[int]:
        return frozenset(self._rejected)

    def unrecorded(self) -> list[int]:
        return sorted(self._voters.ids - self._granted - self._rejected)

    def is_granted(self) -> bool:
        return len(self._granted & self._voters.ids) >= self._voters.majority_size

    def is_rejected(self) -> bool:
        # Winning is already impossible even if every unrecorded voter grants.
        possible = len(self._granted & self._voters.ids) + len(self.unrecorded())
        return possible < self._voters.majority_size


@dataclass(slots=True)
class UnattachedState:
    """No leader known to follow (possibly a leader id without endpoints), possibly with a vote."""

    epoch: int
    election_deadline_ms: int
    leader_id: int | None = None
    voted_key: ReplicaKey | None = None
    role: Role = field(default=Role.UNATTACHED, init=False)


@dataclass(slots=True)
class ProspectiveState:
    """Pre-vote (KIP-996) at the current epoch; nothing persisted, nothing bumped yet.

    `pre_vote_start_ms` is when the pre-vote requests go out. It is the transition time except
    after a lost leader connection, where a short random delay keeps the surviving voters, who
    all see the same connection break at the same moment, from splitting the vote.
    """

    epoch: int
    election: EpochElection
    election_deadline_ms: int
    leader_id: int | None = None
    leader_endpoints: tuple[Endpoint, ...] = ()
    voted_key: ReplicaKey | None = None
    pre_vote_start_ms: int = 0
    role: Role = field(default=Role.PROSPECTIVE, init=False)


@dataclass(slots=True)
class CandidateState:
    """A real candidacy at a bumped epoch; voted for itself (persisted)."""

    epoch: int
    election: EpochElection
    election_deadline_ms: int
    backoff_until_ms: int | None = None
    role: Role = field(default=Role.CANDIDATE, init=False)


@dataclass(slots=True)
class SnapshotDownload:
    """A FetchSnapshot in progress: the id and the bytes received so far."""

    snapshot_id: OffsetAndEpoch
    data: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class FollowerState:
    """Fetching from a known leader."""

    epoch: int
    leader_id: int
    leader_endpoints: tuple[Endpoint, ...]
    fetch_deadline_ms: int
    voted_key: ReplicaKey | None = None
    has_fetched_from_leader: bool = False
    # The connection to the leader broke since the last successful fetch (see the node's
    # `_maybe_fail_over`): one more connection failure and this voter starts pre-vote.
    leader_connection_broken: bool = False
    snapshot_download: SnapshotDownload | None = None
    update_voter_deadline_ms: int = 0
    role: Role = field(default=Role.FOLLOWER, init=False)


@dataclass(slots=True)
class ResignedState:
    """A leader stepping down in its own epoch: tells voters, votes for nobody, waits for a successor."""

    epoch: int
    local_id: int
    election_deadline_ms: int
    unacked_voters: set[int]
    preferred_successors: tuple[ReplicaKey, ...]
    role: Role = field(default=Role.RESIGNED, init=False)


EpochState = UnattachedState | ProspectiveState | CandidateState | FollowerState | LeaderState | ResignedState


class QuorumState:
    """Holds the current `EpochState`; every role change is one of the `transition_to_*` methods."""

    def __init__(
        self,
        *,
        local_key: ReplicaKey,
        voters: Callable[[], VoterSet],
        config: RaftConfig,
        rng: random.Random,
    ) -> None:
        self._local_key = local_key
        self._voters = voters
        self._config = config
        self._rng = rng
        self._state: EpochState = UnattachedState(epoch=0, election_deadline_ms=0)
        self.pending_persist: ElectionState | None = None

    # -- reading -------------------------------------------------------------------------------
    @property
    def state(self) -> EpochState:
        return self._state

    @property
    def role(self) -> Role:
        return self._state.role

    @property
    def epoch(self) -> int:
        return self._state.epoch

    @property
    def local_key(self) -> ReplicaKey:
        return self._local_key

    @property
    def local_id(self) -> int:
        return self._local_key.id

    @property
    def leader_id(self) -> int | None:
        state = self._state
        if isinstance(state, LeaderState | ResignedState):
            return self._local_key.id
        if isinstance(state, FollowerState | UnattachedState | ProspectiveState):
            return state.leader_id
        return None

    @property
    def voted_key(self) -> ReplicaKey | None:
        state = self._state
        if isinstance(state, CandidateState | LeaderState):
            return self._local_key
        if isinstance(state, UnattachedState | ProspectiveState | FollowerState):
            return state.voted_key
        return None

    def is_voter(self) -> bool:
        return self._voters().is_voter(self._local_key)

    def election_state(self) -> ElectionState:
        """The persisted form of the current state."""
        return ElectionState(epoch=self.epoch, leader_id=self.leader_id, voted_key=self.voted_key)

    def random_election_timeout_ms(self) -> int:
        timeout_ms = self._config.election_timeout_ms
        return timeout_ms + self._rng.randrange(timeout_ms)

    # -- initialisation ------------------------------------------------------------------------
    def initialize(self, persisted: ElectionState | None, *, log_end: OffsetAndEpoch, now_ms: int) -> None:
        """Rebuild the starting role from the quorum-state file and the log (QuorumState.initialize)."""
        election = persisted if persisted is not None else ElectionState(epoch=0)
        voters = self._voters()
        deadline = now_ms + self.random_election_timeout_ms()
        if election.epoch < log_end.epoch:
            # The file is stale (e.g. restored from an older disk): trust the log's epoch.
            self._durable(UnattachedState(epoch=log_end.epoch, election_deadline_ms=deadline))
        elif election.leader_id is not None and election.leader_id == self.local_id:
            # We were leader: resign in the same epoch so we never vote again in it and never
            # reuse an (offset, epoch) pair whose unflushed data may have been lost.
            unacked = set(voters.ids - {self.local_id})
            self._state = ResignedState(
                epoch=election.epoch,
                local_id=self.local_id,
                election_deadline_ms=deadline,
                unacked_voters=unacked,
                preferred_successors=(),
            )
        elif election.voted_key is not None and self._is_local(election.voted_key) and voters.is_voter(self._local_key):
            self._state = CandidateState(
                epoch=election.epoch,
                election=EpochElection(voters, local_id=self.local_id),
                election_deadline_ms=deadline,
            )
        elif election.leader_id is not None and voters.endpoints(election.leader_id):
            self._state = FollowerState(
                epoch=election.epoch,
                leader_id=election.leader_id,
                leader_endpoints=voters.endpoints(election.leader_id),
                voted_key=election.voted_key,
                fetch_deadline_ms=now_ms + self._config.fetch_timeout_ms,
            )
        else:
            self._state = UnattachedState(
                epoch=election.epoch,
                election_deadline_ms=deadline,
                leader_id=election.leader_id,
                voted_key=election.voted_key,
            )

    def _is_local(self, key: ReplicaKey) -> bool:
        return key.id == self.local_id and (key.directory_id is None or key.directory_id == self._local_key.directory_id)

    # -- transitions ---------------------------------------------------------------------------
    def _durable(self, new_state: EpochState) -> None:
        """Record the persisted form of `new_state` before switching to it (durableTransitionTo)."""
        self.pending_persist = ElectionState(
            epoch=new_state.epoch,
            leader_id=self._leader_of(new_state),
            voted_key=self._vote_of(new_state),
        )
        self._state = new_state

    def _leader_of(self, state: EpochState) -> int | None:
        if isinstance(state, LeaderState | ResignedState):
            return self.local_id
        if isinstance(state, FollowerState | UnattachedState | ProspectiveState):
            return state.leader_id
        return None

    def _vote_of(self, state: EpochState) -> ReplicaKey | None:
        if isinstance(state, CandidateState | LeaderState):
            return self._local_key
        if isinstance(state, UnattachedState | ProspectiveState | FollowerState):
            return state.voted_key
        return None

    def transition_to_unattached(
        self, epoch: int, *, now_ms: int, leader_id: int | None = None, forget_leader: bool = False
    ) -> None:
        """Unattached at `epoch`. In the same epoch the vote is kept, and so is the known leader
        unless `forget_leader` (an observer that lost its leader goes back to discovering one)."""
        current = self.epoch
        require(epoch >= current, f"cannot go Unattached at epoch {epoch} below current epoch {current}")
        if epoch == current:
            # Same epoch (an observer losing its leader, a lost pre-vote): keep the vote.
            require(self.role not in (Role.LEADER, Role.CANDIDATE), f"{self.role.value} cannot go Unattached in its own epoch")
            voted = self.voted_key
            if leader_id is None and not forget_leader:
                leader_id = self.leader_id
        else:
            voted = None
        if isinstance(self._state, UnattachedState) and self._state.epoch == epoch:
            deadline = self._state.election_deadline_ms
        else:
            deadline = now_ms + self.random_election_timeout_ms()
        self._durable(UnattachedState(epoch=epoch, election_deadline_ms=deadline, leader_id=leader_id, voted_key=voted))

    def transition_to_unattached_voted(self, candidate: ReplicaKey, *, epoch: int, now_ms: int) -> None:
        """Grant a (standard) vote: persisted before the response leaves (unattachedAddVotedState)."""
        state = self._state
        if not isinstance(state, UnattachedState | ProspectiveState):
            require(False, f"cannot vote while {self.role.value}")
            return
        require(state.epoch == epoch, f"vote for epoch {epoch} while at epoch {state.epoch}")
        require(state.voted_key is None, f"already voted for {state.voted_key} in epoch {epoch}")
        deadline = now_ms + self.random_election_timeout_ms()
        self._durable(UnattachedState(epoch=epoch, election_deadline_ms=deadline, voted_key=candidate))

    def transition_to_prospective(self, *, now_ms: int, pre_vote_delay_ms: int = 0) -> ProspectiveState:
        state = self._state
        require(self.is_voter(), "an observer cannot become Prospective")
        require(not isinstance(state, LeaderState | ProspectiveState), f"{self.role.value} cannot become Prospective")
        leader_id: int | None = None
        endpoints: tuple[Endpoint, ...] = ()
        voted: ReplicaKey | None = None
        if isinstance(state, FollowerState):
            leader_id, endpoints, voted = state.leader_id, state.leader_endpoints, state.voted_key
        elif isinstance(state, UnattachedState):
            leader_id, voted = state.leader_id, state.voted_key
        elif isinstance(state, CandidateState):
            voted = self._local_key
        new_state = ProspectiveState(
            epoch=state.epoch,
            election=EpochElection(self._voters(), local_id=self.local_id),
            election_deadline_ms=now_ms + self.random_election_timeout_ms(),
            leader_id=leader_id,
            leader_endpoints=endpoints,
            voted_key=voted,
            pre_vote_start_ms=now_ms + pre_vote_delay_ms,
        )
        self._state = new_state  # pre-vote changes nothing durable
        return new_state

    def transition_to_candidate(self, *, now_ms: int) -> CandidateState:
        require(self.is_voter(), "an observer cannot become a candidate")
        require(self.role is Role.PROSPECTIVE, f"only a Prospective may become Candidate, not {self.role.value}")
        new_state = CandidateState(
            epoch=self.epoch + 1,
            election=EpochElection(self._voters(), local_id=self.local_id),
            election_deadline_ms=now_ms + self.random_election_timeout_ms(),
        )
        self._durable(new_state)
        return new_state

    def transition_to_leader(self, *, epoch_start_offset: int, now_ms: int) -> LeaderState:
        state = self._state
        require(isinstance(state, CandidateState), f"only a Candidate may become Leader, not {self.role.value}")
        require(isinstance(state, CandidateState) and state.election.is_granted(), "the candidacy has not won a majority")
        granting = state.election.granted if isinstance(state, CandidateState) else frozenset()
        new_state = LeaderState(
            local_key=self._local_key,
            epoch=state.epoch,
            epoch_start_offset=epoch_start_offset,
            granting_voters=granting,
            voters=self._voters(),
            config=self._config,
            now_ms=now_ms,
        )
        self._durable(new_state)
        return new_state

    def transition_to_follower(
        self, epoch: int, *, leader_id: int, endpoints: tuple[Endpoint, ...], now_ms: int
    ) -> FollowerState:
        state = self._state
        require(leader_id != self.local_id, "cannot follow ourselves")
        require(epoch >= state.epoch, f"cannot follow epoch {epoch} below current epoch {state.epoch}")
        if epoch == state.epoch:
            require(not isinstance(state, LeaderState | ResignedState), f"{self.role.value} cannot follow in its own epoch")
            require(
                self.leader_id is None or self.leader_id == leader_id,
                f"epoch {epoch} already has leader {self.leader_id}, not {leader_id}",
            )
            voted = self.voted_key
        else:
            voted = None
        new_state = FollowerState(
            epoch=epoch,
            leader_id=leader_id,
            leader_endpoints=endpoints,
            voted_key=voted,
            fetch_deadline_ms=now_ms + self._config.fetch_timeout_ms,
        )
        self._durable(new_state)
        return new_state

    def transition_to_resigned(self, preferred_successors: tuple[ReplicaKey, ...], *, now_ms: int) -> ResignedState:
        state = self._state
        require(isinstance(state, LeaderState), f"only the Leader may resign, not {self.role.value}")
        new_state = ResignedState(
            epoch=state.epoch,
            local_id=self.local_id,
            election_deadline_ms=now_ms + self.random_election_timeout_ms(),
            unacked_voters=set(self._voters().ids - {self.local_id}),
            preferred_successors=preferred_successors,
        )
        self._state = new_state  # Resigned keeps the same persisted (epoch, leader, vote)
        return new_state
