"""`kraft reassign-partitions`: Kafka's kafka-reassign-partitions tool (ReassignPartitionsCommand,
Kafka 4.1), with its five actions, flags, JSON files and output lines, so a Kafka runbook works
unchanged against our brokers (and this tool against Kafka's).

- `--generate --topics-to-move-json-file F --broker-list 1,2,3 [--disable-rack-aware]`: prints the
  current assignment of the topics and a proposal from the controller's placement, Kafka's
  StripedReplicaPlacer (as Kafka 4.1's tool does; rack-aware unless disabled, refused when only
  some brokers have a rack).
- `--execute --reassignment-json-file F [--throttle B/s] [--replica-alter-log-dirs-throttle B/s]
  [--additional] [--timeout ms]`: prints the rollback JSON, sets the throttles as Kafka's tool does
  (the `leader/follower.replication.throttled.replicas` topic configs for the moving replicas,
  the `leader/follower.replication.throttled.rate` broker configs on every broker the move
  touches, `replica.alter.log.dirs.io.max.bytes.per.second` on the brokers whose log directories
  change), starts the reassignments with AlterPartitionReassignments and the log-directory moves
  with AlterReplicaLogDirs (retrying REPLICA_NOT_AVAILABLE until `--timeout`).
- `--verify [--preserve-throttles]`: the state of each partition reassignment and replica move;
  once none is in progress, it removes every throttle (broker and topic level), as Kafka's does.
- `--cancel [--preserve-throttles]`: cancels the reassignments still running (replicas = null,
  the controller reverts to the original replicas), moves future replicas back to their current
  directory, and removes the throttles.
- `--list`: the ongoing reassignments with their adding and removing replicas.

Sets and maps print in the order Kafka's Java collections iterate them where Kafka's output
depends on it (the broker and topic lists of the "Clearing ... throttles" lines). A file that is
not Kafka's format is refused with the reason before anything is sent.

`--command-config FILE` gives the admin client's security (security.protocol, ssl.*, sasl.*), as
Kafka's. `--bootstrap-controller` instead of `--bootstrap-server` is taken by `--cancel` and `--list`
only, as in Kafka 4.1 (the other actions refuse it with Kafka's "can't be used with action"): the
requests then go to the active controller, and `--cancel` asks the brokers the controller's
Metadata lists about their log directories.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from kio.schema.alter_partition_reassignments.v1.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.alter_replica_log_dirs.v2.request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.list_partition_reassignments.v0.request import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsTopics,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta

from kraft_engine.admin.broker_admin import BrokerAdmin
from kraft_engine.admin.controller_admin import ControllerAdmin, ControllerAdminError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import bootstrap_and_file, bootstrap_servers, command_config_security
from kraft_engine.controller.replica_placement import StripedReplicaPlacer, UsableBroker
from kraft_engine.controller.results import ControllerApiError
from kraft_engine.records.group_records import java_string_hash

__all__ = ["java_hash_set_order", "parse_reassignment_json", "parse_topics_to_move_json", "register"]

ANY_LOG_DIR = "any"
_RETRY_PAUSE_S = 0.1
_BROKER, _TOPIC = 4, 2  # ConfigResource.Type
_SET, _DELETE = 0, 1  # AlterConfigOp.OpType
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
_BROKER_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIRS_RATE)
_TOPIC_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
_CANNOT_EXECUTE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one. The --additional flag can also be used to "
    "change the throttle by resubmitting the current reassignment.")
_RUN_VERIFY = ("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
               "throttle is removed.")

Partition = tuple[str, int]
Replica = tuple[str, int, int]  # topic, partition, broker


class _Terse(CliError):
    """Kafka's TerseException: its message is the whole output (stdout), exit status 1."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "reassign-partitions", help="Move partitions between brokers and log directories (kafka-reassign-partitions)",
        description="This tool helps to move topic partitions between replicas.")
    parser.add_argument("--bootstrap-server", help="the server(s) to use for bootstrapping.")
    parser.add_argument("--bootstrap-controller",
                        help="The controller to use for reassignment. By default, the tool will get the quorum "
                             "controller. This option supports the actions --cancel and --list.")
    parser.add_argument("--command-config", help="Property file containing configs to be passed to Admin Client.")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true",
                        help="Generate a candidate partition reassignment configuration. Note that this only "
                             "generates a candidate assignment, it does not execute it.")
    action.add_argument("--execute", action="store_true",
                        help="Kick off the reassignment as specified by the --reassignment-json-file option.")
    action.add_argument("--verify", action="store_true",
                        help="Verify if the reassignment completed as specified by the --reassignment-json-file "
                             "option. If there is a throttle engaged for the replicas specified, and the rebalance "
                             "has completed, the throttle will be removed")
    action.add_argument("--cancel", action="store_true",
                        help="Cancel an active reassignment.")
    action.add_argument("--list", action="store_true",
                        help="List all active partition reassignments.")
    parser.add_argument("--reassignment-json-file",
                        help="The JSON file with the partition reassignment configuration.")
    parser.add_argument("--topics-to-move-json-file",
                        help="Generate a reassignment configuration to move the partitions of the specified topics "
                             "to the list of brokers specified by the --broker-list option.")
    parser.add_argument("--broker-list",
                        help="The list of brokers to which the partitions need to be reassigned in the form "
                             "\"0,1,2\". This is required if --topics-to-move-json-file is used to generate "
                             "reassignment configuration")
    parser.add_argument("--disable-rack-aware", action="store_true", help="Disable rack aware replica assignment")
    parser.add_argument("--additional", action="store_true",
                        help="Execute this reassignment in addition to any other ongoing ones.")
    parser.add_argument("--disallow-replication-factor-change", action="store_true",
                        help="Denies the ability to change a partition's replication factor as part of this "
                             "reassignment through adding validation against it.")
    parser.add_argument("--throttle", type=int, default=-1,
                        help="The movement of partitions between brokers will be throttled to this value (bytes/sec).")
    parser.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1,
                        help="The movement of replicas between log directories on the same broker will be throttled "
                             "to this value (bytes/sec).")
    parser.add_argument("--preserve-throttles", action="store_true",
                        help="Do not modify broker or topic throttles.")
    parser.add_argument("--timeout", type=int, default=10000,
                        help="The maximum time in ms to wait for log directory replica assignment to begin "
                             "(default 10000).")
    parser.set_defaults(func=_run)


