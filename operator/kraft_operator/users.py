"""The users of `spec.users`, made real on a running cluster: credentials, their Secrets, and ACLs.

Every reconcile of a secured cluster with brokers up:
1. each user's Secret `<cluster>-user-<name>` is made or kept: for `scram-sha-512` a generated
   password (`password`, `sasl.jaas.config`), for `tls` a client certificate from the clients CA
   (`user.crt`, `user.key`, re-issued when due or when the clients CA switched); both with the
   cluster CA(s) the brokers' certificates chain to (`ca.crt`) and a `client.properties` with
   Kafka's client keys;
2. SCRAM-SHA-512 credentials: upserted (AlterUserScramCredentials, salted here, the password
   never sent) for a user DescribeUserScramCredentials does not list or whose password is new;
   deleted for users that are gone or no longer use SCRAM;
3. ACLs: DescribeAcls, then CreateAcls / DeleteAcls for the difference (`plan.security.acl_changes`),
   touching only the principals of the operator's users;
4. a user that left the spec loses its credentials and ACLs first, and its Secret last: the Secret
   is how the operator remembers the user, so a failure in between is retried.

Every call travels on the operator's own TLS identity (a super user).
"""

from __future__ import annotations

import hashlib
import secrets as random_secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from kraft_engine.admin.controller_admin import ControllerAdmin, ControllerAdminError
from kraft_engine.metadata.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType
from kraft_engine.protocol.scram import SCRAM_MECHANISMS
from kraft_engine.storage.java_properties import format_properties
from kraft_operator import certificates as certs
from kraft_operator.admin import AdminError, ClusterAdmin
from kraft_operator.model import KRaftCluster, UserSpec
from kraft_operator.plan.security import AclBinding, acl_changes, desired_acls, user_principal, user_secret
from kraft_operator.runtime.port import SecretStore
from kraft_operator.tls_material import TlsState, reissue_needed

__all__ = ["UsersReport", "reconcile_users"]

_MECHANISM = SCRAM_MECHANISMS["SCRAM-SHA-512"]
_ITERATIONS = 4096
_AUTHENTICATION = "authentication"  # the Secret's record of how the user authenticates


@dataclass(frozen=True, slots=True)
class UsersReport:
    """What one pass changed, in words (for events and logs)."""

    changes: tuple[str, ...] = ()


def _user_from_secret(cluster: str, name: str, data: dict[str, str]) -> UserSpec | None:
    authentication = data.get(_AUTHENTICATION, "")
    if authentication == "tls":
        return UserSpec(name=name.removeprefix(f"{cluster}-user-"), authentication="tls")
    if authentication == "scram-sha-512":
        return UserSpec(name=name.removeprefix(f"{cluster}-user-"), authentication="scram-sha-512")
    return None


