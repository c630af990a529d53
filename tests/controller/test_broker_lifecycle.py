"""Brokers through the quorum controller: register, unfence, create topics, fence, shut down,
AlterPartition — each step checked in the records written and the response given."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.alter_partition.v3 import request as ap
from kio.schema.assign_replicas_to_dirs.v0 import request as ad
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from kraft_engine.controller import ControllerFault, ControllerResult, RecordList, encode_records
from kraft_engine.controller.partition_change import Election
from kraft_engine.controller.replication_control import BrokerHeartbeatReply
from kraft_engine.controller.results import VersionedRun
from kraft_engine.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionChangeRun,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    encode_metadata_record,
)

from .harness import LATEST_MV, Harness


def _unfenced_cluster(*brokers: int) -> Harness:
    cluster = Harness()
    for broker in brokers:
        cluster.register(broker, rack=f"r{broker % 2}")
    for broker in brokers:
        assert cluster.heartbeat(broker) == BrokerHeartbeatReply(True, False, False, False)
    return cluster


def test_a_broker_registers_fenced_and_is_unfenced_once_caught_up() -> None:
    cluster = Harness()
    reply = cluster.register(1)
    [record] = cluster.written
    assert isinstance(record, RegisterBrokerRecord) and record.fenced and record.broker_epoch == reply.broker_epoch
    behind = cluster.heartbeat(1, offset=reply.broker_epoch - 1)
    assert behind == BrokerHeartbeatReply(is_caught_up=False, is_fenced=True, in_controlled_shutdown=False,
                                          should_shut_down=False)
    assert cluster.written == []
    caught_up = cluster.heartbeat(1)
    assert caught_up == BrokerHeartbeatReply(True, False, False, False)
    assert cluster.written == [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=reply.broker_epoch, fenced=-1)]
    assert cluster.controller.fenced_broker_count() == 0


def test_registration_refusals() -> None:
    cluster = Harness()
    wrong = cluster.register(1, cluster_id="another")
    assert wrong.error_code == ErrorCode.inconsistent_cluster_id
    cluster.register(1)
    cluster.heartbeat(1)
    duplicate = cluster.register(1, incarnation=uuid.uuid4())
    assert duplicate.error_code == ErrorCode.duplicate_broker_registration
    assert cluster.written == []


def test_create_topic_places_replicas_on_unfenced_brokers_and_checks_the_replication_factor() -> None:
    cluster = _unfenced_cluster(1, 2, 3)
    result = cluster.create_topic("orders", 6, 3)
    assert result.error_code == ErrorCode.none and result.num_partitions == 6
    controller = cluster.controller
    topic_id = controller.replication_control.topic_id("orders")
    assert topic_id is not None
    leaders = []
    for p in range(6):
        partition = controller.replication_control.partition(topic_id, p)
        assert partition is not None
        assert sorted(partition.replicas) == [1, 2, 3] and partition.isr == partition.replicas
        leaders.append(partition.leader)
    assert set(leaders) == {1, 2, 3}  # leadership is spread
    too_many = cluster.create_topic("payments", 1, 4)
    assert too_many.error_code == ErrorCode.invalid_replication_factor
    assert "only 3 broker(s) are registered" in too_many.error_message
    assert cluster.create_topic("orders", 1, 1).error_code == ErrorCode.topic_already_exists
    assert cluster.create_topic("bad/name", 1, 1).error_code == ErrorCode.invalid_topic_exception


def test_a_broker_whose_session_expires_is_fenced_and_loses_its_leaderships() -> None:
    cluster = _unfenced_cluster(1, 2, 3)
    cluster.create_topic("orders", 3, 3)
    controller = cluster.controller
    topic_id = controller.replication_control.topic_id("orders")
    # Brokers 2 and 3 keep heartbeating; broker 1 goes silent.
    for now_ms in range(1000, 12001, 1000):
        cluster.now_ms = now_ms
        cluster.heartbeat(2)
        cluster.heartbeat(3)
        controller.tick(now_ms)
        cluster.commit()
    assert controller.fenced_broker_count() == 1
    for p in range(3):
        partition = controller.replication_control.partition(topic_id, p)
        assert partition is not None and 1 not in partition.isr and partition.leader in (2, 3)


def test_controlled_shutdown_moves_leadership_then_allows_shutdown() -> None:
    cluster = _unfenced_cluster(1, 2, 3)
    cluster.create_topic("orders", 3, 3)
    first = cluster.heartbeat(1, want_shut_down=True)
    assert first == BrokerHeartbeatReply(True, False, True, False)
    assert any(isinstance(r, PartitionChangeRecord) for r in cluster.written)
    assert not cluster.controller.replication_control.has_leaderships(1)
    # The others have not yet reported the offset of the leadership moves.
    stale = cluster.heartbeat(1, want_shut_down=True)
    assert stale.should_shut_down is False
    cluster.heartbeat(2)
    cluster.heartbeat(3)
    done = cluster.heartbeat(1, want_shut_down=True)
    assert done.should_shut_down is True and done.is_fenced is True


def test_alter_partition_validates_epochs_and_keeps_fenced_brokers_out_of_the_isr() -> None:
    cluster = _unfenced_cluster(1, 2, 3)
    cluster.create_topic("orders", 1, 3)
    controller = cluster.controller
    topic_id = controller.replication_control.topic_id("orders")
    partition = controller.replication_control.partition(topic_id, 0)
    assert partition is not None
    leader = partition.leader
    followers = [b for b in partition.replicas if b != leader]

    def alter(isr: list[int], *, leader_epoch: int = 0, partition_epoch: int | None = None) -> object:
        current = controller.replication_control.partition(topic_id, 0)
        token = controller.alter_partition(ap.AlterPartitionRequest(
            broker_id=BrokerId(leader), broker_epoch=i64(cluster.epochs[leader]),
            topics=(ap.TopicData(topic_id=topic_id, partitions=(ap.PartitionData(
                partition_index=i32(0), leader_epoch=i32(leader_epoch),
                new_isr_with_epochs=tuple(ap.BrokerState(broker_id=BrokerId(b), broker_epoch=i64(cluster.epochs[b])) for b in isr),
                leader_recovery_state=i8(0),
                partition_epoch=i32(current.partition_epoch if partition_epoch is None else partition_epoch),
            ),)),),
        ))
        return cluster.commit()[token].topics[0].partitions[0]

    shrunk = alter([leader, followers[0]])
    assert shrunk.error_code == ErrorCode.none and list(shrunk.isr) == [leader, followers[0]]
    assert shrunk.partition_epoch == 1 and shrunk.leader_epoch == 0
    assert alter([leader], leader_epoch=5).error_code == ErrorCode.fenced_leader_epoch
    assert alter([leader], partition_epoch=0).error_code == ErrorCode.invalid_update_version
    cluster.heartbeat(followers[1], want_fence=True)
    assert alter([leader, followers[0], followers[1]]).error_code == ErrorCode.ineligible_replica


def test_renounce_reverts_an_uncommitted_topic() -> None:
    cluster = _unfenced_cluster(1)
    controller = cluster.controller
    token = controller.create_topics(CreateTopicsRequest(topics=(CreatableTopic(
        name=TopicName("orders"), num_partitions=i32(1), replication_factor=i16(1), assignments=(), configs=(),
    ),)))
    assert controller.replication_control.topic_id("orders") is not None
    controller.handle_leader_change(leader_id=3001, epoch=2, now_ms=0, raft_is_leader=False)
    effects = controller.take_effects()
    assert [(f.token, f.error.error_code) for f in effects.failed] == [(token, ErrorCode.not_controller)]
    assert controller.replication_control.topic_id("orders") is None


def test_delete_topics_removes_the_topic_and_its_configs() -> None:
    cluster = _unfenced_cluster(1)
    controller = cluster.controller
    token = controller.create_topics(CreateTopicsRequest(topics=(CreatableTopic(
        name=TopicName("orders"), num_partitions=i32(2), replication_factor=i16(1), assignments=(),
        configs=(CreatableTopicConfig(name="retention.ms", value="1000"),),
    ),)))
    cluster.commit()
    del token
    topic_id = controller.replication_control.topic_id("orders")
    assert controller.configuration_control.configs(2, "orders") == {"retention.ms": "1000"}
    token = controller.delete_topics(DeleteTopicsRequest(
        topics=(DeleteTopicState(name=TopicName("orders"), topic_id=None),
                DeleteTopicState(name=None, topic_id=uuid.uuid4())),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
    ))
    results = cluster.commit()[token]
    assert [(r.topic_id, r.error_code) for r in results] == [
        (topic_id, ErrorCode.none), (results[1].topic_id, ErrorCode.unknown_topic_id)
    ]
    assert controller.replication_control.topic_id("orders") is None
    assert controller.replication_control.global_partition_count() == 0
    assert controller.configuration_control.configs(2, "orders") == {}
    # As Kafka writes it: one RemoveTopicRecord; its replay takes the configs along.
    assert cluster.written == [RemoveTopicRecord(topic_id=topic_id)]
    cluster.create_topic("orders", 1, 1)
    assert controller.configuration_control.configs(2, "orders") == {}


def test_renounce_reverts_an_uncommitted_fencing_in_the_reverse_indexes() -> None:
    cluster = _unfenced_cluster(1, 2, 3)
    cluster.create_topic("orders", 4, 3)
    controller = cluster.controller
    replication = controller.replication_control
    topic_id = cluster.topic_id("orders")
    everything = [(topic_id, p) for p in range(4)]
    led_by_1 = [p for p in range(4) if cluster.partition("orders", p).leader == 1]
    assert led_by_1 and replication.partitions_with_broker_in_isr(1) == everything
    # Fencing broker 1 is applied at once but not committed: the indexes follow it...
    controller.broker_heartbeat(BrokerHeartbeatRequest(
        broker_id=BrokerId(1), broker_epoch=i64(cluster.epochs[1]),
        current_metadata_offset=i64(controller.last_stable_offset()), want_fence=True, want_shut_down=False,
        offline_log_dirs=(),
    ), now_ms=cluster.now_ms)
    assert replication.partitions_with_broker_in_isr(1) == []
    assert not replication.has_leaderships(1)
    # ...and losing leadership before the commit puts broker 1 back everywhere it was.
    controller.handle_leader_change(leader_id=3001, epoch=2, now_ms=0, raft_is_leader=False)
    controller.take_effects()
    assert replication.partitions_with_broker_in_isr(1) == everything
    assert replication.has_leaderships(1)
    assert [p for p in range(4) if cluster.partition("orders", p).leader == 1] == led_by_1
    assert replication.partitions_with_broker_in_isr(2) == everything


def test_partitions_of_a_broker_come_in_kafka_order_across_topics() -> None:
    cluster = _unfenced_cluster(1, 2)
    for name in ("orders", "payments", "refunds"):
        cluster.create_topic(name, 3, 2)
    replication = cluster.controller.replication_control
    found = replication.partitions_with_broker_in_isr(1)
    # Kafka orders partitions by the topic id's text, then the partition id.
    assert found == sorted(found, key=lambda tp: (str(tp[0]), tp[1]))
    assert {tp[0] for tp in found} == {cluster.topic_id(n) for n in ("orders", "payments", "refunds")}
    assert len(found) == 9


def test_a_partition_record_with_a_negative_partition_id_is_refused() -> None:
    cluster = _unfenced_cluster(1)
    cluster.create_topic("orders")
    record = PartitionRecord(
        partition_id=-1, topic_id=cluster.topic_id("orders"), replicas=(1,), isr=(1,), removing_replicas=(),
        adding_replicas=(), leader=1, leader_epoch=0, partition_epoch=0,
    )
    with pytest.raises(RuntimeError, match="invalid partition id -1"):
        cluster.controller.replication_control.replay_partition(record, 99)
    assert cluster.controller.replication_control.partition(cluster.topic_id("orders"), -1) is None


def _builder_per_partition(
    replication: Any, *, remove: int | None, add: int | None, unclean_shutdown: int | None, partitions: list[Any],
) -> list[Any]:
    """Kafka's generateLeaderAndIsrUpdates as written: one PartitionChangeBuilder per partition."""
    records: list[Any] = []
    leaving = [b for b in (remove, unclean_shutdown) if b is not None]
    for topic_id, partition_id in partitions:
        partition = replication.partition(topic_id, partition_id)
        builder = replication._builder(partition, min_isr=replication._effective_min_isr(topic_id), exclude=remove,
                                       unclean_shutdown=unclean_shutdown, include=add)
        if replication.unclean_leader_election_enabled(topic_id):
            builder.set_election(Election.UNCLEAN)
        if leaving:
            builder.set_target_isr([r for r in partition.isr if r not in leaving])
        change = builder.build()
        if change is not None:
            records.append(replication._change_record((topic_id, partition_id), change))
    return records


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), mv=st.sampled_from([7, LATEST_MV]), elr=st.booleans())
def test_a_fan_out_writes_what_a_builder_per_partition_writes(data: st.DataObject, mv: int, elr: bool) -> None:
    """A fence, a controlled shutdown, an unfence or an unclean shutdown builds each distinct
    partition state's change once and gives it to every partition in that state
    (`ReplicationControlManager._leader_and_isr_updates`); on any cluster state, for every broker,
    its records are those of a builder per partition, record for record and in order.

    Kept whole in a `RecordList` (as the quorum controller's fan-outs are), the same records come
    as a `PartitionChangeRun`: read record by record they are the builder's, their bytes for raft
    are each record's own encoding, and the run's replay from its columns leaves the controller's
    partitions, reverse indexes and counts as replaying the records one by one; a run naming a
    partition twice is refused whole."""
    elr = elr and mv == LATEST_MV
    cluster = Harness(mv=mv, features={"eligible.leader.replicas.version": 1} if elr else None)
    brokers = (1, 2, 3, 4, 5)
    for broker in brokers:
        cluster.register(broker, dirs=data.draw(st.integers(1, 2), label=f"dirs of {broker}"),
                         supported={"eligible.leader.replicas.version": (0, 1)} if elr else None)
    for broker in brokers:
        cluster.heartbeat(broker)
    for topic in range(data.draw(st.integers(1, 3), label="topics")):
        rf = data.draw(st.integers(1, 4), label=f"replication factor of {topic}")
        replicas = st.permutations(brokers).map(lambda order, rf=rf: order[:rf])  # type: ignore[misc]
        assignments = data.draw(st.lists(replicas, min_size=1, max_size=5), label=f"topic {topic}")
        min_isr = data.draw(st.integers(1, 3), label=f"min.insync.replicas of {topic}")
        configs = {"min.insync.replicas": str(min(min_isr, rf))}
        if data.draw(st.booleans(), label=f"unclean election for {topic}"):
            configs["unclean.leader.election.enable"] = "true"
        cluster.create_topic(f"t{topic}", assignments=assignments, configs=configs)
        for partition_id, placed in enumerate(assignments):
            partition = cluster.partition(f"t{topic}", partition_id)
            isr = [b for b in placed if b == partition.leader or data.draw(st.booleans(), label="keep in isr")]
            if tuple(isr) != partition.isr:
                cluster.alter_isr(f"t{topic}", partition_id, isr)
    # A broker with two directories places each of its replicas on one (AssignReplicasToDirs), so
    # that partitions with the same replicas and ISR may differ in where a replica lives.
    replication = cluster.controller.replication_control
    for broker in brokers:
        if len(cluster.log_dirs[broker]) < 2:
            continue
        placements: dict[uuid.UUID, dict[uuid.UUID, list[int]]] = {d: {} for d in cluster.log_dirs[broker]}
        for topic_id, partition_id in replication.partitions_with_broker_in_isr(broker):
            directory = data.draw(st.sampled_from(cluster.log_dirs[broker]), label="directory")
            placements[directory].setdefault(topic_id, []).append(partition_id)
        cluster.run(cluster.controller.assign_replicas_to_dirs(ad.AssignReplicasToDirsRequest(
            broker_id=BrokerId(broker), broker_epoch=i64(cluster.epochs[broker]),
            directories=tuple(
                ad.DirectoryData(id_=directory, topics=tuple(
                    ad.TopicData(topic_id=t, partitions=tuple(ad.PartitionData(partition_index=i32(p)) for p in ps))
                    for t, ps in topics.items()))
                for directory, topics in placements.items()),
        )))
    # Some leaders become unacceptable: a broker in controlled shutdown, a fenced one.
    for broker in data.draw(st.lists(st.sampled_from(brokers), max_size=2, unique=True), label="shut down"):
        cluster.heartbeat(broker, want_shut_down=True)
    # And registrations fenced with their partitions not yet changed (as while a fence of several
    # brokers is generated): leaders that are in the ISR but no longer acceptable.
    for broker in data.draw(st.lists(st.sampled_from(brokers), max_size=2, unique=True), label="fenced"):
        cluster.controller.cluster_control.replay_fence_broker(
            FenceBrokerRecord(id=BrokerId(broker), epoch=i64(cluster.epochs[broker])), cluster.raft.next_append_offset()
        )
    # And directories gone offline with their partitions not yet changed: replicas that may not
    # lead while others on the same brokers, in the same ISR, may.
    for broker in data.draw(st.lists(st.sampled_from(brokers), max_size=2, unique=True), label="dir offline"):
        # (Its first directory stays; a broker with one reports another instead.)
        online = cluster.log_dirs[broker][:1] if len(cluster.log_dirs[broker]) > 1 else (uuid.uuid4(),)
        cluster.controller.cluster_control.replay_broker_registration_change(
            BrokerRegistrationChangeRecord(broker_id=BrokerId(broker), broker_epoch=i64(cluster.epochs[broker]),
                                           log_dirs=online),
            cluster.raft.next_append_offset(),
        )
    for broker in brokers:
        in_isr = replication.partitions_with_broker_in_isr(broker)
        leaderless = replication.leaderless_partitions()
        cases = [(broker, None, None, in_isr), (None, broker, None, leaderless)]
        if elr:
            cases.append((None, None, broker, in_isr + replication.partitions_with_broker_in_elr(broker)))
        for remove, add, unclean, partitions in cases:
            fanned: list[Any] = []
            replication._leader_and_isr_updates(
                broker_to_remove=remove, broker_to_add=add, broker_with_unclean_shutdown=unclean,
                partitions=[(t.int << 32) | p for t, p in partitions], records=fanned,
            )
            assert fanned == _builder_per_partition(replication, remove=remove, add=add, unclean_shutdown=unclean,
                                                    partitions=partitions)
            kept = RecordList()
            replication._leader_and_isr_updates(
                broker_to_remove=remove, broker_to_add=add, broker_with_unclean_shutdown=unclean,
                partitions=[(t.int << 32) | p for t, p in partitions], records=kept,
            )
            assert kept == fanned
            assert encode_records(kept) == [encode_metadata_record(r, v) for r, v in fanned]
            runs = [part.run for part in kept.frozen().parts if isinstance(part, VersionedRun)]
            assert sum(len(run) for run in runs) == len(fanned)
            for run in runs:
                once = list(run)
                assert _replayed(cluster, once, as_run=False, columns=run) == _replayed(cluster, once, as_run=False)
                twice = PartitionChangeRun(changes=run.changes, version=run.version, kinds=[*run.kinds, *run.kinds],
                                           partition_ids=[*run.partition_ids, *run.partition_ids],
                                           topic_ids=[*run.topic_ids, *run.topic_ids])
                before = _replayed(cluster, [], as_run=False, keys=once)
                with pytest.raises(RuntimeError, match="changes a partition twice"):
                    replication.replay_partition_change_run(twice, 0)
                assert _replayed(cluster, [], as_run=False, keys=once) == before
            # Replayed as one run (all at once), the records leave the controller as replayed one
            # by one; twice over, so that a run changes some partitions twice.
            changes = [r for r, _ in fanned if isinstance(r, PartitionChangeRecord)] * 2
            if changes:
                assert _replayed(cluster, changes, as_run=True) == _replayed(cluster, changes, as_run=False)


