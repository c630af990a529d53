"""Managing what a broker's logs keep and how they are served, through real clients and real
processes: DeleteRecords (from `kraft delete-records` in Kafka's JSON format and from
kafka-python's admin) moving the log start offset on every replica and kept across a kill -9;
Fetch answered from the segment files with sendfile to kafka-python and librdkafka; a topic's
`compression.type` recompressing what producers send, at the topic's `compression.gzip.level`; `segment.ms` rolling segments by record
time on every replica; a replica moved between a broker's log directories (AlterReplicaLogDirs,
through `kraft reassign-partitions` with `log_dirs` in Kafka's JSON) under an acks=all workload,
with a kill -9 in the middle of a move (resumed and completed after the restart) and after one."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
import warnings
from pathlib import Path

import pytest
import test_broker_cluster
from broker_processes import BrokerCluster
from kio.schema.alter_replica_log_dirs.v2.request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32
from quorum_processes import kraft_tool, wait_for
from record_checks import CLEAN, anomalies
from test_broker_cluster import create_topic, read_back
from test_broker_storage import _librdkafka_read, _librdkafka_send, _metric

from kraft_engine.protocol import KafkaConnection

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import InvalidConfigurationError, OffsetOutOfRangeError, PolicyViolationError

pytestmark = [
    pytest.mark.process,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

brokers = test_broker_cluster.brokers  # three controllers and three brokers, per test


def produce_numbered(cluster: BrokerCluster, topic: str, *, partitions: int, count: int, size: int = 1000,
             first: int = 0) -> list[tuple[int, int, bytes]]:
    """Records `first`..`first + count - 1` (`<topic>-<i>-` and `size` bytes), round robin over the
    partitions, by an idempotent acks=all producer: the (partition, offset, value) of each."""
    send = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all", enable_idempotence=True,
                         linger_ms=5, request_timeout_ms=30000)
    try:
        futures = [(v, send.send(topic, value=v, partition=i % partitions))
                   for i, v in ((i, f"{topic}-{i}-".encode() + b"x" * size) for i in range(first, first + count))]
        send.flush()
        return [(m.partition, m.offset, v) for v, m in ((v, f.get(timeout=60)) for v, f in futures)]
    finally:
        send.close()


def _replicas_settle(cluster: BrokerCluster, topic: str, partition: int, *, log_start: int) -> None:
    """Every replica's log start at `log_start` and no segment wholly below it, as one settled read."""
    def settled() -> bool:
        for node_id in cluster.brokers:
            replica = cluster.partitions(node_id).get((topic, partition))
            if replica is None or replica["log_start_offset"] != log_start:
                return False
            segments = replica["segments"]
            if len(segments) > 1 and segments[1] <= log_start:
                return False
        return True
    wait_for(settled, timeout_s=90, what=f"every replica of {topic}-{partition} to start at {log_start}")


