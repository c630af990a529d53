"""`kraft console-consumer`: Kafka's kafka-console-consumer, reading partitions from an offset.

Kafka's flags: `--bootstrap-server`, `--topic`, `--partition`, `--offset` (earliest, latest or an
offset; needs `--partition`), `--from-beginning`, `--max-messages`, `--timeout-ms`, and the
formatter's properties with `--formatter-property` (or the older `--property`): print.timestamp,
print.partition, print.offset, print.headers, print.key, print.value, key.separator,
line.separator, headers.separator, null.literal. Output is DefaultMessageFormatter's, and
"Processed a total of N messages" goes to stderr at the end, as Kafka's tool prints it.

With `--group` the consumer subscribes as a member of that consumer group
(`admin.group_consumer`: the range assignor, heartbeats, rebalances), starts each partition it is
given from the group's committed offset (or from the start with `--from-beginning`, else the end),
and commits its positions every 5 s and when it exits, as Kafka's tool does with auto-commit.
Without `--group` and without `--partition` every partition of the topic is read (assigned, not
subscribed). `--timeout-ms` ends the run when no record arrived for that long.

Exit status as Kafka's ConsoleConsumer: bad flags exit 1; an error while consuming (an unknown
topic or partition, a broker that stays unreachable) is logged as "Error processing message,
terminating consumer process", the count is printed and the status is 0. (Kafka's consumer waits
for an unknown topic to appear until `--timeout-ms`; this one reports it at once.)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from kraft_engine.admin.controller_admin import ControllerAdminError
from kraft_engine.admin.group_admin import GroupAdmin
from kraft_engine.admin.group_consumer import GroupConsumer
from kraft_engine.admin.record_clients import EARLIEST, LATEST, RecordClient, RecordClientError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import bootstrap_servers, command_config_security
from kraft_engine.cli.tool_properties import parse_properties
from kraft_engine.records.client_records import ClientRecord

__all__ = ["register"]

_FETCH_WAIT_MS = 500
_AUTO_COMMIT_INTERVAL_S = 5.0  # Kafka's auto.commit.interval.ms default


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("console-consumer", help="Print records of a topic (kafka-console-consumer)",
                                   description="Consumes records from a topic and prints them.")
    parser.add_argument("--bootstrap-server", required=True, help="REQUIRED: The server(s) to connect to.")
    parser.add_argument("--command-config", "--consumer.config", dest="command_config",
                        help="Consumer config properties file (its client security keys are read).")
    parser.add_argument("--topic", help="The topic to consume on.")
    parser.add_argument("--partition", type=int, help="The partition to consume from. Consumption starts from the "
                                                      "end of the partition unless '--offset' is specified.")
    parser.add_argument("--offset", help="The offset to consume from (a non-negative number), or 'earliest' which "
                                         "means from beginning, or 'latest' which means from end (default: latest)")
    parser.add_argument("--from-beginning", action="store_true",
                        help="Start with the earliest message present in the log rather than the latest message.")
    parser.add_argument("--max-messages", type=int, help="The maximum number of messages to consume before exiting.")
    parser.add_argument("--timeout-ms", type=int, help="If specified, exit if no message is available for "
                                                       "consumption for the specified interval.")
    parser.add_argument("--formatter-property", "--property", dest="properties", action="append", default=[],
                        help="The properties to initialize the message formatter (print.key=true, ...).")
    parser.add_argument("--group", help="The consumer group id of the consumer.")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if not args.topic:
        raise CliError("Exactly one of include/topic is required.")
    if args.group is not None and (args.partition is not None or args.offset is not None):
        raise CliError("Options group and partition/offset cannot be specified together.")
    if args.offset is not None and args.partition is None:
        raise CliError("The partition is required when offset is specified.")
    if args.offset is not None and args.from_beginning:
        raise CliError("Options from-beginning and offset cannot be specified together.")
    start = EARLIEST if args.from_beginning else LATEST
    if args.offset is not None:
        if args.offset == "earliest":
            start = EARLIEST
        elif args.offset == "latest":
            start = LATEST
        else:
            try:
                start = int(args.offset)
            except ValueError:
                start = -3
            if start < 0:
                raise CliError(f"The provided offset value '{args.offset}' is incorrect. Valid values are "
                               "'earliest', 'latest', or a non-negative long.")
    bootstrap = bootstrap_servers(args.bootstrap_server)
    formatter = _Formatter(parse_properties(args.properties, flag="--formatter-property"), out=sys.stdout)
    consumed = _Count()
    try:
        consume = _consume_in_group if args.group is not None else _consume
        asyncio.run(consume(args, bootstrap, start=start, formatter=formatter, consumed=consumed))
    except KeyboardInterrupt:
        pass
    except (RecordClientError, ControllerAdminError) as e:
        # Kafka's ConsoleConsumer.process catches what the consumer throws, logs it and returns,
        # and the tool then exits 0 after the count (only a failure outside it exits 1).
        print(f"ERROR Error processing message, terminating consumer process: {e}", file=sys.stderr)
    print(f"Processed a total of {consumed.value} messages", file=sys.stderr)
    return 0


class _Count:
    value = 0


class _Progress:
    """What both consuming loops share: printing, `--max-messages` and `--timeout-ms`."""

    def __init__(self, args: argparse.Namespace, *, formatter: _Formatter, consumed: _Count) -> None:
        self._args, self._formatter, self._consumed = args, formatter, consumed
        self._loop = asyncio.get_running_loop()
        self._last_record = self._loop.time()
        self.done = False

    def print(self, records: list[ClientRecord], *, partition: int, position: int) -> int:
        """Print `records`; the next position (`done` once --max-messages are printed)."""
        for record in records:
            self._formatter.write(record, partition=partition)
            self._consumed.value += 1
            position = record.offset + 1
            self._last_record = self._loop.time()
            if self._args.max_messages is not None and self._consumed.value >= self._args.max_messages:
                self.done = True
                break
        return position

    def idle_too_long(self) -> bool:
        timeout_ms = self._args.timeout_ms
        if timeout_ms is None or (self._loop.time() - self._last_record) * 1000 < timeout_ms:
            return False
        print("ERROR Error processing message, terminating consumer process: "
              "org.apache.kafka.common.errors.TimeoutException", file=sys.stderr)
        return True


async def _consume(args: argparse.Namespace, bootstrap: list[tuple[str, int]], *, start: int, formatter: _Formatter,
                   consumed: _Count) -> None:
    async with RecordClient(bootstrap, client_id="console-consumer", security=command_config_security(args.command_config)) as client:
        count = await client.refresh(args.topic)
        partitions = [args.partition] if args.partition is not None else list(range(count))
        if args.partition is not None and not 0 <= args.partition < count:
            raise RecordClientError("UNKNOWN_TOPIC_OR_PARTITION", f"{args.topic}-{args.partition}")
        positions = {}
        for p in partitions:
            positions[p] = start if start >= 0 else await client.list_offset(args.topic, p, timestamp=start)
        progress = _Progress(args, formatter=formatter, consumed=consumed)
        while True:
            for p in partitions:
                records, _hwm = await client.fetch(args.topic, p, offset=positions[p], max_wait_ms=_FETCH_WAIT_MS)
                positions[p] = progress.print(records, partition=p, position=positions[p])
                if progress.done:
                    return
            if progress.idle_too_long():
                return


async def _consume_in_group(args: argparse.Namespace, bootstrap: list[tuple[str, int]], *, start: int,
                            formatter: _Formatter, consumed: _Count) -> None:
    loop = asyncio.get_running_loop()
    async with GroupAdmin(bootstrap, client_id="console-consumer", security=command_config_security(args.command_config)) as admin:
        await admin.refresh(args.topic)
        member = GroupConsumer(admin, group=args.group, topics=[args.topic], client_id="console-consumer",
                               from_beginning=start == EARLIEST)
        try:
            assigned = await member.join()
            progress = _Progress(args, formatter=formatter, consumed=consumed)
            last_commit = loop.time()
            while True:
                if member.needs_rejoin:
                    assigned = await member.join()
                for tp in assigned:
                    records, _hwm = await admin.fetch(tp[0], tp[1], offset=member.positions[tp],
                                                      max_wait_ms=_FETCH_WAIT_MS // max(1, len(assigned)))
                    member.positions[tp] = progress.print(records, partition=tp[1], position=member.positions[tp])
                    if progress.done:
                        return
                if not assigned:
                    await asyncio.sleep(_FETCH_WAIT_MS / 1000)
                if loop.time() - last_commit >= _AUTO_COMMIT_INTERVAL_S:
                    await member.commit()
                    last_commit = loop.time()
                if progress.idle_too_long():
                    return
        finally:
            await member.leave()


class _Formatter:
    """Kafka's DefaultMessageFormatter: the chosen columns separated by key.separator, then the
    line separator after the value (or after the last column printed)."""

    def __init__(self, properties: dict[str, str], *, out: TextIO) -> None:
        def flag(name: str, default: bool = False) -> bool:
            return properties.get(name, str(default)).strip().lower() == "true"

        self._columns = [name for name in ("timestamp", "partition", "offset", "headers", "key", "value")
                         if flag(f"print.{name}", default=name == "value")]
        self._key_separator = properties.get("key.separator", "\t")
        self._line_separator = properties.get("line.separator", "\n")
        self._headers_separator = properties.get("headers.separator", ",")
        self._null = properties.get("null.literal", "null")
        self._out = out

    def _text(self, data: bytes | None) -> str:
        return self._null if data is None else data.decode(errors="replace")

    def _column(self, name: str, record: ClientRecord, partition: int) -> str:
        if name == "timestamp":
            return f"CreateTime:{record.timestamp_ms}"
        if name == "partition":
            return f"Partition:{partition}"
        if name == "offset":
            return f"Offset:{record.offset}"
        if name == "headers":
            if not record.headers:
                return "NO_HEADERS"
            return self._headers_separator.join(f"{k}:{self._text(v)}" for k, v in record.headers)
        return self._text(record.key if name == "key" else record.value)

    def write(self, record: ClientRecord, *, partition: int) -> None:
        parts: list[Any] = [self._column(name, record, partition) for name in self._columns]
        self._out.write(self._key_separator.join(parts) + self._line_separator)
        self._out.flush()
