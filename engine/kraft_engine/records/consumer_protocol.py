"""Reading Kafka's ConsumerProtocol payloads: the subscription a consumer sends in JoinGroup and
the assignment its leader hands out in SyncGroup.

Both are a 2-byte version, then kio's entity of that version (a newer version than kio knows is
read as the newest it knows: later versions only append fields). The coordinator reads a member's
subscribed topics, the admin tools a member's assigned partitions; the bytes come from clients,
so anything unreadable is "unknown" (None), never an error. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment as _AssignmentV0
from kio.schema.consumer_protocol_assignment.v1.data import ConsumerProtocolAssignment as _AssignmentV1
from kio.schema.consumer_protocol_assignment.v2.data import ConsumerProtocolAssignment as _AssignmentV2
from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment as _AssignmentV3
from kio.schema.consumer_protocol_subscription.v0.data import (
    ConsumerProtocolSubscription as _SubscriptionV0,
)
from kio.schema.consumer_protocol_subscription.v1.data import (
    ConsumerProtocolSubscription as _SubscriptionV1,
)
from kio.schema.consumer_protocol_subscription.v2.data import (
    ConsumerProtocolSubscription as _SubscriptionV2,
)
from kio.schema.consumer_protocol_subscription.v3.data import (
    ConsumerProtocolSubscription as _SubscriptionV3,
)
from kio.serial import entity_reader

__all__ = ["read_assignment", "read_subscription"]

_SUBSCRIPTIONS: Mapping[int, type[Any]] = {0: _SubscriptionV0, 1: _SubscriptionV1, 2: _SubscriptionV2,
                                           3: _SubscriptionV3}
_ASSIGNMENTS: Mapping[int, type[Any]] = {0: _AssignmentV0, 1: _AssignmentV1, 2: _AssignmentV2, 3: _AssignmentV3}


def read_subscription(data: bytes) -> Any | None:
    """The ConsumerProtocolSubscription in `data` (None: unreadable)."""
    return _read(data, _SUBSCRIPTIONS)


def read_assignment(data: bytes) -> Any | None:
    """The ConsumerProtocolAssignment in `data` (None: unreadable)."""
    return _read(data, _ASSIGNMENTS)


def _read(data: bytes, classes: Mapping[int, type[Any]]) -> Any | None:
    if len(data) < 2:
        return None
    cls = classes.get(min(int.from_bytes(data[:2], "big", signed=True), max(classes)))
    if cls is None:
        return None
    try:
        entity: Any
        entity, _ = entity_reader(cls)(data, 2)
    except Exception:  # a client's bytes: anything unreadable means "unknown"
        return None
    return entity
