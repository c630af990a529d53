"""Formatting a node's log directories: where a KRaft cluster's identity and seed metadata are minted.

A KRaft node never starts on blank disks. `kraft storage format` (Kafka's `kafka-storage format`,
StorageTool + Formatter) first writes `meta.properties` (cluster id, node id, a fresh directory id)
into every empty log directory and, on controllers, the bootstrap snapshot
`__cluster_metadata-0/00000000000000000000-0000000000.checkpoint` that pins the initial
`metadata.version` and, for a dynamic (KIP-853) quorum, `kraft.version=1` and the initial voter set.

The snapshot is laid out as Kafka's `RecordsSnapshotWriter` lays it out, so Kafka's own tools read
it: one control batch holding the SnapshotHeader (then KRaftVersionRecord and VotersRecord when
the quorum is dynamic), one batch of metadata records starting with the FeatureLevelRecord for
`metadata.version`, and a control batch holding the SnapshotFooter.

The refusals are Kafka's, with Kafka's messages: a missing cluster id, mutually exclusive quorum
flags, dynamic flags next to `controller.quorum.voters`, a controller with no voters and no flag,
already-formatted directories without `--ignore-formatted`, and release versions the engine does
not implement. `FormatRequest.from_config` applies the tool's rules; `format_storage` does the I/O,
so the quickstart and the operator's format jobs reuse both.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO

from kio.schema.k_raft_version_record.v0 import KRaftVersionRecord
from kio.schema.types import BrokerId
from kio.schema.voters_record.v0 import VotersRecord
from kio.schema.voters_record.v0.data import Endpoint as VoterEndpoint
from kio.schema.voters_record.v0.data import KRaftVersionFeature, Voter
from kio.static.primitive import i16, u16

from kraft_engine.errors import StorageError
from kraft_engine.kafka_uuid import from_kafka_str, random_uuid, to_kafka_str
from kraft_engine.records import (
    ControlRecord,
    FeatureLevelRecord,
    UserScramCredentialRecord,
    encode_metadata_record,
    feature_versions,
    metadata_version,
)
from kraft_engine.storage.atomic_file import fsync_dir
from kraft_engine.storage.meta_properties import (
    MetaProperties,
    MetaPropertiesEnsemble,
    MetaPropertiesError,
    write_meta_properties,
)
from kraft_engine.storage.metadata_log import holds_metadata_log
from kraft_engine.storage.snapshots import SnapshotId, SnapshotWriter, snapshot_file_name

__all__ = [
    "BOOTSTRAP_SNAPSHOT_ID",
    "BOOTSTRAP_SNAPSHOT_NAME",
    "CLUSTER_METADATA_DIR_NAME",
    "DirectoryType",
    "DynamicVoter",
    "FormatRequest",
    "FormatResult",
    "FormatterError",
    "ListenerAddress",
    "NodeStorageConfig",
    "bootstrap_records",
    "format_storage",
    "parse_dynamic_voters",
    "parse_feature_levels",
]

class ListenerAddress(Protocol):
    """An advertised listener as the formatter reads it (`server.config.Endpoint` is one)."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


class NodeStorageConfig(Protocol):
    """What `kafka-storage format`'s rules read of a node's config. `server.config.KafkaConfig`
    satisfies it; a protocol keeps storage below the server layer that parses the config."""

    @property
    def node_id(self) -> int: ...

    @property
    def is_controller(self) -> bool: ...

    @property
    def is_broker(self) -> bool: ...

    @property
    def controller_quorum_voters(self) -> Sequence[object]: ...

    @property
    def controller_listener_names(self) -> Sequence[str]: ...

    @property
    def effective_advertised_controller_listeners(self) -> Sequence[ListenerAddress]: ...

    @property
    def unstable_feature_versions_enable(self) -> bool: ...

    @property
    def all_log_dirs(self) -> Sequence[str]: ...

    @property
    def metadata_log_dir(self) -> str: ...


CLUSTER_METADATA_DIR_NAME = "__cluster_metadata-0"
BOOTSTRAP_SNAPSHOT_ID = SnapshotId(end_offset=0, epoch=0)
BOOTSTRAP_SNAPSHOT_NAME = snapshot_file_name(BOOTSTRAP_SNAPSHOT_ID)
KRAFT_VERSION_STATIC = 0
KRAFT_VERSION_DYNAMIC = 1
# Kafka's KRaftVersion.KRAFT_VERSION_1 depends on metadata.version 3.9-IV0: older brokers and
# controllers cannot read the voter records.
KRAFT_VERSION_DYNAMIC_MINIMUM_METADATA_VERSION = metadata_version.IBP_3_9_IV0


