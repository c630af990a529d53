"""KIP-966 eligible leader replicas: each rule of the PartitionChangeBuilder with ELR on, then the
same rules through the quorum controller (fencing, unfencing, a broker's return after a clean or
an unclean shutdown, AlterPartition) with eligible.leader.replicas.version=1 finalized."""

from __future__ import annotations

import uuid

from kraft_engine.controller.partition_change import (
    NO_LEADER,
    Election,
    PartitionChange,
    PartitionChangeBuilder,
)
from kraft_engine.controller.replication_control import BrokerHeartbeatReply
from kraft_engine.records import MetadataVersion, PartitionChangeRecord

from .harness import Harness
from .test_partition_change import _Partition

_MV = MetadataVersion.from_feature_level(25)  # 4.0-IV3
_RECOVERING = 1


def _elr_builder(partition: _Partition, *, alive: set[int], min_isr: int = 2) -> PartitionChangeBuilder:
    return PartitionChangeBuilder(partition, is_acceptable_leader=alive.__contains__, metadata_version=_MV,
                                  min_isr=min_isr, eligible_leader_replicas_enabled=True)


# -- the builder's rules -------------------------------------------------------------------------


def test_an_isr_shrinking_below_min_isr_keeps_the_replicas_that_left_eligible() -> None:
    partition = _Partition((1, 2, 3), (1, 2), 1)
    change = _elr_builder(partition, alive={1, 2, 3}).set_target_isr([1]).build()
    assert change == PartitionChange(isr=(1,), eligible_leader_replicas=(2,))
    # At min ISR nothing is kept.
    full = _Partition((1, 2, 3), (1, 2, 3), 1)
    assert _elr_builder(full, alive={1, 2, 3}).set_target_isr([1, 2]).build() == PartitionChange(isr=(1, 2))


def test_back_at_min_isr_the_elr_and_the_last_known_leader_are_cleared() -> None:
    partition = _Partition((1, 2, 3), (1,), 1, elr=(2,), last_known_elr=(3,))
    change = _elr_builder(partition, alive={1, 2, 3}).set_target_isr([1, 3]).build()
    assert change == PartitionChange(isr=(1, 3), eligible_leader_replicas=(), last_known_elr=())


def test_losing_the_last_isr_member_empties_the_isr_keeps_everyone_eligible_and_remembers_the_leader() -> None:
    partition = _Partition((1, 2, 3), (1,), 1, elr=(2,))
    change = _elr_builder(partition, alive={3}).set_target_isr([]).build()
    # 3 is alive but was never in the ISR or ELR: it may not lead.
    assert change == PartitionChange(leader=NO_LEADER, isr=(), eligible_leader_replicas=(1, 2), last_known_elr=(1,))
    # With ELR off the last member stays in the ISR (Kafka's behaviour before KIP-966).
    off = PartitionChangeBuilder(_Partition((1, 2, 3), (1,), 1), is_acceptable_leader={3}.__contains__,
                                 metadata_version=_MV, min_isr=2)
    assert off.set_target_isr([]).build() == PartitionChange(leader=NO_LEADER)


def test_with_an_empty_isr_a_live_elr_member_is_elected_and_becomes_the_isr() -> None:
    partition = _Partition((1, 2, 3), (), NO_LEADER, elr=(1, 2), last_known_elr=(1,))
    change = _elr_builder(partition, alive={2, 3}).build()
    assert change == PartitionChange(leader=2, isr=(2,), eligible_leader_replicas=(1,), last_known_elr=())


def test_an_elr_member_may_not_lead_while_the_isr_is_not_empty() -> None:
    # 3 is in the ISR but may not lead (say, its directory is offline): the partition stays
    # leaderless rather than elect 2 from the ELR past an ISR member that has the newer data.
    partition = _Partition((1, 2, 3), (3,), NO_LEADER, elr=(2,))
    assert _elr_builder(partition, alive={2}).build() is None


def test_a_replica_that_shut_down_uncleanly_leaves_the_elr_and_may_not_lead() -> None:
    partition = _Partition((1, 2, 3), (), NO_LEADER, elr=(1, 2), last_known_elr=(1,))
    # Even while it can lead (the controller also excludes it; the builder alone must not need
    # that), 1 leaves the ELR and is not elected: its log may have lost acknowledged data.
    change = _elr_builder(partition, alive={1}).set_unclean_shutdown_replicas([1]).build()
    assert change == PartitionChange(eligible_leader_replicas=(2,))
    change = _elr_builder(partition, alive=set()).set_unclean_shutdown_replicas([2]).build()
    assert change == PartitionChange(eligible_leader_replicas=(1,))


