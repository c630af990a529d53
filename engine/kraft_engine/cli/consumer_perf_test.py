"""`kraft consumer-perf-test`: Kafka's kafka-consumer-perf-test (ConsumerPerformance), with its
flags and output, so a runbook's consume figures read the same from ours.

`--bootstrap-server`, `--topic`, `--messages`, `--group` (default `perf-consumer-<n>`),
`--fetch-size`, `--from-latest`, `--timeout` (ms without a record before giving up, with Kafka's
warning), `--hide-header`, `--date-format` (a java.text.SimpleDateFormat pattern; the common
letters are translated), `--show-detailed-stats` with `--reporting-interval`. The summary is
Kafka's header and line: start and end time, MB and MB/s, messages and messages/s, the time the
group join took (`rebalance.time.ms`) and the fetch figures without it. Bytes are keys plus
values, as Kafka counts them.

It joins the group through this engine's own classic-protocol member (`admin.group_consumer`)
and fetches the assigned partitions in turn with the engine's client: a Python consumer, so its
figures are the broker's serving through a Python client, not Kafka's consumer's (the benchmark
uses librdkafka for both brokers). `--consumer.config` and `--print-metrics` are not offered.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import time
from datetime import datetime

from kraft_engine.admin.controller_admin import ControllerAdminError
from kraft_engine.admin.group_admin import GroupAdmin
from kraft_engine.admin.group_consumer import GroupConsumer
from kraft_engine.admin.record_clients import RecordClientError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import bootstrap_servers

__all__ = ["java_date_format", "register"]

_BYTES_PER_MB = 1024 * 1024
_HEADER = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
_FETCH_HEADER = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
_GROUPS = itertools.count(1)
# SimpleDateFormat letters -> strftime (milliseconds handled apart).
_JAVA_DATE = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "hh": "%I", "mm": "%M", "ss": "%S",
              "a": "%p", "EEE": "%a", "Z": "%z"}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("consumer-perf-test", help="Measure consuming (kafka-consumer-perf-test)",
                                   description="This tool is used to verify the consumer performance.")
    parser.add_argument("--bootstrap-server", required=True, help="REQUIRED: The server(s) to connect to.")
    parser.add_argument("--topic", required=True, help="REQUIRED: The topic to consume from.")
    parser.add_argument("--messages", type=int, required=True,
                        help="REQUIRED: The number of messages to send or consume")
    parser.add_argument("--group", help="The group id to consume on.")
    parser.add_argument("--fetch-size", type=int, default=1024 * 1024,
                        help="The amount of data to fetch in a single request.")
    parser.add_argument("--from-latest", action="store_true",
                        help="If the consumer does not already have an established offset to consume from, start "
                             "with the latest message present in the log rather than the earliest message.")
    parser.add_argument("--timeout", type=int, default=10_000,
                        help="The maximum allowed time in milliseconds between returned records.")
    parser.add_argument("--hide-header", action="store_true", help="If set, skips printing the header for the stats")
    parser.add_argument("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS",
                        help="The date format to use for formatting the time field.")
    parser.add_argument("--show-detailed-stats", action="store_true",
                        help="If set, stats are reported for each reporting interval as configured by "
                             "reporting-interval")
    parser.add_argument("--reporting-interval", type=int, default=5000,
                        help="Interval in milliseconds at which to print progress info.")
    parser.set_defaults(func=_run)


def java_date_format(pattern: str, moment_ms: int) -> str:
    """`moment_ms` (local time) formatted with a SimpleDateFormat pattern's common letters."""
    moment = datetime.fromtimestamp(moment_ms / 1000)
    out = []
    for token in re.findall(r"y+|M+|d+|H+|h+|m+|s+|S+|a|E+|Z|'[^']*'|.", pattern):
        if token.startswith("S"):
            out.append(f"{moment_ms % 1000:03d}"[:len(token)] if len(token) <= 3 else f"{moment_ms % 1000:0{len(token)}d}")
        elif token.startswith("'"):
            out.append(token.strip("'"))
        elif token in _JAVA_DATE:
            out.append(moment.strftime(_JAVA_DATE[token]))
        else:
            out.append(token)
    return "".join(out)


