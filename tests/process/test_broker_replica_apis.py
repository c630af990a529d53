"""The broker APIs that describe replicas, on three of our brokers and three controllers (real
processes): DescribeLogDirs and DescribeProducers through kafka-python's admin client (a client
not written here), and OffsetsForLeaderEpoch across a leader change made with the forwarded admin
APIs (AlterPartitionReassignments reorders the replicas, ListPartitionReassignments shows none
pending, ElectLeaders moves leadership to the new preferred replica), checked against the
offsets the producer was told.
"""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from broker_processes import BrokerCluster
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64
from quorum_processes import HOST, wait_for
from test_broker_cluster import read_back

from kraft_engine.protocol import KafkaConnection

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = [
    pytest.mark.process,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

_PREFERRED = 0


@pytest.fixture
def cluster(module_brokers: BrokerCluster) -> BrokerCluster:
    return module_brokers


@pytest.fixture
def admin(cluster: BrokerCluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=cluster.broker_bootstrap(), request_timeout_ms=30000)
    try:
        yield client
    finally:
        client.close()


def _create(cluster: BrokerCluster, admin: KafkaAdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 3)])
    cluster.wait_isr(topic, 0, set(cluster.brokers))


def _produce(cluster: BrokerCluster, topic: str, values: list[bytes], *,
             timestamps_ms: list[int] | None = None) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all", enable_idempotence=True,
                             linger_ms=2, request_timeout_ms=30000)
    try:
        stamps = timestamps_ms or [None] * len(values)
        futures = [producer.send(topic, value=v, partition=0, timestamp_ms=t) for v, t in zip(values, stamps, strict=True)]
        producer.flush()
        return [f.get(timeout=60).offset for f in futures]
    finally:
        producer.close()


def _leader(cluster: BrokerCluster, topic: str) -> int:
    return next(n for n in cluster.brokers if cluster.partitions(n)[(topic, 0)]["leader"] == n)


def _ask(cluster: BrokerCluster, node_id: int, request: Any) -> Any:
    async def exchange() -> Any:
        async with KafkaConnection(HOST, cluster.broker_ports[node_id]) as connection:
            await connection.connect()
            return await connection.send(request)
    return asyncio.run(exchange())


def _epoch_end(cluster: BrokerCluster, node_id: int, topic: str, *, epoch: int,
               current_leader_epoch: int = -1) -> tuple[ErrorCode, int, int]:
    response = _ask(cluster, node_id, OffsetForLeaderEpochRequest(replica_id=BrokerId(-1), topics=(
        OffsetForLeaderTopic(topic=TopicName(topic), partitions=(
            OffsetForLeaderPartition(partition=i32(0), current_leader_epoch=i32(current_leader_epoch),
                                     leader_epoch=i32(epoch)),)),)))
    answer = response.topics[0].partitions[0]
    return ErrorCode(answer.error_code), int(answer.leader_epoch), int(answer.end_offset)


