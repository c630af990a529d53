"""One KRaft controller process: storage checks, the raft node, its listener, its HTTP endpoint.

`ControllerNode.open(config)` refuses to start on storage it must not use (no meta.properties in
the metadata log directory, directories that disagree on cluster.id or node.id, a node.id that
differs from the config), opens the metadata log (recovering a torn tail), and reads the
quorum-state. `run()` binds the controller listener and the HTTP endpoint, builds the raft node
(which loads the latest snapshot and replays the log after it), and serves until asked to stop;
stopping is graceful: a leader resigns with EndQuorumEpoch, then everything is flushed and closed.

What the controller listener serves (ApiVersions lists exactly this):
Vote v2, BeginQuorumEpoch v1, EndQuorumEpoch v1, Fetch v18, FetchSnapshot v1, DescribeQuorum v2
and DescribeCluster v1 (endpoint type 2: the voters), plus AddRaftVoter v1, RemoveRaftVoter v0 and
UpdateRaftVoter v0 when the raft core handles them; and the quorum controller's APIs
(`controller_apis.py`).

The raft listener is the quorum controller (`ControllerRuntime`). Only with
`kraftwerk.test.state.machine.enable=true` is it the stand-in `AppendOnlyStore` instead, written
through the HTTP test routes; the raft-level process tests and bench/quorum.py still use it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32
from prometheus_client import CollectorRegistry

from kraft_engine.errors import SnapshotError
from kraft_engine.metadata.metadata_image import MetadataImage
from kraft_engine.protocol import Features, Listener, RequestContext
from kraft_engine.protocol.version_bridging import bridge, bridged_handler
from kraft_engine.raft import (
    KRAFT_VERSION_0,
    KRAFT_VERSION_1,
    Endpoint,
    NotLeaderError,
    Role,
)
from kraft_engine.server.append_only_store import AppendOnlyStore
from kraft_engine.server.authorization import NodeAuthorizer
from kraft_engine.server.broker_apis import CLIENT_API_VERSIONS
from kraft_engine.server.config import KafkaConfig
from kraft_engine.server.controller_runtime import ControllerFatalError, ControllerRuntime
from kraft_engine.server.http_endpoint import HttpEndpoint, HttpResponse
from kraft_engine.server.listener_limits import listener_limits
from kraft_engine.server.loop_stall import LoopStallMonitor
from kraft_engine.server.node_security import node_listener_security, scram_lookup
from kraft_engine.server.raft_apis import register_raft_apis
from kraft_engine.server.raft_driver import (
    AppendResult,
    RaftDriver,
    RaftFatalError,
    open_raft_node,
    raft_connection_config,
    wall_clock_ms,
)
from kraft_engine.server.raft_metrics import RaftMetrics
from kraft_engine.server.startup_checks import (
    LostLogRecovery,
    StartupError,
    check_metadata_log_present,
    check_snapshots,
)
from kraft_engine.storage.meta_properties import MetaPropertiesEnsemble, MetaPropertiesError
from kraft_engine.storage.metadata_log import FileMetadataLog
from kraft_engine.storage.partition_log import LogError, RecoveryReport
from kraft_engine.storage.quorum_state_store import (
    QUORUM_STATE_FILE_NAME,
    FileQuorumStateStore,
    QuorumStateError,
)
from kraft_engine.storage.storage_error import StorageIOError

__all__ = ["TEST_STATE_MACHINE_KEY", "ControllerNode", "StartupError"]

logger = logging.getLogger(__name__)

TEST_STATE_MACHINE_KEY = "kraftwerk.test.state.machine.enable"
METADATA_PARTITION_DIR = "__cluster_metadata-0"
_SHUTDOWN_TIMEOUT_MS = 5000
_APPEND_TIMEOUT_MS = 30000

# (api key, version) the raft core speaks; the listener registers exactly these.
_DESCRIBE_CLUSTER = 60
_DESCRIBE_CLUSTER_VERSIONS = CLIENT_API_VERSIONS[_DESCRIBE_CLUSTER]
_CONTROLLER_ENDPOINT_TYPE = 2


@dataclass(frozen=True, slots=True)
class _Identity:
    cluster_id: str
    directory_id: uuid.UUID | None


def _verify_storage(config: KafkaConfig) -> _Identity:
    metadata_dir = Path(config.metadata_log_dir)
    ensemble = MetaPropertiesEnsemble.load([Path(d) for d in config.log_dirs], metadata_log_dir=metadata_dir)
    if metadata_dir not in ensemble.formatted:
        reason = ensemble.errors.get(metadata_dir)
        if reason is not None:
            raise StartupError(
                f"cannot read {metadata_dir / 'meta.properties'}: {reason}. Restore the file (the other directories "
                "of this node hold the same cluster.id and node.id), or replace the directory as a lost metadata log."
            )
        raise StartupError(
            f"No meta.properties found in {metadata_dir} (have you run `kraft storage format` to format the directory?)"
        )
    try:
        ensemble.verify(
            expected_node_id=config.node_id, require_metadata_log_dir=True, require_at_least_one_valid=True
        )
    except MetaPropertiesError as e:
        dirs = ", ".join(str(d / "meta.properties") for d in sorted(ensemble.formatted))
        raise StartupError(
            f"{e} (in {dirs}). These directories were formatted for another node or cluster: check node.id, "
            "log.dirs and metadata.log.dir in the config, or move the foreign directory away; never edit "
            "meta.properties to make it fit."
        ) from None
    meta = ensemble.formatted[metadata_dir]
    if meta.cluster_id is None:
        raise StartupError(f"meta.properties in {metadata_dir} has no cluster.id")
    return _Identity(cluster_id=meta.cluster_id, directory_id=meta.directory_id)


class ControllerNode:
    """A controller process's parts; `open` checks and loads, `run` serves until `stop`."""

    def __init__(self, config: KafkaConfig, *, identity: _Identity, log: FileMetadataLog,
                 quorum_state: FileQuorumStateStore, recovery_report: RecoveryReport | None = None) -> None:
        self.config = config
        self.recovery_report = recovery_report
        self.identity = identity
        self.log = log
        self.quorum_state = quorum_state
        self.registry = CollectorRegistry()
        self.listener: Listener | None = None
        self.http: HttpEndpoint | None = None
        #: How long raft's loop went without a turn (the controller's work runs on its own thread).
        self.loop_stall = LoopStallMonitor(registry=self.registry)
        self.driver: RaftDriver | None = None
        self.controller: ControllerRuntime | None = None
        self.test_api_enabled = config.originals.get(TEST_STATE_MACHINE_KEY, "false").strip().lower() == "true"
        self._stop = asyncio.Event()
        self.started = asyncio.Event()
        #: Called with the raft driver before it starts (a combined node's broker listens to it).
        self.on_driver: list[Callable[[RaftDriver], None]] = []

    @classmethod
    def open(cls, config: KafkaConfig, *, config_path: str | None = None) -> ControllerNode:
        """Check the storage and open the metadata log; StartupError (one line) when it must not start.

        `config_path` is only printed in recovery steps."""
        if any(e.port == 0 for e in config.controller_listeners):
            # The port is advertised to the quorum (voter set, leader hints): it must be fixed.
            raise StartupError("a controller listener needs a fixed port; port 0 cannot be advertised to the quorum")
        if not config.is_controller:
            raise StartupError("process.roles must contain 'controller': this engine runs KRaft controllers only")
        identity = _verify_storage(config)
        directory = Path(config.metadata_log_dir) / METADATA_PARTITION_DIR
        recovery = LostLogRecovery(
            node_id=config.node_id,
            cluster_id=identity.cluster_id,
            directory_id=identity.directory_id,
            config_path=config_path,
            dynamic_quorum=not config.controller_quorum_voters,
        )
        check_metadata_log_present(metadata_dir=Path(config.metadata_log_dir), partition_dir=directory, recovery=recovery)
        quorum_state = FileQuorumStateStore(directory / QUORUM_STATE_FILE_NAME)
        try:
            quorum_state.read()
        except QuorumStateError as e:
            raise StartupError(
                f"{e}. This file holds the node's votes: restore it from a backup, or replace the directory "
                f"(deleting the file would let the node vote twice in one epoch). {recovery.steps()}"
            ) from None
        except OSError as e:
            raise StartupError(f"cannot read {quorum_state.path}: {e.strerror or e}") from None
        try:
            log, report = FileMetadataLog.open(
                directory,
                segment_bytes=config.metadata_log_segment_bytes,
                delete_delay_ms=config.internal_metadata_delete_delay_millis,
                check=lambda log: check_snapshots(log, recovery=recovery),
            )
        except StorageIOError as e:
            raise StartupError(f"{e} (while recovering the metadata log; free space or fix the device, then start "
                               "the node again)") from None
        except (LogError, SnapshotError, OSError) as e:
            raise StartupError(f"cannot open the metadata log in {directory}: {e}") from None
        for line in report.describe():
            logger.warning("Metadata log recovery: %s", line)
        return cls(config, identity=identity, log=log, quorum_state=quorum_state, recovery_report=report)

    def stop(self) -> None:
        """Ask `run` to shut down gracefully (signal handlers call this)."""
        self._stop.set()

    # -- running -------------------------------------------------------------------------------
    async def run(self) -> None:
        config = self.config
        controller_listener = config.controller_listeners[0]
        listener_name = controller_listener.listener_name
        security = node_listener_security(config, listener_name, scram_credentials=scram_lookup(
            lambda: MetadataImage.EMPTY if self.controller is None else self.controller.service.image))
        listener = Listener(
            listener_name, features_provider=self._features, registry=self.registry, security=security,
            **listener_limits(config),
        )
        self.listener = listener
        store = (
            AppendOnlyStore(snapshot_interval_bytes=config.metadata_log_max_record_bytes_between_snapshots)
            if self.test_api_enabled
            else None
        )
        metrics = RaftMetrics(self.registry, node=lambda: None if self.driver is None else self.driver.raft)
        if self.recovery_report is not None:
            report = self.recovery_report
            drops = ([report.truncated] if report.truncated else []) + list(report.deleted_segments)
            metrics.recovery_truncated_bytes.set(sum(d.bytes_dropped for d in drops))
            metrics.recovery_dropped_batches.set(len(report.dropped_intact_batches))
        try:
            advertised = [
                Endpoint(e.listener_name, e.host or "localhost", e.port)
                for e in config.effective_advertised_controller_listeners
            ]
            try:
                raft = open_raft_node(
                    config,
                    directory_id=self.identity.directory_id,
                    cluster_id=self.identity.cluster_id,
                    log=self.log,
                    quorum_state=self.quorum_state,
                    local_endpoints=tuple(advertised),
                )
            except (SnapshotError, StorageIOError) as e:
                raise StartupError(f"cannot load the metadata log in {self.log.directory}: {e}") from None
            driver = RaftDriver(
                raft=raft,
                log=self.log,
                quorum_state=self.quorum_state,
                store=store,
                metrics=metrics,
                connection_config=raft_connection_config(config),
            )
            self.driver = driver
            for attach in self.on_driver:
                attach(driver)  # before the first poll, so a combined node's broker sees every event
            self._register_apis(listener, driver)
            if store is None:
                self.controller = ControllerRuntime(
                    config=config, driver=driver, registry=self.registry, cluster_id=self.identity.cluster_id
                )
                self.controller.register_apis(listener)
                self.controller.start()
            host = controller_listener.host or "0.0.0.0"
            try:
                await listener.start(host, controller_listener.port)
                if config.kraftwerk_metrics_port or self.test_api_enabled:
                    self.http = self._http_endpoint(driver)
                    await self.http.start(host, config.kraftwerk_metrics_port)
            except OSError as e:
                # A taken port is a refusal to start like any other: one line, no traceback.
                raise StartupError(f"cannot listen on {host}: {e}; free the port or change "
                                   "listeners / kraftwerk.metrics.port") from None
            driver.start()
            if driver.fatal_error is not None:
                raise ControllerFatalError(str(driver.fatal_error), logged=True)
            self.loop_stall.start()
            logger.info(
                "Controller %d of cluster %s serving %s on port %d (HTTP %s)",
                config.node_id, self.identity.cluster_id, listener_name, listener.port,
                "off" if self.http is None else self.http.port,
            )
            self.started.set()
            await self._wait_for_stop(driver)
            logger.info("Shutting down controller %d", config.node_id)
            if not await driver.shutdown(timeout_ms=_SHUTDOWN_TIMEOUT_MS):
                logger.warning("Raft shutdown did not complete within %d ms", _SHUTDOWN_TIMEOUT_MS)
        finally:
            await self.loop_stall.close()
            if self.http is not None:
                await self.http.close()
            await listener.close()
            if self.controller is not None:
                await self.controller.close()
            if self.driver is not None:
                await self.driver.close()
            else:
                self.log.close()
            logger.info("Controller %d stopped", config.node_id)

    async def _wait_for_stop(self, driver: RaftDriver) -> None:
        # A node that hit a fatal fault must not keep serving: the process exits non-zero.
        try:
            await driver.wait_until_fatal_or(self._stop, *([] if self.controller is None else [self.controller.fatal]))
        except RaftFatalError as e:
            # The driver logged the one ERROR line and stopped serving already.
            raise ControllerFatalError(str(e), logged=True) from None
        if self.controller is not None and self.controller.fatal_error is not None:
            driver.halt()
            raise ControllerFatalError(f"the quorum controller stopped: {self.controller.fatal_error}")

    def _features(self) -> Features:
        if self.controller is not None:
            return self.controller.features()
        driver = self.driver
        finalized = {} if driver is None else {"kraft.version": driver.raft.kraft_version}
        return Features(supported={"kraft.version": (KRAFT_VERSION_0, KRAFT_VERSION_1)}, finalized=finalized)

    def _register_apis(self, listener: Listener, driver: RaftDriver) -> None:
        async def forward(request: Any, ctx: RequestContext) -> Any:
            response = await driver.handle_request(request)
            driver.refusals.inbound(request, response, peer_address=ctx.peer)
            return response

        # Exactly the requests the raft core answers, at the ranges Kafka's nodes and tools send
        # (bridged to the version the core speaks): ApiVersions never advertises an api the node
        # would drop.
        # Authorized against the quorum controller's committed ACLs (none on a raft-only node).
        authorizer = NodeAuthorizer(self.config.originals, image=lambda: (
            MetadataImage.EMPTY if self.controller is None else self.controller.service.image))
        register_raft_apis(listener, served_requests=driver.raft.served_requests, handler=forward, authorizer=authorizer)
        # DescribeCluster at the broker's range (0-2, Kafka's): the handler builds v2, v0-v1 are
        # bridged (a v0 request has no endpoint type, so it asks for brokers and is refused as
        # Kafka's controller refuses it).
        low, high = _DESCRIBE_CLUSTER_VERSIONS
        def without_fenced_brokers(request: Any, served: type[Any]) -> Any:
            # v0-v1 have no include_fenced_brokers: false, as Kafka reads them.
            return dataclasses.replace(bridge(request, served), include_fenced_brokers=False)

        listener.register(_DESCRIBE_CLUSTER, min_version=low, max_version=high, handler=bridged_handler(
            _DESCRIBE_CLUSTER, served_version=high, versions=(low, high), handler=self._describe_cluster,
            upgrades=dict.fromkeys(range(low, high), without_fenced_brokers),
        ))

    async def _describe_cluster(self, request: Any, ctx: RequestContext) -> Any:
        """DescribeCluster on a controller (KIP-919): the cluster id, the leader, the voters."""
        cls = ctx.response_class
        module = sys.modules[cls.__module__]
        driver = self.driver
        if int(request.endpoint_type) != _CONTROLLER_ENDPOINT_TYPE or driver is None:
            return cls(
                throttle_time=_zero_ms(),
                error_code=ErrorCode.unsupported_endpoint_type,
                error_message="The controller only describes controllers (endpoint type 2).",
                endpoint_type=request.endpoint_type,
                cluster_id=self.identity.cluster_id,
                brokers=(),
            )
        listener_name = self.config.controller_listener_names[0]
        brokers = []
        for voter in driver.raft.voters:
            for endpoint in voter.endpoints:
                if endpoint.name == listener_name:
                    brokers.append(
                        module.DescribeClusterBroker(
                            broker_id=i32(voter.key.id), host=endpoint.host, port=i32(endpoint.port), is_fenced=False,
                        )
                    )
                    break
        leader = driver.raft.leader_id
        return cls(
            throttle_time=_zero_ms(),
            error_code=ErrorCode.none,
            endpoint_type=i8(_CONTROLLER_ENDPOINT_TYPE),
            cluster_id=self.identity.cluster_id,
            controller_id=i32(-1 if leader is None else leader),
            brokers=tuple(brokers),
        )

    # -- HTTP ----------------------------------------------------------------------------------
    def _http_endpoint(self, driver: RaftDriver) -> HttpEndpoint:
        http = HttpEndpoint(registry=self.registry)
        raft = driver.raft
        fetch_timeout_ms = self.config.controller_quorum_fetch_timeout_ms

        async def healthz(query: dict[str, list[str]], body: bytes) -> HttpResponse:
            return HttpResponse.json(200, {"status": "serving"})

        async def readyz(query: dict[str, list[str]], body: bytes) -> HttpResponse:
            ready, reason = _readiness(driver, fetch_timeout_ms=fetch_timeout_ms)
            return HttpResponse.json(200 if ready else 503, {"ready": ready, "reason": reason})

        async def status(query: dict[str, list[str]], body: bytes) -> HttpResponse:
            return HttpResponse.json(
                200,
                {
                    "node_id": raft.node_id,
                    "cluster_id": raft.cluster_id,
                    "role": raft.role.value,
                    "epoch": raft.epoch,
                    "leader_id": raft.leader_id,
                    "voted_id": None if raft.voted_key is None else raft.voted_key.id,
                    "high_watermark": raft.high_watermark,
                    "log_start_offset": raft.log.log_start_offset,
                    "log_end_offset": raft.log_end_offset,
                    "is_voter": raft.is_voter,
                    "voters": sorted(raft.voters.ids),
                    "kraft_version": raft.kraft_version,
                    "snapshots": [[s.offset, s.epoch] for s in raft.log.snapshot_ids()],
                    "applied_offset": self._applied_offset(driver),
                    "loop_stall_ms_max": round(self.loop_stall.max_stall_ms, 1),
                    "last_large_write": self._last_large_write(),
                },
            )

        http.route("GET", "/healthz", healthz)
        http.route("GET", "/readyz", readyz)
        http.route("GET", "/kraftwerk/status", status)
        if self.test_api_enabled:
            http.route("POST", "/kraftwerk/test/append", self._test_append)
            http.route("GET", "/kraftwerk/test/entries", self._test_entries)
        return http

    def _last_large_write(self) -> dict[str, Any] | None:
        """The controller's latest write of at least 10,000 records, step by step (wall-clock ms)."""
        write = None if self.controller is None else self.controller.service.last_large_write
        return None if write is None else write.as_dict()

    def _applied_offset(self, driver: RaftDriver) -> int:
        """The next offset the state machine has not applied (committed image offset + 1)."""
        if driver.store is not None:
            return driver.store.next_offset
        return 0 if self.controller is None else self.controller.service.image.offset + 1

    def _test_append(self, query: dict[str, list[str]], body: bytes) -> asyncio.Future[HttpResponse]:
        """The test store's append, answered after commit. A plain function returning a future,
        answered from the commit's callback: no task per request on the leader's loop (see
        `RaftDriver.append_committed`)."""
        answer: asyncio.Future[HttpResponse] = asyncio.get_running_loop().create_future()
        driver = self.driver
        if driver is None:
            answer.set_result(HttpResponse.json(503, {"error": "starting"}))
            return answer
        try:
            document = json.loads(body)
            values = [str(v).encode() for v in document["values"]]
        except (ValueError, KeyError, TypeError) as e:
            answer.set_result(HttpResponse.json(400, {"error": f'expected {{"values": [...]}}: {e}'}))
            return answer
        if not values:
            answer.set_result(HttpResponse.json(400, {"error": "no values"}))
            return answer
        try:
            committed = driver.append_committed(values, timeout_ms=_APPEND_TIMEOUT_MS)
        except NotLeaderError as e:
            answer.set_result(_not_leader(e))
            return answer
        committed.add_done_callback(lambda done: _answer_append(done, answer))
        return answer

    async def _test_entries(self, query: dict[str, list[str]], body: bytes) -> HttpResponse:
        driver = self.driver
        if driver is None:
            return HttpResponse.json(503, {"error": "starting"})
        try:
            start = int(query.get("from", ["0"])[0])
            limit = int(query["limit"][0]) if "limit" in query else None
        except ValueError:
            return HttpResponse.json(400, {"error": "from and limit must be integers"})
        store = driver.store
        if store is None:
            return HttpResponse.json(404, {"error": "the test state machine is not enabled"})
        entries = store.entries(from_offset=start, limit=limit)
        return HttpResponse.json(
            200,
            {
                "next_offset": store.next_offset,
                "entries": [[offset, value.decode("utf-8", "replace")] for offset, value in entries],
            },
        )