def test_delete_records_moves_the_log_start_on_every_replica_and_survives_kill_9(
        brokers: BrokerCluster, tmp_path: Path) -> None:
    topic = "trimmed"
    create_topic(brokers, topic, partitions=2, replication_factor=3, configs={"segment.bytes": str(1024 * 1024)})
    acked = produce_numbered(brokers, topic, partitions=2, count=3000)
    assert len(acked) == 3000
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"partitions": [
        {"topic": topic, "partition": 0, "offset": 1000},
        {"topic": topic, "partition": 1, "offset": -1},
        {"topic": topic, "partition": 7, "offset": 3},
    ], "version": 1}))
    result = kraft_tool("delete-records", "--bootstrap-server", brokers.broker_bootstrap(),
                        "--offset-json-file", str(offsets))
    assert result.returncode == 1, result.stderr  # the partition that does not exist
    assert result.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 1000",
        f"partition: {topic}-1\tlow_watermark: 1500",
        f"partition: {topic}-7\terror: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
        "This server does not host this topic-partition.",
    ]
    # The low watermark was answered once every replica started there; the segments below are gone.
    _replicas_settle(brokers, topic, 0, log_start=1000)
    _replicas_settle(brokers, topic, 1, log_start=1500)

    # kafka-python's admin sends DeleteRecords to the leader too.
    admin = KafkaAdminClient(bootstrap_servers=brokers.broker_bootstrap(), request_timeout_ms=30000)
    try:
        answer = admin.delete_records({TopicPartition(topic, 0): 1200})
        assert answer[TopicPartition(topic, 0)]["low_watermark"] == 1200
        with pytest.raises(OffsetOutOfRangeError):  # past the high watermark: nothing moves
            admin.delete_records({TopicPartition(topic, 0): 1501})
    finally:
        admin.close()
    _replicas_settle(brokers, topic, 0, log_start=1200)

    # kill -9 of the leader right away: the restart keeps the log start (checkpointed at once).
    leader = next(n for n in brokers.brokers if brokers.partitions(n)[(topic, 0)]["leader"] == n)
    brokers.kill(leader)
    brokers.start(leader)
    brokers.wait_ready([leader])
    brokers.wait_isr(topic, 0, set(brokers.brokers))
    _replicas_settle(brokers, topic, 0, log_start=1200)

    consumer = KafkaConsumer(bootstrap_servers=brokers.broker_bootstrap(), enable_auto_commit=False, group_id=None)
    try:
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        assert consumer.beginning_offsets(tps) == {tps[0]: 1200, tps[1]: 1500}
    finally:
        consumer.close()
    kept = [(p, o, v) for p, o, v in acked if (p == 0 and o >= 1200)]
    stored = read_back(brokers, topic, 2)
    assert {k for k in stored if k[0] == 1} == set()  # all of partition 1 was deleted
    assert anomalies(kept, {k: v for k, v in stored.items() if k[1] >= 1200}) == CLEAN
    assert min(o for p, o in stored if p == 0) == 1200  # the batch holding 1200 is trimmed by the consumer


def test_delete_records_on_a_compacted_topic_is_a_policy_violation(brokers: BrokerCluster) -> None:
    topic = "table"
    create_topic(brokers, topic, partitions=1, replication_factor=3, configs={"cleanup.policy": "compact"})
    send = KafkaProducer(bootstrap_servers=brokers.broker_bootstrap(), acks="all")
    for i in range(10):
        send.send(topic, key=b"k%d" % i, value=b"v", partition=0)
    send.flush()
    send.close()
    admin = KafkaAdminClient(bootstrap_servers=brokers.broker_bootstrap(), request_timeout_ms=30000)
    try:
        with pytest.raises(PolicyViolationError):
            admin.delete_records({TopicPartition(topic, 0): 5})
    finally:
        admin.close()
    for node_id in brokers.brokers:
        assert brokers.partitions(node_id)[(topic, 0)]["log_start_offset"] == 0


def _file_region_bytes(cluster: BrokerCluster, node_id: int, mode: str) -> float:
    try:
        return _metric(cluster, node_id, f'kraftwerk_network_file_region_bytes_total{{listener="PLAINTEXT",mode="{mode}"}}')
    except StopIteration:  # no sample yet
        return 0.0