def _action_name(args: argparse.Namespace) -> str:
    return next(a for a in ("generate", "execute", "verify", "cancel", "list") if getattr(args, a))


_PERMITTED = {
    "verify": {"reassignment_json_file", "preserve_throttles"},
    "generate": {"topics_to_move_json_file", "broker_list", "disable_rack_aware"},
    "execute": {"reassignment_json_file", "additional", "throttle", "replica_alter_log_dirs_throttle", "timeout",
                "disallow_replication_factor_change"},
    "cancel": {"reassignment_json_file", "preserve_throttles", "timeout", "bootstrap_controller"},
    "list": {"bootstrap_controller"},
}
_DEFAULTS = {"reassignment_json_file": None, "topics_to_move_json_file": None, "broker_list": None,
             "disable_rack_aware": False, "additional": False, "throttle": -1,
             "replica_alter_log_dirs_throttle": -1, "preserve_throttles": False, "timeout": 10000,
             "bootstrap_controller": None, "disallow_replication_factor_change": False}


class _ControllerToolAdmin(BrokerAdmin):
    """`--bootstrap-controller`: every request to the active controller (as Kafka's admin client
    with bootstrap.controllers); DescribeLogDirs still goes to each broker's own address."""

    async def send_to_any(self, request: Any) -> Any:
        return await ControllerAdmin.send_to_active(self, request)

    async def send_to_active(self, request: Any) -> Any:
        return await ControllerAdmin.send_to_active(self, request)


