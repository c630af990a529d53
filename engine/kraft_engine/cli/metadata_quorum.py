"""`kraft metadata-quorum`: Kafka's kafka-metadata-quorum tool, same verbs, flags and output.

    kraft metadata-quorum --bootstrap-controller HOST:PORT[,...] describe --status
    kraft metadata-quorum --bootstrap-controller HOST:PORT[,...] describe --replication [--human-readable]
    kraft metadata-quorum --bootstrap-controller HOST:PORT[,...] add-controller --config NODE_CONFIG
    kraft metadata-quorum --bootstrap-controller HOST:PORT[,...] remove-controller \\
        --controller-id N --controller-directory-id UUID [--force]

As in Kafka, add-controller reads the new controller's node.id, metadata log directory id (from
its meta.properties) and advertised controller listeners from its config file; Kafka passes that
file as `--command-config` (before the verb), which we accept too when `--config` is not given,
before or after the verb.

Our additions, not in Kafka's tool:
- `--output json` prints the same facts as JSON for scripts and the operator.
- remove-controller refuses a removal that would leave the remaining voters without a reachable
  majority (each remaining voter is probed with ApiVersions on its controller endpoint); `--force`
  removes anyway. Kafka leaves this check to the operator.
- `--bootstrap-server` is accepted for Kafka compatibility; until brokers exist it must name
  controllers too, and requests go to them directly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from kraft_engine.admin.quorum_admin import (
    QuorumAdmin,
    QuorumAdminError,
    QuorumDescription,
    ReplicaDescription,
)
from kraft_engine.cli.main import CliError
from kraft_engine.kafka_uuid import ZERO_UUID, from_kafka_str, to_kafka_str
from kraft_engine.protocol import ConnectionConfig, KafkaConnection, parse_bootstrap_servers
from kraft_engine.raft import Endpoint, ReplicaKey
from kraft_engine.server.config import ConfigError, load_config
from kraft_engine.storage.meta_properties import MetaPropertiesError, read_meta_properties

__all__ = ["describe_replication", "describe_status", "register"]

_PROBE_TIMEOUT_MS = 1500


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "metadata-quorum",
        help="describe and change the KRaft controller quorum",
        description="This tool describes kraft metadata quorum status.",
    )
    connection = parser.add_mutually_exclusive_group(required=True)
    connection.add_argument("--bootstrap-server", help="comma-separated host:port pairs of the Kafka cluster")
    connection.add_argument("--bootstrap-controller", help="comma-separated host:port pairs of the controllers")
    parser.add_argument("--command-config", help="properties file for the admin client; for add-controller, "
                        "the new controller's configuration when --config is not given")
    parser.add_argument("--output", choices=("text", "json"), default="text", help="output format (default text)")
    verbs = parser.add_subparsers(dest="command", metavar="COMMAND")
    verbs.required = True

    describe = verbs.add_parser("describe", help="Describe the metadata quorum info")
    describe.add_argument("--status", action="store_true", help="A short summary of the quorum status")
    describe.add_argument("--replication", action="store_true", help="Detailed information about the status of replication")
    describe.add_argument("--human-readable", action="store_true", help="Human-readable output")
    describe.add_argument("--output", dest="describe_output", choices=("text", "json"), help="output format")
    describe.set_defaults(func=_describe)

    add = verbs.add_parser("add-controller", help="Add a controller to the KRaft controller cluster")
    add.add_argument("--config", help="the configuration file of the controller to add")
    # Kafka takes --command-config before the verb only; the runbook form puts it after
    # (`add-controller --command-config FILE --config NODE_CONFIG`). Its own dest keeps argparse's
    # subparser defaults from overwriting a value given before the verb.
    add.add_argument("--command-config", dest="add_command_config", default=None, metavar="COMMAND_CONFIG",
                     help="as --command-config before the verb")
    add.add_argument("--dry-run", action="store_true", help="print what would be done, but do not do it")
    add.set_defaults(func=_add_controller)

    remove = verbs.add_parser("remove-controller", help="Remove a controller from the KRaft controller cluster")
    remove.add_argument("--controller-id", "-i", type=int, required=True, help="The id of the controller to remove.")
    remove.add_argument("--controller-directory-id", "-d", required=True,
                        help="The directory ID of the controller to remove.")
    remove.add_argument("--dry-run", action="store_true", help="print what would be done, but do not do it")
    remove.add_argument("--force", action="store_true",
                        help="remove even if the remaining voters would have no reachable majority")
    remove.set_defaults(func=_remove_controller)


def _admin(args: argparse.Namespace) -> QuorumAdmin:
    servers = args.bootstrap_controller or args.bootstrap_server
    try:
        return QuorumAdmin(parse_bootstrap_servers(servers))
    except ValueError as e:
        raise CliError(str(e)) from None


def _output(args: argparse.Namespace) -> str:
    return str(getattr(args, "describe_output", None) or args.output)


# -- describe ----------------------------------------------------------------------------------
def _describe(args: argparse.Namespace) -> int:
    if args.status and args.replication:
        raise CliError("Only one of --status or --replication should be specified with describe sub-command")
    if not (args.status or args.replication):
        raise CliError("One of --status or --replication must be specified with describe sub-command")
    if args.status and args.human_readable:
        raise CliError("The option --human-readable is only supported along with --replication")

    async def fetch() -> tuple[str, QuorumDescription]:
        async with _admin(args) as admin:
            cluster = await admin.describe_cluster()
            return cluster.cluster_id, await admin.describe_quorum()

    try:
        cluster_id, quorum = asyncio.run(fetch())
    except QuorumAdminError as e:
        raise CliError(str(e)) from None
    if args.status:
        describe_status(cluster_id, quorum, out=sys.stdout, as_json=_output(args) == "json")
    else:
        describe_replication(quorum, out=sys.stdout, as_json=_output(args) == "json", human_readable=args.human_readable)
    return 0


def _endpoint_text(endpoint: Endpoint) -> str:
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    return f"{endpoint.name}://{host}:{endpoint.port}"


def _replica_json(quorum: QuorumDescription, replica: ReplicaDescription) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": replica.replica_id}
    if replica.directory_id != ZERO_UUID:
        entry["directoryId"] = to_kafka_str(replica.directory_id)
    endpoints = quorum.nodes.get(replica.replica_id, ())
    if endpoints:
        entry["endpoints"] = [_endpoint_text(e) for e in endpoints]
    return entry


def _replica_text(entry: dict[str, Any]) -> str:
    # Kafka's format: {"id": 1, "directoryId": "...", "endpoints": ["CONTROLLER://host:port"]}
    parts = [f'"id": {entry["id"]}']
    if "directoryId" in entry:
        parts.append(f'"directoryId": "{entry["directoryId"]}"')
    if "endpoints" in entry:
        parts.append('"endpoints": [' + ", ".join(f'"{e}"' for e in entry["endpoints"]) + "]")
    return "{" + ", ".join(parts) + "}"


def _status_facts(cluster_id: str, quorum: QuorumDescription) -> dict[str, Any]:
    leader = quorum.leader
    if leader is None or not quorum.voters:
        raise CliError(f"the leader {quorum.leader_id} is not among the voters it reported")
    most_behind = min(quorum.voters, key=lambda v: v.log_end_offset)
    if most_behind is leader:
        lag_time_ms = 0
    elif leader.last_caught_up_timestamp_ms >= 0 and most_behind.last_caught_up_timestamp_ms >= 0:
        lag_time_ms = leader.last_caught_up_timestamp_ms - most_behind.last_caught_up_timestamp_ms
    else:
        lag_time_ms = -1
    return {
        "clusterId": cluster_id,
        "leaderId": quorum.leader_id,
        "leaderEpoch": quorum.leader_epoch,
        "highWatermark": quorum.high_watermark,
        "maxFollowerLag": leader.log_end_offset - most_behind.log_end_offset,
        "maxFollowerLagTimeMs": lag_time_ms,
        "currentVoters": [_replica_json(quorum, v) for v in quorum.voters],
        "currentObservers": [_replica_json(quorum, o) for o in quorum.observers],
    }


def describe_status(cluster_id: str, quorum: QuorumDescription, *, out: TextIO, as_json: bool = False) -> None:
    """Print `describe --status` exactly as Kafka's tool does (or as JSON)."""
    facts = _status_facts(cluster_id, quorum)
    if as_json:
        print(json.dumps(facts, indent=2), file=out)
        return
    voters = "[" + ", ".join(_replica_text(v) for v in facts["currentVoters"]) + "]"
    observers = "[" + ", ".join(_replica_text(o) for o in facts["currentObservers"]) + "]"
    print(
        f"ClusterId:              {facts['clusterId']}\n"
        f"LeaderId:               {facts['leaderId']}\n"
        f"LeaderEpoch:            {facts['leaderEpoch']}\n"
        f"HighWatermark:          {facts['highWatermark']}\n"
        f"MaxFollowerLag:         {facts['maxFollowerLag']}\n"
        f"MaxFollowerLagTimeMs:   {facts['maxFollowerLagTimeMs']}\n"
        f"CurrentVoters:          {voters}\n"
        f"CurrentObservers:       {observers}",
        file=out,
    )


