"""MetadataDelta: replaying every record type into the image, refusing what does not fit, sharing the rest."""

from __future__ import annotations

import uuid

import pytest
from metadata_log_helpers import (
    PROVENANCE,
    change,
    dir_id,
    image_of,
    mv_record,
    partition,
    register_broker,
    topic,
    topic_id,
)

from kraft_engine.metadata import (
    ConfigResource,
    ConfigResourceType,
    MetadataDelta,
    MetadataImage,
    MetadataReplayError,
    TopicIdPartition,
    TopicPartition,
)
from kraft_engine.records.metadata_records import (
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    ControllerEndpoint,
    ControllerFeature,
    DelegationTokenRecord,
    EntityData,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    ProducerIdsRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    ZkMigrationStateRecord,
)


def cluster_with_topics() -> MetadataImage:
    return image_of(
        mv_record(25),
        register_broker(1),
        register_broker(2),
        register_broker(3),
        topic("orders", 1),
        partition(1, 0, replicas=(1, 2, 3)),
        partition(1, 1, replicas=(2, 3, 1)),
        topic("payments", 2),
        partition(2, 0, replicas=(3, 1, 2)),
        ConfigRecord(resource_type=2, resource_name="orders", name="retention.ms", value="1000"),
    )


def test_untouched_sub_images_are_the_same_objects() -> None:
    image = cluster_with_topics()
    new = image_of(register_broker(4), base=image)
    assert new.topics is image.topics
    assert new.features is image.features
    assert new.configs is image.configs
    assert new.producer_ids is image.producer_ids
    assert new.cluster is not image.cluster
    assert new.cluster.brokers[1] is image.cluster.brokers[1]


def test_a_partition_change_shares_every_other_topic() -> None:
    image = cluster_with_topics()
    new = image_of(change(1, 0, isr=(1, 2)), base=image)
    assert new.cluster is image.cluster
    assert new.topics is not image.topics
    assert new.topics.get_topic(topic_id(2)) is image.topics.get_topic(topic_id(2))
    orders = new.topics.get_topic_by_name("orders")
    assert orders is not None and orders is new.topics.get_topic(topic_id(1))
    assert orders.partitions[1] is image.topics.topics_by_name["orders"].partitions[1]
    assert orders.partitions[0].isr == (1, 2)


def test_apply_carries_the_provenance() -> None:
    delta = MetadataDelta(MetadataImage.EMPTY)
    delta.replay(mv_record(25))
    assert delta.apply(PROVENANCE).provenance == PROVENANCE
    assert delta.metadata_version_changed() == 25


def test_unknown_record_type_is_refused() -> None:
    delta = MetadataDelta(MetadataImage.EMPTY)
    with pytest.raises(MetadataReplayError, match="unknown metadata record type str"):
        delta.replay("TopicRecord")


def test_transaction_markers_are_not_image_records() -> None:
    with pytest.raises(MetadataReplayError, match="BeginTransactionRecord marks a metadata transaction"):
        MetadataDelta(MetadataImage.EMPTY).replay(BeginTransactionRecord(name="x"))


def test_noop_and_zk_migration_state_change_nothing() -> None:
    image = cluster_with_topics()
    delta = MetadataDelta(image)
    delta.replay(NoOpRecord())
    delta.replay(ZkMigrationStateRecord(zk_migration_state=0))
    new = delta.apply(PROVENANCE)
    assert new.topics is image.topics and new.cluster is image.cluster and new.features is image.features


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (change(7, 0, isr=(1,)), "PartitionChangeRecord 0 for unknown topic id"),
        (change(1, 9, isr=(1,)), "unknown partition 9 of topic 'orders'"),
        (partition(7, 0, replicas=(1,)), "PartitionRecord 0 for unknown topic id"),
        (RemoveTopicRecord(topic_id=topic_id(7)), "RemoveTopicRecord for unknown topic id"),
        (FenceBrokerRecord(id=9, epoch=100), "cannot fence broker 9: it is not registered"),
        (FenceBrokerRecord(id=1, epoch=99), "cannot fence broker 1 at epoch 99: its registered epoch is 100"),
        (UnfenceBrokerRecord(id=2, epoch=1), "cannot unfence broker 2 at epoch 1"),
        (BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=100, fenced=5), "unknown fenced value 5"),
        (
            BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=100, in_controlled_shutdown=-1),
            "unknown inControlledShutdown value -1",
        ),
        (FeatureLevelRecord(name="metadata.version", feature_level=3), "feature level 3"),
        (FeatureLevelRecord(name="metadata.version", feature_level=31), "4.4-IV0, which this engine does not"),
        (ConfigRecord(resource_type=99, resource_name="x", name="a", value="b"), "unknown resource type 99"),
        (RemoveAccessControlEntryRecord(id=uuid.UUID(int=777)), "unknown ACL id"),
    ],
)
def test_records_that_contradict_the_image_are_refused(record: object, message: str) -> None:
    delta = MetadataDelta(cluster_with_topics())
    with pytest.raises(MetadataReplayError, match=message):
        delta.replay(record)


