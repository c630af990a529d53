"""The operator's admin client against real engine controllers (local runtime processes, real
sockets): every question it asks, its typed errors, and following the leader after a kill -9.
Against Apache Kafka's nodes it runs in test_up_process.py (Kafka brokers and controllers).
"""

from __future__ import annotations

import asyncio
import random
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from kio.schema.errors import ErrorCode

from kraft_operator.admin import (
    AdminError,
    AdminUnreachable,
    ClusterAdmin,
    NodeDescription,
    QuorumDescription,
    create_topic,
)
from kraft_operator.metrics import OperatorMetrics
from kraft_operator.model import ConditionStatus, ConditionType, KRaftCluster
from kraft_operator.observing import admin_addresses
from kraft_operator.reconciler import Reconciler
from kraft_operator.runtime.local import LocalRuntime, kafka_classpath

pytestmark = [pytest.mark.process, pytest.mark.timeout(600)]

SPEC = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: admin, generation: 1}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 3
      storage: {volumes: [{id: 0, size: 1Gi}]}
"""


class Running:
    def __init__(self, cluster: KRaftCluster, runtime: LocalRuntime, reconciler: Reconciler) -> None:
        self.cluster, self.runtime, self.reconciler = cluster, runtime, reconciler

    async def controllers(self) -> list[tuple[str, int]]:
        observed = await self.runtime.observe(self.cluster)
        controllers, _ = admin_addresses(self.cluster, layout=self.runtime.layout(self.cluster), observed=observed)
        return controllers

    async def reconcile_until_ready(self, *, timeout_s: float = 240) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = await self.reconciler.reconcile(self.cluster)
            self.cluster = self.cluster.model_copy(update={"status": result.status})
            ready = result.status.condition(ConditionType.READY)
            if ready is not None and ready.status is ConditionStatus.TRUE and not result.actions:
                return
            await asyncio.sleep(0.3)
        raise AssertionError(f"not Ready: {self.cluster.status.conditions if self.cluster.status else None}")


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    cluster = KRaftCluster.model_validate(yaml.safe_load(textwrap.dedent(SPEC)))
    runtime = LocalRuntime(tmp_path)
    reconciler = Reconciler(runtime, rng=random.Random(7), metrics=OperatorMetrics())
    handle = Running(cluster, runtime, reconciler)
    try:
        await handle.reconcile_until_ready()
        yield handle
    finally:
        runtime.stop_all(timeout_s=20)


async def every_controllers_view_once_settled(
    controllers: list[tuple[str, int]], *, timeout_s: float = 60,
) -> tuple[QuorumDescription, list[tuple[str, int, tuple[NodeDescription, ...]]]]:
    """DescribeQuorum, and each controller's own DescribeCluster answer, once every controller
    names the leader DescribeQuorum reports. A controller that has not heard from the leader of
    the current epoch yet (its BeginQuorumEpoch still on the way) answers controller id -1, as
    Kafka's ControllerApis does: Ready says a majority follows, not that every voter does."""
    deadline = time.monotonic() + timeout_s
    while True:
        async with ClusterAdmin(controllers=controllers, timeout_ms=10000) as admin:
            quorum = await admin.describe_quorum()
        answers = []
        for address in controllers:
            async with ClusterAdmin(controllers=[address], timeout_ms=10000) as one:
                answers.append(await one.describe_cluster(brokers=False))
        if all(controller_id == quorum.leader_id for _, controller_id, _ in answers):
            return quorum, answers
        if time.monotonic() > deadline:
            raise AssertionError(f"not every controller names leader {quorum.leader_id} after {timeout_s} s: {answers}")
        await asyncio.sleep(0.3)


async def test_the_admin_client_describes_quorum_cluster_metadata_configs_and_features(running: Running) -> None:
    controllers = await running.controllers()
    quorum, answers = await every_controllers_view_once_settled(controllers)
    assert sorted(v.replica_id for v in quorum.voters) == [0, 1, 2]
    assert quorum.leader_id in (0, 1, 2) and quorum.leader_epoch >= 1
    for cluster_id, _, nodes in answers:
        assert cluster_id == running.cluster.status.cluster_id
        assert sorted((n.node_id, n.port) for n in nodes) == sorted(
            (i, port) for i, (_, port) in enumerate(controllers)
        )
    async with ClusterAdmin(controllers=controllers, timeout_ms=10000) as admin:
        features = await admin.finalized_features()
        assert features["metadata.version"] == 29  # 4.2-IV1, the engine's newest production level
    with pytest.raises(AdminError) as no_brokers:
        await create_topic(controllers, name="orders", partitions=2, replication_factor=1)
    assert no_brokers.value.error is ErrorCode.invalid_replication_factor
    async with ClusterAdmin(controllers=controllers, timeout_ms=10000) as admin:
        metadata = await admin.metadata()
        assert [t.name for t in metadata.topics] == []  # no broker registered: nothing can be placed
    # A controller asked for broker endpoints refuses (it serves only its own): typed, not retried.
    async with ClusterAdmin(brokers=controllers, timeout_ms=10000) as misdirected:
        with pytest.raises(AdminError) as refused:
            await misdirected.describe_cluster(brokers=True)
        assert refused.value.error is ErrorCode.unsupported_endpoint_type
        assert not refused.value.retriable and not isinstance(refused.value, AdminUnreachable)


