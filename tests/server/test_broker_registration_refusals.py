"""A broker of another cluster registering with the active controller is named and counted, as a
raft peer of another cluster is: one WARN per peer and 30 s with the broker id, its address and
both cluster ids; `kraftwerk_raft_inconsistent_cluster_id_total{peer,direction="inbound"}` counts
every refusal."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i16
from prometheus_client import CollectorRegistry
from test_controller_service import CLUSTER_ID, MV, InProcessController

from kraft_engine.protocol import ConnectionConfig, KafkaConnection
from kraft_engine.protocol import Listener as KafkaListener
from kraft_engine.server.cluster_id_refusals import ClusterIdRefusals
from kraft_engine.server.controller_apis import ControllerApis
from kraft_engine.server.raft_metrics import RaftMetrics

OTHER_CLUSTER = "b8tKLKnJQKSHzhvA8OZ7rw"


async def test_a_broker_of_another_cluster_is_named_once_and_counted_per_attempt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node = InProcessController(tmp_path)
    await node.start()
    registry = CollectorRegistry()
    refusals = ClusterIdRefusals(
        cluster_id=CLUSTER_ID, metrics=RaftMetrics(registry, node=lambda: None), clock_ms=node.service.now_ms
    )
    listener = KafkaListener("CONTROLLER", features_provider=node.service.features, registry=node.registry)
    ControllerApis(node.service, refusals=refusals).register(listener)
    await listener.start("127.0.0.1", 0)
    connection = KafkaConnection("127.0.0.1", listener.port, config=ConnectionConfig(client_id="broker-7"))
    try:
        await connection.connect()
        with caplog.at_level(logging.WARNING, logger="kraft_engine.server.cluster_id_refusals"):
            for _ in range(3):
                response = await connection.send(BrokerRegistrationRequest(
                    broker_id=BrokerId(7), cluster_id=OTHER_CLUSTER, incarnation_id=uuid.uuid4(), listeners=(),
                    features=(Feature(name="metadata.version", min_supported_version=i16(7),
                                      max_supported_version=i16(MV)),),
                    rack=None, log_dirs=(uuid.uuid4(),),
                ))
                assert response.error_code == ErrorCode.inconsistent_cluster_id
        [line] = [r.getMessage() for r in caplog.records]
        assert line.startswith("Refused BrokerRegistrationRequest from node 7 at 127.0.0.1:")
        assert f"its cluster id is '{OTHER_CLUSTER}', ours is '{CLUSTER_ID}'" in line
        assert registry.get_sample_value(
            "kraftwerk_raft_inconsistent_cluster_id_total", {"peer": "7", "direction": "inbound"}
        ) == 3
    finally:
        await connection.close()
        await listener.close()
        await node.close()
