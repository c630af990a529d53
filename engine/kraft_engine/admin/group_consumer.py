"""A consumer-group member over Kafka's classic protocol: what `kraft console-consumer --group` runs.

It joins like Kafka's consumer (JoinGroup with protocol type "consumer" and the range assignor,
MEMBER_ID_REQUIRED answered by joining again with the member id given), assigns as the leader
(Kafka's RangeAssignor: each topic's partitions split in contiguous ranges over the members that
subscribe to it, in member id order, the first ones taking one more), gets its partitions from
SyncGroup, starts each from the committed offset (or `auto.offset.reset`), heartbeats every
`heartbeat.interval.ms` from a task of its own, commits its positions as its generation's member
(every auto-commit interval, before rejoining and when it leaves), and rejoins when a Heartbeat
says REBALANCE_IN_PROGRESS. It leaves with LeaveGroup.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from datetime import timedelta
from typing import Any

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v0.data import TopicPartition as AssignedTopic
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.schema.types import GroupId, TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32, i32Timedelta

from kraft_engine.admin.group_admin import GroupAdmin, offset_commit_request
from kraft_engine.admin.record_clients import RecordClientError

__all__ = ["GroupConsumer", "range_assign"]

_PROTOCOL = "range"
_REJOIN = frozenset({ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation, ErrorCode.unknown_member_id})


def _encode(entity: Any) -> bytes:
    with io.BytesIO() as buffer:
        buffer.write((0).to_bytes(2, "big"))  # ConsumerProtocol version 0
        entity_writer(type(entity))(buffer, entity)
        return buffer.getvalue()


def range_assign(subscriptions: dict[str, list[str]], partitions: dict[str, int]) -> dict[str, list[tuple[str, int]]]:
    """Kafka's RangeAssignor: per topic, contiguous ranges over its subscribers in member id order."""
    assigned: dict[str, list[tuple[str, int]]] = {m: [] for m in subscriptions}
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        count = partitions.get(topic, 0)
        per, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = per + (1 if i < extra else 0)
            assigned[member] += [(topic, p) for p in range(start, start + size)]
            start += size
    return assigned