def test_describe_log_dirs_and_describe_producers_through_kafka_python(cluster: BrokerCluster,
                                                                        admin: KafkaAdminClient) -> None:
    topic = "described"
    _create(cluster, admin, topic)
    # Timestamps that rise with the offset: the producer's last batch has the last record's as its max.
    first_timestamp_ms = 1_700_000_000_000
    offsets = _produce(cluster, topic, [f"v-{i}".encode() for i in range(50)],
                       timestamps_ms=[first_timestamp_ms + 10 * i for i in range(50)])
    assert offsets == list(range(50))
    cluster.wait_isr(topic, 0, set(cluster.brokers))
    wait_for(lambda: all(cluster.partitions(n)[(topic, 0)]["log_end_offset"] == 50 for n in cluster.brokers),
             timeout_s=60, what="every replica at offset 50")

    described = {entry["broker"]: entry["log_dirs"] for entry in admin.describe_log_dirs()}
    assert sorted(described) == sorted(cluster.brokers)
    for node_id, log_dirs in described.items():
        root = cluster.nodes[node_id].config_path.parent
        assert sorted(d["log_dir"] for d in log_dirs) == [str(root / "data-a"), str(root / "data-b")]
        assert all(d["error_code"] == 0 and d["total_bytes"] > 0 and 0 <= d["usable_bytes"] <= d["total_bytes"]
                   for d in log_dirs)
        # The replica is in exactly one of the broker's two directories, with its size on disk.
        holding = [(d["log_dir"], p) for d in log_dirs for t in d["topics"] if t["name"] == topic for p in t["partitions"]]
        assert len(holding) == 1
        log_dir, partition = holding[0]
        on_disk = sum(f.stat().st_size for f in (Path(log_dir) / f"{topic}-0").glob("*.log"))
        assert (partition["partition_index"], partition["partition_size"], partition["offset_lag"]) == (0, on_disk, 0)
        assert on_disk > 0

    states = admin.describe_producers([TopicPartition(topic, 0)])[TopicPartition(topic, 0)].active_producers
    assert [(s.producer_epoch, s.last_sequence, s.last_timestamp, s.coordinator_epoch,
             s.current_transaction_start_offset)
            for s in states] == [(0, 49, first_timestamp_ms + 490, -1, -1)]
    # Every replica, leader or follower, remembers the same producer.
    for node_id in cluster.brokers:
        response = _ask(cluster, node_id, DescribeProducersRequest(topics=(
            TopicRequest(name=TopicName(topic), partition_indexes=(i32(0),)),)))
        answer = response.topics[0].partitions[0]
        assert ErrorCode(answer.error_code) == ErrorCode.none
        assert [(int(p.producer_id), int(p.last_sequence), int(p.last_timestamp))
                for p in answer.active_producers] == [(states[0].producer_id, 49, first_timestamp_ms + 490)]
    unknown = _ask(cluster, min(cluster.brokers), DescribeProducersRequest(topics=(
        TopicRequest(name=TopicName("no-such-topic"), partition_indexes=(i32(0),)),)))
    assert ErrorCode(unknown.topics[0].partitions[0].error_code) == ErrorCode.unknown_topic_or_partition


def test_offsets_for_leader_epoch_across_a_leader_change_made_by_reassignment_and_election(
        cluster: BrokerCluster, admin: KafkaAdminClient) -> None:
    topic = "epochs"
    _create(cluster, admin, topic)
    assert _produce(cluster, topic, [f"v-{i}".encode() for i in range(30)]) == list(range(30))
    old_leader = _leader(cluster, topic)
    follower = min(cluster.brokers - {old_leader})
    assert _epoch_end(cluster, old_leader, topic, epoch=0) == (ErrorCode.none, 0, 30)
    assert _epoch_end(cluster, follower, topic, epoch=0)[0] == ErrorCode.not_leader_or_follower

    # The follower becomes the preferred replica, then the leader.
    tp = TopicPartition(topic, 0)
    order = [follower, *sorted(cluster.brokers - {follower})]
    assert admin.alter_partition_reassignments({tp: order}) == {tp: None}
    wait_for(lambda: admin.describe_topics([topic])[0]["partitions"][0]["replica_nodes"] == order, timeout_s=60,
             what="the reordered replicas in Metadata")
    assert admin.list_partition_reassignments() == {}
    admin.elect_leaders(_PREFERRED, {topic: [0]})
    wait_for(lambda: _leader(cluster, topic) == follower, timeout_s=60, what=f"broker {follower} to lead {topic}-0")
    new_epoch = cluster.partitions(follower)[(topic, 0)]["leader_epoch"]
    assert new_epoch > 0

    assert _produce(cluster, topic, [f"v-{i}".encode() for i in range(30, 50)]) == list(range(30, 50))
    # Epoch 0 ended where the new leader's epoch began; the current epoch ends at the log end.
    assert _epoch_end(cluster, follower, topic, epoch=0) == (ErrorCode.none, 0, 30)
    assert _epoch_end(cluster, follower, topic, epoch=new_epoch) == (ErrorCode.none, new_epoch, 50)
    assert _epoch_end(cluster, follower, topic, epoch=0, current_leader_epoch=0)[0] == ErrorCode.fenced_leader_epoch
    assert _epoch_end(cluster, follower, topic, epoch=0,
                      current_leader_epoch=new_epoch + 5)[0] == ErrorCode.unknown_leader_epoch
    assert _epoch_end(cluster, old_leader, topic, epoch=0)[0] == ErrorCode.not_leader_or_follower