def _run(args: argparse.Namespace) -> int:
    if args.bootstrap_server is not None and args.bootstrap_controller is not None:
        raise CliError("Please don't specify both --bootstrap-server and --bootstrap-controller")
    if args.bootstrap_server is None and args.bootstrap_controller is None:
        raise CliError("Please specify either --bootstrap-server or --bootstrap-controller")
    action = _action_name(args)
    for option, default in _DEFAULTS.items():
        if getattr(args, option) != default and option not in _PERMITTED[action]:
            raise CliError(f"Option \"[{option.replace('_', '-')}]\" can't be used with action \"[{action}]\"")
    security = command_config_security(args.command_config)
    flag, servers = (("--bootstrap-server", args.bootstrap_server) if args.bootstrap_controller is None
                     else ("--bootstrap-controller", args.bootstrap_controller))
    admin_class = BrokerAdmin if args.bootstrap_controller is None else _ControllerToolAdmin
    if action == "generate":
        if not args.topics_to_move_json_file or not args.broker_list:
            raise CliError("Missing required argument \"[topics-to-move-json-file]\" or \"[broker-list]\"")
        bootstrap, text = bootstrap_and_file(servers, flag="--topics-to-move-json-file",
                                             path=args.topics_to_move_json_file, servers_flag=flag)
        work: Callable[[BrokerAdmin], Any] = lambda admin: _generate(  # noqa: E731
            admin, text, args.broker_list, rack_aware=not args.disable_rack_aware)
    elif action == "list":
        bootstrap = bootstrap_servers(servers, flag=flag)
        work = _list
    else:
        if not args.reassignment_json_file:
            raise CliError("Missing required argument \"[reassignment-json-file]\"")
        bootstrap, text = bootstrap_and_file(servers, flag="--reassignment-json-file",
                                             path=args.reassignment_json_file, servers_flag=flag)
        try:
            parts, dirs = parse_reassignment_json(text)
        except ValueError as e:
            raise CliError(str(e)) from None
        if action == "execute":
            def work(admin: BrokerAdmin) -> Any:
                return _execute(admin, parts, dirs, additional=args.additional, throttle=args.throttle,
                                log_dir_throttle=args.replica_alter_log_dirs_throttle, timeout_ms=args.timeout,
                                allow_rf_change=not args.disallow_replication_factor_change)
        elif action == "verify":
            def work(admin: BrokerAdmin) -> Any:
                return _verify(admin, parts, dirs, preserve_throttles=args.preserve_throttles)
        else:
            def work(admin: BrokerAdmin) -> Any:
                return _cancel(admin, parts, dirs, preserve_throttles=args.preserve_throttles, timeout_ms=args.timeout)
    try:
        return asyncio.run(_with_admin(admin_class(bootstrap, timeout_ms=30000, client_id="reassign-partitions-tool",
                                                   security=security), work))
    except ControllerAdminError as e:
        raise CliError(str(e)) from None
    except _Terse as e:
        print(str(e))
        return 1


async def _with_admin(admin: BrokerAdmin, work: Callable[[BrokerAdmin], Any]) -> int:
    async with admin:
        return int(await work(admin) or 0)


# -- the JSON files --------------------------------------------------------------------------------

def _document(text: str, what: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the {what} is not JSON: {e}") from None
    if not isinstance(document, dict):
        raise ValueError(f"the {what} must hold a JSON object")
    if document.get("version", 1) != 1:
        raise ValueError(f"Not supported version field value {document.get('version')}")
    return document


def parse_topics_to_move_json(text: str) -> list[str]:
    """Kafka's topics-to-move JSON: `{"version": 1, "topics": [{"topic": "orders"}, ...]}`."""
    document = _document(text, "topics-to-move JSON file")
    entries = document.get("topics", [])
    if not isinstance(entries, list):
        raise ValueError("\"topics\" must be a list of {\"topic\": name} objects")
    topics = []
    for position, entry in enumerate(entries):
        topic = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topics[{position}] needs a \"topic\" string")
        topics.append(topic)
    duplicates = sorted({t for t in topics if topics.count(t) > 1})
    if duplicates:
        raise ValueError(f"List of topics to reassign contains duplicate entries: [{', '.join(duplicates)}]")
    return topics


def parse_reassignment_json(text: str) -> tuple[dict[Partition, list[int]], dict[Replica, str]]:
    """Kafka's reassignment JSON: target replicas per partition, and target log directory per
    replica (only those that are not `any`). ValueError says what is wrong, in Kafka's words
    where Kafka has them."""
    document = _document(text, "reassignment JSON file")
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
        if isinstance(replicas, list) and not replicas:
            raise ValueError("Partition replica list cannot be empty")
        if not isinstance(replicas, list) or not all(
                isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in replicas):
            raise ValueError(f"partitions[{position}] needs \"replicas\": a non-empty list of broker ids")
        tp = (topic, partition)
        if tp in parts:
            duplicates.append(tp)
        repeated = sorted({r for r in replicas if replicas.count(r) > 1})
        if repeated:
            raise ValueError(f"Partition replica lists may not contain duplicate entries: {topic}-{partition} "
                             f"contains multiple entries for {','.join(map(str, repeated))}")
        parts[tp] = list(replicas)
        log_dirs = entry.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(log_dirs, list) or not all(isinstance(d, str) and d for d in log_dirs):
            raise ValueError(f"partitions[{position}] has \"log_dirs\" that is not a list of paths or \"any\"")
        if len(log_dirs) != len(replicas):
            raise ValueError(f"Size of replicas list {_java_list(replicas)} is different from size of log dirs list "
                             f"{_java_list(log_dirs)} for partition {topic}-{partition}")
        for broker, log_dir in zip(replicas, log_dirs, strict=True):
            if log_dir != ANY_LOG_DIR:
                dirs[(topic, partition, broker)] = log_dir
    if duplicates:
        raise ValueError("Partition reassignment contains duplicate topic partitions: "
                         + ",".join(f"{t}-{p}" for t, p in duplicates))
    return parts, dirs


