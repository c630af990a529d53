"""A JBOD log directory on a real block device that starts failing reads (EIO) under a live
consumer: only that directory goes offline, as Kafka's LocalLog.read reports an IOException to
its LogDirFailureChannel.

Broker 101's second log directory is an ext4 file system on a loop device (the `failing_disk`
fixture; this kernel has no device-mapper for `dm-error` or `dm-flakey`, a loop device whose
backing file is cut to nothing fails every block the same way). Nothing writes to that directory
once the device fails: the topic's producers write only to partitions of the other directory,
and the brokers' periodic checkpoints are set an hour apart. So the first I/O there is a read:
a consumer fetching one of its partitions from 101. That read fails with EIO, the directory alone
goes offline, the heartbeat reports it at once, the controller moves the leadership of its
replicas to 102/103 and takes 101 out of their ISRs, and the consumer finishes reading from the
new leader. Meanwhile another consumer keeps reading the other directory's partitions from 101
while more records are written there: it misses nothing and 101 keeps leading them. Skips where
no loop device can be set up (not root, no loop driver).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from pathlib import Path

from broker_processes import BrokerCluster, start_cluster
from failing_disks import FailingDisk
from quorum_processes import wait_for
from record_checks import CLEAN, add_read, anomalies
from test_broker_cluster import read_back
from test_broker_storage import wait_offline_directory_moved
from test_broker_unreadable_log_dir import log_dir_errors

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

_TOPIC = "failing"
_PARTITIONS = 6
_HOUR_MS = "3600000"


class _Reader:
    """A kafka-python consumer (no group) reading `partitions` from their start until stopped:
    every record it got, checked for an offset read twice with two values, and the first error."""

    def __init__(self, cluster: BrokerCluster, partitions: list[int]) -> None:
        self.stored: dict[tuple[int, int], bytes] = {}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._consumer = KafkaConsumer(bootstrap_servers=cluster.broker_bootstrap(), group_id=None,
                                       enable_auto_commit=False, request_timeout_ms=30000)
        self._consumer.assign([TopicPartition(_TOPIC, p) for p in partitions])
        self._consumer.seek_to_beginning()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for records in self._consumer.poll(timeout_ms=500).values():
                    for record in records:
                        add_read(self.stored, partition=record.partition, offset=record.offset, value=record.value)
        except BaseException as error:  # reported by stop(): the test fails on any client error
            self.errors.append(error)

    def wait_for(self, acked: list[tuple[int, int, bytes]], *, what: str) -> None:
        wanted = {(p, o) for p, o, _ in acked}
        wait_for(lambda: wanted <= self.stored.keys() or bool(self.errors), timeout_s=120, what=what)
        assert not self.errors, self.errors

    def stop(self) -> dict[tuple[int, int], bytes]:
        self._stop.set()
        self._thread.join(timeout=120)
        self._consumer.close()
        assert not self._thread.is_alive()
        assert not self.errors, self.errors
        return self.stored


def _produce(cluster: BrokerCluster, partitions: list[int], *, first: int, count: int) -> list[tuple[int, int, bytes]]:
    """`count` numbered records round robin over `partitions`, acks=all and idempotent."""
    send = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all", enable_idempotence=True,
                         linger_ms=2, request_timeout_ms=30000, retries=100)
    try:
        futures = [(v, send.send(_TOPIC, value=v, partition=partitions[i % len(partitions)]))
                   for i, v in ((i, f"f-{i}-".encode() + b"x" * 1000) for i in range(first, first + count))]
        send.flush()
        return [(m.partition, m.offset, v) for v, m in ((v, f.get(timeout=120)) for v, f in futures)]
    finally:
        send.close()


def _read_partition(cluster: BrokerCluster, partition: int, *, count: int) -> dict[tuple[int, int], bytes]:
    """Partition `partition` from its start until `count` records were read (whichever broker leads it)."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.broker_bootstrap(), group_id=None, enable_auto_commit=False,
                             request_timeout_ms=30000)
    try:
        consumer.assign([TopicPartition(_TOPIC, partition)])
        consumer.seek_to_beginning()
        stored: dict[tuple[int, int], bytes] = {}

        def read_all() -> bool:
            for records in consumer.poll(timeout_ms=1000).values():
                for record in records:
                    add_read(stored, partition=record.partition, offset=record.offset, value=record.value)
            return len(stored) >= count

        wait_for(read_all, timeout_s=180, what=f"{_TOPIC}-{partition}'s {count} records to be read")
        return stored
    finally:
        consumer.close()


