"""ACLs, SCRAM credentials and delegation tokens as the controller holds them.

A metadata log written by Apache Kafka may contain any of their records, and a controller that
cannot replay every record of its log must stop, so each kind lives in revertible state with
Kafka's replay checks (a removal must name something that exists). SCRAM credentials also have
their generating side: AlterUserScramCredentials (`ScramControlManager.alter_credentials`), with
Kafka's per-user checks. CreateAcls and CreateDelegationToken are not served yet.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import uuid
from typing import Any

from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest
from kio.schema.alter_user_scram_credentials.v0.response import (
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from kraft_engine.controller.results import ControllerResult, RecordAndVersion
from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap
from kraft_engine.records import (
    AccessControlEntryRecord,
    DelegationTokenRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)

__all__ = ["AclControlManager", "DelegationTokenControlManager", "ScramControlManager"]

# Kafka's ScramMechanism ids (0 is UNKNOWN and never stored).
_SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_HASHES = {1: "sha256", 2: "sha512"}
_MIN_ITERATIONS = 4096
_MAX_ITERATIONS = 16384


class AclControlManager:
    def __init__(self, registry: SnapshotRegistry) -> None:
        self._acls: TimelineHashMap[uuid.UUID, AccessControlEntryRecord] = TimelineHashMap(registry)

    def acls(self, epoch: int | None = None) -> dict[uuid.UUID, AccessControlEntryRecord]:
        return self._acls.snapshot(epoch)

    def replay(self, record: AccessControlEntryRecord, offset: int) -> None:
        self._acls.put(record.id, record)

    def replay_remove(self, record: RemoveAccessControlEntryRecord, offset: int) -> None:
        if self._acls.remove(record.id) is None:
            raise RuntimeError(f"Unable to replay {record} at offset {offset}: no acl with that ID found.")


class ScramControlManager:
    def __init__(self, registry: SnapshotRegistry) -> None:
        self._credentials: TimelineHashMap[tuple[str, int], UserScramCredentialRecord] = TimelineHashMap(registry)

    def credentials(self, epoch: int | None = None) -> dict[tuple[str, int], UserScramCredentialRecord]:
        """(user, mechanism id) -> credential."""
        return self._credentials.snapshot(epoch)

    def replay(self, record: UserScramCredentialRecord, offset: int) -> None:
        if int(record.mechanism) not in _SCRAM_MECHANISMS:
            raise RuntimeError(f"Unknown SCRAM mechanism {record.mechanism} at offset {offset}")
        self._credentials.put((record.name, int(record.mechanism)), record)

    def alter_credentials(self, request: AlterUserScramCredentialsRequest, *,
                          scram_supported: bool) -> ControllerResult[AlterUserScramCredentialsResponse]:
        """Kafka's ScramControlManager.alterCredentials: deletions and upsertions, each user at
        most once per request; every user gets a result, and only valid alterations make records.
        The server stores StoredKey and ServerKey from the client's salted password, never the
        password."""
        errors: dict[str, tuple[ErrorCode, str]] = {}
        alterations: dict[str, Any] = {}
        every: tuple[Any, ...] = (*request.deletions, *request.upsertions)
        for alteration in every:
            name = alteration.name
            if name in errors:
                continue
            if name in alterations:
                del alterations[name]
                errors[name] = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")
                continue
            alterations[name] = alteration
        records: list[RecordAndVersion] = []
        for name, alteration in alterations.items():
            error = self._check(alteration, scram_supported=scram_supported)
            if error is not None:
                errors[name] = error
                continue
            mechanism = int(alteration.mechanism)
            if hasattr(alteration, "salted_password"):
                salted = bytes(alteration.salted_password)
                client_key = hmac.new(salted, b"Client Key", _HASHES[mechanism]).digest()
                records.append(RecordAndVersion(UserScramCredentialRecord(
                    name=name, mechanism=mechanism, salt=bytes(alteration.salt),
                    stored_key=hashlib.new(_HASHES[mechanism], client_key).digest(),
                    server_key=hmac.new(salted, b"Server Key", _HASHES[mechanism]).digest(),
                    iterations=int(alteration.iterations)), 0))
            else:
                records.append(RecordAndVersion(RemoveUserScramCredentialRecord(name=name, mechanism=mechanism), 0))
        results = tuple(
            AlterUserScramCredentialsResult(user=name, error_code=errors[name][0] if name in errors else ErrorCode.none,
                                            error_message=errors[name][1] if name in errors else None)
            for name in dict.fromkeys(a.name for a in every)
        )
        return ControllerResult(records, AlterUserScramCredentialsResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), results=results))

    def _check(self, alteration: Any, *, scram_supported: bool) -> tuple[ErrorCode, str] | None:
        if not scram_supported:
            return ErrorCode.unsupported_version, "The current metadata.version does not support SCRAM"
        if not alteration.name:
            return ErrorCode.unacceptable_credential, "Username must not be empty"
        mechanism = int(alteration.mechanism)
        if mechanism not in _SCRAM_MECHANISMS:
            return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
        if not hasattr(alteration, "salted_password"):
            if (alteration.name, mechanism) not in self._credentials:
                return ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
            return None
        if int(alteration.iterations) < _MIN_ITERATIONS:
            return ErrorCode.unacceptable_credential, "Too few iterations"
        if int(alteration.iterations) > _MAX_ITERATIONS:
            return ErrorCode.unacceptable_credential, "Too many iterations"
        if not alteration.salt or not alteration.salted_password:
            return ErrorCode.unacceptable_credential, "Salt and salted password must not be empty"
        return None

    def replay_remove(self, record: RemoveUserScramCredentialRecord, offset: int) -> None:
        if self._credentials.remove((record.name, int(record.mechanism))) is None:
            raise RuntimeError(f"Unable to find credential to delete: {record.name} "
                               f"{_SCRAM_MECHANISMS.get(int(record.mechanism), record.mechanism)} at offset {offset}")


class DelegationTokenControlManager:
    def __init__(self, registry: SnapshotRegistry) -> None:
        self._tokens: TimelineHashMap[str, DelegationTokenRecord] = TimelineHashMap(registry)

    def tokens(self, epoch: int | None = None) -> dict[str, DelegationTokenRecord]:
        return self._tokens.snapshot(epoch)

    def replay(self, record: DelegationTokenRecord, offset: int) -> None:
        self._tokens.put(record.token_id, record)

    def replay_remove(self, record: RemoveDelegationTokenRecord, offset: int) -> None:
        # Kafka removes without checking: an expired token may already be gone.
        self._tokens.remove(record.token_id)