def test_the_last_known_leader_is_elected_back_uncleanly_when_isr_and_elr_are_empty() -> None:
    partition = _Partition((1, 2, 3), (), NO_LEADER, last_known_elr=(1,))
    assert _elr_builder(partition, alive={2, 3}).build() is None  # only the last leader may come back
    change = _elr_builder(partition, alive={1, 2}).build()
    assert change == PartitionChange(leader=1, isr=(1,), leader_recovery_state=_RECOVERING, last_known_elr=())


def test_an_unclean_election_clears_the_elr() -> None:
    partition = _Partition((1, 2, 3), (), NO_LEADER, elr=(2,))
    builder = _elr_builder(partition, alive={3}).set_election(Election.UNCLEAN)
    assert builder.build() == PartitionChange(leader=3, isr=(3,), leader_recovery_state=_RECOVERING,
                                              eligible_leader_replicas=())


def test_without_the_last_known_leader_the_last_known_elr_lists_the_replicas_that_left() -> None:
    partition = _Partition((1, 2, 3), (1,), 1, elr=(2,))
    builder = _elr_builder(partition, alive=set()).set_use_last_known_leader(False)
    change = builder.set_unclean_shutdown_replicas([2]).set_target_isr([]).build()
    assert change == PartitionChange(leader=NO_LEADER, isr=(), eligible_leader_replicas=(1,), last_known_elr=(2,))


def test_elr_members_are_listed_in_the_order_kafkas_hash_set_gives_them() -> None:
    # Kafka lists the ELR out of a java.util.HashSet: by bucket (id mod 16 here), then by
    # insertion; 17 and 1 share a bucket and 17 went in first.
    partition = _Partition((17, 1, 2, 3), (2, 17, 1), 2)
    change = _elr_builder(partition, alive={2}, min_isr=4).set_target_isr([2]).build()
    assert change == PartitionChange(isr=(2,), eligible_leader_replicas=(17, 1))


# -- through the quorum controller ---------------------------------------------------------------

_ELR = {"eligible.leader.replicas.version": (0, 1)}


def _elr_cluster(*, elr: bool = True) -> Harness:
    cluster = Harness(features={"eligible.leader.replicas.version": 1} if elr else {})
    for broker in (1, 2, 3):
        cluster.register(broker, supported=_ELR)
    for broker in (1, 2, 3):
        cluster.heartbeat(broker)
    cluster.create_topic("t", assignments=[[1, 2, 3]], configs={"min.insync.replicas": "2"})
    return cluster


def _fence(cluster: Harness, broker: int) -> list[object]:
    reply = cluster.heartbeat(broker, want_fence=True)
    assert isinstance(reply, BrokerHeartbeatReply) and reply.is_fenced
    return [r for r in cluster.written if isinstance(r, PartitionChangeRecord)]


def test_fencing_below_min_isr_fills_the_elr_and_unfencing_elects_from_it() -> None:
    cluster = _elr_cluster()
    _fence(cluster, 3)
    assert (cluster.partition("t").isr, cluster.partition("t").elr) == ((1, 2), ())
    _fence(cluster, 2)
    assert (cluster.partition("t").isr, cluster.partition("t").elr) == ((1,), (2,))
    _fence(cluster, 1)
    offline = cluster.partition("t")
    assert (offline.leader, offline.isr, offline.elr, offline.last_known_elr) == (NO_LEADER, (), (1, 2), (1,))
    # 2 comes back: it was eligible, so it leads, alone in the ISR; 1 stays eligible.
    assert cluster.heartbeat(2) == BrokerHeartbeatReply(True, False, False, False)
    back = cluster.partition("t")
    assert (back.leader, back.isr, back.elr, back.last_known_elr) == (2, (2,), (1,), ())
    # 3 comes back too, and it was never eligible: no change for it.
    cluster.heartbeat(3)
    assert cluster.partition("t").leader == 2


