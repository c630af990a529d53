"""The listener as a Kafka client sees it: exact bytes on a loopback socket."""

from __future__ import annotations

import asyncio
import logging
import struct
from io import BytesIO
from typing import Any

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsRequestV4
from kio.schema.api_versions.v4.response import ApiVersionsResponse as ApiVersionsResponseV4
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from protocol_helpers import (
    METADATA,
    closes,
    echo_metadata,
    metadata_request,
    metadata_response,
    wait_for_close_count,
)

from kraft_engine.protocol import (
    NO_RESPONSE,
    CloseReason,
    Features,
    Listener,
    RequestContext,
    request_class,
    response_class,
)


def _body(entity: Any) -> bytes:
    buffer = BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _header_v1(api_key: int, version: int, correlation_id: int, client_id: bytes) -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def _decode_exactly(cls: type[Any], data: bytes, offset: int) -> Any:
    entity, size = entity_reader(cls)(data, offset)
    assert offset + size == len(data), "response has trailing bytes"
    return entity


# --- header versions ---------------------------------------------------------------------------


async def test_non_flexible_request_uses_header_v1_and_gets_response_header_v0(make_listener, raw_peer):
    listener = await make_listener()
    peer = await raw_peer(listener)
    request = metadata_request(8, ["a"])
    await peer.send(_frame(_header_v1(METADATA, 8, 7, b"cli") + _body(request)))

    frame = await peer.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 7
    # Response header v0 is the correlation id alone; the body follows at byte 4.
    response = _decode_exactly(response_class(METADATA, 8), frame, 4)
    assert [t.name for t in response.topics] == ["a"]
    assert response.cluster_id == "cli"


async def test_flexible_request_uses_header_v2_and_gets_response_header_v1(make_listener, raw_peer):
    listener = await make_listener()
    peer = await raw_peer(listener)
    request = metadata_request(12, ["b"])
    # Header v2 = header v1 (client id stays a non-compact string) + an empty tagged-field section.
    await peer.send(_frame(_header_v1(METADATA, 12, 8, b"flex") + b"\x00" + _body(request)))

    frame = await peer.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 8
    assert frame[4] == 0  # response header v1: empty tagged fields after the correlation id
    response = _decode_exactly(response_class(METADATA, 12), frame, 5)
    assert [t.name for t in response.topics] == ["b"]
    assert response.cluster_id == "flex"


async def test_null_client_id_reaches_the_handler_as_none(make_listener, raw_peer):
    listener = await make_listener()
    peer = await raw_peer(listener)
    await peer.send(_frame(struct.pack(">hhih", METADATA, 12, 9, -1) + b"\x00" + _body(metadata_request(12, []))))
    response = _decode_exactly(response_class(METADATA, 12), await peer.read_frame(), 5)
    assert response.cluster_id is None


async def test_bytes_after_a_request_body_are_ignored_as_kafka_ignores_them(make_listener, raw_peer):
    """librdkafka's Metadata v12 for all topics, byte for byte as it sends it: its array-length
    placeholder is four bytes, of which the null array's one is read and three stay behind.
    Kafka's parser never looks past the body, so librdkafka works against it; so must we."""
    listener = await make_listener()
    peer = await raw_peer(listener)
    librdkafka_all_topics = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    await peer.send(_frame(librdkafka_all_topics))
    response = _decode_exactly(response_class(METADATA, 12), await peer.read_frame(), 5)
    assert response.cluster_id == "rdkafka"
    await peer.send(_frame(_header_v1(METADATA, 8, 4, b"x") + _body(metadata_request(8, ["a"])) + b"junk"))
    frame = await peer.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 4
    assert [t.name for t in _decode_exactly(response_class(METADATA, 8), frame, 4).topics] == ["a"]


async def test_flexible_api_versions_response_still_uses_header_v0(make_listener, raw_peer):
    listener = await make_listener()
    peer = await raw_peer(listener)
    request = ApiVersionsRequestV3(client_software_name="kafka-java", client_software_version="4.0.0")
    await peer.send(_frame(_header_v1(18, 3, 11, b"c") + b"\x00" + _body(request)))

    frame = await peer.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 11
    response = _decode_exactly(ApiVersionsResponseV3, frame, 4)
    assert response.error_code == ErrorCode.none


# --- ApiVersions -------------------------------------------------------------------------------