async def test_the_admin_client_follows_the_new_leader_after_a_kill(running: Running) -> None:
    controllers = await running.controllers()
    async with ClusterAdmin(controllers=controllers, timeout_ms=20000) as admin:
        before = await admin.describe_quorum()
    running.runtime.kill(running.cluster, before.leader_id)
    async with ClusterAdmin(controllers=controllers, timeout_ms=20000) as admin:
        after = await admin.describe_quorum()
    assert after.leader_id != before.leader_id and after.leader_epoch > before.leader_epoch
    # The planner sees the dead node and restarts it; the cluster is Ready again.
    await running.reconcile_until_ready()


async def test_nothing_listening_is_a_typed_unreachable_error() -> None:
    async with ClusterAdmin(controllers=[("127.0.0.1", 1)], brokers=[("127.0.0.1", 2)], timeout_ms=500) as admin:
        with pytest.raises(AdminUnreachable) as unreachable:
            await admin.describe_cluster(brokers=True)
        assert unreachable.value.api == "DescribeCluster"
        with pytest.raises(AdminUnreachable):
            await admin.describe_quorum()


KAFKA_BROKER = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: mixed, generation: 1}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 1
      storage: {volumes: [{id: 0, size: 1Gi}]}
    - name: brokers
      roles: [broker]
      replicas: 1
      implementation: apache-kafka
      storage: {type: jbod, volumes: [{id: 0, size: 1Gi}, {id: 1, size: 1Gi}]}
  config:
    offsets.topic.replication.factor: "1"
    min.insync.replicas: "1"
"""


@pytest.mark.kafka_jars
@pytest.mark.skipif(kafka_classpath() is None, reason="Kafka jars not cached (scripts/fetch-kafka-jars) or no java")
async def test_the_admin_client_against_an_apache_kafka_broker(tmp_path: Path) -> None:
    cluster = KRaftCluster.model_validate(yaml.safe_load(textwrap.dedent(KAFKA_BROKER)))
    runtime = LocalRuntime(tmp_path)
    handle = Running(cluster, runtime, Reconciler(runtime, rng=random.Random(3), metrics=OperatorMetrics()))
    try:
        await handle.reconcile_until_ready(timeout_s=240)
        observed = await runtime.observe(handle.cluster)
        controllers, brokers = admin_addresses(handle.cluster, layout=runtime.layout(handle.cluster), observed=observed)
        assert await create_topic(controllers, name="orders", partitions=2, replication_factor=1) is True
        assert await create_topic(controllers, name="orders", partitions=2, replication_factor=1) is False
        async with ClusterAdmin(controllers=controllers, brokers=brokers, timeout_ms=20000) as admin:
            cluster_id, _, nodes = await admin.describe_cluster(brokers=True)
            assert cluster_id == handle.cluster.status.cluster_id
            assert [(n.node_id, n.fenced) for n in nodes] == [(1, False)]
            deadline = time.monotonic() + 60
            while True:  # the broker learns of the topic from the metadata log, a moment later
                metadata = await admin.metadata()
                orders = [t for t in metadata.topics if t.name == "orders"]
                if orders or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            assert [len(p.replicas) for p in orders[0].partitions] == [1, 1]
            configs = await admin.describe_topic_configs(["orders"], keys=["min.insync.replicas", "cleanup.policy"])
            assert configs["orders"] == {"min.insync.replicas": "1", "cleanup.policy": "delete"}
            log_dirs = await admin.describe_log_dirs(brokers[0])
            layout = runtime.layout(handle.cluster)
            expected = {str(Path(layout.node_dir(1)) / f"data-{v}") for v in (0, 1)}
            assert {d.path for d in log_dirs} == expected
            assert all(d.error is None and d.total_bytes > 0 for d in log_dirs)
            features = await admin.finalized_features()
            assert features["metadata.version"] == 27  # 4.1-IV1: the newest both run
            with pytest.raises(AdminError) as unknown:
                await admin.describe_topic_configs(["no-such-topic"])
            assert unknown.value.error is ErrorCode.unknown_topic_or_partition
    finally:
        runtime.stop_all(timeout_s=60)
