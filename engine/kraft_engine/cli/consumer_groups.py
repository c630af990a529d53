"""`kraft consumer-groups`: Kafka's kafka-consumer-groups, for classic consumer groups.

Kafka's flags and output (ConsumerGroupCommand):

    --bootstrap-server B [--command-config F] --list [--state [S,...]]
    --bootstrap-server B --describe (--group G ... | --all-groups) [--members | --offsets | --state]
    --bootstrap-server B --reset-offsets (--group G ... | --all-groups) (--topic T[:P,...] | --all-topics)
        (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N
         | --to-datetime YYYY-MM-DDThh:mm:ss.sss | --by-duration PnDTnHnMnS | --from-file CSV)
        [--dry-run | --execute] [--export]
    --bootstrap-server B --delete (--group G ... | --all-groups)
    --bootstrap-server B --delete-offsets --group G --topic T[:P,...] ...
    --validate-regex REGEX

`--describe` prints Kafka's tables (column widths grow with the longest value, missing values as
"-"), groups in sorted order, and on stderr the notes Kafka prints for an Empty or rebalancing
group; a group that does not exist fails the command with Kafka's GroupIdNotFoundException line
before anything is printed. `--reset-offsets` prints the plan (GROUP TOPIC PARTITION NEW-OFFSET), or
with `--export` Kafka's CSV (`topic,partition,offset`, with the group first when several groups
are reset), which `--from-file` reads back; with `--execute` it commits the plan. As in Kafka, only
a group with no active members is reset; `--to-offset` and `--shift-by` are clamped to each
partition's earliest and latest; `--to-current` keeps the committed offset (the log end where none
is); `--to-datetime` (UTC unless the time names its zone, as Kafka's Utils.getDateTime) and
`--by-duration` (ISO-8601, before now) take the first offset at or after that time, the log end
where no record is that late (with Kafka's "Warn: Partition ... is empty" line). `--command-config` gives the admin client's security keys.
`--delete-offsets` deletes one group's committed offsets of the topics (or topic:partitions)
named, with OffsetDelete, and prints Kafka's TOPIC PARTITION STATUS table. `--validate-regex`
checks a consumer-group topic regex (KIP-848) as Kafka 4.1 does, against RE2J's syntax
(`kraft_engine.re2_syntax`), needs no server and prints Kafka's line either way.

Kafka 4.1's tool reports what goes wrong while it acts (a group that is not inactive for a reset,
a group that cannot be deleted, a partition whose offsets cannot be deleted) as `\nError: ...` on
standard output and exits 0; only a command line it refuses exits 1. Ours does the same, so a
runbook that reads the tool's status or output reads the same thing. Groups come out in the order
Kafka's HashMaps iterate them.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path

from kio.schema.errors import ErrorCode

from kraft_engine.admin.controller_admin import ControllerAdminError
from kraft_engine.admin.group_admin import GroupAdmin, GroupSummary
from kraft_engine.admin.record_clients import EARLIEST, LATEST, RecordClientError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.reassign_partitions import java_hash_set_order
from kraft_engine.cli.tool_inputs import bootstrap_servers, command_config_security
from kraft_engine.protocol.security import ClientSecurity
from kraft_engine.re2_syntax import re2j_syntax_error
from kraft_engine.records.group_records import java_string_hash

__all__ = ["iso_duration_ms", "kafka_date_time_ms", "register"]

_INACTIVE = ("Empty", "Dead")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("consumer-groups", help="List, describe, reset and delete consumer groups "
                                   "(kafka-consumer-groups)",
                                   description="Lists, describes, resets the offsets of and deletes consumer groups.")
    parser.add_argument("--bootstrap-server", help="The server(s) to connect to. REQUIRED for all options except "
                                                   "for --validate-regex.")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help="List all consumer groups.")
    actions.add_argument("--describe", action="store_true", help="Describe consumer group and list offset lag.")
    actions.add_argument("--reset-offsets", action="store_true", help="Reset offsets of consumer group.")
    actions.add_argument("--delete", action="store_true", help="Pass in groups to delete topic partition offsets.")
    actions.add_argument("--delete-offsets", action="store_true", help="Delete offsets of consumer group. Supports "
                         "one consumer group at the time, and multiple topics.")
    actions.add_argument("--validate-regex", metavar="regex", help="Validate that the syntax of the provided regular "
                         "expression is valid according to the RE2 format.")
    parser.add_argument("--command-config",
                        help="Property file containing configs to be passed to Admin Client and Consumer.")
    parser.add_argument("--group", action="append", default=[], help="The consumer group we wish to act on.")
    parser.add_argument("--all-groups", action="store_true", help="Apply to all consumer groups.")
    parser.add_argument("--members", action="store_true", help="Describe members of the group.")
    parser.add_argument("--offsets", action="store_true", help="Describe the group and list all topic partitions "
                                                               "in the group along with their offset lag.")
    parser.add_argument("--state", nargs="?", const="", default=None,
                        help="With --describe: the group's state. With --list: only groups in these states.")
    parser.add_argument("--topic", action="append", default=[], help="The topic whose offsets to reset "
                                                                     "(topic or topic:0,1,2).")
    parser.add_argument("--all-topics", action="store_true", help="Consider all topics assigned to a group.")
    parser.add_argument("--to-earliest", action="store_true", help="Reset offsets to earliest offset.")
    parser.add_argument("--to-latest", action="store_true", help="Reset offsets to latest offset.")
    parser.add_argument("--to-offset", type=int, help="Reset offsets to a specific offset.")
    parser.add_argument("--shift-by", type=int, help="Reset offsets shifting current offset by 'n'.")
    parser.add_argument("--to-current", action="store_true", help="Reset offsets to current offset.")
    parser.add_argument("--to-datetime",
                        help="Reset offsets to offset from datetime. Format: 'YYYY-MM-DDThh:mm:ss.sss'")
    parser.add_argument("--by-duration",
                        help="Reset offsets to offset by duration from current timestamp. Format: 'PnDTnHnMnS'")
    parser.add_argument("--from-file", help="Reset offsets to values defined in CSV file.")
    parser.add_argument("--export", action="store_true",
                        help="Export operation execution to a CSV file. Supported operations: reset-offsets.")
    parser.add_argument("--dry-run", action="store_true", help="Only show results without executing changes.")
    parser.add_argument("--execute", action="store_true", help="Execute operation.")
    parser.add_argument("--timeout", type=int, default=30000, help="The timeout (ms) for group requests.")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.validate_regex is not None:
        return _validate_regex(args.validate_regex)
    if args.bootstrap_server is None:
        raise CliError('Missing required argument "[bootstrap-server]"')
    bootstrap = bootstrap_servers(args.bootstrap_server)
    action = 'describe' if args.describe else 'reset-offsets' if args.reset_offsets else 'delete'
    if args.delete_offsets:
        action = 'delete-offsets'
    if (args.describe or args.reset_offsets or args.delete) and not args.group and not args.all_groups:
        raise CliError(f"Option [{action}] takes one of these options: [all-groups], [group]")
    if args.group and args.all_groups:
        raise CliError(f"Option [{action}] takes one of these options: [all-groups], [group]")
    if args.reset_offsets:
        _check_reset_args(args)
    if args.delete_offsets and (not args.group or not args.topic):
        raise CliError("Option [delete-offsets] takes the following options: [topic], [group]")
    security = command_config_security(args.command_config)
    try:
        return asyncio.run(_act(args, bootstrap, security=security))
    except (RecordClientError, ControllerAdminError) as e:
        raise CliError(str(e)) from None


def _validate_regex(pattern: str) -> int:
    """Kafka's validateRegex: RE2J's verdict and, for a refusal, its description; exit 0 either way."""
    error = re2j_syntax_error(pattern)
    if error is None:
        print(f"The regular expression `{pattern}` is valid.")
    else:
        print(f"The regular expression `{pattern}` is invalid: {error.description}.")
    return 0


async def _act(args: argparse.Namespace, bootstrap: list[tuple[str, int]], *, security: ClientSecurity | None) -> int:
    async with GroupAdmin(bootstrap, timeout_ms=args.timeout, client_id="kraft-consumer-groups",
                          security=security) as admin:
        if args.list:
            return await _list(admin, args)
        if args.delete_offsets:
            return await _delete_offsets(admin, args.group[0], args.topic)
        groups = list(args.group) if not args.all_groups else [g for g, _, _ in await admin.list_groups()]
        if args.describe:
            return await _describe_groups(admin, groups, args)
        if args.reset_offsets:
            return await _reset(admin, groups, args)
        return await _delete(admin, groups)


async def _list(admin: GroupAdmin, args: argparse.Namespace) -> int:
    wanted = () if not args.state else tuple(s.strip() for s in args.state.split(",") if s.strip())
    groups = await admin.list_groups(states=wanted)
    if args.state is None:
        for group_id, _, _ in groups:
            print(group_id)
        return 0
    width = max([15, *(len(g) for g, _, _ in groups)])
    print(f"{'GROUP':<{width}} STATE")
    for group_id, _, state in groups:
        print(f"{group_id:<{width}} {state}")
    return 0


async def _describe_groups(admin: GroupAdmin, groups: list[str], args: argparse.Namespace) -> int:
    """Kafka's describeGroups: every group is described before anything is printed; a group the
    coordinator does not know fails the whole command (Kafka's Admin raises GroupIdNotFoundException
    for the first such group of its HashMap), reported on stdout with status 0; the groups then
    print in TreeMap order."""
    summaries = {}
    for group in _java_order(groups):
        summary = await admin.describe(group)
        if summary.not_found is not None:
            _print_error("Executing consumer group command failed due to "
                         f"org.apache.kafka.common.errors.GroupIdNotFoundException: {summary.not_found}")
            return 0
        summaries[group] = summary
    for group in sorted(summaries, key=_java_string_order):
        await _describe(admin, summaries[group], args)
    return 0


def _java_string_order(text: str) -> bytes:
    """The order of Java's String.compareTo (UTF-16 code units)."""
    return text.encode("utf-16-be", "surrogatepass")


