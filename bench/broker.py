"""Broker figures, ours beside Apache Kafka 4.1's: three controllers and three brokers on loopback
for each (the operator's local runtime brings both up from the same spec: our engine, and Kafka's
`kafka.Kafka` from the jars of scripts/fetch-kafka-jars, skipped with a note without them), and the
same client for both, librdkafka through confluent-kafka, so the client is not what is measured.

- produce: `--records` records of `--record-bytes` (1 KiB) to a topic of RF 3 and 3 partitions,
  acks=all, idempotent, `batch.size` 64 KiB, `linger.ms` 5: MB/s and records/s over the whole run;
- consume: the same topic from the start in a group of one (a new group each pass, after a first
  group has created `__consumer_offsets`), `--consume-passes`
  passes: the median and best pass in MB/s (timed from the first record), and the CPU seconds the
  brokers spent per GiB served, read from /proc (what serving costs each system, which the MB/s of
  a loaded machine hides). The client's prefetch queue is set large enough to hold the topic, so
  librdkafka never stops fetching for `fetch.queue.backoff.ms` (a full 64 MiB queue pauses it for a
  second, which measured the client's setting, not the broker);
- latency at a fixed rate both sustain (`--rate` records/s for `--latency-s` s): produce latency
  (send to delivery report) p50/p99, and end-to-end (send to a consumer's poll) p50/p99;
- RSS of each broker process (MiB) after the runs.

Each figure gets an ours/Kafka ratio. The goals the issue sets (consume ≥ 0.9x, produce ≥ 0.5x,
p99 within 2x, RSS below Kafka's) are marked met or not. Timing on a shared machine is noisy: the
load average is printed before and after. Prints figures; never passes or fails.

`--tls` measures what TLS costs instead: each implementation's cluster is brought up with
`spec.tls` (mTLS between nodes, the authorizer on) and two client listeners, PLAINTEXT and SSL
(mTLS with a user's certificate the operator issued from the clients CA); produce and consume
throughput over each (a topic each), printed as mTLS/plaintext ratios per implementation and
ours/Kafka per listener. Replication between brokers is mTLS in both (the REPLICATION listener),
so the ratio is the clients' path alone. Prints figures; asserts nothing.

`--profile DIR` samples our brokers with py-spy (when installed) during the produce run and
during the consume passes, and prints for each where their busy time goes (the frames with the
most samples of their own, and the broker's main paths with what they include); the raw samples
stay in DIR/produce and DIR/consume.

    .venv/bin/python bench/broker.py [--records 50000] [--rate 500] [--latency-s 10] [--only ours]
        [--consume-passes 5] [--profile DIR] [--tls]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import yaml
from _util import load_average, process_cpu_s, rss_mib
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kraft_engine.storage.java_properties import parse_properties
from kraft_operator.metrics import OperatorMetrics
from kraft_operator.model import ConditionStatus, ConditionType, KRaftCluster
from kraft_operator.reconciler import Reconciler
from kraft_operator.runtime.local import LocalRuntime, kafka_classpath

_SPEC = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {{name: bench-{name}, generation: 1}}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 3
      implementation: {implementation}
      storage: {{volumes: [{{id: 0, size: 1Gi}}]}}
    - name: brokers
      roles: [broker]
      replicas: 3
      implementation: {implementation}
      storage: {{volumes: [{{id: 0, size: 10Gi}}]}}
  listeners:
    - {{name: PLAINTEXT, port: 9092}}
  config:
    offsets.topic.replication.factor: "3"
    min.insync.replicas: "2"
    group.initial.rebalance.delay.ms: "0"
"""
_TOPIC = "bench"
_MB = 1024 * 1024
_F = TypeVar("_F")


@dataclass
class Figures:
    produce_mb_s: float = float("nan")
    produce_records_s: float = float("nan")
    consume_mb_s: float = float("nan")
    consume_best_mb_s: float = float("nan")
    consume_records_s: float = float("nan")
    broker_cpu_s_per_gib: float = float("nan")
    produce_p50_ms: float = float("nan")
    produce_p99_ms: float = float("nan")
    e2e_p50_ms: float = float("nan")
    e2e_p99_ms: float = float("nan")
    rss_mib: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


