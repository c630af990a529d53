"""A broker's replicas: their logs on disk, leader and follower roles from metadata, replication.

Kafka's ReplicaManager, LogManager and ReplicaFetcherManager for one broker process, on the event
loop. What it keeps true:

- Roles come from committed metadata only. `apply_delta` takes each published delta's local
  changes (PartitionRecord / PartitionChangeRecord for this broker): a partition whose leader is
  this broker becomes (or stays) a leader with the leader epoch of the record, any other hosted
  partition follows the named leader, and a removed replica or deleted topic is closed and its
  directory deleted. Nothing a controller or another broker says outside the metadata log changes
  a role.
- A leader appends produced batches stamped with its leader epoch; offsets are assigned from its
  log end. Its high watermark is the smallest log end offset of the maximal ISR
  (`broker.replica_state`), and an acks=all produce is answered only once the high watermark has
  passed the batch's last offset (or with an error once this broker is no longer the leader of
  that epoch, or the request's timeout passed).
- A follower fetches from its leader (one fetch loop per source broker) with the epoch of its
  last batch; a leader answers a diverging follower with the epoch's end offset, and the follower
  truncates to it before fetching again (Kafka's KIP-101/KIP-279 truncation).
- ISR changes go through AlterPartition to the active controller with the partition epoch; the
  answer (or, for stale or failed answers, the next metadata) installs the committed ISR.
- High watermarks are checkpointed per log directory in Kafka's `replication-offset-checkpoint`
  every `replica.high.watermark.checkpoint.interval.ms` (with `cleaner-offset-checkpoint`), the
  recovery point in `recovery-point-offset-checkpoint` every
  `log.flush.offset.checkpoint.interval.ms` and the log start offset in
  `log-start-offset-checkpoint` every `log.flush.start.offset.checkpoint.interval.ms` (Kafka's
  5 s, 60 s, 60 s), and all of them at shutdown, so a restart resumes from them.
- Retention (Kafka's LogManager cleanup): every `log.retention.check.interval.ms`, each hosted
  replica of a topic whose `cleanup.policy` includes `delete` drops the segments its
  `retention.ms` / `retention.bytes` (broker defaults `log.retention.*`) expire, below its high
  watermark. Followers also move their log start offset up to the leader's (from each Fetch
  answer), so a leader's retention reaches every replica.
- Restarts: a clean shutdown (close) flushes every log, writes each partition's producer-state
  snapshot at its log end and the checkpoints, and leaves Kafka's `.kafka_cleanshutdown` marker
  (`{"version":0,"brokerEpoch":N}`) in every log directory. The next start removes the markers
  before anything is written and opens the logs of a marked directory without reading them
  (`PartitionLog.open(clean_shutdown=True)`), and producer state from the snapshot, so a restart
  reads almost nothing. Without the marker (kill -9) recovery CRC-checks from the recovery point
  and producer state replays from the newest snapshot (written at each segment roll).
- JBOD (KIP-858): a new replica goes to the directory the controller assigned when it is ours and
  online, else to the online directory with the fewest replicas, and a placement the controller
  does not know yet is reported with AssignReplicasToDirs (batched, retried until accepted). A
  storage error on one directory (a failed write, fsync, rename or checkpoint) takes that
  directory offline, only it: its replicas are closed and answer KAFKA_STORAGE_ERROR, the
  broker's heartbeats report the directory in `offline_log_dirs` so the controller moves
  leadership away and shrinks the ISRs, and the other directories keep serving. With every
  directory offline the broker halts, as Kafka does.
- Compaction (Kafka's LogCleaner, `storage.log_cleaner`): every `log.cleaner.backoff.ms`, each
  replica of a topic whose `cleanup.policy` includes `compact` is cleaned below its high watermark
  when its dirty ratio reaches `min.cleanable.dirty.ratio`; the first dirty offset is kept in
  `cleaner-offset-checkpoint`. Every replica cleans its own log, as in Kafka. Partition logs are
  opened with offset gaps allowed, since compaction makes them.

- Replication throttles (Kafka's ReplicationQuotaManager, `broker.replication_quota`): the
  dynamic broker configs `leader/follower.replication.throttled.rate` and the topic configs
  `leader/follower.replication.throttled.replicas` (`update_throttles`, on every config delta)
  hold an out-of-sync follower of a throttled replica back while the quota is exceeded, on the
  follower (left out of its Fetch) and on the leader (answered without records, `broker_apis`);
  `replica.alter.log.dirs.io.max.bytes.per.second` paces every log-directory move.

Sessionless Fetch only: every Fetch names its partitions (session id 0); fetch sessions (KIP-227)
are not implemented, so a request with a session id or epoch asking for one gets
FETCH_SESSION_ID_NOT_FOUND / is served sessionless.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.alter_partition.v3.request import AlterPartitionRequest
from kio.schema.alter_partition.v3.request import BrokerState as AlterBrokerState
from kio.schema.alter_partition.v3.request import PartitionData as AlterPartitionData
from kio.schema.alter_partition.v3.request import TopicData as AlterTopicData
from kio.schema.assign_replicas_to_dirs.v0.request import AssignReplicasToDirsRequest
from kio.schema.assign_replicas_to_dirs.v0.request import DirectoryData as AssignDirectoryData
from kio.schema.assign_replicas_to_dirs.v0.request import PartitionData as AssignPartitionData
from kio.schema.assign_replicas_to_dirs.v0.request import TopicData as AssignTopicData
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from kraft_engine.broker import LeaderReplicaState
from kraft_engine.broker.producer_state import (
    BatchMetadata,
    DuplicateBatch,
    ProducerStateError,
    ProducerStateTable,
)
from kraft_engine.broker.replication_quota import (
    UNLIMITED_RATE,
    ReplicationQuota,
    ThrottledReplicasError,
    parse_throttled_replicas,
)
from kraft_engine.controller.config_schema import TOPIC_CONFIGS, resolve_topic_config
from kraft_engine.errors import StorageError
from kraft_engine.metadata import (
    ConfigResource,
    ConfigResourceType,
    MetadataDelta,
    MetadataImage,
    PartitionRegistration,
)
from kraft_engine.protocol import ConnectionConfig, FileRegion, KafkaConnection, KafkaProtocolError
from kraft_engine.records.batches import BatchHeader, iter_batches
from kraft_engine.records.feature_versions import ELIGIBLE_LEADER_REPLICAS_VERSION
from kraft_engine.server.controller_channel import ControllerChannel, ControllerUnavailable
from kraft_engine.server.node_security import inter_broker_client_security
from kraft_engine.storage.atomic_file import atomic_replace, fsync_dir
from kraft_engine.storage.checkpoint_file import (
    LOG_START_OFFSET_CHECKPOINT_FILE_NAME,
    RECOVERY_POINT_CHECKPOINT_FILE_NAME,
    CheckpointError,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from kraft_engine.storage.log_cleaner import (
    CLEANER_OFFSET_CHECKPOINT_FILE_NAME,
    clean_log,
    compaction_upper_bound,
    dirty_ratio,
    max_compaction_delay_ms,
)
from kraft_engine.storage.partition_log import LogError, PartitionLog, partition_directory_name
from kraft_engine.storage.partition_metadata import (
    PartitionMetadataError,
    read_partition_metadata,
    write_partition_metadata,
)
from kraft_engine.storage.producer_snapshots import (
    ProducerSnapshotEntry,
    delete_producer_snapshots,
    latest_producer_snapshot,
    write_producer_snapshot,
)
from kraft_engine.storage.storage_error import StorageIOError

__all__ = [
    "CLEAN_SHUTDOWN_FILE_NAME",
    "FutureReplica",
    "HIGH_WATERMARK_CHECKPOINT_FILE_NAME",
    "Partition",
    "ProduceOutcome",
    "ReplicaManager",
    "ReplicaReadError",
    "clean_shutdown_broker_epoch",
    "quota_clock_ms",
]

logger = logging.getLogger(__name__)


class ReplicaReadError(StorageError):
    """A read of a replica's log failed with an I/O error: its directory is now offline and the
    request is answered KAFKA_STORAGE_ERROR for the partition (Kafka's LocalLog.read turns the
    IOException into a KafkaStorageException and reports the directory to LogDirFailureChannel)."""

HIGH_WATERMARK_CHECKPOINT_FILE_NAME = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE_NAME = ".kafka_cleanshutdown"
_PRODUCER_SNAPSHOTS_KEPT = 2
# The checkpoint files written together, each group on its own interval (`_checkpoint_intervals_s`).
_ALL_CHECKPOINTS = frozenset({HIGH_WATERMARK_CHECKPOINT_FILE_NAME, CLEANER_OFFSET_CHECKPOINT_FILE_NAME,
                              RECOVERY_POINT_CHECKPOINT_FILE_NAME, LOG_START_OFFSET_CHECKPOINT_FILE_NAME})
_ISR_CHECK_MIN_S = 0.25
_ALTER_PARTITION_TIMEOUT_MS = 10_000
_REBUILD_CHUNK_BYTES = 1024 * 1024
_MIN_CLEANABLE_DIRTY_RATIO = 0.5  # Kafka's log.cleaner.min.cleanable.ratio default
_ASSIGNMENT_RETRY_S = 1.0
_MOVE_CHUNK_BYTES = 1024 * 1024
# How long a fetcher (or a log-directory move) held back by its throttle waits before checking
# the quota again: a tenth of Kafka's 1 s quota window, so the rate is held closely.
_THROTTLED_BACKOFF_S = 0.1
# What moves and deletions leave in a log directory: `<topic>-<partition>.<32 hex>-future|-delete`.
_LEFTOVER_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.[0-9a-f]{32}-(?P<kind>future|delete)$")
# A replica's own directory, `<topic>-<partition>` (Kafka's legal topic characters), and what a
# stray one is renamed to at start: `<topic>-<partition>.<32 hex>-stray`, kept as Kafka keeps it.
_REPLICA_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)$")
_STRAY_SUFFIX = "-stray"
_METADATA_TOPIC = "__cluster_metadata"
# What a directory failure looks like from here: the storage shell's error, or a raw OSError from
# a checkpoint write or a read.
_DIRECTORY_FAILURES = (StorageIOError, OSError)


def _now_ms() -> int:
    return int(time.time() * 1000)


def quota_clock_ms() -> int:
    """The replication quotas' clock: windows must not jump with the wall clock."""
    return int(time.monotonic() * 1000)


