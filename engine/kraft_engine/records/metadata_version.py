"""metadata.version: Kafka's feature levels, their names, and what each one lets the metadata log hold.

The controller may only write records that every node can read, and the cluster-wide
`metadata.version` feature is the contract for that. This module holds Kafka's levels (the
`MetadataVersion` enum of Apache Kafka, by level, release and "IV" sub-version), the gates that
decide which records and record versions a level allows, and the parsing used by `kraft storage
format --release-version` and `kraft features`.

The range the engine implements is 3.3-IV3 (level 7, Kafka 4's minimum) to 4.2-IV1 (level 29):

- 4.3-IV0 (level 30) changed metadata: it writes RegisterBrokerRecord version 4 with cordoned log
  directories, a record version the engine's schemas do not have. Claiming it would be a lie, so
  levels 30 and up are known by name (for clear errors) but refused.
- Levels 26-29 (4.1-IV0 .. 4.2-IV1) changed no metadata; they only raise the inter-broker Fetch and
  ListOffsets versions, which `fetch_request_version` / `list_offset_request_version` report.
- Every implemented level is a production level, so the default for a new cluster is the latest:
  4.2-IV1. There are no unstable levels to enable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

FEATURE_NAME = "metadata.version"


@dataclass(frozen=True, order=True, slots=True)
class MetadataVersion:
    """One metadata.version level. Ordered by feature level; `str()` gives Kafka's "3.9-IV0" form."""

    feature_level: int
    release: str = field(compare=False)
    sub_version: str = field(compare=False)
    did_metadata_change: bool = field(compare=False)
    """True when the level changed the metadata format: a downgrade across it loses metadata."""

    MINIMUM: ClassVar[MetadataVersion]
    LATEST_PRODUCTION: ClassVar[MetadataVersion]
    LATEST: ClassVar[MetadataVersion]
    VERSIONS: ClassVar[tuple[MetadataVersion, ...]]

    def __str__(self) -> str:
        return self.version

    @property
    def level(self) -> int:
        return self.feature_level

    @property
    def version(self) -> str:
        return f"{self.release}-{self.sub_version}"

    @property
    def is_production(self) -> bool:
        return self <= MetadataVersion.LATEST_PRODUCTION

    def is_at_least(self, other: MetadataVersion) -> bool:
        return self >= other

    def is_less_than(self, other: MetadataVersion) -> bool:
        return self < other

    # --- What a level allows (Kafka's MetadataVersion.is*Supported) ---------------------------

    @property
    def is_no_op_record_supported(self) -> bool:
        return self >= IBP_3_3_IV1

    @property
    def is_broker_registration_change_record_supported(self) -> bool:
        return self >= IBP_3_3_IV2

    @property
    def is_in_controlled_shutdown_state_supported(self) -> bool:
        return self >= IBP_3_3_IV3

    @property
    def is_migration_supported(self) -> bool:
        return self >= IBP_3_4_IV0

    @property
    def is_scram_supported(self) -> bool:
        return self >= IBP_3_5_IV2

    @property
    def is_leader_epoch_bump_required_on_isr_shrink(self) -> bool:
        return self < IBP_3_6_IV0

    @property
    def is_metadata_transaction_supported(self) -> bool:
        """BeginTransactionRecord / EndTransactionRecord / AbortTransactionRecord may be written."""
        return self >= IBP_3_6_IV1

    @property
    def is_delegation_token_supported(self) -> bool:
        return self >= IBP_3_6_IV2

    @property
    def is_controller_registration_supported(self) -> bool:
        return self >= IBP_3_7_IV0

    @property
    def is_directory_assignment_supported(self) -> bool:
        """JBOD: partition records carry replica directories, brokers register their log dirs."""
        return self >= IBP_3_7_IV2

    @property
    def is_elr_supported(self) -> bool:
        """Eligible leader replicas may appear in partition records (KIP-966)."""
        return self >= IBP_4_0_IV1

    # --- Which record version a level writes ---------------------------------------------------

    @property
    def register_broker_record_version(self) -> int:
        if self.is_directory_assignment_supported:
            return 3
        if self.is_migration_supported:
            return 2
        if self.is_in_controlled_shutdown_state_supported:
            return 1
        return 0

    @property
    def register_controller_record_version(self) -> int:
        if not self.is_controller_registration_supported:
            raise ValueError(f"controller registration is not supported at metadata.version {self}")
        return 0

    @property
    def partition_record_version(self) -> int:
        if self.is_elr_supported:
            return 2
        if self.is_directory_assignment_supported:
            return 1
        return 0

    @property
    def partition_change_record_version(self) -> int:
        return self.partition_record_version

    # BrokerRegistrationChangeRecord is versioned by content, not by metadata.version: Kafka writes
    # version 0 to fence or unfence, 1 for controlled shutdown and 2 for log directories, i.e. the
    # lowest version that holds the fields set (metadata_registry.lowest_version_holding).

    # --- Inter-broker request versions the level implies ---------------------------------------

    @property
    def fetch_request_version(self) -> int:
        if self >= IBP_4_1_IV1:
            return 18
        if self >= IBP_3_9_IV0:
            return 17
        if self >= IBP_3_7_IV4:
            return 16
        if self >= IBP_3_5_IV1:
            return 15
        if self >= IBP_3_5_IV0:
            return 14
        return 13

    @property
    def list_offset_request_version(self) -> int:
        if self >= IBP_4_2_IV1:
            return 11
        if self >= IBP_4_0_IV3:
            return 10
        if self >= IBP_3_9_IV0:
            return 9
        if self >= IBP_3_5_IV0:
            return 8
        return 7

    # --- Lookup ----------------------------------------------------------------------------------

    @classmethod
    def from_feature_level(cls, level: int) -> MetadataVersion:
        """The level's MetadataVersion; ValueError for levels the engine does not implement."""
        found = _BY_LEVEL.get(level)
        if found is None:
            known = _KNOWN_UNIMPLEMENTED.get(level)
            detail = f" ({known}, which this engine does not implement)" if known else ""
            raise ValueError(
                f"No MetadataVersion with feature level {level}{detail}. Valid feature levels are from "
                f"{cls.MINIMUM.feature_level} to {cls.LATEST.feature_level}."
            )
        return found


