"""Controller benchmark: a 3-controller quorum (real processes, real files) at 10k topics / 100k partitions,
ours and, with `--systems kraftwerk,kafka`, Apache Kafka 4.1's beside it under the same workload.

Prints figures; asserts nothing. For each system, with the same harness brokers over the same protocol:

0. one CreateTopics of 9,999 partitions (10,000 records, the most one client operation may write,
   as in Kafka) on the fresh quorum: until acknowledged, and (ours) the longest raft event-loop stall it caused;
1. creating 10,000 topics of 10 partitions (RF 3, over three brokers this script plays over the
   real protocol), in CreateTopics requests of 100 topics;
2. the size of the newest snapshot the active controller wrote;
3. the fence of one broker that stops heartbeating: from its last answered heartbeat until a raft
   observer following the metadata log over Fetch (as brokers learn metadata) sees the fence
   committed; whether the fence and the partition changes before it were all written in the leader
   epoch of the start (the leadership survived the fence); ours also reports the longest stall of
   raft's event loop on any controller (`/kraftwerk/status` `loop_stall_ms_max`);
4. restart of a standby: process start until its log end reaches the quorum's high watermark (ours
   also until its image caught up);
5. failover: `kill -9` of the active controller until a new one acknowledges a CreateTopics, median
   over `--failover-trials` (the killed node is restarted and caught up between trials);
6. then a table with each figure's ours/Kafka ratio and the goals (failover and fence at or below
   Kafka's, create throughput at least half of Kafka's);
7. the fencing of one broker in-process, on the node's path: the quorum controller generating,
   replaying and encoding the records, its commit bookkeeping, and the metadata loader's delta,
   image and publish (Kafka's anchor: ~11 ms per delta apply at 100k topics).

Kafka's side needs the jars (`scripts/fetch-kafka-jars`) and java; without them it is skipped.

Usage: .venv/bin/python bench/controller.py [--topics 10000] [--partitions 10] [--systems kraftwerk,kafka]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i32, i64, u16

from kraft_engine.admin.controller_admin import ControllerAdmin, ControllerAdminError
from kraft_engine.admin.quorum_admin import QuorumAdminError
from kraft_engine.controller import QuorumController, RecordAndVersion, encode_records, records_only
from kraft_engine.metadata import MetadataLoader, VersionRange
from kraft_engine.protocol import ConnectionConfig, KafkaConnection, KafkaProtocolError, request_class
from kraft_engine.raft import CommittedBatch, RaftConfig, ReplicaKey
from kraft_engine.raft.batch_accumulator import BatchAccumulator
from kraft_engine.raft.messages import fetch_request
from kraft_engine.records import (
    BrokerRegistrationChangeRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    decode_metadata_record,
    decode_metadata_records,
    encode_metadata_record,
    metadata_version,
)
from kraft_engine.records import batches as record_batches
from kraft_engine.records.log_batch import build_data_batch, parse_batches
from kraft_engine.server.collector import collector_paused

HOST = "127.0.0.1"
# The largest CreateTopics a controller accepts: one topic of 9,999 partitions is 10,000 records, the
# most one client operation may write (Kafka's MAX_RECORDS_PER_USER_OP; 10,000 partitions are refused
# with "Unable to perform excessively large batch operation.").
BIG_REQUEST_PARTITIONS = 9_999
KRAFT = str(Path(sys.executable).with_name("kraft"))
LATEST = metadata_version.LATEST_PRODUCTION.feature_level
HEARTBEAT_S = 0.5


def _ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((HOST, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _kraft(*args: str) -> str:
    return subprocess.run([KRAFT, *args], check=True, capture_output=True, text=True).stdout


class Quorum:
    """Three kraftwerk controller processes (`kraft server start`)."""

    name = "kraftwerk"

    def __init__(self, root: Path) -> None:
        self.root = root
        ports = _ports(6)
        self.ports = {i: ports[i - 1] for i in (1, 2, 3)}
        self.http_ports = {i: ports[i + 2] for i in (1, 2, 3)}
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.killed_stall_ms = 0.0
        self.cluster_id = _kraft("storage", "random-uuid").strip()

    def config(self, node_id: int) -> Path:
        return self.root / f"c{node_id}" / "server.properties"

    def log(self, node_id: int) -> Path:
        return self.root / f"c{node_id}" / "server.log"

    def metadata_dir(self, node_id: int) -> Path:
        return self.root / f"c{node_id}" / "data" / "__cluster_metadata-0"

    def _properties(self, node_id: int) -> list[str]:
        bootstrap = ",".join(f"{HOST}:{p}" for p in self.ports.values())
        return [
            "process.roles=controller", f"node.id={node_id}", f"listeners=CONTROLLER://{HOST}:{self.ports[node_id]}",
            "controller.listener.names=CONTROLLER", "listener.security.protocol.map=CONTROLLER:PLAINTEXT",
            f"controller.quorum.bootstrap.servers={bootstrap}", f"log.dirs={self.root / f'c{node_id}' / 'data'}",
            "metadata.log.max.record.bytes.between.snapshots=4194304",
        ]

    def _initial_controllers(self) -> str:
        return ",".join(f"{i}@{HOST}:{self.ports[i]}:{_kraft('storage', 'random-uuid').strip()}" for i in (1, 2, 3))

    def format(self) -> None:
        initial = self._initial_controllers()
        for i in (1, 2, 3):
            self.config(i).parent.mkdir(parents=True)
            self.config(i).write_text("\n".join([*self._properties(i), f"kraftwerk.metrics.port={self.http_ports[i]}"])
                                      + "\n")
            _kraft("storage", "format", "-c", str(self.config(i)), "-t", self.cluster_id, "--initial-controllers",
                   initial)

    def _command(self, node_id: int) -> list[str]:
        return [KRAFT, "server", "start", "--config", str(self.config(node_id))]

    def start(self, node_id: int) -> None:
        with self.log(node_id).open("ab") as out:
            self.processes[node_id] = subprocess.Popen(self._command(node_id), stdout=out, stderr=subprocess.STDOUT)

    def kill(self, node_id: int) -> None:
        # The longest stall of a node about to be killed still counts toward the run's longest.
        status = self.status(node_id) if self.name == "kraftwerk" else None
        if status is not None:
            self.killed_stall_ms = max(self.killed_stall_ms, float(status["loop_stall_ms_max"]))
        process = self.processes.pop(node_id)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def close(self) -> None:
        for node_id in list(self.processes):
            self.kill(node_id)

    def status(self, node_id: int) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.http_ports[node_id]}/kraftwerk/status", timeout=5) as r:
                return dict(json.loads(r.read()))
        except OSError:
            return None

    def raft_stall_ms(self) -> float | None:
        """The longest stall of raft's event loop on any node of this run, the killed ones included."""
        stalls = [s["loop_stall_ms_max"] for s in map(self.status, self.processes) if s is not None]
        return max([*stalls, self.killed_stall_ms]) if stalls else None


