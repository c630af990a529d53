"""Metadata records in ApiMessageAndVersion framing: every record type at every version, as the
controller writes them and the loader, snapshots and dump-log read them back."""

import dataclasses
import importlib.util
import struct
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from record_strategies import entity_strategy

from kraft_engine.kafka_uuid import ZERO_UUID
from kraft_engine.records.framing import decode_metadata_record, encode_metadata_record
from kraft_engine.records.metadata_records import (
    BrokerEndpoint,
    BrokerFeature,
    ConfigRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    PartitionRecordV0,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from kraft_engine.records.metadata_registry import (
    METADATA_RECORD_TYPES,
    MetadataRecordError,
    UnknownRecordTypeError,
    UnsupportedRecordVersionError,
    record_to_json,
    record_type_for_api_key,
    record_type_of,
    to_latest,
    to_version,
)

ALL_VERSIONS = [
    pytest.param(record_type.version_classes[version], id=f"{record_type.name}-v{version}")
    for record_type in METADATA_RECORD_TYPES.values()
    for version in range(record_type.highest_version + 1)
]


@pytest.mark.parametrize("cls", ALL_VERSIONS)
@settings(max_examples=30)
@given(data=st.data())
def test_every_record_version_round_trips(cls: type[Any], data: st.DataObject) -> None:
    record = data.draw(entity_strategy(cls))
    record_type = record_type_of(record)
    version = cls.__version__
    encoded = encode_metadata_record(record)
    # Encoding the latest-version view at this version gives the same bytes.
    assert encode_metadata_record(to_latest(record), version) == encoded
    decoded, decoded_version = decode_metadata_record(encoded)
    assert decoded_version == version
    assert type(decoded) is record_type.latest_class
    assert to_version(decoded, version) == record
    assert encode_metadata_record(decoded, version) == encoded


def test_api_keys_and_type_names_match_kafka() -> None:
    names = {api_key: record_type.type_name for api_key, record_type in METADATA_RECORD_TYPES.items()}
    assert names == {
        0: "REGISTER_BROKER_RECORD",
        1: "UNREGISTER_BROKER_RECORD",
        2: "TOPIC_RECORD",
        3: "PARTITION_RECORD",
        4: "CONFIG_RECORD",
        5: "PARTITION_CHANGE_RECORD",
        7: "FENCE_BROKER_RECORD",
        8: "UNFENCE_BROKER_RECORD",
        9: "REMOVE_TOPIC_RECORD",
        10: "DELEGATION_TOKEN_RECORD",
        11: "USER_SCRAM_CREDENTIAL_RECORD",
        12: "FEATURE_LEVEL_RECORD",
        14: "CLIENT_QUOTA_RECORD",
        15: "PRODUCER_IDS_RECORD",
        17: "BROKER_REGISTRATION_CHANGE_RECORD",
        18: "ACCESS_CONTROL_ENTRY_RECORD",
        19: "REMOVE_ACCESS_CONTROL_ENTRY_RECORD",
        20: "NO_OP_RECORD",
        21: "ZK_MIGRATION_STATE_RECORD",
        22: "REMOVE_USER_SCRAM_CREDENTIAL_RECORD",
        23: "BEGIN_TRANSACTION_RECORD",
        24: "END_TRANSACTION_RECORD",
        25: "ABORT_TRANSACTION_RECORD",
        26: "REMOVE_DELEGATION_TOKEN_RECORD",
        27: "REGISTER_CONTROLLER_RECORD",
        28: "CLEAR_ELR_RECORD",  # Kafka 4.1 (KIP-966), not in the shared reference schemas
    }
    assert {k: t.highest_version for k, t in METADATA_RECORD_TYPES.items() if t.highest_version} == {
        0: 3,
        3: 2,
        5: 2,
        17: 2,
    }


def test_topic_record_bytes_match_kafka() -> None:
    record = TopicRecord(name="foo", topic_id=uuid.UUID(int=5))
    assert encode_metadata_record(record) == (
        bytes([1, 2, 0])  # frame version 1, api key 2, version 0
        + bytes([4])
        + b"foo"  # compact string: length + 1
        + uuid.UUID(int=5).bytes
        + bytes([0])  # no tagged fields
    )


def test_partition_change_writes_only_non_default_tagged_fields() -> None:
    topic_id = uuid.UUID(int=9)
    record = PartitionChangeRecord(partition_id=3, topic_id=topic_id, leader=2, isr=(2,))
    assert encode_metadata_record(record, 0) == (
        bytes([1, 5, 0])
        + struct.pack(">i", 3)
        + topic_id.bytes
        + bytes([2])  # two tagged fields, in tag order
        + bytes([0, 5, 2])  # tag 0 (Isr), size 5, compact array of one
        + struct.pack(">i", 2)
        + bytes([1, 4])  # tag 1 (Leader), size 4
        + struct.pack(">i", 2)
    )
    # Nothing but the partition: the leader default (-2, "no change") is not written.
    assert encode_metadata_record(PartitionChangeRecord(partition_id=3, topic_id=topic_id), 0).endswith(
        topic_id.bytes + bytes([0])
    )


def test_register_broker_versions_add_fields_in_order() -> None:
    record = RegisterBrokerRecord(
        broker_id=1,
        incarnation_id=uuid.UUID(int=7),
        broker_epoch=10,
        end_points=(BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9092, security_protocol=0),),
        features=(BrokerFeature(name="metadata.version", min_supported_version=7, max_supported_version=21),),
        rack=None,
    )
    v0 = encode_metadata_record(record, 0)
    v1 = encode_metadata_record(record, 1)
    v2 = encode_metadata_record(record, 2)
    v3 = encode_metadata_record(record, 3)
    # v1 appends InControlledShutdown after Fenced; v2 inserts IsMigratingZkBroker after BrokerId;
    # v3 only adds a tagged field, so with empty log dirs its body equals v2's.
    assert v1[3:] == v0[3:-1] + bytes([0, 0])
    assert v2[3:] == v1[3:7] + bytes([0]) + v1[7:]
    assert v3[3:] == v2[3:]
    assert v0[-2:] == bytes([1, 0])  # Fenced defaults to true; then no tagged fields
    assert v0[3:7] == struct.pack(">i", 1)
    assert v0[7:23] == uuid.UUID(int=7).bytes
    assert decode_metadata_record(v3)[0] == record


