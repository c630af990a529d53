"""`kraft quickstart`: a local three-controller KRaft cluster, from nothing, in one command.

It is the shortest path from a checkout to something real on disk: three controller configs
(node ids 1, 2, 3) on loopback ports picked free on the first run, storage formatted exactly as
`kraft storage format --initial-controllers` formats it (a dynamic KIP-853 quorum), then the
`kraft storage info` report of every node and `kraft dump-log --cluster-metadata-decoder` of the
bootstrap checkpoint.

Runs are idempotent. The first run records its choices (cluster id, ports, directory ids) in
`<state-dir>/quickstart.properties`; later runs reuse them, find the storage formatted and say so,
and format only what is missing (a node directory deleted by hand, say). `QuickstartCluster` is
the reusable part: starting the quorum live builds on `prepare_cluster` and `format_cluster`.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from kraft_engine.cli.dump_log import dump_file
from kraft_engine.cli.main import CliError
from kraft_engine.cli.storage import info
from kraft_engine.kafka_uuid import random_uuid, to_kafka_str
from kraft_engine.server.config import ConfigError, KafkaConfig, load_config
from kraft_engine.storage.formatter import (
    BOOTSTRAP_SNAPSHOT_NAME,
    CLUSTER_METADATA_DIR_NAME,
    DynamicVoter,
    FormatRequest,
    FormatterError,
    format_storage,
    parse_dynamic_voters,
)
from kraft_engine.storage.java_properties import JavaPropertiesError, format_properties, parse_properties
from kraft_engine.storage.meta_properties import MetaPropertiesEnsemble

__all__ = ["QuickstartCluster", "QuickstartNode", "format_cluster", "prepare_cluster", "register"]

NODE_IDS = (1, 2, 3)
HOST = "127.0.0.1"
CONTROLLER_LISTENER = "CONTROLLER"
PLAN_FILE_NAME = "quickstart.properties"


@dataclass(frozen=True, slots=True)
class QuickstartNode:
    node_id: int
    config_path: Path
    metadata_log_dir: Path
    voter: DynamicVoter


@dataclass(frozen=True, slots=True)
class QuickstartCluster:
    state_dir: Path
    cluster_id: str
    initial_controllers: str
    nodes: tuple[QuickstartNode, ...]

    def config(self, node: QuickstartNode) -> KafkaConfig:
        try:
            return load_config(node.config_path)
        except ConfigError as e:
            raise CliError(f"{node.config_path}: {e}") from None


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "quickstart",
        help="create and format a local three-controller KRaft cluster",
        description="Write configs for controllers 1, 2 and 3 on free loopback ports, format their storage "
        "as one dynamic quorum (kraft storage format --initial-controllers), and show the result.",
    )
    parser.add_argument(
        "--state-dir",
        default="state/quickstart",
        help="where the configs and log directories live (default: state/quickstart)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    out = sys.stdout
    cluster = prepare_cluster(Path(args.state_dir))
    print(f"Quickstart cluster {cluster.cluster_id} in {cluster.state_dir}", file=out)
    print(f"  initial controllers: {cluster.initial_controllers}", file=out)
    for node in cluster.nodes:
        print(f"  controller {node.node_id}: {node.config_path}", file=out)
    print("", file=out)
    format_cluster(cluster, out=out)
    problems = 0
    for node in cluster.nodes:
        print(f"== kraft storage info -c {node.config_path}", file=out)
        problems += info(cluster.config(node), out=out)
        print("", file=out)
    checkpoint = cluster.nodes[0].metadata_log_dir / CLUSTER_METADATA_DIR_NAME / BOOTSTRAP_SNAPSHOT_NAME
    print(f"== kraft dump-log --cluster-metadata-decoder --files {checkpoint}", file=out)
    dumped = dump_file(checkpoint, out=out, err=sys.stderr, decode_metadata=True, deep=True)
    return 0 if problems == 0 and dumped else 1


def prepare_cluster(state_dir: Path) -> QuickstartCluster:
    """Load the cluster recorded in `state_dir`, or choose one and record it; (re)write missing configs."""
    state_dir = state_dir.resolve()
    plan_path = state_dir / PLAN_FILE_NAME
    if plan_path.exists():
        cluster_id, initial = _read_plan(plan_path)
    else:
        cluster_id = to_kafka_str(random_uuid())
        initial = ",".join(
            str(DynamicVoter(node_id=node_id, host=HOST, port=port, directory_id=random_uuid()))
            for node_id, port in zip(NODE_IDS, _free_ports(len(NODE_IDS)), strict=True)
        )
        state_dir.mkdir(parents=True, exist_ok=True)
        plan_path.write_text(
            format_properties(
                {"cluster.id": cluster_id, "initial.controllers": initial},
                comments=(" Written by `kraft quickstart` on its first run; later runs reuse these choices.",),
            ),
            encoding="utf-8",
        )
    try:
        voters = parse_dynamic_voters(initial)
    except FormatterError as e:
        raise CliError(f"{plan_path}: {e}") from None
    nodes = []
    for voter in voters:
        node_dir = state_dir / f"controller-{voter.node_id}"
        node = QuickstartNode(
            node_id=voter.node_id,
            config_path=node_dir / "server.properties",
            metadata_log_dir=node_dir / "metadata",
            voter=voter,
        )
        if not node.config_path.exists():
            node_dir.mkdir(parents=True, exist_ok=True)
            node.config_path.write_text(_server_properties(node, voters), encoding="utf-8")
        nodes.append(node)
    return QuickstartCluster(state_dir=state_dir, cluster_id=cluster_id, initial_controllers=initial, nodes=tuple(nodes))


def format_cluster(cluster: QuickstartCluster, *, out: TextIO) -> bool:
    """Format every node that is not formatted yet; False when all of them already were."""
    formatted_any = False
    for node in cluster.nodes:
        config = cluster.config(node)
        ensemble = MetaPropertiesEnsemble.load(
            [Path(d) for d in config.all_log_dirs], metadata_log_dir=Path(config.metadata_log_dir)
        )
        if ensemble.formatted and not (ensemble.empty | ensemble.missing | set(ensemble.errors)):
            print(
                f"Controller {node.node_id}: storage is already formatted (cluster.id {ensemble.cluster_id}); "
                "nothing to do.",
                file=out,
            )
            continue
        print(f"== kraft storage format -c {node.config_path} -t {cluster.cluster_id} -I ... -g", file=out)
        try:
            request = FormatRequest.from_config(
                config,
                cluster_id=cluster.cluster_id,
                initial_controllers=cluster.initial_controllers,
                ignore_formatted=True,
            )
            format_storage(request, out=out, now_ms=int(time.time() * 1000))
        except FormatterError as e:
            raise CliError(f"controller {node.node_id}: {e}") from None
        formatted_any = True
    print("", file=out)
    return formatted_any


def _read_plan(path: Path) -> tuple[str, str]:
    try:
        plan = parse_properties(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, JavaPropertiesError) as e:
        raise CliError(f"cannot read {path}: {e}") from None
    missing = [key for key in ("cluster.id", "initial.controllers") if not plan.get(key)]
    if missing:
        raise CliError(f"{path} lacks {', '.join(missing)}; remove the state directory to start over")
    return plan["cluster.id"], plan["initial.controllers"]


def _free_ports(count: int) -> list[int]:
    """Ports the kernel says are free now, held open together so that they are distinct."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _server_properties(node: QuickstartNode, voters: tuple[DynamicVoter, ...]) -> str:
    bootstrap = ",".join(f"{v.host}:{v.port}" for v in voters)
    return format_properties(
        {
            "process.roles": "controller",
            "node.id": str(node.node_id),
            "listeners": f"{CONTROLLER_LISTENER}://{node.voter.host}:{node.voter.port}",
            "controller.listener.names": CONTROLLER_LISTENER,
            "listener.security.protocol.map": f"{CONTROLLER_LISTENER}:PLAINTEXT",
            "controller.quorum.bootstrap.servers": bootstrap,
            "log.dirs": str(node.metadata_log_dir),
        },
        comments=(f" kraftwerk quickstart: controller {node.node_id} of a three-controller dynamic quorum.",),
    )
