"""Fixed-seed fuzzing of a SASL listener's handshake framing (no atheris: a seeded generator of
malformed frames, so a failing case prints its seed and index and replays exactly).

Each case opens a connection and sends one kind of garbage: random bytes before any handshake, a
size prefix with a random body, a SaslHandshake whose body is cut or scrambled, or, after a
genuine SaslHandshake, a SaslAuthenticate with random tokens (PLAIN and SCRAM) or a random frame.
Whatever arrives, the listener answers with an error or closes that connection alone, never
authenticates it, and keeps serving: a genuine client logs in after every case."""

from __future__ import annotations

import asyncio
import random
import struct
from typing import Any

import test_sasl_listener
from kio.schema.errors import ErrorCode
from protocol_helpers import RawPeer
from test_sasl_listener import _authenticate, _client, _exchange, _handshake, _listener, _metadata_as

from kraft_engine.protocol import request_class
from kraft_engine.protocol.framing import encode_request
from kraft_engine.protocol.sasl import SASL_HANDSHAKE_KEY

credentials = test_sasl_listener.credentials  # the SCRAM users' fixture, shared

SEED = 1414
CASES = 120
_ANSWER_WITHIN_S = 30


def _random_bytes(rng: random.Random, size: int) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(size))


async def _ends_or_errors(peer: RawPeer) -> str:
    """'closed' when the server closes the connection, 'answered' when it sends a frame first."""
    try:
        async with asyncio.timeout(_ANSWER_WITHIN_S):
            head = await peer.reader.read(4)
    except ConnectionResetError:
        return "closed"
    return "closed" if head == b"" else "answered"


async def _one_case(peer: RawPeer, rng: random.Random, kind: int) -> str:
    if kind == 0:  # bytes before any handshake
        await peer.send(_random_bytes(rng, rng.randint(1, 64)))
        peer.writer.write_eof()
        return await _ends_or_errors(peer)
    if kind == 1:  # a well-sized frame of random bytes (random api key, version, header)
        body = _random_bytes(rng, rng.randint(0, 200))
        await peer.send(struct.pack(">i", len(body)) + body)
        return await _ends_or_errors(peer)
    if kind == 2:  # a SaslHandshake cut short or scrambled after its header
        frame = bytearray(encode_request(request_class(SASL_HANDSHAKE_KEY, 1)(mechanism="SCRAM-SHA-512"),
                                         correlation_id=1, client_id="fuzz"))
        cut = rng.randint(12, len(frame) - 1)
        for index in range(cut, len(frame)):
            frame[index] = rng.getrandbits(8)
        await peer.send(bytes(frame))
        return await _ends_or_errors(peer)
    mechanism = rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    await _handshake(peer, mechanism)
    if kind == 3:  # random SaslAuthenticate tokens: refused, never authenticated
        token = _random_bytes(rng, rng.randint(0, 120))
        answer = await _exchange(peer, _authenticate(token), correlation_id=2)
        if answer.error_code == ErrorCode.none:
            # A SCRAM client-first may parse; its server-first then needs a proof nobody can make.
            answer = await _exchange(peer, _authenticate(_random_bytes(rng, 40)), correlation_id=3)
        if answer.error_code == ErrorCode.none:
            raise AssertionError(f"random tokens authenticated with {mechanism}")
        return await _ends_or_errors(peer)
    body = _random_bytes(rng, rng.randint(0, 200))  # a random frame where SaslAuthenticate belongs
    await peer.send(struct.pack(">i", len(body)) + body)
    return await _ends_or_errors(peer)


async def test_malformed_sasl_frames_are_answered_or_closed_and_the_listener_keeps_serving(
        make_listener: Any, raw_peer: Any, credentials: Any) -> None:
    listener = await _listener(make_listener, credentials, **{"sasl.server.max.receive.size": "4096"})
    rng = random.Random(SEED)
    outcomes: dict[str, int] = {}
    for index in range(CASES):
        kind = index % 5
        peer = await raw_peer(listener)
        try:
            outcome = await _one_case(peer, rng, kind)
        except Exception as e:
            raise AssertionError(f"case {index} (seed {SEED}, kind {kind}) failed: {e!r}") from e
        finally:
            await peer.close()
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if index % 20 == 19:  # the listener still serves a genuine client
            assert await _metadata_as(listener, _client("SCRAM-SHA-512", "alice", "alice-secret")) == ["t"]
    assert sum(outcomes.values()) == CASES
    assert await _metadata_as(listener, _client("PLAIN", "carol", "carol-secret")) == ["t"]