def _mv(level: int, release: str, sub_version: str, changed: bool) -> MetadataVersion:
    return MetadataVersion(level, release, sub_version, changed)


IBP_3_3_IV1 = _mv(5, "3.3", "IV1", True)  # below the minimum; named for the gates above
IBP_3_3_IV2 = _mv(6, "3.3", "IV2", True)
IBP_3_3_IV3 = _mv(7, "3.3", "IV3", True)
IBP_3_4_IV0 = _mv(8, "3.4", "IV0", True)
IBP_3_5_IV0 = _mv(9, "3.5", "IV0", False)
IBP_3_5_IV1 = _mv(10, "3.5", "IV1", False)
IBP_3_5_IV2 = _mv(11, "3.5", "IV2", True)
IBP_3_6_IV0 = _mv(12, "3.6", "IV0", False)
IBP_3_6_IV1 = _mv(13, "3.6", "IV1", True)
IBP_3_6_IV2 = _mv(14, "3.6", "IV2", True)
IBP_3_7_IV0 = _mv(15, "3.7", "IV0", True)
IBP_3_7_IV1 = _mv(16, "3.7", "IV1", False)
IBP_3_7_IV2 = _mv(17, "3.7", "IV2", True)
IBP_3_7_IV3 = _mv(18, "3.7", "IV3", False)
IBP_3_7_IV4 = _mv(19, "3.7", "IV4", False)
IBP_3_8_IV0 = _mv(20, "3.8", "IV0", False)
IBP_3_9_IV0 = _mv(21, "3.9", "IV0", False)
IBP_4_0_IV0 = _mv(22, "4.0", "IV0", False)
IBP_4_0_IV1 = _mv(23, "4.0", "IV1", True)
IBP_4_0_IV2 = _mv(24, "4.0", "IV2", False)
IBP_4_0_IV3 = _mv(25, "4.0", "IV3", False)
IBP_4_1_IV0 = _mv(26, "4.1", "IV0", False)
IBP_4_1_IV1 = _mv(27, "4.1", "IV1", False)
IBP_4_2_IV0 = _mv(28, "4.2", "IV0", False)
IBP_4_2_IV1 = _mv(29, "4.2", "IV1", False)

