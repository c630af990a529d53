"""The broker's storage layer seen through real clients and real processes: every compression codec
Kafka defines, produced by kafka-python and by librdkafka (confluent-kafka, its own codec code),
stored as received and read back by both; time and size retention moving the log start offset on
every replica, kept across a kill -9."""

from __future__ import annotations

import json
import random
import signal
import time
import urllib.request
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import test_broker_cluster
from broker_processes import BrokerCluster, start_cluster
from quorum_processes import HOST, kraft_tool, wait_for
from test_broker_cluster import anomalies, create_topic, read_back

from kraft_engine.storage.producer_snapshots import decode_snapshot

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import InvalidRecordError

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = [
    pytest.mark.process,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

CODECS = ("gzip", "snappy", "lz4", "zstd")

brokers = test_broker_cluster.brokers  # three controllers and three brokers, per test


def _kafka_python_send(cluster: BrokerCluster, topic: str, codec: str, values: list[bytes]) -> list[tuple[int, int, bytes]]:
    send = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all", enable_idempotence=True,
                         compression_type=codec, linger_ms=20, request_timeout_ms=30000)
    try:
        futures = [(value, send.send(topic, value=value, partition=0)) for value in values]
        send.flush()
        return [(m.partition, m.offset, value) for value, m in ((v, f.get(timeout=60)) for v, f in futures)]
    finally:
        send.close()


def _librdkafka_send(cluster: BrokerCluster, topic: str, codec: str, values: list[bytes]) -> list[tuple[int, int, bytes]]:
    acked: list[tuple[int, int, bytes]] = []
    errors: list[str] = []

    def delivered(error: object, message: object) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            acked.append((message.partition(), message.offset(), message.value()))  # type: ignore[attr-defined]

    send = confluent_kafka.Producer({"bootstrap.servers": cluster.broker_bootstrap(), "acks": "all",
                                     "enable.idempotence": True, "compression.codec": codec, "linger.ms": 20})
    for value in values:
        send.produce(topic, value=value, partition=0, on_delivery=delivered)
        send.poll(0)
    assert send.flush(60) == 0
    assert errors == []
    return acked


def _librdkafka_read(cluster: BrokerCluster, topic: str, count: int) -> dict[tuple[int, int], bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.broker_bootstrap(), "group.id": "unused",
                                         "enable.auto.commit": False})
    stored: dict[tuple[int, int], bytes] = {}
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        idle = 0
        while len(stored) < count and idle < 30:
            message = consumer.poll(2.0)
            if message is None:
                idle += 1
                continue
            assert message.error() is None, message.error()
            stored[(message.partition(), message.offset())] = message.value()
    finally:
        consumer.close()
    return stored


def test_every_codec_from_kafka_python_and_librdkafka_is_stored_as_received_and_read_back(brokers: BrokerCluster) -> None:
    topic = "codecs"
    create_topic(brokers, topic, partitions=1, replication_factor=3)
    acked: list[tuple[int, int, bytes]] = []
    number = 0
    for codec in CODECS:
        for client, send in (("kafkapython", _kafka_python_send), ("librdkafka", _librdkafka_send)):
            values = [f"{client}.{codec}-{number + i}-".encode() + b"x" * (i % 50) for i in range(150)]
            number += len(values)
            acked += send(brokers, topic, codec, values)
    assert len(acked) == number
    stored = read_back(brokers, topic, 1)
    assert anomalies(acked, stored) == {"lost": [], "duplicated": [], "reordered": []}
    assert len(stored) == number
    assert _librdkafka_read(brokers, topic, number) == stored
    # Stored as received: every replica's segment holds batches of each codec, with every record
    # decodable by `kraft dump-log --deep-iteration` (which decompresses them as Kafka's tool does).
    for node_id in brokers.brokers:
        segments = list((brokers.root / f"broker-{node_id}").glob(f"data-*/{topic}-0/*.log"))
        assert len(segments) == 1
        dump = kraft_tool("dump-log", "--deep-iteration", "--files", str(segments[0]), check=True).stdout
        for codec in CODECS:
            assert f"compresscodec: {codec}" in dump
        assert dump.count("valueSize:") == number


def _log_starts(cluster: BrokerCluster, topic: str) -> dict[int, int]:
    return {n: cluster.partitions(n)[(topic, 0)]["log_start_offset"] for n in sorted(cluster.brokers)}