def _missing(summary: GroupSummary) -> bool:
    """Kafka's shouldPrintMemberState for a group described as Dead (no longer a missing group:
    DescribeGroups v6 answers GROUP_ID_NOT_FOUND for that)."""
    if summary.state == "Dead":
        _print_error(f"Consumer group '{summary.group_id}' does not exist.")
        return True
    return False


def _notes(summary: GroupSummary) -> None:
    if summary.state == "Empty":
        print(f"\nConsumer group '{summary.group_id}' has no active members.", file=sys.stderr)
    elif summary.state in ("PreparingRebalance", "CompletingRebalance"):
        print(f"\nWarning: Consumer group '{summary.group_id}' is rebalancing.", file=sys.stderr)


async def _describe(admin: GroupAdmin, summary: GroupSummary, args: argparse.Namespace) -> int:
    group = summary.group_id
    if _missing(summary):
        return 0
    if args.state is not None:
        node_id, host, port = summary.coordinator
        coordinator = f"{host}:{port}  ({node_id})"
        group_width = max(15, len(group))
        coordinator_width = max(25, len(coordinator))
        row = f"\n{{:<{group_width}}} {{:<{coordinator_width}}} {{:<20}} {{:<20}} {{}}"
        sys.stdout.write(row.format("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"))
        sys.stdout.write(row.format(group, coordinator, summary.protocol or "-", summary.state, len(summary.members)))
        print()
        return 0
    if args.members:
        _notes(summary)
        # Kafka sizes the columns by the rows: a group without members prints the bare header.
        with_instance = any(m.group_instance_id for m in summary.members)
        widths = [max([15, *(len(group) for _ in summary.members)]),
                  max([15, *(len(m.member_id) for m in summary.members)])]
        instance_width = max([17, *(len(m.group_instance_id or "-") for m in summary.members)])
        host_width = max([15, *(len(m.client_host) for m in summary.members)])
        client_width = max([15, *(len(m.client_id) for m in summary.members)])
        row = (f"\n{{:<{widths[0]}}} {{:<{widths[1]}}} " + (f"{{:<{instance_width}}} " if with_instance else "")
               + f"{{:<{host_width}}} {{:<{client_width}}} {{:<15}} ")
        header = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if with_instance else []), "HOST", "CLIENT-ID",
                  "#PARTITIONS"]
        sys.stdout.write(row.format(*header))
        for m in summary.members:
            cells = [group, m.member_id, *([m.group_instance_id or "-"] if with_instance else []), m.client_host,
                     m.client_id, len(m.assignment)]
            sys.stdout.write(row.format(*cells))
        print()
        return 0
    # --offsets (the default)
    _notes(summary)
    committed = await admin.committed(group)
    rows: list[tuple[str, int, int | None, str, str, str]] = []
    assigned: set[tuple[str, int]] = set()
    for m in sorted(summary.members, key=lambda m: -len(m.assignment)):
        for tp in m.assignment:
            assigned.add(tp)
            rows.append((tp[0], tp[1], committed.get(tp), m.member_id, m.client_host, m.client_id))
    for tp in sorted(set(committed) - assigned):
        rows.append((tp[0], tp[1], committed[tp], "-", "-", "-"))
    if not rows:
        return 0
    ends = {}
    for topic, partition, *_ in rows:
        ends[(topic, partition)] = await admin.list_offset(topic, partition, timestamp=LATEST)
    group_width = max(15, len(group))
    topic_width = max([15, *(len(r[0]) for r in rows)])
    consumer_width = max([15, *(len(r[3]) for r in rows)])
    host_width = max([15, *(len(r[4]) for r in rows)])
    row = f"\n{{:<{group_width}}} {{:<{topic_width}}} {{:<10}} {{:<15}} {{:<15}} {{:<15}} {{:<{consumer_width}}} " \
          f"{{:<{host_width}}} {{}}"
    sys.stdout.write(row.format("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"))
    for topic, partition, offset, member, host, client in rows:
        end = ends[(topic, partition)]
        sys.stdout.write(row.format(group, topic, partition, "-" if offset is None else offset, end,
                                    "-" if offset is None else end - offset, member, host, client))
    print()
    return 0


