"""`kraft reassign-partitions`: Kafka's kafka-reassign-partitions tool (ReassignPartitionsCommand),
its `--execute` and `--verify` actions, including moves between a broker's log directories.

The file is Kafka's reassignment JSON:

    {"version": 1, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [101, 102], "log_dirs": ["/data/b", "any"]}]}

`--execute` prints the current assignment (Kafka's rollback JSON), starts the reassignments with
AlterPartitionReassignments (sent to any broker, which forwards it to the active controller), then,
for every replica whose `log_dirs` entry is not `any`, sends AlterReplicaLogDirs to that broker,
retrying REPLICA_NOT_AVAILABLE (a replica the broker does not host yet) until `--timeout`, as
Kafka's tool does. `--verify` prints the state of each partition reassignment and of each log
directory move (from ListPartitionReassignments, Metadata and DescribeLogDirs) in Kafka's words.
Output lines are Kafka's. Not implemented: `--generate`, `--cancel`, `--list`, throttles (the
broker has no replication quotas), `--command-config` (plaintext only).

A file that is not Kafka's format is refused with the reason before anything is sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import timedelta
from typing import Any

from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.alter_replica_log_dirs.v2.request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta

from kraft_engine.admin.broker_admin import BrokerAdmin
from kraft_engine.admin.controller_admin import ControllerAdminError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import bootstrap_and_file

__all__ = ["parse_reassignment_json", "register"]

ANY_LOG_DIR = "any"
_RETRY_PAUSE_S = 0.1

Partition = tuple[str, int]
Replica = tuple[str, int, int]  # topic, partition, broker


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "reassign-partitions", help="Move partitions between brokers and log directories (kafka-reassign-partitions)",
        description="This tool helps to move topic partitions between replicas.")
    parser.add_argument("--bootstrap-server", required=True, help="REQUIRED: the server(s) to use for bootstrapping.")
    parser.add_argument("--reassignment-json-file", required=True,
                        help="The JSON file with the partition reassignment configuration.")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true",
                        help="Kick off the reassignment as specified by the --reassignment-json-file option.")
    action.add_argument("--verify", action="store_true",
                        help="Verify if the reassignment completed as specified by the --reassignment-json-file option.")
    parser.add_argument("--additional", action="store_true",
                        help="Execute this reassignment in addition to any other ongoing ones.")
    parser.add_argument("--timeout", type=int, default=10000,
                        help="The maximum time in ms to wait for log directory replica assignment to begin "
                             "(default 10000).")
    parser.set_defaults(func=_run)


def parse_reassignment_json(text: str) -> tuple[dict[Partition, list[int]], dict[Replica, str]]:
    """Kafka's reassignment JSON: target replicas per partition, and target log directory per
    replica (only those that are not `any`). ValueError says what is wrong."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the reassignment JSON file is not JSON: {e}") from None
    if not isinstance(document, dict):
        raise ValueError("the reassignment JSON file must hold an object with \"partitions\" and \"version\"")
    if document.get("version", 1) != 1:
        raise ValueError(f"Not supported version field value {document.get('version')}")
    entries = document.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise ValueError("Partition reassignment list cannot be empty")
    parts: dict[Partition, list[int]] = {}
    dirs: dict[Replica, str] = {}
    duplicates = []
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"partitions[{position}] must be an object with topic, partition and replicas")
        topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"partitions[{position}] needs a \"topic\" string")
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise ValueError(f"partitions[{position}] needs a non-negative integer \"partition\", not {partition!r}")
        if not isinstance(replicas, list) or not replicas or not all(
                isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in replicas):
            raise ValueError(f"partitions[{position}] needs \"replicas\": a non-empty list of broker ids")
        tp = (topic, partition)
        if tp in parts:
            duplicates.append(tp)
        if len(set(replicas)) != len(replicas):
            raise ValueError(f"Replica assignment for partition {topic}-{partition} contains duplicate replicas: "
                             f"{','.join(map(str, replicas))}")
        parts[tp] = list(replicas)
        log_dirs = entry.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(log_dirs, list) or not all(isinstance(d, str) and d for d in log_dirs):
            raise ValueError(f"partitions[{position}] has \"log_dirs\" that is not a list of paths or \"any\"")
        if len(log_dirs) != len(replicas):
            raise ValueError(f"Size of replicas list {replicas} is different from size of log dirs list {log_dirs} "
                             f"for partition {topic}-{partition}")
        for broker, log_dir in zip(replicas, log_dirs, strict=True):
            if log_dir != ANY_LOG_DIR:
                dirs[(topic, partition, broker)] = log_dir
    if duplicates:
        raise ValueError("Partition reassignment contains duplicate topic partitions: "
                         + ",".join(f"{t}-{p}" for t, p in duplicates))
    return parts, dirs


