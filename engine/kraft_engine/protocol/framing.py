"""Kafka's framing: a 4-byte big-endian size, then a header, then a kio-encoded body.

Both the listener and the client connection go through these functions, so the two sides can
never disagree on header versions. The one irregularity lives here too: ApiVersions responses
always carry response header v0, whatever the request version, because a client that does not yet
know which versions the broker speaks must still be able to read the answer.

Every frame from a peer is bounds-checked (`bounds_checking`) before kio's native reader sees
it, because that reader aborts the process on a length it cannot allocate. A frame larger than a
few hundred KiB can be read step by step (`decode_request_stepwise`): each large top-level array
is read item by item between yields, so one big request never holds the event loop for the
whole decode.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from collections.abc import Generator
from io import BytesIO
from typing import Any

from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.static.primitive import i32

from kraft_engine.protocol.bounds_checking import ArrayExtent, check_entity_bounds, entity_arrays
from kraft_engine.protocol.entities import API_VERSIONS_KEY, reader_for, writer_for
from kraft_engine.protocol.errors import MalformedFrame

__all__ = [
    "SIZE_PREFIX",
    "check_request",
    "check_request_arrays",
    "decode_request",
    "decode_request_stepwise",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_body",
    "encode_response_payload",
    "frame_encoded_body",
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


def encode_response_body(response: Any) -> bytes:
    """A response's body alone (no size prefix, no header), for `frame_encoded_body` to frame."""
    buffer = BytesIO()
    writer_for(type(response))(buffer, response)
    return buffer.getvalue()


def frame_encoded_body(response_cls: type[Any], body: bytes, *, correlation_id: int) -> bytes:
    """The frame `encode_response` makes, around a body `encode_response_body` encoded earlier."""
    header_cls = response_header_class(response_cls)
    buffer = BytesIO()
    buffer.write(b"\0\0\0\0")
    writer_for(header_cls)(buffer, header_cls(correlation_id=i32(correlation_id)))
    buffer.write(body)
    frame = buffer.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    del frame  # release the export so getvalue() may proceed
    return buffer.getvalue()


def encode_response_payload(response: Any, *, correlation_id: int) -> bytes:
    """A response's header and body without the size prefix: what an EnvelopeResponse carries."""
    return encode_response(response, correlation_id=correlation_id)[_SIZE.size:]


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


def _reader_failed(error: BaseException) -> bool:
    """True for any failure of kio's reader: an Exception, or a Rust panic, which pyo3 raises as
    a BaseException. Interpreter exits and cancellations pass through."""
    return not isinstance(error, (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError))


def _read_header(frame: bytes | memoryview, request_cls: type[Any]) -> tuple[Any, int]:
    try:
        header, offset = reader_for(request_cls.__header_schema__)(frame, 0)
    except BaseException as e:
        if not _reader_failed(e):
            raise
        raise MalformedFrame(f"malformed request header: {e}", part="header") from e
    return header, offset


def check_request(frame: bytes | memoryview, request_cls: type[Any]) -> int:
    """Bounds-check the header and body of a request frame (no size prefix) without decoding
    them; return where the header ends. Raises MalformedFrame with the reason.

    Bytes after the body are ignored, as Kafka's request parser ignores them (it reads the body
    from the buffer and never looks at what remains): librdkafka's Metadata v9+ request for all
    topics leaves three zero bytes of its array-length placeholder behind, and Kafka serves it."""
    try:
        header_end = check_entity_bounds(request_cls.__header_schema__, frame, 0)
    except MalformedFrame as e:
        raise MalformedFrame(f"malformed request header: {e}", part="header") from e
    try:
        check_entity_bounds(request_cls, frame, header_end)
    except MalformedFrame as e:
        raise MalformedFrame(f"malformed request body: {e}", part="body") from e
    return header_end


def check_request_arrays(frame: bytes | memoryview, request_cls: type[Any]) -> list[ArrayExtent]:
    """`check_request`, then where the body's top-level arrays of entities lie, for
    `decode_request_stepwise`. Both walks visit every item in Python, so the listener runs this
    for a large frame in a worker thread, away from the event loop."""
    header_end = check_request(frame, request_cls)
    return entity_arrays(request_cls, frame, header_end)


def decode_request(frame: bytes | memoryview, request_cls: type[Any], *, checked: bool = False) -> tuple[Any, Any]:
    """(header, body) of a request frame whose api key and version select `request_cls`; bytes
    after the body are ignored (`check_request`). Raises MalformedFrame with the reason. `checked`: the
    caller already ran `check_request` on this frame."""
    if not checked:
        check_request(frame, request_cls)
    header, offset = _read_header(frame, request_cls)
    try:
        body, _size = reader_for(request_cls)(frame, offset)
    except BaseException as e:
        if not _reader_failed(e):
            raise
        raise MalformedFrame(f"malformed request body: {e}", part="body") from e
    return header, body


def decode_request_stepwise(
    frame: bytes | memoryview, request_cls: type[Any], *, arrays: list[ArrayExtent], items_per_step: int
) -> Generator[None, None, tuple[Any, Any]]:
    """`decode_request` of a frame whose `arrays` `check_request_arrays` found, yielding after
    every `items_per_step` items of each large top-level array; the (header, body) is the
    generator's return value. The arrays are read with kio's item reader, the rest of the body
    with kio's reader over a copy in which those arrays are empty."""
    header, offset = _read_header(frame, request_cls)
    large = [a for a in arrays if a.count > items_per_step]
    if not large:
        return decode_request(frame, request_cls, checked=True)
    empty = b"\x01" if request_cls.__flexible__ else b"\0\0\0\0"
    values: dict[str, tuple[Any, ...]] = {}
    rest = bytearray()
    last = offset
    try:
        for array in large:
            read = reader_for(array.item_type)
            items: list[Any] = []
            position = array.items_start
            for index in range(array.count):
                item, size = read(frame, position)
                position += size
                items.append(item)
                if index % items_per_step == items_per_step - 1:
                    yield
            if position != array.end:
                raise MalformedFrame(f"array {array.name} ends at {position}, expected {array.end}", part="body")
            values[array.name] = tuple(items)
            rest += frame[last:array.start]
            rest += empty
            last = array.end
        rest += frame[last:]
        body, _size = reader_for(request_cls)(bytes(rest), 0)
    except MalformedFrame:
        raise
    except BaseException as e:
        if not _reader_failed(e):
            raise
        raise MalformedFrame(f"malformed request body: {e}", part="body") from e
    return header, dataclasses.replace(body, **values)


def decode_response(frame: bytes | memoryview, response_cls: type[Any]) -> Any:
    """The body of a response frame. Raises MalformedFrame with the reason."""
    header_cls = response_header_class(response_cls)
    try:
        header_end = check_entity_bounds(header_cls, frame, 0)
        body_end = check_entity_bounds(response_cls, frame, header_end)
    except MalformedFrame as e:
        raise MalformedFrame(f"malformed {response_cls.__name__}: {e}", part="body") from e
    if body_end != len(frame):
        raise MalformedFrame(
            f"{response_cls.__name__} leaves {len(frame) - body_end} unread bytes", part="body"
        )
    try:
        _header, offset = reader_for(header_cls)(frame, 0)
        body, _size = reader_for(response_cls)(frame, offset)
    except BaseException as e:
        if not _reader_failed(e):
            raise
        raise MalformedFrame(f"malformed {response_cls.__name__}: {e}", part="body") from e
    return body