def _java_list(items: Iterable[object]) -> str:
    return "[" + ", ".join(map(str, items)) + "]"


def _reassignment_json(parts: dict[Partition, list[int]]) -> str:
    """Kafka's formatAsReassignmentJson (Jackson's compact output; log dirs `any`)."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": parts[(t, p)], "log_dirs": [ANY_LOG_DIR] * len(parts[(t, p)])}
        for t, p in sorted(parts)]}, separators=(",", ":"), ensure_ascii=False)


def java_hash_set_order(items: Iterable[Any], *, hash_of: Callable[[Any], int]) -> list[Any]:
    """The order a java.util.HashSet built by adding `items` in turn iterates them: by bucket
    (the spread hash masked to the table size, which doubles past 0.75 full from 16), then in
    insertion order within a bucket."""
    distinct = list(dict.fromkeys(items))
    capacity = 16
    while len(distinct) > capacity * 3 // 4:
        capacity *= 2

    def bucket(item: Any) -> int:
        h = hash_of(item) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return [item for _, item in sorted(enumerate(distinct), key=lambda e: (bucket(e[1]), e[0]))]


def _int_hash(value: int) -> int:
    return value


def _name(replica: Replica) -> str:
    """Kafka's TopicPartitionReplica.toString."""
    return f"{replica[0]}-{replica[1]}-{replica[2]}"


def _replica_order(replica: Replica) -> tuple[int, str, int]:
    return replica[2], replica[0], replica[1]


# -- requests --------------------------------------------------------------------------------------

async def _metadata(admin: BrokerAdmin, topics: Iterable[str] | None) -> Any:
    return await admin.send_to_any(MetadataRequest(
        topics=None if topics is None else tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t))
                                                 for t in topics),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))


async def _assignments(admin: BrokerAdmin, topics: Iterable[str]) -> tuple[dict[Partition, list[int]], set[str], Any]:
    """(current replicas per partition, topics that do not exist, the Metadata answer)."""
    metadata = await _metadata(admin, sorted(set(topics)))
    current = {(str(t.name), int(p.partition_index)): [int(r) for r in p.replica_nodes]
               for t in metadata.topics if ErrorCode(t.error_code) == ErrorCode.none for p in t.partitions}
    missing = {str(t.name) for t in metadata.topics if ErrorCode(t.error_code) == ErrorCode.unknown_topic_or_partition}
    return current, missing, metadata


async def _ongoing(admin: BrokerAdmin, wanted: Iterable[Partition] | None = None) -> dict[Partition, Any]:
    """The ongoing reassignments (OngoingPartitionReassignment per partition)."""
    topics = None
    if wanted is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(wanted):
            by_topic.setdefault(topic, []).append(index)
        topics = tuple(ListPartitionReassignmentsTopics(name=TopicName(t), partition_indexes=tuple(i32(i) for i in ps))
                       for t, ps in by_topic.items())
    response = await admin.send_to_any(ListPartitionReassignmentsRequest(
        timeout=i32Timedelta.parse(timedelta(seconds=30)), topics=topics))
    if ErrorCode(response.error_code) != ErrorCode.none:
        raise CliError(f"ListPartitionReassignments: {response.error_message or ErrorCode(response.error_code).name}")
    return {(str(t.name), int(p.partition_index)): p for t in response.topics for p in t.partitions}


async def _alter_reassignments(admin: BrokerAdmin, parts: dict[Partition, list[int] | None], *,
                               allow_rf_change: bool = True) -> dict[Partition, str]:
    """AlterPartitionReassignments (None cancels); the error message per refused partition. With
    `allow_rf_change` false (v1, KIP-860) the controller refuses a move that changes a partition's
    replica count."""
    by_topic: dict[str, list[ReassignablePartition]] = {}
    for (topic, index), replicas in sorted(parts.items()):
        by_topic.setdefault(topic, []).append(ReassignablePartition(
            partition_index=i32(index), replicas=None if replicas is None else tuple(BrokerId(r) for r in replicas)))
    response = await admin.send_to_any(AlterPartitionReassignmentsRequest(
        timeout=i32Timedelta.parse(timedelta(seconds=30)), allow_replication_factor_change=allow_rf_change,
        topics=tuple(ReassignableTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items())))
    top = ErrorCode(response.error_code)
    errors = {}
    for t in response.responses:
        for p in t.partitions:
            code = ErrorCode(p.error_code) if top == ErrorCode.none else top
            if code != ErrorCode.none:
                message = p.error_message if top == ErrorCode.none else response.error_message
                errors[(str(t.name), int(p.partition_index))] = message or _exception_message(code)
    return errors