class KafkaQuorum(Quorum):
    """Three Apache Kafka 4.1 controller processes from the jars, formatted by Kafka's own StorageTool."""

    name = "kafka"

    def __init__(self, root: Path, classpath: str) -> None:
        super().__init__(root)
        self.classpath = classpath

    def format(self) -> None:
        initial = self._initial_controllers()
        for i in (1, 2, 3):
            self.config(i).parent.mkdir(parents=True)
            self.config(i).write_text("\n".join(self._properties(i)) + "\n")
            subprocess.run(["java", "-cp", self.classpath, "kafka.tools.StorageTool", "format", "-c",
                            str(self.config(i)), "-t", self.cluster_id, "--initial-controllers", initial],
                           check=True, capture_output=True, text=True)

    def _command(self, node_id: int) -> list[str]:
        return ["java", "-Xmx2g", "-cp", self.classpath, "kafka.Kafka", str(self.config(node_id))]

    def raft_stall_ms(self) -> float | None:
        return None  # Kafka's raft runs on its own thread; it exports no such figure


def kafka_classpath() -> str | None:
    """Apache Kafka's jars as `scripts/fetch-kafka-jars` caches them, if present and java is installed."""
    root = Path(os.environ.get("KAFKA_JARS_DIR", Path(__file__).resolve().parents[1] / ".kafka-jars"))
    if not root.is_dir() or shutil.which("java") is None:
        return None
    for version_dir in sorted(root.iterdir(), reverse=True):
        if any(version_dir.glob("kafka_2.13-*.jar")):
            return f"{version_dir}/*"
    return None


class Brokers:
    """Three brokers' registration and heartbeats against the active controller, played over the
    protocol. They declare the features the controller itself supports (Kafka's controller refuses a
    broker that cannot run a finalized feature level)."""

    def __init__(self, admin: ControllerAdmin, cluster_id: str) -> None:
        self.admin = admin
        self.cluster_id = cluster_id
        self.epochs: dict[int, int] = {}
        self.silent: set[int] = set()
        self.last_answered: dict[int, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        connection = await self.admin.any_connection()
        supported = connection.api_versions_response.supported_features
        features = tuple(Feature(name=f.name, min_supported_version=f.min_version, max_supported_version=f.max_version)
                         for f in supported)
        for b in (1, 2, 3):
            response = await self.admin.send_to_active(BrokerRegistrationRequest(
                broker_id=BrokerId(b), cluster_id=self.cluster_id, incarnation_id=uuid.uuid4(),
                listeners=(Listener(name="PLAINTEXT", host=HOST, port=u16(19092 + b), security_protocol=i16(0)),),
                features=features, rack=None, log_dirs=(uuid.uuid4(),),
            ))
            if response.error_code != ErrorCode.none:
                raise RuntimeError(f"broker {b} registration refused: {ErrorCode(response.error_code).name}")
            self.epochs[b] = int(response.broker_epoch)
        self._task = asyncio.get_running_loop().create_task(self._loop())
        while True:
            answers = [await self._heartbeat(b) for b in (1, 2, 3)]
            if all(a is not None and not a.is_fenced for a in answers):
                return
            await asyncio.sleep(0.1)

    async def _heartbeat(self, broker_id: int) -> Any:
        with contextlib.suppress(Exception):
            answer = await self.admin.send_to_active(BrokerHeartbeatRequest(
                broker_id=BrokerId(broker_id), broker_epoch=i64(self.epochs[broker_id]),
                current_metadata_offset=i64(1 << 62), want_fence=False, want_shut_down=False,
            ))
            if answer.error_code == ErrorCode.none:
                self.last_answered[broker_id] = time.monotonic()
            return answer
        return None

    async def _loop(self) -> None:
        while True:
            for b in (1, 2, 3):
                if b not in self.silent:
                    await self._heartbeat(b)
            await asyncio.sleep(HEARTBEAT_S)

    async def silence(self, broker_id: int) -> float:
        """Stop heartbeating `broker_id`; the monotonic time its last heartbeat was answered."""
        self.silent.add(broker_id)
        await asyncio.sleep(2 * HEARTBEAT_S)  # a heartbeat already in flight lands first
        return self.last_answered[broker_id]

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _create_request(names: list[str], partitions: int, *, replication_factor: int = 3) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=tuple(
        CreatableTopic(name=TopicName(n), num_partitions=i32(partitions), replication_factor=i16(replication_factor),
                       assignments=(), configs=())
        for n in names
    ))


