"""The authorizer's decisions (Kafka's StandardAuthorizer rules) against a brute-force reading of
the rules, Kafka's own documented cases, and the binding filters of DescribeAcls/DeleteAcls."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_engine.metadata.authorizer import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    AuthorizerConfig,
    PatternType,
    ResourceType,
    validate_new_acl,
)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
# A small world, so that generated ACLs often apply to the generated request (the interesting
# cases: several applicable ACLs, allow and deny together, implied operations).
OPERATIONS = [AclOperation.ALL, AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE,
              AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS]

bindings = st.builds(
    AclBinding,
    resource_type=st.sampled_from([TOPIC, TOPIC, GROUP]),
    resource_name=st.sampled_from(["*", "a", "ab", "abc", "b"]),
    pattern_type=st.sampled_from([LITERAL, PREFIXED]),
    principal=st.sampled_from(["User:alice", "User:bob", "User:*"]),
    host=st.sampled_from(["*", "*", "10.0.0.1", "10.0.0.2"]),
    operation=st.sampled_from(OPERATIONS),
    permission_type=st.sampled_from([ALLOW, DENY]),
)
requests = st.fixed_dictionaries({
    "principal": st.sampled_from(["User:alice", "User:bob", "User:carol"]),
    "host": st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    "operation": st.sampled_from([AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE,
                                  AclOperation.DESCRIBE_CONFIGS]),
    "resource_type": st.sampled_from([TOPIC, TOPIC, GROUP]),
    "resource_name": st.sampled_from(["a", "ab", "abc", "b", "*"]),
})


def reference(acls: list[AclBinding], config: AuthorizerConfig, **request: object) -> bool:
    """The rules as Kafka's documentation states them, by brute force over every ACL."""
    if request["principal"] in config.super_users:
        return True
    name = str(request["resource_name"])
    on_resource = [
        a for a in acls if a.resource_type == request["resource_type"] and (
            (a.pattern_type == LITERAL and a.resource_name in (name, "*"))
            or (a.pattern_type == PREFIXED and name.startswith(a.resource_name)))
    ]
    if not on_resource:
        return config.allow_everyone_if_no_acl_found
    mine = [a for a in on_resource if a.principal in (request["principal"], "User:*") and a.host in (request["host"], "*")]
    wanted = request["operation"]
    if any(a.permission_type == DENY and a.operation in (AclOperation.ALL, wanted) for a in mine):
        return False
    implied = {
        AclOperation.DESCRIBE: {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER},
        AclOperation.DESCRIBE_CONFIGS: {AclOperation.ALTER_CONFIGS},
    }.get(wanted, set())  # type: ignore[call-overload]
    return any(a.permission_type == ALLOW and (a.operation in (AclOperation.ALL, wanted) or a.operation in implied)
               for a in mine)


@settings(max_examples=300, deadline=None)
@given(acls=st.lists(bindings, max_size=12), request=requests, allow_everyone=st.booleans(),
       supers=st.sets(st.sampled_from(["User:alice", "User:carol"])))
def test_decisions_agree_with_the_rules_read_by_brute_force(acls: list[AclBinding], request: dict[str, object],
                                                            allow_everyone: bool, supers: set[str]) -> None:
    config = AuthorizerConfig(super_users=frozenset(supers), allow_everyone_if_no_acl_found=allow_everyone)
    assert Authorizer(acls, config).authorize(**request) == reference(acls, config, **request)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(acls=st.lists(bindings, max_size=12), request=requests)
def test_a_matching_deny_wins_over_any_allow(acls: list[AclBinding], request: dict[str, object]) -> None:
    deny = AclBinding(request["resource_type"], str(request["resource_name"]), LITERAL,  # type: ignore[arg-type]
                      str(request["principal"]), "*", request["operation"], DENY)  # type: ignore[arg-type]
    allow_all = AclBinding(deny.resource_type, "*", LITERAL, "User:*", "*", AclOperation.ALL, ALLOW)
    authorizer = Authorizer([*acls, allow_all, deny], AuthorizerConfig(allow_everyone_if_no_acl_found=True))
    assert not authorizer.authorize(**request)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(acls=st.lists(bindings, max_size=12), request=requests)
def test_a_super_user_is_allowed_whatever_the_acls(acls: list[AclBinding], request: dict[str, object]) -> None:
    config = AuthorizerConfig(super_users=frozenset({str(request["principal"])}))
    assert Authorizer(acls, config).authorize(**request)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(acls=st.lists(bindings, max_size=12), name=st.sampled_from(["a", "ab", "abc", "b", "*"]),
       resource_type=st.sampled_from([TOPIC, GROUP]))