_SCENARIOS = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime", "by_duration",
              "from_file")


def _check_reset_args(args: argparse.Namespace) -> None:
    given = [name for name in _SCENARIOS if getattr(args, name) is not None and getattr(args, name) is not False]
    if len(given) != 1:
        raise CliError("Option [reset-offsets] takes exactly one of the scenarios: --to-earliest, --to-latest, "
                       "--to-current, --to-offset, --shift-by, --to-datetime, --by-duration, --from-file")
    if not args.from_file and not args.topic and not args.all_topics:
        raise CliError("Option [reset-offsets] takes one of these options: [all-topics], [topic]")
    if args.to_datetime is not None:
        args.reset_timestamp_ms = kafka_date_time_ms(args.to_datetime)
    elif args.by_duration is not None:
        args.reset_timestamp_ms = int(time.time() * 1000) - iso_duration_ms(args.by_duration)


_DATE_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})(Z|[+-]\d\d(:?\d\d)?)?$")


def kafka_date_time_ms(text: str) -> int:
    """Kafka's Utils.getDateTime: `yyyy-MM-dd'T'HH:mm:ss.SSS` with an optional zone (Z, +hh,
    +hhmm or +hh:mm); UTC when the time has none."""
    if "T" not in text:
        raise CliError(f"Error parsing timestamp. It does not contain a 'T' according to ISO8601 format: {text}")
    match = _DATE_TIME.match(text)
    if match is None:
        raise CliError(f"Unparseable date: \"{text}\" (expected yyyy-MM-dd'T'HH:mm:ss.SSS with an optional zone)")
    zone = match.group(2) or "Z"
    if zone != "Z" and len(zone) == 3:
        zone += ":00"
    parsed = datetime.fromisoformat(match.group(1) + ("+00:00" if zone == "Z" else zone))
    return int(parsed.timestamp() * 1000)


