"""A deleted topic leaves nothing a broker would serve again, on real processes and real files.

- Deleted while a replica is being moved between log directories (AlterReplicaLogDirs, held back
  by the alter-log-dirs throttle): the running broker removes both the replica and its future
  copy (Kafka's asyncDelete of the current and the future log).
- Deleted while a broker is down in the middle of such a move: the restarted broker renames both
  copies `-stray`, as Kafka 4.1's LogManager does with a log the metadata no longer assigns to it,
  and never opens them.
- Deleted and created again under the same name while a broker is down: the old directory has
  the topic's name but Kafka's `partition.metadata` holds the old topic id, so the restarted
  broker marks it stray and replicates the new topic from the start; its segments equal the
  leader's byte for byte. Without the topic id it would have opened the old records as the new
  topic's replica.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import test_broker_cluster
from broker_processes import BrokerCluster
from quorum_processes import kraft_tool, wait_for
from record_checks import CLEAN, anomalies
from test_broker_cluster import create_topic, read_back
from test_broker_log_management import log_bytes, log_dirs_of, produce_numbered

from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.storage.partition_metadata import read_partition_metadata

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = [
    pytest.mark.process,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

brokers = test_broker_cluster.brokers  # three controllers and three brokers, per test


def _entries(cluster: BrokerCluster, broker: int, topic: str) -> list[str]:
    """Every directory of `topic`-0 in the broker's log dirs: `<dir>/<name>`, sorted, suffixes shortened."""
    found = []
    for path in (cluster.root / f"broker-{broker}").glob(f"data-*/{topic}-0*"):
        name = path.name
        for kind in ("-future", "-delete", "-stray"):
            if name.endswith(kind):
                name = f"{topic}-0.*{kind}"
        found.append(f"{path.parent.name}/{name}")
    return sorted(found)


def _delete_topic(cluster: BrokerCluster, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.broker_bootstrap([101, 103]), request_timeout_ms=30000)
    try:
        admin.delete_topics([topic], timeout_ms=30000)
    finally:
        admin.close()


def test_a_deleted_topics_replicas_and_future_replicas_are_removed_or_marked_stray_never_served_again(
        brokers: BrokerCluster, tmp_path: Path) -> None:
    doomed, reborn = "doomed", "reborn"
    create_topic(brokers, doomed, partitions=1, replication_factor=3, configs={"segment.bytes": str(1024 * 1024)})
    create_topic(brokers, reborn, partitions=1, replication_factor=3)
    produce_numbered(brokers, doomed, partitions=1, count=3000)
    old_reborn = produce_numbered(brokers, reborn, partitions=1, count=200)

    # Brokers 101 and 102 each start moving their replica of `doomed` to their other log
    # directory, throttled to 20 kB/s so the moves are still in flight when the topic goes.
    destinations = {}
    for broker in (101, 102):
        source = Path(brokers.partitions(broker)[(doomed, 0)]["log_dir"])
        destinations[broker] = next(d for d in (brokers.root / f"broker-{broker}").glob("data-*") if d != source)
    replicas = sorted(brokers.brokers)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{
        "topic": doomed, "partition": 0, "replicas": replicas,
        "log_dirs": [str(destinations[r].resolve()) if r in destinations else "any" for r in replicas]}]}))
    result = kraft_tool("reassign-partitions", "--bootstrap-server", brokers.broker_bootstrap(),
                        "--reassignment-json-file", str(plan), "--execute", "--replica-alter-log-dirs-throttle",
                        "20000")
    assert result.returncode == 0, result.stdout + result.stderr
    for broker in (101, 102):
        wait_for(lambda b=broker: any(future for _, future, _ in log_dirs_of(brokers, b, doomed)), timeout_s=90,
                 what=f"broker {broker} to have a future replica of {doomed}-0")
        source = Path(brokers.partitions(broker)[(doomed, 0)]["log_dir"]).name
        assert _entries(brokers, broker, doomed) == sorted(
            [f"{source}/{doomed}-0", f"{destinations[broker].name}/{doomed}-0.*-future"])
    old_id = read_partition_metadata(Path(brokers.partitions(102)[(reborn, 0)]["log_dir"]) / f"{reborn}-0")
    assert old_id is not None

    # 102 dies in the middle of its move; both topics are deleted, `reborn` is created again.
    brokers.kill(102)
    # Until the controller fences 102, Metadata still lists it and kafka-python's admin may pick
    # it for a request (a refused connection then fails the call): wait until the ISRs drop it.
    for topic in (doomed, reborn):
        brokers.wait_isr(topic, 0, {101, 103}, timeout_s=120)
    _delete_topic(brokers, doomed)
    _delete_topic(brokers, reborn)
    wait_for(lambda: all(_entries(brokers, b, t) == [] for b in (101, 103) for t in (doomed, reborn)), timeout_s=90,
             what="brokers 101 and 103 to remove every copy of the deleted topics, future ones included")
    admin = KafkaAdminClient(bootstrap_servers=brokers.broker_bootstrap([101, 103]), request_timeout_ms=30000)
    try:
        wait_for(lambda: reborn not in admin.list_topics(), timeout_s=60, what=f"{reborn} to be gone from the metadata")
        admin.create_topics([NewTopic(reborn, 1, 3)])
    finally:
        admin.close()

    # 102 restarts: the deleted topic's replica and future replica are strays, and so is the
    # old `reborn` directory, whose topic id is not the new topic's.
    brokers.start(102)
    brokers.wait_ready([102])
    stray_doomed = sorted([f"{p.name}/{doomed}-0.*-stray" for p in (brokers.root / "broker-102").glob("data-*")])
    assert _entries(brokers, 102, doomed) == stray_doomed
    assert (doomed, 0) not in brokers.partitions(102)
    brokers.wait_isr(reborn, 0, set(brokers.brokers))
    acked = produce_numbered(brokers, reborn, partitions=1, count=5, first=1000)
    wait_for(lambda: all(brokers.partitions(b)[(reborn, 0)]["log_end_offset"] == 5 for b in brokers.brokers),
             timeout_s=90, what=f"every replica of the new {reborn} to hold its 5 records")
    entries = _entries(brokers, 102, reborn)
    assert len(entries) == 2 and sum(e.endswith("-stray") for e in entries) == 1, entries
    stray = next((brokers.root / "broker-102").glob(f"data-*/{reborn}-0.*-stray"))
    assert read_partition_metadata(stray) == old_id
    new_ids = {read_partition_metadata(Path(brokers.partitions(b)[(reborn, 0)]["log_dir"]) / f"{reborn}-0")
               for b in brokers.brokers}
    assert len(new_ids) == 1 and old_id not in new_ids
    text = (Path(brokers.partitions(102)[(reborn, 0)]["log_dir"]) / f"{reborn}-0" / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {to_kafka_str(next(iter(new_ids)))}\n"  # type: ignore[arg-type]
    stored = read_back(brokers, reborn, 1)
    assert anomalies(acked, stored) == CLEAN
    assert sorted(stored) == [(0, offset) for offset in range(5)]
    assert not set(stored.values()) & {value for _, _, value in old_reborn}
    leader = brokers.partitions(101)[(reborn, 0)]["leader"]
    assert log_bytes(brokers, 102, reborn) == log_bytes(brokers, leader, reborn)
    assert "marked stray" in brokers.log(102)