def _run(args: argparse.Namespace) -> int:
    bootstrap, text = bootstrap_and_file(args.bootstrap_server, flag="--reassignment-json-file", path=args.reassignment_json_file)
    try:
        parts, dirs = parse_reassignment_json(text)
    except ValueError as e:
        raise CliError(str(e)) from None
    action = _execute(bootstrap, parts, dirs, additional=args.additional, timeout_ms=args.timeout) if args.execute \
        else _verify(bootstrap, parts, dirs)
    try:
        return asyncio.run(action)
    except ControllerAdminError as e:
        raise CliError(str(e)) from None


def _name(replica: Replica) -> str:
    """Kafka's TopicPartitionReplica.toString."""
    return f"{replica[0]}-{replica[1]}-{replica[2]}"


def _replica_order(replica: Replica) -> tuple[int, str, int]:
    return replica[2], replica[0], replica[1]


async def _metadata(admin: BrokerAdmin, topics: list[str]) -> Any:
    return await admin.send_to_any(MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))


async def _ongoing(admin: BrokerAdmin) -> dict[Partition, list[int]]:
    response = await admin.send_to_any(ListPartitionReassignmentsRequest(
        timeout=i32Timedelta.parse(timedelta(seconds=30)), topics=None))
    return {(str(t.name), int(p.partition_index)): [int(r) for r in p.replicas]
            for t in response.topics for p in t.partitions}


async def _execute(bootstrap: list[tuple[str, int]], parts: dict[Partition, list[int]], dirs: dict[Replica, str], *,
                   additional: bool, timeout_ms: int) -> int:
    async with BrokerAdmin(bootstrap, timeout_ms=30000, client_id="reassign-partitions-tool") as admin:
        if not additional and await _ongoing(admin):
            print("Cannot execute because there is an existing partition assignment.  Use --additional to override "
                  "this and create a new partition assignment in addition to the existing one. The --additional flag "
                  "can also be used to change the throttle by resubmitting the current reassignment.")
            return 1
        metadata = await _metadata(admin, sorted({t for t, _ in parts}))
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in metadata.brokers}
        unknown = sorted({r for replicas in parts.values() for r in replicas} - set(brokers))
        if unknown:
            raise CliError(f"Unknown broker id {unknown[0]}")
        current = {(str(t.name), int(p.partition_index)): [int(r) for r in p.replica_nodes]
                   for t in metadata.topics for p in t.partitions}
        rollback = {"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": current[(t, p)], "log_dirs": [ANY_LOG_DIR] * len(current[(t, p)])}
            for t, p in sorted(parts) if (t, p) in current]}
        print(f"Current partition replica assignment\n\n{json.dumps(rollback, separators=(',', ':'))}\n\n"
              "Save this to use as the --reassignment-json-file option during rollback")
        by_topic: dict[str, list[ReassignablePartition]] = {}
        for (topic, index), replicas in sorted(parts.items()):
            by_topic.setdefault(topic, []).append(ReassignablePartition(
                partition_index=i32(index), replicas=tuple(BrokerId(r) for r in replicas)))
        response = await admin.send_to_any(AlterPartitionReassignmentsRequest(
            timeout=i32Timedelta.parse(timedelta(seconds=30)),
            topics=tuple(ReassignableTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items())))
        errors = [f"{t.name}-{int(p.partition_index)}: {p.error_message or ErrorCode(p.error_code).name}"
                  for t in response.responses for p in t.partitions if ErrorCode(p.error_code) != ErrorCode.none]
        if ErrorCode(response.error_code) != ErrorCode.none:
            errors.insert(0, f"{response.error_message or ErrorCode(response.error_code).name}")
        if errors:
            print("Error reassigning partition(s):\n" + "\n".join(sorted(errors)))
            return 1
        print(f"Successfully started partition reassignment{'' if len(parts) == 1 else 's'} for "
              + ",".join(f"{t}-{p}" for t, p in sorted(parts)))
        if dirs:
            return await _execute_moves(admin, brokers, dirs, timeout_ms=timeout_ms)
    return 0