_DURATION = re.compile(r"^([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+(?:\.\d{1,9})?)S)?)?$",
                       re.IGNORECASE)


def iso_duration_ms(text: str) -> int:
    """java.time.Duration.parse's `PnDTnHnMn.nS` in milliseconds."""
    match = _DURATION.match(text)
    if match is None or text.upper().endswith("T") or not any(match.group(i) for i in range(2, 6)):
        raise CliError(f"Text cannot be parsed to a Duration: {text}")
    sign, days, hours, minutes, seconds = match.groups()
    total = timedelta(days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0),
                      seconds=float(seconds or 0))
    return (-1 if sign == "-" else 1) * int(total / timedelta(milliseconds=1))


def _reset_plan_csv(path: str, groups: list[str]) -> dict[str, dict[tuple[str, int], int]]:
    """Kafka's parseResetPlan: `topic,partition,offset` lines for the one group, or
    `group,topic,partition,offset` lines."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read --from-file {path}: {e}") from None
    plans: dict[str, dict[tuple[str, int], int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        try:
            if len(cells) == 3 and len(groups) == 1:
                group, (topic, partition, offset) = groups[0], cells
            elif len(cells) == 4:
                group, topic, partition, offset = cells
            else:
                raise ValueError(f"{len(cells)} columns")
            plans.setdefault(group, {})[(topic, int(partition))] = int(offset)
        except ValueError as e:
            raise CliError(f"--from-file {path} line {number} is not topic,partition,offset (or with the group "
                           f"first): {e}") from None
    return plans


async def _reset(admin: GroupAdmin, groups: list[str], args: argparse.Namespace) -> int:
    from_file = _reset_plan_csv(args.from_file, groups) if args.from_file else None
    plans: dict[str, dict[tuple[str, int], int]] = {}
    for group in _java_order(groups):
        summary = await admin.describe(group)
        if summary.state not in _INACTIVE:
            _print_error(f"Assignments can only be reset if the group '{group}' is inactive, but the current state "
                         f"is {summary.state}.")
            plans[group] = {}
            continue
        plans[group] = await _group_plan(admin, group, args, from_file=from_file)
        if args.execute and not args.dry_run:
            await admin.commit(group, plans[group])
    if not args.execute and not args.dry_run:
        print("WARN: No action will be performed as the --execute option is missing. In a future major release, "
              "the default behavior of this command will be to prompt the user before executing the reset rather "
              "than doing a dry run. You should add the --dry-run option explicitly if you are scripting this "
              "command and want to keep the current default behavior without prompting.", file=sys.stderr)
    if args.export:
        # Kafka's CSV: one record a line, the group first unless one group was asked for; then println.
        with_group = len(args.group) != 1
        print("".join(f"{group + ',' if with_group else ''}{topic},{partition},{offset}\n"
                      for group, plan in plans.items() for (topic, partition), offset in plan.items()))
    else:
        # Kafka's printOffsetsToReset: the header once any group was asked for, the rows, a newline.
        row = "\n{:<30} {:<30} {:<10} {:<15}"
        if plans:
            sys.stdout.write(row.format("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"))
        for group, plan in plans.items():
            for (topic, partition), offset in plan.items():
                sys.stdout.write(row.format(group, topic, partition, offset))
        print()
    return 0


async def _group_plan(admin: GroupAdmin, group: str, args: argparse.Namespace, *,
                      from_file: dict[str, dict[tuple[str, int], int]] | None) -> dict[tuple[str, int], int]:
    committed = await admin.committed(group)
    if from_file is not None:
        return dict(sorted(from_file.get(group, {}).items()))
    partitions: list[tuple[str, int]] = []
    if args.all_topics:
        partitions = sorted(committed)
    for spec in args.topic:
        topic, _, listed = spec.partition(":")
        if listed:
            partitions += [(topic, int(p)) for p in listed.split(",")]
        else:
            partitions += [(topic, p) for p in range(await admin.refresh(topic))]
    plan: dict[tuple[str, int], int] = {}
    for topic, partition in sorted(set(partitions)):
        earliest = await admin.list_offset(topic, partition, timestamp=EARLIEST)
        latest = await admin.list_offset(topic, partition, timestamp=LATEST)
        if args.to_earliest:
            target = earliest
        elif args.to_latest:
            target = latest
        elif args.to_current:
            target = committed.get((topic, partition), latest)
        elif args.to_offset is not None:
            target = args.to_offset
        elif args.shift_by is not None:
            target = committed.get((topic, partition), latest) + args.shift_by
        else:  # --to-datetime, --by-duration: the first offset at or after; the log end when none is
            found = await admin.list_offset(topic, partition, timestamp=args.reset_timestamp_ms)
            target = found
            if found < 0:
                print(f"\nWarn: Partition {partition} from topic {topic} is empty. Falling back to latest known offset.")
                target = latest
        plan[(topic, partition)] = min(max(target, earliest), latest)
    return plan


async def _delete(admin: GroupAdmin, groups: list[str]) -> int:
    failed: dict[str, str] = {}
    for group in groups:
        code = await admin.delete(group)
        if code != ErrorCode.none:
            failed[group] = _exception(code)
    deleted = _java_order(g for g in groups if g not in failed)
    if not failed:
        listed = ", ".join(f"'{g}'" for g in deleted)
        print(f"Deletion of requested consumer groups ({listed}) was successful.")
        return 0
    _print_error("Deletion of some consumer groups failed:")
    for group in _java_order(failed):
        print(f"* Group '{group}' could not be deleted due to: {failed[group]}")
    if deleted:
        print("\nThese consumer groups were deleted successfully: " + ", ".join(f"'{g}'" for g in deleted))
    return 0


async def _delete_offsets(admin: GroupAdmin, group: str, topics: list[str]) -> int:
    """Kafka's deleteOffsets: the named partitions, or every partition of a topic named alone (an
    unknown one is a row of its own, partition "-"); then one OffsetDelete to the coordinator."""
    results: dict[tuple[str, int], ErrorCode] = {}
    partitions: list[tuple[str, int]] = []
    for spec in dict.fromkeys(topics):
        topic, colon, listed = spec.partition(":")
        if colon:
            partitions += [(topic, int(p)) for p in listed.split(",")]
            continue
        try:
            partitions += [(topic, p) for p in range(await admin.refresh(topic))]
        except RecordClientError as e:
            results[(topic, -1)] = e.error if isinstance(e.error, ErrorCode) else ErrorCode.unknown_server_error
    top = ErrorCode.none
    if partitions:
        top, answered = await admin.delete_offsets(group, partitions)
        results.update(answered)
        if top == ErrorCode.none:  # Kafka's Admin: all() fails with a partition's error
            top = next((answered[tp] for tp in sorted(answered) if answered[tp] != ErrorCode.none), ErrorCode.none)
    if top == ErrorCode.none:
        print(f"Request succeeded for deleting offsets from group {group}.")
    elif top in (ErrorCode.invalid_group_id, ErrorCode.group_id_not_found, ErrorCode.group_authorization_failed,
                 ErrorCode.non_empty_group):
        _print_error(_EXCEPTIONS[top][1])
    elif top in (ErrorCode.group_subscribed_to_topic, ErrorCode.topic_authorization_failed,
                 ErrorCode.unknown_topic_or_partition):
        _print_error("Encountered some partition-level error, see the follow-up details.")
    else:
        _print_error(f"Encountered some unknown error: {top.name.upper()}")
    width = max([15, *(len(topic) for topic, _ in results)])
    row = f"\n{{:<{width}}} {{:<10}} {{:<15}}"
    sys.stdout.write(row.format("TOPIC", "PARTITION", "STATUS"))
    for (topic, partition), code in sorted(results.items(), key=lambda e: e[0][0] + str(e[0][1])):
        status = "Successful" if code == ErrorCode.none else f"Error: {_exception(code)}"
        sys.stdout.write(row.format(topic, partition if partition >= 0 else "-", status))
    print()
    return 0


def _print_error(message: str) -> None:
    """Kafka's ConsumerGroupCommand.printError: on standard output, after a blank line."""
    print(f"\nError: {message}")


