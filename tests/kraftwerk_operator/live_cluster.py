"""A KRaftCluster run by `kraftwerk up` on engine processes, as the lifecycle process tests under a
live producer drive it: the spec file edited as a user would, the status the local runtime writes,
the nodes' processes (pids, signals, ports held so one cannot start again), a topic placed on chosen
brokers, and the operator's event lines. Every wait is for a settled state, with a generous
timeout: these tests run on a loaded machine."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import textwrap
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from kraft_engine.storage.java_properties import parse_properties

from .local_state import written_status
from .test_roll_process import _wait, start_up
from .workload import terminate

__all__ = ["LiveCluster", "create_topic", "describe_partition", "ready", "settled"]


def ready(status: dict | None) -> bool:
    return status is not None and any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])


def settled(status: dict | None) -> bool:
    """Ready, nothing under way, no runbook open, no partition short of replicas: a state that no
    longer moves on its own."""
    return (ready(status) and status is not None and status.get("operation") is None and not status.get("runbooks")
            and (status.get("partitions") or {}).get("underReplicated", 1) == 0)


class LiveCluster:
    """One cluster's spec file and state directory under `tmp_path`; `running()` runs `kraftwerk up`."""

    def __init__(self, tmp_path: Path, spec_text: str, *, name: str, namespace: str = "default") -> None:
        self.name, self.namespace = name, namespace
        self.spec = tmp_path / f"{name}.yaml"
        self.spec.write_text(textwrap.dedent(spec_text))
        self.state = (tmp_path / "state").resolve()  # as the local runtime names its files
        self.log = tmp_path / "up.log"
        self.acks = tmp_path / "acks.jsonl"
        self.up: subprocess.Popen | None = None

    @contextlib.contextmanager
    def running(self, *extra: str) -> Iterator[LiveCluster]:
        """`kraftwerk up -f spec` in the background, stopped with SIGTERM (as Ctrl-C would)."""
        self.up = start_up(self.spec, self.state, self.log, *extra)
        try:
            yield self
        finally:
            terminate(self.up, timeout_s=120)

    # -- what the operator wrote ---------------------------------------------------------------------
    def status(self) -> dict | None:
        return written_status(self.state, self.name, namespace=self.namespace)

    def wait(self, what: str, check: Callable[[], Any], *, timeout_s: float) -> Any:
        assert self.up is not None, "kraftwerk up is not running"
        return _wait(what, check, timeout_s=timeout_s, up=self.up, log=self.log)

    def events(self, reason: str) -> list[str]:
        """The operator's event lines with this reason, in order (`<type> <reason> <message>`)."""
        pattern = re.compile(rf"^\w+\s+{reason}\s+(.*)$")
        return [m.group(1) for line in self.log.read_text().splitlines() if (m := pattern.match(line))]

    def edit(self, change: Callable[[dict], None]) -> None:
        """`kubectl apply` of an edited spec."""
        doc = yaml.safe_load(self.spec.read_text())
        change(doc)
        self.spec.write_text(yaml.safe_dump(doc))

    # -- the nodes -----------------------------------------------------------------------------------
    def node_dir(self, node_id: int) -> Path:
        return self.state / self.namespace / self.name / f"node-{node_id}"

    def pid(self, node_id: int) -> int | None:
        try:
            return int((self.node_dir(node_id) / "pid").read_text())
        except (OSError, ValueError):
            return None

    def live_pid(self, node_id: int) -> int | None:
        """The node's pid while that process runs (its command line names the node's config: never
        a pid the system has since given to another process)."""
        pid = self.pid(node_id)
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if pid is not None else b""
        except OSError:
            return None
        return pid if str(self.node_dir(node_id) / "server.properties").encode() in cmdline else None

    def config(self, node_id: int) -> dict[str, str]:
        return parse_properties((self.node_dir(node_id) / "server.properties").read_text())

    def bootstrap(self, node_ids: list[int]) -> str:
        """The brokers' client addresses (their advertised listener)."""
        return ",".join(self.config(i)["advertised.listeners"].split("//", 1)[1] for i in node_ids)

    def controllers(self, node_ids: list[int]) -> str:
        """The controllers' addresses (their CONTROLLER listener), for `--bootstrap-controller`."""
        found = []
        for node_id in node_ids:
            listeners = self.config(node_id)["listeners"].split(",")
            found.append(next(x for x in listeners if x.startswith("CONTROLLER://")).split("//", 1)[1])
        return ",".join(found)

    def signal(self, node_id: int, signum: int) -> None:
        pid = self.live_pid(node_id)
        assert pid is not None, f"node {node_id} has no running process"
        os.kill(pid, signum)

    def ports(self, node_id: int) -> list[int]:
        """Every port the local runtime gives node `node_id` (`runtime.local`: base + 10*id + slot)."""
        base = int(parse_properties((self.state / self.namespace / self.name / "runtime.properties")
                                    .read_text())["base.port"])
        return [base + 10 * node_id + slot for slot in range(10)]

    @contextlib.contextmanager
    def kept_down(self, node_ids: list[int], *, timeout_s: float = 120) -> Iterator[None]:
        """SIGKILL the nodes and hold every port they bind, so each start the operator makes fails
        at once (a node that crash-loops, as a pod in CrashLoopBackOff does) until the block ends.
        The operator may start a node again between the kill and the bind: it is killed again."""
        held: list[socket.socket] = []
        try:
            deadline = time.monotonic() + timeout_s
            for node_id in node_ids:
                while True:
                    assert time.monotonic() < deadline, f"could not hold node {node_id}'s ports"
                    pid = self.live_pid(node_id)
                    if pid is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    bound = _listen_on(self.ports(node_id))
                    if bound is not None:
                        held += bound
                        break
                    time.sleep(0.2)
            yield
        finally:
            for sock in held:
                sock.close()


def _listen_on(ports: list[int]) -> list[socket.socket] | None:
    """Listening sockets on all of `ports` (127.0.0.1), or None (all closed again) when one is taken."""
    opened: list[socket.socket] = []
    for port in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(1)
        except OSError:
            sock.close()
            for other in opened:
                other.close()
            return None
        opened.append(sock)
    return opened


def create_topic(bootstrap: str, topic: str, *, assignments: dict[int, list[int]], min_isr: int) -> None:
    """A topic with these replica assignments (the first replica is the preferred leader)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            admin.create_topics([NewTopic(topic, replica_assignments=assignments,
                                          topic_configs={"min.insync.replicas": str(min_isr)})])
        finally:
            admin.close()


def describe_partition(bootstrap: str, topic: str, partition: int = 0) -> dict[str, Any]:
    """{"leader", "leader_epoch", "replicas", "isr"} of one partition, as kafka-python's admin reads it (Metadata)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            found = next(p for p in admin.describe_topics([topic])[0]["partitions"] if p["partition_index"] == partition)
            return {"leader": found["leader_id"], "leader_epoch": found["leader_epoch"],
                    "replicas": sorted(found["replica_nodes"]), "isr": sorted(found["isr_nodes"])}
        finally:
            admin.close()