async def _execute_moves(admin: BrokerAdmin, brokers: dict[int, tuple[str, int]], dirs: dict[Replica, str], *,
                         timeout_ms: int) -> int:
    deadline = time.monotonic() + timeout_ms / 1000
    pending = dict(dirs)
    while True:
        completed: list[Replica] = []
        for broker in sorted({b for _, _, b in pending}):
            wanted = {r: d for r, d in pending.items() if r[2] == broker}
            by_dir: dict[str, dict[str, list[int]]] = {}
            for (topic, index, _), log_dir in wanted.items():
                by_dir.setdefault(log_dir, {}).setdefault(topic, []).append(index)
            response = await admin.send_to(brokers[broker], AlterReplicaLogDirsRequest(dirs=tuple(
                AlterReplicaLogDir(path=path, topics=tuple(
                    AlterReplicaLogDirTopic(name=TopicName(t), partitions=tuple(i32(i) for i in indexes))
                    for t, indexes in topics.items()))
                for path, topics in by_dir.items())))
            if response is None:
                continue  # unreachable now: retried until the timeout
            for result in response.results:
                for answer in result.partitions:
                    replica = (str(result.topic_name), int(answer.partition_index), broker)
                    code = ErrorCode(answer.error_code)
                    if code == ErrorCode.none:
                        completed.append(replica)
                    elif code != ErrorCode.replica_not_available:
                        print(f"Error: failed to alter the log dir of {_name(replica)} to {wanted.get(replica)}: "
                              f"{code.name}")
                        return 1
        if completed:
            print(f"Successfully started log directory move{'' if len(completed) == 1 else 's'} for: "
                  + ",".join(_name(r) for r in sorted(completed, key=_replica_order)))
        for replica in completed:
            pending.pop(replica, None)
        if not pending:
            return 0
        if time.monotonic() >= deadline:
            print(f"Timed out before log directory move{'' if len(pending) == 1 else 's'} could be started for: "
                  + ",".join(_name(r) for r in sorted(pending, key=_replica_order)))
            return 1
        await asyncio.sleep(_RETRY_PAUSE_S)


async def _verify(bootstrap: list[tuple[str, int]], parts: dict[Partition, list[int]], dirs: dict[Replica, str]) -> int:
    async with BrokerAdmin(bootstrap, timeout_ms=30000, client_id="reassign-partitions-tool") as admin:
        ongoing = await _ongoing(admin)
        metadata = await _metadata(admin, sorted({t for t, _ in parts}))
        current = {(str(t.name), int(p.partition_index)): [int(r) for r in p.replica_nodes]
                   for t in metadata.topics for p in t.partitions}
        lines = ["Status of partition reassignment:"]
        for tp, target in sorted(parts.items()):
            name = f"{tp[0]}-{tp[1]}"
            if tp in ongoing:
                lines.append(f"Reassignment of partition {name} is still in progress.")
            elif current.get(tp, []) == target:
                lines.append(f"Reassignment of partition {name} is complete.")
            else:
                lines.append(f"There is no active reassignment of partition {name}, but replica set is "
                             f"{','.join(map(str, current.get(tp, [])))} rather than {','.join(map(str, target))}.")
        print("\n".join(lines))
        if not dirs:
            return 0
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in metadata.brokers}
        placed: dict[Replica, tuple[str | None, str | None]] = {}  # (current dir, future dir)
        for broker in sorted({b for _, _, b in dirs}):
            response = None if broker not in brokers else await admin.send_to(brokers[broker],
                                                                              DescribeLogDirsRequest(topics=None))
            for result in () if response is None else response.results:
                if ErrorCode(result.error_code) != ErrorCode.none:
                    continue
                for topic in result.topics:
                    for p in topic.partitions:
                        replica = (str(topic.name), int(p.partition_index), broker)
                        now, future = placed.get(replica, (None, None))
                        placed[replica] = (now, result.log_dir) if p.is_future_key else (result.log_dir, future)
        moves = []
        for replica, target_dir in sorted(dirs.items(), key=lambda item: _replica_order(item[0])):
            topic, index, broker = replica
            if replica not in placed:
                moves.append(f"Partition {topic}-{index} cannot be found in any live log directory on broker {broker}.")
                continue
            now, future = placed[replica]
            if now is None:
                moves.append(f"Partition {topic}-{index} is not found in any live log dir on broker {broker}. "
                             "There is likely an offline log directory on the broker.")
            elif future is None:
                moves.append(f"Reassignment of replica {_name(replica)} completed successfully." if now == target_dir else
                             f"Partition {topic}-{index} on broker {broker} is not being moved from log dir {now} to "
                             f"{target_dir}.")
            elif future == target_dir:
                moves.append(f"Reassignment of replica {_name(replica)} is still in progress.")
            else:
                moves.append(f"Partition {topic}-{index} on broker {broker} is being moved to log dir {future} "
                             f"instead of {target_dir}.")
        print("\n".join(moves))
    return 0
