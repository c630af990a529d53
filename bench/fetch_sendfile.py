"""Fetch-serving benchmark: the same records answered from a segment file with sendfile (the
broker's path) and with the bytes read into the process and written (the copy fallback), over a
real loopback socket to a client that reads every response whole (it does not decode them).

A Listener serves Fetch v12 with one file region of `--region-mib` MiB per response (a
`SplicedResponse`, exactly what the broker's Fetch answers); the client sends `--requests`
requests one after another and reads each response whole. For each mode it prints the wall
time, MB/s and the CPU seconds the process spent (client and server share the process, so the
CPU figure is the sum; the client's share is the same in both modes). The copy mode is forced by
making loop.sendfile report no native support, which is what a TLS transport does. Prints
figures; asserts nothing.

    .venv/bin/python bench/fetch_sendfile.py [--region-mib 8] [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import resource
import struct
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from kraft_engine.protocol import FileRegion, Listener, RequestContext, SplicedResponse
from kraft_engine.protocol.framing import encode_request

FETCH = 1


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _run(path: Path, *, region_bytes: int, requests: int, copy: bool) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    if copy:
        async def unavailable(*args: Any, **kwargs: Any) -> int:
            raise asyncio.SendfileNotAvailableError("forced copy")
        loop.sendfile = unavailable  # type: ignore[method-assign]
    fd = os.open(path, os.O_RDONLY)

    async def handler(request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        region = FileRegion.of(fd, position=0, size=region_bytes)

        def build(records_of: Any) -> Any:
            partition = module.PartitionData(
                partition_index=i32(0), error_code=ErrorCode.none, high_watermark=i64(1), last_stable_offset=i64(1),
                log_start_offset=i64(0), aborted_transactions=None, preferred_read_replica=i32(-1),
                records=records_of(region), **{f.name: f.default for f in dataclasses.fields(module.PartitionData)
                                               if f.name in ("diverging_epoch", "current_leader", "snapshot_id")})
            return ctx.response_class(throttle_time=i32Timedelta.parse(timedelta(0)), error_code=ErrorCode.none,
                                      session_id=i32(0),
                                      responses=(module.FetchableTopicResponse(topic=TopicName("t"),
                                                                               partitions=(partition,)),))
        return SplicedResponse(build, [region])

    listener = Listener()
    listener.register(FETCH, min_version=12, max_version=12, handler=handler)
    await listener.start("127.0.0.1", 0)
    request = FetchRequest(
        cluster_id=None, replica_id=i32(-1), max_wait=i32Timedelta.parse(timedelta(0)), min_bytes=i32(1),
        max_bytes=i32(2**31 - 1), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
        topics=(FetchTopic(topic=TopicName("t"), partitions=(FetchPartition(
            partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0), last_fetched_epoch=i32(-1),
            log_start_offset=i64(-1), partition_max_bytes=i32(2**31 - 1)),)),),
        forgotten_topics_data=(), rack_id="")
    reader, writer = await asyncio.open_connection(*listener.address)
    cpu = _cpu_s()
    started = time.perf_counter()
    for correlation_id in range(requests):
        writer.write(encode_request(request, correlation_id=correlation_id, client_id="bench"))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        await reader.readexactly(size)
    elapsed = time.perf_counter() - started
    cpu = _cpu_s() - cpu
    writer.close()
    await listener.close()
    os.close(fd)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--region-mib", type=int, default=8)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    region_bytes = args.region_mib * 1024 * 1024
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "00000000000000000000.log"
        path.write_bytes(os.urandom(region_bytes))
        total_mb = region_bytes * args.requests / 1e6
        print(f"{args.requests} Fetch responses of {args.region_mib} MiB each ({total_mb:.0f} MB), loopback, "
              f"load average {os.getloadavg()[0]:.1f}")
        for mode, copy in (("sendfile", False), ("copy", True), ("sendfile", False), ("copy", True)):
            elapsed, cpu = asyncio.run(_run(path, region_bytes=region_bytes, requests=args.requests, copy=copy))
            print(f"  {mode:8s}: {elapsed:6.2f} s wall, {total_mb / elapsed:7.0f} MB/s, {cpu:6.2f} CPU s "
                  f"(client and server)")


if __name__ == "__main__":
    main()
