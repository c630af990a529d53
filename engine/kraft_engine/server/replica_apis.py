"""The broker APIs that describe its replicas rather than move records (Kafka's KafkaApis handlers
for them), answered from the replica manager's hosted partitions:

- OffsetsForLeaderEpoch v2-4: the leader's end offset of a leader epoch, from the partition's
  leader-epoch cache (the largest epoch at or below the one asked for, and where the next epoch
  starts; the latest epoch ends at the log end). Leader only, with the current-leader-epoch check,
  as Kafka's `Partition.lastOffsetForLeaderEpoch(fetchOnlyFromLeader = true)`. Consumers ask it after
  a leader change to detect truncation; followers of Kafka's older protocol ask it before fetching.
- DescribeProducers v0: the idempotent producers a replica (leader or follower: any replica with a
  local log) remembers for the partition: id, epoch, last sequence and last timestamp (the max
  timestamp of its last batch, as Kafka's ProducerStateEntry keeps it, restored from producer
  snapshots too); no transactions, so coordinator epoch and current transaction start offset are
  -1, as Kafka reports them for a producer with no open transaction.
- DeleteRecords (and the log-directory moves): `server.log_apis`, registered with these.
- DescribeLogDirs v1-4: every log directory with the replicas in it (size on disk, offset lag 0 as
  Kafka reports for a replica that is not a future one), the future replicas of AlterReplicaLogDirs
  moves in their destination (`is_future_key`, lag = how far the copy is behind the current log's
  end) and, from v4, the file system's total and usable bytes.

Authorization is Kafka's: OffsetsForLeaderEpoch needs CLUSTER_ACTION on the cluster (followers) or
DESCRIBE on each topic (consumers, KIP-320), else TOPIC_AUTHORIZATION_FAILED per partition;
DescribeProducers READ on the topic; DescribeLogDirs DESCRIBE on the cluster (else
CLUSTER_AUTHORIZATION_FAILED and no directories).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName
from kio.static.primitive import i32, i64

from kraft_engine.metadata.authorizer import AclOperation, ResourceType
from kraft_engine.protocol import Listener, RequestContext
from kraft_engine.server.authorization import NodeAuthorizer
from kraft_engine.server.log_apis import LogApis
from kraft_engine.server.replica_manager import Partition, ReplicaManager

__all__ = ["REPLICA_API_VERSIONS", "ReplicaApis", "leader_at_epoch"]

OFFSET_FOR_LEADER_EPOCH, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS = 23, 35, 61
REPLICA_API_VERSIONS = {
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    DESCRIBE_LOG_DIRS: (1, 4),
    DESCRIBE_PRODUCERS: (0, 0),
}
_NO_THROTTLE = timedelta(0)


def leader_at_epoch(replicas: ReplicaManager, topic: str, index: int, *,
                    current_leader_epoch: int) -> tuple[Partition | None, ErrorCode]:
    """This broker's leader replica of a partition, checked against the epoch the client believes
    current (-1: no check): FENCED_LEADER_EPOCH when the client is behind, UNKNOWN_LEADER_EPOCH
    when it is ahead of this broker's metadata."""
    partition, error = replicas.leader_partition(topic, index)
    if partition is None:
        return None, error
    if current_leader_epoch >= 0 and current_leader_epoch != partition.leader_epoch:
        if current_leader_epoch < partition.leader_epoch:
            return None, ErrorCode.fenced_leader_epoch
        return None, ErrorCode.unknown_leader_epoch
    return partition, ErrorCode.none


