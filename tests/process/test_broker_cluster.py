"""Our brokers as real processes behind three real controllers, driven by kafka-python (a client
not written here, idempotent by default): topics created through a broker, acks=all writes read
back by offset, a leader killed with SIGKILL under an acks=all idempotent workload without a
lost, duplicated or reordered record, SIGTERM as a controlled shutdown, and bad produce input
(garbage, truncated, wrong CRC, oversized, two batches, unknown topic) answered with Kafka's error
codes while nothing is written; acks=0, acks=1 and ListOffsets by timestamp through real clients."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from broker_processes import BrokerCluster, start_cluster
from kio.schema.describe_topic_partitions.v0.request import DescribeTopicPartitionsRequest
from kio.schema.describe_topic_partitions.v0.request import TopicRequest as DescribeTopic
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64
from quorum_processes import kraft_tool, wait_for
from record_checks import add_read, anomalies

from kraft_engine.protocol import KafkaConnection
from kraft_engine.records.batches import build_batch

# kafka-python loads its schemas through importlib.resources' legacy API.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = [
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

TOPIC = "orders"


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[BrokerCluster]:
    cluster = BrokerCluster(root=tmp_path)
    try:
        start_cluster(cluster)
        yield cluster
    finally:
        cluster.cleanup()


def create_topic(cluster: BrokerCluster, name: str, *, partitions: int, replication_factor: int,
                 configs: dict[str, str] | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.broker_bootstrap(), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, partitions, replication_factor, topic_configs=configs or {})])
    finally:
        admin.close()
    for partition in range(partitions):
        cluster.wait_isr(name, partition, set(cluster.brokers))


def producer(cluster: BrokerCluster) -> KafkaProducer:
    """kafka-python's defaults: idempotence on (InitProducerId, sequence numbers), retries."""
    return KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(), acks="all", enable_idempotence=True,
                         linger_ms=2, request_timeout_ms=30000)


def read_back(cluster: BrokerCluster, topic: str, partitions: int, *, bootstrap: str | None = None) -> dict[tuple[int, int], bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap or cluster.broker_bootstrap(), enable_auto_commit=False,
                             group_id=None, consumer_timeout_ms=5000)
    try:
        assignment = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assignment)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(assignment)
        stored: dict[tuple[int, int], bytes] = {}
        while any(consumer.position(tp) < ends[tp] for tp in assignment):
            for records in consumer.poll(timeout_ms=2000).values():
                for record in records:
                    add_read(stored, partition=record.partition, offset=record.offset, value=record.value)
        return stored
    finally:
        consumer.close()


def test_kafka_python_creates_a_topic_produces_with_acks_all_and_reads_every_record_back(brokers: BrokerCluster) -> None:
    create_topic(brokers, TOPIC, partitions=3, replication_factor=3)
    send = producer(brokers)
    acked = []
    futures = [(i, send.send(TOPIC, value=f"v-{i}".encode(), partition=i % 3)) for i in range(600)]
    send.flush()
    for i, future in futures:
        metadata = future.get(timeout=60)
        acked.append((metadata.partition, metadata.offset, f"v-{i}".encode()))
    send.close()
    # gzip batches are validated (decompressed, every record parsed) and stored as received.
    gzipped = KafkaProducer(bootstrap_servers=brokers.broker_bootstrap(), acks="all", compression_type="gzip",
                            linger_ms=20, request_timeout_ms=30000)
    futures = [(i, gzipped.send(TOPIC, value=f"v-{i}".encode(), partition=i % 3)) for i in range(600, 900)]
    gzipped.flush()
    for i, future in futures:
        metadata = future.get(timeout=60)
        acked.append((metadata.partition, metadata.offset, f"v-{i}".encode()))
    gzipped.close()
    stored = read_back(brokers, TOPIC, 3)
    assert anomalies(acked, stored) == {"lost": [], "duplicated": [], "reordered": []}
    assert len(stored) == 900
    # Every replica holds every record: each broker's log end is the partition's high watermark.
    for node_id in brokers.brokers:
        for partition in range(3):
            replica = brokers.partitions(node_id)[(TOPIC, partition)]
            assert replica["log_end_offset"] == 300


