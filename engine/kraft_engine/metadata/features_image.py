"""The features sub-image: metadata.version and the other finalized feature levels.

metadata.version is held apart from the other features because everything else depends on it:
which record versions exist, which fields they carry. A FeatureLevelRecord naming a
metadata.version this engine does not know is refused with the message an operator needs (the
binary is too old for the cluster), never skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from kraft_engine.metadata._maps import EMPTY_MAP, applied
from kraft_engine.metadata.errors import MetadataReplayError
from kraft_engine.metadata.image_writer import ImageWriter, ImageWriterOptions
from kraft_engine.records.metadata_records import FeatureLevelRecord
from kraft_engine.records.metadata_version import MetadataVersion

__all__ = ["KRAFT_VERSION_FEATURE", "METADATA_VERSION_FEATURE", "FeaturesDelta", "FeaturesImage"]

METADATA_VERSION_FEATURE = "metadata.version"
# kraft.version is finalized by raft control records (KRaftVersionRecord), not by the metadata
# image; a FeatureLevelRecord for it is inert on replay, as in Kafka (KAFKA-18979).
KRAFT_VERSION_FEATURE = "kraft.version"


@dataclass(frozen=True, slots=True)
class FeaturesImage:
    """Finalized levels by feature name (metadata.version excluded) and the metadata.version, if set."""

    EMPTY: ClassVar[FeaturesImage]

    finalized_versions: Mapping[str, int]
    metadata_version: int | None

    def is_empty(self) -> bool:
        return not self.finalized_versions and self.metadata_version is None

    def metadata_version_or_raise(self) -> int:
        if self.metadata_version is None:
            raise MetadataReplayError("the image has no metadata.version: no FeatureLevelRecord for it was replayed")
        return self.metadata_version

    def finalized_level(self, feature: str) -> int:
        """The finalized level of `feature`; 0 when it is not finalized (Kafka's convention)."""
        if feature == METADATA_VERSION_FEATURE:
            return 0 if self.metadata_version is None else self.metadata_version
        return self.finalized_versions.get(feature, 0)

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        # metadata.version goes first, at record version 0, so that any reader knows how to decode
        # every record after it.
        writer.write(
            FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=options.metadata_version),
            0,
        )
        for name in sorted(self.finalized_versions):
            writer.write(FeatureLevelRecord(name=name, feature_level=self.finalized_versions[name]), 0)


FeaturesImage.EMPTY = FeaturesImage(EMPTY_MAP, None)


class FeaturesDelta:
    """Feature-level changes; a change to `None` removes the feature (a level of 0)."""

    def __init__(self, image: FeaturesImage) -> None:
        self.image = image
        self.changes: dict[str, int | None] = {}
        self.metadata_version_change: int | None = None
        self._snapshot_cleared_metadata_version = False

    def replay_feature_level(self, record: FeatureLevelRecord) -> None:
        level = int(record.feature_level)
        if record.name == METADATA_VERSION_FEATURE:
            try:
                MetadataVersion.from_feature_level(level)
            except ValueError as e:
                raise MetadataReplayError(
                    f"{e} This engine cannot replay this cluster's metadata: a metadata.version below "
                    f"{MetadataVersion.MINIMUM} must be raised to at least {MetadataVersion.MINIMUM} "
                    "before the engine runs it, and a newer one needs a newer engine."
                ) from None
            self.metadata_version_change = level
            self._snapshot_cleared_metadata_version = False
        elif record.name == KRAFT_VERSION_FEATURE:
            return
        else:
            self.changes[record.name] = level if level != 0 else None

    def finish_snapshot(self) -> None:
        for name in self.image.finalized_versions:
            self.changes.setdefault(name, None)
        if self.metadata_version_change is None:
            self._snapshot_cleared_metadata_version = True

    def apply(self) -> FeaturesImage:
        if self.metadata_version_change is not None:
            metadata_version: int | None = self.metadata_version_change
        elif self._snapshot_cleared_metadata_version:
            metadata_version = None
        else:
            metadata_version = self.image.metadata_version
        return FeaturesImage(applied(self.image.finalized_versions, self.changes), metadata_version)