def _earliest_and_records(cluster: BrokerCluster, topic: str) -> tuple[int, dict[int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.broker_bootstrap(), enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        earliest = consumer.beginning_offsets([tp])[tp]
        end = consumer.end_offsets([tp])[tp]
        consumer.seek_to_beginning()
        stored: dict[int, bytes] = {}
        while consumer.position(tp) < end:
            for records in consumer.poll(timeout_ms=2000).values():
                stored.update((r.offset, r.value) for r in records)
        return earliest, stored
    finally:
        consumer.close()


def _segment_sizes(cluster: BrokerCluster, node_id: int, topic: str) -> list[int] | None:
    """The sizes of a replica's segment files, oldest first; None if one went while they were listed."""
    try:
        return [path.stat().st_size for path in sorted((cluster.root / f"broker-{node_id}").glob(f"data-*/{topic}-0/*.log"),
                                                       key=lambda path: path.name)]
    except FileNotFoundError:
        return None


def test_size_and_time_retention_move_the_log_start_on_every_replica_and_survive_kill_9(tmp_path: Path) -> None:
    cluster = BrokerCluster(root=tmp_path, broker_config={"log.retention.check.interval.ms": "300"})
    try:
        start_cluster(cluster)
        # Size: 1 MiB segments, at least 2 MiB kept; about 4.5 MiB written.
        create_topic(cluster, "sized", partitions=1, replication_factor=3,
                     configs={"segment.bytes": "1048576", "retention.bytes": "2097152"})
        # Time: records stamped two days ago on a topic that keeps them one day.
        create_topic(cluster, "aged", partitions=1, replication_factor=3, configs={"retention.ms": "86400000"})
        send = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all", linger_ms=5,
                             request_timeout_ms=30000, max_request_size=2 * 1024 * 1024)
        values = [f"r-{i}-".encode() + b"x" * 15_000 for i in range(300)]
        offsets = {}
        for i, value in enumerate(values):
            offsets[send.send("sized", value=value, partition=0).get(timeout=60).offset] = value
            if i < 20:
                send.send("aged", value=value, partition=0, timestamp_ms=int(time.time() * 1000) - 2 * 86_400_000)
        send.flush()
        send.close()

        # Retention moves the log start in steps. Wait for the state no retention check can change:
        # no replica has a segment that size retention still deletes (Kafka's rule: the oldest goes
        # while the segments after it hold retention.bytes), and then every replica starts at one
        # offset past 0 (read after the segments, so it is the start those segments left).
        def settled() -> int | None:
            for node_id in cluster.brokers:
                sizes = _segment_sizes(cluster, node_id, "sized")
                if sizes is None or (len(sizes) > 1 and sum(sizes) - sizes[0] >= 2 * 1024 * 1024):
                    return None
            starts = set(_log_starts(cluster, "sized").values())
            return starts.pop() if len(starts) == 1 and min(starts) > 0 else None

        start = wait_for(settled, timeout_s=90, what="every replica of sized-0 to settle its log start past 0")
        earliest, stored = _earliest_and_records(cluster, "sized")
        assert earliest == start
        assert stored == {o: v for o, v in offsets.items() if o >= start}  # what is left is whole and in place
        assert 2 * 1024 * 1024 <= sum(len(v) for v in stored.values()) < 300 * 15_000
        wait_for(lambda: set(_log_starts(cluster, "aged").values()) == {20}, timeout_s=60,
                 what="every replica of aged-0 to drop its expired records (log start 20)")
        assert _earliest_and_records(cluster, "aged") == (20, {})

        # A kill -9 does not bring deleted records back: the log start holds after the restart.
        victim = max(cluster.brokers)
        cluster.kill(victim)
        cluster.start(victim)
        cluster.wait_ready([victim])
        assert _log_starts(cluster, "sized")[victim] >= start
        assert _log_starts(cluster, "aged")[victim] == 20
    finally:
        cluster.cleanup()


def _replica_bytes(cluster: BrokerCluster, node_id: int, topic: str) -> int:
    return sum(p.stat().st_size for p in (cluster.root / f"broker-{node_id}").glob(f"data-*/{topic}-0/*.log"))


def _latest_by_key(cluster: BrokerCluster, topic: str, *, alive: list[int] | None = None) -> tuple[dict[bytes, bytes], list[int]]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.broker_bootstrap(alive), enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        consumer.seek_to_beginning()
        latest: dict[bytes, bytes] = {}
        offsets: list[int] = []
        while consumer.position(tp) < end:
            for records in consumer.poll(timeout_ms=2000).values():
                for record in records:
                    latest[record.key] = record.value
                    offsets.append(record.offset)
        return latest, offsets
    finally:
        consumer.close()


def test_a_compacted_topic_keeps_each_keys_latest_value_on_every_replica_through_a_leader_kill(tmp_path: Path) -> None:
    cluster = BrokerCluster(root=tmp_path, broker_config={"log.cleaner.backoff.ms": "300"})
    try:
        start_cluster(cluster)
        topic = "table"
        create_topic(cluster, topic, partitions=1, replication_factor=3,
                     configs={"cleanup.policy": "compact", "segment.bytes": "1048576"})
        send = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all", linger_ms=5,
                             compression_type="lz4", request_timeout_ms=30000)
        written: dict[bytes, bytes] = {}
        for i in range(400):
            key, value = f"key-{i % 25}".encode(), f"value-{i}-".encode() + random.randbytes(8_000)  # incompressible
            send.send(topic, key=key, value=value, partition=0).get(timeout=60)
            written[key] = value
        # A record without a key has no place in a table: Kafka's INVALID_RECORD, nothing written.
        with pytest.raises(InvalidRecordError):
            send.send(topic, value=b"no key", partition=0).get(timeout=60)
        send.close()
        produced = 400 * 8_000  # at least (random values: lz4 cannot shrink them)
        wait_for(lambda: all(_replica_bytes(cluster, n, topic) < produced / 2 for n in cluster.brokers), timeout_s=90,
                 what="every replica of table-0 to be compacted to less than half what was written")
        latest, offsets = _latest_by_key(cluster, topic)
        assert latest == written
        assert offsets == sorted(offsets) and len(offsets) < 400  # gaps where superseded records were

        leader = next(n for n in cluster.brokers if cluster.partitions(n)[(topic, 0)]["leader"] == n)
        cluster.kill(leader)
        wait_for(lambda: any(cluster.partitions(n)[(topic, 0)]["leader"] not in (leader, -1)
                             for n in cluster.brokers if n != leader), timeout_s=60, what="a new leader of table-0")
        alive = sorted(cluster.brokers - {leader})  # (no client connection to the dead broker)
        assert _latest_by_key(cluster, topic, alive=alive)[0] == written  # a follower's compacted log serves the same table
        cluster.start(leader)
        cluster.wait_ready([leader])
        cluster.wait_isr(topic, 0, set(cluster.brokers))
    finally:
        cluster.cleanup()


