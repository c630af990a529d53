"""`meta.properties`: which cluster and node a log directory belongs to, and the directory's id.

Every log directory of a Kafka node carries this file. It is what stops a broker from starting
on another cluster's disk, or two nodes from sharing one, and since KIP-858 its `directory.id`
names the directory in the metadata (JBOD). Format (Kafka's MetaProperties, version 1):

    #
    #Fri Nov 20 22:42:06 UTC 2026
    version=1
    cluster.id=<22-char cluster id>
    node.id=1
    directory.id=<22-char Uuid>

Version 0 (ZooKeeper era) files have `broker.id` instead of `node.id` and may lack `cluster.id`;
we read them so that `kraft storage` can report them, and write version 1.

`MetaPropertiesEnsemble` loads the file from every configured log directory, sorting each
directory into formatted / empty (exists, no file) / missing (no directory) / error (unreadable or
invalid), and `verify()` refuses the combinations Kafka refuses: different cluster.id or node.id
in different directories, and a directory.id that is reserved or shared by two directories.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kraft_engine.errors import StorageError
from kraft_engine.kafka_uuid import RESERVED_UUIDS, from_kafka_str, random_uuid, to_kafka_str
from kraft_engine.storage.atomic_file import atomic_replace
from kraft_engine.storage.java_properties import JavaPropertiesError, format_properties, parse_properties

__all__ = [
    "META_PROPERTIES_FILE_NAME",
    "MetaProperties",
    "MetaPropertiesEnsemble",
    "MetaPropertiesError",
    "initialize_new_log_dirs",
    "read_meta_properties",
    "write_meta_properties",
]

META_PROPERTIES_FILE_NAME = "meta.properties"


class MetaPropertiesError(StorageError):
    """A meta.properties file, or a set of them, that the node must not start with."""


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """One directory's identity. Version 1 always has cluster_id and node_id."""

    version: int
    cluster_id: str | None
    node_id: int | None
    directory_id: uuid.UUID | None = None

    def __post_init__(self) -> None:
        if self.version not in (0, 1):
            raise MetaPropertiesError(f"unsupported meta.properties version {self.version}")
        if self.version == 1 and self.cluster_id is None:
            raise MetaPropertiesError("cluster.id was not found.")
        if self.version == 1 and self.node_id is None:
            raise MetaPropertiesError("node.id was not found.")

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> MetaProperties:
        raw_version = props.get("version", "0").strip()
        if raw_version not in ("0", "1"):
            raise MetaPropertiesError(f"unknown meta.properties version {raw_version!r}")
        version = int(raw_version)
        id_key = "broker.id" if version == 0 else "node.id"
        node_id: int | None = None
        if id_key in props:
            node_id = _parse_int(props[id_key], key=id_key)
        elif version == 1:
            raise MetaPropertiesError("Failed to find required property node.id.")
        directory_id: uuid.UUID | None = None
        if "directory.id" in props:
            try:
                directory_id = from_kafka_str(props["directory.id"])
            except ValueError as e:
                raise MetaPropertiesError(f"Unable to read directory.id as a Uuid: {e}") from None
        return cls(
            version=version,
            cluster_id=props.get("cluster.id"),
            node_id=node_id,
            directory_id=directory_id,
        )

    def to_properties(self) -> dict[str, str]:
        props = {"version": str(self.version)}
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        if self.node_id is not None:
            props["broker.id" if self.version == 0 else "node.id"] = str(self.node_id)
        if self.directory_id is not None:
            props["directory.id"] = to_kafka_str(self.directory_id)
        return props


def _parse_int(text: str, *, key: str) -> int:
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise MetaPropertiesError(f"Failed to parse {key} property as an int: {text!r}") from None
    if not -(2**31) <= value < 2**31:
        raise MetaPropertiesError(f"{key} {value} is out of the int32 range")
    return value


def read_meta_properties(log_dir: Path) -> MetaProperties:
    """Read `<log_dir>/meta.properties`; FileNotFoundError when absent, MetaPropertiesError when bad."""
    path = log_dir / META_PROPERTIES_FILE_NAME
    raw = path.read_bytes()
    try:
        return MetaProperties.from_properties(parse_properties(raw.decode("utf-8")))
    except (MetaPropertiesError, JavaPropertiesError, UnicodeDecodeError) as e:
        raise MetaPropertiesError(f"Error while reading {path}: {e}") from None