async def _wait(condition: Any, *, timeout_s: float = 600, interval_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        await asyncio.sleep(interval_s)


def _as_version(entity: Any, cls: type[Any]) -> Any:
    """A kio entity rebuilt as the same message at another version (fields that version has)."""
    module = sys.modules[cls.__module__]
    values = {}
    for f in dataclasses.fields(cls):
        value = getattr(entity, f.name)
        if dataclasses.is_dataclass(value):
            value = _as_version(value, getattr(module, type(value).__name__))
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            value = tuple(_as_version(v, getattr(module, type(v).__name__)) for v in value)
        values[f.name] = value
    return cls(**values)


@dataclasses.dataclass
class FenceSeen:
    committed_at: float  # monotonic time the fence record was first seen below the high watermark
    fence_offset: int
    partition_changes: int  # PartitionChangeRecords before the fence record, in the observed epochs
    epochs: set[int]  # epochs of the batches that carried them
    first_change_at: float | None  # monotonic time the first of them reached the observer
    fence_fetched_at: float  # ... and the fence record (maybe before it was committed)


# A framed metadata record's second byte is its api key (frame version 1 and keys < 128 are one
# byte each): PartitionChangeRecord's is 5. The observer counts those undecoded, so that its own
# CPU (on the machine it measures) does not delay what it reports.
_PARTITION_CHANGE_KEY = bytes([5])


async def _observe_fence(admin: ControllerAdmin, *, cluster_id: str, broker_id: int, deadline_s: float) -> FenceSeen:
    """Follow the metadata log as a raft observer (Fetch, as brokers learn metadata) from the current
    high watermark until a fence of `broker_id` is committed. A leader change moves the observer to
    the new leader; a divergence truncates what it saw."""
    quorum = await admin.describe_quorum()
    offset, epoch = quorum.high_watermark, quorum.leader_epoch
    observer = ReplicaKey(1000 + broker_id, uuid.uuid4())
    seen: list[tuple[int, int, bool]] = []  # (offset, epoch, is the fence) of partition changes and the fence
    first_change_at: float | None = None
    fence_fetched_at: float | None = None
    connection: KafkaConnection | None = None
    try:
        while time.monotonic() < deadline_s:
            try:
                if connection is None:
                    quorum = await admin.describe_quorum()
                    leader = quorum.nodes[quorum.leader_id][0]
                    connection = KafkaConnection(leader.host, leader.port,
                                                 config=ConnectionConfig(client_id="bench-observer"))
                    await connection.connect(timeout_ms=10_000)
                newest = max(int(k.max_version) for k in connection.api_versions_response.api_keys
                             if int(k.api_key) == 1)
                request = fetch_request(cluster_id=cluster_id, replica=observer, epoch=quorum.leader_epoch,
                                        fetch_offset=offset, last_fetched_epoch=epoch, high_watermark=None,
                                        max_wait_ms=100, max_bytes=256 << 20)
                response = await connection.send(_as_version(request, request_class(1, min(18, newest))),
                                                 timeout_ms=30_000)
                arrived = time.monotonic()
                partition = response.responses[0].partitions[0]
                if partition.error_code != ErrorCode.none:
                    raise RuntimeError(ErrorCode(partition.error_code).name)
            except (KafkaProtocolError, OSError, RuntimeError, QuorumAdminError):
                if connection is not None:
                    await connection.close()
                connection = None
                await asyncio.sleep(0.2)
                continue
            diverging = partition.diverging_epoch
            if int(diverging.epoch) >= 0:
                offset, epoch = int(diverging.end_offset), int(diverging.epoch)
                seen = [entry for entry in seen if entry[0] < offset]
                continue
            for batch in parse_batches(partition.records or b""):
                offset, epoch = batch.last_offset + 1, batch.epoch
                if batch.is_control:
                    continue
                for index, value in enumerate(batch.records):
                    if value[1:2] == _PARTITION_CHANGE_KEY:
                        seen.append((batch.base_offset + index, batch.epoch, False))
                        if first_change_at is None:
                            first_change_at = arrived
                        continue
                    record, _ = decode_metadata_record(value)
                    if (isinstance(record, BrokerRegistrationChangeRecord) and record.broker_id == broker_id
                            and record.fenced == 1) or (isinstance(record, FenceBrokerRecord) and record.id == broker_id):
                        seen.append((batch.base_offset + index, batch.epoch, True))
                        if fence_fetched_at is None:
                            fence_fetched_at = arrived
            fences = [entry for entry in seen if entry[2]]
            if fences and int(partition.high_watermark) > fences[0][0]:
                fence_offset = fences[0][0]
                before = [entry for entry in seen if entry[0] <= fence_offset]
                return FenceSeen(arrived, fence_offset, len(before) - 1, {e for _, e, _ in before},
                                 first_change_at, fence_fetched_at or arrived)
    finally:
        if connection is not None:
            await connection.close()
    raise TimeoutError("no committed fence seen")


def _fence_split(seen: FenceSeen, *, last_heartbeat: float, wall_minus_monotonic: float,
                 large_write: dict[str, Any] | None) -> str:
    """Where the time from the last answered heartbeat to the observed fence went, in seconds after
    that heartbeat: the leader's steps (its `/kraftwerk/status` `last_large_write`, wall-clock ms)
    and the observer's."""
    def mono(ms: int | None) -> str:
        return "?" if ms is None else f"{ms / 1000 - wall_minus_monotonic - last_heartbeat:.2f}"

    steps = []
    if large_write is not None:
        steps += [
            f"fence check due (session expiry) {mono(large_write['due_ms'])}",
            f"began {mono(large_write['started_ms'])}",
            f"raft reserved all {large_write['batches']} batches of {large_write['records']} records "
            f"{mono(large_write['reserved_ms'])}",
            f"applied and released to the log {mono(large_write['released_ms'])}",
            f"committed on the leader {mono(large_write['committed_ms'])}",
        ]
    if seen.first_change_at is not None:
        steps.append(f"observer: first partition change fetched {seen.first_change_at - last_heartbeat:.2f}")
    steps += [f"fence fetched {seen.fence_fetched_at - last_heartbeat:.2f}",
              f"commit seen {seen.committed_at - last_heartbeat:.2f}"]
    return "; ".join(steps)


async def _high_watermark(admin: ControllerAdmin) -> int:
    """The quorum's high watermark, once known: right after a leader change DescribeQuorum answers
    -1 until the new leader commits (a standby measured against -1 is 'caught up' at once)."""
    while True:
        with contextlib.suppress(Exception):
            hwm = int((await admin.describe_quorum()).high_watermark)
            if hwm >= 0:
                return hwm
        await asyncio.sleep(0.1)


async def _failover(system: Quorum, admin: ControllerAdmin) -> float:
    """kill -9 of the active controller until a new one acknowledges a CreateTopics."""
    quorum = await admin.describe_quorum()
    leader = quorum.leader_id
    started = time.monotonic()
    system.kill(leader)
    survivors = [(HOST, system.ports[i]) for i in (1, 2, 3) if i != leader]
    async with ControllerAdmin(survivors, timeout_ms=120_000) as after:
        response = await after.send_to_active(_create_request([f"after-failover-{uuid.uuid4().hex[:8]}"], 1,
                                                              replication_factor=1))
    # The name is new: TOPIC_ALREADY_EXISTS means the client's first try was committed and its answer
    # lost with the controller that gave it, and the retry found the topic.
    if response.topics[0].error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
        raise RuntimeError(f"CreateTopics after failover: {response.topics[0]}")
    elapsed = time.monotonic() - started
    # Bring the killed controller back and let it catch up before the next trial.
    system.start(leader)
    target = await _high_watermark(admin)

    async def caught_up() -> bool:
        with contextlib.suppress(Exception):
            q = await admin.describe_quorum()
            return any(v.replica_id == leader and v.log_end_offset >= target for v in q.voters)
        return False

    await _wait(caught_up, interval_s=0.2)
    if system.name == "kraftwerk":
        # The next trial's standbys are current: their controllers replayed what their logs hold.
        await _image_caught_up(system, leader, target)
    return elapsed


async def _image_caught_up(system: Quorum, node_id: int, target: int) -> None:
    """Until the node's metadata image has applied `target` (its status endpoint may not be up yet)."""
    await _wait(lambda: _async_bool((system.status(node_id) or {}).get("applied_offset", -1) >= target),
                interval_s=0.1)


async def bench_system(system: Quorum, *, topics: int, partitions: int, failover_trials: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    print(f"--- {system.name}: 3 controllers, {topics} topics x {partitions} partitions (RF 3)", flush=True)
    system.format()
    for i in (1, 2, 3):
        system.start(i)
    try:
        bootstrap = [(HOST, p) for p in system.ports.values()]
        async with ControllerAdmin(bootstrap, timeout_ms=300_000) as admin:
            brokers = Brokers(admin, system.cluster_id)
            await brokers.start()
            # The largest CreateTopics a controller accepts, alone on a fresh quorum, so the longest
            # raft stall so far is its own.
            started = time.monotonic()
            response = await admin.send_to_active(_create_request(["one-big-request"], BIG_REQUEST_PARTITIONS))
            # TOPIC_ALREADY_EXISTS: the first try was committed, its answer was late, the retry found it.
            if response.topics[0].error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                raise RuntimeError(f"CreateTopics of {BIG_REQUEST_PARTITIONS} partitions failed: {response.topics[0]}")
            results["big_request_s"] = time.monotonic() - started
            results["big_request_stall_ms"] = system.raft_stall_ms()
            print(f"one CreateTopics of {BIG_REQUEST_PARTITIONS} partitions: acknowledged after "
                  f"{results['big_request_s']:.2f} s"
                  + ("" if results["big_request_stall_ms"] is None else
                     f"; longest raft event-loop stall on any controller so far {results['big_request_stall_ms']:.0f} ms"),
                  flush=True)
            started = time.monotonic()
            batch = 100
            for start in range(0, topics, batch):
                names = [f"topic-{n:05d}" for n in range(start, min(topics, start + batch))]
                response = await admin.send_to_active(_create_request(names, partitions))
                bad = [t for t in response.topics if t.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists)]
                if bad:
                    raise RuntimeError(f"CreateTopics failed: {bad[0]}")
            results["create_s"] = elapsed = time.monotonic() - started
            stall = system.raft_stall_ms()
            print(f"create {topics} topics / {topics * partitions} partitions ({batch} topics per request): "
                  f"{elapsed:.1f} s ({elapsed / topics * 1000:.2f} ms per topic)"
                  + ("" if stall is None else f"; longest raft event-loop stall on any controller so far {stall:.0f} ms"),
                  flush=True)

            # Snapshots: wait for the newest to cover most of what was written.
            quorum = await admin.describe_quorum()
            leader = quorum.leader_id

            async def snapshot_near_end() -> bool:
                newest = max((int(f.name.split("-")[0]) for f in system.metadata_dir(leader).glob("*.checkpoint")),
                             default=0)
                return newest >= quorum.high_watermark * 0.8

            with contextlib.suppress(TimeoutError):
                await _wait(snapshot_near_end, timeout_s=30, interval_s=0.5)
            files = sorted(f for f in system.metadata_dir(leader).glob("*.checkpoint")
                           if not f.name.startswith("00000000000000000000-"))  # not the bootstrap checkpoint
            results["snapshot_mb"] = files[-1].stat().st_size / 1e6 if files else None
            print(f"newest snapshot of the active controller: {files[-1].name if files else 'none'} "
                  f"{results['snapshot_mb'] or 0:.1f} MB", flush=True)

            # One broker's fence, seen as a broker sees it: through the metadata log.
            epoch_before = quorum.leader_epoch
            observer = asyncio.ensure_future(_observe_fence(admin, cluster_id=system.cluster_id, broker_id=2,
                                                            deadline_s=time.monotonic() + 150))
            await asyncio.sleep(0.5)
            last_heartbeat = await brokers.silence(2)
            wall_minus_monotonic = time.time() - time.monotonic()
            try:
                seen: FenceSeen | None = await observer
            except TimeoutError:
                seen = None
            after = await admin.describe_quorum()
            brokers.silent.discard(2)
            if seen is None:
                results["fence_s"] = None
                results["fence_same_leader"] = None
                print(f"fence of broker 2: NOT committed within {150 - 1:.0f} s of its last heartbeat; leader epoch "
                      f"{epoch_before} -> {after.leader_epoch}", flush=True)
            else:
                results["fence_s"] = seen.committed_at - last_heartbeat
                results["fence_same_leader"] = after.leader_epoch == epoch_before and seen.epochs == {epoch_before}
                print(f"fence of broker 2 (last answered heartbeat to the fence committed, seen by a metadata-log "
                      f"observer): {results['fence_s']:.2f} s (session timeout 9 s); {seen.partition_changes} "
                      f"partition changes before it; epochs {sorted(seen.epochs)}, leader epoch {epoch_before} -> "
                      f"{after.leader_epoch}", flush=True)
                large_write = None
                if system.name == "kraftwerk" and int(after.leader_id) in system.http_ports:
                    large_write = (system.status(int(after.leader_id)) or {}).get("last_large_write")
                    if large_write is not None and large_write["last_offset"] != seen.fence_offset:
                        large_write = None  # not the fence's (the fence record is the last of its write)
                print("  where the time went (s after the last answered heartbeat): "
                      + _fence_split(seen, last_heartbeat=last_heartbeat, wall_minus_monotonic=wall_minus_monotonic,
                                     large_write=large_write), flush=True)
            results["raft_stall_ms"] = system.raft_stall_ms()
            if results["raft_stall_ms"] is not None:
                print(f"longest raft event-loop stall on any controller so far: {results['raft_stall_ms']:.0f} ms "
                      f"(fetch timeout 2000 ms)", flush=True)

            # Restart of a standby: until its log end reaches the quorum's high watermark.
            standby = next(i for i in (1, 2, 3) if i != leader)
            system.kill(standby)
            target = await _high_watermark(admin)
            started = time.monotonic()
            system.start(standby)

            async def standby_caught_up() -> bool:
                with contextlib.suppress(Exception):
                    q = await admin.describe_quorum()
                    return any(v.replica_id == standby and v.log_end_offset >= target for v in q.voters)
                return False

            await _wait(standby_caught_up, interval_s=0.1)
            results["standby_s"] = time.monotonic() - started
            line = f"standby restart (process start to log end at the high watermark {target}): {results['standby_s']:.1f} s"
            if system.name == "kraftwerk":
                await _image_caught_up(system, standby, target)
                line += f"; image caught up after {time.monotonic() - started:.1f} s"
            print(line, flush=True)

            trials: list[float | None] = []
            for _ in range(failover_trials):
                try:
                    trials.append(await _failover(system, admin))
                except (ControllerAdminError, QuorumAdminError, RuntimeError, OSError) as error:
                    # A trial whose quorum never acknowledged is reported, not a reason to lose the rest.
                    print(f"failover trial failed: {error}", flush=True)
                    trials.append(None)
                    break
            done = [t for t in trials if t is not None]
            results["failover_s"] = statistics.median(done) if done and len(done) == len(trials) else None
            print(f"failover (kill -9 of the active controller to an acknowledged CreateTopics), {len(trials)} "
                  f"trials: median {_fmt(results['failover_s'])} s "
                  f"({', '.join('failed' if t is None else f'{t:.2f}' for t in trials)})", flush=True)
            stall = system.raft_stall_ms()
            if stall is not None:
                results["raft_stall_ms"] = max(stall, results["raft_stall_ms"] or 0)
            await brokers.close()
    finally:
        system.close()
    return results


async def _async_bool(value: bool) -> bool:
    return value


_ROWS = (
    ("big_request_s", "one CreateTopics of 9,999 partitions (10,000 records), acknowledged (s)", ""),
    ("create_s", "create time (s)", "ours/Kafka <= 2 (throughput >= 0.5x)"),
    ("snapshot_mb", "snapshot size (MB)", ""),
    ("standby_s", "standby catch-up (s)", ""),
    ("failover_s", "failover to an acknowledged CreateTopics, median (s)", "ours/Kafka <= 1"),
    ("fence_s", "last heartbeat to committed fence, seen by an observer (s)", "ours/Kafka <= 1"),
)


def print_comparison(results: dict[str, dict[str, Any]]) -> None:
    ours, kafka = results.get("kraftwerk"), results.get("kafka")
    print("\n| figure | kraftwerk | Kafka 4.1 | ours/Kafka | goal |\n|---|---|---|---|---|")
    for key, label, goal in _ROWS:
        a = None if ours is None else ours.get(key)
        b = None if kafka is None else kafka.get(key)
        ratio = f"{a / b:.2f}" if a is not None and b else "-"
        met = ""
        if goal and ratio != "-":
            limit = 2.0 if key == "create_s" else 1.0
            met = " met" if a / b <= limit else " NOT met"
        print(f"| {label} | {_fmt(a)} | {_fmt(b)} | {ratio} | {goal}{met} |")
    for name, figures in results.items():
        if figures.get("big_request_stall_ms") is not None:
            print(f"| longest raft stall after one 9,999-partition CreateTopics ({name}, ms) | "
                  f"{figures['big_request_stall_ms']:.0f} | | | a small fraction of 2000 |")
        if figures.get("raft_stall_ms") is not None:
            print(f"| longest raft stall ({name}, ms) | {figures['raft_stall_ms']:.0f} | | | < 2000 |")
        print(f"| fence and its ISR shrinks under one leader ({name}) | {figures.get('fence_same_leader')} | | | |")


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}"


