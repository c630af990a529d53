"""What `spec.tls` and `spec.users` mean, as pure data: Secret names, certificate subjects and
principals, the TLS keys of a node's server.properties, the ACL diff and the renewal rules.

The shell (`kraft_operator.tls_material`, `kraft_operator.users`) generates keys and certificates
and talks to the cluster; everything it decides comes from here, so the rules can be tested as
invariants without a CA or a socket:

- Nodes and the operator authenticate with certificates from the cluster CA, on the controller
  listener and the brokers' REPLICATION listener (SSL, `ssl.client.auth=required`). Every node
  carries the same subject (as Strimzi's brokers do) and the operator its own; both are
  `super.users`, and the authorizer (Kafka's StandardAuthorizer) is on whenever TLS is.
- A client listener is PLAINTEXT, SSL (client certificates from the clients CA: users with
  `authentication: tls`, principal `User:CN=<name>`) or SASL_SSL (SCRAM-SHA-512: users with
  `authentication: scram-sha-512`, principal `User:<name>`).
- The operator owns exactly the ACLs whose principal is one of its users' (listed in the spec, or
  still holding a Secret): `acl_changes` creates the missing ones and deletes the others, and never
  touches an ACL of any other principal.
- A certificate is renewed once it expires within the renewal window; a CA the operator generated
  is replaced through a switch in which nodes trust the old and the new CA (`ca_switch_step`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from kraft_operator.model import KRaftClusterSpec, UserSpec
from kraft_operator.plan.facts import Layout, NodeRef

__all__ = [
    "CLIENTS_TRUSTSTORE_KEY",
    "DAY_MS",
    "KEYSTORE_KEY",
    "OPERATOR_COMMON_NAME",
    "ORGANIZATION",
    "REPLICATION_LISTENER",
    "STANDARD_AUTHORIZER",
    "TRUSTSTORE_KEY",
    "AclBinding",
    "AclChanges",
    "CaSwitchPhase",
    "acl_changes",
    "ca_switch_step",
    "certificate_due",
    "clients_ca_secret",
    "cluster_ca_secret",
    "desired_acls",
    "issuing_ca_is_new",
    "listener_keystore_key",
    "node_common_name",
    "node_principal",
    "node_secret",
    "operator_principal",
    "operator_secret",
    "security_problems",
    "security_properties",
    "super_users",
    "trusted_in",
    "user_principal",
    "user_secret",
]

REPLICATION_LISTENER = "REPLICATION"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ORGANIZATION = "kraftwerk.io"
OPERATOR_COMMON_NAME = "kraftwerk-operator"
DAY_MS = 86_400_000

# Keys of a node's Secret (mounted at `Layout.tls_dir`): its PEM keystore (key, then certificate
# chain), the cluster CA(s) it trusts, the clients CA(s) its SSL client listeners trust, and the
# keystore of each client listener that brings its own certificate.
KEYSTORE_KEY = "keystore.pem"
TRUSTSTORE_KEY = "truststore.pem"
CLIENTS_TRUSTSTORE_KEY = "clients-truststore.pem"


def listener_keystore_key(listener: str) -> str:
    return f"listener-{listener.lower()}-keystore.pem"


def cluster_ca_secret(cluster: str) -> str:
    return f"{cluster}-cluster-ca"


def clients_ca_secret(cluster: str) -> str:
    return f"{cluster}-clients-ca"


def node_secret(cluster: str, node_id: int) -> str:
    return f"{cluster}-node-{node_id}-tls"


def operator_secret(cluster: str) -> str:
    return f"{cluster}-operator-tls"


def user_secret(cluster: str, user: str) -> str:
    return f"{cluster}-user-{user}"


def node_common_name(cluster: str) -> str:
    return f"{cluster}-kraft"


def _dn(common_name: str) -> str:
    # As the engine and Kafka print a certificate's subject (RFC 4514: the last RDN first), with
    # the certificates made as `kraft_operator.certificates` makes them: O, then CN.
    return f"CN={common_name},O={ORGANIZATION}"


def node_principal(cluster: str) -> str:
    return f"User:{_dn(node_common_name(cluster))}"


def operator_principal() -> str:
    return f"User:{_dn(OPERATOR_COMMON_NAME)}"


def user_principal(user: UserSpec) -> str:
    """`User:<name>` for SCRAM; `User:CN=<name>` for a client certificate (its only subject RDN)."""
    return f"User:CN={user.name}" if user.authentication == "tls" else f"User:{user.name}"


def super_users(cluster: str) -> str:
    return f"{node_principal(cluster)};{operator_principal()}"


def security_properties(
    *, node_ref: NodeRef, is_broker: bool, spec: KRaftClusterSpec, layout: Layout, controller_listener: str
) -> dict[str, str]:
    """The TLS, SASL and authorizer keys of a node's server.properties (none without spec.tls).
    They replace the plaintext protocol map and the inter-broker listener of the base rendering."""
    if spec.tls is None:
        return {}
    tls_dir = layout.tls_dir(node_ref)
    protocols = [f"{controller_listener}:SSL"]
    properties = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": f"{tls_dir}/{KEYSTORE_KEY}",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": f"{tls_dir}/{TRUSTSTORE_KEY}",
        "ssl.client.auth": "required",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": super_users(node_ref.cluster),
        "allow.everyone.if.no.acl.found": "false",
    }
    if is_broker:
        protocols.append(f"{REPLICATION_LISTENER}:SSL")
        properties["inter.broker.listener.name"] = REPLICATION_LISTENER
        for listener in spec.listeners:
            protocols.append(f"{listener.name}:{listener.protocol}")
            prefix = f"listener.name.{listener.name.lower()}."
            if listener.protocol == "SSL":
                properties[prefix + "ssl.truststore.location"] = f"{tls_dir}/{CLIENTS_TRUSTSTORE_KEY}"
            elif listener.protocol == "SASL_SSL":
                properties[prefix + "ssl.client.auth"] = "none"
                properties[prefix + "sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
            if listener.certificate is not None and listener.protocol != "PLAINTEXT":
                properties[prefix + "ssl.keystore.location"] = f"{tls_dir}/{listener_keystore_key(listener.name)}"
        if any(listener.protocol == "SASL_SSL" for listener in spec.listeners):
            properties["sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
    else:
        protocols += [f"{listener.name}:{listener.protocol}" for listener in spec.listeners]
    properties["listener.security.protocol.map"] = ",".join(protocols)
    return properties


def security_problems(spec: KRaftClusterSpec) -> list[tuple[str, str]]:
    """(field, message) for every TLS or user rule the spec breaks."""
    problems: list[tuple[str, str]] = []
    protocols = {listener.protocol for listener in spec.listeners}
    for i, listener in enumerate(spec.listeners):
        field = f"spec.listeners[{i}]"
        if listener.protocol != "PLAINTEXT" and spec.tls is None:
            problems.append((f"{field}.protocol", f"{listener.protocol} needs spec.tls (the cluster's CAs)"))
        if listener.certificate is not None and listener.protocol == "PLAINTEXT":
            problems.append((f"{field}.certificate", "a PLAINTEXT listener presents no certificate"))
        if spec.tls is not None and listener.name == REPLICATION_LISTENER:
            problems.append((f"{field}.name", f"{REPLICATION_LISTENER} is the brokers' own mTLS listener under spec.tls"))
        if spec.tls is not None and listener.port == spec.tls.replication_port:
            problems.append((f"{field}.port", f"port {listener.port} is spec.tls.replicationPort"))
    if spec.tls is not None:
        tls = spec.tls
        if tls.replication_port == spec.controller_port:
            problems.append(("spec.tls.replicationPort", f"port {tls.replication_port} is spec.controllerPort"))
        if len(spec.listeners) > 7:
            problems.append(("spec.listeners", "at most 7 client listeners beside the REPLICATION listener"))
        for name, ca in (("clusterCa", tls.cluster_ca), ("clientsCa", tls.clients_ca)):
            if ca.renewal_days >= ca.validity_days:
                problems.append((f"spec.tls.{name}.renewalDays",
                                 f"{ca.renewal_days} must be below validityDays ({ca.validity_days})"))
        if tls.renewal_days >= tls.validity_days:
            problems.append(("spec.tls.renewalDays", f"{tls.renewal_days} must be below validityDays ({tls.validity_days})"))
        if tls.validity_days > tls.cluster_ca.validity_days and tls.cluster_ca.secret_name is None:
            problems.append(("spec.tls.validityDays",
                             f"{tls.validity_days} days outlive the cluster CA's {tls.cluster_ca.validity_days}"))
    seen: set[str] = set()
    for i, user in enumerate(spec.users):
        field = f"spec.users[{i}]"
        if spec.tls is None:
            problems.append((field, "users need spec.tls (an authorizer runs only on a secured cluster)"))
        if user.name in seen:
            problems.append((f"{field}.name", f"user {user.name} appears twice"))
        seen.add(user.name)
        if user.name == OPERATOR_COMMON_NAME:
            problems.append((f"{field}.name", f"{OPERATOR_COMMON_NAME} is the operator's own principal"))
        wanted = "SSL" if user.authentication == "tls" else "SASL_SSL"
        if spec.tls is not None and wanted not in protocols:
            problems.append((f"{field}.authentication",
                             f"{user.authentication} needs a listener with protocol {wanted} in spec.listeners"))
        for j, rule in enumerate(user.acls):
            if rule.resource.type == "cluster" and rule.resource.name != "kafka-cluster":
                problems.append((f"{field}.acls[{j}].resource.name", "the cluster resource is named kafka-cluster"))
    return problems


# -- ACLs ----------------------------------------------------------------------------------------

_RESOURCE_TYPES = {"topic": "TOPIC", "group": "GROUP", "cluster": "CLUSTER", "transactionalId": "TRANSACTIONAL_ID"}
_PATTERN_TYPES = {"literal": "LITERAL", "prefix": "PREFIXED"}
_OPERATIONS = {"All": "ALL", "Read": "READ", "Write": "WRITE", "Create": "CREATE", "Delete": "DELETE",
               "Alter": "ALTER", "Describe": "DESCRIBE", "ClusterAction": "CLUSTER_ACTION",
               "DescribeConfigs": "DESCRIBE_CONFIGS", "AlterConfigs": "ALTER_CONFIGS",
               "IdempotentWrite": "IDEMPOTENT_WRITE"}


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL, in Kafka's names (`kafka-acls` prints them so): TOPIC / LITERAL / READ / ALLOW."""

    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str