def test_fetch_uses_sendfile_for_kafka_python_and_librdkafka_and_the_topic_codec_and_segment_ms_hold(
        brokers: BrokerCluster) -> None:
    topic = "served"
    create_topic(brokers, topic, partitions=1, replication_factor=3,
                 configs={"compression.type": "zstd", "segment.ms": "60000"})
    # Three groups of records, their timestamps ten minutes apart: segment.ms (one minute) rolls a
    # segment at each group, on the leader and on the followers alike (they roll on append too).
    start_ms = int(time.time() * 1000) - 30 * 60_000
    send = KafkaProducer(bootstrap_servers=brokers.broker_bootstrap(), acks="all", enable_idempotence=True,
                         compression_type="gzip", linger_ms=5, request_timeout_ms=30000)
    acked: list[tuple[int, int, bytes]] = []
    try:
        for group in range(3):
            futures = [(v, send.send(topic, value=v, partition=0, timestamp_ms=start_ms + group * 600_000))
                       for v in (f"g{group}-{group * 400 + i}-".encode() + b"y" * (i % 300) for i in range(400))]
            send.flush()
            acked += [(m.partition, m.offset, v) for v, m in ((v, f.get(timeout=60)) for v, f in futures)]
    finally:
        send.close()
    # librdkafka sends lz4; the topic stores zstd whatever the producer used.
    acked += _librdkafka_send(brokers, topic, "lz4", [f"rd-{1200 + i}-".encode() + b"z" * (i % 200) for i in range(300)])
    assert len(acked) == 1500
    leader = next(n for n in brokers.brokers if brokers.partitions(n)[(topic, 0)]["leader"] == n)
    brokers.wait_isr(topic, 0, set(brokers.brokers))

    def replicated() -> bool:
        return all(brokers.partitions(n)[(topic, 0)]["log_end_offset"] == 1500 for n in brokers.brokers)
    wait_for(replicated, timeout_s=90, what="every replica to hold the 1500 records")
    for node_id in brokers.brokers:
        segments = brokers.partitions(node_id)[(topic, 0)]["segments"]
        assert segments[:3] == [0, 400, 800], (node_id, segments)  # a roll at each ten-minute step
        dump = "".join(kraft_tool("dump-log", "--deep-iteration", "--files", str(path), check=True).stdout
                       for path in sorted((brokers.root / f"broker-{node_id}").glob(f"data-*/{topic}-0/*.log")))
        assert dump.count("valueSize:") == 1500
        assert "compresscodec: zstd" in dump
        assert "compresscodec: gzip" not in dump and "compresscodec: lz4" not in dump

    # The consumers' records leave by sendfile: the brokers' sendfile count grows by at least the
    # log's size for each full read (summed over brokers, so a leader change meanwhile on a loaded
    # machine does not matter), and nothing was copied.
    log_bytes = sum(path.stat().st_size for path in (brokers.root / f"broker-{leader}").glob(f"data-*/{topic}-0/*.log"))
    before = sum(_file_region_bytes(brokers, n, "sendfile") for n in brokers.brokers)
    stored = read_back(brokers, topic, 1)
    assert anomalies(acked, stored) == CLEAN
    assert _librdkafka_read(brokers, topic, 1500) == stored
    assert sum(_file_region_bytes(brokers, n, "sendfile") for n in brokers.brokers) - before >= 2 * log_bytes
    assert all(_file_region_bytes(brokers, n, "copy") == 0 for n in brokers.brokers)


def test_a_topics_compression_level_is_the_level_the_broker_recompresses_at(brokers: BrokerCluster) -> None:
    # KIP-390: the same uncompressed batches into two gzip topics, one at level 1, one at level 9.
    words = [b"w%d" % (i * 7919 % 1000) for i in range(20_000)]
    values = [b"v-%d- " % i + b" ".join(words[i * 500:] + words[: i * 500]) for i in range(20)]
    sizes: dict[int, list[int]] = {}
    for level in (1, 9):
        topic = f"gzip-level-{level}"
        create_topic(brokers, topic, partitions=1, replication_factor=3,
                     configs={"compression.type": "gzip", "compression.gzip.level": str(level)})
        send = KafkaProducer(bootstrap_servers=brokers.broker_bootstrap(), acks="all", enable_idempotence=True,
                             linger_ms=0, max_request_size=2 << 20, request_timeout_ms=30000)
        acked: list[tuple[int, int, bytes]] = []
        try:
            for value in values:  # one batch each, so both topics get the same batches
                sent = send.send(topic, value=value, partition=0)
                send.flush()
                metadata = sent.get(timeout=60)
                acked.append((metadata.partition, metadata.offset, value))
        finally:
            send.close()
        wait_for(lambda t=topic: all(brokers.partitions(n)[(t, 0)]["log_end_offset"] == 20 for n in brokers.brokers),
                 timeout_s=90, what=f"every replica of {topic} to hold the 20 records")
        assert anomalies(acked, read_back(brokers, topic, 1)) == CLEAN
        sizes[level] = []
        for node_id in sorted(brokers.brokers):
            paths = sorted((brokers.root / f"broker-{node_id}").glob(f"data-*/{topic}-0/*.log"))
            dump = "".join(kraft_tool("dump-log", "--files", str(p), check=True).stdout for p in paths)
            assert dump.count("compresscodec: gzip") == 20, dump
            sizes[level].append(sum(p.stat().st_size for p in paths))
    # Every replica stores the leader's batches, so one size per level, and level 9's is smaller.
    assert len(set(sizes[1])) == 1 and len(set(sizes[9])) == 1, sizes
    assert sizes[9][0] < sizes[1][0], sizes

    # A level outside Kafka's range is refused with Kafka's message, and no topic is created.
    admin = KafkaAdminClient(bootstrap_servers=brokers.broker_bootstrap(), request_timeout_ms=30000)
    try:
        with pytest.raises(InvalidConfigurationError, match="Value must be between 1 and 9 or equal to -1"):
            admin.create_topics([NewTopic("gzip-level-0", 1, 3, topic_configs={"compression.gzip.level": "0"})])
        assert "gzip-level-0" not in admin.list_topics()
    finally:
        admin.close()