@dataclass(eq=False)
class Partition:
    """One hosted replica: its log and its current role."""

    topic: str
    index: int
    topic_id: uuid.UUID
    log: PartitionLog
    log_dir: Path
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    follower_high_watermark: int = 0
    # As follower: the leader's high watermark from its last Fetch answer (-1 before the first):
    # a follower whose log end reached it is in sync, and never throttled.
    leader_high_watermark: int = -1
    leader_state: LeaderReplicaState | None = None
    alter_in_flight: bool = False
    first_dirty_offset: int = 0
    snapshot_segment_base: int = -1  # the active segment's base at the last producer snapshot
    # As leader: each follower's log start offset from its last Fetch (DeleteRecords' low watermark).
    follower_log_starts: dict[int, int] = field(default_factory=dict)
    # An AlterReplicaLogDirs move in progress: the future replica in its destination directory.
    future: FutureReplica | None = None
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def is_leader(self) -> bool:
        return self.leader_state is not None

    @property
    def high_watermark(self) -> int:
        hwm = self.follower_high_watermark if self.leader_state is None else self.leader_state.high_watermark
        return min(hwm, self.log.log_end_offset)

    def changed(self) -> asyncio.Event:
        return self._changed

    def notify(self) -> None:
        """Wake every fetch and produce waiting on this partition (new data, new HWM, new role)."""
        self._changed.set()
        self._changed = asyncio.Event()


@dataclass(eq=False)
class FutureReplica:
    """Kafka's future replica: a copy of a partition's log in another log directory
    (`<topic>-<partition>.<uuid>-future`), filled from the current log until it catches up and
    the controller has the new placement, then swapped in."""

    destination: Path
    log: PartitionLog
    assigned: bool = False  # the controller accepted the destination (AssignReplicasToDirs)
    task: asyncio.Task[None] | None = None


@dataclass(frozen=True, slots=True)
class ProduceOutcome:
    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None