def test_with_elr_off_fencing_everyone_keeps_the_last_leader_in_the_isr() -> None:
    cluster = _elr_cluster(elr=False)
    for broker in (3, 2, 1):
        _fence(cluster, broker)
    offline = cluster.partition("t")
    assert (offline.leader, offline.isr, offline.elr, offline.last_known_elr) == (NO_LEADER, (1,), (), ())


def _offline_with_elr() -> Harness:
    cluster = _elr_cluster()
    for broker in (3, 2, 1):
        _fence(cluster, broker)
    assert cluster.partition("t").elr == (1, 2)
    return cluster


def test_a_broker_back_after_a_clean_shutdown_stays_eligible_and_leads() -> None:
    cluster = _offline_with_elr()
    cluster.register(2, supported=_ELR, incarnation=uuid.uuid4(), previous_epoch=cluster.epochs[2])
    assert [r for r in cluster.written if isinstance(r, PartitionChangeRecord)] == []
    cluster.heartbeat(2)
    assert (cluster.partition("t").leader, cluster.partition("t").isr) == (2, (2,))


def test_a_broker_back_without_a_clean_shutdown_leaves_the_elr() -> None:
    cluster = _offline_with_elr()
    cluster.register(2, supported=_ELR, incarnation=uuid.uuid4())  # no previous epoch
    [change] = [r for r in cluster.written if isinstance(r, PartitionChangeRecord)]
    assert change.eligible_leader_replicas == (1,)
    cluster.heartbeat(2)
    # Not eligible any more: the partition waits for 1, its last eligible replica.
    assert (cluster.partition("t").leader, cluster.partition("t").elr) == (NO_LEADER, (1,))
    cluster.heartbeat(1)
    assert (cluster.partition("t").leader, cluster.partition("t").isr) == (1, (1,))


def test_a_broker_that_lacks_elr_support_is_refused_when_elr_is_finalized() -> None:
    cluster = Harness(features={"eligible.leader.replicas.version": 1})
    refused = cluster.register(4)
    assert getattr(refused, "error_code", None) is not None and refused.error_code.name == "unsupported_version"


def test_alter_partition_below_min_isr_keeps_the_dropped_follower_eligible_until_the_isr_recovers() -> None:
    cluster = _elr_cluster()
    cluster.alter_isr("t", 0, [1])
    assert (cluster.partition("t").isr, cluster.partition("t").elr) == ((1,), (2, 3))
    cluster.alter_isr("t", 0, [1, 3])
    assert (cluster.partition("t").isr, cluster.partition("t").elr) == ((1, 3), ())


def test_a_min_insync_replicas_change_is_followed_by_a_clear_elr_record_whose_replay_empties_the_elrs() -> None:
    from kraft_engine.records import ClearElrRecord, ConfigRecord

    from .test_configuration_control import BROKER, SET, TOPIC, _alter

    cluster = _offline_with_elr()
    before = cluster.partition("t")
    assert (before.elr, before.last_known_elr) == ((1, 2), (1,))
    # A topic's change: its ConfigRecord, then Kafka's ClearElrRecord naming the topic.
    assert _alter(cluster, (TOPIC, "t", [("min.insync.replicas", SET, "3")])) == [(0, None)]
    assert cluster.written == [ConfigRecord(resource_type=TOPIC, resource_name="t", name="min.insync.replicas", value="3"),
                               ClearElrRecord(topic_name="t")]
    after = cluster.partition("t")
    assert (after.elr, after.last_known_elr, after.partition_epoch) == ((), (), before.partition_epoch + 1)
    assert (after.leader, after.isr, after.leader_epoch) == (before.leader, before.isr, before.leader_epoch)
    # A broker-level change clears every topic's: the empty name. A partition with nothing to clear keeps its epoch.
    assert _alter(cluster, (BROKER, "", [("min.insync.replicas", SET, "2")])) == [(0, None)]
    assert cluster.written[-1] == ClearElrRecord(topic_name="")
    assert cluster.partition("t").partition_epoch == after.partition_epoch
    # Another config, or ELR off: no ClearElrRecord.
    _alter(cluster, (TOPIC, "t", [("retention.ms", SET, "1000")]))
    assert not any(isinstance(r, ClearElrRecord) for r in cluster.written)
    off = _elr_cluster(elr=False)
    _alter(off, (TOPIC, "t", [("min.insync.replicas", SET, "1")]))
    assert not any(isinstance(r, ClearElrRecord) for r in off.written)