def _client_properties(user: UserSpec, *, password: str | None, keystore: str | None, trusted: str) -> str:
    """Kafka's client keys, the PEM material inline (`ssl.keystore.key`, `...certificate.chain`)."""
    properties = {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": trusted}
    if user.authentication == "tls" and keystore is not None:
        start = keystore.index("-----BEGIN CERTIFICATE-----")
        properties |= {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
                       "ssl.keystore.key": keystore[:start], "ssl.keystore.certificate.chain": keystore[start:]}
    else:
        properties |= {"security.protocol": "SASL_SSL", "sasl.mechanism": _MECHANISM.name,
                       "sasl.jaas.config": _jaas(user.name, password or "")}
    return format_properties(properties)


def _jaas(username: str, password: str) -> str:
    return (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{username}" '
            f'password="{password}";')


async def _user_secret(
    cluster: KRaftCluster, user: UserSpec, *, store: SecretStore, state: TlsState, now_ms: int,
) -> tuple[bool, str | None]:
    """Make or keep the user's Secret; (whether a new password was made, the password)."""
    namespace = cluster.metadata.namespace or "default"
    name = user_secret(cluster.metadata.name, user.name)
    existing = await store.read(namespace, name) or {}
    tls = cluster.spec.tls
    if tls is None:
        raise AdminError("users need spec.tls", api="users")
    trusted = state.cluster_ca.trusted_pem
    wanted: dict[str, str] = {_AUTHENTICATION: user.authentication, "ca.crt": trusted}
    fresh_password = False
    password: str | None = None
    keystore: str | None = None
    if user.authentication == "scram-sha-512":
        password = existing.get("password") if existing.get(_AUTHENTICATION) == user.authentication else None
        if not password:
            password, fresh_password = random_secrets.token_urlsafe(24), True
        wanted |= {"username": user.name, "password": password, "sasl.jaas.config": _jaas(user.name, password)}
    else:
        keystore = existing.get("user.keystore.pem")
        why = reissue_needed(keystore, ca=state.clients_ca, common_name=user.name, hosts=(),
                             renewal_days=tls.renewal_days, now_ms=now_ms)
        if why is not None or keystore is None:
            keystore = certs.issue(state.clients_ca.issuing, common_name=user.name, organization=None,
                                   validity_days=tls.validity_days, now_ms=now_ms).keystore_pem
        start = keystore.index("-----BEGIN CERTIFICATE-----")
        wanted |= {"user.keystore.pem": keystore, "user.key": keystore[:start], "user.crt": keystore[start:]}
    wanted["client.properties"] = _client_properties(user, password=password, keystore=keystore, trusted=trusted)
    if wanted != existing:
        await store.write(namespace, name, wanted, cluster=cluster)
    return fresh_password, password


def _acl_change(verb: str, b: AclBinding) -> str:
    """One line of the change log for an ACL the reconcile created or deleted."""
    return f"ACL {verb}: {b.principal} {b.permission} {b.operation} on {b.resource_type} {b.pattern_type} {b.resource_name}"


def _binding(resource: Any, acl: Any) -> AclBinding:
    return AclBinding(
        resource_type=ResourceType(int(resource.resource_type)).name,
        resource_name=resource.resource_name,
        pattern_type=PatternType(int(resource.pattern_type)).name,
        principal=acl.principal,
        host=acl.host,
        operation=AclOperation(int(acl.operation)).name,
        permission=AclPermissionType(int(acl.permission_type)).name,
    )


def _error(api: str, code: int, message: str | None) -> None:
    if code != ErrorCode.none:
        error = ErrorCode(code)
        raise AdminError(f"{api}: {error.name.upper()}" + (f": {message}" if message else ""), api=api, error=error)


async def _on_controller(admin: ControllerAdmin, request: Any, *, api: str) -> Any:
    """`request` answered by the active controller (the freshest image, and where changes go)."""
    try:
        return await admin.send_to_active(request)
    except ControllerAdminError as e:
        raise AdminError(f"{api}: {e}", api=api) from None


async def reconcile_users(
    cluster: KRaftCluster, *, store: SecretStore, state: TlsState, controllers: Sequence[tuple[str, int]],
    brokers: Sequence[tuple[str, int]], timeout_ms: int, now_ms: int,
) -> UsersReport:
    name, namespace = cluster.metadata.name, cluster.metadata.namespace or "default"
    changes: list[str] = []
    wanted = {u.name: u for u in cluster.spec.users}
    prefix = f"{name}-user-"
    gone: list[tuple[str, UserSpec | None]] = []
    remembered: dict[str, UserSpec] = {}
    for secret in await store.names(namespace, prefix=prefix):
        data = await store.read(namespace, secret) or {}
        user = _user_from_secret(name, secret, data)
        if user is not None:
            remembered[user.name] = user
        if secret.removeprefix(prefix) not in wanted:
            gone.append((secret, user))
    passwords: dict[str, str] = {}
    fresh: set[str] = set()
    for user in wanted.values():
        made, password = await _user_secret(cluster, user, store=store, state=state, now_ms=now_ms)
        if password is not None:
            passwords[user.name] = password
        if made:
            fresh.add(user.name)
            changes.append(f"user {user.name}: Secret {user_secret(name, user.name)} written with a new password")
    scram_wanted = {u.name for u in wanted.values() if u.authentication == "scram-sha-512"}
    scram_known = scram_wanted | {u.name for u in remembered.values() if u.authentication == "scram-sha-512"}
    async with ClusterAdmin(brokers=brokers, timeout_ms=timeout_ms, security=state.admin_security) as cluster_admin, \
            ControllerAdmin(list(controllers), timeout_ms=timeout_ms, client_id="kraftwerk-operator",
                            security=state.admin_security) as controller_admin:
        have = await _scram_users(cluster_admin, sorted(scram_known))
        upserts = [n for n in sorted(scram_wanted) if n not in have or n in fresh]
        deletions = sorted(have - scram_wanted)
        if upserts or deletions:
            request = AlterUserScramCredentialsRequest(
                deletions=tuple(ScramCredentialDeletion(name=n, mechanism=i8(_MECHANISM.mechanism_id))
                                for n in deletions),
                upsertions=tuple(_upsertion(n, passwords[n]) for n in upserts),
            )
            response = await _on_controller(controller_admin, request, api="AlterUserScramCredentials")
            for result in response.results:
                _error("AlterUserScramCredentials", result.error_code, f"{result.user}: {result.error_message or ''}")
            changes += [f"user {n}: SCRAM-SHA-512 credential set" for n in upserts]
            changes += [f"user {n}: SCRAM-SHA-512 credential deleted" for n in deletions]
        managed = {user_principal(u) for u in (*wanted.values(), *remembered.values())}
        # From the active controller: its image holds every ACL committed so far, so the diff is not
        # computed against a lagging follower's (which would only cost a second pass, but churns).
        described = await _on_controller(controller_admin, DescribeAclsRequest(
            resource_type_filter=i8(ResourceType.ANY), resource_name_filter=None,
            pattern_type_filter=i8(PatternType.ANY), principal_filter=None, host_filter=None,
            operation=i8(AclOperation.ANY), permission_type=i8(AclPermissionType.ANY)), api="DescribeAcls")
        _error("DescribeAcls", described.error_code, described.error_message)
        existing = [_binding(resource, acl) for resource in described.resources for acl in resource.acls]
        diff = acl_changes(desired=desired_acls(wanted.values()), existing=existing, managed_principals=managed)
        if diff.create:
            response = await _on_controller(controller_admin, CreateAclsRequest(
                creations=tuple(_creation(b) for b in diff.create)), api="CreateAcls")
            for result in response.results:
                _error("CreateAcls", result.error_code, result.error_message)
            changes += [_acl_change("created", b) for b in diff.create]
        if diff.delete:
            response = await _on_controller(controller_admin, DeleteAclsRequest(
                filters=tuple(_exact_filter(b) for b in diff.delete)), api="DeleteAcls")
            for result in response.filter_results:
                _error("DeleteAcls", result.error_code, result.error_message)
            changes += [_acl_change("deleted", b) for b in diff.delete]
    for secret, _user in gone:
        await store.delete(namespace, secret)
        changes.append(f"user {secret.removeprefix(prefix)}: removed (Secret {secret} deleted)")
    return UsersReport(tuple(changes))


async def _scram_users(admin: ClusterAdmin, names: Sequence[str]) -> set[str]:
    """The users among `names` that hold a SCRAM-SHA-512 credential (DescribeUserScramCredentials)."""
    if not names:
        return set()
    response = await admin.send_to_broker(
        DescribeUserScramCredentialsRequest(users=tuple(UserName(name=n) for n in names)),
        api="DescribeUserScramCredentials")
    _error("DescribeUserScramCredentials", response.error_code, response.error_message)
    found: set[str] = set()
    for result in response.results:
        if result.error_code == ErrorCode.resource_not_found:
            continue
        _error("DescribeUserScramCredentials", result.error_code, f"{result.user}: {result.error_message or ''}")
        if any(int(info.mechanism) == _MECHANISM.mechanism_id for info in result.credential_infos):
            found.add(result.user)
    return found


def _upsertion(name: str, password: str) -> ScramCredentialUpsertion:
    """The credential as Kafka's Admin sends it: a random salt and the salted password (PBKDF2)."""
    salt = random_secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac(_MECHANISM.hash_name, password.encode("utf-8"), salt, _ITERATIONS)
    return ScramCredentialUpsertion(name=name, mechanism=i8(_MECHANISM.mechanism_id), iterations=i32(_ITERATIONS),
                                    salt=salt, salted_password=salted)


def _codes(binding: AclBinding) -> tuple[i8, i8, i8, i8]:
    """(resource type, pattern type, operation, permission) as Kafka's wire codes."""
    return (i8(ResourceType[binding.resource_type]), i8(PatternType[binding.pattern_type]),
            i8(AclOperation[binding.operation]), i8(AclPermissionType[binding.permission]))


def _creation(binding: AclBinding) -> AclCreation:
    resource_type, pattern_type, operation, permission = _codes(binding)
    return AclCreation(resource_type=resource_type, resource_name=binding.resource_name,
                       resource_pattern_type=pattern_type, principal=binding.principal, host=binding.host,
                       operation=operation, permission_type=permission)


def _exact_filter(binding: AclBinding) -> DeleteAclsFilter:
    """A DeleteAcls filter that matches exactly this binding (no ANY anywhere)."""
    resource_type, pattern_type, operation, permission = _codes(binding)
    return DeleteAclsFilter(resource_type_filter=resource_type, resource_name_filter=binding.resource_name,
                            pattern_type_filter=pattern_type, principal_filter=binding.principal,
                            host_filter=binding.host, operation=operation, permission_type=permission)
