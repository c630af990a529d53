"""`kraft console-producer`: Kafka's kafka-console-producer, one record per line of stdin.

Kafka's flags: `--bootstrap-server`, `--topic`, `--request-required-acks` (default -1, i.e. all),
`--compression-codec` (none, gzip, snappy, lz4, zstd; gzip when given without a value),
`--batch-size` (records per request), `--timeout` (ms a partial batch waits for more lines,
Kafka's linger), `--sync` (each line sent and acknowledged before the next is read),
`--request-timeout-ms`, `--producer-property` (acks, compression.type, enable.idempotence,
linger.ms, batch.size are read) and the line reader's properties with `--reader-property` (or the
older `--property`): parse.key and key.separator, parse.headers with headers.delimiter,
headers.separator and headers.key.separator, null.marker, ignore.error.

Like Kafka's producer since 3.0 it is idempotent whenever acks is all (unless
enable.idempotence=false), and enable.idempotence=true with acks other than all is refused with
Kafka's ConfigException message. A flag wins over the same `--producer-property` only when given
(Kafka's maybeMergeOptions: `--request-required-acks` over acks). acks=0 writes each batch and
waits for nothing: the broker answers nothing, so a refusal is never seen, as with Kafka's tool.
Keys pick the partition with Kafka's murmur2 partitioner; unkeyed lines go to one partition per
batch.

Exit status as Kafka's ConsoleProducer: a record the cluster refuses in the default asynchronous
mode is reported on stderr as Kafka's ErrorLoggingCallback reports it, the tool goes on reading and
exits 0; with `--sync` the first refusal ends the run with status 1 (Kafka's tool prints the
send's exception and exits 1). Bad flags, properties or input lines, and an unknown topic, exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from dataclasses import dataclass, field

from kraft_engine.admin.controller_admin import ControllerAdminError
from kraft_engine.admin.record_clients import RecordClient, RecordClientError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import bootstrap_servers, command_config_security
from kraft_engine.cli.tool_properties import parse_properties
from kraft_engine.protocol.security import ClientSecurity
from kraft_engine.records.client_records import ProducedRecord
from kraft_engine.records.compression import UnsupportedCodecError, codec_by_name

__all__ = ["register"]

_DEFAULT_BATCH_RECORDS = 200
_DEFAULT_LINGER_MS = 1000


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("console-producer", help="Send lines of stdin as records (kafka-console-producer)",
                                   description="Reads data from standard input and publishes it to Kafka.")
    parser.add_argument("--bootstrap-server", required=True, help="REQUIRED: The server(s) to connect to.")
    parser.add_argument("--command-config", "--producer.config", dest="command_config",
                        help="Producer config properties file (its client security keys are read).")
    parser.add_argument("--topic", required=True, help="REQUIRED: The topic id to produce messages to.")
    parser.add_argument("--request-required-acks",
                        help="The required acks of the producer requests (default: -1)")
    parser.add_argument("--compression-codec", nargs="?", const="gzip",
                        help="The compression codec: either 'none', 'gzip', 'snappy', 'lz4', or 'zstd'. "
                             "If specified without value, then it defaults to 'gzip'")
    parser.add_argument("--batch-size", type=int, help="Number of messages to send in a single batch if they are "
                                                       "not being sent synchronously.")
    parser.add_argument("--timeout", type=int, help="If set and the producer is running in asynchronous mode, this "
                                                    "gives the maximum amount of time a message will queue awaiting "
                                                    "sufficient batch size. The value is given in ms. (default: 1000)")
    parser.add_argument("--sync", action="store_true", help="If set message send requests to the brokers are "
                                                            "synchronously, one at a time as they arrive.")
    parser.add_argument("--request-timeout-ms", type=int, default=30000,
                        help="The ack timeout of the producer requests.")
    parser.add_argument("--producer-property", action="append", default=[],
                        help="A mechanism to pass user-defined properties in the form key=value to the producer.")
    parser.add_argument("--reader-property", "--property", dest="reader_properties", action="append", default=[],
                        help="A mechanism to pass user-defined properties in the form key=value to the message "
                             "reader (parse.key, key.separator, parse.headers, null.marker, ignore.error, ...).")
    parser.set_defaults(func=_run)


@dataclass
class _Settings:
    acks: int
    idempotent: bool
    codec: int
    batch_records: int
    linger_ms: int
    sync: bool
    request_timeout_ms: int
    reader: dict[str, str] = field(default_factory=dict)


def _settings(args: argparse.Namespace) -> _Settings:
    producer = parse_properties(args.producer_property, flag="--producer-property")
    given = args.request_required_acks
    acks_text = (given if given is not None else producer.get("acks", "-1")).strip().lower()
    if acks_text not in ("all", "-1", "0", "1"):
        raise CliError(f"Invalid value {acks_text} for configuration acks: String must be one of: all, -1, 0, 1")
    acks = -1 if acks_text == "all" else int(acks_text)
    idempotence = producer.get("enable.idempotence")
    if idempotence is not None and idempotence.strip().lower() == "true" and acks != -1:
        raise CliError("Must set acks to all in order to use the idempotent producer. "
                       "Otherwise we cannot guarantee idempotence.")
    idempotent = (idempotence or "true").strip().lower() == "true" and acks == -1
    codec_name = args.compression_codec or producer.get("compression.type", "none")
    try:
        codec = codec_by_name(codec_name.strip().lower())
    except UnsupportedCodecError:
        raise CliError(f"Invalid value {codec_name} for configuration compression.type: "
                       "String must be one of: none, gzip, snappy, lz4, zstd") from None
    batch_records = args.batch_size or _int(producer.get("batch.size", str(_DEFAULT_BATCH_RECORDS)), "batch.size")
    linger_ms = args.timeout if args.timeout is not None else _int(producer.get("linger.ms", str(_DEFAULT_LINGER_MS)),
                                                                   "linger.ms")
    return _Settings(acks=acks, idempotent=idempotent, codec=codec, batch_records=max(1, batch_records),
                     linger_ms=max(0, linger_ms), sync=args.sync, request_timeout_ms=args.request_timeout_ms,
                     reader=parse_properties(args.reader_properties, flag="--reader-property"))


def _int(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CliError(f"Invalid value {text} for configuration {name}: Not a number of type INT") from None


class _LineReader:
    """Kafka's LineMessageReader: a line is a value, or key<separator>value with parse.key, with
    headers in front when parse.headers; null.marker reads as a null key or value."""

    def __init__(self, properties: dict[str, str]) -> None:
        def flag(name: str) -> bool:
            return properties.get(name, "false").strip().lower() == "true"

        self.parse_key = flag("parse.key")
        self.key_separator = properties.get("key.separator", "\t")
        self.parse_headers = flag("parse.headers")
        self.headers_delimiter = properties.get("headers.delimiter", "\t")
        self.headers_separator = properties.get("headers.separator", ",")
        self.headers_key_separator = properties.get("headers.key.separator", ":")
        self.ignore_error = flag("ignore.error")
        self.null_marker = properties.get("null.marker")
        self.line_number = 0

    def _bytes(self, text: str) -> bytes | None:
        return None if self.null_marker is not None and text == self.null_marker else text.encode()

    def read(self, line: str) -> ProducedRecord:
        self.line_number += 1
        rest = line
        headers: list[tuple[str, bytes | None]] = []
        if self.parse_headers:
            head, found, rest = rest.partition(self.headers_delimiter)
            if not found:
                if not self.ignore_error:
                    raise CliError(f"No headers delimiter found on line number {self.line_number}: '{line}'")
                head, rest = "", line
            for pair in filter(None, head.split(self.headers_separator)):
                name, _sep, value = pair.partition(self.headers_key_separator)
                headers.append((name, self._bytes(value)))
        key = None
        if self.parse_key:
            key_text, found, value_text = rest.partition(self.key_separator)
            if not found:
                if not self.ignore_error:
                    raise CliError(f"No key separator found on line number {self.line_number}: '{line}'")
                key_text, value_text = "", rest
            key, rest = self._bytes(key_text), value_text
        return ProducedRecord(value=self._bytes(rest), key=key, timestamp_ms=int(time.time() * 1000),
                              headers=tuple(headers))


def _run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    bootstrap = bootstrap_servers(args.bootstrap_server)
    try:
        asyncio.run(_produce(args.topic, bootstrap, settings, security=command_config_security(args.command_config)))
    except (RecordClientError, ControllerAdminError) as e:
        raise CliError(str(e)) from None
    return 0


async def _produce(topic: str, bootstrap: list[tuple[str, int]], settings: _Settings, *,
                   security: ClientSecurity | None = None) -> int:
    reader = _LineReader(settings.reader)
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    stdin = sys.stdin  # the stream the tool was started with, for as long as the reader runs

    def read_stdin() -> None:
        prompt = stdin.isatty()
        while True:
            if prompt:
                print(">", end="", flush=True)
            line = stdin.readline()
            loop.call_soon_threadsafe(lines.put_nowait, line.rstrip("\n").rstrip("\r") if line else None)
            if not line:
                return

    failed = 0
    async with RecordClient(bootstrap, timeout_ms=settings.request_timeout_ms, client_id="console-producer",
                            security=security) as client:
        await client.refresh(topic)
        if settings.idempotent:
            await client.init_producer()
        # A daemon thread, not the loop's executor: a refusal must not wait for the next line of a terminal.
        threading.Thread(target=read_stdin, name="stdin", daemon=True).start()
        done = False
        while not done:
            line = await lines.get()
            if line is None:
                break
            pending = [reader.read(line)]
            if not settings.sync:
                deadline = loop.time() + settings.linger_ms / 1000
                while len(pending) < settings.batch_records:
                    try:
                        more = await asyncio.wait_for(lines.get(), timeout=max(0.0, deadline - loop.time()))
                    except TimeoutError:
                        break
                    if more is None:
                        done = True
                        break
                    pending.append(reader.read(more))
            failed += await _send(client, topic, pending, settings)
            if failed and settings.sync:
                raise CliError(f"a record sent with --sync was refused; {failed} record(s) not written")
    return failed


async def _send(client: RecordClient, topic: str, records: list[ProducedRecord], settings: _Settings) -> int:
    """Send the records, one batch per partition; the number refused (each reported)."""
    unkeyed = await client.partition_for(topic, None)
    by_partition: dict[int, list[ProducedRecord]] = {}
    for record in records:
        partition = unkeyed if record.key is None else await client.partition_for(topic, record.key)
        by_partition.setdefault(partition, []).append(record)
    failed = 0
    for partition, batch in sorted(by_partition.items()):
        try:
            await client.produce(topic, partition, batch, acks=settings.acks, codec=settings.codec,
                                 timeout_ms=settings.request_timeout_ms)
        except RecordClientError as error:
            for record in batch:
                key = "null" if record.key is None else f"{len(record.key)} bytes"
                value = "null" if record.value is None else f"{len(record.value)} bytes"
                print(f"ERROR Error when sending message to topic {topic} with key: {key}, value: {value} "
                      f"with error: {error}", file=sys.stderr)
            failed += len(batch)
    return failed