async def test_api_versions_lists_exactly_what_the_listener_serves(make_listener, raw_peer):
    listener = await make_listener(metadata=False)
    listener_with_metadata = await make_listener()
    for served, expected in ((listener, {18: (0, 4)}), (listener_with_metadata, {3: (0, 12), 18: (0, 4)})):
        peer = await raw_peer(served)
        await peer.send_request(
            ApiVersionsRequestV4(client_software_name="x", client_software_version="1"), correlation_id=1
        )
        response = _decode_exactly(ApiVersionsResponseV4, await peer.read_frame(), 4)
        assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == expected
        assert served.api_versions() == expected


async def test_produce_is_listed_from_v0_as_kafka_lists_it_but_v0_to_2_close_the_connection(make_listener, raw_peer):
    async def never(request: Any, ctx: RequestContext) -> Any:
        raise AssertionError("a refused version reached the handler")

    listener = await make_listener(metadata=False, routes={0: (3, 13, never)})
    listener.advertise_from(0, 0)  # Kafka 4.x's KAFKA-18659 exception, for librdkafka
    peer = await raw_peer(listener)
    await peer.send_request(ApiVersionsRequestV4(client_software_name="x", client_software_version="1"), correlation_id=1)
    response = _decode_exactly(ApiVersionsResponseV4, await peer.read_frame(), 4)
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == {0: (0, 13), 18: (0, 4)}
    assert listener.api_versions()[0] == (3, 13)  # what is served
    for version in (0, 1, 2):
        old = await raw_peer(listener)
        await old.send(_frame(_header_v1(0, version, 1, b"x") + b"\xff\xff\x00\x00\x00\x01\x00\x00\x00\x00"))
        assert await old.closed_by_server()
        await wait_for_close_count(listener, CloseReason.UNSUPPORTED_VERSION, version + 1)
    with pytest.raises(ValueError, match="served from v3"):
        listener.advertise_from(0, 3)
    with pytest.raises(ValueError, match="not served"):
        listener.advertise_from(1, 0)


async def test_api_versions_carries_features_from_the_provider(make_listener, raw_peer):
    features = Features(
        supported={"metadata.version": (7, 27), "kraft.version": (0, 1)},
        finalized={"metadata.version": 27, "kraft.version": 1},
        finalized_epoch=42,
    )
    listener = await make_listener(features_provider=lambda: features)
    peer = await raw_peer(listener)

    await peer.send_request(ApiVersionsRequestV4(client_software_name="x", client_software_version="1"), correlation_id=1)
    v4 = _decode_exactly(ApiVersionsResponseV4, await peer.read_frame(), 4)
    assert {f.name: (f.min_version, f.max_version) for f in v4.supported_features} == {
        "metadata.version": (7, 27),
        "kraft.version": (0, 1),
    }
    assert {f.name: (f.min_version_level, f.max_version_level) for f in v4.finalized_features} == {
        "metadata.version": (27, 27),
        "kraft.version": (1, 1),
    }
    assert v4.finalized_features_epoch == 42

    # v3 omits supported features whose range starts at 0 (older clients cannot parse them).
    await peer.send_request(ApiVersionsRequestV3(client_software_name="x", client_software_version="1"), correlation_id=2)
    v3 = _decode_exactly(ApiVersionsResponseV3, await peer.read_frame(), 4)
    assert [f.name for f in v3.supported_features] == ["metadata.version"]


async def test_features_are_read_at_each_request(make_listener, raw_peer):
    epochs = iter([1, 2])
    listener = await make_listener(features_provider=lambda: Features(finalized_epoch=next(epochs)))
    peer = await raw_peer(listener)
    seen = []
    for correlation_id in (1, 2):
        await peer.send_request(
            ApiVersionsRequestV4(client_software_name="x", client_software_version="1"), correlation_id=correlation_id
        )
        seen.append(_decode_exactly(ApiVersionsResponseV4, await peer.read_frame(), 4).finalized_features_epoch)
    assert seen == [1, 2]


