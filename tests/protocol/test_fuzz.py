"""Frame fuzzing: whatever bytes arrive, only the connection that sent them suffers.

A seeded loop (reproducible: the seed is in the test id) throws random bytes, truncated frames,
2 GiB and negative sizes, valid headers with garbage bodies, unknown api keys, unsupported
versions and half-closed connections at one listener. Every such connection must end, each end
must be counted under some reason, and a well-behaved client must still be served afterwards.
"""

from __future__ import annotations

import asyncio
import random
import struct

import pytest
from protocol_helpers import METADATA, RawPeer, metadata_request

from kraft_engine.protocol import CloseReason, KafkaConnection
from kraft_engine.protocol.framing import encode_request


def _sample(rng: random.Random) -> tuple[str, bytes]:
    valid = encode_request(metadata_request(12, ["fuzz"]), correlation_id=rng.randrange(2**31), client_id="f")
    header_v2 = struct.pack(">hhih", METADATA, 12, 1, 1) + b"f\x00"
    kind = rng.choice(["random", "truncated", "huge", "negative", "garbage_body", "unknown_api",
                       "bad_version", "half_closed", "valid_then_junk"])
    if kind == "random":
        return kind, rng.randbytes(rng.randrange(0, 64))
    if kind == "truncated":
        return kind, valid[: rng.randrange(1, len(valid))]
    if kind == "huge":
        return kind, struct.pack(">i", 2**31 - 1) + rng.randbytes(rng.randrange(0, 16))
    if kind == "negative":
        return kind, struct.pack(">i", -rng.randrange(1, 2**31)) + rng.randbytes(8)
    if kind == "garbage_body":
        body = rng.randbytes(rng.randrange(1, 40))
        return kind, struct.pack(">i", len(header_v2) + len(body)) + header_v2 + body
    if kind == "unknown_api":
        payload = struct.pack(">hhih", rng.randrange(100, 2**15), rng.randrange(-5, 20), 1, -1)
        return kind, struct.pack(">i", len(payload)) + payload
    if kind == "bad_version":
        payload = struct.pack(">hhih", METADATA, rng.choice([14, 15, 999, -1, -32768]), 1, -1) + b"\x00"
        return kind, struct.pack(">i", len(payload)) + payload
    if kind == "half_closed":
        return kind, b""
    return kind, valid + rng.randbytes(rng.randrange(1, 12))


async def _abuse(address: tuple[str, int], payload: bytes) -> None:
    peer = await RawPeer.connect(*address)
    try:
        await peer.send(payload)
        peer.writer.write_eof()
        async with asyncio.timeout(10):
            await peer.closed_by_server()  # any responses are read and dropped
    finally:
        await peer.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_fuzzed_frames_close_only_their_own_connection(make_listener, seed):
    listener = await make_listener(request_max_bytes=1 << 20)
    rng = random.Random(seed)
    samples = [_sample(rng) for _ in range(60)]
    for start in range(0, len(samples), 10):
        await asyncio.gather(*(_abuse(listener.address, payload) for _, payload in samples[start : start + 10]))

    # Every abusive connection ended and was counted under exactly one reason.
    reasons = [value for name, value in vars(CloseReason).items() if name.isupper()]

    def closed_total() -> float:
        return sum(
            listener.registry.get_sample_value(
                "kafka_network_connections_closed_total", {"listener": "PLAINTEXT", "reason": r}
            ) or 0.0
            for r in reasons
        )

    async with asyncio.timeout(10):
        while closed_total() < len(samples):
            await asyncio.sleep(0.005)
    assert closed_total() == len(samples)
    kinds = {kind for kind, _ in samples}
    if "huge" in kinds:
        assert listener.registry.get_sample_value(
            "kafka_network_connections_closed_total",
            {"listener": "PLAINTEXT", "reason": CloseReason.REQUEST_TOO_LARGE},
        )

    # A well-behaved client is still served, ApiVersions first.
    async with KafkaConnection(*listener.address) as conn:
        await conn.connect()
        assert conn.peer_api_versions == {3: (0, 12), 18: (0, 4)}
        response = await conn.send(metadata_request(12, ["still-here"]))
        assert response.topics[0].name == "still-here"