def test_kill_9_of_a_partition_leader_under_acks_all_loses_no_acknowledged_record(brokers: BrokerCluster) -> None:
    create_topic(brokers, TOPIC, partitions=1, replication_factor=3)
    leader = next(n for n in brokers.brokers if brokers.partitions(n)[(TOPIC, 0)]["leader"] == n)
    process = brokers.nodes[leader].process
    assert process is not None
    # The workload runs in its own process (a real client process) and kills the leader itself
    # between two acknowledged writes.
    result = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("kafka_python_producer.py")), brokers.broker_bootstrap(), TOPIC,
         "0", "400", "150", str(process.pid)],
        capture_output=True, text=True, timeout=600, check=True,
    )
    brokers.kill(leader)  # reaps it
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    acked = [(line["partition"], line["offset"], f"v-{line['i']}".encode()) for line in lines if "offset" in line]
    failed = [line for line in lines if "error" in line]
    # The idempotent producer retries through the failover: every write is acknowledged once.
    assert failed == [] and len(acked) == 400, result.stderr[-2000:]
    survivors = sorted(brokers.brokers - {leader})
    stored = read_back(brokers, TOPIC, 1, bootstrap=brokers.broker_bootstrap(survivors))
    assert anomalies(acked, stored) == {"lost": [], "duplicated": [], "reordered": []}
    # The killed broker comes back, truncates what it must, catches up and rejoins the ISR.
    brokers.start(leader)
    brokers.wait_ready([leader])
    brokers.wait_isr(TOPIC, 0, set(brokers.brokers))
    assert read_back(brokers, TOPIC, 1) == stored


def test_sigterm_is_a_controlled_shutdown_that_moves_leadership_first(brokers: BrokerCluster) -> None:
    create_topic(brokers, TOPIC, partitions=3, replication_factor=3)
    victim = next(n for n in sorted(brokers.brokers) if any(
        p["leader"] == n for p in brokers.partitions(n).values()))
    brokers.signal(victim, signal.SIGTERM)
    process = brokers.nodes[victim].process
    assert process is not None
    assert process.wait(timeout=120) == 0
    log = brokers.log(victim)
    assert "is now SHUTTING_DOWN" in log
    # Before it exited, the controller had moved every leadership to the other brokers.
    survivors = sorted(brokers.brokers - {victim})
    def moved() -> bool:
        for partition in range(3):
            leaders = {brokers.partitions(n)[(TOPIC, partition)]["leader"] for n in survivors}
            if victim in leaders or -1 in leaders:
                return False
        return True
    wait_for(moved, timeout_s=30, what="every leadership away from the stopped broker")
    # (Bootstrapping from the stopped broker's address would leak kafka-python's failed socket.)
    send = KafkaProducer(bootstrap_servers=brokers.broker_bootstrap(survivors), acks="all", linger_ms=2,
                         request_timeout_ms=30000)
    send.send(TOPIC, value=b"after-shutdown", partition=0).get(timeout=60)
    send.close()


def test_a_broker_refuses_to_start_on_an_unformatted_metadata_log_dir(tmp_path: Path) -> None:
    """A log directory added to a formatted broker is formatted at its start (Kafka's server does
    it, `test_meta_properties.py`); the metadata log directory is not: without it the broker is
    no formatted node at all, and refuses to start."""
    cluster = BrokerCluster(root=tmp_path)
    cluster.extra_config["kraftwerk.test.state.machine.enable"] = "false"
    cluster.add_node(1)
    broker = cluster.add_broker(101)
    cluster.format(101)
    (broker.data_dir / "meta.properties").unlink()
    data_b = broker.config_path.parent / "data-b"
    (data_b / "meta.properties").unlink()
    result = kraft_tool("server", "start", "--config", str(broker.config_path))
    assert result.returncode == 1
    assert "No meta.properties found in" in result.stderr and str(broker.data_dir) in result.stderr
    assert not (data_b / "meta.properties").exists()  # nothing written for a node that is not formatted