def test_writing_an_older_version_refuses_to_drop_values() -> None:
    base = PartitionRecord(
        partition_id=0,
        topic_id=uuid.UUID(int=1),
        replicas=(1,),
        isr=(1,),
        removing_replicas=(),
        adding_replicas=(),
    )
    with_dirs = dataclasses.replace(base, directories=(uuid.UUID(int=200),))
    with_elr = dataclasses.replace(base, eligible_leader_replicas=(2,))
    with pytest.raises(UnsupportedRecordVersionError, match="version 0 has no field Directories"):
        encode_metadata_record(with_dirs, 0)
    assert decode_metadata_record(encode_metadata_record(with_dirs, 1)) == (with_dirs, 1)
    with pytest.raises(UnsupportedRecordVersionError, match="version 1 has no field EligibleLeaderReplicas"):
        encode_metadata_record(with_elr, 1)
    assert decode_metadata_record(encode_metadata_record(with_elr, 2)) == (with_elr, 2)
    with pytest.raises(UnsupportedRecordVersionError, match="version 3 is not supported"):
        encode_metadata_record(base, 3)


def test_reading_an_older_version_fills_defaults() -> None:
    old = PartitionRecordV0(
        partition_id=1,
        topic_id=uuid.UUID(int=3),
        replicas=(1, 2),
        isr=(1, 2),
        removing_replicas=(),
        adding_replicas=(),
        leader=1,
    )
    record, version = decode_metadata_record(encode_metadata_record(old))
    assert version == 0
    assert isinstance(record, PartitionRecord)
    assert record.directories == ()
    assert record.eligible_leader_replicas is None
    assert (record.leader_epoch, record.partition_epoch, record.leader_recovery_state) == (-1, -1, 0)


def test_zero_uuids_decode_as_zero_not_none() -> None:
    record = TopicRecord(name="t", topic_id=ZERO_UUID)
    decoded, _ = decode_metadata_record(encode_metadata_record(record))
    assert isinstance(decoded, TopicRecord)
    assert decoded.topic_id == ZERO_UUID


def test_records_are_typed_by_class() -> None:
    assert record_type_of(TopicRecord(name="a", topic_id=ZERO_UUID)).api_key == 2
    with pytest.raises(TypeError, match="not a metadata record"):
        encode_metadata_record(object())
    with pytest.raises(UnknownRecordTypeError, match="api key 6"):
        record_type_for_api_key(6)


