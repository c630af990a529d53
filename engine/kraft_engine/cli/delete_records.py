"""`kraft delete-records`: Kafka's kafka-delete-records tool (DeleteRecordsCommand).

Same flags (`--bootstrap-server`, `--offset-json-file`, `--command-config` with Kafka's client
security keys) and the same file format and output. The file is Kafka's:

    {"partitions": [{"topic": "orders", "partition": 0, "offset": 42}], "version": 1}

(`offset` -1: up to the high watermark). Each partition's DeleteRecords goes to its leader from
Metadata, as Kafka's Admin.deleteRecords does (NOT_LEADER_OR_FOLLOWER and LEADER_NOT_AVAILABLE
answers refresh the metadata and retry until `--timeout-ms`). Output, as Kafka's:

    Executing records delete operation
    Records delete operation completed:
    partition: orders-0	low_watermark: 42
    partition: orders-1	error: org.apache.kafka.common.errors.OffsetOutOfRangeException: ...

A file that is not Kafka's format (not JSON, no partitions, a missing or mistyped field, a version
other than 1, the same partition twice) is refused with a clear message before anything is sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import timedelta
from typing import Any

from kio.schema.delete_records.v2.request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i32, i32Timedelta, i64

from kraft_engine.admin.broker_admin import BrokerAdmin
from kraft_engine.admin.controller_admin import ControllerAdminError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import COMMAND_CONFIG_HELP, bootstrap_and_file, command_config_security
from kraft_engine.protocol.security import ClientSecurity

__all__ = ["parse_offset_json", "register"]

# Kafka's exception for each error a DeleteRecords answer carries, with Errors' default message.
_EXCEPTIONS = {
    ErrorCode.offset_out_of_range: ("OffsetOutOfRangeException",
                                    "The requested offset is not within the range of offsets maintained by the server."),
    ErrorCode.policy_violation: ("PolicyViolationException", "Request parameters do not satisfy the configured policy."),
    ErrorCode.unknown_topic_or_partition: ("UnknownTopicOrPartitionException",
                                           "This server does not host this topic-partition."),
    ErrorCode.request_timed_out: ("TimeoutException", "The request timed out."),
    ErrorCode.kafka_storage_error: ("KafkaStorageException", "Disk error when trying to access log file on the disk."),
    ErrorCode.not_leader_or_follower: ("NotLeaderOrFollowerException",
                                       "For requests intended only for the leader, this error indicates that the broker "
                                       "is not the current leader. For requests intended for any replica, this error "
                                       "indicates that the broker is not a replica of the topic partition."),
    ErrorCode.leader_not_available: ("LeaderNotAvailableException",
                                     "There is no leader for this topic-partition as we are in the middle of a "
                                     "leadership election."),
}
_RETRIED = {ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available}
_RETRY_PAUSE_S = 0.5

Partition = tuple[str, int]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "delete-records", help="Delete records of partitions up to an offset (kafka-delete-records)",
        description="This tool helps to delete records of the given partitions down to the specified offset.")
    parser.add_argument("--bootstrap-server", required=True, help="REQUIRED: The server to connect to.")
    parser.add_argument("--offset-json-file", required=True,
                        help="REQUIRED: The JSON file with offset per partition. The format to use is:\n"
                             '{"partitions":\n  [{"topic": "foo", "partition": 1, "offset": 1}],\n "version":1\n}')
    parser.add_argument("--command-config", help=COMMAND_CONFIG_HELP)
    parser.add_argument("--timeout-ms", type=int, default=30000,
                        help="How long to wait for every replica to delete, and to retry (default 30000).")
    parser.set_defaults(func=_run)


def parse_offset_json(text: str) -> list[tuple[Partition, int]]:
    """Kafka's offset JSON: ((topic, partition), offset) in file order; ValueError says what is wrong."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the offset JSON file is not JSON: {e}") from None
    if not isinstance(document, dict):
        raise ValueError("the offset JSON file must hold an object with \"partitions\" and \"version\"")
    version = document.get("version", 1)
    if version != 1:
        raise ValueError(f"Not supported version field value {version}")
    entries = document.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise ValueError("The offset JSON file has no \"partitions\" array (or it is empty)")
    parsed: list[tuple[Partition, int]] = []
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"partitions[{position}] must be an object with topic, partition and offset")
        topic, partition, offset = entry.get("topic"), entry.get("partition"), entry.get("offset")
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"partitions[{position}] needs a \"topic\" string")
        for name, value in (("partition", partition), ("offset", offset)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"partitions[{position}] needs an integer \"{name}\", not {value!r}")
        if partition < 0:  # type: ignore[operator]
            raise ValueError(f"partitions[{position}] has a negative partition {partition}")
        parsed.append(((topic, int(partition)), int(offset)))  # type: ignore[arg-type]
    seen: set[Partition] = set()
    duplicates = []
    for tp, _ in parsed:
        if tp in seen and tp not in duplicates:
            duplicates.append(tp)
        seen.add(tp)
    if duplicates:
        raise ValueError("Offset json file contains duplicate topic partitions: "
                         + ",".join(f"{t}-{p}" for t, p in duplicates))
    return parsed