@dataclass(frozen=True, slots=True)
class AclChanges:
    create: tuple[AclBinding, ...]
    delete: tuple[AclBinding, ...]

    @property
    def empty(self) -> bool:
        return not self.create and not self.delete


def desired_acls(users: Iterable[UserSpec]) -> frozenset[AclBinding]:
    """Every ACL the spec's users should have, one binding per operation."""
    return frozenset(
        AclBinding(
            resource_type=_RESOURCE_TYPES[rule.resource.type],
            resource_name="kafka-cluster" if rule.resource.type == "cluster" else rule.resource.name,
            pattern_type=_PATTERN_TYPES[rule.resource.pattern_type],
            principal=user_principal(user),
            host=rule.host,
            operation=_OPERATIONS[operation],
            permission=rule.type.upper(),
        )
        for user in users
        for rule in user.acls
        for operation in rule.operations
    )


def acl_changes(
    *, desired: Iterable[AclBinding], existing: Iterable[AclBinding], managed_principals: Iterable[str]
) -> AclChanges:
    """The CreateAcls and DeleteAcls that make the managed principals' ACLs exactly `desired`.
    An ACL of a principal the operator does not manage is never deleted, and a desired ACL of one
    is refused (it would be created on every reconcile and never owned)."""
    managed = frozenset(managed_principals)
    wanted = frozenset(desired)
    stray = sorted(b.principal for b in wanted if b.principal not in managed)
    if stray:
        raise ValueError(f"desired ACLs name principals the operator does not manage: {', '.join(stray)}")
    present = frozenset(b for b in existing if b.principal in managed)
    return AclChanges(create=tuple(sorted(wanted - present)), delete=tuple(sorted(present - wanted)))


