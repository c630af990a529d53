"""One KRaft replica as a pure state machine: Kafka's KafkaRaftClient without threads or sockets.

Every entry point takes `now_ms` and returns an `Output` (see `output.py` for the order in which
the driver must perform it). Requests and responses are kio entities at the wire versions a
Kafka 4.x controller uses (see `messages.py`), so the driver only frames bytes. The node mutates
the `RaftLog` it was given in place and asks the driver to flush it (`Output.flush`); it counts
(leader) or reports (follower) only offsets a completed flush covered (`handle_log_flushed`).

The node is assembled from parts along Kafka's seams, each holding the shared `RaftContext`:
`EpochTransitions` (learning a newer epoch or leader), `Elections` (pre-vote, vote, the leader's
announcements and hand-over), `Fetching` (both sides of Fetch and FetchSnapshot, the leader's
appends), `VoterChanges` (KIP-853 and DescribeQuorum), `ListenerDelivery` (committed batches,
snapshots and leader changes to the state machine) and `Snapshotting` (snapshots and retention).
What stays here is the role loop, the public API and the wiring between the parts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from kio.schema.errors import ErrorCode
from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage
from kio.schema.leader_change_message.v0.data import Voter as LeaderChangeVoter
from kio.schema.types import BrokerId
from kio.static.primitive import i16, i32

from kraft_engine.invariant import require
from kraft_engine.raft import messages
from kraft_engine.raft.batch_accumulator import BatchAccumulator
from kraft_engine.raft.config import RaftConfig
from kraft_engine.raft.elections import Elections
from kraft_engine.raft.errors import NotLeaderError
from kraft_engine.raft.fetching import Fetching
from kraft_engine.raft.leader_state import LeaderState
from kraft_engine.raft.listener_delivery import ListenerDelivery
from kraft_engine.raft.log import RaftLog
from kraft_engine.raft.output import LeaderAndEpoch, LogFlush, Output, RequestFailure
from kraft_engine.raft.quorum_state import (
    CandidateState,
    ElectionState,
    EpochState,
    FollowerState,
    ProspectiveState,
    QuorumState,
    ResignedState,
    UnattachedState,
)
from kraft_engine.raft.replica_context import RaftContext, Shutdown
from kraft_engine.raft.request_manager import NEVER, Inflight
from kraft_engine.raft.role import Role
from kraft_engine.raft.snapshot_builder import SnapshotBuilder
from kraft_engine.raft.snapshotting import Snapshotting
from kraft_engine.raft.transitions import EpochTransitions
from kraft_engine.raft.voter_changes import VoterChanges
from kraft_engine.raft.voter_set import (
    KRAFT_VERSION_0,
    KRAFT_VERSION_1,
    Endpoint,
    ReplicaKey,
    VoterSet,
)
from kraft_engine.raft.voter_set_history import VoterSetHistory, load_control_state
from kraft_engine.records.log_batch import OffsetAndEpoch

if TYPE_CHECKING:
    import random

__all__ = ["RaftNode"]

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
        local_key = ReplicaKey.of(node_id, directory_id)
        history = VoterSetHistory(static_voters)
        load_control_state(history, log)
        quorum = QuorumState(local_key=local_key, voters=history.latest_voter_set, config=config, rng=rng)
        quorum.initialize(persisted, log_end=log.end_offset(), now_ms=now_ms)
        ctx = self._ctx = RaftContext(
            config=config,
            local_key=local_key,
            cluster_id=cluster_id,
            log=log,
            quorum=quorum,
            history=history,
            rng=rng,
            local_endpoints=local_endpoints,
            bootstrap_servers=bootstrap_servers,
            supported_kraft_versions=supported_kraft_versions,
        )
        self._quorum = quorum

        def on_following() -> None:
            self._elections.reset_retries()

        self._transitions = EpochTransitions(ctx, on_leadership_lost=self._on_leadership_lost, on_following=on_following)
        self._elections = Elections(ctx, transitions=self._transitions, become_leader=self._become_leader)
        self._fetching = Fetching(
            ctx,
            transitions=self._transitions,
            on_leader_hwm_advanced=self._on_leader_hwm_advanced,
            on_voters_changed=self._on_voter_set_changed,
        )
        self._voter_changes = VoterChanges(ctx, drain=self._fetching.drain_accumulator)
        self._listener = ListenerDelivery(ctx)
        self._snapshots = Snapshotting(ctx, now_ms=now_ms)
        # Built once: which part answers each inbound api, and handles each response.
        self._request_handlers: dict[int, Callable[[Any, int, int], Any]] = {
            _API_VOTE: self._elections.handle_vote_request,
            _API_BEGIN_QUORUM_EPOCH: self._elections.handle_begin_quorum_epoch_request,
            _API_END_QUORUM_EPOCH: self._elections.handle_end_quorum_epoch_request,
            _API_FETCH: self._fetching.handle_fetch_request,
            _API_FETCH_SNAPSHOT: self._fetching.handle_fetch_snapshot_request,
            _API_DESCRIBE_QUORUM: self._voter_changes.handle_describe_quorum_request,
            _API_ADD_RAFT_VOTER: self._voter_changes.handle_add_voter_request,
            _API_REMOVE_RAFT_VOTER: self._voter_changes.handle_remove_voter_request,
            _API_UPDATE_RAFT_VOTER: self._voter_changes.handle_update_voter_request,
        }
        self._response_handlers: dict[int, Callable[[Inflight, Any, int], bool]] = {
            _API_VOTE: self._elections.handle_vote_response,
            _API_BEGIN_QUORUM_EPOCH: self._elections.handle_begin_quorum_epoch_response,
            _API_END_QUORUM_EPOCH: self._elections.handle_end_quorum_epoch_response,
            _API_FETCH: self._fetching.handle_fetch_response,
            _API_FETCH_SNAPSHOT: self._fetching.handle_fetch_snapshot_response,
            _API_API_VERSIONS: self._voter_changes.handle_api_versions_response,
            _API_UPDATE_RAFT_VOTER: self._voter_changes.handle_membership_response,
            _API_ADD_RAFT_VOTER: self._voter_changes.handle_membership_response,
            _API_REMOVE_RAFT_VOTER: self._voter_changes.handle_membership_response,
        }
        # A single-voter quorum elects itself at once (KafkaRaftClient.initialize), including
        # after a restart as Resigned: it is the only one who could lead the next epoch.
        if self.voters.is_only_voter(local_key):
            if quorum.role is Role.CANDIDATE:
                self._elections.maybe_advance(now_ms)
            else:
                self._elections.start_prospective(now_ms)

    # ==========================================================================================
    # Introspection
    # ==========================================================================================
    @property
    def node_id(self) -> int:
        return self._ctx.node_id

    @property
    def local_key(self) -> ReplicaKey:
        return self._ctx.local_key

    @property
    def cluster_id(self) -> str:
        return self._ctx.cluster_id

    @property
    def config(self) -> RaftConfig:
        return self._ctx.config

    @property
    def log(self) -> RaftLog:
        return self._ctx.log

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
    def state(self) -> EpochState:
        """The current role's state object (UnattachedState, LeaderState, ...)."""
        return self._quorum.state

    @property
    def high_watermark(self) -> int | None:
        return self._ctx.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self._ctx.log.end_offset().offset

    @property
    def voters(self) -> VoterSet:
        """The latest voter set, including an uncommitted change (it takes effect when read)."""
        return self._ctx.voters

    @property
    def committed_voters(self) -> VoterSet:
        """The voter set as of the high watermark: what a state machine may act on, since a newer
        VotersRecord is uncommitted and may still be truncated away (the latest set while no high
        watermark is known yet)."""
        hwm = self.high_watermark
        if hwm is None:
            return self.voters
        return self._ctx.history.voter_set_at(hwm - 1)

    @property
    def kraft_version(self) -> int:
        return self._ctx.kraft_version

    @property
    def is_voter(self) -> bool:
        return self._quorum.is_voter()

    @property
    def listener_next_offset(self) -> int | None:
        return self._listener.next_offset

    @property
    def is_shutdown_complete(self) -> bool:
        shutdown = self._ctx.shutdown
        return shutdown is not None and shutdown.completed

    @property
    def served_requests(self) -> dict[int, int]:
        """{api key: version} of every request `handle_request` answers."""
        return dict(messages.SERVED_REQUESTS)

    @property
    def durable_offset(self) -> int:
        """Every offset below this is known to be flushed (a snapshot covers what is below the log start)."""
        return self._ctx.durability.offset

    def voter_set_at(self, offset: int) -> VoterSet:
        return self._ctx.history.voter_set_at(offset)

    def kraft_version_at(self, offset: int) -> int:
        return self._ctx.history.kraft_version_at(offset)

    def next_deadline_ms(self, now_ms: int) -> int:
        return self._next_deadline(now_ms)

    @property
    def drain_deadline_ms(self) -> int | None:
        """When the leader's buffered appends are due in the log (None: nothing buffered, or not
        leader). An `append` changes no other deadline, so a driver that polls by
        `next_deadline_ms` only needs to move its wake-up earlier to this after one."""
        state = self._quorum.state
        return state.accumulator.drain_deadline_ms() if isinstance(state, LeaderState) else None

    # ==========================================================================================
    # Entry points
    # ==========================================================================================
    def poll(self, now_ms: int) -> Output:
        """Fire whatever timers are due: elections, fetches, linger, resends, timeouts."""
        self._ctx.requests.expire(now_ms, lambda inflight: self._handle_failure(inflight, RequestFailure.TIMED_OUT, now_ms))
        if now_ms >= self._snapshots.next_clean_ms:
            self._snapshots.maybe_clean(now_ms)
        self._poll_state(now_ms)
        return self._finish(now_ms)

    def handle_request(self, request: messages.RaftRequest, *, token: int, now_ms: int) -> Output:
        """An inbound request; its response appears (now or later) as `OutboundResponse(token)`."""
        api_key = int(getattr(request, "__api_key__", -1))
        handler = self._request_handlers.get(api_key)
        if handler is None:
            raise ValueError(f"the raft node does not handle {type(request).__name__}")
        response = handler(request, token, now_ms)
        if response is not None:
            self._ctx.respond(token, response)
        self._poll_state(now_ms)
        return self._finish(now_ms)

    def handle_log_flushed(self, flush: LogFlush, *, now_ms: int) -> Output:
        """The driver made the log durable below `flush.end_offset` (the `Output.flush` it was given).

        The leader counts its own end offset toward the high watermark, and a follower sends its
        next Fetch (whose fetch offset the leader counts), only up to here. A flush asked for
        before a later truncation is ignored: the bytes it covered may have been replaced.
        """
        if self._ctx.durability.flushed(flush):
            state = self._quorum.state
            if isinstance(state, LeaderState) and state.update_local_state(self.durable_offset):
                self._on_leader_hwm_advanced(state, now_ms)
        self._poll_state(now_ms)
        return self._finish(now_ms)

    def handle_response(self, token: int, response: messages.SentResponse | RequestFailure, *, now_ms: int) -> Output:
        """The response to (or failure of) the request this node sent with `token`."""
        requests = self._ctx.requests
        inflight = requests.take(token)
        if inflight is None:
            # Timed out already, or a duplicate: the node has moved on.
            return self._finish(now_ms)
        connection = requests.connection(inflight.destination_id)
        if isinstance(response, RequestFailure):
            ok = self._handle_failure(inflight, response, now_ms)
        else:
            handler = self._response_handlers.get(inflight.api_key)
            ok = handler is not None and handler(inflight, response, now_ms)
        if not ok:
            connection.backoff_until_ms = now_ms + self._ctx.config.retry_backoff_ms
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
        return self.prepare_appends([records], epoch=epoch, now_ms=now_ms)[0]

    def prepare_appends(self, batches: Sequence[list[bytes]], *, epoch: int, now_ms: int) -> list[int]:
        """`prepare_append` for several batches at once, all or none, held back together until
        `schedule_prepared_append`; the last offset of each. Kafka's controller prepares each
        batch of a write in turn and schedules them once; here each call onto raft's loop is a
        thread hop, so one write's batches come in one call."""
        accumulator = self._leader_accumulator(epoch)
        require(not accumulator.holding, "a prepared append is already waiting to be scheduled")
        return accumulator.append_groups(batches, now_ms=now_ms, hold=True)

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
        if not isinstance(state, LeaderState) or state.epoch != epoch or self._ctx.shutdown is not None:
            raise NotLeaderError(
                f"node {self.node_id} is not the leader of epoch {epoch} (epoch {self.epoch}, {self.role.value})",
                leader_id=self.leader_id,
                epoch=self.epoch,
            )
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
        if self._ctx.shutdown is None:
            self._ctx.shutdown = Shutdown(deadline_ms=now_ms + timeout_ms)
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
        return self._snapshots.builder(end_offset=end_offset)

    def store_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes, *, now_ms: int) -> OffsetAndEpoch:
        """Freeze the snapshot a `snapshot_builder` laid out; retention may then clean behind it."""
        return self._snapshots.store(snapshot_id, data, now_ms=now_ms)

    def upgrade_kraft_version(self, epoch: int, version: int, *, validate_only: bool, now_ms: int) -> Output:
        """Finalize kraft.version `version` (the controller's UpdateFeatures calls this).

        0 -> 1 requires every voter to support version 1 and to have a known directory id (learned
        from its Fetches and UpdateRaftVoter); it writes a KRaftVersionRecord and the first
        VotersRecord. Raises NotLeaderError or KRaftVersionUpgradeError.
        """
        self._voter_changes.upgrade_kraft_version(epoch, version, validate_only=validate_only, now_ms=now_ms)
        return self._finish(now_ms)

    # ==========================================================================================
    # Output assembly and deadlines
    # ==========================================================================================
    def _finish(self, now_ms: int) -> Output:
        self._listener.poll()
        self._maybe_complete_shutdown(now_ms)
        out = self._ctx.outbox.take()
        out.flush = self._ctx.durability.flush_due()
        out.persist = self._quorum.pending_persist
        self._quorum.pending_persist = None
        out.next_deadline_ms = self._next_deadline(now_ms)
        out.shutdown_complete = self.is_shutdown_complete
        return out

    def _next_deadline(self, now_ms: int) -> int:
        ctx = self._ctx
        deadlines = list(ctx.requests.deadlines())
        deadlines.extend(self._fetching.deadlines())
        deadlines.extend(self._elections.deadlines(now_ms))
        state = self._quorum.state
        if isinstance(state, LeaderState):
            if state.check_quorum_deadline_ms is not None:
                deadlines.append(state.check_quorum_deadline_ms)
            drain = state.accumulator.drain_deadline_ms()
            if drain is not None:
                deadlines.append(drain)
            if state.resign_requested:
                deadlines.append(now_ms)
        elif isinstance(state, FollowerState):
            deadlines.append(state.fetch_deadline_ms)
            deadlines.extend(self._fetching.follower_deadlines(state, now_ms))
        elif isinstance(state, UnattachedState):
            if self._quorum.is_voter():
                deadlines.append(state.election_deadline_ms)
            deadlines.extend(self._fetching.bootstrap_deadlines(state, now_ms))
        if self._listener.is_behind():
            deadlines.append(now_ms)
        if ctx.shutdown is not None and not ctx.shutdown.completed:
            deadlines.append(ctx.shutdown.deadline_ms)
        deadlines.extend(self._voter_changes.deadlines(now_ms))
        deadlines.append(self._snapshots.next_clean_ms)
        return max(min(deadlines, default=NEVER), now_ms)

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
                self._elections.poll_candidate(state, now_ms)
            elif isinstance(state, ProspectiveState):
                self._elections.poll_prospective(state, now_ms)
            elif isinstance(state, UnattachedState):
                self._poll_unattached(state, now_ms)
            elif isinstance(state, ResignedState):
                self._elections.poll_resigned(state, now_ms)
            self._fetching.expire_parked_fetches(now_ms)
            self._voter_changes.poll(now_ms)
            if (self._quorum.role, self._quorum.epoch) == before:
                return

    def _poll_leader(self, state: LeaderState, now_ms: int) -> None:
        if state.resign_requested or self._ctx.shutdown is not None or (
            state.check_quorum_expired(now_ms) and not self.voters.is_only_voter(self.local_key)
        ):
            self._resign(state, now_ms)
            return
        if state.accumulator.needs_drain(now_ms):
            # One Fetch's worth per poll: a large write (a fence at 100k partitions is ~5 MB)
            # reaches the log and the followers in steps, with Fetches answered in between.
            self._fetching.drain_accumulator(state, now_ms, max_bytes=self._ctx.config.fetch_max_bytes)
        state.expire_observers(now_ms=now_ms)
        self._elections.send_begin_quorum_epoch(state, now_ms)

    def _poll_follower(self, state: FollowerState, now_ms: int) -> None:
        if now_ms >= state.fetch_deadline_ms:
            if self._quorum.is_voter():
                self._elections.start_prospective(now_ms)
            else:
                # An observer that lost its leader goes back to discovering one.
                self._quorum.transition_to_unattached(state.epoch, now_ms=now_ms, forget_leader=True)
                self._ctx.requests.reset()
            return
        if self._voter_changes.maybe_send_membership_request(state, now_ms):
            return
        self._fetching.send_fetch(state, now_ms)

    def _poll_unattached(self, state: UnattachedState, now_ms: int) -> None:
        if self._quorum.is_voter() and now_ms >= state.election_deadline_ms:
            self._elections.start_prospective(now_ms)
            return
        self._fetching.send_bootstrap_fetch(state, now_ms)

    def _maybe_complete_shutdown(self, now_ms: int) -> None:
        shutdown = self._ctx.shutdown
        if shutdown is None or shutdown.completed:
            return
        state = self._quorum.state
        remote_leader = self.leader_id is not None and self.leader_id != self.node_id
        if (
            not self._quorum.is_voter()
            or self.voters.is_only_voter(self.local_key)
            or (remote_leader and not isinstance(state, ResignedState))
            or now_ms >= shutdown.deadline_ms
        ):
            shutdown.completed = True

    # ==========================================================================================
    # Leadership: start, commit progress, end
    # ==========================================================================================
    def _become_leader(self, now_ms: int) -> None:
        state = self._quorum.state
        require(isinstance(state, CandidateState), "only a candidate becomes leader")
        granted = state.election.granted if isinstance(state, CandidateState) else frozenset()
        log = self._ctx.log
        leader = self._quorum.transition_to_leader(epoch_start_offset=log.end_offset().offset, now_ms=now_ms)
        self._ctx.requests.reset()
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
        latest_voters_offset = self._ctx.history.latest_voter_set_offset()
        if self.kraft_version >= KRAFT_VERSION_1 and (latest_voters_offset is None or latest_voters_offset < 0):
            # The voter set is only in the bootstrap checkpoint, which is never replicated: write
            # it into the log so that observers and new voters learn it by fetching.
            start_records.append(KRaftVersionRecord(version=i16(0), k_raft_version=i16(self.kraft_version)))
            start_records.append(voters.to_record())
        leader.accumulator.append_control(start_records, now_ms=now_ms)
        self._fetching.drain_accumulator(leader, now_ms)
        self._voter_changes.on_leader_start()

    def _on_leader_hwm_advanced(self, state: LeaderState, now_ms: int) -> None:
        if state.high_watermark is not None:
            self._ctx.hwm = state.high_watermark
        self._fetching.complete_parked_fetches(now_ms)
        self._voter_changes.maybe_complete(now_ms)

    def _on_voter_set_changed(self, now_ms: int) -> None:
        state = self._quorum.state
        if isinstance(state, LeaderState) and state.update_voters(self.voters, now_ms=now_ms):
            self._on_leader_hwm_advanced(state, now_ms)

    def _resign(self, state: LeaderState, now_ms: int) -> None:
        # Whatever the state machine handed us is written before we step down (it may still commit).
        if not state.accumulator.is_empty():
            self._fetching.drain_accumulator(state, now_ms)
        successors = state.voters_by_descending_fetch_offset()
        self._quorum.transition_to_resigned(successors, now_ms=now_ms)
        self._on_leadership_lost(now_ms)

    def _on_leadership_lost(self, now_ms: int) -> None:
        self._fetching.complete_parked_fetches(now_ms)
        self._ctx.requests.reset()
        self._voter_changes.finish(ErrorCode.not_leader_or_follower, "leadership changed")

    def _handle_failure(self, inflight: Inflight, failure: RequestFailure, now_ms: int) -> bool:
        if (
            inflight.api_key == _API_VOTE
            and failure is RequestFailure.UNSUPPORTED_VERSION
            and self._elections.on_vote_unsupported(inflight, now_ms)
        ):
            return True
        self._voter_changes.on_failure(inflight, failure)
        if failure is RequestFailure.DISCONNECTED:
            return self._elections.maybe_fail_over(inflight, now_ms)
        return False
