"""The local runtime: a KRaftCluster's nodes as processes and directories on this machine.

What Kubernetes gives the operator as objects, this runtime gives as files under
`<state-dir>/<namespace>/<cluster>/`:

    runtime.properties          the cluster's base port (picked free once, then kept)
    node-<id>/server.properties the node's rendered config (the ConfigMap)
    node-<id>/data-<volume>/    one log directory per volume (the PVCs)
    node-<id>/data-<volume>.lost-<directory id>-<ms>/  a failed volume ReplaceVolume put aside
    node-<id>/format.json       the format "Job"'s outcome: phase, message, directory ids
    node-<id>/format.log        its output
    node-<id>/server.log        the node's output (the pod's log)
    node-<id>/pid               the node's process id (so a restarted `kraftwerk up` adopts it)
    node-<id>/started.json      the revision the process was started with, and when (the pod's
                                annotations and start time)
    node-<id>/manual-rolling-update  present: restart this node in a roll (the pod annotation)

and the namespace's Secrets (`spec.tls`: CAs, node and user credentials) as
`<state-dir>/<namespace>/_secrets/<name>/<key>`, readable by this user only (`local_secrets`).

Format "Jobs" are `kraft storage format` runs, pods are `kraft server start` processes. A pool with
`implementation: apache-kafka` runs Apache Kafka 4.1 from the jars that `scripts/fetch-kafka-jars`
caches (`kafka.tools.StorageTool format` and `kafka.Kafka`) with the very same config, so everything
the operator does can be tried against the real Kafka too.

Ports: node N's listeners sit at `base + 10*N + slot` on 127.0.0.1, slot 0 for CONTROLLER, 1 for
the engine's /metrics, 2.. for the spec's listeners in order.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.loopback_ports import HOST, free_port_block
from kraft_engine.storage.java_properties import JavaPropertiesError, format_properties, parse_properties
from kraft_engine.storage.meta_properties import MetaPropertiesError, read_meta_properties
from kraft_operator.model import Implementation, KRaftCluster, Role
from kraft_operator.plan import (
    CONTROLLER_LISTENER,
    Action,
    FormatJobFacts,
    FormatStorage,
    JobPhase,
    NodeFacts,
    NodeRef,
    Observed,
    PodPhase,
    ReplaceVolume,
    ResizeVolume,
    RestartNode,
    StartNode,
    StopNode,
    VolumeFacts,
    WriteConfig,
)
from kraft_operator.plan.security import REPLICATION_LISTENER, node_secret
from kraft_operator.runtime.kafka_java import kafka_server_command, kafka_storage_command
from kraft_operator.runtime.local_secrets import LocalSecrets
from kraft_operator.runtime.port import RuntimeActionError

__all__ = ["HOST", "LocalLayout", "LocalRuntime", "kafka_classpath"]

_PORTS_PER_NODE = 10
_PORT_SPAN = 64 * _PORTS_PER_NODE
_STOP_TIMEOUT_S = 30.0
_REPO = Path(__file__).resolve().parents[3]
MANUAL_ROLL_FILE = "manual-rolling-update"
SECRETS_DIR = "_secrets"  # <state-dir>/<namespace>/_secrets/<name>/<key>: the namespace's Secrets


def kafka_classpath() -> tuple[str, str] | None:
    """(classpath, Kafka version) of the cached Apache Kafka jars, or None (no jars, or no java).

    Looked up where `scripts/fetch-kafka-jars` puts them: `$KAFKA_JARS_DIR`, else `.kafka-jars/`
    in the current directory or in this checkout."""
    if shutil.which("java") is None:
        return None
    roots = [Path(os.environ["KAFKA_JARS_DIR"])] if os.environ.get("KAFKA_JARS_DIR") else []
    roots += [Path.cwd() / ".kafka-jars", _REPO / ".kafka-jars"]
    for root in roots:
        if not root.is_dir():
            continue
        for version_dir in sorted(root.iterdir(), reverse=True):
            if any(version_dir.glob("kafka_2.13-*.jar")):
                return f"{version_dir}/*", version_dir.name
    return None


@dataclass(frozen=True, slots=True)
class LocalLayout:
    """Where the local runtime puts a cluster's nodes; pure, as `Layout` requires."""

    cluster_dir: str
    base_port: int
    listener_names: tuple[str, ...]

    def advertised_host(self, node: NodeRef) -> str:
        return HOST

    def bind_host(self, node: NodeRef) -> str:
        return HOST

    def port(self, node: NodeRef, *, listener: str, spec_port: int) -> int:
        if listener == CONTROLLER_LISTENER:
            slot = 0
        else:
            slot = 2 + self.listener_names.index(listener)
        return self.base_port + _PORTS_PER_NODE * node.node_id + slot

    def volume_path(self, node: NodeRef, *, volume_id: int) -> str:
        return f"{self.node_dir(node.node_id)}/data-{volume_id}"

    def metrics_port(self, node: NodeRef) -> int | None:
        return self.base_port + _PORTS_PER_NODE * node.node_id + 1

    def tls_dir(self, node: NodeRef) -> str:
        return f"{Path(self.cluster_dir).parent / SECRETS_DIR}/{node_secret(node.cluster, node.node_id)}"

    def certificate_hosts(self, node: NodeRef) -> tuple[str, ...]:
        return ("localhost", HOST)

    def node_dir(self, node_id: int) -> str:
        return f"{self.cluster_dir}/node-{node_id}"