@pytest.mark.parametrize("version", [5, 99, -1])
async def test_unsupported_api_versions_version_gets_a_v0_unsupported_version_answer(make_listener, raw_peer, version):
    listener = await make_listener()
    peer = await raw_peer(listener)
    # A newer client's body we cannot parse: Kafka answers from the header alone.
    await peer.send(_frame(_header_v1(18, version, 77, b"new") + b"\x00\x07unknown-future-body"))

    frame = await peer.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 77
    response = _decode_exactly(ApiVersionsResponseV0, frame, 4)
    assert response.error_code == ErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, 0, 4)]

    # The connection stays usable for the retry at a version we speak.
    await peer.send_request(request_class(18, 0)(), correlation_id=78)
    retry = _decode_exactly(ApiVersionsResponseV0, await peer.read_frame(), 4)
    assert retry.error_code == ErrorCode.none
    assert {k.api_key for k in retry.api_keys} == {3, 18}


async def test_api_versions_v3_with_invalid_software_name_is_an_invalid_request(make_listener, raw_peer):
    listener = await make_listener()
    peer = await raw_peer(listener)
    await peer.send_request(
        ApiVersionsRequestV3(client_software_name="bad name!", client_software_version="1"), correlation_id=3
    )
    response = _decode_exactly(ApiVersionsResponseV3, await peer.read_frame(), 4)
    assert response.error_code == ErrorCode.invalid_request
    assert response.api_keys == ()


# --- ordering and pipelining -------------------------------------------------------------------


async def test_pipelined_requests_are_answered_in_request_order(make_listener, raw_peer):
    listener = await make_listener()
    peer = await raw_peer(listener)
    delays_ms = [40, 0, 25, 0, 10, 1, 0]
    frames = b"".join(
        _frame(_header_v1(METADATA, 12, i, b"p") + b"\x00" + _body(metadata_request(12, [f"sleep-{d}"])))
        for i, d in enumerate(delays_ms)
    )
    await peer.send(frames)  # everything before reading anything

    answers = []
    for _ in delays_ms:
        frame = await peer.read_frame()
        response = _decode_exactly(response_class(METADATA, 12), frame, 5)
        answers.append((struct.unpack_from(">i", frame)[0], response.topics[0].name))
    assert answers == [(i, f"sleep-{d}") for i, d in enumerate(delays_ms)]


async def test_a_request_answered_with_no_response_gets_nothing_and_keeps_the_order(make_listener, raw_peer):
    # Produce with acks=0: the client reads no answer, the connection stays usable, and the next
    # request's answer is the next frame on the wire.
    async def handler(request: Any, ctx: RequestContext) -> Any:
        name = request.topics[0].name
        return NO_RESPONSE if name.startswith("quiet") else metadata_response(ctx, [name])

    listener = await make_listener(handler=handler, max_in_flight_requests=1)
    peer = await raw_peer(listener)
    for correlation_id, topic in enumerate(["quiet-1", "loud", "quiet-2", "quiet-3", "last"]):
        await peer.send_request(metadata_request(12, [topic]), correlation_id=correlation_id)
    async with asyncio.timeout(10):
        first, second = await peer.read_frame(), await peer.read_frame()
    assert struct.unpack_from(">i", first)[0] == 1
    assert struct.unpack_from(">i", second)[0] == 4


async def test_with_more_in_flight_the_next_request_starts_while_a_handler_waits(make_listener, raw_peer):
    released = asyncio.Event()

    async def handler(request: Any, ctx: RequestContext) -> Any:
        name = request.topics[0].name
        if name == "wait":
            await released.wait()  # only the *next* request on this connection can release it
        else:
            released.set()
        return metadata_response(ctx, [name])

    listener = await make_listener(handler=handler, max_in_flight_requests=8)
    peer = await raw_peer(listener)
    for correlation_id, topic in enumerate(["wait", "release"]):
        await peer.send_request(metadata_request(12, [topic]), correlation_id=correlation_id)
    async with asyncio.timeout(10):
        first, second = await peer.read_frame(), await peer.read_frame()
    assert struct.unpack_from(">i", first)[0] == 0
    assert struct.unpack_from(">i", second)[0] == 1


async def test_max_in_flight_one_processes_requests_one_at_a_time(make_listener, raw_peer):
    running = 0
    overlapped = False

    async def handler(request: Any, ctx: RequestContext) -> Any:
        nonlocal running, overlapped
        running += 1
        overlapped = overlapped or running > 1
        await asyncio.sleep(0.002)
        running -= 1
        return metadata_response(ctx, [])

    listener = await make_listener(handler=handler, max_in_flight_requests=1)
    peer = await raw_peer(listener)
    for correlation_id in range(5):
        await peer.send_request(metadata_request(12, []), correlation_id=correlation_id)
    ids = [struct.unpack_from(">i", await peer.read_frame())[0] for _ in range(5)]
    assert ids == [0, 1, 2, 3, 4]
    assert not overlapped