def test_a_clean_restart_reads_no_log_and_restores_producer_state_from_the_snapshot(brokers: BrokerCluster) -> None:
    topic = "restarts"
    create_topic(brokers, topic, partitions=1, replication_factor=3)
    send = KafkaProducer(bootstrap_servers=brokers.broker_bootstrap(), acks="all", enable_idempotence=True,
                         linger_ms=2, request_timeout_ms=30000)
    acked = [(m.partition, m.offset, v) for v, m in
             ((v, send.send(topic, value=v, partition=0).get(timeout=60)) for v in (f"a-{i}".encode() for i in range(200)))]
    leader = brokers.partitions(min(brokers.brokers))[(topic, 0)]["leader"]
    victim = next(n for n in sorted(brokers.brokers) if n != leader)
    wait_for(lambda: brokers.partitions(victim)[(topic, 0)]["log_end_offset"] == 200, timeout_s=60,
             what="the follower to hold all 200 records")
    node = brokers.nodes[victim]
    epoch = brokers.status_of(victim)["broker_epoch"]
    brokers.signal(victim, signal.SIGTERM)
    assert node.process is not None and node.process.wait(timeout=60) == 0
    root = brokers.root / f"broker-{victim}"
    markers = list(root.glob("data-*/.kafka_cleanshutdown"))
    # The epoch it registers with next as previous_broker_epoch (KIP-966's clean-restart signal).
    assert len(markers) == 2 and all(json.loads(m.read_text())["brokerEpoch"] == epoch for m in markers)
    (snapshot,) = root.glob(f"data-*/{topic}-0/*.snapshot")
    assert snapshot.name == f"{200:020d}.snapshot"
    (entry,) = decode_snapshot(snapshot.read_bytes())
    assert (entry.last_sequence, entry.last_offset) == (199, 199)  # one producer, sequences 0..199

    brokers.start(victim)
    brokers.wait_ready([victim])
    log = node.log_path.read_text()
    restart = log[log.rindex("Opened " + topic) - 200 :]
    assert f"Opened {topic}-0 as the clean shutdown left it (log end 200, no recovery)" in restart
    assert f"Producer state of {topic}-0: 1 producers, from the snapshot at 200 and 0 batches replayed" in restart
    assert not list(root.glob("data-*/.kafka_cleanshutdown"))  # gone before anything is written

    acked += [(m.partition, m.offset, v) for v, m in
              ((v, send.send(topic, value=v, partition=0).get(timeout=60)) for v in (f"a-{i}".encode() for i in range(200, 300)))]
    send.close()
    brokers.wait_isr(topic, 0, set(brokers.brokers))
    # kill -9: no marker, so the log is recovered and producer state replays after the newest snapshot.
    brokers.kill(victim)
    brokers.start(victim)
    brokers.wait_ready([victim])
    log = node.log_path.read_text()
    assert "Producer state of restarts-0: 1 producers, from the snapshot at 200 and" in log[log.rindex("Producer state of restarts-0"):]
    brokers.wait_isr(topic, 0, set(brokers.brokers))
    assert anomalies(acked, read_back(brokers, topic, 1)) == {"lost": [], "duplicated": [], "reordered": []}


