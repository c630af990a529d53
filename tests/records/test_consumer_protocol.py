"""ConsumerProtocol payloads are read at the version they carry, and a client's unreadable bytes
are "unknown" (None), never an error."""

from __future__ import annotations

import io

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment, TopicPartition
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v3.data import (
    ConsumerProtocolSubscription as SubscriptionV3,
)
from kio.schema.types import TopicName
from kio.serial import entity_writer
from kio.static.primitive import i32

from kraft_engine.records.consumer_protocol import read_assignment, read_subscription


def _payload(version: int, entity: object) -> bytes:
    with io.BytesIO() as buffer:
        buffer.write(version.to_bytes(2, "big"))
        entity_writer(type(entity))(buffer, entity)
        return buffer.getvalue()


def test_a_subscription_and_an_assignment_are_read_at_their_version() -> None:
    subscription = read_subscription(_payload(1, ConsumerProtocolSubscription(
        topics=("a", "b"), user_data=None, owned_partitions=())))
    assert subscription is not None
    assert list(subscription.topics) == ["a", "b"]
    assignment = read_assignment(_payload(0, ConsumerProtocolAssignment(
        assigned_partitions=(TopicPartition(topic=TopicName("a"), partitions=(i32(0), i32(2))),), user_data=None)))
    assert assignment is not None
    assert [(str(t.topic), list(t.partitions)) for t in assignment.assigned_partitions] == [("a", [0, 2])]


def test_a_newer_version_is_read_as_the_newest_known() -> None:
    # A later version only appends fields: its bytes start as the newest version kio knows.
    data = _payload(3, SubscriptionV3(topics=("a",), user_data=None, owned_partitions=(), generation_id=i32(4),
                                      rack_id=None))
    newer = (99).to_bytes(2, "big") + data[2:] + b"\x00\x00\x00\x07"
    subscription = read_subscription(newer)
    assert subscription is not None
    assert list(subscription.topics) == ["a"]


def test_unreadable_bytes_are_unknown() -> None:
    assert read_subscription(b"") is None
    assert read_subscription(b"\x00") is None
    assert read_subscription((-1).to_bytes(2, "big", signed=True) + b"\x00") is None
    assert read_assignment(b"\x00\x00\xff\xff\xff") is None
