"""A handler answering with bytes encoded once (`EncodedResponse`, the broker's cached Metadata):
each request gets the frame kio would have written for the same response, with its own
correlation id and header version, and the answer's error codes are counted every time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from protocol_helpers import metadata_request, metadata_response

from kraft_engine.protocol import EncodedResponse, Listener, RequestContext
from kraft_engine.protocol.framing import encode_response


def _errors(listener: Listener, code: str) -> float:
    return listener.registry.get_sample_value(
        "kafka_network_errors_total", {"listener": listener.name, "request": "Metadata", "error": code}) or 0.0


@pytest.mark.parametrize("version", [1, 8, 9, 12])  # response header v0 up to v8, v1 (tagged fields) from v9
async def test_an_encoded_answer_is_framed_for_each_request_as_kio_frames_the_response(
        make_listener: Callable[..., Awaitable[Listener]], raw_peer: Any, version: int) -> None:
    built: list[Any] = []
    cache: dict[int, EncodedResponse] = {}

    async def handler(request: Any, ctx: RequestContext) -> Any:
        if ctx.api_version not in cache:
            response = metadata_response(ctx, ["a", "b"], error=ErrorCode.unknown_topic_or_partition)
            built.append(response)
            cache[ctx.api_version] = EncodedResponse.of(response)
        return cache[ctx.api_version]

    listener = await make_listener(handler=handler)
    peer = await raw_peer(listener)
    for correlation_id in (7, 8, 2**31 - 1):
        await peer.send_request(metadata_request(version, ["a", "b"]), correlation_id=correlation_id)
        frame = await peer.read_frame()
        assert frame == encode_response(built[0], correlation_id=correlation_id)[4:]
    assert len(built) == 1  # encoded once, answered three times
    assert _errors(listener, "UNKNOWN_TOPIC_OR_PARTITION") == 6  # two per answer, counted for each


async def test_an_encoded_answer_of_another_version_is_refused_not_sent(
        make_listener: Callable[..., Awaitable[Listener]], raw_peer: Any) -> None:
    wrong: list[EncodedResponse] = []

    async def handler(request: Any, ctx: RequestContext) -> Any:
        if not wrong:
            other = RequestContext(api_key=ctx.api_key, api_version=12 if ctx.api_version != 12 else 11,
                                   correlation_id=0, client_id="x", peer=ctx.peer, listener_name=ctx.listener_name)
            wrong.append(EncodedResponse.of(metadata_response(other, [])))
        return wrong[0]

    listener = await make_listener(handler=handler)
    peer = await raw_peer(listener)
    await peer.send_request(metadata_request(9, []), correlation_id=1)
    assert await peer.closed_by_server()
