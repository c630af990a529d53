"""CreatePartitions, partition reassignment, leader elections and the periodic election tasks:
each request checked in the records it writes, the response it gives, and the state replayed."""

from __future__ import annotations

from kio.schema.alter_partition_reassignments.v1.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.create_partitions.v3.request import (
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.list_partition_reassignments.v0.request import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsTopics,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta

from kraft_engine.controller import ControllerApiError
from kraft_engine.metadata import LeaderRecoveryState
from kraft_engine.records import NoOpRecord, PartitionChangeRecord, PartitionRecord

from .harness import NO_TIMEOUT, Harness

TIMEOUT = i32Timedelta.parse(NO_TIMEOUT)


def _create_partitions(h: Harness, name: str, count: int, assignments: list[list[int]] | None = None, *,
                       validate_only: bool = False) -> tuple[ErrorCode, str | None]:
    topic = CreatePartitionsTopic(
        name=TopicName(name), count=i32(count),
        assignments=None if assignments is None else tuple(
            CreatePartitionsAssignment(broker_ids=tuple(BrokerId(b) for b in a)) for a in assignments),
    )
    response = h.run(h.controller.create_partitions(CreatePartitionsRequest(
        topics=(topic,), timeout=TIMEOUT, validate_only=validate_only)))
    [result] = response.results  # type: ignore[attr-defined]
    return result.error_code, result.error_message


def _reassign(h: Harness, name: str, partition: int, replicas: list[int] | None, *,
              allow_rf_change: bool = True) -> tuple[ErrorCode, str | None]:
    response = h.run(h.controller.alter_partition_reassignments(AlterPartitionReassignmentsRequest(
        allow_replication_factor_change=allow_rf_change,
        topics=(ReassignableTopic(name=TopicName(name), partitions=(ReassignablePartition(
            partition_index=i32(partition),
            replicas=None if replicas is None else tuple(BrokerId(r) for r in replicas)),)),),
    )))
    [topic] = response.responses  # type: ignore[attr-defined]
    [result] = topic.partitions
    return result.error_code, result.error_message


def _listed(h: Harness, topics: dict[str, list[int]] | None = None) -> dict[tuple[str, int], tuple[list[int], ...]]:
    request = ListPartitionReassignmentsRequest(topics=None if topics is None else tuple(
        ListPartitionReassignmentsTopics(name=TopicName(n), partition_indexes=tuple(i32(p) for p in ps))
        for n, ps in topics.items()))
    response = h.controller.list_partition_reassignments(request)
    return {
        (t.name, int(p.partition_index)): ([int(r) for r in p.replicas], [int(r) for r in p.adding_replicas],
                                           [int(r) for r in p.removing_replicas])
        for t in response.topics for p in t.partitions
    }


def _elect(h: Harness, election_type: int, topics: dict[str, list[int]] | None) -> dict[tuple[str, int], tuple]:
    response = h.run(h.controller.elect_leaders(ElectLeadersRequest(
        election_type=i8(election_type),
        topic_partitions=None if topics is None else tuple(
            TopicPartitions(topic=TopicName(n), partitions=tuple(i32(p) for p in ps)) for n, ps in topics.items()),
    )))
    return {
        (t.topic, int(p.partition_id)): (p.error_code, p.error_message)
        for t in response.replica_election_results for p in t.partition_result  # type: ignore[attr-defined]
    }


def _set_topic_config(h: Harness, topic: str, name: str, value: str) -> None:
    response = h.run(h.controller.incremental_alter_configs(IncrementalAlterConfigsRequest(
        resources=(AlterConfigsResource(resource_type=i8(2), resource_name=topic, configs=(
            AlterableConfig(name=name, config_operation=i8(0), value=value),)),),
        validate_only=False,
    )))
    assert response.responses[0].error_code == ErrorCode.none  # type: ignore[attr-defined]


# -- CreatePartitions ----------------------------------------------------------------------


def test_create_partitions_adds_placed_partitions_after_the_existing_ones() -> None:
    h = Harness().unfenced(1, 2, 3)
    h.create_topic("orders", 3, 2)
    assert _create_partitions(h, "orders", 6) == (ErrorCode.none, None)
    assert [type(r) for r in h.written] == [PartitionRecord] * 3
    assert [r.partition_id for r in h.written] == [3, 4, 5]  # type: ignore[attr-defined]
    assert h.controller.replication_control.global_partition_count() == 6
    leaders = set()
    for p in range(6):
        partition = h.partition("orders", p)
        assert len(partition.replicas) == 2 and len(set(partition.replicas)) == 2
        assert partition.isr == partition.replicas and partition.leader == partition.replicas[0]
        leaders.add(partition.leader)
    assert leaders == {1, 2, 3}


def test_create_partitions_with_a_manual_assignment_and_its_refusals() -> None:
    h = Harness().unfenced(1, 2, 3)
    h.create_topic("orders", 1, 2)
    assert _create_partitions(h, "orders", 2, [[3, 1]]) == (ErrorCode.none, None)
    assert h.partition("orders", 1).replicas == (3, 1)
    assert _create_partitions(h, "nope", 4) == (ErrorCode.unknown_topic_or_partition, None)
    assert _create_partitions(h, "orders", 2) == (ErrorCode.invalid_partitions, "Topic already has 2 partition(s).")
    assert _create_partitions(h, "orders", 1) == (
        ErrorCode.invalid_partitions, "The topic orders currently has 2 partition(s); 1 would not be an increase.")
    assert _create_partitions(h, "orders", 4, [[1, 2]]) == (
        ErrorCode.invalid_replica_assignment,
        "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")
    assert _create_partitions(h, "orders", 3, [[1, 2, 3]]) == (
        ErrorCode.invalid_replica_assignment,
        "The manual partition assignment includes a partition with 3 replica(s), but this is not consistent "
        "with previous partitions, which have 2 replica(s).")
    assert _create_partitions(h, "orders", 3, [[1, 9]])[0] == ErrorCode.invalid_replica_assignment
    assert _create_partitions(h, "orders", 3, [[2, 2]]) == (
        ErrorCode.invalid_replica_assignment, "The manual partition assignment includes the broker 2 more than once.")
    h.heartbeat(1, want_fence=True)
    h.heartbeat(3, want_fence=True)
    assert _create_partitions(h, "orders", 3, [[3, 1]]) == (
        ErrorCode.invalid_replica_assignment,
        "All brokers specified in the manual partition assignment for partition 2 are fenced or in "
        "controlled shutdown.")
    assert _create_partitions(h, "orders", 5, validate_only=True) == (ErrorCode.none, None)
    assert h.written == [] and h.controller.replication_control.global_partition_count() == 2


# -- reassignment --------------------------------------------------------------------------


def test_a_reassignment_adds_targets_waits_for_the_isr_then_removes_the_old_replicas() -> None:
    h = Harness().unfenced(1, 2, 3, 4)
    h.create_topic("orders", assignments=[[1, 2, 3]])
    assert _reassign(h, "orders", 0, [4, 2, 3]) == (ErrorCode.none, None)
    [stage1] = h.written
    assert isinstance(stage1, PartitionChangeRecord)
    assert (stage1.replicas, stage1.adding_replicas, stage1.removing_replicas) == ((4, 2, 3, 1), (4,), (1,))
    assert stage1.isr is None and stage1.leader == -2
    assert _listed(h) == {("orders", 0): ([4, 2, 3, 1], [4], [1])}
    assert _listed(h, {"orders": [0, 7], "unknown": [0]}) == {("orders", 0): ([4, 2, 3, 1], [4], [1])}
    # Stage 2 ends when the target replicas are all in the ISR; the leader (1) is being removed.
    result = h.alter_isr("orders", 0, [1, 2, 3, 4])
    assert result.error_code == ErrorCode.new_leader_elected  # type: ignore[attr-defined]
    [stage3] = h.written
    assert isinstance(stage3, PartitionChangeRecord)
    assert (stage3.replicas, stage3.isr, stage3.adding_replicas, stage3.removing_replicas) == (
        (4, 2, 3), (2, 3, 4), (), ())
    partition = h.partition("orders")
    assert partition.leader == 4 and partition.leader_epoch == 1
    assert _listed(h) == {}


def test_a_reassignment_that_only_reorders_completes_at_once() -> None:
    h = Harness().unfenced(1, 2, 3)
    h.create_topic("orders", assignments=[[1, 2, 3]])
    assert _reassign(h, "orders", 0, [3, 2, 1]) == (ErrorCode.none, None)
    partition = h.partition("orders")
    assert partition.replicas == (3, 2, 1) and partition.leader == 1
    assert not partition.adding_replicas and not partition.removing_replicas


def test_reassignment_refusals() -> None:
    h = Harness().unfenced(1, 2, 3)
    h.create_topic("orders", assignments=[[1, 2]])
    assert _reassign(h, "nope", 0, [1]) == (ErrorCode.unknown_topic_or_partition,
                                            "Unable to find a topic named nope.")
    assert _reassign(h, "orders", 5, [1]) == (ErrorCode.unknown_topic_or_partition,
                                              "Unable to find partition orders:5.")
    assert _reassign(h, "orders", 0, [1, 7]) == (
        ErrorCode.invalid_replica_assignment,
        "The manual partition assignment includes broker 7, but no such broker is registered.")
    assert _reassign(h, "orders", 0, []) == (ErrorCode.invalid_replica_assignment,
                                             "The manual partition assignment includes an empty replica list.")
    assert _reassign(h, "orders", 0, [1, 2, 3], allow_rf_change=False) == (
        ErrorCode.invalid_replication_factor, "The replication factor is changed from 2 to 3")
    assert _reassign(h, "orders", 0, None) == (
        ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress for this topic or partition.")
    assert h.written == [] and h.partition("orders").partition_epoch == 0


def test_cancelling_a_reassignment_reverts_to_the_original_replicas() -> None:
    h = Harness().unfenced(1, 2, 3, 4)
    h.create_topic("orders", assignments=[[1, 2, 3]])
    _reassign(h, "orders", 0, [2, 3, 4])
    assert _reassign(h, "orders", 0, None) == (ErrorCode.none, None)
    partition = h.partition("orders")
    # As in Kafka, the revert keeps the in-flight order (targets, then removing) minus the adding.
    assert partition.replicas == (2, 3, 1) and partition.isr == (1, 2, 3)
    assert not partition.adding_replicas and not partition.removing_replicas and partition.leader == 1
    assert _listed(h) == {}


def test_cancel_is_refused_when_only_added_replicas_are_in_sync_unless_unclean_election_is_allowed() -> None:
    h = Harness().unfenced(1, 2, 3, 4)
    h.create_topic("orders", assignments=[[1, 2]])
    _reassign(h, "orders", 0, [3, 4])
    h.alter_isr("orders", 0, [1, 2, 3])
    h.heartbeat(1, want_fence=True)
    h.heartbeat(2, want_fence=True)
    assert h.partition("orders").isr == (3,) and h.partition("orders").leader == 3
    assert _reassign(h, "orders", 0, None) == (
        ErrorCode.invalid_replica_assignment,
        "Unable to revert partition assignment for orders:0 because it would require an unclean leader election.")
    assert h.written == []
    _set_topic_config(h, "orders", "unclean.leader.election.enable", "true")
    assert _reassign(h, "orders", 0, None) == (ErrorCode.none, None)
    partition = h.partition("orders")
    # Both original replicas are fenced: the partition is offline until one comes back.
    assert partition.replicas == (1, 2) and partition.isr == (1,) and partition.leader == -1
    h.heartbeat(1)
    assert h.partition("orders").leader == 1


# -- ElectLeaders --------------------------------------------------------------------------


def _imbalanced(h: Harness) -> None:
    """orders-0 on [1, 2] led by 2 after broker 1 was fenced and came back."""
    h.create_topic("orders", assignments=[[1, 2]])
    h.heartbeat(1, want_fence=True)
    h.heartbeat(1)
    assert h.partition("orders").leader == 2 and h.partition("orders").isr == (2,)


def test_preferred_election_moves_leadership_back_to_the_first_replica() -> None:
    h = Harness().unfenced(1, 2)
    _imbalanced(h)
    assert h.controller.replication_control.preferred_replica_imbalance_count() == 1
    assert _elect(h, 0, {"orders": [0]}) == {("orders", 0): (ErrorCode.preferred_leader_not_available, None)}
    h.alter_isr("orders", 0, [2, 1])
    assert _elect(h, 0, {"orders": [0, 3], "nope": [0]}) == {
        ("orders", 0): (ErrorCode.none, None),
        ("orders", 3): (ErrorCode.unknown_topic_or_partition, "No such partition as orders-3"),
        ("nope", 0): (ErrorCode.unknown_topic_or_partition, "No such topic as nope"),
    }
    [record] = h.written
    assert isinstance(record, PartitionChangeRecord) and record.leader == 1
    assert h.controller.replication_control.preferred_replica_imbalance_count() == 0
    assert _elect(h, 0, {"orders": [0]}) == {("orders", 0): (ErrorCode.election_not_needed, None)}
    # Electing everywhere leaves out the partitions that need nothing.
    assert _elect(h, 0, None) == {}


def test_unclean_election_brings_a_leaderless_partition_back_with_an_out_of_sync_replica() -> None:
    h = Harness().unfenced(1, 2)
    h.create_topic("orders", assignments=[[1, 2]])
    assert _elect(h, 1, {"orders": [0]}) == {("orders", 0): (ErrorCode.election_not_needed, None)}
    h.alter_isr("orders", 0, [1])
    h.heartbeat(1, want_fence=True)
    assert h.partition("orders").leader == -1 and h.controller.offline_partitions_count() == 1
    assert _elect(h, 1, {"orders": [0]}) == {("orders", 0): (ErrorCode.none, None)}
    partition = h.partition("orders")
    assert partition.leader == 2 and partition.isr == (2,)
    assert partition.leader_recovery_state == LeaderRecoveryState.RECOVERING
    assert h.controller.offline_partitions_count() == 0


def test_unclean_election_with_no_live_replica_is_refused() -> None:
    h = Harness().unfenced(1, 2)
    h.create_topic("orders", assignments=[[1, 2]])
    h.heartbeat(2, want_fence=True)
    h.heartbeat(1, want_fence=True)
    assert _elect(h, 1, {"orders": [0]}) == {("orders", 0): (ErrorCode.eligible_leaders_not_available, None)}
    assert h.written == []


# -- periodic tasks ------------------------------------------------------------------------


def test_the_balancing_task_elects_preferred_leaders_when_auto_rebalance_is_on() -> None:
    h = Harness(leader_imbalance_check_interval_ms=1000, metadata_max_idle_interval_ms=0).unfenced(1, 2)
    _imbalanced(h)
    h.alter_isr("orders", 0, [2, 1])
    h.now_ms = 1000
    h.controller.tick(1000)
    h.commit()
    assert h.partition("orders").leader == 1

    off = Harness(auto_leader_rebalance_enable=False, leader_imbalance_check_interval_ms=1000,
                  metadata_max_idle_interval_ms=0).unfenced(1, 2)
    _imbalanced(off)
    off.alter_isr("orders", 0, [2, 1])
    off.controller.tick(10_000)
    off.commit()
    assert off.partition("orders").leader == 2


def test_the_unclean_recovery_task_only_touches_topics_that_allow_it() -> None:
    h = Harness(unclean_leader_election_interval_ms=1000, metadata_max_idle_interval_ms=0).unfenced(1, 2)
    h.create_topic("safe", assignments=[[1, 2]])
    h.create_topic("lossy", assignments=[[1, 2]], configs={"unclean.leader.election.enable": "false"})
    for topic in ("safe", "lossy"):
        h.alter_isr(topic, 0, [1])
    h.heartbeat(1, want_fence=True)
    _set_topic_config(h, "lossy", "unclean.leader.election.enable", "true")
    h.controller.tick(1000)
    h.commit()
    assert h.partition("safe").leader == -1
    assert h.partition("lossy").leader == 2 and h.partition("lossy").isr == (2,)


def test_a_cluster_wide_unclean_default_lets_fencing_elect_an_out_of_sync_leader_at_once() -> None:
    h = Harness(static_config={"unclean.leader.election.enable": "true"}).unfenced(1, 2)
    h.create_topic("orders", assignments=[[1, 2]])
    h.alter_isr("orders", 0, [1])
    h.heartbeat(1, want_fence=True)
    assert h.partition("orders").leader == 2


def test_the_no_op_writer_keeps_the_log_moving() -> None:
    h = Harness(metadata_max_idle_interval_ms=500)
    h.controller.tick(500)
    h.commit()
    assert h.written == [NoOpRecord()]
    assert h.controller.next_deadline_ms() is not None
    quiet = Harness(metadata_max_idle_interval_ms=0)
    quiet.controller.tick(10_000)
    quiet.commit()
    assert not any(isinstance(r, NoOpRecord) for r in quiet.written)


def test_an_unknown_election_type_refuses_the_whole_request() -> None:
    h = Harness().unfenced(1)
    h.create_topic("orders")
    refused = h.run(h.controller.elect_leaders(ElectLeadersRequest(
        election_type=i8(7), topic_partitions=(TopicPartitions(topic=TopicName("orders"), partitions=(i32(0),)),))))
    assert isinstance(refused, ControllerApiError)
    assert (refused.error_code, refused.message) == (ErrorCode.invalid_request, "Unknown election type 7")
    assert h.written == []
