"""ACLs and the decision they make: Kafka's StandardAuthorizer, as pure functions of the ACL image.

Kafka keeps ACLs as AccessControlEntryRecords in the metadata log, and every node's authorizer
answers from the ACLs of its metadata image. The rules this module follows are Kafka's
(`StandardAuthorizerData`):

- a principal named in `super.users` is allowed everything;
- the ACLs that apply to a resource are the LITERAL ones with its name, the LITERAL ones named
  `*`, and the PREFIXED ones whose name starts its name, of the same resource type;
- of those, an ACL applies to a request when its principal is the requester's or `User:*`, its
  host is the requester's or `*`, and its operation is the one asked, or ALL, or (ALLOW only) one
  that implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies
  DESCRIBE_CONFIGS;
- a matching DENY wins over every ALLOW; then a matching ALLOW allows;
- with no match, a resource with no ACLs at all follows `allow.everyone.if.no.acl.found`
  (default false), and a resource with ACLs (for anybody) is denied.

Filters (DescribeAcls, DeleteAcls, `kraft acls --list/--remove`) match bindings as Kafka's
AclBindingFilter does, and new ACLs are checked as Kafka's controller checks them. Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from kraft_engine.records.metadata_records import AccessControlEntryRecord

__all__ = [
    "NOT_ASKED",
    "STANDARD_AUTHORIZER",
    "SUPPORTED_OPERATIONS",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "Authorizer",
    "AuthorizerConfig",
    "PatternType",
    "ResourceType",
    "operations_bitfield",
    "validate_new_acl",
]

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
"""The `authorizer.class.name` that turns authorization on (any other non-empty name is refused)."""
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(IntEnum):
    """Kafka's ResourceType codes (org.apache.kafka.common.resource.ResourceType)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


SUPPORTED_OPERATIONS: Mapping[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}
"""The operations an `*_authorized_operations` field reports on, per resource type (Kafka's
AclEntry.supportedOperations)."""

NOT_ASKED = -2147483648
"""An `*_authorized_operations` field the request did not ask for (the schema's default, Int.MinValue)."""


def operations_bitfield(operations: Iterable[AclOperation]) -> int:
    """Kafka's Utils.to32BitField: bit `code` set for each operation, as a signed 32-bit value."""
    field = 0
    for operation in operations:
        field |= 1 << int(operation)
    return field - (1 << 32) if field >= 1 << 31 else field


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                               AclOperation.DELETE, AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


def _enum(kind: type[IntEnum], value: int) -> IntEnum:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # every one of these enums has UNKNOWN = 0, as Kafka maps unknown codes


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's AclBinding)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def of(cls, *, resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
           operation: int, permission_type: int) -> AclBinding:
        return cls(ResourceType(_enum(ResourceType, resource_type)), resource_name,
                   PatternType(_enum(PatternType, pattern_type)), principal, host,
                   AclOperation(_enum(AclOperation, operation)),
                   AclPermissionType(_enum(AclPermissionType, permission_type)))

    @classmethod
    def from_record(cls, record: AccessControlEntryRecord) -> AclBinding:
        return cls.of(resource_type=record.resource_type, resource_name=record.resource_name,
                      pattern_type=record.pattern_type, principal=record.principal, host=record.host,
                      operation=record.operation, permission_type=record.permission_type)

    def to_record(self, acl_id: uuid.UUID) -> AccessControlEntryRecord:
        return AccessControlEntryRecord(
            id=acl_id, resource_type=int(self.resource_type), resource_name=self.resource_name,
            pattern_type=int(self.pattern_type), principal=self.principal, host=self.host,
            operation=int(self.operation), permission_type=int(self.permission_type))

    def sort_key(self) -> tuple[int, str, int, str, str, int, int]:
        return (int(self.resource_type), self.resource_name, int(self.pattern_type), self.principal, self.host,
                int(self.operation), int(self.permission_type))


