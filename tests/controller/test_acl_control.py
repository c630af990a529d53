"""CreateAcls and DeleteAcls on the controller: generate, check the records, replay; Kafka's checks."""

from __future__ import annotations

import random

from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from kraft_engine.controller.results import ControllerResult
from kraft_engine.controller.security_control import AclControlManager
from kraft_engine.controller.timeline import SnapshotRegistry
from kraft_engine.metadata.authorizer import AclBinding
from kraft_engine.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord

TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED, ANY_PATTERN, MATCH = 3, 4, 1, 2
READ, WRITE, ALL, ANY_OP = 3, 4, 2, 1
ALLOW, DENY, ANY_PERMISSION = 3, 2, 1


def _creation(name: str, *, resource_type: int = TOPIC, pattern: int = LITERAL, principal: str = "User:alice",
              host: str = "*", operation: int = READ, permission: int = ALLOW) -> AclCreation:
    return AclCreation(resource_type=i8(resource_type), resource_name=name, resource_pattern_type=i8(pattern),
                       principal=principal, host=host, operation=i8(operation), permission_type=i8(permission))


def _filter(name: str | None = None, *, resource_type: int = 1, pattern: int = ANY_PATTERN,
            principal: str | None = None, operation: int = ANY_OP, permission: int = ANY_PERMISSION) -> DeleteAclsFilter:
    return DeleteAclsFilter(resource_type_filter=i8(resource_type), resource_name_filter=name,
                            pattern_type_filter=i8(pattern), principal_filter=principal, host_filter=None,
                            operation=i8(operation), permission_type=i8(permission))


def _replay(manager: AclControlManager, result: ControllerResult[object]) -> None:
    for offset, record in enumerate(result.records):
        if isinstance(record.record, AccessControlEntryRecord):
            manager.replay(record.record, offset)
        else:
            manager.replay_remove(record.record, offset)


def _create(manager: AclControlManager, *creations: AclCreation, seed: int = 1) -> list[ErrorCode]:
    result = manager.create_acls(CreateAclsRequest(creations=creations), rng=random.Random(seed))
    _replay(manager, result)
    return [r.error_code for r in result.response.results]


def test_created_acls_become_records_and_duplicates_make_none() -> None:
    manager = AclControlManager(SnapshotRegistry())
    result = manager.create_acls(CreateAclsRequest(creations=(
        _creation("orders"), _creation("orders"), _creation("pay", pattern=PREFIXED, operation=WRITE),
    )), rng=random.Random(7))
    assert [r.error_code for r in result.response.results] == [ErrorCode.none] * 3
    records = [r.record for r in result.records]
    assert len(records) == 2 and all(isinstance(r, AccessControlEntryRecord) for r in records)
    assert len({r.id for r in records}) == 2 and all(r.id.int != 0 for r in records)
    assert [(r.resource_name, r.pattern_type, r.operation) for r in records] == [
        ("orders", LITERAL, READ), ("pay", PREFIXED, WRITE)]
    _replay(manager, result)
    # The same ACL again: success, and no record (Kafka's createAcls).
    again = manager.create_acls(CreateAclsRequest(creations=(_creation("orders"),)), rng=random.Random(8))
    assert [r.error_code for r in again.response.results] == [ErrorCode.none] and not again.records
    assert {AclBinding.from_record(r).resource_name for r in manager.acls().values()} == {"orders", "pay"}


def test_invalid_acls_are_refused_one_by_one() -> None:
    manager = AclControlManager(SnapshotRegistry())
    codes = _create(manager, _creation("ok"), _creation("x", pattern=MATCH), _creation("", operation=READ),
                    _creation("c", resource_type=CLUSTER), _creation("t", principal="alice"),
                    _creation("t", operation=ANY_OP), _creation("t", permission=ANY_PERMISSION),
                    _creation("t", resource_type=1))
    assert codes == [ErrorCode.none] + [ErrorCode.invalid_request] * 7
    assert len(manager.acls()) == 1


def test_delete_lists_every_match_per_filter_and_removes_each_once() -> None:
    manager = AclControlManager(SnapshotRegistry())
    _create(manager, _creation("orders"), _creation("orders", principal="User:bob", operation=WRITE),
            _creation("ord", pattern=PREFIXED), _creation("g1", resource_type=GROUP))
    result = manager.delete_acls(DeleteAclsRequest(filters=(
        _filter("orders", resource_type=TOPIC, pattern=MATCH),  # the literal ones and the prefix "ord"
        _filter(principal="User:bob"),  # overlaps with the first
        _filter("nothing", resource_type=TOPIC),
        _filter(operation=0),  # UNKNOWN: refused
    )))
    results = result.response.filter_results
    assert [len(r.matching_acls) for r in results] == [3, 1, 0, 0]
    assert [r.error_code for r in results] == [ErrorCode.none] * 3 + [ErrorCode.invalid_request]
    assert sorted((m.resource_name, m.principal) for m in results[0].matching_acls) == [
        ("ord", "User:alice"), ("orders", "User:alice"), ("orders", "User:bob")]
    removals = [r.record for r in result.records]
    assert len(removals) == 3 and all(isinstance(r, RemoveAccessControlEntryRecord) for r in removals)
    _replay(manager, result)
    assert [AclBinding.from_record(r).resource_name for r in manager.acls().values()] == ["g1"]


def test_a_removal_of_an_unknown_acl_cannot_replay() -> None:
    manager = AclControlManager(SnapshotRegistry())
    _create(manager, _creation("orders"))
    [acl_id] = manager.acls()
    manager.replay_remove(RemoveAccessControlEntryRecord(id=acl_id), 10)
    try:
        manager.replay_remove(RemoveAccessControlEntryRecord(id=acl_id), 11)
    except RuntimeError as e:
        assert "no acl with that ID" in str(e)
    else:
        raise AssertionError("a second removal replayed")