class FormatterError(StorageError):
    """A format the tool refuses; nothing on disk has been changed when it is raised."""


@dataclass(frozen=True, slots=True)
class DynamicVoter:
    """One `--initial-controllers` entry: `id@host:port:directoryId` (Kafka's DynamicVoter)."""

    node_id: int
    host: str
    port: int
    directory_id: uuid.UUID

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.node_id}@{host}:{self.port}:{to_kafka_str(self.directory_id)}"


def parse_dynamic_voters(text: str) -> tuple[DynamicVoter, ...]:
    """Parse `--initial-controllers`, refusing what Kafka's DynamicVoters.parse refuses."""
    voters: dict[int, DynamicVoter] = {}
    for entry in text.strip().split(","):
        if not entry:
            continue
        voter = _parse_dynamic_voter(entry.strip())
        if voter.node_id in voters:
            raise FormatterError(f"Node id {voter.node_id} was specified more than once.")
        voters[voter.node_id] = voter
    if not voters:
        raise FormatterError("No voters given.")
    return tuple(voters[node_id] for node_id in sorted(voters))


def _parse_dynamic_voter(text: str) -> DynamicVoter:
    def refuse(reason: str) -> FormatterError:
        return FormatterError(f"Invalid --initial-controllers entry {text!r}: {reason}")

    id_text, at, rest = text.partition("@")
    if not at:
        raise refuse("No @ found in dynamic voter string.")
    if not id_text:
        raise refuse("Invalid @ at beginning of dynamic voter string.")
    try:
        node_id = int(id_text)
    except ValueError:
        raise refuse("Failed to parse node id in dynamic voter string.") from None
    if node_id < 0:
        raise refuse(f"Invalid negative node id {node_id} in dynamic voter string.")
    if not rest:
        raise refuse("No hostname found after node id.")
    if rest.startswith("["):
        host, bracket, rest = rest[1:].partition("]")
        if not bracket:
            raise refuse("Hostname began with left bracket, but no right bracket was found.")
    else:
        host, colon, tail = rest.partition(":")
        if not colon:
            raise refuse("No colon following hostname could be found.")
        rest = ":" + tail
    if not rest.startswith(":"):
        raise refuse("Port section must start with a colon.")
    port_text, colon, directory_text = rest[1:].partition(":")
    if not colon:
        raise refuse("No colon following port could be found.")
    try:
        port = int(port_text)
    except ValueError:
        raise refuse("Failed to parse port in dynamic voter string.") from None
    if not 0 <= port <= 65535:
        raise refuse(f"Invalid port {port} in dynamic voter string.")
    try:
        directory_id = from_kafka_str(directory_text)
    except ValueError:
        raise refuse("Failed to parse directory ID in dynamic voter string.") from None
    return DynamicVoter(node_id=node_id, host=host, port=port, directory_id=directory_id)


class DirectoryType(enum.Enum):
    """What a log directory becomes, which decides its directory id and its bootstrap snapshot."""

    LOG_DIRECTORY = "data directory"
    STATIC_METADATA_DIRECTORY = "metadata directory"
    DYNAMIC_METADATA_NON_VOTER_DIRECTORY = "dynamic metadata directory"
    DYNAMIC_METADATA_VOTER_DIRECTORY = "dynamic metadata voter directory"

    @property
    def is_metadata_directory(self) -> bool:
        return self is not DirectoryType.LOG_DIRECTORY


