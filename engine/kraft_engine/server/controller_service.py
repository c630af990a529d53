"""The quorum controller on a running node: one thread that is its single event loop.

The pure `QuorumController` decides everything but performs nothing. This shell gives it what
Kafka's QuorumController gets from its KafkaEventQueue thread and its RaftClient:

- Its own thread, one queue. Raft's driver, the listener and the HTTP endpoint run on the node's
  event loop; the controller runs on a thread of its own, as Kafka's controller runs on its
  event-queue thread and not on the raft client's. Fencing a broker at 100k partitions, creating
  thousands of topics or loading a snapshot takes the controller seconds in Python; on the raft
  loop that would starve Fetch, Vote and BeginQuorumEpoch past the fetch timeout and cost the
  leadership. On a thread the interpreter's switch interval (5 ms) bounds how long the raft loop
  waits for the GIL. `kraftwerk_event_loop_stall_ms` (`server.loop_stall`) measures what is left.
- Client writes and reads, raft callbacks (commits, snapshot loads, leader changes) and periodic
  tasks all run as events dequeued by that one thread, so the controller is never entered
  concurrently. Each event is timed (EventQueueTimeMs, EventQueueProcessingTimeMs).
- The raft core is only ever entered on the raft loop: the controller thread's appends, resigns
  and snapshot creations are run there (`_on_raft_loop`), and the thread waits for their answer.
  The raft loop never waits for the controller thread, so the two cannot deadlock.
- Completion tokens become futures of the caller's loop: a write's future resolves only when the
  controller releases its token (its records are stable), or fails with the controller's
  `ControllerApiError`.
- Records go to the raft layer during the controller's event, through `RaftAppends` (the
  controller's `RaftAppendPort`, each call run on the raft loop): raft reserves their offsets
  (bound to the claim epoch) and holds the batch back, the controller applies the records there,
  then raft may write them. Raft alone assigns offsets, its own control batches' (voter changes,
  leader changes) included, so no batch is ever "placed elsewhere" (docs/controller-offsets.md).
  A refused append makes the controller renounce (reverting what it applied) and the raft layer
  is asked to resign that epoch.
- All the batches of one write (a fence at 100k partitions is eleven) are reserved in one call
  and released in one: two hops onto the raft loop per write, however many batches.
- A write of at least `LARGE_WRITE_RECORDS` records is timed step by step (due, began, reserved,
  released, committed: `LargeWrite`), logged, and shown in `/kraftwerk/status` as
  `last_large_write`, so the time from a session's expiry to its committed fence explains itself.
- Heartbeat contact times are recorded when the request arrives, before it is queued, so a busy
  controller never fences a live broker.
- Every committed batch and snapshot also feeds a `MetadataLoader`, whose image serves reads that
  must not run on the controller's thread (ApiVersions' finalized features) and is what
  snapshots are written from: at a batch-aligned committed offset, once
  `metadata.log.max.record.bytes.between.snapshots` bytes were committed since the last one or
  `metadata.log.max.snapshot.interval.ms` passed with something new. The records are encoded on
  a worker thread; the raft layer then freezes the snapshot and cleans the log prefix behind it.
- A standby that fell too far behind is handed a snapshot by the raft layer and loads it; the
  active controller never does (the controller treats that as a fatal fault).

A fatal fault (`ControllerFault`, or a record the loader cannot replay) stops the loop, fails every
waiting client and calls `on_fatal` on the loop that started the service: the node must not keep
serving from state it cannot trust.

Metrics are Kafka's controller metrics under the JMX-exporter naming of the node's registry,
e.g. `kafka.controller:type=KafkaController,name=ActiveControllerCount` is
`kafka_controller_kafkacontroller_activecontrollercount`; the two event-queue timers are
`kafka_controller_controllereventmanager_eventqueuetimems` / `..._eventqueueprocessingtimems`
(histograms in ms). The gauges are the controller's own snapshot, taken on its thread after every
event, so a scrape never reads state the controller thread is changing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar, cast

from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kraft_engine.controller import (
    AppendRefused,
    ControllerApiError,
    ControllerMetrics,
    QuorumController,
    RecordAndVersion,
    encode_records,
    records_only,
)
from kraft_engine.errors import RaftError, ServerError, SnapshotError
from kraft_engine.metadata import MetadataImage, MetadataLoader, MetadataReplayError
from kraft_engine.protocol import Features
from kraft_engine.raft import (
    BOOTSTRAP_SNAPSHOT_ID,
    CommittedBatch,
    LeaderChange,
    NotLeaderError,
    SnapshotBuilder,
    SnapshotLoad,
)
from kraft_engine.records import (
    RecordParts,
    decode_metadata_record,
    decode_metadata_records,
    encode_metadata_record,
)
from kraft_engine.records.log_batch import OffsetAndEpoch
from kraft_engine.server.collector import collector_paused

__all__ = ["ControllerService", "ControllerStopped", "RaftAppends", "RaftPort", "SnapshotPolicy"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_MS_BUCKETS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class RaftPort(Protocol):
    """What the controller needs from the node's raft driver (all calls happen on the raft loop)."""

    @property
    def high_watermark(self) -> int | None: ...

    @property
    def next_append_offset(self) -> int: ...

    def holds_leadership(self, epoch: int) -> bool:
        """Raft is the Leader of `epoch` (a Resigned node names itself leader but is not)."""

    def prepare_appends(self, batches: list[list[bytes]], *, epoch: int) -> list[int]:
        """Reserve offsets for `batches` as leader of `epoch`, all or none; the last of each.
        Raises NotLeaderError."""

    def schedule_prepared_append(self) -> None: ...

    def resign(self, epoch: int) -> None: ...

    def snapshot_builder(self, *, end_offset: int) -> SnapshotBuilder | OffsetAndEpoch:
        """The layout of a snapshot at `end_offset`, to build off the raft loop (or its id if it exists)."""

    def prepare_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> bool:
        """Write `data` ahead of `store_snapshot`, off raft's loop; False when it could not be."""

    def discard_prepared_snapshot(self, snapshot_id: OffsetAndEpoch) -> None: ...

    def store_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> OffsetAndEpoch: ...


