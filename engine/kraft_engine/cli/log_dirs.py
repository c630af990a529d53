"""`kraft log-dirs --describe`: Kafka's kafka-log-dirs tool (LogDirsCommand).

Same flags (`--bootstrap-server`, `--describe`, `--broker-list`, `--topic-list`) and the same
output: two progress lines, then one JSON document with every broker's log directories, the
replicas in each (size on disk, offset lag, whether it is a future replica of an
AlterReplicaLogDirs move) and the directory's error (Kafka's exception class name, or null for
an online directory). Brokers come from Metadata unless `--broker-list` names them; each is asked
with DescribeLogDirs for all its directories, and `--topic-list` filters the replicas shown, as
Kafka's tool does. Works against our brokers and Apache Kafka's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest

from kraft_engine.admin.broker_admin import BrokerAdmin
from kraft_engine.admin.controller_admin import ControllerAdminError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import COMMAND_CONFIG_HELP, bootstrap_servers, command_config_security
from kraft_engine.protocol.security import ClientSecurity

__all__ = ["register"]

_EXCEPTIONS = {
    ErrorCode.kafka_storage_error: "org.apache.kafka.common.errors.KafkaStorageException",
    ErrorCode.unknown_server_error: "org.apache.kafka.common.errors.UnknownServerException",
    ErrorCode.cluster_authorization_failed: "org.apache.kafka.common.errors.ClusterAuthorizationException",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "log-dirs", help="Describe the log directories of brokers (kafka-log-dirs)",
        description="This tool helps to query log directory usage on the specified brokers.")
    parser.add_argument("--bootstrap-server", required=True,
                        help="REQUIRED: the server(s) to use for bootstrapping")
    parser.add_argument("--describe", action="store_true", help="Describe the specified log directories on the "
                                                                 "specified brokers.")
    parser.add_argument("--broker-list", help="The list of brokers to be queried in the form \"0,1,2\". "
                                              "All brokers in the cluster will be queried if no broker list is specified")
    parser.add_argument("--topic-list", default="",
                        help="The list of topics to be queried in the form \"topic1,topic2,topic3\". "
                             "All topics will be queried if no topic list is specified")
    parser.add_argument("--command-config", help=COMMAND_CONFIG_HELP)
    parser.add_argument("--timeout-ms", type=int, default=30000, help="How long to retry (default 30000).")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if not args.describe:
        raise CliError("Must provide action --describe")
    bootstrap = bootstrap_servers(args.bootstrap_server)
    wanted_brokers = None
    if args.broker_list:
        try:
            wanted_brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
        except ValueError:
            raise CliError(f"--broker-list must be broker ids separated by commas, not {args.broker_list!r}") from None
    topics = {t for t in args.topic_list.split(",") if t}
    return asyncio.run(_describe(bootstrap, wanted_brokers, topics, timeout_ms=args.timeout_ms,
                                 security=command_config_security(args.command_config)))


async def _describe(bootstrap: list[tuple[str, int]], wanted_brokers: list[int] | None, topics: set[str], *,
                    timeout_ms: int, security: ClientSecurity | None) -> int:
    async with BrokerAdmin(bootstrap, timeout_ms=timeout_ms, client_id="log-dirs-tool", security=security) as admin:
        try:
            metadata = await admin.send_to_any(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                               include_topic_authorized_operations=False))
            addresses = {int(b.node_id): (b.host, int(b.port)) for b in metadata.brokers}
            brokers = sorted(addresses) if wanted_brokers is None else wanted_brokers
            missing = [b for b in brokers if b not in addresses]
            if missing:
                print(f"ERROR: The given brokers do not exist from --broker-list: {','.join(map(str, missing))}. "
                      f"Current existent brokers: {','.join(map(str, sorted(addresses)))}")
                return 1
            print("Querying brokers for log directories information")
            described = {}
            for broker in brokers:
                response = await admin.send_to(addresses[broker], DescribeLogDirsRequest(topics=None))
                if response is None:
                    raise CliError(f"broker {broker} at {addresses[broker][0]}:{addresses[broker][1]} did not answer")
                described[broker] = response
        except ControllerAdminError as e:
            raise CliError(str(e)) from None
    print(f"Received log directory information from brokers {','.join(map(str, brokers))}")
    document = {"brokers": [{"broker": b, "logDirs": _log_dirs(described[b], topics)} for b in brokers], "version": 1}
    print(json.dumps(document, separators=(",", ":")))
    return 0


def _log_dirs(response: Any, topics: set[str]) -> list[dict[str, Any]]:
    log_dirs = []
    for result in sorted(response.results, key=lambda r: r.log_dir):
        code = ErrorCode(result.error_code)
        partitions = [
            {"partition": f"{t.name}-{int(p.partition_index)}", "size": int(p.partition_size),
             "offsetLag": int(p.offset_lag), "isFuture": bool(p.is_future_key)}
            for t in result.topics if not topics or t.name in topics
            for p in t.partitions
        ]
        log_dirs.append({
            "partitions": partitions,
            "error": None if code == ErrorCode.none else _EXCEPTIONS.get(code, f"org.apache.kafka.common.errors.{code.name}"),
            "logDir": result.log_dir,
        })
    return log_dirs
