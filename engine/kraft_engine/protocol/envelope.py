"""Kafka's forwarding envelope: what a controller needs to read the principal a broker forwards.

Apache Kafka brokers send the admin requests they cannot serve (CreateTopics, CreatePartitions,
IncrementalAlterConfigs, ...) to the active controller wrapped in an Envelope (KIP-590): the
client's request with its header as bytes, the client's principal serialized by the broker's
principal builder (a version-prefixed DefaultPrincipalData), and the client's address. The
listener unwraps it (`Listener.serve_envelope`); this module reads the principal.
"""

from __future__ import annotations

import struct
from io import BytesIO

from kio.schema.default_principal_data.v0.data import DefaultPrincipalData
from kio.schema.errors import ErrorCode
from kio.serial.errors import DecodeError

from kraft_engine.protocol.bounds_checking import check_entity_bounds
from kraft_engine.protocol.entities import reader_for, writer_for
from kraft_engine.protocol.errors import KafkaProtocolError, MalformedFrame

__all__ = ["ANONYMOUS", "EnvelopeError", "decode_principal", "encode_principal"]

ANONYMOUS = "User:ANONYMOUS"
"""Kafka's principal of an unauthenticated (PLAINTEXT) connection."""

_VERSION = struct.Struct(">h")


class EnvelopeError(KafkaProtocolError):
    """An Envelope that cannot be served; `error_code` is what the EnvelopeResponse carries."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def decode_principal(data: bytes | None) -> str:
    """`Type:name` of a forwarded principal (Kafka's `KafkaPrincipal.toString()`)."""
    if data is None:
        raise EnvelopeError(ErrorCode.invalid_request, "the Envelope carries no principal")
    if len(data) < _VERSION.size:
        raise EnvelopeError(ErrorCode.invalid_request, "the forwarded principal is too short")
    (version,) = _VERSION.unpack_from(data, 0)
    if version != 0:
        raise EnvelopeError(ErrorCode.invalid_request, f"unknown DefaultPrincipalData version {version}")
    try:
        end = check_entity_bounds(DefaultPrincipalData, data, _VERSION.size)
        principal, _size = reader_for(DefaultPrincipalData)(data, _VERSION.size)
    except (MalformedFrame, DecodeError, ValueError, UnicodeDecodeError) as e:  # kio's InvalidUnicode is a DecodeError
        raise EnvelopeError(ErrorCode.invalid_request, f"malformed forwarded principal: {e}") from e
    if end != len(data):
        raise EnvelopeError(ErrorCode.invalid_request, "the forwarded principal has trailing bytes")
    return f"{principal.type_}:{principal.name}"


def encode_principal(principal: str, *, token_authenticated: bool = False) -> bytes:
    """A principal as a forwarding broker serializes it (version 0 prefix, then the data)."""
    type_, _, name = principal.partition(":")
    buffer = BytesIO()
    buffer.write(_VERSION.pack(0))
    writer_for(DefaultPrincipalData)(
        buffer, DefaultPrincipalData(type_=type_, name=name, token_authenticated=token_authenticated)
    )
    return buffer.getvalue()
