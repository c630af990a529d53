"""Controller benchmark: a 3-controller quorum (real processes, real files) at 10k topics / 100k partitions.

Prints figures; asserts nothing. It measures what an operator would feel:

1. creating 10,000 topics of 10 partitions (RF 3, over three brokers this script plays over the
   real protocol), in CreateTopics requests of 100 topics;
2. the snapshots the active controller wrote (size, and time to encode + write the last one);
3. restart of a standby: process start until its committed image reaches the quorum's;
4. failover: `kill -9` of the active controller until a new one acknowledges a CreateTopics;
5. the fencing of one broker: in-process, the quorum controller generating the records and the
   metadata loader applying that delta to the 100k-partition image (Kafka's anchor: ~11 ms/op).

Usage: .venv/bin/python bench/controller.py [--topics 10000] [--partitions 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
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

from kraft_engine.admin.controller_admin import ControllerAdmin
from kraft_engine.controller import CommittedBatch, QuorumController, RecordAndVersion
from kraft_engine.metadata import CommittedBatch as LoaderBatch
from kraft_engine.metadata import MetadataLoader, VersionRange
from kraft_engine.records import (
    FeatureLevelRecord,
    decode_metadata_record,
    encode_metadata_record,
    metadata_version,
)
from kraft_engine.server.collector import collector_paused

HOST = "127.0.0.1"
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


class Quorum:
    def __init__(self, root: Path) -> None:
        self.root = root
        ports = _ports(6)
        self.ports = {i: ports[i - 1] for i in (1, 2, 3)}
        self.http_ports = {i: ports[i + 2] for i in (1, 2, 3)}
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.cluster_id = self._kraft("storage", "random-uuid").strip()

    def _kraft(self, *args: str) -> str:
        return subprocess.run([KRAFT, *args], check=True, capture_output=True, text=True).stdout

    def config(self, node_id: int) -> Path:
        return self.root / f"c{node_id}" / "server.properties"

    def log(self, node_id: int) -> Path:
        return self.root / f"c{node_id}" / "server.log"

    def format(self) -> None:
        initial = ",".join(f"{i}@{HOST}:{self.ports[i]}:{self._kraft('storage', 'random-uuid').strip()}"
                           for i in (1, 2, 3))
        bootstrap = ",".join(f"{HOST}:{p}" for p in self.ports.values())
        for i in (1, 2, 3):
            self.config(i).parent.mkdir(parents=True)
            self.config(i).write_text("\n".join([
                "process.roles=controller", f"node.id={i}", f"listeners=CONTROLLER://{HOST}:{self.ports[i]}",
                "controller.listener.names=CONTROLLER", "listener.security.protocol.map=CONTROLLER:PLAINTEXT",
                f"controller.quorum.bootstrap.servers={bootstrap}", f"log.dirs={self.root / f'c{i}' / 'data'}",
                f"kraftwerk.metrics.port={self.http_ports[i]}",
                "metadata.log.max.record.bytes.between.snapshots=4194304",
            ]) + "\n")
            self._kraft("storage", "format", "-c", str(self.config(i)), "-t", self.cluster_id,
                        "--initial-controllers", initial)

    def start(self, node_id: int) -> None:
        with self.log(node_id).open("ab") as out:
            self.processes[node_id] = subprocess.Popen([KRAFT, "server", "start", "--config", str(self.config(node_id))],
                                                       stdout=out, stderr=subprocess.STDOUT)

    def kill(self, node_id: int) -> None:
        process = self.processes.pop(node_id)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def close(self) -> None:
        for node_id in list(self.processes):
            self.kill(node_id)

    def status(self, node_id: int) -> dict[str, Any] | None:
        import json
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.http_ports[node_id]}/kraftwerk/status", timeout=2) as r:
                return dict(json.loads(r.read()))
        except OSError:
            return None

    def leader(self) -> int | None:
        for node_id in self.processes:
            status = self.status(node_id)
            if status is not None and status["role"] == "Leader":
                return node_id
        return None


class Brokers:
    """Three brokers' registration and heartbeats against the active controller."""

    def __init__(self, admin: ControllerAdmin, cluster_id: str) -> None:
        self.admin = admin
        self.cluster_id = cluster_id
        self.epochs: dict[int, int] = {}
        self.silent: set[int] = set()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for b in (1, 2, 3):
            response = await self.admin.send_to_active(BrokerRegistrationRequest(
                broker_id=BrokerId(b), cluster_id=self.cluster_id, incarnation_id=uuid.uuid4(),
                listeners=(Listener(name="PLAINTEXT", host=HOST, port=u16(19092 + b), security_protocol=i16(0)),),
                features=(Feature(name="metadata.version", min_supported_version=i16(7),
                                  max_supported_version=i16(LATEST)),),
                rack=None, log_dirs=(uuid.uuid4(),),
            ))
            self.epochs[b] = int(response.broker_epoch)
        self._task = asyncio.get_running_loop().create_task(self._loop())
        while True:
            answers = [await self._heartbeat(b) for b in (1, 2, 3)]
            if all(a is not None and not a.is_fenced for a in answers):
                return
            await asyncio.sleep(0.1)

    async def _heartbeat(self, broker_id: int) -> Any:
        with contextlib.suppress(Exception):
            return await self.admin.send_to_active(BrokerHeartbeatRequest(
                broker_id=BrokerId(broker_id), broker_epoch=i64(self.epochs[broker_id]),
                current_metadata_offset=i64(1 << 62), want_fence=False, want_shut_down=False,
            ))
        return None

    async def _loop(self) -> None:
        while True:
            for b in (1, 2, 3):
                if b not in self.silent:
                    await self._heartbeat(b)
            await asyncio.sleep(HEARTBEAT_S)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _create_request(names: list[str], partitions: int) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=tuple(
        CreatableTopic(name=TopicName(n), num_partitions=i32(partitions), replication_factor=i16(3), assignments=(),
                       configs=())
        for n in names
    ))