# --- limits and bad input ----------------------------------------------------------------------


async def test_oversized_request_is_refused_from_its_size_prefix(make_listener, raw_peer, caplog):
    listener = await make_listener(request_max_bytes=1000)
    peer = await raw_peer(listener)
    # Only the prefix is sent: waiting for the body would hang, refusing closes at once.
    await peer.send(struct.pack(">i", 1001))
    with caplog.at_level(logging.WARNING, logger="kraft_engine.protocol.listener"):
        assert await peer.closed_by_server()
        await wait_for_close_count(listener, CloseReason.REQUEST_TOO_LARGE, 1)
    assert "exceeds socket.request.max.bytes 1000" in caplog.text

    # A request of exactly the limit is fine.
    ok = await raw_peer(listener)
    request = _header_v1(METADATA, 8, 1, b"x") + _body(metadata_request(8, ["t" * 900]))
    await ok.send(_frame(request + b""))
    assert len(request) <= 1000
    assert struct.unpack_from(">i", await ok.read_frame())[0] == 1


@pytest.mark.parametrize(
    ("payload", "reason", "log_fragment"),
    [
        (struct.pack(">i", -5), CloseReason.INVALID_SIZE, "negative request size -5"),
        (_frame(b"\x00\x03"), CloseReason.MALFORMED_HEADER, "too short"),
        (_frame(struct.pack(">hhih", METADATA, 12, 1, 50) + b"ab"), CloseReason.MALFORMED_HEADER, "api key 3 version 12"),
        (_frame(_header_v1(METADATA, 12, 1, b"x") + b"\x00" + b"\xff\xff\xff\xff\xff"), CloseReason.MALFORMED_BODY, "malformed request body"),
        (_frame(_header_v1(0, 9, 1, b"x") + b"\x00"), CloseReason.UNKNOWN_API_KEY, "api key 0 (Produce) version 9 is not served"),
        (_frame(_header_v1(31000, 0, 1, b"x")), CloseReason.UNKNOWN_API_KEY, "api key 31000"),
        (_frame(_header_v1(METADATA, 13, 1, b"x")), CloseReason.UNSUPPORTED_VERSION, "Metadata (api key 3) version 13"),
        (struct.pack(">i", 100) + b"only part", CloseReason.TRUNCATED_FRAME, "after 9 of 100 request bytes"),
        (b"\x00\x00", CloseReason.TRUNCATED_FRAME, "inside a size prefix"),
    ],
)
async def test_bad_input_closes_only_that_connection(make_listener, raw_peer, caplog, payload, reason, log_fragment):
    listener = await make_listener()
    bystander = await raw_peer(listener)
    await bystander.send_request(metadata_request(12, ["before"]), correlation_id=1)
    await bystander.read_frame()

    bad = await raw_peer(listener)
    with caplog.at_level(logging.WARNING, logger="kraft_engine.protocol.listener"):
        await bad.send(payload)
        if reason == CloseReason.TRUNCATED_FRAME:
            bad.writer.write_eof()  # the client half-closes mid-frame
        assert await bad.closed_by_server()
        await wait_for_close_count(listener, reason, 1)
    assert log_fragment in caplog.text
    assert f"reason {reason}" in caplog.text
    assert "127.0.0.1" in caplog.text  # the log names the peer

    await bystander.send_request(metadata_request(12, ["after"]), correlation_id=2)
    response = _decode_exactly(response_class(METADATA, 12), await bystander.read_frame(), 5)
    assert [t.name for t in response.topics] == ["after"]


async def test_responses_owed_before_bad_input_are_still_delivered(make_listener, raw_peer):
    listener = await make_listener()
    peer = await raw_peer(listener)
    good = _frame(_header_v1(METADATA, 12, 5, b"x") + b"\x00" + _body(metadata_request(12, ["sleep-20"])))
    await peer.send(good + _frame(b"\x00"))
    frame = await peer.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 5
    assert await peer.closed_by_server()


async def test_half_closed_client_still_gets_its_answers(make_listener, raw_peer):
    listener = await make_listener()
    peer = await raw_peer(listener)
    await peer.send_request(metadata_request(12, ["sleep-10"]), correlation_id=3)
    peer.writer.write_eof()
    assert struct.unpack_from(">i", await peer.read_frame())[0] == 3
    assert await peer.closed_by_server()
    await wait_for_close_count(listener, CloseReason.PEER_CLOSED, 1)


