"""Three real controller processes running the quorum controller, and three brokers played by
this test over the real protocol (BrokerRegistration, a BrokerHeartbeat loop, AlterPartition).

The brokers are not Kafka brokers: they only do what a broker's lifecycle manager does toward the
controller, which is exactly what the controller's behaviour depends on.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from kio.schema.alter_partition.v3 import request as ap
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i64
from played_brokers import (
    CONTROLLER_MODE,
    FENCING_BOUND_S,
    async_value,
    controller_metric,
    create_topic,
    fetch_metadata,
    kraft_async,
    register_brokers,
    stop_all,
    until,
)
from quorum_processes import HOST, ProcessCluster, wait_for

from kraft_engine.admin.controller_admin import ControllerAdmin
from kraft_engine.records import metadata_version

pytestmark = pytest.mark.process


async def test_brokers_register_unfence_and_a_topic_is_created_with_rf3(
    controllers: ProcessCluster, admin: ControllerAdmin
) -> None:
    brokers = await register_brokers(controllers, admin)
    try:
        await create_topic(controllers, "orders", partitions=3)
        metadata = await fetch_metadata(admin, "orders")
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
            assert await asyncio.to_thread(controller_metric, controllers, node_id, "activecontrollercount") == expected_active
        assert await asyncio.to_thread(controller_metric, controllers, active, "globaltopiccount") == 1
        assert await asyncio.to_thread(controller_metric, controllers, active, "globalpartitioncount") == 3
        assert await asyncio.to_thread(controller_metric, controllers, active, "activebrokercount") == 3
        assert await asyncio.to_thread(controller_metric, controllers, active, "offlinepartitionscount") == 0
        assert await asyncio.to_thread(controller_metric, controllers, active, "newactivecontrollerscount") == 1
    finally:
        await stop_all(brokers)


async def test_a_silent_broker_is_fenced_in_time_and_leaves_every_isr(
    controllers: ProcessCluster, admin: ControllerAdmin
) -> None:
    brokers = await register_brokers(controllers, admin)
    try:
        await create_topic(controllers, "t", partitions=6)
        silent = brokers[2]
        await silent.stop_heartbeats()
        last_contact_s = silent.last_heartbeat_ok_s

        async def out_of_every_isr() -> bool:
            [topic] = (await fetch_metadata(admin, "t")).topics
            return all(2 not in [int(r) for r in p.isr_nodes] and int(p.leader_id) != 2 for p in topic.partitions)

        await until(out_of_every_isr, timeout_s=30, what="broker 2 to leave every ISR")
        fenced_after_s = time.monotonic() - last_contact_s
        assert fenced_after_s <= FENCING_BOUND_S, f"fenced after {fenced_after_s:.2f} s"
        active = await asyncio.to_thread(controllers.wait_for_leader)
        assert await asyncio.to_thread(controller_metric, controllers, active, "fencedbrokercount") == 1
        assert await asyncio.to_thread(controller_metric, controllers, active, "activebrokercount") == 2
        assert not brokers[1].fenced and not brokers[3].fenced
        # Once it heartbeats again, caught up, it is unfenced (and may rejoin ISRs later).
        answer = await silent.heartbeat()
        assert answer.error_code == ErrorCode.none and not answer.is_fenced
    finally:
        await stop_all(brokers)


async def test_controlled_shutdown_moves_leaderships_before_the_broker_may_stop(
    controllers: ProcessCluster, admin: ControllerAdmin
) -> None:
    brokers = await register_brokers(controllers, admin)
    try:
        await create_topic(controllers, "s", partitions=6)
        [topic] = (await fetch_metadata(admin, "s")).topics
        leaders = {int(p.partition_index): int(p.leader_id) for p in topic.partitions}
        leaving = brokers[leaders[0]]
        leaving.want_shut_down = True
        await until(lambda: async_value(leaving.should_shut_down), timeout_s=30, what="should_shut_down")
        # When the controller lets it go, it leads nothing and is out of every ISR.
        [topic] = (await fetch_metadata(admin, "s")).topics
        for partition in topic.partitions:
            assert int(partition.leader_id) != leaving.broker_id
            assert leaving.broker_id not in [int(r) for r in partition.isr_nodes]
            assert int(partition.leader_id) in (1, 2, 3)
    finally:
        await stop_all(brokers)


async def test_alter_partition_shrinks_and_expands_the_isr(controllers: ProcessCluster, admin: ControllerAdmin) -> None:
    brokers = await register_brokers(controllers, admin)
    try:
        await create_topic(controllers, "a", partitions=1)
        metadata = await fetch_metadata(admin, "a")
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
        [topic] = (await fetch_metadata(admin, "a")).topics
        assert sorted(int(r) for r in topic.partitions[0].isr_nodes) == shrunk
        # The epoch it just used is now stale; the new one expands the ISR again.
        stale = await alter([*shrunk, follower], partition_epoch)
        assert stale.topics[0].partitions[0].error_code == ErrorCode.invalid_update_version
        expanded = await alter(sorted([*shrunk, follower]), int(answer.partition_epoch))
        [[grown]] = [t.partitions for t in expanded.topics]
        assert grown.error_code == ErrorCode.none
        assert sorted(int(b) for b in grown.isr) == sorted([*shrunk, follower])
    finally:
        await stop_all(brokers)


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
        brokers = await register_brokers(cluster, admin, max_levels={3: old_level})
        try:
            bootstrap = cluster.bootstrap_servers()
            refused = await kraft_async("features", "--bootstrap-controller", bootstrap, "upgrade", "--metadata",
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
            accepted = await kraft_async("features", "--bootstrap-controller", bootstrap, "upgrade", "--metadata",
                                    target.version)
            assert accepted.returncode == 0, accepted.stdout + accepted.stderr
            assert accepted.stdout == f"metadata.version was upgraded to {target.feature_level}.\n"
            described = await kraft_async("features", "--bootstrap-controller", bootstrap, "describe")
            assert f"FinalizedVersionLevel: {target.version}\t" in described.stdout
        finally:
            await stop_all(brokers)


async def test_kill_9_of_the_active_controller_loses_no_acknowledged_write(
    controllers: ProcessCluster, admin: ControllerAdmin
) -> None:
    brokers = await register_brokers(controllers, admin)
    try:
        acknowledged: list[str] = []
        for index in range(5):
            name = f"before-{index}"
            result = await kraft_async("topics", "--bootstrap-controller", controllers.bootstrap_servers(), "--create",
                                  "--topic", name, "--partitions", "1", "--replication-factor", "3")
            assert result.returncode == 0, result.stderr
            acknowledged.append(name)
        active = await asyncio.to_thread(controllers.wait_for_leader)
        await asyncio.to_thread(controllers.kill, active)
        survivors = [n for n in (1, 2, 3) if n != active]
        bootstrap = controllers.bootstrap_servers(survivors)
        for index in range(3):
            name = f"after-{index}"
            result = await kraft_async("topics", "--bootstrap-controller", bootstrap, "--create",
                                  "--topic", name, "--partitions", "1", "--replication-factor", "3")
            assert result.returncode == 0, result.stderr
            acknowledged.append(name)
        listed = await kraft_async("topics", "--bootstrap-controller", bootstrap, "--list")
        assert sorted(listed.stdout.split()) == sorted(acknowledged)
        # The killed controller comes back and converges on the same topics.
        await asyncio.to_thread(controllers.start, active)
        own = controllers.nodes[active].address

        async def caught_up() -> bool:
            result = await kraft_async("topics", "--bootstrap-controller", own, "--list")
            return sorted(result.stdout.split()) == sorted(acknowledged)

        await until(caught_up, timeout_s=30, what=f"controller {active} to catch up")
    finally:
        await stop_all(brokers)


async def test_a_client_retries_against_the_new_active_controller_well_inside_its_timeout(
    controllers: ProcessCluster, admin: ControllerAdmin
) -> None:
    # The client last spoke to the active controller, which is then killed -9. Its next write
    # must find the new active controller, not spend its request timeout reconnecting to the
    # dead one: with an 8 s timeout (request timeout 8 s) the old client gave up with
    # ControllerAdminError after 8 s of refused reconnects to the killed node.
    brokers = await register_brokers(controllers, admin)
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
        await stop_all(brokers)


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
        brokers = await register_brokers(cluster, admin)
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
                listed = await kraft_async("topics", "--bootstrap-controller", own, "--list")
                return sorted(listed.stdout.split()) == names

            await until(caught_up, timeout_s=60, what=f"controller {standby} to load the snapshot and catch up")
            standby_status = cluster.status(standby)
            assert standby_status is not None
            assert any(offset > behind_end for offset, _ in standby_status["snapshots"]), standby_status
            assert int(standby_status["log_start_offset"]) > behind_end
        finally:
            await stop_all(brokers)