_REPLICATION_HEADERS = ("NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp",
                        "Status")


def describe_replication(quorum: QuorumDescription, *, out: TextIO, as_json: bool = False,
                         human_readable: bool = False) -> None:
    """Print `describe --replication`: Kafka's table (leader, followers, observers)."""
    leader = quorum.leader
    if leader is None:
        raise CliError(f"the leader {quorum.leader_id} is not among the voters it reported")
    now_ms = int(time.time() * 1000)

    def timestamp(value: int) -> str:
        if value < 0:
            return "-1"
        return f"{max(0, now_ms - value)} ms ago" if human_readable else str(value)

    rows: list[tuple[ReplicaDescription, str]] = [(leader, "Leader")]
    rows += [(v, "Follower") for v in quorum.voters if v.replica_id != quorum.leader_id]
    rows += [(o, "Observer") for o in quorum.observers]
    if as_json:
        document = [
            {
                "nodeId": r.replica_id,
                "directoryId": to_kafka_str(r.directory_id),
                "logEndOffset": r.log_end_offset,
                "lag": leader.log_end_offset - r.log_end_offset,
                "lastFetchTimestamp": r.last_fetch_timestamp_ms,
                "lastCaughtUpTimestamp": r.last_caught_up_timestamp_ms,
                "status": status,
            }
            for r, status in rows
        ]
        print(json.dumps(document, indent=2), file=out)
        return
    table = [
        [
            str(r.replica_id),
            to_kafka_str(r.directory_id),
            str(r.log_end_offset),
            str(leader.log_end_offset - r.log_end_offset),
            timestamp(r.last_fetch_timestamp_ms),
            timestamp(r.last_caught_up_timestamp_ms),
            status,
        ]
        for r, status in rows
    ]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(_REPLICATION_HEADERS)]
    for row in [list(_REPLICATION_HEADERS), *table]:
        # Kafka's ToolsUtils.prettyPrintTable: each cell padded to its column width, then a tab.
        print("".join(cell.ljust(width) + "\t" for cell, width in zip(row, widths, strict=True)), file=out)