@dataclass(frozen=True, slots=True)
class FormatRequest:
    """Everything `format_storage` needs, already checked against the tool's rules."""

    cluster_id: str
    node_id: int
    directories: tuple[Path, ...]
    metadata_log_dir: Path
    controller_listener_name: str
    is_controller: bool
    metadata_version_level: int
    metadata_version_name: str
    dynamic_quorum: bool
    initial_controllers: tuple[DynamicVoter, ...] | None
    ignore_formatted: bool
    kraft_version: int = KRAFT_VERSION_STATIC
    feature_levels: tuple[tuple[str, int], ...] = ()
    """Every finalized feature but metadata.version and kraft.version (level 0 included), by name."""
    scram_credentials: tuple[UserScramCredentialRecord, ...] = ()
    """`--add-scram`: credentials the bootstrap metadata seeds (the controller writes them on activation)."""

    @classmethod
    def from_config(
        cls,
        config: NodeStorageConfig,
        *,
        cluster_id: str | None,
        release_version: str | None = None,
        standalone: bool = False,
        initial_controllers: str | None = None,
        no_initial_controllers: bool = False,
        ignore_formatted: bool = False,
        features: Sequence[str] = (),
    ) -> FormatRequest:
        """Apply `kafka-storage format`'s rules to a node's config and the command-line flags
        (`features`: the `--feature name=level` values)."""
        # Like Kafka, any non-blank string is a cluster id (`kraft storage random-uuid` makes good ones):
        # refusing other forms would lock out clusters Kafka formatted with a chosen name.
        if not cluster_id or not cluster_id.strip():
            raise FormatterError("You must specify the cluster id.")
        chosen = [
            flag
            for flag, given in (
                ("--standalone", standalone),
                ("--initial-controllers", initial_controllers is not None),
                ("--no-initial-controllers", no_initial_controllers),
            )
            if given
        ]
        if len(chosen) > 1:
            raise FormatterError(f"{' and '.join(chosen)} are mutually exclusive: choose one.")
        static_voters = bool(config.controller_quorum_voters)
        if static_voters and chosen:
            raise FormatterError(
                "You cannot specify controller.quorum.voters and format the node with "
                f"{chosen[0]}. If you want to use dynamic quorum, please remove "
                "controller.quorum.voters and specify controller.quorum.bootstrap.servers instead."
            )
        voters: tuple[DynamicVoter, ...] | None = None
        if initial_controllers is not None:
            voters = parse_dynamic_voters(initial_controllers)
        if standalone:
            voters = (_standalone_voter(config),)
        if config.is_controller and not static_voters and not chosen:
            raise FormatterError(
                "Because controller.quorum.voters is not set on this controller, you must specify one of "
                "the following: --standalone, --initial-controllers, or --no-initial-controllers."
            )
        if not config.controller_listener_names:
            raise FormatterError("You must specify the name of the initial controller listener.")
        requested = parse_feature_levels(features)
        if metadata_version.FEATURE_NAME in requested:
            if release_version is not None:
                raise FormatterError("Use --release-version instead of --feature metadata.version=X to avoid ambiguity.")
            release_version = str(requested.pop(metadata_version.FEATURE_NAME))
        level, name = _metadata_version(
            release_version, unstable_enabled=config.unstable_feature_versions_enable
        )
        kraft_version, feature_levels = _effective_feature_levels(
            requested, metadata_version_level=level, dynamic_quorum_flag=chosen[0] if chosen else None,
            unstable_enabled=config.unstable_feature_versions_enable, broker=config.is_broker,
        )
        # Like Kafka, kraft.version 1 is only chosen when a quorum flag is given; a broker with
        # controller.quorum.bootstrap.servers and no flag keeps kraft.version 0.
        minimum = KRAFT_VERSION_DYNAMIC_MINIMUM_METADATA_VERSION
        if chosen and level < minimum.level:
            raise FormatterError(
                f"kraft.version could not be set to {KRAFT_VERSION_DYNAMIC} because it depends on "
                f"metadata.version level {minimum.level} ({minimum}), and {chosen[0]} needs it."
            )
        return cls(
            cluster_id=cluster_id,
            node_id=config.node_id,
            directories=tuple(Path(d) for d in config.all_log_dirs),
            metadata_log_dir=Path(config.metadata_log_dir),
            controller_listener_name=config.controller_listener_names[0],
            is_controller=config.is_controller,
            metadata_version_level=level,
            metadata_version_name=name,
            dynamic_quorum=not static_voters,
            initial_controllers=voters,
            ignore_formatted=ignore_formatted,
            kraft_version=kraft_version,
            feature_levels=tuple(sorted(feature_levels.items())),
        )

    @property
    def joins_later(self) -> bool:
        """--no-initial-controllers: a dynamic-quorum node that joins (as an observer) later."""
        return self.dynamic_quorum and self.initial_controllers is None

    def directory_type(self, log_dir: Path) -> DirectoryType:
        if log_dir != self.metadata_log_dir:
            return DirectoryType.LOG_DIRECTORY
        if self.initial_controllers is None:
            return DirectoryType.STATIC_METADATA_DIRECTORY
        if any(v.node_id == self.node_id for v in self.initial_controllers):
            return DirectoryType.DYNAMIC_METADATA_VOTER_DIRECTORY
        return DirectoryType.DYNAMIC_METADATA_NON_VOTER_DIRECTORY