def write_meta_properties(log_dir: Path, meta: MetaProperties) -> None:
    """Durably (re)write `<log_dir>/meta.properties` with Kafka's header comment lines."""
    # Properties.store(writer, "") writes an empty comment, then the date in Date.toString() form.
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    text = format_properties(meta.to_properties(), comments=("", stamp))
    atomic_replace(log_dir / META_PROPERTIES_FILE_NAME, text.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class MetaPropertiesEnsemble:
    """The meta.properties of all of a node's log directories, each in exactly one category."""

    formatted: dict[Path, MetaProperties] = field(default_factory=dict)
    empty: frozenset[Path] = frozenset()
    missing: frozenset[Path] = frozenset()
    errors: dict[Path, str] = field(default_factory=dict)
    metadata_log_dir: Path | None = None

    @classmethod
    def load(cls, log_dirs: Iterable[Path], *, metadata_log_dir: Path | None = None) -> MetaPropertiesEnsemble:
        dirs = sorted(set(log_dirs) | ({metadata_log_dir} if metadata_log_dir is not None else set()))
        if not dirs:
            raise MetaPropertiesError("You must specify at least one log directory.")
        formatted: dict[Path, MetaProperties] = {}
        empty: set[Path] = set()
        missing: set[Path] = set()
        errors: dict[Path, str] = {}
        for log_dir in dirs:
            try:
                formatted[log_dir] = read_meta_properties(log_dir)
            except FileNotFoundError:
                (empty if log_dir.is_dir() else missing).add(log_dir)
            except (MetaPropertiesError, OSError) as e:
                errors[log_dir] = str(e)
        return cls(
            formatted=formatted,
            empty=frozenset(empty),
            missing=frozenset(missing),
            errors=errors,
            metadata_log_dir=metadata_log_dir,
        )

    @property
    def cluster_id(self) -> str | None:
        return next((m.cluster_id for m in self.formatted.values() if m.cluster_id is not None), None)

    @property
    def node_id(self) -> int | None:
        return next((m.node_id for m in self.formatted.values() if m.node_id is not None), None)

    def verify(
        self,
        *,
        expected_cluster_id: str | None = None,
        expected_node_id: int | None = None,
        require_metadata_log_dir: bool = False,
        require_at_least_one_valid: bool = False,
    ) -> None:
        """Raise MetaPropertiesError naming every offending directory when the set is unusable."""
        problems: list[str] = []
        if require_at_least_one_valid and not self.formatted:
            problems.append("No readable meta.properties files found.")
        problems += self._disagreements(
            "cluster.id", {d: m.cluster_id for d, m in self.formatted.items()}, expected_cluster_id
        )
        problems += self._disagreements(
            "node.id", {d: m.node_id for d, m in self.formatted.items()}, expected_node_id
        )
        owners: dict[uuid.UUID, list[Path]] = {}
        for log_dir, meta in self.formatted.items():
            if meta.directory_id is None:
                continue
            if meta.directory_id in RESERVED_UUIDS:
                problems.append(f"Invalid reserved directory.id {to_kafka_str(meta.directory_id)} found in {log_dir}")
            owners.setdefault(meta.directory_id, []).append(log_dir)
        for directory_id, log_dirs in owners.items():
            if len(log_dirs) > 1:
                listed = ", ".join(str(d) for d in log_dirs)
                problems.append(f"Duplicate directory.id {to_kafka_str(directory_id)} found in {listed}")
        if require_metadata_log_dir and self.metadata_log_dir is None:
            problems.append("No metadata log directory was specified.")
        if self.metadata_log_dir is not None and self.metadata_log_dir in self.errors:
            problems.append(
                f"Encountered error in metadata log directory {self.metadata_log_dir}: "
                f"{self.errors[self.metadata_log_dir]}. Cannot continue."
            )
        if problems:
            raise MetaPropertiesError("; ".join(problems))

    @staticmethod
    def _disagreements(
        key: str, values: dict[Path, str | int | None], expected: str | int | None
    ) -> list[str]:
        by_value: dict[str | int, list[Path]] = {}
        for log_dir, value in values.items():
            if value is not None:
                by_value.setdefault(value, []).append(log_dir)
        if expected is not None:
            wrong = {v: dirs for v, dirs in by_value.items() if v != expected}
            return [
                f"Invalid {key} in {', '.join(str(d) for d in dirs)}: expected {expected}, but read {v}"
                for v, dirs in wrong.items()
            ]
        if len(by_value) <= 1:
            return []
        detail = "; ".join(f"{v} in {', '.join(str(d) for d in dirs)}" for v, dirs in by_value.items())
        return [f"Log directories disagree on {key}: {detail}"]


def initialize_new_log_dirs(ensemble: MetaPropertiesEnsemble) -> dict[Path, uuid.UUID]:
    """Kafka's startup step for log directories added to a formatted node (KafkaRaftServer's
    initializeLogDirs): each configured directory that is empty or missing gets the metadata log
    directory's cluster.id and node.id with a new directory.id, so a JBOD volume added to
    `log.dirs` joins at the next start without a `format` of its own. Nothing is written unless the
    metadata log directory is formatted (with a cluster.id and node.id): a node that was never
    formatted still refuses to start. Returns the directories written and their new ids."""
    metadata_dir = ensemble.metadata_log_dir
    meta = ensemble.formatted.get(metadata_dir) if metadata_dir is not None else None
    if meta is None or meta.cluster_id is None or meta.node_id is None:
        return {}
    used = {m.directory_id for m in ensemble.formatted.values() if m.directory_id is not None}
    written: dict[Path, uuid.UUID] = {}
    for log_dir in sorted(ensemble.empty | ensemble.missing):
        directory_id = random_uuid()
        while directory_id in used:
            directory_id = random_uuid()
        used.add(directory_id)
        log_dir.mkdir(parents=True, exist_ok=True)
        write_meta_properties(log_dir, MetaProperties(version=1, cluster_id=meta.cluster_id, node_id=meta.node_id,
                                                      directory_id=directory_id))
        written[log_dir] = directory_id
    return written