def _fetch_by_id(topic_id: uuid.UUID) -> Any:
    from kio.schema.fetch.v17.request import FetchPartition, FetchRequest, FetchTopic

    return FetchRequest(cluster_id=None, max_wait=i32Timedelta.parse(timedelta(0)), min_bytes=i32(1),
                        max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
                        topics=(FetchTopic(topic_id=topic_id, partitions=(FetchPartition(
                            partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0), last_fetched_epoch=i32(-1),
                            log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20), replica_directory_id=None),)),),
                        forgotten_topics_data=(), rack_id="")


def test_fetch_by_topic_id_and_bad_produce_input_on_one_connection_while_another_is_served(
        cluster: BrokerCluster, admin: KafkaAdminClient) -> None:
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.static.primitive import Records

    topic = "by-id"
    _create(cluster, admin, topic)
    assert _produce(cluster, topic, [f"v-{i}".encode() for i in range(10)]) == list(range(10))
    leader = _leader(cluster, topic)
    topic_id = uuid.UUID(admin.describe_topics([topic])[0]["topic_id"])

    def produce(records: bytes) -> ProduceRequest:
        return ProduceRequest(transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(timedelta(seconds=30)),
                              topic_data=(TopicProduceData(name=TopicName(topic), partition_data=(
                                  PartitionProduceData(index=i32(0), records=Records(records)),)),))

    async def scenario() -> dict[str, Any]:
        async with KafkaConnection(HOST, cluster.broker_ports[leader]) as bad, \
                KafkaConnection(HOST, cluster.broker_ports[leader]) as good:
            await bad.connect()
            await good.connect()
            garbage, by_id, unknown_id = await asyncio.gather(
                bad.send(produce(b"\x00garbage" * 40)), good.send(_fetch_by_id(topic_id)),
                good.send(_fetch_by_id(uuid.uuid4())))
            after = await bad.send(_fetch_by_id(topic_id))
            return {"garbage": garbage, "by_id": by_id, "unknown_id": unknown_id, "after": after}

    result = asyncio.run(scenario())
    assert ErrorCode(result["garbage"].responses[0].partition_responses[0].error_code) == ErrorCode.corrupt_message
    answer = result["by_id"].responses[0]
    assert answer.topic_id == topic_id
    assert ErrorCode(answer.partitions[0].error_code) == ErrorCode.none
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatch
    data = bytes(answer.partitions[0].records)
    values = []
    while data:
        batch = DefaultRecordBatch(bytearray(data))
        values += [r.value for r in batch]
        data = data[batch.size_in_bytes:]
    assert values == [f"v-{i}".encode() for i in range(10)]
    assert ErrorCode(result["unknown_id"].responses[0].partitions[0].error_code) == ErrorCode.unknown_topic_id
    # The connection that sent garbage is still served, and nothing of the garbage was written.
    assert int(result["after"].responses[0].partitions[0].high_watermark) == 10


