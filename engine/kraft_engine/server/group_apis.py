"""The group coordinator's shell on a broker: its APIs, its `__consumer_offsets` partitions, its timers.

Kafka's GroupCoordinatorService for classic groups. The decisions are `broker.group_coordinator`'s
(one pure core per `__consumer_offsets` partition this broker leads); this module does the I/O:

- FindCoordinator v0-6 (key type 0, group; v4+ batched keys): the leader of partition
  `abs(hash(group)) % partitions` of `__consumer_offsets`, created through the controller on first
  use with `offsets.topic.num.partitions` and `offsets.topic.replication.factor` (compacted,
  `offsets.topic.segment.bytes`), as Kafka's broker does; COORDINATOR_NOT_AVAILABLE until it has
  a leader. Key types 1 (transactions) and 2 (share groups) are refused with INVALID_REQUEST: not
  served, and ApiVersions does not advertise their APIs.
- JoinGroup v0-9, SyncGroup v0-5, Heartbeat v0-4, LeaveGroup v0-5, OffsetCommit v2-9,
  OffsetFetch v1-9, ListGroups v0-5, DescribeGroups v0-6, DeleteGroups v0-2, OffsetDelete v0:
  Kafka 4.1's ranges. JoinGroup and SyncGroup answers wait in the core until the rebalance step
  they belong to completes.
- Every state change the core makes is written to its partition as Kafka's records
  (`records.group_records`) with acks=all (`offsets.commit.timeout.ms`), and the replies that
  depend on it (an OffsetCommit, the SyncGroup answers of a generation) go only once it is
  replicated. A write that fails means the partition moved: the shard is dropped (everything
  waiting on it gets NOT_COORDINATOR) and, if this broker still leads it, loaded again.
- Leadership: after each metadata update the broker's led `__consumer_offsets` partitions are
  compared with the loaded shards. A newly led partition is loaded by replaying its log from the
  log start to the log end (COORDINATOR_LOAD_IN_PROGRESS meanwhile); a lost one is dropped. So a
  kill -9 of a coordinator moves its groups, with their committed offsets and generations, to the
  new leader, and the members heartbeat on there.
- Timers: one task ticks each shard at its next deadline (sessions, join and sync phases), and
  expires offsets every `offsets.retention.check.interval.ms`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i16, i32, i32Timedelta, i64

from kraft_engine.broker import validate_produce_payload
from kraft_engine.broker.group_coordinator import (
    CONSUMER_PROTOCOL_TYPE,
    CommittedOffset,
    GroupConfig,
    GroupCoordinator,
    GroupRecord,
    JoinAnswer,
    JoinRequest,
    Output,
    SyncAnswer,
    Write,
)
from kraft_engine.errors import ServerError
from kraft_engine.metadata import MetadataImage
from kraft_engine.metadata.authorizer import AclOperation, ResourceType
from kraft_engine.protocol import Listener, RequestContext, make_entity
from kraft_engine.records.client_records import ProducedRecord, encode_client_batch, read_client_records
from kraft_engine.records.consumer_protocol import read_subscription
from kraft_engine.records.group_records import (
    GroupMetadataValue,
    GroupRecordError,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for_group,
)
from kraft_engine.server.authorization import NodeAuthorizer
from kraft_engine.server.controller_channel import ControllerChannel, ControllerUnavailable
from kraft_engine.server.replica_manager import Partition, ReplicaManager

__all__ = ["GROUP_API_VERSIONS", "GroupApis", "OFFSETS_TOPIC"]

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP = 10, 11, 14, 12, 13
OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 8, 9, 16, 15, 42, 47
# Kafka 4.1's ranges on a broker listener (ApiKeys.*.oldestVersion .. latestVersion(false)).
GROUP_API_VERSIONS = {
    FIND_COORDINATOR: (0, 6),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 6),
    LIST_GROUPS: (0, 5),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
}
_GROUP_KEY_TYPE = 0
_NO_THROTTLE = timedelta(0)
_LOAD_CHUNK_BYTES = 1024 * 1024


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


def subscribed_topics(protocol_type: str, metadata: bytes) -> frozenset[str] | None:
    """The topics of a consumer's ConsumerProtocolSubscription (None: not a consumer's, or unreadable)."""
    subscription = read_subscription(metadata) if protocol_type == CONSUMER_PROTOCOL_TYPE else None
    return None if subscription is None else frozenset(str(t) for t in subscription.topics)


@dataclasses.dataclass(eq=False)
class _Shard:
    partition: int
    leader_epoch: int
    core: GroupCoordinator
    loaded: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    waiting: dict[int, asyncio.Future[Any]] = dataclasses.field(default_factory=dict)
    write_lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    dropped: bool = False


class _NotCoordinator(ServerError):
    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


class GroupApis:
    """The group coordinator of one broker (see the module docstring)."""

    def __init__(self, *, node_id: int, config: Any, replicas: ReplicaManager, image: Callable[[], MetadataImage],
                 channel: ControllerChannel, authorizer: NodeAuthorizer | None = None) -> None:
        self._node_id = node_id
        # Without one, every request is allowed (no `authorizer.class.name`), as in Kafka.
        self._authorizer = authorizer if authorizer is not None else NodeAuthorizer({}, image=image)
        self._config = config
        self._replicas = replicas
        self._image = image
        self._channel = channel
        self._group_config = GroupConfig(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            max_size=config.group_max_size,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
        )
        self._shards: dict[int, _Shard] = {}
        self._tokens = itertools.count(1)
        self._creating = False
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.Task[None] | None = None

    def register(self, listener: Listener) -> None:
        handlers = {
            FIND_COORDINATOR: self.find_coordinator,
            JOIN_GROUP: self.join_group,
            SYNC_GROUP: self.sync_group,
            HEARTBEAT: self.heartbeat,
            LEAVE_GROUP: self.leave_group,
            OFFSET_COMMIT: self.offset_commit,
            OFFSET_FETCH: self.offset_fetch,
            LIST_GROUPS: self.list_groups,
            DESCRIBE_GROUPS: self.describe_groups,
            DELETE_GROUPS: self.delete_groups,
            OFFSET_DELETE: self.offset_delete,
        }
        listener.register_all(handlers, versions=GROUP_API_VERSIONS)

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().create_task(self._run_timers())

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        for shard in list(self._shards.values()):
            self._drop(shard)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- leadership of __consumer_offsets ------------------------------------------------------------
    def on_metadata(self, image: MetadataImage | None = None) -> None:
        """Load the partitions this broker now leads, drop the ones it no longer leads (after the
        replicas applied the metadata `image`, the current one by default)."""
        topic = (image or self._image()).topics.get_topic_by_name(OFFSETS_TOPIC)
        led: dict[int, Partition] = {}
        for index in () if topic is None else topic.partitions:
            partition = self._replicas.partitions.get((OFFSETS_TOPIC, index))
            if partition is not None and partition.is_leader:
                led[index] = partition
        for index, shard in list(self._shards.items()):
            partition = led.get(index)
            if partition is None or partition.leader_epoch != shard.leader_epoch:
                logger.info("Group coordinator: resigning %s-%d (epoch %d)", OFFSETS_TOPIC, index, shard.leader_epoch)
                self._drop(shard)
        for index, partition in led.items():
            if index not in self._shards:
                self._load(partition)

    def _drop(self, shard: _Shard) -> None:
        shard.dropped = True
        if self._shards.get(shard.partition) is shard:
            del self._shards[shard.partition]
        for future in shard.waiting.values():
            if not future.done():
                future.set_exception(_NotCoordinator(ErrorCode.not_coordinator))
        shard.waiting.clear()

    def _load(self, partition: Partition) -> None:
        counter = itertools.count()
        prefix = uuid.uuid4().hex[:8]
        core = GroupCoordinator(config=self._group_config, new_id=lambda: f"{prefix}-{next(counter)}",
                                subscribed_topics=subscribed_topics)
        shard = _Shard(partition=partition.index, leader_epoch=partition.leader_epoch, core=core)
        self._shards[partition.index] = shard
        self._spawn(self._replay(shard, partition))

    async def _replay(self, shard: _Shard, partition: Partition) -> None:
        """Kafka's CoordinatorLoader: every record of the partition, in order, into the core."""
        now_ms = _now_ms()
        offset = partition.log.log_start_offset
        end = partition.log.log_end_offset
        records = skipped = 0
        while offset < end and not shard.dropped:
            data = self._replicas.read(partition, offset=offset, max_bytes=_LOAD_CHUNK_BYTES, upper_bound=end)
            if not data:
                break
            for record in read_client_records(data):
                offset = record.offset + 1
                if record.key is None:
                    continue
                try:
                    key = decode_key(record.key)
                    if isinstance(key, UnknownKey):
                        skipped += 1
                        continue
                    value: OffsetCommitValue | GroupMetadataValue | None = None
                    if record.value is not None:
                        value = decode_offset_commit_value(record.value) if isinstance(key, OffsetCommitKey) \
                            else decode_group_metadata_value(record.value)
                except GroupRecordError as error:
                    logger.warning("Skipping an unreadable record at %s-%d offset %d: %s", OFFSETS_TOPIC,
                                   shard.partition, record.offset, error)
                    continue
                shard.core.replay(key, value, now_ms=now_ms)
                records += 1
            await asyncio.sleep(0)
        if shard.dropped:
            return
        shard.core.loaded(now_ms=_now_ms())
        shard.loaded.set()
        self._wake.set()
        logger.info("Group coordinator: loaded %s-%d (epoch %d): %d records, %d groups%s", OFFSETS_TOPIC,
                    shard.partition, shard.leader_epoch, records, len(shard.core.group_ids),
                    f", {skipped} records of other group types skipped" if skipped else "")

    def _shard_for(self, group_id: str) -> _Shard:
        topic = self._image().topics.get_topic_by_name(OFFSETS_TOPIC)
        if topic is None or not topic.partitions:
            raise _NotCoordinator(ErrorCode.coordinator_not_available)
        shard = self._shards.get(partition_for_group(group_id, partitions=len(topic.partitions)))
        if shard is None:
            raise _NotCoordinator(ErrorCode.not_coordinator)
        if not shard.loaded.is_set():
            raise _NotCoordinator(ErrorCode.coordinator_load_in_progress)
        return shard

    # -- writing and answering ---------------------------------------------------------------------------
    def _deliver(self, shard: _Shard, outputs: list[Output]) -> None:
        for output in outputs:
            if isinstance(output, Write):
                self._spawn(self._write_then_reply(shard, output))
            else:
                self._reply(shard, output)

    def _reply(self, shard: _Shard, answer: JoinAnswer | SyncAnswer) -> None:
        future = shard.waiting.pop(answer.token, None)
        if future is not None and not future.done():
            future.set_result(answer)

    async def _write_then_reply(self, shard: _Shard, write: Write) -> None:
        error = await self._write(shard, write.records)
        for answer in write.replies:
            if error == ErrorCode.none:
                self._reply(shard, answer)
            else:
                future = shard.waiting.pop(answer.token, None)
                if future is not None and not future.done():
                    future.set_exception(_NotCoordinator(ErrorCode.not_coordinator))

    async def _write(self, shard: _Shard, records: tuple[GroupRecord, ...]) -> ErrorCode:
        """Append with acks=all; a failure drops the shard (and reloads it if still led here)."""
        if not records:
            return ErrorCode.none
        now_ms = _now_ms()
        produced = []
        for key, value in records:
            if isinstance(key, OffsetCommitKey):
                key_bytes = encode_offset_commit_key(key)
                value_bytes = None if value is None else encode_offset_commit_value(value)  # type: ignore[arg-type]
            else:
                key_bytes = encode_group_metadata_key(key)
                value_bytes = None if value is None else encode_group_metadata_value(value)  # type: ignore[arg-type]
            produced.append(ProducedRecord(value=value_bytes, key=key_bytes, timestamp_ms=now_ms))
        async with shard.write_lock:
            if shard.dropped:
                return ErrorCode.not_coordinator
            partition, _ = self._replicas.leader_partition(OFFSETS_TOPIC, shard.partition)
            if partition is None or partition.leader_epoch != shard.leader_epoch:
                outcome_error = ErrorCode.not_coordinator
            else:
                validated = validate_produce_payload(encode_client_batch(produced), max_message_bytes=2**31 - 1,
                                                     now_ms=now_ms, compacted=True)
                outcome = await self._replicas.append_as_leader(
                    partition, validated.data, acks=-1, timeout_ms=self._config.offsets_commit_timeout_ms,
                    header=validated.header)
                outcome_error = outcome.error
        if outcome_error != ErrorCode.none:
            logger.warning("Group coordinator: writing to %s-%d failed (%s); dropping the partition's groups",
                           OFFSETS_TOPIC, shard.partition, outcome_error.name)
            self._drop(shard)
            self.on_metadata()
            return ErrorCode.not_coordinator if outcome_error != ErrorCode.request_timed_out else outcome_error
        return ErrorCode.none

    async def _await(self, shard: _Shard, token: int, outputs: list[Output]) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        shard.waiting[token] = future
        self._deliver(shard, outputs)
        self._wake.set()
        return await future

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_timers(self) -> None:
        loop = asyncio.get_running_loop()
        next_expiry = loop.time() + self._config.offsets_retention_check_interval_ms / 1000
        while True:
            now_ms = _now_ms()
            deadlines = []
            for shard in list(self._shards.values()):
                if not shard.loaded.is_set():
                    continue
                self._deliver(shard, shard.core.tick(now_ms=now_ms))
                deadline = shard.core.next_deadline_ms()
                if deadline is not None:
                    deadlines.append(deadline)
            if loop.time() >= next_expiry:
                next_expiry = loop.time() + self._config.offsets_retention_check_interval_ms / 1000
                for shard in list(self._shards.values()):
                    if shard.loaded.is_set():
                        records = shard.core.expire_offsets(now_ms=now_ms)
                        if records:
                            logger.info("Group coordinator: %d offsets or groups expired in %s-%d", len(records),
                                        OFFSETS_TOPIC, shard.partition)
                            self._deliver(shard, [Write(records=records)])
            wait_s = min([max(0.0, (d - _now_ms()) / 1000) for d in deadlines] + [next_expiry - loop.time(), 1.0])
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait_s, 0.005)):
                    await self._wake.wait()

    # -- authorization -------------------------------------------------------------------------------------
    def _require_group(self, ctx: RequestContext, operation: AclOperation, group_id: str) -> None:
        """Kafka's group checks: GROUP_AUTHORIZATION_FAILED, answered where NOT_COORDINATOR would be."""
        if not self._authorizer.authorize(ctx, operation, ResourceType.GROUP, group_id):
            raise _NotCoordinator(ErrorCode.group_authorization_failed)

    def _may_topic(self, ctx: RequestContext, operation: AclOperation, topic: str) -> bool:
        return self._authorizer.authorize(ctx, operation, ResourceType.TOPIC, topic)

    # -- FindCoordinator -----------------------------------------------------------------------------------
    async def find_coordinator(self, request: Any, ctx: RequestContext) -> Any:
        key_type = int(getattr(request, "key_type", _GROUP_KEY_TYPE))
        if ctx.api_version >= 4:
            module = ctx.response_schema
            coordinators = []
            for key in request.coordinator_keys:
                error, message, node_id, host, port = self._coordinator(ctx, str(key), key_type)
                coordinators.append(module.Coordinator(key=key, node_id=BrokerId(node_id), host=host, port=i32(port),
                                                       error_code=error, error_message=message))
            return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, coordinators=tuple(coordinators))
        error, message, node_id, host, port = self._coordinator(ctx, str(request.key), key_type)
        return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=error, error_message=message,
                           node_id=BrokerId(node_id), host=host, port=i32(port))

    def _coordinator(self, ctx: RequestContext, key: str, key_type: int) -> tuple[ErrorCode, str | None, int, str, int]:
        listener_name = ctx.listener_name
        if key_type != _GROUP_KEY_TYPE:
            return (ErrorCode.invalid_request, f"Key type {key_type} is not served: this broker coordinates "
                    "classic consumer groups only (no transactions, no share groups)", -1, "", -1)
        if not self._authorizer.authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return ErrorCode.group_authorization_failed, None, -1, "", -1
        image = self._image()
        topic = image.topics.get_topic_by_name(OFFSETS_TOPIC)
        if topic is None or not topic.partitions:
            self._create_offsets_topic()
            return ErrorCode.coordinator_not_available, None, -1, "", -1
        registration = topic.partitions.get(partition_for_group(key, partitions=len(topic.partitions)))
        broker = None if registration is None else image.cluster.brokers.get(registration.leader)
        endpoint = None if broker is None or broker.fenced else broker.listener(listener_name)
        if endpoint is None:
            return ErrorCode.coordinator_not_available, None, -1, "", -1
        return ErrorCode.none, None, broker.id if broker is not None else -1, endpoint.host, endpoint.port

    def _create_offsets_topic(self) -> None:
        if self._creating:
            return
        self._creating = True
        self._spawn(self._create())

    async def _create(self) -> None:
        config = self._config
        request = CreateTopicsRequest(
            topics=(CreatableTopic(
                name=TopicName(OFFSETS_TOPIC), num_partitions=i32(config.offsets_topic_num_partitions),
                replication_factor=i16(config.offsets_topic_replication_factor), assignments=(),
                configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in (
                    ("cleanup.policy", "compact"), ("compression.type", "producer"),
                    ("segment.bytes", str(config.offsets_topic_segment_bytes)))),
            ),),
            timeout=i32Timedelta.parse(timedelta(seconds=30)),
            validate_only=False,
        )
        try:
            response = await self._channel.send(request, timeout_ms=30_000)
            codes = [ErrorCode(t.error_code) for t in response.topics]
            if any(c not in (ErrorCode.none, ErrorCode.topic_already_exists) for c in codes):
                logger.warning("Creating %s was refused: %s", OFFSETS_TOPIC,
                               "; ".join(f"{ErrorCode(t.error_code).name} {t.error_message}" for t in response.topics))
        except ControllerUnavailable as error:
            logger.info("Creating %s failed: %s", OFFSETS_TOPIC, error)
        finally:
            self._creating = False

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------------------------
    async def join_group(self, request: Any, ctx: RequestContext) -> Any:
        version = ctx.api_version
        module = ctx.response_schema

        def answer(error: ErrorCode, result: JoinAnswer | None = None) -> Any:
            members = () if result is None else tuple(
                make_entity(module.JoinGroupResponseMember, member_id=m, group_instance_id=i, metadata=md)
                for m, i, md in result.members)
            return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=error,
                               generation_id=i32(-1 if result is None else result.generation),
                               protocol_type=None if result is None else result.protocol_type,
                               protocol_name=("" if version < 7 else None) if result is None or result.protocol_name is None
                               else result.protocol_name,
                               leader="" if result is None else result.leader,
                               skip_assignment=False if result is None else result.skip_assignment,
                               member_id=str(request.member_id) if result is None else result.member_id, members=members)

        session_ms = _ms(request.session_timeout)
        join = JoinRequest(
            group_id=str(request.group_id), member_id=str(request.member_id),
            group_instance_id=getattr(request, "group_instance_id", None), client_id=ctx.client_id or "",
            client_host=f"/{ctx.client_address or ctx.peer[0]}", session_timeout_ms=session_ms,
            rebalance_timeout_ms=_ms(request.rebalance_timeout) if hasattr(request, "rebalance_timeout") else session_ms,
            protocol_type=str(request.protocol_type),
            protocols=tuple((str(p.name), bytes(p.metadata)) for p in request.protocols),
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
        try:
            self._require_group(ctx, AclOperation.READ, join.group_id)
            shard = self._shard_for(join.group_id)
            token = next(self._tokens)
            result = await self._await(shard, token, shard.core.join(join, token=token, now_ms=_now_ms()))
        except _NotCoordinator as refusal:
            return answer(refusal.error)
        if result.error != ErrorCode.none:
            # MEMBER_ID_REQUIRED carries the member id to join with.
            return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=result.error, generation_id=i32(-1),
                               protocol_type=None, protocol_name="" if version < 7 else None, leader="", skip_assignment=False,
                               member_id=result.member_id, members=())
        return answer(ErrorCode.none, result)

    async def sync_group(self, request: Any, ctx: RequestContext) -> Any:
        def answer(error: ErrorCode, result: SyncAnswer | None = None) -> Any:
            return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=error,
                               protocol_type=None if result is None else result.protocol_type,
                               protocol_name=None if result is None else result.protocol_name,
                               assignment=b"" if result is None else result.assignment)

        group_id = str(request.group_id)
        try:
            self._require_group(ctx, AclOperation.READ, group_id)
            shard = self._shard_for(group_id)
            token = next(self._tokens)
            outputs = shard.core.sync(
                group_id=group_id, member_id=str(request.member_id),
                group_instance_id=getattr(request, "group_instance_id", None), generation=int(request.generation_id),
                protocol_type=getattr(request, "protocol_type", None), protocol_name=getattr(request, "protocol_name", None),
                assignments={str(a.member_id): bytes(a.assignment) for a in request.assignments},
                token=token, now_ms=_now_ms())
            result = await self._await(shard, token, outputs)
        except _NotCoordinator as refusal:
            return answer(refusal.error)
        return answer(result.error, result if result.error == ErrorCode.none else None)

    async def heartbeat(self, request: Any, ctx: RequestContext) -> Any:
        group_id = str(request.group_id)
        try:
            self._require_group(ctx, AclOperation.READ, group_id)
            shard = self._shard_for(group_id)
            error = shard.core.heartbeat(group_id=group_id, member_id=str(request.member_id),
                                         group_instance_id=getattr(request, "group_instance_id", None),
                                         generation=int(request.generation_id), now_ms=_now_ms())
        except _NotCoordinator as refusal:
            error = refusal.error
        return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=error)

    async def leave_group(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        group_id = str(request.group_id)
        if ctx.api_version >= 3:
            wanted = [(str(m.member_id), m.group_instance_id) for m in request.members]
        else:
            wanted = [(str(request.member_id), None)]
        try:
            self._require_group(ctx, AclOperation.READ, group_id)
            shard = self._shard_for(group_id)
            error, errors, outputs = shard.core.leave(group_id=group_id, members=wanted, now_ms=_now_ms())
            self._deliver(shard, outputs)
        except _NotCoordinator as refusal:
            error, errors = refusal.error, [refusal.error] * len(wanted)
        if ctx.api_version < 3:
            return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE,
                               error_code=errors[0] if error == ErrorCode.none else error)
        return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=error, members=tuple(
            module.MemberResponse(member_id=m, group_instance_id=i, error_code=e)
            for (m, i), e in zip(wanted, errors, strict=True)))

    # -- offsets -------------------------------------------------------------------------------------------
    async def offset_commit(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        group_id = str(request.group_id)
        now_ms = _now_ms()
        retention_ms = _ms(getattr(request, "retention_time", -1))
        wanted = [(str(t.name), int(p.partition_index), p) for t in request.topics for p in t.partitions]
        errors: dict[tuple[str, int], ErrorCode] = {}
        try:
            self._require_group(ctx, AclOperation.READ, group_id)
            # Kafka: READ on each topic committed to (TOPIC_AUTHORIZATION_FAILED, not committed).
            readable = {t for t in {t for t, _, _ in wanted} if self._may_topic(ctx, AclOperation.READ, t)}
            for topic, index, _ in wanted:
                if topic not in readable:
                    errors[(topic, index)] = ErrorCode.topic_authorization_failed
            wanted_readable = [w for w in wanted if w[0] in readable]
            shard = self._shard_for(group_id)
            core = shard.core
            error = core.validate_commit(group_id=group_id, member_id=str(request.member_id),
                                         group_instance_id=getattr(request, "group_instance_id", None),
                                         generation=int(getattr(request, "generation_id_or_member_epoch",
                                                                getattr(request, "generation_id", -1))),
                                         now_ms=now_ms)
            offsets: dict[tuple[str, int], CommittedOffset] = {}
            for topic, index, p in wanted_readable:
                metadata = p.committed_metadata or ""
                if error != ErrorCode.none:
                    errors[(topic, index)] = error
                elif len(metadata.encode()) > self._config.offset_metadata_max_bytes:
                    errors[(topic, index)] = ErrorCode.offset_metadata_too_large
                else:
                    offsets[(topic, index)] = CommittedOffset(
                        offset=int(p.committed_offset), leader_epoch=int(getattr(p, "committed_leader_epoch", -1)),
                        metadata=metadata, commit_timestamp_ms=now_ms,
                        expire_timestamp_ms=now_ms + retention_ms if retention_ms >= 0 else -1)
            if offsets:
                written = await self._write(shard, core.commit(group_id=group_id, offsets=offsets, now_ms=now_ms))
                for tp in offsets:
                    errors[tp] = written
        except _NotCoordinator as refusal:
            errors = {(t, i): refusal.error for t, i, _ in wanted}
        by_topic: dict[str, list[Any]] = {}
        for topic, index, _ in wanted:
            by_topic.setdefault(topic, []).append(module.OffsetCommitResponsePartition(
                partition_index=i32(index), error_code=errors[(topic, index)]))
        return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, topics=tuple(
            module.OffsetCommitResponseTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items()))

    async def offset_fetch(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        if ctx.api_version >= 8:
            groups = []
            for group in request.groups:
                error, topics = self._fetch_group(ctx, module, str(group.group_id), group.topics, batched=True)
                groups.append(module.OffsetFetchResponseGroup(group_id=group.group_id, topics=topics, error_code=error))
            return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, groups=tuple(groups))
        error, topics = self._fetch_group(ctx, module, str(request.group_id), request.topics, batched=False)
        return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, topics=topics, error_code=error)

    def _fetch_group(self, ctx: RequestContext, module: Any, group_id: str, wanted_topics: Any, *,
                     batched: bool) -> tuple[ErrorCode, Any]:
        """Kafka: DESCRIBE on the group; of the topics, those without DESCRIBE are answered
        TOPIC_AUTHORIZATION_FAILED when named and left out when all are asked for."""
        topic_cls = module.OffsetFetchResponseTopics if batched else module.OffsetFetchResponseTopic
        partition_cls = module.OffsetFetchResponsePartitions if batched else module.OffsetFetchResponsePartition
        try:
            self._require_group(ctx, AclOperation.DESCRIBE, group_id)
            shard = self._shard_for(group_id)
        except _NotCoordinator as refusal:
            return refusal.error, ()
        if wanted_topics is None:
            found = shard.core.committed(group_id)
            wanted = sorted(tp for tp in found if self._may_topic(ctx, AclOperation.DESCRIBE, tp[0]))
        else:
            wanted = [(str(t.name), int(i)) for t in wanted_topics for i in t.partition_indexes]
            found = shard.core.committed(group_id, wanted)
        describable = {t for t in {t for t, _ in wanted} if self._may_topic(ctx, AclOperation.DESCRIBE, t)}
        by_topic: dict[str, list[Any]] = {}
        for topic, index in wanted:
            committed = found.get((topic, index)) if topic in describable else None
            by_topic.setdefault(topic, []).append(make_entity(
                partition_cls, partition_index=i32(index), committed_offset=i64(-1 if committed is None else committed.offset),
                committed_leader_epoch=i32(-1 if committed is None else committed.leader_epoch),
                metadata="" if committed is None else committed.metadata,
                error_code=ErrorCode.none if topic in describable else ErrorCode.topic_authorization_failed))
        return ErrorCode.none, tuple(topic_cls(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items())

    # -- ListGroups / DescribeGroups / DeleteGroups / OffsetDelete ----------------------------------------
    async def list_groups(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        states = {s.lower() for s in getattr(request, "states_filter", ())}
        types = {t.lower() for t in getattr(request, "types_filter", ())}
        listed = []
        error = ErrorCode.none
        # Kafka: DESCRIBE on the cluster lists every group, else the groups with DESCRIBE.
        everything = self._authorizer.authorize_cluster(ctx, AclOperation.DESCRIBE)
        for shard in sorted(self._shards.values(), key=lambda s: s.partition):
            if not shard.loaded.is_set():
                error = ErrorCode.coordinator_load_in_progress
                continue
            for group in shard.core.list_groups():
                if (states and group.state.value.lower() not in states) or (types and "classic" not in types):
                    continue
                if not everything and not self._authorizer.authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP,
                                                                     group.group_id):
                    continue
                listed.append(make_entity(module.ListedGroup, group_id=GroupId(group.group_id), protocol_type=group.protocol_type,
                                          group_state=group.state.value, group_type="classic"))
        return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=error, groups=tuple(listed))

    async def describe_groups(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        described = []
        for group_id in request.groups:
            fields: dict[str, Any] = {"group_id": group_id, "error_message": None, "authorized_operations": i32(-2147483648)}
            try:
                self._require_group(ctx, AclOperation.DESCRIBE, str(group_id))
                description = self._shard_for(str(group_id)).core.describe(str(group_id))
            except _NotCoordinator as refusal:
                described.append(make_entity(module.DescribedGroup, error_code=refusal.error, group_state="", protocol_type="",
                                             protocol_data="", members=(), **fields))
                continue
            if description is None:
                missing = ErrorCode.group_id_not_found if ctx.api_version >= 6 else ErrorCode.none
                described.append(make_entity(module.DescribedGroup, error_code=missing, group_state="Dead", protocol_type="",
                                             protocol_data="", members=(), **{**fields, "error_message": (
                                           f"Group {group_id} not found." if ctx.api_version >= 6 else None)}))
                continue
            described.append(make_entity(
                module.DescribedGroup, error_code=ErrorCode.none, group_state=description.state.value,
                protocol_type=description.protocol_type, protocol_data=description.protocol_name,
                members=tuple(make_entity(module.DescribedGroupMember, member_id=m.member_id,
                                    group_instance_id=m.group_instance_id, client_id=m.client_id,
                                    client_host=m.client_host, member_metadata=m.metadata,
                                    member_assignment=m.assignment) for m in description.members),
                **fields))
        if getattr(request, "include_authorized_operations", False):
            # Kafka (v3+): the group's authorized operations on every answer without an error.
            described = [d if d.error_code != ErrorCode.none else dataclasses.replace(
                d, authorized_operations=i32(self._authorizer.authorized_operations(ctx, ResourceType.GROUP,
                                                                                    str(d.group_id))))
                         for d in described]
        return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, groups=tuple(described))

    async def delete_groups(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        results = []
        for group_id in request.groups_names:
            try:
                self._require_group(ctx, AclOperation.DELETE, str(group_id))
                shard = self._shard_for(str(group_id))
                error, records = shard.core.delete_group(str(group_id), now_ms=_now_ms())
                if error == ErrorCode.none:
                    error = await self._write(shard, records)
            except _NotCoordinator as refusal:
                error = refusal.error
            results.append(module.DeletableGroupResult(group_id=group_id, error_code=error))
        return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, results=tuple(results))

    async def offset_delete(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        group_id = str(request.group_id)
        wanted = [(str(t.name), int(p.partition_index)) for t in request.topics for p in t.partitions]
        errors: dict[tuple[str, int], ErrorCode] = {}
        try:
            self._require_group(ctx, AclOperation.DELETE, group_id)
            readable = {t for t in {t for t, _ in wanted} if self._may_topic(ctx, AclOperation.READ, t)}
            shard = self._shard_for(group_id)
            error, errors, records = shard.core.delete_offsets(
                group_id, [w for w in wanted if w[0] in readable], now_ms=_now_ms())
            errors = {**errors, **{w: ErrorCode.topic_authorization_failed for w in wanted if w[0] not in readable}}
            if error == ErrorCode.none and records:
                written = await self._write(shard, records)
                if written != ErrorCode.none:
                    error = written
        except _NotCoordinator as refusal:
            error = refusal.error
        by_topic: dict[str, list[Any]] = {}
        for topic, index in wanted:
            by_topic.setdefault(topic, []).append(module.OffsetDeleteResponsePartition(
                partition_index=i32(index), error_code=errors.get((topic, index), ErrorCode.none)))
        topics = () if error != ErrorCode.none else tuple(
            module.OffsetDeleteResponseTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items())
        return make_entity(ctx.response_class, error_code=error, throttle_time=_NO_THROTTLE, topics=topics)
