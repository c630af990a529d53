"""`kraft get-offsets`: Kafka's kafka-get-offsets (GetOffsetShell), so the scripts that read a
topic's offsets with it read ours the same way.

Same flags: `--bootstrap-server`, `--topic` (a regular expression matched against the whole
name), `--partitions 0,1`, `--topic-partitions 'topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3'`
(not with the other two), `--time` (`-1`/`latest`, `-2`/`earliest`, `-3`/`max-timestamp`,
`-4`/`earliest-local`, `-5`/`latest-tiered`, or a timestamp in ms) and `--exclude-internal-topics`.
Same output: one `topic:partition:offset` line per partition that has an offset for that time,
ordered as Kafka's TreeMap orders them (by the string `topic-partition`); a partition whose
ListOffsets failed is reported on stderr as `Skip getting offsets for topic-partition ...` and
left out. `--command-config` takes Kafka's client security keys.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from dataclasses import dataclass

from kio.schema.metadata.v12.request import MetadataRequest

from kraft_engine.admin.controller_admin import ControllerAdminError
from kraft_engine.admin.record_clients import RecordClient, RecordClientError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import COMMAND_CONFIG_HELP, bootstrap_servers, command_config_security
from kraft_engine.protocol.security import ClientSecurity

__all__ = ["PartitionRule", "parse_time", "parse_topic_partitions", "register"]

_TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5}
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
_MALFORMED_TIME = ("Malformed time argument {}. Please use -1 or latest / -2 or earliest / -3 or max-timestamp / "
                   "-4 or earliest-local / -5 or latest-tiered, or a specified long format timestamp")


@dataclass(frozen=True, slots=True)
class PartitionRule:
    """One `--topic-partitions` rule: a topic regex (None: any) and partitions [low, high)."""

    topic: str | None
    low: int = 0
    high: int | None = None

    def matches(self, topic: str, partition: int) -> bool:
        if self.topic is not None and re.fullmatch(self.topic, topic) is None:
            return False
        return partition >= self.low and (self.high is None or partition < self.high)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("get-offsets", help="Print topic-partition offsets (kafka-get-offsets)",
                                   description="An interactive shell for getting topic-partition offsets.")
    parser.add_argument("--bootstrap-server", required=True,
                        help="REQUIRED. The server(s) to connect to in the form HOST1:PORT1,HOST2:PORT2.")
    parser.add_argument("--command-config", help=COMMAND_CONFIG_HELP)
    parser.add_argument("--topic", help="The topic to get the offsets for. It also accepts a regular expression. If "
                                        "not present, all authorized topics are queried. Cannot be used if "
                                        "--topic-partitions is present.")
    parser.add_argument("--partitions", help="Comma separated list of partition ids to get the offsets for. If not "
                                             "present, all partitions of the authorized topics are queried. Cannot be "
                                             "used if --topic-partitions is present.")
    parser.add_argument("--topic-partitions", help="Comma separated list of topic-partition patterns to get the "
                                                   "offsets for, e.g. topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3")
    parser.add_argument("--time", default="latest", help="<timestamp> / -1 or latest / -2 or earliest / -3 or "
                                                         "max-timestamp / -4 or earliest-local / -5 or latest-tiered")
    parser.add_argument("--exclude-internal-topics", action="store_true",
                        help="By default, internal topics are included. If specified, internal topics are excluded.")
    parser.set_defaults(func=_run)


def parse_time(text: str) -> int:
    if text in _TIMES:
        return _TIMES[text]
    try:
        return int(text)
    except ValueError:
        raise CliError(_MALFORMED_TIME.format(text)) from None


def parse_topic_partitions(text: str) -> list[PartitionRule]:
    rules = []
    for item in text.split(","):
        found = _RULE.fullmatch(item.strip())
        if found is None or not item.strip():
            raise CliError(f"Invalid rule specification: {item}")
        topic, single, low, high = found.groups()
        if single:
            rules.append(PartitionRule(topic or None, int(single), int(single) + 1))
        else:
            rules.append(PartitionRule(topic or None, int(low) if low else 0, int(high) if high else None))
    return rules


def _rules(args: argparse.Namespace) -> list[PartitionRule]:
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise CliError("--topic-partitions cannot be used with --topic or --partitions")
        return parse_topic_partitions(args.topic_partitions)
    topic = args.topic
    if args.partitions is None:
        return [PartitionRule(topic)]
    try:
        ids = [int(p) for p in args.partitions.split(",")]
    except ValueError:
        raise CliError("--partitions expects a comma separated list of numeric partition ids, but received: "
                       f"{args.partitions}") from None
    return [PartitionRule(topic, p, p + 1) for p in ids]


def _run(args: argparse.Namespace) -> int:
    bootstrap = bootstrap_servers(args.bootstrap_server)
    rules = _rules(args)
    timestamp = parse_time(args.time)
    try:
        return asyncio.run(_offsets(bootstrap, rules, timestamp=timestamp, exclude_internal=args.exclude_internal_topics,
                                    security=command_config_security(args.command_config)))
    except ControllerAdminError as e:
        raise CliError(str(e)) from None


async def _offsets(bootstrap: list[tuple[str, int]], rules: list[PartitionRule], *, timestamp: int,
                   exclude_internal: bool, security: ClientSecurity | None) -> int:
    async with RecordClient(bootstrap, client_id="GetOffsetShell", security=security) as client:
        metadata = await client.send_to_any(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                            include_topic_authorized_operations=False))
        wanted = sorted(
            ((str(t.name), int(p.partition_index)) for t in metadata.topics
             if not (exclude_internal and t.is_internal) for p in t.partitions),
            key=lambda tp: f"{tp[0]}-{tp[1]}")
        wanted = [tp for tp in wanted if any(rule.matches(*tp) for rule in rules)]
        if not wanted:
            raise CliError("Could not match any topic-partitions with the specified filters")
        for topic, partition in wanted:
            try:
                offset = await client.list_offset(topic, partition, timestamp=timestamp)
            except RecordClientError as error:
                print(f"Skip getting offsets for topic-partition {topic}-{partition} due to error: {error}",
                      file=sys.stderr)
                continue
            if offset != -1:
                print(f"{topic}:{partition}:{offset}")
    return 0
