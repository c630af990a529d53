"""`kraft producer-perf-test`: Kafka's kafka-producer-perf-test (ProducerPerformance), with its
flags and its output lines, so a capacity runbook reads the same numbers from ours.

`--topic`, `--num-records`, exactly one of `--record-size` / `--payload-file` (with
`--payload-delimiter`) / `--payload-monotonic`, `--throughput` (records/s, -1 unthrottled, as
Kafka's ThroughputThrottler paces it), `--producer-props k=v ...` over `--producer.config FILE`
(`bootstrap.servers`, `acks` (default all), `batch.size` (16384), `linger.ms` (5),
`compression.type`, `enable.idempotence`, `request.timeout.ms`). Every 5 s it prints Kafka's
window line, and at the end Kafka's summary line with the latency percentiles.

The records go through this engine's own client (`admin.record_clients`), one batch in flight
per partition, batches of different partitions concurrently, unkeyed records on Kafka's sticky
partitioner: it measures the broker with a Python client, so its figures are not Kafka's
producer's; the benchmark (`bench/broker.py`) drives both brokers with librdkafka instead.
Not offered: transactions (`--transactional-id`, `--transaction-duration-ms`; the brokers do not
serve them) and `--print-metrics`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from kraft_engine.admin.controller_admin import ControllerAdminError
from kraft_engine.admin.record_clients import RecordClient, RecordClientError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import bootstrap_servers
from kraft_engine.cli.tool_properties import parse_properties
from kraft_engine.records.client_records import ProducedRecord
from kraft_engine.records.compression import UnsupportedCodecError, codec_by_name
from kraft_engine.storage.java_properties import JavaPropertiesError
from kraft_engine.storage.java_properties import parse_properties as parse_java_properties

__all__ = ["PerfStats", "register"]

_REPORTING_INTERVAL_MS = 5000
_BYTES_PER_MB = 1024 * 1024


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("producer-perf-test", help="Measure producing (kafka-producer-perf-test)",
                                   description="This tool is used to verify the producer performance.")
    parser.add_argument("--topic", required=True, help="produce messages to this topic")
    parser.add_argument("--num-records", type=int, required=True, help="number of messages to produce")
    payload = parser.add_mutually_exclusive_group()
    payload.add_argument("--record-size", type=int, help="message size in bytes.")
    payload.add_argument("--payload-file", help="file to read the message payloads from.")
    payload.add_argument("--payload-monotonic", action="store_true",
                         help="payload is monotonically increasing integer.")
    parser.add_argument("--payload-delimiter", default="\\n",
                        help="provides delimiter to be used when --payload-file is provided. Defaults to new line.")
    parser.add_argument("--throughput", type=float, required=True,
                        help="throttle maximum message throughput to *approximately* THROUGHPUT messages/sec. Set "
                             "this to -1 to disable throttling.")
    parser.add_argument("--producer-props", nargs="+", default=[], metavar="PROP-NAME=PROP-VALUE",
                        help="kafka producer related configuration properties like bootstrap.servers,client.id etc.")
    parser.add_argument("--producer.config", dest="producer_config", help="producer config properties file.")
    parser.set_defaults(func=_run)


@dataclass
class PerfStats:
    """Kafka's ProducerPerformance.Stats: totals, the current window, and sampled latencies."""

    num_records: int
    start_ms: int
    reporting_interval_ms: int = _REPORTING_INTERVAL_MS
    count: int = 0
    bytes: int = 0
    total_latency_ms: int = 0
    max_latency_ms: int = 0
    window_start_ms: int = 0
    window_count: int = 0
    window_bytes: int = 0
    window_total_latency_ms: int = 0
    window_max_latency_ms: int = 0
    latencies: list[int] = field(default_factory=list)
    sampling: int = 1

    def __post_init__(self) -> None:
        self.window_start_ms = self.start_ms
        self.sampling = max(1, self.num_records // min(self.num_records, 500_000)) if self.num_records > 0 else 1

    def record(self, *, latency_ms: int, size_bytes: int, now_ms: int) -> str | None:
        """Count one acknowledged record; Kafka's window line when the window is over."""
        self.count += 1
        self.bytes += size_bytes
        self.total_latency_ms += latency_ms
        self.max_latency_ms = max(self.max_latency_ms, latency_ms)
        self.window_count += 1
        self.window_bytes += size_bytes
        self.window_total_latency_ms += latency_ms
        self.window_max_latency_ms = max(self.window_max_latency_ms, latency_ms)
        if self.count % self.sampling == 0:
            self.latencies.append(latency_ms)
        if now_ms - self.window_start_ms < self.reporting_interval_ms:
            return None
        elapsed = max(now_ms - self.window_start_ms, 1)
        line = (f"{self.window_count} records sent, {1000.0 * self.window_count / elapsed:.1f} records/sec "
                f"({1000.0 * self.window_bytes / elapsed / _BYTES_PER_MB:.2f} MB/sec), "
                f"{self.window_total_latency_ms / max(self.window_count, 1):.1f} ms avg latency, "
                f"{float(self.window_max_latency_ms):.1f} ms max latency.")
        self.window_start_ms, self.window_count, self.window_bytes = now_ms, 0, 0
        self.window_total_latency_ms = self.window_max_latency_ms = 0
        return line

    def summary(self, *, now_ms: int) -> str:
        elapsed = max(now_ms - self.start_ms, 1)
        ordered = sorted(self.latencies)

        def percentile(p: float) -> int:
            return ordered[int(p * len(ordered))] if ordered else 0

        return (f"{self.count} records sent, {1000.0 * self.count / elapsed:.1f} records/sec "
                f"({1000.0 * self.bytes / elapsed / _BYTES_PER_MB:.2f} MB/sec), "
                f"{self.total_latency_ms / max(self.count, 1):.2f} ms avg latency, "
                f"{float(self.max_latency_ms):.2f} ms max latency, {percentile(0.5)} ms 50th, {percentile(0.95)} ms "
                f"95th, {percentile(0.99)} ms 99th, {percentile(0.999)} ms 99.9th.")


@dataclass(frozen=True, slots=True)
class _Settings:
    bootstrap: list[tuple[str, int]]
    acks: int
    batch_bytes: int
    linger_ms: int
    codec: int
    idempotent: bool
    request_timeout_ms: int


def _settings(args: argparse.Namespace) -> _Settings:
    props: dict[str, str] = {}
    if args.producer_config:
        try:
            props.update(parse_java_properties(Path(args.producer_config).read_text(encoding="utf-8")))
        except (OSError, JavaPropertiesError) as e:
            raise CliError(f"cannot read --producer.config {args.producer_config}: {e}") from None
    for text in args.producer_props:
        if "=" not in text:
            raise CliError(f"Invalid property: {text}")
    props.update(parse_properties(args.producer_props, flag="--producer-props"))
    if "bootstrap.servers" not in props:
        raise CliError("bootstrap.servers must be given in --producer-props or --producer.config")
    acks_text = props.get("acks", "all").strip().lower()
    acks = {"all": -1, "-1": -1, "0": 0, "1": 1}.get(acks_text)
    if acks is None:
        raise CliError(f"Invalid value {acks_text} for configuration acks: String must be one of: all, -1, 0, 1")
    idempotent = props.get("enable.idempotence", "true" if acks == -1 else "false").strip().lower() == "true"
    if idempotent and acks != -1:
        raise CliError("Must set acks to all in order to use the idempotent producer. Otherwise we cannot "
                       "guarantee idempotence.")
    try:
        codec = codec_by_name(props.get("compression.type", "none"))
        return _Settings(bootstrap=bootstrap_servers(props["bootstrap.servers"], flag="bootstrap.servers"), acks=acks,
                         batch_bytes=int(props.get("batch.size", "16384")), linger_ms=int(props.get("linger.ms", "5")),
                         codec=codec, idempotent=idempotent,
                         request_timeout_ms=int(props.get("request.timeout.ms", "30000")))
    except (ValueError, UnsupportedCodecError) as e:
        raise CliError(str(e)) from None


def _payloads(args: argparse.Namespace) -> list[bytes] | None:
    """The payloads to choose from, or None for --payload-monotonic."""
    if args.payload_monotonic:
        return None
    if args.payload_file:
        delimiter = args.payload_delimiter.encode().decode("unicode_escape")
        try:
            text = Path(args.payload_file).read_text(encoding="utf-8")
        except OSError:
            raise CliError("File does not exist or empty file provided.") from None
        payloads = [p.encode() for p in text.split(delimiter) if p]
        if not payloads:
            raise CliError("File does not exist or empty file provided.")
        print(f"Reading payloads from: {Path(args.payload_file).resolve()}")
        print(f"Number of messages read: {len(payloads)}")
        return payloads
    if args.record_size is None:
        raise CliError("no payload File Path or record Size or payload-monotonic option provided")
    # Kafka fills the record with random uppercase letters, once.
    chance = random.Random()
    return [bytes(chance.randrange(65, 91) for _ in range(args.record_size))]


def _run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    payloads = _payloads(args)
    try:
        asyncio.run(_perf(args.topic, args.num_records, payloads, throughput=args.throughput, settings=settings))
    except (RecordClientError, ControllerAdminError) as e:
        raise CliError(str(e)) from None
    return 0


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


async def _perf(topic: str, num_records: int, payloads: list[bytes] | None, *, throughput: float,
                settings: _Settings) -> None:
    chance = random.Random()
    async with RecordClient(settings.bootstrap, timeout_ms=settings.request_timeout_ms,
                            client_id="perf-producer-client") as client:
        partitions = await client.refresh(topic)
        if settings.idempotent:
            await client.init_producer()
        start_ms = _now_ms()
        stats = PerfStats(num_records=num_records, start_ms=start_ms)
        in_flight: dict[int, asyncio.Task[None]] = {}
        failures: list[BaseException] = []
        sticky = chance.randrange(partitions)
        batch: list[tuple[ProducedRecord, int]] = []
        batch_bytes = 0
        batch_started = 0.0

        async def send(partition: int, records: list[tuple[ProducedRecord, int]]) -> None:
            try:
                await client.produce(topic, partition, [r for r, _ in records], acks=settings.acks,
                                     codec=settings.codec, timeout_ms=settings.request_timeout_ms)
            except RecordClientError as error:
                failures.append(error)
                return
            now = _now_ms()
            for record, sent_ms in records:
                line = stats.record(latency_ms=now - sent_ms, size_bytes=len(record.value or b""), now_ms=now)
                if line is not None:
                    print(line, flush=True)

        async def flush() -> None:
            nonlocal batch, batch_bytes, sticky
            if not batch:
                return
            previous = in_flight.get(sticky)
            if previous is not None:
                await previous  # one batch in flight per partition keeps the sequence order
            in_flight[sticky] = asyncio.get_running_loop().create_task(send(sticky, batch))
            batch, batch_bytes = [], 0
            sticky = (sticky + 1) % partitions  # Kafka's sticky partitioner moves on after a batch

        for i in range(num_records):
            if failures:
                raise failures[0]
            value = str(i).encode() if payloads is None else payloads[0] if len(payloads) == 1 else chance.choice(payloads)
            now = _now_ms()
            if not batch:
                batch_started = time.monotonic()
            batch.append((ProducedRecord(value=value, timestamp_ms=int(time.time() * 1000)), now))
            batch_bytes += len(value)
            if batch_bytes >= settings.batch_bytes or time.monotonic() - batch_started >= settings.linger_ms / 1000:
                await flush()
            if throughput > 0:
                # Kafka's ThroughputThrottler: sleep whenever ahead of the target rate.
                ahead_s = (i + 1) / throughput - (_now_ms() - start_ms) / 1000
                if ahead_s > 0:
                    await flush()
                    await asyncio.sleep(ahead_s)
            elif i % 256 == 0:
                await asyncio.sleep(0)
        await flush()
        for task in list(in_flight.values()):
            await task
        if failures:
            raise failures[0]
        print(stats.summary(now_ms=_now_ms()), flush=True)