def _run(args: argparse.Namespace) -> int:
    bootstrap, text = bootstrap_and_file(args.bootstrap_server, flag="--offset-json-file", path=args.offset_json_file)
    security = command_config_security(args.command_config)
    try:
        wanted = parse_offset_json(text)
    except ValueError as e:
        raise CliError(str(e)) from None
    print("Executing records delete operation")
    results = asyncio.run(_delete(bootstrap, dict(wanted), timeout_ms=args.timeout_ms, security=security))
    print("Records delete operation completed:")
    failed = False
    for tp, _ in wanted:
        error, low_watermark = results[tp]
        if error == ErrorCode.none:
            print(f"partition: {tp[0]}-{tp[1]}\tlow_watermark: {low_watermark}")
        else:
            failed = True
            name, message = _EXCEPTIONS.get(error, (error.name, f"the broker answered {error.name}"))
            print(f"partition: {tp[0]}-{tp[1]}\terror: org.apache.kafka.common.errors.{name}: {message}")
    return 1 if failed else 0


async def _delete(bootstrap: list[tuple[str, int]], wanted: dict[Partition, int], *,
                  timeout_ms: int, security: ClientSecurity | None) -> dict[Partition, tuple[ErrorCode, int]]:
    deadline = time.monotonic() + timeout_ms / 1000
    results: dict[Partition, tuple[ErrorCode, int]] = {}
    pending = dict(wanted)
    async with BrokerAdmin(bootstrap, timeout_ms=timeout_ms, client_id="delete-records-tool",
                           security=security) as admin:
        while pending:
            try:
                leaders = await _leaders(admin, sorted({t for t, _ in pending}))
            except ControllerAdminError as e:
                raise CliError(str(e)) from None
            by_leader: dict[tuple[str, int] | None, list[Partition]] = {}
            retry: dict[Partition, int] = {}
            for tp in pending:
                if tp not in leaders:  # the topic or partition does not exist: no retry, as Kafka's Admin
                    results[tp] = (ErrorCode.unknown_topic_or_partition, -1)
                    continue
                by_leader.setdefault(leaders[tp], []).append(tp)
            for address, partitions in by_leader.items():
                answers = (dict.fromkeys(partitions, (ErrorCode.leader_not_available, -1)) if address is None
                           else await _send(admin, address, {tp: pending[tp] for tp in partitions},
                                            timeout_ms=max(1, int((deadline - time.monotonic()) * 1000))))
                for tp, (error, low) in answers.items():
                    results[tp] = (error, low)
                    if error in _RETRIED:
                        retry[tp] = pending[tp]
            if not retry or time.monotonic() >= deadline:
                break
            pending = retry
            await asyncio.sleep(_RETRY_PAUSE_S)
    return results


async def _leaders(admin: BrokerAdmin, topics: list[str]) -> dict[Partition, tuple[str, int] | None]:
    """The leader's address of every existing partition of `topics` (None while it has none)."""
    metadata = await admin.send_to_any(MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    addresses = {int(b.node_id): (b.host, int(b.port)) for b in metadata.brokers}
    leaders: dict[Partition, tuple[str, int] | None] = {}
    for topic in metadata.topics:
        for partition in topic.partitions:
            leaders[(str(topic.name), int(partition.partition_index))] = addresses.get(int(partition.leader_id))
    return leaders


async def _send(admin: BrokerAdmin, address: tuple[str, int], offsets: dict[Partition, int], *,
                timeout_ms: int) -> dict[Partition, tuple[ErrorCode, int]]:
    by_topic: dict[str, list[DeleteRecordsPartition]] = {}
    for (topic, index), offset in offsets.items():
        by_topic.setdefault(topic, []).append(DeleteRecordsPartition(partition_index=i32(index), offset=i64(offset)))
    request = DeleteRecordsRequest(
        topics=tuple(DeleteRecordsTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items()),
        timeout=i32Timedelta.parse(timedelta(milliseconds=timeout_ms)),
    )
    response: Any = await admin.send_to(address, request)
    if response is None:
        return dict.fromkeys(offsets, (ErrorCode.leader_not_available, -1))
    answers = {}
    for topic in response.topics:
        for result in topic.partitions:
            answers[(str(topic.name), int(result.partition_index))] = (ErrorCode(result.error_code),
                                                                       int(result.low_watermark))
    return {tp: answers.get(tp, (ErrorCode.unknown_server_error, -1)) for tp in offsets}
