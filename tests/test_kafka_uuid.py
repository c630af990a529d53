"""Kafka Uuid text form: round trip, the 22-character shape, and the reserved/flag-like refusals."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft_engine.kafka_uuid import RESERVED_UUIDS, ZERO_UUID, from_kafka_str, random_uuid, to_kafka_str


@given(st.uuids(allow_nil=True) | st.builds(lambda b: uuid.UUID(bytes=b), st.binary(min_size=16, max_size=16)))
def test_round_trip(value: uuid.UUID) -> None:
    text = to_kafka_str(value)
    assert len(text) == 22
    assert from_kafka_str(text) == value


def test_matches_kafka_rendering_of_zero() -> None:
    assert to_kafka_str(ZERO_UUID) == "AAAAAAAAAAAAAAAAAAAAAA"


def test_random_uuid_is_never_reserved_nor_flag_like() -> None:
    for _ in range(2000):
        value = random_uuid()
        assert value not in RESERVED_UUIDS
        assert not to_kafka_str(value).startswith("-")


@pytest.mark.parametrize("text", ["", "short", "A" * 23, "!!!!!!!!!!!!!!!!!!!!!!", "AAAAAAAAAAAAAAAAAAAAAB"])
def test_malformed_text_is_refused_with_the_input_named(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Kafka Uuid"):
        from_kafka_str(text)