def _frame(*varints: int) -> bytes:
    return bytes(varints)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "truncated while reading the frame version"),
        (_frame(0, 2, 0), "frame version 0"),
        (_frame(2, 2, 0), "unknown frame version 2"),
        (_frame(1), "truncated while reading the api key"),
        (_frame(1, 2), "truncated while reading the version"),
        (_frame(1, 6, 0), "unknown metadata record api key 6"),
        (_frame(1, 3, 3), "PartitionRecord version 3 is not supported"),
        (_frame(1, 2, 0, 4) + b"fo", "TopicRecord version 0 body does not decode"),
        (_frame(1, 20, 0, 0, 0), "1 byte\\(s\\) of garbage after NoOpRecord"),
        (bytes([1, 0xFF, 0xFF, 0x03, 0]), "api key 65535 is too large"),
    ],
)
def test_bad_frames_are_refused_clearly(data: bytes, message: str) -> None:
    with pytest.raises(MetadataRecordError, match=message):
        decode_metadata_record(data)


def test_bad_frames_are_value_errors() -> None:
    assert issubclass(MetadataRecordError, ValueError)
    assert issubclass(UnknownRecordTypeError, MetadataRecordError)
    assert issubclass(UnsupportedRecordVersionError, MetadataRecordError)


def test_no_op_record_is_just_a_frame() -> None:
    assert encode_metadata_record(NoOpRecord()) == bytes([1, 20, 0, 0])


def test_json_matches_dump_log() -> None:
    topic_id = uuid.UUID(int=5)
    assert record_to_json(TopicRecord(name="foo", topic_id=topic_id)) == {
        "type": "TOPIC_RECORD",
        "version": 0,
        "data": {"name": "foo", "topicId": "AAAAAAAAAAAAAAAAAAAABQ"},
    }
    change = PartitionChangeRecord(partition_id=0, topic_id=topic_id, isr=(1, 2))
    assert record_to_json(change) == {
        "type": "PARTITION_CHANGE_RECORD",
        "version": 2,
        "data": {"partitionId": 0, "topicId": "AAAAAAAAAAAAAAAAAAAABQ", "isr": [1, 2]},
    }
    config = ConfigRecord(resource_type=2, resource_name="foo", name="cleanup.policy", value=None)
    assert record_to_json(config)["data"] == {
        "resourceType": 2,
        "resourceName": "foo",
        "name": "cleanup.policy",
        "value": None,
    }
    scram = UserScramCredentialRecord(
        name="alice", mechanism=1, salt=b"\x00\x01", stored_key=b"", server_key=b"k", iterations=4096
    )
    assert record_to_json(scram)["data"] == {
        "name": "alice",
        "mechanism": 1,
        "salt": "AAE=",
        "storedKey": "",
        "serverKey": "aw==",
        "iterations": 4096,
    }


def test_json_at_an_older_version_shows_only_its_fields() -> None:
    record = RegisterBrokerRecord(
        broker_id=1,
        incarnation_id=ZERO_UUID,
        broker_epoch=3,
        end_points=(BrokerEndpoint(name="PLAINTEXT", host="h", port=9092, security_protocol=0),),
        features=(),
        rack="r1",
        fenced=False,
    )
    assert record_to_json(record, 0) == {
        "type": "REGISTER_BROKER_RECORD",
        "version": 0,
        "data": {
            "brokerId": 1,
            "incarnationId": "AAAAAAAAAAAAAAAAAAAAAA",
            "brokerEpoch": 3,
            "endPoints": [{"name": "PLAINTEXT", "host": "h", "port": 9092, "securityProtocol": 0}],
            "features": [],
            "rack": "r1",
            "fenced": False,
        },
    }
    assert list(record_to_json(record)["data"]) == [  # type: ignore[call-overload]
        "brokerId",
        "isMigratingZkBroker",
        "incarnationId",
        "brokerEpoch",
        "endPoints",
        "features",
        "rack",
        "fenced",
        "inControlledShutdown",
    ]


_REPO = Path(__file__).resolve().parents[2]
_SCHEMAS = _REPO.parent / "shared" / "reference" / "kafka-schemas" / "metadata"


@pytest.mark.skipif(not _SCHEMAS.is_dir(), reason="Kafka's schemas (../shared/reference) are not present")
def test_generated_records_match_the_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("gen_records", _REPO / "tools" / "gen_records.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gen_records", generator)
    spec.loader.exec_module(generator)
    expected = generator.render(generator.load_all(_SCHEMAS))
    generated = (_REPO / "engine" / "kraft_engine" / "records" / "metadata_records.py").read_text()
    assert generated == expected, "metadata_records.py is stale: run tools/gen_records.py"
    assert '"about"' not in generated
