"""Pipeline benchmark: throughput of `kraftwerk pipeline run` over generated fleets of growing size.

Prints figures; asserts nothing.

The fleet generator writes N clusters of metadata logs through the engine's real controller code
(not hand-made bytes): per cluster one `QuorumController` (the node's own, fed the way the node
feeds it, its records encoded once as the node's raft appends do) registers brokers, creates
topics of 10 partitions at replication factor 3, and then runs rounds of a fencing and unfencing,
a roll (controlled shutdown, re-registration with a new incarnation, unfencing) and a partition
reassignment started and cancelled. Its committed batches are written as segments (rolled at
`--segment-bytes`, named by base offset as Kafka names them) into three controllers' directories,
as a quorum's three copies of the log, behind a LeaderChangeMessage at offset 0.

A fleet generated into `--keep-dir` is kept with a marker beside it and reused by later runs with
the same size, rounds and segment size (generating the issue's fleet takes a minute of CPU).

For each fleet size and each `local[N]` the job runs in a fresh SparkSession (the JVM's start is
timed too: it is part of a run); for each `--standalone-cores N`, on a Spark standalone cluster
started for it on loopback (`kraft_pipeline.standalone`: a master and one worker of N cores, the
job's executor given N cores), the driver in this process. While a run goes, a line after each
table is computed and written says how far it has got (wall and CPU seconds so far), so a run
stopped before its end still tells how far it got. Printed per run: log files, records decoded (every node's copy,
snapshots included), events derived, wall time, records/s, files/s, events/s and records/s per
core. Beside them, the pipeline's own per-file decoder alone (no Spark, one thread: what each
Spark task runs), which separates the decoding cost from Spark's. With Apache Kafka's jars (`scripts/fetch-kafka-jars`), the same segments go through Kafka's
`kafka-dump-log --cluster-metadata-decoder` (kafka.tools.DumpLogSegments, single-threaded; its JVM
start included), as records/s beside it.

The machine's load average is printed before and after every run: figures from a shared machine
are noisy and only comparable at similar load. Beside the wall time, each run's CPU seconds (user +
system of this process and everything it started: the Spark JVM, its Python workers, Kafka's tool;
from /proc) and records per CPU second: on a machine shared with others, a run's wall time says
more about the others than about the run, its CPU time does not. Records per CPU second is the
per-core rate to hold against Kafka's single-threaded decoder.

Usage: .venv/bin/python bench/pipeline.py [--fleets 1x1000,4x1000,8x2000] [--cores 1,2] [--rounds 10]
           [--standalone-cores 1,2] [--keep-dir DIR]
       the issue's fleet: --fleets 20x10000 --rounds 2 --cores 2,1 --standalone-cores 2,1
           --baseline-clusters 1 --keep-dir /tmp/pipeline-bench
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

from controller import MemoryLog, kafka_classpath  # bench/controller.py: the same append port and jars
from kio.schema.alter_partition_reassignments.v1.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.leader_change_message.v0 import LeaderChangeMessage
from kio.schema.leader_change_message.v0.data import Voter as LeaderVoter
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i32, i64, u16

from kraft_engine.controller import QuorumController, RecordAndVersion
from kraft_engine.kafka_uuid import random_uuid, to_kafka_str
from kraft_engine.metadata import VersionRange
from kraft_engine.raft import CommittedBatch
from kraft_engine.records import (
    FeatureLevelRecord,
    build_batch,
    build_control_batch,
    metadata_version,
)
from kraft_engine.storage.meta_properties import MetaProperties, write_meta_properties

LATEST = metadata_version.LATEST_PRODUCTION.feature_level
PARTITIONS_PER_TOPIC = 10
BROKERS = 6
CONTROLLERS = (1, 2, 3)
BATCH_STEP_MS = 100
START_MS = 1_795_214_642_000
SESSION_TIMEOUT_MS = 10_000  # above Kafka's broker.session.timeout.ms default of 9 s
REPO = Path(__file__).resolve().parents[1]


class _SegmentWriter:
    """Committed batches as segment files in every controller's `__cluster_metadata-0`."""

    def __init__(self, root: Path, *, cluster_id: str, segment_bytes: int) -> None:
        self.dirs = []
        for node_id in CONTROLLERS:
            node = root / f"controller-{node_id}"
            node.mkdir(parents=True)
            write_meta_properties(node, MetaProperties(version=1, cluster_id=cluster_id, node_id=node_id,
                                                       directory_id=uuid.UUID(int=node_id)))
            (node / "__cluster_metadata-0").mkdir()
            self.dirs.append(node / "__cluster_metadata-0")
        self.segment_bytes = segment_bytes
        self.current: bytearray = bytearray()
        self.current_base = 0
        self.records = 0

    def append(self, base_offset: int, data: bytes, records: int) -> None:
        if self.current and len(self.current) + len(data) > self.segment_bytes:
            self.flush()
        if not self.current:
            self.current_base = base_offset
        self.current += data
        self.records += records

    def flush(self) -> None:
        if self.current:
            for partition_dir in self.dirs:
                (partition_dir / f"{self.current_base:020d}.log").write_bytes(self.current)
            self.current = bytearray()


