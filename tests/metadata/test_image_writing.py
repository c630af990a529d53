"""MetadataImage.write: the records that rebuild an image, in a fixed order, at the right versions."""

from __future__ import annotations

import uuid

import pytest
from metadata_log_helpers import (
    PROVENANCE,
    dir_id,
    image_of,
    mv_record,
    partition,
    register_broker,
    topic,
    topic_id,
)

from kraft_engine.metadata import (
    ImageWriterOptions,
    MetadataDelta,
    MetadataImage,
    UnwritableMetadataError,
)
from kraft_engine.records.framing import decode_metadata_record, encode_metadata_record
from kraft_engine.records.metadata_records import (
    ConfigRecord,
    ControllerEndpoint,
    DelegationTokenRecord,
    FeatureLevelRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    TopicRecord,
    UserScramCredentialRecord,
)


def full_image(level: int = 25) -> MetadataImage:
    return image_of(
        # Deliberately out of the order write() uses.
        ProducerIdsRecord(broker_id=2, broker_epoch=100, next_producer_id=5000),
        ConfigRecord(resource_type=2, resource_name="zeta", name="cleanup.policy", value="compact"),
        topic("zeta", 2),
        partition(2, 0, replicas=(2, 1)),
        mv_record(level),
        FeatureLevelRecord(name="group.version", feature_level=1),
        register_broker(2),
        register_broker(1),
        topic("alpha", 1),
        partition(1, 1, replicas=(1, 2)),
        partition(1, 0, replicas=(2, 1)),
        FeatureLevelRecord(name="eligible.leader.replicas.version", feature_level=1),
    )


def replayed(records: list[tuple[object, int]]) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record, version in records:
        decoded, decoded_version = decode_metadata_record(encode_metadata_record(record, version))
        assert decoded_version == version
        delta.replay(decoded)
    delta.finish_snapshot()
    return delta.apply(PROVENANCE)


def test_metadata_version_comes_first_at_record_version_zero_then_a_fixed_order() -> None:
    records = full_image().records().records
    first, version = records[0]
    assert isinstance(first, FeatureLevelRecord) and first.name == "metadata.version" and version == 0
    kinds = [type(r).__name__ for r, _ in records]
    assert kinds == [
        "FeatureLevelRecord",
        "FeatureLevelRecord",
        "FeatureLevelRecord",
        "RegisterBrokerRecord",
        "RegisterBrokerRecord",
        "TopicRecord",
        "PartitionRecord",
        "PartitionRecord",
        "TopicRecord",
        "PartitionRecord",
        "ConfigRecord",
        "ProducerIdsRecord",
    ]
    assert [r.name for r, _ in records[:3]] == [  # type: ignore[union-attr]
        "metadata.version",
        "eligible.leader.replicas.version",
        "group.version",
    ]
    assert [r.broker_id for r, _ in records if isinstance(r, RegisterBrokerRecord)] == [1, 2]
    assert [r.name for r, _ in records if isinstance(r, TopicRecord)] == ["alpha", "zeta"]
    assert [(r.topic_id, r.partition_id) for r, _ in records if isinstance(r, PartitionRecord)] == [
        (topic_id(1), 0),
        (topic_id(1), 1),
        (topic_id(2), 0),
    ]


@pytest.mark.parametrize("level", [7, 8, 14, 17, 23, 25, 29])
def test_written_records_rebuild_an_equal_image(level: int) -> None:
    image = full_image(level)
    rebuilt = replayed(image.records().records)
    assert rebuilt.features == image.features
    assert rebuilt.cluster == image.cluster
    assert rebuilt.topics == image.topics
    assert rebuilt.configs == image.configs
    assert rebuilt.producer_ids == image.producer_ids
    assert rebuilt.to_bytes() == image.to_bytes()


@pytest.mark.parametrize(("level", "broker_version", "partition_version"), [(7, 1, 0), (8, 2, 0), (17, 3, 1), (23, 3, 2)])
def test_record_versions_follow_the_metadata_version(level: int, broker_version: int, partition_version: int) -> None:
    records = full_image(level).records().records
    assert {v for r, v in records if isinstance(r, RegisterBrokerRecord)} == {broker_version}
    assert {v for r, v in records if isinstance(r, PartitionRecord)} == {partition_version}
    assert {v for r, v in records if isinstance(r, TopicRecord | ConfigRecord | FeatureLevelRecord)} == {0}


def test_writing_at_an_older_metadata_version_refuses_to_lose_state() -> None:
    image = image_of(mv_record(25), register_broker(1, log_dirs=(dir_id(1),)))
    with pytest.raises(UnwritableMetadataError, match="online log directories"):
        image.write(_Discard(), ImageWriterOptions(16))
    lost: list[str] = []
    image.write(_Discard(), ImageWriterOptions(16, lost.append))
    assert lost == ["the online log directories of one or more brokers"]


def test_state_newer_than_the_target_version_is_a_loss() -> None:
    controller = RegisterControllerRecord(
        controller_id=9,
        incarnation_id=uuid.UUID(int=999),
        zk_migration_ready=False,
        end_points=(ControllerEndpoint(name="CONTROLLER", host="c", port=1, security_protocol=0),),
        features=(),
    )
    scram = UserScramCredentialRecord(name="bob", mechanism=2, salt=b"", stored_key=b"", server_key=b"", iterations=1)
    token = DelegationTokenRecord(
        owner="o", requester="r", renewers=(), issue_timestamp=0, max_timestamp=0, expiration_timestamp=0, token_id="tk"
    )
    image = image_of(mv_record(25), controller, scram, token)
    lost: list[str] = []
    image.write(_Discard(), ImageWriterOptions(10, lost.append))
    assert lost == ["controller registration data", "the SCRAM credentials of bob", "the delegation tokens tk"]


def test_an_empty_image_writes_nothing_and_a_non_empty_one_needs_a_metadata_version() -> None:
    assert MetadataImage.EMPTY.to_bytes() == b""
    assert MetadataImage.EMPTY.is_empty()
    with pytest.raises(Exception, match=r"no metadata\.version"):
        image_of(register_broker(1)).to_bytes()


def test_an_unimplemented_metadata_version_cannot_be_written_at() -> None:
    with pytest.raises(ValueError, match="feature level 30"):
        ImageWriterOptions(30)


def test_partition_directories_survive_a_round_trip_from_3_7_iv2() -> None:
    record = partition(1, 0, replicas=(1, 2), directories=(dir_id(1), dir_id(2)))
    image = image_of(mv_record(17), register_broker(1), register_broker(2), topic("t", 1), record)
    rebuilt = replayed(image.records().records)
    partition_after = rebuilt.topics.get_partition(topic_id(1), 0)
    assert partition_after is not None and partition_after.directories == (dir_id(1), dir_id(2))


class _Discard:
    def write(self, record: object, version: int) -> None:
        encode_metadata_record(record, version)
