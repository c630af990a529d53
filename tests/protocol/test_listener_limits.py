"""Backpressure and connection limits: what one client can cost a listener.

Kafka mutes a channel from the moment a request arrives until its response is sent, refuses a
connection over `max.connections.per.ip` right after accepting it, and stops accepting at
`max.connections`. A client that never reads must cost one response, not everything it asks for.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import struct
from typing import Any

from protocol_helpers import (
    METADATA,
    RawPeer,
    closes,
    metadata_request,
    metadata_response,
    wait_for_close_count,
)

from kraft_engine.protocol import CloseReason, KafkaConnection, RequestContext, request_class, response_class
from kraft_engine.protocol.envelope import encode_principal
from kraft_engine.protocol.framing import decode_response, encode_request

ENVELOPE = 58
_BIG_NAME = "x" * 100_000


def _requests_read(listener: Any) -> float:
    return listener.registry.get_sample_value(
        "kafka_network_requests_total", {"listener": listener.name, "request": "Metadata"}
    ) or 0.0


async def _until_stable(read: Any) -> float:
    """The value once it stopped changing for a while (the server has stopped reading)."""
    last = -1.0
    while True:
        value = read()
        if value == last:
            return value
        last = value
        await asyncio.sleep(0.3)


async def test_a_client_that_never_reads_costs_one_response(make_listener):
    async def big(request: Any, ctx: RequestContext) -> Any:
        return metadata_response(ctx, [_BIG_NAME])  # ~100 KB per answer

    listener = await make_listener(handler=big)
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # keep the kernel's share small
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, listener.address)
        frames = b"".join(
            encode_request(metadata_request(12, []), correlation_id=i, client_id="never-reads") for i in range(500)
        )
        sending = loop.create_task(loop.sock_sendall(sock, frames))
        read = await _until_stable(lambda: _requests_read(listener))
        # It stopped reading long before the 500 requests: at most the answers the two kernels
        # hold plus the one being sent (the client's receive buffer is 4 KiB).
        assert 1 <= read < 100
        assert listener.buffered_response_bytes() <= len(_BIG_NAME) + 1000
        sending.cancel()
    finally:
        sock.close()


async def test_requests_are_not_read_while_one_is_handled(make_listener, raw_peer):
    started: list[int] = []
    release = asyncio.Event()

    async def slow(request: Any, ctx: RequestContext) -> Any:
        started.append(ctx.correlation_id)
        await release.wait()
        return metadata_response(ctx, [])

    listener = await make_listener(handler=slow)
    peer = await raw_peer(listener)
    for correlation_id in range(3):
        await peer.send_request(metadata_request(12, []), correlation_id=correlation_id)
    while not started:
        await asyncio.sleep(0.005)
    # Another connection is served meanwhile, so the loop is turning; the muted one read 1 request.
    async with KafkaConnection(*listener.address) as other:
        await other.connect()
    assert started == [0] and _requests_read(listener) == 1
    release.set()
    ids = [struct.unpack_from(">i", await peer.read_frame())[0] for _ in range(3)]
    assert ids == [0, 1, 2]


async def test_connections_over_max_connections_per_ip_are_closed_after_accept(make_listener, caplog):
    listener = await make_listener(max_connections_per_ip=2)
    first = await RawPeer.connect(*listener.address)
    second = await RawPeer.connect(*listener.address)
    with caplog.at_level(logging.INFO, logger="kraft_engine.protocol.listener"):
        third = await RawPeer.connect(*listener.address)
        assert await third.closed_by_server()
        await wait_for_close_count(listener, CloseReason.TOO_MANY_CONNECTIONS, 1)
    assert "Rejected connection from 127.0.0.1, address already has the configured maximum of 2 connections." in (
        caplog.text
    )
    for peer, correlation_id in ((first, 1), (second, 2)):
        await peer.send_request(metadata_request(12, ["a"]), correlation_id=correlation_id)
        assert struct.unpack_from(">i", await peer.read_frame())[0] == correlation_id
    await first.close()
    await wait_for_close_count(listener, CloseReason.PEER_CLOSED, 1)
    fourth = await RawPeer.connect(*listener.address)
    await fourth.send_request(metadata_request(12, ["b"]), correlation_id=4)
    assert struct.unpack_from(">i", await fourth.read_frame())[0] == 4
    for peer in (second, third, fourth):
        await peer.close()


async def _peer_from(source_ip: str, address: tuple[str, int]) -> RawPeer:
    reader, writer = await asyncio.open_connection(*address, local_addr=(source_ip, 0))
    return RawPeer(reader, writer)


async def _served(peer: RawPeer, correlation_id: int) -> bool:
    await peer.send_request(metadata_request(12, ["o"]), correlation_id=correlation_id)
    return bool(struct.unpack_from(">i", await peer.read_frame())[0] == correlation_id)


async def test_max_connections_per_ip_overrides_give_chosen_addresses_their_own_limit(make_listener, caplog):
    # Kafka's "host:count,..." overrides; 127.0.0.2 is another loopback address of this machine.
    listener = await make_listener(max_connections_per_ip=1, max_connections_per_ip_overrides={"127.0.0.2": 3})
    with caplog.at_level(logging.INFO, logger="kraft_engine.protocol.listener"):
        default = [await _peer_from("127.0.0.1", listener.address) for _ in range(2)]
        chosen = [await _peer_from("127.0.0.2", listener.address) for _ in range(4)]
        assert await default[1].closed_by_server()
        assert await chosen[3].closed_by_server()
        await wait_for_close_count(listener, CloseReason.TOO_MANY_CONNECTIONS, 2)
    assert "Rejected connection from 127.0.0.1, address already has the configured maximum of 1 connections." in (
        caplog.text
    )
    assert "Rejected connection from 127.0.0.2, address already has the configured maximum of 3 connections." in (
        caplog.text
    )
    for correlation_id, peer in enumerate([default[0], *chosen[:3]]):
        assert await _served(peer, correlation_id)
    for peer in default + chosen:
        await peer.close()


async def test_max_connections_per_ip_zero_admits_only_the_overridden_addresses(make_listener):
    listener = await make_listener(max_connections_per_ip=0, max_connections_per_ip_overrides={"127.0.0.2": 1})
    refused = await _peer_from("127.0.0.1", listener.address)
    admitted = await _peer_from("127.0.0.2", listener.address)
    assert await refused.closed_by_server()
    assert await _served(admitted, 7)
    for peer in (refused, admitted):
        await peer.close()


def test_max_connections_per_ip_zero_without_overrides_is_refused() -> None:
    import pytest

    from kraft_engine.protocol import Listener

    with pytest.raises(ValueError, match=r"can be set to zero only if max\.connections\.per\.ip\.overrides"):
        Listener(max_connections_per_ip=0)


async def test_at_max_connections_a_new_connection_waits_for_a_slot(make_listener):
    listener = await make_listener(max_connections=1)
    first = await RawPeer.connect(*listener.address)
    waiting = await RawPeer.connect(*listener.address)  # the kernel completes the handshake
    await waiting.send_request(metadata_request(12, ["w"]), correlation_id=2)
    answer = asyncio.ensure_future(waiting.read_frame())
    for round_trip in range(3):  # the first connection keeps being served meanwhile
        await first.send_request(metadata_request(12, ["f"]), correlation_id=round_trip)
        await first.read_frame()
    accepted = listener.registry.get_sample_value("kafka_network_connections_accepted_total",
                                                  {"listener": listener.name})
    assert accepted == 1 and not answer.done()
    await first.close()
    async with asyncio.timeout(10):
        assert struct.unpack_from(">i", await answer)[0] == 2
    await waiting.close()


async def test_a_reset_connection_is_dropped_after_one_line(make_listener, caplog):
    release = asyncio.Event()

    async def slow(request: Any, ctx: RequestContext) -> Any:
        await release.wait()
        return metadata_response(ctx, [_BIG_NAME])

    listener = await make_listener(handler=slow, max_in_flight_requests=8)
    sock = socket.create_connection(listener.address)
    for correlation_id in range(8):
        sock.sendall(encode_request(metadata_request(12, []), correlation_id=correlation_id, client_id="r"))
    while _requests_read(listener) < 8:
        await asyncio.sleep(0.005)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # RST
    with caplog.at_level(logging.DEBUG):
        await asyncio.sleep(0.1)
        release.set()
        await wait_for_close_count(listener, CloseReason.SOCKET_ERROR, 1)
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "Closing connection from 127.0.0.1" in lines[0].getMessage()
    assert "socket.send() raised exception" not in caplog.text


async def test_large_frames_are_decoded_stepwise_and_answered(make_listener, raw_peer):
    listener = await make_listener(large_frame_bytes=1024)
    peer = await raw_peer(listener)
    names = [f"topic-{i}" for i in range(3000)]
    await peer.send_request(metadata_request(12, names), correlation_id=9)
    frame = await peer.read_frame()
    response = decode_response(frame, response_class(METADATA, 12))
    assert [t.name for t in response.topics] == names
    # A large frame that lies about a length is still refused as malformed.
    bad = bytearray(encode_request(metadata_request(12, names), correlation_id=10, client_id="x"))
    bad[-40:] = b"\xff" * 40
    await peer.send(bytes(bad))
    assert await peer.closed_by_server()
    await wait_for_close_count(listener, CloseReason.MALFORMED_BODY, 1)
    assert listener.registry.get_sample_value(
        "kafka_network_malformed_requests_total", {"listener": listener.name, "request": "Metadata"}
    ) == 1


async def test_a_large_request_is_kept_out_of_the_collectors_walks_and_freed_once_answered(make_listener, raw_peer):
    """While a large request of many items is handled, what its decode allocated sits in the
    collector's permanent generation (no full collection walks it); once answered it is freed."""
    parked_at_handler: list[int] = []

    async def record(request: Any, ctx: RequestContext) -> Any:
        parked_at_handler.append(gc.get_freeze_count())
        return metadata_response(ctx, [t.name for t in request.topics])

    listener = await make_listener(handler=record, large_frame_bytes=1024)
    peer = await raw_peer(listener)
    names = [f"topic-{i}" for i in range(30_000)]
    before = gc.get_freeze_count()
    await peer.send_request(metadata_request(12, names), correlation_id=1)
    response = decode_response(await peer.read_frame(), response_class(METADATA, 12))
    assert [t.name for t in response.topics] == names
    # At least the 20,000 topics read before the last park (every 10,000) were parked.
    assert parked_at_handler[0] - before >= 20_000
    # Answered, the request's objects are freed; they do not stay in the permanent generation
    # (the writer may still be finishing).
    async with asyncio.timeout(30):
        while gc.get_freeze_count() > parked_at_handler[0] - 20_000:
            await asyncio.sleep(0.05)
    # A small request parks nothing, nor does a large frame of few items (a Produce of big batches).
    settled = gc.get_freeze_count()
    await peer.send_request(metadata_request(12, ["one"]), correlation_id=2)
    await peer.read_frame()
    await peer.send_request(metadata_request(12, ["a" * 5000, "b" * 5000]), correlation_id=3)
    await peer.read_frame()
    assert all(count <= settled for count in parked_at_handler[1:])  # parked nothing (some parked objects died)