async def test_idle_connection_is_closed(make_listener, raw_peer, caplog):
    listener = await make_listener(connections_max_idle_ms=50)
    peer = await raw_peer(listener)
    await peer.send_request(metadata_request(12, []), correlation_id=1)
    await peer.read_frame()
    with caplog.at_level(logging.INFO, logger="kraft_engine.protocol.listener"):
        assert await peer.closed_by_server()
        await wait_for_close_count(listener, CloseReason.IDLE, 1)
    assert "idle for more than 50 ms" in caplog.text


async def test_negative_idle_time_keeps_idle_connections_open_like_kafka(make_listener, raw_peer):
    keeps = await make_listener(connections_max_idle_ms=-1)
    closes = await make_listener(connections_max_idle_ms=50)
    kept, closed = await raw_peer(keeps), await raw_peer(closes)
    await kept.send_request(metadata_request(12, []), correlation_id=1)
    await kept.read_frame()
    await closed.send_request(metadata_request(12, []), correlation_id=1)
    await closed.read_frame()
    # By the time the 50 ms listener gave up on its peer, `kept` had been idle for longer still.
    assert await closed.closed_by_server()
    await kept.send_request(metadata_request(12, ["still-open"]), correlation_id=2)
    assert struct.unpack_from(">i", await kept.read_frame())[0] == 2
    assert keeps.registry.get_sample_value(
        "kafka_network_connections_closed_total", {"listener": "PLAINTEXT", "reason": CloseReason.IDLE}
    ) is None


async def test_a_request_in_progress_is_not_idleness(make_listener, raw_peer):
    listener = await make_listener(connections_max_idle_ms=20)
    peer = await raw_peer(listener)
    await peer.send_request(metadata_request(12, ["sleep-150"]), correlation_id=1)
    assert struct.unpack_from(">i", await peer.read_frame())[0] == 1


async def test_failing_handler_closes_its_connection_and_the_server_carries_on(make_listener, raw_peer, caplog):
    async def handler(request: Any, ctx: RequestContext) -> Any:
        if request.topics and request.topics[0].name == "boom":
            raise RuntimeError("handler bug")
        return await echo_metadata(request, ctx)

    listener = await make_listener(handler=handler)
    peer = await raw_peer(listener)
    await peer.send_request(metadata_request(12, ["fine"]), correlation_id=1)
    await peer.send_request(metadata_request(12, ["boom"]), correlation_id=2)
    await peer.send_request(metadata_request(12, ["never"]), correlation_id=3)
    with caplog.at_level(logging.ERROR, logger="kraft_engine.protocol.listener"):
        assert struct.unpack_from(">i", await peer.read_frame())[0] == 1
        assert await peer.closed_by_server()
        await wait_for_close_count(listener, CloseReason.HANDLER_ERROR, 1)
    assert "handler bug" in caplog.text

    other = await raw_peer(listener)
    await other.send_request(metadata_request(12, ["fine"]), correlation_id=4)
    assert struct.unpack_from(">i", await other.read_frame())[0] == 4


async def test_handler_returning_the_wrong_response_class_is_a_handler_error(make_listener, raw_peer):
    async def handler(request: Any, ctx: RequestContext) -> Any:
        return metadata_response(
            RequestContext(api_key=3, api_version=11, correlation_id=0, client_id=None, peer=("", 0), listener_name=""),
            [],
        )

    listener = await make_listener(handler=handler)
    peer = await raw_peer(listener)
    await peer.send_request(metadata_request(12, []), correlation_id=1)
    assert await peer.closed_by_server()
    await wait_for_close_count(listener, CloseReason.HANDLER_ERROR, 1)


async def test_closing_the_listener_closes_its_connections(make_listener, raw_peer):
    listener = await make_listener()
    peer = await raw_peer(listener)
    await peer.send_request(metadata_request(12, []), correlation_id=1)
    await peer.read_frame()
    await listener.close()
    assert await peer.closed_by_server()
    assert closes(listener, CloseReason.LISTENER_CLOSED) == 1


# --- metrics -----------------------------------------------------------------------------------