@dataclass
class _Job:
    node_id: int
    process: subprocess.Popen[bytes]
    directories: tuple[str, ...]


class LocalRuntime:
    """The `Runtime` port on one machine. It starts processes as children of this one and stops
    them in `stop_all`; processes a previous run left behind are adopted through their pid files."""

    name = "local"

    def __init__(self, state_dir: str | Path) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.secrets = LocalSecrets(self.state_dir, directory_name=SECRETS_DIR)
        self._processes: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        self._jobs: dict[tuple[str, int], _Job] = {}
        self._controllers: set[tuple[str, int]] = set()

    # -- layout ------------------------------------------------------------------------------------
    def cluster_dir(self, cluster: KRaftCluster) -> Path:
        return self.state_dir / (cluster.metadata.namespace or "default") / cluster.metadata.name

    def layout(self, cluster: KRaftCluster) -> LocalLayout:
        directory = self.cluster_dir(cluster)
        return LocalLayout(
            cluster_dir=str(directory),
            base_port=self._base_port(directory),
            listener_names=tuple(listener.name for listener in cluster.spec.listeners)
            + ((REPLICATION_LISTENER,) if cluster.spec.tls is not None else ()),
        )

    def _base_port(self, directory: Path) -> int:
        path = directory / "runtime.properties"
        if path.exists():
            try:
                return int(parse_properties(path.read_text(encoding="utf-8"))["base.port"])
            except (KeyError, ValueError, JavaPropertiesError) as e:
                raise RuntimeActionError(f"{path} is damaged ({e}); remove it to pick new ports") from None
        base = self._free_port_block()
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(format_properties({"base.port": str(base)}), encoding="utf-8")
        return base

    def _free_port_block(self) -> int:
        """A base port whose whole block (node ids 0..63) is free now, from the range every local
        node's ports come from (`kraft_engine.loopback_ports`: below the ephemeral and NodePort
        ranges, `KRAFTWERK_PORT_RANGE` when set): a port from the ephemeral range can be taken by
        any outgoing connection while its node is down (a roll, a kill), and the node then cannot
        bind it again.
        """
        base = free_port_block(size=_PORT_SPAN, step=_PORTS_PER_NODE)
        if base is None:
            raise RuntimeActionError(f"no free block of {_PORT_SPAN} loopback ports found")
        return base

    # -- observe -----------------------------------------------------------------------------------
    async def observe(self, cluster: KRaftCluster) -> Observed:
        directory = self.cluster_dir(cluster)
        nodes: dict[int, NodeFacts] = {}
        jobs: dict[int, FormatJobFacts] = {}
        if not directory.is_dir():
            return Observed()
        pools = {p.name: p for p in cluster.spec.node_pools}
        recorded = {n.id: n.pool for n in (cluster.status.nodes if cluster.status else [])}
        for node_dir in sorted(directory.glob("node-*")):
            try:
                node_id = int(node_dir.name.removeprefix("node-"))
            except ValueError:
                continue
            key = (str(directory), node_id)
            job = self._job_facts(key, node_dir)
            if job is not None:
                jobs[node_id] = job
            config = _read_config(node_dir / "server.properties")
            phase, exit_code = self._phase(key, node_dir)
            started = _read_started(node_dir / "started.json")
            pool = recorded.get(node_id, "")
            implementation = pools[pool].implementation if pool in pools else Implementation.KRAFTWERK
            nodes[node_id] = NodeFacts(
                node_id=node_id,
                pool=pool,
                phase=phase,
                volumes=_volumes(node_dir),
                config=config,
                ready=phase is PodPhase.RUNNING,
                exit_code=exit_code,
                message=_as_configured(_log_tail(node_dir / "server.log"), node_dir) if phase is PodPhase.FAILED else "",
                version=_version(implementation),
                started_revision=started.get("revision") if phase is PodPhase.RUNNING else None,
                started_at_ms=started.get("startedAtMs") if phase is PodPhase.RUNNING else None,
                restart_requested=(node_dir / MANUAL_ROLL_FILE).exists(),
            )
        return Observed(nodes=nodes, format_jobs=jobs)

    def _phase(self, key: tuple[str, int], node_dir: Path) -> tuple[PodPhase, int | None]:
        process = self._processes.get(key)
        if process is not None:
            code = process.poll()
            if code is None:
                return PodPhase.RUNNING, None
            return (PodPhase.SUCCEEDED if code == 0 else PodPhase.FAILED), code
        pid = _read_pid(node_dir / "pid")
        if pid is not None and _alive(pid, marker=str(node_dir / "server.properties")):
            return PodPhase.RUNNING, None
        return PodPhase.ABSENT, None

    def _job_facts(self, key: tuple[str, int], node_dir: Path) -> FormatJobFacts | None:
        job = self._jobs.get(key)
        if job is not None:
            code = job.process.poll()
            if code is None:
                return FormatJobFacts(job.node_id, JobPhase.RUNNING)
            del self._jobs[key]
            self._finish_job(job, code, node_dir)
        outcome = node_dir / "format.json"
        if not outcome.exists():
            return None
        try:
            data = json.loads(outcome.read_text(encoding="utf-8"))
            return FormatJobFacts(
                node_id=key[1],
                phase=JobPhase(data["phase"]),
                message=str(data.get("message", "")),
                directory_ids={str(k): str(v) for k, v in data.get("directoryIds", {}).items()},
            )
        except (ValueError, KeyError) as e:
            return FormatJobFacts(key[1], JobPhase.FAILED, f"{outcome} is damaged: {e}")

    def _finish_job(self, job: _Job, code: int, node_dir: Path) -> None:
        directory_ids = {}
        for path in job.directories:
            try:
                meta = read_meta_properties(Path(path))
            except (OSError, MetaPropertiesError):
                continue
            if meta.directory_id is not None:
                directory_ids[path] = to_kafka_str(meta.directory_id)
        message = "" if code == 0 else _log_tail(node_dir / "format.log")
        outcome = {"phase": (JobPhase.SUCCEEDED if code == 0 else JobPhase.FAILED).value,
                   "exitCode": code, "message": message, "directoryIds": directory_ids}
        (node_dir / "format.json").write_text(json.dumps(outcome, indent=2), encoding="utf-8")

    # -- apply -------------------------------------------------------------------------------------
    async def apply(self, cluster: KRaftCluster, action: Action) -> None:
        directory = self.cluster_dir(cluster)
        node_dir = directory / f"node-{action.node.node_id}"
        node_dir.mkdir(parents=True, exist_ok=True)
        key = (str(directory), action.node.node_id)
        if isinstance(action, WriteConfig):
            text = format_properties(action.as_dict(), comments=(f"kraftwerk: {action.node.cluster} node {action.node.node_id}",))
            _write_atomically(node_dir / "server.properties", text)
        elif isinstance(action, FormatStorage):
            self._format(key, node_dir, action)
        elif isinstance(action, StartNode):
            self._start(key, node_dir, action)
        elif isinstance(action, RestartNode):
            await self._stop(key, node_dir, grace_s=action.grace_period_ms / 1000)
            (node_dir / MANUAL_ROLL_FILE).unlink(missing_ok=True)
            self._start(key, node_dir, action)
        elif isinstance(action, StopNode):
            # A node leaving the cluster: its controlled shutdown, then no restart. Its directories
            # (volumes) stay: deleting one is never automatic.
            await self._stop(key, node_dir, grace_s=action.grace_period_ms / 1000)
            self._processes.pop(key, None)
            self._controllers.discard(key)
            for name in ("pid", "started.json", MANUAL_ROLL_FILE):
                (node_dir / name).unlink(missing_ok=True)
            for volume_id in action.delete_volumes:
                shutil.rmtree(node_dir / f"data-{volume_id}", ignore_errors=True)
            kept = sorted(int(d.name.removeprefix("data-")) for d in node_dir.glob("data-*")
                          if d.name.removeprefix("data-").isdigit())
            deleted = (f"volume(s) {list(action.delete_volumes)} deleted (deleteClaim: true), {kept} kept"
                       if action.delete_volumes else f"volume(s) {kept} kept (deleteClaim: false)")
            _note(node_dir, f"removed from the cluster: stopped for good; {deleted}")
        elif isinstance(action, ReplaceVolume):
            # A broker's failed log directory: its controlled shutdown, then a new, empty directory
            # in its place. Whatever the old one still holds is kept aside, never deleted.
            await self._stop(key, node_dir, grace_s=action.grace_period_ms / 1000)
            self._processes.pop(key, None)
            for name in ("pid", "started.json"):
                (node_dir / name).unlink(missing_ok=True)
            volume = Path(action.path)
            if volume.exists():
                aside = volume.with_name(f"{volume.name}.lost-{action.lost_directory_id}-{int(time.time() * 1000)}")
                volume.rename(aside)
                _note(node_dir, f"volume {action.volume_id}: the failed {volume} kept aside as {aside.name}")
            volume.mkdir(parents=True)
            _note(node_dir, f"volume {action.volume_id}: a new, empty {volume} (it had directory id "
                  f"{action.lost_directory_id})")
        elif isinstance(action, ResizeVolume):
            # never planned here: local volumes report no requested size
            raise RuntimeActionError("the local runtime's directories have no size to grow")

    async def _stop(self, key: tuple[str, int], node_dir: Path, *, grace_s: float) -> None:
        """The node's controlled shutdown: SIGTERM, then SIGKILL after `grace_s` (a pod's
        termination grace period). Works on a process this runtime started or one it adopted."""
        process = self._processes.get(key)
        pid = process.pid if process is not None and process.poll() is None else _read_pid(node_dir / "pid")
        marker = str(node_dir / "server.properties")
        if pid is None or not _alive(pid, marker=marker):
            return
        os.kill(pid, signal.SIGTERM)
        started = time.monotonic()
        while time.monotonic() < started + grace_s:
            if process is not None and process.pid == pid:
                if process.poll() is not None:
                    _note(node_dir, f"stopped by SIGTERM: exit code {process.returncode} after "
                          f"{time.monotonic() - started:.1f} s")
                    return
            elif not _alive(pid, marker=marker):
                _note(node_dir, f"stopped by SIGTERM after {time.monotonic() - started:.1f} s")
                return
            await asyncio.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        if process is not None and process.pid == pid:
            process.wait()
        _note(node_dir, f"killed (SIGKILL): still running {grace_s:.0f} s after SIGTERM")

    def _format(self, key: tuple[str, int], node_dir: Path, action: FormatStorage) -> None:
        if key in self._jobs and self._jobs[key].process.poll() is None:
            return  # already running: applying twice is harmless
        for path in action.directories:
            Path(path).mkdir(parents=True, exist_ok=True)
        (node_dir / "format.json").unlink(missing_ok=True)
        args = action.format_arguments(config_path=str(node_dir / "server.properties"))
        command = [*self._command(action.implementation, tool="storage"), *args]
        with (node_dir / "format.log").open("ab") as log:
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._jobs[key] = _Job(action.node.node_id, process, action.directories)

    def _start(self, key: tuple[str, int], node_dir: Path, action: StartNode | RestartNode) -> None:
        running = self._processes.get(key)
        if running is not None and running.poll() is None:
            return
        pid = _read_pid(node_dir / "pid")
        if pid is not None and _alive(pid, marker=str(node_dir / "server.properties")):
            return
        config = str(node_dir / "server.properties")
        command = [*self._command(action.implementation, tool="server"), config]
        with (node_dir / "server.log").open("ab") as log:
            # Its own session: a terminal's Ctrl-C reaches `kraftwerk up` only, which then stops
            # every node gracefully (SIGTERM) in `stop_all`.
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._processes[key] = process
        self._controllers.discard(key)
        if Role.CONTROLLER in action.roles:
            self._controllers.add(key)
        _write_atomically(node_dir / "pid", str(process.pid))
        started = {"revision": action.revision, "startedAtMs": int(time.time() * 1000), "pid": process.pid}
        _write_atomically(node_dir / "started.json", json.dumps(started))

    def _command(self, implementation: Implementation, *, tool: str) -> list[str]:
        if implementation is Implementation.KRAFTWERK:
            run = [sys.executable, "-c", "import sys; from kraft_engine.cli.main import main; sys.exit(main())"]
            return [*run, "storage"] if tool == "storage" else [*run, "server", "start", "--config"]
        found = kafka_classpath()
        if found is None:
            raise RuntimeActionError(
                "implementation apache-kafka needs Apache Kafka's jars and java: run scripts/fetch-kafka-jars"
            )
        classpath, _ = found
        return kafka_storage_command(classpath) if tool == "storage" else kafka_server_command(classpath)

    # -- stop --------------------------------------------------------------------------------------
    def stop_all(self, *, timeout_s: float = _STOP_TIMEOUT_S) -> dict[int, int]:
        """SIGTERM every node this runtime started (their graceful shutdown), brokers first so that
        their controlled shutdown still finds the controllers, then the controllers; SIGKILL after
        `timeout_s`. Returns node id -> exit code."""
        codes: dict[int, int] = {}
        running = {key: p for key, p in self._processes.items() if p.poll() is None}
        brokers = {k: p for k, p in running.items() if k not in self._controllers}
        controllers = {k: p for k, p in running.items() if k in self._controllers}
        for group in (brokers, controllers):
            for process in group.values():
                process.send_signal(signal.SIGTERM)
            for (_, node_id), process in group.items():
                try:
                    codes[node_id] = process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    codes[node_id] = process.wait()
        for job in self._jobs.values():
            if job.process.poll() is None:
                job.process.wait(timeout=timeout_s)
        return codes

    def kill(self, cluster: KRaftCluster, node_id: int) -> None:
        """SIGKILL one node's process (tests and fault drills)."""
        process = self._processes.get((str(self.cluster_dir(cluster)), node_id))
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    async def close(self) -> None:
        self.stop_all()


