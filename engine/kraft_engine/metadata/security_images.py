"""The ACL, SCRAM-credential and delegation-token sub-images.

All three are maps from a key to the latest record that defined it (an ACL by id, a credential by
(mechanism, user), a token by id), removed by their Remove* records. Keeping the replayed record
itself as the value is exact: writing the image back emits those very records, in key order.
The engine does not enforce ACLs or authenticate with these yet; it keeps them so that a
Kafka-written metadata log replays completely and snapshots lose nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from kraft_engine.metadata._maps import EMPTY_MAP, applied
from kraft_engine.metadata.errors import MetadataReplayError
from kraft_engine.metadata.image_writer import ImageWriter, ImageWriterOptions
from kraft_engine.records.metadata_records import (
    AccessControlEntryRecord,
    DelegationTokenRecord,
    MetadataRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)

__all__ = [
    "SCRAM_MECHANISMS",
    "AclsDelta",
    "AclsImage",
    "DelegationTokensDelta",
    "DelegationTokensImage",
    "ScramDelta",
    "ScramImage",
]

K = TypeVar("K")
R = TypeVar("R")

# Kafka's ScramMechanism ids (0 is UNKNOWN and never valid in a record).
SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


class _RecordMapDelta(Generic[K, R]):
    def __init__(self, base: Mapping[K, R]) -> None:
        self._base = base
        self.changes: dict[K, R | None] = {}

    def get(self, key: K) -> R | None:
        return self.changes[key] if key in self.changes else self._base.get(key)

    def finish_snapshot(self) -> None:
        for key in self._base:
            self.changes.setdefault(key, None)

    def applied(self) -> Mapping[K, R]:
        return applied(self._base, self.changes)


def _write_sorted(values: Mapping[Any, MetadataRecord], writer: ImageWriter) -> None:
    for key in sorted(values):
        writer.write(values[key], 0)


@dataclass(frozen=True, slots=True)
class AclsImage:
    EMPTY: ClassVar[AclsImage]

    acls: Mapping[uuid.UUID, AccessControlEntryRecord]

    def is_empty(self) -> bool:
        return not self.acls

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        _write_sorted(self.acls, writer)


AclsImage.EMPTY = AclsImage(EMPTY_MAP)


class AclsDelta(_RecordMapDelta[uuid.UUID, AccessControlEntryRecord]):
    def __init__(self, image: AclsImage) -> None:
        super().__init__(image.acls)
        self.image = image

    def replay_acl(self, record: AccessControlEntryRecord) -> None:
        self.changes[record.id] = record

    def replay_remove_acl(self, record: RemoveAccessControlEntryRecord) -> None:
        if record.id in self.image.acls:
            self.changes[record.id] = None
        elif self.changes.get(record.id) is not None:
            # Added and removed within this delta: leave no trace.
            del self.changes[record.id]
        else:
            raise MetadataReplayError(f"RemoveAccessControlEntryRecord for unknown ACL id {record.id}")

    def apply(self) -> AclsImage:
        return self.image if not self.changes else AclsImage(self.applied())


@dataclass(frozen=True, slots=True)
class ScramImage:
    """SCRAM credentials by (mechanism id, user name)."""

    EMPTY: ClassVar[ScramImage]

    credentials: Mapping[tuple[int, str], UserScramCredentialRecord]

    def is_empty(self) -> bool:
        return not self.credentials

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        if options.scram_supported:
            _write_sorted(self.credentials, writer)
        elif self.credentials:
            users = sorted({name for _, name in self.credentials})
            options.handle_loss(f"the SCRAM credentials of {', '.join(users)}")


ScramImage.EMPTY = ScramImage(EMPTY_MAP)


def _mechanism(value: int, record: object) -> int:
    if value not in SCRAM_MECHANISMS:
        raise MetadataReplayError(f"{type(record).__name__} has unknown SCRAM mechanism {value}")
    return value


class ScramDelta(_RecordMapDelta[tuple[int, str], UserScramCredentialRecord]):
    def __init__(self, image: ScramImage) -> None:
        super().__init__(image.credentials)
        self.image = image

    def replay_credential(self, record: UserScramCredentialRecord) -> None:
        self.changes[(_mechanism(record.mechanism, record), record.name)] = record

    def replay_remove_credential(self, record: RemoveUserScramCredentialRecord) -> None:
        self.changes[(_mechanism(record.mechanism, record), record.name)] = None

    def apply(self) -> ScramImage:
        return self.image if not self.changes else ScramImage(self.applied())


@dataclass(frozen=True, slots=True)
class DelegationTokensImage:
    EMPTY: ClassVar[DelegationTokensImage]

    tokens: Mapping[str, DelegationTokenRecord]

    def is_empty(self) -> bool:
        return not self.tokens

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        if options.delegation_token_supported:
            _write_sorted(self.tokens, writer)
        elif self.tokens:
            options.handle_loss(f"the delegation tokens {', '.join(sorted(self.tokens))}")


DelegationTokensImage.EMPTY = DelegationTokensImage(EMPTY_MAP)


class DelegationTokensDelta(_RecordMapDelta[str, DelegationTokenRecord]):
    def __init__(self, image: DelegationTokensImage) -> None:
        super().__init__(image.tokens)
        self.image = image

    def replay_token(self, record: DelegationTokenRecord) -> None:
        self.changes[record.token_id] = record

    def replay_remove_token(self, record: RemoveDelegationTokenRecord) -> None:
        self.changes[record.token_id] = None

    def apply(self) -> DelegationTokensImage:
        return self.image if not self.changes else DelegationTokensImage(self.applied())