def _replayed(
    cluster: Harness, changes: list[PartitionChangeRecord], *, as_run: bool, columns: PartitionChangeRun | None = None,
    keys: list[PartitionChangeRecord] | None = None,
) -> dict[str, Any]:
    """What the controller's partitions and reverse indexes read after replaying `changes` (or the
    run `columns`), which are then reverted (the timeline snapshot taken before them); the
    partitions read are those of `keys` (default: of `changes`)."""
    registry = cluster.controller.events.snapshot_registry
    epoch = max(registry.epochs(), default=0) + 1_000_000
    registry.get_or_create_snapshot(epoch)
    replication = cluster.controller.replication_control
    if columns is not None:
        replication.replay_partition_change_run(columns, 0)
    elif as_run:
        replication.replay_partition_changes(changes, 0)
    else:
        for record in changes:
            replication.replay_partition_change(record, 0)
    keys_read = {(r.topic_id, int(r.partition_id)) for r in (changes if keys is None else keys)}
    state = {
        "partitions": {key: replication.partition(*key) for key in keys_read},
        "isr": {b: replication.partitions_with_broker_in_isr(b) for b in range(1, 6)},
        "elr": {b: replication.partitions_with_broker_in_elr(b) for b in range(1, 6)},
        "leaderless": replication.leaderless_partitions(),
        "offline": replication.offline_partition_count(),
        "imbalanced": replication.preferred_replica_imbalance_count(),
    }
    registry.revert_to_snapshot(epoch)
    registry.delete_snapshot(epoch)
    return state