def _metric(cluster: BrokerCluster, node_id: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://{HOST}:{cluster.nodes[node_id].http_port}/metrics", timeout=10).read().decode()
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")))


def wait_offline_directory_moved(cluster: BrokerCluster, topic: str, *, offline: list[int], online: list[int]) -> None:
    """Broker 101 lost the directory of its `offline` replicas of `topic`: each is led by 102 or
    103 without 101 in its ISR, the `online` ones keep 101 in their ISRs, and 101's status and
    metrics count one offline directory and those replicas."""
    for partition in offline:
        def moved(partition: int = partition) -> bool:
            found = [cluster.partitions(n).get((topic, partition)) for n in (102, 103)]
            return any(p is not None and p["leader"] == n and 101 not in p["isr"] for n, p in zip((102, 103), found, strict=True))
        wait_for(moved, timeout_s=90, what=f"{topic}-{partition} led by 102 or 103 without 101 in its ISR")
    for partition in online:
        cluster.wait_isr(topic, partition, {101, 102, 103})  # the healthy directory still replicates
    assert sorted(cluster.status_of(101)["offline_replicas"]) == sorted(f"{topic}-{p}" for p in offline)
    assert _metric(cluster, 101, "kafka_log_logmanager_offlinelogdirectorycount") == 1
    assert _metric(cluster, 101, "kafka_server_replicamanager_offlinereplicacount") == len(offline)


def test_a_full_log_directory_goes_offline_alone_and_its_leaderships_move_with_no_lost_write(
    tmp_path: Path, small_tmpfs: Callable[[int], Path], fill_disk: Callable[..., Path]
) -> None:
    """JBOD: broker 101's second log dir is a real 4 MiB tmpfs. Filling it makes appends there fail
    (ENOSPC); that directory alone goes offline, the heartbeat reports it, the controller moves
    leadership off its replicas (it learned their placement from AssignReplicasToDirs) and takes
    101 out of their ISRs, while 101 keeps replicating the partitions of its other directory. An
    acks=all idempotent workload across the failure loses, duplicates and reorders nothing."""
    cluster = BrokerCluster(root=tmp_path)
    try:
        disk = small_tmpfs(4 * 1024 * 1024)

        def data_b_on_the_tmpfs(node_id: int) -> None:
            if node_id == 101:
                (tmp_path / "broker-101" / "data-b").symlink_to(disk)

        start_cluster(cluster, before_format=data_b_on_the_tmpfs)
        topic = "jbod"
        create_topic(cluster, topic, partitions=6, replication_factor=3)
        on_disk = sorted(int(p.name.rsplit("-", 1)[1]) for p in disk.glob(f"{topic}-*"))
        elsewhere = sorted(set(range(6)) - set(on_disk))
        assert on_disk and elsewhere  # new replicas are spread across both directories

        send = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all", enable_idempotence=True,
                             linger_ms=2, request_timeout_ms=30000, retries=100)
        acked: list[tuple[int, int, bytes]] = []

        def produce(first: int, count: int) -> None:
            futures = [(v, send.send(topic, value=v, partition=i % 6))
                       for i, v in ((i, f"j-{i}-".encode() + b"x" * 2000) for i in range(first, first + count))]
            send.flush()
            acked.extend((m.partition, m.offset, v) for v, m in ((v, f.get(timeout=120)) for v, f in futures))

        produce(0, 300)
        fill_disk(disk)
        produce(300, 600)
        wait_for(lambda: cluster.status_of(101)["offline_log_dirs"] == [str(tmp_path / "broker-101" / "data-b")],
                 timeout_s=60, what="broker 101 to report data-b offline")
        # Reported in a heartbeat sent at once (Kafka's propagateDirectoryFailure), not the next regular one.
        assert "Reporting offline log directories" in cluster.nodes[101].log_path.read_text()
        wait_offline_directory_moved(cluster, topic, offline=on_disk, online=elsewhere)
        produce(900, 300)
        send.close()
        assert len(acked) == 1200
        assert anomalies(acked, read_back(cluster, topic, 6)) == {"lost": [], "duplicated": [], "reordered": []}
    finally:
        cluster.cleanup()