def _standalone_voter(config: NodeStorageConfig) -> DynamicVoter:
    if not config.is_controller:
        raise FormatterError("You can only use --standalone on a controller.")
    listeners = config.effective_advertised_controller_listeners
    if not listeners:
        raise FormatterError("No controller listeners found.")
    listener = listeners[0]
    # Kafka advertises "localhost" for a listener bound to every interface.
    host = listener.host or "localhost"
    return DynamicVoter(node_id=config.node_id, host=host, port=listener.port, directory_id=random_uuid())


def parse_feature_levels(values: Sequence[str]) -> dict[str, int]:
    """`--feature name=level` values, refused with the messages of Kafka's StorageTool."""
    levels: dict[str, int] = {}
    for text in values:
        name, equals, level_text = text.partition("=")
        if not equals:
            raise FormatterError(f"Can't parse feature=level string {text}: equals sign not found.")
        name = name.strip()
        try:
            level = int(level_text.strip())
        except ValueError:
            raise FormatterError(f"Can't parse feature=level string {text}: unable to parse {level_text.strip()} "
                                 "as a short.") from None
        if not -(2**15) <= level < 2**15:
            raise FormatterError(f"Can't parse feature=level string {text}: unable to parse {level} as a short.")
        levels[name] = level
    return levels


def _effective_feature_levels(
    requested: dict[str, int], *, metadata_version_level: int, dynamic_quorum_flag: str | None, unstable_enabled: bool,
    broker: bool = False,
) -> tuple[int, dict[str, int]]:
    """Kafka's Formatter.calculateEffectiveFeatureLevels: the levels asked for, every other
    production feature at its default for the release, each checked against what the software
    supports and against its dependencies. (kraft.version, other features). The software is the
    engine's controller, and with `broker` also its broker (a node with both roles must be able
    to register its own broker); see feature_versions._BROKER_MAX_LEVELS."""
    known = {f.name: f for f in feature_versions.FEATURES}
    for name in requested:
        if name not in known:
            raise FormatterError(f"Unsupported feature: {name}. Supported features are: {', '.join(sorted(known))}")
    release = metadata_version.from_feature_level(metadata_version_level)
    kraft_version = _effective_kraft_version(requested.get(feature_versions.KRAFT_VERSION), dynamic_quorum_flag)
    # A default never exceeds what the node's software supports (for a controller: Kafka's own
    # defaults); an explicit level above it is refused below, as Kafka refuses levels its
    # software does not have.
    levels = {
        name: requested.get(name, min(definition.default_level(release), feature_versions.engine_max_level(
            definition, unstable_enabled=unstable_enabled, broker=broker)))
        for name, definition in known.items()
    }
    levels[feature_versions.KRAFT_VERSION] = kraft_version
    everything = {metadata_version.FEATURE_NAME: metadata_version_level, **levels}
    for name, level in levels.items():
        if name == feature_versions.KRAFT_VERSION and dynamic_quorum_flag is not None:
            continue  # checked with the engine's own message below, naming the flag
        try:
            if level > feature_versions.engine_max_level(known[name], unstable_enabled=unstable_enabled,
                                                         broker=broker):
                raise feature_versions.FeatureLevelError(f"No feature:{name} with feature level {level}")
            version = known[name].version(level, unstable_enabled=unstable_enabled)
            feature_versions.validate_dependencies(name, version, everything)
        except feature_versions.FeatureLevelError as e:
            raise FormatterError(str(e)) from None
    del levels[feature_versions.KRAFT_VERSION]
    return kraft_version, levels


def _effective_kraft_version(requested: int | None, dynamic_quorum_flag: str | None) -> int:
    """Kafka's Formatter.effectiveKRaftFeatureLevel: 1 with a quorum flag, else 0, unless asked."""
    flags = "--standalone, --initial-controllers, or --no-initial-controllers"
    if requested is None:
        return KRAFT_VERSION_DYNAMIC if dynamic_quorum_flag is not None else KRAFT_VERSION_STATIC
    if requested == KRAFT_VERSION_STATIC and dynamic_quorum_flag is not None:
        raise FormatterError(
            f"Cannot set kraft.version to 0 if one of the flags {flags} is used. For dynamic controllers "
            "support, try removing the --feature flag for kraft.version."
        )
    if requested != KRAFT_VERSION_STATIC and dynamic_quorum_flag is None:
        raise FormatterError(
            f"Cannot set kraft.version to {requested} unless one of the flags {flags} is used. For dynamic "
            f"controllers support, try using one of {flags}."
        )
    return requested


