"""spec.tls and spec.users as pure rules: rendered keys, spec problems, the ACL diff (as invariants),
renewal and the CA switch."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_operator.model import UserSpec
from kraft_operator.plan import desired_nodes, render_config, validate_spec
from kraft_operator.plan.facts import Observed
from kraft_operator.plan.security import (
    DAY_MS,
    AclBinding,
    AclChanges,
    CaSwitchPhase,
    acl_changes,
    ca_switch_step,
    certificate_due,
    desired_acls,
    user_principal,
)

from .builders import cluster_from

SECURED = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: sec, namespace: prod}
spec:
  nodePools:
    - {name: controllers, roles: [controller], replicas: 3, storage: {volumes: [{id: 0, size: 1Gi}]}}
    - {name: brokers, roles: [broker], replicas: 3, storage: {volumes: [{id: 0, size: 1Gi}]}}
  listeners:
    - {name: SCRAM, port: 9094, protocol: SASL_SSL}
    - {name: MTLS, port: 9095, protocol: SSL}
  tls: {}
  users:
    - name: alice
      authentication: scram-sha-512
      acls:
        - resource: {type: topic, name: orders}
          operations: [Write, Describe]
        - resource: {type: group, name: app-, patternType: prefix}
          operations: [Read]
          type: deny
    - name: bob
      authentication: tls
      acls:
        - resource: {type: cluster}
          operations: [IdempotentWrite]
"""


def _rendered(cluster, layout):
    nodes = desired_nodes(namespace="prod", cluster="sec", spec=cluster.spec, status=None)
    controllers = [n for n in nodes if n.is_controller]
    return {n.ref.node_id: render_config(n, spec=cluster.spec, controllers=controllers, layout=layout) for n in nodes}


def test_a_secured_broker_renders_kafkas_tls_sasl_and_authorizer_keys(layout) -> None:
    rendered = _rendered(cluster_from(SECURED), layout)
    broker = rendered[3]
    assert broker["listener.security.protocol.map"] == "CONTROLLER:SSL,REPLICATION:SSL,SCRAM:SASL_SSL,MTLS:SSL"
    assert broker["listeners"] == "SCRAM://:9094,MTLS://:9095,REPLICATION://:9091"
    assert broker["inter.broker.listener.name"] == "REPLICATION"
    assert broker["ssl.keystore.location"] == "/tls/3/keystore.pem"
    assert broker["ssl.truststore.location"] == "/tls/3/truststore.pem"
    assert broker["ssl.client.auth"] == "required"
    assert broker["listener.name.mtls.ssl.truststore.location"] == "/tls/3/clients-truststore.pem"
    assert broker["listener.name.scram.ssl.client.auth"] == "none"
    assert broker["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert broker["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert broker["super.users"] == "User:CN=sec-kraft,O=kraftwerk.io;User:CN=kraftwerk-operator,O=kraftwerk.io"
    controller = rendered[0]
    assert controller["listener.security.protocol.map"].startswith("CONTROLLER:SSL,")
    assert controller["ssl.client.auth"] == "required"
    assert "inter.broker.listener.name" not in controller


def test_an_override_cannot_weaken_the_tls_keys(layout) -> None:
    cluster = cluster_from(SECURED, config={"ssl.client.auth": "none", "allow.everyone.if.no.acl.found": "true"})
    broker = _rendered(cluster, layout)[3]
    assert broker["ssl.client.auth"] == "required"
    assert broker["allow.everyone.if.no.acl.found"] == "false"


def test_without_tls_nothing_changes(layout) -> None:
    plain = SECURED.split("  listeners:", maxsplit=1)[0]
    broker = _rendered(cluster_from(plain), layout)[3]
    assert broker["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    assert not any(k.startswith(("ssl.", "sasl.", "authorizer.", "super.")) for k in broker)


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"tls": None}, "spec.listeners[0].protocol", "SASL_SSL needs spec.tls"),
    ({"tls": None}, "spec.users[0]", "users need spec.tls"),
    ({"listeners": [{"name": "MTLS", "port": 9095, "protocol": "SSL"}]}, "spec.users[0].authentication",
     "scram-sha-512 needs a listener with protocol SASL_SSL"),
    ({"listeners": [{"name": "SCRAM", "port": 9094, "protocol": "SASL_SSL"}]}, "spec.users[1].authentication",
     "tls needs a listener with protocol SSL"),
    ({"listeners": [{"name": "REPLICATION", "port": 9094, "protocol": "SASL_SSL"}]}, "spec.listeners[0].name",
     "REPLICATION is the brokers' own"),
    ({"listeners": [{"name": "SCRAM", "port": 9091, "protocol": "SASL_SSL"}]}, "spec.listeners[0].port",
     "spec.tls.replicationPort"),
    ({"tls": {"renewalDays": 400}}, "spec.tls.renewalDays", "must be below validityDays"),
    ({"tls": {"clusterCa": {"validityDays": 30, "renewalDays": 30}}}, "spec.tls.clusterCa.renewalDays", "below"),
    ({"tls": {"validityDays": 500}}, "spec.tls.validityDays", "outlive the cluster CA"),
    ({"listeners": [{"name": "P", "port": 9094, "certificate": {"secretName": "mine"}},
                    {"name": "S", "port": 9095, "protocol": "SASL_SSL"}, {"name": "M", "port": 9096, "protocol": "SSL"}]},
     "spec.listeners[0].certificate", "PLAINTEXT listener presents no certificate"),
])
def test_bad_security_specs_are_refused_naming_the_field(change, field, words, layout, rules) -> None:
    cluster = cluster_from(SECURED, **change)
    nodes = desired_nodes(namespace="prod", cluster="sec", spec=cluster.spec, status=None)
    problems = validate_spec(spec=cluster.spec, status=None, observed=Observed(), nodes=nodes, layout=layout,
                             rules=rules)
    assert any(p.field == field and words in p.message for p in problems), problems