async def _wait(condition: Any, *, timeout_s: float = 600, interval_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        await asyncio.sleep(interval_s)


async def bench_cluster(topics: int, partitions: int, root: Path) -> None:
    quorum = Quorum(root)
    quorum.format()
    for i in (1, 2, 3):
        quorum.start(i)
    try:
        async with ControllerAdmin([(HOST, p) for p in quorum.ports.values()], timeout_ms=120_000) as admin:
            brokers = Brokers(admin, quorum.cluster_id)
            await brokers.start()
            started = time.monotonic()
            batch = 100
            for start in range(0, topics, batch):
                names = [f"topic-{n:05d}" for n in range(start, min(topics, start + batch))]
                response = await admin.send_to_active(_create_request(names, partitions))
                bad = [t for t in response.topics if t.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists)]
                if bad:
                    raise RuntimeError(f"CreateTopics failed: {bad[0]}")
            elapsed = time.monotonic() - started
            print(f"create {topics} topics / {topics * partitions} partitions (RF 3, {batch} topics per request): "
                  f"{elapsed:.1f} s ({elapsed / topics * 1000:.2f} ms per topic)")

            leader = quorum.leader()
            assert leader is not None
            # Snapshots: wait for one that covers most of what was written.
            with contextlib.suppress(TimeoutError):
                await _wait(lambda: bool(_snapshot_lines(quorum, leader)), timeout_s=60)
            lines = _snapshot_lines(quorum, leader)
            if lines:
                records, size, ms = lines[-1]
                files = sorted((root / f"c{leader}" / "data" / "__cluster_metadata-0").glob("*.checkpoint"))
                print(f"snapshots written by the active controller: {len(lines)}; last: {records} records, "
                      f"{size / 1e6:.1f} MB of records, encoded and written in {ms:.0f} ms; "
                      f"file {files[-1].name} {files[-1].stat().st_size / 1e6:.1f} MB")
            else:
                print("no snapshot: less than metadata.log.max.record.bytes.between.snapshots (4 MiB) was written")

            # Restart of a standby.
            standby = next(i for i in (1, 2, 3) if i != leader)
            quorum.kill(standby)
            target = quorum.status(leader)
            assert target is not None
            started = time.monotonic()
            quorum.start(standby)

            def caught_up() -> bool:
                status = quorum.status(standby)
                return status is not None and status["applied_offset"] >= target["applied_offset"]

            await _wait(caught_up)
            print(f"standby restart (process start to image caught up at offset {target['applied_offset']}): "
                  f"{time.monotonic() - started:.1f} s")

            # Failover.
            started = time.monotonic()
            quorum.kill(leader)
            survivors = [(HOST, quorum.ports[i]) for i in (1, 2, 3) if i != leader]
            async with ControllerAdmin(survivors, timeout_ms=120_000) as after:
                response = await after.send_to_active(_create_request(["after-failover"], 1))
            assert response.topics[0].error_code == ErrorCode.none, response
            print(f"failover (kill -9 of the active controller to an acknowledged CreateTopics): "
                  f"{time.monotonic() - started:.2f} s")
            await brokers.close()
    finally:
        quorum.close()


