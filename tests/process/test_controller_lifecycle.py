"""Three real controller processes running the quorum controller, and three brokers played by
this test over the real protocol (BrokerRegistration, a BrokerHeartbeat loop, AlterPartition).

The brokers are not Kafka brokers: they only do what a broker's lifecycle manager does toward the
controller, which is exactly what the controller's behaviour depends on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kio.schema.alter_partition.v3 import request as ap
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i64, u16
from quorum_processes import HOST, ProcessCluster, kraft, wait_for

from kraft_engine.admin.controller_admin import ControllerAdmin
from kraft_engine.protocol import ConnectionConfig, KafkaConnection, KafkaProtocolError
from kraft_engine.records import metadata_version

pytestmark = pytest.mark.process

SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
CONTROLLER_MODE = {
    "kraftwerk.test.state.machine.enable": "false",
    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
}
# The slack covers the scheduling of three controller processes, the test and the
# 8-per-session-timeout fencing task on a small shared machine.
FENCING_BOUND_S = (1.125 * SESSION_TIMEOUT_MS + HEARTBEAT_INTERVAL_MS) / 1000 + 1.5


class Broker:
    """One broker's conversation with the active controller."""

    def __init__(self, broker_id: int, admin: ControllerAdmin, cluster_id: str, *, max_metadata_level: int) -> None:
        self.broker_id = broker_id
        self.admin = admin
        self.cluster_id = cluster_id
        self.max_metadata_level = max_metadata_level
        self.epoch = -1
        self.incarnation = uuid.uuid4()
        self.fenced = True
        self.want_shut_down = False
        self.should_shut_down = False
        self.metadata_offset = 0
        self.last_heartbeat_ok_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def register(self) -> None:
        # A restarted broker's new incarnation is refused until its old session expires, as in
        # Kafka; a broker keeps retrying.
        deadline = time.monotonic() + 3 * SESSION_TIMEOUT_MS / 1000
        while True:
            response = await self._register_once()
            if response.error_code != ErrorCode.duplicate_broker_registration or time.monotonic() > deadline:
                break
            await asyncio.sleep(HEARTBEAT_INTERVAL_MS / 1000)
        assert response.error_code == ErrorCode.none, response
        self.epoch = int(response.broker_epoch)

    async def _register_once(self) -> Any:
        return await self.admin.send_to_active(BrokerRegistrationRequest(
            broker_id=BrokerId(self.broker_id), cluster_id=self.cluster_id, incarnation_id=self.incarnation,
            listeners=(Listener(name="PLAINTEXT", host=HOST, port=u16(19092 + self.broker_id),
                                security_protocol=i16(0)),),
            features=(Feature(name="metadata.version", min_supported_version=i16(metadata_version.MINIMUM.feature_level),
                              max_supported_version=i16(self.max_metadata_level)),),
            rack=None, log_dirs=(uuid.uuid4(),),
        ))

    async def heartbeat(self) -> Any:
        response = await self.admin.send_to_active(BrokerHeartbeatRequest(
            broker_id=BrokerId(self.broker_id), broker_epoch=i64(self.epoch),
            current_metadata_offset=i64(self.metadata_offset), want_fence=False, want_shut_down=self.want_shut_down,
        ))
        if response.error_code == ErrorCode.none:
            self.fenced = bool(response.is_fenced)
            self.should_shut_down = bool(response.should_shut_down)
            self.last_heartbeat_ok_s = time.monotonic()
        return response

    def start_heartbeats(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._heartbeats())

    async def stop_heartbeats(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _heartbeats(self) -> None:
        while True:
            # A real broker reports the offset its metadata cache reached; the test reads the
            # committed offset of the quorum instead, which is what the broker would reach.
            # A broker keeps heartbeating through errors (a controller restarting, a slow answer).
            with contextlib.suppress(Exception):
                self.metadata_offset = await _committed_offset(self.admin)
                await self.heartbeat()
            await asyncio.sleep(HEARTBEAT_INTERVAL_MS / 1000)


async def _committed_offset(admin: ControllerAdmin) -> int:
    """The offset of the quorum's committed image, as a broker's metadata cache would reach it.

    The finalized-features epoch a controller puts in ApiVersions is its committed image's
    offset; a fresh connection of its own asks for it (the admin's connections carry the other
    brokers' requests)."""
    for host, port in admin.bootstrap:
        connection = KafkaConnection(host, port, config=ConnectionConfig(client_id="metadata-offset",
                                                                         request_timeout_ms=2000))
        try:
            await connection.connect(timeout_ms=1000)
            return int(connection.api_versions_response.finalized_features_epoch)
        except (KafkaProtocolError, OSError):
            continue
        finally:
            await connection.close()
    raise ConnectionError("no controller reachable")


async def _metadata(admin: ControllerAdmin, *topics: str) -> Any:
    return await admin.send_to_active(MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics) if topics else None,
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    ))