def _java_order(groups: Iterable[str]) -> list[str]:
    """The order a java.util.HashMap keyed by these group ids iterates them."""
    return java_hash_set_order(groups, hash_of=java_string_hash)


# The exception Kafka's Admin raises for an error code, and its message (Errors' default).
_EXCEPTIONS = {
    ErrorCode.non_empty_group: ("GroupNotEmptyException", "The group is not empty."),
    ErrorCode.group_id_not_found: ("GroupIdNotFoundException", "The group id does not exist."),
    ErrorCode.invalid_group_id: ("InvalidGroupIdException", "The configured groupId is invalid."),
    ErrorCode.group_authorization_failed: ("GroupAuthorizationException", "Group authorization failed."),
    ErrorCode.topic_authorization_failed: ("TopicAuthorizationException", "Topic authorization failed."),
    ErrorCode.unknown_topic_or_partition: ("UnknownTopicOrPartitionException",
                                           "This server does not host this topic-partition."),
    ErrorCode.group_subscribed_to_topic: ("GroupSubscribedToTopicException", "Deleting offsets of a topic is forbidden "
                                          "while the consumer group is actively subscribed to it."),
}


def _exception(code: ErrorCode) -> str:
    """How Kafka prints the exception of an error code: NON_EMPTY_GROUP is GroupNotEmptyException."""
    if code not in _EXCEPTIONS:
        return code.name.upper()
    name, message = _EXCEPTIONS[code]
    return f"org.apache.kafka.common.errors.{name}: {message}"
