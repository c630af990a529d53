"""The raft apis on a real listener at the version ranges Kafka's nodes and tools send.

One in-process controller (single voter, see test_controller_service) serves its raft apis through
`register_raft_apis`; a client speaks the oldest versions on the wire and the core (which speaks
one version of each) answers them.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64
from test_controller_service import CLUSTER_ID, NODE_ID, InProcessController

from kraft_engine.metadata.authorizer import STANDARD_AUTHORIZER, AclOperation, ResourceType
from kraft_engine.metadata.security_images import AclsImage
from kraft_engine.protocol import ConnectionConfig, KafkaConnection, RequestContext
from kraft_engine.protocol import Listener as KafkaListener
from kraft_engine.raft import messages
from kraft_engine.raft.voter_set import ReplicaKey
from kraft_engine.records.log_batch import parse_batches
from kraft_engine.records.metadata_records import AccessControlEntryRecord
from kraft_engine.server.authorization import NodeAuthorizer
from kraft_engine.server.raft_apis import RAFT_API_OPERATIONS, RAFT_API_VERSIONS, register_raft_apis

_METADATA = TopicName("__cluster_metadata")


class _Served:
    def __init__(self, node: InProcessController, listener: KafkaListener) -> None:
        self.node = node
        self.listener = listener

    async def connection(self) -> KafkaConnection:
        connection = KafkaConnection("127.0.0.1", self.listener.port,
                                     config=ConnectionConfig(client_id="test", request_timeout_ms=10000))
        await connection.connect()
        return connection


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[_Served]:
    node = InProcessController(tmp_path)
    await node.start()
    listener = KafkaListener("CONTROLLER", features_provider=node.service.features, registry=node.registry)

    async def forward(request: Any, ctx: RequestContext) -> Any:
        return await node.raft.handle_request(request)

    register_raft_apis(listener, served_requests=node.raft.raft.served_requests, handler=forward,
                       authorizer=NodeAuthorizer({}, image=lambda: node.service.image))
    await listener.start("127.0.0.1", 0)
    try:
        yield _Served(node, listener)
    finally:
        await listener.close()
        await node.close()


class _Guarded(_Served):
    """Served behind StandardAuthorizer; `acls` are the image's ACLs (granted by a test)."""

    acls: dict[uuid.UUID, AccessControlEntryRecord]


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[_Guarded]:
    node = InProcessController(tmp_path)
    await node.start()
    listener = KafkaListener("CONTROLLER", features_provider=node.service.features, registry=node.registry)
    acls: dict[uuid.UUID, AccessControlEntryRecord] = {}

    async def forward(request: Any, ctx: RequestContext) -> Any:
        return await node.raft.handle_request(request)

    image = lambda: dataclasses.replace(node.service.image, acls=AclsImage(dict(acls)))  # noqa: E731
    register_raft_apis(listener, served_requests=node.raft.raft.served_requests, handler=forward,
                       authorizer=NodeAuthorizer({"authorizer.class.name": STANDARD_AUTHORIZER}, image=image))
    await listener.start("127.0.0.1", 0)
    served = _Guarded(node, listener)
    served.acls = acls
    try:
        yield served
    finally:
        await listener.close()
        await node.close()


async def test_api_versions_advertises_kafkas_ranges_for_the_raft_apis(served: _Served) -> None:
    connection = await served.connection()
    try:
        versions = connection.peer_api_versions
        for api_key, version in messages.SERVED_REQUESTS.items():
            assert versions[api_key] == RAFT_API_VERSIONS[api_key]
            assert RAFT_API_VERSIONS[api_key][0] <= version == RAFT_API_VERSIONS[api_key][1]
    finally:
        await connection.close()


