"""Kafka's finalizable features other than metadata.version, and the level each release starts at.

`kafka-storage format --release-version R` does not only pin metadata.version: every production
feature gets the level Kafka's `Feature.defaultLevel(R)` gives it (the highest level whose
bootstrap metadata.version is at most R), so a cluster formatted for 4.1-IV1 starts with
group.version=1, transaction.version=2 and eligible.leader.replicas.version=1. `kraft storage
format`, `version-mapping` and `feature-dependencies` answer from this table, and the controller
advertises the same ranges as supported (Kafka's QuorumFeatures).

The table is Apache Kafka 4.1's `org.apache.kafka.server.common.Feature` (read off its jars: each
level's bootstrap metadata.version and dependencies, each feature's latest production and
testing level), in Kafka's order. The engine's controller supports all of it; its broker less
(`_BROKER_MAX_LEVELS`). kraft.version is listed like the others but never becomes a
FeatureLevelRecord: the raft layer owns it (KRaftVersionRecord).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kraft_engine.errors import RecordsError
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
    "levels_every_node_supports",
    "supported_ranges",
    "validate_dependencies",
]

KRAFT_VERSION = "kraft.version"
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"
SHARE_VERSION = "share.version"
STREAMS_VERSION = "streams.version"


class FeatureLevelError(RecordsError, ValueError):
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

_BROKER_MAX_LEVELS = {
    TRANSACTION_VERSION: 0,
    GROUP_VERSION: 0,
    SHARE_VERSION: 0,
    STREAMS_VERSION: 0,
}
"""What the engine's broker supports of each feature it does not implement above level 0:
transaction.version 1-2 (KIP-890 server-side transaction checks), group.version 1 (KIP-848
consumer groups), share.version 1 (KIP-932 share groups) and streams.version 1 (KIP-1071) live in
the broker's group and transaction coordinators, which the engine's broker does not have at those
levels. eligible.leader.replicas.version 1 is supported: its leader holds the high watermark while
the ISR is below min.insync.replicas (`broker/replica_state.py`) and it serves
DescribeTopicPartitions with the ELR fields. The engine's controller supports every level of
Kafka's table. So a cluster formatted with Kafka's defaults runs engine controllers with Apache
Kafka brokers, and refuses the engine's brokers at registration (UNSUPPORTED_VERSION) until they
are formatted with levels they support, as Kafka refuses a broker that lacks a finalized level."""


def engine_max_level(definition: FeatureDefinition, *, unstable_enabled: bool, broker: bool = False) -> int:
    """The highest level of `definition` the engine's controller (or, with `broker`, its broker)
    supports."""
    latest = definition.latest(unstable_enabled=unstable_enabled)
    return min(latest, _BROKER_MAX_LEVELS.get(definition.name, latest)) if broker else latest


def feature(name: str) -> FeatureDefinition | None:
    return _BY_NAME.get(name)


def supported_ranges(*, unstable_enabled: bool, broker: bool = False) -> dict[str, tuple[int, int]]:
    """What the engine's controller (Kafka's QuorumFeatures.defaultSupportedFeatureMap) or, with
    `broker`, its broker supports of each feature, metadata.version included."""
    latest_mv = metadata_version.latest(unstable_enabled=unstable_enabled)
    ranges = {_MV: (metadata_version.MINIMUM.feature_level, latest_mv.feature_level)}
    for definition in FEATURES:
        ranges[definition.name] = (0, engine_max_level(definition, unstable_enabled=unstable_enabled, broker=broker))
    return ranges


def levels_every_node_supports(
    release: MetadataVersion, supported: Iterable[Mapping[str, tuple[int, int]]]
) -> dict[str, int]:
    """The features whose default level for `release` some node does not support, each at the
    highest level every node supports: the `--feature name=level` overrides to format a cluster
    of these nodes with (each a supported-ranges map; a feature a node does not list counts as
    0-0, as a controller counts it at registration)."""
    nodes = list(supported)
    levels: dict[str, int] = {}
    for definition in FEATURES:
        # No software formats above a feature's production level (without unstable versions).
        default = min(definition.default_level(release), definition.latest_production)
        common = min((node.get(definition.name, (0, 0))[1] for node in nodes), default=default)
        if common < default:
            levels[definition.name] = common
    return levels


def validate_dependencies(name: str, version: FeatureVersion, levels: Mapping[str, int]) -> None:
    """Kafka's Feature.validateVersion: every dependency of `version` is met by `levels`."""
    for dependency, needed in version.dependencies.items():
        have = levels.get(dependency, 0)
        if have < needed:
            raise FeatureLevelError(
                f"{name} could not be set to {version.level} because it depends on {dependency} level {needed}"
            )