def _produce(topic: str, records: bytes, *, acks: int = -1, partition: int = 0) -> Any:
    return ProduceRequest(
        transactional_id=None, acks=i16(acks), timeout=i32Timedelta.parse(timedelta(seconds=30)),
        topic_data=(TopicProduceData(name=TopicName(topic), partition_data=(
            PartitionProduceData(index=i32(partition), records=Records(records)),)),),
    )


def _latest_offset(connection: KafkaConnection, topic: str) -> Any:
    async def ask() -> Any:
        return await connection.send(ListOffsetsRequest(replica_id=BrokerId(-1), isolation_level=i8(0), topics=(
            ListOffsetsTopic(name=TopicName(topic), partitions=(
                ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(-1)),)),)))
    return ask


def test_bad_produce_input_gets_kafkas_error_and_nothing_is_written(brokers: BrokerCluster) -> None:
    create_topic(brokers, TOPIC, partitions=1, replication_factor=3)
    leader = next(n for n in brokers.brokers if brokers.partitions(n)[(TOPIC, 0)]["leader"] == n)
    good = build_batch(base_offset=0, partition_leader_epoch=-1, values=[b"a", b"b"], timestamp_ms=1_700_000_000_000)
    wrong_crc = good[:-1] + bytes([good[-1] ^ 0xFF])
    oversized = build_batch(base_offset=0, partition_leader_epoch=-1, values=[b"x" * 1_100_000],
                            timestamp_ms=1_700_000_000_000)
    later = build_batch(base_offset=0, partition_leader_epoch=-1, values=[b"c"], timestamp_ms=1_700_000_100_000)

    async def scenario() -> dict[str, Any]:
        async with KafkaConnection("127.0.0.1", brokers.broker_ports[leader]) as connection:
            await connection.connect()
            codes = {}
            for name, records in (("garbage", b"\x00garbage" * 40), ("truncated", good[:-7]), ("wrong crc", wrong_crc),
                                  ("oversized", oversized), ("two batches", good + good)):
                response = await connection.send(_produce(TOPIC, records))
                answer = response.responses[0].partition_responses[0]
                codes[name] = (ErrorCode(answer.error_code), answer.error_message is not None)
            unknown = await connection.send(_produce("no-such-topic", good))
            codes["unknown topic"] = (ErrorCode(unknown.responses[0].partition_responses[0].error_code), False)
            accepted = await connection.send(_produce(TOPIC, good))
            with_acks_1 = await connection.send(_produce(TOPIC, later, acks=1))
            latest = await _latest_offset(connection, TOPIC)()
            return {"codes": codes, "accepted": accepted, "acks_1": with_acks_1, "latest": latest}

    result = asyncio.run(scenario())
    assert result["codes"] == {
        "garbage": (ErrorCode.corrupt_message, True),
        "truncated": (ErrorCode.corrupt_message, True),
        "wrong crc": (ErrorCode.corrupt_message, True),
        "oversized": (ErrorCode.message_too_large, True),
        "two batches": (ErrorCode.invalid_record, True),
        "unknown topic": (ErrorCode.unknown_topic_or_partition, False),
    }
    # Nothing was written before the good batch: it lands at offset 0.
    accepted = result["accepted"].responses[0].partition_responses[0]
    assert (ErrorCode(accepted.error_code), int(accepted.base_offset)) == (ErrorCode.none, 0)
    assert int(result["acks_1"].responses[0].partition_responses[0].base_offset) == 2
    # acks=1 answers before the followers have it: the high watermark (what "latest" means to a
    # consumer) was 2 or 3 then, and reaches 3 once they fetch.
    assert int(result["latest"].topics[0].partitions[0].offset) in (2, 3)
    # ListOffsets by timestamp: the first record at or after it, with its exact millisecond time.
    consumer = KafkaConsumer(bootstrap_servers=brokers.broker_bootstrap(), enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(TOPIC, 0)
        wait_for(lambda: consumer.end_offsets([tp])[tp] == 3, timeout_s=30, what="the acks=1 record replicated")
        found = consumer.offsets_for_times({tp: 1_700_000_050_000})[tp]
        assert (found.offset, found.timestamp) == (2, 1_700_000_100_000)
        assert consumer.offsets_for_times({tp: 1_700_000_100_001})[tp] is None
        # acks=0 gets no answer at all, and the write still lands.
        quiet = KafkaProducer(bootstrap_servers=brokers.broker_bootstrap(), acks=0, enable_idempotence=False)
        quiet.send(TOPIC, value=b"fire-and-forget", partition=0)
        quiet.flush()
        quiet.close()
        wait_for(lambda: consumer.end_offsets([tp])[tp] == 4, timeout_s=30, what="the acks=0 record")
    finally:
        consumer.close()


def test_acks_all_is_refused_with_not_enough_replicas_below_min_insync_replicas(brokers: BrokerCluster) -> None:
    create_topic(brokers, TOPIC, partitions=1, replication_factor=3, configs={"min.insync.replicas": "3"})
    leader = next(n for n in brokers.brokers if brokers.partitions(n)[(TOPIC, 0)]["leader"] == n)
    follower = min(brokers.brokers - {leader})
    brokers.kill(follower)
    # The controller fences the silent broker after its session timeout and takes it out of the ISR.
    brokers.wait_isr(TOPIC, 0, set(brokers.brokers) - {follower})
    batch = build_batch(base_offset=0, partition_leader_epoch=-1, values=[b"x"], timestamp_ms=1_700_000_000_000)

    async def produce(acks: int) -> tuple[ErrorCode, int]:
        async with KafkaConnection("127.0.0.1", brokers.broker_ports[leader]) as connection:
            response = await connection.send(_produce(TOPIC, batch, acks=acks))
            answer = response.responses[0].partition_responses[0]
            return ErrorCode(answer.error_code), int(answer.base_offset)

    assert asyncio.run(produce(-1))[0] == ErrorCode.not_enough_replicas
    # acks=1 does not need the ISR: it is written, and it is the first record (nothing was before).
    assert asyncio.run(produce(1)) == (ErrorCode.none, 0)

    # The cluster finalizes eligible.leader.replicas.version 1 (every node supports it): the fenced
    # follower left the ISR below min ISR, so it stays eligible (KIP-966), which
    # DescribeTopicPartitions shows; and the leader holds its high watermark below min ISR, so the
    # acks=1 record is not committed (consumers do not see it) until the follower is back.
    async def described() -> tuple[tuple[int, ...], tuple[int, ...], int]:
        async with KafkaConnection("127.0.0.1", brokers.broker_ports[leader]) as connection:
            response = await connection.send(DescribeTopicPartitionsRequest(topics=(DescribeTopic(name=TopicName(TOPIC)),)))
            part = response.topics[0].partitions[0]
            listed = await _latest_offset(connection, TOPIC)()
            return (tuple(sorted(int(r) for r in part.isr_nodes)), tuple(int(r) for r in part.eligible_leader_replicas),
                    int(listed.topics[0].partitions[0].offset))

    assert asyncio.run(described()) == (tuple(sorted(brokers.brokers - {follower})), (follower,), 0)
    brokers.start(follower)
    brokers.wait_isr(TOPIC, 0, set(brokers.brokers))
    wait_for(lambda: asyncio.run(described()) == (tuple(sorted(brokers.brokers)), (), 1), timeout_s=90,
             what="the ELR cleared and the acks=1 record committed once the ISR is back at min ISR")


def _metric(cluster: BrokerCluster, node_id: int, name: str) -> float:
    for line in cluster.http_text(node_id, "/metrics").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"broker {node_id} exports no {name}")


