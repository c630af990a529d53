"""Wire benchmark: the longest stall one large request causes, on our controllers and on Kafka's.

For each case — the largest request each admin api accepts, and the oversized ones issue #18
reported — the script sends the request to the active controller and meanwhile probes the same
controller on a second connection with an ApiVersions every 5 ms. The longest probe round trip is
what a raft Fetch or a broker heartbeat arriving then would have waited (the fetch timeout is
2000 ms). The request is encoded before the probe starts and its answer decoded after it stops,
so "took" and the probe exclude the client's own encoding. It also reports how long the request
took, its outcome, whether the leader or epoch moved, and (ours) "loop max": the longest stall
our controllers' own event-loop monitors (`server/loop_stall.py`, 10 ms timer) saw since they
started, so the case that raised it shows. Prints figures; asserts nothing.

    .venv/bin/python bench/wire.py                       # starts a 3-controller quorum of ours
    .venv/bin/python bench/wire.py --system kafka        # the same with Apache Kafka 4.1's controllers
    .venv/bin/python bench/wire.py --bootstrap 127.0.0.1:19093 --no-brokers   # any running controller

With a quorum it starts, the script plays three brokers over the real protocol (registration and
heartbeats, as bench/controller.py does for both systems), so the accepted CreateTopics and
CreatePartitions cases run against Kafka's controllers too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from controller import HOST, Brokers, KafkaQuorum, Quorum, kafka_classpath
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest, PartitionData, TopicData
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from kraft_engine.admin.controller_admin import ControllerAdmin
from kraft_engine.kafka_uuid import ZERO_UUID
from kraft_engine.protocol import KafkaConnection, request_class, response_class
from kraft_engine.protocol.framing import decode_response, encode_request

TIMEOUT = i32Timedelta.parse(timedelta(seconds=120))
_PROBE_INTERVAL_S = 0.005


class Probe:
    """ApiVersions every 5 ms on its own connection; the longest round trip while running."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.longest_ms = 0.0
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Probe:
        self._connection = KafkaConnection(self.host, self.port)
        await self._connection.connect()
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def _run(self) -> None:
        cls = request_class(18, 3)
        while True:
            started = time.perf_counter()
            try:
                await self._connection.send(cls(client_software_name="probe", client_software_version="1"),
                                            timeout_ms=30000)
            except Exception:
                self.failures += 1
            self.longest_ms = max(self.longest_ms, (time.perf_counter() - started) * 1000)
            await asyncio.sleep(_PROBE_INTERVAL_S)

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._connection.close()


async def _leader(host: str, port: int) -> tuple[int, int]:
    async with KafkaConnection(host, port) as connection:
        await connection.connect()
        response = await connection.send(DescribeQuorumRequest(topics=(TopicData(
            topic_name=TopicName("__cluster_metadata"), partitions=(PartitionData(partition_index=i32(0)),)),)))
        partition = response.topics[0].partitions[0]
        return int(partition.leader_id), int(partition.leader_epoch)


def _outcome(response: Any) -> str:
    codes: dict[str, int] = {}
    for name in ("topics", "results", "responses"):
        for item in getattr(response, name, None) or ():
            code = getattr(item, "error_code", None)
            if code is not None:
                codes[code.name] = codes.get(code.name, 0) + 1
    top = getattr(response, "error_code", None)
    if top is not None and not codes:
        codes[top.name] = 1
    return ", ".join(f"{n} x{c}" for n, c in sorted(codes.items()))


