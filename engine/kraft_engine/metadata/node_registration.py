"""Broker and controller registrations as the image holds them.

A `BrokerRegistration` is the replayed form of a `RegisterBrokerRecord`, later changed only by
fence/unfence/registration-change records, which never mutate it but clone it (`clone_with`), so
images that share a registration never see each other's changes. Listeners, features and log
directories are kept in sorted order: two nodes replaying the same record must hold equal values
and write them back as identical bytes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace

from kraft_engine.metadata.image_writer import ImageWriterOptions
from kraft_engine.records.metadata_records import (
    BrokerEndpoint,
    BrokerFeature,
    ControllerEndpoint,
    ControllerFeature,
    RegisterBrokerRecord,
    RegisterControllerRecord,
)

__all__ = ["BrokerRegistration", "ControllerRegistration", "Endpoint", "VersionRange"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """A named listener: where a node accepts connections and with which security protocol id."""

    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class VersionRange:
    """The inclusive range of levels a node supports for one feature."""

    min_version: int
    max_version: int

    def contains(self, level: int) -> bool:
        return self.min_version <= level <= self.max_version


def _listeners(endpoints: Iterable[BrokerEndpoint | ControllerEndpoint]) -> tuple[Endpoint, ...]:
    found = {
        e.name: Endpoint(name=e.name, host=e.host, port=int(e.port), security_protocol=int(e.security_protocol))
        for e in endpoints
    }
    return tuple(found[name] for name in sorted(found))


def _features(features: Iterable[BrokerFeature | ControllerFeature]) -> tuple[tuple[str, VersionRange], ...]:
    found = {
        f.name: VersionRange(int(f.min_supported_version), int(f.max_supported_version)) for f in features
    }
    return tuple((name, found[name]) for name in sorted(found))


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistration:
    """One registered broker incarnation. `epoch` is the lease handle the controller assigned."""

    id: int
    epoch: int
    incarnation_id: uuid.UUID
    listeners: tuple[Endpoint, ...]
    supported_features: tuple[tuple[str, VersionRange], ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    is_migrating_zk_broker: bool = False
    directories: tuple[uuid.UUID, ...] = ()

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(
            id=int(record.broker_id),
            epoch=int(record.broker_epoch),
            incarnation_id=record.incarnation_id,
            listeners=_listeners(record.end_points),
            supported_features=_features(record.features),
            rack=record.rack,
            fenced=bool(record.fenced),
            in_controlled_shutdown=bool(record.in_controlled_shutdown),
            is_migrating_zk_broker=bool(record.is_migrating_zk_broker),
            directories=tuple(sorted(record.log_dirs)),
        )

    def listener(self, name: str) -> Endpoint | None:
        for endpoint in self.listeners:
            if endpoint.name == name:
                return endpoint
        return None

    def supported_feature(self, name: str) -> VersionRange | None:
        for feature, supported in self.supported_features:
            if feature == name:
                return supported
        return None

    def has_online_dir(self, directory: uuid.UUID) -> bool:
        return directory in self.directories

    def clone_with(
        self,
        *,
        fenced: bool | None = None,
        in_controlled_shutdown: bool | None = None,
        directories: tuple[uuid.UUID, ...] | None = None,
    ) -> BrokerRegistration:
        """This registration with the given fields changed; `self` when nothing actually changes."""
        changes: dict[str, object] = {}
        if fenced is not None and fenced != self.fenced:
            changes["fenced"] = fenced
        if in_controlled_shutdown is not None and in_controlled_shutdown != self.in_controlled_shutdown:
            changes["in_controlled_shutdown"] = in_controlled_shutdown
        if directories is not None:
            ordered = tuple(sorted(directories))
            if ordered != self.directories:
                changes["directories"] = ordered
        return replace(self, **changes) if changes else self  # type: ignore[arg-type]

    def to_record(self, *, options: ImageWriterOptions) -> tuple[RegisterBrokerRecord, int]:
        in_controlled_shutdown = self.in_controlled_shutdown
        if in_controlled_shutdown and not options.in_controlled_shutdown_supported:
            options.handle_loss("the inControlledShutdown state of one or more brokers")
            in_controlled_shutdown = False
        is_migrating = self.is_migrating_zk_broker
        if is_migrating and not options.migration_supported:
            options.handle_loss("the isMigratingZkBroker state of one or more brokers")
            is_migrating = False
        directories = self.directories
        if directories and not options.directory_assignment_supported:
            options.handle_loss("the online log directories of one or more brokers")
            directories = ()
        record = RegisterBrokerRecord(
            broker_id=self.id,
            is_migrating_zk_broker=is_migrating,
            incarnation_id=self.incarnation_id,
            broker_epoch=self.epoch,
            end_points=tuple(
                BrokerEndpoint(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                for e in self.listeners
            ),
            features=tuple(
                BrokerFeature(name=name, min_supported_version=r.min_version, max_supported_version=r.max_version)
                for name, r in self.supported_features
            ),
            rack=self.rack,
            fenced=self.fenced,
            in_controlled_shutdown=in_controlled_shutdown,
            log_dirs=directories,
        )
        return record, options.register_broker_record_version


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerRegistration:
    """One registered controller (KIP-919): its listeners and the feature ranges it supports."""

    id: int
    incarnation_id: uuid.UUID
    zk_migration_ready: bool
    listeners: tuple[Endpoint, ...]
    supported_features: tuple[tuple[str, VersionRange], ...]

    @classmethod
    def from_record(cls, record: RegisterControllerRecord) -> ControllerRegistration:
        return cls(
            id=int(record.controller_id),
            incarnation_id=record.incarnation_id,
            zk_migration_ready=bool(record.zk_migration_ready),
            listeners=_listeners(record.end_points),
            supported_features=_features(record.features),
        )

    def supported_feature(self, name: str) -> VersionRange | None:
        for feature, supported in self.supported_features:
            if feature == name:
                return supported
        return None

    def to_record(self, *, options: ImageWriterOptions) -> tuple[RegisterControllerRecord, int]:
        record = RegisterControllerRecord(
            controller_id=self.id,
            incarnation_id=self.incarnation_id,
            zk_migration_ready=self.zk_migration_ready,
            end_points=tuple(
                ControllerEndpoint(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                for e in self.listeners
            ),
            features=tuple(
                ControllerFeature(
                    name=name, min_supported_version=r.min_version, max_supported_version=r.max_version
                )
                for name, r in self.supported_features
            ),
        )
        return record, options.register_controller_record_version