def _metric(cluster: ProcessCluster, node_id: int, name: str) -> float:
    """A kafka_controller_kafkacontroller_* gauge from a controller's Prometheus endpoint."""
    url = f"http://{HOST}:{cluster.nodes[node_id].http_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f"kafka_controller_kafkacontroller_{name} "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} metric on controller {node_id}")


async def _create_topic(controllers: ProcessCluster, name: str, *, partitions: int) -> None:
    created = await _kraft("topics", "--bootstrap-controller", controllers.bootstrap_servers(), "--create",
                           "--topic", name, "--partitions", str(partitions), "--replication-factor", "3")
    assert created.returncode == 0, created.stderr
    assert created.stdout == f"Created topic {name}.\n"


async def _kraft(*args: str) -> Any:
    return await asyncio.to_thread(kraft, *args)


async def _until(condition: Any, *, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.fixture
async def controllers(cluster: ProcessCluster) -> AsyncIterator[ProcessCluster]:
    cluster.extra_config.update(CONTROLLER_MODE)
    for node_id in (1, 2, 3):
        cluster.add_node(node_id)
    await asyncio.to_thread(cluster.format_initial, [1, 2, 3])
    for node_id in (1, 2, 3):
        await asyncio.to_thread(cluster.start, node_id)
    yield cluster


@pytest.fixture
async def admin(controllers: ProcessCluster) -> AsyncIterator[ControllerAdmin]:
    async with ControllerAdmin([(HOST, n.port) for n in controllers.nodes.values()], timeout_ms=30000) as client:
        yield client


async def _brokers(controllers: ProcessCluster, admin: ControllerAdmin, *, max_levels: dict[int, int] | None = None
                   ) -> dict[int, Broker]:
    latest = metadata_version.LATEST_PRODUCTION.feature_level
    brokers = {
        b: Broker(b, admin, controllers.cluster_id, max_metadata_level=(max_levels or {}).get(b, latest))
        for b in (1, 2, 3)
    }
    for broker in brokers.values():
        await broker.register()
        broker.start_heartbeats()
    for broker in brokers.values():
        await _until(lambda b=broker: _async_value(not b.fenced), timeout_s=30, what=f"broker {broker.broker_id} unfenced")
    return brokers


async def _async_value(value: Any) -> Any:
    return value


async def _stop_all(brokers: dict[int, Broker]) -> None:
    for broker in brokers.values():
        await broker.stop_heartbeats()


async def test_brokers_register_unfence_and_a_topic_is_created_with_rf3(
    controllers: ProcessCluster, admin: ControllerAdmin
) -> None:
    brokers = await _brokers(controllers, admin)
    try:
        await _create_topic(controllers, "orders", partitions=3)
        metadata = await _metadata(admin, "orders")
        [topic] = metadata.topics
        assert topic.error_code == ErrorCode.none
        assert len(topic.partitions) == 3
        for partition in topic.partitions:
            assert sorted(int(r) for r in partition.replica_nodes) == [1, 2, 3]
            assert sorted(int(r) for r in partition.isr_nodes) == [1, 2, 3]
        assert sorted(int(b.node_id) for b in metadata.brokers) == [1, 2, 3]
        # The controller metrics are on each node's Prometheus endpoint, under Kafka's names.
        active = await asyncio.to_thread(controllers.wait_for_leader)
        for node_id in (1, 2, 3):
            expected_active = 1 if node_id == active else 0
            assert await asyncio.to_thread(_metric, controllers, node_id, "activecontrollercount") == expected_active
        assert await asyncio.to_thread(_metric, controllers, active, "globaltopiccount") == 1
        assert await asyncio.to_thread(_metric, controllers, active, "globalpartitioncount") == 3
        assert await asyncio.to_thread(_metric, controllers, active, "activebrokercount") == 3
        assert await asyncio.to_thread(_metric, controllers, active, "offlinepartitionscount") == 0
        assert await asyncio.to_thread(_metric, controllers, active, "newactivecontrollerscount") == 1
    finally:
        await _stop_all(brokers)


async def test_a_silent_broker_is_fenced_in_time_and_leaves_every_isr(
    controllers: ProcessCluster, admin: ControllerAdmin
) -> None:
    brokers = await _brokers(controllers, admin)
    try:
        await _create_topic(controllers, "t", partitions=6)
        silent = brokers[2]
        await silent.stop_heartbeats()
        last_contact_s = silent.last_heartbeat_ok_s

        async def out_of_every_isr() -> bool:
            [topic] = (await _metadata(admin, "t")).topics
            return all(2 not in [int(r) for r in p.isr_nodes] and int(p.leader_id) != 2 for p in topic.partitions)

        await _until(out_of_every_isr, timeout_s=30, what="broker 2 to leave every ISR")
        fenced_after_s = time.monotonic() - last_contact_s
        assert fenced_after_s <= FENCING_BOUND_S, f"fenced after {fenced_after_s:.2f} s"
        active = await asyncio.to_thread(controllers.wait_for_leader)
        assert await asyncio.to_thread(_metric, controllers, active, "fencedbrokercount") == 1
        assert await asyncio.to_thread(_metric, controllers, active, "activebrokercount") == 2
        assert not brokers[1].fenced and not brokers[3].fenced
        # Once it heartbeats again, caught up, it is unfenced (and may rejoin ISRs later).
        answer = await silent.heartbeat()
        assert answer.error_code == ErrorCode.none and not answer.is_fenced
    finally:
        await _stop_all(brokers)


async def test_controlled_shutdown_moves_leaderships_before_the_broker_may_stop(
    controllers: ProcessCluster, admin: ControllerAdmin
) -> None:
    brokers = await _brokers(controllers, admin)
    try:
        await _create_topic(controllers, "s", partitions=6)
        [topic] = (await _metadata(admin, "s")).topics
        leaders = {int(p.partition_index): int(p.leader_id) for p in topic.partitions}
        leaving = brokers[leaders[0]]
        leaving.want_shut_down = True
        await _until(lambda: _async_value(leaving.should_shut_down), timeout_s=30, what="should_shut_down")
        # When the controller lets it go, it leads nothing and is out of every ISR.
        [topic] = (await _metadata(admin, "s")).topics
        for partition in topic.partitions:
            assert int(partition.leader_id) != leaving.broker_id
            assert leaving.broker_id not in [int(r) for r in partition.isr_nodes]
            assert int(partition.leader_id) in (1, 2, 3)
    finally:
        await _stop_all(brokers)


async def test_alter_partition_shrinks_and_expands_the_isr(controllers: ProcessCluster, admin: ControllerAdmin) -> None:
    brokers = await _brokers(controllers, admin)
    try:
        await _create_topic(controllers, "a", partitions=1)
        metadata = await _metadata(admin, "a")
        [topic] = metadata.topics
        [partition] = topic.partitions
        leader = int(partition.leader_id)
        follower = next(int(r) for r in partition.replica_nodes if int(r) != leader)
        shrunk = sorted(int(r) for r in partition.isr_nodes if int(r) != follower)

        def alter(isr: list[int], partition_epoch: int) -> Any:
            return admin.send_to_active(ap.AlterPartitionRequest(
                broker_id=BrokerId(leader), broker_epoch=i64(brokers[leader].epoch),
                topics=(ap.TopicData(topic_id=topic.topic_id, partitions=(ap.PartitionData(
                    partition_index=i32(0), leader_epoch=i32(int(partition.leader_epoch)),
                    new_isr_with_epochs=tuple(
                        ap.BrokerState(broker_id=BrokerId(b), broker_epoch=i64(brokers[b].epoch)) for b in isr
                    ),
                    leader_recovery_state=i8(0), partition_epoch=i32(partition_epoch),
                ),)),),
            ))

        # A broker learns the partition epoch from the metadata log; Metadata does not carry it, so
        # the harness finds it the way a stale leader would: every other epoch is refused.
        answer = None
        for partition_epoch in range(20):
            response = await alter(shrunk, partition_epoch)
            assert response.error_code == ErrorCode.none
            [[answer]] = [t.partitions for t in response.topics]
            if answer.error_code != ErrorCode.invalid_update_version:
                break
        assert answer is not None and answer.error_code == ErrorCode.none, answer
        assert sorted(int(b) for b in answer.isr) == shrunk
        assert int(answer.partition_epoch) == partition_epoch + 1
        [topic] = (await _metadata(admin, "a")).topics
        assert sorted(int(r) for r in topic.partitions[0].isr_nodes) == shrunk
        # The epoch it just used is now stale; the new one expands the ISR again.
        stale = await alter([*shrunk, follower], partition_epoch)
        assert stale.topics[0].partitions[0].error_code == ErrorCode.invalid_update_version
        expanded = await alter(sorted([*shrunk, follower]), int(answer.partition_epoch))
        [[grown]] = [t.partitions for t in expanded.topics]
        assert grown.error_code == ErrorCode.none
        assert sorted(int(b) for b in grown.isr) == sorted([*shrunk, follower])
    finally:
        await _stop_all(brokers)


async def test_metadata_version_upgrade_waits_for_every_broker(cluster: ProcessCluster) -> None:
    cluster.extra_config.update(CONTROLLER_MODE)
    for node_id in (1, 2, 3):
        cluster.add_node(node_id)
    old = "3.9-IV0"
    cluster.cluster_id = await asyncio.to_thread(cluster.random_uuid)
    directories = [await asyncio.to_thread(cluster.random_uuid) for _ in range(3)]
    initial = ",".join(f"{i}@{HOST}:{cluster.nodes[i].port}:{d}" for i, d in zip((1, 2, 3), directories, strict=True))
    for node_id in (1, 2, 3):
        await asyncio.to_thread(cluster.format, node_id, "--initial-controllers", initial, "--release-version", old)
    for node_id in (1, 2, 3):
        await asyncio.to_thread(cluster.start, node_id)
    old_level = metadata_version.from_version_string(old).feature_level
    target = metadata_version.LATEST_PRODUCTION
    async with ControllerAdmin([(HOST, n.port) for n in cluster.nodes.values()], timeout_ms=30000) as admin:
        brokers = await _brokers(cluster, admin, max_levels={3: old_level})
        try:
            bootstrap = cluster.bootstrap_servers()
            refused = await _kraft("features", "--bootstrap-controller", bootstrap, "upgrade", "--metadata",
                                   target.version)
            assert refused.returncode == 1
            assert refused.stdout.startswith(f"Could not upgrade metadata.version to {target.feature_level}.")
            assert f"Broker 3 only supports versions {metadata_version.MINIMUM.feature_level}-{old_level}" in refused.stdout
            # Broker 3 restarts with newer software: a new incarnation that supports the target.
            broker = brokers[3]
            await broker.stop_heartbeats()
            broker.incarnation = uuid.uuid4()
            broker.max_metadata_level = target.feature_level
            await broker.register()
            broker.start_heartbeats()
            accepted = await _kraft("features", "--bootstrap-controller", bootstrap, "upgrade", "--metadata",
                                    target.version)
            assert accepted.returncode == 0, accepted.stdout + accepted.stderr
            assert accepted.stdout == f"metadata.version was upgraded to {target.feature_level}.\n"
            described = await _kraft("features", "--bootstrap-controller", bootstrap, "describe")
            assert f"FinalizedVersionLevel: {target.version}\t" in described.stdout
        finally:
            await _stop_all(brokers)


async def test_kill_9_of_the_active_controller_loses_no_acknowledged_write(
    controllers: ProcessCluster, admin: ControllerAdmin
) -> None:
    brokers = await _brokers(controllers, admin)
    try:
        acknowledged: list[str] = []
        for index in range(5):
            name = f"before-{index}"
            result = await _kraft("topics", "--bootstrap-controller", controllers.bootstrap_servers(), "--create",
                                  "--topic", name, "--partitions", "1", "--replication-factor", "3")
            assert result.returncode == 0, result.stderr
            acknowledged.append(name)
        active = await asyncio.to_thread(controllers.wait_for_leader)
        await asyncio.to_thread(controllers.kill, active)
        survivors = [n for n in (1, 2, 3) if n != active]
        bootstrap = controllers.bootstrap_servers(survivors)
        for index in range(3):
            name = f"after-{index}"
            result = await _kraft("topics", "--bootstrap-controller", bootstrap, "--create",
                                  "--topic", name, "--partitions", "1", "--replication-factor", "3")
            assert result.returncode == 0, result.stderr
            acknowledged.append(name)
        listed = await _kraft("topics", "--bootstrap-controller", bootstrap, "--list")
        assert sorted(listed.stdout.split()) == sorted(acknowledged)
        # The killed controller comes back and converges on the same topics.
        await asyncio.to_thread(controllers.start, active)
        own = controllers.nodes[active].address

        async def caught_up() -> bool:
            result = await _kraft("topics", "--bootstrap-controller", own, "--list")
            return sorted(result.stdout.split()) == sorted(acknowledged)

        await _until(caught_up, timeout_s=30, what=f"controller {active} to catch up")
    finally:
        await _stop_all(brokers)


async def test_a_client_retries_against_the_new_active_controller_well_inside_its_timeout(
    controllers: ProcessCluster, admin: ControllerAdmin
) -> None:
    # The client last spoke to the active controller, which is then killed -9. Its next write
    # must find the new active controller, not spend its request timeout reconnecting to the
    # dead one: with an 8 s timeout (request timeout 8 s) the old client gave up with
    # ControllerAdminError after 8 s of refused reconnects to the killed node.
    brokers = await _brokers(controllers, admin)
    try:
        async with ControllerAdmin([(HOST, n.port) for n in controllers.nodes.values()], timeout_ms=8000) as client:
            before = await client.send_to_active(_create_topics_request("before-failover"))
            assert before.topics[0].error_code == ErrorCode.none
            active = await asyncio.to_thread(controllers.wait_for_leader)
            assert await client.active_controller() == (HOST, controllers.nodes[active].port)
            await asyncio.to_thread(controllers.kill, active)
            after = await client.send_to_active(_create_topics_request("after-failover"))
            assert after.topics[0].error_code == ErrorCode.none
            new_active = await client.active_controller()
            assert new_active is not None and new_active != (HOST, controllers.nodes[active].port)
    finally:
        await _stop_all(brokers)


def _create_topics_request(name: str) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=(CreatableTopic(
        name=TopicName(name), num_partitions=i32(1), replication_factor=i16(3), assignments=(), configs=()
    ),))