def _metadata_version(release_version: str | None, *, unstable_enabled: bool) -> tuple[int, str]:
    try:
        if release_version is None:
            version = metadata_version.latest(unstable_enabled=unstable_enabled)
        else:
            version = metadata_version.from_version_string(release_version, unstable_enabled=unstable_enabled)
    except ValueError as e:
        raise FormatterError(str(e)) from None
    if not unstable_enabled and not version.is_production:
        raise FormatterError(
            f"metadata.version {version} is not yet stable. Set unstable.feature.versions.enable=true to use it."
        )
    return version.level, str(version)


@dataclass(frozen=True, slots=True)
class FormatResult:
    """What `format_storage` did: the directories it formatted and the snapshot it wrote, if any."""

    formatted: tuple[Path, ...]
    bootstrap_snapshot: Path | None


def format_storage(request: FormatRequest, *, out: TextIO, now_ms: int) -> FormatResult:
    """Write meta.properties into every empty directory and, on a controller, the bootstrap snapshot.

    Checks come first and write nothing: an ensemble that disagrees with this node (another
    cluster's or another node's disk), or already-formatted directories without ignore_formatted.
    Each directory's snapshot is written before its meta.properties, so a crash in between leaves
    a directory that still counts as empty and is formatted again on the next run.
    """
    ensemble = MetaPropertiesEnsemble.load(request.directories, metadata_log_dir=request.metadata_log_dir)
    try:
        ensemble.verify(expected_cluster_id=request.cluster_id, expected_node_id=request.node_id)
    except MetaPropertiesError as e:
        raise FormatterError(str(e)) from None
    lost = _lost_metadata_log(request, ensemble)
    if lost is not None and not request.joins_later:
        raise FormatterError(
            f"The metadata log of {lost} is missing but its meta.properties survived. Format it as a new directory "
            "(a new directory.id) with --no-initial-controllers --ignore-formatted, start it as an observer, then "
            "swap it into the voter set with `kraft metadata-quorum remove-controller` (old directory id) and "
            "`add-controller`."
        )
    formatted = {d: m for d, m in ensemble.formatted.items() if d != lost}
    if formatted and not request.ignore_formatted:
        first = sorted(formatted)[0]
        raise FormatterError(
            f"Log directory {first} is already formatted. Use --ignore-formatted to ignore this directory "
            "and format the others."
        )
    for log_dir in sorted(ensemble.errors):
        print(f"I/O error trying to read log directory {log_dir}. Ignoring...", file=out)
    writable = sorted(ensemble.empty | ensemble.missing | ({lost} if lost is not None else set()))
    if not writable:
        if not ensemble.formatted:
            raise FormatterError("No available log directories to format.")
        print("All of the log directories are already formatted.", file=out)
        return FormatResult(formatted=(), bootstrap_snapshot=None)

    # The lost directory's old id stays "used": the new one must differ from it (it is still a voter).
    used_ids = {m.directory_id for m in ensemble.formatted.values() if m.directory_id is not None}
    snapshot_path: Path | None = None
    for log_dir in writable:
        directory_type = request.directory_type(log_dir)
        directory_id = _directory_id(request, directory_type, used_ids)
        used_ids.add(directory_id)
        if log_dir == lost:
            old = ensemble.formatted[log_dir].directory_id
            print(
                f"The metadata log of {log_dir} is missing: formatting it as a new directory (directory.id "
                f"{to_kafka_str(directory_id)} replaces {'none' if old is None else to_kafka_str(old)}).",
                file=out,
            )
        print(
            f"Formatting {directory_type.value} {log_dir} with metadata.version {request.metadata_version_name}.",
            file=out,
        )
        log_dir.mkdir(parents=True, exist_ok=True)
        if request.is_controller and directory_type.is_metadata_directory:
            snapshot_path = _write_bootstrap_snapshot(request, log_dir=log_dir, now_ms=now_ms)
        write_meta_properties(
            log_dir,
            MetaProperties(
                version=1, cluster_id=request.cluster_id, node_id=request.node_id, directory_id=directory_id
            ),
        )
    return FormatResult(formatted=tuple(writable), bootstrap_snapshot=snapshot_path)


