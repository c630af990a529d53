"""The controller's APIs on a real listener, and `kraft features` / `kraft topics` against it.

One in-process controller (single-voter raft over a MemoryLog, see test_controller_service)
serves its listener on a loopback port; clients speak the real protocol to it. The CLI runs in a
worker thread (it owns its own event loop, as it does from a shell).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64, u16
from test_controller_service import CLUSTER_ID, MV, NODE_ID, InProcessController

from kraft_engine.cli.main import main
from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.protocol import ConnectionConfig, KafkaConnection, RequestContext
from kraft_engine.protocol import Listener as KafkaListener
from kraft_engine.server.controller_apis import CONTROLLER_APIS, KAFKA_CONTROLLER_VERSIONS, ControllerApis


class _Served:
    def __init__(self, node: InProcessController, listener: KafkaListener) -> None:
        self.node = node
        self.listener = listener

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.listener.port}"

    async def connection(self) -> KafkaConnection:
        connection = KafkaConnection("127.0.0.1", self.listener.port,
                                     config=ConnectionConfig(client_id="test", request_timeout_ms=10000))
        await connection.connect()
        return connection


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[_Served]:
    node = InProcessController(tmp_path)
    await node.start()
    listener = KafkaListener("CONTROLLER", features_provider=node.service.features, registry=node.registry)
    ControllerApis(node.service).register(listener)

    async def describe_cluster(request: Any, ctx: RequestContext) -> Any:
        # The node serves DescribeCluster itself (the voters and the raft leader); this test has
        # one voter, listening here.
        module = sys.modules[ctx.response_class.__module__]
        return ctx.response_class(
            throttle_time=timedelta(0), error_code=ErrorCode.none, endpoint_type=i8(2), cluster_id=CLUSTER_ID,
            controller_id=i32(NODE_ID),
            brokers=(module.DescribeClusterBroker(broker_id=i32(NODE_ID), host="127.0.0.1", port=i32(listener.port)),),
        )

    listener.register(60, min_version=1, max_version=1, handler=describe_cluster)
    await listener.start("127.0.0.1", 0)
    try:
        yield _Served(node, listener)
    finally:
        await listener.close()
        await node.close()


async def _kraft(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def _register_brokers(served: _Served, *broker_ids: int, max_mv: int = MV) -> dict[int, int]:
    connection = await served.connection()
    epochs = {}
    try:
        for broker_id in broker_ids:
            response = await connection.send(BrokerRegistrationRequest(
                broker_id=BrokerId(broker_id), cluster_id=CLUSTER_ID, incarnation_id=uuid.uuid4(),
                listeners=(Listener(name="PLAINTEXT", host="localhost", port=u16(9092 + broker_id),
                                    security_protocol=i16(0)),),
                features=(Feature(name="metadata.version", min_supported_version=i16(7),
                                  max_supported_version=i16(max_mv)),),
                rack=None, log_dirs=(uuid.uuid4(),),
            ))
            assert response.error_code == ErrorCode.none
            epochs[broker_id] = int(response.broker_epoch)
        for broker_id, epoch in epochs.items():
            response = await connection.send(BrokerHeartbeatRequest(
                broker_id=BrokerId(broker_id), broker_epoch=i64(epoch),
                current_metadata_offset=i64(served.node.service.controller.last_stable_offset()),
                want_fence=False, want_shut_down=False,
            ))
            assert response.error_code == ErrorCode.none and not response.is_fenced
    finally:
        await connection.close()
    return epochs


async def test_api_versions_lists_the_controller_apis_and_the_finalized_features(served: _Served) -> None:
    connection = await served.connection()
    try:
        versions = connection.peer_api_versions
        for api_key in CONTROLLER_APIS:
            assert versions[api_key] == KAFKA_CONTROLLER_VERSIONS[api_key]
        assert versions[58] == (0, 0)  # Envelope
        response = connection.api_versions_response
        finalized = {f.name: int(f.max_version_level) for f in response.finalized_features}
        assert finalized == {"metadata.version": MV}
        assert int(response.finalized_features_epoch) >= 0
    finally:
        await connection.close()


async def test_create_topics_on_the_wire_answers_once_committed(served: _Served) -> None:
    await _register_brokers(served, 1, 2, 3)
    connection = await served.connection()
    try:
        request = CreateTopicsRequest(topics=(CreatableTopic(
            name=TopicName("payments"), num_partitions=i32(2), replication_factor=i16(3), assignments=(), configs=(),
        ),))
        response = await connection.send(request)
        [result] = response.topics
        assert result.error_code == ErrorCode.none and result.topic_id is not None
        assert int(result.num_partitions) == 2 and int(result.replication_factor) == 3
        again = await connection.send(request)
        assert again.topics[0].error_code == ErrorCode.topic_already_exists
    finally:
        await connection.close()


async def test_a_standby_answers_not_controller_per_topic(served: _Served) -> None:
    controller = served.node.service.controller
    served.node.raft.refuse_appends = True  # the next write renounces; then it is a standby
    connection = await served.connection()
    try:
        request = CreateTopicsRequest(topics=(
            CreatableTopic(name=TopicName("a"), num_partitions=i32(1), replication_factor=i16(1), assignments=(),
                           configs=()),
            CreatableTopic(name=TopicName("b"), num_partitions=i32(1), replication_factor=i16(1), assignments=(),
                           configs=()),
        ))
        await _register_brokers_expecting_not_controller(connection)
        assert not controller.is_active()
        response = await connection.send(request)
        assert [t.error_code for t in response.topics] == [ErrorCode.not_controller] * 2
    finally:
        await connection.close()


async def _register_brokers_expecting_not_controller(connection: KafkaConnection) -> None:
    response = await connection.send(BrokerRegistrationRequest(
        broker_id=BrokerId(1), cluster_id=CLUSTER_ID, incarnation_id=uuid.uuid4(), listeners=(),
        features=(Feature(name="metadata.version", min_supported_version=i16(7), max_supported_version=i16(MV)),),
        rack=None, log_dirs=(uuid.uuid4(),),
    ))
    assert response.error_code == ErrorCode.not_controller


async def test_kraft_topics_create_list_describe_delete(served: _Served, capsys: pytest.CaptureFixture[str]) -> None:
    await _register_brokers(served, 1, 2, 3)
    bootstrap = served.bootstrap
    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--create", "--topic", "orders",
                        "--partitions", "3", "--replication-factor", "3") == 0
    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--create", "--topic", "audit",
                        "--replica-assignment", "1:2,2:3", "--config", "cleanup.policy=compact") == 0
    assert capsys.readouterr().out == "Created topic orders.\nCreated topic audit.\n"
    await _until_in_image(served, "orders", "audit")

    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--list") == 0
    assert capsys.readouterr().out == "audit\norders\n"

    # Creating it again is refused with the controller's message, and nothing changes.
    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--create", "--topic", "orders",
                        "--partitions", "1", "--replication-factor", "1") == 1
    assert "Topic 'orders' already exists." in capsys.readouterr().err
    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--create", "--topic", "orders",
                        "--partitions", "1", "--replication-factor", "1", "--if-not-exists") == 0

    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--describe", "--topic", "audit") == 0
    lines = capsys.readouterr().out.splitlines()
    topic_id = served.node.service.image.topics.topics_by_name["audit"].id
    assert lines == [
        f"Topic: audit\tTopicId: {to_kafka_str(topic_id)}\tPartitionCount: 2\tReplicationFactor: 2"
        "\tConfigs: cleanup.policy=compact",
        "\tTopic: audit\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1,2\tElr: N/A\tLastKnownElr: N/A",
        "\tTopic: audit\tPartition: 1\tLeader: 2\tReplicas: 2,3\tIsr: 2,3\tElr: N/A\tLastKnownElr: N/A",
    ]

    # More partitions for orders; fewer is refused with the controller's message.
    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--alter", "--topic", "orders",
                        "--partitions", "5") == 0
    assert capsys.readouterr().out == ""
    await _until_partitions(served, "orders", 5)
    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--alter", "--topic", "orders",
                        "--partitions", "2") == 1
    assert "Error while executing topic command : " in capsys.readouterr().err
    assert len(served.node.service.image.topics.topics_by_name["orders"].partitions) == 5

    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--delete", "--topic", "ord.*") == 0
    await _until_gone(served, "orders")
    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--list") == 0
    assert capsys.readouterr().out == "audit\n"
    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--delete", "--topic", "nope") == 1
    assert "Topic 'nope' does not exist as expected" in capsys.readouterr().err
    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--delete", "--topic", "nope",
                        "--if-exists") == 0


async def test_kraft_topics_refuses_bad_input_before_sending(served: _Served, capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = served.bootstrap
    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--create", "--topic", "x",
                        "--config", "novalue") == 1
    assert "key=val" in capsys.readouterr().err
    assert await _kraft("topics", "--bootstrap-controller", bootstrap, "--create", "--topic", "x",
                        "--partitions", "0") == 1
    assert "--partitions must be greater than 0" in capsys.readouterr().err
    assert served.node.service.controller.replication_control.topic_id("x") is None


async def test_kraft_features_describe_and_a_refused_then_accepted_upgrade(
    served: _Served, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = served.bootstrap
    assert await _kraft("features", "--bootstrap-controller", bootstrap, "describe") == 0
    line = capsys.readouterr().out.strip()
    epoch = served.node.service.image.offset
    assert line == (f"Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.0-IV3"
                     f"\tFinalizedVersionLevel: 4.0-IV3\tEpoch: {epoch}")

    # Downgrading across a metadata change is refused unless unsafe; nothing is written.
    assert await _kraft("features", "--bootstrap-controller", bootstrap, "downgrade", "--metadata", "3.3-IV3") == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("Could not downgrade metadata.version to 7. ")
    assert "1 out of 1 operation(s) failed." in captured.err
    assert served.node.service.controller.finalized_features()["metadata.version"] == MV

    # A dry run of an acceptable change says so without changing anything.
    assert await _kraft("features", "--bootstrap-controller", bootstrap, "downgrade", "--metadata", "4.0-IV3",
                        "--dry-run") == 0
    assert capsys.readouterr().out == f"metadata.version can be downgraded to {MV}.\n"

    assert await _kraft("features", "--bootstrap-controller", bootstrap, "upgrade", "--metadata", "9.9") == 1
    assert "Unsupported metadata version 9.9. Supported metadata versions are 3.3-IV3" in capsys.readouterr().err
    assert await _kraft("features", "--bootstrap-controller", bootstrap, "upgrade", "--feature", "x") == 1
    assert "equals sign not found" in capsys.readouterr().err


async def _until_in_image(served: _Served, *names: str) -> None:
    async with asyncio.timeout(5):
        while not all(n in served.node.service.image.topics.topics_by_name for n in names):
            await asyncio.sleep(0.005)


async def _until_partitions(served: _Served, name: str, count: int) -> None:
    async with asyncio.timeout(5):
        while len(served.node.service.image.topics.topics_by_name[name].partitions) != count:
            await asyncio.sleep(0.005)


async def _until_gone(served: _Served, name: str) -> None:
    async with asyncio.timeout(5):
        while name in served.node.service.image.topics.topics_by_name:
            await asyncio.sleep(0.005)


async def test_a_write_not_committed_within_the_request_timeout_answers_request_timed_out(served: _Served) -> None:
    await _register_brokers(served, 1, 2, 3)
    await served.node.raft.close()  # raft stops: nothing the controller appends can commit now
    connection = await served.connection()
    try:
        response = await connection.send(CreateTopicsRequest(
            topics=(CreatableTopic(name=TopicName("late"), num_partitions=i32(1), replication_factor=i16(3),
                                   assignments=(), configs=()),),
            timeout=i32Timedelta.parse(timedelta(milliseconds=200)),
        ))
        [result] = response.topics
        assert result.error_code == ErrorCode.request_timed_out
    finally:
        await connection.close()


async def test_configs_reassignments_elections_and_unregistration_are_served_on_the_wire(served: _Served) -> None:
    from kio.schema.alter_partition_reassignments.v1 import request as apr
    from kio.schema.describe_configs.v4 import request as dc
    from kio.schema.elect_leaders.v2 import request as el
    from kio.schema.incremental_alter_configs.v1 import request as iac
    from kio.schema.list_partition_reassignments.v0 import request as lpr
    from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest

    await _register_brokers(served, 1, 2, 3, 4)
    connection = await served.connection()
    try:
        created = await connection.send(CreateTopicsRequest(topics=(CreatableTopic(
            name=TopicName("orders"), num_partitions=i32(1), replication_factor=i16(3), assignments=(), configs=(),
        ),)))
        assert created.topics[0].error_code == ErrorCode.none

        altered = await connection.send(iac.IncrementalAlterConfigsRequest(resources=(iac.AlterConfigsResource(
            resource_type=i8(2), resource_name="orders",
            configs=(iac.AlterableConfig(name="min.insync.replicas", config_operation=i8(0), value="2"),),
        ),), validate_only=False))
        assert [r.error_code for r in altered.responses] == [ErrorCode.none]
        described = await connection.send(dc.DescribeConfigsRequest(resources=(dc.DescribeConfigsResource(
            resource_type=i8(2), resource_name="orders", configuration_keys=("min.insync.replicas",),
        ),), include_synonyms=False, include_documentation=False))
        [result] = described.results
        assert result.error_code == ErrorCode.none
        assert [(c.name, c.value) for c in result.configs] == [("min.insync.replicas", "2")]

        partition = served.node.service.image.topics.topics_by_name["orders"].partitions[0]
        # The preferred replica already leads: nothing to elect (Kafka's ELECTION_NOT_NEEDED).
        elected = await connection.send(el.ElectLeadersRequest(
            election_type=i8(0), topic_partitions=(el.TopicPartitions(topic=TopicName("orders"), partitions=(i32(0),)),),
            timeout=i32Timedelta.parse(timedelta(seconds=10)),
        ))
        [election] = elected.replica_election_results
        assert [p.error_code for p in election.partition_result] == [ErrorCode.election_not_needed]

        # Move the last replica to broker 4: it is not in the ISR yet, so the reassignment stays ongoing.
        spare = next(b for b in (1, 2, 3, 4) if b not in partition.replicas)
        target = (*partition.replicas[:2], spare)
        reassigned = await connection.send(apr.AlterPartitionReassignmentsRequest(
            timeout=i32Timedelta.parse(timedelta(seconds=10)), allow_replication_factor_change=False,
            topics=(apr.ReassignableTopic(name=TopicName("orders"), partitions=(apr.ReassignablePartition(
                partition_index=i32(0), replicas=tuple(BrokerId(b) for b in target)),)),),
        ))
        assert reassigned.error_code == ErrorCode.none
        assert [p.error_code for t in reassigned.responses for p in t.partitions] == [ErrorCode.none]
        listed = await connection.send(lpr.ListPartitionReassignmentsRequest(
            timeout=i32Timedelta.parse(timedelta(seconds=10)), topics=None,
        ))
        [ongoing] = [p for t in listed.topics if t.name == "orders" for p in t.partitions]
        assert list(ongoing.adding_replicas) == [spare]
        assert list(ongoing.removing_replicas) == [partition.replicas[2]]

        gone = await connection.send(UnregisterBrokerRequest(broker_id=BrokerId(spare)))
        assert gone.error_code == ErrorCode.none
        assert served.node.service.controller.cluster_control.broker(spare) is None
        again = await connection.send(UnregisterBrokerRequest(broker_id=BrokerId(spare)))
        assert again.error_code == ErrorCode.broker_id_not_registered
    finally:
        await connection.close()


async def test_the_versions_kafka_nodes_and_tools_send_are_served(served: _Served) -> None:
    """The oldest version Kafka 4.1's controllers take of each admin api, bridged to the managers'."""
    from kio.schema.create_partitions.v0 import request as cp0
    from kio.schema.create_topics.v2 import request as ct2
    from kio.schema.delete_topics.v1 import request as dt1
    from kio.schema.describe_configs.v1 import request as dc1
    from kio.schema.elect_leaders.v0 import request as el0
    from kio.schema.incremental_alter_configs.v0 import request as iac0
    from kio.schema.update_features.v0 import request as uf0
    from kio.schema.update_features.v2 import request as uf2

    await _register_brokers(served, 1, 2, 3)
    ten_s = i32Timedelta.parse(timedelta(seconds=10))
    connection = await served.connection()
    try:
        created = await connection.send(ct2.CreateTopicsRequest(topics=(ct2.CreatableTopic(
            name=TopicName("old"), num_partitions=i32(1), replication_factor=i16(3), assignments=(), configs=(),
        ),), timeout=ten_s, validate_only=False))
        assert [(t.name, t.error_code) for t in created.topics] == [("old", ErrorCode.none)]
        grown = await connection.send(cp0.CreatePartitionsRequest(topics=(cp0.CreatePartitionsTopic(
            name=TopicName("old"), count=i32(2), assignments=None),), timeout=ten_s, validate_only=False))
        assert [r.error_code for r in grown.results] == [ErrorCode.none]
        altered = await connection.send(iac0.IncrementalAlterConfigsRequest(resources=(iac0.AlterConfigsResource(
            resource_type=i8(2), resource_name="old",
            configs=(iac0.AlterableConfig(name="retention.ms", config_operation=i8(0), value="1000"),),
        ),), validate_only=False))
        assert [r.error_code for r in altered.responses] == [ErrorCode.none]
        described = await connection.send(dc1.DescribeConfigsRequest(resources=(dc1.DescribeConfigsResource(
            resource_type=i8(2), resource_name="old", configuration_keys=("retention.ms",)),), include_synonyms=False))
        assert [(c.name, c.value) for c in described.results[0].configs] == [("retention.ms", "1000")]
        elected = await connection.send(el0.ElectLeadersRequest(
            topic_partitions=(el0.TopicPartitions(topic=TopicName("old"), partitions=(i32(0),)),), timeout=ten_s))
        assert [p.error_code for r in elected.replica_election_results for p in r.partition_result] == [
            ErrorCode.election_not_needed]
        deleted = await connection.send(dt1.DeleteTopicsRequest(topic_names=(TopicName("old"),), timeout=ten_s))
        assert [(r.name, r.error_code) for r in deleted.responses] == [("old", ErrorCode.none)]
        update = uf0.FeatureUpdateKey(feature="metadata.version", max_version_level=i16(MV), allow_downgrade=False)
        same = await connection.send(uf0.UpdateFeaturesRequest(timeout=ten_s, feature_updates=(update,)))
        assert same.error_code == ErrorCode.none and [r.feature for r in same.results] == ["metadata.version"]
        v2 = await connection.send(uf2.UpdateFeaturesRequest(timeout=ten_s, feature_updates=(uf2.FeatureUpdateKey(
            feature="metadata.version", max_version_level=i16(MV), upgrade_type=i8(1)),), validate_only=True))
        assert v2.error_code == ErrorCode.none and not hasattr(v2, "results")  # v2 answers the top level only
    finally:
        await connection.close()


async def test_an_envelope_from_a_kafka_broker_creates_the_topic_with_the_forwarded_principal(
    served: _Served, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka brokers forward CreateTopics in an Envelope (librdkafka's v4 here), principal inside."""
    from kio.schema.create_topics.v4 import request as ct4
    from kio.schema.create_topics.v4 import response as ct4_response
    from kio.schema.envelope.v0.request import EnvelopeRequest

    from kraft_engine.protocol.envelope import encode_principal
    from kraft_engine.protocol.framing import decode_response, encode_request

    await _register_brokers(served, 1, 2, 3)
    inner = encode_request(ct4.CreateTopicsRequest(topics=(ct4.CreatableTopic(
        name=TopicName("forwarded"), num_partitions=i32(1), replication_factor=i16(3), assignments=(), configs=(),
    ),), timeout=i32Timedelta.parse(timedelta(seconds=10)), validate_only=False), correlation_id=41,
        client_id="rdkafka")[4:]
    connection = await served.connection()
    try:
        envelope = await connection.send(EnvelopeRequest(
            request_data=inner, request_principal=encode_principal("User:alice"),
            client_host_address=bytes([192, 168, 1, 9]),
        ))
    finally:
        await connection.close()
    assert envelope.error_code == ErrorCode.none
    response = decode_response(envelope.response_data, ct4_response.CreateTopicsResponse)
    assert [(t.name, t.error_code) for t in response.topics] == [("forwarded", ErrorCode.none)]
    await _until_in_image(served, "forwarded")