class RaftAppends:
    """The controller's `RaftAppendPort` on the node's raft layer: records are encoded on the
    controller thread, and their offsets are whatever raft reserves (Kafka's prepareAppend /
    schedulePreparedAppend). The `ControllerService` running the controller routes each call to
    the raft loop (`call_through`); until then calls go straight to `raft`."""

    def __init__(self, raft: RaftPort) -> None:
        self._raft = raft
        self._call: Callable[[Callable[[], Any]], Any] = lambda call: call()
        #: base offset -> (epoch, last offset, records) of the batches this port reserved and that
        #: have not come back committed yet. Raft hands each batch back once committed, and
        #: (base offset, epoch) names it uniquely, so the service takes the records from here
        #: instead of decoding them again (Kafka's leader, too, hands its listener the records it
        #: appended from memory). Only the controller thread touches it.
        self.own_batches: dict[int, tuple[int, int, Sequence[Any]]] = {}
        #: The current event's appends, reset by the service before each event.
        self.timing = _AppendTiming()

    def call_through(self, on_raft_loop: Callable[[Callable[[], Any]], Any]) -> None:
        self._call = on_raft_loop

    def next_append_offset(self) -> int:
        return int(self._call(lambda: self._raft.next_append_offset))

    def prepare_appends(self, *, epoch: int, batches: Sequence[Sequence[RecordAndVersion]]) -> list[int]:
        values = [encode_records(records) for records in batches]
        count = sum(map(len, values))
        try:
            last_offsets = list(self._call(lambda: self._raft.prepare_appends(values, epoch=epoch)))
        except NotLeaderError as error:
            logger.info("Append of %d records in epoch %d refused by raft (%s): renouncing", count, epoch, error)
            raise AppendRefused(str(error)) from error
        except RaftError as error:
            logger.warning("Append of %d records in epoch %d failed (%s): renouncing", count, epoch, error)
            raise AppendRefused(str(error)) from error
        for records, encoded, last_offset in zip(batches, values, last_offsets, strict=True):
            self.own_batches[last_offset - len(encoded) + 1] = (epoch, last_offset, records_only(records))
        self.timing.reserved(records=count, batches=len(values), last_offset=last_offsets[-1])
        return last_offsets

    def schedule_prepared_append(self) -> None:
        self._call(self._raft.schedule_prepared_append)
        self.timing.released()


@dataclass(slots=True)
class LargeWrite:
    """When the controller's latest large write (at least `LARGE_WRITE_RECORDS` records in one
    event) went through each step, in wall-clock ms: what `/kraftwerk/status` shows as
    `last_large_write` and the controller logs, so a slow fence explains itself."""

    name: str
    records: int
    batches: int
    last_offset: int
    due_ms: int | None  # the periodic task's deadline (a fence: the session's expiry), if one
    started_ms: int  # the event (or the periodic tasks) began
    reserved_ms: int  # raft took all its batches (one call)
    released_ms: int  # applied, and let go to the log
    committed_ms: int | None = None  # raft delivered its last batch as committed (raft's loop)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: A write event appending at least this many records is timed step by step (`LargeWrite`).
LARGE_WRITE_RECORDS = 10_000