def test_a_match_filter_selects_exactly_the_acls_that_apply_to_the_resource(
        acls: list[AclBinding], name: str, resource_type: ResourceType) -> None:
    matched = [a for a in acls if AclBindingFilter(resource_type, name, PatternType.MATCH).matches(a)]
    # An ACL applies iff removing it can change some decision about the resource; equivalently
    # it is a literal of the name or `*`, or a prefix of the name, of the same type.
    expected = [a for a in acls if a.resource_type == resource_type and (
        (a.pattern_type == LITERAL and a.resource_name in (name, "*"))
        or (a.pattern_type == PREFIXED and name.startswith(a.resource_name)))]
    assert matched == expected


def test_kafka_cases() -> None:
    acls = [
        AclBinding(TOPIC, "foo", LITERAL, "User:alice", "*", AclOperation.READ, ALLOW),
        AclBinding(TOPIC, "fo", PREFIXED, "User:bob", "*", AclOperation.WRITE, ALLOW),
        AclBinding(TOPIC, "foobar", LITERAL, "User:bob", "*", AclOperation.WRITE, DENY),
        AclBinding(TOPIC, "*", LITERAL, "User:*", "10.0.0.9", AclOperation.ALL, DENY),
        AclBinding(GROUP, "g", PREFIXED, "User:alice", "*", AclOperation.READ, ALLOW),
        AclBinding(CLUSTER, "kafka-cluster", LITERAL, "User:alice", "*", AclOperation.ALTER_CONFIGS, ALLOW),
    ]
    authorizer = Authorizer(acls, AuthorizerConfig(super_users=frozenset({"User:admin"})))

    def may(principal: str, operation: AclOperation, resource_type: ResourceType, name: str,
            host: str = "10.0.0.1") -> bool:
        return authorizer.authorize(principal=principal, host=host, operation=operation,
                                    resource_type=resource_type, resource_name=name)

    assert may("User:alice", AclOperation.READ, TOPIC, "foo")
    assert may("User:alice", AclOperation.DESCRIBE, TOPIC, "foo")  # READ implies DESCRIBE
    assert not may("User:alice", AclOperation.WRITE, TOPIC, "foo")
    assert not may("User:alice", AclOperation.READ, TOPIC, "foo", host="10.0.0.9")  # the wildcard deny
    assert may("User:bob", AclOperation.WRITE, TOPIC, "fox")  # prefixed
    assert not may("User:bob", AclOperation.WRITE, TOPIC, "foobar")  # deny wins
    assert not may("User:bob", AclOperation.WRITE, TOPIC, "bar")  # no ACL for bar: denied by default
    assert may("User:alice", AclOperation.READ, GROUP, "group-1")
    assert may("User:alice", AclOperation.DESCRIBE_CONFIGS, CLUSTER, "kafka-cluster")  # ALTER_CONFIGS implies it
    assert not may("User:alice", AclOperation.ALTER, CLUSTER, "kafka-cluster")
    assert may("User:admin", AclOperation.ALL, TOPIC, "anything", host="10.0.0.9")
    # A DENY on READ does not deny DESCRIBE (implication is for ALLOW only).
    deny_read = Authorizer([AclBinding(TOPIC, "t", LITERAL, "User:*", "*", AclOperation.READ, DENY),
                            AclBinding(TOPIC, "t", LITERAL, "User:*", "*", AclOperation.DESCRIBE, ALLOW)],
                           AuthorizerConfig())
    assert deny_read.authorize(principal="User:x", host="h", operation=AclOperation.DESCRIBE,
                               resource_type=TOPIC, resource_name="t")


def test_allow_everyone_applies_only_to_resources_without_acls() -> None:
    authorizer = Authorizer([AclBinding(TOPIC, "guarded", LITERAL, "User:alice", "*", AclOperation.READ, ALLOW)],
                            AuthorizerConfig(allow_everyone_if_no_acl_found=True))
    assert authorizer.authorize(principal="User:bob", host="h", operation=AclOperation.WRITE,
                                resource_type=TOPIC, resource_name="open")
    assert not authorizer.authorize(principal="User:bob", host="h", operation=AclOperation.READ,
                                    resource_type=TOPIC, resource_name="guarded")