async def test_a_large_response_to_a_client_that_never_reads_is_buffered_a_chunk_at_a_time(make_listener):
    async def huge(request: Any, ctx: RequestContext) -> Any:
        # ~10 MB: more than the kernel's largest send buffer here (4 MiB) and the client's 4 KiB.
        return metadata_response(ctx, [f"{i:06d}-" + "y" * 240 for i in range(40_000)])

    listener = await make_listener(handler=huge)
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, listener.address)
        await loop.sock_sendall(sock, encode_request(metadata_request(12, []), correlation_id=1, client_id="slow"))
        # Wait until the answer is being sent, then until the sockets took all they will.
        async with asyncio.timeout(120):
            while listener.buffered_response_bytes() == 0:
                await asyncio.sleep(0.05)
        buffered = await _until_stable(listener.buffered_response_bytes)
        # The transport holds at most one 256 KiB chunk of the ~10 MB answer, not the answer.
        assert 0 < buffered <= 256 * 1024
        # Read it all: the answer arrives whole and in order.
        size = struct.unpack(">i", await _recv_exactly(loop, sock, 4))[0]
        response = decode_response(await _recv_exactly(loop, sock, size), response_class(METADATA, 12))
        assert [t.name[:6] for t in response.topics] == [f"{i:06d}" for i in range(40_000)]
    finally:
        sock.close()