def _exception_message(code: ErrorCode) -> str:
    return code.name.upper()


async def _alter_configs(admin: BrokerAdmin, changes: dict[tuple[int, str], list[tuple[str, int, str | None]]]) -> None:
    """IncrementalAlterConfigs; any refusal is an error, as Kafka's `all().get()` makes it.

    As Kafka's Admin does, one broker's own configs go to that broker (Kafka's brokers refuse
    another's: "Unexpected broker id, expected 1, but received 2"), everything else (topics, the
    cluster-wide broker default) in one request to any broker."""
    if not changes:
        return
    own = {key: ops for key, ops in changes.items() if key[0] == _BROKER and key[1]}
    addresses = await _addresses(admin) if own else {}
    parts: list[tuple[tuple[str, int] | None, dict[tuple[int, str], list[tuple[str, int, str | None]]]]] = []
    if rest := {key: ops for key, ops in changes.items() if key not in own}:
        parts.append((None, rest))
    # a broker the metadata does not list: any broker answers for it, as it would for a typo
    parts += [(addresses.get(int(name)), {(kind, name): ops}) for (kind, name), ops in own.items()]
    for address, part in parts:
        request = IncrementalAlterConfigsRequest(resources=tuple(
            AlterConfigsResource(resource_type=i8(kind), resource_name=name, configs=tuple(
                AlterableConfig(name=key, config_operation=i8(op), value=value) for key, op, value in ops))
            for (kind, name), ops in part.items()), validate_only=False)
        response = await (admin.send_to_any(request) if address is None else admin.send_to(address, request))
        if response is None:
            names = ", ".join(name for _, name in part)
            raise CliError(f"Broker at {address[0]}:{address[1]} could not be reached (altering the configs of {names})"
                           if address is not None else f"No broker answered (altering the configs of {names})")
        for answer in response.responses:
            code = ErrorCode(answer.error_code)
            if code != ErrorCode.none:
                raise CliError(f"{answer.error_message or code.name.upper()} "
                               f"(altering the configs of {answer.resource_name or 'the cluster default'})")


async def _until_in_force(admin: BrokerAdmin, brokers: Iterable[int], wanted: dict[str, str]) -> None:
    """Wait until each broker's own DescribeConfigs shows `wanted` as its dynamic config: the
    configs reach brokers through the metadata log, and a log-directory move (AlterReplicaLogDirs
    goes straight to the broker) must not start before its throttle is in force there. Kafka's
    tool does not wait; the output is the same."""
    addresses = await _addresses(admin)
    deadline = time.monotonic() + admin.timeout_ms / 1000
    for broker in brokers:
        while True:
            response = None if broker not in addresses else await admin.send_to(addresses[broker], DescribeConfigsRequest(
                resources=(DescribeConfigsResource(resource_type=i8(_BROKER), resource_name=str(broker),
                                                   configuration_keys=tuple(wanted)),),
                include_synonyms=False, include_documentation=False))
            found = {} if response is None else {c.name: c.value for r in response.results for c in r.configs}
            if all(found.get(k) == v for k, v in wanted.items()):
                break
            if time.monotonic() >= deadline:
                raise CliError(f"broker {broker} did not apply {', '.join(f'{k}={v}' for k, v in wanted.items())} "
                               f"within {admin.timeout_ms} ms")
            await asyncio.sleep(_RETRY_PAUSE_S)


async def _broker_ids(admin: BrokerAdmin) -> list[int]:
    metadata = await _metadata(admin, ())
    return [int(b.node_id) for b in metadata.brokers]


# -- --generate ------------------------------------------------------------------------------------

async def _generate(admin: BrokerAdmin, text: str, broker_list: str, *, rack_aware: bool) -> int:
    try:
        brokers = [int(b) for b in broker_list.split(",")]
    except ValueError:
        raise CliError(f"--broker-list must be broker ids separated by commas, not {broker_list!r}") from None
    repeated = sorted({b for b in brokers if brokers.count(b) > 1})
    if repeated:
        raise CliError(f"Broker list contains duplicate entries: [{', '.join(map(str, repeated))}]")
    try:
        topics = parse_topics_to_move_json(text)
    except ValueError as e:
        raise CliError(str(e)) from None
    current, missing, metadata = await _assignments(admin, topics)
    if missing:
        raise CliError(f"org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Topic {sorted(missing)[0]} "
                       "not found.")
    usable = [UsableBroker(id=int(b.node_id), rack=b.rack if rack_aware else None, fenced=False)
              for b in metadata.brokers if int(b.node_id) in brokers]
    rackless = sum(1 for u in usable if u.rack is None)
    if rack_aware and rackless not in (0, len(usable)):
        raise CliError("Not all brokers have rack information. Add --disable-rack-aware in command line to make "
                       "replica assignment without rack information.")
    proposed: dict[Partition, list[int]] = {}
    placer = StripedReplicaPlacer(random.Random())
    for topic in sorted({t for t, _ in current}):
        indexes = sorted(p for t, p in current if t == topic)
        try:
            placed = placer.place(num_partitions=len(indexes), replication_factor=len(current[(topic, indexes[0])]),
                                  usable_brokers=usable)
        except ControllerApiError as e:
            raise CliError(str(e)) from None
        proposed.update({(topic, p): replicas for p, replicas in enumerate(placed)})
    print(f"Current partition replica assignment\n{_reassignment_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{_reassignment_json(proposed)}")
    return 0