class MemoryLog:
    """The controller's raft append port over a list: offsets in order, batches kept until committed.
    (bench/pipeline.py's fleet generator drives its controllers through it too.)"""

    def __init__(self, *, first_offset: int = 0) -> None:
        self.batches: list[tuple[int, Sequence[object]]] = []  # (base offset, records)
        self._next = first_offset
        self._prepared: list[tuple[int, Sequence[object]]] = []
        self.encoded: list[list[bytes]] = []
        self.encode_s = 0.0

    def next_append_offset(self) -> int:
        return self._next

    def prepare_appends(self, *, epoch: int, batches: Sequence[Sequence[RecordAndVersion]]) -> list[int]:
        # Encoded once, here, as the node's RaftAppends does on the controller thread.
        last_offsets = []
        for records in batches:
            started = time.perf_counter()
            self.encoded.append(encode_records(records))
            self.encode_s += time.perf_counter() - started
            self._prepared.append((self._next, records_only(records)))
            self._next += len(records)
            last_offsets.append(self._next - 1)
        return last_offsets

    def schedule_prepared_append(self) -> None:
        self.batches.extend(self._prepared)
        self._prepared = []

    def take(self) -> list[tuple[int, int, Sequence[object]]]:
        """(base offset, last offset, records) of every batch appended since the last call (a
        fan-out's records kept as its run, as the node hands its own records to its loader)."""
        taken, self.batches = self.batches, []
        return [(base, base + len(records) - 1, records) for base, records in taken]