class _AppendTiming:
    """What `RaftAppends` saw of the current event's appends (the controller thread only)."""

    __slots__ = ("batches", "last_offset", "records", "released_ns", "reserved_ns")
    records: int
    batches: int
    last_offset: int
    reserved_ns: int
    released_ns: int

    def __init__(self) -> None:
        self.reset()

    def reserved(self, *, records: int, batches: int, last_offset: int) -> None:
        self.records += records
        self.batches += batches
        self.last_offset = last_offset
        self.reserved_ns = time.monotonic_ns()

    def released(self) -> None:
        self.released_ns = time.monotonic_ns()

    def reset(self) -> None:
        self.records = self.batches = self.reserved_ns = self.released_ns = 0
        self.last_offset = -1


class ControllerStopped(ServerError):
    """The controller loop is not running (shut down, or stopped by a fatal fault)."""


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When to write a snapshot (Kafka's keys; the interval counts only when something is new), and
    how many records the writer encodes between two rounds of raft's loop (about 10 ms of CPU)."""

    max_bytes_between_snapshots: int = 20 * 1024 * 1024  # metadata.log.max.record.bytes.between.snapshots
    max_interval_ms: int = 60 * 60 * 1000  # metadata.log.max.snapshot.interval.ms (0: off)
    slice_records: int = 2000


@dataclass(slots=True)
class _Event:
    name: str
    run: Callable[[], None]
    enqueued_ns: int


_STOP = _Event("stop", lambda: None, 0)  # the sentinel that ends the controller thread
#: How long the controller thread waits for the raft loop to take a call before it gives up.
_RAFT_CALL_TIMEOUT_S = 60.0


def _resolve(future: asyncio.Future[Any], *, result: Any = None, error: BaseException | None = None) -> None:
    """Complete a future of another thread's loop from the controller thread (or its own)."""

    def complete() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
        future.get_loop().call_soon_threadsafe(complete)


_GAUGES: tuple[tuple[str, str, str], ...] = (
    # (Prometheus name suffix, ControllerMetrics field, help)
    ("activecontrollercount", "active_controller_count", "1 on the active controller, 0 elsewhere"),
    ("newactivecontrollerscount", "new_active_controllers_count", "Times this node became the active controller"),
    ("fencedbrokercount", "fenced_broker_count", "Registered brokers that are fenced"),
    ("activebrokercount", "active_broker_count", "Registered brokers that are unfenced"),
    ("globaltopiccount", "global_topic_count", "Topics"),
    ("globalpartitioncount", "global_partition_count", "Partitions"),
    ("offlinepartitionscount", "offline_partitions_count", "Partitions without a leader"),
    ("preferredreplicaimbalancecount", "preferred_replica_imbalance_count",
     "Partitions not led by their preferred replica"),
    ("metadataerrorcount", "metadata_error_count", "Metadata faults seen by this controller"),
    ("lastappliedrecordoffset", "last_applied_record_offset", "Offset of the last record applied"),
    ("lastcommittedrecordoffset", "last_committed_record_offset", "Offset of the last committed record"),
    ("lastappliedrecordtimestamp", "last_applied_record_timestamp_ms", "Append time (ms) of the last applied record"),
    ("lastappliedrecordlagms", "last_applied_record_lag_ms", "Now minus the append time of the last applied record"),
)


class _ControllerCollector(Collector):
    """One consistent `ControllerMetrics` snapshot per scrape."""

    def __init__(self, service: ControllerService) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        service = self._service
        snapshot = service.metrics_snapshot
        timestamp_ms = snapshot.last_applied_record_timestamp_ms
        for suffix, field_name, documentation in _GAUGES:
            value = getattr(snapshot, field_name)
            if field_name == "metadata_error_count":
                value += service.shell_error_count
            elif field_name == "last_applied_record_lag_ms" and timestamp_ms >= 0:
                value = max(0, service.now_ms() - timestamp_ms)
            yield GaugeMetricFamily(f"kafka_controller_kafkacontroller_{suffix}", documentation, value=value)


class _Metrics:
    def __init__(self, registry: CollectorRegistry, service: ControllerService) -> None:
        registry.register(_ControllerCollector(service))
        self.queue_time_ms = Histogram(
            "kafka_controller_controllereventmanager_eventqueuetimems",
            "Time an event waited in the controller queue (ms)", registry=registry, buckets=_MS_BUCKETS,
        )
        self.processing_time_ms = Histogram(
            "kafka_controller_controllereventmanager_eventqueueprocessingtimems",
            "Time the controller spent processing an event (ms)", registry=registry, buckets=_MS_BUCKETS,
        )


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class ControllerService:
    """Runs a `QuorumController` on its own thread against a `RaftPort`; see the module docstring."""

    def __init__(
        self,
        *,
        controller: QuorumController,
        raft: RaftPort,
        registry: CollectorRegistry,
        supported_features: dict[str, tuple[int, int]],
        snapshot_policy: SnapshotPolicy | None = None,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.controller = controller
        self._raft = raft
        self._supported_features = dict(supported_features)
        self._snapshot_policy = snapshot_policy or SnapshotPolicy()
        self._clock_ms = clock_ms
        self._on_fatal = on_fatal
        self.loader = MetadataLoader(publisher_fault_handler=self._publisher_fault)
        self._queue: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        # Futures of the callers' loops, keyed by completion token; only the controller thread
        # touches the dict.
        self._futures: dict[int, asyncio.Future[Any]] = {}
        # Commits delivered (raft loop) but not yet taken by the controller thread.
        self._group_lock = threading.Lock()
        self._open_commit_group: list[CommittedBatch[bytes]] | None = None
        self._thread: threading.Thread | None = None
        self._raft_loop: asyncio.AbstractEventLoop | None = None
        self._raft_thread: threading.Thread | None = None
        self._stopping = False
        self._snapshot_thread: threading.Thread | None = None
        self.fault: BaseException | None = None
        #: Faults the shell saw (loader, publishers, snapshots); MetadataErrorCount adds the controller's.
        self.shell_error_count = 0
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = clock_ms()
        self._applied_since_snapshot = False
        #: Snapshot ids this service wrote (newest last), for status pages and tests.
        self.snapshots_written: list[OffsetAndEpoch] = []
        #: The controller's metrics as of its last event (taken on its thread; read by scrapes).
        self.metrics_snapshot: ControllerMetrics = controller.metrics(clock_ms())
        self._metrics = _Metrics(registry, self)
        port = controller.raft_port
        # This controller's own batches, reserved through the port and not yet committed.
        self._own_batches: dict[int, tuple[int, int, Sequence[Any]]] = {}
        self._append_timing: _AppendTiming | None = None
        if isinstance(port, RaftAppends):
            port.call_through(self._on_raft_loop)
            self._own_batches = port.own_batches
            self._append_timing = port.timing
        #: The latest large write's steps (`LargeWrite`); written by the controller thread, its
        #: commit time by raft's loop.
        self.last_large_write: LargeWrite | None = None
        self._delivered_offset = -1  # the last committed offset raft delivered (raft's loop writes it)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the controller thread (call on the raft driver's running loop)."""
        if self._thread is None:
            self._raft_loop = asyncio.get_running_loop()
            self._raft_thread = threading.current_thread()
            self._thread = threading.Thread(
                target=self._run, name=f"controller-{self.controller.node_id}-event-handler", daemon=True
            )
            self._thread.start()

    async def close(self) -> None:
        """Stop the thread; every waiting client gets ControllerStopped."""
        self._stopping = True
        for thread in (self._thread, self._snapshot_thread):
            if thread is not None and thread.is_alive():
                if thread is self._thread:
                    self._queue.put(_STOP)
                # The thread may be waiting for a raft call on this loop: never block the loop.
                await asyncio.to_thread(thread.join)
        self._thread = None
        self._fail_all(ControllerStopped("the controller is shutting down"))

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.fault is None

    # -- ApiVersions -----------------------------------------------------------------------------
    def features(self) -> Features:
        """Supported and finalized features as of the committed image (the listener's provider)."""
        image = self.loader.image
        finalized: dict[str, int] = dict(image.features.finalized_versions)
        if image.features.metadata_version is not None:
            finalized["metadata.version"] = image.features.metadata_version
        return Features(supported=self._supported_features, finalized=finalized, finalized_epoch=image.offset)

    @property
    def image(self) -> MetadataImage:
        return self.loader.image

    # -- raft listener (the driver calls these on the raft loop, in raft order) ------------------
    def handle_raft_event(self, event: SnapshotLoad | CommittedBatch[bytes] | LeaderChange) -> None:
        """Queue a raft listener event; it runs on the controller thread in the order delivered."""
        with self._group_lock:
            if isinstance(event, CommittedBatch):
                self._delivered_offset = event.last_offset
                write = self.last_large_write
                if write is not None and write.committed_ms is None and event.last_offset >= write.last_offset:
                    write.committed_ms = self._clock_ms()
                    logger.info("Controller %d: the %d records of %s up to offset %d committed %d ms after it began",
                                self.controller.node_id, write.records, write.name, write.last_offset,
                                write.committed_ms - write.started_ms)
                # Consecutive commits the controller has not started on become one event, so the
                # loader folds them into one delta and one new image (an image per batch would
                # dominate a catch-up).
                group = self._open_commit_group
                if group is None:
                    group = self._open_commit_group = []
                    self._enqueue("handleCommit", lambda: self._commit(group))
                group.append(event)
                return
            # Any other event closes the group: commits delivered after it must run after it.
            self._open_commit_group = None
        if isinstance(event, SnapshotLoad):
            self._enqueue("handleLoadSnapshot", lambda: self._load_snapshot(event))
        else:
            # Whether raft holds the epoch is read now, in raft order (this runs on the raft
            # loop), not when the event runs on the controller thread.
            raft_is_leader = self._raft.holds_leadership(event.leader.epoch)
            self._enqueue("handleLeaderChange", lambda: self._leader_change(event, raft_is_leader))

    def run_on_controller(self, name: str, run: Callable[[QuorumController], None]) -> None:
        """Queue `run` to be called with the controller on its thread (raft listeners use this)."""
        self._enqueue(name, lambda: run(self.controller))

    # -- client operations -----------------------------------------------------------------------
    async def write(self, name: str, operation: Callable[[QuorumController], int], *,
                    timeout_ms: int | None = None) -> Any:
        """Run a controller write on its thread; its response once durable (or ControllerApiError).

        With `timeout_ms` (the request's own timeout) the client gets REQUEST_TIMED_OUT when the
        write is not durable in time, as from Kafka's event deadlines; a write still queued then
        never runs, one already appended may still commit."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def run() -> None:
            token = operation(self.controller)
            self._futures[token] = future

        started_ns = time.monotonic_ns()
        self._enqueue(name, run, future)
        try:
            if timeout_ms is None or timeout_ms <= 0:
                return await future
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    return await future
            except TimeoutError:
                raise ControllerApiError(
                    ErrorCode.request_timed_out, f"{name} was not committed within {timeout_ms} ms"
                ) from None
        except ControllerApiError as error:
            # Kafka's handleEventException logs every refused operation at INFO with its reason.
            logger.info("%s: event failed with %s in %d microseconds. Reason: %s", name,
                        error.error_code.name.upper(), (time.monotonic_ns() - started_ns) // 1000, error.message)
            raise

    async def read(self, name: str, operation: Callable[[QuorumController], T]) -> T:
        """Run `operation` on the controller's thread against its state."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def run() -> None:
            try:
                _resolve(future, result=operation(self.controller))
            except Exception as error:  # a failed read is the reader's problem, not a fault
                _resolve(future, error=error)

        self._enqueue(name, run, future)
        return await future

    def track_broker_heartbeat(self, broker_id: int, broker_epoch: int) -> None:
        """Record a heartbeat's arrival now, before its event waits in the queue."""
        self.controller.track_broker_heartbeat(broker_id, broker_epoch, self._clock_ms())

    def now_ms(self) -> int:
        return self._clock_ms()

    # -- the queue -------------------------------------------------------------------------------
    def _enqueue(self, name: str, run: Callable[[], None], future: asyncio.Future[Any] | None = None) -> None:
        if self.fault is not None or self._stopping or (self._thread is not None and not self._thread.is_alive()):
            error = ControllerStopped(f"the controller loop is stopped: {self.fault}")
            if future is not None:
                future.set_exception(error)
                return
            raise error
        if future is not None:
            original = run

            def run() -> None:
                if future.cancelled():
                    return
                try:
                    original()
                except ControllerApiError as error:
                    _resolve(future, error=error)

        self._queue.put(_Event(name, run, time.monotonic_ns()))

    def _run(self) -> None:
        """The controller thread."""
        try:
            while True:
                event = self._next_event()
                if event is _STOP:
                    return
                # The controller's clock moves on every wake-up, and due periodic tasks run first
                # (a fence among them: bulk work, so without the collector, as an event).
                due_ms = self.controller.next_deadline_ms()
                with self._timed("periodic tasks", due_ms=due_ms), collector_paused():
                    self.controller.tick(self._clock_ms())
                    self._perform_effects()
                if event is not None:
                    started_ns = time.monotonic_ns()
                    self._metrics.queue_time_ms.observe((started_ns - event.enqueued_ns) / 1e6)
                    with self._timed(event.name, due_ms=None), collector_paused():
                        event.run()
                        self._perform_effects()
                    self._metrics.processing_time_ms.observe((time.monotonic_ns() - started_ns) / 1e6)
                self._maybe_snapshot()
        except BaseException as error:  # a fault: nothing the controller holds can be trusted now
            self._fatal(error)

    @contextlib.contextmanager
    def _timed(self, name: str, *, due_ms: int | None) -> Iterator[None]:
        """Time the block's appends step by step when they are a large write (`LargeWrite`)."""
        timing = self._append_timing
        if timing is None:
            yield
            return
        timing.reset()
        started_ns, started_ms = time.monotonic_ns(), self._clock_ms()
        yield
        if timing.records < LARGE_WRITE_RECORDS:
            return

        def at_ms(ns: int) -> int:
            return started_ms + (ns - started_ns) // 1_000_000

        write = LargeWrite(name=name, records=timing.records, batches=timing.batches, last_offset=timing.last_offset,
                           due_ms=due_ms, started_ms=started_ms, reserved_ms=at_ms(timing.reserved_ns),
                           released_ms=at_ms(timing.released_ns))
        self.last_large_write = write
        if write.committed_ms is None and self._delivered_offset >= write.last_offset:
            # Committed before this thread got here (raft's loop saw no large write to time): the
            # commit time is at most now.
            write.committed_ms = self._clock_ms()
        logger.info(
            "Controller %d: %s appended %d records in %d batches ending at offset %d; began %s, raft reserved "
            "them %d ms in, applied and released %d ms in",
            self.controller.node_id, name, write.records, write.batches, write.last_offset,
            "on time" if due_ms is None else f"{started_ms - due_ms} ms after it was due",
            write.reserved_ms - started_ms, write.released_ms - started_ms,
        )

    def _next_event(self) -> _Event | None:
        deadline_ms = self.controller.next_deadline_ms()
        if deadline_ms is None:
            return self._queue.get()
        wait_s = max(0.0, (deadline_ms - self._clock_ms()) / 1000)
        try:
            return self._queue.get(timeout=wait_s)
        except queue.Empty:
            return None

    def call_on_raft_loop(self, call: Callable[[], T]) -> T:
        """Run `call` on the raft loop and wait for it (from the controller thread, e.g. inside an event)."""
        return self._on_raft_loop(call)

    def _on_raft_loop(self, call: Callable[[], T]) -> T:
        """Run `call` on the raft loop and wait for its result (the raft core is entered only there)."""
        loop = self._raft_loop
        if loop is None or threading.current_thread() is self._raft_thread:
            return call()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not done.set_running_or_notify_cancel():
                return
            try:
                done.set_result(call())
            except BaseException as error:
                done.set_exception(error)

        try:
            loop.call_soon_threadsafe(run)
        except RuntimeError:
            raise RaftError("the raft loop is closed") from None
        try:
            return done.result(timeout=_RAFT_CALL_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            done.cancel()
            raise RaftError(f"the raft loop did not take a call within {_RAFT_CALL_TIMEOUT_S:.0f} s") from None

    def _fatal(self, error: BaseException) -> None:
        self.fault = error
        self.shell_error_count += 1
        logger.critical("Controller %d stopped by a fatal fault: %s", self.controller.node_id, error, exc_info=error)
        self._fail_all(ControllerStopped(f"the controller stopped after a fatal fault: {error}"))
        on_fatal, loop = self._on_fatal, self._raft_loop
        if on_fatal is not None:
            if loop is None:
                on_fatal(error)
            else:
                with contextlib.suppress(RuntimeError):  # the node's loop is gone already
                    loop.call_soon_threadsafe(on_fatal, error)

    def _fail_all(self, error: Exception) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        for future in list(self._futures.values()):
            _resolve(future, error=error)
        self._futures.clear()

    # -- effects ---------------------------------------------------------------------------------
    def _perform_effects(self) -> None:
        controller = self.controller
        while True:
            effects = controller.take_effects()
            snapshot = self.metrics_snapshot
            moved = (snapshot.last_applied_record_offset != controller.events.last_applied_offset
                     or snapshot.active_controller_count != controller.active_controller_count())
            if moved or not effects.is_empty():
                # The metrics a client may look at once its write completes are current first.
                self.metrics_snapshot = controller.metrics(self._clock_ms())
            if effects.is_empty():
                return
            for name, error in effects.faults:
                # Kafka's handleEventException: log, renounce (done), UNKNOWN_SERVER_ERROR to the client.
                logger.error(
                    "Controller %d: unexpected error in %s; renouncing leadership and answering UNKNOWN_SERVER_ERROR",
                    controller.node_id, name, exc_info=error,
                )
            for token, response in effects.completed:
                future = self._futures.pop(token, None)
                if future is not None:
                    _resolve(future, result=response)
            for failed in effects.failed:
                future = self._futures.pop(failed.token, None)
                if future is not None:
                    _resolve(future, error=failed.error)
            if effects.resign_epoch is not None:
                logger.info("Controller %d renounced epoch %d", controller.node_id, effects.resign_epoch)
                self._on_raft_loop(functools.partial(self._raft.resign, effects.resign_epoch))

    # -- raft events -----------------------------------------------------------------------------
    def _commit(self, group: list[CommittedBatch[bytes]]) -> None:
        with self._group_lock:
            if self._open_commit_group is group:
                self._open_commit_group = None  # later commits start a new event
            batches = list(group)
        loaded: list[CommittedBatch[object]] = []
        for batch in batches:
            records = self._own_records(batch)
            if records is None:
                records = decode_metadata_records(batch.records)
                for stale in [o for o in self._own_batches if o <= batch.last_offset]:
                    del self._own_batches[stale]
            # The node's own records may be `RecordParts` (a fan-out's run kept whole), which the
            # controller and the loader read as the sequence of records it stands for.
            decoded: CommittedBatch[object] = batch.with_records(cast("tuple[object, ...]", records))
            self.controller.handle_commit(decoded)
            if batch.last_offset <= self.loader.last_applied_offset:
                continue  # already in a snapshot the loader was given
            loaded.append(decoded)
            self._bytes_since_snapshot += batch.size_in_bytes
        if loaded:
            self.loader.handle_commit(loaded, high_watermark=self._raft.high_watermark)
            self._applied_since_snapshot = True

    def _own_records(self, batch: CommittedBatch[bytes]) -> Sequence[Any] | None:
        """The records of a committed batch this controller reserved itself (raft may have put
        several reserved batches in one log batch), or None when they must be decoded."""
        own_batches = self._own_batches
        parts: list[Sequence[Any]] = []
        offset = batch.base_offset
        while offset <= batch.last_offset:
            own = own_batches.get(offset)
            if own is None or own[0] != batch.epoch or own[1] > batch.last_offset:
                return None
            parts.append(own[2])
            offset = own[1] + 1
        records = parts[0] if len(parts) == 1 else RecordParts(parts)
        if len(records) != batch.record_count:  # counted, not decoded: the values are not needed
            return None
        offset = batch.base_offset
        while offset <= batch.last_offset:
            offset = own_batches.pop(offset)[1] + 1
        return records

    def _load_snapshot(self, event: SnapshotLoad) -> None:
        if event.snapshot_id == BOOTSTRAP_SNAPSHOT_ID:
            # The bootstrap checkpoint seeds activation (the controller was built with its
            # records); it is never loaded as state.
            return
        records = [decode_metadata_record(value)[0] for batch in event.batches for value in batch.records]
        last_offset = event.snapshot_id.offset - 1
        logger.info("Controller %d loading snapshot %s", self.controller.node_id, event.snapshot_id)
        self.controller.handle_load_snapshot(
            last_contained_offset=last_offset, epoch=event.snapshot_id.epoch, records=records
        )
        self.loader.handle_load_snapshot(
            records,
            last_contained_offset=last_offset,
            last_contained_epoch=event.snapshot_id.epoch,
            last_contained_log_time_ms=event.last_contained_log_timestamp_ms,
        )
        self._bytes_since_snapshot = 0
        self._applied_since_snapshot = False

    def _leader_change(self, event: LeaderChange, raft_is_leader: bool) -> None:
        # Batches of an earlier epoch that never committed are never handed back.
        self._own_batches.clear()
        leader = event.leader
        self.controller.handle_leader_change(
            leader_id=leader.leader_id, epoch=leader.epoch, now_ms=self._clock_ms(), raft_is_leader=raft_is_leader,
        )
        if leader.leader_id == self.controller.node_id and not raft_is_leader:
            logger.info("Controller %d is not activating: raft names it leader of epoch %d but does not hold "
                        "that leadership (resigned, e.g. restarted from a quorum-state naming itself)",
                        self.controller.node_id, leader.epoch)
        self.loader.handle_leader_change(leader)
        if self.controller.is_active():
            logger.info("Controller %d is active in epoch %d", self.controller.node_id, leader.epoch)

    def _publisher_fault(self, what: str, error: BaseException) -> None:
        self.shell_error_count += 1
        logger.error("Metadata publisher fault: %s: %s", what, error)

    # -- snapshots -------------------------------------------------------------------------------
    def _snapshot_due(self) -> bool:
        if not self._applied_since_snapshot or self.loader.image.offset < 0:
            return False
        policy = self._snapshot_policy
        if self._bytes_since_snapshot >= policy.max_bytes_between_snapshots:
            return True
        return policy.max_interval_ms > 0 and self._clock_ms() - self._last_snapshot_ms >= policy.max_interval_ms

    def _maybe_snapshot(self) -> None:
        if self._snapshot_thread is not None and self._snapshot_thread.is_alive():
            return
        if self._stopping or not self._snapshot_due():
            return
        image = self.loader.image
        if not image.provenance.is_offset_batch_aligned:
            return  # a later commit will end on a batch boundary
        self._bytes_since_snapshot = 0
        self._applied_since_snapshot = False
        self._last_snapshot_ms = self._clock_ms()
        # Encoding the image is the expensive part and the image is immutable: a worker thread
        # does it, so neither the controller nor raft waits for it.
        # Published once started: whoever reads the attribute (close, a test) may join it at once.
        thread = threading.Thread(
            target=self._write_snapshot, args=(image,), name=f"controller-{self.controller.node_id}-snapshot",
            daemon=True,
        )
        thread.start()
        self._snapshot_thread = thread

    def _write_snapshot(self, image: MetadataImage) -> None:
        started_ns = time.monotonic_ns()
        try:
            # Encoding ~100k records and laying them out in batches is seconds of Python on this
            # thread. It runs in slices, and before each next slice this thread waits until raft's
            # loop has gone round once: the loop never waits for the GIL behind more than one
            # slice of this work. The collector is held off meanwhile: the records are short-lived,
            # but a hundred thousand of them would set off full collections, each a stop of every
            # thread, raft's loop included (see `server.collector`).
            with collector_paused():
                records = self._encode_in_slices(image)
                if self.fault is not None or self._stopping:
                    return
                # Only the decisions and the final rename run on the raft loop.
                builder = self._on_raft_loop(lambda: self._raft.snapshot_builder(end_offset=image.offset + 1))
                if isinstance(builder, OffsetAndEpoch):
                    snapshot_id = builder
                else:
                    data = builder.build(records=records,
                                         last_contained_log_timestamp_ms=image.provenance.last_contained_log_time_ms,
                                         now_ms=self._clock_ms(), between_batches=self._let_raft_loop_run)
                    # The file's write, check and fsync here too; the loop only renames it into place.
                    prepared = self._raft.prepare_snapshot(builder.snapshot_id, data)
                    try:
                        snapshot_id = self._on_raft_loop(lambda: self._raft.store_snapshot(builder.snapshot_id, data))
                    finally:
                        if prepared:
                            self._raft.discard_prepared_snapshot(builder.snapshot_id)  # unless stored
        except MetadataReplayError as error:
            self.shell_error_count += 1
            logger.error("Cannot write a snapshot of the image at %d: %s", image.offset, error)
            return
        except _SnapshotAbandoned:
            return
        except (SnapshotError, RaftError) as error:
            logger.warning("Skipping the snapshot at offset %d: %s", image.offset + 1, error)
            return
        self.snapshots_written.append(snapshot_id)
        logger.info(
            "Controller %d wrote snapshot %d-%d: %d records, %d bytes in %.1f ms", self.controller.node_id,
            snapshot_id.offset, snapshot_id.epoch, len(records), sum(len(r) for r in records), (time.monotonic_ns() - started_ns) / 1e6,
        )

    def _encode_in_slices(self, image: MetadataImage) -> list[bytes]:
        """The image's records, encoded as the image writes them (no list of record objects is
        kept), raft's loop let run after every `SnapshotPolicy.slice_records` of them."""
        encoder = _SlicedEncoder(slice_records=self._snapshot_policy.slice_records, between_slices=self._let_raft_loop_run)
        image.write(encoder)
        return encoder.encoded

    def _let_raft_loop_run(self) -> None:
        """Wait (on a worker thread) until raft's loop has gone round once: a callback queued now
        queues another, which runs only after the loop's next poll for I/O and the handlers that
        poll made ready. Raises `_SnapshotAbandoned` once the service stops or the loop is gone."""
        loop = self._raft_loop
        if loop is None or threading.current_thread() is self._raft_thread:
            return
        went_round = threading.Event()

        def queue_next_round() -> None:
            loop.call_soon(went_round.set)

        try:
            loop.call_soon_threadsafe(queue_next_round)
        except RuntimeError:
            raise _SnapshotAbandoned from None
        deadline = time.monotonic() + _RAFT_CALL_TIMEOUT_S
        while not went_round.wait(0.1):
            if self._stopping or self.fault is not None or loop.is_closed():
                raise _SnapshotAbandoned
            if time.monotonic() > deadline:
                raise RaftError(f"the raft loop did not go round within {_RAFT_CALL_TIMEOUT_S:.0f} s")
        if self._stopping or self.fault is not None:
            raise _SnapshotAbandoned


class _SnapshotAbandoned(ServerError):
    """The service stopped (or raft's loop went away) while a snapshot was being written."""


class _SlicedEncoder:
    """An `ImageWriter` that encodes each record as it is written and calls `between_slices`
    after every `slice_records` records."""

    def __init__(self, *, slice_records: int, between_slices: Callable[[], None]) -> None:
        self.encoded: list[bytes] = []
        self._slice_records = slice_records
        self._between_slices = between_slices
        self._in_slice = 0

    def write(self, record: Any, version: int) -> None:
        self.encoded.append(encode_metadata_record(record, version))
        self._in_slice += 1
        if self._in_slice >= self._slice_records:
            self._in_slice = 0
            self._between_slices()