class ReplicaManager:
    """The replicas of one broker; every method runs on the event loop."""

    def __init__(
        self,
        *,
        node_id: int,
        log_dirs: Mapping[uuid.UUID, Path],
        config: Any,
        channel: ControllerChannel,
        broker_epoch: Callable[[], int],
        image: Callable[[], MetadataImage],
    ) -> None:
        self.node_id = node_id
        self.log_dirs = dict(log_dirs)
        self.config = config
        self._channel = channel
        self._broker_epoch = broker_epoch
        self._image = image
        self.partitions: dict[tuple[str, int], Partition] = {}
        # Replicas whose log directory failed: closed, answering KAFKA_STORAGE_ERROR.
        self.offline_partitions: dict[tuple[str, int], Partition] = {}
        self.offline_dirs: set[Path] = set()
        self._dir_ids = {path: dir_id for dir_id, path in self.log_dirs.items()}
        # (topic id, partition) -> directory id, placements still to report with AssignReplicasToDirs.
        self._pending_assignments: dict[tuple[uuid.UUID, int], uuid.UUID] = {}
        # Called once the controller accepted that placement (a future replica waits for it).
        self._assignment_accepted: dict[tuple[uuid.UUID, int], tuple[uuid.UUID, Callable[[], None]]] = {}
        # AlterReplicaLogDirs for a replica this broker does not host yet: where to create it.
        self._preferred_dirs: dict[tuple[str, int], Path] = {}
        self._assignments_wake: asyncio.Event | None = None
        # Called when a directory goes offline (the broker heartbeats at once to report it).
        self.on_directory_offline: Callable[[], None] = lambda: None
        self._fetchers: dict[int, _Fetcher] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._background: asyncio.Task[None] | None = None
        self._closed = False
        self._hwm_checkpoints: dict[Path, dict[tuple[str, int], int]] = {}
        self._recovery_points: dict[Path, dict[tuple[str, int], int]] = {}
        self._log_starts: dict[Path, dict[tuple[str, int], int]] = {}
        self._cleaner_points: dict[Path, dict[tuple[str, int], int]] = {}
        self._checkpoint_lock = threading.Lock()
        self._checkpoints_taken = 0  # numbers each directory checkpoint taken, in the loop's order
        # The newest written per directory and file.
        self._checkpoints_written: dict[tuple[Path, str], int] = {}
        self._uncleanable: set[Partition] = set()  # cleaning failed: Kafka's uncleanable partitions
        # Directories a clean shutdown left marked: their logs open without recovery. The marker
        # goes before anything is written, so a crash from here on means full recovery again.
        self._clean_dirs: set[Path] = set()
        # Future replicas of moves a restart interrupted, resumed when their replica opens.
        self._interrupted_moves: dict[tuple[str, int], Path] = {}
        # Future replicas left in an online directory when their current replica's directory
        # failed: removed if the topic is deleted (Kafka's asyncDelete of the future log).
        self._orphaned_futures: dict[tuple[str, int], Path] = {}
        # The first published image marks the replicas it no longer assigns here as strays.
        self._strays_checked = False
        # Replica directories renamed `-delete` and when (monotonic s): removed once the broker's
        # log.segment.delete.delay.ms has passed since (Kafka's LogManager.deleteLogs).
        self._doomed_dirs: list[tuple[float, Path]] = []
        for directory in self.log_dirs.values():
            futures, half_deleted = _leftover_replicas(directory)
            self._doomed_dirs.extend((time.monotonic(), path) for path in half_deleted)
            for key, future_dir in futures.items():
                kept = self._interrupted_moves.setdefault(key, future_dir)
                if kept != future_dir:
                    logger.warning("Replica %s-%d has two future replicas, %s and %s; removing the second",
                                   *key, kept, future_dir)
                    self._delete_directory(future_dir)
            marker = directory / CLEAN_SHUTDOWN_FILE_NAME
            if marker.exists():
                self._clean_dirs.add(directory)
                marker.unlink()
                fsync_dir(directory)
            self._cleaner_points[directory] = _read_checkpoint(directory / CLEANER_OFFSET_CHECKPOINT_FILE_NAME)
            self._hwm_checkpoints[directory] = _read_checkpoint(directory / HIGH_WATERMARK_CHECKPOINT_FILE_NAME)
            self._recovery_points[directory] = _read_checkpoint(directory / RECOVERY_POINT_CHECKPOINT_FILE_NAME)
            self._log_starts[directory] = _read_checkpoint(directory / LOG_START_OFFSET_CHECKPOINT_FILE_NAME)
        self.isr_shrinks = 0
        self.isr_expands = 0
        # Kafka's ReplicationQuotaManagers: LEADER, FOLLOWER and ALTER_LOG_DIRS.
        window_ms = config.replication_quota_window_size_seconds * 1000
        self.leader_quota = ReplicationQuota(window_num=config.replication_quota_window_num, window_size_ms=window_ms)
        self.follower_quota = ReplicationQuota(window_num=config.replication_quota_window_num,
                                               window_size_ms=window_ms)
        self.alter_log_dirs_quota = ReplicationQuota(
            window_num=config.alter_log_dirs_replication_quota_window_num,
            window_size_ms=config.alter_log_dirs_replication_quota_window_size_seconds * 1000)
        self._throttle_configs: tuple[Any, ...] | None = None

    def start(self) -> None:
        self._background = asyncio.get_running_loop().create_task(self._run_background())
        self._assignments_wake = asyncio.Event()
        self._spawn(self._send_assignments())

    @property
    def offline_dir_ids(self) -> list[uuid.UUID]:
        return sorted(self._dir_ids[d] for d in self.offline_dirs)

    def fail_directory(self, log_dir: Path, error: BaseException) -> None:
        """Take one log directory offline after a storage error on it (Kafka's LogDirFailureChannel)."""
        if log_dir in self.offline_dirs:
            return
        self.offline_dirs.add(log_dir)
        logger.error("Log directory %s (%s) is offline after a storage error: %s", log_dir,
                     self._dir_ids.get(log_dir), error)
        for key, partition in list(self.partitions.items()):
            if partition.future is not None and log_dir in (partition.future.destination, partition.log_dir):
                if partition.future.destination != log_dir:
                    self._orphaned_futures[key] = partition.future.log.directory
                self._cancel_move(partition, remove=False)
            if partition.log_dir != log_dir:
                continue
            del self.partitions[key]
            self._stop_fetching(partition)
            partition.leader_state = None
            self.offline_partitions[key] = partition
            with contextlib.suppress(Exception):
                partition.log.close()
            partition.notify()
            logger.error("Replica %s-%d is offline with its log directory", *key)
        if log_dir.resolve() == Path(self.config.metadata_log_dir).resolve():
            # Kafka's ReplicaManager.handleLogDirFailure: the metadata log lives there too, and a
            # broker must not serve from metadata it cannot persist.
            logger.critical("Shutdown broker because the metadata log dir %s has failed: %s", log_dir, error)
            os._exit(1)
        if len(self.offline_dirs) == len(self.log_dirs):
            logger.critical("Every log directory of this broker has failed (%s); halting",
                            ", ".join(str(d) for d in sorted(self.offline_dirs)))
            os._exit(1)
        self.on_directory_offline()

    def _online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs.values() if d not in self.offline_dirs]

    async def _send_assignments(self) -> None:
        """Report new placements with AssignReplicasToDirs, batched, until the controller takes them."""
        wake = self._assignments_wake
        if wake is None:
            return
        while True:
            if not self._pending_assignments:
                wake.clear()
                await wake.wait()
            pending = dict(self._pending_assignments)
            by_dir: dict[uuid.UUID, dict[uuid.UUID, list[int]]] = {}
            for (topic_id, index), dir_id in sorted(pending.items()):
                by_dir.setdefault(dir_id, {}).setdefault(topic_id, []).append(index)
            request = AssignReplicasToDirsRequest(
                broker_id=BrokerId(self.node_id),
                broker_epoch=i64(self._broker_epoch()),
                directories=tuple(
                    AssignDirectoryData(id_=dir_id, topics=tuple(
                        AssignTopicData(topic_id=topic_id, partitions=tuple(
                            AssignPartitionData(partition_index=i32(i)) for i in indexes))
                        for topic_id, indexes in topics.items()))
                    for dir_id, topics in by_dir.items()
                ),
            )
            try:
                response = await self._channel.send(request, timeout_ms=_ALTER_PARTITION_TIMEOUT_MS)
            except ControllerUnavailable as error:
                logger.debug("AssignReplicasToDirs failed: %s", error)
                await asyncio.sleep(_ASSIGNMENT_RETRY_S)
                continue
            done = 0
            if ErrorCode(response.error_code) == ErrorCode.none:
                for directory in response.directories:
                    for topic in directory.topics:
                        for answer in topic.partitions:
                            key = (topic.topic_id, int(answer.partition_index))
                            code = ErrorCode(answer.error_code)
                            # Accepted, or about a replica the controller no longer has: either way done.
                            if code in (ErrorCode.none, ErrorCode.unknown_topic_id, ErrorCode.unknown_topic_or_partition,
                                        ErrorCode.not_leader_or_follower) and self._pending_assignments.get(key) == pending.get(key):
                                self._pending_assignments.pop(key, None)
                                done += 1
                                waiting = self._assignment_accepted.get(key)
                                if waiting is not None and waiting[0] == pending.get(key):
                                    del self._assignment_accepted[key]
                                    waiting[1]()
            logger.info("AssignReplicasToDirs: %d of %d placements reported (%s)", done, len(pending),
                        ErrorCode(response.error_code).name)
            if done < len(pending):
                await asyncio.sleep(_ASSIGNMENT_RETRY_S)


    async def close(self) -> None:
        """Stop fetching, flush every log, write the checkpoints, close the logs."""
        self._closed = True
        if self._background is not None:
            self._background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._background
        for fetcher in list(self._fetchers.values()):
            await fetcher.stop()
        self._fetchers.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        clean = True
        for partition in self.partitions.values():
            try:
                if partition.future is not None:
                    partition.future.log.flush()
            except _DIRECTORY_FAILURES as error:
                logger.error("Flushing the future replica of %s-%d at shutdown failed: %s", partition.topic,
                             partition.index, error)
            self._cancel_move(partition, remove=False)  # an unfinished move resumes at the next start
            try:
                partition.log.flush()
                _write_producer_snapshot(partition)
            except _DIRECTORY_FAILURES as error:
                clean = False
                logger.error("Flushing %s-%d at shutdown failed: %s", partition.topic, partition.index, error)
        self.write_checkpoints()
        for partition in self.partitions.values():
            partition.log.close()
        self.partitions.clear()
        if clean:
            marker = json.dumps({"version": 0, "brokerEpoch": self._broker_epoch()}).encode()
            for directory in self._online_dirs():
                with contextlib.suppress(*_DIRECTORY_FAILURES):
                    atomic_replace(directory / CLEAN_SHUTDOWN_FILE_NAME, marker)

    # -- metadata --------------------------------------------------------------------------------
    def apply_delta(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Leader and follower transitions from a published metadata delta."""
        if delta.configs_delta is not None:
            self.update_throttles(image)
        if not self._strays_checked:
            self._strays_checked = True
            self._mark_strays(image)
        topics_delta = delta.topics_delta
        if topics_delta is None:
            return
        changes = topics_delta.local_changes(self.node_id)
        for tp in changes.deletes:
            key = (tp.topic, tp.partition)
            self.offline_partitions.pop(key, None)
            self._preferred_dirs.pop(key, None)
            self._delete_partition(key)
            orphan = self._orphaned_futures.pop(key, None)
            if orphan is not None and orphan.parent not in self.offline_dirs:
                self._delete_directory(orphan)
        for tp, (topic_id, registration) in changes.leaders.items():
            if (tp.topic, tp.partition) not in self.offline_partitions:
                self._guarded(tp.topic, tp.partition, functools.partial(self._become_leader, tp.topic, tp.partition, topic_id, registration))
        for tp, (topic_id, registration) in changes.followers.items():
            if (tp.topic, tp.partition) not in self.offline_partitions:
                self._guarded(tp.topic, tp.partition, functools.partial(self._become_follower, tp.topic, tp.partition, topic_id, registration))

    def update_throttles(self, image: MetadataImage) -> None:
        """The replication quotas from the dynamic configs (Kafka's DynamicConfig handlers for
        brokers and topics): each rate from this broker's config, else the cluster default, else
        server.properties; each topic's throttled replicas on this broker."""
        configs = image.configs
        node = configs.configs(ConfigResource(ConfigResourceType.BROKER, str(self.node_id)))
        default = configs.configs(ConfigResource(ConfigResourceType.BROKER, ""))
        topics = {resource.name: (values.get("leader.replication.throttled.replicas", ""),
                                  values.get("follower.replication.throttled.replicas", ""))
                  for resource, values in configs.data.items() if resource.type == ConfigResourceType.TOPIC}
        wanted = (tuple(sorted(node.items())), tuple(sorted(default.items())), tuple(sorted(topics.items())))
        if wanted == self._throttle_configs:
            return
        self._throttle_configs = wanted
        for quota, key, static in (
                (self.leader_quota, "leader.replication.throttled.rate", self.config.leader_replication_throttled_rate),
                (self.follower_quota, "follower.replication.throttled.rate",
                 self.config.follower_replication_throttled_rate),
                (self.alter_log_dirs_quota, "replica.alter.log.dirs.io.max.bytes.per.second",
                 self.config.replica_alter_log_dirs_io_max_bytes_per_second)):
            value = node.get(key, default.get(key))
            rate = static
            if value is not None:
                try:
                    rate = int(value)
                except ValueError:
                    logger.warning("Ignoring %s=%r: not a number of bytes per second", key, value)
            if rate < 0:
                logger.warning("Ignoring %s=%d: a rate is never negative", key, rate)
                rate = static
            if rate != quota.rate_bytes_per_s:
                logger.info("Replication throttle %s is now %s", key,
                            "unlimited" if rate >= UNLIMITED_RATE else f"{rate} B/s")
            quota.update_rate(rate)
        for quota in (self.leader_quota, self.follower_quota):
            for topic in set(quota.throttled_topics()) - set(topics):
                quota.remove_throttle(topic)
        for topic, (leader_list, follower_list) in topics.items():
            for quota, value in ((self.leader_quota, leader_list), (self.follower_quota, follower_list)):
                try:
                    quota.mark_throttled(topic, parse_throttled_replicas(value, broker_id=self.node_id))
                except ThrottledReplicasError:
                    logger.warning("Ignoring the throttled replicas of %s: %r is not Kafka's format", topic, value)
                    quota.remove_throttle(topic)

    def _mark_strays(self, image: MetadataImage) -> None:
        """Kafka's isStrayKraftReplica at start: a replica directory (current or future) whose
        topic the caught-up image does not have, whose partition it does not assign to this
        broker, or whose `partition.metadata` names another topic id (the topic was deleted
        while this broker was down, perhaps recreated under the same name) is renamed
        `<name>.<uuid>-stray` and left for an operator, as Kafka 4.1 leaves it; it is never opened
        as the replica. A directory without `partition.metadata` (written by an older version)
        is judged by name alone."""
        topics = image.topics
        candidates: list[tuple[str, int, Path]] = []
        for directory in self._online_dirs():
            try:
                entries = sorted(directory.iterdir())
            except OSError:
                continue
            for path in entries:
                match = _REPLICA_DIR.match(path.name)
                if match is not None and match["topic"] != _METADATA_TOPIC and path.is_dir():
                    candidates.append((match["topic"], int(match["partition"]), path))
        candidates.extend((topic, index, path) for (topic, index), path in self._interrupted_moves.items())
        for topic_name, index, path in candidates:
            topic = topics.get_topic_by_name(topic_name)
            registration = None if topic is None else topic.partitions.get(index)
            if topic is None or registration is None or self.node_id not in registration.replicas:
                self._rename_stray(path, topic_name, index, why="the metadata does not assign it to this broker")
            else:
                self._stray_by_topic_id(path, topic_name, index, topic_id=topic.id)

    def _stray_by_topic_id(self, path: Path, topic: str, index: int, *, topic_id: uuid.UUID) -> bool:
        """True (and the directory renamed `-stray`) when its `partition.metadata` names another topic id."""
        try:
            recorded = read_partition_metadata(path)
        except PartitionMetadataError as error:
            logger.warning("Ignoring %s and judging the replica by its name", error)
            return False
        if recorded is None or recorded == topic_id:
            return False
        self._rename_stray(path, topic, index, why=f"it belongs to topic id {recorded}, the metadata has {topic_id}")
        return True

    def _rename_stray(self, path: Path, topic: str, index: int, *, why: str) -> None:
        stray = path.with_name(f"{partition_directory_name(topic, index)}.{uuid.uuid4().hex}{_STRAY_SUFFIX}")
        try:
            path.rename(stray)
            fsync_dir(path.parent)
        except _DIRECTORY_FAILURES as error:
            logger.error("Could not mark %s stray: %s", path, error)
            return
        if self._interrupted_moves.get((topic, index)) == path:
            del self._interrupted_moves[(topic, index)]
        logger.warning("Log in %s marked stray (%s) and renamed to %s", path, why, stray)

    def _guarded(self, topic: str, index: int, transition: Callable[[], None]) -> None:
        """A role change whose log open fails on its directory takes that directory offline."""
        try:
            transition()
        except _DIRECTORY_FAILURES as error:
            partition = self.partitions.get((topic, index))
            failed = partition.log_dir if partition is not None else _directory_of(error, self._online_dirs())
            if failed is None:
                raise
            self.fail_directory(failed, error)

    def _open_partition(self, topic: str, index: int, topic_id: uuid.UUID, registration: PartitionRegistration) -> Partition:
        key = (topic, index)
        partition = self.partitions.get(key)
        if partition is not None:
            return partition
        name = partition_directory_name(topic, index)
        online = self._online_dirs()
        assigned = registration.directory(self.node_id)
        found = [d for d in online if (d / name).is_dir()
                 and not self._stray_by_topic_id(d / name, topic, index, topic_id=topic_id)]
        log_dir = found[0] if found else None
        if len(found) > 1:
            # A crash between the two renames of a log-directory move leaves the replica in both
            # directories, each whole (the swap happens only when they are equal and flushed):
            # keep the one the controller has, as Kafka keeps the promoted future replica.
            log_dir = next((d for d in found if self._dir_ids[d] == assigned), found[0])
            for other in found:
                if other != log_dir:
                    logger.warning("Replica %s-%d is in %s and %s; keeping %s", topic, index, log_dir, other, log_dir)
                    self._delete_directory(other / name)
        interrupted = self._interrupted_moves.pop(key, None)
        if interrupted is not None and interrupted.parent not in online:
            interrupted = None  # its directory failed: the move is over
        if interrupted is not None and self._stray_by_topic_id(interrupted, topic, index, topic_id=topic_id):
            interrupted = None
        if log_dir is None and interrupted is not None:
            # Only the future replica is left (the current one's directory failed): it becomes
            # the replica, as Kafka's recoverAbandonedFutureLogs promotes it.
            logger.warning("Replica %s-%d has only its future replica %s left; it becomes the replica", topic,
                           index, interrupted)
            interrupted.rename(interrupted.parent / name)
            fsync_dir(interrupted.parent)
            log_dir, interrupted = interrupted.parent, None
        preferred = self._preferred_dirs.pop(key, None)
        if log_dir is None and preferred is not None and preferred not in self.offline_dirs:
            log_dir = preferred
        if log_dir is None:
            log_dir = self.log_dirs.get(assigned)
            if log_dir is None or log_dir in self.offline_dirs:
                log_dir = min(online, key=lambda d: sum(1 for p in self.partitions.values() if p.log_dir == d))
        # A resumed move whose destination the controller already has: the replica is reported
        # there and goes there once caught up, so the old directory is not reported back.
        moving_to_assigned = interrupted is not None and self._dir_ids[interrupted.parent] == assigned
        if self._dir_ids[log_dir] != assigned and not moving_to_assigned:
            self._pending_assignments[(topic_id, index)] = self._dir_ids[log_dir]
            if self._assignments_wake is not None:
                self._assignments_wake.set()
        log, report = PartitionLog.open(
            log_dir / name,
            segment_bytes=self.topic_config_int(topic, "segment.bytes", self.config.log_segment_bytes),
            recovery_point=self._recovery_points.get(log_dir, {}).get(key),
            log_start_offset=self._log_starts.get(log_dir, {}).get(key),
            allow_offset_gaps=True,
            clean_shutdown=log_dir in self._clean_dirs,
        )
        self._configure_rolls(topic, log)
        _record_topic_id(log.directory, topic_id)
        for line in report.describe():
            logger.warning("Recovering %s-%d: %s", topic, index, line)
        if report.after_clean_shutdown:
            logger.info("Opened %s-%d as the clean shutdown left it (log end %d, no recovery)", topic, index,
                        log.log_end_offset)
        hwm = self._hwm_checkpoints.get(log_dir, {}).get(key, 0)
        partition = Partition(topic=topic, index=index, topic_id=topic_id, log=log, log_dir=log_dir,
                              follower_high_watermark=min(hwm, log.log_end_offset),
                              first_dirty_offset=self._cleaner_points.get(log_dir, {}).get(key, 0))
        self.partitions[key] = partition
        # A snapshot past the recovered log end describes batches recovery dropped.
        delete_producer_snapshots(log.directory, above=log.log_end_offset)
        _rebuild_producer_state(partition)
        partition.snapshot_segment_base = log.segment_base_offsets[-1]
        if interrupted is not None:
            self._resume_move(partition, interrupted, assigned=moving_to_assigned)
        return partition

    def _become_leader(self, topic: str, index: int, topic_id: uuid.UUID, registration: PartitionRegistration) -> None:
        partition = self._open_partition(topic, index, topic_id, registration)
        now_ms = _now_ms()
        new_epoch = not partition.is_leader or registration.leader_epoch != partition.leader_epoch
        if partition.leader_id != self.node_id and partition.leader_id >= 0:
            self._stop_fetching(partition)
        partition.replicas = registration.replicas
        partition.isr = registration.isr
        if new_epoch:
            logger.info("Leader of %s-%d in epoch %d (ISR %s)", topic, index, registration.leader_epoch, list(registration.isr))
            self._stop_fetching(partition)
            partition.follower_log_starts.clear()
            partition.leader_state = LeaderReplicaState(
                local_id=self.node_id,
                replicas=registration.replicas,
                isr=registration.isr,
                partition_epoch=registration.partition_epoch,
                high_watermark=partition.high_watermark,
                leader_epoch_start_offset=partition.log.log_end_offset,
                now_ms=now_ms,
            )
        else:
            state = partition.leader_state
            if state is not None:
                state.set_replicas(registration.replicas, now_ms=now_ms)
                state.committed(isr=registration.isr, partition_epoch=registration.partition_epoch)
        partition.leader_id = self.node_id
        partition.leader_epoch = registration.leader_epoch
        partition.partition_epoch = registration.partition_epoch
        self._advance_high_watermark(partition)
        partition.notify()

    def _become_follower(self, topic: str, index: int, topic_id: uuid.UUID, registration: PartitionRegistration) -> None:
        partition = self._open_partition(topic, index, topic_id, registration)
        changed_leader = partition.leader_id != registration.leader or partition.leader_epoch != registration.leader_epoch
        was_leader = partition.is_leader
        if was_leader:
            partition.follower_high_watermark = partition.high_watermark
        partition.leader_state = None
        partition.replicas = registration.replicas
        partition.isr = registration.isr
        partition.partition_epoch = registration.partition_epoch
        if changed_leader or was_leader:
            self._stop_fetching(partition)
            partition.leader_id = registration.leader
            partition.leader_epoch = registration.leader_epoch
            logger.info("Follower of %s-%d, leader %d in epoch %d", topic, index, registration.leader, registration.leader_epoch)
            if registration.leader >= 0:
                self._fetcher_for(registration.leader).add(partition)
        partition.notify()

    def _delete_partition(self, key: tuple[str, int]) -> None:
        partition = self.partitions.pop(key, None)
        if partition is None:
            return
        self._cancel_move(partition, remove=True)
        self._stop_fetching(partition)
        partition.notify()
        partition.log.close()
        self._delete_directory(partition.log.directory)
        for table in (self._hwm_checkpoints, self._recovery_points, self._log_starts, self._cleaner_points):
            table.get(partition.log_dir, {}).pop(key, None)
        logger.info("Deleted replica %s-%d", *key)

    def _stop_fetching(self, partition: Partition) -> None:
        for fetcher in self._fetchers.values():
            fetcher.remove(partition)

    def _fetcher_for(self, leader_id: int) -> _Fetcher:
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None or fetcher.stopped:
            fetcher = _Fetcher(self, leader_id)
            self._fetchers[leader_id] = fetcher
            fetcher.start()
        return fetcher

    # -- leader side ------------------------------------------------------------------------------
    def topic_config_int(self, topic: str, key: str, default: int) -> int:
        value = self.topic_config(topic, key)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            return default

    def leader_partition(self, topic: str, index: int) -> tuple[Partition | None, ErrorCode]:
        partition = self.partitions.get((topic, index))
        if partition is None and (topic, index) in self.offline_partitions:
            return None, ErrorCode.kafka_storage_error
        if partition is None:
            topic_image = self._image().topics.get_topic_by_name(topic)
            if topic_image is None or index not in topic_image.partitions:
                return None, ErrorCode.unknown_topic_or_partition
            return None, ErrorCode.not_leader_or_follower
        if not partition.is_leader:
            return None, ErrorCode.not_leader_or_follower
        return partition, ErrorCode.none

    async def append_as_leader(
        self, partition: Partition, data: bytes, *, acks: int, timeout_ms: int, header: BatchHeader
    ) -> ProduceOutcome:
        state = partition.leader_state
        if state is None:
            return ProduceOutcome(ErrorCode.not_leader_or_follower)
        min_isr = self.topic_config_int(partition.topic, "min.insync.replicas", self.config.min_insync_replicas)
        if acks == -1 and len(state.isr) < min_isr:
            return ProduceOutcome(
                ErrorCode.not_enough_replicas,
                message=f"The size of the current ISR {sorted(state.isr)} is insufficient to satisfy the "
                f"min.isr requirement of {min_isr} for partition {partition.topic}-{partition.index}",
            )
        epoch = partition.leader_epoch
        try:
            duplicate = partition.producers.check(
                producer_id=header.producer_id, epoch=header.producer_epoch, base_sequence=header.base_sequence,
                last_offset_delta=header.last_offset_delta,
            )
        except ProducerStateError as error:
            return ProduceOutcome(ErrorCode(error.error_code), message=str(error))
        if isinstance(duplicate, DuplicateBatch):
            first_offset, last_offset = duplicate.first_offset, duplicate.last_offset
        else:
            try:
                info = partition.log.append_as_leader(data, epoch=epoch)
            except LogError as error:
                return ProduceOutcome(ErrorCode.corrupt_message, message=str(error))
            except _DIRECTORY_FAILURES as error:
                self.fail_directory(partition.log_dir, error)
                return ProduceOutcome(ErrorCode.kafka_storage_error, message=f"log directory {partition.log_dir} failed: {error}")
            first_offset, last_offset = info.first_offset, info.last_offset
            partition.producers.update(producer_id=header.producer_id, epoch=header.producer_epoch,
                                       base_sequence=header.base_sequence, first_offset=first_offset,
                                       last_offset=last_offset, timestamp_ms=header.max_timestamp)
            self._advance_high_watermark(partition)
            partition.notify()
        outcome = ProduceOutcome(ErrorCode.none, base_offset=first_offset, log_start_offset=partition.log.log_start_offset)
        if acks != -1:
            return outcome
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        while partition.high_watermark <= last_offset:
            current = self.partitions.get((partition.topic, partition.index))
            if current is not partition or not partition.is_leader or partition.leader_epoch != epoch:
                return ProduceOutcome(ErrorCode.not_leader_or_follower, message="leadership moved before the write was replicated")
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return ProduceOutcome(ErrorCode.request_timed_out, message="the write was not replicated within the request timeout")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await partition.changed().wait()
        state = partition.leader_state
        if state is not None and len(state.isr) < min_isr:
            return ProduceOutcome(ErrorCode.not_enough_replicas_after_append, base_offset=first_offset)
        return outcome

    def _advance_high_watermark(self, partition: Partition) -> None:
        state = partition.leader_state
        if state is None:
            return
        state.min_isr_to_advance = self._min_isr_to_advance(partition)
        if state.maybe_advance_high_watermark(leader_log_end=partition.log.log_end_offset):
            partition.notify()

    def _min_isr_to_advance(self, partition: Partition) -> int:
        """KIP-966: with eligible.leader.replicas.version >= 1 finalized, the high watermark holds
        while the ISR is below min(min.insync.replicas, replication factor); 0 (no floor) without."""
        if self._image().features.finalized_level(ELIGIBLE_LEADER_REPLICAS_VERSION) < 1:
            return 0
        min_isr = self.topic_config_int(partition.topic, "min.insync.replicas", self.config.min_insync_replicas)
        return min(min_isr, len(partition.replicas))

    def follower_fetch(self, partition: Partition, *, replica_id: int, fetch_offset: int,
                       log_start_offset: int = -1) -> None:
        """A follower's Fetch tells the leader that follower's log end and log start offsets."""
        state = partition.leader_state
        if state is None:
            return
        if partition.follower_log_starts.get(replica_id) != log_start_offset:
            partition.follower_log_starts[replica_id] = log_start_offset
            partition.notify()  # a DeleteRecords may be waiting for this replica's log start
        state.min_isr_to_advance = self._min_isr_to_advance(partition)
        if state.follower_fetched(replica_id, fetch_offset=fetch_offset, leader_log_end=partition.log.log_end_offset,
                                  now_ms=_now_ms()):
            partition.notify()
        if not partition.alter_in_flight and state.pending_isr is None:
            joining = state.expand_candidates(eligible=self._eligible_brokers())
            if joining:
                self._alter_isr(partition, state.isr | joining, expanding=True)

    def _eligible_brokers(self) -> frozenset[int]:
        cluster = self._image().cluster
        return frozenset(b.id for b in cluster.brokers.values() if not b.fenced and not b.in_controlled_shutdown)

    def _check_isr_shrinks(self) -> None:
        now_ms = _now_ms()
        lag_ms = self.config.replica_lag_time_max_ms
        for partition in list(self.partitions.values()):
            state = partition.leader_state
            if state is None or partition.alter_in_flight or state.pending_isr is not None:
                continue
            leaving = state.shrink_candidates(leader_log_end=partition.log.log_end_offset, now_ms=now_ms, lag_max_ms=lag_ms)
            if leaving:
                logger.info("Shrinking ISR of %s-%d from %s: %s out of sync for %d ms", partition.topic,
                            partition.index, sorted(state.isr), sorted(leaving), lag_ms)
                self._alter_isr(partition, state.isr - leaving, expanding=False)

    def _alter_isr(self, partition: Partition, new_isr: frozenset[int], *, expanding: bool) -> None:
        state = partition.leader_state
        if state is None:
            return
        state.propose(new_isr)
        partition.alter_in_flight = True
        if expanding:
            self._advance_high_watermark(partition)
        self._spawn(self._send_alter_partition(partition, new_isr, expanding=expanding))

    async def _send_alter_partition(self, partition: Partition, new_isr: frozenset[int], *, expanding: bool) -> None:
        state = partition.leader_state
        cluster = self._image().cluster
        request = AlterPartitionRequest(
            broker_id=BrokerId(self.node_id),
            broker_epoch=i64(self._broker_epoch()),
            topics=(AlterTopicData(topic_id=partition.topic_id, partitions=(AlterPartitionData(
                partition_index=i32(partition.index),
                leader_epoch=i32(partition.leader_epoch),
                new_isr_with_epochs=tuple(
                    AlterBrokerState(broker_id=BrokerId(r), broker_epoch=i64(cluster.broker_epoch(r))) for r in sorted(new_isr)
                ),
                leader_recovery_state=i8(0),
                partition_epoch=i32(partition.partition_epoch if state is None else state.partition_epoch),
            ),)),),
        )
        error: str | None = None
        try:
            response = await self._channel.send(request, timeout_ms=_ALTER_PARTITION_TIMEOUT_MS)
        except ControllerUnavailable as e:
            error = str(e)
            response = None
        partition.alter_in_flight = False
        current = partition.leader_state
        if current is None or current is not state:
            return  # the role changed meanwhile; the metadata decides
        if response is not None:
            code = ErrorCode(response.error_code)
            if code == ErrorCode.none and response.topics and response.topics[0].partitions:
                answer = response.topics[0].partitions[0]
                code = ErrorCode(answer.error_code)
                if code == ErrorCode.none:
                    current.committed(isr=[int(b) for b in answer.isr], partition_epoch=int(answer.partition_epoch))
                    partition.isr = tuple(sorted(current.isr))
                    partition.partition_epoch = int(answer.partition_epoch)
                    if expanding:
                        self.isr_expands += 1
                    else:
                        self.isr_shrinks += 1
                    logger.info("ISR of %s-%d is now %s (partition epoch %d)", partition.topic, partition.index,
                                sorted(current.isr), partition.partition_epoch)
                    self._advance_high_watermark(partition)
                    partition.notify()
                    return
            error = code.name
        current.proposal_failed()
        logger.info("AlterPartition for %s-%d refused or failed: %s", partition.topic, partition.index, error)

    # -- DeleteRecords -------------------------------------------------------------------------
    def delete_records(self, partition: Partition, *, offset: int) -> tuple[ErrorCode, int, str | None]:
        """Kafka's Partition.deleteRecordsOnLeader: move the leader's log start offset to `offset`
        (-1: the high watermark), never past the high watermark, on a topic whose cleanup.policy
        includes delete. Returns (error, the offset the log start must reach, message); segments
        wholly below it are deleted now, and the followers follow from their next Fetch."""
        if partition.leader_state is None:
            return ErrorCode.not_leader_or_follower, -1, None
        policy = self.topic_config(partition.topic, "cleanup.policy") or "delete"
        if "delete" not in policy.split(","):
            return (ErrorCode.policy_violation, -1, f"Records of partition {partition.topic}-{partition.index} can not "
                    f"be deleted due to the configured policy")
        hwm = partition.high_watermark
        target = hwm if offset == -1 else offset
        if target < 0:
            return ErrorCode.offset_out_of_range, -1, f"The offset {offset} for partition {partition.topic}-{partition.index} is not valid"
        if target > hwm:
            return (ErrorCode.offset_out_of_range, -1, f"Cannot increment the log start offset to {target} of partition "
                    f"{partition.topic}-{partition.index} since it is larger than the high watermark {hwm}")
        if target > partition.log.log_start_offset:
            try:
                deleted = partition.log.delete_below(target)
                # The client is told the records are gone: a restart must not bring them back.
                self._write_directory_checkpoints(partition.log_dir)
            except _DIRECTORY_FAILURES as error:
                self.fail_directory(partition.log_dir, error)
                return ErrorCode.kafka_storage_error, -1, f"log directory {partition.log_dir} failed: {error}"
            logger.info("DeleteRecords moved the log start of %s-%d to %d (deleted %s)", partition.topic,
                        partition.index, target, deleted)
            partition.notify()  # long-polling follower fetches answer with the new log start
        return ErrorCode.none, target, None

    def low_watermark(self, partition: Partition) -> int:
        """Kafka's lowWatermarkIfLeader: the smallest log start offset of the leader and of every
        follower on a live broker (-1 for one that has not fetched since this leader took over)."""
        cluster = self._image().cluster
        starts = [partition.log.log_start_offset]
        for replica in partition.replicas:
            registration = cluster.broker(replica)
            if replica != self.node_id and registration is not None and not registration.fenced:
                starts.append(partition.follower_log_starts.get(replica, -1))
        return min(starts)

    async def wait_low_watermark(self, partition: Partition, *, offset: int, timeout_ms: int) -> tuple[ErrorCode, int]:
        """Kafka's DelayedDeleteRecords: until every live replica's log start reached `offset`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            current = self.partitions.get((partition.topic, partition.index))
            if current is not partition or partition.leader_state is None:
                return ErrorCode.not_leader_or_follower, -1
            low = self.low_watermark(partition)
            if low >= offset:
                return ErrorCode.none, low
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ErrorCode.request_timed_out, low
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await partition.changed().wait()

    # -- AlterReplicaLogDirs ---------------------------------------------------------------------
    def log_dir_at(self, path: str) -> Path | None:
        """The configured log directory `path` names (absolute, as DescribeLogDirs reports it)."""
        wanted = Path(path).resolve()
        return next((d for d in self.log_dirs.values() if d.resolve() == wanted), None)

    def alter_replica_log_dir(self, topic: str, index: int, destination: Path) -> ErrorCode:
        """Kafka's ReplicaManager.alterReplicaLogDirs for one replica: start (or redirect, or
        cancel) moving it to `destination`, a configured log directory."""
        key = (topic, index)
        if destination in self.offline_dirs or key in self.offline_partitions:
            return ErrorCode.kafka_storage_error
        partition = self.partitions.get(key)
        if partition is None:
            # Not hosted yet: created there when the metadata assigns it (REPLICA_NOT_AVAILABLE, as Kafka).
            self._preferred_dirs[key] = destination
            return ErrorCode.replica_not_available
        move = partition.future
        if move is not None and move.destination != destination:
            logger.info("Cancelling the move of %s-%d to %s: now asked to be in %s", topic, index, move.destination,
                        destination)
            self._cancel_move(partition, remove=True)
        if destination == partition.log_dir or partition.future is not None:
            return ErrorCode.none
        name = partition_directory_name(topic, index)
        if not self._start_move(partition, destination / f"{name}.{uuid.uuid4().hex}-future", assigned=False):
            return ErrorCode.kafka_storage_error
        logger.info("Moving %s-%d from %s to %s (future replica %s)", topic, index, partition.log_dir, destination,
                    partition.future.log.directory.name if partition.future is not None else "")
        return ErrorCode.none

    def _resume_move(self, partition: Partition, future_dir: Path, *, assigned: bool) -> None:
        """A move a restart interrupted goes on, as Kafka's LogManager loads the `-future` log and
        its ReplicaAlterLogDirsThread starts again: the future log is recovered (a torn tail
        cut), cut back to the current log's end if it is past it, and filled from where it ends.
        If the controller already has the destination, the replica is swapped there once caught
        up (Kafka swaps at once; waiting for the copy loses nothing the current log holds)."""
        if future_dir.parent == partition.log_dir:
            logger.warning("Removing %s: a future replica in the replica's own directory", future_dir)
            self._delete_directory(future_dir)
            return
        if self._start_move(partition, future_dir, assigned=assigned) and partition.future is not None:
            move = partition.future
            self._truncate_future(partition, partition.log.log_end_offset)
            logger.info("Resuming the move of %s-%d from %s to %s: the future replica %s ends at %d of %d%s",
                        partition.topic, partition.index, partition.log_dir, move.destination, future_dir.name,
                        move.log.log_end_offset, partition.log.log_end_offset,
                        " (the controller has the new directory)" if assigned else "")

    def _start_move(self, partition: Partition, future_dir: Path, *, assigned: bool) -> bool:
        """Open the future log in `future_dir` (new, or left by an interrupted move) and start
        filling it; False when its directory failed."""
        destination = future_dir.parent
        try:
            future_log, report = PartitionLog.open(future_dir, segment_bytes=self.topic_config_int(
                partition.topic, "segment.bytes", self.config.log_segment_bytes), allow_offset_gaps=True)
        except _DIRECTORY_FAILURES as error:
            self.fail_directory(destination, error)
            return False
        try:
            _record_topic_id(future_dir, partition.topic_id)
        except _DIRECTORY_FAILURES as error:
            future_log.close()
            self.fail_directory(destination, error)
            return False
        for line in report.describe():
            logger.warning("Recovering the future replica %s: %s", future_dir, line)
        self._configure_rolls(partition.topic, future_log)
        move = FutureReplica(destination=destination, log=future_log, assigned=assigned)
        partition.future = move
        move.task = asyncio.get_running_loop().create_task(self._fill_future(partition, move))
        return True

    def _cancel_move(self, partition: Partition, *, remove: bool) -> None:
        move = partition.future
        if move is None:
            return
        partition.future = None
        if move.task is not None:
            move.task.cancel()
        key = (partition.topic_id, partition.index)
        reported = self._assignment_accepted.pop(key, None) is not None or move.assigned
        if reported and partition.log_dir not in self.offline_dirs:
            # The controller may have been told the destination: tell it where the replica stays.
            self._pending_assignments[key] = self._dir_ids[partition.log_dir]
            if self._assignments_wake is not None:
                self._assignments_wake.set()
        with contextlib.suppress(Exception):
            move.log.close()
        if remove:
            self._delete_directory(move.log.directory)

    def _truncate_future(self, partition: Partition, end: int, *, fully: bool = False) -> None:
        """The current log was truncated: so is the future one, which must stay a prefix of it."""
        move = partition.future
        if move is None:
            return
        try:
            if fully or end < move.log.log_start_offset:
                move.log.truncate_fully_and_start_at(end)
            elif end < move.log.log_end_offset:
                move.log.truncate_to(end)
        except _DIRECTORY_FAILURES as error:
            self.fail_directory(move.destination, error)

    async def _fill_future(self, partition: Partition, move: FutureReplica) -> None:
        """Kafka's ReplicaAlterLogDirsThread for one replica: copy the current log's batches to
        the future log, follow its log start, and once caught up report the new directory with
        AssignReplicasToDirs; when the controller has it and the two logs end at the same offset,
        swap them (`_promote_future`). Runs on the event loop: no append can land between the
        check that the logs are equal and the swap."""
        key = (partition.topic, partition.index)
        while self.partitions.get(key) is partition and partition.future is move:
            current, future = partition.log, move.log
            if future.log_end_offset < current.log_end_offset:
                if self.alter_log_dirs_quota.is_exceeded(now_ms=quota_clock_ms()):
                    # replica.alter.log.dirs.io.max.bytes.per.second: every future replica waits.
                    await asyncio.sleep(_THROTTLED_BACKOFF_S)
                    continue
                try:
                    offset = max(future.log_end_offset, current.log_start_offset)
                    data = current.read(offset, max_bytes=_MOVE_CHUNK_BYTES)
                except _DIRECTORY_FAILURES as error:
                    self.fail_directory(partition.log_dir, error)
                    return
                try:
                    if data:
                        first = next(iter_batches(data))[0]
                        if future.log_end_offset != first.base_offset and (
                                future.log_end_offset < current.log_start_offset or first.base_offset < future.log_end_offset):
                            # Empty, or behind the current log start: restart at the batch holding it.
                            future.truncate_fully_and_start_at(first.base_offset)
                        future.append_as_follower(data)
                        self.alter_log_dirs_quota.record(len(data), now_ms=quota_clock_ms())
                    if future.log_start_offset < current.log_start_offset:
                        future.delete_below(min(current.log_start_offset, future.log_end_offset))
                except _DIRECTORY_FAILURES as error:
                    self.fail_directory(move.destination, error)
                    return
                await asyncio.sleep(0)  # other requests between chunks
                continue
            if move.assigned:
                self._promote_future(partition, move)
                return
            if (partition.topic_id, partition.index) not in self._assignment_accepted:
                self._await_assignment(partition, move)
            await partition.changed().wait()  # more data, or the controller's answer

    def _await_assignment(self, partition: Partition, move: FutureReplica) -> None:
        key = (partition.topic_id, partition.index)
        dir_id = self._dir_ids[move.destination]

        def accepted() -> None:
            move.assigned = True
            partition.notify()

        self._assignment_accepted[key] = (dir_id, accepted)
        self._pending_assignments[key] = dir_id
        if self._assignments_wake is not None:
            self._assignments_wake.set()

    def _promote_future(self, partition: Partition, move: FutureReplica) -> None:
        """Swap the caught-up future replica in: its directory takes the partition's name in the
        destination (first, so a crash in between leaves two whole copies, never none), the old
        one is renamed `-delete` and removed, and the log reopens from the moved files."""
        current, future = partition.log, move.log
        name = partition_directory_name(partition.topic, partition.index)
        source = partition.log_dir
        try:
            current.flush()
        except _DIRECTORY_FAILURES as error:
            self.fail_directory(source, error)
            return
        try:
            future.flush()
            start, recovery_point = future.log_start_offset, future.flushed_offset
            future.close()
            future.directory.rename(move.destination / name)
            fsync_dir(move.destination)
        except _DIRECTORY_FAILURES as error:
            partition.future = None
            self.fail_directory(move.destination, error)
            return
        partition.future = None
        current.close()
        self._delete_directory(current.directory)
        try:
            log, _ = PartitionLog.open(move.destination / name, segment_bytes=self.topic_config_int(
                partition.topic, "segment.bytes", self.config.log_segment_bytes), recovery_point=recovery_point,
                log_start_offset=start, allow_offset_gaps=True)
        except _DIRECTORY_FAILURES as error:
            partition.log_dir = move.destination  # the replica lives there now, and goes offline with it
            self.fail_directory(move.destination, error)
            return
        self._configure_rolls(partition.topic, log)
        partition.log = log
        partition.log_dir = move.destination
        key = (partition.topic, partition.index)
        for table in (self._hwm_checkpoints, self._recovery_points, self._log_starts, self._cleaner_points):
            table.get(source, {}).pop(key, None)
        try:
            _write_producer_snapshot(partition)
            partition.snapshot_segment_base = log.segment_base_offsets[-1]
            self._write_directory_checkpoints(move.destination)
        except _DIRECTORY_FAILURES as error:
            self.fail_directory(move.destination, error)
            return
        with contextlib.suppress(*_DIRECTORY_FAILURES):
            self._write_directory_checkpoints(source)
        logger.info("Moved %s-%d from %s to %s (log end %d)", partition.topic, partition.index, source,
                    move.destination, log.log_end_offset)
        partition.notify()

    # -- reading -------------------------------------------------------------------------------
    def read(self, partition: Partition, *, offset: int, max_bytes: int, upper_bound: int) -> bytes:
        """Whole batches from `offset` (at least one if any), none at or past `upper_bound`.
        An I/O error takes the replica's directory offline (`ReplicaReadError`)."""
        with self._reading(partition):
            return partition.log.read(offset, max_bytes=max(max_bytes, 1), upper_bound=upper_bound)

    def read_region(self, partition: Partition, *, offset: int, max_bytes: int, upper_bound: int) -> FileRegion | None:
        """What `read` returns, as a region of the segment file for sendfile (its own descriptor,
        so the segment may be closed or deleted before it is sent); None when empty."""
        with self._reading(partition):
            found = partition.log.read_region(offset, max_bytes=max(max_bytes, 1), upper_bound=upper_bound)
            if found is None:
                return None
            fd, position, size = found
            return FileRegion.of(fd, position=position, size=size)

    @contextlib.contextmanager
    def _reading(self, partition: Partition) -> Iterator[None]:
        try:
            yield
        except _DIRECTORY_FAILURES as error:
            failure = ReplicaReadError(f"reading {partition.topic}-{partition.index} in {partition.log_dir} failed: "
                                       f"{error}")
            self.fail_directory(partition.log_dir, failure)  # its log line says it was a read
            raise failure from error

    # -- follower side -------------------------------------------------------------------------
    def follower_throttled(self, partition: Partition, *, now_ms: int) -> bool:
        """Kafka's shouldFollowerThrottle: an out-of-sync follower of a throttled replica waits
        while the follower quota is exceeded."""
        in_sync = 0 <= partition.leader_high_watermark <= partition.log.log_end_offset
        return (not in_sync and self.follower_quota.is_throttled(partition.topic, partition.index)
                and self.follower_quota.is_exceeded(now_ms=now_ms))

    def fetch_request_for(self, partitions: Iterable[Partition], *, now_ms: int | None = None) -> FetchRequest | None:
        """The Fetch for `partitions`, leaving out those the follower throttle holds back (None
        when that is all of them)."""
        now = quota_clock_ms() if now_ms is None else now_ms
        topics: dict[str, list[FetchPartition]] = {}
        for partition in partitions:
            if self.follower_throttled(partition, now_ms=now):
                continue
            latest = partition.log.latest_epoch
            topics.setdefault(partition.topic, []).append(FetchPartition(
                partition=i32(partition.index),
                current_leader_epoch=i32(partition.leader_epoch),
                fetch_offset=i64(partition.log.log_end_offset),
                last_fetched_epoch=i32(-1 if latest is None else latest),
                log_start_offset=i64(partition.log.log_start_offset),
                partition_max_bytes=i32(self.config.replica_fetch_max_bytes),
            ))
        return FetchRequest(
            cluster_id=None,
            replica_id=BrokerId(self.node_id),
            max_wait=i32Timedelta.parse(timedelta(milliseconds=self.config.replica_fetch_wait_max_ms)),
            min_bytes=i32(self.config.replica_fetch_min_bytes),
            max_bytes=i32(10 * 1024 * 1024),
            isolation_level=i8(0),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=tuple(FetchTopic(topic=TopicName(t), partitions=tuple(ps)) for t, ps in topics.items()),
            forgotten_topics_data=(),
            rack_id="",
        ) if topics else None

    def handle_fetched(self, partition: Partition, answer: Any) -> bool:
        """Apply one partition of a leader's Fetch answer; False when the fetcher should back off."""
        code = ErrorCode(answer.error_code)
        log = partition.log
        if code == ErrorCode.none:
            diverging = answer.diverging_epoch
            if int(diverging.epoch) >= 0 or int(diverging.end_offset) >= 0:
                local_epoch, local_end = log.end_offset_for_epoch(int(diverging.epoch))
                target = min(int(diverging.end_offset), local_end if local_epoch == int(diverging.epoch) else int(diverging.end_offset))
                target = max(target, log.log_start_offset)
                new_end = log.truncate_to(target)
                self._truncate_future(partition, new_end)
                delete_producer_snapshots(log.directory, above=new_end)
                _rebuild_producer_state(partition)
                logger.info("Truncated %s-%d to %d (leader's epoch %d ends at %d)", partition.topic, partition.index,
                            new_end, int(diverging.epoch), int(diverging.end_offset))
                partition.follower_high_watermark = min(partition.follower_high_watermark, new_end)
                partition.first_dirty_offset = min(partition.first_dirty_offset, new_end)
                return True
            records = answer.records
            partition.leader_high_watermark = int(answer.high_watermark)
            if records:
                if self.follower_quota.is_throttled(partition.topic, partition.index):
                    self.follower_quota.record(len(records), now_ms=quota_clock_ms())
                try:
                    log.append_as_follower(bytes(records))
                    for header, _ in iter_batches(bytes(records)):
                        partition.producers.update(producer_id=header.producer_id, epoch=header.producer_epoch,
                                                   base_sequence=header.base_sequence,
                                                   first_offset=header.base_offset, last_offset=header.last_offset,
                                                   timestamp_ms=header.max_timestamp)
                except LogError as error:
                    logger.warning("Fetched data for %s-%d does not continue the log: %s", partition.topic, partition.index, error)
                    return False
            hwm = min(int(answer.high_watermark), log.log_end_offset)
            if hwm != partition.follower_high_watermark or records:
                partition.follower_high_watermark = max(partition.follower_high_watermark, hwm)
                partition.notify()
            # The leader's retention (or DeleteRecords) moved its log start: follow, never past
            # what this replica knows to be committed (Kafka's maybeIncrementLogStartOffset).
            leader_start = min(int(answer.log_start_offset), partition.follower_high_watermark)
            if leader_start > log.log_start_offset:
                deleted = log.delete_below(leader_start)
                logger.info("Log start of %s-%d follows the leader's to %d (deleted %s)", partition.topic,
                            partition.index, leader_start, deleted)
            return True
        if code == ErrorCode.offset_out_of_range:
            leader_start = int(answer.log_start_offset)
            if log.log_end_offset < leader_start:
                log.truncate_fully_and_start_at(leader_start)
                self._truncate_future(partition, leader_start, fully=True)
                delete_producer_snapshots(log.directory, above=-1)
                partition.producers.clear()
                partition.first_dirty_offset = leader_start
                logger.info("%s-%d restarts at the leader's log start %d", partition.topic, partition.index, leader_start)
                return True
        logger.debug("Fetch of %s-%d from %d: %s", partition.topic, partition.index, partition.leader_id, code.name)
        return False

    # -- background ----------------------------------------------------------------------------
    async def _run_background(self) -> None:
        loop = asyncio.get_running_loop()
        last_retention = last_cleaning = loop.time()
        cleaner_s = self.config.log_cleaner_backoff_ms / 1000
        retention_s = self.config.log_retention_check_interval_ms / 1000
        checkpoints = self._checkpoint_intervals_s()
        last_written = dict.fromkeys(checkpoints, loop.time())
        interval = min(max(_ISR_CHECK_MIN_S, self.config.replica_lag_time_max_ms / 2000), retention_s, cleaner_s,
                       *checkpoints.values())
        while True:
            await asyncio.sleep(interval)
            try:
                self._check_isr_shrinks()
                self._delete_due_files()
                if loop.time() - last_retention >= retention_s:
                    last_retention = loop.time()
                    self.enforce_retention(now_ms=_now_ms())
                if self.config.log_cleaner_enable and loop.time() - last_cleaning >= cleaner_s:
                    await self.clean_compacted_logs()
                    last_cleaning = loop.time()
                due = [files for files, every_s in checkpoints.items() if loop.time() - last_written[files] >= every_s]
                if due:
                    for files in due:
                        last_written[files] = loop.time()
                    await self._write_checkpoints_off_loop(files=frozenset().union(*due))
            except OSError as error:
                logger.error("Replica manager background work failed: %s", error)

    def _checkpoint_intervals_s(self) -> dict[frozenset[str], float]:
        """Each group of checkpoint files written together and how often (Kafka's three
        scheduler tasks; the cleaner's offsets go with the high watermarks). An interval of 0
        leaves its files to shutdown and to the operations that write them."""
        config = self.config
        intervals = {
            frozenset({HIGH_WATERMARK_CHECKPOINT_FILE_NAME, CLEANER_OFFSET_CHECKPOINT_FILE_NAME}):
                config.replica_high_watermark_checkpoint_interval_ms,
            frozenset({RECOVERY_POINT_CHECKPOINT_FILE_NAME}): config.log_flush_offset_checkpoint_interval_ms,
            frozenset({LOG_START_OFFSET_CHECKPOINT_FILE_NAME}): config.log_flush_start_offset_checkpoint_interval_ms,
        }
        return {files: every_ms / 1000 for files, every_ms in intervals.items() if every_ms > 0}

    def topic_config(self, topic: str, key: str) -> str | None:
        return self._image().configs.configs(ConfigResource(ConfigResourceType.TOPIC, topic)).get(key)

    def topic_setting_int(self, topic: str | None, name: str) -> int:
        """A topic config as Kafka's LogConfig resolves it: the topic's override, else its broker
        synonym from this broker's dynamic config, the cluster's dynamic default, server.properties,
        else Kafka's default (`topic` None: the broker's own level, as LogManager's
        currentDefaultConfig). A value that is not a number falls back to Kafka's default."""
        configs = self._image().configs
        broker = ConfigResourceType.BROKER
        definition = TOPIC_CONFIGS[name]
        value, _, _ = resolve_topic_config(
            definition,
            topic={} if topic is None else configs.configs(ConfigResource(ConfigResourceType.TOPIC, topic)),
            node=configs.configs(ConfigResource(broker, str(self.node_id))),
            cluster=configs.configs(ConfigResource(broker, "")),
            static=self.config.originals,
        )
        try:
            return int(value) if value is not None else int(definition.default or 0)
        except ValueError:
            logger.warning("%s=%r is not a number; using Kafka's default %s", name, value, definition.default)
            return int(definition.default or 0)

    def _delete_directory(self, directory: Path) -> None:
        """Kafka's deletion of a replica (LogManager.asyncDelete): renamed `-delete` now, removed
        once the broker's `log.segment.delete.delay.ms` has passed (`_delete_due_files`)."""
        doomed = _rename_for_deletion(directory)
        if doomed is None:
            return
        if self.topic_setting_int(None, "file.delete.delay.ms") <= 0:
            shutil.rmtree(doomed, ignore_errors=True)
            return
        self._doomed_dirs.append((time.monotonic(), doomed))

    def _delete_due_files(self) -> None:
        """Remove what waited its delay: segment files renamed `.deleted` (each topic's
        `file.delete.delay.ms`) and replica directories renamed `-delete` (the broker's)."""
        for partition in list(self.partitions.values()):
            if partition.log_dir in self.offline_dirs:
                continue
            try:
                partition.log.delete_due_files()
            except _DIRECTORY_FAILURES as error:
                self.fail_directory(partition.log_dir, error)
        if not self._doomed_dirs:
            return
        delay_s = self.topic_setting_int(None, "file.delete.delay.ms") / 1000
        now = time.monotonic()
        due = [path for at, path in self._doomed_dirs if at + delay_s <= now]
        self._doomed_dirs = [(at, path) for at, path in self._doomed_dirs if at + delay_s > now]
        for path in due:
            logger.info("Removing %s (deleted %.0f s ago or more)", path, delay_s)
            shutil.rmtree(path, ignore_errors=True)

    def _configure_rolls(self, topic: str, log: PartitionLog) -> None:
        """The topic's segment.bytes / segment.ms / segment.jitter.ms over the broker's log.* keys,
        and its file.delete.delay.ms over the broker's log.segment.delete.delay.ms. A compacted
        topic's active segment rolls after `max.compaction.lag.ms` at the latest (Kafka's
        LogConfig.maxSegmentMs), so its records reach the cleaner in time."""
        segment_ms = self.topic_config_int(topic, "segment.ms", self.config.log_roll_ms)
        if "compact" in (self.topic_config(topic, "cleanup.policy") or "delete").split(","):
            max_lag_ms = self.topic_setting_int(topic, "max.compaction.lag.ms")
            if max_lag_ms > 0:
                segment_ms = min(segment_ms, max_lag_ms)
        try:
            log.configure_rolls(
                segment_bytes=self.topic_config_int(topic, "segment.bytes", self.config.log_segment_bytes),
                segment_ms=segment_ms,
                segment_jitter_ms=self.topic_config_int(topic, "segment.jitter.ms", self.config.log_roll_jitter_ms),
            )
        except ValueError as error:
            logger.warning("Keeping the previous roll settings of %s: %s", topic, error)
        try:
            log.configure_deletes(file_delete_delay_ms=self.topic_setting_int(topic, "file.delete.delay.ms"))
        except ValueError as error:
            logger.warning("Keeping the previous file.delete.delay.ms of %s: %s", topic, error)

    def enforce_retention(self, *, now_ms: int) -> None:
        """Delete the segments time and size retention expire, on every replica that allows it.
        Topic config changes to the roll keys reach the logs here too."""
        for partition in list(self.partitions.values()):
            self._configure_rolls(partition.topic, partition.log)
            policy = self.topic_config(partition.topic, "cleanup.policy") or "delete"
            if "delete" not in policy.split(","):
                continue
            try:
                deleted = partition.log.delete_retained_segments(
                    now_ms=now_ms,
                    retention_ms=self.topic_config_int(partition.topic, "retention.ms", self.config.log_retention_ms),
                    retention_bytes=self.topic_config_int(partition.topic, "retention.bytes", self.config.log_retention_bytes),
                    high_watermark=partition.high_watermark,
                )
            except _DIRECTORY_FAILURES as error:
                self.fail_directory(partition.log_dir, error)
                continue
            if deleted:
                logger.info("Retention deleted %d segments of %s-%d; log start offset is now %d", len(deleted),
                            partition.topic, partition.index, partition.log.log_start_offset)

    async def clean_compacted_logs(self) -> None:
        """One cleaning pass over every dirty enough replica of a compacted topic."""
        for partition in list(self.partitions.values()):
            policy = self.topic_config(partition.topic, "cleanup.policy") or "delete"
            if "compact" not in policy.split(",") or partition in self._uncleanable:
                continue
            log = partition.log
            first_dirty = max(partition.first_dirty_offset, log.log_start_offset)
            now_ms = _now_ms()
            try:
                upper = compaction_upper_bound(
                    log, first_dirty_offset=first_dirty, upper_bound=partition.high_watermark, now_ms=now_ms,
                    min_compaction_lag_ms=self.topic_setting_int(partition.topic, "min.compaction.lag.ms"))
                overdue_ms = max_compaction_delay_ms(
                    log, first_dirty_offset=first_dirty, now_ms=now_ms,
                    max_compaction_lag_ms=self.topic_setting_int(partition.topic, "max.compaction.lag.ms"))
            except ValueError as error:
                logger.warning("Not cleaning %s-%d: %s", partition.topic, partition.index, error)
                continue
            except _DIRECTORY_FAILURES as error:
                self.fail_directory(partition.log_dir, error)
                continue
            ratio = dirty_ratio(log, first_dirty_offset=first_dirty, upper_bound=upper)
            wanted = self._topic_config_float(partition.topic, "min.cleanable.dirty.ratio", _MIN_CLEANABLE_DIRTY_RATIO)
            # Kafka's grabFilthiestCompactedLog: dirtier than the ratio (strictly), or a record past
            # max.compaction.lag.ms with something to clean.
            if ratio <= 0 or (ratio <= wanted and overdue_ms <= 0):
                continue
            if overdue_ms > 0 and ratio <= wanted:
                logger.info("Cleaning %s-%d below its dirty ratio (%.2f): a dirty record is %d ms past "
                            "max.compaction.lag.ms", partition.topic, partition.index, ratio, overdue_ms)
            try:
                result = clean_log(log, first_dirty_offset=first_dirty, upper_bound=upper, now_ms=now_ms,
                                   delete_retention_ms=self.topic_config_int(partition.topic, "delete.retention.ms",
                                                                             self.config.log_cleaner_delete_retention_ms))
            except _DIRECTORY_FAILURES as error:
                self.fail_directory(partition.log_dir, error)
                continue
            except Exception:
                # Kafka marks such a partition uncleanable and goes on; replication housekeeping
                # on this loop must not stop for it either.
                logger.exception("Cleaning %s-%d failed; it stays uncompacted", partition.topic, partition.index)
                self._uncleanable.add(partition)
                continue
            if result is None or self.partitions.get((partition.topic, partition.index)) is not partition:
                continue
            partition.first_dirty_offset = result.first_dirty_offset
            logger.info("Cleaned %s-%d up to %d: %d records removed, %d segments rewritten, %d -> %d bytes",
                        partition.topic, partition.index, result.first_dirty_offset, result.records_removed,
                        result.segments_rewritten, result.bytes_before, result.bytes_after)
            await asyncio.sleep(0)  # let requests in between partitions

    def _topic_config_float(self, topic: str, key: str, default: float) -> float:
        value = self.topic_config(topic, key)
        try:
            return default if value is None else float(value)
        except ValueError:
            return default

    def write_checkpoints(self) -> None:
        """Every checkpoint now, on the calling thread (at shutdown)."""
        for directory, write in self._checkpoint_writes():
            try:
                write()
            except _DIRECTORY_FAILURES as error:
                self.fail_directory(directory, error)

    async def _write_checkpoints_off_loop(self, *, files: frozenset[str] = _ALL_CHECKPOINTS) -> None:
        """The periodic checkpoints (those named in `files`): their contents taken on the loop,
        their files written and fsynced on a worker thread (eight fsyncs per directory every few
        seconds stalled every Fetch and Produce of the broker behind them, 100 ms and more on a
        busy disk; Kafka's scheduler thread writes them apart from its request handlers too)."""
        for directory, write in self._checkpoint_writes(files):
            try:
                await asyncio.to_thread(write)
            except _DIRECTORY_FAILURES as error:
                self.fail_directory(directory, error)

    def _checkpoint_writes(self, files: frozenset[str] = _ALL_CHECKPOINTS) -> list[tuple[Path, Callable[[], None]]]:
        # Kafka snapshots producer state when a segment rolls: replay after a crash then starts
        # from the newest segment. Rare, and in the partition's own directory, which a deletion on
        # the loop may remove: written here, on the loop.
        for partition in list(self.partitions.values()):
            active_base = partition.log.segment_base_offsets[-1]
            if active_base != partition.snapshot_segment_base:
                try:
                    _write_producer_snapshot(partition)
                except _DIRECTORY_FAILURES as error:
                    self.fail_directory(partition.log_dir, error)
                    continue
                partition.snapshot_segment_base = active_base
        return [(directory, self._directory_checkpoints(directory, files)) for directory in self._online_dirs()]

    def _write_directory_checkpoints(self, directory: Path) -> None:
        self._directory_checkpoints(directory)()

    def _directory_checkpoints(self, directory: Path, files: frozenset[str] = _ALL_CHECKPOINTS) -> Callable[[], None]:
        """Kafka's per-directory offset checkpoints (those named in `files`) of the replicas that
        directory holds, taken now; the returned function writes them. One writer at a time (the
        periodic one on its thread may overlap one on the loop), and never over newer ones: a
        DeleteRecords answered after its checkpoint was written must not see an older one taken
        before it land later."""
        hosted = [(k, p) for k, p in self.partitions.items() if p.log_dir == directory]
        tables: dict[str, tuple[dict[Path, dict[tuple[str, int], int]], Callable[[Partition], int]]] = {
            HIGH_WATERMARK_CHECKPOINT_FILE_NAME: (self._hwm_checkpoints, lambda p: p.high_watermark),
            RECOVERY_POINT_CHECKPOINT_FILE_NAME: (self._recovery_points, lambda p: p.log.flushed_offset),
            LOG_START_OFFSET_CHECKPOINT_FILE_NAME: (self._log_starts, lambda p: p.log.log_start_offset),
            CLEANER_OFFSET_CHECKPOINT_FILE_NAME: (self._cleaner_points, lambda p: p.first_dirty_offset),
        }
        contents: dict[str, dict[tuple[str, int], int]] = {}
        for name in sorted(files):
            table, value = tables[name]
            contents[name] = table[directory] = {k: value(p) for k, p in hosted}
        self._checkpoints_taken += 1
        taken = self._checkpoints_taken

        def write() -> None:
            with self._checkpoint_lock:
                for name, entries in contents.items():
                    if self._checkpoints_written.get((directory, name), 0) > taken:
                        continue
                    self._checkpoints_written[(directory, name)] = taken
                    write_offset_checkpoint(directory / name, entries)

        return write

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def broker_address(self, broker_id: int) -> tuple[str, int] | None:
        registration = self._image().cluster.broker(broker_id)
        if registration is None:
            return None
        endpoint = registration.listener(self.config.inter_broker_listener_name)
        if endpoint is None:
            return None
        return endpoint.host, endpoint.port


