"""Broker and controller registrations: Kafka's ClusterControlManager.

The registrations are hard state (in the log, replayed everywhere); the broker epoch a broker
is given is the offset its registration lands at, so a later incarnation always gets a larger
epoch and any request carrying an older one can be refused as stale. Liveness is soft state in
the heartbeat manager, which exists only while this controller is active.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest
from kio.schema.controller_registration.v0.request import ControllerRegistrationRequest
from kio.schema.errors import ErrorCode

from kraft_engine.controller.broker_heartbeat import BrokerHeartbeatManager, BrokerHeartbeatTracker
from kraft_engine.controller.feature_control import METADATA_VERSION_FEATURE
from kraft_engine.controller.results import ControllerApiError, ControllerResult, RecordAndVersion
from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap
from kraft_engine.kafka_uuid import ONE_UUID, ZERO_UUID
from kraft_engine.metadata import BrokerRegistration, ControllerRegistration, VersionRange
from kraft_engine.records import (
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ControllerEndpoint,
    ControllerFeature,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

__all__ = ["BrokerRegistrationReply", "ClusterControlManager"]

# Kafka's MetadataVersion.MINIMUM_KRAFT_VERSION feature level: what a broker that sends no
# metadata.version range is assumed to support.
_MINIMUM_KRAFT_METADATA_VERSION = 1

# BrokerRegistrationChangeRecord's int8 tri-state fields.
_CHANGE_NONE = 0
_CHANGE_TRUE = 1
_CHANGE_FALSE = -1

RecordSink = list[RecordAndVersion]


@dataclass(frozen=True, slots=True)
class BrokerRegistrationReply:
    broker_epoch: int


class ClusterControlManager:
    def __init__(
        self,
        registry: SnapshotRegistry,
        *,
        cluster_id: str,
        session_timeout_ms: int,
        directory_assignment_supported: Callable[[], bool],
    ) -> None:
        self.cluster_id = cluster_id
        self.tracker = BrokerHeartbeatTracker(session_timeout_ms=session_timeout_ms)
        self.heartbeat_manager: BrokerHeartbeatManager | None = None
        self._directory_assignment_supported = directory_assignment_supported
        self._brokers: TimelineHashMap[int, BrokerRegistration] = TimelineHashMap(registry)
        self._registration_offsets: TimelineHashMap[int, int] = TimelineHashMap(registry)
        self._controllers: TimelineHashMap[int, ControllerRegistration] = TimelineHashMap(registry)
        self._directory_to_broker: TimelineHashMap[uuid.UUID, int] = TimelineHashMap(registry)

    # -- activation ------------------------------------------------------------------------

    def activate(self, now_ms: int) -> None:
        """Build fresh soft state. Every registered, unfenced broker gets the activation time as
        its contact time (Kafka's ClusterControlManager.activate): a broker that never heartbeats
        this controller is fenced one session timeout after activation. Without it a broker that
        died shortly before a failover would never be fenced, and a fence lost with the previous
        leader's uncommitted records would never be redone."""
        self.tracker.clear()  # contact times seen while standby belong to no session of ours
        manager = BrokerHeartbeatManager(self.tracker)
        for broker_id, registration in self._brokers.items():
            manager.register(broker_id, fenced=registration.fenced)
            if not registration.fenced:
                self.tracker.update_contact_time(broker_id, registration.epoch, now_ms)
        self.heartbeat_manager = manager

    def deactivate(self) -> None:
        self.heartbeat_manager = None
        self.tracker.clear()

    def heartbeat_manager_or_raise(self) -> BrokerHeartbeatManager:
        if self.heartbeat_manager is None:
            raise RuntimeError("ClusterControlManager is not active.")
        return self.heartbeat_manager

    # -- reads -----------------------------------------------------------------------------

    def broker(self, broker_id: int, epoch: int | None = None) -> BrokerRegistration | None:
        return self._brokers.get(broker_id, epoch)

    def brokers(self, epoch: int | None = None) -> dict[int, BrokerRegistration]:
        return self._brokers.snapshot(epoch)

    def registration_offset(self, broker_id: int) -> int | None:
        return self._registration_offsets.get(broker_id)

    def controllers(self, epoch: int | None = None) -> dict[int, ControllerRegistration]:
        return self._controllers.snapshot(epoch)

    def is_unfenced(self, broker_id: int) -> bool:
        registration = self._brokers.get(broker_id)
        return registration is not None and not registration.fenced

    def is_active_broker(self, broker_id: int) -> bool:
        """May lead partitions: registered, unfenced, not in controlled shutdown."""
        registration = self._brokers.get(broker_id)
        return registration is not None and not registration.fenced and not registration.in_controlled_shutdown

    def fenced_broker_count(self) -> int:
        """Kafka's FencedBrokerCount metric."""
        return sum(1 for r in self._brokers.values() if r.fenced)

    def active_broker_count(self) -> int:
        """Kafka's ActiveBrokerCount metric."""
        return sum(1 for r in self._brokers.values() if not r.fenced)

    def broker_supported(self) -> Iterator[tuple[int, Mapping[str, VersionRange]]]:
        for broker_id, registration in self._brokers.items():
            yield broker_id, {n: VersionRange(r.min_version, r.max_version) for n, r in registration.supported_features}

    def controller_supported(self) -> Iterator[tuple[int, Mapping[str, VersionRange]]]:
        for controller_id, registration in self._controllers.items():
            yield controller_id, {
                n: VersionRange(r.min_version, r.max_version) for n, r in registration.supported_features
            }

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> None:
        registration = self._brokers.get(broker_id)
        if registration is None:
            raise ControllerApiError(
                ErrorCode.stale_broker_epoch, f"No broker with id {broker_id} is registered."
            )
        if registration.epoch != broker_epoch:
            raise ControllerApiError(
                ErrorCode.stale_broker_epoch,
                f"Expected broker epoch {registration.epoch}, but got broker epoch {broker_epoch}",
            )

    # -- BrokerRegistration ----------------------------------------------------------------

    def register_broker(
        self,
        request: BrokerRegistrationRequest,
        *,
        new_broker_epoch: int,
        finalized_features: Mapping[str, int],
        record_version: int,
        now_ms: int,
        add_shutdown_records: Callable[[int, bool, RecordSink], None],
        clean_shutdown_detection: bool = True,
    ) -> ControllerResult[BrokerRegistrationReply]:
        """`add_shutdown_records(broker, clean, records)` cleans up after a previous incarnation;
        `clean` when `clean_shutdown_detection` (BrokerRegistration v3 and later carry the
        previous broker epoch) and the broker presents the epoch of the registration it replaces."""
        heartbeat_manager = self.heartbeat_manager_or_raise()
        if request.cluster_id != self.cluster_id:
            raise ControllerApiError(
                ErrorCode.inconsistent_cluster_id,
                f"Expected cluster ID {self.cluster_id}, but got cluster ID {request.cluster_id}",
            )
        broker_id = int(request.broker_id)
        existing = self._brokers.get(broker_id)
        previous_incarnation = existing.incarnation_id if existing is not None else None
        if (
            existing is not None
            and heartbeat_manager.has_valid_session(broker_id, existing.epoch, now_ms)
            and request.incarnation_id != previous_incarnation
        ):
            raise ControllerApiError(
                ErrorCode.duplicate_broker_registration, "Another broker is registered with that broker id."
            )
        if request.is_migrating_zk_broker:
            raise ControllerApiError(
                ErrorCode.broker_id_not_registered, "Controller does not support registering ZK brokers."
            )
        log_dirs = tuple(d for d in request.log_dirs if d is not None)
        if self._directory_assignment_supported():
            self._validate_log_dirs(broker_id, log_dirs, len(request.log_dirs))

        features: list[BrokerFeature] = []
        unverified = dict(finalized_features)
        for feature in request.features:
            features.append(self._registration_feature(broker_id, finalized_features, feature.name,
                                                       int(feature.min_supported_version),
                                                       int(feature.max_supported_version)))
            unverified.pop(feature.name, None)
        if not any(f.name == METADATA_VERSION_FEATURE for f in request.features):
            # Brokers that send no metadata.version range only support the original one.
            features.append(self._registration_feature(
                broker_id, finalized_features, METADATA_VERSION_FEATURE,
                _MINIMUM_KRAFT_METADATA_VERSION, _MINIMUM_KRAFT_METADATA_VERSION,
            ))
            unverified.pop(METADATA_VERSION_FEATURE, None)
        for name, level in unverified.items():
            if level != 0:
                self._registration_feature(broker_id, finalized_features, name, 0, 0)

        records: RecordSink = []
        new_incarnation = request.incarnation_id != previous_incarnation
        if new_incarnation:
            # A new process: clean up after the old one (it may have died uncleanly).
            clean = (
                clean_shutdown_detection and existing is not None
                and int(request.previous_broker_epoch) == existing.epoch
            )
            add_shutdown_records(broker_id, clean, records)
            epoch, fenced, in_controlled_shutdown = new_broker_epoch, True, False
        else:
            if existing is None:
                raise RuntimeError("an amended registration needs an existing one")
            epoch, fenced, in_controlled_shutdown = existing.epoch, existing.fenced, existing.in_controlled_shutdown
        record = RegisterBrokerRecord(
            broker_id=broker_id,
            is_migrating_zk_broker=False,
            incarnation_id=request.incarnation_id or ZERO_UUID,
            broker_epoch=epoch,
            end_points=tuple(
                BrokerEndpoint(name=x.name, host=x.host, port=int(x.port), security_protocol=int(x.security_protocol))
                for x in request.listeners
            ),
            features=tuple(features),
            rack=request.rack,
            fenced=fenced,
            in_controlled_shutdown=in_controlled_shutdown,
            log_dirs=log_dirs if self._directory_assignment_supported() else (),
        )
        records.append(RecordAndVersion(record, record_version))
        if new_incarnation:
            heartbeat_manager.remove(broker_id)
        heartbeat_manager.register(broker_id, fenced=fenced)
        return ControllerResult(records, BrokerRegistrationReply(epoch), is_atomic=True)

    def _validate_log_dirs(self, broker_id: int, log_dirs: tuple[uuid.UUID, ...], requested: int) -> None:
        if not log_dirs:
            raise ControllerApiError(ErrorCode.invalid_registration, "No directories specified in request")
        if len(log_dirs) != requested or any(d in (ZERO_UUID, ONE_UUID) for d in log_dirs):
            raise ControllerApiError(ErrorCode.invalid_registration, "Reserved directory ID in request")
        if len(set(log_dirs)) != len(log_dirs):
            raise ControllerApiError(ErrorCode.invalid_registration, "Duplicate directory ID in request")
        for directory in log_dirs:
            owner = self._directory_to_broker.get(directory)
            if owner is not None and owner != broker_id:
                raise ControllerApiError(
                    ErrorCode.invalid_registration,
                    f"Broker {owner} is already registered with directory {directory}",
                )

    @staticmethod
    def _registration_feature(
        broker_id: int, finalized: Mapping[str, int], name: str, min_version: int, max_version: int
    ) -> BrokerFeature:
        level = finalized.get(name, 0)
        if not min_version <= level <= max_version:
            raise ControllerApiError(
                ErrorCode.unsupported_version,
                f"Unable to register because the broker does not support finalized version {level} of "
                f"{name}. The broker wants a version between {min_version} and {max_version}, inclusive.",
            )
        return BrokerFeature(name=name, min_supported_version=min_version, max_supported_version=max_version)

    # -- ControllerRegistration ------------------------------------------------------------

    def register_controller(self, request: ControllerRegistrationRequest, *, record_version: int) -> ControllerResult[None]:
        record = RegisterControllerRecord(
            controller_id=int(request.controller_id),
            incarnation_id=request.incarnation_id or ZERO_UUID,
            zk_migration_ready=bool(request.zk_migration_ready),
            end_points=tuple(
                ControllerEndpoint(name=x.name, host=x.host, port=int(x.port), security_protocol=int(x.security_protocol))
                for x in request.listeners
            ),
            features=tuple(
                ControllerFeature(
                    name=f.name,
                    min_supported_version=int(f.min_supported_version),
                    max_supported_version=int(f.max_supported_version),
                )
                for f in request.features
            ),
        )
        return ControllerResult([RecordAndVersion(record, record_version)], None, is_atomic=True)

    # -- replay ----------------------------------------------------------------------------

    def replay_register_broker(self, record: RegisterBrokerRecord, offset: int) -> None:
        broker_id = int(record.broker_id)
        previous = self._brokers.get(broker_id)
        if previous is not None:
            for directory in previous.directories:
                self._directory_to_broker.remove(directory)
        registration = BrokerRegistration.from_record(record)
        self._brokers.put(broker_id, registration)
        self._registration_offsets.put(broker_id, offset)
        for directory in registration.directories:
            self._directory_to_broker.put(directory, broker_id)
        if self.heartbeat_manager is not None:
            self.heartbeat_manager.register(broker_id, fenced=registration.fenced)

    def replay_unregister_broker(self, record: UnregisterBrokerRecord, offset: int) -> None:
        broker_id = int(record.broker_id)
        registration = self._require_epoch(broker_id, int(record.broker_epoch), "UnregisterBrokerRecord", offset)
        for directory in registration.directories:
            self._directory_to_broker.remove(directory)
        self._brokers.remove(broker_id)
        self._registration_offsets.remove(broker_id)
        if self.heartbeat_manager is not None:
            self.heartbeat_manager.remove(broker_id)

    def replay_fence_broker(self, record: FenceBrokerRecord, offset: int) -> None:
        self._replay_change(int(record.id), int(record.epoch), fenced=True, in_controlled_shutdown=None,
                            directories=None, what="FenceBrokerRecord", offset=offset)

    def replay_unfence_broker(self, record: UnfenceBrokerRecord, offset: int) -> None:
        self._replay_change(int(record.id), int(record.epoch), fenced=False, in_controlled_shutdown=None,
                            directories=None, what="UnfenceBrokerRecord", offset=offset)

    def replay_broker_registration_change(self, record: BrokerRegistrationChangeRecord, offset: int) -> None:
        fenced = {_CHANGE_NONE: None, _CHANGE_TRUE: True, _CHANGE_FALSE: False}.get(int(record.fenced), "bad")
        shutdown = {_CHANGE_NONE: None, _CHANGE_TRUE: True}.get(int(record.in_controlled_shutdown), "bad")
        if fenced == "bad" or shutdown == "bad":
            raise RuntimeError(f"Invalid BrokerRegistrationChangeRecord at offset {offset}: {record}")
        self._replay_change(
            int(record.broker_id), int(record.broker_epoch),
            fenced=fenced if isinstance(fenced, bool) else None,
            in_controlled_shutdown=shutdown if isinstance(shutdown, bool) else None,
            directories=tuple(record.log_dirs) if record.log_dirs else None,
            what="BrokerRegistrationChangeRecord", offset=offset,
        )

    def replay_register_controller(self, record: RegisterControllerRecord, offset: int) -> None:
        self._controllers.put(int(record.controller_id), ControllerRegistration.from_record(record))

    def _require_epoch(self, broker_id: int, epoch: int, what: str, offset: int) -> BrokerRegistration:
        registration = self._brokers.get(broker_id)
        if registration is None:
            raise RuntimeError(f"{what} at offset {offset}: broker {broker_id} is not registered")
        if registration.epoch != epoch:
            raise RuntimeError(
                f"{what} at offset {offset}: broker {broker_id} has epoch {registration.epoch}, not {epoch}"
            )
        return registration

    def _replay_change(
        self,
        broker_id: int,
        epoch: int,
        *,
        fenced: bool | None,
        in_controlled_shutdown: bool | None,
        directories: tuple[uuid.UUID, ...] | None,
        what: str,
        offset: int,
    ) -> None:
        registration = self._require_epoch(broker_id, epoch, what, offset)
        changed = registration.clone_with(
            fenced=fenced, in_controlled_shutdown=in_controlled_shutdown, directories=directories
        )
        if directories is not None:
            for directory in registration.directories:
                self._directory_to_broker.remove(directory)
            for directory in changed.directories:
                self._directory_to_broker.put(directory, broker_id)
        self._brokers.put(broker_id, changed)
        if self.heartbeat_manager is not None:
            self.heartbeat_manager.register(broker_id, fenced=changed.fenced)
