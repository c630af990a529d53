"""A KRaftCluster run by `kraftwerk up` on engine processes, as the lifecycle process tests under a
live producer drive it: the spec file edited as a user would, the status the local runtime writes,
the nodes' processes (pids, signals, ports held so one cannot start again), a topic placed on chosen
brokers, the operator's event lines, and the scenario's live workload with its checker
(`workload`: a producer, a consumer in a group, `lifecycle_checker`). Every wait is for a settled
state, with a generous timeout: these tests run on a loaded machine."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import selectors
import signal
import socket
import subprocess
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from kraft_engine.storage.java_properties import parse_properties
from kraft_operator.admin import ClusterAdmin

from .lifecycle_checker import LifecycleChecker
from .local_state import written_status
from .test_roll_process import _wait, start_up
from .workload import acked_count, consuming, lost_records, producing, seen_count, terminate, unseen_records

__all__ = ["LiveCluster", "assert_in_order", "create_topic", "ready", "settled", "three_and_three"]


def three_and_three(name: str, *, config: dict[str, str] | None = None, lifecycle: dict[str, int] | None = None) -> str:
    """The spec of a cluster of three engine controllers and three engine brokers, one volume each,
    min.insync.replicas 2, a 60 s grace period, one partition for the consumer groups' offsets (the
    workload's group needs no more, and fewer partitions keep the rolls' recovery short); `config`
    and `lifecycle` add to those."""
    pool = {"storage": {"volumes": [{"id": 0, "size": "1Gi"}]}, "replicas": 3}
    return yaml.safe_dump({
        "apiVersion": "kraftwerk.io/v1alpha1", "kind": "KRaftCluster", "metadata": {"name": name},
        "spec": {"nodePools": [{"name": "controllers", "roles": ["controller"], **pool},
                               {"name": "brokers", "roles": ["broker"], **pool}],
                 "lifecycle": {"terminationGracePeriodSeconds": 60, **(lifecycle or {})},
                 "config": {"min.insync.replicas": "2", "offsets.topic.num.partitions": "1", **(config or {})}},
    })


def assert_in_order(output: str, steps: list[tuple[str, str]]) -> None:
    """The operator's event lines (`<type> <reason> <message>`) hold each (reason, message pattern)
    of `steps`, in this order."""
    at = 0
    for reason, text in steps:
        found = re.compile(rf"^\w+\s+{reason}\s+.*{text}", re.M).search(output, at)
        assert found is not None, (reason, output[at:][-4000:])
        at = found.end()


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
        self.seen = tmp_path / "seen.jsonl"
        self.up: subprocess.Popen | None = None
        self.checker: LifecycleChecker | None = None

    @contextlib.contextmanager
    def running(self, *extra: str) -> Iterator[LiveCluster]:
        """`kraftwerk up -f spec` in the background, stopped with SIGTERM (as Ctrl-C would)."""
        self.up = start_up(self.spec, self.state, self.log, *extra)
        try:
            yield self
        finally:
            terminate(self.up, timeout_s=120)

    @contextlib.contextmanager
    def workload(self, bootstrap: str, topic: str, *, partition: int = 0, min_isr: int = 2) -> Iterator[LifecycleChecker]:
        """The scenario's live workload, checked. From here on the lifecycle checker samples the
        cluster (`kept_down` and `signal` tell it what the test takes down itself); a producer
        (acks=all, idempotence) writes `topic`'s `partition` into `self.acks`; a consumer in group
        `<name>-readers` reads `topic` along into `self.seen` (the block starts once it has
        delivered a record: the group and its coordinator exist). When the block ends without an
        error the producer stops, the consumer reads on until it has delivered every acknowledged
        record, and the checker must have found neither two nodes down at once nor a partition under
        `min_isr` because of the operator. `outcome` then checks the records by offset."""
        checker = LifecycleChecker(self, min_isr=min_isr)
        self.checker = checker
        checker.start()
        try:
            with consuming(bootstrap, topic, self.seen, group=f"{self.name}-readers"):
                with producing(bootstrap, topic, self.acks, partition=partition):
                    self.wait("the group's consumer reading", lambda: seen_count(self.seen) > 0, timeout_s=180)
                    yield checker
                self.wait("the group's consumer to deliver every acknowledged record",
                          lambda: not unseen_records(self.acks, self.seen, partition=partition), timeout_s=300)
        finally:
            found = checker.stop()
            self.checker = None
        assert found == [], found[:10]
        assert len([s for s in checker.samples if s.partitions]) >= 5, checker.summary()

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

    def partition(self, topic: str, partition: int = 0, *, brokers: tuple[int, ...] = (3, 4, 5)) -> dict[str, Any]:
        """{"leader", "replicas", "isr"} of one partition, from the Metadata of the first of
        `brokers` that answers (only brokers that serve: a stalled or dead one is left out)."""
        async def ask() -> dict[str, Any]:
            addresses = [(host, int(port)) for host, port in (a.rsplit(":", 1) for a in self.bootstrap(list(brokers))
                                                                .split(","))]
            async with ClusterAdmin(brokers=addresses, timeout_ms=10_000) as admin:
                metadata = await admin.metadata()
            found = next(p for t in metadata.topics if t.name == topic for p in t.partitions if p.partition == partition)
            return {"leader": found.leader_id, "replicas": sorted(found.replicas), "isr": sorted(found.isr)}

        return asyncio.run(ask())

    def ready_with_topic(self, topic: str) -> str:
        """Wait until the cluster is settled with three brokers, create `topic` (one partition on
        brokers 3, 4, 5, led by 3, min.insync.replicas 2) and wait until it is in sync; returns the
        brokers' bootstrap."""
        self.wait("Ready with three brokers", lambda: settled(s := self.status()) and s["brokers"] == "3/3",
                  timeout_s=600)
        bootstrap = self.bootstrap([3, 4, 5])
        create_topic(bootstrap, topic, assignments={0: [3, 4, 5]}, min_isr=2)
        self.wait(f"{topic}-0 led by 3, in sync on 3-5",
                  lambda: (p := self.partition(topic))["leader"] == 3 and p["isr"] == [3, 4, 5], timeout_s=120)
        return bootstrap

    def more_acks(self, what: str, *, count: int = 20) -> None:
        """Wait until the producer has `count` more records acknowledged."""
        before = acked_count(self.acks)
        self.wait(what, lambda: acked_count(self.acks) >= before + count, timeout_s=120)

    def outcome(self, stored: dict[int, bytes]) -> tuple[int, list[dict], list[str]]:
        """(records acknowledged, those not read back in `stored`, the producer's failed sends)."""
        acked, lost = lost_records(self.acks, stored)
        return acked, lost, [line for line in self.acks.read_text().splitlines() if '"error"' in line]

    def signal(self, node_id: int, signum: int) -> None:
        """Signal the node's process. The checker (if a workload runs) is told: SIGCONT lets a
        stopped node go; SIGKILL or SIGTERM takes it down once; any other signal (SIGSTOP) holds it
        until SIGCONT."""
        pid = self.live_pid(node_id)
        assert pid is not None, f"node {node_id} has no running process"
        if self.checker is not None and signum != signal.SIGCONT:
            self.checker.hold([node_id])
        os.kill(pid, signum)
        if self.checker is not None and signum in (signal.SIGCONT, signal.SIGKILL, signal.SIGTERM):
            self.checker.release([node_id])

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
        stop = threading.Event()
        refuser = threading.Thread(target=_refuse, args=(held, stop), daemon=True)
        if self.checker is not None:
            self.checker.hold(node_ids)
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
            refuser.start()
            yield
        finally:
            stop.set()
            if refuser.is_alive():
                refuser.join()
            for sock in held:
                sock.close()
            if self.checker is not None:
                self.checker.release(node_ids)


def _refuse(held: list[socket.socket], stop: threading.Event) -> None:
    """Close every connection made to the held ports at once: a client of the dead node sees it
    refused, as it would be, rather than waiting for an answer that never comes."""
    with selectors.DefaultSelector() as selector:
        for sock in held:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        while not stop.is_set():
            for key, _ in selector.select(timeout=0.2):
                with contextlib.suppress(OSError):
                    connection, _ = key.fileobj.accept()
                    connection.close()


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
