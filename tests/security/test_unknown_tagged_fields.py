"""Tagged fields we do not know are skipped, as Kafka's readers skip them: a newer client's request
and a newer controller's metadata record carry tags our schemas do not name (in the header, the
body and nested structs), and are served and replayed with every field we do know.

The "newer" messages are written by kio's own writer from copies of our classes that declare one
more tagged field in each struct: what a later Kafka version adds without bumping the version.
Each test first shows that kio's reader alone refuses those bytes (so the input really carries
unknown tags), then that ours reads them.
"""

# No `from __future__ import annotations`: kio's writer reads the field types of the classes below.
import io
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.metadata.v12.request import MetadataRequestTopic as MetadataRequestTopicV12
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32
from protocol_helpers import metadata_request

from kraft_engine.protocol import response_class
from kraft_engine.protocol.framing import decode_request, decode_response
from kraft_engine.records import RegisterBrokerRecord, decode_metadata_record, encode_metadata_record
from kraft_engine.records.metadata_records import BrokerEndpoint, BrokerFeature

_LATER = {"kafka_type": "string", "tag": 17}  # a tag no schema of ours names


@dataclass(frozen=True, slots=True, kw_only=True)
class _LaterRequestHeader:
    __type__: ClassVar = EntityType.header
    __flexible__: ClassVar[bool] = True
    request_api_key: i16 = field(metadata={"kafka_type": "int16"})
    request_api_version: i16 = field(metadata={"kafka_type": "int16"})
    correlation_id: i32 = field(metadata={"kafka_type": "int32"})
    client_id: str | None = field(metadata={"kafka_type": "string"})
    later: str = field(default="", metadata=_LATER)


# kio treats the header's client id as a legacy string by the class name only.
_LaterRequestHeader.__name__ = "RequestHeader"


@dataclass(frozen=True, slots=True, kw_only=True)
class _LaterMetadataRequestTopic:
    __type__: ClassVar = EntityType.nested
    __flexible__: ClassVar[bool] = True
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    name: str | None = field(metadata={"kafka_type": "string"})
    later: str = field(default="", metadata=_LATER)


@dataclass(frozen=True, slots=True, kw_only=True)
class _LaterMetadataRequest:
    __type__: ClassVar = EntityType.request
    __flexible__: ClassVar[bool] = True
    topics: tuple[_LaterMetadataRequestTopic, ...] | None
    allow_auto_topic_creation: bool = field(metadata={"kafka_type": "bool"})
    include_topic_authorized_operations: bool = field(metadata={"kafka_type": "bool"})
    later: str = field(default="", metadata=_LATER)


def _encode(cls: type[Any], entity: Any) -> bytes:
    with io.BytesIO() as buffer:
        entity_writer(cls)(buffer, entity)
        return buffer.getvalue()


def _later_metadata_frame(*, correlation_id: int, topics: list[str]) -> tuple[bytes, bytes]:
    """(a Metadata v12 request frame with an unknown tag in its header, body and every topic, its body)."""
    header = _encode(_LaterRequestHeader, _LaterRequestHeader(
        request_api_key=i16(3), request_api_version=i16(12), correlation_id=i32(correlation_id), client_id="later",
        later="header"))
    body = _encode(_LaterMetadataRequest, _LaterMetadataRequest(
        topics=tuple(_LaterMetadataRequestTopic(topic_id=None, name=t, later=f"topic {t}") for t in topics),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False, later="body"))
    return struct.pack(">i", len(header) + len(body)) + header + body, body


async def test_a_request_with_unknown_tagged_fields_is_served_and_the_connection_stays_open(make_listener, raw_peer):
    frame, body = _later_metadata_frame(correlation_id=7, topics=["orders", "payments"])
    with pytest.raises(KeyError, match="tag"):  # kio's reader alone refuses these bytes
        entity_reader(MetadataRequestV12)(body, 0)
    listener = await make_listener()
    peer = await raw_peer(listener)
    await peer.send(frame)
    response = await peer.read_frame()
    assert struct.unpack_from(">i", response)[0] == 7
    decoded = decode_response(response, response_class(3, 12))
    assert [t.name for t in decoded.topics] == ["orders", "payments"]
    assert decoded.cluster_id == "later"  # the header's client id, read past the header's unknown tag
    # The same connection serves the next request.
    await peer.send_request(metadata_request(12, ["next"]), correlation_id=8)
    assert struct.unpack_from(">i", await peer.read_frame())[0] == 8


