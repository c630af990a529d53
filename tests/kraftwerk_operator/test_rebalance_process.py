"""The rebalance onto a broker that joins, on the local runtime with engine nodes
(`spec.lifecycle.rebalanceOnScaleUp: true`, throttle 20000 B/s): `kraftwerk up` with three
controllers and three brokers, a topic of six partitions (RF 2) with records in each; the spec
grows to four brokers. The new broker 6 starts, the operator records the Rebalance's moves and
throttle, sets the throttle, reassigns, waits, removes the throttle; afterwards kafka-python's
admin shows broker 6 holding replicas, the replica counts (over every topic) within one of each other, no throttle
left on any broker or the topic, and every record is read back from every partition. A kafka-python
producer (acks=all, idempotence) writes partition 0 all through the rebalance; every record it saw
acknowledged is read back."""

from __future__ import annotations

import re
import textwrap
import warnings
from collections import Counter
from pathlib import Path

import pytest
import yaml

from kraft_engine.storage.java_properties import parse_properties

from .local_state import written_status
from .test_drain_throttle_process import throttle_configs
from .test_roll_process import _wait, kraftwerk_up
from .test_scale_down_process import CLUSTER as SHRINKING
from .workload import acked_count, lost_records, producing, read_partition

pytestmark = [pytest.mark.process, pytest.mark.timeout(1500)]

# The drain tests' cluster, with three brokers, the flag and a small throttle.
_SPEC = yaml.safe_load(SHRINKING)
_SPEC["metadata"]["name"] = "growing"
_SPEC["spec"]["nodePools"][1]["replicas"] = 3
_SPEC["spec"]["lifecycle"].update({"reassignmentThrottleBytesPerSecond": 20000, "rebalanceOnScaleUp": True})
CLUSTER = yaml.safe_dump(_SPEC)

TOPIC = "spread"
PARTITIONS = 6
RECORDS = 50  # per partition


def _status(state: Path) -> dict | None:
    return written_status(state, "growing")


def _settled(status: dict | None) -> bool:
    return (status is not None and status.get("operation") is None
            and any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])
            and (status.get("partitions") or {}).get("underReplicated", 1) == 0)


def _replicas(bootstrap: str) -> dict[str, list[int]]:
    """Every partition of every topic (kraftwerk up's `demo` too: the rebalance evens out them all)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            return {f"{t['name']}-{p['partition_index']}": sorted(p["replica_nodes"])
                    for t in admin.describe_topics() for p in t["partitions"]}
        finally:
            admin.close()


def _create_and_fill(bootstrap: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka import KafkaProducer
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=2)])
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=30000)
        try:
            futures = [producer.send(TOPIC, value=f"{p}-{i}".encode(), partition=p)
                       for p in range(PARTITIONS) for i in range(RECORDS)]
            producer.flush(timeout=120)
            for future in futures:
                future.get(timeout=60)
        finally:
            producer.close(timeout=30)


def test_a_broker_that_joins_gets_replicas_through_a_throttled_rebalance(tmp_path: Path) -> None:
    spec = tmp_path / "growing.yaml"
    spec.write_text(textwrap.dedent(CLUSTER))
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    acks = tmp_path / "acks.jsonl"
    with kraftwerk_up(spec, state, log) as up:
        _wait("Ready with three brokers", lambda: _settled(s := _status(state)) and s["brokers"] == "3/3",
              timeout_s=600, up=up, log=log)
        bootstrap = ",".join(
            parse_properties((state / "default" / "growing" / f"node-{i}" / "server.properties").read_text())
            ["advertised.listeners"].split("//", 1)[1] for i in (3, 4, 5))
        _create_and_fill(bootstrap)
        assert not any(6 in r for r in _replicas(bootstrap).values())
        with producing(bootstrap, TOPIC, acks, partition=0):  # a live producer all through the move
            _wait("the producer's first acks", lambda: acked_count(acks) >= 20, timeout_s=120, up=up, log=log)
            grown = yaml.safe_load(spec.read_text())
            grown["spec"]["nodePools"][1]["replicas"] = 4
            spec.write_text(yaml.safe_dump(grown))

            def rebalanced() -> dict[str, list[int]] | None:
                status = _status(state)
                if not _settled(status) or status["brokers"] != "4/4":
                    return None
                layout = _replicas(bootstrap)
                return layout if any(6 in r for r in layout.values()) else None

            layout = _wait("broker 6 holding replicas", rebalanced, timeout_s=900, up=up, log=log)
            before = acked_count(acks)
            _wait("acks after the rebalance", lambda: acked_count(acks) >= before + 20, timeout_s=120, up=up, log=log)
        left = throttle_configs(bootstrap, [3, 4, 5, 6], topic=TOPIC)
        stored = {p: read_partition(bootstrap, TOPIC, partition=p) for p in range(PARTITIONS)}
    output = log.read_text()
    load = Counter(b for replicas in layout.values() for b in replicas)
    assert sorted(load) == [3, 4, 5, 6] and max(load.values()) - min(load.values()) <= 1, layout
    assert all(len(r) == 2 for name, r in layout.items() if name.startswith(f"{TOPIC}-")), layout
    assert left == {}, left
    at = 0
    for step in ("RebalancePlanned", "SetReassignmentThrottles", "ReassignPartitions", "ClearReassignmentThrottles",
                 "RebalanceFinished"):
        found = re.compile(rf"^Normal\s+{step}\s+", re.M).search(output, at)
        assert found is not None, (step, output[at:][-4000:])
        at = found.end()
    for p in range(PARTITIONS):
        filled = sorted(v for v in stored[p].values() if v.startswith(f"{p}-".encode()))
        assert filled == sorted(f"{p}-{i}".encode() for i in range(RECORDS)), p
    acked, lost = lost_records(acks, stored[0])
    assert acked > 40 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"
