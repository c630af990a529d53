"""The quorum controller's parts in a controller process, built from the node's config and raft driver.

`ControllerNode` owns storage, raft and the listener; this module adds what makes the node a
KRaft controller rather than a bare raft replica:

- the `QuorumController` (seeded with the bootstrap records `kraft storage format` wrote into the
  `00000000000000000000-0000000000.checkpoint`), run by a `ControllerService` that listens to the
  raft driver and appends through it;
- the controller APIs on the controller listener (`ControllerApis`), and the features ApiVersions
  advertises (supported by this software; finalized as of the committed image);
- controller registration (Kafka's ControllerRegistrationManager): once metadata.version supports
  it and this controller has caught up, it sends ControllerRegistration to the active controller;
  again only after a failure (capped exponential backoff with jitter) or once its record has
  committed and been applied without the image holding this incarnation (`registration_schedule`).
  Feature upgrades are refused until every voter has registered, so this must run on every
  controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid

from kio.schema.controller_registration.v0.request import ControllerRegistrationRequest, Feature
from kio.schema.controller_registration.v0.request import Listener as RegistrationListener
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, u16
from prometheus_client import CollectorRegistry

from kraft_engine.controller import QuorumController, RecordAndVersion
from kraft_engine.errors import ServerError
from kraft_engine.metadata import VersionRange
from kraft_engine.protocol import ConnectionConfig, Features, KafkaConnection, KafkaProtocolError, Listener
from kraft_engine.raft import (
    BOOTSTRAP_SNAPSHOT_ID,
    KRaftVersionUpgradeError,
    ListenerEvent,
    NotLeaderError,
    RaftLog,
    Role,
)
from kraft_engine.records import decode_metadata_record, feature_versions, metadata_version
from kraft_engine.records.log_batch import parse_batches
from kraft_engine.server.authorization import NodeAuthorizer
from kraft_engine.server.config import KafkaConfig
from kraft_engine.server.controller_apis import ControllerApis
from kraft_engine.server.controller_service import ControllerService, RaftAppends, SnapshotPolicy
from kraft_engine.server.node_security import controller_client_security
from kraft_engine.server.raft_driver import RaftDriver, wall_clock_ms
from kraft_engine.server.registration_schedule import RegistrationSchedule

__all__ = ["ControllerFatalError", "ControllerRuntime", "bootstrap_records"]

logger = logging.getLogger(__name__)

_SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
# How often the registration loop looks at the facts (image, high watermark); it sends only when
# the RegistrationSchedule says so.
_REGISTRATION_POLL_S = 0.1


class ControllerFatalError(ServerError):
    """The node stopped on a fault it must not survive; the process must exit non-zero.

    `logged` says the one line describing it is already in the log (the raft driver's ERROR
    line), so `kraft server start` exits without repeating it."""

    def __init__(self, message: str, *, logged: bool = False) -> None:
        super().__init__(message)
        self.logged = logged


def bootstrap_records(log: RaftLog) -> list[RecordAndVersion]:
    """The bootstrap metadata: the records of the 0-0 checkpoint, or, once retention removed it,
    of the oldest snapshot kept (only its metadata.version matters then: the log is not empty,
    so activation writes no bootstrap records)."""
    snapshots = log.snapshot_ids()
    if not snapshots:
        raise ValueError("The metadata log has no bootstrap snapshot; format the storage with `kraft storage format`.")
    snapshot_id = BOOTSTRAP_SNAPSHOT_ID if BOOTSTRAP_SNAPSHOT_ID in snapshots else snapshots[0]
    data = log.read_snapshot(snapshot_id, 0, log.snapshot_size(snapshot_id) or 0)
    return [RecordAndVersion(*decode_metadata_record(value)) for batch in parse_batches(data) for value in batch.records]


class ControllerRuntime:
    """The controller service, its APIs and its registration, for one controller process."""

    def __init__(self, *, config: KafkaConfig, driver: RaftDriver, registry: CollectorRegistry, cluster_id: str) -> None:
        self._config = config
        self._driver = driver
        # Every feature kafka-storage can finalize, at the levels this software implements.
        self.supported_features: dict[str, tuple[int, int]] = feature_versions.supported_ranges(
            unstable_enabled=config.unstable_feature_versions_enable
        )
        controller = QuorumController(
            node_id=config.node_id,
            raft=RaftAppends(driver),
            quorum_node_ids=sorted(driver.raft.committed_voters.ids),
            bootstrap_records=bootstrap_records(driver.log),
            local_supported_features={
                name: VersionRange(low, high) for name, (low, high) in self.supported_features.items()
            },
            cluster_id=cluster_id,
            rng=random.Random(),
            session_timeout_ms=config.broker_session_timeout_ms,
            kraft_version_upgrader=self._upgrade_kraft_version,
        )
        self.service = ControllerService(
            controller=controller,
            raft=driver,
            registry=registry,
            supported_features=self.supported_features,
            snapshot_policy=SnapshotPolicy(
                max_bytes_between_snapshots=config.metadata_log_max_record_bytes_between_snapshots,
                max_interval_ms=config.metadata_log_max_snapshot_interval_ms,
            ),
            on_fatal=self._on_fatal,
        )
        # Committed records are decoded where they are applied: on the controller's thread.
        driver.add_listener(self.service.handle_raft_event, reads_records_on_loop=False)
        # The voters can change at runtime (KIP-853): the feature check "every controller has
        # registered" and broker-config node lookups must follow them, not the voters at start.
        self._controller = controller
        self._quorum_node_ids = frozenset(driver.raft.committed_voters.ids)
        driver.add_listener(self._follow_voters, reads_records_on_loop=False)
        self.incarnation_id = uuid.uuid4()
        self.registration_schedule = RegistrationSchedule(rng=random.Random())
        self._registration_task: asyncio.Task[None] | None = None
        self._connections: dict[tuple[str, int], KafkaConnection] = {}
        self.fatal_error: BaseException | None = None
        self.fatal = asyncio.Event()
        self.authorizer = NodeAuthorizer(config.originals, image=lambda: self.service.image)

    def register_apis(self, listener: Listener) -> None:
        ControllerApis(
            self.service, refusals=self._driver.refusals,
            heartbeat_timeout_ms=max(1, self._config.broker_heartbeat_interval_ms // 2),
            authorizer=self.authorizer,
        ).register(listener)

    def features(self) -> Features:
        """ApiVersions' features: the committed image's levels plus kraft.version from raft."""
        features = self.service.features()
        finalized = dict(features.finalized)
        finalized["kraft.version"] = self._driver.raft.kraft_version
        return Features(supported=features.supported, finalized=finalized, finalized_epoch=features.finalized_epoch)

    def start(self) -> None:
        self.service.start()
        self._registration_task = asyncio.get_running_loop().create_task(self._register_forever())

    async def close(self) -> None:
        if self._registration_task is not None:
            self._registration_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._registration_task
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()
        await self.service.close()

    def _follow_voters(self, event: ListenerEvent) -> None:
        # Called on the raft loop like every raft listener; the controller lives on its own
        # thread, so the change is queued behind the events raft delivered before it. Only a
        # committed voter set counts: an uncommitted VotersRecord may still be truncated away.
        ids = frozenset(self._driver.raft.committed_voters.ids)
        if ids != self._quorum_node_ids:
            self._quorum_node_ids = ids
            self.service.run_on_controller("setQuorumNodeIds", lambda c: c.set_quorum_node_ids(ids))

    def _upgrade_kraft_version(self, level: int, validate_only: bool) -> str | None:
        """UpdateFeatures of kraft.version: the raft layer writes the KRaftVersionRecord (and the
        first VotersRecord) itself. Runs on the controller thread inside the event; the raft core
        is entered on its own loop, as the leader of the epoch this controller claimed."""
        epoch = self._controller.events.cur_claim_epoch
        try:
            self.service.call_on_raft_loop(
                lambda: self._driver.upgrade_kraft_version(epoch, level, validate_only=validate_only)
            )
        except (NotLeaderError, KRaftVersionUpgradeError) as refusal:
            return str(refusal)
        return None

    def _on_fatal(self, error: BaseException) -> None:
        self.fatal_error = error
        self.fatal.set()

    # -- controller registration -------------------------------------------------------------
    def _registered(self) -> bool | None:
        """None while registration is not possible yet; else whether the image holds us."""
        image = self.service.image
        level = image.features.metadata_version
        if level is None or self.service.loader.catching_up:
            return None
        if not metadata_version.from_feature_level(level).is_controller_registration_supported:
            return None
        registration = image.cluster.controllers.get(self._config.node_id)
        return registration is not None and registration.incarnation_id == self.incarnation_id

    def _request(self) -> ControllerRegistrationRequest:
        protocols = self._config.listener_security_protocol_map
        listeners = tuple(
            RegistrationListener(
                name=e.listener_name, host=e.host or "localhost", port=u16(e.port),
                security_protocol=i16(_SECURITY_PROTOCOL_IDS.get(protocols.get(e.listener_name, "PLAINTEXT"), 0)),
            )
            for e in self._config.effective_advertised_controller_listeners
        )
        return ControllerRegistrationRequest(
            controller_id=i32(self._config.node_id),
            incarnation_id=self.incarnation_id,
            zk_migration_ready=False,
            listeners=listeners,
            features=tuple(
                Feature(name=name, min_supported_version=i16(low), max_supported_version=i16(high))
                for name, (low, high) in sorted(self.supported_features.items())
            ),
        )

    def _active_controller(self) -> tuple[str, int] | None:
        raft = self._driver.raft
        leader = raft.leader_id
        if leader is None:
            return None
        names = self._config.controller_listener_names
        for endpoint in raft.voters.endpoints(leader):
            if endpoint.name in names:
                return endpoint.host, endpoint.port
        return None

    def _high_watermark_seen(self) -> tuple[int, int] | None:
        """(high watermark, when this node learned it): now on the leader, else the last Fetch answer."""
        raft = self._driver.raft
        hwm = raft.high_watermark
        if hwm is None:
            return None
        if raft.role is Role.LEADER:
            return hwm, wall_clock_ms()
        learned_ms = self._driver.last_fetch_success_ms
        return None if learned_ms is None else (hwm, learned_ms)

    async def _register_forever(self) -> None:
        schedule = self.registration_schedule
        while True:
            due = schedule.due(
                now_ms=wall_clock_ms(),
                registered=self._registered(),
                image_offset=self.service.image.offset,
                high_watermark_after_ms=self._high_watermark_seen(),
            )
            address = self._active_controller() if due else None
            if address is None:
                await asyncio.sleep(_REGISTRATION_POLL_S)
                continue
            schedule.sent()
            if await self._send_registration(address):
                schedule.accepted(now_ms=wall_clock_ms())
            else:
                schedule.failed(now_ms=wall_clock_ms())

    async def _send_registration(self, address: tuple[str, int]) -> bool:
        connection = self._connections.get(address)
        if connection is None:
            connection = KafkaConnection(address[0], address[1], config=ConnectionConfig(
                client_id=f"controller-registration-{self._config.node_id}", request_timeout_ms=5000,
                socket_connection_setup_timeout_ms=2000, security=controller_client_security(self._config),
            ))
            self._connections[address] = connection
        try:
            if not connection.connected:
                await connection.connect(timeout_ms=2000)
            response = await connection.send(self._request(), timeout_ms=5000)
        except (KafkaProtocolError, OSError) as e:
            logger.debug("Controller registration to %s failed: %s", address, e)
            return False
        code = ErrorCode(response.error_code)
        if code != ErrorCode.none:
            logger.info("Controller registration refused by %s: %s %s", address, code.name, response.error_message)
            return False
        logger.info("Controller %d registered (incarnation %s)", self._config.node_id, self.incarnation_id)
        return True

