"""`kraft quickstart`: a local three-controller KRaft cluster, from nothing, in one command.

It is the shortest path from a checkout to a running quorum: three controller configs (node ids
1, 2, 3) on loopback ports picked free on the first run, storage formatted exactly as
`kraft storage format --initial-controllers` formats it (a dynamic KIP-853 quorum), the
`kraft storage info` report of every node and `kraft dump-log --cluster-metadata-decoder` of the
bootstrap checkpoint. Then it starts the three controllers (`kraft server start`, one process
each, logging to `<state-dir>/controller-N/server.log`), prints `kraft metadata-quorum describe
--status` and `--replication` once the quorum has a leader, and keeps them running until Ctrl-C
(SIGINT) or SIGTERM, when it sends SIGTERM to each controller and waits for it to stop.
`--duration-s` stops it by itself (for CI); `--no-start` only formats and shows the storage.

Runs are idempotent. The first run records its choices (cluster id, ports, directory ids) in
`<state-dir>/quickstart.properties`; later runs reuse them, find the storage formatted and say so,
and format only what is missing (a node directory deleted by hand, say). `QuickstartCluster` is
the reusable part: starting the quorum live builds on `prepare_cluster` and `format_cluster`.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from kraft_engine.admin.quorum_admin import QuorumAdmin, QuorumAdminError, QuorumDescription
from kraft_engine.cli.dump_log import dump_file
from kraft_engine.cli.main import CliError
from kraft_engine.cli.metadata_quorum import describe_replication, describe_status
from kraft_engine.cli.storage import info
from kraft_engine.kafka_uuid import random_uuid, to_kafka_str
from kraft_engine.loopback_ports import HOST, free_loopback_ports
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

__all__ = [
    "QuickstartCluster",
    "QuickstartNode",
    "format_cluster",
    "prepare_cluster",
    "register",
    "run_cluster",
]

NODE_IDS = (1, 2, 3)
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
    parser.add_argument(
        "--duration-s",
        type=float,
        default=None,
        help="stop the controllers after this many seconds (default: run until Ctrl-C)",
    )
    parser.add_argument("--no-start", action="store_true", help="only format and show the storage")
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
    if problems or not dumped:
        return 1
    if args.no_start:
        return 0
    return run_cluster(cluster, duration_s=args.duration_s, out=out)


# How long a controller gets to stop after SIGTERM before it is killed.
_STOP_TIMEOUT_S = 30.0
_FORMING_TIMEOUT_S = 60.0
_CATCH_UP_GRACE_S = 10.0


def run_cluster(cluster: QuickstartCluster, *, duration_s: float | None, out: TextIO) -> int:
    """Start the controllers, show the quorum as it forms, stop them on a signal or after `duration_s`."""
    stop_requested: list[int] = []

    def request_stop(signum: int, frame: object) -> None:
        stop_requested.append(signum)

    previous = {signum: signal.signal(signum, request_stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    children: dict[int, subprocess.Popen[bytes]] = {}
    # Metrics and health ports are picked afresh each run (they hold no state), so a second run
    # never trips over a port that something else took meanwhile.
    metrics_ports = dict(zip((n.node_id for n in cluster.nodes), free_loopback_ports(len(cluster.nodes)), strict=True))
    try:
        for node in cluster.nodes:
            children[node.node_id] = _start_controller(node, metrics_port=metrics_ports[node.node_id])
        print(f"== started controllers {', '.join(f'{i} (pid {p.pid})' for i, p in children.items())}", file=out)
        print("== metrics and health: "
              + ", ".join(f"controller {i} http://{HOST}:{port}/metrics (/healthz, /readyz)"
                          for i, port in metrics_ports.items()), file=out)
        deadline = None if duration_s is None else time.monotonic() + duration_s
        failed = _show_quorum(cluster, children, stop_requested, out=out)
        if failed:
            return 1
        print("== the quorum is running; Ctrl-C stops it", file=out, flush=True)
        while not stop_requested and (deadline is None or time.monotonic() < deadline):
            dead = [i for i, p in children.items() if p.poll() is not None]
            if dead:
                print(f"Controller {dead[0]} exited with code {children[dead[0]].returncode}; see its server.log",
                      file=out)
                return 1
            time.sleep(0.2)
        return 0
    finally:
        _stop_controllers(children, out=out)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _start_controller(node: QuickstartNode, *, metrics_port: int) -> subprocess.Popen[bytes]:
    log_path = node.config_path.parent / "server.log"
    with log_path.open("ab") as log:
        # Each controller runs in its own session so that a terminal's Ctrl-C reaches only us; we
        # then stop them one by one with SIGTERM (their graceful path).
        return subprocess.Popen(
            [sys.executable, "-c", "import sys; from kraft_engine.cli.main import main; sys.exit(main())",
             "server", "start", "--config", str(node.config_path),
             "--override", f"kraftwerk.metrics.port={metrics_port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _show_quorum(
    cluster: QuickstartCluster, children: dict[int, subprocess.Popen[bytes]], stop_requested: list[int], *, out: TextIO
) -> bool:
    """Print describe --status and --replication once a leader is known; True if the quorum failed to form."""
    bootstrap = [(node.voter.host, node.voter.port) for node in cluster.nodes]
    deadline = time.monotonic() + _FORMING_TIMEOUT_S

    async def describe() -> tuple[str, QuorumDescription]:
        async with QuorumAdmin(bootstrap, timeout_ms=1000) as admin:
            described = await admin.describe_cluster()
            return described.cluster_id, await admin.describe_quorum()

    leader_seen_at: float | None = None
    while not stop_requested:
        dead = [i for i, p in children.items() if p.poll() is not None]
        if dead:
            print(f"Controller {dead[0]} exited with code {children[dead[0]].returncode}; see its server.log", file=out)
            return True
        try:
            cluster_id, quorum = asyncio.run(describe())
        except QuorumAdminError:
            if time.monotonic() > deadline:
                print(f"The quorum did not form within {_FORMING_TIMEOUT_S:.0f} s; see the server.log files", file=out)
                return True
            continue
        # Show the quorum once it has formed: a leader, a high watermark and every voter caught
        # up (or, if a voter lags, after a grace period, so that the lag is what gets shown).
        leader_seen_at = leader_seen_at or time.monotonic()
        leader = quorum.leader
        formed = (
            quorum.high_watermark >= 0
            and leader is not None
            and all(v.log_end_offset == leader.log_end_offset for v in quorum.voters)
        )
        if not formed and time.monotonic() - leader_seen_at < _CATCH_UP_GRACE_S:
            time.sleep(0.2)
            continue
        print("== kraft metadata-quorum --bootstrap-controller "
              + ",".join(f"{h}:{p}" for h, p in bootstrap) + " describe --status", file=out)
        describe_status(cluster_id, quorum, out=out)
        print("", file=out)
        print("== kraft metadata-quorum describe --replication", file=out)
        describe_replication(quorum, out=out)
        print("", file=out, flush=True)
        return False
    return False


def _stop_controllers(children: dict[int, subprocess.Popen[bytes]], *, out: TextIO) -> None:
    running = {i: p for i, p in children.items() if p.poll() is None}
    for process in running.values():
        process.send_signal(signal.SIGTERM)
    for node_id, process in running.items():
        try:
            code = process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        print(f"Controller {node_id} stopped (exit code {code})", file=out, flush=True)


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
            for node_id, port in zip(NODE_IDS, free_loopback_ports(len(NODE_IDS)), strict=True)
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