def test_fencing_and_registration_changes_clone_the_broker() -> None:
    image = cluster_with_topics()
    fenced = image_of(FenceBrokerRecord(id=2, epoch=100), base=image)
    assert fenced.cluster.brokers[2].fenced and not image.cluster.brokers[2].fenced
    assert fenced.cluster.brokers[1] is image.cluster.brokers[1]
    unfenced = image_of(UnfenceBrokerRecord(id=2, epoch=100), base=fenced)
    assert not unfenced.cluster.brokers[2].fenced
    shutting = image_of(
        BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=100, fenced=1, in_controlled_shutdown=1),
        base=unfenced,
    )
    assert shutting.cluster.brokers[2].fenced and shutting.cluster.brokers[2].in_controlled_shutdown
    moved = image_of(
        BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=100, log_dirs=(dir_id(2), dir_id(1))), base=shutting
    )
    assert moved.cluster.brokers[2].directories == (dir_id(1), dir_id(2))
    gone = image_of(UnregisterBrokerRecord(broker_id=2, broker_epoch=100), base=moved)
    assert 2 not in gone.cluster.brokers


def test_a_new_registration_replaces_the_old_incarnation() -> None:
    image = cluster_with_topics()
    again = image_of(register_broker(1, epoch=200, fenced=True), base=image)
    assert again.cluster.broker_epoch(1) == 200
    assert again.cluster.brokers[1].fenced
    assert again.cluster.broker_epoch(42) == -1


def test_controller_registration() -> None:
    record = RegisterControllerRecord(
        controller_id=3000,
        incarnation_id=uuid.UUID(int=4242),
        zk_migration_ready=False,
        end_points=(ControllerEndpoint(name="CONTROLLER", host="c", port=9093, security_protocol=0),),
        features=(ControllerFeature(name="kraft.version", min_supported_version=0, max_supported_version=1),),
    )
    image = image_of(record, base=cluster_with_topics())
    controller = image.cluster.controllers[3000]
    assert controller.listeners[0].port == 9093
    supported = controller.supported_feature("kraft.version")
    assert supported is not None and supported.contains(1)


def test_removing_a_topic_removes_its_partitions_name_and_configs() -> None:
    image = cluster_with_topics()
    assert image.configs.configs(ConfigResource(ConfigResourceType.TOPIC, "orders")) == {"retention.ms": "1000"}
    new = image_of(RemoveTopicRecord(topic_id=topic_id(1)), base=image)
    assert new.topics.get_topic(topic_id(1)) is None
    assert new.topics.get_topic_by_name("orders") is None
    assert ConfigResource(ConfigResourceType.TOPIC, "orders") not in new.configs.data
    assert TopicIdPartition(topic_id(1), 0) not in set(new.topics.partitions_led_by(1))


def test_topic_created_and_removed_in_one_delta_leaves_no_trace() -> None:
    image = cluster_with_topics()
    delta = MetadataDelta(image)
    delta.replay(topic("temp", 9))
    delta.replay(partition(9, 0, replicas=(1,)))
    delta.replay(RemoveTopicRecord(topic_id=topic_id(9)))
    assert delta.topics_delta is not None
    assert not delta.topics_delta.deleted_topic_ids and not delta.topics_delta.created_topic_ids
    new = delta.apply(PROVENANCE)
    assert new.topics == image.topics


def test_topic_name_reused_without_deleting_the_old_topic_is_refused() -> None:
    delta = MetadataDelta(cluster_with_topics())
    delta.replay(topic("orders", 5))
    with pytest.raises(MetadataReplayError, match=r"'orders'.*collides with existing topic id"):
        delta.apply(PROVENANCE)


def test_changes_after_deletion_in_the_same_delta_are_refused() -> None:
    delta = MetadataDelta(cluster_with_topics())
    delta.replay(RemoveTopicRecord(topic_id=topic_id(1)))
    with pytest.raises(MetadataReplayError, match="unknown topic id"):
        delta.replay(change(1, 0, isr=(1,)))


