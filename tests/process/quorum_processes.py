"""Real controller processes on loopback for the process-level tests (and nothing else).

`ProcessCluster` writes server.properties files with short raft timeouts, formats storage with
`kraft storage format`, starts `kraft server start` as OS processes, talks to each node's HTTP
endpoint (status, the append-only test store) and runs `kraft metadata-quorum` like a user would.
The short-lived tools (`storage format`, `metadata-quorum`) run through the same `main` as the
console script but in this process (`kraft_tool`): an interpreter start costs about a second on a
busy machine, and the tests call them dozens of times. `kraft()` runs the real console script.
Every process it starts is killed with SIGKILL by `cleanup()` (the fixture's finalizer), so a
failing test never leaks a node.

CI runs this on a small, sometimes busy machine, so the harness never relies on timing: it waits
for conditions (a leader every live node agrees on, an entry applied) up to generous deadlines,
treats a node that is slow to answer as "not yet" rather than as a failure, and picks ports
outside the kernel's ephemeral range (see `free_loopback_ports`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kraft_engine.cli.main import main as kraft_main
from kraft_engine.kafka_uuid import random_uuid, to_kafka_str
from kraft_engine.loopback_ports import free_loopback_ports as free_ports

T = TypeVar("T")

HOST = "127.0.0.1"
# The installed console script, as a user runs it (`python -m kraft_engine.cli.main` would load the
# CLI module twice, as __main__ and by name).
KRAFT = str(Path(sys.executable).parent / "kraft")
# Shorter than Kafka's defaults (election 1000 ms, fetch and request 2000 ms) to keep failover
# tests fast, yet with room for a loaded machine: an idle follower's Fetch is parked for 500 ms
# (Kafka's constant max wait) before it is answered, so a fetch or request timeout close to 500 ms
# turns any scheduling hiccup into a spurious election.
FAST_TIMEOUTS = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.election.backoff.max.ms": "300",
    "controller.quorum.fetch.timeout.ms": "1500",
    "controller.quorum.request.timeout.ms": "1500",
}
# How long a node may take to answer one HTTP request before the harness calls it unresponsive.
# A loaded node answers late, not never; polling loops retry until their own deadline.
HTTP_TIMEOUT_S = 10.0
# From launch to serving HTTP. An interpreter start is about a second on a quiet machine, but
# under pytest-xdist beside Spark JVMs and Kafka's, on two cores, six nodes loading at once were
# seen to take more than a minute; a node that exits instead is reported at once.
START_TIMEOUT_S = 180.0


def kraft(*args: str, timeout_s: float = 60, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the `kraft` command in a subprocess, as a user would."""
    result = subprocess.run(
        [KRAFT, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kraft {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def start_refused(config: Path) -> str:
    """`kraft server start` on storage it must refuse: exit 1, exactly one `Error: ...` line (the
    last one), no traceback. Returns that line."""
    result = kraft("server", "start", "--config", str(config), timeout_s=60)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    assert result.stderr.rstrip().endswith(errors[0]), result.stderr
    return errors[0]


# Tools run in this process redirect sys.stdin/sys.stdout/sys.stderr, which are process-wide.
_IN_PROCESS_TOOL = threading.Lock()


@contextlib.contextmanager
def _redirect_stdin(stream: io.StringIO) -> Iterator[None]:
    saved, sys.stdin = sys.stdin, stream
    try:
        yield
    finally:
        sys.stdin = saved


def kraft_tool(*args: str, check: bool = False, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run a `kraft` tool in this process: the console script's parser and code, its exit code and
    output; `stdin` is what the tool reads from its standard input (then end of file)."""
    out, err = io.StringIO(), io.StringIO()
    with _IN_PROCESS_TOOL, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            _redirect_stdin(io.StringIO(stdin)):
        try:
            code = kraft_main(list(args))
        except SystemExit as e:  # argparse's refusals exit
            code = e.code if isinstance(e.code, int) else 1
    result = subprocess.CompletedProcess([KRAFT, *args], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"kraft {' '.join(args)} failed ({code}):\n{result.stdout}\n{result.stderr}")
    return result


def wait_for(condition: Callable[[], T | None], *, timeout_s: float, what: str, interval_s: float = 0.05) -> T:
    """Poll `condition` until it returns a truthy value.

    A condition that raises AssertionError (a node that did not answer, a tool that failed during
    an election) counts as "not yet"; the last such error is reported if the deadline passes.
    """
    deadline = time.monotonic() + timeout_s
    last_error: AssertionError | None = None
    while True:
        try:
            value = condition()
        except AssertionError as e:
            last_error, value = e, None
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"; last error: {last_error}" if last_error is not None else ""
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{detail}") from last_error
        time.sleep(interval_s)


@dataclass
class Node:
    node_id: int
    port: int
    http_port: int
    data_dir: Path
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"


@dataclass
class ProcessCluster:
    root: Path
    cluster_id: str = ""
    nodes: dict[int, Node] = field(default_factory=dict)
    extra_config: dict[str, str] = field(default_factory=dict)
    # A command a node's process runs under (`setpriv ...` to drop capabilities, say).
    launch_prefix: dict[int, list[str]] = field(default_factory=dict)

    # -- configuration ---------------------------------------------------------------------------
    def add_node(self, node_id: int) -> Node:
        """A node with its own ports; every node's bootstrap servers then name every node."""
        port, http_port = free_ports(2)
        node_dir = self.root / f"controller-{node_id}"
        node_dir.mkdir(parents=True, exist_ok=True)
        node = Node(
            node_id=node_id,
            port=port,
            http_port=http_port,
            data_dir=node_dir / "metadata",
            config_path=node_dir / "server.properties",
            log_path=node_dir / "server.log",
        )
        self.nodes[node_id] = node
        # A node formatted without voters (--no-initial-controllers, a replaced disk) finds the
        # quorum only through controller.quorum.bootstrap.servers, so it must list every node,
        # not just those added before it.
        for each in self.nodes.values():
            self.write_config(each)
        return node

    def bootstrap_servers(self, node_ids: list[int] | None = None) -> str:
        ids = sorted(self.nodes) if node_ids is None else node_ids
        return ",".join(self.nodes[i].address for i in ids)

    def write_config(self, node: Node, *, bootstrap_ids: list[int] | None = None) -> None:
        properties = {
            "process.roles": "controller",
            "node.id": str(node.node_id),
            "listeners": f"CONTROLLER://{HOST}:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            "controller.quorum.bootstrap.servers": self.bootstrap_servers(bootstrap_ids),
            "log.dirs": str(node.data_dir),
            "kraftwerk.metrics.port": str(node.http_port),
            "kraftwerk.test.state.machine.enable": "true",
            **FAST_TIMEOUTS,
            **self.extra_config,
        }
        node.config_path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()), encoding="utf-8")

    def random_uuid(self) -> str:
        # What `kraft storage random-uuid` prints, without a process start per id.
        return to_kafka_str(random_uuid())

    def format(self, node_id: int, *flags: str) -> subprocess.CompletedProcess[str]:
        if not self.cluster_id:
            self.cluster_id = self.random_uuid()
        node = self.nodes[node_id]
        return kraft_tool("storage", "format", "-c", str(node.config_path), "-t", self.cluster_id, *flags,
                          check=True)

    def format_initial(self, node_ids: list[int], *flags: str) -> str:
        """Format every node as one dynamic quorum (`--initial-controllers`); returns that flag."""
        initial = ",".join(f"{i}@{HOST}:{self.nodes[i].port}:{self.random_uuid()}" for i in node_ids)
        if not self.cluster_id:
            self.cluster_id = self.random_uuid()
        for node_id in node_ids:
            self.format(node_id, "--initial-controllers", initial, *flags)
        return initial

    # -- processes -------------------------------------------------------------------------------
    def start(self, node_id: int) -> Node:
        self.start_all([node_id])
        return self.nodes[node_id]

    def start_all(self, node_ids: Iterable[int]) -> None:
        """Start the nodes together (their interpreters load in parallel), then wait for each to serve."""
        started = list(node_ids)
        for node_id in started:
            self.launch(node_id)
        for node_id in started:
            node = self.nodes[node_id]

            def serving_or_exited(node: Node = node) -> bool:
                return self.status(node.node_id) is not None or self._exited(node)

            wait_for(serving_or_exited, timeout_s=START_TIMEOUT_S, what=f"controller {node_id} to serve HTTP")
            if self._exited(node):
                raise AssertionError(f"controller {node_id} exited at start:\n{self.log(node_id)}")

    def launch(self, node_id: int) -> None:
        """Start the node's process without waiting for it to serve (it may refuse or stop)."""
        node = self.nodes[node_id]
        if node.process is not None and node.process.poll() is None:
            raise AssertionError(f"controller {node_id} is already running")
        with node.log_path.open("ab") as log:
            node.process = subprocess.Popen(
                [*self.launch_prefix.get(node_id, []), KRAFT, "server", "start", "--config", str(node.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _exited(self, node: Node) -> bool:
        return node.process is not None and node.process.poll() is not None

    def signal(self, node_id: int, signum: int) -> None:
        process = self.nodes[node_id].process
        if process is None:
            raise AssertionError(f"controller {node_id} was never started")
        os.kill(process.pid, signum)

    def kill(self, node_id: int) -> None:
        process = self.nodes[node_id].process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=60)

    def stop(self, node_id: int, *, timeout_s: float = 60) -> int:
        """SIGTERM and wait: the graceful path. Returns the exit code."""
        process = self.nodes[node_id].process
        if process is None:
            raise AssertionError(f"controller {node_id} was never started")
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        return process.wait(timeout=timeout_s)

    def cleanup(self) -> None:
        for node in self.nodes.values():
            process = node.process
            if process is None:
                continue
            if process.poll() is None:
                # A SIGSTOPped process still dies of SIGKILL.
                process.kill()
            process.wait(timeout=60)

    def log(self, node_id: int) -> str:
        path = self.nodes[node_id].log_path
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    # -- HTTP ------------------------------------------------------------------------------------
    def http(self, node_id: int, path: str, *, body: Any = None,
             timeout_s: float = HTTP_TIMEOUT_S) -> tuple[int, Any] | None:
        node = self.nodes[node_id]
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://{HOST}:{node.http_port}{path}", data=data,
                                         method="GET" if data is None else "POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            with e:
                return e.code, json.loads(e.read() or b"null")
        except (OSError, ValueError):
            return None

    def http_text(self, node_id: int, path: str) -> str:
        url = f"http://{HOST}:{self.nodes[node_id].http_port}{path}"
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            return str(response.read().decode())

    def status(self, node_id: int) -> dict[str, Any] | None:
        node = self.nodes[node_id]
        if node.process is None or node.process.poll() is not None:
            return None
        answer = self.http(node_id, "/kraftwerk/status")
        return None if answer is None or answer[0] != 200 else answer[1]

    def status_of(self, node_id: int) -> dict[str, Any]:
        """The status of a node that is running; a node slow to answer is asked again."""
        return wait_for(lambda: self.status(node_id), timeout_s=60, what=f"controller {node_id}'s status")

    def statuses(self, node_ids: list[int] | None = None) -> dict[int, dict[str, Any]]:
        found = {}
        for node_id in sorted(self.nodes) if node_ids is None else node_ids:
            status = self.status(node_id)
            if status is not None:
                found[node_id] = status
        return found

    def leader(self, node_ids: list[int] | None = None) -> int | None:
        """The node that reports itself leader in the highest epoch any answering node knows.

        A deposed leader that has not heard of the next epoch yet still says "Leader"; it is not
        the leader while another node already is in a later epoch (an election under way).
        """
        statuses = self.statuses(node_ids)
        leaders = [s for s in statuses.values() if s["role"] == "Leader"]
        if not leaders:
            return None
        best = max(leaders, key=lambda s: s["epoch"])
        if any(s["epoch"] > best["epoch"] for s in statuses.values()):
            return None
        return int(best["node_id"])

    def wait_for_leader(self, node_ids: list[int] | None = None, *, timeout_s: float = 60,
                        other_than: int | None = None) -> int:
        def found() -> int | None:
            leader = self.leader(node_ids)
            return leader if leader is not None and leader != other_than else None

        return wait_for(found, timeout_s=timeout_s, what="a leader")

    def append(self, values: list[str], *, timeout_s: float = 60, node_ids: list[int] | None = None) -> dict[str, Any]:
        """Append through whichever node is leader (retrying across elections)."""

        def attempt() -> dict[str, Any] | None:
            leader = self.leader(node_ids)
            if leader is None:
                return None
            answer = self.http(leader, "/kraftwerk/test/append", body={"values": values})
            if answer is not None and answer[0] == 200:
                return dict(answer[1])
            return None

        return wait_for(attempt, timeout_s=timeout_s, what=f"append of {values}")

    def entries(self, node_id: int, *, timeout_s: float = 60) -> list[tuple[int, str]]:
        """The node's committed entries; a node that is slow to answer is asked again."""
        node = self.nodes[node_id]
        deadline = time.monotonic() + timeout_s
        answer = self.http(node_id, "/kraftwerk/test/entries")
        while answer is None:
            if self._exited(node) or time.monotonic() > deadline:
                raise AssertionError(f"controller {node_id} did not list its entries within {timeout_s} s")
            time.sleep(0.05)
            answer = self.http(node_id, "/kraftwerk/test/entries")
        if answer[0] != 200:
            raise AssertionError(f"controller {node_id} did not list its entries: {answer}")
        return [(int(offset), str(value)) for offset, value in answer[1]["entries"]]


def metadata_quorum(cluster: ProcessCluster, *args: str, bootstrap_ids: list[int] | None = None,
                    check: bool = False) -> subprocess.CompletedProcess[str]:
    return kraft_tool("metadata-quorum", "--bootstrap-controller", cluster.bootstrap_servers(bootstrap_ids), *args,
                      check=check)


def describe_status(cluster: ProcessCluster, *, bootstrap_ids: list[int] | None = None) -> dict[str, Any]:
    result = metadata_quorum(cluster, "--output", "json", "describe", "--status", bootstrap_ids=bootstrap_ids,
                             check=True)
    return dict(json.loads(result.stdout))


def voter_ids(status: dict[str, Any]) -> list[int]:
    return sorted(int(v["id"]) for v in status["currentVoters"])


def directory_of(status: dict[str, Any], node_id: int) -> str:
    for replica in [*status["currentVoters"], *status["currentObservers"]]:
        if replica["id"] == node_id:
            return str(replica["directoryId"])
    raise AssertionError(f"node {node_id} is neither voter nor observer in {status}")