def test_partitions_alike_but_for_where_a_replica_lives_get_their_own_leaders_on_a_fence() -> None:
    """The fan-out builds one change per distinct partition state; where each replica lives is part
    of that state. Two partitions with the same replicas, ISR and leader, whose other replica lives
    on an online directory in one and an offline one in the other: fencing the leader moves the
    first to the other replica and leaves the second without a leader."""
    cluster = Harness()
    for broker in (1, 2, 3):
        cluster.register(broker, dirs=2)
    for broker in (1, 2, 3):
        cluster.heartbeat(broker)
    cluster.create_topic("t", assignments=[[1, 2], [1, 2]])
    topic_id = cluster.topic_id("t")
    for partition_id, directory in ((0, 0), (1, 1)):
        for broker in (1, 2):
            cluster.run(cluster.controller.assign_replicas_to_dirs(ad.AssignReplicasToDirsRequest(
                broker_id=BrokerId(broker), broker_epoch=i64(cluster.epochs[broker]),
                directories=(ad.DirectoryData(id_=cluster.log_dirs[broker][directory], topics=(ad.TopicData(
                    topic_id=topic_id, partitions=(ad.PartitionData(partition_index=i32(partition_id)),)),)),),
            )))
    # Broker 2's second directory is gone (its partitions not yet changed, as within one event).
    cluster.controller.cluster_control.replay_broker_registration_change(
        BrokerRegistrationChangeRecord(broker_id=BrokerId(2), broker_epoch=i64(cluster.epochs[2]),
                                       log_dirs=cluster.log_dirs[2][:1]),
        cluster.raft.next_append_offset(),
    )
    records: list[Any] = []
    cluster.controller.replication_control.handle_broker_fenced(1, records)
    leaders = {r.partition_id: r.leader for r, _ in records if isinstance(r, PartitionChangeRecord)}
    assert leaders == {0: 2, 1: -1}