def test_a_topic_removed_or_declared_again_right_after_its_partition_changes_is_not_changed_through_its_old_delta() -> None:
    """Partition records of one topic go to the same topic delta without looking it up again; a
    removal or a new TopicRecord for that topic in between must end that."""
    delta = MetadataDelta(cluster_with_topics())
    delta.replay(change(1, 0, isr=(1,)))
    delta.replay(RemoveTopicRecord(topic_id=topic_id(1)))
    with pytest.raises(MetadataReplayError, match="unknown topic id"):
        delta.replay(change(1, 0, isr=(1,)))
    delta = MetadataDelta(cluster_with_topics())
    delta.replay(change(1, 0, isr=(1,)))
    delta.replay(topic("orders-again", 1))  # the same id declared again, as a snapshot over an image does
    with pytest.raises(MetadataReplayError, match="unknown partition 0"):
        delta.replay(change(1, 0, isr=(1,)))
    delta.replay(partition(1, 0, replicas=(1,)))
    delta.replay(change(1, 0, leader=-1))
    assert delta.topics_delta is not None
    assert delta.topics_delta.changed_topics[topic_id(1)].partition(0).leader == -1  # type: ignore[union-attr]


def test_configs_set_delete_and_disappear_when_empty() -> None:
    broker = ConfigResource(ConfigResourceType.BROKER, "1")
    image = image_of(
        ConfigRecord(resource_type=4, resource_name="1", name="a", value="1"),
        ConfigRecord(resource_type=4, resource_name="1", name="b", value="2"),
        base=cluster_with_topics(),
    )
    assert image.configs.configs(broker) == {"a": "1", "b": "2"}
    image = image_of(ConfigRecord(resource_type=4, resource_name="1", name="a", value=None), base=image)
    assert image.configs.configs(broker) == {"b": "2"}
    image = image_of(ConfigRecord(resource_type=4, resource_name="1", name="b", value=None), base=image)
    assert broker not in image.configs.data


def test_features_other_than_metadata_version() -> None:
    image = image_of(FeatureLevelRecord(name="group.version", feature_level=1), base=cluster_with_topics())
    assert image.features.finalized_level("group.version") == 1
    assert image.features.finalized_level("metadata.version") == 25
    # kraft.version belongs to the raft layer's control records: inert here.
    image = image_of(FeatureLevelRecord(name="kraft.version", feature_level=1), base=image)
    assert "kraft.version" not in image.features.finalized_versions
    image = image_of(FeatureLevelRecord(name="group.version", feature_level=0), base=image)
    assert image.features.finalized_level("group.version") == 0
    assert "group.version" not in image.features.finalized_versions


def test_producer_ids_and_security_records() -> None:
    acl = AccessControlEntryRecord(
        id=uuid.UUID(int=777),
        resource_type=2,
        resource_name="orders",
        pattern_type=3,
        principal="User:alice",
        host="*",
        operation=3,
        permission_type=3,
    )
    scram = UserScramCredentialRecord(
        name="alice", mechanism=1, salt=b"s", stored_key=b"k", server_key=b"v", iterations=4096
    )
    token = DelegationTokenRecord(
        owner="User:alice",
        requester="User:alice",
        renewers=(),
        issue_timestamp=1,
        max_timestamp=3,
        expiration_timestamp=2,
        token_id="t1",
    )
    quota = ClientQuotaRecord(
        entity=(EntityData(entity_type="user", entity_name="alice"),), key="producer_byte_rate", value=1024.0, remove=False
    )
    image = image_of(
        ProducerIdsRecord(broker_id=1, broker_epoch=100, next_producer_id=2000),
        acl,
        scram,
        token,
        quota,
        base=cluster_with_topics(),
    )
    assert image.producer_ids.next_producer_id == 2000
    assert image.acls.acls[acl.id] is acl
    assert image.scram.credentials[(1, "alice")] is scram
    assert image.delegation_tokens.tokens["t1"] is token
    assert image.client_quotas.entities[(("user", "alice"),)] == {"producer_byte_rate": 1024.0}
    image = image_of(
        RemoveAccessControlEntryRecord(id=acl.id),
        RemoveUserScramCredentialRecord(name="alice", mechanism=1),
        RemoveDelegationTokenRecord(token_id="t1"),
        ClientQuotaRecord(entity=quota.entity, key="producer_byte_rate", value=0.0, remove=True),
        base=image,
    )
    assert image.acls.is_empty() and image.scram.is_empty() and image.delegation_tokens.is_empty()
    assert image.client_quotas.is_empty()
    with pytest.raises(MetadataReplayError, match="unknown SCRAM mechanism 0"):
        MetadataDelta(image).replay(RemoveUserScramCredentialRecord(name="alice", mechanism=0))