async def test_requests_and_error_codes_are_counted_per_api(make_listener, raw_peer):
    async def handler(request: Any, ctx: RequestContext) -> Any:
        from kio.schema.errors import ErrorCode as Code

        return metadata_response(ctx, ["x", "y"], error=Code.unknown_topic_or_partition)

    listener = await make_listener(handler=handler)
    peer = await raw_peer(listener)
    for correlation_id in range(3):
        await peer.send_request(metadata_request(12, ["x", "y"]), correlation_id=correlation_id)
        await peer.read_frame()
    await peer.send_request(ApiVersionsRequestV4(client_software_name="x", client_software_version="1"), correlation_id=9)
    await peer.read_frame()

    def sample(name: str, **labels: str) -> float | None:
        return listener.registry.get_sample_value(name, {"listener": "PLAINTEXT", **labels})

    assert sample("kafka_network_requests_total", request="Metadata") == 3
    assert sample("kafka_network_requests_total", request="ApiVersions") == 1
    assert sample("kafka_network_errors_total", request="Metadata", error="UNKNOWN_TOPIC_OR_PARTITION") == 6
    assert sample("kafka_network_errors_total", request="ApiVersions", error="NONE") == 1


async def test_listeners_can_share_one_registry(make_listener):
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    first = await make_listener(name="CONTROLLER", registry=registry)
    second = await make_listener(name="BROKER", registry=registry)
    assert first.metrics is second.metrics


# --- registration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "low", "high", "message"),
    [
        (18, 0, 4, "ApiVersions is served by the listener itself"),
        (3, 0, 14, "outside what kio encodes"),
        (3, 5, 6, "overlap"),
        (3, 9, 12, "contiguous"),
        (31000, 0, 0, "unknown api key"),
    ],
)
def test_registration_refuses_what_apiversions_could_not_describe(api_key, low, high, message):
    listener = Listener()
    listener.register(METADATA, min_version=0, max_version=7, handler=echo_metadata)
    with pytest.raises(ValueError, match=message):
        listener.register(api_key, min_version=low, max_version=high, handler=echo_metadata)
    assert listener.api_versions() == {3: (0, 7), 18: (0, 4)}


def test_adjacent_ranges_merge_into_one_advertised_range():
    listener = Listener()
    listener.register(METADATA, min_version=4, max_version=7, handler=echo_metadata)
    listener.register(METADATA, min_version=8, max_version=12, handler=echo_metadata)
    listener.register(METADATA, min_version=0, max_version=3, handler=echo_metadata)
    assert listener.api_versions()[METADATA] == (0, 12)


async def test_handler_context_describes_the_request_and_its_peer(make_listener, raw_peer):
    seen: list[RequestContext] = []

    async def handler(request: Any, ctx: RequestContext) -> Any:
        seen.append(ctx)
        return metadata_response(ctx, [])

    listener = await make_listener(name="CONTROLLER", handler=handler)
    peer = await raw_peer(listener)
    await peer.send_request(metadata_request(11, []), correlation_id=31, client_id="raft-1")
    await peer.read_frame()
    (ctx,) = seen
    local = peer.writer.get_extra_info("sockname")
    assert (ctx.api_key, ctx.api_version, ctx.correlation_id, ctx.client_id) == (3, 11, 31, "raft-1")
    assert ctx.peer == (local[0], local[1])
    assert ctx.listener_name == "CONTROLLER"
    assert ctx.response_class is response_class(3, 11)


async def test_peer_that_stops_reading_responses_is_closed_as_idle(make_listener, raw_peer):
    async def huge(request: Any, ctx: RequestContext) -> Any:
        return metadata_response(ctx, ["x" * 200_000])

    listener = await make_listener(handler=huge, connections_max_idle_ms=100, max_in_flight_requests=8)
    peer = await raw_peer(listener)
    for correlation_id in range(200):  # ~40 MB of answers that are never read
        await peer.send_request(metadata_request(12, []), correlation_id=correlation_id)
    async with asyncio.timeout(20):
        await wait_for_close_count(listener, CloseReason.IDLE, 1)


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ({"request_max_bytes": 0}, "socket.request.max.bytes"),
        ({"connections_max_idle_ms": 0}, "connections.max.idle.ms"),
        ({"max_in_flight_requests": 0}, "max_in_flight_requests"),
    ],
)
def test_nonsensical_limits_are_refused_by_name(setting, key):
    with pytest.raises(ValueError, match=f"{key} must be positive"):
        Listener(**setting)
