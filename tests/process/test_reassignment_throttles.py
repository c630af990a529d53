"""Reassignment with throttles on real broker processes, through `kraft reassign-partitions` with
Kafka's JSON files and flags.

1. A partition holding ~50 MB moves to a new broker with `--throttle 1000000`: the new replica's
   log on disk never holds more than the throttle allows for the time elapsed (the rate over the
   elapsed time plus the quota's window burst plus one fetch), while acks=all produce to the same
   partition keeps being acknowledged (in-sync replicas are never throttled). `--cancel` then rolls
   the reassignment back: the original replicas, the new broker's copy deleted, every throttle
   config gone.
2. A throttled move that completes, together with a log-directory move under
   `--replica-alter-log-dirs-throttle` (whose future replica's size is held to its rate the same
   way): `--verify` reports both done and then removes every throttle, as Kafka's tool does.

The throttle's effect is asserted as an upper bound on bytes moved for the time measured around
each reading (a reading late under load only loosens the bound); the observed rate is printed,
not asserted, since speed belongs to the benchmarks.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from broker_processes import BrokerCluster, start_cluster
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.static.primitive import i8
from quorum_processes import kraft_tool, wait_for

from kraft_engine.protocol import KafkaConnection

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = [pytest.mark.process, pytest.mark.slow]

RATE = 1_000_000  # B/s
WINDOW_NUM = 3  # replication.quota.window.num: the burst a fresh copy may take at once, in windows
FETCH_MAX = 1024 * 1024  # replica.fetch.max.bytes (Kafka's default): what one read may overshoot by
RECORD = 1024
THROTTLE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                 "replica.alter.log.dirs.io.max.bytes.per.second")
TOPIC_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    brokers = BrokerCluster(root=tmp_path_factory.mktemp("throttles"))
    brokers.broker_config.update({
        "replication.quota.window.num": str(WINDOW_NUM),
        "alter.log.dirs.replication.quota.window.num": str(WINDOW_NUM),
        "offsets.topic.replication.factor": "3",
    })
    try:
        # Seven processes start at once: on a loaded 2-core machine the fourth broker can take
        # longer than the harness's usual 90 s to catch up and unfence.
        start_cluster(brokers, brokers=4, ready_timeout_s=240)
        yield brokers
    finally:
        brokers.cleanup()


def _create(cluster: BrokerCluster, topic: str, replicas: list[int]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.broker_bootstrap(), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: replicas})])
    finally:
        admin.close()
    cluster.wait_isr(topic, 0, set(replicas))


def _produce(cluster: BrokerCluster, topic: str, *, total_bytes: int) -> int:
    acked: list[int] = []
    errors: list[str] = []

    def delivered(error: object, message: object) -> None:
        (errors.append(str(error)) if error is not None else acked.append(1))

    send = confluent_kafka.Producer({"bootstrap.servers": cluster.broker_bootstrap(), "acks": "all",
                                     "enable.idempotence": True, "linger.ms": 20, "batch.size": 256 * 1024})
    value = b"r" * RECORD
    for _ in range(total_bytes // RECORD):
        while True:
            try:
                send.produce(topic, value=value, partition=0, on_delivery=delivered)
                break
            except BufferError:
                send.poll(0.05)
        send.poll(0)
    assert send.flush(120) == 0
    assert errors == []
    return len(acked)


def _replica_bytes(cluster: BrokerCluster, broker: int, topic: str, *, suffix: str = "") -> int:
    """Bytes of the segment files of `topic`-0 on `broker` (both log dirs; `suffix` picks the
    directory name's tail, `-future` for a log-directory move's future replica)."""
    root = cluster.root / f"broker-{broker}"
    pattern = f"data-*/{topic}-0{'.*' + suffix if suffix else ''}/*.log"
    return sum(p.stat().st_size for p in root.glob(pattern) if p.exists())


def _dynamic_configs(cluster: BrokerCluster, resource_type: int, name: str) -> dict[str, str]:
    """The dynamic configs of one resource, from DescribeConfigs to a broker."""
    async def describe() -> dict[str, str]:
        # A broker describes only its own broker resource (Kafka's rule); topics, any broker.
        broker = int(name) if resource_type == 4 else min(cluster.brokers)
        async with KafkaConnection("127.0.0.1", cluster.broker_ports[broker]) as connection:
            response = await connection.send(DescribeConfigsRequest(resources=(DescribeConfigsResource(
                resource_type=i8(resource_type), resource_name=name, configuration_keys=None),),
                include_synonyms=False, include_documentation=False))
        result = response.results[0]
        return {c.name: c.value for c in result.configs if int(c.config_source) in (1, 2)}
    return asyncio.run(describe())


def _throttles_left(cluster: BrokerCluster, topic: str) -> dict[str, str]:
    left = {}
    for broker in sorted(cluster.brokers):
        configs = _dynamic_configs(cluster, 4, str(broker))
        left.update({f"{broker}:{k}": v for k, v in configs.items() if k in THROTTLE_KEYS})
    configs = _dynamic_configs(cluster, 2, topic)
    left.update({f"{topic}:{k}": v for k, v in configs.items() if k in TOPIC_KEYS})
    return left


def _held_to(samples: list[tuple[float, int]], *, rate: int) -> list[tuple[float, int, float]]:
    """The readings above what the throttle allows: rate * (elapsed + window burst) + one fetch
    on each side (leader and follower quotas each let one read overshoot)."""
    return [(t, size, rate * (t + WINDOW_NUM) + 2 * FETCH_MAX) for t, size in samples
            if size > rate * (t + WINDOW_NUM) + 2 * FETCH_MAX]


def test_a_50_mb_move_at_1_mb_s_holds_the_rate_keeps_producers_flowing_and_cancel_rolls_back(
        cluster: BrokerCluster, tmp_path: Path) -> None:
    topic = "heavy"
    _create(cluster, topic, [101, 102])
    assert _produce(cluster, topic, total_bytes=50 * 1024 * 1024) == 50 * 1024
    size = _replica_bytes(cluster, 101, topic)
    assert size >= 50 * 1024 * 1024

    plan = tmp_path / "move.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [101, 103], "log_dirs": ["any", "any"]}]}))
    started = time.monotonic()  # the throttles are in place before the move starts
    result = kraft_tool("reassign-partitions", "--bootstrap-server", cluster.broker_bootstrap(),
                        "--reassignment-json-file", str(plan), "--execute", "--throttle", str(RATE))
    assert result.returncode == 0, result.stdout + result.stderr
    rollback = result.stdout.split("\n\n")[1]
    assert json.loads(rollback) == {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [101, 102], "log_dirs": ["any", "any"]}]}
    assert ("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
            "throttle is removed.\nThe inter-broker throttle limit was set to 1000000 B/s\n"
            f"Successfully started partition reassignment for {topic}-0\n") in result.stdout
    # Kafka's throttle configs: sources throttled as leaders, the new replica as follower.
    assert _dynamic_configs(cluster, 2, topic) == {"leader.replication.throttled.replicas": "0:101,0:102",
                                                   "follower.replication.throttled.replicas": "0:103"}
    for broker in (101, 102, 103):
        configs = _dynamic_configs(cluster, 4, str(broker))
        assert configs["leader.replication.throttled.rate"] == configs["follower.replication.throttled.rate"] == "1000000"
    assert "leader.replication.throttled.rate" not in _dynamic_configs(cluster, 4, "104")

    # Producers keep being acknowledged with acks=all meanwhile (the ISR 101,102 is not throttled).
    during: list[int] = []
    writer = threading.Thread(target=lambda: during.append(_produce(cluster, topic, total_bytes=2 * 1024 * 1024)))
    writer.start()
    samples: list[tuple[float, int]] = []
    deadline = started + 25
    while time.monotonic() < deadline or _replica_bytes(cluster, 103, topic) < 4 * 1024 * 1024:
        moved = _replica_bytes(cluster, 103, topic)
        samples.append((time.monotonic() - started, moved))  # time read after the size: a looser bound
        assert time.monotonic() - started < 180, f"the throttled copy made no progress: {samples[-5:]}"
        time.sleep(0.5)
    writer.join(timeout=120)
    assert during == [2 * 1024]
    assert _held_to(samples, rate=RATE) == []
    elapsed, moved = samples[-1]
    print(f"throttled copy: {moved} bytes in {elapsed:.1f} s = {moved / elapsed / 1e6:.2f} MB/s "
          f"(throttle {RATE / 1e6:.2f} MB/s, {len(samples)} readings)")
    assert moved < size  # still copying when cancelled: the throttle, not the data, set the pace

    listed = kraft_tool("reassign-partitions", "--bootstrap-server", cluster.broker_bootstrap(), "--list",
                        check=True).stdout
    assert listed == f"Current partition reassignments:\n{topic}-0: replicas: 101,103,102. adding: 103. removing: 102.\n"

    cancel = kraft_tool("reassign-partitions", "--bootstrap-server", cluster.broker_bootstrap(),
                        "--reassignment-json-file", str(plan), "--cancel", check=True).stdout
    assert cancel == (f"Successfully cancelled partition reassignment for: {topic}-0\n"
                      "None of the specified partition moves are active."
                      f"Clearing broker-level throttles on brokers 101,102,103,104\n"
                      f"Clearing topic-level throttles on topic {topic}\n")
    cluster.wait_isr(topic, 0, {101, 102})
    wait_for(lambda: (topic, 0) not in cluster.partitions(103) and _replica_bytes(cluster, 103, topic) == 0,
             timeout_s=90, what="broker 103 to drop its partial copy")
    assert _throttles_left(cluster, topic) == {}
    verify = kraft_tool("reassign-partitions", "--bootstrap-server", cluster.broker_bootstrap(),
                        "--reassignment-json-file", str(plan), "--verify", "--preserve-throttles", check=True).stdout
    assert verify == ("Status of partition reassignment:\n"
                      f"There is no active reassignment of partition {topic}-0, but replica set is 101,102 rather "
                      "than 101,103.\n\n")


def test_a_throttled_move_and_a_throttled_log_dir_move_complete_and_verify_removes_the_throttles(
        cluster: BrokerCluster, tmp_path: Path) -> None:
    topic, local = "light", "local"
    _create(cluster, topic, [102, 104])
    _create(cluster, local, [104])
    _produce(cluster, topic, total_bytes=3 * 1024 * 1024)
    _produce(cluster, local, total_bytes=8 * 1024 * 1024)
    current = cluster.partitions(104)[(local, 0)]["log_dir"]
    destination = next(str(d.resolve()) for d in (cluster.root / "broker-104").glob("data-*") if str(d) != current)

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [102, 101], "log_dirs": ["any", "any"]},
        {"topic": local, "partition": 0, "replicas": [104], "log_dirs": [destination]}]}))
    started = time.monotonic()
    result = kraft_tool("reassign-partitions", "--bootstrap-server", cluster.broker_bootstrap(),
                        "--reassignment-json-file", str(plan), "--execute", "--throttle", "20000000",
                        "--replica-alter-log-dirs-throttle", str(RATE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "The replica-alter-dir throttle limit was set to 1000000 B/s\n" in result.stdout
    assert f"Successfully started partition reassignments for {topic}-0,{local}-0\n" in result.stdout
    assert (f"Successfully started moving log directory to {destination} for replica {local}-0 with broker 104 \n"
            in result.stdout)
    assert _dynamic_configs(cluster, 4, "104")["replica.alter.log.dirs.io.max.bytes.per.second"] == "1000000"

    samples: list[tuple[float, int]] = []

    def done() -> bool:
        samples.append((time.monotonic() - started, _replica_bytes(cluster, 104, local, suffix="-future")))
        out = kraft_tool("reassign-partitions", "--bootstrap-server", cluster.broker_bootstrap(),
                         "--reassignment-json-file", str(plan), "--verify", check=True).stdout
        return "Clearing broker-level throttles" in out and out
    out = wait_for(done, timeout_s=180, what="both moves to complete", interval_s=0.5)
    assert _held_to(samples, rate=RATE) == []
    assert max(size for _, size in samples) > 0  # the future replica was seen filling
    assert out == ("Status of partition reassignment:\n"
                   f"Reassignment of partition {topic}-0 is completed.\n"
                   f"Reassignment of partition {local}-0 is completed.\n"
                   f"Reassignment of replica {local}-0-104 completed successfully.\n"
                   "Clearing broker-level throttles on brokers 101,102,103,104\n"
                   f"Clearing topic-level throttles on topics {topic},{local}\n")
    assert _throttles_left(cluster, topic) == {} and _throttles_left(cluster, local) == {}
    assert cluster.partitions(104)[(local, 0)]["log_dir"] == destination
    cluster.wait_isr(topic, 0, {101, 102})
