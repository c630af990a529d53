"""The asyncio driver of one raft node: it performs the pure core's `Output`s on real sockets
and real files, in the order the core's contract demands.

The core (`kraft_engine.raft.RaftNode`) decides everything; this module only does I/O, and it
mirrors the simulation's reference driver (`kraft_engine.sim.cluster.SimCluster._perform`):

1. `persist` -> `quorum-state` is rewritten durably (tmp + fsync + rename + dir fsync) before
   any message of the same Output leaves the process. This runs synchronously on the event loop:
   nothing else can interleave between the write and the sends.
2. `flush` -> the log's fsync runs on a thread of its own (`_flush_loop`), off the event loop,
   while this Output's messages go out: the leader's fsync overlaps replication to its
   followers. The core counts its own offset toward the high watermark (leader), or sends the
   Fetch that reports it (follower), only once `handle_log_flushed` says the fsync is done.
   Requests arriving meanwhile coalesce into one more fsync (the newest covers the older ones).
3. Outbound requests go to a per-address `protocol.KafkaConnection` as tasks; their outcome comes
   back through `handle_response` (refused/reset -> DISCONNECTED, timeout -> TIMED_OUT, an api
   or version the peer lacks -> UNSUPPORTED_VERSION). Responses complete the future the inbound
   handler is waiting on.
4. Listener events go to the state machine, and a snapshot it asks for is created at once.
5. A single poll task sleeps until `next_deadline_ms` (or until woken by an append); between two
   polls due at once (a listener catching up, a slice of the log each) it lets the loop go round.

Everything runs on one event loop thread, so the core is never entered concurrently.

Supervision (Kafka's raft client runs `poll()` under a fault handler that exits the process):
an exception out of the core or out of performing its Output - a failed write or fsync of the
log, a snapshot or `quorum-state` (`StorageIOError`), an invariant, a raft listener raising - is
fatal. Whatever entry point hit it (the poll loop, an inbound request, a response arriving on an
outbound-send task, the state machine's snapshot), the driver logs one ERROR line, stops serving
at once (inbound requests are dropped, outbound work is cancelled) and sets `fatal`, which the
node waits on to exit non-zero. It never keeps answering from state it could not persist. Any
error an outbound-send task raises lands here too instead of in "Task exception was never
retrieved".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import heapq
import itertools
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kraft_engine.errors import ServerError, SnapshotError
from kraft_engine.protocol import (
    API_VERSIONS_KEY,
    ConnectionConfig,
    ConnectionFailed,
    ConnectionLost,
    KafkaConnection,
    RequestTimedOut,
    UnsupportedApi,
    UnsupportedVersion,
    kio_version_range,
    request_class,
    response_class,
)
from kraft_engine.raft import (
    KRAFT_VERSION_1,
    CommittedBatch,
    ElectionState,
    Endpoint,
    LeaderChange,
    ListenerEvent,
    LogFlush,
    NotLeaderError,
    OutboundRequest,
    OutboundResponse,
    Output,
    RaftNode,
    ReplicaKey,
    RequestFailure,
    Role,
    SnapshotBuilder,
    SnapshotLoad,
    VoterNode,
    VoterSet,
)
from kraft_engine.records.batches import iter_batches, remember_batches
from kraft_engine.records.log_batch import OffsetAndEpoch
from kraft_engine.server.append_only_store import AppendOnlyStore, SnapshotRequest
from kraft_engine.server.cluster_id_refusals import ClusterIdRefusals, is_inconsistent_cluster_id
from kraft_engine.server.config import KafkaConfig
from kraft_engine.server.node_security import controller_client_security
from kraft_engine.server.raft_metrics import RaftMetrics
from kraft_engine.storage.metadata_log import FileMetadataLog
from kraft_engine.storage.quorum_state_store import FileQuorumStateStore, QuorumStateData
from kraft_engine.storage.storage_error import StorageIOError

__all__ = [
    "AppendResult",
    "RaftDriver",
    "RaftFatalError",
    "open_raft_node",
    "raft_connection_config",
    "wall_clock_ms",
]

logger = logging.getLogger(__name__)

_FETCH_API_KEY = 1
# How long closing waits for the test store's snapshot being written (then it is abandoned).
_STORE_SNAPSHOT_CLOSE_WAIT_S = 30
# A Fetch response smaller than this is decoded on the loop as it is: a thread hop costs more.
_DECODE_OFF_LOOP_MIN_BYTES = 64 * 1024


def wall_clock_ms() -> int:
    # Kafka's raft client runs on wall-clock time too (DescribeQuorum timestamps are epoch ms).
    return int(time.time() * 1000)


def open_raft_node(
    config: KafkaConfig,
    *,
    directory_id: uuid.UUID | None,
    cluster_id: str,
    log: FileMetadataLog,
    quorum_state: FileQuorumStateStore,
    local_endpoints: tuple[Endpoint, ...],
) -> RaftNode:
    """A node's raft replica from its config, the same for a controller (a voter or would-be voter,
    with its advertised controller endpoints) and a dedicated broker (an observer, none). Loads the
    latest snapshot and replays the log after it."""
    listener_name = config.controller_listener_names[0]
    static_voters = None
    if config.controller_quorum_voters:
        static_voters = VoterSet(
            VoterNode(key=ReplicaKey(v.voter_id, None), endpoints=(Endpoint(listener_name, v.host, v.port),))
            for v in config.controller_quorum_voters
        )
    persisted = quorum_state.read()
    return RaftNode(
        config=config.raft_config(),
        node_id=config.node_id,
        directory_id=directory_id,
        cluster_id=cluster_id,
        log=log,
        persisted=None if persisted is None else _election_state(persisted),
        static_voters=static_voters,
        rng=random.Random(),
        now_ms=wall_clock_ms(),
        local_endpoints=local_endpoints,
        bootstrap_servers=tuple(
            Endpoint(listener_name, s.host, s.port) for s in config.controller_quorum_bootstrap_servers
        ),
    )


def _election_state(data: QuorumStateData) -> ElectionState:
    voted = None if data.voted_id is None else ReplicaKey.of(data.voted_id, data.voted_directory_id)
    return ElectionState(epoch=data.leader_epoch, leader_id=data.leader_id, voted_key=voted)


def raft_connection_config(config: KafkaConfig) -> ConnectionConfig:
    """How a node's raft driver reaches the other controllers: raft's request timeout for connecting
    too, and reconnects backed off from `controller.quorum.retry.backoff.ms` up to half an election
    timeout, so a restarted peer is found again well inside one election."""
    raft_config = config.raft_config()
    return ConnectionConfig(
        client_id=f"raft-client-{config.node_id}",
        request_timeout_ms=raft_config.request_timeout_ms,
        socket_connection_setup_timeout_ms=raft_config.request_timeout_ms,
        reconnect_backoff_ms=raft_config.retry_backoff_ms or 1,
        reconnect_backoff_max_ms=max(raft_config.retry_backoff_ms, raft_config.election_timeout_ms // 2),
        security=controller_client_security(config),
    )


class RaftFatalError(ServerError):
    """The raft node stopped on a fault it must not survive; `cause` is the original error."""

    def __init__(self, message: str, *, cause: BaseException) -> None:
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True, slots=True)
class AppendResult:
    offset: int
    epoch: int


@dataclass(slots=True)
class _Waiter:
    offset: int
    epoch: int
    future: asyncio.Future[AppendResult]
    deadline: float  # the event loop's clock
    timeout_ms: int


class RaftDriver:
    """Runs one `RaftNode` on the event loop; see the module docstring for the ordering."""

    def __init__(
        self,
        *,
        raft: RaftNode,
        log: FileMetadataLog,
        quorum_state: FileQuorumStateStore,
        store: AppendOnlyStore | None,
        metrics: RaftMetrics,
        connection_config: ConnectionConfig,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.raft = raft
        self.log = log
        self._quorum_state = quorum_state
        self.store = store
        self._metrics = metrics
        self._connection_config = connection_config
        self._clock_ms = clock_ms
        self._connections: dict[tuple[str, int], KafkaConnection] = {}
        self._inbound: dict[int, asyncio.Future[Any]] = {}
        self._next_inbound_token = 1
        self._tasks: set[asyncio.Task[None]] = set()
        # Appends waiting for their commit: a heap by offset (then arrival), so a committed batch
        # resolves exactly the waiters at its head, in order, without scanning the others; one
        # timer for the earliest deadline expires them (no timer per append).
        self._waiters: list[tuple[int, int, _Waiter]] = []
        self._waiter_arrivals = itertools.count()
        self._waiter_expiry: asyncio.TimerHandle | None = None
        self._deadline_ms = 0
        self._wake = asyncio.Event()
        self._poll_task: asyncio.Task[None] | None = None
        self._stopped = False
        self._shutdown_complete = asyncio.Event()
        self._election_started_ms: int | None = None
        self._last_role: Role | None = None
        self._listeners: list[Callable[[ListenerEvent], None]] = []
        # Whether anything reads committed records on this loop (the stand-in store, a broker's
        # metadata listener): then fetched batches are decoded on a worker thread first.
        self._records_read_on_loop = store is not None
        # One fsync at a time, on its own thread (never queued behind other work on the loop's
        # default executor); the newest requested flush waits in `_flush_wanted`.
        self._fsync_executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="raft-fsync")
        self._flush_wanted: LogFlush | None = None
        self._flushing = False
        # The test store's snapshot being written off the loop (one at a time).
        self._store_snapshot: asyncio.Task[None] | None = None
        #: Wall-clock ms of the last Fetch answered without error by the leader (followers).
        self.last_fetch_success_ms: int | None = None
        #: Set once, by the first fatal fault (see the module docstring); the node then exits.
        self.fatal_error: RaftFatalError | None = None
        self.fatal = asyncio.Event()
        #: INCONSISTENT_CLUSTER_ID refusals, both ways (the node reports the inbound ones).
        self.refusals = ClusterIdRefusals(cluster_id=raft.cluster_id, metrics=metrics, clock_ms=clock_ms,
                                          security=connection_config.security)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Perform the first poll and start the poll loop (call once, on the running loop)."""
        try:
            self._perform(self.raft.poll(self._clock_ms()))
        except Exception as error:
            self._fail(error, where="the first poll")
            return
        self._poll_task = asyncio.get_running_loop().create_task(self._poll_loop())

    async def shutdown(self, *, timeout_ms: int) -> bool:
        """Graceful: a leader resigns with EndQuorumEpoch; True when the core finished in time."""
        if not self._stopped:
            try:
                self._perform(self.raft.shutdown(timeout_ms, now_ms=self._clock_ms()))
            except Exception as error:
                self._fail(error, where="shutdown")
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_ms / 1000 + 0.5):
                    await self._shutdown_complete.wait()
        return self._shutdown_complete.is_set()

    async def close(self) -> None:
        """Stop polling, drop outbound work, fail waiters, flush and close the log."""
        snapshot = self._store_snapshot
        if snapshot is not None and self.fatal_error is None and not self._stopped:
            # A snapshot the test store asked for is finished first, as when it was written on
            # the loop at the commit that made it due.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(snapshot), timeout=_STORE_SNAPSHOT_CLOSE_WAIT_S)
        self._stopped = True
        if self._poll_task is not None:
            self._poll_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poll_task
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._fsync_executor.shutdown(wait=False)
        for connection in list(self._connections.values()):
            await connection.close()
        self._connections.clear()
        await self.refusals.close()
        if self._waiter_expiry is not None:
            self._waiter_expiry.cancel()
            self._waiter_expiry = None
        for _, _, waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.set_exception(NotLeaderError("the node is shutting down", leader_id=None, epoch=waiter.epoch))
        self._waiters.clear()
        for future in self._inbound.values():
            future.cancel()
        self._inbound.clear()
        if self.fatal_error is None:
            self.log.flush()
        else:
            # After a failed write or fsync, flushing again proves nothing (the kernel may have
            # dropped the dirty pages): recovery on the next start decides what survived.
            with contextlib.suppress(Exception):
                self.log.flush()
        with contextlib.suppress(OSError, StorageIOError):
            self.log.close()

    # -- inbound requests (the listener's handlers call this) ----------------------------------
    async def handle_request(self, request: Any) -> Any:
        """Hand an inbound raft request to the core and wait for its response."""
        if self._stopped:
            raise ConnectionLost("the node is shutting down")
        token = self._next_inbound_token
        self._next_inbound_token += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inbound[token] = future
        try:
            try:
                self._perform(self.raft.handle_request(request, token=token, now_ms=self._clock_ms()))
            except Exception as error:
                self._fail(error, where=f"handling a {type(request).__name__}")
                raise ConnectionLost("the node stopped on a fatal fault") from None
            return await future
        finally:
            self._inbound.pop(token, None)

    # -- the state machine's writes -------------------------------------------------------------
    def add_listener(self, listener: Callable[[ListenerEvent], None], *, reads_records_on_loop: bool = True) -> None:
        """Another raft listener (e.g. the quorum controller); events arrive in raft order, on this
        loop. One that reads a `CommittedBatch`'s records on this loop says so: the driver then
        decodes fetched batches on a worker thread before its core sees them. One that only
        queues them for its own thread (the quorum controller) leaves them undecoded until that
        thread reads them, and a follower's Fetch, append, fsync and next Fetch never wait for it."""
        self._listeners.append(listener)
        self._records_read_on_loop = self._records_read_on_loop or reads_records_on_loop

    @property
    def high_watermark(self) -> int | None:
        return self.raft.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.raft.log_end_offset

    def holds_leadership(self, epoch: int) -> bool:
        """RaftPort.holds_leadership: raft's role is Leader in `epoch` (not Resigned in it)."""
        return self.raft.role is Role.LEADER and self.raft.epoch == epoch

    def append(self, records: list[bytes], *, epoch: int) -> int:
        """RaftPort.append: one batch as leader of `epoch` (NotLeaderError otherwise); its last offset."""
        offset = self.raft.append(records, epoch=epoch, now_ms=self._clock_ms())
        self._metrics.append_records.record(len(records))
        # Only the drain deadline can have moved (earlier): a whole `next_deadline_ms` per append
        # was the largest raft cost of a leader answering 64 writers one record each.
        drain_ms = self.raft.drain_deadline_ms
        if drain_ms is not None and drain_ms < self._deadline_ms:
            # A deadline already past stays: the poll loop is due, and that poll computes them all.
            self._deadline_ms = drain_ms
            self._wake.set()
        return offset

    @property
    def next_append_offset(self) -> int:
        return self.raft.next_append_offset

    def prepare_appends(self, batches: list[list[bytes]], *, epoch: int) -> list[int]:
        """RaftPort.prepare_appends: reserve offsets for `batches` as leader of `epoch`, all or
        none, held back from the log until `schedule_prepared_append`; the last offset of each.
        Raises NotLeaderError."""
        offsets = self.raft.prepare_appends(batches, epoch=epoch, now_ms=self._clock_ms())
        for records in batches:
            self._metrics.append_records.record(len(records))
        return offsets

    def schedule_prepared_append(self) -> None:
        self.raft.schedule_prepared_append()
        self._rearm(self.raft.next_deadline_ms(self._clock_ms()))

    def resign(self, epoch: int) -> None:
        if self._stopped:
            return
        try:
            self._perform(self.raft.resign(epoch, now_ms=self._clock_ms()))
        except Exception as error:
            self._fail(error, where="resigning")

    def upgrade_kraft_version(self, epoch: int, version: int, *, validate_only: bool) -> None:
        """Finalize kraft.version `version` as leader of `epoch` (UpdateFeatures). A refusal raises
        NotLeaderError or KRaftVersionUpgradeError before anything changed."""
        if self._stopped:
            raise NotLeaderError("the node is stopping")
        out = self.raft.upgrade_kraft_version(epoch, version, validate_only=validate_only, now_ms=self._clock_ms())
        try:
            self._perform(out)
        except Exception as error:
            self._fail(error, where="upgrading kraft.version")

    def create_snapshot(
        self, *, end_offset: int, records: list[bytes], last_contained_log_timestamp_ms: int
    ) -> OffsetAndEpoch:
        """RaftPort.create_snapshot; a storage fault stops the node and reaches the caller as a
        SnapshotError (the caller skips the snapshot; the node is going down)."""
        if self._stopped:
            raise SnapshotError("the node is stopping")
        try:
            return self.raft.create_snapshot(
                end_offset=end_offset,
                records=records,
                last_contained_log_timestamp_ms=last_contained_log_timestamp_ms,
                now_ms=self._clock_ms(),
            )
        except (SnapshotError, NotLeaderError):
            raise
        except Exception as error:
            self._fail(error, where="creating a snapshot")
            raise SnapshotError(f"the node stopped on a fatal fault: {error}") from None

    def snapshot_builder(self, *, end_offset: int) -> SnapshotBuilder | OffsetAndEpoch:
        """RaftPort.snapshot_builder: the layout of a snapshot at `end_offset`, whose bytes the
        caller builds off this loop (or the id of that snapshot when it exists already)."""
        if self._stopped:
            raise SnapshotError("the node is stopping")
        return self.raft.snapshot_builder(end_offset=end_offset)

    def prepare_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> bool:
        """RaftPort.prepare_snapshot, on the caller's thread (never raft's loop): the snapshot's
        file written, checked and fsynced ahead of `store_snapshot`. Best effort: on any error
        the file is gone and False returned; `store_snapshot` then writes it on the loop as
        ever (where a storage fault stops the node)."""
        if self._stopped:
            return False
        try:
            self.log.prepare_snapshot(snapshot_id, data)
        except Exception as error:  # the loop's own write will meet it, and stop the node if it must
            logger.warning("Could not write snapshot %s ahead of storing it: %s", snapshot_id, error)
            return False
        return True

    def discard_prepared_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """RaftPort.discard_prepared_snapshot: any thread."""
        self.log.discard_prepared_snapshot(snapshot_id)

    def store_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> OffsetAndEpoch:
        """RaftPort.store_snapshot; a storage fault stops the node and reaches the caller as a
        SnapshotError, as in `create_snapshot`."""
        if self._stopped:
            raise SnapshotError("the node is stopping")
        try:
            return self.raft.store_snapshot(snapshot_id, data, now_ms=self._clock_ms())
        except SnapshotError:
            raise
        except Exception as error:
            self._fail(error, where="storing a snapshot")
            raise SnapshotError(f"the node stopped on a fatal fault: {error}") from None

    async def append_and_wait(self, values: list[bytes], *, timeout_ms: int) -> AppendResult:
        """Append one batch as leader and wait until it is committed (or lost)."""
        return await self.append_committed(values, timeout_ms=timeout_ms)

    def append_committed(self, values: list[bytes], *, timeout_ms: int) -> asyncio.Future[AppendResult]:
        """Append one batch as leader; a future of its commit. It fails with NotLeaderError when
        the batch is lost to another leader, TimeoutError when not committed within `timeout_ms`.
        Raises NotLeaderError at once when this node is not the leader.

        A future rather than a coroutine: the test store's HTTP route answers from its callback,
        so a request costs no task of its own (see `http_endpoint`)."""
        raft = self.raft
        epoch = raft.epoch
        if raft.role is not Role.LEADER:
            raise NotLeaderError(f"node {raft.node_id} is not the leader", leader_id=raft.leader_id, epoch=epoch)
        offset = self.append(values, epoch=epoch)  # NotLeaderError names the leader as the node knew it
        loop = asyncio.get_running_loop()
        future: asyncio.Future[AppendResult] = loop.create_future()
        deadline = loop.time() + timeout_ms / 1000
        waiter = _Waiter(offset=offset, epoch=epoch, future=future, deadline=deadline, timeout_ms=timeout_ms)
        heapq.heappush(self._waiters, (offset, next(self._waiter_arrivals), waiter))
        expiry = self._waiter_expiry
        if expiry is None or deadline < expiry.when():
            if expiry is not None:
                expiry.cancel()
            self._waiter_expiry = loop.call_at(deadline, self._expire_waiters, deadline)
        return future

    def _expire_waiters(self, due: float) -> None:
        """The earliest waiter's deadline passed: time out every waiter past its own, and arm the
        timer again for the earliest of the rest."""
        self._waiter_expiry = None
        loop = asyncio.get_running_loop()
        now = max(loop.time(), due)
        kept = []
        earliest: float | None = None
        for entry in self._waiters:
            waiter = entry[2]
            if waiter.future.done():
                continue  # its requester gave up (cancelled)
            if waiter.deadline <= now:
                waiter.future.set_exception(TimeoutError(
                    f"offset {waiter.offset} of epoch {waiter.epoch} was not committed within {waiter.timeout_ms} ms"
                ))
                continue
            kept.append(entry)
            if earliest is None or waiter.deadline < earliest:
                earliest = waiter.deadline
        heapq.heapify(kept)
        self._waiters = kept
        if earliest is not None:
            self._waiter_expiry = loop.call_at(earliest, self._expire_waiters, earliest)

    # -- polling -------------------------------------------------------------------------------
    def _rearm(self, deadline_ms: int) -> None:
        if deadline_ms < self._deadline_ms or self._deadline_ms <= self._clock_ms():
            self._deadline_ms = deadline_ms
        else:
            self._deadline_ms = min(self._deadline_ms, deadline_ms)
        self._wake.set()

    async def _poll_loop(self) -> None:
        while not self._stopped:
            now_ms = self._clock_ms()
            if now_ms >= self._deadline_ms:
                try:
                    self._perform(self.raft.poll(now_ms))
                    self.log.delete_due_files()  # snapshots and segments the core deleted a while ago
                except Exception as error:
                    self._fail(error, where="the poll loop")
                    return
                # Due again at once while the listener is behind (the core hands it at most
                # 1 MiB of log per poll): let the loop go round before the next slice, so that a
                # catch-up of the whole log never holds Fetch, Vote and BeginQuorumEpoch behind it.
                await asyncio.sleep(0)
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout((self._deadline_ms - now_ms) / 1000):
                    await self._wake.wait()

    # -- supervision ---------------------------------------------------------------------------
    def _fail(self, error: BaseException, *, where: str) -> None:
        """The one way out of a fault: one ERROR line, stop serving, wake the node (see module doc)."""
        if self.fatal_error is not None:
            return
        if isinstance(error, StorageIOError):
            message = f"{error}; stopping node {self.raft.node_id}"
            exc_info = None  # the message says it all: file, directory, OS error
        else:
            message = f"Stopping node {self.raft.node_id} after an unexpected error in {where}: {error!r}"
            exc_info = error  # a bug: the traceback is what finds it
        already_stopping = self._stopped
        self.fatal_error = RaftFatalError(message, cause=error)
        self._stopped = True
        if not already_stopping:
            logger.error("%s", message, exc_info=exc_info)
            self._metrics.fatal_errors.labels(kind=_fault_kind(error)).inc()
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()
        if self._poll_task is not None and self._poll_task is not asyncio.current_task():
            self._poll_task.cancel()
        for future in self._inbound.values():
            future.cancel()
        self.fatal.set()

    async def wait_until_fatal_or(self, stop: asyncio.Event, *others: asyncio.Event) -> None:
        """Wait for `stop`, another node fault, or this driver's fatal fault; raise
        `RaftFatalError` (already logged) on the last. The node's run loop waits here."""
        waits = [asyncio.ensure_future(e.wait()) for e in (stop, self.fatal, *others)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if self.fatal_error is not None:
            raise self.fatal_error

    def halt(self) -> None:
        """Stop touching storage and answering at once (the state machine hit a fatal fault)."""
        self._stopped = True

    def _task_done(self, task: asyncio.Task[None], *, where: str) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._fail(error, where=where)

    # -- performing an Output --------------------------------------------------------------------
    def _perform(self, out: Output) -> None:
        if out.persist is not None:
            self._persist(out.persist)
        if out.flush is not None:
            self._flush_wanted = out.flush
            if not self._flushing:
                self._flushing = True
                self._spawn(self._flush_loop(), where="flushing the log")
        for message in out.messages:
            if isinstance(message, OutboundResponse):
                future = self._inbound.pop(message.token, None)
                if future is not None and not future.done():
                    future.set_result(message.response)
            else:
                self._spawn(self._send(message))
        for event in out.events:
            self._deliver(event)
            for listener in self._listeners:
                listener(event)
        if out.events:
            self._maybe_snapshot()
        self._observe_role()
        self._deadline_ms = out.next_deadline_ms
        self._wake.set()
        if out.shutdown_complete:
            self._shutdown_complete.set()

    async def _flush_loop(self) -> None:
        """fsync on the fsync thread until no flush is wanted; each completion goes to the core."""
        loop = asyncio.get_running_loop()
        try:
            while self._flush_wanted is not None and not self._stopped:
                flush, self._flush_wanted = self._flush_wanted, None
                pending = self.log.begin_flush()
                await loop.run_in_executor(self._fsync_executor, pending.sync)
                if self._stopped:
                    return
                self.log.complete_flush(pending)
                self._metrics.log_flushes.inc()
                self._perform(self.raft.handle_log_flushed(flush, now_ms=self._clock_ms()))
        finally:
            self._flushing = False

    def _persist(self, state: ElectionState) -> None:
        voted = state.voted_key
        if self.raft.kraft_version >= KRAFT_VERSION_1:
            data = QuorumStateData(
                leader_epoch=state.epoch,
                leader_id=state.leader_id,
                voted_id=None if voted is None else voted.id,
                voted_directory_id=None if voted is None else voted.directory_id,
            )
            self._quorum_state.write(data, data_version=1)
        else:
            data = QuorumStateData(
                leader_epoch=state.epoch,
                leader_id=state.leader_id,
                voted_id=None if voted is None else voted.id,
                current_voters=tuple(sorted(self.raft.voters.ids)),
            )
            self._quorum_state.write(data, data_version=0)

    def _deliver(self, event: SnapshotLoad | CommittedBatch[bytes] | LeaderChange) -> None:
        now_ms = self._clock_ms()
        if isinstance(event, SnapshotLoad):
            if self.store is not None:
                self.store.load_snapshot(event)
            waiters = self._waiters
            while waiters and waiters[0][0] < event.snapshot_id.offset:
                self._finish_waiter(heapq.heappop(waiters)[2], committed=None)
        elif isinstance(event, CommittedBatch):
            if self.store is not None:
                self.store.apply(event)
            if self.raft.role is Role.LEADER and event.epoch == self.raft.epoch:
                self._metrics.commit_latency_ms.record(max(0, now_ms - event.append_timestamp_ms))
            waiters = self._waiters
            while waiters and waiters[0][0] <= event.last_offset:
                waiter = heapq.heappop(waiters)[2]
                self._finish_waiter(waiter, committed=event.epoch if waiter.offset >= event.base_offset else None)
        else:
            kept = []
            log_end_offset = self.raft.log_end_offset
            for entry in self._waiters:
                waiter = entry[2]
                # Our own appends can only still commit if they were in our log; a new leader's
                # commit of the offset will tell (its epoch is then compared above).
                if event.leader.epoch > waiter.epoch and log_end_offset <= waiter.offset:
                    self._finish_waiter(waiter, committed=None)
                else:
                    kept.append(entry)
            heapq.heapify(kept)
            self._waiters = kept

    def _finish_waiter(self, waiter: _Waiter, *, committed: int | None) -> None:
        if waiter.future.done():
            return
        if committed == waiter.epoch:
            waiter.future.set_result(AppendResult(offset=waiter.offset, epoch=waiter.epoch))
        else:
            waiter.future.set_exception(
                NotLeaderError(
                    f"offset {waiter.offset} of epoch {waiter.epoch} was replaced by another leader",
                    leader_id=self.raft.leader_id,
                    epoch=self.raft.epoch,
                )
            )

    def _maybe_snapshot(self) -> None:
        # Without the stand-in store the state machine (the quorum controller) snapshots itself.
        if self.store is None or self._store_snapshot is not None:
            return  # one at a time: the store asks again at its next commit
        request = self.store.snapshot_due()
        if request is None:
            return
        try:
            builder = self.raft.snapshot_builder(end_offset=request.end_offset)
        except SnapshotError as e:
            logger.warning("Skipping snapshot at offset %d: %s", request.end_offset, e)
            return
        if isinstance(builder, OffsetAndEpoch):
            return  # that snapshot exists already
        self._store_snapshot = self._spawn(self._write_store_snapshot(builder, request), where="writing a snapshot")

    async def _write_store_snapshot(self, builder: SnapshotBuilder, request: SnapshotRequest) -> None:
        """The test store's snapshot, written as the quorum controller writes its own: the records
        encoded and the file written, checked and fsynced on a worker thread; on raft's loop only
        the rename (`store_snapshot`). The store holds every entry it ever committed, so each
        snapshot is larger than the last: on the loop, one of bench/quorum.py's 1 KiB runs held
        the leader (and each follower) for the encoding and the fsync of tens of megabytes."""
        snapshot_id = builder.snapshot_id
        try:
            data = await asyncio.to_thread(self._build_store_snapshot, builder, request)
            if self._stopped:
                self.discard_prepared_snapshot(snapshot_id)
                return
            self.store_snapshot(snapshot_id, data)
            logger.info("Created snapshot %s", snapshot_id)
        except SnapshotError as e:
            self.discard_prepared_snapshot(snapshot_id)
            logger.warning("Skipping snapshot at offset %d: %s", request.end_offset, e)
        finally:
            self._store_snapshot = None

    def _build_store_snapshot(self, builder: SnapshotBuilder, request: SnapshotRequest) -> bytes:
        """On a worker thread: the snapshot's bytes, and its file prepared (best effort)."""
        data = builder.build(records=request.records,
                             last_contained_log_timestamp_ms=request.last_contained_log_timestamp_ms,
                             now_ms=self._clock_ms())
        self.prepare_snapshot(snapshot_id=builder.snapshot_id, data=data)
        return data

    def _observe_role(self) -> None:
        role = self.raft.role
        if role is self._last_role:
            return
        now_ms = self._clock_ms()
        if role in (Role.PROSPECTIVE, Role.CANDIDATE):
            if self._election_started_ms is None:
                self._election_started_ms = now_ms
        elif role is Role.LEADER and self._election_started_ms is not None:
            self._metrics.election_latency_ms.record(now_ms - self._election_started_ms)
            self._election_started_ms = None
        else:
            self._election_started_ms = None
        logger.info(
            "Node %d is now %s in epoch %d (leader %s)",
            self.raft.node_id, role.value, self.raft.epoch, self.raft.leader_id,
        )
        self._last_role = role

    # -- outbound requests ---------------------------------------------------------------------
    def _spawn(self, coroutine: Any, *, where: str = "an outbound request") -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._task_done(done, where=where))
        return task

    def _connection(self, host: str, port: int) -> KafkaConnection:
        connection = self._connections.get((host, port))
        if connection is None:
            connection = KafkaConnection(host, port, config=self._connection_config)
            self._connections[(host, port)] = connection
        return connection

    async def _send(self, message: OutboundRequest) -> None:
        listener = self.raft.config.controller_listener_name
        endpoints = [e for e in message.endpoints if e.name == listener] or list(message.endpoints)
        result: Any
        endpoint = None
        if not endpoints:
            result = RequestFailure.DISCONNECTED
        else:
            endpoint = endpoints[0]
            connection = self._connection(endpoint.host, endpoint.port)
            loop = asyncio.get_running_loop()
            try:
                if not connection.connected and not await connection.try_connect(
                    deadline=loop.time() + message.timeout_ms / 1000
                ):
                    result = RequestFailure.DISCONNECTED
                else:
                    result = await self._exchange(connection, message)
            except RequestTimedOut:
                result = RequestFailure.TIMED_OUT
            except (UnsupportedApi, UnsupportedVersion):
                result = RequestFailure.UNSUPPORTED_VERSION
            except (ConnectionFailed, ConnectionLost, OSError):
                result = RequestFailure.DISCONNECTED
        if (
            self._records_read_on_loop
            and not isinstance(result, RequestFailure)
            and int(message.request.__api_key__) == _FETCH_API_KEY
        ):
            await _decode_fetched_off_loop(result)
        if self._stopped:
            return
        now_ms = self._clock_ms()
        if not isinstance(result, RequestFailure):
            self._count_fetched(message, result, now_ms)
            if endpoint is not None and is_inconsistent_cluster_id(result):
                self.refusals.outbound(
                    message.request, node_id=message.destination_id, address=(endpoint.host, endpoint.port)
                )
        self._perform(self.raft.handle_response(message.token, result, now_ms=now_ms))

    async def _exchange(self, connection: KafkaConnection, message: OutboundRequest) -> Any:
        request = message.request
        if int(request.__api_key__) != API_VERSIONS_KEY:
            return await connection.send(request, timeout_ms=message.timeout_ms)
        # The core asks a would-be voter's ApiVersions for its kraft.version range. ApiVersions
        # v0-v3 responses leave out features whose minimum is 0 (kraft.version is 0..1), so, as
        # Kafka's NetworkClient does, we speak the newest version on the wire and hand the core
        # the same fields in the response class of the version it built.
        newest = kio_version_range(API_VERSIONS_KEY)
        wire_version = int(request.__version__) if newest is None else newest[1]
        wire_request = request_class(API_VERSIONS_KEY, wire_version)(
            **{f.name: getattr(request, f.name) for f in dataclasses.fields(request)}
        )
        response = await connection.send(wire_request, timeout_ms=message.timeout_ms)
        wanted = response_class(API_VERSIONS_KEY, int(request.__version__))
        if type(response) is wanted:
            return response
        return wanted(**{f.name: getattr(response, f.name) for f in dataclasses.fields(wanted)})

    def _count_fetched(self, message: OutboundRequest, response: Any, now_ms: int) -> None:
        if int(message.request.__api_key__) != _FETCH_API_KEY:
            return
        if int(response.error_code) != 0:
            return
        records = 0
        for topic in response.responses:
            for partition in topic.partitions:
                if int(partition.error_code) != 0:
                    return
                records += _record_count(partition.records)
        self.last_fetch_success_ms = now_ms
        if records:
            self._metrics.fetch_records.record(records)