class _Fetcher:
    """The fetch loop towards one leader broker (Kafka's ReplicaFetcherThread)."""

    def __init__(self, manager: ReplicaManager, leader_id: int) -> None:
        self._manager = manager
        self.leader_id = leader_id
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._connection: KafkaConnection | None = None
        self.stopped = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def add(self, partition: Partition) -> None:
        self._partitions[(partition.topic, partition.index)] = partition
        self._wake.set()

    def remove(self, partition: Partition) -> None:
        if self._partitions.get((partition.topic, partition.index)) is partition:
            del self._partitions[(partition.topic, partition.index)]

    async def stop(self) -> None:
        self.stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._connection is not None:
            await self._connection.close()

    async def _run(self) -> None:
        manager = self._manager
        config = manager.config
        backoff_s = config.replica_fetch_backoff_ms / 1000
        while True:
            if not self._partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            address = manager.broker_address(self.leader_id)
            if address is None:
                await asyncio.sleep(backoff_s)
                continue
            if self._connection is None or (self._connection.host, self._connection.port) != address:
                if self._connection is not None:
                    await self._connection.close()
                self._connection = KafkaConnection(address[0], address[1], config=ConnectionConfig(
                    client_id=f"broker-{manager.node_id}-fetcher-{self.leader_id}",
                    request_timeout_ms=config.replica_socket_timeout_ms if config.replica_socket_timeout_ms > 0 else 30_000,
                    socket_connection_setup_timeout_ms=5000,
                    reconnect_backoff_ms=50,
                    reconnect_backoff_max_ms=1000,
                    security=inter_broker_client_security(config),
                ))
            fetching = dict(self._partitions)
            request = manager.fetch_request_for(fetching.values())
            if request is None:
                # Every partition is held back by the follower throttle (Kafka's fetcher backs off).
                await asyncio.sleep(_THROTTLED_BACKOFF_S)
                continue
            try:
                response = await self._connection.send(request)
            except (KafkaProtocolError, OSError) as error:
                logger.debug("Fetch from broker %d failed: %s", self.leader_id, error)
                await asyncio.sleep(backoff_s)
                continue
            back_off = ErrorCode(response.error_code) != ErrorCode.none
            for topic in response.responses:
                for answer in topic.partitions:
                    key = (str(topic.topic), int(answer.partition_index))
                    partition = fetching.get(key)
                    if partition is None or self._partitions.get(key) is not partition:
                        continue  # removed while the fetch was in flight
                    try:
                        if not manager.handle_fetched(partition, answer):
                            back_off = True
                    except LogError as error:
                        logger.error("Follower append to %s-%d failed: %s", key[0], key[1], error)
                        back_off = True
                    except _DIRECTORY_FAILURES as error:
                        manager.fail_directory(partition.log_dir, error)
            if back_off:
                await asyncio.sleep(backoff_s)