def test_finish_snapshot_removes_everything_the_snapshot_does_not_mention() -> None:
    image = image_of(
        ProducerIdsRecord(broker_id=1, broker_epoch=100, next_producer_id=2000),
        FeatureLevelRecord(name="group.version", feature_level=1),
        ConfigRecord(resource_type=4, resource_name="", name="x", value="y"),
        base=cluster_with_topics(),
    )
    delta = MetadataDelta(image)
    # The snapshot holds metadata.version, broker 2 and the payments topic only.
    delta.replay(mv_record(25))
    delta.replay(register_broker(2))
    delta.replay(topic("payments", 2))
    delta.replay(partition(2, 0, replicas=(3, 1, 2)))
    delta.finish_snapshot()
    new = delta.apply(PROVENANCE)
    assert sorted(new.cluster.brokers) == [2]
    assert list(new.topics.topics_by_name) == ["payments"]
    assert new.configs.is_empty()
    assert new.features.finalized_versions == {}
    assert new.features.metadata_version == 25
    assert new.producer_ids.next_producer_id == -1
    assert new.topics.replicas.brokers() == [1, 2, 3]
    assert list(new.topics.partitions_led_by(3)) == [TopicIdPartition(topic_id(2), 0)]
    assert list(new.topics.partitions_led_by(1)) == []


def test_local_changes_classify_what_a_delta_means_for_one_broker() -> None:
    image = cluster_with_topics()
    delta = MetadataDelta(image)
    delta.replay(change(1, 0, leader=2))  # broker 2 elected for orders-0
    delta.replay(change(1, 1, isr=(2, 3)))  # broker 2 still leads orders-1, ISR shrank
    delta.replay(change(2, 0, replicas=(3, 1), isr=(3, 1)))  # broker 2 leaves payments-0
    delta.replay(topic("new", 3))
    delta.replay(partition(3, 0, replicas=(1, 2), directories=(dir_id(1), dir_id(2))))  # broker 2 follows
    assert delta.topics_delta is not None
    changes = delta.topics_delta.local_changes(2)
    assert changes.deletes == {TopicPartition("payments", 0)}
    assert set(changes.leaders) == {TopicPartition("orders", 0), TopicPartition("orders", 1)}
    assert set(changes.elected_leaders) == {TopicPartition("orders", 0)}
    assert set(changes.followers) == {TopicPartition("new", 0)}
    topic_id_new, registration = changes.followers[TopicPartition("new", 0)]
    assert topic_id_new == topic_id(3) and registration.leader == 1
    assert changes.topic_ids == {"orders": topic_id(1), "new": topic_id(3)}
    assert changes.directory_ids == {TopicIdPartition(topic_id(3), 0): dir_id(2)}

    removal = MetadataDelta(image)
    removal.replay(RemoveTopicRecord(topic_id=topic_id(1)))
    assert removal.topics_delta is not None
    assert removal.topics_delta.local_changes(3).deletes == {TopicPartition("orders", 0), TopicPartition("orders", 1)}


def test_reverse_indexes_answer_membership_counts_and_order_after_changes() -> None:
    image = image_of(
        mv_record(25), *(register_broker(b) for b in (1, 2, 3)), topic("orders", 1),
        *(partition(1, p, replicas=(1 + p % 3, 1 + (p + 1) % 3)) for p in (4, 0, 3, 1, 2)),
    )
    changed = image_of(change(1, 3, isr=(2,), leader=2), change(1, 0, isr=(2,), leader=2), base=image)
    leaders = changed.topics.leaders
    assert [p.partition_id for p in changed.topics.partitions_led_by(2)] == [0, 1, 3, 4]
    assert leaders.count(2) == 4 and leaders.count(1) == 0
    assert leaders.contains(2, TopicIdPartition(topic_id(1), 3))
    assert not leaders.contains(2, TopicIdPartition(topic_id(1), 2))
    assert not leaders.contains(1, TopicIdPartition(topic_id(1), 0))
    assert not leaders.contains(7, TopicIdPartition(topic_id(1), 0))
    # The base image's indexes are untouched by the delta.
    assert [p.partition_id for p in image.topics.partitions_led_by(1)] == [0, 3]
    assert changed.topics.replicas.count(1) == image.topics.replicas.count(1) == 3