async def test_a_fetch_v13_counts_the_replica_it_names_and_describe_quorum_v0_shows_it(served: _Served) -> None:
    from kio.schema.describe_quorum.v0 import request as dq0
    from kio.schema.fetch.v13 import request as f13

    raft = served.node.raft.raft
    end = raft.log_end_offset
    connection = await served.connection()
    try:
        fetched = await connection.send(f13.FetchRequest(
            cluster_id=CLUSTER_ID, replica_id=BrokerId(7), max_wait=i32Timedelta.parse(timedelta(0)),
            min_bytes=i32(0), max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0),
            session_epoch=i32(-1), forgotten_topics_data=(), rack_id="",
            topics=(f13.FetchTopic(topic_id=messages.METADATA_TOPIC_ID, partitions=(f13.FetchPartition(
                partition=i32(0), current_leader_epoch=i32(raft.epoch), fetch_offset=i64(end),
                last_fetched_epoch=i32(raft.log.end_offset().epoch), log_start_offset=i64(-1),
                partition_max_bytes=i32(1 << 20)),)),),
        ))
        (partition,) = fetched.responses[0].partitions
        assert (fetched.error_code, partition.error_code) == (ErrorCode.none, ErrorCode.none)
        assert int(partition.high_watermark) == raft.high_watermark
        described = await connection.send(dq0.DescribeQuorumRequest(topics=(dq0.TopicData(
            topic_name=_METADATA, partitions=(dq0.PartitionData(partition_index=i32(0)),)),)))
        (state,) = described.topics[0].partitions
        assert int(state.leader_id) == NODE_ID
        # Fetch v13 names the replica in replica_id (v15+ in replica_state): the leader counted
        # replica 7 as an observer at the offset it fetched from.
        assert [(int(o.replica_id), int(o.log_end_offset)) for o in state.observers] == [(7, end)]
    finally:
        await connection.close()


async def test_vote_begin_and_end_quorum_epoch_v0_reach_the_core(served: _Served) -> None:
    from kio.schema.begin_quorum_epoch.v0 import request as bqe0
    from kio.schema.end_quorum_epoch.v0 import request as eqe0
    from kio.schema.vote.v0 import request as vote0

    current = i32(served.node.raft.raft.epoch)
    stale = i32(current - 1)
    connection = await served.connection()
    try:
        vote = await connection.send(vote0.VoteRequest(cluster_id=CLUSTER_ID, topics=(vote0.TopicData(
            topic_name=_METADATA, partitions=(vote0.PartitionData(
                partition_index=i32(0), replica_epoch=current, replica_id=BrokerId(9),
                last_offset_epoch=i32(0), last_offset=i64(0)),)),)))
        (answer,) = vote.topics[0].partitions
        # A real vote (v0 has no pre-vote) in the epoch this node leads: refused, not an error.
        assert (answer.error_code, answer.vote_granted) == (ErrorCode.none, False)
        assert int(answer.leader_id) == NODE_ID
        begin = await connection.send(bqe0.BeginQuorumEpochRequest(cluster_id=CLUSTER_ID, topics=(bqe0.TopicData(
            topic_name=_METADATA, partitions=(bqe0.PartitionData(
                partition_index=i32(0), leader_id=BrokerId(9), leader_epoch=stale),)),)))
        assert begin.topics[0].partitions[0].error_code == ErrorCode.fenced_leader_epoch
        end = await connection.send(eqe0.EndQuorumEpochRequest(cluster_id=CLUSTER_ID, topics=(eqe0.TopicData(
            topic_name=_METADATA, partitions=(eqe0.PartitionData(
                partition_index=i32(0), leader_id=BrokerId(9), leader_epoch=stale,
                preferred_successors=(i32(NODE_ID),)),)),)))
        assert end.topics[0].partitions[0].error_code == ErrorCode.fenced_leader_epoch
        assert served.node.raft.raft.epoch == current  # nothing moved the quorum
    finally:
        await connection.close()


