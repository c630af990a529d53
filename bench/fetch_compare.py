"""Fetch serving from segment files, our broker beside Apache Kafka 4.1's, with the same client.

Kafka answers a consumer's Fetch with the segment bytes through the kernel's sendfile (zero copy);
our broker does the same (`kraft_engine.protocol.file_regions`). This puts a figure on it: for each
system one controller and one broker on loopback (the operator's local runtime brings both up from
the same spec: our engine, and Kafka's `kafka.Kafka` from the jars of scripts/fetch-kafka-jars,
skipped with a note without them), `--mib` MiB of 1 KiB records written to a one-partition topic
(librdkafka, acks=1, uncompressed, so the segment is in the page cache as recent data is), then
the whole partition read `--passes` times by raw Fetch v12 requests (offset 0 to the end,
`--partition-mib` MiB per response, one request at a time, the next offset from the last batch's
header) in a client process of its own. Figures per system: MB/s the client received, and the
broker's CPU seconds per GB served (utime + stime of the broker process from /proc, so the client
is left out). For ours it also reads `kraftwerk_network_file_region_bytes_total` to show how many
bytes went by sendfile and how many by the copy fallback. Timing on a shared machine is noisy: the
load average is printed before and after each system. Prints figures; never passes or fails.

    .venv/bin/python bench/fetch_compare.py [--mib 256] [--passes 3] [--partition-mib 8] [--only ours] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import yaml
from _util import load_average, process_cpu_s
from broker import _bring_up  # the same bring-up as the broker benchmark
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kraft_engine.storage.java_properties import parse_properties
from kraft_operator.model import KRaftCluster
from kraft_operator.runtime.local import LocalRuntime, kafka_classpath

_SPEC = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {{name: fetch-{name}, generation: 1}}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 1
      implementation: {implementation}
      storage: {{volumes: [{{id: 0, size: 1Gi}}]}}
    - name: brokers
      roles: [broker]
      replicas: 1
      implementation: {implementation}
      storage: {{volumes: [{{id: 0, size: 10Gi}}]}}
  listeners:
    - {{name: PLAINTEXT, port: 9092}}
  config:
    offsets.topic.replication.factor: "1"
    min.insync.replicas: "1"
"""
_TOPIC = "fetch-bench"
_MB = 1e6


def _broker(cluster_dir: Path) -> tuple[str, int, int | None]:
    """(bootstrap address, pid, metrics port or None) of the one broker node."""
    for node_dir in sorted(cluster_dir.glob("node-*")):
        props = parse_properties((node_dir / "server.properties").read_text(encoding="utf-8"))
        if "broker" in props.get("process.roles", ""):
            listener = next(e for e in props["listeners"].split(",") if e.startswith("PLAINTEXT://"))
            metrics_port = props.get("kraftwerk.metrics.port")
            return (listener.removeprefix("PLAINTEXT://"), int((node_dir / "pid").read_text().strip()),
                    int(metrics_port) if metrics_port else None)
    raise RuntimeError(f"no broker under {cluster_dir}")