def _not_leader(error: NotLeaderError) -> HttpResponse:
    return HttpResponse.json(421, {"error": "NOT_LEADER", "message": str(error), "leader_id": error.leader_id,
                                   "epoch": error.epoch})


def _answer_append(committed: asyncio.Future[AppendResult], answer: asyncio.Future[HttpResponse]) -> None:
    if answer.done():  # the client went away (its connection's answer was cancelled)
        if not committed.cancelled():
            committed.exception()  # retrieved: nobody else will
        return
    if committed.cancelled():
        answer.cancel()
        return
    error = committed.exception()
    if isinstance(error, NotLeaderError):
        answer.set_result(_not_leader(error))
    elif isinstance(error, TimeoutError):
        answer.set_result(HttpResponse.json(504, {"error": "TIMEOUT", "message": str(error)}))
    elif error is not None:
        answer.set_exception(error)
    else:
        result = committed.result()
        # What json.dumps({"offset": ..., "epoch": ...}) writes, without building a dict per commit.
        answer.set_result(HttpResponse(200, b'{"offset": %d, "epoch": %d}\n' % (result.offset, result.epoch)))


def _readiness(driver: RaftDriver, *, fetch_timeout_ms: int) -> tuple[bool, str]:
    raft = driver.raft
    if raft.leader_id is None:
        return False, "no leader known"
    if raft.role is Role.LEADER:
        return True, "leader"
    last = driver.last_fetch_success_ms
    if last is None or wall_clock_ms() - last > fetch_timeout_ms:
        return False, "no successful fetch from the leader within controller.quorum.fetch.timeout.ms"
    hwm = raft.high_watermark
    if hwm is None or raft.log_end_offset < hwm:
        return False, f"log end {raft.log_end_offset} is behind the high watermark {hwm}"
    return True, "caught up"


def _zero_ms() -> timedelta:
    return timedelta(0)