# -- --execute -------------------------------------------------------------------------------------

def _moves(ongoing: dict[Partition, Any], proposed: dict[Partition, list[int]],
           current: dict[Partition, list[int]]) -> dict[Partition, tuple[set[int], set[int]]]:
    """Kafka's calculateProposedMoveMap: (sources, destinations) per partition, the ongoing
    reassignments' first (their adding replicas are not sources)."""
    moves: dict[Partition, tuple[set[int], set[int]]] = {}
    for tp, reassignment in ongoing.items():
        adding = {int(r) for r in reassignment.adding_replicas}
        moves[tp] = ({int(r) for r in reassignment.replicas} - adding, adding)
    for tp, replicas in proposed.items():
        sources = moves[tp][0] if tp in moves else set(current.get(tp, []))
        moves[tp] = (sources, set(replicas) - sources)
    return moves


def _throttled_replicas(moves: dict[Partition, tuple[set[int], set[int]]], *, leader: bool) -> dict[str, str]:
    """Kafka's calculateLeaderThrottles / calculateFollowerThrottles: `partition:broker` of the
    sources (leader side) or the new replicas (follower side) per topic, in TreeSet (string) order."""
    by_topic: dict[str, set[str]] = {}
    for (topic, index), (sources, destinations) in moves.items():
        chosen = sources if leader else destinations - sources
        by_topic.setdefault(topic, set()).update(f"{index}:{b}" for b in chosen)
    return {topic: ",".join(sorted(items)) for topic, items in by_topic.items()}


async def _execute(admin: BrokerAdmin, parts: dict[Partition, list[int]], dirs: dict[Replica, str], *,
                   additional: bool, throttle: int, log_dir_throttle: int, timeout_ms: int,
                   allow_rf_change: bool = True) -> int:
    ongoing = await _ongoing(admin)
    if not additional and ongoing:
        raise _Terse(_CANNOT_EXECUTE)
    known = set(await _broker_ids(admin))
    unknown = [r for replicas in parts.values() for r in replicas if r not in known]
    if unknown:
        raise CliError(f"Unknown broker id {unknown[0]}")
    current, _, _ = await _assignments(admin, {t for t, _ in parts})
    absent = [tp for tp in parts if tp not in current]
    if absent:
        raise CliError("org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Unable to find partition: "
                       + ", ".join(f"{t}-{p}" for t, p in absent))
    print(f"Current partition replica assignment\n\n{_reassignment_json({tp: current[tp] for tp in parts})}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback")
    if throttle >= 0 or log_dir_throttle >= 0:
        print(_RUN_VERIFY)
        if throttle >= 0:
            moves = _moves(ongoing, parts, current)
            leaders, followers = _throttled_replicas(moves, leader=True), _throttled_replicas(moves, leader=False)
            await _alter_configs(admin, {
                (_TOPIC, topic): [(key, _SET, value[topic]) for key, value in
                                  ((LEADER_REPLICAS, leaders), (FOLLOWER_REPLICAS, followers)) if topic in value]
                for topic in sorted(set(leaders) | set(followers))})
            involved = sorted({b for sources, destinations in moves.values() for b in sources | destinations})
            await _alter_configs(admin, {(_BROKER, str(b)): [(LEADER_RATE, _SET, str(throttle)),
                                                             (FOLLOWER_RATE, _SET, str(throttle))] for b in involved})
            await _until_in_force(admin, involved, {LEADER_RATE: str(throttle), FOLLOWER_RATE: str(throttle)})
            print(f"The inter-broker throttle limit was set to {throttle} B/s")
        if log_dir_throttle >= 0:
            moving = sorted({b for _, _, b in dirs})
            await _alter_configs(admin, {(_BROKER, str(b)): [(LOG_DIRS_RATE, _SET, str(log_dir_throttle))]
                                         for b in moving})
            await _until_in_force(admin, moving, {LOG_DIRS_RATE: str(log_dir_throttle)})
            print(f"The replica-alter-dir throttle limit was set to {log_dir_throttle} B/s")
    errors = await _alter_reassignments(admin, dict(parts), allow_rf_change=allow_rf_change)
    if errors:
        raise _Terse("Error reassigning partition(s):\n" + "\n".join(
            f"{t}-{p}: {errors[(t, p)]}" for t, p in sorted(errors)))
    print(f"Successfully started partition reassignment{'' if len(parts) == 1 else 's'} for "
          + ",".join(f"{t}-{p}" for t, p in sorted(parts)))
    if dirs:
        await _execute_moves(admin, dirs, timeout_ms=timeout_ms)
    return 0


