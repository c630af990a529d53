"""The listener alone under one huge refused request: the longest stall of its event loop.

`bench/wire.py` measures a whole controller quorum from outside, so on a loaded machine its probe
mostly shows CPU scheduling. This isolates the wire layer: one `protocol.Listener` in this process
serves DeleteTopics v6 and refuses every topic with POLICY_VIOLATION, building the per-topic
results as the controller's handler does (`server.controller_apis._each`, the real function).
A client process sends a DeleteTopics frame of `--mib` MiB (25-byte items: 838,860 topics at 20
MiB) and reads the whole answer. Meanwhile the node's own loop monitor (`server.loop_stall`, here
with a 1 ms timer) records how late the loop woke, and a `gc.callbacks` hook times every garbage
collection. It then measures the same monitor on an idle loop for as long, which is the machine's
own noise floor at that load. Prints figures; asserts nothing.

    .venv/bin/python bench/listener_stall.py --mib 20

Run it against an older tree for an A/B at the same load:
`PYTHONPATH=/path/to/old/engine .venv/bin/python bench/listener_stall.py` (the old tree's
`kraft_engine` is then imported).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
from datetime import timedelta
from typing import Any

from _util import load_average
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from kraft_engine.protocol import Listener, RequestContext
from kraft_engine.server.controller_apis import _each
from kraft_engine.server.loop_stall import LoopStallMonitor

_CLIENT = r'''
import socket, struct, sys, time
mib = int(sys.argv[2])
tail = b"\x00" * 16 + b"\x00"
count = mib * 1024 * 1024 // 25
items = b"".join(b"\x08" + f"{i:07x}".encode() + tail for i in range(count))
varint = bytearray(); value = count + 1
while value >= 0x80:
    varint.append((value & 0x7F) | 0x80); value >>= 7
varint.append(value)
header = struct.pack(">hhih", 20, 6, 1, 5) + b"bench" + b"\x00"
body = bytes(varint) + items + struct.pack(">i", 30000) + b"\x00"
frame = struct.pack(">i", len(header) + len(body)) + header + body
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
started = time.perf_counter()
s.sendall(frame)
size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
got = 0
while got < size:
    got += len(s.recv(1 << 20))
print(f"{count:,} topics in {len(frame):,} bytes; answered with {size:,} bytes in "
      f"{(time.perf_counter() - started) * 1000:.0f} ms", flush=True)
'''

_ZERO = i32Timedelta.parse(timedelta(0))


async def _run(mib: int) -> None:
    pauses: list[tuple[float, int]] = []
    started = [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append(((time.perf_counter() - started[0]) * 1000, int(info["generation"])))

    listener = Listener("CONTROLLER")

    async def refuse(request: Any, ctx: RequestContext) -> Any:
        result_cls = ctx.response_schema.DeletableTopicResult
        results = await _each(request.topics, lambda t: result_cls(
            name=t.name, topic_id=t.topic_id, error_code=ErrorCode.policy_violation,
            error_message="Unable to perform excessively large batch operation."))
        return ctx.response_class(throttle_time=_ZERO, responses=tuple(results))

    listener.register(20, min_version=6, max_version=6, handler=refuse)
    await listener.start("127.0.0.1", 0)
    monitor = LoopStallMonitor(interval_ms=1)
    monitor.start()
    await asyncio.sleep(0.2)
    monitor.max_stall_ms = 0.0
    gc.callbacks.append(timed)
    began = time.monotonic()
    try:
        client = await asyncio.create_subprocess_exec(sys.executable, "-c", _CLIENT, str(listener.port), str(mib))
        await client.wait()
        await asyncio.sleep(0.2)
    finally:
        gc.callbacks.remove(timed)
    took_s = time.monotonic() - began
    longest = sorted(pauses, reverse=True)[:3]
    print(f"request: longest loop stall {monitor.max_stall_ms:.1f} ms; longest collections "
          + ", ".join(f"{ms:.0f} ms (gen {g})" for ms, g in longest) + f"   load {load_average()}", flush=True)
    monitor.max_stall_ms = 0.0
    await asyncio.sleep(took_s)
    print(f"idle loop for as long ({took_s:.0f} s): longest stall {monitor.max_stall_ms:.1f} ms   load {load_average()}")
    await monitor.close()
    await listener.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=20, help="size of the DeleteTopics frame (default 20)")
    args = parser.parse_args()
    print(f"load average at start: {load_average()} ({os.cpu_count()} CPUs)", flush=True)
    asyncio.run(_run(args.mib))


if __name__ == "__main__":
    main()