def _fill(bootstrap: str, *, mib: int) -> int:
    """Create the topic and write `mib` MiB of 1 KiB records; the number of records written."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(_TOPIC, 1, 1)], request_timeout=60).values():
        future.result(timeout=120)
    time.sleep(2)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "batch.size": 256 * 1024, "linger.ms": 5,
                         "compression.type": "none", "queue.buffering.max.kbytes": 256 * 1024})
    value = os.urandom(1024)
    records = mib * 1024
    failed: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failed.append(str(error))

    for _ in range(records):
        while True:
            try:
                producer.produce(_TOPIC, value=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(300) or failed:
        raise RuntimeError(f"the fill did not complete: {len(failed)} failed, first {failed[:1]}")
    return records


def _region_bytes(metrics_port: int | None) -> dict[str, float]:
    if metrics_port is None:
        return {}
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("kraftwerk_network_file_region_bytes_total{"):
            mode = line.split('mode="', 1)[1].split('"', 1)[0]
            found[mode] = found.get(mode, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


async def _client(address: str, *, passes: int, partition_bytes: int) -> None:
    """Read the whole partition `passes` times; print 'seconds bytes' per pass."""
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.fetch.v12.response import FetchResponse
    from kio.schema.types import TopicName
    from kio.static.primitive import i8, i32, i32Timedelta, i64

    from kraft_engine.protocol.framing import decode_response, encode_request

    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port), limit=2**27)
    correlation_id = 0
    try:
        for _ in range(passes):
            offset = 0
            received = 0
            started = time.perf_counter()
            while True:
                request = FetchRequest(
                    cluster_id=None, replica_id=i32(-1), max_wait=i32Timedelta.parse(timedelta(0)),
                    min_bytes=i32(1), max_bytes=i32(2**31 - 1), isolation_level=i8(0), session_id=i32(0),
                    session_epoch=i32(-1),
                    topics=(FetchTopic(topic=TopicName(_TOPIC), partitions=(FetchPartition(
                        partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(offset),
                        last_fetched_epoch=i32(-1), log_start_offset=i64(-1),
                        partition_max_bytes=i32(partition_bytes)),)),),
                    forgotten_topics_data=(), rack_id="")
                correlation_id += 1
                writer.write(encode_request(request, correlation_id=correlation_id, client_id="fetch-bench"))
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                received += 4 + size
                response = decode_response(frame, FetchResponse)
                partition = response.responses[0].partitions[0]
                records = partition.records or b""
                if partition.error_code.value != 0:
                    raise RuntimeError(f"Fetch at {offset}: {partition.error_code.name}")
                position, last = 0, None
                while position + 61 <= len(records):
                    base, length = struct.unpack_from(">qi", records, position)
                    if position + 12 + length > len(records):
                        break
                    (delta,) = struct.unpack_from(">i", records, position + 23)
                    last = base + delta
                    position += 12 + length
                if last is None:
                    if offset >= partition.high_watermark:
                        break
                    raise RuntimeError(f"Fetch at {offset} below the high watermark returned no whole batch")
                offset = last + 1
            print(f"{time.perf_counter() - started} {received}", flush=True)
    finally:
        writer.close()
        await writer.wait_closed()


def _start_profiler(pid: int, directory: str | None, name: str) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the broker process during the reads (`--profile DIR`), or None."""
    if directory is None:
        return None
    py_spy = Path(sys.executable).parent / "py-spy"
    if not py_spy.exists():
        raise SystemExit(f"--profile needs py-spy beside {sys.executable} (pip install py-spy into that venv)")
    out = Path(directory) / f"fetch-{name}.txt"
    print(f"[{name}] profiling broker pid {pid} with py-spy into {out}", flush=True)
    return subprocess.Popen([str(py_spy), "record", "--pid", str(pid), "--format",
                             "raw", "--rate", "200", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop_profiler(profiler: subprocess.Popen[bytes] | None) -> None:
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(timeout=60)


def run(name: str, implementation: str, args: argparse.Namespace) -> list[str]:
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix=f"bench-fetch-{name}-") as state:
        runtime = LocalRuntime(state)
        cluster = KRaftCluster.model_validate(yaml.safe_load(_SPEC.format(name=name, implementation=implementation)))
        try:
            cluster = asyncio.run(_bring_up(runtime, cluster))
            address, pid, metrics_port = _broker(runtime.cluster_dir(cluster))
            records = _fill(address, mib=args.mib)
            time.sleep(3)  # let the fill's tail settle before counting the broker's CPU
            before_regions = _region_bytes(metrics_port)
            load_before = load_average()
            cpu = process_cpu_s(pid)
            profiler = _start_profiler(pid, args.profile, name)
            client = subprocess.run(
                [sys.executable, __file__, "--client", address, str(args.passes), str(args.partition_mib)],
                capture_output=True, text=True, check=False, timeout=1800)
            cpu = process_cpu_s(pid) - cpu
            _stop_profiler(profiler)
            if client.returncode != 0:
                raise RuntimeError(f"the client failed: {client.stderr.strip()[-2000:]}")
            passes = [(float(s), int(b)) for s, b in (line.split() for line in client.stdout.split("\n") if line)]
            total_bytes = sum(b for _, b in passes)
            rates = [b / _MB / s for s, b in passes]
            regions = {mode: value - before_regions.get(mode, 0.0)
                       for mode, value in _region_bytes(metrics_port).items()}
            lines.append(f"[{name}] {records} records ({args.mib} MiB) read {args.passes} times, "
                         f"{args.partition_mib} MiB per response; load {load_before} before, {load_average()} after")
            lines.append(f"[{name}] pass MB/s: {', '.join(f'{r:.0f}' for r in rates)}; median "
                         f"{statistics.median(rates):.0f} MB/s; broker CPU {cpu:.2f} s for "
                         f"{total_bytes / _MB:.0f} MB = {cpu / (total_bytes / 1e9):.2f} CPU s/GB")
            if regions:
                lines.append(f"[{name}] file-region bytes during the reads: "
                             + ", ".join(f"{mode} {value / _MB:.0f} MB" for mode, value in sorted(regions.items())))
            for line in lines[-3:]:
                print(line, flush=True)
            lines.append(f"median={statistics.median(rates)} cpu_per_gb={cpu / (total_bytes / 1e9)}")
        finally:
            runtime.stop_all(timeout_s=60)
    return lines


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--client":
        asyncio.run(_client(sys.argv[2], passes=int(sys.argv[3]), partition_bytes=int(sys.argv[4]) * 1024 * 1024))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--partition-mib", type=int, default=8)
    parser.add_argument("--only", choices=("ours", "kafka"))
    parser.add_argument("--profile", metavar="DIR",
                        help="sample each broker with py-spy (in this venv) during the reads; raw stacks into DIR")
    args = parser.parse_args()
    print(f"load average at start: {load_average()} ({os.cpu_count()} CPUs)", flush=True)
    figures: dict[str, tuple[float, float]] = {}
    for name, implementation in (("ours", "kraftwerk"), ("kafka", "apache-kafka")):
        if args.only not in (None, name):
            continue
        if name == "kafka" and kafka_classpath() is None:
            print("Kafka 4.1 skipped: no jars (scripts/fetch-kafka-jars) or no java")
            continue
        last = run(name, implementation, args)[-1]
        median, per_gb = (float(part.split("=")[1]) for part in last.split())
        figures[name] = (median, per_gb)
    if len(figures) == 2:
        (ours_rate, ours_cpu), (kafka_rate, kafka_cpu) = figures["ours"], figures["kafka"]
        print(f"ours/Kafka: fetch MB/s x{ours_rate / kafka_rate:.2f}, broker CPU per GB x{ours_cpu / kafka_cpu:.2f}")
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
