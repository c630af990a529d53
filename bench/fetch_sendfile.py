"""Fetch-serving benchmark: the same records answered from a segment file with sendfile (the
broker's path) and with the bytes read into the process and written (the copy fallback), over a
real loopback socket, side by side.

A Listener serves Fetch v12 with one file region of `--region-mib` MiB per response (a
`SplicedResponse`, exactly what the broker's Fetch answers). The client runs in its own process
(this script with `--client`): it sends `--requests` requests one after another and reads each
response whole, and reports the wall time. The server's CPU is this process's own (getrusage
RUSAGE_SELF, which leaves the client out), so "server CPU s/GB" is what serving costs in each
mode. The copy mode is forced by making loop.sendfile report no native support, which is what a
TLS transport does. The modes alternate for `--rounds` rounds so a change of load hits both; the
table ends with each mode's median and the ratios. The segment file is in the page cache (just
written), as a broker's recent segments are. Prints figures with the load average before and
after; asserts nothing. Figures mean something only on a quiet machine.

    .venv/bin/python bench/fetch_sendfile.py [--region-mib 8] [--requests 50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import resource
import statistics
import struct
import sys
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
    """(wall seconds the client measured, server CPU seconds) for one run of one mode."""
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
    host, port = listener.address[:2]
    try:
        cpu = _cpu_s()
        client = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--client", host, str(port), str(requests), stdout=asyncio.subprocess.PIPE)
        out, _ = await client.communicate()
        cpu = _cpu_s() - cpu
        if client.returncode != 0:
            raise SystemExit(f"the client failed with status {client.returncode}")
        return float(out.decode().strip()), cpu
    finally:
        await listener.close()
        os.close(fd)


async def _client(host: str, port: int, requests: int) -> float:
    request = FetchRequest(
        cluster_id=None, replica_id=i32(-1), max_wait=i32Timedelta.parse(timedelta(0)), min_bytes=i32(1),
        max_bytes=i32(2**31 - 1), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
        topics=(FetchTopic(topic=TopicName("t"), partitions=(FetchPartition(
            partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0), last_fetched_epoch=i32(-1),
            log_start_offset=i64(-1), partition_max_bytes=i32(2**31 - 1)),)),),
        forgotten_topics_data=(), rack_id="")
    reader, writer = await asyncio.open_connection(host, port, limit=2**26)
    started = time.perf_counter()
    for correlation_id in range(requests):
        writer.write(encode_request(request, correlation_id=correlation_id, client_id="bench"))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        await reader.readexactly(size)
    elapsed = time.perf_counter() - started
    writer.close()
    return elapsed


def _load() -> str:
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--client":
        print(asyncio.run(_client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--region-mib", type=int, default=8)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    region_bytes = args.region_mib * 1024 * 1024
    runs: dict[str, list[tuple[float, float]]] = {"sendfile": [], "copy": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "00000000000000000000.log"
        path.write_bytes(os.urandom(region_bytes))
        total_mb = region_bytes * args.requests / 1e6
        print(f"Fetch served from a segment file, sendfile vs copy: {args.requests} responses of {args.region_mib} MiB "
              f"({total_mb:.0f} MB) per run over loopback, client in its own process, {os.cpu_count()} CPUs, "
              f"load average (1/5/15 min) {_load()} before")
        print(f"{'round':>5}  {'mode':8}  {'wall s':>7}  {'MB/s':>7}  {'server CPU s':>12}  {'server CPU s/GB':>15}")
        for round_number in range(1, args.rounds + 1):
            for mode in ("sendfile", "copy"):
                elapsed, cpu = asyncio.run(_run(path, region_bytes=region_bytes, requests=args.requests,
                                                copy=mode == "copy"))
                runs[mode].append((elapsed, cpu))
                print(f"{round_number:>5}  {mode:8}  {elapsed:7.2f}  {total_mb / elapsed:7.0f}  {cpu:12.2f}  "
                      f"{cpu / (total_mb / 1000):15.2f}")
    medians = {mode: (statistics.median(total_mb / e for e, _ in r), statistics.median(c / (total_mb / 1000) for _, c in r))
               for mode, r in runs.items()}
    print(f"median   sendfile {medians['sendfile'][0]:7.0f} MB/s, {medians['sendfile'][1]:.2f} server CPU s/GB | "
          f"copy {medians['copy'][0]:7.0f} MB/s, {medians['copy'][1]:.2f} server CPU s/GB")
    print(f"sendfile / copy: throughput x{medians['sendfile'][0] / medians['copy'][0]:.2f}, "
          f"server CPU per GB x{medians['sendfile'][1] / medians['copy'][1]:.2f}; load average {_load()} after")


if __name__ == "__main__":
    main()
