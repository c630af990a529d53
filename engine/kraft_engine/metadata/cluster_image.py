"""The cluster sub-image: registered brokers and controllers, and the delta that changes them.

Fence, unfence and registration-change records must name the broker's *current* epoch; a record
for an unregistered broker or a stale epoch means the log and the image disagree, which replay
refuses loudly (Kafka throws IllegalStateException there too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from kraft_engine.metadata._maps import EMPTY_MAP, applied
from kraft_engine.metadata.errors import MetadataReplayError
from kraft_engine.metadata.image_writer import ImageWriter, ImageWriterOptions
from kraft_engine.metadata.node_registration import BrokerRegistration, ControllerRegistration
from kraft_engine.records.metadata_records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

__all__ = ["ClusterDelta", "ClusterImage"]

# BrokerRegistrationChangeRecord.Fenced: 1 fence, 0 no change, -1 unfence.
_FENCING_CHANGES = {1: True, 0: None, -1: False}
# BrokerRegistrationChangeRecord.InControlledShutdown: 1 enters controlled shutdown, 0 no change.
_SHUTDOWN_CHANGES = {1: True, 0: None}


@dataclass(frozen=True, slots=True)
class ClusterImage:
    """Brokers and controllers by node id. Immutable; the maps are never mutated after construction."""

    EMPTY: ClassVar[ClusterImage]

    brokers: Mapping[int, BrokerRegistration]
    controllers: Mapping[int, ControllerRegistration]

    def is_empty(self) -> bool:
        return not self.brokers and not self.controllers

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def broker_epoch(self, broker_id: int) -> int:
        """The registered epoch of `broker_id`, or -1 when it is not registered."""
        broker = self.brokers.get(broker_id)
        return -1 if broker is None else broker.epoch

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        for broker_id in sorted(self.brokers):
            writer.write(*self.brokers[broker_id].to_record(options=options))
        if self.controllers:
            if not options.controller_registration_supported:
                options.handle_loss("controller registration data")
                return
            for controller_id in sorted(self.controllers):
                writer.write(*self.controllers[controller_id].to_record(options=options))


ClusterImage.EMPTY = ClusterImage(EMPTY_MAP, EMPTY_MAP)


class ClusterDelta:
    """Changes to brokers and controllers; `None` in a change map means "removed"."""

    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self.changed_brokers: dict[int, BrokerRegistration | None] = {}
        self.changed_controllers: dict[int, ControllerRegistration | None] = {}

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self.changed_brokers:
            return self.changed_brokers[broker_id]
        return self.image.brokers.get(broker_id)

    def replay_register_broker(self, record: RegisterBrokerRecord) -> None:
        broker = BrokerRegistration.from_record(record)
        self.changed_brokers[broker.id] = broker

    def replay_unregister_broker(self, record: UnregisterBrokerRecord) -> None:
        self.changed_brokers[int(record.broker_id)] = None

    def replay_register_controller(self, record: RegisterControllerRecord) -> None:
        controller = ControllerRegistration.from_record(record)
        self.changed_controllers[controller.id] = controller

    def _broker_at_epoch(self, broker_id: int, *, epoch: int, action: str) -> BrokerRegistration:
        broker = self.broker(broker_id)
        if broker is None:
            raise MetadataReplayError(f"cannot {action} broker {broker_id}: it is not registered")
        if broker.epoch != epoch:
            raise MetadataReplayError(
                f"cannot {action} broker {broker_id} at epoch {epoch}: its registered epoch is {broker.epoch}"
            )
        return broker

    def replay_fence_broker(self, record: FenceBrokerRecord) -> None:
        broker = self._broker_at_epoch(int(record.id), epoch=int(record.epoch), action="fence")
        self.changed_brokers[broker.id] = broker.clone_with(fenced=True)

    def replay_unfence_broker(self, record: UnfenceBrokerRecord) -> None:
        broker = self._broker_at_epoch(int(record.id), epoch=int(record.epoch), action="unfence")
        self.changed_brokers[broker.id] = broker.clone_with(fenced=False)

    def replay_broker_registration_change(self, record: BrokerRegistrationChangeRecord) -> None:
        broker = self._broker_at_epoch(int(record.broker_id), epoch=int(record.broker_epoch), action="change")
        if record.fenced not in _FENCING_CHANGES:
            raise MetadataReplayError(
                f"BrokerRegistrationChangeRecord for broker {broker.id} has unknown fenced value {record.fenced}"
            )
        if record.in_controlled_shutdown not in _SHUTDOWN_CHANGES:
            raise MetadataReplayError(
                f"BrokerRegistrationChangeRecord for broker {broker.id} has unknown "
                f"inControlledShutdown value {record.in_controlled_shutdown}"
            )
        # An empty LogDirs list means "no change", not "no directories" (Kafka's reading too).
        directories = tuple(record.log_dirs) if record.log_dirs else None
        changed = broker.clone_with(
            fenced=_FENCING_CHANGES[record.fenced],
            in_controlled_shutdown=_SHUTDOWN_CHANGES[record.in_controlled_shutdown],
            directories=directories,
        )
        if changed is not broker:
            self.changed_brokers[broker.id] = changed

    def finish_snapshot(self) -> None:
        for broker_id in self.image.brokers:
            self.changed_brokers.setdefault(broker_id, None)
        for controller_id in self.image.controllers:
            self.changed_controllers.setdefault(controller_id, None)

    def apply(self) -> ClusterImage:
        return ClusterImage(
            brokers=applied(self.image.brokers, self.changed_brokers),
            controllers=applied(self.image.controllers, self.changed_controllers),
        )