def test_a_read_error_on_a_failing_disk_takes_only_its_directory_offline_and_other_readers_go_on(
        tmp_path: Path, failing_disk: Callable[[int], FailingDisk]) -> None:
    disk = failing_disk(64 * 1024 * 1024)
    cluster = BrokerCluster(root=tmp_path / "cluster")
    # No periodic write to the failing directory: its first I/O after the failure is the read.
    cluster.broker_config.update({"replica.high.watermark.checkpoint.interval.ms": _HOUR_MS,
                                  "log.flush.offset.checkpoint.interval.ms": _HOUR_MS,
                                  "log.flush.start.offset.checkpoint.interval.ms": _HOUR_MS})
    data_b = tmp_path / "cluster" / "broker-101" / "data-b"

    def data_b_on_the_disk(node_id: int) -> None:
        if node_id == 101:
            data_b.symlink_to(disk.path)

    try:
        start_cluster(cluster, before_format=data_b_on_the_disk)
        admin = KafkaAdminClient(bootstrap_servers=cluster.broker_bootstrap(), request_timeout_ms=30000)
        try:  # 101 first in every assignment: it leads every partition
            admin.create_topics([NewTopic(_TOPIC, -1, -1, replica_assignments={
                p: [101, 102, 103] for p in range(_PARTITIONS)}, topic_configs={"min.insync.replicas": "2"})])
        finally:
            admin.close()
        for partition in range(_PARTITIONS):
            cluster.wait_isr(_TOPIC, partition, {101, 102, 103})
        on_b = sorted(int(p.name.rsplit("-", 1)[1]) for p in disk.path.glob(f"{_TOPIC}-*"))
        on_a = sorted(set(range(_PARTITIONS)) - set(on_b))
        assert on_b and on_a  # new replicas are spread across both directories
        assert all(cluster.partitions(101)[(_TOPIC, p)]["leader"] == 101 for p in range(_PARTITIONS))

        acked = _produce(cluster, list(range(_PARTITIONS)), first=0, count=100 * _PARTITIONS)
        acked_on_a = [a for a in acked if a[0] in on_a]
        reader = _Reader(cluster, on_a)
        try:
            reader.wait_for(acked_on_a, what="the first records of data-a")
            disk.settle()
            disk.fail()
            # The first I/O on data-b since the failure: 101 reads an on_b partition for a consumer.
            victim = on_b[0]
            read = _read_partition(cluster, victim, count=100)
            assert read == {(p, o): v for p, o, v in acked if p == victim}
            wait_for(lambda: cluster.status_of(101)["offline_log_dirs"] == [str(data_b)], timeout_s=90,
                     what="broker 101 to take data-b offline")
            log = cluster.nodes[101].log_path.read_text()
            assert f"reading {_TOPIC}-{victim} in {data_b} failed: [Errno 5] Input/output error" in log, log[-4000:]
            assert "Reporting offline log directories" in log
            wait_offline_directory_moved(cluster, _TOPIC, offline=on_b, online=on_a)
            # DescribeLogDirs names a directory by its resolved path: data-b's is the disk's mount point.
            assert log_dir_errors(cluster, 101) == {str(disk.path.resolve()): "org.apache.kafka.common.errors.KafkaStorageException",
                                                    str((data_b.parent / "data-a").resolve()): None}
            # 101 still leads data-a's partitions, and the reader there gets what is written next.
            more = _produce(cluster, on_a, first=len(acked), count=300)
            acked_on_a += more
            acked += more
            reader.wait_for(acked_on_a, what="the records written to data-a after the failure")
            assert all(cluster.partitions(101)[(_TOPIC, p)]["leader"] == 101 for p in on_a)
        finally:
            stored_on_a = reader.stop()
        assert anomalies(acked_on_a, stored_on_a) == CLEAN
        assert anomalies(acked, read_back(cluster, _TOPIC, _PARTITIONS)) == CLEAN
    finally:
        cluster.cleanup()
