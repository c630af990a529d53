"""The client connection against our listener (and against scripted peers where a real listener
cannot misbehave the way a test needs)."""

from __future__ import annotations

import asyncio
import random
import struct
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16
from protocol_helpers import METADATA, echo_metadata, metadata_request, metadata_response

from kraft_engine.protocol import (
    ConnectionConfig,
    ConnectionFailed,
    ConnectionLost,
    KafkaConnection,
    Listener,
    RequestContext,
    RequestTimedOut,
    UnsupportedApi,
    UnsupportedVersion,
    request_class,
    response_class,
)
from kraft_engine.protocol.framing import decode_request, encode_response, peek_api


@pytest.fixture
async def connect() -> Any:
    connections: list[KafkaConnection] = []

    def make(listener_or_port: Listener | int, **config: Any) -> KafkaConnection:
        port = listener_or_port if isinstance(listener_or_port, int) else listener_or_port.port
        conn = KafkaConnection(
            "127.0.0.1", port, config=ConnectionConfig(**config), rng=random.Random(7)
        )
        connections.append(conn)
        return conn

    yield make
    for conn in connections:
        await conn.close()


async def test_negotiates_the_highest_common_version_per_api(make_listener, connect):
    listener = Listener()
    listener.register(METADATA, min_version=4, max_version=9, handler=echo_metadata)
    await listener.start()
    try:
        conn = connect(listener)
        await conn.connect()
        assert conn.peer_api_versions == {3: (4, 9), 18: (0, 4)}
        assert conn.negotiated_version(METADATA) == 9
        assert conn.negotiated_version(18) == 4
        with pytest.raises(UnsupportedApi, match="does not serve Fetch"):
            conn.negotiated_version(1)
    finally:
        await listener.close()


async def test_send_picks_the_header_version_from_the_request_class(make_listener, connect):
    listener = await make_listener()
    conn = connect(listener, client_id="me")
    for version in (2, 8, 9, 12):  # header v1 below 9, v2 from 9; cluster_id exists from v2
        response = await conn.send(metadata_request(version, ["t"]))
        assert type(response) is response_class(METADATA, version)
        assert [t.name for t in response.topics] == ["t"]
        assert response.cluster_id == "me"


async def test_send_refuses_apis_and_versions_the_peer_does_not_serve(make_listener, connect):
    listener = await make_listener(metadata=False)
    conn = connect(listener)
    with pytest.raises(UnsupportedApi, match=r"does not serve Metadata \(api key 3\)"):
        await conn.send(metadata_request(12, []))

    restricted = Listener()
    restricted.register(METADATA, min_version=1, max_version=5, handler=echo_metadata)
    await restricted.start()
    try:
        conn2 = connect(restricted)
        with pytest.raises(UnsupportedVersion, match=r"versions 1\.\.5, not 12"):
            await conn2.send(metadata_request(12, []))
        # Nothing was sent, so the connection is still good.
        assert (await conn2.send(metadata_request(5, ["ok"]))).topics[0].name == "ok"
    finally:
        await restricted.close()


async def test_pipelined_sends_are_matched_by_correlation_id(make_listener, connect):
    listener = await make_listener()
    conn = connect(listener)
    await conn.connect()
    names = [f"sleep-{d}" for d in (30, 0, 15, 0, 5, 0, 1, 20)]
    responses = await asyncio.gather(*(conn.send(metadata_request(12, [n])) for n in names))
    assert [r.topics[0].name for r in responses] == names


async def test_request_timeout_and_late_response_is_discarded(make_listener, connect):
    gate = asyncio.Event()

    async def handler(request: Any, ctx: RequestContext) -> Any:
        name = request.topics[0].name
        if name == "slow":
            await gate.wait()
        return metadata_response(ctx, [name])

    listener = await make_listener(handler=handler)
    conn = connect(listener)
    await conn.connect()
    with pytest.raises(RequestTimedOut, match="no response within 30 ms"):
        await conn.send(metadata_request(12, ["slow"]), timeout_ms=30)
    assert conn.in_flight == 0

    gate.set()  # the slow answer now arrives, then the next request's answer
    response = await conn.send(metadata_request(12, ["next"]))
    assert response.topics[0].name == "next"
    assert conn.connected


async def test_peer_closing_fails_in_flight_requests_and_next_send_reconnects(make_listener, connect):
    async def handler(request: Any, ctx: RequestContext) -> Any:
        if request.topics[0].name == "boom":
            raise RuntimeError("handler bug closes the connection")
        return metadata_response(ctx, [request.topics[0].name])

    listener = await make_listener(handler=handler)
    conn = connect(listener)
    with pytest.raises(ConnectionLost):
        await conn.send(metadata_request(12, ["boom"]))
    response = await conn.send(metadata_request(12, ["again"]))
    assert response.topics[0].name == "again"