def test_the_request_decoder_keeps_every_known_field() -> None:
    frame, _ = _later_metadata_frame(correlation_id=9, topics=["a", "b", "c"])
    header, request = decode_request(frame[4:], MetadataRequestV12)
    assert (header.correlation_id, header.client_id) == (9, "later")
    assert request == MetadataRequestV12(
        topics=tuple(MetadataRequestTopicV12(topic_id=None, name=n) for n in ("a", "b", "c")),  # type: ignore[arg-type]
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class _LaterBrokerEndpoint:
    __type__: ClassVar = EntityType.nested
    __flexible__: ClassVar[bool] = True
    name: str = field(metadata={"kafka_type": "string"})
    host: str = field(metadata={"kafka_type": "string"})
    port: int = field(metadata={"kafka_type": "uint16"})
    security_protocol: int = field(metadata={"kafka_type": "int16"})
    later: str = field(default="", metadata=_LATER)


@dataclass(frozen=True, slots=True, kw_only=True)
class _LaterRegisterBrokerRecord:
    """RegisterBrokerRecord v3 as a later writer might write it: one more tagged field in the
    record (beside its known tag 0, log dirs) and in each endpoint."""

    __type__: ClassVar = EntityType.data
    __flexible__: ClassVar[bool] = True
    broker_id: int = field(metadata={"kafka_type": "int32"})
    is_migrating_zk_broker: bool = field(default=False, metadata={"kafka_type": "bool"})
    incarnation_id: uuid.UUID = field(metadata={"kafka_type": "uuid"})
    broker_epoch: int = field(metadata={"kafka_type": "int64"})
    end_points: tuple[_LaterBrokerEndpoint, ...] = field(metadata={"kafka_type": "BrokerEndpoint"})
    features: tuple[BrokerFeature, ...] = field(metadata={"kafka_type": "BrokerFeature"})
    rack: str | None = field(metadata={"kafka_type": "string"})
    fenced: bool = field(default=True, metadata={"kafka_type": "bool"})
    in_controlled_shutdown: bool = field(default=False, metadata={"kafka_type": "bool"})
    log_dirs: tuple[uuid.UUID, ...] = field(default=(), metadata={"kafka_type": "uuid", "tag": 0})
    later: str = field(default="", metadata=_LATER)


def test_a_metadata_record_with_unknown_tagged_fields_replays_with_every_known_field() -> None:
    incarnation, log_dir = uuid.uuid4(), uuid.uuid4()
    features = (BrokerFeature(name="metadata.version", min_supported_version=1, max_supported_version=27),)
    later = _LaterRegisterBrokerRecord(
        broker_id=101, incarnation_id=incarnation, broker_epoch=42, rack="r1", features=features,
        end_points=(_LaterBrokerEndpoint(name="INTERNAL", host="127.0.0.1", port=9092, security_protocol=1,
                                         later="endpoint"),
                    _LaterBrokerEndpoint(name="CLIENTS", host="127.0.0.1", port=9093, security_protocol=3,
                                         later="endpoint")),
        log_dirs=(log_dir,), later="record")
    body = _encode(_LaterRegisterBrokerRecord, later)
    with pytest.raises(KeyError, match="tag"):  # kio's reader alone refuses these bytes
        entity_reader(RegisterBrokerRecord)(body, 0)
    framed = bytes([1, 0, 3]) + body  # frame version 1, api key 0, version 3

    record, version = decode_metadata_record(framed)
    expected = RegisterBrokerRecord(
        broker_id=101, incarnation_id=incarnation, broker_epoch=42, rack="r1", features=features,
        end_points=(BrokerEndpoint(name="INTERNAL", host="127.0.0.1", port=9092, security_protocol=1),
                    BrokerEndpoint(name="CLIENTS", host="127.0.0.1", port=9093, security_protocol=3)),
        log_dirs=(log_dir,))
    assert (record, version) == (expected, 3)
    # Without the unknown tags, the same record encodes as our writer encodes it.
    assert encode_metadata_record(record) == bytes([1, 0, 3]) + _encode(RegisterBrokerRecord, expected)

