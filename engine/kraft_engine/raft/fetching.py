"""Pull replication: the leader appends the accumulator's batches and answers Fetch and
FetchSnapshot (parking a Fetch with nothing new until data, a new high watermark or its max
wait); the follower fetches, appends, truncates to a diverging epoch and downloads snapshots.

Kafka splits the same work between KafkaRaftClient's handleFetchRequest / handleFetchResponse /
handleFetchSnapshot* and its LeaderState / FollowerState; here it is one part of the node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v18 import request as fetch_req
from kio.schema.fetch.v18 import response as fetch_resp
from kio.schema.fetch_snapshot.v1 import request as snap_req
from kio.schema.fetch_snapshot.v1 import response as snap_resp

from kraft_engine.invariant import require
from kraft_engine.raft import messages
from kraft_engine.raft.leader_state import LeaderState
from kraft_engine.raft.log import BOOTSTRAP_SNAPSHOT_ID, ValidationKind, validate_offset_and_epoch
from kraft_engine.raft.quorum_state import FollowerState, SnapshotDownload, UnattachedState
from kraft_engine.raft.replica_context import RaftContext
from kraft_engine.raft.request_manager import NEVER, Inflight
from kraft_engine.raft.transitions import EpochTransitions
from kraft_engine.raft.voter_set import Endpoint, ReplicaKey
from kraft_engine.raft.voter_set_history import load_control_state
from kraft_engine.records.control import build_control_batch
from kraft_engine.records.log_batch import OffsetAndEpoch, build_data_batch, parse_batches

__all__ = ["Fetching"]

_NO_SNAPSHOT: Final = OffsetAndEpoch(epoch=-1, offset=-1)


@dataclass(slots=True)
class _ParkedFetch:
    token: int
    replica: ReplicaKey
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int
    max_bytes: int
    deadline_ms: int


class Fetching:
    """Both sides of Fetch and FetchSnapshot, and the leader's own appends."""

    def __init__(
        self,
        ctx: RaftContext,
        *,
        transitions: EpochTransitions,
        on_leader_hwm_advanced: Callable[[LeaderState, int], None],
        on_voters_changed: Callable[[int], None],
    ) -> None:
        self._ctx = ctx
        self._transitions = transitions
        self._on_leader_hwm_advanced = on_leader_hwm_advanced
        self._on_voters_changed = on_voters_changed
        self._parked: list[_ParkedFetch] = []

    def deadlines(self) -> list[int]:
        return [p.deadline_ms for p in self._parked]

    # ==========================================================================================
    # Leader: appending
    # ==========================================================================================
    def drain_accumulator(self, state: LeaderState, now_ms: int, *, max_bytes: int | None = None) -> None:
        """Write the accumulator's ready batches to the log and hand them to the parked Fetches;
        with `max_bytes`, only that much of them (the next poll writes the rest)."""
        ctx = self._ctx
        batches = state.accumulator.drain(max_bytes=max_bytes)
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
        # high watermark only up to a completed flush (`RaftNode.handle_log_flushed`).
        appended = ctx.log.append(b"".join(chunks))
        if ctx.history.replay(appended):
            self._on_voters_changed(now_ms)
        leader = ctx.quorum.state
        if isinstance(leader, LeaderState) and leader.update_local_state(ctx.durability.offset):
            self._on_leader_hwm_advanced(leader, now_ms)
        self.complete_parked_fetches(now_ms)

    # ==========================================================================================
    # Leader: Fetch
    # ==========================================================================================
    def handle_fetch_request(self, request: fetch_req.FetchRequest, token: int, now_ms: int) -> fetch_resp.FetchResponse | None:
        ctx = self._ctx
        if not ctx.check_cluster_id(request.cluster_id):
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
        if replica.id == ctx.node_id and isinstance(ctx.quorum.state, LeaderState):
            # Only a forged or misrouted Fetch names the leader itself. Counting it would overwrite
            # the leader's own progress; Kafka's leader throws here, which stops its raft thread.
            return self._fetch_error(ErrorCode.invalid_request)
        parked = _ParkedFetch(
            token=token,
            replica=replica,
            fetch_offset=int(partition.fetch_offset),
            last_fetched_epoch=int(partition.last_fetched_epoch),
            current_leader_epoch=int(partition.current_leader_epoch),
            max_bytes=min(int(partition.partition_max_bytes), ctx.config.fetch_max_bytes),
            deadline_ms=now_ms + max_wait_ms,
        )
        response, immediate = self._try_complete_fetch(parked, now_ms)
        follower_hwm = int(partition.high_watermark)
        leader_hwm = ctx.high_watermark
        hwm_behind = leader_hwm is not None and 0 <= follower_hwm < leader_hwm
        if immediate or max_wait_ms == 0 or hwm_behind:
            return response
        # Nothing new for the follower: park it until data arrives, the HWM moves, or max wait.
        self._parked.append(parked)
        return None

    def _fetch_error(self, error: ErrorCode, *, top: ErrorCode = ErrorCode.none) -> fetch_resp.FetchResponse:
        ctx = self._ctx
        return messages.fetch_response(
            error=error,
            leader_id=ctx.leader_id,
            epoch=ctx.epoch,
            high_watermark=None,
            log_start_offset=-1,
            records=b"",
            diverging=None,
            snapshot_id=None,
            endpoints=ctx.leader_endpoints(),
            listener=ctx.config.controller_listener_name,
            top_level_error=top,
        )

    def _try_complete_fetch(self, fetch: _ParkedFetch, now_ms: int) -> tuple[fetch_resp.FetchResponse, bool]:
        """The Fetch response as of now, and whether it must be sent now (error, data, divergence)."""
        ctx = self._ctx
        error = ctx.validate_leader_only(fetch.current_leader_epoch)
        state = ctx.quorum.state
        if error is not None or not isinstance(state, LeaderState):
            return self._fetch_error(error or ErrorCode.not_leader_or_follower), True
        log = ctx.log
        snapshots = log.snapshot_ids()
        if fetch.fetch_offset == 0 and snapshots and snapshots[-1] != BOOTSTRAP_SNAPSHOT_ID:
            # An empty follower is better served by the latest snapshot than by the log.
            kind, position = ValidationKind.SNAPSHOT, snapshots[-1]
        else:
            validation = validate_offset_and_epoch(log, offset=fetch.fetch_offset, epoch=fetch.last_fetched_epoch)
            kind, position = validation.kind, validation.offset_and_epoch
        records = b""
        if kind is ValidationKind.VALID:
            end = log.end_offset().offset
            if fetch.fetch_offset < end:
                records = log.read(fetch.fetch_offset, fetch.max_bytes)
            if fetch.replica.id >= 0 and state.update_replica_state(
                fetch.replica, fetch_offset=fetch.fetch_offset, leader_end_offset=end, now_ms=now_ms
            ):
                self._on_leader_hwm_advanced(state, now_ms)
        response = messages.fetch_response(
            error=ErrorCode.none,
            leader_id=ctx.node_id,
            epoch=state.epoch,
            high_watermark=state.high_watermark,
            log_start_offset=log.log_start_offset,
            records=records,
            diverging=position if kind is ValidationKind.DIVERGING else None,
            snapshot_id=position if kind is ValidationKind.SNAPSHOT else None,
            endpoints=ctx.leader_endpoints(),
            listener=ctx.config.controller_listener_name,
        )
        return response, bool(records) or kind is not ValidationKind.VALID

    def complete_parked_fetches(self, now_ms: int) -> None:
        """New data, a new high watermark or a role change: answer every parked Fetch now."""
        if not self._parked:
            return
        parked, self._parked = self._parked, []
        self._answer(parked, now_ms)

    def expire_parked_fetches(self, now_ms: int) -> None:
        due = [p for p in self._parked if now_ms >= p.deadline_ms]
        if not due:
            return
        self._parked = [p for p in self._parked if now_ms < p.deadline_ms]
        self._answer(due, now_ms)

    def _answer(self, fetches: list[_ParkedFetch], now_ms: int) -> None:
        for fetch in fetches:
            response, _ = self._try_complete_fetch(fetch, now_ms)
            self._ctx.respond(fetch.token, response)

    # ==========================================================================================
    # Follower and observer: sending Fetch / FetchSnapshot
    # ==========================================================================================
    def send_fetch(self, state: FollowerState, now_ms: int) -> None:
        """The next Fetch (or FetchSnapshot chunk) to the leader, once the last append is durable."""
        ctx = self._ctx
        if state.snapshot_download is None and ctx.durability.awaiting_flush():
            return  # the next fetch offset is counted by the leader: it must be durable first
        if state.snapshot_download is not None:
            download = state.snapshot_download
            ctx.requests.send(
                state.leader_id,
                state.leader_endpoints,
                messages.fetch_snapshot_request(
                    cluster_id=ctx.cluster_id,
                    replica=ctx.local_key,
                    epoch=state.epoch,
                    snapshot_id=download.snapshot_id,
                    position=len(download.data),
                    max_bytes=ctx.config.fetch_snapshot_max_bytes,
                ),
                now_ms,
            )
        else:
            ctx.requests.send(state.leader_id, state.leader_endpoints, self._build_fetch(state.epoch), now_ms)

    def follower_deadlines(self, state: FollowerState, now_ms: int) -> list[int]:
        if state.snapshot_download is not None or not self._ctx.durability.awaiting_flush():
            return [self._ctx.requests.ready_at(now_ms, state.leader_id)]
        return []  # the flush wakes us

    def _build_fetch(self, epoch: int) -> fetch_req.FetchRequest:
        ctx = self._ctx
        end = ctx.log.end_offset()
        return messages.fetch_request(
            cluster_id=ctx.cluster_id,
            replica=ctx.local_key,
            epoch=epoch,
            fetch_offset=end.offset,
            last_fetched_epoch=end.epoch,
            high_watermark=ctx.hwm,
            max_wait_ms=ctx.config.fetch_max_wait_ms,
            max_bytes=ctx.config.fetch_max_bytes,
        )

    def wants_bootstrap_fetch(self, state: UnattachedState) -> bool:
        # Observers discover the leader by fetching from any bootstrap server; so does a voter
        # that knows the leader's id but not its endpoints.
        return not self._ctx.quorum.is_voter() or state.leader_id is not None

    def _bootstrap_destinations(self) -> list[tuple[int, tuple[Endpoint, ...]]]:
        ctx = self._ctx
        if ctx.bootstrap_servers:
            # Bootstrap servers get decreasing negative ids, as in Kafka.
            return [(-(i + 2), (endpoint,)) for i, endpoint in enumerate(ctx.bootstrap_servers)]
        return [(v.key.id, v.endpoints) for v in ctx.voters if v.key.id != ctx.node_id and v.endpoints]

    def send_bootstrap_fetch(self, state: UnattachedState, now_ms: int) -> None:
        """One Fetch at a time to a random bootstrap server (or voter), to learn the leader."""
        if not self.wants_bootstrap_fetch(state):
            return
        requests = self._ctx.requests
        destinations = self._bootstrap_destinations()
        ready = [(d, e) for d, e in destinations if requests.is_ready(d, now_ms)]
        busy = any(requests.is_busy(d) for d, _ in destinations)
        if ready and not busy:
            destination, endpoints = ready[self._ctx.rng.randrange(len(ready))]
            requests.send(destination, endpoints, self._build_fetch(state.epoch), now_ms)

    def bootstrap_deadlines(self, state: UnattachedState, now_ms: int) -> list[int]:
        if not self.wants_bootstrap_fetch(state):
            return []
        requests = self._ctx.requests
        destinations = self._bootstrap_destinations()
        if any(requests.is_busy(d) for d, _ in destinations):
            return []
        return [min((requests.ready_at(now_ms, d) for d, _ in destinations), default=NEVER)]

    # ==========================================================================================
    # Follower: Fetch responses
    # ==========================================================================================
    def handle_fetch_response(self, inflight: Inflight, response: fetch_resp.FetchResponse, now_ms: int) -> bool:
        ctx = self._ctx
        if response.error_code != ErrorCode.none or len(response.responses) != 1:
            return False
        partitions = response.responses[0].partitions
        if len(partitions) != 1:
            return False
        partition = partitions[0]
        leader_id = messages.optional_id(partition.current_leader.leader_id)
        epoch = int(partition.current_leader.leader_epoch)
        handled = self._transitions.maybe_handle_common_response(
            error=partition.error_code,
            leader_id=leader_id,
            epoch=epoch,
            endpoints=messages.response_endpoints(response.node_endpoints, leader_id, ctx.config.controller_listener_name),
            now_ms=now_ms,
        )
        if handled is not None:
            # An error answer (a bootstrap server that could not name a leader, a resigned leader)
            # is retried only after the backoff, even when it taught us a new leader.
            return handled and isinstance(ctx.quorum.state, FollowerState) and partition.error_code == ErrorCode.none
        state = ctx.quorum.state
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
                self._update_follower_hwm(min(leader_hwm, ctx.log.end_offset().offset))
        state.has_fetched_from_leader = True
        state.leader_connection_broken = False
        state.fetch_deadline_ms = now_ms + ctx.config.fetch_timeout_ms
        return True

    def _append_as_follower(self, records: bytes, now_ms: int) -> bool:
        ctx = self._ctx
        try:
            batches = parse_batches(records)
        except ValueError:
            return False
        end = ctx.log.end_offset().offset
        # Whole batches the log already holds are skipped; the rest must start at the end.
        fresh = [b for b in batches if b.base_offset >= end]
        if not fresh or fresh[0].base_offset != end:
            return bool(batches) and not fresh
        # Flushed by the driver (`Output.flush`); the next Fetch, whose fetch offset the leader
        # counts toward the high watermark, waits for that flush (`send_fetch`).
        appended = ctx.log.append(b"".join(b.raw for b in fresh))
        if ctx.history.replay(appended):
            self._on_voters_changed(now_ms)
        return True

    def _update_follower_hwm(self, new_hwm: int) -> None:
        ctx = self._ctx
        if ctx.hwm is not None:
            require(new_hwm >= ctx.hwm or new_hwm < 0, f"high watermark would move back from {ctx.hwm} to {new_hwm}")
            if new_hwm <= ctx.hwm:
                return
        ctx.hwm = new_hwm

    def _truncate_to_diverging(self, diverging: OffsetAndEpoch) -> None:
        ctx = self._ctx
        hwm = ctx.hwm
        require(
            hwm is None or diverging.offset >= hwm,
            f"asked to truncate to {diverging.offset}, below the high watermark {hwm}",
        )
        if diverging.epoch == 0:
            truncation = min(diverging.offset, ctx.log.end_offset().offset)
        else:
            local = ctx.log.end_offset_for_epoch(diverging.epoch)
            truncation = min(local.offset, diverging.offset) if local.epoch == diverging.epoch else local.offset
        require(hwm is None or truncation >= hwm, f"truncation to {truncation} would drop committed data below {hwm}")
        ctx.log.truncate_to(truncation)
        ctx.durability.on_truncated()
        if ctx.history.truncate_new_entries(truncation):
            self._on_voters_changed(0)

    # ==========================================================================================
    # FetchSnapshot
    # ==========================================================================================
    def handle_fetch_snapshot_request(
        self, request: snap_req.FetchSnapshotRequest, token: int, now_ms: int
    ) -> snap_resp.FetchSnapshotResponse:
        ctx = self._ctx

        def reply(
            error: ErrorCode,
            *,
            snapshot_id: OffsetAndEpoch = _NO_SNAPSHOT,
            size: int = -1,
            position: int = -1,
            data: bytes = b"",
            top: ErrorCode = ErrorCode.none,
        ) -> snap_resp.FetchSnapshotResponse:
            return messages.fetch_snapshot_response(
                error=error, leader_id=ctx.leader_id, epoch=ctx.epoch, snapshot_id=snapshot_id, size=size,
                position=position, data=data, endpoints=ctx.leader_endpoints(),
                listener=ctx.config.controller_listener_name, top_level_error=top,
            )

        if not ctx.check_cluster_id(request.cluster_id):
            return reply(ErrorCode.none, top=ErrorCode.inconsistent_cluster_id)
        partition = messages.single_partition(request.topics, topic_field="name", partition_field="partition")
        if partition is None:
            return reply(ErrorCode.none, top=ErrorCode.invalid_request)
        error = ctx.validate_leader_only(int(partition.current_leader_epoch))
        if error is not None:
            return reply(error)
        snapshot_id = OffsetAndEpoch(epoch=int(partition.snapshot_id.epoch), offset=int(partition.snapshot_id.end_offset))
        size = ctx.log.snapshot_size(snapshot_id)
        if size is None:
            return reply(ErrorCode.snapshot_not_found, snapshot_id=snapshot_id)
        position = int(partition.position)
        if position < 0 or position >= size:
            return reply(ErrorCode.position_out_of_range, snapshot_id=snapshot_id)
        max_bytes = min(int(request.max_bytes), ctx.config.fetch_snapshot_max_bytes)
        data = ctx.log.read_snapshot(snapshot_id, position, max_bytes)
        state = ctx.quorum.state
        if isinstance(state, LeaderState):
            state.record_voter_fetch(ReplicaKey.of(int(request.replica_id), partition.replica_directory_id), now_ms=now_ms)
        return reply(ErrorCode.none, snapshot_id=snapshot_id, size=size, position=position, data=data)

    def handle_fetch_snapshot_response(
        self, inflight: Inflight, response: snap_resp.FetchSnapshotResponse, now_ms: int
    ) -> bool:
        ctx = self._ctx
        if response.error_code != ErrorCode.none:
            return False
        partition = messages.single_partition(response.topics, topic_field="name", partition_field="index")
        if partition is None:
            return False
        leader_id = messages.optional_id(partition.current_leader.leader_id)
        handled = self._transitions.maybe_handle_common_response(
            error=partition.error_code,
            leader_id=leader_id,
            epoch=int(partition.current_leader.leader_epoch),
            endpoints=messages.response_endpoints(response.node_endpoints, leader_id, ctx.config.controller_listener_name),
            now_ms=now_ms,
        )
        if handled is not None:
            return handled
        state = ctx.quorum.state
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
        state.fetch_deadline_ms = now_ms + ctx.config.fetch_timeout_ms
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
        ctx = self._ctx
        try:
            parse_batches(data)
        except ValueError:
            return
        log = ctx.log
        log.store_snapshot(snapshot_id, data)
        log.truncate_to_latest_snapshot()
        ctx.durability.on_truncated()
        # Older snapshots now lie before the log start; nothing can ever read them again.
        for old in log.snapshot_ids():
            if old.offset < snapshot_id.offset:
                log.delete_snapshot(old)
        load_control_state(ctx.history, log)
        self._on_voters_changed(now_ms)
        # A snapshot only ever covers committed offsets.
        if ctx.hwm is None or snapshot_id.offset > ctx.hwm:
            ctx.hwm = snapshot_id.offset
