"""Where `MetadataImage.write` sends its records, and under which metadata.version rules.

Writing an image back to records serves three readers: snapshots, the catch-up delta a newly
installed publisher receives, and determinism checks that compare two nodes' images byte for byte.
The options carry the metadata.version whose record versions must be used; state that version
cannot express is a *loss*, which by default refuses the write (Kafka's UnwritableMetadataException)
instead of silently producing a snapshot that forgets something.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kraft_engine.metadata.errors import UnwritableMetadataError
from kraft_engine.records.framing import encode_metadata_record
from kraft_engine.records.metadata_records import MetadataRecord
from kraft_engine.records.metadata_version import MetadataVersion

__all__ = ["ImageWriter", "ImageWriterOptions", "RecordListWriter", "raise_on_loss"]


class ImageWriter(Protocol):
    """Receives an image's records, in order, each with the record version to encode it at."""

    def write(self, record: MetadataRecord, version: int) -> None: ...


def raise_on_loss(what: str) -> None:
    raise UnwritableMetadataError(f"metadata.version too old to write {what}")


@dataclass(frozen=True, slots=True)
class ImageWriterOptions:
    """The metadata.version level to write at, and what to do when it cannot express some state."""

    metadata_version: int
    loss_handler: Callable[[str], None] = field(default=raise_on_loss)
    _version: MetadataVersion = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Raises ValueError for a level the engine does not implement: nothing can be written at it.
        object.__setattr__(self, "_version", MetadataVersion.from_feature_level(self.metadata_version))

    def handle_loss(self, what: str) -> None:
        self.loss_handler(what)

    # What records at this metadata.version can carry, and at which record versions (the records
    # package's metadata.version table).

    @property
    def version(self) -> MetadataVersion:
        return self._version

    @property
    def in_controlled_shutdown_supported(self) -> bool:
        return self._version.is_in_controlled_shutdown_state_supported

    @property
    def migration_supported(self) -> bool:
        return self._version.is_migration_supported

    @property
    def scram_supported(self) -> bool:
        return self._version.is_scram_supported

    @property
    def delegation_token_supported(self) -> bool:
        return self._version.is_delegation_token_supported

    @property
    def controller_registration_supported(self) -> bool:
        return self._version.is_controller_registration_supported

    @property
    def directory_assignment_supported(self) -> bool:
        return self._version.is_directory_assignment_supported

    @property
    def elr_supported(self) -> bool:
        return self._version.is_elr_supported

    @property
    def register_broker_record_version(self) -> int:
        return self._version.register_broker_record_version

    @property
    def register_controller_record_version(self) -> int:
        return self._version.register_controller_record_version

    @property
    def partition_record_version(self) -> int:
        return self._version.partition_record_version


class RecordListWriter:
    """Collects `(record, version)` pairs; `to_bytes()` frames them as Kafka's ApiMessageAndVersion."""

    def __init__(self) -> None:
        self.records: list[tuple[MetadataRecord, int]] = []

    def write(self, record: MetadataRecord, version: int) -> None:
        self.records.append((record, version))

    def to_bytes(self) -> bytes:
        # Each record's frame is prefixed with its length so that the concatenation is unambiguous:
        # two different record lists can never produce the same bytes.
        out = bytearray()
        for record, version in self.records:
            frame = encode_metadata_record(record, version)
            out += len(frame).to_bytes(4, "big")
            out += frame
        return bytes(out)
