"""Consumer groups over Kafka's protocol: what `kraft consumer-groups` and `kraft console-consumer
--group` need, against our brokers or Apache Kafka's.

Group requests go to the group's coordinator, found with FindCoordinator (key type 0) on any
bootstrap broker; COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR or an
unreachable coordinator finds it again and retries until the timeout, as Kafka's Admin does.
ListGroups asks every broker (each lists the groups it coordinates). Offsets are read with
OffsetFetch and written with OffsetCommit as a simple member (generation -1, no member id),
which a coordinator accepts only while the group has no members.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v6.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from kraft_engine.admin.record_clients import RecordClient, RecordClientError
from kraft_engine.records.consumer_protocol import read_assignment

__all__ = ["GroupAdmin", "GroupMember", "GroupSummary", "offset_commit_request"]

_RETRY_INTERVAL_S = 0.1
_COORDINATOR_MOVED = frozenset({
    ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
})


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[tuple[str, int], ...]  # decoded ConsumerProtocolAssignment (consumer groups)


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMember, ...]
    coordinator: tuple[int, str, int]  # (node id, host, port)
    # GROUP_ID_NOT_FOUND's message, for a group the coordinator does not know (DescribeGroups v6,
    # KIP-1043; Kafka's Admin then fails the group with GroupIdNotFoundException).
    not_found: str | None = None


class GroupAdmin(RecordClient):
    """Requests to a group's coordinator, with Kafka's retries (see the module docstring)."""

    async def coordinator(self, group: str) -> tuple[int, str, int]:
        deadline = self._deadline()
        while True:
            response = await self.send_to_any(FindCoordinatorRequest(key=group, key_type=i8(0)))
            code = ErrorCode(response.error_code)
            if code == ErrorCode.none:
                return int(response.node_id), str(response.host), int(response.port)
            if code not in _COORDINATOR_MOVED or asyncio.get_running_loop().time() >= deadline:
                raise RecordClientError(code, response.error_message or f"FindCoordinator for group {group}")
            await asyncio.sleep(_RETRY_INTERVAL_S)

    async def _to_coordinator(self, group: str, request: Any, error_of: Any) -> tuple[Any, tuple[int, str, int]]:
        deadline = self._deadline()
        last = "no coordinator"
        while True:
            node = await self.coordinator(group)
            response = await self._send((node[1], node[2]), request)
            if response is not None:
                code = ErrorCode(error_of(response))
                if code not in _COORDINATOR_MOVED:
                    return response, node
                last = code.name.upper()
            else:
                last = f"coordinator {node[0]} unreachable"
            if asyncio.get_running_loop().time() >= deadline:
                raise RecordClientError("TIMEOUT", f"group {group}: {last} for {self.timeout_ms} ms")
            await asyncio.sleep(_RETRY_INTERVAL_S)

    async def list_groups(self, *, states: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group any broker coordinates."""
        metadata = await self.send_to_any(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                          include_topic_authorized_operations=False))
        found: dict[str, tuple[str, str, str]] = {}
        for broker in metadata.brokers:
            response = await self._send((broker.host, int(broker.port)), ListGroupsRequest(states_filter=states))
            if response is None:
                raise RecordClientError("TIMEOUT", f"broker {int(broker.node_id)} did not answer ListGroups")
            code = ErrorCode(response.error_code)
            if code != ErrorCode.none:
                raise RecordClientError(code, f"ListGroups on broker {int(broker.node_id)}")
            for g in response.groups:
                found[str(g.group_id)] = (str(g.group_id), str(g.protocol_type), str(g.group_state))
        return [found[g] for g in sorted(found)]

    async def describe(self, group: str) -> GroupSummary:
        response, node = await self._to_coordinator(
            group, DescribeGroupsRequest(groups=(GroupId(group),), include_authorized_operations=False),
            lambda r: r.groups[0].error_code)
        described = response.groups[0]
        code = ErrorCode(described.error_code)
        if code not in (ErrorCode.none, ErrorCode.group_id_not_found):
            raise RecordClientError(code, f"DescribeGroups for group {group}")
        consumer = str(described.protocol_type) == "consumer"
        members = tuple(
            GroupMember(member_id=str(m.member_id), group_instance_id=m.group_instance_id, client_id=str(m.client_id),
                        client_host=str(m.client_host),
                        assignment=_assigned_partitions(bytes(m.member_assignment)) if consumer else ())
            for m in described.members)
        not_found = None
        if code == ErrorCode.group_id_not_found:
            not_found = str(described.error_message or "The group id does not exist.")
        return GroupSummary(group_id=group, state=str(described.group_state) if code == ErrorCode.none else "Dead",
                            protocol_type=str(described.protocol_type), protocol=str(described.protocol_data),
                            members=members, coordinator=node, not_found=not_found)

    async def committed(self, group: str) -> dict[tuple[str, int], int]:
        """Every committed offset of the group (OffsetFetch for all topics)."""
        response, _ = await self._to_coordinator(
            group, OffsetFetchRequest(group_id=GroupId(group), topics=None, require_stable=False),
            lambda r: r.error_code)
        code = ErrorCode(response.error_code)
        if code != ErrorCode.none:
            raise RecordClientError(code, f"OffsetFetch for group {group}")
        return {(str(t.name), int(p.partition_index)): int(p.committed_offset)
                for t in response.topics for p in t.partitions if int(p.committed_offset) >= 0}

    async def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit as a simple member: accepted only while the group has no members."""
        request = offset_commit_request(group, offsets)

        def first_error(response: Any) -> ErrorCode:
            codes = [ErrorCode(p.error_code) for t in response.topics for p in t.partitions]
            return next((c for c in codes if c != ErrorCode.none), ErrorCode.none)

        response, _ = await self._to_coordinator(group, request, first_error)
        code = first_error(response)
        if code != ErrorCode.none:
            raise RecordClientError(code, f"OffsetCommit for group {group}")

    async def delete_offsets(self, group: str, partitions: list[tuple[str, int]]
                             ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete of the group's committed offsets of `partitions`: the answer's top-level
        error and each partition's (a top-level error is every partition's, as Kafka's Admin has it)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(set(partitions)):
            by_topic.setdefault(topic, []).append(partition)
        request = OffsetDeleteRequest(group_id=GroupId(group), topics=tuple(
            OffsetDeleteRequestTopic(name=TopicName(topic), partitions=tuple(
                OffsetDeleteRequestPartition(partition_index=i32(p)) for p in indexes))
            for topic, indexes in by_topic.items()))
        response, _ = await self._to_coordinator(group, request, lambda r: r.error_code)
        top = ErrorCode(response.error_code)
        answered = {(str(t.name), int(p.partition_index)): ErrorCode(p.error_code)
                    for t in response.topics for p in t.partitions}
        return top, {tp: top if top != ErrorCode.none else answered.get(tp, ErrorCode.unknown_server_error)
                     for tp in set(partitions)}

    async def delete(self, group: str) -> ErrorCode:
        response, _ = await self._to_coordinator(group, DeleteGroupsRequest(groups_names=(GroupId(group),)),
                                                 lambda r: r.results[0].error_code)
        return ErrorCode(response.results[0].error_code)


def offset_commit_request(group: str, offsets: Mapping[tuple[str, int], int], *, generation: int = -1,
                          member_id: str = "") -> OffsetCommitRequest:
    """OffsetCommit of `offsets` (by topic, in partition order) as `member_id` of `generation`; the
    defaults commit as a simple member."""
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(OffsetCommitRequestPartition(
            partition_index=i32(partition), committed_offset=i64(offset), committed_leader_epoch=i32(-1),
            committed_metadata=""))
    return OffsetCommitRequest(group_id=GroupId(group), generation_id_or_member_epoch=i32(generation),
                               member_id=member_id, group_instance_id=None, topics=tuple(
                                   OffsetCommitRequestTopic(name=TopicName(t), partitions=tuple(ps))
                                   for t, ps in by_topic.items()))


def _assigned_partitions(assignment: bytes) -> tuple[tuple[str, int], ...]:
    """The partitions of a ConsumerProtocolAssignment (none when it is unreadable)."""
    entity = read_assignment(assignment)
    if entity is None:
        return ()
    return tuple(sorted((str(t.topic), int(p)) for t in entity.assigned_partitions for p in t.partitions))