def test_authorize_by_resource_type() -> None:
    def may(acls: list[AclBinding]) -> bool:
        return Authorizer(acls, AuthorizerConfig()).authorize_by_resource_type(
            principal="User:p", host="h", operation=AclOperation.WRITE, resource_type=TOPIC)

    allow_t = AclBinding(TOPIC, "t1", LITERAL, "User:p", "*", AclOperation.WRITE, ALLOW)
    assert may([allow_t])
    assert not may([])
    assert not may([allow_t, AclBinding(TOPIC, "t", PREFIXED, "User:p", "*", AclOperation.WRITE, DENY)])
    assert not may([allow_t, AclBinding(TOPIC, "*", LITERAL, "User:*", "*", AclOperation.ALL, DENY)])
    assert may([allow_t, AclBinding(TOPIC, "t2", LITERAL, "User:p", "*", AclOperation.WRITE, DENY)])
    assert may([AclBinding(TOPIC, "x", PREFIXED, "User:*", "*", AclOperation.ALL, ALLOW)])
    assert not may([AclBinding(TOPIC, "x", PREFIXED, "User:q", "*", AclOperation.ALL, ALLOW)])


def test_filters_and_validation() -> None:
    acl = AclBinding(TOPIC, "orders", PREFIXED, "User:alice", "*", AclOperation.READ, ALLOW)
    assert AclBindingFilter().matches(acl)
    assert AclBindingFilter(TOPIC, "orders", PatternType.ANY).matches(acl)
    assert not AclBindingFilter(TOPIC, "orders", LITERAL).matches(acl)
    assert AclBindingFilter(TOPIC, "orders-eu", PatternType.MATCH).matches(acl)
    assert not AclBindingFilter(TOPIC, "order", PatternType.MATCH).matches(acl)
    assert not AclBindingFilter(principal="User:bob").matches(acl)
    assert AclBindingFilter(operation=AclOperation.UNKNOWN).unknown_element() is not None
    assert validate_new_acl(acl) is None
    record = acl.to_record(uuid.UUID(int=7))
    assert AclBinding.from_record(record) == acl
    for broken, reason in [
        (AclBinding(ResourceType.ANY, "x", LITERAL, "User:a", "*", AclOperation.READ, ALLOW), "resourceType"),
        (AclBinding(TOPIC, "x", PatternType.MATCH, "User:a", "*", AclOperation.READ, ALLOW), "patternType"),
        (AclBinding(TOPIC, "x", LITERAL, "User:a", "*", AclOperation.ANY, ALLOW), "operation"),
        (AclBinding(TOPIC, "x", LITERAL, "User:a", "*", AclOperation.READ, AclPermissionType.ANY), "permissionType"),
        (AclBinding(TOPIC, "", LITERAL, "User:a", "*", AclOperation.READ, ALLOW), "empty"),
        (AclBinding(CLUSTER, "c", LITERAL, "User:a", "*", AclOperation.ALTER, ALLOW), "kafka-cluster"),
        (AclBinding(TOPIC, "x", LITERAL, "alice", "*", AclOperation.READ, ALLOW), "principal"),
    ]:
        message = validate_new_acl(broken)
        assert message is not None and reason in message


def test_config_from_properties() -> None:
    config = AuthorizerConfig.from_properties({"super.users": "User:admin; User:CN=broker,O=x",
                                               "allow.everyone.if.no.acl.found": "true"})
    assert config.super_users == {"User:admin", "User:CN=broker,O=x"}
    assert config.allow_everyone_if_no_acl_found
    assert AuthorizerConfig.from_properties({}) == AuthorizerConfig()


class _AllowWins(Authorizer):
    """A deliberately broken variant: an ALLOW is honoured even when a DENY matches."""

    def authorize(self, **request: object) -> bool:  # type: ignore[override]
        allowing = Authorizer(
            [a for a in self._by_type.get(request["resource_type"], ())  # type: ignore[call-overload]
             if a.permission_type == ALLOW], self.config)
        return allowing.authorize(**request) or super().authorize(**request)  # type: ignore[arg-type]


def test_fault_a_variant_where_allow_beats_deny_is_caught() -> None:
    """The brute-force comparison above finds the broken variant's wrong decision."""
    from hypothesis import find

    config = AuthorizerConfig()
    found = find(st.tuples(st.lists(bindings, max_size=12), requests),
                 lambda case: _AllowWins(case[0], config).authorize(**case[1]) != reference(case[0], config, **case[1]),
                 settings=settings(max_examples=2000, deadline=None, database=None))
    acls, _request = found
    assert any(a.permission_type == DENY for a in acls)