async def test_reconnects_with_backoff_to_a_restarted_server(connect):
    listener = Listener()
    listener.register(METADATA, min_version=0, max_version=12, handler=echo_metadata)
    await listener.start()
    port = listener.port
    conn = connect(port, reconnect_backoff_ms=5, reconnect_backoff_max_ms=40)
    try:
        assert (await conn.send(metadata_request(12, ["one"]))).topics[0].name == "one"
        await listener.close()

        with pytest.raises(ConnectionFailed, match=r"after \d+ attempts"):
            await conn.send(metadata_request(12, ["down"]), timeout_ms=300)
        failures = conn.connect_failures
        assert failures >= 2
        # The waits grew from reconnect.backoff.ms toward reconnect.backoff.max.ms and stay capped.
        assert 5 * 0.8 <= conn.last_backoff_ms <= 40

        listener = Listener()
        listener.register(METADATA, min_version=0, max_version=12, handler=echo_metadata)
        await listener.start("127.0.0.1", port)
        assert (await conn.send(metadata_request(12, ["two"]))).topics[0].name == "two"
        assert conn.connect_failures == 0
    finally:
        await listener.close()


async def test_connect_failure_names_the_address_and_last_error(connect):
    # A port nobody listens on: bind one, then release it.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    conn = connect(port, reconnect_backoff_ms=1, reconnect_backoff_max_ms=5)
    with pytest.raises(ConnectionFailed, match=f"127.0.0.1:{port}") as failure:
        await conn.connect(timeout_ms=50)
    assert isinstance(failure.value.__cause__, OSError)


async def test_closed_connection_refuses_to_reconnect(make_listener, connect):
    listener = await make_listener()
    conn = connect(listener)
    await conn.connect()
    await conn.close()
    with pytest.raises(ConnectionFailed, match="was closed"):
        await conn.send(metadata_request(12, []))


# --- scripted peers ----------------------------------------------------------------------------

Script = Callable[[int, int, int, bytes], Awaitable[bytes | None]]


async def _scripted_server(script: Script) -> asyncio.Server:
    """A server that answers each request frame with whatever `script` returns (None: silence)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version = peek_api(frame)
                correlation_id = struct.unpack_from(">i", frame, 4)[0]
                answer = await script(api_key, version, correlation_id, frame)
                if answer is not None:
                    writer.write(answer)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def test_falls_back_to_an_older_api_versions_version(connect):
    seen_versions: list[int] = []

    async def old_broker(api_key: int, version: int, correlation_id: int, frame: bytes) -> bytes:
        seen_versions.append(version)
        if version > 2:
            # What an older broker says: v0 body, UNSUPPORTED_VERSION, its ApiVersions range.
            return encode_response(ApiVersionsResponseV0(
                error_code=ErrorCode.unsupported_version,
                api_keys=(ApiVersionV0(api_key=i16(18), min_version=i16(0), max_version=i16(2)),),
            ), correlation_id=correlation_id)
        decode_request(frame, request_class(18, version))
        response = response_class(18, version)
        nested = sys.modules[response.__module__].ApiVersion
        return encode_response(response(
            error_code=ErrorCode.none,
            api_keys=(
                nested(api_key=i16(18), min_version=i16(0), max_version=i16(2)),
                nested(api_key=i16(3), min_version=i16(0), max_version=i16(7)),
            ),
            throttle_time=timedelta(0),
        ), correlation_id=correlation_id)

    server = await _scripted_server(old_broker)
    try:
        conn = connect(server.sockets[0].getsockname()[1])
        await conn.connect()
        assert seen_versions == [4, 2]
        assert conn.negotiated_version(METADATA) == 7
        assert conn.negotiated_version(18) == 2
    finally:
        server.close()
        await server.wait_closed()


async def test_response_with_unknown_correlation_id_closes_the_connection(connect):
    real = Listener()
    await real.start()

    async def confused(api_key: int, version: int, correlation_id: int, frame: bytes) -> bytes | None:
        if api_key == 18:
            # Forward the handshake to a real listener so the client connects normally.
            reader, writer = await asyncio.open_connection(*real.address)
            writer.write(struct.pack(">i", len(frame)) + frame)
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            answer = await reader.readexactly(size)
            writer.close()
            await writer.wait_closed()
            return struct.pack(">i", size) + answer
        return encode_response(metadata_response(
            RequestContext(api_key=3, api_version=version, correlation_id=0, client_id=None, peer=("", 0),
                           listener_name=""), []), correlation_id=correlation_id + 1000)

    server = await _scripted_server(confused)
    try:
        conn = connect(server.sockets[0].getsockname()[1])
        await conn.connect()
        conn._peer_versions[METADATA] = (0, 12)  # the forwarded handshake did not list Metadata
        with pytest.raises(ConnectionLost, match="unknown correlation id"):
            await conn.send(metadata_request(12, []))
        assert not conn.connected
    finally:
        server.close()
        await server.wait_closed()
        await real.close()


async def test_refused_api_versions_handshake_is_a_clear_connection_failure(make_listener, connect):
    listener = await make_listener()
    conn = connect(listener, client_software_name="not valid!", reconnect_backoff_ms=1, reconnect_backoff_max_ms=2)
    with pytest.raises(ConnectionFailed, match=r"refused: ApiVersions to .* failed: invalid_request"):
        await conn.connect(timeout_ms=100)