class GroupConsumer:
    """One member of `group` subscribed to `topics`, through `admin` (see the module docstring)."""

    def __init__(self, admin: GroupAdmin, *, group: str, topics: list[str], client_id: str, from_beginning: bool,
                 session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 3000) -> None:
        self._admin = admin
        self._group = group
        self._topics = topics
        self._client_id = client_id
        self._reset = -2 if from_beginning else -1
        self._session_timeout_ms = session_timeout_ms
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self.member_id = ""
        self.generation = -1
        self.positions: dict[tuple[str, int], int] = {}
        self._committed: dict[tuple[str, int], int] = {}
        self._rejoin = asyncio.Event()
        self._heartbeats: asyncio.Task[None] | None = None

    @property
    def needs_rejoin(self) -> bool:
        return self._rejoin.is_set()

    async def _coordinator_call(self, request: Any) -> Any:
        node = await self._admin.coordinator(self._group)
        response = await self._admin._send((node[1], node[2]), request)
        if response is None:
            raise RecordClientError("COORDINATOR_NOT_AVAILABLE", f"coordinator {node[0]} unreachable")
        return response

    async def join(self) -> list[tuple[str, int]]:
        """Join (or rejoin) and return this member's partitions, with their start positions set."""
        await self.commit()
        if self._heartbeats is not None:
            self._heartbeats.cancel()
        metadata = _encode(ConsumerProtocolSubscription(topics=tuple(self._topics), user_data=None))
        while True:
            response = await self._coordinator_call(JoinGroupRequest(
                group_id=GroupId(self._group), session_timeout=i32Timedelta.parse(timedelta(
                    milliseconds=self._session_timeout_ms)),
                rebalance_timeout=i32Timedelta.parse(timedelta(minutes=5)), member_id=self.member_id,
                group_instance_id=None, protocol_type="consumer",
                protocols=(JoinGroupRequestProtocol(name=_PROTOCOL, metadata=metadata),), reason=None))
            code = ErrorCode(response.error_code)
            if code == ErrorCode.member_id_required:
                self.member_id = str(response.member_id)
                continue
            if code == ErrorCode.unknown_member_id:
                self.member_id = ""
                continue
            if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                        ErrorCode.coordinator_load_in_progress, ErrorCode.rebalance_in_progress):
                await asyncio.sleep(0.2)
                continue
            if code != ErrorCode.none:
                raise RecordClientError(code, f"JoinGroup for group {self._group}")
            self.member_id, self.generation = str(response.member_id), int(response.generation_id)
            assignments: tuple[SyncGroupRequestAssignment, ...] = ()
            if str(response.leader) == self.member_id:
                subscriptions = {}
                for m in response.members:
                    entity: Any
                    entity, _ = entity_reader(ConsumerProtocolSubscription)(bytes(m.metadata), 2)
                    subscriptions[str(m.member_id)] = [str(t) for t in entity.topics]
                counts = {t: await self._admin.refresh(t) for t in {t for ts in subscriptions.values() for t in ts}}
                plan = range_assign(subscriptions, counts)
                assignments = tuple(SyncGroupRequestAssignment(member_id=m, assignment=_encode(ConsumerProtocolAssignment(
                    assigned_partitions=tuple(AssignedTopic(topic=TopicName(t), partitions=tuple(
                        i32(p) for tt, p in parts if tt == t)) for t in sorted({tt for tt, _ in parts})),
                    user_data=None))) for m, parts in plan.items())
            sync = await self._coordinator_call(SyncGroupRequest(
                group_id=GroupId(self._group), generation_id=i32(self.generation), member_id=self.member_id,
                group_instance_id=None, protocol_type="consumer", protocol_name=_PROTOCOL, assignments=assignments))
            code = ErrorCode(sync.error_code)
            if code in _REJOIN:
                continue
            if code != ErrorCode.none:
                raise RecordClientError(code, f"SyncGroup for group {self._group}")
            assigned = []
            if sync.assignment:
                assignment: Any
                assignment, _ = entity_reader(ConsumerProtocolAssignment)(bytes(sync.assignment), 2)
                assigned = sorted((str(t.topic), int(p)) for t in assignment.assigned_partitions for p in t.partitions)
            break
        self._rejoin.clear()
        self._heartbeats = asyncio.get_running_loop().create_task(self._heartbeat_loop())
        await self._start_positions(assigned)
        return assigned

    async def _start_positions(self, assigned: list[tuple[str, int]]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, p in assigned:
            by_topic.setdefault(topic, []).append(p)
        committed: dict[tuple[str, int], int] = {}
        if by_topic:
            response = await self._coordinator_call(OffsetFetchRequest(group_id=GroupId(self._group), topics=tuple(
                OffsetFetchRequestTopic(name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps))
                for t, ps in by_topic.items()), require_stable=False))
            committed = {(str(t.name), int(p.partition_index)): int(p.committed_offset)
                         for t in response.topics for p in t.partitions if int(p.committed_offset) >= 0}
        self.positions = {}
        for tp in assigned:
            offset = committed.get(tp)
            if offset is None:
                offset = await self._admin.list_offset(tp[0], tp[1], timestamp=self._reset)
            self.positions[tp] = offset
        self._committed = dict(committed)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval_ms / 1000)
            try:
                response = await self._coordinator_call(HeartbeatRequest(
                    group_id=GroupId(self._group), generation_id=i32(self.generation), member_id=self.member_id,
                    group_instance_id=None))
            except RecordClientError:
                continue
            if ErrorCode(response.error_code) in _REJOIN:
                self._rejoin.set()
                return

    async def commit(self) -> None:
        """Commit the positions that moved since the last commit, as this generation's member."""
        pending = {tp: o for tp, o in self.positions.items() if self._committed.get(tp) != o}
        if not pending or self.generation < 0:
            return
        response = await self._coordinator_call(offset_commit_request(
            self._group, pending, generation=self.generation, member_id=self.member_id))
        codes = {ErrorCode(p.error_code) for t in response.topics for p in t.partitions}
        if codes == {ErrorCode.none}:
            self._committed.update(pending)
        elif codes & _REJOIN:
            self._rejoin.set()

    async def leave(self) -> None:
        with contextlib.suppress(RecordClientError):
            await self.commit()
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
        if self.member_id:
            with contextlib.suppress(RecordClientError):
                await self._coordinator_call(LeaveGroupRequest(group_id=GroupId(self._group), members=(
                    MemberIdentity(member_id=self.member_id, group_instance_id=None, reason="the consumer is closing"),)))