def test_a_secured_spec_passes_validation_and_the_engines_own_config_check(layout, rules) -> None:
    cluster = cluster_from(SECURED)
    nodes = desired_nodes(namespace="prod", cluster="sec", spec=cluster.spec, status=None)
    assert validate_spec(spec=cluster.spec, status=None, observed=Observed(), nodes=nodes, layout=layout,
                         rules=rules) == []


def test_desired_acls_name_the_principals_as_kafka_does() -> None:
    cluster = cluster_from(SECURED)
    acls = desired_acls(cluster.spec.users)
    assert AclBinding("TOPIC", "orders", "LITERAL", "User:alice", "*", "WRITE", "ALLOW") in acls
    assert AclBinding("GROUP", "app-", "PREFIXED", "User:alice", "*", "READ", "DENY") in acls
    assert AclBinding("CLUSTER", "kafka-cluster", "LITERAL", "User:CN=bob", "*", "IDEMPOTENT_WRITE", "ALLOW") in acls
    assert len(acls) == 4


_PRINCIPALS = ["User:alice", "User:CN=bob", "User:carol", "User:someone-else", "User:CN=kraftwerk-operator"]
_bindings = st.builds(
    AclBinding,
    resource_type=st.sampled_from(["TOPIC", "GROUP", "CLUSTER"]),
    resource_name=st.sampled_from(["orders", "app-", "*", "kafka-cluster"]),
    pattern_type=st.sampled_from(["LITERAL", "PREFIXED"]),
    principal=st.sampled_from(_PRINCIPALS),
    host=st.sampled_from(["*", "10.0.0.1"]),
    operation=st.sampled_from(["READ", "WRITE", "DESCRIBE", "ALL"]),
    permission=st.sampled_from(["ALLOW", "DENY"]),
)


def _apply(existing: frozenset[AclBinding], changes: AclChanges) -> frozenset[AclBinding]:
    return (existing - set(changes.delete)) | set(changes.create)


@settings(max_examples=300, deadline=None)
@given(existing=st.frozensets(_bindings, max_size=25), desired=st.frozensets(_bindings, max_size=25),
       managed=st.frozensets(st.sampled_from(_PRINCIPALS[:3]), min_size=1))