def _alter_log_dir(cluster: BrokerCluster, broker: int, topic: str, partition: int, path: str) -> ErrorCode:
    async def send() -> ErrorCode:
        async with KafkaConnection("127.0.0.1", cluster.broker_ports[broker]) as connection:
            response = await connection.send(AlterReplicaLogDirsRequest(dirs=(AlterReplicaLogDir(
                path=path, topics=(AlterReplicaLogDirTopic(name=TopicName(topic), partitions=(i32(partition),)),)),)))
            return ErrorCode(response.results[0].partitions[0].error_code)
    return asyncio.run(send())


def log_dirs_of(cluster: BrokerCluster, broker: int, topic: str) -> list[tuple[str, bool, int]]:
    """(log dir, is future, offset lag) of every replica of `topic` on `broker`, from `kraft log-dirs`."""
    out = kraft_tool("log-dirs", "--describe", "--bootstrap-server", cluster.broker_bootstrap(), "--broker-list",
                     str(broker), "--topic-list", topic, check=True).stdout
    document = json.loads(out.splitlines()[-1])
    return sorted((d["logDir"], p["isFuture"], p["offsetLag"]) for d in document["brokers"][0]["logDirs"]
                  for p in d["partitions"])


def test_a_replica_moves_between_log_dirs_under_load_and_a_kill_9_mid_move_loses_nothing(
        brokers: BrokerCluster, tmp_path: Path) -> None:
    topic = "moving"
    create_topic(brokers, topic, partitions=1, replication_factor=3, configs={"segment.bytes": str(1024 * 1024)})
    acked = produce_numbered(brokers, topic, partitions=1, count=3000)
    mover = 101
    node_dir = brokers.root / f"broker-{mover}"
    source = Path(brokers.partitions(mover)[(topic, 0)]["log_dir"])
    destination = next(d for d in (node_dir / "data-a", node_dir / "data-b") if d != source)

    # Bad input first: a path that is not one of log.dirs, and a replica the broker does not host.
    assert _alter_log_dir(brokers, mover, topic, 0, str(tmp_path)) == ErrorCode.log_dir_not_found
    assert _alter_log_dir(brokers, mover, "no-such-topic", 0, str(destination)) == ErrorCode.replica_not_available

    # 1. kill -9 in the middle of a move, which the restarted broker resumes and completes. With
    # the controllers stopped the new placement cannot be reported, so the caught-up future
    # replica waits beside the current one; kill -9 there.
    for controller in (1, 2, 3):
        brokers.signal(controller, signal.SIGSTOP)
    try:
        assert _alter_log_dir(brokers, mover, topic, 0, str(destination.resolve())) == ErrorCode.none
        waiting = sorted([(str(source.resolve()), False, 0), (str(destination.resolve()), True, 0)])
        wait_for(lambda: log_dirs_of(brokers, mover, topic) == waiting, timeout_s=60,
                 what="the future replica to catch up and wait for the controller")
        assert len(list(destination.glob(f"{topic}-0.*-future"))) == 1
        brokers.kill(mover)
    finally:
        for controller in (1, 2, 3):
            brokers.signal(controller, signal.SIGCONT)
    # While it is down the partition takes 1000 more acks=all writes: the restarted replica's
    # current log fetches them from the leader, and the resumed future replica copies them after it.
    acked += produce_numbered(brokers, topic, partitions=1, count=1000, first=3000)
    brokers.start(mover)
    brokers.wait_ready([mover])
    # Nobody asks again: the move goes on from the future replica on disk and completes.
    moved_there = [(str(destination.resolve()), False, 0)]
    wait_for(lambda: log_dirs_of(brokers, mover, topic) == moved_there, timeout_s=120,
             what="the interrupted move to resume and complete")
    assert brokers.partitions(mover)[(topic, 0)]["log_dir"] == str(destination)
    assert list(source.glob(f"{topic}-0*")) == []
    assert list(destination.glob(f"{topic}-0.*")) == []  # no future or deleted copy left behind
    brokers.wait_isr(topic, 0, set(brokers.brokers))

    # 2. A move back through Kafka's reassignment JSON, under an acks=all idempotent workload.
    source, destination = destination, source
    leader = brokers.partitions(mover)[(topic, 0)]["leader"]
    replicas = [int(r) for r in brokers.partitions(leader)[(topic, 0)]["isr"]]
    plan = tmp_path / "reassign.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas,
                                "log_dirs": [str(destination.resolve()) if r == mover else "any" for r in replicas]}]}))
    more: list[tuple[int, int, bytes]] = []

    def workload() -> None:
        send = KafkaProducer(bootstrap_servers=brokers.broker_bootstrap(), acks="all", enable_idempotence=True,
                             linger_ms=5, request_timeout_ms=30000)
        try:
            for chunk in range(10):
                futures = [(v, send.send(topic, value=v, partition=0)) for v in
                           (f"{topic}-{4000 + chunk * 200 + i}-".encode() + b"w" * 1000 for i in range(200))]
                send.flush()
                more.extend((m.partition, m.offset, v) for v, m in ((v, f.get(timeout=60)) for v, f in futures))
        finally:
            send.close()

    writer = threading.Thread(target=workload)
    writer.start()
    result = kraft_tool("reassign-partitions", "--bootstrap-server", brokers.broker_bootstrap(),
                        "--reassignment-json-file", str(plan), "--execute")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (f"Successfully started moving log directory to {destination.resolve()} for replica {topic}-0 "
            f"with broker {mover} \n") in result.stdout
    assert "Save this to use as the --reassignment-json-file option during rollback" in result.stdout

    def moved() -> bool:
        verify = kraft_tool("reassign-partitions", "--bootstrap-server", brokers.broker_bootstrap(),
                            "--reassignment-json-file", str(plan), "--verify", check=True).stdout
        return f"Reassignment of replica {topic}-0-{mover} completed successfully." in verify
    wait_for(moved, timeout_s=120, what="the log directory move to complete")
    writer.join(timeout=180)
    assert not writer.is_alive()
    assert brokers.partitions(mover)[(topic, 0)]["log_dir"] == str(destination)
    assert log_dirs_of(brokers, mover, topic) == [(str(destination.resolve()), False, 0)]
    assert list(source.glob(f"{topic}-0*")) == []  # the old copy is deleted, nothing left behind

    # 3. kill -9 after the move: the replica restarts from its new directory with every record.
    brokers.kill(mover)
    brokers.start(mover)
    brokers.wait_ready([mover])
    brokers.wait_isr(topic, 0, set(brokers.brokers))
    assert brokers.partitions(mover)[(topic, 0)]["log_dir"] == str(destination)
    assert len(acked) + len(more) == 6000
    wait_for(lambda: all(brokers.partitions(b)[(topic, 0)]["log_end_offset"] == 6000 for b in brokers.brokers),
             timeout_s=90, what="every replica to hold the 6000 records")
    stored = read_back(brokers, topic, 1)
    assert anomalies(acked + more, stored) == CLEAN
    # The moved replica holds the leader's batches byte for byte (offsets, epochs, records).
    other = next(b for b in sorted(brokers.brokers) if b != mover)
    assert log_bytes(brokers, mover, topic) == log_bytes(brokers, other, topic)


def log_bytes(cluster: BrokerCluster, broker: int, topic: str) -> bytes:
    segments = sorted((cluster.root / f"broker-{broker}").glob(f"data-*/{topic}-0/*.log"), key=lambda p: p.name)
    return b"".join(path.read_bytes() for path in segments)