def test_produce_v13_names_topics_by_id_and_a_follower_points_to_the_leader(cluster: BrokerCluster,
                                                                             admin: KafkaAdminClient) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.produce.v13.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.static.primitive import Records

    from kraft_engine.records.client_records import ProducedRecord, encode_client_batch

    topic = "produced-by-id"
    _create(cluster, admin, topic)
    leader = _leader(cluster, topic)
    follower = min(n for n in cluster.brokers if n != leader)
    metadata = _ask(cluster, follower, MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
                                                       allow_auto_topic_creation=False,
                                                       include_topic_authorized_operations=False))
    topic_id = metadata.topics[0].topic_id
    leader_epoch = int(metadata.topics[0].partitions[0].leader_epoch)

    def produce(node_id: int, target: uuid.UUID, values: list[bytes]) -> Any:
        batch = encode_client_batch([ProducedRecord(value=v, key=None, timestamp_ms=1_700_000_000_000, headers=())
                                     for v in values], codec=0)
        return _ask(cluster, node_id, ProduceRequest(acks=i16(-1), timeout=i32Timedelta.parse(timedelta(seconds=30)),
                                                     topic_data=(TopicProduceData(topic_id=target, partition_data=(
                                                         PartitionProduceData(index=i32(0), records=Records(batch)),)),)))

    written = produce(leader, topic_id, [b"a", b"b", b"c"])
    [answer] = written.responses
    assert answer.topic_id == topic_id
    assert (ErrorCode(answer.partition_responses[0].error_code), int(answer.partition_responses[0].base_offset)) == \
        (ErrorCode.none, 0)
    # A follower refuses with the leader it knows and that leader's endpoint (KIP-951), nothing written.
    refused = produce(follower, topic_id, [b"not-here"])
    part = refused.responses[0].partition_responses[0]
    assert ErrorCode(part.error_code) == ErrorCode.not_leader_or_follower
    assert (int(part.current_leader.leader_id), int(part.current_leader.leader_epoch)) == (leader, leader_epoch)
    assert [(int(e.node_id), e.port) for e in refused.node_endpoints] == [(leader, cluster.broker_ports[leader])]
    unknown = produce(leader, uuid.uuid4(), [b"nowhere"])
    assert ErrorCode(unknown.responses[0].partition_responses[0].error_code) == ErrorCode.unknown_topic_id
    # kafka-python reads exactly the three records written by id.
    assert read_back(cluster, topic, 1) == {(0, 0): b"a", (0, 1): b"b", (0, 2): b"c"}


def test_describe_topic_partitions_pages_with_a_cursor_in_topic_name_order(cluster: BrokerCluster,
                                                                           admin: KafkaAdminClient) -> None:
    from kio.schema.describe_topic_partitions.v0.request import Cursor, DescribeTopicPartitionsRequest
    from kio.schema.describe_topic_partitions.v0.request import TopicRequest as DescribeTopic

    admin.create_topics([NewTopic("dtp-a", 3, 3), NewTopic("dtp-b", 2, 3)])
    for topic, count in (("dtp-a", 3), ("dtp-b", 2)):
        for p in range(count):
            cluster.wait_isr(topic, p, set(cluster.brokers))
    node = min(cluster.brokers)
    named = tuple(DescribeTopic(name=TopicName(n)) for n in ("nope", "dtp-b", "dtp-a"))

    def page(cursor: Cursor | None) -> tuple[list[tuple[str, int, list[int]]], tuple[str, int] | None]:
        response = _ask(cluster, node, DescribeTopicPartitionsRequest(topics=named, response_partition_limit=i32(2),
                                                                      cursor=cursor))
        shown = [(str(t.name), int(t.error_code), [int(p.partition_index) for p in t.partitions]) for t in response.topics]
        for t in response.topics:
            for p in t.partitions:
                metadata = cluster.partitions(node)[(str(t.name), int(p.partition_index))]
                assert (int(p.leader_id), sorted(int(r) for r in p.isr_nodes)) == (metadata["leader"], sorted(cluster.brokers))
                assert (p.eligible_leader_replicas, p.last_known_elr, p.offline_replicas) == ((), (), ())
        after = response.next_cursor
        return shown, None if after is None else (str(after.topic_name), int(after.partition_index))

    assert page(None) == ([("dtp-a", 0, [0, 1])], ("dtp-a", 2))
    assert page(Cursor(topic_name=TopicName("dtp-a"), partition_index=i32(2))) == (
        [("dtp-a", 0, [2]), ("dtp-b", 0, [0])], ("dtp-b", 1))
    assert page(Cursor(topic_name=TopicName("dtp-b"), partition_index=i32(1))) == (
        [("dtp-b", 0, [1]), ("nope", int(ErrorCode.unknown_topic_or_partition), [])], None)
    # A cursor naming a topic the request does not name: Kafka's INVALID_REQUEST for every topic.
    refused = _ask(cluster, node, DescribeTopicPartitionsRequest(
        topics=named, response_partition_limit=i32(2), cursor=Cursor(topic_name=TopicName("other"),
                                                                     partition_index=i32(0))))
    assert {(str(t.name), ErrorCode(t.error_code)) for t in refused.topics} == {
        (n, ErrorCode.invalid_request) for n in ("nope", "dtp-b", "dtp-a")}