async def _exchange(host: str, port: int, frame: bytes) -> bytes | None:
    """Send a ready frame on a connection of its own; the answer's frame (without its size
    prefix), or None when the connection was closed instead."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(frame)
        await writer.drain()
        try:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            return await reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
    finally:
        writer.close()


Case = tuple[str, Callable[[], Any], bool]
"""(name, build: a kio request or a ready request frame, needs registered brokers)."""


def _topics(names: list[str], partitions: int, *, configs: int = 0) -> CreateTopicsRequest:
    from kio.schema.create_topics.v7.request import CreatableTopicConfig

    return CreateTopicsRequest(topics=tuple(CreatableTopic(
        name=TopicName(n), num_partitions=i32(partitions), replication_factor=i16(3), assignments=(),
        configs=tuple(CreatableTopicConfig(name="retention.ms", value=str(1000 + k)) for k in range(configs)),
    ) for n in names), timeout=TIMEOUT, validate_only=False)


def _many_deletes_frame(size_mib: int) -> bytes:
    # DeleteTopics v6 whose topics array fills the frame: 25-byte items (a distinct 7-character
    # name, zero id, no tags), built as bytes because encoding millions of entities would take
    # minutes.
    tail = b"\x00" * 16 + b"\x00"
    count = size_mib * 1024 * 1024 // 25
    items = b"".join(b"\x08" + f"{i:07x}".encode() + tail for i in range(count))
    varint = bytearray()
    value = count + 1
    while value >= 0x80:
        varint.append((value & 0x7F) | 0x80)
        value >>= 7
    varint.append(value)
    header = struct.pack(">hhih", 20, 6, 1, 5) + b"bench" + b"\x00"
    body = bytes(varint) + items + struct.pack(">i", 30000) + b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _cases(*, big_frame_mib: int) -> list[Case]:
    return [
        ("CreateTopics 5,000 topics x 1 partition (accepted: 10,000 records)",
         lambda: _topics([f"w5k-{i}" for i in range(5000)], 1), True),
        ("CreateTopics 1 topic x 9,999 partitions (accepted: 10,000 records)",
         lambda: _topics(["w-wide"], 9999), True),
        ("CreatePartitions 1 -> 10,000 (accepted: 9,999 records)",
         lambda: CreatePartitionsRequest(topics=(CreatePartitionsTopic(
             name=TopicName("w5k-0"), count=i32(10_000), assignments=None),), timeout=TIMEOUT, validate_only=False),
         True),
        ("IncrementalAlterConfigs 10,000 topic resources",
         lambda: iac.IncrementalAlterConfigsRequest(resources=tuple(iac.AlterConfigsResource(
             resource_type=i8(2), resource_name=f"w5k-{i % 5000}-x{i}", configs=(iac.AlterableConfig(
                 name="retention.ms", config_operation=i8(0), value="1000"),)) for i in range(10_000)),
             validate_only=False), False),
        ("DeleteTopics 5,000 topics (accepted)",
         lambda: DeleteTopicsRequest(topics=tuple(DeleteTopicState(name=TopicName(f"w5k-{i}"), topic_id=ZERO_UUID)
                                                  for i in range(5000)), timeout=TIMEOUT), True),
        ("CreateTopics 100,000 topics (refused; issue: 3.0 s, leader lost)",
         lambda: _topics([f"w100k-{i}" for i in range(100_000)], 1), False),
        ("CreateTopics 1 topic x 1,000,000 partitions (refused; issue: 8.1 s, +431 MiB)",
         lambda: _topics(["w-million"], 1_000_000), False),
        (f"DeleteTopics frame of {big_frame_mib} MiB ({big_frame_mib * 1024 * 1024 // 25:,} topics, refused)",
         lambda: _many_deletes_frame(big_frame_mib), False),
    ]


async def run_cases(host: str, active: Callable[[], Awaitable[int]], *, with_brokers: bool,
                    big_frame_mib: int, only: str = "", node_stall: Callable[[], float | None] = lambda: None) -> None:
    """Each case against the controller that is active when it starts (`active()` is its port).
    `node_stall()`: the longest stall our controllers' own event-loop monitors saw since they
    started (None for Kafka's); printed after each case, so the case that raised it shows.

    A case's request is encoded before the probe starts and its answer decoded after the probe
    stops: the probe shares this process's event loop, so client-side work during the exchange
    would count as the controller's stall."""
    print(f"{'case':<78} {'took ms':>9} {'probe max ms':>13} {'loop max ms':>12}  leader/epoch      outcome")
    for name, build, needs_brokers in _cases(big_frame_mib=big_frame_mib):
        if (needs_brokers and not with_brokers) or only not in name:
            continue
        request = build()
        frame = request if isinstance(request, bytes) else encode_request(request, correlation_id=1, client_id="bench")
        port = await active()
        before = await _leader(host, port)
        answer: bytes | None = None
        failure = ""
        async with Probe(host, port) as probe:
            started = time.perf_counter()
            try:
                answer = await _exchange(host, port, frame)
            except Exception as e:
                failure = f"{type(e).__name__}: {e}"
            took_ms = (time.perf_counter() - started) * 1000
            await asyncio.sleep(0.05)
        after = await _leader(host, port)
        if failure:
            outcome = failure
        elif answer is None:
            outcome = "connection closed"
        elif isinstance(request, bytes):
            outcome = f"answered ({len(answer) + 4} bytes)"
        else:
            outcome = _outcome(decode_response(answer, response_class(request.__api_key__, request.__version__)))
        moved = "same" if after == before else f"{before} -> {after}"
        stall = await asyncio.to_thread(node_stall)
        loop_max = "-" if stall is None else f"{stall:.1f}"
        print(f"{name:<78} {took_ms:>9.0f} {probe.longest_ms:>13.1f} {loop_max:>12}  {moved:<16}  {outcome[:60]}",
              flush=True)


async def _with_quorum(system: Quorum, *, big_frame_mib: int, only: str) -> None:
    system.format()
    for node_id in (1, 2, 3):
        system.start(node_id)
    try:
        async with ControllerAdmin([(HOST, p) for p in system.ports.values()], timeout_ms=120_000) as admin:
            async def active() -> int:
                while True:
                    with contextlib.suppress(Exception):
                        leader = (await admin.describe_quorum()).leader_id
                        if leader in system.ports:
                            return system.ports[leader]
                    await asyncio.sleep(0.2)

            await active()
            brokers = Brokers(admin, system.cluster_id)
            await brokers.start()
            try:
                print(f"--- {system.name}: 3 controllers, 3 brokers played over the protocol", flush=True)
                await run_cases(HOST, active, with_brokers=True, big_frame_mib=big_frame_mib, only=only,
                                node_stall=system.raft_stall_ms)
            finally:
                await brokers.close()
    finally:
        system.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="host:port of a running active controller (ours or Kafka's)")
    parser.add_argument("--no-brokers", action="store_true", help="skip the cases that need registered brokers")
    parser.add_argument("--big-frame-mib", type=int, default=100, help="size of the largest frame (default 100)")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this text")
    parser.add_argument("--system", choices=("kraftwerk", "kafka"), default="kraftwerk",
                        help="whose three controllers to start: ours, or Apache Kafka's from .kafka-jars")
    args = parser.parse_args()
    if args.bootstrap:
        host, port = args.bootstrap.rsplit(":", 1)

        async def fixed() -> int:
            return int(port)

        asyncio.run(run_cases(host, fixed, with_brokers=not args.no_brokers, big_frame_mib=args.big_frame_mib,
                              only=args.only))
        return
    root = Path(tempfile.mkdtemp(prefix="kraft-bench-wire-"))
    try:
        if args.system == "kafka":
            classpath = kafka_classpath()
            if classpath is None:
                sys.exit("Kafka's jars (scripts/fetch-kafka-jars) or java are absent")
            system: Quorum = KafkaQuorum(root, classpath)
        else:
            system = Quorum(root)
        asyncio.run(_with_quorum(system, big_frame_mib=args.big_frame_mib, only=args.only))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