def test_a_failed_log_directory_replaced_by_a_fresh_formatted_one_is_refilled_by_replication(
    tmp_path: Path, small_tmpfs: Callable[[int], Path], fill_disk: Callable[..., Path]
) -> None:
    """The failed directory of the test above is replaced while 101 is down by an empty directory,
    formatted (`kraft storage format --ignore-formatted`: a new directory id). After the restart
    101 places the replicas it lost in the new directory, reports them with AssignReplicasToDirs,
    fetches them from the leaders and rejoins every ISR: URP is 0 again."""
    cluster = BrokerCluster(root=tmp_path)
    try:
        disk = small_tmpfs(4 * 1024 * 1024)
        data_b = tmp_path / "broker-101" / "data-b"

        def data_b_on_the_tmpfs(node_id: int) -> None:
            if node_id == 101:
                data_b.symlink_to(disk)

        start_cluster(cluster, before_format=data_b_on_the_tmpfs)
        topic = "jbod"
        create_topic(cluster, topic, partitions=6, replication_factor=3)
        old_id = (disk / "meta.properties").read_text()
        on_disk = sorted(int(p.name.rsplit("-", 1)[1]) for p in disk.glob(f"{topic}-*"))
        assert on_disk
        send = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all", linger_ms=2,
                             request_timeout_ms=30000, retries=100)
        for i in range(600):
            send.send(topic, value=f"r-{i}-".encode() + b"x" * 2000, partition=i % 6)
            if i == 200:
                send.flush()
                fill_disk(disk)
        send.flush()
        wait_for(lambda: cluster.status_of(101)["offline_log_dirs"], timeout_s=60, what="data-b offline on 101")

        node = cluster.nodes[101]
        cluster.signal(101, signal.SIGTERM)
        assert node.process is not None and node.process.wait(timeout=90) == 0
        data_b.unlink()
        data_b.mkdir()
        cluster.format(101, "--ignore-formatted")
        assert (data_b / "meta.properties").read_text() != old_id
        cluster.start(101)
        cluster.wait_ready([101])
        for partition in range(6):
            cluster.wait_isr(topic, partition, {101, 102, 103}, timeout_s=120)
        assert sorted(int(p.name.rsplit("-", 1)[1]) for p in data_b.glob(f"{topic}-*")) == on_disk
        ends = {p: max(cluster.partitions(n)[(topic, p)]["high_watermark"] for n in (102, 103)) for p in range(6)}
        assert {p: cluster.partitions(101)[(topic, p)]["log_end_offset"] for p in range(6)} == ends
        assert all(_metric(cluster, n, "kafka_server_replicamanager_underreplicatedpartitions") == 0
                   for n in (101, 102, 103))
        send.close()
    finally:
        cluster.cleanup()
