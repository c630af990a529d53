"""Finalized feature levels and metadata.version (KIP-584): Kafka's FeatureControlManager.

metadata.version decides which records and record versions the whole controller may write, so
changing it, or any other finalized feature, is refused unless every node that will have to
understand the new level says it does: this controller, every registered broker, and every
controller of the quorum (which must have registered first). A downgrade of metadata.version
across a level that changed the metadata format could lose metadata, so it is refused outright.
kraft.version is the raft layer's own feature: its upgrade is handed to the raft layer through
a hook rather than written as a FeatureLevelRecord.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping

from kio.schema.errors import ErrorCode

from kraft_engine.controller.results import ApiError, ControllerResult, RecordAndVersion, check_user_op_size
from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap, TimelineValue
from kraft_engine.metadata import VersionRange
from kraft_engine.records import FeatureLevelRecord, MetadataVersion
from kraft_engine.records.feature_versions import ELIGIBLE_LEADER_REPLICAS_VERSION
from kraft_engine.records.metadata_version import is_metadata_changed

__all__ = [
    "KRAFT_VERSION_FEATURE",
    "METADATA_VERSION_FEATURE",
    "FeatureControlManager",
    "UpgradeType",
]

METADATA_VERSION_FEATURE = "metadata.version"
KRAFT_VERSION_FEATURE = "kraft.version"


class UpgradeType(enum.IntEnum):
    """UpdateFeatures' upgrade_type codes."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3

    @classmethod
    def of(cls, code: int) -> UpgradeType:
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


def _range_text(supported: VersionRange) -> str:
    """Kafka's VersionRange.toString."""
    if supported.min_version == supported.max_version:
        return str(supported.min_version)
    if supported.max_version == 0x7FFF:
        return f"{supported.min_version}+"
    return f"{supported.min_version}-{supported.max_version}"


DISABLED = VersionRange(0, 0)

KRaftVersionUpgrader = Callable[[int, bool], str | None]
"""`(new_level, validate_only) -> error message or None`: asks the raft layer to change
kraft.version (it writes the KRaftVersionRecord itself)."""


def _reason_not_supported(level: int, what: str, supported: VersionRange) -> str | None:
    if supported.contains(level):
        return None
    if supported.max_version == 0:
        return f"{what} does not support this feature."
    return f"{what} only supports versions {_range_text(supported)}"


def _invalid_update_version(feature: str, level: int, message: str) -> ApiError:
    return ApiError(ErrorCode.invalid_update_version, f"Invalid update version {level} for feature {feature}. {message}")


def _invalid_metadata_version(level: int, message: str) -> ApiError:
    return ApiError(ErrorCode.invalid_update_version, f"Invalid metadata.version {level}. {message}")