async def _bring_up(runtime: LocalRuntime, cluster: KRaftCluster,
                    also: Callable[[], bool] = lambda: True) -> KRaftCluster:
    """Reconcile until Ready with nothing left to do and `also()` holds."""
    reconciler = Reconciler(runtime, rng=random.Random(7), metrics=OperatorMetrics())
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        result = await reconciler.reconcile(cluster)
        cluster = cluster.model_copy(update={"status": result.status})
        condition = result.status.condition(ConditionType.READY)
        if condition is not None and condition.status is ConditionStatus.TRUE and not result.actions and also():
            return cluster
        degraded = result.status.condition(ConditionType.DEGRADED)
        if degraded is not None and degraded.reason == "InvalidSpec":
            raise RuntimeError(f"the bench's spec is refused: {degraded.message}")
        await asyncio.sleep(0.5)
    raise RuntimeError("the cluster did not become Ready within 600 s")


def _brokers(cluster_dir: Path, listener: str = "PLAINTEXT") -> list[tuple[str, int]]:
    """(address of `listener`, pid) of every broker node, from its server.properties and pid file."""
    found = []
    for node_dir in sorted(cluster_dir.glob("node-*")):
        config = node_dir / "server.properties"
        if not config.exists():
            continue
        props = parse_properties(config.read_text(encoding="utf-8"))
        if "broker" not in props.get("process.roles", ""):
            continue
        endpoint = next(e for e in props["listeners"].split(",") if e.startswith(f"{listener}://"))
        found.append((endpoint.removeprefix(f"{listener}://"), int((node_dir / "pid").read_text().strip())))
    return found


def _our_broker_ports(cluster_dir: Path) -> list[int]:
    """The metrics ports of our broker nodes (Kafka's have none)."""
    ports = []
    for node_dir in sorted(cluster_dir.glob("node-*")):
        config = node_dir / "server.properties"
        props = parse_properties(config.read_text(encoding="utf-8")) if config.exists() else {}
        if "broker" in props.get("process.roles", "") and props.get("kraftwerk.metrics.port"):
            ports.append(int(props["kraftwerk.metrics.port"]))
    return ports


def _loop_stalls(cluster_dir: Path) -> list[tuple[float, dict[float, float]]]:
    """Per broker of ours: the longest event-loop stall since start (ms), and the stall
    histogram's cumulative sample counts by upper bound (ms, +Inf the total; the monitor samples
    every 10 ms)."""
    found = []
    for port in _our_broker_ports(cluster_dir):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/kraftwerk/status", timeout=10) as answer:
            longest = float(json.loads(answer.read())["loop_stall_ms_max"])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        buckets = _stall_buckets(text)
        found.append((longest, buckets))
    return found


def _stall_buckets(text: str) -> dict[float, float]:
    buckets = {}
    for line in text.splitlines():
        if line.startswith('kraftwerk_event_loop_stall_ms_bucket{le="'):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[float("inf") if bound == "+Inf" else float(bound)] = float(line.rsplit(" ", 1)[1])
    return buckets


def _print_loop_stalls(name: str, before: list[tuple[float, dict[float, float]]],
                       after: list[tuple[float, dict[float, float]]]) -> None:
    """Each broker's stalls over the produce, consume and latency runs: samples later than 100,
    250 and 1000 ms (of all taken), and the longest since start."""
    parts = []
    for (_, old), (longest, new) in zip(before, after, strict=True):
        total = new.get(float("inf"), 0.0) - old.get(float("inf"), 0.0)
        over = {bound: (total - (new.get(bound, 0.0) - old.get(bound, 0.0))) for bound in (100.0, 250.0, 1000.0)}
        parts.append(f"{int(over[100.0])}/{int(over[250.0])}/{int(over[1000.0])} of {int(total)} samples, "
                     f"max {longest:.0f} ms")
    if parts:
        print(f"[{name}] event-loop stalls over the runs, >100/>250/>1000 ms (one loop carries replication, fetches,"
              f" produce and checkpoints): {'; '.join(parts)}", flush=True)


def _create_topic(bootstrap: str, *, topic: str = _TOPIC, client: Mapping[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    for future in admin.create_topics([NewTopic(topic, 3, 3)], request_timeout=60).values():
        future.result(timeout=120)
    time.sleep(2)  # leaders settle on every broker


def _producer(bootstrap: str, client: Mapping[str, str] | None = None) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                     "batch.size": 64 * 1024, "linger.ms": 5, "queue.buffering.max.kbytes": 64 * 1024,
                     **(client or {})})