def test_the_acl_diff_makes_managed_acls_exactly_desired_and_leaves_every_other_acl(existing, desired, managed) -> None:
    desired = frozenset(b for b in desired if b.principal in managed)
    changes = acl_changes(desired=desired, existing=existing, managed_principals=managed)
    after = _apply(existing, changes)
    assert {b for b in after if b.principal in managed} == desired
    assert {b for b in after if b.principal not in managed} == {b for b in existing if b.principal not in managed}
    assert not set(changes.create) & set(changes.delete)
    assert not set(changes.create) & existing, "an ACL that exists is never created again"
    assert set(changes.delete) <= existing, "only ACLs that exist are deleted"
    # A second pass over the result changes nothing (the reconcile settles).
    assert acl_changes(desired=desired, existing=after, managed_principals=managed).empty


def test_desired_acls_of_an_unmanaged_principal_are_refused() -> None:
    foreign = AclBinding("TOPIC", "t", "LITERAL", "User:mallory", "*", "READ", "ALLOW")
    with pytest.raises(ValueError, match="User:mallory"):
        acl_changes(desired=[foreign], existing=[], managed_principals=["User:alice"])


def test_fault_a_diff_that_forgets_the_principal_filter_is_caught() -> None:
    """The invariant test's check, against a deliberately broken variant that deletes every ACL
    not desired: the operator's own ACLs and a stranger's would be wiped."""

    def broken(*, desired, existing, managed_principals):
        wanted, present = frozenset(desired), frozenset(existing)
        return AclChanges(create=tuple(sorted(wanted - present)), delete=tuple(sorted(present - wanted)))

    existing = frozenset({AclBinding("TOPIC", "t", "LITERAL", "User:someone-else", "*", "READ", "ALLOW")})
    changes = broken(desired=frozenset(), existing=existing, managed_principals={"User:alice"})
    after = _apply(existing, changes)
    assert {b for b in after if b.principal != "User:alice"} != existing  # the invariant above would fail
    good = acl_changes(desired=frozenset(), existing=existing, managed_principals={"User:alice"})
    assert _apply(existing, good) == existing


def test_user_principals() -> None:
    assert user_principal(UserSpec(name="alice", authentication="scram-sha-512")) == "User:alice"
    assert user_principal(UserSpec(name="bob", authentication="tls")) == "User:CN=bob"


def test_a_certificate_is_due_inside_its_renewal_window() -> None:
    now = 1_000 * DAY_MS
    assert not certificate_due(not_after_ms=now + 31 * DAY_MS, now_ms=now, renewal_days=30)
    assert certificate_due(not_after_ms=now + 30 * DAY_MS, now_ms=now, renewal_days=30)
    assert certificate_due(not_after_ms=now - 1, now_ms=now, renewal_days=30)


def test_a_ca_switch_walks_its_three_steps_and_waits_for_the_cluster_to_settle() -> None:
    phase = CaSwitchPhase.NONE
    assert ca_switch_step(phase=phase, ca_due=False, settled=True) is CaSwitchPhase.NONE
    phase = ca_switch_step(phase=phase, ca_due=True, settled=False)
    assert phase is CaSwitchPhase.TRUST_BOTH
    seen = []
    for settled in (False, False, True, False, True):
        phase = ca_switch_step(phase=phase, ca_due=False, settled=settled)
        seen.append(phase)
    assert seen == [CaSwitchPhase.TRUST_BOTH, CaSwitchPhase.TRUST_BOTH, CaSwitchPhase.NEW_CERTIFICATES,
                    CaSwitchPhase.NEW_CERTIFICATES, CaSwitchPhase.NONE]


def test_bindings_are_values() -> None:
    binding = AclBinding("TOPIC", "t", "LITERAL", "User:a", "*", "READ", "ALLOW")
    assert dataclasses.replace(binding) == binding and hash(dataclasses.replace(binding)) == hash(binding)
