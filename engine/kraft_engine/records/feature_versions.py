"""Kafka's finalizable features other than metadata.version, and the level each release starts at.

`kafka-storage format --release-version R` does not only pin metadata.version: every production
feature gets the level Kafka's `Feature.defaultLevel(R)` gives it (the highest level whose
bootstrap metadata.version is at most R), so a cluster formatted for 4.1-IV1 starts with
group.version=1, transaction.version=2 and eligible.leader.replicas.version=1. `kraft storage
format`, `version-mapping` and `feature-dependencies` answer from this table, and the controller
advertises the same ranges as supported (Kafka's QuorumFeatures).

The table is Apache Kafka 4.1's `org.apache.kafka.server.common.Feature` (read off its jars: each
level's bootstrap metadata.version and dependencies, each feature's latest production and
testing level), in Kafka's order. What the engine itself supports is lower: see
`_ENGINE_MAX_LEVELS`. kraft.version is listed like the others but never becomes a
FeatureLevelRecord: the raft layer owns it (KRaftVersionRecord).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kraft_engine.records import metadata_version
from kraft_engine.records.metadata_version import MetadataVersion

__all__ = [
    "ELIGIBLE_LEADER_REPLICAS_VERSION",
    "FEATURES",
    "GROUP_VERSION",
    "KRAFT_VERSION",
    "SHARE_VERSION",
    "STREAMS_VERSION",
    "TRANSACTION_VERSION",
    "FeatureDefinition",
    "FeatureLevelError",
    "FeatureVersion",
    "engine_max_level",
    "feature",
    "supported_ranges",
    "validate_dependencies",
]

KRAFT_VERSION = "kraft.version"
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"
SHARE_VERSION = "share.version"
STREAMS_VERSION = "streams.version"


class FeatureLevelError(ValueError):
    """A feature or level Kafka's tools refuse, with Kafka's message."""


@dataclass(frozen=True, slots=True)
class FeatureVersion:
    """One level of a feature: the first metadata.version that defaults to it, and the levels of
    other features (metadata.version included) it needs."""

    level: int
    bootstrap_metadata_version: MetadataVersion
    dependencies: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FeatureDefinition:
    name: str
    versions: tuple[FeatureVersion, ...]  # by level, 0 first
    latest_production: int

    @property
    def latest_testing(self) -> int:
        return self.versions[-1].level

    def latest(self, *, unstable_enabled: bool) -> int:
        return self.latest_testing if unstable_enabled else self.latest_production

    def default_level(self, version: MetadataVersion) -> int:
        """Kafka's Feature.defaultLevel: the highest level whose bootstrap metadata.version is at
        most `version` (not capped at the production level, as in Kafka)."""
        level = 0
        for candidate in self.versions:
            if candidate.bootstrap_metadata_version > version:
                break
            level = candidate.level
        return level

    def version(self, level: int, *, unstable_enabled: bool) -> FeatureVersion:
        """Kafka's Feature.fromFeatureLevel; FeatureLevelError as its IllegalArgumentException."""
        if 0 <= level <= self.latest(unstable_enabled=unstable_enabled):
            return self.versions[level]
        raise FeatureLevelError(f"No feature:{self.name} with feature level {level}")


def _levels(*entries: tuple[MetadataVersion, Mapping[str, int]]) -> tuple[FeatureVersion, ...]:
    later = (FeatureVersion(level, mv, dict(deps)) for level, (mv, deps) in enumerate(entries, start=1))
    return (FeatureVersion(0, metadata_version.MINIMUM), *later)


_MV = metadata_version.FEATURE_NAME

FEATURES: tuple[FeatureDefinition, ...] = (
    FeatureDefinition(KRAFT_VERSION, _levels((metadata_version.IBP_3_9_IV0, {_MV: 21})), latest_production=1),
    FeatureDefinition(
        TRANSACTION_VERSION,
        _levels((metadata_version.IBP_4_0_IV2, {}), (metadata_version.IBP_4_0_IV2, {})),
        latest_production=2,
    ),
    FeatureDefinition(GROUP_VERSION, _levels((metadata_version.IBP_4_0_IV0, {})), latest_production=1),
    FeatureDefinition(
        ELIGIBLE_LEADER_REPLICAS_VERSION, _levels((metadata_version.IBP_4_1_IV0, {_MV: 23})), latest_production=1
    ),
    FeatureDefinition(SHARE_VERSION, _levels((metadata_version.IBP_4_2_IV0, {})), latest_production=1),
    FeatureDefinition(STREAMS_VERSION, _levels((metadata_version.IBP_4_2_IV1, {})), latest_production=0),
)
"""Kafka 4.1's Feature.PRODUCTION_FEATURES, in its order."""

_BY_NAME = {f.name: f for f in FEATURES}

_ENGINE_MAX_LEVELS = {
    TRANSACTION_VERSION: 0,
    GROUP_VERSION: 0,
    ELIGIBLE_LEADER_REPLICAS_VERSION: 0,
    SHARE_VERSION: 0,
    STREAMS_VERSION: 0,
}
"""Levels above these switch on behaviour the engine does not have yet, so its nodes support
level 0 only: transaction.version 1-2 (KIP-890 server-side transaction checks), group.version 1
(KIP-848 consumer groups), share.version 1 (KIP-932 share groups), streams.version 1 (KIP-1071)
all live in the broker's group and transaction coordinators, which the engine's broker does not
have; eligible.leader.replicas.version 1 is KIP-966's eligible leader replicas, which the
controller does not maintain yet. `kraft storage format` lowers Kafka's default for a release to
these levels (every engine node can run the cluster it formats), and refuses an explicit level
above them as Kafka refuses a level its software does not have. Raising an entry here, once the
behaviour exists, makes format write Kafka's level for it."""


def engine_max_level(definition: FeatureDefinition, *, unstable_enabled: bool) -> int:
    """The highest level of `definition` this engine supports."""
    latest = definition.latest(unstable_enabled=unstable_enabled)
    return min(latest, _ENGINE_MAX_LEVELS.get(definition.name, latest))


def feature(name: str) -> FeatureDefinition | None:
    return _BY_NAME.get(name)


def supported_ranges(*, unstable_enabled: bool) -> dict[str, tuple[int, int]]:
    """What this software supports of each feature, metadata.version included (Kafka's
    QuorumFeatures.defaultSupportedFeatureMap, less what the engine does not implement)."""
    latest_mv = metadata_version.latest(unstable_enabled=unstable_enabled)
    ranges = {_MV: (metadata_version.MINIMUM.feature_level, latest_mv.feature_level)}
    for definition in FEATURES:
        ranges[definition.name] = (0, engine_max_level(definition, unstable_enabled=unstable_enabled))
    return ranges


def validate_dependencies(name: str, version: FeatureVersion, levels: Mapping[str, int]) -> None:
    """Kafka's Feature.validateVersion: every dependency of `version` is met by `levels`."""
    for dependency, needed in version.dependencies.items():
        have = levels.get(dependency, 0)
        if have < needed:
            raise FeatureLevelError(
                f"{name} could not be set to {version.level} because it depends on {dependency} level {needed}"
            )
