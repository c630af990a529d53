"""What a leader knows about its epoch: who has fetched how far, and therefore the high watermark.

Replication is pull-based, so the leader learns followers' progress only from their Fetch
offsets. From those (and its own flushed end offset) it derives the majority offset; it exposes
it as the high watermark only once a record of its own epoch is covered (leader completeness),
and never lets it go backwards. It also keeps the two leadership timers: check-quorum (resign
when a majority stops fetching) and BeginQuorumEpoch resends to voters that have not fetched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from kraft_engine.raft.batch_accumulator import BatchAccumulator
from kraft_engine.raft.config import RaftConfig
from kraft_engine.raft.role import Role
from kraft_engine.raft.voter_set import Endpoint, ReplicaKey, VoterSet

__all__ = ["OBSERVER_SESSION_TIMEOUT_MS", "LeaderState", "ReplicaState"]

# Kafka forgets an observer that has not fetched for five minutes (LeaderState).
OBSERVER_SESSION_TIMEOUT_MS: Final = 300_000
_AN_HOUR_MS: Final = 3_600_000


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one replica (LeaderState.ReplicaState)."""

    key: ReplicaKey
    end_offset: int | None = None
    last_fetch_timestamp_ms: int = -1
    last_fetch_leader_log_end_offset: int = -1
    last_caught_up_timestamp_ms: int = -1
    has_acknowledged_leader: bool = False
    endpoints: tuple[Endpoint, ...] = field(default=())