# -- renewal -------------------------------------------------------------------------------------

def certificate_due(*, not_after_ms: int, now_ms: int, renewal_days: int) -> bool:
    """Whether a certificate must be renewed now: it expires within the renewal window."""
    return not_after_ms - now_ms <= renewal_days * DAY_MS


class CaSwitchPhase(StrEnum):
    """Where a CA replacement stands (Strimzi's way, one gated roll per step):
    `trust-both`: a new CA exists; nodes are rolled to trust the old and the new one, and still
    present certificates from the old; `new-certificates`: every node trusts both, so certificates
    are re-issued from the new CA and rolled out; then `none`: the old CA is dropped from the
    truststores (a last roll)."""

    NONE = "none"
    TRUST_BOTH = "trust-both"
    NEW_CERTIFICATES = "new-certificates"


def ca_switch_step(*, phase: CaSwitchPhase, ca_due: bool, settled: bool) -> CaSwitchPhase:
    """The next phase: a due CA starts a switch; a switch moves on only once the cluster settled
    (every node restarted with the previous step's material, no operation in progress)."""
    if phase is CaSwitchPhase.NONE:
        return CaSwitchPhase.TRUST_BOTH if ca_due else phase
    if not settled:
        return phase
    if phase is CaSwitchPhase.TRUST_BOTH:
        return CaSwitchPhase.NEW_CERTIFICATES
    return CaSwitchPhase.NONE


def trusted_in(phase: CaSwitchPhase, *, current: str, previous: str | None) -> Sequence[str]:
    """The CA certificates (PEM) trusted during `phase`: both while switching, else the current."""
    if phase is CaSwitchPhase.NONE or previous is None:
        return (current,)
    return (current, previous)


def issuing_ca_is_new(phase: CaSwitchPhase) -> bool:
    """Whether certificates are issued from the new CA (else from the old one, still trusted alone
    by nodes not yet rolled)."""
    return phase is not CaSwitchPhase.TRUST_BOTH