def _rebuild_producer_state(partition: Partition) -> None:
    """Producer state from the newest snapshot at or below the log end, then the batch headers after it."""
    table = partition.producers
    table.clear()
    log = partition.log
    offset = log.log_start_offset
    replayed = 0
    snapshot = latest_producer_snapshot(log.directory, at_most=log.log_end_offset)
    if snapshot is not None:
        snapshot_offset, entries = snapshot
        for e in entries:
            first_sequence = (e.last_sequence - e.offset_delta) % (2**31)
            table.restore(producer_id=e.producer_id, epoch=e.epoch, batch=BatchMetadata(
                first_seq=first_sequence, last_seq=e.last_sequence,
                first_offset=e.last_offset - e.offset_delta, last_offset=e.last_offset, timestamp_ms=e.timestamp_ms,
            ))
        offset = max(offset, snapshot_offset)
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes=_REBUILD_CHUNK_BYTES)
        if not data:
            break
        for header, _ in iter_batches(data):
            table.update(producer_id=header.producer_id, epoch=header.producer_epoch,
                         base_sequence=header.base_sequence, first_offset=header.base_offset,
                         last_offset=header.last_offset, timestamp_ms=header.max_timestamp)
            offset = header.next_offset
            replayed += 1
    logger.info("Producer state of %s-%d: %d producers, from the snapshot at %s and %d batches replayed",
                partition.topic, partition.index, len(table), "none" if snapshot is None else snapshot[0], replayed)