async def _recv_exactly(loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await loop.sock_recv(sock, min(size - len(data), 1 << 20))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def _envelope(inner: bytes, principal: bytes | None, *, correlation_id: int) -> bytes:
    cls = request_class(ENVELOPE, 0)
    return encode_request(cls(request_data=inner, request_principal=principal, client_host_address=bytes([10, 0, 0, 7])),
                          correlation_id=correlation_id, client_id="broker-1")


async def test_envelope_carries_the_forwarded_request_and_principal(make_listener, raw_peer):
    seen: list[RequestContext] = []

    async def record(request: Any, ctx: RequestContext) -> Any:
        seen.append(ctx)
        return metadata_response(ctx, [t.name for t in request.topics])

    listener = await make_listener(handler=record)
    listener.serve_envelope()
    peer = await raw_peer(listener)
    inner = encode_request(metadata_request(12, ["forwarded"]), correlation_id=77, client_id="rdkafka")[4:]
    await peer.send(_envelope(inner, encode_principal("User:alice"), correlation_id=5))
    envelope = decode_response(await peer.read_frame(), response_class(ENVELOPE, 0))
    assert envelope.error_code == 0
    payload = envelope.response_data
    assert struct.unpack_from(">i", payload)[0] == 77  # the inner response keeps its own header
    inner_response = decode_response(payload, response_class(METADATA, 12))
    assert [t.name for t in inner_response.topics] == ["forwarded"]
    ctx = seen[0]
    assert (ctx.principal, ctx.client_address, ctx.client_id, ctx.correlation_id) == (
        "User:alice", "10.0.0.7", "rdkafka", 77)


async def test_a_bad_envelope_gets_an_error_not_a_crash(make_listener, raw_peer):
    listener = await make_listener()
    listener.serve_envelope()
    peer = await raw_peer(listener)
    header_v2 = struct.pack(">hhih", 55, 2, 1, 1) + b"x" + b"\x00"  # DescribeQuorum v2, not served
    lying = struct.pack(">hhih", METADATA, 12, 1, 1) + b"x" + b"\x00" + b"\xff\xff\xff\xff\x0f"
    for correlation_id, (inner, principal) in enumerate([
        (header_v2 + b"\x01\x00", encode_principal("User:bob")),
        (lying, encode_principal("User:bob")),
        (encode_request(metadata_request(12, []), correlation_id=1, client_id="c")[4:], None),
        (encode_request(metadata_request(12, []), correlation_id=1, client_id="c")[4:], b"\x00\x00\xff\xff\xff\xff\x0f"),
    ]):
        await peer.send(_envelope(inner, principal, correlation_id=correlation_id))
        response = decode_response(await peer.read_frame(), response_class(ENVELOPE, 0))
        assert response.error_code != 0 and response.response_data is None
    assert closes(listener, CloseReason.MALFORMED_BODY) == 0
