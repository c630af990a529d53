"""The compiled writer (`records/fast_writer.py`) writes exactly the bytes kio's generic writer writes,
for every metadata record at every version and for protocol entities with nested, nullable and
legacy (non-flexible) fields."""

import dataclasses
import datetime
import io
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.create_topics.v2 import request as create_topics_v2
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.create_topics.v7 import response as create_topics_v7_response
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta
from record_strategies import entity_strategy

from kraft_engine.records import PartitionChangeRecord, PartitionChangeRun, TopicRecord
from kraft_engine.records.fast_writer import encode_entity, write_uvarint
from kraft_engine.records.framing import (
    decode_metadata_record,
    decode_metadata_records,
    encode_metadata_record,
    encode_metadata_records,
    encode_partition_change_run,
)
from kraft_engine.records.metadata_registry import (
    METADATA_RECORD_TYPES,
    lowest_version_holding,
    record_version_of,
)

ALL_VERSIONS = [
    pytest.param(record_type.version_classes[version], id=f"{record_type.name}-v{version}")
    for record_type in METADATA_RECORD_TYPES.values()
    for version in range(record_type.highest_version + 1)
]


def _kio_bytes(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


@pytest.mark.parametrize("cls", ALL_VERSIONS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_record_version_encodes_as_kio_does(cls: type[Any], data: st.DataObject) -> None:
    record = data.draw(entity_strategy(cls))
    assert encode_entity(record) == _kio_bytes(record)


def _create_topics(module: Any, *, configs: tuple[Any, ...]) -> Any:
    return module.CreateTopicsRequest(
        topics=(
            module.CreatableTopic(
                name=TopicName("a"), num_partitions=i32(3), replication_factor=i16(2), assignments=(), configs=configs
            ),
            module.CreatableTopic(
                name=TopicName("b"), num_partitions=i32(-1), replication_factor=i16(-1),
                assignments=(module.CreatableReplicaAssignment(partition_index=i32(0), broker_ids=(BrokerId(1),)),),
                configs=(),
            ),
        ),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=1500)),
        validate_only=False,
    )


def test_protocol_entities_with_nested_nullable_tagged_and_legacy_fields_encode_as_kio_does() -> None:
    v2 = _create_topics(create_topics_v2, configs=(create_topics_v2.CreatableTopicConfig(name="x", value=None),))
    v7 = _create_topics(create_topics_v7, configs=(create_topics_v7.CreatableTopicConfig(name="x", value="é"),))
    response = create_topics_v7_response.CreateTopicsResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        topics=(
            create_topics_v7_response.CreatableTopicResult(
                name=TopicName("a"), topic_id=uuid.uuid4(), error_code=ErrorCode.none, error_message=None,
                topic_config_error_code=ErrorCode.invalid_config, num_partitions=i32(3), replication_factor=i16(2),
                configs=None,
            ),
            create_topics_v7_response.CreatableTopicResult(
                name=TopicName("b"), topic_id=uuid.uuid4(), error_code=ErrorCode.topic_already_exists,
                error_message="exists", num_partitions=i32(-1), replication_factor=i16(-1),
                configs=(create_topics_v7_response.CreatableTopicConfigs(
                    name="c", value=None, read_only=True, config_source=i8(5), is_sensitive=False),),
            ),
        ),
    )
    for entity in (v2, v7, response):
        assert encode_entity(entity) == _kio_bytes(entity)


@pytest.mark.parametrize("value", [-1, 2**31])
def test_an_unsigned_varint_kio_refuses_is_refused(value: int) -> None:
    with pytest.raises(ValueError, match="unsigned varint"):
        write_uvarint(bytearray(), value)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31 - 1))
def test_unsigned_varints_match_kio(value: int) -> None:
    from kio.serial.writers import write_unsigned_varint
    from kio.static.primitive import uvarint

    out = bytearray()
    write_uvarint(out, value)
    buffer = io.BytesIO()
    write_unsigned_varint(buffer, uvarint(value))
    assert bytes(out) == buffer.getvalue()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_a_batch_of_partition_changes_alike_but_for_their_ids_encodes_as_one_record_at_a_time(
    data: st.DataObject,
) -> None:
    """`encode_metadata_records` writes each record of a fence-like batch (PartitionChangeRecords
    whose other fields are the very same objects, as the controller's fan-out builds them, mixed
    with other records and with records whose leader alone differs) as `encode_metadata_record`
    writes it alone."""
    templates = data.draw(st.lists(entity_strategy(PartitionChangeRecord), min_size=1, max_size=4))
    # Same field objects, another leader: a writer that keyed its shapes without the leader
    # would give these the first template's bytes.
    templates += [dataclasses.replace(t, leader=i32(int(t.leader) + 1 if int(t.leader) < 2**31 - 1 else 0))
                  for t in templates]
    others = data.draw(st.lists(entity_strategy(TopicRecord), max_size=3))
    picks = data.draw(st.lists(
        st.tuples(st.integers(0, len(templates) + len(others) - 1), st.integers(0, 2**31 - 1), st.uuids()),
        min_size=1, max_size=40,
    ))
    batch: list[tuple[object, int]] = []
    for index, partition_id, topic_id in picks:
        if index >= len(templates):
            record: Any = others[index - len(templates)]
            batch.append((record, record_version_of(record)))
            continue
        record = dataclasses.replace(templates[index], partition_id=i32(partition_id), topic_id=topic_id)
        batch.append((record, lowest_version_holding(record)))
    assert encode_metadata_records(batch) == [encode_metadata_record(r, v) for r, v in batch]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_a_batch_of_partition_changes_decodes_and_encodes_as_one_record_at_a_time_through_runs(
    data: st.DataObject,
) -> None:
    """The same kind of batch, the other way and through the columns: `decode_metadata_records`
    gives what `decode_metadata_record` gives value by value (stretches of alike partition changes
    held as `PartitionChangeRun`s, any ids, any record version, other records between them), and
    a run's bytes (`encode_partition_change_run`) are its records' own encodings."""
    templates = data.draw(st.lists(entity_strategy(PartitionChangeRecord), min_size=1, max_size=4))
    templates += [dataclasses.replace(t, leader=i32(int(t.leader) + 1 if int(t.leader) < 2**31 - 1 else 0))
                  for t in templates]
    others = data.draw(st.lists(entity_strategy(TopicRecord), max_size=3))
    picks = data.draw(st.lists(
        st.tuples(st.integers(0, len(templates) + len(others) - 1), st.integers(-(2**31), 2**31 - 1), st.uuids(),
                  st.booleans()),
        min_size=1, max_size=40,
    ))
    values: list[bytes] = []
    for index, partition_id, topic_id, latest in picks:
        if index >= len(templates):
            values.append(encode_metadata_record(others[index - len(templates)]))
            continue
        record = dataclasses.replace(templates[index], partition_id=i32(partition_id), topic_id=topic_id)
        version = record_version_of(record) if latest else lowest_version_holding(record)
        values.append(encode_metadata_record(record, version))
    decoded = decode_metadata_records(values)
    expected = [decode_metadata_record(value)[0] for value in values]
    assert list(decoded) == expected
    assert [decoded[i] for i in range(len(values))] == expected
    runs = [part for part in getattr(decoded, "parts", ()) if isinstance(part, PartitionChangeRun)]
    for run in runs:
        assert encode_partition_change_run(run) == [encode_metadata_record(r, run.version) for r in run]
    assert sum(len(run) for run in runs) <= len(values)