def test_a_stopped_follower_leaves_the_isr_after_the_lag_time_and_rejoins_urp_back_to_zero(tmp_path: Path) -> None:
    # The session outlasts the stop by far, so the leader's lag check is what takes the follower out
    # of the ISR (AlterPartition, counted in isrshrinks), never the controller fencing a silent
    # broker (which a loaded machine reached first once: the ISR shrank and the counter stayed 0).
    cluster = BrokerCluster(root=tmp_path, broker_config={"replica.lag.time.max.ms": "3000"},
                            extra_config={"broker.session.timeout.ms": "120000"})  # the controllers' key
    try:
        start_cluster(cluster)
        create_topic(cluster, TOPIC, partitions=1, replication_factor=3)
        leader = next(n for n in cluster.brokers if cluster.partitions(n)[(TOPIC, 0)]["leader"] == n)
        follower = min(cluster.brokers - {leader})
        assert _metric(cluster, leader, "kafka_server_replicamanager_underreplicatedpartitions") == 0
        cluster.signal(follower, signal.SIGSTOP)
        batch = build_batch(base_offset=0, partition_leader_epoch=-1, values=[b"during-stop"],
                            timestamp_ms=1_700_000_000_000)

        async def produce() -> tuple[ErrorCode, int]:
            async with KafkaConnection("127.0.0.1", cluster.broker_ports[leader]) as connection:
                response = await connection.send(_produce(TOPIC, batch), timeout_ms=60_000)
                answer = response.responses[0].partition_responses[0]
                return ErrorCode(answer.error_code), int(answer.base_offset)

        # acks=all waits for the stopped follower until the leader drops it from the ISR.
        assert asyncio.run(produce()) == (ErrorCode.none, 0)
        assert follower not in cluster.partitions(leader)[(TOPIC, 0)]["isr"]
        assert _metric(cluster, leader, "kafka_server_replicamanager_isrshrinks_total") >= 1
        assert _metric(cluster, leader, "kafka_server_replicamanager_underreplicatedpartitions") == 1
        cluster.signal(follower, signal.SIGCONT)
        cluster.wait_isr(TOPIC, 0, set(cluster.brokers))
        wait_for(lambda: _metric(cluster, leader, "kafka_server_replicamanager_underreplicatedpartitions") == 0,
                 timeout_s=30, what="URP back to 0")
        assert _metric(cluster, leader, "kafka_server_replicamanager_isrexpands_total") >= 1
        assert cluster.partitions(follower)[(TOPIC, 0)]["log_end_offset"] == 1
    finally:
        cluster.cleanup()