async def _addresses(admin: BrokerAdmin) -> dict[int, tuple[str, int]]:
    metadata = await _metadata(admin, ())
    return {int(b.node_id): (b.host, int(b.port)) for b in metadata.brokers}


async def _execute_moves(admin: BrokerAdmin, dirs: dict[Replica, str], *, timeout_ms: int) -> None:
    """Kafka's executeMoves: AlterReplicaLogDirs to each replica's broker until every move started."""
    brokers = await _addresses(admin)
    deadline = time.monotonic() + timeout_ms / 1000
    pending = dict(dirs)
    while True:
        completed: list[Replica] = []
        for broker in sorted({b for _, _, b in pending}):
            wanted = {r: d for r, d in pending.items() if r[2] == broker}
            by_dir: dict[str, dict[str, list[int]]] = {}
            for (topic, index, _), log_dir in wanted.items():
                by_dir.setdefault(log_dir, {}).setdefault(topic, []).append(index)
            response = None if broker not in brokers else await admin.send_to(brokers[broker], AlterReplicaLogDirsRequest(
                dirs=tuple(AlterReplicaLogDir(path=path, topics=tuple(
                    AlterReplicaLogDirTopic(name=TopicName(t), partitions=tuple(i32(i) for i in indexes))
                    for t, indexes in topics.items()))
                    for path, topics in by_dir.items())))
            for result in () if response is None else response.results:
                for answer in result.partitions:
                    replica = (str(result.topic_name), int(answer.partition_index), broker)
                    code = ErrorCode(answer.error_code)
                    if code == ErrorCode.none:
                        completed.append(replica)
                    elif code != ErrorCode.replica_not_available:
                        raise CliError(f"failed to alter the log dir of {_name(replica)} to {wanted.get(replica)}: "
                                       f"{code.name.upper()}")
        for replica in sorted(completed, key=_replica_order):
            print(f"Successfully started moving log directory to {pending[replica]} for replica "
                  f"{replica[0]}-{replica[1]} with broker {replica[2]} ")
            pending.pop(replica, None)
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise _Terse(f"Timed out before log directory move{'' if len(pending) == 1 else 's'} could be started for: "
                         + ",".join(_name(r) for r in sorted(pending, key=_replica_order)))
        await asyncio.sleep(_RETRY_PAUSE_S)


# -- --verify and --cancel -------------------------------------------------------------------------

async def _partition_states(admin: BrokerAdmin, parts: dict[Partition, list[int]]) -> tuple[list[str], bool]:
    """Kafka's findPartitionReassignmentStates and its lines; whether any reassignment (even one
    not in the file) is still running."""
    ongoing = await _ongoing(admin)
    current, _, _ = await _assignments(admin, {tp[0] for tp in parts if tp not in ongoing})
    lines = ["Status of partition reassignment:"]
    for tp, target in sorted(parts.items()):
        name = f"{tp[0]}-{tp[1]}"
        if tp in ongoing:
            lines.append(f"Reassignment of partition {name} is still in progress.")
        elif current.get(tp, []) == target:
            lines.append(f"Reassignment of partition {name} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {name}, but replica set is "
                         f"{','.join(map(str, current.get(tp, [])))} rather than {','.join(map(str, target))}.")
    return lines, bool(ongoing)


async def _log_dir_states(admin: BrokerAdmin, dirs: dict[Replica, str]) -> dict[Replica, tuple[str, str | None, str | None]]:
    """Kafka's findLogDirMoveStates: (target, current dir, future dir) per replica, from DescribeLogDirs;
    a replica no directory holds has no current dir."""
    brokers = await _addresses(admin)
    placed: dict[Replica, tuple[str | None, str | None]] = {}
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
    return {r: (target, *placed.get(r, (None, None))) for r, target in dirs.items()}