def bench_fencing(topics: int, partitions: int, *, profile_path: Path | None = None) -> None:
    """In-process: generate and apply the fencing of one broker at full size.

    With `profile_path`, the fence (generate to publish) runs under cProfile and its stats are
    written there (read them with `python -m pstats`)."""
    log = MemoryLog()
    controller = QuorumController(
        node_id=0, raft=log, quorum_node_ids=(0,),
        bootstrap_records=[RecordAndVersion(FeatureLevelRecord(name="metadata.version", feature_level=LATEST), 0)],
        local_supported_features={"metadata.version": VersionRange(7, LATEST)},
        cluster_id="MkU3OEVBNTcwNTJENDM2Qg", rng=random.Random(0),
    )
    loader = MetadataLoader()
    offsets = {"next": 0}

    def commit() -> Any:
        effects = controller.take_effects()
        batches = []
        for base, last, records in log.take():
            batch = CommittedBatch(base, 1, records, last, append_timestamp_ms=0)
            controller.handle_commit(batch)
            batches.append(batch)
            offsets["next"] = last + 1
        loader.handle_commit(batches, high_watermark=offsets["next"])
        more = controller.take_effects()
        return dict(effects.completed + more.completed)

    controller.handle_leader_change(leader_id=0, epoch=1, now_ms=0, raft_is_leader=True)
    commit()
    epochs = {}
    for b in (1, 2, 3):
        token = controller.register_broker(BrokerRegistrationRequest(
            broker_id=BrokerId(b), cluster_id="MkU3OEVBNTcwNTJENDM2Qg", incarnation_id=uuid.uuid4(),
            listeners=(Listener(name="PLAINTEXT", host=HOST, port=u16(9092), security_protocol=i16(0)),),
            features=(Feature(name="metadata.version", min_supported_version=i16(7), max_supported_version=i16(LATEST)),),
            rack=None, log_dirs=(uuid.uuid4(),),
        ), now_ms=0)
        epochs[b] = commit()[token].broker_epoch
    for b in (1, 2, 3):
        controller.broker_heartbeat(BrokerHeartbeatRequest(
            broker_id=BrokerId(b), broker_epoch=i64(epochs[b]), current_metadata_offset=i64(1 << 40),
            want_fence=False, want_shut_down=False), now_ms=0)
        commit()
    for start in range(0, topics, 100):
        with collector_paused():  # as the node's controller thread runs every event
            controller.create_topics(_create_request([f"t{n}" for n in range(start, min(topics, start + 100))],
                                                     partitions))
        with collector_paused():
            commit()
    # The fence, on the path the node takes: the heartbeat event generates and replays the records
    # and encodes them once for raft; the commit event hands the same record objects to the
    # controller's commit bookkeeping and to the loader (no decode on the leader).
    encode_before_s, encoded_before = log.encode_s, len(log.encoded)
    profiler = cProfile.Profile() if profile_path is not None else None
    if profiler is not None:
        profiler.enable()
    cpu = [time.process_time()]
    wall = [time.perf_counter()]
    with collector_paused():
        controller.broker_heartbeat(BrokerHeartbeatRequest(
            broker_id=BrokerId(2), broker_epoch=i64(epochs[2]), current_metadata_offset=i64(1 << 40),
            want_fence=True, want_shut_down=False), now_ms=1)
        controller.take_effects()
    cpu.append(time.process_time())
    wall.append(time.perf_counter())
    encode_ms = (log.encode_s - encode_before_s) * 1000
    encoded = log.encoded[encoded_before:]
    with collector_paused():
        appended = log.take()
        committed = [CommittedBatch(base, 1, recs, last, append_timestamp_ms=0) for base, last, recs in appended]
        for batch in committed:
            controller.handle_commit(batch)
        cpu.append(time.process_time())
        wall.append(time.perf_counter())
        loader.handle_commit(committed, high_watermark=appended[-1][1] + 1)
    cpu.append(time.process_time())
    wall.append(time.perf_counter())
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(str(profile_path))
    # Raft's share on the way to the commit: the leader cuts the write into log batches of one
    # Fetch's worth and builds them (one per poll), a follower parses what it fetched.
    defaults = RaftConfig()
    accumulator = BatchAccumulator(epoch=1, next_offset=0, linger_ms=0, max_batch_size_bytes=defaults.max_batch_size_bytes,
                                   max_number_of_batches=defaults.max_number_of_batches,
                                   preferred_batch_size_bytes=defaults.fetch_max_bytes)
    accumulator.append_groups(encoded, now_ms=0)
    pending = accumulator.drain()
    raft_started = time.process_time()
    built = [build_data_batch(b.values, base_offset=b.base_offset, epoch=1, timestamp_ms=0) for b in pending]
    raft_built = time.process_time()
    record_batches._REMEMBERED.clear()  # the leader's memo of what it built: a follower's process has none
    for chunk in built:
        record_batches.decode_records(chunk)
    raft_parsed = time.process_time()
    print(f"raft's share: the leader builds {len(built)} log batches of {sum(map(len, built)) / 1e6:.1f} MB in "
          f"{(raft_built - raft_started) * 1000:.0f} ms CPU; a follower decodes them in "
          f"{(raft_parsed - raft_built) * 1000:.0f} ms CPU")
    # What a standby pays on top: decoding the committed bytes.
    decode_started = time.perf_counter()
    for values in encoded:
        decode_metadata_records(values)  # as the node does: alike partition changes decoded once per shape
    decoded = time.perf_counter()
    count = sum(len(recs) for _, _, recs in appended)

    def spent(i: int) -> str:
        return f"{(cpu[i + 1] - cpu[i]) * 1000:.0f} ms CPU ({(wall[i + 1] - wall[i]) * 1000:.0f} wall)"

    print(f"fencing one broker at {topics * partitions} partitions: {count} records; generate + replay + encode "
          f"once for raft {spent(0)}, of it encode {encode_ms:.0f} ms wall; commit bookkeeping {spent(1)}; "
          f"loader delta + new image + publish {spent(2)}; together {(cpu[-1] - cpu[0]) * 1000:.0f} ms CPU "
          f"({(wall[-1] - wall[0]) * 1000:.0f} wall; goal 300 ms); a standby also decodes them in "
          f"{(decoded - decode_started) * 1000:.0f} ms wall")

    # A standby that fell behind loads the newest snapshot: the 100k-partition image's records,
    # decoded, replayed by a fresh controller and a fresh loader (one controller event on the node).
    values = [encode_metadata_record(record, version) for record, version in loader.image.records().records]
    standby = QuorumController(
        node_id=1, raft=MemoryLog(), quorum_node_ids=(0, 1),
        bootstrap_records=[RecordAndVersion(FeatureLevelRecord(name="metadata.version", feature_level=LATEST), 0)],
        local_supported_features={"metadata.version": VersionRange(7, LATEST)},
        cluster_id="MkU3OEVBNTcwNTJENDM2Qg", rng=random.Random(1),
    )
    standby_loader = MetadataLoader()
    cpu_started = time.process_time()
    started = time.perf_counter()
    with collector_paused():
        snapshot = [decode_metadata_record(value)[0] for value in values]
        decoded = time.perf_counter()
        standby.handle_load_snapshot(last_contained_offset=offsets["next"] - 1, epoch=1, records=snapshot)
        replayed = time.perf_counter()
        standby_loader.handle_load_snapshot(snapshot, last_contained_offset=offsets["next"] - 1,
                                            last_contained_epoch=1, last_contained_log_time_ms=0)
    loaded = time.perf_counter()
    print(f"loading a snapshot of {topics * partitions} partitions ({len(values)} records, "
          f"{sum(len(v) for v in values) / 1e6:.1f} MB of records) on a standby: decode {(decoded - started) * 1000:.0f} "
          f"ms, controller replay {(replayed - decoded) * 1000:.0f} ms, loader image {(loaded - replayed) * 1000:.0f} ms; "
          f"together {(loaded - started) * 1000:.0f} ms wall, {(time.process_time() - cpu_started) * 1000:.0f} ms CPU "
          f"(goal 2000 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--systems", default="kraftwerk",
                        help="comma-separated: kraftwerk, kafka (Apache Kafka 4.1 from scripts/fetch-kafka-jars)")
    parser.add_argument("--failover-trials", type=int, default=5)
    parser.add_argument("--skip-fencing", action="store_true", help="skip the in-process fencing cost")
    parser.add_argument("--profile-fencing", type=Path, default=None,
                        help="write cProfile stats of the in-process fence (generate to publish) to this file")
    parser.add_argument("--fencing-only", action="store_true",
                        help="only the in-process fencing cost and snapshot load (no processes)")
    parser.add_argument("--keep-dir", type=Path, default=None,
                        help="run the quorums in this (new) directory and keep it: the nodes' logs stay for reading")
    args = parser.parse_args()
    if args.fencing_only:
        bench_fencing(args.topics, args.partitions, profile_path=args.profile_fencing)
        print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
        return
    if args.keep_dir is not None:
        args.keep_dir.mkdir(parents=True)
    root = args.keep_dir or Path(tempfile.mkdtemp(prefix="kraft-bench-controller-"))
    results: dict[str, dict[str, Any]] = {}
    try:
        for name in [n.strip() for n in args.systems.split(",") if n.strip()]:
            system: Quorum
            if name == "kafka":
                classpath = kafka_classpath()
                if classpath is None:
                    print("--- kafka: skipped (no Kafka jars in .kafka-jars/, run scripts/fetch-kafka-jars, or no java)")
                    continue
                system = KafkaQuorum(root / name, classpath)
            elif name == "kraftwerk":
                system = Quorum(root / name)
            else:
                raise SystemExit(f"unknown system {name!r} (kraftwerk, kafka)")
            results[name] = asyncio.run(bench_system(system, topics=args.topics, partitions=args.partitions,
                                                     failover_trials=args.failover_trials))
        if results:
            print_comparison(results)
        if "kraftwerk" in args.systems and not args.skip_fencing:
            bench_fencing(args.topics, args.partitions, profile_path=args.profile_fencing)
        print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    finally:
        if args.keep_dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