def _write_producer_snapshot(partition: Partition) -> None:
    """Kafka's `<log end>.snapshot` of the partition's producers; the two newest are kept."""
    log = partition.log
    entries = [
        ProducerSnapshotEntry(producer_id=pid, epoch=epoch, last_sequence=batch.last_seq, last_offset=batch.last_offset,
                              offset_delta=batch.last_offset - batch.first_offset, timestamp_ms=batch.timestamp_ms)
        for pid, epoch, batch in partition.producers.last_batches()
    ]
    write_producer_snapshot(log.directory, log.log_end_offset, entries)
    delete_producer_snapshots(log.directory, keep_newest=_PRODUCER_SNAPSHOTS_KEPT)


def clean_shutdown_broker_epoch(log_dirs: Iterable[Path]) -> int:
    """The broker epoch a clean shutdown recorded in every log directory's `.kafka_cleanshutdown`,
    or -1 when any directory lacks a readable one (the last shutdown was not clean there). The
    broker registers with it as `previous_broker_epoch` (KIP-966: the controller tells a clean
    restart from an unclean one); read it before the replica manager removes the markers."""
    epochs = set()
    for directory in log_dirs:
        try:
            epochs.add(int(json.loads((directory / CLEAN_SHUTDOWN_FILE_NAME).read_text())["brokerEpoch"]))
        except (OSError, ValueError, KeyError, TypeError):
            return -1
    return epochs.pop() if len(epochs) == 1 else -1