def generate_cluster(root: Path, *, partitions: int, rounds: int, segment_bytes: int, seed: int) -> int:
    """One cluster's log under `root` (three controllers' copies); returns the records per copy."""
    cluster_id = to_kafka_str(random_uuid())
    rng = random.Random(seed)
    out = _SegmentWriter(root, cluster_id=cluster_id, segment_bytes=segment_bytes)
    clock = {"ms": START_MS}
    election = LeaderChangeMessage(version=i16(0), leader_id=i32(1), voters=tuple(LeaderVoter(voter_id=i32(n)) for n in CONTROLLERS),
                                   granting_voters=tuple(LeaderVoter(voter_id=i32(n)) for n in CONTROLLERS))
    out.append(0, build_control_batch(base_offset=0, partition_leader_epoch=1, timestamp_ms=clock["ms"], records=[election]), 1)
    port = MemoryLog(first_offset=1)
    controller = QuorumController(
        node_id=1, raft=port, quorum_node_ids=CONTROLLERS,
        bootstrap_records=[RecordAndVersion(FeatureLevelRecord(name="metadata.version", feature_level=LATEST), 0)],
        local_supported_features={"metadata.version": VersionRange(7, LATEST)},
        cluster_id=cluster_id, rng=rng,
    )

    def commit() -> dict[int, object]:
        effects = controller.take_effects()
        completed = dict(effects.completed)
        if effects.failed:
            raise RuntimeError(f"the controller refused: {effects.failed}")
        while port.batches:
            # each batch's records as the port encoded them (once, as the node's raft appends do)
            encoded = port.encoded[-len(port.batches):]
            for (base, last, records), values in zip(port.take(), encoded, strict=True):
                clock["ms"] += BATCH_STEP_MS
                out.append(base, build_batch(base_offset=base, partition_leader_epoch=1, timestamp_ms=clock["ms"],
                                             values=values), len(values))
                controller.handle_commit(CommittedBatch(base, 1, records, last, append_timestamp_ms=clock["ms"]))
            port.encoded.clear()
            completed.update(controller.take_effects().completed)
        return completed

    def register(broker_id: int) -> int:
        token = controller.register_broker(BrokerRegistrationRequest(
            broker_id=BrokerId(broker_id), cluster_id=cluster_id, incarnation_id=uuid.UUID(int=rng.getrandbits(128)),
            listeners=(Listener(name="PLAINTEXT", host="127.0.0.1", port=u16(9092 + broker_id), security_protocol=i16(0)),),
            features=(Feature(name="metadata.version", min_supported_version=i16(7), max_supported_version=i16(LATEST)),),
            rack=None, log_dirs=(uuid.UUID(int=1000 + broker_id),),
        ), now_ms=clock["ms"])
        epoch: int = commit()[token].broker_epoch  # type: ignore[attr-defined]
        return epoch

    def heartbeat(broker_id: int, epoch: int, *, fence: bool = False, shut_down: bool = False) -> None:
        controller.broker_heartbeat(BrokerHeartbeatRequest(
            broker_id=BrokerId(broker_id), broker_epoch=i64(epoch), current_metadata_offset=i64(1 << 40),
            want_fence=fence, want_shut_down=shut_down), now_ms=clock["ms"])
        commit()

    controller.handle_leader_change(leader_id=1, epoch=1, now_ms=clock["ms"], raft_is_leader=True)
    commit()
    epochs = {b: register(b) for b in range(BROKERS)}
    for b in range(BROKERS):
        heartbeat(b, epochs[b])
    topics = [f"topic-{n}" for n in range(max(1, partitions // PARTITIONS_PER_TOPIC))]
    for start in range(0, len(topics), 100):
        controller.create_topics(CreateTopicsRequest(topics=tuple(
            CreatableTopic(name=TopicName(n), num_partitions=i32(PARTITIONS_PER_TOPIC), replication_factor=i16(3),
                           assignments=(), configs=())
            for n in topics[start : start + 100]
        )))
        commit()
    for round_index in range(rounds):
        fenced = round_index % BROKERS
        heartbeat(fenced, epochs[fenced], fence=True)  # fenced: leaves every ISR it was in
        heartbeat(fenced, epochs[fenced])  # unfenced
        rolled = (round_index + 1) % BROKERS
        heartbeat(rolled, epochs[rolled], shut_down=True)  # a roll: controlled shutdown,
        clock["ms"] += SESSION_TIMEOUT_MS  # the restart: the old session runs out before it is back
        epochs[rolled] = register(rolled)  # with a new incarnation,
        heartbeat(rolled, epochs[rolled])  # unfenced
        topic = topics[round_index % len(topics)]
        target = tuple(BrokerId(b) for b in rng.sample(range(BROKERS), 3))
        for replicas in (target, None):  # a reassignment started, then cancelled
            controller.alter_partition_reassignments(AlterPartitionReassignmentsRequest(topics=(
                ReassignableTopic(name=TopicName(topic), partitions=(ReassignablePartition(partition_index=i32(0),
                                                                                          replicas=replicas),)),)))
            commit()
    out.flush()
    return out.records


def generate_fleet(root: Path, *, clusters: int, partitions: int, rounds: int, segment_bytes: int) -> int:
    return sum(
        generate_cluster(root / f"cluster-{n}", partitions=partitions, rounds=rounds, segment_bytes=segment_bytes, seed=n)
        for n in range(clusters)
    )


def cached_fleet(root: Path, *, clusters: int, partitions: int, rounds: int, segment_bytes: int) -> tuple[Path, int, bool]:
    """The fleet's directory under `root`, generated unless a complete earlier one is there (its
    marker, written last, beside it); the records per copy, and whether it was generated now."""
    fleet = root / f"fleet-{clusters}x{partitions}-r{rounds}-s{segment_bytes}"
    marker = fleet.with_name(fleet.name + ".generated.json")
    if marker.is_file() and fleet.is_dir():
        return fleet, int(json.loads(marker.read_text())["records_per_copy"]), False
    marker.unlink(missing_ok=True)
    shutil.rmtree(fleet, ignore_errors=True)  # a generation stopped half-way
    per_copy = generate_fleet(fleet, clusters=clusters, partitions=partitions, rounds=rounds,
                              segment_bytes=segment_bytes)
    marker.write_text(json.dumps({"records_per_copy": per_copy}))
    return fleet, per_copy, True


def load() -> str:
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


class TreeCpu:
    """CPU seconds (user + system) of this process and everything it starts while running (the
    Spark JVM, its Python workers), from /proc. Every second a thread walks the process tree and
    keeps each process's latest own time, so processes that come and go during the run count
    (a parent's count of its reaped children would miss those it never waits for). A process
    that lives less than a second, or the last second of one, can be missed: a lower bound, a
    close one for runs of minutes. Linux only (0 elsewhere)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, str], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._own_start = time.process_time()
        self._base: dict[tuple[int, str], float] = {}
        self.cpu_s = 0.0

    def __enter__(self) -> TreeCpu:
        self._sample()  # what already runs (a JVM an earlier session started) counts from here on
        self._base = dict(self._seen)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.cpu_s = self.so_far_s()

    def so_far_s(self) -> float:
        """The CPU seconds counted up to the last sample (at most a second old while running)."""
        spent = sum(cpu_s - self._base.get(key, 0.0) for key, cpu_s in dict(self._seen).items())
        return (time.process_time() - self._own_start) + spent

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self._sample()

    def _sample(self) -> None:
        if not os.path.isdir("/proc"):
            return
        ticks = os.sysconf("SC_CLK_TCK")
        children: dict[int, list[int]] = {}
        own: dict[int, tuple[str, float]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # gone meanwhile
                continue
            fields = stat.rsplit(")", 1)[1].split()  # after the command name: state, ppid, ...
            children.setdefault(int(fields[1]), []).append(int(entry))
            # utime + stime, keyed with the start time (field 22) so a reused pid is another process
            own[int(entry)] = (fields[19], (int(fields[11]) + int(fields[12])) / ticks)
        stack = list(children.get(os.getpid(), ()))  # this process's own time comes from process_time
        while stack:
            pid = stack.pop()
            if pid in own:
                started, cpu_s = own[pid]
                self._seen[(pid, started)] = max(cpu_s, self._seen.get((pid, started), 0.0))
            stack.extend(children.get(pid, ()))


def run_pipeline(fleet: Path, *, master: str, label: str, cores: int,
                 conf: Mapping[str, str] | None = None) -> dict[str, float]:
    from kraft_pipeline.job import run
    from kraft_pipeline.session import build_session

    output = fleet.parent / f"out-{fleet.name}-{label.replace(' ', '-')}"
    started, spark = time.perf_counter(), None
    try:
        with TreeCpu() as cpu:

            def progress(step: str) -> None:
                print(f"      {label}: {step} at {time.perf_counter() - started:.0f} s wall, "
                      f"{cpu.so_far_s():.0f} CPU s (load {load()})", flush=True)

            spark = build_session(master=master, app_name="bench-pipeline", shuffle_partitions=2 * cores, conf=conf)
            tables = run(inputs=[str(fleet)], output=str(output), spark=spark, progress=progress)
            wall_s = time.perf_counter() - started
        records = tables.records.count()  # cached by the run
        events = tables.events.count()  # materialised by the run
    finally:
        if spark is not None:
            spark.stop()
    shutil.rmtree(output, ignore_errors=True)
    return {"wall_s": wall_s, "cpu_s": cpu.cpu_s, "records": records, "events": events}


def run_standalone(fleet: Path, *, cores: int, executor_memory: str) -> dict[str, float]:
    """The job on a standalone cluster started for it: a master and one worker of `cores` cores,
    the job's one executor given all of them; the cluster's processes (children of this one)
    count in the CPU seconds from the run's start."""
    from kraft_pipeline.standalone import PATIENCE, StandaloneCluster

    root = Path(tempfile.mkdtemp(prefix="kraft-bench-standalone-"))
    cluster = StandaloneCluster(root, workers=1, cores=cores, memory=executor_memory)
    try:
        cluster.start()
        cluster.wait_alive(timeout_s=600)
        conf = {**PATIENCE, "spark.executor.memory": executor_memory, "spark.executor.cores": str(cores),
                "spark.cores.max": str(cores)}
        os.environ["PYSPARK_PYTHON"] = sys.executable
        return run_pipeline(fleet, master=cluster.url, label=f"standalone {cores} core(s)", cores=cores, conf=conf)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def run_decoder(inputs: Sequence[Path]) -> dict[str, float]:
    """The pipeline's own per-file decoder (what each Spark task runs: `log_files.decode_file`, into
    Arrow batches) in this one process, no Spark: the per-core ceiling of the job's reading."""
    from kraft_pipeline.log_files import decode_file, find_log_files

    started, cpu_before = time.perf_counter(), time.process_time()
    records = sum(batch.num_rows for file in find_log_files([str(p) for p in inputs]) for batch in decode_file(file))
    return {"wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu_before, "records": records}


def run_dump_log(files: Sequence[Path], classpath: str) -> dict[str, float]:
    """Kafka's decoder over `files`, its output counted and thrown away (a pipe, not a terminal)."""
    started, children_before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    process = subprocess.Popen(
        ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath, "kafka.tools.DumpLogSegments",
         "--cluster-metadata-decoder", "--files", ",".join(str(f) for f in files)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    records = sum(1 for line in process.stdout if line.startswith(b"| offset: "))
    process.wait()  # reaped: its CPU time is now among this process's children's
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (children.ru_utime + children.ru_stime) - (children_before.ru_utime + children_before.ru_stime)
    return {"wall_s": time.perf_counter() - started, "cpu_s": cpu_s, "records": records}


def _row(fleet: str, run: str, *, files: int, figures: dict[str, float], cores: int, load_before: str) -> list[str]:
    wall_s, records = figures["wall_s"], figures["records"]
    events = figures.get("events")
    return [fleet, run, str(files), str(int(records)), "-" if events is None else str(int(events)), f"{wall_s:.1f}",
            f"{records / wall_s:,.0f}", f"{files / wall_s:.2f}", "-" if events is None else f"{events / wall_s:,.0f}",
            f"{records / wall_s / cores:,.0f}", f"{figures['cpu_s']:.1f}", f"{records / figures['cpu_s']:,.0f}",
            f"{load_before} / {load()}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fleets", default="1x1000,4x1000,8x2000",
                        help="comma-separated CLUSTERSxPARTITIONS fleet sizes (the issue's full size: 20x10000)")
    parser.add_argument("--cores", default="1,2", help="comma-separated local[N] core counts ('' for none: the "
                        "single-threaded decoders alone)")
    parser.add_argument("--rounds", type=int, default=10, help="fence + roll + reassignment rounds per cluster")
    parser.add_argument("--segment-bytes", type=int, default=1 << 20)
    parser.add_argument("--keep-dir", type=Path, default=None, help="generate the fleets here and keep them")
    parser.add_argument("--driver-memory", default="4g",
                        help="the local-mode JVM's heap (spark-submit's --driver-memory; Spark's default is 1g)")
    parser.add_argument("--baseline-clusters", type=int, default=None,
                        help="run the two single-threaded decoders (decode_file, kafka-dump-log) on the first N "
                             "clusters only (a rate, and the whole fleet takes them long); default: all")
    parser.add_argument("--standalone-cores", default="",
                        help="comma-separated executor core counts for runs on a standalone cluster started for "
                             "each ('' for none)")
    parser.add_argument("--executor-memory", default="4g", help="the standalone executor's heap (and its worker's memory)")
    args = parser.parse_args()
    # read when PySpark launches its JVM (once per process, at the first session)
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {args.driver_memory} pyspark-shell"
    root = args.keep_dir or Path(tempfile.mkdtemp(prefix="kraft-bench-pipeline-"))
    root.mkdir(parents=True, exist_ok=True)
    classpath = kafka_classpath()
    rows: list[list[str]] = []

    def report(fleet: str, run: str, *, files: int, cores: int, measure: Callable[[], dict[str, float]]) -> None:
        before = load()
        print(f"    {run}: started (load {before})", flush=True)
        figures = measure()
        rows.append(_row(fleet, run, files=files, figures=figures, cores=cores, load_before=before))
        print("    " + " | ".join(rows[-1]), flush=True)

    try:
        for size in args.fleets.split(","):
            clusters, partitions = (int(v) for v in size.lower().split("x"))
            name = f"{clusters}x{partitions}"
            print(f"--- {clusters} cluster(s) x {partitions} partitions (load {load()})", flush=True)
            started = time.perf_counter()
            fleet, per_copy, generated = cached_fleet(root, clusters=clusters, partitions=partitions,
                                                      rounds=args.rounds, segment_bytes=args.segment_bytes)
            files = sorted(fleet.rglob("*.log"))
            print(f"    {per_copy} records per copy, {len(files)} segment files, "
                  f"{sum(f.stat().st_size for f in files) / 1e6:.1f} MB, "
                  + (f"generated in {time.perf_counter() - started:.1f} s" if generated else f"reused from {fleet}"),
                  flush=True)
            # the single-threaded decoders first: short, and the rate the pipeline is held against
            baseline = [fleet / f"cluster-{n}" for n in range(min(args.baseline_clusters or clusters, clusters))]
            baseline_files = sorted(f for cluster in baseline for f in cluster.rglob("*.log"))
            label = "" if len(baseline) == clusters else f" ({len(baseline)} of the clusters)"
            report(name, f"decode_file, no Spark (1 thread){label}", files=len(baseline_files), cores=1,
                   measure=partial(run_decoder, baseline))
            if classpath is not None:
                report(name, f"kafka-dump-log (1 thread){label}", files=len(baseline_files), cores=1,
                       measure=partial(run_dump_log, baseline_files, classpath))
            else:
                print("    kafka-dump-log: skipped (no Kafka jars in .kafka-jars/: scripts/fetch-kafka-jars)")
            for cores in (int(c) for c in args.cores.split(",") if c.strip()):
                report(name, f"pipeline local[{cores}]", files=len(files), cores=cores,
                       measure=partial(run_pipeline, fleet, master=f"local[{cores}]", label=f"local[{cores}]",
                                       cores=cores))
            for cores in (int(c) for c in args.standalone_cores.split(",") if c.strip()):
                report(name, f"pipeline standalone, {cores} executor core(s)", files=len(files), cores=cores,
                       measure=partial(run_standalone, fleet, cores=cores, executor_memory=args.executor_memory))
            if args.keep_dir is None:
                shutil.rmtree(fleet, ignore_errors=True)
    finally:
        if args.keep_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    header = ["fleet", "run", "files", "records", "events", "wall s", "records/s", "files/s", "events/s",
              "records/s/core", "cpu s", "records/cpu-s", "load 1/5/15 before / after"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print()
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