def validate_new_acl(binding: AclBinding) -> str | None:
    """Why Kafka's controller refuses to create `binding` (INVALID_REQUEST), or None."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {binding.resource_type.name}"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {binding.pattern_type.name}"
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {binding.operation.name}"
    if binding.permission_type in (AclPermissionType.UNKNOWN, AclPermissionType.ANY):
        return f"Invalid permissionType {binding.permission_type.name}"
    if not binding.resource_name:
        return "Resource name should not be empty"
    if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is " + CLUSTER_NAME
    kind, sep, name = binding.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{binding.principal}` (no colon is found separating principal type from principal name)"
    if not binding.host:
        return "Host should not be empty"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: None (or ANY) matches everything in its field. Pattern type MATCH
    matches the ACLs that apply to the named resource (literal equal, literal `*`, prefixes)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(cls, *, resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
           host: str | None, operation: int, permission_type: int) -> AclBindingFilter:
        return cls(ResourceType(_enum(ResourceType, resource_type)), resource_name,
                   PatternType(_enum(PatternType, pattern_type)), principal, host,
                   AclOperation(_enum(AclOperation, operation)),
                   AclPermissionType(_enum(AclPermissionType, permission_type)))

    def unknown_element(self) -> str | None:
        """Kafka refuses a filter with an UNKNOWN element (INVALID_REQUEST)."""
        for label, value in (("resource type", self.resource_type), ("pattern type", self.pattern_type),
                             ("operation", self.operation), ("permission type", self.permission_type)):
            if value == 0:
                return f"The AclBindingFilter must not contain UNKNOWN elements ({label})"
        return None

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        if not self._matches_pattern(binding):
            return False
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation not in (AclOperation.ANY, binding.operation):
            return False
        return self.permission_type in (AclPermissionType.ANY, binding.permission_type)

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is None:
                return True
            if binding.pattern_type == PatternType.LITERAL:
                return binding.resource_name in (self.resource_name, WILDCARD)
            if binding.pattern_type == PatternType.PREFIXED:
                return self.resource_name.startswith(binding.resource_name)
            return False
        if self.pattern_type not in (PatternType.ANY, binding.pattern_type):
            return False
        return self.resource_name is None or self.resource_name == binding.resource_name


@dataclass(frozen=True, slots=True)
class AuthorizerConfig:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> AuthorizerConfig:
        """`super.users` (principals separated by `;`) and `allow.everyone.if.no.acl.found`."""
        users = frozenset(u.strip() for u in properties.get("super.users", "").split(";") if u.strip())
        allow = properties.get("allow.everyone.if.no.acl.found", "false").strip().lower() == "true"
        return cls(super_users=users, allow_everyone_if_no_acl_found=allow)


_Key = tuple[ResourceType, str]


class Authorizer:
    """The decisions of one ACL image (build one per image; it indexes the ACLs by resource)."""

    def __init__(self, acls: Iterable[AclBinding], config: AuthorizerConfig) -> None:
        self.config = config
        self._literal: dict[_Key, list[AclBinding]] = defaultdict(list)
        self._prefixed: dict[_Key, list[AclBinding]] = defaultdict(list)
        self._by_type: dict[ResourceType, list[AclBinding]] = defaultdict(list)
        for acl in acls:
            if acl.pattern_type == PatternType.LITERAL:
                self._literal[(acl.resource_type, acl.resource_name)].append(acl)
            elif acl.pattern_type == PatternType.PREFIXED:
                self._prefixed[(acl.resource_type, acl.resource_name)].append(acl)
            else:
                continue  # an ACL Kafka would never have written applies to nothing
            self._by_type[acl.resource_type].append(acl)

    @classmethod
    def from_records(cls, records: Iterable[AccessControlEntryRecord], config: AuthorizerConfig) -> Authorizer:
        return cls((AclBinding.from_record(r) for r in records), config)

    def _applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        found: list[AclBinding] = []
        found.extend(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found.extend(self._literal.get((resource_type, WILDCARD), ()))
        if self._prefixed:
            for end in range(1, len(name) + 1):
                found.extend(self._prefixed.get((resource_type, name[:end]), ()))
        return found

    def authorize(self, *, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  resource_name: str) -> bool:
        if principal in self.config.super_users:
            return True
        applicable = self._applicable(resource_type, resource_name)
        if not applicable:
            return self.config.allow_everyone_if_no_acl_found
        allowed = False
        for acl in applicable:
            if acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.host not in (host, WILDCARD):
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.operation in (AclOperation.ALL, operation):
                    return False
            elif acl.permission_type == AclPermissionType.ALLOW and _allow_covers(acl.operation, operation):
                allowed = True
        return allowed

    def authorize_by_resource_type(self, *, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: may the principal do `operation` on at least
        one resource of the type? (InitProducerId for an idempotent producer asks WRITE on any topic.)"""
        # Kafka's default first asks about a resource named "hardcode": that settles super users
        # and allow.everyone.if.no.acl.found for a type without applicable ACLs.
        if self.authorize(principal=principal, host=host, operation=operation, resource_type=resource_type,
                          resource_name="hardcode"):
            return True
        deny_literals: set[str] = set()
        deny_prefixes: set[str] = set()
        allow_literals: list[str] = []
        allow_prefixes: list[str] = []
        for acl in self._by_type.get(resource_type, ()):
            if acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.host not in (host, WILDCARD):
                continue
            if acl.operation not in (AclOperation.ALL, operation):
                continue
            literal = acl.pattern_type == PatternType.LITERAL
            if acl.permission_type == AclPermissionType.DENY:
                if literal and acl.resource_name == WILDCARD:
                    return False
                (deny_literals if literal else deny_prefixes).add(acl.resource_name)
            elif acl.permission_type == AclPermissionType.ALLOW:
                (allow_literals if literal else allow_prefixes).append(acl.resource_name)
        for name in allow_literals:
            if name in deny_literals or any(name.startswith(p) for p in deny_prefixes):
                continue
            return True
        return any(not any(name.startswith(p) for p in deny_prefixes) for name in allow_prefixes)


def _allow_covers(granted: AclOperation, wanted: AclOperation) -> bool:
    if granted in (AclOperation.ALL, wanted):
        return True
    if wanted == AclOperation.DESCRIBE:
        return granted in _IMPLIES_DESCRIBE
    if wanted == AclOperation.DESCRIBE_CONFIGS:
        return granted in _IMPLIES_DESCRIBE_CONFIGS
    return False