class LeaderState:
    """State of the Leader role for one epoch."""

    def __init__(
        self,
        *,
        local_key: ReplicaKey,
        epoch: int,
        epoch_start_offset: int,
        granting_voters: frozenset[int],
        voters: VoterSet,
        config: RaftConfig,
        now_ms: int,
    ) -> None:
        self.role = Role.LEADER
        self.local_key = local_key
        self.epoch = epoch
        self.epoch_start_offset = epoch_start_offset
        self.granting_voters = granting_voters
        self.high_watermark: int | None = None
        self._config = config
        self._voters = voters
        self.voter_states: dict[int, ReplicaState] = {}
        self.observer_states: dict[ReplicaKey, ReplicaState] = {}
        for voter in voters:
            self.voter_states[voter.key.id] = ReplicaState(key=voter.key, endpoints=voter.endpoints)
        local = self.voter_states.get(local_key.id)
        if local is not None:
            local.has_acknowledged_leader = True
        self._check_quorum_timeout_ms = config.fetch_timeout_ms * 3 // 2
        self.check_quorum_deadline_ms: int | None = now_ms + self._check_quorum_timeout_ms
        self._fetched_voters: set[int] = set()
        self.begin_quorum_deadline_ms = now_ms  # announce the new epoch at once
        self.accumulator = BatchAccumulator(
            epoch=epoch,
            next_offset=epoch_start_offset,
            linger_ms=config.append_linger_ms,
            max_batch_size_bytes=config.max_batch_size_bytes,
            max_number_of_batches=config.max_number_of_batches,
            preferred_batch_size_bytes=config.fetch_max_bytes,
        )
        self.resign_requested = False
        self._refresh_check_quorum(now_ms)

    @property
    def voters(self) -> VoterSet:
        return self._voters

    # -- membership ----------------------------------------------------------------------------
    def update_voters(self, voters: VoterSet, *, now_ms: int) -> bool:
        """Adopt a new (possibly uncommitted) voter set; returns True if the HWM advanced."""
        old = self.voter_states
        self.voter_states = {}
        for voter in voters:
            state = old.pop(voter.key.id, None) or self.observer_states.pop(voter.key, None)
            if state is None:
                state = ReplicaState(key=voter.key)
            state.key = voter.key
            state.endpoints = voter.endpoints
            self.voter_states[voter.key.id] = state
        for state in old.values():
            self.observer_states[state.key] = state
        self._voters = voters
        self._fetched_voters &= voters.ids
        self._refresh_check_quorum(now_ms)
        return self.maybe_update_high_watermark()

    def is_voter(self, key: ReplicaKey) -> bool:
        return self._voters.is_voter(key)

    # -- progress ------------------------------------------------------------------------------
    def update_local_state(self, flushed_end_offset: int) -> bool:
        """The leader counts its own offset only once flushed; returns True if the HWM advanced."""
        local = self.voter_states.get(self.local_key.id)
        if local is None:
            # A leader removed from the voter set keeps leading until the removal commits.
            local = self.observer_states.setdefault(self.local_key, ReplicaState(key=self.local_key))
        local.end_offset = flushed_end_offset
        return self.maybe_update_high_watermark()

    def update_replica_state(
        self, key: ReplicaKey, *, fetch_offset: int, leader_end_offset: int, now_ms: int
    ) -> bool:
        """Record a Fetch from `key`; returns True if the high watermark advanced."""
        if key.id == self.local_key.id:
            return False  # never our own progress, whatever directory a request claims
        if self._voters.is_voter(key):
            state = self.voter_states[key.id]
        else:
            state = self.observer_states.setdefault(key, ReplicaState(key=key))
        # Caught up now, or caught up to where the leader was at the previous fetch.
        if fetch_offset >= leader_end_offset:
            state.last_caught_up_timestamp_ms = max(state.last_caught_up_timestamp_ms, now_ms)
        elif state.last_fetch_leader_log_end_offset > 0 and fetch_offset >= state.last_fetch_leader_log_end_offset:
            state.last_caught_up_timestamp_ms = max(state.last_caught_up_timestamp_ms, state.last_fetch_timestamp_ms)
        state.last_fetch_leader_log_end_offset = leader_end_offset
        state.last_fetch_timestamp_ms = now_ms
        state.end_offset = fetch_offset
        state.has_acknowledged_leader = True
        self.record_voter_fetch(key, now_ms=now_ms)
        return self.maybe_update_high_watermark()

    def maybe_update_high_watermark(self) -> bool:
        offsets = sorted(
            (s.end_offset if s.end_offset is not None else -1 for s in self.voter_states.values()),
            reverse=True,
        )
        if not offsets:
            return False
        candidate = offsets[len(offsets) // 2]
        # Leader completeness: nothing before our epoch is exposed until a record of our epoch
        # is on a majority; and the high watermark never moves backwards.
        if candidate > self.epoch_start_offset and (self.high_watermark is None or candidate > self.high_watermark):
            self.high_watermark = candidate
            return True
        return False

    def replica_state(self, node_id: int) -> ReplicaState | None:
        return self.voter_states.get(node_id)

    def is_replica_caught_up(self, key: ReplicaKey, *, now_ms: int) -> bool:
        """An observer that has caught up to the leader's end offset and fetched within the last hour.

        This is the gate AddRaftVoter applies (LeaderState.isReplicaCaughtUp).
        """
        state = self.observer_states.get(key)
        if state is None:
            return False
        return (
            state.last_caught_up_timestamp_ms > 0
            and state.last_fetch_timestamp_ms > 0
            and state.last_fetch_timestamp_ms > now_ms - _AN_HOUR_MS
        )

    def expire_observers(self, *, now_ms: int) -> None:
        stale = [k for k, s in self.observer_states.items()
                 if k != self.local_key and now_ms - s.last_fetch_timestamp_ms >= OBSERVER_SESSION_TIMEOUT_MS]
        for key in stale:
            del self.observer_states[key]

    # -- timers --------------------------------------------------------------------------------
    def record_voter_fetch(self, key: ReplicaKey, *, now_ms: int) -> None:
        if self._voters.is_voter(key):
            self._fetched_voters.add(key.id)
            self._refresh_check_quorum(now_ms)

    def _refresh_check_quorum(self, now_ms: int) -> None:
        others = self._voters.ids - {self.local_key.id}
        if self._voters.is_only_voter(self.local_key):
            # A single voter is its own majority: check-quorum can never expire.
            self.check_quorum_deadline_ms = None
            return
        counted = len(self._fetched_voters & others) + (1 if self._voters.is_voter(self.local_key) else 0)
        if counted >= self._voters.majority_size:
            self.check_quorum_deadline_ms = now_ms + self._check_quorum_timeout_ms
            self._fetched_voters.clear()
        elif self.check_quorum_deadline_ms is None:
            self.check_quorum_deadline_ms = now_ms + self._check_quorum_timeout_ms

    def check_quorum_expired(self, now_ms: int) -> bool:
        return self.check_quorum_deadline_ms is not None and now_ms >= self.check_quorum_deadline_ms

    def non_acknowledging_voters(self) -> list[int]:
        return sorted(i for i, s in self.voter_states.items() if i != self.local_key.id and not s.has_acknowledged_leader)

    def add_acknowledgement_from(self, node_id: int) -> None:
        state = self.voter_states.get(node_id)
        if state is not None:
            state.has_acknowledged_leader = True

    def voters_by_descending_fetch_offset(self) -> tuple[ReplicaKey, ...]:
        """Preferred successors for EndQuorumEpoch: the most caught-up voters first."""
        others = [s for i, s in self.voter_states.items() if i != self.local_key.id]
        others.sort(key=lambda s: (-(s.end_offset if s.end_offset is not None else -1), s.key.id))
        return tuple(s.key for s in others)
