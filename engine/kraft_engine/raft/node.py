"""One KRaft replica as a pure state machine: Kafka's KafkaRaftClient without threads or sockets.

Every entry point takes `now_ms` and returns an `Output` (see `output.py` for the order in which
the driver must perform it). Requests and responses are kio entities at the wire versions a
Kafka 4.x controller uses (see `messages.py`), so the driver only frames bytes. The node mutates
the `RaftLog` it was given in place and asks the driver to flush it (`Output.flush`); it counts
(leader) or reports (follower) only offsets a completed flush covered (`handle_log_flushed`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kio.schema.errors import ErrorCode
from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage
from kio.schema.leader_change_message.v0.data import Voter as LeaderChangeVoter
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.schema.types import BrokerId
from kio.schema.voters_record.v0.data import VotersRecord
from kio.static.primitive import i16, i32, i64

from kraft_engine.invariant import require
from kraft_engine.raft import messages
from kraft_engine.raft.batch_accumulator import BatchAccumulator
from kraft_engine.raft.config import RaftConfig
from kraft_engine.raft.errors import KRaftVersionUpgradeError, NotLeaderError, SnapshotError
from kraft_engine.raft.leader_state import LeaderState
from kraft_engine.raft.log import (
    BOOTSTRAP_SNAPSHOT_ID,
    RaftLog,
    ValidationKind,
    validate_offset_and_epoch,
)
from kraft_engine.raft.output import (
    CommittedBatch,
    LeaderAndEpoch,
    LeaderChange,
    LogFlush,
    OutboundRequest,
    OutboundResponse,
    Output,
    RequestFailure,
    SnapshotLoad,
)
from kraft_engine.raft.quorum_state import (
    CandidateState,
    ElectionState,
    FollowerState,
    ProspectiveState,
    QuorumState,
    ResignedState,
    SnapshotDownload,
    UnattachedState,
)
from kraft_engine.raft.role import Role
from kraft_engine.raft.snapshot_builder import SnapshotBuilder
from kraft_engine.raft.voter_set import (
    KRAFT_VERSION_0,
    KRAFT_VERSION_1,
    Endpoint,
    ReplicaKey,
    VoterNode,
    VoterSet,
)
from kraft_engine.raft.voter_set_history import VoterSetHistory
from kraft_engine.records.control import build_control_batch
from kraft_engine.records.log_batch import OffsetAndEpoch, build_data_batch, parse_batches

if TYPE_CHECKING:
    import random

__all__ = ["RaftNode"]

# Kafka's RETRY_BACKOFF_BASE_MS for the candidate's binary exponential election backoff.
_RETRY_BACKOFF_BASE_MS: Final = 100
_NEVER: Final = 2**62
# How often retention runs (Kafka's metadata log cleaner runs every 60 s).
_CLEAN_INTERVAL_MS: Final = 60_000
_NO_SNAPSHOT: Final = OffsetAndEpoch(epoch=-1, offset=-1)
# How much of the log the listener is handed per call (more follows on the next poll at once).
_LISTENER_BATCH_BYTES: Final = 1024 * 1024

_API_FETCH: Final = 1
_API_API_VERSIONS: Final = 18
_API_VOTE: Final = 52
_API_BEGIN_QUORUM_EPOCH: Final = 53
_API_END_QUORUM_EPOCH: Final = 54
_API_DESCRIBE_QUORUM: Final = 55
_API_FETCH_SNAPSHOT: Final = 59
_API_ADD_RAFT_VOTER: Final = 80
_API_REMOVE_RAFT_VOTER: Final = 81
_API_UPDATE_RAFT_VOTER: Final = 82


@dataclass(slots=True)
class _Inflight:
    token: int
    destination_id: int
    api_key: int
    request: Any
    deadline_ms: int


@dataclass(slots=True)
class _Connection:
    inflight_token: int | None = None
    backoff_until_ms: int = 0


@dataclass(slots=True)
class _ParkedFetch:
    token: int
    replica: ReplicaKey
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int
    max_bytes: int
    deadline_ms: int


@dataclass(slots=True)
class _Shutdown:
    deadline_ms: int
    completed: bool = False


class RaftNode:
    """A KRaft voter or observer for the `__cluster_metadata` partition.

    Construct it, then call `poll(now_ms)` at once and whenever `next_deadline_ms` passes; feed it
    inbound requests (`handle_request`) and the outcome of its own requests (`handle_response`).
    """

    def __init__(
        self,
        *,
        config: RaftConfig,
        node_id: int,
        directory_id: uuid.UUID | None,
        cluster_id: str,
        log: RaftLog,
        persisted: ElectionState | None,
        static_voters: VoterSet | None,
        rng: random.Random,
        now_ms: int,
        local_endpoints: tuple[Endpoint, ...] = (),
        bootstrap_servers: tuple[Endpoint, ...] = (),
        supported_kraft_versions: tuple[int, int] = (KRAFT_VERSION_0, KRAFT_VERSION_1),
    ) -> None:
        require(node_id >= 0, f"node id {node_id} must not be negative")
        self._config = config
        self._local_key = ReplicaKey.of(node_id, directory_id)
        self._cluster_id = cluster_id
        self._log = log
        self._rng = rng
        self._local_endpoints = local_endpoints
        self._bootstrap_servers = bootstrap_servers
        self._supported_kraft_versions = supported_kraft_versions
        self._history = VoterSetHistory(static_voters)
        self._load_control_state()
        self._quorum = QuorumState(
            local_key=self._local_key, voters=self._history.latest_voter_set, config=config, rng=rng
        )
        self._quorum.initialize(persisted, log_end=log.end_offset(), now_ms=now_ms)
        self._hwm: int | None = None
        self._listener_next_offset: int | None = None
        self._last_fired_leader: LeaderAndEpoch | None = None
        self._next_token = 1
        self._inflight: dict[int, _Inflight] = {}
        self._connections: dict[int, _Connection] = {}
        self._parked_fetches: list[_ParkedFetch] = []
        self._election_retries = 0
        self._shutdown: _Shutdown | None = None
        self._out = Output()
        self._voter_change: _VoterChange | None = None
        self._next_clean_ms = now_ms + _CLEAN_INTERVAL_MS
        self._learned_voters: dict[int, VoterNode] = {}
        # What the driver reported durable, what the node asked to flush, and how often the log
        # was truncated (a flush asked for before a truncation proves nothing about what follows).
        self._durable_offset = max(log.flushed_offset, log.log_start_offset)
        self._flush_requested_offset = self._durable_offset
        self._truncations = 0
        # Built once: which method answers each inbound api, and handles each response.
        self._request_handlers: dict[int, Callable[[Any, int, int], Any]] = {
            _API_VOTE: self._handle_vote_request,
            _API_BEGIN_QUORUM_EPOCH: self._handle_begin_quorum_epoch_request,
            _API_END_QUORUM_EPOCH: self._handle_end_quorum_epoch_request,
            _API_FETCH: self._handle_fetch_request,
            _API_FETCH_SNAPSHOT: self._handle_fetch_snapshot_request,
            _API_DESCRIBE_QUORUM: self._handle_describe_quorum_request,
            _API_ADD_RAFT_VOTER: self._handle_add_voter_request,
            _API_REMOVE_RAFT_VOTER: self._handle_remove_voter_request,
            _API_UPDATE_RAFT_VOTER: self._handle_update_voter_request,
        }
        self._response_handlers: dict[int, Callable[[_Inflight, Any, int], bool]] = {
            _API_VOTE: self._handle_vote_response,
            _API_BEGIN_QUORUM_EPOCH: self._handle_begin_quorum_epoch_response,
            _API_END_QUORUM_EPOCH: self._handle_end_quorum_epoch_response,
            _API_FETCH: self._handle_fetch_response,
            _API_FETCH_SNAPSHOT: self._handle_fetch_snapshot_response,
            _API_API_VERSIONS: self._handle_api_versions_response,
            _API_UPDATE_RAFT_VOTER: self._handle_membership_response,
            _API_ADD_RAFT_VOTER: self._handle_membership_response,
            _API_REMOVE_RAFT_VOTER: self._handle_membership_response,
        }
        # A single-voter quorum elects itself at once (KafkaRaftClient.initialize), including
        # after a restart as Resigned: it is the only one who could lead the next epoch.
        if self.voters.is_only_voter(self._local_key):
            if self._quorum.role is Role.CANDIDATE:
                self._maybe_advance_election(now_ms)
            else:
                self._start_prospective(now_ms)

    # ==========================================================================================
    # Introspection
    # ==========================================================================================
    @property
    def node_id(self) -> int:
        return self._local_key.id

    @property
    def local_key(self) -> ReplicaKey:
        return self._local_key

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def config(self) -> RaftConfig:
        return self._config

    @property
    def log(self) -> RaftLog:
        return self._log

    @property
    def role(self) -> Role:
        return self._quorum.role

    @property
    def epoch(self) -> int:
        return self._quorum.epoch

    @property
    def leader_id(self) -> int | None:
        return self._quorum.leader_id

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self._quorum.leader_id, self._quorum.epoch)

    @property
    def voted_key(self) -> ReplicaKey | None:
        return self._quorum.voted_key

    @property
    def election_state(self) -> ElectionState:
        """What the quorum-state file must hold for the current state."""
        return self._quorum.election_state()

    @property
    def state(self) -> Any:
        """The current role's state object (UnattachedState, LeaderState, ...)."""
        return self._quorum.state

    @property
    def high_watermark(self) -> int | None:
        state = self._quorum.state
        if isinstance(state, LeaderState):
            return state.high_watermark
        return self._hwm

    @property
    def log_end_offset(self) -> int:
        return self._log.end_offset().offset

    @property
    def voters(self) -> VoterSet:
        """The latest voter set, including an uncommitted change (it takes effect when read)."""
        return self._history.latest_voter_set()

    @property
    def committed_voters(self) -> VoterSet:
        """The voter set as of the high watermark: what a state machine may act on, since a newer
        VotersRecord is uncommitted and may still be truncated away (the latest set while no high
        watermark is known yet)."""
        hwm = self.high_watermark
        if hwm is None:
            return self.voters
        return self._history.voter_set_at(hwm - 1)

    @property
    def kraft_version(self) -> int:
        return self._history.kraft_version()

    @property
    def is_voter(self) -> bool:
        return self._quorum.is_voter()

    @property
    def listener_next_offset(self) -> int | None:
        return self._listener_next_offset

    @property
    def is_shutdown_complete(self) -> bool:
        return self._shutdown is not None and self._shutdown.completed

    @property
    def served_requests(self) -> dict[int, int]:
        """{api key: version} of every request `handle_request` answers."""
        return dict(messages.SERVED_REQUESTS)

    def voter_set_at(self, offset: int) -> VoterSet:
        return self._history.voter_set_at(offset)

    def kraft_version_at(self, offset: int) -> int:
        return self._history.kraft_version_at(offset)

    def next_deadline_ms(self, now_ms: int) -> int:
        return self._next_deadline(now_ms)

    # ==========================================================================================
    # Entry points
    # ==========================================================================================
    def poll(self, now_ms: int) -> Output:
        """Fire whatever timers are due: elections, fetches, linger, resends, timeouts."""
        self._expire_requests(now_ms)
        if now_ms >= self._next_clean_ms:
            self._maybe_clean(now_ms)
        self._poll_state(now_ms)
        return self._finish(now_ms)

    def handle_request(self, request: Any, *, token: int, now_ms: int) -> Output:
        """An inbound request; its response appears (now or later) as `OutboundResponse(token)`."""
        api_key = int(getattr(request, "__api_key__", -1))
        handler = self._request_handlers.get(api_key)
        if handler is None:
            raise ValueError(f"the raft node does not handle {type(request).__name__}")
        response = handler(request, token, now_ms)
        if response is not None:
            self._respond(token, response)
        self._poll_state(now_ms)
        return self._finish(now_ms)

    def handle_log_flushed(self, flush: LogFlush, *, now_ms: int) -> Output:
        """The driver made the log durable below `flush.end_offset` (the `Output.flush` it was given).

        The leader counts its own end offset toward the high watermark, and a follower sends its
        next Fetch (whose fetch offset the leader counts), only up to here. A flush asked for
        before a later truncation is ignored: the bytes it covered may have been replaced.
        """
        if flush.truncations == self._truncations and flush.end_offset > self._durable_offset:
            self._durable_offset = min(flush.end_offset, self._log.end_offset().offset)
            state = self._quorum.state
            if isinstance(state, LeaderState) and state.update_local_state(self.durable_offset):
                self._on_leader_hwm_advanced(state, now_ms)
        self._poll_state(now_ms)
        return self._finish(now_ms)

    @property
    def durable_offset(self) -> int:
        """Every offset below this is known to be flushed (a snapshot covers what is below the log start)."""
        return max(self._durable_offset, self._log.log_start_offset)

    def _awaiting_flush(self) -> bool:
        return self.durable_offset < self._log.end_offset().offset

    def _on_truncated(self) -> None:
        """The log lost its tail (or all of it, for a snapshot): what was durable stays durable
        only up to the new end, and any flush in flight is void."""
        end = self._log.end_offset().offset
        self._truncations += 1
        self._durable_offset = min(self._durable_offset, end)
        self._flush_requested_offset = min(self._flush_requested_offset, end)

    def handle_response(self, token: int, response: Any | RequestFailure, *, now_ms: int) -> Output:
        """The response to (or failure of) the request this node sent with `token`."""
        inflight = self._inflight.pop(token, None)
        if inflight is None:
            # Timed out already, or a duplicate: the node has moved on.
            return self._finish(now_ms)
        connection = self._connection(inflight.destination_id)
        if connection.inflight_token == token:
            connection.inflight_token = None
        if isinstance(response, RequestFailure):
            ok = self._handle_failure(inflight, response, now_ms)
        else:
            ok = self._dispatch_response(inflight, response, now_ms)
        if not ok:
            connection.backoff_until_ms = now_ms + self._config.retry_backoff_ms
        self._poll_state(now_ms)
        return self._finish(now_ms)

    def append(self, records: list[bytes], *, epoch: int, now_ms: int) -> int:
        """Accept state-machine records as one batch in `epoch`; returns the last record's offset.

        Raises NotLeaderError if this node is not the leader of `epoch` (a stale epoch is refused,
        never silently appended to a newer one). The records reach the log on a later `poll`
        (after `controller.quorum.append.linger.ms`), so call `poll` by `next_deadline_ms`.
        """
        return self._leader_accumulator(epoch).append(records, now_ms=now_ms)

    def prepare_append(self, records: list[bytes], *, epoch: int, now_ms: int) -> int:
        """Reserve offsets for `records` as one batch in `epoch` and return the last one's offset,
        holding them (and anything appended after them) back from the log until
        `schedule_prepared_append` (Kafka's `RaftClient.prepareAppend`).

        The raft layer alone assigns offsets: its own control records (LeaderChangeMessage,
        VotersRecord, KRaftVersionRecord) take offsets too, so a state machine that applies
        records before they commit must apply them where this says they land. Raises
        NotLeaderError like `append`; one prepared append at a time.
        """
        accumulator = self._leader_accumulator(epoch)
        require(not accumulator.holding, "a prepared append is already waiting to be scheduled")
        return accumulator.append(records, now_ms=now_ms, hold=True)

    def schedule_prepared_append(self) -> None:
        """Let the prepared records reach the log (Kafka's `schedulePreparedAppend`); they are
        written by the poll after the linger time, like any append. A no-op once leadership
        is gone (the prepared records went with it)."""
        state = self._quorum.state
        if isinstance(state, LeaderState):
            state.accumulator.release_hold()

    @property
    def next_append_offset(self) -> int:
        """Where the next append would start: past the leader's buffered batches, else the log end."""
        state = self._quorum.state
        if isinstance(state, LeaderState):
            return state.accumulator.next_offset
        return self.log_end_offset

    def _leader_accumulator(self, epoch: int) -> BatchAccumulator:
        state = self._quorum.state
        if not isinstance(state, LeaderState) or state.epoch != epoch or self._shutdown is not None:
            raise NotLeaderError(f"node {self.node_id} is not the leader of epoch {epoch} (epoch {self.epoch}, {self.role.value})")
        return state.accumulator

    def resign(self, epoch: int, *, now_ms: int) -> Output:
        """Give up leadership of `epoch` (RaftClient.resign); ignored for any other epoch."""
        state = self._quorum.state
        if isinstance(state, LeaderState) and state.epoch == epoch:
            state.resign_requested = True
        self._poll_state(now_ms)
        return self._finish(now_ms)

    def shutdown(self, timeout_ms: int, *, now_ms: int) -> Output:
        """Begin a graceful shutdown: a leader resigns and hands over; `Output.shutdown_complete`
        (and `is_shutdown_complete`) report when the node may stop."""
        if self._shutdown is None:
            self._shutdown = _Shutdown(deadline_ms=now_ms + timeout_ms)
        self._poll_state(now_ms)
        return self._finish(now_ms)

    def create_snapshot(
        self,
        *,
        end_offset: int,
        records: list[bytes],
        last_contained_log_timestamp_ms: int,
        now_ms: int,
    ) -> OffsetAndEpoch:
        """Freeze a snapshot of the state machine at committed `end_offset` (exclusive).

        The snapshot is written in Kafka's layout: header control batch, kraft.version and voters
        control batches (when kraft.version >= 1, as of `end_offset - 1`), the state machine's
        `records` in data batches, footer control batch. Returns the snapshot id. The same in two
        steps, with the bytes built elsewhere: `snapshot_builder` then `store_snapshot`.
        """
        builder = self.snapshot_builder(end_offset=end_offset)
        if isinstance(builder, OffsetAndEpoch):
            return builder
        data = builder.build(records=records, last_contained_log_timestamp_ms=last_contained_log_timestamp_ms,
                             now_ms=now_ms)
        return self.store_snapshot(builder.snapshot_id, data, now_ms=now_ms)

    def snapshot_builder(self, *, end_offset: int) -> SnapshotBuilder | OffsetAndEpoch:
        """The layout of a snapshot at committed `end_offset` (exclusive), to build anywhere; the
        snapshot's id instead when that snapshot exists already. Raises SnapshotError."""
        hwm = self.high_watermark
        if hwm is None or end_offset > hwm:
            raise SnapshotError(f"snapshot offset {end_offset} is not committed (high watermark {hwm})")
        if end_offset <= 0:
            raise SnapshotError("a snapshot must contain at least one offset")
        if end_offset > self.durable_offset:
            # A follower's high watermark may run ahead of its own flush; a snapshot (durable at
            # once) past the flushed log would outlive the log it summarises in a crash.
            raise SnapshotError(f"snapshot offset {end_offset} is not flushed yet (flushed below {self.durable_offset})")
        if end_offset < self._log.log_start_offset:
            raise SnapshotError(f"snapshot offset {end_offset} is below the log start {self._log.log_start_offset}")
        epoch = self._epoch_of_offset(end_offset - 1)
        if epoch is None:
            raise SnapshotError(f"offset {end_offset} is not a batch boundary in the log")
        snapshot_id = OffsetAndEpoch(epoch=epoch, offset=end_offset)
        if snapshot_id in self._log.snapshot_ids():
            return snapshot_id
        at = snapshot_id.offset - 1
        kraft_version = self._history.kraft_version_at(at)
        control: tuple[Any, ...] = ()
        if kraft_version >= KRAFT_VERSION_1:
            control = (KRaftVersionRecord(version=i16(0), k_raft_version=i16(kraft_version)),
                       self._history.voter_set_at(at).to_record())
        return SnapshotBuilder(snapshot_id, control, self._config.max_batch_size_bytes)

    def store_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes, *, now_ms: int) -> OffsetAndEpoch:
        """Freeze the snapshot a `snapshot_builder` laid out; retention may then clean behind it."""
        if snapshot_id in self._log.snapshot_ids():
            return snapshot_id
        if snapshot_id.offset < self._log.log_start_offset:
            raise SnapshotError(
                f"snapshot offset {snapshot_id.offset} fell below the log start {self._log.log_start_offset}"
            )
        self._log.store_snapshot(snapshot_id, data)
        self._maybe_clean(now_ms)
        return snapshot_id

    # ==========================================================================================
    # Output assembly
    # ==========================================================================================
    def _finish(self, now_ms: int) -> Output:
        self._poll_listener()
        self._maybe_complete_shutdown(now_ms)
        out = self._out
        self._out = Output()
        end = self._log.end_offset().offset
        if end > self._flush_requested_offset:
            self._flush_requested_offset = end
            out.flush = LogFlush(end_offset=end, truncations=self._truncations)
        out.persist = self._quorum.pending_persist
        self._quorum.pending_persist = None
        out.next_deadline_ms = self._next_deadline(now_ms)
        out.shutdown_complete = self.is_shutdown_complete
        return out

    def _respond(self, token: int, response: Any) -> None:
        self._out.messages.append(OutboundResponse(token=token, response=response))

    def _connection(self, destination_id: int) -> _Connection:
        connection = self._connections.get(destination_id)
        if connection is None:
            connection = self._connections[destination_id] = _Connection()
        return connection

    def _is_ready(self, destination_id: int, now_ms: int) -> bool:
        connection = self._connection(destination_id)
        return connection.inflight_token is None and now_ms >= connection.backoff_until_ms

    def _send(self, destination_id: int, endpoints: tuple[Endpoint, ...], request: Any, now_ms: int) -> int | None:
        """Send if the connection is idle and not backing off: one request in flight per peer, so
        a follower never has two Fetches outstanding (which could append an offset twice)."""
        if not self._is_ready(destination_id, now_ms):
            return None
        token = self._next_token
        self._next_token += 1
        deadline = now_ms + self._config.request_timeout_ms
        self._inflight[token] = _Inflight(
            token=token,
            destination_id=destination_id,
            api_key=int(request.__api_key__),
            request=request,
            deadline_ms=deadline,
        )
        self._connection(destination_id).inflight_token = token
        self._out.messages.append(
            OutboundRequest(
                token=token,
                destination_id=destination_id,
                endpoints=endpoints,
                request=request,
                timeout_ms=self._config.request_timeout_ms,
            )
        )
        return token

    def _reset_connections(self) -> None:
        """Forget in-flight requests (their responses will be ignored) on a role change."""
        self._inflight.clear()
        self._connections.clear()

    def _expire_requests(self, now_ms: int) -> None:
        for token, inflight in list(self._inflight.items()):
            if now_ms >= inflight.deadline_ms:
                del self._inflight[token]
                connection = self._connection(inflight.destination_id)
                if connection.inflight_token == token:
                    connection.inflight_token = None
                self._handle_failure(inflight, RequestFailure.TIMED_OUT, now_ms)
                connection.backoff_until_ms = inflight.deadline_ms + self._config.retry_backoff_ms

    def _next_deadline(self, now_ms: int) -> int:
        deadlines = [inflight.deadline_ms for inflight in self._inflight.values()]
        deadlines.extend(p.deadline_ms for p in self._parked_fetches)
        state = self._quorum.state
        if isinstance(state, LeaderState):
            if state.check_quorum_deadline_ms is not None:
                deadlines.append(state.check_quorum_deadline_ms)
            deadlines.append(self._ready_at(state.begin_quorum_deadline_ms) if state.non_acknowledging_voters() else _NEVER)
            drain = state.accumulator.drain_deadline_ms()
            if drain is not None:
                deadlines.append(drain)
            if state.resign_requested:
                deadlines.append(now_ms)
        elif isinstance(state, FollowerState):
            deadlines.append(state.fetch_deadline_ms)
            if state.snapshot_download is not None or not self._awaiting_flush():
                deadlines.append(self._ready_at(now_ms, state.leader_id))  # else the flush wakes us
        elif isinstance(state, CandidateState):
            deadlines.append(state.backoff_until_ms if state.backoff_until_ms is not None else state.election_deadline_ms)
            if state.backoff_until_ms is None:
                deadlines.extend(self._ready_at(now_ms, v) for v in state.election.unrecorded() if v != self.node_id)
        elif isinstance(state, ProspectiveState):
            deadlines.append(state.election_deadline_ms)
            if now_ms < state.pre_vote_start_ms:
                deadlines.append(state.pre_vote_start_ms)
            else:
                deadlines.extend(self._ready_at(now_ms, v) for v in state.election.unrecorded() if v != self.node_id)
        elif isinstance(state, UnattachedState):
            if self._quorum.is_voter():
                deadlines.append(state.election_deadline_ms)
            if self._wants_bootstrap_fetch(state):
                destinations = self._bootstrap_destinations()
                if not any(self._connection(d).inflight_token is not None for d, _ in destinations):
                    deadlines.append(min((self._ready_at(now_ms, d) for d, _ in destinations), default=_NEVER))
        elif isinstance(state, ResignedState):
            deadlines.append(state.election_deadline_ms)
            deadlines.extend(self._ready_at(now_ms, v) for v in state.unacked_voters)
        if self._listener_behind():
            deadlines.append(now_ms)
        if self._shutdown is not None and not self._shutdown.completed:
            deadlines.append(self._shutdown.deadline_ms)
        deadlines.extend(self._membership_deadlines(now_ms))
        deadlines.append(self._next_clean_ms)
        return max(min(deadlines, default=_NEVER), now_ms)

    def _ready_at(self, now_ms: int, destination_id: int | None = None) -> int:
        if destination_id is None:
            return now_ms
        connection = self._connections.get(destination_id)
        if connection is None:
            return now_ms
        if connection.inflight_token is not None:
            return _NEVER  # the response (or its timeout) wakes us
        return max(now_ms, connection.backoff_until_ms)

    # ==========================================================================================
    # Role polling
    # ==========================================================================================
    def _poll_state(self, now_ms: int) -> None:
        # Transitions can cascade (Prospective -> Candidate -> Leader); poll until stable.
        for _ in range(8):
            before = (self._quorum.role, self._quorum.epoch)
            state = self._quorum.state
            if isinstance(state, LeaderState):
                self._poll_leader(state, now_ms)
            elif isinstance(state, FollowerState):
                self._poll_follower(state, now_ms)
            elif isinstance(state, CandidateState):
                self._poll_candidate(state, now_ms)
            elif isinstance(state, ProspectiveState):
                self._poll_prospective(state, now_ms)
            elif isinstance(state, UnattachedState):
                self._poll_unattached(state, now_ms)
            elif isinstance(state, ResignedState):
                self._poll_resigned(state, now_ms)
            self._expire_parked_fetches(now_ms)
            self._poll_voter_change(now_ms)
            if (self._quorum.role, self._quorum.epoch) == before:
                return

    # -- leader --------------------------------------------------------------------------------
    def _poll_leader(self, state: LeaderState, now_ms: int) -> None:
        if state.resign_requested or self._shutdown is not None or (
            state.check_quorum_expired(now_ms) and not self.voters.is_only_voter(self._local_key)
        ):
            self._resign(state, now_ms)
            return
        if state.accumulator.needs_drain(now_ms):
            self._drain_accumulator(state, now_ms)
        state.expire_observers(now_ms=now_ms)
        if now_ms >= state.begin_quorum_deadline_ms:
            for voter_id in state.non_acknowledging_voters():
                voter = self.voters.get(voter_id)
                if voter is None:
                    continue
                self._send(
                    voter_id,
                    voter.endpoints,
                    messages.begin_quorum_epoch_request(
                        cluster_id=self._cluster_id,
                        voter=voter.key,
                        leader_id=self.node_id,
                        epoch=state.epoch,
                        leader_endpoints=self._local_endpoints,
                    ),
                    now_ms,
                )
            state.begin_quorum_deadline_ms = now_ms + self._config.fetch_timeout_ms // 2

    def _become_leader(self, now_ms: int) -> None:
        state = self._quorum.state
        require(isinstance(state, CandidateState), "only a candidate becomes leader")
        granted = state.election.granted if isinstance(state, CandidateState) else frozenset()
        leader = self._quorum.transition_to_leader(epoch_start_offset=self._log.end_offset().offset, now_ms=now_ms)
        self._reset_connections()
        self._election_retries = 0
        # A record of our own epoch, so the high watermark can advance without client writes.
        voters = self.voters
        start_records: list[Any] = [
            LeaderChangeMessage(
                version=i16(0),
                leader_id=BrokerId(self.node_id),
                voters=tuple(LeaderChangeVoter(voter_id=i32(v)) for v in sorted(voters.ids)),
                granting_voters=tuple(LeaderChangeVoter(voter_id=i32(v)) for v in sorted(granted)),
            )
        ]
        latest_voters_offset = self._history.latest_voter_set_offset()
        if self.kraft_version >= KRAFT_VERSION_1 and (latest_voters_offset is None or latest_voters_offset < 0):
            # The voter set is only in the bootstrap checkpoint, which is never replicated: write
            # it into the log so that observers and new voters learn it by fetching.
            start_records.append(KRaftVersionRecord(version=i16(0), k_raft_version=i16(self.kraft_version)))
            start_records.append(voters.to_record())
        leader.accumulator.append_control(start_records, now_ms=now_ms)
        self._drain_accumulator(leader, now_ms)
        self._learned_voters = {}

    def _drain_accumulator(self, state: LeaderState, now_ms: int) -> None:
        batches = state.accumulator.drain()
        if not batches:
            return
        chunks = []
        for pending in batches:
            if pending.is_control:
                chunks.append(
                    build_control_batch(
                        base_offset=pending.base_offset,
                        partition_leader_epoch=state.epoch,
                        timestamp_ms=pending.append_time_ms,
                        records=pending.control_records,
                    )
                )
            else:
                chunks.append(
                    build_data_batch(
                        pending.values, base_offset=pending.base_offset, epoch=state.epoch, timestamp_ms=pending.append_time_ms
                    )
                )
        # Not flushed here: the flush is an effect (`Output.flush`), performed while the parked
        # Fetches below carry the batches to the followers. The leader counts itself toward the
        # high watermark only up to a completed flush (`handle_log_flushed`).
        appended = self._log.append(b"".join(chunks))
        if self._history.replay(appended):
            self._on_voter_set_changed(now_ms)
        if isinstance(self._quorum.state, LeaderState):
            leader = self._quorum.state
            if leader.update_local_state(self.durable_offset):
                self._on_leader_hwm_advanced(leader, now_ms)
        self._complete_parked_fetches(now_ms)

    def _on_leader_hwm_advanced(self, state: LeaderState, now_ms: int) -> None:
        if state.high_watermark is not None:
            self._hwm = state.high_watermark
        self._complete_parked_fetches(now_ms)
        self._maybe_complete_voter_change(now_ms)

    def _resign(self, state: LeaderState, now_ms: int) -> None:
        # Whatever the state machine handed us is written before we step down (it may still commit).
        if not state.accumulator.is_empty():
            self._drain_accumulator(state, now_ms)
        successors = state.voters_by_descending_fetch_offset()
        self._quorum.transition_to_resigned(successors, now_ms=now_ms)
        self._on_leadership_lost(now_ms)

    def _on_leadership_lost(self, now_ms: int) -> None:
        self._complete_parked_fetches(now_ms)
        self._reset_connections()
        self._finish_voter_change(ErrorCode.not_leader_or_follower, "leadership changed")

    # -- follower ------------------------------------------------------------------------------
    def _poll_follower(self, state: FollowerState, now_ms: int) -> None:
        if now_ms >= state.fetch_deadline_ms:
            if self._quorum.is_voter():
                self._start_prospective(now_ms)
            else:
                # An observer that lost its leader goes back to discovering one.
                self._quorum.transition_to_unattached(state.epoch, now_ms=now_ms, forget_leader=True)
                self._reset_connections()
            return
        if now_ms >= state.update_voter_deadline_ms and self._is_ready(state.leader_id, now_ms):
            # Between two Fetches the connection is free for a membership request (Kafka sends
            # UpdateRaftVoter / auto-join requests instead of the next Fetch when one is due).
            request = self._membership_request(state)
            if request is not None and self._send(state.leader_id, state.leader_endpoints, request, now_ms) is not None:
                state.update_voter_deadline_ms = now_ms + self._config.fetch_timeout_ms
                return
        if state.snapshot_download is None and self._awaiting_flush():
            return  # the next fetch offset is counted by the leader: it must be durable first
        self._send_fetch_or_fetch_snapshot(state, now_ms)

    def _send_fetch_or_fetch_snapshot(self, state: FollowerState, now_ms: int) -> None:
        if state.snapshot_download is not None:
            download = state.snapshot_download
            self._send(
                state.leader_id,
                state.leader_endpoints,
                messages.fetch_snapshot_request(
                    cluster_id=self._cluster_id,
                    replica=self._local_key,
                    epoch=state.epoch,
                    snapshot_id=download.snapshot_id,
                    position=len(download.data),
                    max_bytes=self._config.fetch_snapshot_max_bytes,
                ),
                now_ms,
            )
        else:
            self._send(state.leader_id, state.leader_endpoints, self._build_fetch(state.epoch), now_ms)

    def _build_fetch(self, epoch: int) -> Any:
        end = self._log.end_offset()
        return messages.fetch_request(
            cluster_id=self._cluster_id,
            replica=self._local_key,
            epoch=epoch,
            fetch_offset=end.offset,
            last_fetched_epoch=end.epoch,
            high_watermark=self._hwm,
            max_wait_ms=self._config.fetch_max_wait_ms,
            max_bytes=self._config.fetch_max_bytes,
        )

    # -- unattached / prospective / candidate ----------------------------------------------------
    def _poll_unattached(self, state: UnattachedState, now_ms: int) -> None:
        if self._quorum.is_voter() and now_ms >= state.election_deadline_ms:
            self._start_prospective(now_ms)
            return
        if self._wants_bootstrap_fetch(state):
            ready = [(d, e) for d, e in self._bootstrap_destinations() if self._is_ready(d, now_ms)]
            busy = any(self._connection(d).inflight_token is not None for d, _ in self._bootstrap_destinations())
            if ready and not busy:
                destination, endpoints = ready[self._rng.randrange(len(ready))]
                self._send(destination, endpoints, self._build_fetch(state.epoch), now_ms)

    def _wants_bootstrap_fetch(self, state: UnattachedState) -> bool:
        # Observers discover the leader by fetching from any bootstrap server; so does a voter
        # that knows the leader's id but not its endpoints.
        return not self._quorum.is_voter() or state.leader_id is not None

    def _bootstrap_destinations(self) -> list[tuple[int, tuple[Endpoint, ...]]]:
        if self._bootstrap_servers:
            # Bootstrap servers get decreasing negative ids, as in Kafka.
            return [(-(i + 2), (endpoint,)) for i, endpoint in enumerate(self._bootstrap_servers)]
        return [(v.key.id, v.endpoints) for v in self.voters if v.key.id != self.node_id and v.endpoints]

    def _start_prospective(self, now_ms: int, *, pre_vote_delay_ms: int = 0) -> None:
        self._quorum.transition_to_prospective(now_ms=now_ms, pre_vote_delay_ms=pre_vote_delay_ms)
        self._reset_connections()
        self._maybe_advance_election(now_ms)

    def _poll_prospective(self, state: ProspectiveState, now_ms: int) -> None:
        if now_ms >= state.election_deadline_ms:
            self._prospective_lost(state, now_ms)
            return
        if now_ms < state.pre_vote_start_ms:
            return
        self._send_vote_requests(state.election.unrecorded(), epoch=state.epoch, pre_vote=True, now_ms=now_ms)

    def _prospective_lost(self, state: ProspectiveState, now_ms: int) -> None:
        if state.leader_id is not None and state.leader_endpoints:
            self._quorum.transition_to_follower(
                state.epoch, leader_id=state.leader_id, endpoints=state.leader_endpoints, now_ms=now_ms
            )
        else:
            self._quorum.transition_to_unattached(state.epoch, now_ms=now_ms)
        self._reset_connections()

    def _poll_candidate(self, state: CandidateState, now_ms: int) -> None:
        if state.backoff_until_ms is not None:
            if now_ms >= state.backoff_until_ms:
                self._start_prospective(now_ms)
            return
        if now_ms >= state.election_deadline_ms:
            state.backoff_until_ms = now_ms + self._election_backoff_ms()
            return
        self._send_vote_requests(state.election.unrecorded(), epoch=state.epoch, pre_vote=False, now_ms=now_ms)

    def _send_vote_requests(self, voter_ids: list[int], *, epoch: int, pre_vote: bool, now_ms: int) -> None:
        last = self._log.end_offset()
        voters = self.voters
        for voter_id in voter_ids:
            voter = voters.get(voter_id)
            if voter_id == self.node_id or voter is None:
                continue
            self._send(
                voter_id,
                voter.endpoints,
                messages.vote_request(
                    cluster_id=self._cluster_id,
                    voter=voter.key,
                    replica=self._local_key,
                    epoch=epoch,
                    last=last,
                    pre_vote=pre_vote,
                ),
                now_ms,
            )

    def _election_backoff_ms(self) -> int:
        """Binary exponential backoff after a lost candidacy, capped (Kafka's formula)."""
        self._election_retries += 1
        exponent = min(20, self._election_retries - 1)
        return min(_RETRY_BACKOFF_BASE_MS * self._rng.randrange(2 << exponent), self._config.election_backoff_max_ms)

    def _maybe_advance_election(self, now_ms: int) -> None:
        """Prospective -> Candidate -> Leader as soon as the tally allows (or give up)."""
        state = self._quorum.state
        if isinstance(state, ProspectiveState):
            if state.election.is_granted():
                self._reset_connections()
                self._quorum.transition_to_candidate(now_ms=now_ms)
                self._maybe_advance_election(now_ms)
            elif state.election.is_rejected():
                self._prospective_lost(state, now_ms)
        elif isinstance(state, CandidateState) and state.backoff_until_ms is None:
            if state.election.is_granted():
                self._become_leader(now_ms)
            elif state.election.is_rejected():
                state.backoff_until_ms = now_ms + self._election_backoff_ms()

    # -- resigned ------------------------------------------------------------------------------
    def _poll_resigned(self, state: ResignedState, now_ms: int) -> None:
        if now_ms >= state.election_deadline_ms:
            self._quorum.transition_to_unattached(state.epoch + 1, now_ms=now_ms)
            self._reset_connections()
            return
        voters = self.voters
        for voter_id in sorted(state.unacked_voters):
            voter = voters.get(voter_id)
            if voter is None:
                continue
            self._send(
                voter_id,
                voter.endpoints,
                messages.end_quorum_epoch_request(
                    cluster_id=self._cluster_id,
                    leader_id=self.node_id,
                    epoch=state.epoch,
                    preferred=state.preferred_successors,
                    leader_endpoints=self._local_endpoints,
                ),
                now_ms,
            )

    def _maybe_complete_shutdown(self, now_ms: int) -> None:
        shutdown = self._shutdown
        if shutdown is None or shutdown.completed:
            return
        state = self._quorum.state
        remote_leader = self.leader_id is not None and self.leader_id != self.node_id
        if (
            not self._quorum.is_voter()
            or self.voters.is_only_voter(self._local_key)
            or (remote_leader and not isinstance(state, ResignedState))
            or now_ms >= shutdown.deadline_ms
        ):
            shutdown.completed = True

    # ==========================================================================================
    # Common response handling (KafkaRaftClient.maybeHandleCommonResponse / maybeTransition)
    # ==========================================================================================
    def _endpoints_for(self, leader_id: int | None, endpoints: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
        if endpoints or leader_id is None:
            return endpoints
        return self.voters.endpoints(leader_id)

    def _maybe_handle_common_response(
        self, *, error: ErrorCode, leader_id: int | None, epoch: int, endpoints: tuple[Endpoint, ...], now_ms: int
    ) -> bool | None:
        """None: not handled, let the API handler run. True/False: handled (False = back off)."""
        endpoints = self._endpoints_for(leader_id, endpoints)
        if epoch < self.epoch or error == ErrorCode.unknown_leader_epoch:
            return True
        if epoch > self.epoch or error in (ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower):
            self._maybe_transition(leader_id, epoch, endpoints, now_ms)
            return True
        if epoch == self.epoch and leader_id is not None and self._lacks_leader_endpoints(leader_id):
            if leader_id != self.node_id and endpoints:
                self._to_follower(epoch, leader_id, endpoints, now_ms)
            return None if error == ErrorCode.none else True
        if error == ErrorCode.broker_not_available:
            return False
        if error in (ErrorCode.invalid_voter_key, ErrorCode.inconsistent_cluster_id, ErrorCode.invalid_request):
            return False
        return None

    def _maybe_transition(self, leader_id: int | None, epoch: int, endpoints: tuple[Endpoint, ...], now_ms: int) -> None:
        if leader_id is not None and leader_id == self.node_id:
            # A peer says we lead. If we do not remember it (our disk was re-formatted and the
            # peers still follow our previous incarnation), adopt the epoch and lead nothing: the
            # quorum elects a new leader once their fetches to us fail.
            if self.leader_id != self.node_id and epoch > self.epoch:
                self._to_unattached(epoch, now_ms)
            return
        if epoch == self.epoch and leader_id is not None and self.leader_id is not None and self.leader_id != leader_id:
            raise_inconsistent = self.role in (Role.LEADER, Role.RESIGNED, Role.FOLLOWER)
            require(not raise_inconsistent, f"epoch {epoch} has leader {self.leader_id}, a peer says {leader_id}")
        if epoch > self.epoch:
            if leader_id is not None:
                self._to_follower(epoch, leader_id, endpoints, now_ms)
            else:
                self._to_unattached(epoch, now_ms)
        elif (
            leader_id is not None
            and not isinstance(self._quorum.state, LeaderState | ResignedState)
            and (
                self._lacks_leader_endpoints(leader_id)
                or (isinstance(self._quorum.state, FollowerState) and len(endpoints) > len(self._quorum.state.leader_endpoints))
            )
        ):
            self._to_follower(epoch, leader_id, endpoints, now_ms)

    def _lacks_leader_endpoints(self, leader_id: int) -> bool:
        """No leader known, or `leader_id` known only by id (Unattached: e.g. restarted from a
        quorum-state naming a leader whose endpoints this node's voter set does not hold, as an
        observer of a dynamic quorum). Kafka's "discovered more endpoints" rule: the first answer
        that names the leader's endpoints makes us follow it."""
        state = self._quorum.state
        return self.leader_id is None or (isinstance(state, UnattachedState) and state.leader_id == leader_id)

    def _to_follower(self, epoch: int, leader_id: int, endpoints: tuple[Endpoint, ...], now_ms: int) -> None:
        was_leader = self.role is Role.LEADER
        if not endpoints:
            # We cannot fetch without an endpoint: remember the leader's id and discover it later.
            self._to_unattached(epoch, now_ms, leader_id=leader_id)
            return
        state = self._quorum.state
        if isinstance(state, FollowerState) and state.epoch == epoch and state.leader_id == leader_id:
            state.leader_endpoints = endpoints
            return
        self._quorum.transition_to_follower(epoch, leader_id=leader_id, endpoints=endpoints, now_ms=now_ms)
        self._election_retries = 0
        self._reset_connections()
        if was_leader:
            self._on_leadership_lost(now_ms)

    def _to_unattached(self, epoch: int, now_ms: int, leader_id: int | None = None) -> None:
        was_leader = self.role is Role.LEADER
        self._quorum.transition_to_unattached(epoch, now_ms=now_ms, leader_id=leader_id)
        self._reset_connections()
        if was_leader:
            self._on_leadership_lost(now_ms)

    def _dispatch_response(self, inflight: _Inflight, response: Any, now_ms: int) -> bool:
        handler = self._response_handlers.get(inflight.api_key)
        if handler is None:
            return False
        return handler(inflight, response, now_ms)

    def _handle_failure(self, inflight: _Inflight, failure: RequestFailure, now_ms: int) -> bool:
        if inflight.api_key == _API_VOTE and failure is RequestFailure.UNSUPPORTED_VERSION:
            # A voter that does not understand pre-vote (Vote v2): fall back to a real candidacy.
            state = self._quorum.state
            if isinstance(state, ProspectiveState) and inflight.request.topics[0].partitions[0].pre_vote:
                self._reset_connections()
                self._quorum.transition_to_candidate(now_ms=now_ms)
                self._maybe_advance_election(now_ms)
                return True
        self._fail_voter_change_on(inflight, failure, now_ms)
        if failure is RequestFailure.DISCONNECTED:
            return self._maybe_fail_over(inflight, now_ms)
        return False

    def _maybe_fail_over(self, inflight: _Inflight, now_ms: int) -> bool:
        """A voter whose connection to the leader it fetches from broke, and whose immediate
        retry failed too, starts pre-vote at once. Returns True to retry without backoff.

        Kafka waits out `controller.quorum.fetch.timeout.ms` (2 s) before a follower stands; a
        connection that breaks and then cannot be re-established (`RequestFailure.DISCONNECTED`
        twice in a row: reset or closed, then refused) is a much earlier and much stronger sign
        that the leader's process is gone. One broken connection alone is retried at once,
        without the retry backoff: a dead leader's host refuses the reconnect within a round
        trip, while a connection lost to a passing fault reconnects and the follower carries on
        without troubling anyone. A request that merely got no answer (`TIMED_OUT`, a frozen or
        partitioned leader) keeps the fetch timeout.

        Why this cannot disrupt a healthy leader: the follower only becomes Prospective. A
        pre-vote bumps no epoch and persists nothing, and it turns into a candidacy only with a
        majority of pre-votes granted. The leader rejects every (pre-)vote, and a follower that
        has fetched from its leader in this epoch rejects pre-votes until its own fetch timeout
        expires (`_can_grant_vote`, Kafka's FollowerState rule). So the epoch moves only when a
        majority of voters have lost the leader too (by this rule or by their fetch timeout); a
        follower that alone cannot reach a live leader costs one rejected pre-vote, after which
        it returns to following the same leader in the same epoch.

        Only a follower that has fetched from the leader in this state fails over early: it had
        a working connection that then broke. One that returned from a lost pre-vote (or never
        reached the leader) waits out the fetch timeout as before, so a leader that only this
        follower cannot reach does not keep it cycling through pre-votes. Observers never stand.

        The pre-votes go out after a random delay in [0, election timeout / 4). When the leader
        dies, every surviving follower sees its connection break at the same instant; if they
        all asked at once, each could grant the others' pre-votes, stand, vote for itself and
        split the real vote, costing an election timeout plus backoff. A window that is wide
        against a round trip (ms on a LAN) makes two starts within one round trip unlikely,
        while a quarter of the election timeout keeps the worst case far below the 2 s fetch
        timeout this path replaces. Meanwhile the follower is already Prospective, so it grants
        the pre-vote of whichever survivor asks first.
        """
        state = self._quorum.state
        if (
            not isinstance(state, FollowerState)
            or inflight.destination_id != state.leader_id
            or not state.has_fetched_from_leader
            or not self._quorum.is_voter()
        ):
            return False
        if not state.leader_connection_broken:
            state.leader_connection_broken = True
            return True
        window_ms = max(1, self._config.election_timeout_ms // 4)
        self._start_prospective(now_ms, pre_vote_delay_ms=self._rng.randrange(window_ms))
        return False

    def _check_cluster_id(self, cluster_id: str | None) -> bool:
        # Kafka accepts a request without a cluster id (older clients); a different one is refused.
        return cluster_id is None or cluster_id == self._cluster_id

    def _leader_endpoints(self) -> tuple[Endpoint, ...]:
        leader_id = self.leader_id
        if leader_id is None:
            return ()
        if leader_id == self.node_id:
            return self._local_endpoints or self.voters.endpoints(leader_id)
        state = self._quorum.state
        if isinstance(state, FollowerState | ProspectiveState) and state.leader_endpoints:
            return state.leader_endpoints
        return self.voters.endpoints(leader_id)

    def _is_local_key(self, node_id: int, directory_id: uuid.UUID | None) -> bool:
        """Does a request's voter key name us? (isValidVoterKey: a missing directory matches, and
        so does a missing voter id: Vote v0-v1 and BeginQuorumEpoch v0 carry none.)"""
        if node_id < 0:
            return True
        key = ReplicaKey.of(node_id, directory_id)
        if key.id != self.node_id:
            return False
        return key.directory_id is None or key.directory_id == self._local_key.directory_id

    # ==========================================================================================
    # Vote
    # ==========================================================================================
    def _handle_vote_request(self, request: Any, token: int, now_ms: int) -> Any:
        listener = self._config.controller_listener_name

        def reply(error: ErrorCode, granted: bool = False, top: ErrorCode = ErrorCode.none) -> Any:
            return messages.vote_response(
                error=error,
                leader_id=self.leader_id,
                epoch=self.epoch,
                granted=granted,
                endpoints=self._leader_endpoints(),
                listener=listener,
                top_level_error=top,
            )

        if not self._check_cluster_id(request.cluster_id):
            return reply(ErrorCode.none, top=ErrorCode.inconsistent_cluster_id)
        partition = _single_partition(request.topics, "topic_name", "partition_index")
        if partition is None:
            return reply(ErrorCode.none, top=ErrorCode.invalid_request)
        replica_epoch = int(partition.replica_epoch)
        last_epoch = int(partition.last_offset_epoch)
        last_offset = int(partition.last_offset)
        pre_vote = bool(partition.pre_vote)
        if last_offset < 0 or last_epoch < 0 or (last_epoch > replica_epoch if pre_vote else last_epoch >= replica_epoch):
            return reply(ErrorCode.invalid_request)
        if replica_epoch < self.epoch:
            return reply(ErrorCode.fenced_leader_epoch)
        if int(partition.replica_id) < 0:
            return reply(ErrorCode.invalid_request)
        if replica_epoch > self.epoch and not pre_vote:
            self._to_unattached(replica_epoch, now_ms)
        if not self._is_local_key(int(request.voter_id), partition.voter_directory_id):
            return reply(ErrorCode.invalid_voter_key)
        candidate = ReplicaKey.of(int(partition.replica_id), partition.replica_directory_id)
        up_to_date = OffsetAndEpoch(epoch=last_epoch, offset=last_offset) >= self._log.end_offset()
        granted = self._can_grant_vote(candidate, up_to_date=up_to_date, pre_vote=pre_vote)
        if granted and not pre_vote:
            state = self._quorum.state
            if isinstance(state, UnattachedState | ProspectiveState) and state.voted_key is None:
                self._quorum.transition_to_unattached_voted(candidate, epoch=replica_epoch, now_ms=now_ms)
                self._reset_connections()
        return reply(ErrorCode.none, granted)

    def _can_grant_vote(self, candidate: ReplicaKey, *, up_to_date: bool, pre_vote: bool) -> bool:
        # No "am I a voter" check, as in Kafka since KIP-853: the candidate asked us because its
        # voter set has us, and ours may be stale (we may not have read our own addition yet).
        # Refusing would stall an election that needs us. Brokers are never asked.
        state = self._quorum.state
        if isinstance(state, UnattachedState | ProspectiveState):
            if pre_vote:
                return up_to_date
            if state.voted_key is not None:
                voted = state.voted_key
                return voted.id == candidate.id and (voted.directory_id is None or voted.directory_id == candidate.directory_id)
            if state.leader_id is not None:
                return False
            return up_to_date
        if isinstance(state, CandidateState):
            return pre_vote and up_to_date
        if isinstance(state, FollowerState):
            # A follower still supports its leader unless it never managed to fetch from it.
            return pre_vote and not state.has_fetched_from_leader and up_to_date
        return False

    def _handle_vote_response(self, inflight: _Inflight, response: Any, now_ms: int) -> bool:
        if response.error_code == ErrorCode.unsupported_version:
            return self._handle_failure(inflight, RequestFailure.UNSUPPORTED_VERSION, now_ms)
        partition, handled = self._epoch_response(response, now_ms)
        if partition is None or handled is not None:
            return bool(handled)
        epoch = int(partition.leader_epoch)
        if partition.error_code != ErrorCode.none:
            return False
        sent_pre_vote = bool(inflight.request.topics[0].partitions[0].pre_vote)
        state = self._quorum.state
        voter_id = inflight.destination_id
        if (isinstance(state, ProspectiveState) and sent_pre_vote and epoch == state.epoch) or (isinstance(state, CandidateState) and not sent_pre_vote and epoch == state.epoch):
            if partition.vote_granted:
                state.election.record_granted(voter_id)
            else:
                state.election.record_rejected(voter_id)
            self._maybe_advance_election(now_ms)
        return True

    # ==========================================================================================
    # BeginQuorumEpoch / EndQuorumEpoch
    # ==========================================================================================
    def _accept_leader_announcement(self, request: Any, *, build: Any, check_voter_key: bool, now_ms: int) -> tuple[Any, Any]:
        """Checks shared by BeginQuorumEpoch and EndQuorumEpoch, then learn the announced leader.

        Returns (error response, None) when refused, or (None, partition) once transitioned.
        """
        listener = self._config.controller_listener_name

        def reply(error: ErrorCode, top: ErrorCode = ErrorCode.none) -> Any:
            return build(
                error=error, leader_id=self.leader_id, epoch=self.epoch, endpoints=self._leader_endpoints(),
                listener=listener, top_level_error=top,
            )

        if not self._check_cluster_id(request.cluster_id):
            return reply(ErrorCode.none, top=ErrorCode.inconsistent_cluster_id), None
        partition = _single_partition(request.topics, "topic_name", "partition_index")
        if partition is None:
            return reply(ErrorCode.none, top=ErrorCode.invalid_request), None
        leader_id = int(partition.leader_id)
        epoch = int(partition.leader_epoch)
        if epoch < self.epoch:
            return reply(ErrorCode.fenced_leader_epoch), None
        if leader_id < 0 or leader_id == self.node_id:
            return reply(ErrorCode.invalid_request), None
        if check_voter_key and not self._is_local_key(int(request.voter_id), partition.voter_directory_id):
            return reply(ErrorCode.invalid_voter_key), None
        endpoints = tuple(Endpoint(e.name, e.host, int(e.port)) for e in request.leader_endpoints)
        self._maybe_transition(leader_id, epoch, self._endpoints_for(leader_id, endpoints), now_ms)
        return None, partition

    def _handle_begin_quorum_epoch_request(self, request: Any, token: int, now_ms: int) -> Any:
        refusal, _ = self._accept_leader_announcement(
            request, build=messages.begin_quorum_epoch_response, check_voter_key=True, now_ms=now_ms
        )
        return refusal or self._announcement_ack(messages.begin_quorum_epoch_response)

    def _announcement_ack(self, build: Any) -> Any:
        return build(
            error=ErrorCode.none, leader_id=self.leader_id, epoch=self.epoch, endpoints=self._leader_endpoints(),
            listener=self._config.controller_listener_name,
        )

    def _epoch_response(self, response: Any, now_ms: int) -> tuple[Any, bool | None]:
        """Top-level error, single partition and the common epoch/leader handling of a Vote,
        BeginQuorumEpoch or EndQuorumEpoch response: (partition or None, handled-outcome)."""
        if response.error_code != ErrorCode.none:
            return None, False
        partition = _single_partition(response.topics, "topic_name", "partition_index")
        if partition is None:
            return None, False
        leader_id = _optional_id(partition.leader_id)
        handled = self._maybe_handle_common_response(
            error=partition.error_code,
            leader_id=leader_id,
            epoch=int(partition.leader_epoch),
            endpoints=_response_endpoints(response, leader_id, self._config.controller_listener_name),
            now_ms=now_ms,
        )
        return partition, handled

    def _handle_begin_quorum_epoch_response(self, inflight: _Inflight, response: Any, now_ms: int) -> bool:
        partition, handled = self._epoch_response(response, now_ms)
        if partition is None or handled is not None:
            return bool(handled)
        state = self._quorum.state
        if partition.error_code == ErrorCode.none and isinstance(state, LeaderState) and int(partition.leader_epoch) == state.epoch:
            state.add_acknowledgement_from(inflight.destination_id)
            return True
        return bool(partition.error_code == ErrorCode.none)

    def _handle_end_quorum_epoch_request(self, request: Any, token: int, now_ms: int) -> Any:
        refusal, partition = self._accept_leader_announcement(
            request, build=messages.end_quorum_epoch_response, check_voter_key=False, now_ms=now_ms
        )
        if refusal is not None:
            return refusal
        state = self._quorum.state
        if isinstance(state, FollowerState) and state.leader_id == int(partition.leader_id):
            preferred = [ReplicaKey.of(int(c.candidate_id), c.candidate_directory_id) for c in partition.preferred_candidates]
            backoff_ms = self._end_epoch_backoff_ms(preferred)
            state.fetch_deadline_ms = min(state.fetch_deadline_ms, now_ms + backoff_ms)
        return self._announcement_ack(messages.end_quorum_epoch_response)

    def _end_epoch_backoff_ms(self, preferred: list[ReplicaKey]) -> int:
        """Strict exponential backoff by our position among the preferred successors: the most
        caught-up voter starts its election first (KafkaRaftClient.endEpochElectionBackoff)."""
        position = 0
        for candidate in preferred:
            if candidate.id == self.node_id and (
                candidate.directory_id is None or candidate.directory_id == self._local_key.directory_id
            ):
                break
            position += 1
        total = len(preferred)
        maximum = self._config.election_backoff_max_ms
        if position == 0:
            return 0
        if position >= total:
            return maximum
        base_ms = maximum >> (total - 1)
        return min(maximum, base_ms << (position - 1))

    def _handle_end_quorum_epoch_response(self, inflight: _Inflight, response: Any, now_ms: int) -> bool:
        partition, handled = self._epoch_response(response, now_ms)
        if partition is None or handled is not None:
            return bool(handled)
        state = self._quorum.state
        if partition.error_code == ErrorCode.none and isinstance(state, ResignedState):
            state.unacked_voters.discard(inflight.destination_id)
            return True
        return bool(partition.error_code == ErrorCode.none)

    # ==========================================================================================
    # Fetch (leader side)
    # ==========================================================================================
    def _handle_fetch_request(self, request: Any, token: int, now_ms: int) -> Any:
        if not self._check_cluster_id(request.cluster_id):
            return self._fetch_error(ErrorCode.none, top=ErrorCode.inconsistent_cluster_id)
        if len(request.topics) != 1 or request.topics[0].topic_id != messages.METADATA_TOPIC_ID:
            return self._fetch_error(ErrorCode.none, top=ErrorCode.invalid_request)
        partitions = request.topics[0].partitions
        if len(partitions) != 1 or int(partitions[0].partition) != messages.METADATA_PARTITION:
            return self._fetch_error(ErrorCode.none, top=ErrorCode.invalid_request)
        partition = partitions[0]
        max_wait_ms = int(request.max_wait.total_seconds() * 1000)
        if (
            max_wait_ms < 0
            or partition.fetch_offset < 0
            or partition.last_fetched_epoch < 0
            or partition.last_fetched_epoch > partition.current_leader_epoch
        ):
            return self._fetch_error(ErrorCode.invalid_request)
        replica = ReplicaKey.of(int(request.replica_state.replica_id), partition.replica_directory_id)
        if replica.id == self.node_id and isinstance(self._quorum.state, LeaderState):
            # Only a forged or misrouted Fetch names the leader itself. Counting it would overwrite
            # the leader's own progress; Kafka's leader throws here, which stops its raft thread.
            return self._fetch_error(ErrorCode.invalid_request)
        parked = _ParkedFetch(
            token=token,
            replica=replica,
            fetch_offset=int(partition.fetch_offset),
            last_fetched_epoch=int(partition.last_fetched_epoch),
            current_leader_epoch=int(partition.current_leader_epoch),
            max_bytes=min(int(partition.partition_max_bytes), self._config.fetch_max_bytes),
            deadline_ms=now_ms + max_wait_ms,
        )
        response, immediate = self._try_complete_fetch(parked, now_ms)
        follower_hwm = int(getattr(partition, "high_watermark", 2**63 - 1))
        leader_hwm = self.high_watermark
        hwm_behind = leader_hwm is not None and 0 <= follower_hwm < leader_hwm
        if immediate or max_wait_ms == 0 or hwm_behind:
            return response
        # Nothing new for the follower: park it until data arrives, the HWM moves, or max wait.
        self._parked_fetches.append(parked)
        return None

    def _fetch_error(self, error: ErrorCode, *, top: ErrorCode = ErrorCode.none) -> Any:
        return messages.fetch_response(
            error=error,
            leader_id=self.leader_id,
            epoch=self.epoch,
            high_watermark=None,
            log_start_offset=-1,
            records=b"",
            diverging=None,
            snapshot_id=None,
            endpoints=self._leader_endpoints(),
            listener=self._config.controller_listener_name,
            top_level_error=top,
        )

    def _validate_leader_only(self, request_epoch: int) -> ErrorCode | None:
        if request_epoch < self.epoch:
            return ErrorCode.fenced_leader_epoch
        if request_epoch > self.epoch:
            return ErrorCode.unknown_leader_epoch
        if not isinstance(self._quorum.state, LeaderState):
            return ErrorCode.not_leader_or_follower
        if self._shutdown is not None:
            return ErrorCode.broker_not_available
        return None

    def _try_complete_fetch(self, fetch: _ParkedFetch, now_ms: int) -> tuple[Any, bool]:
        """The Fetch response as of now, and whether it must be sent now (error, data, divergence)."""
        error = self._validate_leader_only(fetch.current_leader_epoch)
        if error is not None:
            return self._fetch_error(error), True
        state = self._quorum.state
        require(isinstance(state, LeaderState), "fetch validated on a non-leader")
        assert isinstance(state, LeaderState)  # for mypy; require() above is the real check
        snapshots = self._log.snapshot_ids()
        if fetch.fetch_offset == 0 and snapshots and snapshots[-1] != BOOTSTRAP_SNAPSHOT_ID:
            # An empty follower is better served by the latest snapshot than by the log.
            kind, position = ValidationKind.SNAPSHOT, snapshots[-1]
        else:
            validation = validate_offset_and_epoch(self._log, offset=fetch.fetch_offset, epoch=fetch.last_fetched_epoch)
            kind, position = validation.kind, validation.offset_and_epoch
        records = b""
        if kind is ValidationKind.VALID:
            end = self._log.end_offset().offset
            if fetch.fetch_offset < end:
                records = self._log.read(fetch.fetch_offset, fetch.max_bytes)
            if fetch.replica.id >= 0 and state.update_replica_state(
                fetch.replica, fetch_offset=fetch.fetch_offset, leader_end_offset=end, now_ms=now_ms
            ):
                self._on_leader_hwm_advanced(state, now_ms)
        response = messages.fetch_response(
            error=ErrorCode.none,
            leader_id=self.node_id,
            epoch=state.epoch,
            high_watermark=state.high_watermark,
            log_start_offset=self._log.log_start_offset,
            records=records,
            diverging=position if kind is ValidationKind.DIVERGING else None,
            snapshot_id=position if kind is ValidationKind.SNAPSHOT else None,
            endpoints=self._leader_endpoints(),
            listener=self._config.controller_listener_name,
        )
        return response, bool(records) or kind is not ValidationKind.VALID

    def _complete_parked_fetches(self, now_ms: int) -> None:
        """New data, a new high watermark or a role change: answer every parked Fetch now."""
        if not self._parked_fetches:
            return
        parked, self._parked_fetches = self._parked_fetches, []
        for fetch in parked:
            response, _ = self._try_complete_fetch(fetch, now_ms)
            self._respond(fetch.token, response)

    def _expire_parked_fetches(self, now_ms: int) -> None:
        due = [p for p in self._parked_fetches if now_ms >= p.deadline_ms]
        if not due:
            return
        self._parked_fetches = [p for p in self._parked_fetches if now_ms < p.deadline_ms]
        for fetch in due:
            response, _ = self._try_complete_fetch(fetch, now_ms)
            self._respond(fetch.token, response)

    # ==========================================================================================
    # Fetch (follower side)
    # ==========================================================================================
    def _handle_fetch_response(self, inflight: _Inflight, response: Any, now_ms: int) -> bool:
        if response.error_code != ErrorCode.none or len(response.responses) != 1:
            return False
        partitions = response.responses[0].partitions
        if len(partitions) != 1:
            return False
        partition = partitions[0]
        leader_id = _optional_id(partition.current_leader.leader_id)
        epoch = int(partition.current_leader.leader_epoch)
        handled = self._maybe_handle_common_response(
            error=partition.error_code,
            leader_id=leader_id,
            epoch=epoch,
            endpoints=_response_endpoints(response, leader_id, self._config.controller_listener_name),
            now_ms=now_ms,
        )
        if handled is not None:
            # An error answer (a bootstrap server that could not name a leader, a resigned leader)
            # is retried only after the backoff, even when it taught us a new leader.
            return handled and isinstance(self._quorum.state, FollowerState) and partition.error_code == ErrorCode.none
        state = self._quorum.state
        if partition.error_code != ErrorCode.none or not isinstance(state, FollowerState):
            return False
        if inflight.destination_id != state.leader_id or epoch != state.epoch:
            return True  # answered by a bootstrap server or for an older epoch: nothing to apply
        diverging = partition.diverging_epoch
        snapshot = partition.snapshot_id
        if diverging.epoch != -1 or diverging.end_offset != -1:
            self._truncate_to_diverging(OffsetAndEpoch(epoch=int(diverging.epoch), offset=int(diverging.end_offset)))
        elif snapshot.epoch != -1 or snapshot.end_offset != -1:
            state.snapshot_download = SnapshotDownload(OffsetAndEpoch(epoch=int(snapshot.epoch), offset=int(snapshot.end_offset)))
        else:
            records = bytes(partition.records or b"")
            if records and not self._append_as_follower(records, now_ms):
                return False
            leader_hwm = int(partition.high_watermark)
            if leader_hwm >= 0:
                self._update_follower_hwm(min(leader_hwm, self._log.end_offset().offset))
        state.has_fetched_from_leader = True
        state.leader_connection_broken = False
        state.fetch_deadline_ms = now_ms + self._config.fetch_timeout_ms
        return True

    def _append_as_follower(self, records: bytes, now_ms: int) -> bool:
        try:
            batches = parse_batches(records)
        except ValueError:
            return False
        end = self._log.end_offset().offset
        # Whole batches the log already holds are skipped; the rest must start at the end.
        fresh = [b for b in batches if b.base_offset >= end]
        if not fresh or fresh[0].base_offset != end:
            return bool(batches) and not fresh
        # Flushed by the driver (`Output.flush`); the next Fetch, whose fetch offset the leader
        # counts toward the high watermark, waits for that flush (`_poll_follower`).
        appended = self._log.append(b"".join(b.raw for b in fresh))
        if self._history.replay(appended):
            self._on_voter_set_changed(now_ms)
        return True

    def _update_follower_hwm(self, new_hwm: int) -> None:
        if self._hwm is not None:
            require(new_hwm >= self._hwm or new_hwm < 0, f"high watermark would move back from {self._hwm} to {new_hwm}")
            if new_hwm <= self._hwm:
                return
        self._hwm = new_hwm

    def _truncate_to_diverging(self, diverging: OffsetAndEpoch) -> None:
        hwm = self._hwm
        require(
            hwm is None or diverging.offset >= hwm,
            f"asked to truncate to {diverging.offset}, below the high watermark {hwm}",
        )
        if diverging.epoch == 0:
            truncation = min(diverging.offset, self._log.end_offset().offset)
        else:
            local = self._log.end_offset_for_epoch(diverging.epoch)
            truncation = min(local.offset, diverging.offset) if local.epoch == diverging.epoch else local.offset
        require(hwm is None or truncation >= hwm, f"truncation to {truncation} would drop committed data below {hwm}")
        self._log.truncate_to(truncation)
        self._on_truncated()
        if self._history.truncate_new_entries(truncation):
            self._on_voter_set_changed(0)

    # ==========================================================================================
    # FetchSnapshot
    # ==========================================================================================
    def _handle_fetch_snapshot_request(self, request: Any, token: int, now_ms: int) -> Any:
        listener = self._config.controller_listener_name

        def reply(
            error: ErrorCode,
            *,
            snapshot_id: OffsetAndEpoch = _NO_SNAPSHOT,
            size: int = -1,
            position: int = -1,
            data: bytes = b"",
            top: ErrorCode = ErrorCode.none,
        ) -> Any:
            return messages.fetch_snapshot_response(
                error=error, leader_id=self.leader_id, epoch=self.epoch, snapshot_id=snapshot_id, size=size,
                position=position, data=data, endpoints=self._leader_endpoints(), listener=listener,
                top_level_error=top,
            )

        if not self._check_cluster_id(request.cluster_id):
            return reply(ErrorCode.none, top=ErrorCode.inconsistent_cluster_id)
        partition = _single_partition(request.topics, "name", "partition")
        if partition is None:
            return reply(ErrorCode.none, top=ErrorCode.invalid_request)
        error = self._validate_leader_only(int(partition.current_leader_epoch))
        if error is not None:
            return reply(error)
        snapshot_id = OffsetAndEpoch(epoch=int(partition.snapshot_id.epoch), offset=int(partition.snapshot_id.end_offset))
        size = self._log.snapshot_size(snapshot_id)
        if size is None:
            return reply(ErrorCode.snapshot_not_found, snapshot_id=snapshot_id)
        position = int(partition.position)
        if position < 0 or position >= size:
            return reply(ErrorCode.position_out_of_range, snapshot_id=snapshot_id)
        max_bytes = min(int(request.max_bytes), self._config.fetch_snapshot_max_bytes)
        data = self._log.read_snapshot(snapshot_id, position, max_bytes)
        state = self._quorum.state
        if isinstance(state, LeaderState):
            state.record_voter_fetch(ReplicaKey.of(int(request.replica_id), partition.replica_directory_id), now_ms=now_ms)
        return reply(ErrorCode.none, snapshot_id=snapshot_id, size=size, position=position, data=data)

    def _handle_fetch_snapshot_response(self, inflight: _Inflight, response: Any, now_ms: int) -> bool:
        if response.error_code != ErrorCode.none:
            return False
        partition = _single_partition(response.topics, "name", "index")
        if partition is None:
            return False
        leader_id = _optional_id(partition.current_leader.leader_id)
        handled = self._maybe_handle_common_response(
            error=partition.error_code,
            leader_id=leader_id,
            epoch=int(partition.current_leader.leader_epoch),
            endpoints=_response_endpoints(response, leader_id, self._config.controller_listener_name),
            now_ms=now_ms,
        )
        if handled is not None:
            return handled
        state = self._quorum.state
        if not isinstance(state, FollowerState) or state.snapshot_download is None:
            return True
        download = state.snapshot_download
        if partition.error_code in (ErrorCode.snapshot_not_found, ErrorCode.position_out_of_range):
            # The leader cleaned that snapshot meanwhile: start over with a plain Fetch.
            state.snapshot_download = None
            return True
        if partition.error_code != ErrorCode.none:
            return False
        received = OffsetAndEpoch(epoch=int(partition.snapshot_id.epoch), offset=int(partition.snapshot_id.end_offset))
        if received != download.snapshot_id or int(partition.position) != len(download.data):
            return False
        download.data.extend(bytes(partition.unaligned_records))
        state.fetch_deadline_ms = now_ms + self._config.fetch_timeout_ms
        size = int(partition.size)
        if len(download.data) > size:
            state.snapshot_download = None
            return False
        if len(download.data) == size:
            state.snapshot_download = None
            self._install_snapshot(download.snapshot_id, bytes(download.data), now_ms)
        return True

    def _install_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes, now_ms: int) -> None:
        """Freeze a downloaded snapshot, empty the log down to it, and reload the voter history."""
        try:
            parse_batches(data)
        except ValueError:
            return
        self._log.store_snapshot(snapshot_id, data)
        self._log.truncate_to_latest_snapshot()
        self._on_truncated()
        # Older snapshots now lie before the log start; nothing can ever read them again.
        for old in self._log.snapshot_ids():
            if old.offset < snapshot_id.offset:
                self._log.delete_snapshot(old)
        self._load_control_state()
        self._on_voter_set_changed(now_ms)
        # A snapshot only ever covers committed offsets.
        if self._hwm is None or snapshot_id.offset > self._hwm:
            self._hwm = snapshot_id.offset

    # ==========================================================================================
    # DescribeQuorum
    # ==========================================================================================
    def _handle_describe_quorum_request(self, request: Any, token: int, now_ms: int) -> Any:
        from kio.schema.describe_quorum.v2 import response as describe

        partition = _single_partition(request.topics, "topic_name", "partition_index")
        if partition is None:
            return messages.describe_quorum_error(ErrorCode.invalid_request, "expected one partition of __cluster_metadata")
        state = self._quorum.state

        def wrap(partition_data: Any, nodes: tuple[Any, ...]) -> Any:
            return describe.DescribeQuorumResponse(
                error_code=ErrorCode.none,
                error_message=None,
                topics=(describe.TopicData(topic_name=messages.METADATA_TOPIC, partitions=(partition_data,)),),
                nodes=nodes,
            )

        if not isinstance(state, LeaderState):
            return wrap(
                describe.PartitionData(
                    partition_index=i32(messages.METADATA_PARTITION),
                    error_code=ErrorCode.not_leader_or_follower,
                    error_message=ErrorCode.not_leader_or_follower.name,
                    leader_id=BrokerId(-1 if self.leader_id is None else self.leader_id),
                    leader_epoch=i32(self.epoch),
                    high_watermark=i64(-1),
                    current_voters=(),
                    observers=(),
                ),
                (),
            )
        end = self._log.end_offset().offset

        def replica(key: ReplicaKey, log_end: int | None, fetch_ms: int, caught_up_ms: int) -> Any:
            return describe.ReplicaState(
                replica_id=BrokerId(key.id),
                replica_directory_id=messages.wire_directory(key.directory_id),
                log_end_offset=i64(-1 if log_end is None else log_end),
                last_fetch_timestamp=i64(fetch_ms),
                last_caught_up_timestamp=i64(caught_up_ms),
            )

        voters = []
        for voter_id, rs in sorted(state.voter_states.items()):
            if voter_id == self.node_id:
                voters.append(replica(rs.key, end, now_ms, now_ms))
            else:
                voters.append(replica(rs.key, rs.end_offset, rs.last_fetch_timestamp_ms, rs.last_caught_up_timestamp_ms))
        observers = [
            replica(key, rs.end_offset, rs.last_fetch_timestamp_ms, rs.last_caught_up_timestamp_ms)
            for key, rs in sorted(state.observer_states.items(), key=lambda item: item[0].id)
        ]
        nodes = tuple(
            describe.Node(
                node_id=BrokerId(v.key.id),
                listeners=tuple(describe.Listener(name=e.name, host=e.host, port=e.port) for e in v.endpoints),  # type: ignore[arg-type]
            )
            for v in self.voters
        )
        return wrap(
            describe.PartitionData(
                partition_index=i32(messages.METADATA_PARTITION),
                error_code=ErrorCode.none,
                error_message=None,
                leader_id=BrokerId(self.node_id),
                leader_epoch=i32(state.epoch),
                high_watermark=i64(-1 if state.high_watermark is None else state.high_watermark),
                current_voters=tuple(voters),
                observers=tuple(observers),
            ),
            nodes,
        )

    # ==========================================================================================
    # Listener (handleLoadSnapshot / handleCommit / handleLeaderChange)
    # ==========================================================================================
    def _listener_behind(self) -> bool:
        hwm = self.high_watermark
        next_offset = self._listener_next_offset
        if next_offset is None:
            return True
        if next_offset < self._log.log_start_offset:
            return True
        return hwm is not None and next_offset < hwm

    def _poll_listener(self) -> None:
        snapshots = self._log.snapshot_ids()
        next_offset = self._listener_next_offset
        if next_offset is None or next_offset < self._log.log_start_offset:
            if snapshots and (next_offset is None or next_offset < snapshots[-1].offset):
                self._out.events.append(self._snapshot_load(snapshots[-1]))
                next_offset = snapshots[-1].offset
            else:
                next_offset = self._log.log_start_offset if next_offset is None else next_offset
        hwm = self.high_watermark
        if hwm is not None and next_offset < hwm:
            data = self._log.read(next_offset, _LISTENER_BATCH_BYTES)
            for batch in parse_batches(data):
                if batch.last_offset >= hwm or batch.next_offset <= next_offset:
                    if batch.last_offset >= hwm:
                        break
                    continue
                self._out.events.append(CommittedBatch.of(batch))
                next_offset = batch.next_offset
        self._listener_next_offset = next_offset
        current = self.leader_and_epoch
        if current != self._last_fired_leader:
            state = self._quorum.state
            if isinstance(state, LeaderState) and next_offset < state.epoch_start_offset:
                return  # a new leader is announced only once the listener has caught up to its epoch
            self._last_fired_leader = current
            self._out.events.append(LeaderChange(current))

    def _snapshot_load(self, snapshot_id: OffsetAndEpoch) -> SnapshotLoad:
        size = self._log.snapshot_size(snapshot_id) or 0
        batches = parse_batches(self._log.read_snapshot(snapshot_id, 0, size))
        timestamp_ms = -1
        for batch in batches:
            for record in batch.control_records:
                if isinstance(record, SnapshotHeaderRecord):
                    timestamp_ms = int(record.last_contained_log_timestamp)
        return SnapshotLoad(
            snapshot_id=snapshot_id,
            last_contained_log_timestamp_ms=timestamp_ms,
            batches=tuple(CommittedBatch.of(b) for b in batches),
        )

    # ==========================================================================================
    # Control-record state (voters, kraft.version) and snapshots
    # ==========================================================================================
    def _load_control_state(self) -> None:
        """Rebuild the voter history from the latest snapshot plus the whole log after it."""
        self._history.clear()
        snapshots = self._log.snapshot_ids()
        if snapshots:
            latest = snapshots[-1]
            size = self._log.snapshot_size(latest) or 0
            voters: VoterSet | None = None
            version: int | None = None
            for batch in parse_batches(self._log.read_snapshot(latest, 0, size)):
                for record in batch.control_records:
                    if isinstance(record, VotersRecord):
                        voters = VoterSet.from_record(record)
                    elif isinstance(record, KRaftVersionRecord):
                        version = int(record.k_raft_version)
            at = latest.offset - 1
            if voters is not None:
                self._history.clear_voters()
                self._history.add_voter_set(at, voters)
            if version is not None:
                self._history.add_kraft_version(at, version)
        # The snapshot already holds every control record before its offset; replay only the rest.
        offset = max(self._log.log_start_offset, snapshots[-1].offset if snapshots else 0)
        end = self._log.end_offset().offset
        while offset < end:
            batches = [b for b in parse_batches(self._log.read(offset, _LISTENER_BATCH_BYTES)) if b.base_offset >= offset]
            if not batches:
                break
            self._history.replay(batches)
            offset = batches[-1].next_offset

    def _on_voter_set_changed(self, now_ms: int) -> None:
        state = self._quorum.state
        if isinstance(state, LeaderState) and state.update_voters(self.voters, now_ms=now_ms):
            self._on_leader_hwm_advanced(state, now_ms)

    def _epoch_of_offset(self, offset: int) -> int | None:
        """Epoch of the batch ending exactly at `offset` (a snapshot must end on a batch boundary)."""
        for snapshot_id in self._log.snapshot_ids():
            if snapshot_id.offset == offset + 1:
                return snapshot_id.epoch
        if offset < self._log.log_start_offset:
            return None
        for batch in parse_batches(self._log.read(offset, 1)):
            if batch.base_offset <= offset <= batch.last_offset:
                return batch.epoch if batch.last_offset == offset else None
        return None

    def _maybe_clean(self, now_ms: int) -> None:
        """Retention (KafkaRaftLog.maybeClean). Above `retention_max_bytes` the log prefix and every
        older snapshot behind the latest snapshot go; snapshots whose last contained record is older
        than `retention_max_ms` go with the log before the next snapshot. The latest snapshot is
        always kept, and nothing above the high watermark is dropped."""
        self._next_clean_ms = now_ms + _CLEAN_INTERVAL_MS
        snapshots = self._log.snapshot_ids()
        hwm = self.high_watermark
        if not snapshots or hwm is None:
            return
        total = self._log.size_in_bytes() + sum(self._log.snapshot_size(s) or 0 for s in snapshots)
        max_bytes, max_ms = self._config.retention_max_bytes, self._config.retention_max_ms
        # A negative limit means unlimited, as in Kafka.
        if 0 <= max_bytes < total:
            keep = snapshots[-1]
        else:
            expired = [
                i for i, s in enumerate(snapshots[:-1])
                if max_ms >= 0 and self._snapshot_timestamp_ms(s) < now_ms - max_ms
            ]
            if not expired:
                return
            keep = snapshots[expired[-1] + 1]
        if keep.offset > hwm:
            return
        if keep.offset > self._log.log_start_offset:
            self._log.delete_before(keep.offset)
        for old in snapshots:
            if old.offset < keep.offset or (old.offset == keep.offset and old != keep):
                self._log.delete_snapshot(old)
        self._history.truncate_old_entries(keep.offset - 1)

    def _snapshot_timestamp_ms(self, snapshot_id: OffsetAndEpoch) -> int:
        """The SnapshotHeaderRecord's last contained log timestamp (-1 if it has none)."""
        head = self._log.read_snapshot(snapshot_id, 0, 12)
        if len(head) < 12:
            return -1
        size = 12 + int.from_bytes(head[8:12], "big", signed=True)
        for batch in parse_batches(self._log.read_snapshot(snapshot_id, 0, size)):
            for record in batch.control_records:
                if isinstance(record, SnapshotHeaderRecord):
                    return int(record.last_contained_log_timestamp)
        return -1

    # ==========================================================================================
    # KIP-853: AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter, auto-join, kraft.version upgrade
    # ==========================================================================================
    def _membership_gate(self, state: LeaderState) -> ErrorCode | None:
        """The gates every voter change passes first, in Kafka's order."""
        if self._voter_change is not None or state.high_watermark is None:
            return ErrorCode.request_timed_out
        if self.kraft_version < KRAFT_VERSION_1:
            return ErrorCode.unsupported_version
        latest = self._history.latest_voter_set_offset()
        if latest is not None and latest >= state.high_watermark:
            return ErrorCode.request_timed_out  # the previous change has not committed yet
        return None

    def _handle_add_voter_request(self, request: Any, token: int, now_ms: int) -> Any:
        if not self._check_cluster_id(request.cluster_id):
            return messages.add_voter_response(ErrorCode.inconsistent_cluster_id)
        state = self._quorum.state
        if not isinstance(state, LeaderState) or self._shutdown is not None:
            return messages.add_voter_response(ErrorCode.not_leader_or_follower)
        key = ReplicaKey.of(int(request.voter_id), request.voter_directory_id)
        endpoints = tuple(Endpoint(e.name, e.host, int(e.port)) for e in request.listeners)
        if key.id < 0 or key.directory_id is None or not endpoints:
            return messages.add_voter_response(ErrorCode.invalid_request, "a voter needs an id, a directory id and listeners")
        error = self._membership_gate(state)
        if error is not None:
            return messages.add_voter_response(error)
        if key.id in self.voters.ids:
            return messages.add_voter_response(ErrorCode.duplicate_voter, f"voter id {key.id} is already a voter")
        timeout_ms = max(int(request.timeout.total_seconds() * 1000), 0) or self._config.request_timeout_ms
        change = _VoterChange(
            kind="add", token=token, key=key, endpoints=endpoints, deadline_ms=now_ms + timeout_ms, epoch=state.epoch
        )
        # Learn which kraft.version range the new voter supports before trusting it with a vote.
        change.api_versions_token = self._send_unconditionally(key.id, endpoints, messages.api_versions_request(), now_ms)
        self._voter_change = change
        return None

    def _handle_api_versions_response(self, inflight: _Inflight, response: Any, now_ms: int) -> bool:
        change = self._voter_change
        state = self._quorum.state
        if change is None or change.api_versions_token != inflight.token or not isinstance(state, LeaderState):
            return True
        change.api_versions_token = None
        if response.error_code != ErrorCode.none:
            self._finish_voter_change(ErrorCode.request_timed_out, "ApiVersions to the new voter failed")
            return False
        feature = next((f for f in response.supported_features if f.name == "kraft.version"), None)
        finalized = self.kraft_version
        if feature is None or not int(feature.min_version) <= finalized <= int(feature.max_version):
            self._finish_voter_change(ErrorCode.invalid_request, f"the new voter does not support kraft.version {finalized}")
            return True
        if not state.is_replica_caught_up(change.key, now_ms=now_ms):
            self._finish_voter_change(ErrorCode.request_timed_out, f"replica {change.key} is not caught up to the leader")
            return True
        voter = VoterNode(
            key=change.key,
            endpoints=change.endpoints,
            min_kraft_version=int(feature.min_version),
            max_kraft_version=int(feature.max_version),
        )
        self._append_voters(state, self.voters.with_voter(voter), change, now_ms)
        return True

    def _handle_remove_voter_request(self, request: Any, token: int, now_ms: int) -> Any:
        if not self._check_cluster_id(request.cluster_id):
            return messages.remove_voter_response(ErrorCode.inconsistent_cluster_id)
        state = self._quorum.state
        if not isinstance(state, LeaderState) or self._shutdown is not None:
            return messages.remove_voter_response(ErrorCode.not_leader_or_follower)
        key = ReplicaKey.of(int(request.voter_id), request.voter_directory_id)
        error = self._membership_gate(state)
        if error is not None:
            return messages.remove_voter_response(error)
        voters = self.voters
        voter = voters.get(key.id)
        if voter is None or voter.key != key:
            return messages.remove_voter_response(ErrorCode.voter_not_found, f"{key} is not a voter")
        if len(voters) == 1:
            return messages.remove_voter_response(ErrorCode.invalid_request, "cannot remove the last voter")
        change = _VoterChange(kind="remove", token=token, key=key, endpoints=(), deadline_ms=_NEVER, epoch=state.epoch)
        self._voter_change = change
        self._append_voters(state, voters.without_voter(key), change, now_ms)
        return None

    def _handle_update_voter_request(self, request: Any, token: int, now_ms: int) -> Any:
        def reply(error: ErrorCode) -> Any:
            return messages.update_voter_response(
                error=error, leader_id=self.leader_id, epoch=self.epoch, endpoints=self._leader_endpoints(),
                listener=self._config.controller_listener_name,
            )

        if not self._check_cluster_id(request.cluster_id):
            return reply(ErrorCode.inconsistent_cluster_id)
        error = self._validate_leader_only(int(request.current_leader_epoch))
        if error is not None:
            return reply(error)
        state = self._quorum.state
        require(isinstance(state, LeaderState), "validated leader")
        assert isinstance(state, LeaderState)
        key = ReplicaKey.of(int(request.voter_id), request.voter_directory_id)
        endpoints = tuple(Endpoint(e.name, e.host, int(e.port)) for e in request.listeners)
        feature = request.k_raft_version_feature
        low, high = int(feature.min_supported_version), int(feature.max_supported_version)
        if key.directory_id is None or not endpoints or low > high:
            return reply(ErrorCode.invalid_request)
        if self._voter_change is not None or state.high_watermark is None:
            return reply(ErrorCode.request_timed_out)
        voters = self.voters
        current = voters.get(key.id)
        if current is None or not voters.is_voter(key):
            return reply(ErrorCode.voter_not_found)
        updated = VoterNode(key=key, endpoints=endpoints, min_kraft_version=low, max_kraft_version=high)
        if self.kraft_version < KRAFT_VERSION_1:
            # Static quorum: nothing to write, but remember what the voter told us, which is what
            # the kraft.version 0 -> 1 upgrade checks (directory id and supported versions).
            self._learned_voters[key.id] = updated
            return reply(ErrorCode.none)
        if not low <= self.kraft_version <= high:
            return reply(ErrorCode.invalid_request)
        latest = self._history.latest_voter_set_offset()
        if latest is not None and latest >= state.high_watermark:
            return reply(ErrorCode.request_timed_out)
        if current == updated:
            return reply(ErrorCode.none)
        change = _VoterChange(kind="update", token=token, key=key, endpoints=endpoints, deadline_ms=_NEVER, epoch=state.epoch)
        self._voter_change = change
        self._append_voters(state, voters.with_updated_voter(updated), change, now_ms)
        return None

    def _append_voters(self, state: LeaderState, voters: VoterSet, change: _VoterChange, now_ms: int) -> None:
        """Append the new voter set; it takes effect now and the change is answered on commit."""
        change.record_offset = state.accumulator.append_control([voters.to_record()], now_ms=now_ms)
        self._drain_accumulator(state, now_ms)
        self._maybe_complete_voter_change(now_ms)

    def _maybe_complete_voter_change(self, now_ms: int) -> None:
        change = self._voter_change
        state = self._quorum.state
        if change is None or change.record_offset is None or not isinstance(state, LeaderState):
            return
        hwm = state.high_watermark
        if hwm is not None and hwm > change.record_offset:
            self._finish_voter_change(ErrorCode.none, None)
            if change.kind == "remove" and not self.voters.is_voter(self._local_key):
                # A leader that removed itself steps down once the removal is committed.
                state.resign_requested = True

    def _finish_voter_change(self, error: ErrorCode, message: str | None) -> None:
        change = self._voter_change
        if change is None:
            return
        self._voter_change = None
        if change.kind == "add":
            self._respond(change.token, messages.add_voter_response(error, message))
        elif change.kind == "remove":
            self._respond(change.token, messages.remove_voter_response(error, message))
        else:
            self._respond(
                change.token,
                messages.update_voter_response(
                    error=error, leader_id=self.leader_id, epoch=self.epoch, endpoints=self._leader_endpoints(),
                    listener=self._config.controller_listener_name,
                ),
            )

    def _send_unconditionally(self, destination_id: int, endpoints: tuple[Endpoint, ...], request: Any, now_ms: int) -> int | None:
        connection = self._connection(destination_id)
        connection.backoff_until_ms = 0
        if connection.inflight_token is not None:
            self._inflight.pop(connection.inflight_token, None)
            connection.inflight_token = None
        return self._send(destination_id, endpoints, request, now_ms)

    def _fail_voter_change_on(self, inflight: _Inflight, failure: RequestFailure, now_ms: int) -> None:
        change = self._voter_change
        if change is not None and change.api_versions_token == inflight.token:
            change.api_versions_token = None
            self._finish_voter_change(ErrorCode.request_timed_out, f"the new voter did not answer ApiVersions: {failure.value}")

    def _membership_deadlines(self, now_ms: int) -> list[int]:
        deadlines = []
        if self._voter_change is not None and self._voter_change.record_offset is None:
            # Once the VotersRecord is written the change ends with its commit (the high watermark
            # wakes us) or with the leadership; its deadline no longer applies (`_poll_voter_change`),
            # and asking to be polled at it again would spin.
            deadlines.append(self._voter_change.deadline_ms)
        state = self._quorum.state
        if isinstance(state, FollowerState) and self._wants_membership_request(state):
            deadlines.append(max(state.update_voter_deadline_ms, self._ready_at(now_ms, state.leader_id)))
        return deadlines

    def _poll_voter_change(self, now_ms: int) -> None:
        change = self._voter_change
        if change is not None:
            if change.epoch != self.epoch or not isinstance(self._quorum.state, LeaderState):
                self._finish_voter_change(ErrorCode.not_leader_or_follower, "leadership changed")
            elif now_ms >= change.deadline_ms and change.record_offset is None:
                self._finish_voter_change(ErrorCode.request_timed_out, "timed out")
            else:
                self._maybe_complete_voter_change(now_ms)

    def _wants_membership_request(self, state: FollowerState) -> bool:
        return (
            state.has_fetched_from_leader
            and state.update_voter_deadline_ms < _NEVER
            and self._membership_request(state) is not None
        )

    def _membership_request(self, state: FollowerState) -> Any:
        """UpdateRaftVoter for a voter whose recorded endpoints/versions drifted; AddRaftVoter
        (or RemoveRaftVoter of a stale same-id entry) for an auto-joining observer."""
        if not state.has_fetched_from_leader or not self._local_endpoints:
            return None
        voters = self.voters
        low, high = self._supported_kraft_versions
        if voters.is_voter(self._local_key):
            recorded = voters.get(self.node_id)
            assert recorded is not None
            drifted = (
                recorded.endpoints != self._local_endpoints
                or (recorded.min_kraft_version, recorded.max_kraft_version) != (low, high)
                or recorded.key.directory_id is None
            )
            if not drifted or self._local_key.directory_id is None:
                state.update_voter_deadline_ms = _NEVER
                return None
            return messages.update_voter_request(
                cluster_id=self._cluster_id, epoch=state.epoch, voter=self._local_key, endpoints=self._local_endpoints,
                min_kraft_version=low, max_kraft_version=high,
            )
        if not self._config.auto_join_enable or self._local_key.directory_id is None:
            state.update_voter_deadline_ms = _NEVER
            return None
        if self.kraft_version < KRAFT_VERSION_1:
            return None
        stale = voters.get(self.node_id)
        if stale is not None:
            # Our id is a voter with another directory (we were re-formatted): remove that entry first.
            return messages.remove_voter_request(cluster_id=self._cluster_id, voter=stale.key)
        return messages.add_voter_request(
            cluster_id=self._cluster_id, voter=self._local_key, endpoints=self._local_endpoints,
            timeout_ms=self._config.request_timeout_ms,
        )

    def _handle_membership_response(self, inflight: _Inflight, response: Any, now_ms: int) -> bool:
        state = self._quorum.state
        if response.error_code == ErrorCode.none and isinstance(state, FollowerState) and inflight.api_key == _API_UPDATE_RAFT_VOTER:
            state.update_voter_deadline_ms = _NEVER
        return bool(response.error_code == ErrorCode.none)

    def upgrade_kraft_version(self, epoch: int, version: int, *, validate_only: bool, now_ms: int) -> Output:
        """Finalize kraft.version `version` (the controller's UpdateFeatures calls this).

        0 -> 1 requires every voter to support version 1 and to have a known directory id (learned
        from its Fetches and UpdateRaftVoter); it writes a KRaftVersionRecord and the first
        VotersRecord. Raises NotLeaderError or KRaftVersionUpgradeError.
        """
        state = self._quorum.state
        if not isinstance(state, LeaderState) or state.epoch != epoch:
            raise NotLeaderError(f"node {self.node_id} is not the leader of epoch {epoch}")
        current = self.kraft_version
        if version == current:
            return self._finish(now_ms)
        if version < current:
            raise KRaftVersionUpgradeError(f"kraft.version cannot be downgraded from {current} to {version}")
        if version != KRAFT_VERSION_1:
            raise KRaftVersionUpgradeError(f"kraft.version {version} is not supported")
        if self._voter_change is not None or state.high_watermark is None:
            raise KRaftVersionUpgradeError("a voter change is in progress; retry")
        low, high = self._supported_kraft_versions
        upgraded = []
        for voter in self.voters:
            if voter.key.id == self.node_id:
                learned: VoterNode | None = VoterNode(
                    key=self._local_key, endpoints=self._local_endpoints or voter.endpoints,
                    min_kraft_version=low, max_kraft_version=high,
                )
            else:
                learned = self._learned_voters.get(voter.key.id)
            if learned is None or learned.key.directory_id is None:
                raise KRaftVersionUpgradeError(f"voter {voter.key.id} has no known directory id")
            if not learned.supports_kraft_version(version):
                raise KRaftVersionUpgradeError(f"voter {voter.key.id} does not support kraft.version {version}")
            upgraded.append(learned)
        if validate_only:
            return self._finish(now_ms)
        state.accumulator.append_control(
            [KRaftVersionRecord(version=i16(0), k_raft_version=i16(version)), VoterSet(upgraded).to_record()], now_ms=now_ms
        )
        self._drain_accumulator(state, now_ms)
        return self._finish(now_ms)


@dataclass(slots=True)
class _VoterChange:
    """The one voter change a leader works on at a time."""

    kind: str
    token: int
    key: ReplicaKey
    endpoints: tuple[Endpoint, ...]
    deadline_ms: int
    epoch: int
    api_versions_token: int | None = None
    record_offset: int | None = None


def _single_partition(topics: Any, topic_field: str, partition_field: str) -> Any:
    """The one `__cluster_metadata`-0 partition of a request/response, or None if it is not that."""
    if len(topics) != 1 or getattr(topics[0], topic_field) != messages.METADATA_TOPIC:
        return None
    partitions = topics[0].partitions
    if len(partitions) != 1 or int(getattr(partitions[0], partition_field)) != messages.METADATA_PARTITION:
        return None
    return partitions[0]


def _optional_id(value: int) -> int | None:
    return None if int(value) < 0 else int(value)


def _response_endpoints(response: Any, leader_id: int | None, listener: str) -> tuple[Endpoint, ...]:
    """Leader endpoints from a response's node_endpoints (they belong to the listener we used)."""
    if leader_id is None:
        return ()
    return tuple(
        Endpoint(listener, n.host, int(n.port)) for n in getattr(response, "node_endpoints", ()) if int(n.node_id) == leader_id
    )

