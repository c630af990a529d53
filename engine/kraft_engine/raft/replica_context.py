"""What the parts of one replica share: its identity, log, quorum state and control-record history,
the Output being assembled, its outbound requests, and what of its log is durable.

`RaftNode` is assembled from parts along Kafka's seams (elections, fetching, voter changes,
listener delivery, snapshots). Each part holds this context, never another part's internals;
where one part must react to another (the high watermark moved, leadership was lost) the node
wires a plain callable at construction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kraft_engine.raft.config import RaftConfig
from kraft_engine.raft.leader_state import LeaderState
from kraft_engine.raft.log import RaftLog
from kraft_engine.raft.messages import RaftResponse
from kraft_engine.raft.output import LogFlush, Outbox
from kraft_engine.raft.quorum_state import FollowerState, ProspectiveState, QuorumState
from kraft_engine.raft.request_manager import RequestManager
from kraft_engine.raft.voter_set import Endpoint, ReplicaKey, VoterSet
from kraft_engine.raft.voter_set_history import VoterSetHistory

if TYPE_CHECKING:
    import random

__all__ = ["LogDurability", "RaftContext", "Shutdown"]


@dataclass(slots=True)
class Shutdown:
    deadline_ms: int
    completed: bool = False


class LogDurability:
    """What the driver reported durable, what the node asked to flush, and how often the log was
    truncated (a flush asked for before a truncation proves nothing about what follows)."""

    def __init__(self, log: RaftLog) -> None:
        self._log = log
        self._durable_offset = max(log.flushed_offset, log.log_start_offset)
        self._flush_requested_offset = self._durable_offset
        self._truncations = 0

    @property
    def offset(self) -> int:
        """Every offset below this is known to be flushed (a snapshot covers what is below the log start)."""
        return max(self._durable_offset, self._log.log_start_offset)

    def awaiting_flush(self) -> bool:
        return self.offset < self._log.end_offset().offset

    def flushed(self, flush: LogFlush) -> bool:
        """A flush completed; True if it made more of the log durable."""
        if flush.truncations != self._truncations or flush.end_offset <= self._durable_offset:
            return False
        self._durable_offset = min(flush.end_offset, self._log.end_offset().offset)
        return True

    def on_truncated(self) -> None:
        """The log lost its tail (or all of it, for a snapshot): what was durable stays durable
        only up to the new end, and any flush in flight is void."""
        end = self._log.end_offset().offset
        self._truncations += 1
        self._durable_offset = min(self._durable_offset, end)
        self._flush_requested_offset = min(self._flush_requested_offset, end)

    def flush_due(self) -> LogFlush | None:
        """The flush to ask for: everything appended since the last request."""
        end = self._log.end_offset().offset
        if end <= self._flush_requested_offset:
            return None
        self._flush_requested_offset = end
        return LogFlush(end_offset=end, truncations=self._truncations)


class RaftContext:
    """The state every part of a replica reads and the few effects they all perform."""

    def __init__(
        self,
        *,
        config: RaftConfig,
        local_key: ReplicaKey,
        cluster_id: str,
        log: RaftLog,
        quorum: QuorumState,
        history: VoterSetHistory,
        rng: random.Random,
        local_endpoints: tuple[Endpoint, ...],
        bootstrap_servers: tuple[Endpoint, ...],
        supported_kraft_versions: tuple[int, int],
    ) -> None:
        self.config = config
        self.local_key = local_key
        self.cluster_id = cluster_id
        self.log = log
        self.quorum = quorum
        self.history = history
        self.rng = rng
        self.local_endpoints = local_endpoints
        self.bootstrap_servers = bootstrap_servers
        self.supported_kraft_versions = supported_kraft_versions
        self.outbox = Outbox()
        self.requests = RequestManager(config=config, outbox=self.outbox)
        self.durability = LogDurability(log)
        # The high watermark as this replica last learned it (a follower from its leader's
        # Fetch answers; a leader mirrors its LeaderState's here).
        self.hwm: int | None = None
        self.shutdown: Shutdown | None = None

    @property
    def node_id(self) -> int:
        return self.local_key.id

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def leader_id(self) -> int | None:
        return self.quorum.leader_id

    @property
    def voters(self) -> VoterSet:
        """The latest voter set, including an uncommitted change (it takes effect when read)."""
        return self.history.latest_voter_set()

    @property
    def kraft_version(self) -> int:
        return self.history.kraft_version()

    @property
    def high_watermark(self) -> int | None:
        state = self.quorum.state
        if isinstance(state, LeaderState):
            return state.high_watermark
        return self.hwm

    def respond(self, token: int, response: RaftResponse) -> None:
        self.outbox.respond(token, response)

    def check_cluster_id(self, cluster_id: str | None) -> bool:
        # Kafka accepts a request without a cluster id (older clients); a different one is refused.
        return cluster_id is None or cluster_id == self.cluster_id

    def leader_endpoints(self) -> tuple[Endpoint, ...]:
        leader_id = self.leader_id
        if leader_id is None:
            return ()
        if leader_id == self.node_id:
            return self.local_endpoints or self.voters.endpoints(leader_id)
        state = self.quorum.state
        if isinstance(state, FollowerState | ProspectiveState) and state.leader_endpoints:
            return state.leader_endpoints
        return self.voters.endpoints(leader_id)

    def endpoints_for(self, leader_id: int | None, endpoints: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
        if endpoints or leader_id is None:
            return endpoints
        return self.voters.endpoints(leader_id)

    def is_local_key(self, node_id: int, directory_id: uuid.UUID | None) -> bool:
        """Does a request's voter key name us? (isValidVoterKey: a missing directory matches, and
        so does a missing voter id: Vote v0-v1 and BeginQuorumEpoch v0 carry none.)"""
        if node_id < 0:
            return True
        key = ReplicaKey.of(node_id, directory_id)
        if key.id != self.node_id:
            return False
        return key.directory_id is None or key.directory_id == self.local_key.directory_id

    def is_local_candidate(self, candidate: ReplicaKey) -> bool:
        return candidate.id == self.node_id and (
            candidate.directory_id is None or candidate.directory_id == self.local_key.directory_id
        )

    def validate_leader_only(self, request_epoch: int) -> ErrorCode | None:
        """The epoch checks of a request only the leader answers (Fetch, FetchSnapshot, UpdateRaftVoter)."""
        if request_epoch < self.epoch:
            return ErrorCode.fenced_leader_epoch
        if request_epoch > self.epoch:
            return ErrorCode.unknown_leader_epoch
        if not isinstance(self.quorum.state, LeaderState):
            return ErrorCode.not_leader_or_follower
        if self.shutdown is not None:
            return ErrorCode.broker_not_available
        return None