def _run(args: argparse.Namespace) -> int:
    if args.reporting_interval <= 0:
        raise CliError("Reporting interval must be greater than 0.")
    bootstrap = bootstrap_servers(args.bootstrap_server)
    group = args.group or f"perf-consumer-{next(_GROUPS) + int(time.time()) % 100_000}"
    try:
        asyncio.run(_perf(args, bootstrap, group))
    except (RecordClientError, ControllerAdminError) as e:
        raise CliError(str(e)) from None
    return 0


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _perf(args: argparse.Namespace, bootstrap: list[tuple[str, int]], group: str) -> None:
    fmt = args.date_format
    if not args.hide_header:
        if args.show_detailed_stats:
            print("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec" + _FETCH_HEADER)
        else:
            print(_HEADER + _FETCH_HEADER)
    async with GroupAdmin(bootstrap, timeout_ms=30_000, client_id="perf-consumer-client") as admin:
        consumer = GroupConsumer(admin, group=group, topics=[args.topic], client_id="perf-consumer-client",
                                 from_beginning=not args.from_latest)
        start_ms = _now_ms()
        assigned = await consumer.join()
        join_ms = _now_ms() - start_ms
        messages = bytes_read = 0
        last_consumed_ms = _now_ms()
        last_report_ms, last_messages, last_bytes = start_ms, 0, 0
        try:
            while messages < args.messages and assigned:
                got = 0
                for tp in assigned:
                    records, _ = await admin.fetch(tp[0], tp[1], offset=consumer.positions[tp], max_wait_ms=100,
                                                   max_bytes=args.fetch_size)
                    for record in records[: args.messages - messages]:
                        messages += 1
                        got += 1
                        bytes_read += len(record.key or b"") + len(record.value or b"")
                        consumer.positions[tp] = record.offset + 1
                    if messages >= args.messages:
                        break
                now = _now_ms()
                if got:
                    last_consumed_ms = now
                elif now - last_consumed_ms > args.timeout:
                    print(f"WARNING: Exiting before consuming the expected number of messages: timeout "
                          f"({args.timeout} ms) exceeded. You can use the --timeout option to increase the timeout.")
                    break
                if args.show_detailed_stats and now - last_report_ms >= args.reporting_interval:
                    elapsed = max(now - last_report_ms, 1)
                    mb = (bytes_read - last_bytes) / _BYTES_PER_MB
                    print(f"{java_date_format(fmt, now)}, 0, {bytes_read / _BYTES_PER_MB:.4f}, {mb * 1000 / elapsed:.4f}, "
                          f"{messages}, {(messages - last_messages) * 1000 / elapsed:.4f}, {join_ms}, "
                          f"{elapsed}, {mb * 1000 / elapsed:.4f}, {(messages - last_messages) * 1000 / elapsed:.4f}")
                    last_report_ms, last_messages, last_bytes = now, messages, bytes_read
                if consumer.needs_rejoin:
                    assigned = await consumer.join()
        finally:
            await consumer.leave()
        end_ms = last_consumed_ms if messages else _now_ms()
    if not args.show_detailed_stats:
        elapsed_s = max(end_ms - start_ms, 1) / 1000
        mb = bytes_read / _BYTES_PER_MB
        fetch_ms = max(end_ms - start_ms - join_ms, 1)
        print(f"{java_date_format(fmt, start_ms)}, {java_date_format(fmt, end_ms)}, {mb:.4f}, {mb / elapsed_s:.4f}, "
              f"{messages}, {messages / elapsed_s:.4f}, {join_ms}, {fetch_ms}, {mb * 1000 / fetch_ms:.4f}, "
              f"{messages * 1000 / fetch_ms:.4f}")
