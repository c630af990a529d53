"""Kafka's Uuid text form: 22 characters of URL-safe base64 without padding.

Kafka reserves the all-zero Uuid (ZERO_UUID, "no id") and 0…01 (ONE_UUID, used as a sentinel for
metadata topic ids and "migrating" directories), and never hands out an id whose text starts with
'-', because such a string looks like a command-line flag. `random_uuid()` keeps all three promises.
"""

from __future__ import annotations

import base64
import uuid

__all__ = ["ONE_UUID", "RESERVED_UUIDS", "ZERO_UUID", "from_kafka_str", "random_uuid", "to_kafka_str"]

ZERO_UUID = uuid.UUID(int=0)
ONE_UUID = uuid.UUID(int=1)
# The lowest 100 Uuids are reserved by Kafka for sentinels (Uuid.RESERVED).
RESERVED_UUIDS = frozenset(uuid.UUID(int=i) for i in range(100))


def to_kafka_str(value: uuid.UUID) -> str:
    """Render a Uuid the way Kafka's `Uuid.toString()` does."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def from_kafka_str(text: str) -> uuid.UUID:
    """Parse Kafka's 22-character form; raises ValueError naming the input when it is not one."""
    if len(text) != 22:
        raise ValueError(f"{text!r} is not a Kafka Uuid: expected 22 base64 characters, got {len(text)}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (ValueError, TypeError) as e:
        raise ValueError(f"{text!r} is not a Kafka Uuid: {e}") from None
    if len(raw) != 16 or to_kafka_str(uuid.UUID(bytes=raw)) != text:
        raise ValueError(f"{text!r} is not a Kafka Uuid: not a canonical URL-safe base64 encoding")
    return uuid.UUID(bytes=raw)


def random_uuid() -> uuid.UUID:
    """A fresh random Uuid that is neither reserved nor renders with a leading '-'."""
    while True:
        value = uuid.uuid4()
        if value not in RESERVED_UUIDS and not to_kafka_str(value).startswith("-"):
            return value