class ReplicaApis:
    def __init__(self, *, replicas: ReplicaManager, authorizer: NodeAuthorizer) -> None:
        self._replicas = replicas
        self._authorizer = authorizer
        self._log_apis = LogApis(replicas=replicas, authorizer=authorizer)

    def register(self, listener: Listener) -> None:
        self._log_apis.register(listener)
        handlers = {
            OFFSET_FOR_LEADER_EPOCH: self.offsets_for_leader_epoch,
            DESCRIBE_LOG_DIRS: self.describe_log_dirs,
            DESCRIBE_PRODUCERS: self.describe_producers,
        }
        listener.register_all(handlers, versions=REPLICA_API_VERSIONS)

    # -- OffsetsForLeaderEpoch -----------------------------------------------------------------------
    async def offsets_for_leader_epoch(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        topics = []
        follower = self._authorizer.authorize_cluster(ctx, AclOperation.CLUSTER_ACTION, log_denied=False)
        for topic in request.topics:
            results = []
            if not follower and not self._authorizer.authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                                               str(topic.topic)):
                topics.append(module.OffsetForLeaderTopicResult(topic=topic.topic, partitions=tuple(
                    module.EpochEndOffset(error_code=ErrorCode.topic_authorization_failed, partition=wanted.partition,
                                          leader_epoch=i32(-1), end_offset=i64(-1))
                    for wanted in topic.partitions)))
                continue
            for wanted in topic.partitions:
                index = int(wanted.partition)
                partition, error = leader_at_epoch(self._replicas, str(topic.topic), index,
                                                   current_leader_epoch=int(wanted.current_leader_epoch))
                epoch, end_offset = -1, -1
                if partition is not None:
                    epoch, end_offset = partition.log.end_offset_for_epoch(int(wanted.leader_epoch))
                    if end_offset < 0:
                        epoch = -1
                results.append(module.EpochEndOffset(error_code=error, partition=i32(index), leader_epoch=i32(epoch),
                                                     end_offset=i64(end_offset)))
            topics.append(module.OffsetForLeaderTopicResult(topic=topic.topic, partitions=tuple(results)))
        return ctx.response_class(throttle_time=_NO_THROTTLE, topics=tuple(topics))

    # -- DescribeProducers ---------------------------------------------------------------------------
    async def describe_producers(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        topics = []
        for topic in request.topics:
            results = []
            if not self._authorizer.authorize(ctx, AclOperation.READ, ResourceType.TOPIC, str(topic.name)):
                topics.append(module.TopicResponse(name=topic.name, partitions=tuple(
                    module.PartitionResponse(partition_index=index, error_code=ErrorCode.topic_authorization_failed,
                                             error_message=None, active_producers=())
                    for index in topic.partition_indexes)))
                continue
            for index in topic.partition_indexes:
                partition = self._replicas.partitions.get((str(topic.name), int(index)))
                if partition is None:
                    error = self._replicas.leader_partition(str(topic.name), int(index))[1]
                    results.append(module.PartitionResponse(partition_index=index, error_code=error, error_message=None,
                                                            active_producers=()))
                    continue
                producers = tuple(
                    module.ProducerState(producer_id=ProducerId(p.producer_id), producer_epoch=i32(p.epoch),
                                         last_sequence=i32(p.last_sequence), last_timestamp=i64(p.last_timestamp_ms),
                                         coordinator_epoch=i32(-1), current_txn_start_offset=i64(-1))
                    for p in partition.producers.active_producers()
                )
                results.append(module.PartitionResponse(partition_index=index, error_code=ErrorCode.none, error_message=None,
                                                        active_producers=producers))
            topics.append(module.TopicResponse(name=topic.name, partitions=tuple(results)))
        return ctx.response_class(throttle_time=_NO_THROTTLE, topics=tuple(topics))

    # -- DescribeLogDirs -----------------------------------------------------------------------------
    async def describe_log_dirs(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        if not self._authorizer.authorize_cluster(ctx, AclOperation.DESCRIBE):
            refused: dict[str, Any] = {"throttle_time": _NO_THROTTLE, "results": ()}
            if ctx.api_version >= 3:
                refused["error_code"] = ErrorCode.cluster_authorization_failed
            return ctx.response_class(**refused)
        wanted: dict[str, set[int]] | None = None
        if request.topics is not None:
            wanted = {}
            for topic in request.topics:
                wanted.setdefault(str(topic.topic), set()).update(int(p) for p in topic.partitions)
        # (size, offset lag, is future) of each replica, current and future (an AlterReplicaLogDirs
        # move: its lag is how far the copy is behind the current log's end, as Kafka reports it).
        by_dir: dict[Path, dict[str, list[tuple[int, int, int, bool]]]] = {d: {} for d in self._replicas.log_dirs.values()}
        for (name, index), partition in sorted(self._replicas.partitions.items()):
            if wanted is not None and index not in wanted.get(name, ()):
                continue
            by_dir.setdefault(partition.log_dir, {}).setdefault(name, []).append(
                (index, partition.log.size_in_bytes(), max(partition.high_watermark - partition.log.log_end_offset, 0), False))
            future = partition.future
            if future is not None:
                by_dir.setdefault(future.destination, {}).setdefault(name, []).append(
                    (index, future.log.size_in_bytes(), max(partition.log.log_end_offset - future.log.log_end_offset, 0), True))
        results = []
        for directory, topics in by_dir.items():
            total_bytes, usable_bytes = _space(directory)
            results.append(_make_result(
                module,
                error_code=ErrorCode.kafka_storage_error if directory in self._replicas.offline_dirs else ErrorCode.none,
                log_dir=str(directory.resolve()),
                topics=tuple(
                    module.DescribeLogDirsTopic(name=TopicName(name), partitions=tuple(
                        module.DescribeLogDirsPartition(partition_index=i32(index), partition_size=i64(size),
                                                        offset_lag=i64(lag), is_future_key=is_future)
                        for index, size, lag, is_future in partitions
                    ))
                    for name, partitions in topics.items()
                ),
                total_bytes=i64(total_bytes),
                usable_bytes=i64(usable_bytes),
            ))
        fields: dict[str, Any] = {"throttle_time": _NO_THROTTLE, "results": tuple(results)}
        if ctx.api_version >= 3:
            fields["error_code"] = ErrorCode.none
        return ctx.response_class(**fields)


def _make_result(module: Any, **fields: Any) -> Any:
    cls = module.DescribeLogDirsResult
    return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})


def _space(directory: Path) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding `directory` (Kafka's FileStore figures)."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return -1, -1
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