async def test_fetch_v12_by_topic_name_reads_the_metadata_log_and_names_the_topic_back(served: _Served) -> None:
    from kio.schema.fetch.v12 import request as f12

    raft = served.node.raft.raft
    end = raft.log.end_offset()
    connection = await served.connection()
    try:
        fetched = await connection.send(f12.FetchRequest(
            cluster_id=CLUSTER_ID, replica_id=BrokerId(7), max_wait=i32Timedelta.parse(timedelta(0)),
            min_bytes=i32(0), max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0),
            session_epoch=i32(-1), forgotten_topics_data=(), rack_id="",
            topics=(f12.FetchTopic(topic=_METADATA, partitions=(f12.FetchPartition(
                partition=i32(0), current_leader_epoch=i32(raft.epoch), fetch_offset=i64(0),
                last_fetched_epoch=i32(0), log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),)),),
        ))
        (topic,) = fetched.responses
        (partition,) = topic.partitions
        assert (fetched.error_code, topic.topic, partition.error_code) == (ErrorCode.none, _METADATA, ErrorCode.none)
        assert int(partition.high_watermark) == raft.high_watermark
        batches = parse_batches(bytes(partition.records or b""))
        assert batches and batches[0].base_offset == 0 and batches[-1].next_offset <= end.offset
    finally:
        await connection.close()


async def test_fetch_v4_without_fetch_epochs_is_refused_as_kafkas_raft_client_refuses_it(served: _Served) -> None:
    # v4-v11 carry no last_fetched_epoch: Kafka's raft client answers INVALID_REQUEST, so do we,
    # and a topic other than __cluster_metadata is refused at the top level.
    from kio.schema.fetch.v4 import request as f4

    def fetch(topic: str) -> Any:
        return f4.FetchRequest(
            replica_id=BrokerId(7), max_wait=i32Timedelta.parse(timedelta(0)), min_bytes=i32(0),
            max_bytes=i32(1 << 20), isolation_level=i8(0),
            topics=(f4.FetchTopic(topic=TopicName(topic), partitions=(f4.FetchPartition(
                partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)),)),),
        )

    connection = await served.connection()
    try:
        answer = await connection.send(fetch("__cluster_metadata"))
        (topic,) = answer.responses
        assert (topic.topic, topic.partitions[0].error_code) == (_METADATA, ErrorCode.invalid_request)
        other = await connection.send(fetch("orders"))
        assert other.responses == ()  # the top-level INVALID_REQUEST has no field in v4: nothing answered
    finally:
        await connection.close()


def _raft_requests(cluster_id: str) -> dict[str, Any]:
    """One request of each raft api, as a stranger would send it; with `cluster_id` not the
    cluster's, an allowed one is refused by the core (INCONSISTENT_CLUSTER_ID), moving nothing."""
    from kio.schema.describe_quorum.v0 import request as dq0
    from kio.schema.vote.v0 import request as vote0

    from kraft_engine.raft.voter_set import Endpoint
    from kraft_engine.records.log_batch import OffsetAndEpoch

    stranger = ReplicaKey(9, uuid.UUID(int=9))
    endpoints = (Endpoint("CONTROLLER", "127.0.0.1", 1),)
    return {
        "Vote": messages.vote_request(cluster_id=cluster_id, voter=ReplicaKey(NODE_ID, None), replica=stranger,
                                      epoch=1000, last=OffsetAndEpoch(epoch=999, offset=1 << 40), pre_vote=False),
        "Vote v0": vote0.VoteRequest(cluster_id=cluster_id, topics=(vote0.TopicData(
            topic_name=_METADATA, partitions=(vote0.PartitionData(
                partition_index=i32(0), replica_epoch=i32(1000), replica_id=BrokerId(9),
                last_offset_epoch=i32(999), last_offset=i64(1 << 40)),)),)),
        "BeginQuorumEpoch": messages.begin_quorum_epoch_request(
            cluster_id=cluster_id, voter=ReplicaKey(NODE_ID, None), leader_id=9, epoch=1000, leader_endpoints=endpoints),
        "EndQuorumEpoch": messages.end_quorum_epoch_request(cluster_id=cluster_id, leader_id=9, epoch=1000,
                                                            preferred=(), leader_endpoints=endpoints),
        "Fetch": messages.fetch_request(cluster_id=cluster_id, replica=stranger, epoch=-1, fetch_offset=0,
                                        last_fetched_epoch=0, high_watermark=None, max_wait_ms=0, max_bytes=1 << 20),
        "FetchSnapshot": messages.fetch_snapshot_request(cluster_id=cluster_id, replica=stranger, epoch=-1,
                                                         snapshot_id=OffsetAndEpoch(epoch=1, offset=1), position=0, max_bytes=1024),
        "DescribeQuorum": messages.describe_quorum_request(),
        "DescribeQuorum v0": dq0.DescribeQuorumRequest(topics=(dq0.TopicData(
            topic_name=_METADATA, partitions=(dq0.PartitionData(partition_index=i32(0)),)),)),
        "AddRaftVoter": messages.add_voter_request(cluster_id=cluster_id, voter=stranger, endpoints=endpoints,
                                                   timeout_ms=1000),
        "RemoveRaftVoter": messages.remove_voter_request(cluster_id=cluster_id, voter=stranger),
        "UpdateRaftVoter": messages.update_voter_request(cluster_id=cluster_id, epoch=-1, voter=stranger,
                                                         endpoints=endpoints, min_kraft_version=0, max_kraft_version=1),
    }