def _produce_throughput(bootstrap: str, *, records: int, record_bytes: int, figures: Figures, topic: str = _TOPIC,
                        client: Mapping[str, str] | None = None) -> None:
    producer = _producer(bootstrap, client)
    value = os.urandom(record_bytes)
    errors: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            errors.append(str(error))

    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - started
    if errors:
        figures.notes.append(f"{len(errors)} produce errors, first: {errors[0]}")
    figures.produce_records_s = records / elapsed
    figures.produce_mb_s = records * record_bytes / _MB / elapsed


def _consume_pass(bootstrap: str, *, records: int, topic: str = _TOPIC,
                  client: Mapping[str, str] | None = None) -> tuple[int, int, float]:
    """(records, bytes, seconds from the first record to the last) of one group of one reading the
    topic from the start."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "fetch.max.bytes": 50 * _MB, "max.partition.fetch.bytes": 10 * _MB,
                         "queued.max.messages.kbytes": 2_000_000, "queued.min.messages": 10_000_000,
                         **(client or {})})
    try:
        consumer.subscribe([topic])
        got = size = 0
        started = None
        deadline = time.monotonic() + 300
        while got < records and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=min(10_000, records - got), timeout=1.0):
                if message.error() is not None:
                    continue
                if started is None:
                    started = time.perf_counter()  # from the first record: the group join is not consuming
                got += 1
                size += len(message.value() or b"")
        return got, size, time.perf_counter() - (started or time.perf_counter())
    finally:
        consumer.close()


def _consume_throughput(bootstrap: str, *, records: int, passes: int, pids: list[int], figures: Figures,
                        topic: str = _TOPIC, client: Mapping[str, str] | None = None) -> None:
    rates: list[tuple[float, float]] = []
    cpu_before = [process_cpu_s(pid) for pid in pids]
    served = 0
    for _ in range(passes):
        got, size, elapsed = _consume_pass(bootstrap, records=records, topic=topic, client=client)
        served += size
        if got < records:
            figures.notes.append(f"a consume pass read only {got} of {records}")
        if elapsed > 0:
            rates.append((size / _MB / elapsed, got / elapsed))
    cpu_s = sum(process_cpu_s(pid) - before for pid, before in zip(pids, cpu_before, strict=True))
    if rates:
        rates.sort()
        figures.consume_mb_s, figures.consume_records_s = rates[len(rates) // 2]
        figures.consume_best_mb_s = rates[-1][0]
    if served:
        figures.broker_cpu_s_per_gib = cpu_s / (served / 1024**3)


def _latency(bootstrap: str, *, rate: int, seconds: float, record_bytes: int, figures: Figures) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-e2e-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "latest", "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(_TOPIC, p, -1) for p in range(3)])  # OFFSET_END
    consumer.consume(timeout=2.0)
    producer = _producer(bootstrap)
    sent_at: dict[bytes, float] = {}
    produce_ms: list[float] = []
    e2e_ms: list[float] = []

    def delivered(error: object, message: object) -> None:
        if error is None:
            key = message.key()  # type: ignore[attr-defined]
            produce_ms.append((time.perf_counter() - sent_at[key]) * 1000)

    padding = os.urandom(max(0, record_bytes - 16))
    total = int(rate * seconds)
    started = time.perf_counter()
    for i in range(total):
        due = started + i / rate
        while (now := time.perf_counter()) < due:
            producer.poll(0)
            for message in consumer.consume(num_messages=1000, timeout=0):
                if message.error() is None and message.key() in sent_at:
                    e2e_ms.append((now - sent_at[message.key()]) * 1000)
            time.sleep(min(0.001, max(0.0, due - now)))
        key = i.to_bytes(8, "big")
        sent_at[key] = time.perf_counter()
        producer.produce(_TOPIC, key=key, value=padding, on_delivery=delivered)
    producer.flush(60)
    deadline = time.monotonic() + 30
    while len(e2e_ms) < total and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=1000, timeout=0.2):
            if message.error() is None and message.key() in sent_at:
                e2e_ms.append((time.perf_counter() - sent_at[message.key()]) * 1000)
    consumer.close()
    figures.produce_p50_ms, figures.produce_p99_ms = _p(produce_ms, 0.5), _p(produce_ms, 0.99)
    figures.e2e_p50_ms, figures.e2e_p99_ms = _p(e2e_ms, 0.5), _p(e2e_ms, 0.99)
    if len(e2e_ms) < total:
        figures.notes.append(f"end-to-end saw {len(e2e_ms)} of {total} records")


def _p(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run(name: str, implementation: str, args: argparse.Namespace) -> Figures:
    figures = Figures()
    with tempfile.TemporaryDirectory(prefix=f"bench-broker-{name}-") as state:
        runtime = LocalRuntime(state)
        cluster = KRaftCluster.model_validate(yaml.safe_load(_SPEC.format(name=name, implementation=implementation)))
        try:
            started = time.monotonic()
            cluster = asyncio.run(_bring_up(runtime, cluster))
            brokers = _brokers(runtime.cluster_dir(cluster))
            bootstrap = ",".join(address for address, _ in brokers)
            print(f"[{name}] Ready in {time.monotonic() - started:.0f} s, brokers {bootstrap}   load {load_average()}",
                  flush=True)
            _create_topic(bootstrap)
            stalls_before = _loop_stalls(runtime.cluster_dir(cluster))
            pids = [pid for _, pid in brokers]
            profiling = args.profile if name == "ours" else None
            with _Profile(profiling and str(Path(profiling) / "produce"), pids=pids,
                          phase="the produce run") as profile:
                _produce_throughput(bootstrap, records=args.records, record_bytes=args.record_bytes, figures=figures)
            print(f"[{name}] produce {figures.produce_mb_s:.1f} MB/s   load {load_average()}", flush=True)
            profile.report()
            # The first group creates __consumer_offsets (50 partitions opened on every broker):
            # a cluster's one-time cost, kept out of the consume figures.
            _consume_pass(bootstrap, records=min(args.records, 1000))
            with _Profile(profiling and str(Path(profiling) / "consume"), pids=pids,
                          phase="the consume passes") as profile:
                _consume_throughput(bootstrap, records=args.records, passes=args.consume_passes, pids=pids,
                                    figures=figures)
            print(f"[{name}] consume {figures.consume_mb_s:.1f} MB/s (median of {args.consume_passes}),"
                  f" best {figures.consume_best_mb_s:.1f}; brokers' CPU {figures.broker_cpu_s_per_gib:.2f} s/GiB"
                  f"   load {load_average()}", flush=True)
            profile.report()
            _latency(bootstrap, rate=args.rate, seconds=args.latency_s, record_bytes=args.record_bytes,
                     figures=figures)
            figures.rss_mib = [rss_mib(pid) for _, pid in brokers]
            _print_loop_stalls(name, stalls_before, _loop_stalls(runtime.cluster_dir(cluster)))
        finally:
            runtime.stop_all(timeout_s=60)
    return figures


_TLS_SPEC = _SPEC.replace("""  listeners:
    - {{name: PLAINTEXT, port: 9092}}