def test_a_run_naming_an_unknown_partition_is_a_fault_naming_its_record_and_offset() -> None:
    """The active controller replays a fan-out's run from its columns; a run it cannot take whole
    is replayed record by record, so a record that cannot be applied is the fatal fault it always
    was, naming that record's offset (and the run's bulk replay changed nothing before it refused)."""
    cluster = _unfenced_cluster(1, 2, 3)
    cluster.create_topic("t", assignments=[[1, 2, 3], [2, 3, 1]])
    topic_id = cluster.topic_id("t")
    replication = cluster.controller.replication_control
    before = [replication.partition(topic_id, p) for p in (0, 1)]
    change = PartitionChangeRecord(partition_id=0, topic_id=topic_id, isr=(1, 3), leader=1)
    records = RecordList()
    records.append_run(PartitionChangeRun(changes=[change], version=0, kinds=[0, 0, 0], partition_ids=[0, 7, 1],
                                          topic_ids=[topic_id] * 3))
    base = cluster.raft.next_append_offset()
    with pytest.raises(ControllerFault, match=f"PartitionChangeRecord record at offset {base + 1} on active controller"):
        cluster.controller.events.append_records(ControllerResult(records, None))
    assert [replication.partition(topic_id, p) for p in (0, 1)][1:] == before[1:]
