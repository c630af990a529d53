"""A broker's /metrics and /readyz as Prometheus scrapes them, on three of our brokers and three
controllers (real processes): Kafka's ReplicaManager gauges, BrokerTopicMetrics per topic and the
request time per API, checked against exactly what the test sent and fetched."""

from __future__ import annotations

import asyncio
import warnings
from datetime import timedelta
from typing import Any

import pytest
from broker_processes import BrokerCluster
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64
from prometheus_client.parser import text_string_to_metric_families
from quorum_processes import HOST

from kraft_engine.protocol import KafkaConnection
from kraft_engine.records.batches import build_batch

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = [
    pytest.mark.process,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

TOPIC = "metered"
BATCHES = 4
RECORDS_PER_BATCH = 5


@pytest.fixture
def cluster(module_brokers: BrokerCluster) -> BrokerCluster:
    return module_brokers


def _samples(cluster: BrokerCluster, node_id: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = cluster.http_text(node_id, "/metrics")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    if key not in samples:
        raise AssertionError(f"no sample {name}{labels}")
    return samples[key]


def _produce(records: bytes) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(timedelta(seconds=30)), topic_data=(
        TopicProduceData(name=TopicName(TOPIC), partition_data=(PartitionProduceData(index=i32(0), records=Records(records)),)),))


def _fetch_all() -> FetchRequest:
    return FetchRequest(cluster_id=None, replica_id=BrokerId(-1), max_wait=i32Timedelta.parse(timedelta(0)), min_bytes=i32(1),
                        max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
                        topics=(FetchTopic(topic=TopicName(TOPIC), partitions=(FetchPartition(
                            partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0), last_fetched_epoch=i32(-1),
                            log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),)),),
                        forgotten_topics_data=(), rack_id="")


def test_topic_traffic_request_times_and_replica_gauges_count_what_happened(cluster: BrokerCluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.broker_bootstrap(), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 3, topic_configs={"min.insync.replicas": "3"})])
    finally:
        admin.close()
    cluster.wait_isr(TOPIC, 0, set(cluster.brokers))
    leader = next(n for n in cluster.brokers if cluster.partitions(n)[(TOPIC, 0)]["leader"] == n)
    batch = build_batch(base_offset=0, partition_leader_epoch=-1, values=[b"r" * 10] * RECORDS_PER_BATCH,
                        timestamp_ms=1_700_000_000_000)

    async def traffic() -> dict[str, Any]:
        async with KafkaConnection(HOST, cluster.broker_ports[leader]) as connection:
            await connection.connect()
            produced = [await connection.send(_produce(batch)) for _ in range(BATCHES)]
            refused = await connection.send(_produce(b"\x00garbage"))
            fetched = await connection.send(_fetch_all())
            return {"produced": produced, "refused": refused, "fetched": fetched}

    result = asyncio.run(traffic())
    assert [ErrorCode(p.responses[0].partition_responses[0].error_code) for p in result["produced"]] == [ErrorCode.none] * 4
    assert ErrorCode(result["refused"].responses[0].partition_responses[0].error_code) == ErrorCode.corrupt_message
    fetched_bytes = len(result["fetched"].responses[0].partitions[0].records)
    assert fetched_bytes == BATCHES * len(batch)

    samples = _samples(cluster, leader)
    prefix = "kafka_server_brokertopicmetrics_"
    assert _value(samples, prefix + "bytesin_total", topic=TOPIC) == BATCHES * len(batch)
    assert _value(samples, prefix + "messagesin_total", topic=TOPIC) == BATCHES * RECORDS_PER_BATCH
    assert _value(samples, prefix + "bytesout_total", topic=TOPIC) == fetched_bytes
    assert _value(samples, prefix + "failedproducerequests_total", topic=TOPIC) == 1
    # Both followers fetched every batch from the leader at least once.
    assert _value(samples, prefix + "replicationbytesout_total", topic=TOPIC) >= 2 * BATCHES * len(batch)
    produce_times = _value(samples, "kafka_network_requestmetrics_totaltimems_count", listener="PLAINTEXT",
                           request="Produce")
    assert produce_times >= BATCHES + 1
    assert _value(samples, "kafka_network_requestmetrics_totaltimems_bucket", listener="PLAINTEXT", request="Produce",
                  le="+Inf") == produce_times

    # ReplicaManager gauges: the ISR (3) is at the topic's min.insync.replicas (3), not under it.
    for node_id in cluster.brokers:
        gauges = _samples(cluster, node_id)
        led = sum(1 for (t, p), s in cluster.partitions(node_id).items() if s["leader"] == node_id)
        rm = "kafka_server_replicamanager_"
        assert _value(gauges, rm + "leadercount") == led
        assert _value(gauges, rm + "partitioncount") == len(cluster.partitions(node_id))
        assert _value(gauges, rm + "atminisrpartitioncount") == (1 if node_id == leader else 0)
        assert _value(gauges, rm + "underminisrpartitioncount") == 0
        assert _value(gauges, rm + "underreplicatedpartitions") == 0
        assert _value(gauges, "kafka_server_kafkaserver_brokerstate") == 3  # RUNNING
        assert cluster.ready(node_id)
