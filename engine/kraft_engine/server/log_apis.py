"""The broker APIs that change how much of a log a broker keeps, and where (Kafka's KafkaApis
handlers for them), on top of the replica manager:

- DeleteRecords v0-2: each partition's leader moves its log start offset to the requested offset
  (-1: the high watermark), refusing one past the high watermark (OFFSET_OUT_OF_RANGE) or on a
  topic whose `cleanup.policy` lacks `delete` (POLICY_VIOLATION), and answers once every replica
  on a live broker has moved its own log start there (the low watermark), or with
  REQUEST_TIMED_OUT after the request's timeout, as Kafka's DelayedDeleteRecords does. A broker
  that does not lead the partition answers NOT_LEADER_OR_FOLLOWER; the admin client sends each
  partition to its leader.
- AlterReplicaLogDirs v1-2: move replicas of this broker between its log directories (JBOD), as
  Kafka does: a future replica (`<topic>-<partition>.<uuid>-future`) in the destination is filled
  from the current log, the new placement goes to the controller with AssignReplicasToDirs once
  it caught up, then the two are swapped and the old directory deleted (`ReplicaManager`). Per
  replica: LOG_DIR_NOT_FOUND for a path that is not one of `log.dirs`, KAFKA_STORAGE_ERROR for an
  offline directory or replica, REPLICA_NOT_AVAILABLE for a replica this broker does not host yet
  (it is then created in that directory when the metadata assigns it), else NONE once the move is
  under way (DescribeLogDirs shows the future replica and its lag). Naming the current directory
  cancels a move; naming a third one redirects it.

Authorization is Kafka's: DeleteRecords needs DELETE on each topic (else TOPIC_AUTHORIZATION_FAILED
for its partitions, nothing deleted), AlterReplicaLogDirs ALTER on the cluster (else every replica
named is CLUSTER_AUTHORIZATION_FAILED, nothing moved).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from kraft_engine.metadata.authorizer import AclOperation, ResourceType
from kraft_engine.protocol import Listener, RequestContext
from kraft_engine.server.authorization import NodeAuthorizer
from kraft_engine.server.replica_manager import ReplicaManager

__all__ = ["LOG_API_VERSIONS", "LogApis"]

logger = logging.getLogger(__name__)

DELETE_RECORDS, ALTER_REPLICA_LOG_DIRS = 21, 34
LOG_API_VERSIONS = {
    DELETE_RECORDS: (0, 2),
    ALTER_REPLICA_LOG_DIRS: (1, 2),
}
_NO_THROTTLE = timedelta(0)


class LogApis:
    def __init__(self, *, replicas: ReplicaManager, authorizer: NodeAuthorizer) -> None:
        self._replicas = replicas
        self._authorizer = authorizer

    def register(self, listener: Listener) -> None:
        handlers = {DELETE_RECORDS: self.delete_records, ALTER_REPLICA_LOG_DIRS: self.alter_replica_log_dirs}
        listener.register_all(handlers, versions=LOG_API_VERSIONS)

    # -- DeleteRecords ---------------------------------------------------------------------------
    async def delete_records(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        timeout_ms = max(0, int(request.timeout.total_seconds() * 1000))
        jobs = [(str(topic.name), int(wanted.partition_index), int(wanted.offset))
                for topic in request.topics for wanted in topic.partitions]
        deletable = self._authorizer.allowed(ctx, AclOperation.DELETE, ResourceType.TOPIC, {t for t, _, _ in jobs})

        async def one(topic: str, index: int, offset: int) -> tuple[ErrorCode, int]:
            if topic not in deletable:
                return ErrorCode.topic_authorization_failed, -1
            return await self._delete_one(topic, index, offset, timeout_ms=timeout_ms)

        outcomes = await asyncio.gather(*(one(t, p, o) for t, p, o in jobs))
        by_topic: dict[str, list[Any]] = {}
        for (name, index, _), (error, low_watermark) in zip(jobs, outcomes, strict=True):
            by_topic.setdefault(name, []).append(module.DeleteRecordsPartitionResult(
                partition_index=i32(index), low_watermark=i64(low_watermark), error_code=error))
        return ctx.response_class(
            throttle_time=_NO_THROTTLE,
            topics=tuple(module.DeleteRecordsTopicResult(name=name, partitions=tuple(parts))
                         for name, parts in by_topic.items()),
        )

    async def _delete_one(self, topic: str, index: int, offset: int, *, timeout_ms: int) -> tuple[ErrorCode, int]:
        partition, error = self._replicas.leader_partition(topic, index)
        if partition is None:
            return error, -1
        error, target, message = self._replicas.delete_records(partition, offset=offset)
        if error != ErrorCode.none:
            logger.info("DeleteRecords on %s-%d to %d refused: %s %s", topic, index, offset, error.name, message or "")
            return error, -1
        return await self._replicas.wait_low_watermark(partition, offset=target, timeout_ms=timeout_ms)

    # -- AlterReplicaLogDirs ---------------------------------------------------------------------
    async def alter_replica_log_dirs(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        by_topic: dict[str, list[Any]] = {}
        may_alter = self._authorizer.authorize_cluster(ctx, AclOperation.ALTER)
        for wanted in request.dirs:
            destination = self._replicas.log_dir_at(str(wanted.path))
            for topic in wanted.topics:
                for index in topic.partitions:
                    if not may_alter:
                        error = ErrorCode.cluster_authorization_failed
                    elif destination is None:
                        error = ErrorCode.log_dir_not_found
                        logger.info("AlterReplicaLogDirs of %s-%d: log dir %s is not found in the config", topic.name,
                                    int(index), wanted.path)
                    else:
                        error = self._replicas.alter_replica_log_dir(str(topic.name), int(index), destination)
                    by_topic.setdefault(str(topic.name), []).append(
                        module.AlterReplicaLogDirPartitionResult(partition_index=i32(int(index)), error_code=error))
        return ctx.response_class(
            throttle_time=_NO_THROTTLE,
            results=tuple(module.AlterReplicaLogDirTopicResult(topic_name=name, partitions=tuple(parts))
                          for name, parts in by_topic.items()),
        )
