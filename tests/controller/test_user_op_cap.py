"""Any one client operation is capped at 10,000 records (Kafka's MAX_RECORDS_PER_USER_OP): a bigger
one is refused as a whole with Kafka's message and writes nothing; one at the cap goes through."""

from __future__ import annotations

from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32

from kraft_engine.controller.results import MAX_RECORDS_PER_USER_OP
from kraft_engine.records import PartitionRecord, TopicRecord

from .harness import Harness


def _create(cluster: Harness, *specs: tuple[str, int]) -> object:
    request = CreateTopicsRequest(topics=tuple(
        CreatableTopic(name=TopicName(name), num_partitions=i32(partitions), replication_factor=i16(1),
                       assignments=(), configs=())
        for name, partitions in specs
    ))
    return cluster.run(cluster.controller.create_topics(request))


def test_an_operation_over_ten_thousand_records_is_refused_whole_and_one_at_the_cap_commits() -> None:
    assert MAX_RECORDS_PER_USER_OP == 10_000
    cluster = Harness().unfenced(1)
    # Two topics: 2 TopicRecords + 10,000 PartitionRecords = 10,002 records, though each alone fits.
    refused = _create(cluster, ("a", 5000), ("b", 5000))
    assert getattr(refused, "error_code", None) == ErrorCode.policy_violation
    assert getattr(refused, "message", None) == "Unable to perform excessively large batch operation."
    assert cluster.written == []
    assert cluster.controller.replication_control.topic_id("a") is None

    # Exactly at the cap: 1 TopicRecord + 9,999 PartitionRecords.
    [created] = _create(cluster, ("a", MAX_RECORDS_PER_USER_OP - 1))  # type: ignore[misc]
    assert created.error_code == ErrorCode.none
    assert sum(isinstance(r, TopicRecord) for r in cluster.written) == 1
    assert sum(isinstance(r, PartitionRecord) for r in cluster.written) == MAX_RECORDS_PER_USER_OP - 1
