"""Helpers for wire-layer tests: a Metadata handler to serve, request builders, a raw socket
peer for sending exact bytes, and metric readers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import struct
import sys
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName

from kraft_engine.protocol import Listener, RequestContext, request_class
from kraft_engine.protocol.framing import encode_request

METADATA = 3


def metadata_response(ctx: RequestContext, topic_names: list[str], *, error: ErrorCode = ErrorCode.none) -> Any:
    """A Metadata response of the request's version that names the given topics (with `error`)
    and echoes the request's client id as the cluster id, so tests can see what arrived."""
    cls = ctx.response_class
    module = sys.modules[cls.__module__]
    topic_fields: dict[str, Any] = {"error_code": error, "partitions": ()}
    if ctx.api_version >= 10:
        topic_fields["topic_id"] = None
    topics = tuple(module.MetadataResponseTopic(name=TopicName(n), **topic_fields) for n in topic_names)
    wanted: dict[str, Any] = {
        "throttle_time": timedelta(0),
        "brokers": (),
        "cluster_id": ctx.client_id,
        "controller_id": BrokerId(1),
        "topics": topics,
    }
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in wanted.items() if k in names})


async def echo_metadata(request: Any, ctx: RequestContext) -> Any:
    """Answers with the topics asked for; a topic named "sleep-<ms>" delays the answer."""
    names = [t.name for t in request.topics or ()]
    for name in names:
        if name.startswith("sleep-"):
            await asyncio.sleep(int(name.removeprefix("sleep-")) / 1000)
    return metadata_response(ctx, names)


def metadata_request(version: int, topics: list[str] | None) -> Any:
    cls = request_class(METADATA, version)
    module = sys.modules[cls.__module__]
    topic_objs = None
    if topics is not None:
        extra: dict[str, Any] = {"topic_id": None} if version >= 10 else {}
        topic_objs = tuple(module.MetadataRequestTopic(name=TopicName(t), **extra) for t in topics)
    wanted: dict[str, Any] = {
        "topics": topic_objs,
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
        "include_cluster_authorized_operations": False,
    }
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in wanted.items() if k in names})


class RawPeer:
    """A client socket that sends exactly the bytes a test gives it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, host: str, port: int) -> RawPeer:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def send_request(self, request: Any, *, correlation_id: int, client_id: str | None = "raw") -> None:
        await self.send(encode_request(request, correlation_id=correlation_id, client_id=client_id))

    async def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        return await self.reader.readexactly(size)

    async def closed_by_server(self) -> bool:
        """Read until end of stream; True when the server closed the connection (it sends
        nothing more before closing)."""
        try:
            data = await self.reader.read()
        except ConnectionResetError:
            return True
        return data == b""

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()



def closes(listener: Listener, reason: str) -> float:
    value = listener.registry.get_sample_value(
        "kafka_network_connections_closed_total", {"listener": listener.name, "reason": reason}
    )
    return value or 0.0


async def wait_for_close_count(listener: Listener, reason: str, count: float) -> None:
    """The server counts a close after tearing the socket down; wait until it did."""
    while closes(listener, reason) < count:
        await asyncio.sleep(0.005)