""", """  listeners:
    - {{name: PLAINTEXT, port: 9092}}
    - {{name: MTLS, port: 9094, protocol: SSL}}
  tls: {{}}
  users:
    - name: bench
      authentication: tls
      acls:
        - resource: {{type: topic, name: bench, patternType: prefix}}
          operations: [All]
        - resource: {{type: group, name: bench, patternType: prefix}}
          operations: [All]
""")
_TLS_TOPICS = {"PLAINTEXT": "bench-plaintext", "MTLS": "bench-mtls"}


@dataclass
class TlsFigures:
    """Produce and consume over each client listener of one secured cluster."""

    by_listener: dict[str, Figures] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _secret_files(state: str, name: str) -> Path:
    return Path(state) / "default" / "_secrets" / name


def _anonymous_acls(replication: str, operator_secret: Path) -> None:
    """ACLs for `User:ANONYMOUS` (the PLAINTEXT listener's principal) on the bench topics and
    groups, made as the operator (a super user) over its mTLS REPLICATION listener: with spec.tls
    the authorizer is on, and the operator only manages its own users' ACLs."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    keystore = (operator_secret / "keystore.pem").read_text(encoding="utf-8")
    start = keystore.index("-----BEGIN CERTIFICATE-----")
    admin = AdminClient({"bootstrap.servers": replication, "security.protocol": "SSL",
                         "ssl.key.pem": keystore[:start], "ssl.certificate.pem": keystore[start:],
                         "ssl.ca.location": str(operator_secret / "truststore.pem")})
    bindings = [AclBinding(resource, "bench", ResourcePatternType.PREFIXED, "User:ANONYMOUS", "*", AclOperation.ALL,
                           AclPermissionType.ALLOW) for resource in (ResourceType.TOPIC, ResourceType.GROUP)]
    for future in admin.create_acls(bindings, request_timeout=60).values():
        future.result(timeout=120)
    time.sleep(2)  # every broker replays the ACLs


def run_tls(name: str, implementation: str, args: argparse.Namespace) -> TlsFigures:
    """One secured cluster (spec.tls: mTLS between nodes, the authorizer on) with a PLAINTEXT and an
    SSL (mTLS, a user's certificate from the clients CA) client listener: produce and consume
    throughput over each. Replication between brokers is mTLS in both cases (the REPLICATION
    listener), so the ratio is what TLS costs on the clients' path alone."""
    figures = TlsFigures()
    cluster_name = f"bench-{name}-tls"
    with tempfile.TemporaryDirectory(prefix=f"bench-broker-{name}-tls-") as state:
        runtime = LocalRuntime(state)
        spec = _TLS_SPEC.format(name=f"{name}-tls", implementation=implementation)
        cluster = KRaftCluster.model_validate(yaml.safe_load(spec))
        user = _secret_files(state, f"{cluster_name}-user-bench")
        try:
            started = time.monotonic()
            cluster = asyncio.run(_bring_up(runtime, cluster, also=(user / "user.crt").exists))
            cluster_dir = runtime.cluster_dir(cluster)
            pids = [pid for _, pid in _brokers(cluster_dir)]
            print(f"[{name} TLS] Ready in {time.monotonic() - started:.0f} s   load {load_average()}", flush=True)
            replication = ",".join(a for a, _ in _brokers(cluster_dir, "REPLICATION"))
            _anonymous_acls(replication, _secret_files(state, f"{cluster_name}-operator-tls"))
            clients: dict[str, dict[str, str]] = {
                "PLAINTEXT": {},
                "MTLS": {"security.protocol": "SSL", "ssl.ca.location": str(user / "ca.crt"),
                         "ssl.certificate.location": str(user / "user.crt"),
                         "ssl.key.location": str(user / "user.key")},
            }
            for listener, client in clients.items():
                bootstrap = ",".join(a for a, _ in _brokers(cluster_dir, listener))
                topic = _TLS_TOPICS[listener]
                measured = figures.by_listener[listener] = Figures()
                _create_topic(bootstrap, topic=topic, client=client)
                _produce_throughput(bootstrap, records=args.records, record_bytes=args.record_bytes,
                                    figures=measured, topic=topic, client=client)
                # The first group creates __consumer_offsets: kept out of the figures, as above.
                _consume_pass(bootstrap, records=min(args.records, 1000), topic=topic, client=client)
                _consume_throughput(bootstrap, records=args.records, passes=args.consume_passes, pids=pids,
                                    figures=measured, topic=topic, client=client)
                print(f"[{name} {listener}] produce {measured.produce_mb_s:.1f} MB/s, consume"
                      f" {measured.consume_mb_s:.1f} MB/s (median of {args.consume_passes}), brokers' CPU"
                      f" {measured.broker_cpu_s_per_gib:.2f} s/GiB   load {load_average()}", flush=True)
        finally:
            runtime.stop_all(timeout_s=60)
    return figures


def _tls_table(ours: TlsFigures, theirs: TlsFigures | None) -> None:
    rows = [("produce MB/s (acks=all, RF 3)", "produce_mb_s"), ("consume MB/s (median)", "consume_mb_s"),
            ("consume MB/s, best pass", "consume_best_mb_s"), ("brokers' CPU s per GiB served", "broker_cpu_s_per_gib")]
    print(f"\n{'TLS cost (mTLS vs PLAINTEXT listener)':<38}{'plain':>9}{'mTLS':>9}{'mTLS/plain':>12}")
    for name, figures in (("ours", ours), ("Kafka 4.1", theirs)):
        if figures is None or set(figures.by_listener) != {"PLAINTEXT", "MTLS"}:
            continue
        for label, attribute in rows:
            plain = getattr(figures.by_listener["PLAINTEXT"], attribute)
            tls = getattr(figures.by_listener["MTLS"], attribute)
            print(f"{name + ': ' + label:<38}{plain:>9.1f}{tls:>9.1f}{_ratio(tls, plain):>12}")
    if theirs is not None and set(theirs.by_listener) == set(ours.by_listener) == {"PLAINTEXT", "MTLS"}:
        print(f"\n{'ours/Kafka':<38}{'plain':>9}{'mTLS':>9}")
        for label, attribute in rows:
            mine = [getattr(ours.by_listener[lst], attribute) for lst in ("PLAINTEXT", "MTLS")]
            kafka = [getattr(theirs.by_listener[lst], attribute) for lst in ("PLAINTEXT", "MTLS")]
            print(f"{label:<38}{_ratio(mine[0], kafka[0]):>9}{_ratio(mine[1], kafka[1]):>9}")
    for name, figures in (("ours", ours), ("Kafka", theirs)):
        for listener, measured in (figures.by_listener.items() if figures is not None else ()):
            for note in measured.notes:
                print(f"{name} {listener}: {note}")


class _Profile:
    """py-spy sampling the given processes while the block runs (nothing without a directory or
    without py-spy); `report` prints where the busy samples went."""

    def __init__(self, directory: str | None, *, pids: list[int], phase: str) -> None:
        self._directory = None if directory is None else Path(directory)
        self._pids = pids
        self._phase = phase
        self._spies: list[subprocess.Popen[bytes]] = []
        self._outputs: list[Path] = []
        self._spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))

    def __enter__(self) -> _Profile:
        if self._directory is None:
            return self
        if self._spy is None:
            print("profile skipped: py-spy is not installed (pip install py-spy)", flush=True)
            return self
        self._directory.mkdir(parents=True, exist_ok=True)
        for pid in self._pids:
            output = self._directory / f"broker-{pid}.txt"
            self._outputs.append(output)
            self._spies.append(subprocess.Popen(
                [self._spy, "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "-o", str(output)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(2)  # py-spy attaches
        return self

    def __exit__(self, *_: object) -> None:
        for spy in self._spies:
            spy.send_signal(signal.SIGINT)  # py-spy writes its samples on SIGINT
        for spy in self._spies:
            try:
                spy.wait(timeout=60)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()

    def report(self, *, top: int = 12) -> None:
        own: Counter[str] = Counter()
        within: Counter[str] = Counter()
        idle = busy = 0
        for output in self._outputs:
            if not output.exists():
                continue
            for line in output.read_text(encoding="utf-8").splitlines():
                stack, _, count_text = line.rpartition(" ")
                count = int(count_text)
                frames = [f.strip() for f in stack.split(";") if f.strip()]
                if not frames or _IDLE_FRAMES.search(frames[-1]):
                    idle += count
                    continue
                busy += count
                own[_frame(frames[-1])] += count
                for name in {_frame(f) for f in frames if _BROKER_PATHS.search(f)}:
                    within[name] += count
        if not busy:
            return
        print(f"[ours] py-spy during {self._phase}: {busy} busy samples, {idle} idle (waiting in epoll"
              f" or for work), raw samples in {self._directory}")
        print("  most samples of their own:")
        for name, count in own.most_common(top):
            print(f"    {100 * count / busy:5.1f} %  {name}")
        print("  paths, with what they call:")
        for name, count in within.most_common(top):
            print(f"    {100 * count / busy:5.1f} %  {name}")


_IDLE_FRAMES = re.compile(r"select \(selectors\.py|_worker \(concurrent/futures/thread\.py:\d+\)$|wait \(threading")
_BROKER_PATHS = re.compile(r"kraft_engine/(server|protocol|storage|broker)/")


def _frame(frame: str) -> str:
    """`function (path/to/module.py:line)` shortened to `function (module.py)`."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit('/', 1)[-1].split(':')[0]})"


def _ratio(ours: float, theirs: float) -> str:
    if ours != ours or theirs != theirs or theirs == 0:
        return "-"
    return f"{ours / theirs:.2f}x"


def _table(ours: Figures, theirs: Figures | None) -> None:
    rows = [
        ("produce MB/s (acks=all, RF 3)", ours.produce_mb_s, theirs and theirs.produce_mb_s, "≥ 0.5x", 0.5, True),
        ("produce records/s", ours.produce_records_s, theirs and theirs.produce_records_s, "", None, True),
        ("consume MB/s (group of one, median)", ours.consume_mb_s, theirs and theirs.consume_mb_s, "≥ 0.9x", 0.9, True),
        ("consume MB/s, best pass", ours.consume_best_mb_s, theirs and theirs.consume_best_mb_s, "", None, True),
        ("consume records/s", ours.consume_records_s, theirs and theirs.consume_records_s, "", None, True),
        ("brokers' CPU s per GiB served", ours.broker_cpu_s_per_gib, theirs and theirs.broker_cpu_s_per_gib, "",
         None, False),
        ("produce latency p50 ms", ours.produce_p50_ms, theirs and theirs.produce_p50_ms, "", None, False),
        ("produce latency p99 ms", ours.produce_p99_ms, theirs and theirs.produce_p99_ms, "≤ 2x", 2.0, False),
        ("end-to-end p50 ms", ours.e2e_p50_ms, theirs and theirs.e2e_p50_ms, "", None, False),
        ("end-to-end p99 ms", ours.e2e_p99_ms, theirs and theirs.e2e_p99_ms, "≤ 2x", 2.0, False),
        ("RSS per broker MiB (max)", max(ours.rss_mib or [float("nan")]),
         theirs and max(theirs.rss_mib or [float("nan")]), "< 1x", 1.0, False),
    ]
    print(f"\n{'figure':<32}{'ours':>12}{'Kafka 4.1':>12}{'ours/Kafka':>12}  goal")
    for label, mine, kafka, goal, bound, higher_better in rows:
        kafka_text = "-" if kafka is None else f"{kafka:.1f}"
        verdict = ""
        if bound is not None and kafka is not None and kafka == kafka and mine == mine and kafka:
            ratio = mine / kafka
            met = ratio >= bound if higher_better else (ratio < bound if goal.startswith("<") else ratio <= bound)
            verdict = f"{goal} {'met' if met else 'NOT met'}"
        print(f"{label:<32}{mine:>12.1f}{kafka_text:>12}{_ratio(mine, kafka or float('nan')):>12}  {verdict}")
    for name, figures in (("ours", ours), ("Kafka", theirs)):
        if figures is not None:
            if figures.rss_mib:
                print(f"{name} broker RSS MiB: {', '.join(f'{r:.0f}' for r in figures.rss_mib)}")
            for note in figures.notes:
                print(f"{name}: {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--rate", type=int, default=500, help="records/s for the latency runs")
    parser.add_argument("--latency-s", type=float, default=10.0)
    parser.add_argument("--only", choices=("ours", "kafka"))
    parser.add_argument("--consume-passes", type=int, default=5)
    parser.add_argument("--profile", metavar="DIR", help="sample our brokers with py-spy while they serve the consumers")
    parser.add_argument("--tls", action="store_true",
                        help="the TLS cost instead: produce and consume over an mTLS and a PLAINTEXT listener of one"
                             " secured cluster each, ours and Kafka's")
    args = parser.parse_args()
    print(f"load average at start: {load_average()} ({os.cpu_count()} CPUs); {args.records} records of {args.record_bytes} B",
          flush=True)
    if args.tls:
        _both(args, run_tls, TlsFigures, _tls_table)
    else:
        _both(args, run, Figures, _table)
    print(f"\nload average at end: {load_average()}")
    sys.stdout.flush()


def _both(args: argparse.Namespace, measure: Callable[[str, str, argparse.Namespace], _F],
          empty: Callable[[], _F], table: Callable[[_F, _F | None], None]) -> None:
    """Ours (unless `--only kafka`), then Kafka's (unless `--only ours`, or without jars), then the table."""
    ours = measure("ours", "kraftwerk", args) if args.only != "kafka" else empty()
    theirs = None
    if args.only != "ours":
        if kafka_classpath() is None:
            print("Kafka 4.1 skipped: no jars (scripts/fetch-kafka-jars) or no java")
        else:
            theirs = measure("kafka", "apache-kafka", args)
    table(ours, theirs)


if __name__ == "__main__":
    main()
