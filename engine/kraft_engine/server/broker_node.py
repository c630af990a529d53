"""One KRaft broker process (`process.roles=broker`): storage checks, the metadata observer, the
lifecycle with the controllers, the replicas and the client listeners.

`BrokerNode.open(config)` refuses storage it must not use (a metadata log directory without
meta.properties, directories that disagree on cluster.id or node.id); a log directory added to a
formatted broker (empty or missing) gets meta.properties with a new directory.id, as Kafka's server
writes it at startup. It then opens the broker's replica of `__cluster_metadata` (recovering a torn
tail). `run()` then follows the seed's broker lifecycle:

1. A raft *observer* (the same `RaftNode`/`RaftDriver` the controllers run, with this broker's id,
   never a voter) fetches the metadata log from the quorum leader. A `MetadataLoader` folds what
   it commits into images and, once caught up to the leader's high watermark, publishes each delta
   to this broker's publisher: the replica manager's leader/follower transitions.
2. The lifecycle (`broker.BrokerLifecycle`) registers this incarnation (listeners, rack,
   supported features, log-dir ids) with the active controller and heartbeats every
   `broker.heartbeat.interval.ms`, fenced at first. When the controller says the broker caught up
   to its registration offset the broker is in RECOVERY: its client listeners start (logs are
   opened and recovered as the metadata assigns them) and it asks to be unfenced; when a
   heartbeat answer says unfenced it is RUNNING and `/readyz` turns ready.
3. SIGTERM (`stop()`) is a controlled shutdown: the next heartbeat goes at once with
   want_shut_down, the broker keeps serving and replicating until the controller answers
   should_shut_down (it moved this broker's leaderships away), then it stops fetching, flushes
   every log, writes the checkpoints and exits. A broker that never registered just exits.

Metrics (Kafka's JMX names in the Prometheus form of the node's registry):
`kafka_server_kafkaserver_brokerstate` and, from `kafka.server:type=ReplicaManager`,
`..._underreplicatedpartitions`, `..._underminisrpartitioncount`, `..._atminisrpartitioncount`,
`..._offlinereplicacount`, `..._partitioncount`, `..._leadercount`, `..._isrshrinks_total`,
`..._isrexpands_total`; and `kraftwerk_event_loop_stall_ms` (`server.loop_stall`): how late the
broker's one event loop, which carries replication, client requests and the metadata log, woke.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature
from kio.schema.broker_registration.v4.request import Listener as RegistrationListener
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i16, i64, u16
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kraft_engine.broker import (
    BrokerLifecycle,
    BrokerState,
    HeartbeatAnswer,
    HeartbeatRequest,
    RegistrationRequest,
)
from kraft_engine.errors import SnapshotError
from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.metadata import (
    LoaderManifest,
    MetadataDelta,
    MetadataImage,
    MetadataLoader,
)
from kraft_engine.protocol import ExponentialBackoff, Features, Listener
from kraft_engine.raft import (
    CommittedBatch,
    LeaderAndEpoch,
    LeaderChange,
    SnapshotLoad,
)
from kraft_engine.records import decode_metadata_record, decode_metadata_records, feature_versions
from kraft_engine.server.broker_apis import BrokerApis
from kraft_engine.server.config import KafkaConfig
from kraft_engine.server.controller_channel import ControllerChannel, ControllerUnavailable
from kraft_engine.server.controller_node import METADATA_PARTITION_DIR, ControllerNode, StartupError
from kraft_engine.server.controller_runtime import ControllerFatalError
from kraft_engine.server.group_apis import GroupApis
from kraft_engine.server.http_endpoint import HttpEndpoint, HttpResponse
from kraft_engine.server.listener_limits import listener_limits
from kraft_engine.server.loop_stall import LoopStallMonitor
from kraft_engine.server.node_security import controller_client_security, node_listener_security, scram_lookup
from kraft_engine.server.raft_driver import (
    RaftDriver,
    RaftFatalError,
    open_raft_node,
    raft_connection_config,
    wall_clock_ms,
)
from kraft_engine.server.raft_metrics import RaftMetrics
from kraft_engine.server.replica_manager import ReplicaManager, clean_shutdown_broker_epoch
from kraft_engine.storage.meta_properties import (
    MetaPropertiesEnsemble,
    MetaPropertiesError,
    initialize_new_log_dirs,
)
from kraft_engine.storage.metadata_log import FileMetadataLog
from kraft_engine.storage.partition_log import LogError
from kraft_engine.storage.quorum_state_store import (
    QUORUM_STATE_FILE_NAME,
    FileQuorumStateStore,
    QuorumStateError,
)

__all__ = ["BrokerNode"]

logger = logging.getLogger(__name__)

_SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
_CONTROLLED_SHUTDOWN_TIMEOUT_S = 300.0  # Kafka's BrokerServer waits 5 minutes for the controller
_RAFT_SHUTDOWN_TIMEOUT_MS = 5000
_REQUEST_TIMEOUT_MS = 5000


class BrokerNode:
    """A broker process's parts; `open` checks and loads, `run` serves until `stop`."""

    def __init__(self, config: KafkaConfig, *, cluster_id: str, metadata_directory_id: uuid.UUID | None,
                 log_dirs: dict[uuid.UUID, Path], log: FileMetadataLog | None,
                 quorum_state: FileQuorumStateStore | None, shared: ControllerNode | None = None) -> None:
        self.config = config
        self._shared = shared
        self.cluster_id = cluster_id
        self.metadata_directory_id = metadata_directory_id
        self.log_dirs = log_dirs
        self.log = log
        self.quorum_state = quorum_state
        self.registry = CollectorRegistry() if shared is None else shared.registry
        # How late the broker's one event loop (replication, client requests, metadata) wakes;
        # a combined node's controller already measures the loop they share.
        self.loop_stall = LoopStallMonitor(registry=self.registry) if shared is None else shared.loop_stall
        self.loader = MetadataLoader(publisher_fault_handler=self._publisher_fault)
        self.driver: RaftDriver | None = None
        self.listeners: list[Listener] = []
        self.http: HttpEndpoint | None = None
        self.replicas: ReplicaManager | None = None
        self.lifecycle = BrokerLifecycle(
            incarnation_id=uuid.uuid4(),
            previous_broker_epoch=clean_shutdown_broker_epoch(log_dirs.values()),
            heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
            backoff_ms=self._backoff_ms,
            now_ms=wall_clock_ms(),
        )
        self._rng = random.Random()
        self._backoff = ExponentialBackoff(initial_ms=100, max_ms=max(100, config.broker_session_timeout_ms // 2),
                                           jitter=0.2)
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._shut_down = asyncio.Event()
        self._published = False
        self.started = asyncio.Event()
        self._channel: ControllerChannel | None = None
        self._apis: BrokerApis | None = None
        self.groups: GroupApis | None = None
        if shared is not None:
            shared.on_driver.append(self._attach)
        # Every feature the broker knows, with the levels it implements (Kafka's broker sends its
        # whole supported map; a controller refuses it if a finalized level is outside a range).
        self.supported_features: dict[str, tuple[int, int]] = feature_versions.supported_ranges(
            unstable_enabled=config.unstable_feature_versions_enable, broker=True
        )

    @classmethod
    def open(cls, config: KafkaConfig, *, shared: ControllerNode | None = None) -> BrokerNode:
        """A dedicated broker, or with `shared` the broker half of a combined node (it follows that
        controller's raft replica instead of running an observer of its own)."""
        if not config.is_broker or config.is_controller != (shared is not None):
            raise StartupError("BrokerNode runs process.roles=broker, or broker,controller beside a ControllerNode")
        metadata_dir = Path(config.metadata_log_dir)
        dirs = [Path(d) for d in config.log_dirs]
        ensemble = MetaPropertiesEnsemble.load(dirs, metadata_log_dir=metadata_dir)
        if not ensemble.errors:
            # A log directory added to a formatted broker is formatted here, as Kafka's server does.
            written = initialize_new_log_dirs(ensemble)
            for added, new_id in written.items():
                logger.info("Formatted the new log directory %s: meta.properties with directory.id %s", added,
                            to_kafka_str(new_id))
            if written:
                ensemble = MetaPropertiesEnsemble.load(dirs, metadata_log_dir=metadata_dir)
        for directory in dict.fromkeys([metadata_dir, *dirs]):  # the metadata log directory named first
            if directory not in ensemble.formatted:
                reason = ensemble.errors.get(directory)
                if reason is not None:
                    raise StartupError(f"cannot read meta.properties in {directory}: {reason}")
                raise StartupError(
                    f"No meta.properties found in {directory} (have you run `kraft storage format` to format the directory?)"
                )
        try:
            ensemble.verify(expected_node_id=config.node_id, require_metadata_log_dir=True, require_at_least_one_valid=True)
        except MetaPropertiesError as e:
            raise StartupError(str(e)) from None
        meta = ensemble.formatted[metadata_dir]
        if meta.cluster_id is None:
            raise StartupError(f"meta.properties in {metadata_dir} has no cluster.id")
        log_dirs: dict[uuid.UUID, Path] = {}
        for directory in dirs:
            directory_id = ensemble.formatted[directory].directory_id
            if directory_id is None:
                raise StartupError(f"meta.properties in {directory} has no directory.id; format it with a current tool")
            log_dirs[directory_id] = directory
        if shared is not None:
            return cls(config, cluster_id=meta.cluster_id, metadata_directory_id=meta.directory_id, log_dirs=log_dirs,
                       log=None, quorum_state=None, shared=shared)
        directory = metadata_dir / METADATA_PARTITION_DIR
        quorum_state = FileQuorumStateStore(directory / QUORUM_STATE_FILE_NAME)
        try:
            quorum_state.read()
        except QuorumStateError as e:
            raise StartupError(str(e)) from None
        try:
            log, report = FileMetadataLog.open(directory, segment_bytes=config.metadata_log_segment_bytes,
                                               delete_delay_ms=config.internal_metadata_delete_delay_millis)
        except (LogError, SnapshotError, OSError) as e:
            raise StartupError(f"cannot open the metadata log in {directory}: {e}") from None
        for line in report.describe():
            logger.warning("Metadata log recovery: %s", line)
        return cls(config, cluster_id=meta.cluster_id, metadata_directory_id=meta.directory_id, log_dirs=log_dirs,
                   log=log, quorum_state=quorum_state)

    def stop(self) -> None:
        """SIGTERM: a controlled shutdown (see the module docstring)."""
        self._stop.set()
        self.lifecycle.begin_controlled_shutdown(now_ms=wall_clock_ms())
        if self.lifecycle.state is BrokerState.SHUTTING_DOWN:
            self._shut_down.set()
        self._wake.set()

    @property
    def state(self) -> BrokerState:
        return self.lifecycle.state

    @property
    def image(self) -> MetadataImage:
        return self.loader.image

    # -- running ---------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Build the replicas, client APIs and listeners (before any metadata can arrive)."""
        if self.replicas is not None:
            return
        config = self.config
        channel = ControllerChannel(active_controller=self._active_controller,
                                    client_id=f"broker-{config.node_id}-to-controller", request_timeout_ms=_REQUEST_TIMEOUT_MS,
                                    security=controller_client_security(config))
        self._channel = channel
        self.replicas = ReplicaManager(
            node_id=config.node_id, log_dirs=self.log_dirs, config=config, channel=channel,
            broker_epoch=lambda: self.lifecycle.broker_epoch, image=lambda: self.loader.image,
        )
        self.replicas.on_directory_offline = self._report_offline_directory
        self._apis = BrokerApis(node_id=config.node_id, cluster_id=self.cluster_id, config=config, replicas=self.replicas,
                                image=lambda: self.loader.image, channel=channel,
                                broker_epoch=lambda: self.lifecycle.broker_epoch, registry=self.registry)
        self.groups = GroupApis(node_id=config.node_id, config=config, replicas=self.replicas,
                                image=lambda: self.loader.image, channel=channel, authorizer=self._apis.authorizer)
        limits = listener_limits(config)
        for endpoint in config.listeners:
            if endpoint.listener_name in config.controller_listener_names:
                continue
            security = node_listener_security(config, endpoint.listener_name,
                                              scram_credentials=scram_lookup(lambda: self.loader.image))
            listener = Listener(
                endpoint.listener_name, features_provider=self._features, registry=self.registry, security=security,
                **limits,
            )
            self._apis.register(listener)
            self.groups.register(listener)
            self.listeners.append(listener)
        self.registry.register(_BrokerMetrics(self))
        self.loader.install_publishers([_BrokerPublisher(self)])

    def _report_offline_directory(self) -> None:
        """A log directory went offline: heartbeat at once, as Kafka's broker does, so the
        controller moves its leaderships away now rather than at the next regular heartbeat."""
        logger.info("Reporting offline log directories %s to the controller in a heartbeat now",
                    [str(d) for d in self.replicas.offline_dir_ids] if self.replicas is not None else [])
        self.lifecycle.heartbeat_at_once(now_ms=wall_clock_ms())
        self._wake.set()

    def _attach(self, driver: RaftDriver) -> None:
        """A combined node: follow the controller's raft replica (called before its first poll)."""
        self.prepare()
        self.driver = driver
        driver.add_listener(self._on_raft_event)

    def _own_driver(self) -> RaftDriver:
        config = self.config
        if self.log is None or self.quorum_state is None:
            raise StartupError("a dedicated broker needs its own metadata log")
        raft = open_raft_node(
            config,
            directory_id=self.metadata_directory_id,
            cluster_id=self.cluster_id,
            log=self.log,
            quorum_state=self.quorum_state,
            local_endpoints=(),
        )
        driver = RaftDriver(
            raft=raft,
            log=self.log,
            quorum_state=self.quorum_state,
            store=None,
            metrics=RaftMetrics(self.registry, node=lambda: None if self.driver is None else self.driver.raft),
            connection_config=raft_connection_config(config),
        )
        self.driver = driver
        driver.add_listener(self._on_raft_event)
        return driver

    async def run(self) -> None:
        config = self.config
        self.prepare()
        replicas, channel = self.replicas, self._channel
        if replicas is None or channel is None:
            raise StartupError("the broker was not prepared")
        own_driver = self._own_driver() if self._shared is None else None
        lifecycle_task: asyncio.Task[None] | None = None
        try:
            if config.kraftwerk_metrics_port and self._shared is None:
                self.http = self._http_endpoint()
                await self.http.start("0.0.0.0", config.kraftwerk_metrics_port)
            replicas.start()
            if self._shared is None:
                self.loop_stall.start()
            if self.groups is not None:
                self.groups.start()
            if own_driver is not None:
                own_driver.start()
            lifecycle_task = asyncio.get_running_loop().create_task(self._lifecycle_loop())
            logger.info("Broker %d of cluster %s starting (HTTP %s)", config.node_id, self.cluster_id,
                        "off" if self.http is None else self.http.port)
            self.started.set()
            # A fault of the metadata raft driver (a failed write of the metadata log, an
            # invariant) stops the broker too: it must not serve from metadata it cannot persist.
            # (A combined node's controller watches the shared driver and halts the broker.)
            if own_driver is None:
                await self._shut_down.wait()
            else:
                try:
                    await own_driver.wait_until_fatal_or(self._shut_down)
                except RaftFatalError as e:
                    raise ControllerFatalError(str(e), logged=True) from None
            if lifecycle_task.done() and lifecycle_task.exception() is not None:
                raise lifecycle_task.exception()  # type: ignore[misc]
            logger.info("Broker %d shutting down", config.node_id)
        finally:
            if lifecycle_task is not None:
                lifecycle_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lifecycle_task
            for listener in self.listeners:
                await listener.close()
            if self.groups is not None:
                await self.groups.close()
            await replicas.close()
            await channel.close()
            if self.http is not None:
                await self.http.close()
            if self._shared is None:
                await self.loop_stall.close()
            if own_driver is not None:
                with contextlib.suppress(Exception):
                    await own_driver.shutdown(timeout_ms=_RAFT_SHUTDOWN_TIMEOUT_MS)
                await own_driver.close()
            logger.info("Broker %d stopped", config.node_id)

    def halt(self) -> None:
        """Stop at once, without a controlled shutdown (the controller beside it died)."""
        self._shut_down.set()

    def _backoff_ms(self, attempts: int) -> int:
        return self._backoff.backoff_ms(attempts, rng=self._rng)

    def _active_controller(self) -> tuple[str, int] | None:
        driver = self.driver
        if driver is None:
            return None
        raft = driver.raft
        leader = raft.leader_id
        if leader is None:
            return None
        for endpoint in raft.voters.endpoints(leader):
            if endpoint.name in self.config.controller_listener_names:
                return endpoint.host, endpoint.port
        return None

    def _features(self) -> Features:
        image = self.loader.image
        finalized: dict[str, int] = dict(image.features.finalized_versions)
        if image.features.metadata_version is not None:
            finalized["metadata.version"] = image.features.metadata_version
        if self.driver is not None:
            finalized["kraft.version"] = self.driver.raft.kraft_version
        return Features(supported=self.supported_features, finalized=finalized, finalized_epoch=image.offset)

    # -- metadata ----------------------------------------------------------------------------------
    def _on_raft_event(self, event: Any) -> None:
        driver = self.driver
        if driver is None:
            return
        if isinstance(event, CommittedBatch):
            if event.last_offset <= self.loader.last_applied_offset:
                return
            # A fence's changes come back as runs inside a RecordParts, which reads as that tuple.
            records = cast("tuple[object, ...]", decode_metadata_records(event.records))
            self.loader.handle_commit([event.with_records(records)], high_watermark=driver.high_watermark)
        elif isinstance(event, SnapshotLoad):
            snapshot_records = [decode_metadata_record(value)[0] for batch in event.batches for value in batch.records]
            self.loader.handle_load_snapshot(
                snapshot_records,
                last_contained_offset=event.snapshot_id.offset - 1,
                last_contained_epoch=event.snapshot_id.epoch,
                last_contained_log_time_ms=event.last_contained_log_timestamp_ms,
            )
        elif isinstance(event, LeaderChange):
            self.loader.handle_leader_change(event.leader)
            self._wake.set()

    def _on_metadata(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self._published = True
        if self.replicas is not None:
            self.replicas.apply_delta(delta, image)
        if self.groups is not None:
            self.groups.on_metadata(image)
        self._wake.set()

    def _publisher_fault(self, what: str, error: BaseException) -> None:
        logger.error("Metadata publisher fault: %s: %s", what, error, exc_info=error)

    # -- lifecycle -------------------------------------------------------------------------------
    async def _lifecycle_loop(self) -> None:
        lifecycle = self.lifecycle
        while True:
            now_ms = wall_clock_ms()
            if lifecycle.state is BrokerState.RECOVERY and not lifecycle.ready_to_unfence and self._published:
                await self._start_serving()
                lifecycle.set_ready_to_unfence(now_ms=now_ms)
            if lifecycle.state is BrokerState.SHUTTING_DOWN:
                self._shut_down.set()
                return
            request = lifecycle.poll(now_ms=now_ms, metadata_offset=max(self.loader.last_applied_offset, 0))
            if request is None:
                due = lifecycle.next_send_ms()
                wait_s = 1.0 if due is None else max(0.0, (due - now_ms) / 1000)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):
                        await self._wake.wait()
                continue
            if isinstance(request, RegistrationRequest):
                await self._register(request)
            else:
                await self._heartbeat(request)

    async def _start_serving(self) -> None:
        for endpoint, listener in zip(
            (e for e in self.config.listeners if e.listener_name not in self.config.controller_listener_names),
            self.listeners, strict=True,
        ):
            await listener.start(endpoint.host or "0.0.0.0", endpoint.port)
            logger.info("Broker %d serving %s on port %d", self.config.node_id, endpoint.listener_name, listener.port)

    async def _register(self, request: RegistrationRequest) -> None:
        config = self.config
        protocols = config.listener_security_protocol_map
        registration = BrokerRegistrationRequest(
            broker_id=BrokerId(config.node_id),
            cluster_id=self.cluster_id,
            incarnation_id=request.incarnation_id,
            listeners=tuple(
                RegistrationListener(
                    name=e.listener_name, host=e.host or "localhost", port=u16(e.port),
                    security_protocol=i16(_SECURITY_PROTOCOL_IDS.get(protocols.get(e.listener_name, "PLAINTEXT"), 0)),
                )
                for e in config.effective_advertised_broker_listeners
            ),
            features=tuple(
                Feature(name=name, min_supported_version=i16(low), max_supported_version=i16(high))
                for name, (low, high) in sorted(self.supported_features.items())
            ),
            rack=config.broker_rack,
            is_migrating_zk_broker=False,
            log_dirs=tuple(sorted(self.log_dirs)),
            previous_broker_epoch=i64(request.previous_broker_epoch),
        )
        now_ms = wall_clock_ms()
        try:
            response = await self.channel_send(registration)
        except ControllerUnavailable as error:
            logger.info("Broker registration failed: %s", error)
            self.lifecycle.failed(now_ms=wall_clock_ms())
            return
        code = ErrorCode(response.error_code)
        if code != ErrorCode.none:
            logger.info("Broker registration refused: %s", code.name)
            self.lifecycle.failed(now_ms=now_ms)
            return
        logger.info("Broker %d registered with broker epoch %d (incarnation %s)", config.node_id,
                    int(response.broker_epoch), request.incarnation_id)
        self.lifecycle.registration_succeeded(broker_epoch=int(response.broker_epoch), now_ms=wall_clock_ms())

    async def _heartbeat(self, request: HeartbeatRequest) -> None:
        heartbeat = BrokerHeartbeatRequest(
            broker_id=BrokerId(self.config.node_id),
            broker_epoch=i64(request.broker_epoch),
            current_metadata_offset=i64(request.current_metadata_offset),
            want_fence=request.want_fence,
            want_shut_down=request.want_shut_down,
            # Directories a storage error took offline: the controller moves their leaderships away.
            offline_log_dirs=() if self.replicas is None else tuple(self.replicas.offline_dir_ids),
        )
        before = self.lifecycle.state
        try:
            response = await self.channel_send(heartbeat)
        except ControllerUnavailable as error:
            logger.debug("Broker heartbeat failed: %s", error)
            self.lifecycle.failed(now_ms=wall_clock_ms())
            return
        code = ErrorCode(response.error_code)
        if code == ErrorCode.stale_broker_epoch:
            logger.warning("The controller no longer knows broker epoch %d: registering again", request.broker_epoch)
            self.lifecycle.stale_epoch(now_ms=wall_clock_ms())
            return
        if code != ErrorCode.none:
            logger.info("Broker heartbeat refused: %s", code.name)
            self.lifecycle.failed(now_ms=wall_clock_ms())
            return
        self.lifecycle.heartbeat_succeeded(
            HeartbeatAnswer(is_caught_up=bool(response.is_caught_up), is_fenced=bool(response.is_fenced),
                            should_shut_down=bool(response.should_shut_down)),
            now_ms=wall_clock_ms(),
        )
        if self.lifecycle.state is not before:
            logger.info("Broker %d is now %s", self.config.node_id, self.lifecycle.state.name)

    async def channel_send(self, request: Any) -> Any:
        channel = self._channel
        if channel is None:
            raise ControllerUnavailable("not started")
        return await channel.send(request, timeout_ms=_REQUEST_TIMEOUT_MS)

    # -- HTTP ----------------------------------------------------------------------------------
    def _http_endpoint(self) -> HttpEndpoint:
        http = HttpEndpoint(registry=self.registry)

        async def healthz(query: dict[str, list[str]], body: bytes) -> HttpResponse:
            return HttpResponse.json(200, {"status": "serving"})

        async def readyz(query: dict[str, list[str]], body: bytes) -> HttpResponse:
            ready = self.lifecycle.state is BrokerState.RUNNING
            reason = "running: caught up and unfenced" if ready else f"broker state {self.lifecycle.state.name}"
            return HttpResponse.json(200 if ready else 503, {"ready": ready, "reason": reason})

        async def status(query: dict[str, list[str]], body: bytes) -> HttpResponse:
            replicas = self.replicas
            partitions = [] if replicas is None else [
                {"topic": p.topic, "partition": p.index, "leader": p.leader_id, "leader_epoch": p.leader_epoch,
                 "isr": sorted(p.leader_state.isr) if p.leader_state else list(p.isr), "log_end_offset": p.log.log_end_offset,
                 "high_watermark": p.high_watermark, "log_start_offset": p.log.log_start_offset,
                 "log_dir": str(p.log_dir), "segments": p.log.segment_base_offsets}
                for p in replicas.partitions.values()
            ]
            return HttpResponse.json(200, {
                "node_id": self.config.node_id, "cluster_id": self.cluster_id, "broker_state": self.lifecycle.state.name,
                "broker_epoch": self.lifecycle.broker_epoch, "metadata_offset": self.loader.last_applied_offset,
                "partitions": partitions,
                # Each log directory with the id in its meta.properties: a directory the broker
                # formatted itself at its start (a JBOD volume added later) has no format Job to
                # report it, and Kafka's DescribeLogDirs carries no id; the operator reads it here.
                "log_dirs": [{"path": str(path), "directory_id": to_kafka_str(directory_id)}
                             for directory_id, path in sorted(self.log_dirs.items(), key=lambda d: str(d[1]))],
                "offline_log_dirs": [] if replicas is None else sorted(str(d) for d in replicas.offline_dirs),
                "offline_replicas": [] if replicas is None else sorted(f"{t}-{i}" for t, i in replicas.offline_partitions),
                "loop_stall_ms_max": round(self.loop_stall.max_stall_ms, 1),
            })

        http.route("GET", "/healthz", healthz)
        http.route("GET", "/readyz", readyz)
        http.route("GET", "/kraftwerk/status", status)
        return http


class _BrokerPublisher:
    """The broker's one metadata publisher: hands each published delta to the node."""

    def __init__(self, node: BrokerNode) -> None:
        self._node = node

    @property
    def name(self) -> str:
        return "BrokerMetadataPublisher"

    def on_metadata_update(self, delta: MetadataDelta, *, image: MetadataImage, manifest: LoaderManifest) -> None:
        self._node._on_metadata(delta, image)

    def on_controller_change(self, leader_and_epoch: LeaderAndEpoch) -> None:
        self._node._wake.set()


class _BrokerMetrics(Collector):
    def __init__(self, node: BrokerNode) -> None:
        self._node = node

    def collect(self) -> Iterator[Metric]:
        node = self._node
        yield GaugeMetricFamily("kafka_server_kafkaserver_brokerstate", "The broker's state (Kafka's BrokerState)",
                                value=int(node.lifecycle.state))
        replicas = node.replicas
        led = [] if replicas is None else [p for p in replicas.partitions.values() if p.leader_state is not None]
        under = under_min = at_min = 0
        for partition in led:
            state = partition.leader_state
            if state is None:
                continue
            isr = len(state.isr)
            min_isr = replicas.topic_config_int(partition.topic, "min.insync.replicas", node.config.min_insync_replicas) \
                if replicas is not None else 1
            under += isr < len(partition.replicas)
            under_min += isr < min_isr
            at_min += isr == min_isr
        prefix = "kafka_server_replicamanager_"
        values = {
            "underreplicatedpartitions": under,
            "underminisrpartitioncount": under_min,
            "atminisrpartitioncount": at_min,
            "offlinereplicacount": 0 if replicas is None else len(replicas.offline_partitions),
            "partitioncount": 0 if replicas is None else len(replicas.partitions),
            "leadercount": len(led),
        }
        for name, value in values.items():
            yield GaugeMetricFamily(prefix + name, f"ReplicaManager {name}", value=value)
        yield GaugeMetricFamily("kafka_log_logmanager_offlinelogdirectorycount", "Log directories offline after a storage error",
                                value=0 if replicas is None else len(replicas.offline_dirs))
        for name, count in (("isrshrinks", 0 if replicas is None else replicas.isr_shrinks),
                            ("isrexpands", 0 if replicas is None else replicas.isr_expands)):
            yield CounterMetricFamily(prefix + name, f"ReplicaManager {name}", value=count)