# -- add-controller ------------------------------------------------------------------------------
def _add_controller(args: argparse.Namespace) -> int:
    path = args.config or args.add_command_config or args.command_config
    if path is None:
        raise CliError("You must supply the configuration file of the controller you are adding when using "
                       "add-controller (--config, or --command-config as in Kafka).")
    try:
        config = load_config(path)
    except ConfigError as e:
        raise CliError(str(e)) from None
    if not config.is_controller:
        raise CliError("process.roles did not contain 'controller' in configuration file. "
                       "Is this a valid controller configuration file?")
    metadata_dir = config.metadata_log_dir
    try:
        meta = read_meta_properties(Path(metadata_dir))
    except (FileNotFoundError, MetaPropertiesError) as e:
        raise CliError(f"Unable to read meta.properties from {metadata_dir}: {e}") from None
    if meta.directory_id is None:
        raise CliError(f"No directory id found in {metadata_dir}")
    endpoints = tuple(
        Endpoint(e.listener_name, e.host or "localhost", e.port) for e in config.effective_advertised_controller_listeners
    )
    if not endpoints:
        raise CliError("Cannot find information about the controller listener names in the configuration file")
    voter = ReplicaKey(config.node_id, meta.directory_id)
    if not args.dry_run:

        async def add() -> None:
            async with _admin(args) as admin:
                await admin.add_raft_voter(cluster_id=meta.cluster_id, voter=voter, endpoints=endpoints)

        try:
            asyncio.run(add())
        except QuorumAdminError as e:
            raise CliError(str(e)) from None
    verb = "DRY RUN of adding" if args.dry_run else "Added"
    print(f"{verb} controller {config.node_id} with directory id {to_kafka_str(meta.directory_id)} and endpoints: "
          + ", ".join(_endpoint_text(e) for e in endpoints))
    return 0


