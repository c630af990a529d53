"""A broker's drain on the local runtime with engine nodes runs under Kafka's replication throttle:
`kraftwerk up` with three controllers and four brokers, a topic whose partition 0 lives on broker
6 holding about 600 KB, and a spec with `reassignmentThrottleBytesPerSecond: 20000`; the spec
drops to three brokers. While the drain runs, status shows the throttle and a real client
(kafka-python's admin, DescribeConfigs) reads the rates on the brokers and the throttled replicas
on the topic; once broker 6 is gone, none of them is left. Every record written is read back."""

from __future__ import annotations

import re
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import yaml

from .test_roll_process import _wait, kraftwerk_up
from .test_scale_down_process import TOPIC, _settled, _status, ready_with_the_topic_on_broker_6
from .workload import acked_count, lost_records, producing, read_partition

pytestmark = [pytest.mark.process, pytest.mark.timeout(1500)]

RATE = 20000

CLUSTER = f"""
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {{name: shrinking}}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 3
      storage: {{volumes: [{{id: 0, size: 1Gi}}]}}
    - name: brokers
      roles: [broker]
      replicas: 4
      storage: {{volumes: [{{id: 0, size: 1Gi}}]}}
  lifecycle: {{terminationGracePeriodSeconds: 60, reassignmentThrottleBytesPerSecond: {RATE}}}
  config:
    min.insync.replicas: "2"
    offsets.topic.replication.factor: "3"
"""

RECORDS = 600


def _produce(bootstrap: str) -> None:
    """RECORDS records of 1 KB each into partition 0, every one acknowledged by all in-sync replicas."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=30000, linger_ms=5)
        try:
            futures = [producer.send(TOPIC, value=f"{i:06d}".encode() * 170, partition=0) for i in range(RECORDS)]
            producer.flush(timeout=120)
            for future in futures:
                future.get(timeout=60)
        finally:
            producer.close(timeout=30)


def throttle_configs(bootstrap: str, brokers: list[int], *, topic: str = TOPIC) -> dict[str, str]:
    """The throttle keys that are set: `broker N: key` -> value for each broker (asked of it) and
    `topic: key` -> value for the topic."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            found: dict[str, str] = {}
            resources = [ConfigResource(ConfigResourceType.BROKER, str(b)) for b in brokers]
            resources.append(ConfigResource(ConfigResourceType.TOPIC, topic))
            described = admin.describe_configs(resources, config_filter="modified")  # only what is set
            for kind, by_name in described.items():
                for name, configs in by_name.items():
                    for key, config in configs.items():
                        value = config.get("value")
                        if "throttled" in key and value and value != "9223372036854775807":
                            found[f"{'topic' if kind == 'topic' else 'broker ' + str(name)}: {key}"] = value
            return found
        finally:
            admin.close()


def test_a_drain_runs_throttled_shown_in_status_and_the_throttle_is_gone_before_the_broker_stops(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "shrinking.yaml"
    spec.write_text(textwrap.dedent(CLUSTER))
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    acks = tmp_path / "acks.jsonl"
    with kraftwerk_up(spec, state, log) as up:
        bootstrap = ready_with_the_topic_on_broker_6(state, up=up, log=log)
        _produce(bootstrap)
        with producing(bootstrap, "demo", acks, partition=0):  # a live producer all through the drain
            _wait("the producer's first acks", lambda: acked_count(acks) >= 20, timeout_s=120, up=up, log=log)
            shrunk = yaml.safe_load(spec.read_text())
            shrunk["spec"]["nodePools"][1]["replicas"] = 3
            spec.write_text(yaml.safe_dump(shrunk))

            def draining() -> dict | None:
                status = _status(state)
                operation = (status or {}).get("operation") or {}
                return operation if operation.get("step") == "draining" else None

            operation = _wait("the drain under way", draining, timeout_s=600, up=up, log=log)
            throttle = operation["scaleDown"]["throttle"]
            assert throttle["rateBytesPerSecond"] == RATE and throttle["brokers"] == [3, 4, 5, 6], operation
            assert f"throttled at {RATE} B/s" in operation["waitingFor"], operation
            # The moved partition's copy (~600 KB at 20 KB/s) takes half a minute: the throttle is
            # read back from the brokers themselves while it runs.
            seen: dict[str, str] = {}
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and draining() is not None:
                seen = throttle_configs(bootstrap, [3, 4, 5, 6])
                if len(seen) == 2 * 4 + 2:
                    break
                time.sleep(0.5)
            assert {k: v for k, v in seen.items() if k.startswith("broker")} == {
                f"broker {b}: {k}.replication.throttled.rate": str(RATE) for b in (3, 4, 5, 6) for k in ("leader", "follower")
            }, seen
            assert seen["topic: leader.replication.throttled.replicas"] == "0:3,0:4,0:6", seen
            assert seen["topic: follower.replication.throttled.replicas"] == "0:5", seen

            def removed() -> dict | None:
                status = _status(state)
                if not _settled(status) or sorted(n["id"] for n in status["nodes"]) != [0, 1, 2, 3, 4, 5]:
                    return None
                return status

            _wait("broker 6 removed", removed, timeout_s=900, up=up, log=log)
            before = acked_count(acks)
            _wait("acks after the drain", lambda: acked_count(acks) >= before + 20, timeout_s=120, up=up, log=log)
        left = throttle_configs(bootstrap, [3, 4, 5])
        stored = read_partition(bootstrap, TOPIC)
        produced = read_partition(bootstrap, "demo", partition=0)
    output = log.read_text()
    assert left == {}, left
    order = []
    for line in (r"SetReassignmentThrottles\s+broker 6: ", r"ReassignPartitions\s+broker 6: ",
                 r"ClearReassignmentThrottles\s+broker 6 drained", r"StopNode\s+node 6: "):
        found = re.search(rf"^Normal\s+{line}", output, re.M)
        assert found is not None, (line, output[-4000:])
        order.append(found.start())
    assert order == sorted(order), output[-4000:]
    assert len(stored) == RECORDS and all(v == f"{i:06d}".encode() * 170 for i, v in stored.items()), len(stored)
    acked, lost = lost_records(acks, produced)
    assert acked > 40 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"