def _read_config(path: Path) -> dict[str, str] | None:
    try:
        return parse_properties(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, JavaPropertiesError, UnicodeDecodeError):
        return {}


def _volumes(node_dir: Path) -> tuple[VolumeFacts, ...]:
    found = []
    for data in sorted(node_dir.glob("data-*")):
        try:
            volume_id = int(data.name.removeprefix("data-"))
        except ValueError:
            continue
        try:
            meta = read_meta_properties(data)
        except FileNotFoundError:
            found.append(VolumeFacts(volume_id=volume_id, path=str(data)))
            continue
        except (OSError, MetaPropertiesError):
            found.append(VolumeFacts(volume_id=volume_id, path=str(data)))
            continue
        found.append(
            VolumeFacts(
                volume_id=volume_id,
                path=str(data),
                cluster_id=meta.cluster_id,
                node_id=meta.node_id,
                directory_id=to_kafka_str(meta.directory_id) if meta.directory_id is not None else None,
            )
        )
    return tuple(found)


def _note(node_dir: Path, message: str) -> None:
    """A line of the runtime's own in the node's log, as a kubelet event would say it."""
    with (node_dir / "server.log").open("a", encoding="utf-8") as log:
        log.write(f"[kraftwerk local runtime] {message}\n")


def _write_atomically(path: Path, text: str) -> None:
    """Write a file readers may open at any moment (the next observe, a test, a human): a temporary
    file renamed over it, so a reader sees the old content or the new, never half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _read_started(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    revision = data.get("revision")
    started_at = data.get("startedAtMs")
    return {"revision": revision if isinstance(revision, str) and revision else None,
            "startedAtMs": started_at if isinstance(started_at, int) else None}


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int, *, marker: str) -> bool:
    """Whether `pid` is a live process whose command line names `marker` (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return marker.encode() in cmdline


def _as_configured(text: str, node_dir: Path) -> str:
    """`text` with each volume mounted through a symlink named by its configured path (a node may
    report the resolved one), as the plan knows it."""
    for volume in node_dir.glob("data-*"):
        if volume.is_symlink():
            text = text.replace(str(volume.resolve()), str(volume))
    return text


def _log_tail(path: Path, *, lines: int = 3) -> str:
    """Why a process ended: its last ERROR (or CRITICAL) line (a node that halts logs one), then its last lines."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    tail = kept[-lines:]
    recent = kept[-200:]
    error = None
    for level in ("CRITICAL", "FATAL", "ERROR"):  # the halt's own line before the errors leading to it
        error = next((line for line in reversed(recent) if f" {level} " in f" {line} "), None)
        if error is not None:
            break
    if error is not None and error not in tail:
        return error[:400] + " | " + " | ".join(tail)[-400:]
    return " | ".join(tail)[-500:]


def _version(implementation: Implementation) -> str | None:
    if implementation is Implementation.KRAFTWERK:
        try:
            return f"kraftwerk {importlib_metadata.version('kraftwerk')}"
        except importlib_metadata.PackageNotFoundError:
            return None
    found = kafka_classpath()
    return f"kafka {found[1]}" if found is not None else None