# -- remove-controller ---------------------------------------------------------------------------
def _remove_controller(args: argparse.Namespace) -> int:
    if args.controller_id < 0:
        raise CliError(f"Invalid negative --controller-id: {args.controller_id}")
    try:
        directory_id = from_kafka_str(args.controller_directory_id)
    except ValueError as e:
        raise CliError(f"Failed to parse --controller-directory-id: {e}") from None
    voter = ReplicaKey.of(args.controller_id, directory_id)

    async def remove() -> None:
        async with _admin(args) as admin:
            if not args.force:
                quorum = await admin.describe_quorum()
                await _refuse_unsafe_removal(quorum, voter)
            if not args.dry_run:
                cluster = await admin.describe_cluster()
                await admin.remove_raft_voter(cluster_id=cluster.cluster_id, voter=voter)

    try:
        asyncio.run(remove())
    except QuorumAdminError as e:
        raise CliError(str(e)) from None
    verb = "DRY RUN of removing " if args.dry_run else "Removed "
    print(f"{verb} KRaft controller {args.controller_id} with directory id {to_kafka_str(directory_id)}")
    return 0


async def _refuse_unsafe_removal(quorum: QuorumDescription, voter: ReplicaKey) -> None:
    remaining = [v for v in quorum.voters if v.replica_id != voter.id]
    if len(remaining) == len(quorum.voters):
        return  # not a voter: the leader answers VOTER_NOT_FOUND itself
    if not remaining:
        raise CliError(f"Refusing to remove controller {voter.id}: it is the only voter and the quorum would have "
                       "none (use --force to remove it anyway)")
    majority = len(remaining) // 2 + 1
    reachable = [v.replica_id for v in remaining if await _reachable(quorum.nodes.get(v.replica_id, ()))]
    if len(reachable) < majority:
        raise CliError(
            f"Refusing to remove controller {voter.id}: only {len(reachable)} of the {len(remaining)} remaining voters "
            f"({', '.join(str(v.replica_id) for v in remaining)}) are reachable, fewer than their majority of "
            f"{majority}; the quorum could not commit anything afterwards (use --force to remove it anyway)"
        )


async def _reachable(endpoints: tuple[Endpoint, ...]) -> bool:
    for endpoint in endpoints:
        config = ConnectionConfig(
            client_id="kraft-metadata-quorum",
            request_timeout_ms=_PROBE_TIMEOUT_MS,
            socket_connection_setup_timeout_ms=_PROBE_TIMEOUT_MS,
        )
        async with KafkaConnection(endpoint.host, endpoint.port, config=config) as connection:
            loop = asyncio.get_running_loop()
            try:
                if await connection.try_connect(deadline=loop.time() + _PROBE_TIMEOUT_MS / 1000):
                    return True
            except Exception:  # a refused handshake still means no usable voter there
                continue
    return False
