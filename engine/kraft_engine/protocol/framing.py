"""Kafka's framing: a 4-byte big-endian size, then a header, then a kio-encoded body.

Both the listener and the client connection go through these functions, so the two sides can
never disagree on header versions. The one irregularity lives here too: ApiVersions responses
always carry response header v0, whatever the request version, because a client that does not yet
know which versions the broker speaks must still be able to read the answer.
"""

from __future__ import annotations

import struct
from io import BytesIO
from typing import Any

from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.static.primitive import i32

from kraft_engine.protocol.entities import API_VERSIONS_KEY, reader_for, writer_for
from kraft_engine.protocol.errors import MalformedFrame

__all__ = [
    "SIZE_PREFIX",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "peek_api",
    "peek_correlation_id",
    "response_correlation_id",
    "response_header_class",
]

_SIZE = struct.Struct(">i")
_API = struct.Struct(">hh")
_CORRELATION_AT_4 = struct.Struct(">4xi")
_CORRELATION_AT_0 = struct.Struct(">i")

SIZE_PREFIX = _SIZE
"""The frame size prefix: a signed big-endian int32 counting the bytes that follow it."""


def _frame(header_cls: type[Any], header: Any, body_cls: type[Any], body: Any) -> bytes:
    buffer = BytesIO()
    buffer.write(b"\0\0\0\0")
    writer_for(header_cls)(buffer, header)
    writer_for(body_cls)(buffer, body)
    frame = buffer.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    del frame  # release the export so getvalue() may proceed
    return buffer.getvalue()


def encode_request(request: Any, *, correlation_id: int, client_id: str | None) -> bytes:
    """A complete request frame (size prefix included), with the header version the request's
    class declares (v1 for non-flexible versions, v2 for flexible ones)."""
    cls = type(request)
    header_cls = cls.__header_schema__
    header = header_cls(
        request_api_key=cls.__api_key__,
        request_api_version=cls.__version__,
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    return _frame(header_cls, header, cls, request)


def response_header_class(response_cls: type[Any]) -> type[Any]:
    """The response header class for a response class; ApiVersions is always v0."""
    if response_cls.__api_key__ == API_VERSIONS_KEY:
        return ResponseHeaderV0
    header_cls: type[Any] = response_cls.__header_schema__
    return header_cls


def encode_response(response: Any, *, correlation_id: int) -> bytes:
    """A complete response frame (size prefix included)."""
    cls = type(response)
    header_cls = response_header_class(cls)
    return _frame(header_cls, header_cls(correlation_id=i32(correlation_id)), cls, response)


def peek_api(frame: bytes | memoryview) -> tuple[int, int]:
    """(api key, api version) of a request frame (without its size prefix), read before the
    header version is known. Raises MalformedFrame when the frame is too short."""
    if len(frame) < _API.size:
        raise MalformedFrame(f"request of {len(frame)} bytes is too short for a header")
    return _API.unpack_from(frame, 0)


def peek_correlation_id(frame: bytes | memoryview) -> int:
    """The correlation id of a request frame: both header versions put it at byte 4."""
    if len(frame) < _CORRELATION_AT_4.size:
        raise MalformedFrame(f"request of {len(frame)} bytes is too short for a header")
    return int(_CORRELATION_AT_4.unpack_from(frame, 0)[0])


def response_correlation_id(frame: bytes | memoryview) -> int:
    """The correlation id of a response frame: both header versions start with it."""
    if len(frame) < _CORRELATION_AT_0.size:
        raise MalformedFrame(f"response of {len(frame)} bytes is too short for a header")
    return int(_CORRELATION_AT_0.unpack_from(frame, 0)[0])


def decode_request(frame: bytes | memoryview, request_cls: type[Any]) -> tuple[Any, Any]:
    """(header, body) of a request frame whose api key and version select `request_cls`.
    The body must fill the frame exactly. Raises MalformedFrame with the reason."""
    header_cls = request_cls.__header_schema__
    try:
        header, offset = reader_for(header_cls)(frame, 0)
    except Exception as e:
        raise MalformedFrame(f"malformed request header: {e}", part="header") from e
    try:
        body, size = reader_for(request_cls)(frame, offset)
    except Exception as e:
        raise MalformedFrame(f"malformed request body: {e}", part="body") from e
    if offset + size != len(frame):
        raise MalformedFrame(
            f"request body leaves {len(frame) - offset - size} unread bytes", part="body"
        )
    return header, body


def decode_response(frame: bytes | memoryview, response_cls: type[Any]) -> Any:
    """The body of a response frame. Raises MalformedFrame with the reason."""
    header_cls = response_header_class(response_cls)
    try:
        _header, offset = reader_for(header_cls)(frame, 0)
        body, size = reader_for(response_cls)(frame, offset)
    except Exception as e:
        raise MalformedFrame(f"malformed {response_cls.__name__}: {e}", part="body") from e
    if offset + size != len(frame):
        raise MalformedFrame(
            f"{response_cls.__name__} leaves {len(frame) - offset - size} unread bytes", part="body"
        )
    return body

