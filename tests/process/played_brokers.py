"""Brokers played over the real protocol against real controller processes (the `controllers`
and `admin` fixtures in conftest start three controllers for them).

There is no broker yet: a `Broker` does only what a broker's lifecycle manager does toward the
controller (BrokerRegistration, a BrokerHeartbeat loop), which is exactly what the controller's
liveness behaviour depends on. Tests import the fixtures they use from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
import uuid
from typing import Any

from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i64, u16
from quorum_processes import HOST, ProcessCluster, kraft

from kraft_engine.admin.controller_admin import ControllerAdmin
from kraft_engine.protocol import ConnectionConfig, KafkaConnection, KafkaProtocolError
from kraft_engine.records import feature_versions, metadata_version

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
        #: What the broker's software supports besides metadata.version: this engine's features.
        self.supported_features = {
            name: levels for name, levels in feature_versions.supported_ranges(unstable_enabled=False).items()
            if name != metadata_version.FEATURE_NAME
        }
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
                              max_supported_version=i16(self.max_metadata_level)),
                      *(Feature(name=name, min_supported_version=i16(low), max_supported_version=i16(high))
                        for name, (low, high) in sorted(self.supported_features.items()))),
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
                self.metadata_offset = await committed_offset(self.admin)
                await self.heartbeat()
            await asyncio.sleep(HEARTBEAT_INTERVAL_MS / 1000)


async def committed_offset(admin: ControllerAdmin) -> int:
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


async def fetch_metadata(admin: ControllerAdmin, *topics: str) -> Any:
    return await admin.send_to_active(MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics) if topics else None,
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    ))


def controller_metric(cluster: ProcessCluster, node_id: int, name: str) -> float:
    """A kafka_controller_kafkacontroller_* gauge from a controller's Prometheus endpoint."""
    url = f"http://{HOST}:{cluster.nodes[node_id].http_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f"kafka_controller_kafkacontroller_{name} "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} metric on controller {node_id}")


async def create_topic(controllers: ProcessCluster, name: str, *, partitions: int) -> None:
    created = await kraft_async("topics", "--bootstrap-controller", controllers.bootstrap_servers(), "--create",
                           "--topic", name, "--partitions", str(partitions), "--replication-factor", "3")
    assert created.returncode == 0, created.stderr
    assert created.stdout == f"Created topic {name}.\n"


async def kraft_async(*args: str) -> Any:
    return await asyncio.to_thread(kraft, *args)


async def until(condition: Any, *, timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(interval_s)


async def register_brokers(controllers: ProcessCluster, admin: ControllerAdmin, *, max_levels: dict[int, int] | None = None
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
        await until(lambda b=broker: async_value(not b.fenced), timeout_s=30, what=f"broker {broker.broker_id} unfenced")
    return brokers


async def async_value(value: Any) -> Any:
    return value


async def stop_all(brokers: dict[int, Broker]) -> None:
    for broker in brokers.values():
        await broker.stop_heartbeats()
