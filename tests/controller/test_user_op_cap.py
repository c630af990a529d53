"""Any one client operation is capped at 10,000 records (Kafka's MAX_RECORDS_PER_USER_OP) and one CreateTopics at
10,000 partitions (MAX_PARTITIONS_PER_BATCH): a bigger one is refused as a whole with Kafka's message, checked
from the request's counts before any record is built, and writes nothing; one at the cap goes through."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_configs
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from kraft_engine.controller.replication_control import ReplicationControlManager
from kraft_engine.controller.results import MAX_PARTITIONS_PER_BATCH, MAX_RECORDS_PER_USER_OP
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


# --- caps before work (issue #18): refused from the request's counts, before any record is built





_PARTITIONS_MESSAGE = "Excessively large number of partitions per request."
_BATCH_MESSAGE = "Unable to perform excessively large batch operation."
_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many partition records the controller built: a refusal before work builds none."""
    calls: list[int] = []
    original = ReplicationControlManager._new_partition_record

    def counting(self: ReplicationControlManager, *args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ReplicationControlManager, "_new_partition_record", counting)
    return calls


def _refused(outcome: object, message: str) -> None:
    assert getattr(outcome, "error_code", None) == ErrorCode.policy_violation, outcome
    assert getattr(outcome, "message", None) == message


@pytest.mark.parametrize(
    "specs",
    [
        [("huge", 1_000_000)],  # issue #18: 8.1 s and +431 MiB before the refusal, Kafka microseconds
        [("foo", 5000), ("bar", 5000), ("baz", 1)],  # Kafka's testExcessiveNumberOfTopicsCannotBeCreated
        [(f"t{i}", 1) for i in range(MAX_PARTITIONS_PER_BATCH + 1)],
    ],
    ids=["one-topic-1M-partitions", "10001-partitions-in-3-topics", "10001-topics"],
)
def test_create_topics_over_ten_thousand_partitions_is_refused_before_any_record(built, specs) -> None:
    cluster = Harness().unfenced(1)
    _refused(_create(cluster, *specs), _PARTITIONS_MESSAGE)
    assert built == [] and cluster.written == []


def test_create_topics_with_more_topics_or_configs_than_one_operation_holds_is_refused(built) -> None:
    cluster = Harness().unfenced(1)
    nothing = CreateTopicsRequest(topics=tuple(
        CreatableTopic(name=TopicName(f"t{i}"), num_partitions=i32(0), replication_factor=i16(1), assignments=(),
                       configs=())
        for i in range(MAX_RECORDS_PER_USER_OP + 1)
    ))
    _refused(cluster.run(cluster.controller.create_topics(nothing)), _BATCH_MESSAGE)
    configs = CreateTopicsRequest(topics=(CreatableTopic(
        name=TopicName("c"), num_partitions=i32(1), replication_factor=i16(1), assignments=(),
        configs=tuple(CreatableTopicConfig(name=f"k{i}", value="v") for i in range(MAX_RECORDS_PER_USER_OP)),
    ),))
    _refused(cluster.run(cluster.controller.create_topics(configs)), _BATCH_MESSAGE)
    assert built == [] and cluster.written == []


def test_create_partitions_beyond_one_operation_is_refused_before_any_record(built) -> None:
    cluster = Harness().unfenced(1)
    _create(cluster, ("grow", 1))
    built.clear()
    request = CreatePartitionsRequest(topics=(CreatePartitionsTopic(name=TopicName("grow"), count=i32(1_000_000),
                                                                    assignments=None),),
                                      timeout=_TIMEOUT, validate_only=False)
    _refused(cluster.run(cluster.controller.create_partitions(request)), _BATCH_MESSAGE)
    assert built == [] and cluster.written == []


def test_incremental_alter_configs_and_delete_topics_over_the_cap_are_refused_whole() -> None:
    cluster = Harness().unfenced(1)
    alter = alter_configs.IncrementalAlterConfigsRequest(resources=(alter_configs.AlterConfigsResource(
        resource_type=i8(4), resource_name="", configs=tuple(
            alter_configs.AlterableConfig(name=f"k{i}", config_operation=i8(0), value="1")
            for i in range(MAX_RECORDS_PER_USER_OP + 1)
        ),
    ),), validate_only=False)
    _refused(cluster.run(cluster.controller.incremental_alter_configs(alter)), _BATCH_MESSAGE)
    delete = DeleteTopicsRequest(topics=tuple(DeleteTopicState(name=TopicName(f"t{i}"), topic_id=uuid.UUID(int=0))
                                              for i in range(MAX_RECORDS_PER_USER_OP + 1)), timeout=_TIMEOUT)
    _refused(cluster.run(cluster.controller.delete_topics(delete)), _BATCH_MESSAGE)
    assert cluster.written == []
