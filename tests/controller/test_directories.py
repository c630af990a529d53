"""JBOD through the controller: AssignReplicasToDirs and log directories a broker reports offline."""

from __future__ import annotations

import uuid

from kio.schema.assign_replicas_to_dirs.v0 import request as ad
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i32, i64

from kraft_engine.controller import ControllerApiError
from kraft_engine.kafka_uuid import ONE_UUID
from kraft_engine.records import BrokerRegistrationChangeRecord, PartitionChangeRecord

from .harness import Harness


def _assign(h: Harness, broker: int, directory: uuid.UUID, placements: dict[uuid.UUID, list[int]], *,
            epoch: int | None = None) -> object:
    return h.run(h.controller.assign_replicas_to_dirs(ad.AssignReplicasToDirsRequest(
        broker_id=BrokerId(broker), broker_epoch=i64(h.epochs[broker] if epoch is None else epoch),
        directories=(ad.DirectoryData(id_=directory, topics=tuple(
            ad.TopicData(topic_id=t, partitions=tuple(ad.PartitionData(partition_index=i32(p)) for p in ps))
            for t, ps in placements.items())),),
    )))


def _codes(response: object) -> list[ErrorCode]:
    return [p.error_code for d in response.directories for t in d.topics for p in t.partitions]  # type: ignore[attr-defined]


def test_a_broker_with_several_directories_reports_where_each_replica_lives() -> None:
    h = Harness().unfenced(1, 2, dirs=2)
    h.create_topic("orders", assignments=[[1, 2]])
    topic_id = h.topic_id("orders")
    # With several directories the controller cannot choose: the replica is unassigned.
    assert h.partition("orders").directories == (ONE_UUID, ONE_UUID)  # Kafka's DirectoryId.UNASSIGNED
    directory = h.log_dirs[1][1]
    response = _assign(h, 1, directory, {topic_id: [0, 5], uuid.uuid4(): [0]})
    assert _codes(response) == [ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id]
    [record] = h.written
    assert isinstance(record, PartitionChangeRecord) and record.directories == (directory, ONE_UUID)
    assert h.partition("orders").directory(1) == directory
    assert _codes(_assign(h, 1, directory, {topic_id: [0]})) == [ErrorCode.none] and h.written == []
    h.register(3)
    h.heartbeat(3)
    assert _codes(_assign(h, 3, h.log_dirs[3][0], {topic_id: [0]})) == [ErrorCode.not_leader_or_follower]
    stale = _assign(h, 1, directory, {topic_id: [0]}, epoch=1)
    assert isinstance(stale, ControllerApiError) and stale.error_code == ErrorCode.stale_broker_epoch


def test_an_offline_directory_moves_leadership_and_isr_off_its_partitions() -> None:
    h = Harness().unfenced(1, 2, dirs=2)
    h.create_topic("orders", assignments=[[1, 2]])
    h.create_topic("payments", assignments=[[1, 2]])
    failing, healthy = h.log_dirs[1]
    _assign(h, 1, failing, {h.topic_id("orders"): [0]})
    _assign(h, 1, healthy, {h.topic_id("payments"): [0]})
    h.heartbeat(1, offline_dirs=[failing])
    orders, payments = h.partition("orders"), h.partition("payments")
    assert orders.leader == 2 and orders.isr == (2,)
    assert payments.leader == 1 and payments.isr == (1, 2)
    assert h.written[-1] == BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=h.epochs[1], log_dirs=(healthy,))
    assert h.versions[-1] == 2
    registration = h.controller.cluster_control.broker(1)
    assert registration is not None and registration.directories == (healthy,)
    # Reported again: nothing new is offline, nothing is written.
    h.heartbeat(1, offline_dirs=[failing])
    assert h.written == []
    # A replica assigned to the dead directory cannot lead or stay in the ISR either.
    _assign(h, 1, failing, {h.topic_id("payments"): [0]})
    payments = h.partition("payments")
    assert payments.leader == 2 and payments.isr == (2,) and payments.directory(1) == failing


def test_directory_assignment_needs_a_metadata_version_that_supports_it() -> None:
    h = Harness(mv=16).unfenced(1)  # 3.7-IV1
    h.create_topic("orders")
    refused = _assign(h, 1, uuid.uuid4(), {h.topic_id("orders"): [0]})
    assert isinstance(refused, ControllerApiError) and refused.error_code == ErrorCode.unsupported_version


def test_a_directory_the_broker_never_registered_counts_as_offline() -> None:
    # Kafka accepts the assignment (the broker is the authority on placement) but a replica on a
    # directory the broker does not report online can neither lead nor stay in the ISR.
    h = Harness().unfenced(1, 2)
    h.create_topic("orders", assignments=[[1, 2]])
    unknown = uuid.uuid4()
    assert _codes(_assign(h, 1, unknown, {h.topic_id("orders"): [0]})) == [ErrorCode.none]
    partition = h.partition("orders")
    assert partition.directory(1) == unknown and partition.leader == 2 and partition.isr == (2,)
