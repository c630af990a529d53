"""AlterUserScramCredentials on the controller: generate, check the records, replay; Kafka's
per-user checks."""

from __future__ import annotations

import hashlib
import hmac

from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from kraft_engine.controller.security_control import ScramControlManager
from kraft_engine.controller.timeline import SnapshotRegistry
from kraft_engine.protocol.scram import SCRAM_MECHANISMS, ScramClient, ScramCredential, ScramServer
from kraft_engine.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord


def _upsert(name: str, *, mechanism: int = 2, iterations: int = 4096, password: str = "secret",
            salt: bytes = b"0123456789") -> ScramCredentialUpsertion:
    salted = hashlib.pbkdf2_hmac("sha512" if mechanism == 2 else "sha256", password.encode(), salt, iterations)
    return ScramCredentialUpsertion(name=name, mechanism=i8(mechanism), iterations=i32(iterations), salt=salt,
                                    salted_password=salted)


def _alter(manager: ScramControlManager, *, upsertions=(), deletions=()):
    return manager.alter_credentials(AlterUserScramCredentialsRequest(deletions=tuple(deletions),
                                                                      upsertions=tuple(upsertions)),
                                     scram_supported=True)


def _replay(manager: ScramControlManager, result) -> None:
    for offset, record in enumerate(result.records):
        if isinstance(record.record, UserScramCredentialRecord):
            manager.replay(record.record, offset)
        else:
            manager.replay_remove(record.record, offset)


def test_upsertion_stores_keys_a_client_with_the_password_authenticates_against() -> None:
    manager = ScramControlManager(SnapshotRegistry())
    result = _alter(manager, upsertions=[_upsert("alice", password="alice-secret")])
    assert [(r.user, r.error_code) for r in result.response.results] == [("alice", ErrorCode.none)]
    [record] = [r.record for r in result.records]
    assert isinstance(record, UserScramCredentialRecord)
    assert (record.name, record.mechanism, record.iterations) == ("alice", 2, 4096)
    assert hmac.compare_digest(record.salt, b"0123456789")
    _replay(manager, result)
    stored = manager.credentials()[("alice", 2)]
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-512"]
    server, client = ScramServer(mechanism), ScramClient(mechanism, username="alice", password="alice-secret")
    server.client_first(client.first())
    first = server.server_first(ScramCredential(salt=stored.salt, stored_key=stored.stored_key,
                                                server_key=stored.server_key, iterations=stored.iterations))
    client.verify(server.final(client.final(first)))


def test_deletion_removes_and_a_missing_credential_is_refused() -> None:
    manager = ScramControlManager(SnapshotRegistry())
    _replay(manager, _alter(manager, upsertions=[_upsert("bob")]))
    result = _alter(manager, deletions=[ScramCredentialDeletion(name="bob", mechanism=i8(2)),
                                        ScramCredentialDeletion(name="carol", mechanism=i8(2))])
    assert [(r.user, r.error_code) for r in result.response.results] == [
        ("bob", ErrorCode.none), ("carol", ErrorCode.resource_not_found)]
    assert [r.record for r in result.records] == [RemoveUserScramCredentialRecord(name="bob", mechanism=2)]
    _replay(manager, result)
    assert manager.credentials() == {}


def test_each_bad_alteration_gets_its_own_error_and_no_record() -> None:
    manager = ScramControlManager(SnapshotRegistry())
    result = _alter(manager, upsertions=[
        _upsert("few", iterations=1000), _upsert("many", iterations=20000), _upsert("", iterations=4096),
        _upsert("twice"), _upsert("twice", mechanism=1), _upsert("mech", mechanism=1).__class__(
            name="mech", mechanism=i8(3), iterations=i32(4096), salt=b"s", salted_password=b"p"),
        _upsert("ok", mechanism=1),
    ])
    assert {r.user: r.error_code for r in result.response.results} == {
        "few": ErrorCode.unacceptable_credential, "many": ErrorCode.unacceptable_credential,
        "": ErrorCode.unacceptable_credential, "twice": ErrorCode.duplicate_resource,
        "mech": ErrorCode.unsupported_sasl_mechanism, "ok": ErrorCode.none,
    }
    assert [r.record.name for r in result.records] == ["ok"]


def test_an_old_metadata_version_refuses_every_alteration() -> None:
    manager = ScramControlManager(SnapshotRegistry())
    result = manager.alter_credentials(AlterUserScramCredentialsRequest(deletions=(), upsertions=(_upsert("a"),)),
                                       scram_supported=False)
    assert [r.error_code for r in result.response.results] == [ErrorCode.unsupported_version]
    assert result.records == []