async def test_a_standby_that_fell_behind_the_cleaned_log_loads_a_snapshot(cluster: ProcessCluster) -> None:
    cluster.extra_config.update(CONTROLLER_MODE)
    # Small snapshots, small segments and no retention to speak of: the active controller
    # snapshots often and cleans the log prefix behind each snapshot at once.
    cluster.extra_config.update({
        "metadata.log.max.record.bytes.between.snapshots": "4096",
        "metadata.log.segment.bytes": "16384",
        "metadata.max.retention.bytes": "1",
    })
    for node_id in (1, 2, 3):
        cluster.add_node(node_id)
    await asyncio.to_thread(cluster.format_initial, [1, 2, 3])
    for node_id in (1, 2, 3):
        await asyncio.to_thread(cluster.start, node_id)
    async with ControllerAdmin([(HOST, n.port) for n in cluster.nodes.values()], timeout_ms=30000) as admin:
        brokers = await _brokers(cluster, admin)
        try:
            active = await asyncio.to_thread(cluster.wait_for_leader)
            standby = next(n for n in (1, 2, 3) if n != active)
            await asyncio.to_thread(cluster.kill, standby)
            status = cluster.status(active)
            assert status is not None
            behind_end = int(status["log_end_offset"])
            names = [f"t{index:03d}" for index in range(60)]
            for start in range(0, len(names), 20):
                response = await admin.send_to_active(CreateTopicsRequest(topics=tuple(
                    CreatableTopic(name=TopicName(n), num_partitions=i32(3), replication_factor=i16(3),
                                   assignments=(), configs=())
                    for n in names[start:start + 20]
                )))
                assert all(t.error_code == ErrorCode.none for t in response.topics), response

            def cleaned() -> dict[str, Any] | None:
                found = cluster.status(active)
                return found if found is not None and int(found["log_start_offset"]) > behind_end else None

            status = await asyncio.to_thread(wait_for, cleaned, timeout_s=30, what="the log prefix to be cleaned")
            assert status["snapshots"], status
            # The standby comes back behind the log start: it must fetch and load a snapshot.
            await asyncio.to_thread(cluster.start, standby)
            own = cluster.nodes[standby].address

            async def caught_up() -> bool:
                listed = await _kraft("topics", "--bootstrap-controller", own, "--list")
                return sorted(listed.stdout.split()) == names

            await _until(caught_up, timeout_s=60, what=f"controller {standby} to load the snapshot and catch up")
            standby_status = cluster.status(standby)
            assert standby_status is not None
            assert any(offset > behind_end for offset, _ in standby_status["snapshots"]), standby_status
            assert int(standby_status["log_start_offset"]) > behind_end
        finally:
            await _stop_all(brokers)
