"""A JBOD log directory made unreadable under a live acks=all idempotent workload (real files,
real permissions): only that directory goes offline, as Kafka's LogDirFailureChannel takes it.

These tests run as root, whom `chmod 000` does not stop (CAP_DAC_OVERRIDE). Broker 101 therefore
runs under `setpriv` without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: still root, owning its
files, but held to their permission bits like any other process. Taking every permission from
its second log directory then makes every new file there fail (EACCES), as an unreadable disk
does for Kafka: the next checkpoint or roll fails, the directory alone goes offline, the
heartbeat reports it at once, the controller moves leadership off its replicas and shrinks their
ISRs, DescribeLogDirs answers KAFKA_STORAGE_ERROR for it, and the broker keeps serving from its
other directory. The workload sees no error and loses, duplicates and reorders nothing. With the
permissions back and a kill -9 and restart, the directory's replicas recover, catch up and rejoin
every ISR. Skips where `setpriv` is missing or cannot drop the capability.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import warnings
from pathlib import Path

import pytest
from broker_processes import BrokerCluster, start_cluster
from quorum_processes import kraft_tool, wait_for
from record_checks import CLEAN, anomalies
from test_broker_cluster import create_topic, read_back
from test_broker_storage import wait_offline_directory_moved

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer

pytestmark = [
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

_WITHOUT_DAC_OVERRIDE = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
_TOPIC = "unreadable"
_PARTITIONS = 6


def _permissions_bind(tmp_path: Path) -> str | None:
    """Why this machine cannot run the test (None when it can): a process started under
    `_WITHOUT_DAC_OVERRIDE` must be refused a file in a directory with no permissions."""
    if shutil.which("setpriv") is None:
        return "no setpriv (util-linux) on PATH"
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "file").write_text("x")
    probe.chmod(0)
    try:
        result = subprocess.run([*_WITHOUT_DAC_OVERRIDE, "cat", str(probe / "file")], capture_output=True, text=True,
                                check=False, timeout=30)
    finally:
        probe.chmod(0o755)
    if result.returncode == 0:
        return "a process without CAP_DAC_OVERRIDE still reads a file under a directory with no permissions"
    if "Permission denied" not in result.stderr:
        return f"setpriv cannot drop the capability here: {result.stderr.strip()}"
    return None


def log_dir_errors(cluster: BrokerCluster, broker: int) -> dict[str, str | None]:
    """Each log directory of `broker` and its error, from `kraft log-dirs --describe` (Kafka's JSON)."""
    out = kraft_tool("log-dirs", "--describe", "--bootstrap-server", cluster.broker_bootstrap([102, 103]),
                     "--broker-list", str(broker), check=True).stdout
    document = json.loads(out.splitlines()[-1])
    return {d["logDir"]: d["error"] for d in document["brokers"][0]["logDirs"]}


def _log_bytes(cluster: BrokerCluster, broker: int, partition: int) -> bytes:
    segments = sorted((cluster.root / f"broker-{broker}").glob(f"data-*/{_TOPIC}-{partition}/*.log"),
                      key=lambda p: p.name)
    return b"".join(path.read_bytes() for path in segments)


class _Workload:
    """An idempotent acks=all kafka-python producer writing numbered records round robin over the
    partitions, a hundred at a time, until stopped; what was acknowledged, and the first error."""

    def __init__(self, cluster: BrokerCluster) -> None:
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._producer = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all",
                                       enable_idempotence=True, linger_ms=2, request_timeout_ms=30000, retries=100)
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        first = 0
        try:
            while not self._stop.is_set():
                futures = [(v, self._producer.send(_TOPIC, value=v, partition=i % _PARTITIONS))
                           for i, v in ((i, f"u-{i}-".encode() + b"x" * 1000) for i in range(first, first + 100))]
                self._producer.flush()
                self.acked.extend((m.partition, m.offset, v) for v, m in ((v, f.get(timeout=120)) for v, f in futures))
                first += 100
        except BaseException as error:  # reported by stop(): the test fails on any client error
            self.errors.append(error)

    def wait_for_more(self, count: int, *, what: str) -> None:
        target = len(self.acked) + count
        wait_for(lambda: len(self.acked) >= target or bool(self.errors), timeout_s=180, what=what)
        assert not self.errors, self.errors

    def stop(self) -> list[tuple[int, int, bytes]]:
        self._stop.set()
        self._thread.join(timeout=300)
        self._producer.close()
        assert not self._thread.is_alive()
        assert not self.errors, self.errors
        return self.acked


def test_a_log_directory_made_unreadable_goes_offline_alone_and_its_partitions_move_with_nothing_lost(
        tmp_path: Path) -> None:
    reason = _permissions_bind(tmp_path)
    if reason is not None:
        pytest.skip(reason)
    cluster = BrokerCluster(root=tmp_path / "cluster")
    cluster.launch_prefix[101] = _WITHOUT_DAC_OVERRIDE
    data_b = tmp_path / "cluster" / "broker-101" / "data-b"
    try:
        start_cluster(cluster)
        create_topic(cluster, _TOPIC, partitions=_PARTITIONS, replication_factor=3,
                     configs={"min.insync.replicas": "2"})
        on_b = sorted(int(p.name.rsplit("-", 1)[1]) for p in data_b.glob(f"{_TOPIC}-*"))
        elsewhere = sorted(set(range(_PARTITIONS)) - set(on_b))
        assert on_b and elsewhere  # new replicas are spread across both directories

        workload = _Workload(cluster)
        try:
            workload.wait_for_more(300, what="300 records acknowledged before the fault")
            data_b.chmod(0)
            wait_for(lambda: cluster.status_of(101)["offline_log_dirs"] == [str(data_b)], timeout_s=90,
                     what="broker 101 to take data-b offline")
            log = cluster.nodes[101].log_path.read_text()
            assert "Permission denied" in log and "Reporting offline log directories" in log
            wait_offline_directory_moved(cluster, _TOPIC, offline=on_b, online=elsewhere)
            errors = log_dir_errors(cluster, 101)
            assert errors == {str(data_b): "org.apache.kafka.common.errors.KafkaStorageException",
                              str(data_b.parent / "data-a"): None}, errors
            workload.wait_for_more(300, what="300 more records acknowledged with data-b offline")
        finally:
            acked = workload.stop()
        assert anomalies(acked, read_back(cluster, _TOPIC, _PARTITIONS)) == CLEAN

        # The disk is readable again: after a kill -9 and restart its replicas recover and catch up.
        data_b.chmod(0o755)
        cluster.kill(101)
        cluster.start(101)
        cluster.wait_ready([101])
        for partition in range(_PARTITIONS):
            cluster.wait_isr(_TOPIC, partition, {101, 102, 103}, timeout_s=120)
        assert cluster.status_of(101)["offline_log_dirs"] == []
        assert {p for (topic, p), replica in cluster.partitions(101).items()
                if topic == _TOPIC and replica["log_dir"] == str(data_b)} == set(on_b)
        # No writes since: each of 101's replicas holds the leader's bytes, the recovered ones included.
        for partition in range(_PARTITIONS):
            leader = cluster.partitions(101)[(_TOPIC, partition)]["leader"]
            wait_for(lambda partition=partition, leader=leader: _log_bytes(cluster, 101, partition)
                     == _log_bytes(cluster, leader, partition), timeout_s=90,
                     what=f"101's replica of {_TOPIC}-{partition} to equal the leader's")
    finally:
        if data_b.exists():
            data_b.chmod(0o755)
        cluster.cleanup()
