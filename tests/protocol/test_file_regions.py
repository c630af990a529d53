"""Fetch records sent from a file with sendfile: the client reads exactly the file's bytes inside
a well-formed response, in non-flexible and flexible versions, and the listener counts what the
kernel sent. The fallbacks send the same bytes; a region the file lost closes the connection."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import struct
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.primitive import i8, i32, i32Timedelta, i64
from protocol_helpers import closes, wait_for_close_count

from kraft_engine.protocol import (
    CloseReason,
    FileRegion,
    Listener,
    RequestContext,
    SplicedResponse,
    request_class,
    response_class,
)

FETCH = 1


def _fetch_request(version: int) -> Any:
    cls = request_class(FETCH, version)
    module = __import__(cls.__module__, fromlist=["FetchTopic"])
    partition = dataclasses.fields(module.FetchPartition)
    values = {"partition": i32(0), "fetch_offset": i64(0), "partition_max_bytes": i32(1 << 20), "current_leader_epoch": i32(-1),
              "last_fetched_epoch": i32(-1), "log_start_offset": i64(-1)}
    fetch_partition = module.FetchPartition(**{f.name: values[f.name] for f in partition if f.name in values})
    fields = {"replica_id": i32(-1), "max_wait": i32Timedelta.parse(timedelta(0)), "min_bytes": i32(1), "max_bytes": i32(1 << 20),
              "isolation_level": i8(0), "session_id": i32(0), "session_epoch": i32(-1), "forgotten_topics_data": (),
              "rack_id": "", "cluster_id": None,
              "topics": (module.FetchTopic(topic="t", partitions=(fetch_partition,)),)}
    return cls(**{f.name: fields[f.name] for f in dataclasses.fields(cls) if f.name in fields})


def _response(ctx: RequestContext, records: list[bytes]) -> Any:
    module = ctx.response_schema
    partitions = tuple(
        module.PartitionData(**{f.name: v for f, v in (
            (f, {"partition_index": i32(i), "error_code": ErrorCode.none, "high_watermark": i64(10), "last_stable_offset": i64(10),
                 "log_start_offset": i64(0), "aborted_transactions": None, "preferred_read_replica": i32(-1),
                 "records": r}.get(f.name, ...)) for f in dataclasses.fields(module.PartitionData)) if v is not ...})
        for i, r in enumerate(records))
    fields = {"throttle_time": i32Timedelta.parse(timedelta(0)), "error_code": ErrorCode.none, "session_id": i32(0),
              "responses": (module.FetchableTopicResponse(topic="t", partitions=partitions),)}
    return ctx.response_class(**{f.name: fields[f.name] for f in dataclasses.fields(ctx.response_class) if f.name in fields})


@pytest.fixture
def fetch_listener(make_listener: Callable[..., Awaitable[Listener]]) -> Callable[[Any], Awaitable[Listener]]:
    """A started listener serving Fetch v4-16 with the given handler."""
    return lambda handler: make_listener(metadata=False, routes={FETCH: (4, 16, handler)})


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(os.urandom(300_000))
    return path


def _region(path: Path, position: int, size: int) -> FileRegion:
    fd = os.open(path, os.O_RDONLY)
    try:
        return FileRegion.of(fd, position=position, size=size)
    finally:
        os.close(fd)


def _records(frame: bytes, version: int) -> list[bytes]:
    header_size = 5 if version >= 12 else 4
    response, size = entity_reader(response_class(FETCH, version))(frame, header_size)
    assert header_size + size == len(frame), "the frame's size prefix and its content disagree"
    return [bytes(p.records or b"") for p in response.responses[0].partitions]


def _sent(listener: Any, mode: str) -> float:
    return listener.registry.get_sample_value("kraftwerk_network_file_region_bytes_total",
                                              {"listener": listener.name, "mode": mode}) or 0.0


@pytest.mark.parametrize("version", [4, 11, 12])
async def test_records_go_from_the_file_to_the_socket_with_sendfile(fetch_listener, raw_peer, segment, version):
    data = segment.read_bytes()

    async def handler(request: Any, ctx: RequestContext) -> Any:
        regions = [_region(segment, 100, 70_000), _region(segment, 200_000, 5)]
        return SplicedResponse(lambda records_of: _response(ctx, [records_of(r) for r in regions] + [b""]), regions)

    listener = await fetch_listener(handler)
    peer = await raw_peer(listener)
    for correlation_id in range(3):  # the connection stays usable
        await peer.send_request(_fetch_request(version), correlation_id=correlation_id)
        frame = await peer.read_frame()
        assert struct.unpack_from(">i", frame)[0] == correlation_id
        assert _records(frame, version) == [data[100:70_100], data[200_000:200_005], b""]
    assert _sent(listener, "sendfile") == 3 * 70_005
    assert _sent(listener, "copy") == 0
    await _no_descriptor_left_on(segment)


async def _no_descriptor_left_on(path: Path) -> None:
    """Every region's duplicate descriptor is closed once its response went out."""
    async with asyncio.timeout(30):
        while True:
            held = []
            for fd in os.listdir("/proc/self/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                        held.append(fd)
            if not held:
                return
            await asyncio.sleep(0.01)


async def test_a_placeholder_that_cannot_be_found_once_falls_back_to_the_same_bytes(fetch_listener, raw_peer, segment):
    data = segment.read_bytes()

    async def handler(request: Any, ctx: RequestContext) -> Any:
        region = _region(segment, 0, 1000)
        # The same region twice puts its placeholder twice in the frame: no unambiguous cut.
        return SplicedResponse(lambda records_of: _response(ctx, [records_of(region), records_of(region)]), [region])

    listener = await fetch_listener(handler)
    peer = await raw_peer(listener)
    await peer.send_request(_fetch_request(12), correlation_id=1)
    assert _records(await peer.read_frame(), 12) == [data[:1000], data[:1000]]
    assert _sent(listener, "sendfile") == 0
    await _no_descriptor_left_on(segment)


async def test_a_region_the_file_no_longer_holds_closes_the_connection(fetch_listener, raw_peer, segment):
    async def handler(request: Any, ctx: RequestContext) -> Any:
        region = _region(segment, 1000, 200_000)
        os.truncate(segment, 5000)  # a truncation after the answer was built
        return SplicedResponse(lambda records_of: _response(ctx, [records_of(region)]), [region])

    listener = await fetch_listener(handler)
    peer = await raw_peer(listener)
    before = closes(listener, CloseReason.SOCKET_ERROR)
    await peer.send_request(_fetch_request(12), correlation_id=1)
    # The frame promised 200,000 record bytes; the file had 4,000 left after the region's start:
    # the client gets a short frame and end of stream, never bytes of a different length.
    received = await peer.reader.read()
    (size,) = struct.unpack_from(">i", received)
    assert 4 + 4000 <= len(received) < 4 + size
    await wait_for_close_count(listener, CloseReason.SOCKET_ERROR, before + 1)
    await _no_descriptor_left_on(segment)


async def test_without_native_sendfile_the_region_is_read_and_written(fetch_listener, raw_peer, segment, monkeypatch):
    # What a transport without sendfile (TLS, another event loop) makes loop.sendfile do.
    async def unavailable(*args: Any, **kwargs: Any) -> int:
        raise asyncio.SendfileNotAvailableError("no native sendfile here")

    monkeypatch.setattr(asyncio.get_running_loop(), "sendfile", unavailable)
    data = segment.read_bytes()

    async def handler(request: Any, ctx: RequestContext) -> Any:
        region = _region(segment, 7, 150_000)
        return SplicedResponse(lambda records_of: _response(ctx, [records_of(region)]), [region])

    listener = await fetch_listener(handler)
    peer = await raw_peer(listener)
    await peer.send_request(_fetch_request(12), correlation_id=1)
    assert _records(await peer.read_frame(), 12) == [data[7:150_007]]
    assert (_sent(listener, "sendfile"), _sent(listener, "copy")) == (0, 150_000)
    await _no_descriptor_left_on(segment)