def test_kraft_topics_against_brokers_creates_describes_and_shows_under_replicated_partitions(
    brokers: BrokerCluster,
) -> None:
    bootstrap = brokers.broker_bootstrap()
    created = kraft_tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", "demo", "--partitions", "2",
                         "--replication-factor", "3", "--config", "min.insync.replicas=3", check=True)
    assert created.stdout == "Created topic demo.\n"
    for partition in (0, 1):
        brokers.wait_isr("demo", partition, set(brokers.brokers))
    described = kraft_tool("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", "demo", check=True)
    lines = described.stdout.splitlines()
    assert lines[0].startswith("Topic: demo\tTopicId: ") and "PartitionCount: 2\tReplicationFactor: 3" in lines[0]
    assert "min.insync.replicas=3" in lines[0]
    assert len(lines) == 3 and all("\tIsr: " in line for line in lines[1:])
    # ELR from DescribeTopicPartitions, as Kafka 4.x's kafka-topics prints it: empty at full ISR.
    assert all(line.endswith("\tElr: \tLastKnownElr: ") for line in lines[1:]), lines
    assert kraft_tool("topics", "--bootstrap-server", bootstrap, "--describe", "--under-replicated-partitions",
                      check=True).stdout == ""
    victim = max(brokers.brokers)
    brokers.kill(victim)
    survivors = brokers.broker_bootstrap(sorted(brokers.brokers - {victim}))
    for partition in (0, 1):
        brokers.wait_isr("demo", partition, set(brokers.brokers) - {victim})
    under = kraft_tool("topics", "--bootstrap-server", survivors, "--describe", "--under-replicated-partitions",
                       check=True).stdout.splitlines()
    assert [line.split("\t")[2] for line in under] == ["Partition: 0", "Partition: 1"]
    # Below min.insync.replicas=3 the fenced broker stays eligible (KIP-966, ELR finalized).
    assert all(line.endswith(f"\tElr: {victim}\tLastKnownElr: ") for line in under), under
    under_min = kraft_tool("topics", "--bootstrap-server", survivors, "--describe", "--under-min-isr-partitions",
                           check=True).stdout.splitlines()
    assert len(under_min) == 2