def _lost_metadata_log(request: FormatRequest, ensemble: MetaPropertiesEnsemble) -> Path | None:
    """A controller's formatted metadata directory whose `__cluster_metadata-0` holds no log and no
    snapshot: the disk-replacement case, the only formatted directory format may write again."""
    directory = request.metadata_log_dir
    if not request.is_controller or directory not in ensemble.formatted:
        return None
    return None if holds_metadata_log(directory / CLUSTER_METADATA_DIR_NAME) else directory


def _directory_id(request: FormatRequest, directory_type: DirectoryType, used: set[uuid.UUID]) -> uuid.UUID:
    if directory_type is DirectoryType.DYNAMIC_METADATA_VOTER_DIRECTORY and request.initial_controllers:
        return next(v.directory_id for v in request.initial_controllers if v.node_id == request.node_id)
    while True:
        candidate = random_uuid()
        if candidate not in used:
            return candidate


def _write_bootstrap_snapshot(request: FormatRequest, *, log_dir: Path, now_ms: int) -> Path:
    partition_dir = log_dir / CLUSTER_METADATA_DIR_NAME
    partition_dir.mkdir(parents=True, exist_ok=True)
    fsync_dir(log_dir)
    control_records, metadata_values = bootstrap_records(
        metadata_version_level=request.metadata_version_level,
        feature_levels=dict(request.feature_levels),
        kraft_version=request.kraft_version,
        voters=request.initial_controllers,
        controller_listener_name=request.controller_listener_name,
    )
    metadata_values.extend(encode_metadata_record(record) for record in request.scram_credentials)
    writer = SnapshotWriter(
        partition_dir,
        snapshot_id=BOOTSTRAP_SNAPSHOT_ID,
        last_contained_log_timestamp_ms=now_ms,
        control_records=control_records,
        timestamp_ms=now_ms,
    )
    try:
        writer.append(metadata_values)
        return writer.freeze()
    except BaseException:
        writer.abort()
        raise


def bootstrap_records(
    *,
    metadata_version_level: int,
    feature_levels: Mapping[str, int] | None = None,
    kraft_version: int,
    voters: Sequence[DynamicVoter] | None,
    controller_listener_name: str,
) -> tuple[list[ControlRecord], list[bytes]]:
    """What the bootstrap snapshot holds between its header and footer, as Kafka's
    RecordsSnapshotWriter lays it out: the control records that go into the header batch
    (KRaftVersionRecord, then VotersRecord, for a dynamic quorum), and the framed metadata records,
    the FeatureLevelRecord for metadata.version first, then one for every other feature above
    level 0, by name (Kafka's BootstrapMetadata.fromVersions)."""
    control: list[ControlRecord] = []
    if kraft_version >= KRAFT_VERSION_DYNAMIC:
        control.append(KRaftVersionRecord(version=i16(0), k_raft_version=i16(kraft_version)))
        # A node formatted with --no-initial-controllers learns the voters from the quorum it joins.
        if voters is not None:
            control.append(_voters_record(voters, controller_listener_name=controller_listener_name))
    elif voters is not None:
        raise FormatterError("A voter set cannot be written when kraft.version is 0")
    metadata = [
        encode_metadata_record(FeatureLevelRecord(name="metadata.version", feature_level=metadata_version_level))
    ]
    for name, level in sorted((feature_levels or {}).items()):
        if level > 0 and name not in (metadata_version.FEATURE_NAME, feature_versions.KRAFT_VERSION):
            metadata.append(encode_metadata_record(FeatureLevelRecord(name=name, feature_level=level)))
    return control, metadata


def _voters_record(voters: Sequence[DynamicVoter], *, controller_listener_name: str) -> VotersRecord:
    return VotersRecord(
        version=i16(0),
        voters=tuple(
            Voter(
                voter_id=BrokerId(v.node_id),
                voter_directory_id=v.directory_id,
                endpoints=(VoterEndpoint(name=controller_listener_name, host=v.host, port=u16(v.port)),),
                # Every voter this engine formats speaks kraft.version 0 and 1 (Kafka's DynamicVoter).
                k_raft_version_feature=KRaftVersionFeature(min_supported_version=i16(0), max_supported_version=i16(1)),
            )
            for v in voters
        ),
    )