def _record_topic_id(directory: Path, topic_id: uuid.UUID) -> None:
    """Kafka's partition.metadata in a replica's (or future replica's) directory, written once."""
    try:
        recorded = read_partition_metadata(directory)
    except PartitionMetadataError:
        recorded = None
    if recorded != topic_id:
        write_partition_metadata(directory, topic_id)


def _leftover_replicas(log_dir: Path) -> tuple[dict[tuple[str, int], Path], list[Path]]:
    """At start: the future replicas (`-future`) of moves a restart interrupted, which are kept
    and their moves resumed as Kafka's LogManager loads them (`ReplicaManager._resume_move`), and
    the replicas a deletion renamed `-delete`, which are removed after the delay as Kafka's are."""
    futures: dict[tuple[str, int], Path] = {}
    half_deleted: list[Path] = []
    with contextlib.suppress(OSError):
        for path in sorted(log_dir.iterdir()):
            match = _LEFTOVER_DIR.match(path.name)
            if not path.is_dir() or match is None:
                continue
            key = (match["topic"], int(match["partition"]))
            if match["kind"] == "future" and key not in futures:
                futures[key] = path
            elif match["kind"] == "future":
                logger.warning("Removing %s: %s-%d already has the future replica %s", path, *key, futures[key])
                half_deleted.append(_rename_for_deletion(path) or path)
            else:
                logger.info("Removing %s, left by an unfinished deletion, after log.segment.delete.delay.ms", path)
                half_deleted.append(path)
    return futures, [path for path in half_deleted if path.name.endswith("-delete")]


def _rename_for_deletion(directory: Path) -> Path | None:
    """Kafka's first step of a replica's deletion: rename to `<name>.<uuid>-delete` (atomic, so a
    restart never mistakes a half-deleted replica for a live one); None when it failed."""
    doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}-delete")
    try:
        directory.rename(doomed)
    except OSError as error:
        logger.warning("Could not delete %s: %s", directory, error)
        return None
    return doomed


def _directory_of(error: BaseException, directories: list[Path]) -> Path | None:
    """The log directory a storage error names, if any."""
    named = getattr(error, "path", None) or getattr(error, "filename", None)
    if named is None:
        return None
    path = Path(str(named))
    return next((d for d in directories if d == path or d in path.parents), None)


def _read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    if not path.exists():
        return {}
    try:
        return read_offset_checkpoint(path)
    except (CheckpointError, OSError) as error:
        logger.warning("Ignoring unreadable checkpoint %s: %s", path, error)
        return {}


