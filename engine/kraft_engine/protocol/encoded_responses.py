"""Responses encoded once and answered many times: Kafka's cached Metadata answer.

Clients ask for Metadata over and over (every `metadata.max.age.ms`, after every leader change,
for every producer and consumer), and between two metadata changes the answer to the same
question is the same. Building and encoding it walks every topic and partition of the image in
Python each time. A handler may instead answer with an `EncodedResponse`: the response body
encoded once (kio's writer), with the error codes it carries counted once, which the listener
frames with each request's own response header (its correlation id) without touching the body.
The handler decides when bytes may be reused (same image, same question, same listener).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kraft_engine.protocol.entities import error_codes_of
from kraft_engine.protocol.framing import encode_response_body, frame_encoded_body

__all__ = ["EncodedResponse"]


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A response entity's encoded body, for any request with the same answer."""

    response_cls: type[Any]
    body: bytes
    error_counts: Mapping[ErrorCode, int]

    @classmethod
    def of(cls, response: Any) -> EncodedResponse:
        return cls(response_cls=type(response), body=encode_response_body(response),
                   error_counts=dict(error_codes_of(response)))

    def frame(self, *, correlation_id: int) -> bytes:
        """The complete frame (size prefix, this request's response header, the body)."""
        return frame_encoded_body(self.response_cls, self.body, correlation_id=correlation_id)