async def test_an_oversized_create_topics_is_refused_at_once_and_logged_at_info(
    served: _Served, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue #18: one topic of 1,000,000 partitions took 8.1 s and 431 MiB before its refusal."""
    import logging

    connection = await served.connection()
    try:
        with caplog.at_level(logging.INFO, logger="kraft_engine.server.controller_service"):
            response = await connection.send(CreateTopicsRequest(topics=(CreatableTopic(
                name=TopicName("huge"), num_partitions=i32(1_000_000), replication_factor=i16(1), assignments=(),
                configs=(),
            ),)))
    finally:
        await connection.close()
    [result] = response.topics
    assert result.error_code == ErrorCode.policy_violation
    assert result.error_message == "Excessively large number of partitions per request."
    [line] = [r.getMessage() for r in caplog.records if "createTopics: event failed" in r.getMessage()]
    assert "POLICY_VIOLATION" in line and "Reason: Excessively large number of partitions per request." in line


async def test_a_heartbeat_that_times_out_in_a_busy_controllers_queue_refreshes_the_brokers_contact_time(
    served: _Served,
) -> None:
    """Kafka's processExpiredBrokerHeartbeat: the broker is alive, the controller is slow. The
    heartbeat waits at most broker.heartbeat.interval.ms / 2 (1000 ms by default) for its event;
    when that passes the broker gets REQUEST_TIMED_OUT and its contact time is taken again then,
    so the controller's own backlog never costs the broker its session."""
    [epoch] = (await _register_brokers(served, 1)).values()
    service = served.node.service
    tracker = service.controller.cluster_control.tracker
    release = threading.Event()
    busy = asyncio.ensure_future(service.read("busy", lambda c: release.wait(10)))  # holds the controller thread
    connection = await served.connection()
    try:
        sent_ms = service.now_ms()
        response = await connection.send(BrokerHeartbeatRequest(
            broker_id=BrokerId(1), broker_epoch=i64(epoch), current_metadata_offset=i64(0),
            want_fence=False, want_shut_down=False,
        ))
        assert response.error_code == ErrorCode.request_timed_out
        contact_ms = tracker.contact_time_ms(1, epoch)
        # Taken again when the wait ended, not only when the request arrived.
        assert contact_ms is not None and contact_ms >= sent_ms + 1000
    finally:
        release.set()
        await busy
        await connection.close()


async def test_a_heartbeat_queued_behind_a_busy_controller_counts_as_contact_on_arrival(tmp_path: Path) -> None:
    """The BrokerHeartbeat handler records the broker's contact time when the request arrives,
    before its event waits in the controller's queue: heartbeats stuck behind a long controller
    event (a fence at 100k partitions) do not get the broker fenced for the controller's backlog.
    The heartbeat's own deadline is a minute here, so while the controller thread is held the only
    thing that can move the contact time is that record on arrival."""
    node = InProcessController(tmp_path)
    await node.start()
    listener = KafkaListener("CONTROLLER", features_provider=node.service.features, registry=node.registry)
    ControllerApis(node.service, heartbeat_timeout_ms=60_000).register(listener)
    await listener.start("127.0.0.1", 0)
    served = _Served(node, listener)
    try:
        [epoch] = (await _register_brokers(served, 1)).values()
        service = node.service
        tracker = service.controller.cluster_control.tracker
        before = tracker.contact_time_ms(1, epoch)
        assert before is not None
        while service.now_ms() <= before:  # a later millisecond than the last contact
            await asyncio.sleep(0.001)
        release = threading.Event()
        busy = asyncio.ensure_future(service.read("busy", lambda c: release.wait(30)))  # holds the controller thread
        connection = await served.connection()
        try:
            heartbeat = asyncio.ensure_future(connection.send(BrokerHeartbeatRequest(
                broker_id=BrokerId(1), broker_epoch=i64(epoch), current_metadata_offset=i64(0),
                want_fence=False, want_shut_down=False,
            )))
            async with asyncio.timeout(5):
                while tracker.contact_time_ms(1, epoch) == before:
                    await asyncio.sleep(0.005)
            assert not heartbeat.done()  # its event is still queued behind the held controller
        finally:
            release.set()
            await busy
        response = await heartbeat
        assert response.error_code == ErrorCode.none
        await connection.close()
    finally:
        await listener.close()
        await node.close()
