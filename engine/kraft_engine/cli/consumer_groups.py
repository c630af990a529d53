"""`kraft consumer-groups`: Kafka's kafka-consumer-groups, for classic consumer groups.

Kafka's flags and output (ConsumerGroupCommand):

    --bootstrap-server B --list [--state [S,...]]
    --bootstrap-server B --describe --group G [--members | --offsets | --state]
    --bootstrap-server B --reset-offsets --group G (--topic T[:P,...] | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --shift-by N) [--dry-run | --execute]
    --bootstrap-server B --delete --group G

`--describe` prints Kafka's tables (column widths grow with the longest value, missing values as
"-"), and on stderr the notes Kafka prints for an Empty or rebalancing group; a group that does
not exist is an error. `--reset-offsets` prints the plan (GROUP TOPIC PARTITION NEW-OFFSET) and,
with `--execute`, commits it; as in Kafka, only while the group has no active members, and
offsets are clamped to each partition's earliest and latest.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from kraft_engine.admin.controller_admin import ControllerAdminError
from kraft_engine.admin.group_admin import GroupAdmin, GroupSummary
from kraft_engine.admin.record_clients import EARLIEST, LATEST, RecordClientError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import bootstrap_servers

__all__ = ["register"]

_INACTIVE = ("Empty", "Dead")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("consumer-groups", help="List, describe, reset and delete consumer groups "
                                   "(kafka-consumer-groups)",
                                   description="Lists, describes, resets the offsets of and deletes consumer groups.")
    parser.add_argument("--bootstrap-server", required=True, help="REQUIRED: The server(s) to connect to.")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help="List all consumer groups.")
    actions.add_argument("--describe", action="store_true", help="Describe consumer group and list offset lag.")
    actions.add_argument("--reset-offsets", action="store_true", help="Reset offsets of consumer group.")
    actions.add_argument("--delete", action="store_true", help="Pass in groups to delete topic partition offsets.")
    parser.add_argument("--group", action="append", default=[], help="The consumer group we wish to act on.")
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
    parser.add_argument("--dry-run", action="store_true", help="Only show results without executing changes.")
    parser.add_argument("--execute", action="store_true", help="Execute operation.")
    parser.add_argument("--timeout", type=int, default=30000, help="The timeout (ms) for group requests.")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    bootstrap = bootstrap_servers(args.bootstrap_server)
    if (args.describe or args.reset_offsets or args.delete) and not args.group:
        raise CliError(f"Option [{'describe' if args.describe else 'reset-offsets' if args.reset_offsets else 'delete'}]"
                       " takes one of these options: [all-groups], [group]")
    try:
        return asyncio.run(_act(args, bootstrap))
    except (RecordClientError, ControllerAdminError) as e:
        raise CliError(str(e)) from None


async def _act(args: argparse.Namespace, bootstrap: list[tuple[str, int]]) -> int:
    async with GroupAdmin(bootstrap, timeout_ms=args.timeout, client_id="kraft-consumer-groups") as admin:
        if args.list:
            return await _list(admin, args)
        if args.describe:
            rc = 0
            for group in args.group:
                rc = max(rc, await _describe(admin, group, args))
            return rc
        if args.reset_offsets:
            return await _reset(admin, args)
        return await _delete(admin, args)


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


def _missing(summary: GroupSummary) -> bool:
    if summary.state == "Dead":
        print(f"Error: Consumer group '{summary.group_id}' does not exist.", file=sys.stderr)
        return True
    return False


def _notes(summary: GroupSummary) -> None:
    if summary.state == "Empty":
        print(f"\nConsumer group '{summary.group_id}' has no active members.", file=sys.stderr)
    elif summary.state in ("PreparingRebalance", "CompletingRebalance"):
        print(f"\nWarning: Consumer group '{summary.group_id}' is rebalancing.", file=sys.stderr)


async def _describe(admin: GroupAdmin, group: str, args: argparse.Namespace) -> int:
    summary = await admin.describe(group)
    if _missing(summary):
        return 1
    if args.state is not None:
        node_id, host, port = summary.coordinator
        coordinator = f"{host}:{port}  ({node_id})"
        group_width = max(15, len(group))
        coordinator_width = max(25, len(coordinator))
        row = f"\n{{:<{group_width}}} {{:<{coordinator_width}}} {{:<20}} {{:<20}} {{}}"
        sys.stdout.write(row.format("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"))
        sys.stdout.write(row.format(group, coordinator, summary.protocol, summary.state, len(summary.members)))
        print()
        return 0
    if args.members:
        _notes(summary)
        if not summary.members:
            return 0
        with_instance = any(m.group_instance_id for m in summary.members)
        widths = [max([15, len(group)]), max([15, *(len(m.member_id) for m in summary.members)])]
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


async def _reset(admin: GroupAdmin, args: argparse.Namespace) -> int:
    if sum((args.to_earliest, args.to_latest, args.to_offset is not None, args.shift_by is not None)) != 1:
        raise CliError("Option [reset-offsets] takes exactly one of the scenarios: --to-earliest, --to-latest, "
                       "--to-offset, --shift-by")
    if not args.topic and not args.all_topics:
        raise CliError("Option [reset-offsets] takes one of these options: [all-topics], [topic]")
    if len(args.group) != 1:
        raise CliError("--reset-offsets acts on one --group here")
    group = args.group[0]
    summary = await admin.describe(group)
    if summary.state not in _INACTIVE:
        raise CliError(f"Assignments can only be reset if the group '{group}' is inactive, but the current state "
                       f"is {summary.state}.")
    committed = await admin.committed(group)
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
        elif args.to_offset is not None:
            target = args.to_offset
        else:
            target = committed.get((topic, partition), latest) + args.shift_by
        plan[(topic, partition)] = min(max(target, earliest), latest)
    if args.execute:
        await admin.commit(group, plan)
    elif not args.dry_run:
        print("WARN: No action will be performed as the --execute option is missing. In a future major release, "
              "the default behavior of this command will be to prompt the user before executing the reset rather "
              "than doing a dry run. You should add the --dry-run option explicitly if you are scripting this "
              "command and want to keep the current default behavior without prompting.", file=sys.stderr)
    row = "{:<30} {:<30} {:<10} {:<15}"
    if plan:
        print("\n" + row.format("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"))
    for (topic, partition), offset in plan.items():
        print(row.format(group, topic, partition, offset))
    return 0


async def _delete(admin: GroupAdmin, args: argparse.Namespace) -> int:
    failed: dict[str, str] = {}
    for group in args.group:
        code = await admin.delete(group)
        if code.name != "none":
            failed[group] = _exception_name(code.name)
    deleted = [g for g in args.group if g not in failed]
    if not failed:
        listed = ", ".join(f"'{g}'" for g in deleted)
        print(f"Deletion of requested consumer groups ({listed}) was successful.")
        return 0
    print("Deletion of some consumer groups failed:")
    for group, reason in failed.items():
        print(f"* Group '{group}' could not be deleted due to: {reason}")
    if deleted:
        print("\nThese consumer groups were deleted successfully: " + ", ".join(f"'{g}'" for g in deleted))
    return 1


def _exception_name(error: str) -> str:
    """Kafka prints the exception of an error code: NON_EMPTY_GROUP is GroupNotEmptyException."""
    names = {"non_empty_group": "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.",
             "group_id_not_found": "org.apache.kafka.common.errors.GroupIdNotFoundException: The group id does not "
                                   "exist."}
    return names.get(error, error.upper())
