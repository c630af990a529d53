"""`kraft topics`: Kafka's kafka-topics tool, against brokers (`--bootstrap-server`) or the
controller quorum (`--bootstrap-controller`).

Same verbs, flags and output as kafka-topics: `--create` ("Created topic T."), `--delete`, `--alter
--partitions N` (silent, like kafka-topics), `--list` (one name per line), `--describe` (the topic
line and one tab-indented line per partition). `--topic` is a regular expression for `--delete`,
`--alter` and `--describe`, as in kafka-topics.

With `--bootstrap-server` every request goes to any broker, which forwards the writes to the active
controller. With `--bootstrap-controller` the controllers answer directly: CreateTopics,
CreatePartitions and DeleteTopics go to the active controller, topics are read with Metadata from the committed image of any
controller, and `--describe` takes the non-default configs from DescribeConfigs. `Elr` and
`LastKnownElr` come from DescribeTopicPartitions (KIP-966, paged with its cursor) where the node
serves it, as Kafka 4.x's kafka-topics asks brokers; a controller does not, and ELR is not part
of a Metadata answer, so there they print `N/A` as kafka-topics does in that case.
`--under-replicated-partitions` / `--under-min-isr-partitions` print only the matching partition
lines (ISR smaller than the replicas / than the topic's `min.insync.replicas`), as kafka-topics does.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from datetime import timedelta
from typing import Any

from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_topic_partitions.v0.request import Cursor as DescribeTopicPartitionsCursor
from kio.schema.describe_topic_partitions.v0.request import DescribeTopicPartitionsRequest
from kio.schema.describe_topic_partitions.v0.request import TopicRequest as DescribeTopicPartitionsTopic
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from kraft_engine.admin.broker_admin import BrokerAdmin
from kraft_engine.admin.controller_admin import ControllerAdmin, ControllerAdminError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import COMMAND_CONFIG_HELP, bootstrap_servers, command_config_security
from kraft_engine.kafka_uuid import ZERO_UUID, to_kafka_str

__all__ = ["register"]

_DESCRIBE_CONFIGS = 32
_DESCRIBE_TOPIC_PARTITIONS = 75
_NO_ELR = "Elr: N/A\tLastKnownElr: N/A"
_TOPIC_RESOURCE = 2
_DEFAULT_CONFIG_SOURCE = 5
_NO_LEADER = -1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("topics", help="Create, delete, describe or list topics (kafka-topics)",
                                   description="Create, delete, describe, or list topics.")
    bootstrap = parser.add_mutually_exclusive_group(required=True)
    bootstrap.add_argument("--bootstrap-server",
                           help="A comma-separated list of host:port pairs of the brokers to connect to.")
    bootstrap.add_argument("--bootstrap-controller",
                           help="A comma-separated list of host:port pairs of the KRaft controllers.")
    parser.add_argument("--command-config", help=COMMAND_CONFIG_HELP)
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--create", action="store_true", help="Create a new topic.")
    actions.add_argument("--delete", action="store_true", help="Delete a topic.")
    actions.add_argument("--list", action="store_true", help="List all available topics.")
    actions.add_argument("--describe", action="store_true", help="List details for the given topics.")
    actions.add_argument("--alter", action="store_true", help="Alter the number of partitions of a topic.")
    parser.add_argument("--topic", help="The topic to create, or a regular expression for --delete and --describe.")
    parser.add_argument("--partitions", type=int, help="The number of partitions for the topic being created.")
    parser.add_argument("--replication-factor", type=int,
                        help="The replication factor for each partition in the topic being created.")
    parser.add_argument("--replica-assignment",
                        help="A list of manual partition-to-broker assignments: "
                             "broker_id_for_part1_replica1:broker_id_for_part1_replica2,...")
    parser.add_argument("--config", action="append", default=[], help="A topic configuration override: name=value.")
    parser.add_argument("--if-exists", action="store_true",
                        help="If set when deleting or describing topics, the action only runs if the topic exists.")
    parser.add_argument("--if-not-exists", action="store_true",
                        help="If set when creating topics, the action only runs if the topic does not exist.")
    parser.add_argument("--under-replicated-partitions", action="store_true",
                        help="If set when describing topics, only show partitions whose ISR is smaller than the "
                             "replica set.")
    parser.add_argument("--under-min-isr-partitions", action="store_true",
                        help="If set when describing topics, only show partitions whose ISR count is less than "
                             "the configured minimum.")
    parser.add_argument("--timeout-ms", type=int, default=30000, help="How long to retry (default 30000).")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    flag, text = (("--bootstrap-server", args.bootstrap_server) if args.bootstrap_server is not None
                  else ("--bootstrap-controller", args.bootstrap_controller))
    bootstrap = bootstrap_servers(text, flag=flag)
    if (args.create or args.delete or args.alter) and not args.topic:
        raise CliError("--topic is required with --create, --alter and --delete")
    if args.alter and args.partitions is None:
        raise CliError("--partitions is required with --alter")
    if args.create:
        request = _create_request(args)
    return asyncio.run(_main(args, bootstrap, request if args.create else None))


async def _main(args: argparse.Namespace, bootstrap: list[tuple[str, int]], create: CreateTopicsRequest | None) -> int:
    admin_class = ControllerAdmin if args.bootstrap_server is None else BrokerAdmin
    async with admin_class(bootstrap, timeout_ms=args.timeout_ms, client_id="kraft-topics",
                           security=command_config_security(args.command_config)) as admin:
        try:
            if create is not None:
                return await _create(admin, create, if_not_exists=args.if_not_exists)
            if args.list:
                for name in sorted(await _topics(admin)):
                    print(name)
                return 0
            topics = await _topics(admin)
            matched = _matching(topics, args.topic)
            if not matched and args.topic is not None and not args.if_exists:
                raise CliError(f"Topic '{args.topic}' does not exist as expected")
            if args.delete:
                return await _delete(admin, matched)
            if args.alter:
                return await _alter(admin, matched, partitions=args.partitions)
            return await _describe(admin, matched, topics, under_replicated=args.under_replicated_partitions,
                                   under_min_isr=args.under_min_isr_partitions)
        except ControllerAdminError as e:
            raise CliError(str(e)) from None


# -- create ------------------------------------------------------------------------------------------
def _create_request(args: argparse.Namespace) -> CreateTopicsRequest:
    configs = []
    for text in args.config:
        name, equals, value = text.partition("=")
        if not equals or not name.strip():
            raise CliError(f"Invalid topic config: all configs to be added must be in the format \"key=val\": {text}")
        configs.append(CreatableTopicConfig(name=name.strip(), value=value.strip()))
    assignments: tuple[CreatableReplicaAssignment, ...] = ()
    if args.replica_assignment is not None:
        if args.partitions is not None or args.replication_factor is not None:
            raise CliError("Option --replica-assignment can't be used with --partitions or --replication-factor")
        try:
            assignments = tuple(
                CreatableReplicaAssignment(
                    partition_index=i32(index),
                    broker_ids=tuple(BrokerId(int(b)) for b in part.split(":")),
                )
                for index, part in enumerate(args.replica_assignment.split(","))
            )
        except ValueError:
            raise CliError(f"Invalid --replica-assignment {args.replica_assignment!r}") from None
    for flag, value in (("--partitions", args.partitions), ("--replication-factor", args.replication_factor)):
        if value is not None and value < 1:
            raise CliError(f"The {flag} must be greater than 0")
    return CreateTopicsRequest(
        topics=(
            CreatableTopic(
                name=TopicName(args.topic),
                num_partitions=i32(-1 if args.partitions is None or assignments else args.partitions),
                replication_factor=i16(-1 if args.replication_factor is None or assignments else args.replication_factor),
                assignments=assignments,
                configs=tuple(configs),
            ),
        ),
        timeout=i32Timedelta.parse(timedelta(milliseconds=args.timeout_ms)),
        validate_only=False,
    )


async def _create(admin: ControllerAdmin, request: CreateTopicsRequest, *, if_not_exists: bool) -> int:
    response = await admin.send_to_active(request)
    [result] = response.topics
    code = ErrorCode(result.error_code)
    if code == ErrorCode.topic_already_exists and if_not_exists:
        return 0
    if code != ErrorCode.none:
        raise CliError(f"Error while executing topic command : {result.error_message or code.name.upper()}")
    print(f"Created topic {result.name}.")
    return 0


# -- delete --------------------------------------------------------------------------------------------
async def _delete(admin: ControllerAdmin, names: list[str]) -> int:
    if not names:
        return 0
    response = await admin.send_to_active(
        DeleteTopicsRequest(topics=tuple(DeleteTopicState(name=TopicName(n), topic_id=ZERO_UUID) for n in names),
                            timeout=i32Timedelta.parse(timedelta(seconds=30)))
    )
    failed = [r for r in response.responses if r.error_code != ErrorCode.none]
    if failed:
        first = failed[0]
        raise CliError(
            f"Error while executing topic command : {first.error_message or ErrorCode(first.error_code).name.upper()}"
        )
    return 0


# -- alter ---------------------------------------------------------------------------------------------
async def _alter(admin: ControllerAdmin, names: list[str], *, partitions: int) -> int:
    if not names:
        return 0
    response = await admin.send_to_active(CreatePartitionsRequest(
        topics=tuple(CreatePartitionsTopic(name=TopicName(n), count=i32(partitions), assignments=None) for n in names),
        timeout=i32Timedelta.parse(timedelta(seconds=30)),
        validate_only=False,
    ))
    failed = [r for r in response.results if r.error_code != ErrorCode.none]
    if failed:
        first = failed[0]
        raise CliError(
            f"Error while executing topic command : {first.error_message or ErrorCode(first.error_code).name.upper()}"
        )
    return 0


# -- list and describe ---------------------------------------------------------------------------------
async def _metadata(admin: ControllerAdmin) -> Any:
    return await admin.send_to_any(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                   include_topic_authorized_operations=False))


async def _topics(admin: ControllerAdmin) -> dict[str, Any]:
    response = await _metadata(admin)
    return {t.name: t for t in response.topics if t.error_code == ErrorCode.none}


def _matching(topics: dict[str, Any], pattern: str | None) -> list[str]:
    if pattern is None:
        return sorted(topics)
    try:
        regex = re.compile(pattern)
    except re.error as e:
        raise CliError(f"Invalid --topic regular expression {pattern!r}: {e}") from None
    return sorted(name for name in topics if regex.fullmatch(name))


async def _describe(admin: ControllerAdmin, names: list[str], topics: dict[str, Any], *,
                    under_replicated: bool = False, under_min_isr: bool = False) -> int:
    if not names:
        return 0
    connection = await admin.any_connection()
    if _DESCRIBE_CONFIGS not in connection.peer_api_versions:
        raise CliError("the controller does not serve DescribeConfigs, which --describe needs for the topic configs")
    configs = await admin.send_to_any(
        DescribeConfigsRequest(
            resources=tuple(
                DescribeConfigsResource(resource_type=i8(_TOPIC_RESOURCE), resource_name=n, configuration_keys=None)
                for n in names
            ),
            include_synonyms=False,
            include_documentation=False,
        )
    )
    overrides: dict[str, str] = {}
    min_isr: dict[str, int] = {}
    for result in configs.results:
        if result.error_code == ErrorCode.none:
            for c in result.configs:
                if c.name == "min.insync.replicas" and c.value is not None:
                    min_isr[result.resource_name] = int(c.value)
            overrides[result.resource_name] = ",".join(
                f"{c.name}={c.value}" for c in result.configs if int(c.config_source) != _DEFAULT_CONFIG_SOURCE
            )
    elrs = await _eligible_leader_replicas(admin, names) if _DESCRIBE_TOPIC_PARTITIONS in connection.peer_api_versions \
        else {}
    for name in names:
        topic = topics[name]
        partitions = sorted(topic.partitions, key=lambda p: int(p.partition_index))
        replication_factor = len(partitions[0].replica_nodes) if partitions else 0
        head = f"Topic: {name}"
        if topic.topic_id is not None and topic.topic_id != ZERO_UUID:
            head += f"\tTopicId: {to_kafka_str(topic.topic_id)}"
        if under_replicated or under_min_isr:
            # kafka-topics prints only the matching partition lines, without the topic line.
            partitions = [
                p for p in partitions
                if (under_replicated and len(p.isr_nodes) < len(p.replica_nodes))
                or (under_min_isr and len(p.isr_nodes) < min_isr.get(name, 1))
            ]
        else:
            print(f"{head}\tPartitionCount: {len(partitions)}\tReplicationFactor: {replication_factor}"
                  f"\tConfigs: {overrides.get(name, '')}")
        for p in partitions:
            leader = int(p.leader_id)
            print(
                f"\tTopic: {name}\tPartition: {int(p.partition_index)}"
                f"\tLeader: {leader if leader != _NO_LEADER else 'none'}"
                f"\tReplicas: {','.join(str(int(r)) for r in p.replica_nodes)}"
                f"\tIsr: {','.join(str(int(r)) for r in p.isr_nodes)}"
                f"\t{elrs.get((name, int(p.partition_index)), _NO_ELR)}"
            )
    return 0


async def _eligible_leader_replicas(admin: ControllerAdmin, names: list[str]) -> dict[tuple[str, int], str]:
    """(topic, partition) -> the `Elr: …\tLastKnownElr: …` columns, from DescribeTopicPartitions
    pages (the cursor says where the next starts)."""
    columns: dict[tuple[str, int], str] = {}
    cursor = None
    while True:
        response = await admin.send_to_any(DescribeTopicPartitionsRequest(
            topics=tuple(DescribeTopicPartitionsTopic(name=TopicName(n)) for n in names), cursor=cursor))
        for topic in response.topics:
            for p in topic.partitions:
                elr = ",".join(str(int(r)) for r in p.eligible_leader_replicas or ())
                last_known = ",".join(str(int(r)) for r in p.last_known_elr or ())
                columns[(str(topic.name), int(p.partition_index))] = f"Elr: {elr}\tLastKnownElr: {last_known}"
        after = response.next_cursor
        if after is None:
            return columns
        cursor = DescribeTopicPartitionsCursor(topic_name=after.topic_name, partition_index=after.partition_index)