class FeatureControlManager:
    """`local_supported` is what this controller's software supports (metadata.version
    included); `quorum_node_ids` the controllers that must have registered before any
    feature may change. Registered nodes' support comes from the cluster manager through
    `broker_supported` / `controller_supported`."""

    def __init__(
        self,
        registry: SnapshotRegistry,
        *,
        node_id: int,
        local_supported: Mapping[str, VersionRange],
        quorum_node_ids: Iterable[int],
        broker_supported: Callable[[], Iterable[tuple[int, Mapping[str, VersionRange]]]],
        controller_supported: Callable[[], Iterable[tuple[int, Mapping[str, VersionRange]]]],
        kraft_version_upgrader: KRaftVersionUpgrader | None = None,
    ) -> None:
        self._node_id = node_id
        self._local_supported = dict(local_supported)
        self._quorum_node_ids = sorted(set(quorum_node_ids))
        self._broker_supported = broker_supported
        self._controller_supported = controller_supported
        self._kraft_version_upgrader = kraft_version_upgrader
        self._finalized: TimelineHashMap[str, int] = TimelineHashMap(registry)
        self._metadata_version: TimelineValue[int | None] = TimelineValue(registry, None)

    def set_quorum_node_ids(self, node_ids: Iterable[int]) -> None:
        """The voter set changed (KIP-853): later checks demand the new members' registrations."""
        self._quorum_node_ids = sorted(set(node_ids))

    # -- reads -----------------------------------------------------------------------------

    def metadata_version(self, epoch: int | None = None) -> int | None:
        """The finalized metadata.version level, or None before the bootstrap records."""
        return self._metadata_version.get(epoch)

    def metadata_version_or_raise(self) -> MetadataVersion:
        level = self._metadata_version.get()
        if level is None:
            raise RuntimeError("metadata.version has not been set: the bootstrap records were never replayed")
        return MetadataVersion.from_feature_level(level)

    def finalized_features(self, epoch: int | None = None) -> dict[str, int]:
        """Every finalized feature, metadata.version included."""
        features = dict(self._finalized.items(epoch))
        level = self._metadata_version.get(epoch)
        if level is not None:
            features[METADATA_VERSION_FEATURE] = level
        return features

    def is_elr_enabled(self) -> bool:
        """eligible.leader.replicas.version >= 1 finalized: partition changes keep KIP-966's ELR."""
        return (self._finalized.get(ELIGIBLE_LEADER_REPLICAS_VERSION) or 0) >= 1

    def local_supported(self, feature: str) -> VersionRange:
        return self._local_supported.get(feature, DISABLED)

    def local_supported_features(self) -> dict[str, VersionRange]:
        return dict(self._local_supported)

    # -- UpdateFeatures --------------------------------------------------------------------

    def update_features(
        self,
        updates: Mapping[str, int],
        *,
        upgrade_types: Mapping[str, UpgradeType],
        validate_only: bool,
    ) -> ControllerResult[ApiError]:
        """Validate every update; write them all as one atomic batch, or none of them."""
        records: list[RecordAndVersion] = []
        kraft_version_update: int | None = None
        for feature, level in updates.items():
            upgrade_type = upgrade_types.get(feature, UpgradeType.UPGRADE)
            error = self._update_feature(feature, level, upgrade_type, records)
            if error is not None:
                return ControllerResult((), error)
            if feature == KRAFT_VERSION_FEATURE:
                kraft_version_update = level
        check_user_op_size(records)
        if kraft_version_update is not None:
            message = self._upgrade_kraft_version(kraft_version_update, validate_only=validate_only)
            if message is not None:
                return ControllerResult((), _invalid_update_version(KRAFT_VERSION_FEATURE, kraft_version_update, message))
        if validate_only:
            return ControllerResult((), ApiError.NONE)
        return ControllerResult(records, ApiError.NONE, is_atomic=True)

    def _upgrade_kraft_version(self, level: int, *, validate_only: bool) -> str | None:
        if self._kraft_version_upgrader is None:
            return "This controller cannot change kraft.version."
        return self._kraft_version_upgrader(level, validate_only)

    def _current_level(self, feature: str) -> int:
        if feature == METADATA_VERSION_FEATURE:
            return self.metadata_version_or_raise().feature_level
        return self._finalized.get(feature) or 0

    def _update_feature(self, feature: str, level: int, upgrade_type: UpgradeType, records: list[RecordAndVersion]) -> ApiError | None:
        if upgrade_type is UpgradeType.UNKNOWN:
            return _invalid_update_version(feature, level, "The controller does not support the given upgrade type.")
        current = self._current_level(feature)
        if level < 0:
            return _invalid_update_version(feature, level, "A feature version cannot be less than 0.")
        reason = self._reason_not_supported(feature, level)
        if reason is not None:
            return _invalid_update_version(feature, level, reason)
        if level < current:
            if upgrade_type is UpgradeType.UPGRADE:
                return _invalid_update_version(
                    feature,
                    level,
                    "Can't downgrade the version of this feature without setting the upgrade type to "
                    "either safe or unsafe downgrade.",
                )
        elif level > current and upgrade_type is not UpgradeType.UPGRADE:
            return _invalid_update_version(feature, level, "Can't downgrade to a newer version.")
        if feature == METADATA_VERSION_FEATURE:
            return self._update_metadata_version(level, current, upgrade_type, records)
        if feature != KRAFT_VERSION_FEATURE:
            records.append(RecordAndVersion(FeatureLevelRecord(name=feature, feature_level=level), 0))
        return None

    def _update_metadata_version(
        self, level: int, current: int, upgrade_type: UpgradeType, records: list[RecordAndVersion]
    ) -> ApiError | None:
        try:
            new_version = MetadataVersion.from_feature_level(level)
        except ValueError:
            return _invalid_metadata_version(level, "Unknown metadata.version.")
        if new_version < MetadataVersion.MINIMUM:
            return _invalid_metadata_version(level, f"Unable to set a metadata.version less than {MetadataVersion.MINIMUM}")
        current_version = MetadataVersion.from_feature_level(current)
        if new_version < current_version and is_metadata_changed(current_version, new_version):
            if upgrade_type is UpgradeType.UNSAFE_DOWNGRADE:
                return _invalid_metadata_version(level, "Unsafe metadata downgrade is not supported in this version.")
            return _invalid_metadata_version(
                level, "Refusing to perform the requested downgrade because it might delete metadata information."
            )
        records.append(RecordAndVersion(FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=level), 0))
        return None

    def _reason_not_supported(self, feature: str, level: int) -> str | None:
        reason = _reason_not_supported(level, f"Local controller {self._node_id}", self.local_supported(feature))
        if reason is not None:
            return reason
        for broker_id, supported in self._broker_supported():
            reason = _reason_not_supported(level, f"Broker {broker_id}", supported.get(feature, DISABLED))
            if reason is not None:
                return reason
        if not self.metadata_version_or_raise().is_controller_registration_supported:
            # Controllers could not register before 3.7-IV0: their support cannot be verified.
            return None
        found = {self._node_id}
        for controller_id, supported in self._controller_supported():
            if controller_id == self._node_id:
                continue
            reason = _reason_not_supported(level, f"Controller {controller_id}", supported.get(feature, DISABLED))
            if reason is not None:
                return reason
            found.add(controller_id)
        for node_id in self._quorum_node_ids:
            if node_id not in found:
                return f"controller {node_id} has not registered, and may not support this feature"
        return None

    # -- replay ----------------------------------------------------------------------------

    def replay(self, record: FeatureLevelRecord, offset: int) -> None:
        supported = self.local_supported(record.name)
        if not supported.contains(record.feature_level):
            # Applying a level this software cannot implement would silently diverge.
            raise RuntimeError(
                f"Tried to apply FeatureLevelRecord {record}, but this controller only supports versions "
                f"{_range_text(supported)}"
            )
        if record.name == METADATA_VERSION_FEATURE:
            self._metadata_version.set(record.feature_level)
        elif record.feature_level == 0:
            self._finalized.remove(record.name)
        else:
            self._finalized.put(record.name, record.feature_level)