def _move_lines(states: dict[Replica, tuple[str, str | None, str | None]], found: set[Replica]) -> list[str]:
    lines = []
    for replica in sorted(states, key=_replica_order):
        target, now, future = states[replica]
        topic, index, broker = replica
        if replica not in found:
            lines.append(f"Partition {topic}-{index} cannot be found in any live log directory on broker {broker}.")
        elif now is None:
            lines.append(f"Partition {topic}-{index} is not found in any live log dir on broker {broker}. "
                         "There is likely an offline log directory on the broker.")
        elif future is None:
            lines.append(f"Reassignment of replica {_name(replica)} completed successfully." if now == target else
                         f"Partition {topic}-{index} on broker {broker} is not being moved from log dir {now} to "
                         f"{target}.")
        elif future == target:
            lines.append(f"Reassignment of replica {_name(replica)} is still in progress.")
        else:
            lines.append(f"Partition {topic}-{index} on broker {broker} is being moved to log dir {future} "
                         f"instead of {target}.")
    return lines


async def _clear_throttles(admin: BrokerAdmin, parts: dict[Partition, list[int]]) -> None:
    """Kafka's clearAllThrottles: every broker's rate keys and the file's topics' replica lists."""
    brokers = java_hash_set_order([*await _broker_ids(admin), *(r for rs in parts.values() for r in rs)],
                                  hash_of=_int_hash)
    print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
          + ",".join(map(str, brokers)))
    await _alter_configs(admin, {(_BROKER, str(b)): [(k, _DELETE, None) for k in _BROKER_THROTTLES] for b in brokers})
    topics = java_hash_set_order([t for t, _ in parts], hash_of=java_string_hash)
    print(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} " + ",".join(topics))
    await _alter_configs(admin, {(_TOPIC, t): [(k, _DELETE, None) for k in _TOPIC_THROTTLES] for t in topics})


async def _verify(admin: BrokerAdmin, parts: dict[Partition, list[int]], dirs: dict[Replica, str], *,
                  preserve_throttles: bool) -> int:
    lines, parts_ongoing = await _partition_states(admin, parts)
    print("\n".join(lines))
    states = await _log_dir_states(admin, dirs)
    found = {r for r, (_, now, future) in states.items() if now is not None or future is not None}
    print("\n".join(_move_lines(states, found)))
    # Only an active move (a current and a future replica) is unfinished, as Kafka's LogDirMoveState.done.
    moves_ongoing = any(now is not None and future is not None for _, now, future in states.values())
    if not parts_ongoing and not moves_ongoing and not preserve_throttles:
        await _clear_throttles(admin, parts)
    return 0


async def _cancel(admin: BrokerAdmin, parts: dict[Partition, list[int]], dirs: dict[Replica, str], *,
                  preserve_throttles: bool, timeout_ms: int) -> int:
    ongoing = await _ongoing(admin, parts)
    # Kafka cancels the reassignments that remove a replica or add none (its own filter).
    cancelling = sorted(tp for tp, r in ongoing.items() if not r.adding_replicas or r.removing_replicas)
    if cancelling:
        errors = await _alter_reassignments(admin, dict.fromkeys(cancelling))
        if errors:
            raise _Terse(f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'} for:\n"
                         + "\n".join(f"{t}-{p}: {errors[(t, p)]}" for t, p in sorted(errors)))
        print(f"Successfully cancelled partition reassignment{'' if len(cancelling) == 1 else 's'} for: "
              + ",".join(f"{t}-{p}" for t, p in cancelling))
    else:
        print("None of the specified partition reassignments are active.")
    states = await _log_dir_states(admin, dirs)
    moving = {r: now for r, (_, now, future) in states.items() if now is not None and future is not None}
    if moving:
        await _execute_moves(admin, moving, timeout_ms=timeout_ms)
    else:
        print("None of the specified partition moves are active.", end="")  # Kafka's print, no newline
    if not preserve_throttles:
        await _clear_throttles(admin, parts)
    return 0


# -- --list ----------------------------------------------------------------------------------------

async def _list(admin: BrokerAdmin) -> int:
    ongoing = await _ongoing(admin)
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    lines = []
    for (topic, index), r in sorted(ongoing.items()):
        adding = ",".join(str(int(b)) for b in r.adding_replicas)
        removing = ",".join(str(int(b)) for b in r.removing_replicas)
        lines.append(f"{topic}-{index}: replicas: {','.join(str(int(b)) for b in r.replicas)}."
                     + (f" adding: {adding}." if adding else "") + (f" removing: {removing}." if removing else ""))
    print("Current partition reassignments:\n" + "\n".join(lines))
    return 0
