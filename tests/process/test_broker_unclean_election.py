"""Leadership follows the controller's unclean elections where a topic allows them, with Kafka's
truncation rules, on real processes.

Two topics on brokers 101 (preferred leader) and 102, `min.insync.replicas=1`, one with
`unclean.leader.election.enable=true`. 100 records reach both replicas; 102 dies (kill -9) and
leaves the ISR; 50 more records are acknowledged by 101 alone; then 101 dies (kill -9) and 102
comes back. The topic that allows it gets 102 as its leader although 102 was out of the ISR
(Kafka's unclean election: its 50 records are lost, as Kafka loses them) and takes new writes at
offset 100. The other topic stays without a leader rather than lose anything. When 101 restarts
it follows 102 on the first topic and truncates its own 50 records through the leader's
diverging-epoch answer (Kafka's follower truncation): both replicas then hold the same batches
byte for byte, the 100 common records and the new ones at their offsets, with no offset holding
two values. On the second topic 101 leads again with all 150 records.

DescribeCluster through kafka-python's admin (v2, fenced brokers included) lists the three
brokers with their endpoints, and 101 as fenced while it is down.
"""

from __future__ import annotations

import warnings

import pytest
import test_broker_cluster
from broker_processes import BrokerCluster
from quorum_processes import wait_for
from record_checks import CLEAN, anomalies
from test_broker_cluster import read_back
from test_broker_log_management import log_bytes

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = [
    pytest.mark.process,
    pytest.mark.timeout(600),
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

brokers = test_broker_cluster.brokers  # three controllers and three brokers, per test
UNCLEAN, CLEAN_ONLY = "unclean", "cleanonly"


def _send(cluster: BrokerCluster, topic: str, *, first: int, count: int, nodes: list[int]) -> list[tuple[int, int, bytes]]:
    send = KafkaProducer(bootstrap_servers=cluster.broker_bootstrap(nodes), acks="all", enable_idempotence=True,
                         linger_ms=5, request_timeout_ms=60000)
    try:
        futures = [(v, send.send(topic, value=v, partition=0))
                   for v in (f"{topic}-{i}-".encode() + b"u" * 200 for i in range(first, first + count))]
        send.flush()
        return [(m.partition, m.offset, v) for v, m in ((v, f.get(timeout=90)) for v, f in futures)]
    finally:
        send.close()


def _replica(cluster: BrokerCluster, broker: int, topic: str) -> dict[str, object] | None:
    return cluster.partitions(broker).get((topic, 0))


def _described_brokers(cluster: BrokerCluster, nodes: list[int]) -> list[tuple[int, str, int, bool]]:
    admin = KafkaAdminClient(bootstrap_servers=cluster.broker_bootstrap(nodes), request_timeout_ms=30000)
    try:
        described = admin.describe_cluster()
    finally:
        admin.close()
    assert described["cluster_id"] == cluster.cluster_id, described
    return sorted((b["broker_id"], b["host"], b["port"], b["is_fenced"]) for b in described["brokers"])


def test_an_unclean_election_where_the_topic_allows_it_and_the_old_leader_truncates_to_the_new_one(
        brokers: BrokerCluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=brokers.broker_bootstrap(), request_timeout_ms=30000)
    try:
        admin.create_topics([
            NewTopic(UNCLEAN, -1, -1, replica_assignments={0: [101, 102]},
                     topic_configs={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"}),
            NewTopic(CLEAN_ONLY, -1, -1, replica_assignments={0: [101, 102]},
                     topic_configs={"min.insync.replicas": "1"})])
    finally:
        admin.close()
    endpoints = [(b, "127.0.0.1", brokers.broker_ports[b]) for b in sorted(brokers.brokers)]
    assert _described_brokers(brokers, [101, 102, 103]) == [(*e, False) for e in endpoints]
    for topic in (UNCLEAN, CLEAN_ONLY):
        wait_for(lambda t=topic: (r := _replica(brokers, 101, t)) is not None and r["leader"] == 101
                 and r["isr"] == [101, 102], timeout_s=90, what=f"{topic}-0 led by 101 with ISR [101, 102]")
    common = {t: _send(brokers, t, first=0, count=100, nodes=[101, 103]) for t in (UNCLEAN, CLEAN_ONLY)}
    wait_for(lambda: all(_replica(brokers, 102, t)["log_end_offset"] == 100 for t in (UNCLEAN, CLEAN_ONLY)),  # type: ignore[index]
             timeout_s=90, what="102 to hold the first 100 records of both topics")

    # 102 dies (kill -9: a stopped process would still find the leader's answer to its pending
    # fetch in its socket when it resumes); acks=all goes on once it left the ISR, and 101 alone
    # acknowledges 50 more. Then 101 dies too, and 102 comes back.
    brokers.kill(102)
    alone = {t: _send(brokers, t, first=100, count=50, nodes=[101, 103]) for t in (UNCLEAN, CLEAN_ONLY)}
    for topic in (UNCLEAN, CLEAN_ONLY):
        assert _replica(brokers, 101, topic)["isr"] == [101]  # type: ignore[index]
        assert [offset for _, offset, _ in alone[topic]] == list(range(100, 150))
    brokers.kill(101)
    brokers.start(102)
    brokers.wait_ready([102])

    # The topic that allows it elects 102 although it was out of the ISR; the other waits.
    wait_for(lambda: (r := _replica(brokers, 102, UNCLEAN)) is not None and r["leader"] == 102, timeout_s=120,
             what=f"an unclean election of 102 for {UNCLEAN}-0")
    assert _replica(brokers, 102, UNCLEAN)["log_end_offset"] == 100  # type: ignore[index]
    after = _send(brokers, UNCLEAN, first=150, count=30, nodes=[102, 103])
    assert [offset for _, offset, _ in after] == list(range(100, 130))
    assert _replica(brokers, 102, CLEAN_ONLY)["leader"] != 102  # type: ignore[index]
    # 101 was fenced before 102 could be elected: DescribeCluster says so.
    assert _described_brokers(brokers, [102, 103]) == [(*e, e[0] == 101) for e in endpoints]

    # 101 comes back: it truncates its 50 records away and follows 102 on the unclean topic;
    # on the other it leads again with everything it acknowledged.
    brokers.start(101)
    brokers.wait_ready([101])
    wait_for(lambda: all((r := _replica(brokers, b, UNCLEAN)) is not None and r["log_end_offset"] == 130
                         and r["high_watermark"] == 130 for b in (101, 102)), timeout_s=120,
             what=f"both replicas of {UNCLEAN}-0 to end at 130")
    brokers.wait_isr(UNCLEAN, 0, {101, 102}, timeout_s=120)
    assert log_bytes(brokers, 101, UNCLEAN) == log_bytes(brokers, 102, UNCLEAN)
    stored = read_back(brokers, UNCLEAN, 1, bootstrap=brokers.broker_bootstrap([102, 103]))
    assert anomalies(common[UNCLEAN] + after, stored) == CLEAN
    assert sorted(stored) == [(0, offset) for offset in range(130)]
    assert not set(stored.values()) & {value for _, _, value in alone[UNCLEAN]}  # lost, as Kafka loses them

    wait_for(lambda: (r := _replica(brokers, 101, CLEAN_ONLY)) is not None and r["leader"] == 101, timeout_s=120,
             what=f"101 to lead {CLEAN_ONLY}-0 again")
    brokers.wait_isr(CLEAN_ONLY, 0, {101, 102}, timeout_s=120)
    stored = read_back(brokers, CLEAN_ONLY, 1)
    assert anomalies(common[CLEAN_ONLY] + alone[CLEAN_ONLY], stored) == CLEAN
    assert sorted(stored) == [(0, offset) for offset in range(150)]