def _snapshot_lines(quorum: Quorum, node_id: int) -> list[tuple[int, int, float]]:
    text = quorum.log(node_id).read_text(errors="replace")
    return [(int(m[1]), int(m[2]), float(m[3]))
            for m in re.finditer(r"wrote snapshot \S+: (\d+) records, (\d+) bytes in ([\d.]+) ms", text)]


class _MemoryLog:
    """The controller's raft append port over a list: offsets in order, batches kept until committed."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, tuple[RecordAndVersion, ...]]] = []  # (base offset, records)
        self._next = 0
        self._prepared: tuple[int, tuple[RecordAndVersion, ...]] | None = None
        self.encoded: list[list[bytes]] = []
        self.encode_s = 0.0

    def next_append_offset(self) -> int:
        return self._next

    def prepare_append(self, *, epoch: int, records: Sequence[RecordAndVersion]) -> int:
        # Encoded once, here, as the node's RaftAppends does on the controller thread.
        started = time.perf_counter()
        self.encoded.append([encode_metadata_record(r.record, r.version) for r in records])
        self.encode_s += time.perf_counter() - started
        self._prepared = (self._next, tuple(records))
        self._next += len(records)
        return self._next - 1

    def schedule_prepared_append(self) -> None:
        if self._prepared is not None:
            self.batches.append(self._prepared)
            self._prepared = None

    def take(self) -> list[tuple[int, int, tuple[object, ...]]]:
        """(base offset, last offset, records) of every batch appended since the last call."""
        taken, self.batches = self.batches, []
        return [(base, base + len(records) - 1, tuple(r.record for r in records)) for base, records in taken]


def bench_fencing(topics: int, partitions: int) -> None:
    """In-process: generate and apply the fencing of one broker at full size."""
    log = _MemoryLog()
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
            controller.handle_commit(CommittedBatch(base, 1, records, last))
            batches.append(LoaderBatch(base_offset=base, last_offset=last, epoch=1,
                                       append_time_ms=0, size_bytes=0, records=records))
            offsets["next"] = last + 1
        loader.handle_commit(batches, high_watermark=offsets["next"])
        more = controller.take_effects()
        return dict(effects.completed + more.completed)

    controller.handle_leader_change(leader_id=0, epoch=1, now_ms=0)
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
    started = time.perf_counter()
    with collector_paused():
        controller.broker_heartbeat(BrokerHeartbeatRequest(
            broker_id=BrokerId(2), broker_epoch=i64(epochs[2]), current_metadata_offset=i64(1 << 40),
            want_fence=True, want_shut_down=False), now_ms=1)
        controller.take_effects()
    generated = time.perf_counter()
    encode_ms = (log.encode_s - encode_before_s) * 1000
    encoded = log.encoded[encoded_before:]
    encoded_at = generated
    with collector_paused():
        appended = log.take()
        for base, last, recs in appended:
            controller.handle_commit(CommittedBatch(base, 1, recs, last))
        committed = time.perf_counter()
        loader.handle_commit([LoaderBatch(base_offset=base, last_offset=last, epoch=1, append_time_ms=0,
                                          size_bytes=0, records=recs)
                              for base, last, recs in appended], high_watermark=appended[-1][1] + 1)
    applied = time.perf_counter()
    # What a standby pays on top: decoding the committed bytes.
    decode_started = time.perf_counter()
    for values in encoded:
        for value in values:
            decode_metadata_record(value)
    decoded = time.perf_counter()
    count = sum(len(recs) for _, _, recs in appended)
    total_ms = (applied - started) * 1000
    print(f"fencing one broker at {topics * partitions} partitions: {count} records; generate + replay + encode "
          f"once for raft {(generated - started) * 1000:.0f} ms (encode {encode_ms:.0f} ms of it), "
          f"commit bookkeeping {(committed - encoded_at) * 1000:.0f} ms, loader delta + new image + publish "
          f"{(applied - committed) * 1000:.0f} ms; together {total_ms:.0f} ms (goal 300 ms); a standby also decodes "
          f"them in {(decoded - decode_started) * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=10)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kraft-bench-controller-"))
    try:
        asyncio.run(bench_cluster(args.topics, args.partitions, root))
        bench_fencing(args.topics, args.partitions)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