async def _answers(served: _Served, cluster_id: str) -> dict[str, str]:
    connection = await served.connection()
    try:
        return {name: ErrorCode((await connection.send(request)).error_code).name.upper()
                for name, request in _raft_requests(cluster_id).items()}
    finally:
        await connection.close()


async def test_every_raft_api_needs_its_operation_on_the_cluster(guarded: _Guarded) -> None:
    """Kafka's ControllerApis: without an ACL each raft api (at the core's version and at v0,
    bridged) is CLUSTER_AUTHORIZATION_FAILED and moves nothing; with CLUSTER_ACTION, DESCRIBE and
    ALTER on the cluster none is refused (the wrong cluster id then stops them in the core)."""
    raft = guarded.node.raft.raft
    epoch, voters = raft.epoch, raft.voters
    refused = await _answers(guarded, "not-" + CLUSTER_ID)
    assert refused == dict.fromkeys(_raft_requests(CLUSTER_ID), "CLUSTER_AUTHORIZATION_FAILED")
    assert (raft.epoch, raft.voters) == (epoch, voters)

    for operation in sorted(set(RAFT_API_OPERATIONS.values())):
        acl_id = uuid.uuid4()
        guarded.acls[acl_id] = AccessControlEntryRecord(
            id=acl_id, resource_type=int(ResourceType.CLUSTER), resource_name="kafka-cluster", pattern_type=3,
            principal="User:ANONYMOUS", host="*", operation=int(operation), permission_type=3)
    allowed = await _answers(guarded, "not-" + CLUSTER_ID)
    assert {name: code for name, code in allowed.items() if code == "CLUSTER_AUTHORIZATION_FAILED"} == {}
    assert allowed["DescribeQuorum"] == "NONE"
    assert (raft.epoch, raft.voters) == (epoch, voters)


async def test_a_grant_of_describe_alone_lets_describe_quorum_through_and_nothing_else(guarded: _Guarded) -> None:
    acl_id = uuid.uuid4()
    guarded.acls[acl_id] = AccessControlEntryRecord(
        id=acl_id, resource_type=int(ResourceType.CLUSTER), resource_name="kafka-cluster", pattern_type=3,
        principal="User:ANONYMOUS", host="*", operation=int(AclOperation.DESCRIBE), permission_type=3)
    answers = await _answers(guarded, "not-" + CLUSTER_ID)
    assert {n for n, code in answers.items() if code != "CLUSTER_AUTHORIZATION_FAILED"} == {
        "DescribeQuorum", "DescribeQuorum v0"}
