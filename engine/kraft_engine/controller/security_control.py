"""ACLs, SCRAM credentials and delegation tokens as the controller holds them.

A metadata log written by Apache Kafka may contain any of their records, and a controller that
cannot replay every record of its log must stop, so each kind lives in revertible state with
Kafka's replay checks (a removal must name something that exists). SCRAM credentials also have
their generating side: AlterUserScramCredentials (`ScramControlManager.alter_credentials`), with
Kafka's per-user checks. ACLs have theirs too: CreateAcls and DeleteAcls
(`AclControlManager.create_acls` / `delete_acls`), with Kafka's AclControlManager checks (a new ACL
is validated, an identical one already stored makes no record, a DeleteAcls filter with an UNKNOWN
element is refused; every ACL a filter matches is listed, and removed once even when several
filters match it). CreateDelegationToken is not served yet.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest
from kio.schema.alter_user_scram_credentials.v0.response import (
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from kio.schema.create_acls.v3.request import CreateAclsRequest
from kio.schema.create_acls.v3.response import AclCreationResult, CreateAclsResponse
from kio.schema.delete_acls.v3.request import DeleteAclsRequest
from kio.schema.delete_acls.v3.response import (
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsResponse,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32Timedelta

from kraft_engine.controller.results import ControllerResult, RecordAndVersion
from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap
from kraft_engine.metadata.authorizer import AclBinding, AclBindingFilter, validate_new_acl
from kraft_engine.records import (
    AccessControlEntryRecord,
    DelegationTokenRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)

if TYPE_CHECKING:
    import random

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

    def create_acls(self, request: CreateAclsRequest, *, rng: random.Random) -> ControllerResult[CreateAclsResponse]:
        """Kafka's AclControlManager.createAcls: one result per creation, in order; a record for
        each valid ACL not already stored (nor created earlier in the same request)."""
        existing = {AclBinding.from_record(r) for r in self._acls.snapshot().values()}
        taken = set(self._acls.snapshot())
        records: list[RecordAndVersion] = []
        results: list[AclCreationResult] = []
        for creation in request.creations:
            binding = AclBinding.of(
                resource_type=creation.resource_type, resource_name=creation.resource_name,
                pattern_type=creation.resource_pattern_type, principal=creation.principal, host=creation.host,
                operation=creation.operation, permission_type=creation.permission_type)
            problem = validate_new_acl(binding)
            if problem is not None:
                results.append(AclCreationResult(error_code=ErrorCode.invalid_request, error_message=problem))
                continue
            if binding not in existing:
                existing.add(binding)
                acl_id = _new_id(rng, taken)
                records.append(RecordAndVersion(binding.to_record(acl_id), 0))
            results.append(AclCreationResult(error_code=ErrorCode.none, error_message=None))
        return ControllerResult(records, CreateAclsResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), results=tuple(results)))

    def delete_acls(self, request: DeleteAclsRequest) -> ControllerResult[DeleteAclsResponse]:
        """Kafka's AclControlManager.deleteAcls: per filter, the ACLs it matches (or
        INVALID_REQUEST for a filter with an UNKNOWN element); one removal record per matched ACL."""
        acls = self._acls.snapshot()
        removed: dict[uuid.UUID, None] = {}
        results: list[DeleteAclsFilterResult] = []
        for wanted in request.filters:
            acl_filter = AclBindingFilter.of(
                resource_type=wanted.resource_type_filter, resource_name=wanted.resource_name_filter,
                pattern_type=wanted.pattern_type_filter, principal=wanted.principal_filter,
                host=wanted.host_filter, operation=wanted.operation, permission_type=wanted.permission_type)
            problem = acl_filter.unknown_element()
            if problem is not None:
                results.append(DeleteAclsFilterResult(error_code=ErrorCode.invalid_request, error_message=problem,
                                                      matching_acls=()))
                continue
            matching = []
            for acl_id in sorted(acls, key=lambda i: AclBinding.from_record(acls[i]).sort_key()):
                binding = AclBinding.from_record(acls[acl_id])
                if acl_filter.matches(binding):
                    removed[acl_id] = None
                    matching.append(DeleteAclsMatchingAcl(
                        error_code=ErrorCode.none, error_message=None, resource_type=i8(binding.resource_type),
                        resource_name=binding.resource_name, pattern_type=i8(binding.pattern_type),
                        principal=binding.principal, host=binding.host, operation=i8(binding.operation),
                        permission_type=i8(binding.permission_type)))
            results.append(DeleteAclsFilterResult(error_code=ErrorCode.none, error_message=None,
                                                  matching_acls=tuple(matching)))
        records = [RecordAndVersion(RemoveAccessControlEntryRecord(id=acl_id), 0) for acl_id in removed]
        return ControllerResult(records, DeleteAclsResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), filter_results=tuple(results)))


def _new_id(rng: random.Random, taken: set[uuid.UUID]) -> uuid.UUID:
    # Kafka's Uuid.randomUuid never hands out the zero uuid; an ACL id is also never reused.
    while True:
        acl_id = uuid.UUID(bytes=rng.randbytes(16))
        if acl_id.int != 0 and acl_id not in taken:
            taken.add(acl_id)
            return acl_id


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