# Kafka levels above the engine's range, known so that errors can name them.
_KNOWN_UNIMPLEMENTED = {30: "4.3-IV0", 31: "4.4-IV0"}

METADATA_VERSIONS: tuple[MetadataVersion, ...] = (
    IBP_3_3_IV3,
    IBP_3_4_IV0,
    IBP_3_5_IV0,
    IBP_3_5_IV1,
    IBP_3_5_IV2,
    IBP_3_6_IV0,
    IBP_3_6_IV1,
    IBP_3_6_IV2,
    IBP_3_7_IV0,
    IBP_3_7_IV1,
    IBP_3_7_IV2,
    IBP_3_7_IV3,
    IBP_3_7_IV4,
    IBP_3_8_IV0,
    IBP_3_9_IV0,
    IBP_4_0_IV0,
    IBP_4_0_IV1,
    IBP_4_0_IV2,
    IBP_4_0_IV3,
    IBP_4_1_IV0,
    IBP_4_1_IV1,
    IBP_4_2_IV0,
    IBP_4_2_IV1,
)
"""Every level the engine implements, lowest first."""

MINIMUM = IBP_3_3_IV3
LATEST_PRODUCTION = IBP_4_2_IV1
LATEST = METADATA_VERSIONS[-1]

MetadataVersion.MINIMUM = MINIMUM
MetadataVersion.LATEST_PRODUCTION = LATEST_PRODUCTION
MetadataVersion.LATEST = LATEST
MetadataVersion.VERSIONS = METADATA_VERSIONS

_BY_LEVEL = {version.feature_level: version for version in METADATA_VERSIONS}
_BY_NAME: dict[str, MetadataVersion] = {version.version: version for version in METADATA_VERSIONS}
# A bare release ("3.9") names the latest production IV of that release, as in Kafka.
for _version in METADATA_VERSIONS:
    if _version.is_production:
        _BY_NAME[_version.release] = _version


def latest(*, unstable_enabled: bool = False) -> MetadataVersion:
    """The default metadata.version for a new cluster (with unstable levels, the highest one)."""
    return LATEST if unstable_enabled else LATEST_PRODUCTION


def from_feature_level(level: int) -> MetadataVersion:
    return MetadataVersion.from_feature_level(level)


def from_version_string(text: str, *, unstable_enabled: bool = False) -> MetadataVersion:
    """Parse "3.9-IV0", "3.9" (latest IV of 3.9), "3.9.1" (as "3.9") or a numeric level like "21".

    ValueError lists the supported names, as Kafka's `MetadataVersion.fromVersionString` does.
    """
    text = text.strip()
    found: MetadataVersion | None
    if text.isdigit():
        found = _BY_LEVEL.get(int(text))
    else:
        segments = text.split(".")
        key = ".".join(segments[:2]) if len(segments) > 2 else text
        found = _BY_NAME.get(key)
    if found is None or (not unstable_enabled and not found.is_production):
        last = latest(unstable_enabled=unstable_enabled)
        supported = ", ".join(str(v) for v in METADATA_VERSIONS if MINIMUM <= v <= last)
        newer = _known_unimplemented(text)
        known = f" ({newer}, which this engine does not implement)" if newer else ""
        raise ValueError(f"Unknown metadata.version '{text}'{known}. Supported metadata.version are: {supported}")
    return found


def _known_unimplemented(text: str) -> str | None:
    """Kafka's name and level for a metadata.version newer than the engine's, given by name,
    release or level: a clearer refusal than "unknown" for a version Kafka really has."""
    for level, name in _KNOWN_UNIMPLEMENTED.items():
        release = name.split("-")[0]
        if text in (name, release, str(level)) or text.startswith(release + "."):
            return f"Kafka's {name}, level {level}"
    return None


def is_metadata_changed(source: MetadataVersion, target: MetadataVersion) -> bool:
    """Whether moving between the two levels crosses a metadata change (Kafka's
    checkIfMetadataChanged): true if any level above the lower one, up to and including the higher
    one, changed metadata. Such a downgrade would lose metadata and is refused."""
    low, high = sorted((source, target))
    return any(low < version <= high and version.did_metadata_change for version in METADATA_VERSIONS)