async def _decode_fetched_off_loop(response: Any) -> None:
    """Decode a Fetch response's large batches on a worker thread before the core sees it.

    Only for a node whose listeners read committed records on the loop (a broker's metadata
    listener; see `RaftDriver.add_listener`): the core appends fetched batches by their headers,
    but such a listener decodes the records of each (a fence at 100k partitions is ten
    10,000-record batches), which on raft's loop delayed its Fetch, Vote and BeginQuorumEpoch
    handling. Decoded here first, those reads find the records remembered by their bytes
    (`records.batches.remember_batches`). Only one Fetch is in flight per peer and the response
    reaches the core after this, so the order of responses is unchanged."""
    if int(response.error_code) != 0:
        return
    fetched = [p.records for t in response.responses for p in t.partitions if p.records]
    if sum(len(r) for r in fetched) < _DECODE_OFF_LOOP_MIN_BYTES:
        return
    await asyncio.to_thread(lambda: [remember_batches(records) for records in fetched])


def _fault_kind(error: BaseException) -> str:
    return "storage" if isinstance(error, StorageIOError) else "unexpected"


def _record_count(data: bytes | None) -> int:
    """Records in concatenated v2 batches, from their headers alone."""
    if not data:
        return 0
    try:
        return sum(header.last_offset - header.base_offset + 1 for header, _ in iter_batches(data))
    except ValueError:
        return 0  # the core rejects a damaged response itself; metrics just skip it
