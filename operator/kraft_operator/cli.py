"""The `kraftwerk` command.

    kraftwerk crd                              print the KRaftCluster CRD (generated from the models)
    kraftwerk plan -f cluster.yaml             what the operator would do next on the local runtime, and why
    kraftwerk up -f cluster.yaml               run the reconciler on the local runtime until Ctrl-C
    kraftwerk operator                         run the kopf operator (in-cluster or from a kubeconfig)

`plan` and `up` work on the local runtime (`kraft_operator.runtime.local`) under `--state-dir`
(default `state/kraftwerk`). There the resource's status lives in `<ns>/<name>/status.yaml`, the
local stand-in for the API server's status subresource. So a second `kraftwerk up` resumes from
it, exactly as a restarted operator resumes from the resource's status.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import random
import re
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from kraft_engine.protocol.security import ClientSecurity
from kraft_engine.storage.java_properties import format_properties
from kraft_operator.crd import crd_yaml
from kraft_operator.model import ConditionStatus, ConditionType, KRaftCluster, KRaftClusterStatus, Role
from kraft_operator.plan import CONTROLLER_LISTENER, Event, Plan, desired_nodes
from kraft_operator.plan.security import KEYSTORE_KEY, REPLICATION_LISTENER, TRUSTSTORE_KEY, operator_secret
from kraft_operator.printing import describe, get_wide
from kraft_operator.reconciler import Reconciler
from kraft_operator.runtime.local import LocalRuntime
from kraft_pipeline import cli as pipeline_cli

__all__ = ["SpecFileError", "load_cluster", "main"]

_DEFAULT_STATE_DIR = "state/kraftwerk"
_STATUS_FILE = "status.yaml"
_KRAFT = (sys.executable, "-c", "import sys; from kraft_engine.cli.main import main; sys.exit(main())")
_DESCRIBE_TIMEOUT_S = 60.0


class SpecFileError(Exception):
    """A cluster file that is not a KRaftCluster; the message names the field."""


def load_cluster(path: Path) -> KRaftCluster:
    """Read a KRaftCluster from YAML; schema errors name the field as `spec.nodePools[0].replicas`."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SpecFileError(f"cannot read {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise SpecFileError(f"{path} is not YAML: {e}") from None
    if not isinstance(raw, dict):
        raise SpecFileError(f"{path}: expected a KRaftCluster object")
    raw.pop("status", None)
    raw.setdefault("metadata", {}).setdefault("generation", 1)
    try:
        return KRaftCluster.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(f"{_field(err['loc'])}: {err['msg']}" for err in e.errors())
        raise SpecFileError(f"{path}: {problems}") from None


def _field(loc: Sequence[Any]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _status_path(runtime: LocalRuntime, cluster: KRaftCluster) -> Path:
    return runtime.cluster_dir(cluster) / _STATUS_FILE


def _load_status(path: Path) -> tuple[KRaftClusterStatus | None, dict[str, Any]]:
    if not path.exists():
        return None, {}
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    status = document.get("status")
    return (KRaftClusterStatus.model_validate(status) if status else None), document.get("metadata", {})


def _save_status(path: Path, cluster: KRaftCluster, status: KRaftClusterStatus, spec_digest: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "metadata": {
            "generation": cluster.metadata.generation,
            "creationTimestamp": cluster.metadata.creation_timestamp,
            "specDigest": spec_digest,
        },
        "status": status.model_dump(mode="json", by_alias=True, exclude_none=True),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    tmp.replace(path)


def _with_local_state(cluster: KRaftCluster, runtime: LocalRuntime) -> tuple[KRaftCluster, str]:
    """The cluster with its stored status, generation and creation time (bumping the generation
    when the spec changed since the last run, as the API server does)."""
    status, meta = _load_status(_status_path(runtime, cluster))
    digest = cluster.spec.model_dump_json()
    generation = int(meta.get("generation") or 1)
    if meta.get("specDigest") not in (None, digest):
        generation += 1
    created = meta.get("creationTimestamp") or datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    metadata = cluster.metadata.model_copy(update={"generation": generation, "creation_timestamp": created})
    return cluster.model_copy(update={"metadata": metadata, "status": status}), digest


# -- kraftwerk crd -------------------------------------------------------------------------------------
def _run_crd(args: argparse.Namespace, out: TextIO) -> int:
    out.write(crd_yaml())
    return 0


# -- kraftwerk plan ------------------------------------------------------------------------------------
def _run_plan(args: argparse.Namespace, out: TextIO) -> int:
    cluster = load_cluster(Path(args.file))
    runtime = LocalRuntime(args.state_dir)
    cluster, _ = _with_local_state(cluster, runtime)
    reconciler = Reconciler(runtime, act=False, admin_timeout_ms=1000)
    result = asyncio.run(reconciler.reconcile(cluster))
    _print_plan(cluster, result, out=out)
    degraded = result.status.condition(ConditionType.DEGRADED)
    return 1 if degraded is not None and degraded.reason == "InvalidSpec" else 0


def _print_plan(cluster: KRaftCluster, result: Plan, *, out: TextIO) -> None:
    name = f"kraftcluster/{cluster.metadata.name}"
    if result.actions:
        print(f"{name}: next, in order:", file=out)
        for action in result.actions:
            print(f"  {type(action).__name__:<14} {action.reason}", file=out)
    else:
        print(f"{name}: no action", file=out)
    if result.waiting_for:
        print(f"  waiting for: {result.waiting_for}", file=out)
    for condition in result.status.conditions:
        message = f": {condition.message}" if condition.message else ""
        print(f"  {condition.type.value}={condition.status.value} ({condition.reason}){message}", file=out)


# -- kraftwerk up --------------------------------------------------------------------------------------
def _run_up(args: argparse.Namespace, out: TextIO) -> int:
    path = Path(args.file)
    cluster = load_cluster(path)
    runtime = LocalRuntime(args.state_dir)
    stop: list[int] = []

    def request_stop(signum: int, frame: object) -> None:
        stop.append(signum)

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return asyncio.run(_up_loop(args, path=path, cluster=cluster, runtime=runtime, stop=stop, out=out))
    finally:
        codes = runtime.stop_all()
        for node_id, code in sorted(codes.items()):
            print(f"node {node_id} stopped (exit code {code})", file=out, flush=True)
        for s, handler in previous.items():
            signal.signal(s, handler)


async def _up_loop(
    args: argparse.Namespace, *, path: Path, cluster: KRaftCluster, runtime: LocalRuntime, stop: list[int], out: TextIO
) -> int:
    reconciler = Reconciler(runtime, rng=random.Random())
    if args.metrics_port:
        reconciler.metrics.serve(args.metrics_port, addr="127.0.0.1")
        print(f"operator metrics: http://127.0.0.1:{args.metrics_port}/metrics", file=out)
    started = time.monotonic()
    deadline = None if args.duration_s is None else started + args.duration_s
    events: list[tuple[datetime, Event]] = []
    last_row = ""
    ready_once = False
    topic_done = False
    print(f"kraftwerk up: {path} on the local runtime in {runtime.cluster_dir(cluster)}", file=out, flush=True)
    while not stop and (deadline is None or time.monotonic() < deadline):
        try:
            cluster = load_cluster(path)  # edits to the file are picked up, as `kubectl apply` would
        except SpecFileError as e:
            print(f"Warning: {e} (keeping the last good spec)", file=out, flush=True)
        cluster, digest = _with_local_state(cluster, runtime)
        result = await reconciler.reconcile(cluster)
        _save_status(_status_path(runtime, cluster), cluster, result.status, digest)
        now = datetime.now(tz=UTC)
        for event in result.events:
            events.append((now, event))
            print(f"{event.type.value:<8} {event.reason:<18} {event.message}", file=out, flush=True)
        created = datetime.strptime(cluster.metadata.creation_timestamp or "", "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        header, row = get_wide(cluster, result.status, created=created, now=now).splitlines()
        changed = _without_age(row)
        if changed != last_row:
            # As `kubectl get kc -o wide -w`: the header once, then a row on every change.
            print(row if last_row else f"{header}\n{row}", file=out, flush=True)
            last_row = changed
        ready = result.status.condition(ConditionType.READY)
        if ready is not None and ready.status is ConditionStatus.TRUE and not ready_once:
            ready_once = True
            print(f"\nReady after {time.monotonic() - started:.1f} s\n", file=out)
            if args.demo_topic and not topic_done:
                topic_done = await _demo_topic(cluster, runtime, result, name=args.demo_topic, out=out,
                                               security=reconciler.admin_security(cluster))
                # Observe once more so the status (and describe) counts the demo topic's partitions.
                cluster = cluster.model_copy(update={"status": result.status})
                result = await reconciler.reconcile(cluster)
                _save_status(_status_path(runtime, cluster), cluster, result.status, digest)
            print("$ kubectl describe kc " + cluster.metadata.name, file=out)
            print(describe(cluster, result.status, events=events, now=now), file=out, flush=True)
            if args.until_ready:
                return 0
        await _sleep(max(0.2, result.requeue_after_ms / 1000), stop)
    return 0 if ready_once or not args.until_ready else 1


def _without_age(row: str) -> str:
    """The row minus its AGE column, so that only real changes print a new row."""
    return re.sub(r"\s+\d+[smhd][\dsmhd]*\s+", " ", row)


async def _demo_topic(
    cluster: KRaftCluster, runtime: LocalRuntime, result: Plan, *, name: str, out: TextIO,
    security: ClientSecurity | None,
) -> bool:
    """Create the demo topic once the cluster is Ready (only when it has brokers). Under spec.tls
    the operator's own identity creates it, and the describe runs with it (a `--command-config`
    naming the operator's Secret files) on the brokers' REPLICATION listener."""
    from kraft_operator.admin import AdminError, create_topic

    spec = cluster.spec
    brokers = sum(p.replicas for p in spec.node_pools if Role.BROKER in p.roles)
    if brokers == 0:
        print("(no broker pool: no demo topic)", file=out)
        return True
    layout = runtime.layout(cluster)
    nodes = desired_nodes(namespace=cluster.metadata.namespace or "default", cluster=cluster.metadata.name,
                          spec=spec, status=result.status)
    controllers = [
        (layout.advertised_host(n.ref), layout.port(n.ref, listener=CONTROLLER_LISTENER, spec_port=spec.controller_port))
        for n in nodes if n.is_controller
    ]
    try:
        created = await create_topic(controllers, name=name, partitions=3, replication_factor=min(3, brokers),
                                     security=security)
    except AdminError as e:
        print(f"Warning: demo topic {name}: {e}", file=out)
        return False
    first = spec.listeners[0]
    bootstrap = ",".join(
        f"{layout.advertised_host(n.ref)}:{layout.port(n.ref, listener=first.name, spec_port=first.port)}"
        for n in nodes if n.is_broker
    )
    print(f"{'Created' if created else 'Found'} topic {name} (3 partitions, RF {min(3, brokers)}); "
          f"clients: --bootstrap-server {bootstrap}", file=out)
    if spec.tls is None:
        await _describe_topic(bootstrap, name=name, out=out)
        return True
    replication = ",".join(
        f"{layout.advertised_host(n.ref)}:"
        f"{layout.port(n.ref, listener=REPLICATION_LISTENER, spec_port=spec.tls.replication_port)}"
        for n in nodes if n.is_broker
    )
    secret = runtime.secrets.path(cluster.metadata.namespace or "default", operator_secret(cluster.metadata.name))
    with tempfile.TemporaryDirectory(prefix="kraftwerk-admin-") as directory:
        config = Path(directory) / "admin.properties"
        config.write_text(format_properties({
            "security.protocol": "SSL", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(secret / KEYSTORE_KEY),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(secret / TRUSTSTORE_KEY)}), encoding="utf-8")
        await _describe_topic(replication, name=name, out=out, command_config=str(config))
    return True


async def _describe_topic(bootstrap: str, *, name: str, out: TextIO, command_config: str | None = None) -> None:
    """Run `kraft topics --describe` against the brokers, as a user would, and print its output."""
    arguments = ["topics", "--bootstrap-server", bootstrap, "--describe", "--topic", name]
    if command_config is not None:
        arguments += ["--command-config", command_config]
    print(f"$ kraft {' '.join(arguments)}", file=out, flush=True)
    process = await asyncio.create_subprocess_exec(
        *_KRAFT, *arguments, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout=_DESCRIBE_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        print(f"Warning: kraft topics --describe gave no answer within {_DESCRIBE_TIMEOUT_S:.0f} s", file=out)
        return
    print(output.decode(errors="replace").rstrip(), file=out, flush=True)
    if process.returncode != 0:
        print(f"Warning: kraft topics --describe exited with {process.returncode}", file=out)


async def _sleep(seconds: float, stop: list[int]) -> None:
    end = time.monotonic() + seconds
    while not stop and time.monotonic() < end:
        await asyncio.sleep(min(0.1, end - time.monotonic()))


# -- kraftwerk operator --------------------------------------------------------------------------------
def _run_operator(args: argparse.Namespace, out: TextIO) -> int:
    if importlib.util.find_spec("kraft_operator.handlers") is None:
        print(
            "Error: the kopf handlers (kraft_operator.handlers) are not in this build yet; "
            "`kraftwerk up -f FILE` runs the same reconciler on the local runtime.",
            file=sys.stderr,
        )
        return 2
    handlers = importlib.import_module("kraft_operator.handlers")
    result: int = handlers.run(args)
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kraftwerk", description="kraftwerk: KRaft clusters as KRaftCluster resources")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    crd = sub.add_parser("crd", help="print the KRaftCluster CustomResourceDefinition")
    crd.set_defaults(func=_run_crd)
    for name, help_text, func in (
        ("plan", "print what the operator would do next (local runtime), and why", _run_plan),
        ("up", "run the reconciler on the local runtime until interrupted", _run_up),
    ):
        command = sub.add_parser(name, help=help_text)
        command.add_argument("-f", "--filename", dest="file", required=True, help="the KRaftCluster YAML file")
        command.add_argument("--state-dir", default=_DEFAULT_STATE_DIR,
                             help=f"where the local runtime keeps nodes and status (default {_DEFAULT_STATE_DIR})")
        command.set_defaults(func=func)
        if name == "up":
            command.add_argument("--duration-s", type=float, default=None, help="stop after this many seconds")
            command.add_argument("--until-ready", action="store_true", help="stop (nodes too) once Ready")
            command.add_argument("--demo-topic", default="demo", help="topic created once Ready ('' for none)")
            command.add_argument("--metrics-port", type=int, default=0, help="serve operator /metrics here (0: off)")
    operator = sub.add_parser("operator", help="run the kopf operator (in-cluster or from a kubeconfig)")
    operator.add_argument("--namespace", "-n", action="append", default=[], help="namespace(s) to watch")
    operator.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    operator.add_argument("--metrics-port", type=int, default=8080, help="operator /metrics port")
    operator.add_argument("--peering", default="kraftwerk", help="kopf peering name")
    if importlib.util.find_spec("kraft_operator.handlers") is not None:
        importlib.import_module("kraft_operator.handlers").add_arguments(operator)
    operator.set_defaults(func=_run_operator)
    pipeline_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc: int = args.func(args, out or sys.stdout)
    except SpecFileError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return rc
