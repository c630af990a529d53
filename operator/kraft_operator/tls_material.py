"""The cluster's TLS material, made and kept before each plan: CAs, node and operator certificates.

Runs at the start of every reconcile of a cluster with `spec.tls` (the planner then sees each
node's material as part of its revision, so whatever changed here rolls the node through the
normal gated roll):

- the cluster CA and the clients CA, the one in use kept in `<cluster>-cluster-ca` /
  `<cluster>-clients-ca`: generated there and replaced when it expires within its renewal window,
  or the user's own (`secretName`: read, checked, never renewed by the operator; copied into the
  operator's Secret, since a switch issues from the previous CA after the user's Secret moved on)
  and replaced when the user's Secret holds another one. Either replacement goes in three steps,
  each waiting for the cluster to settle (`plan.security.ca_switch_step`): trust both, then
  certificates from the new CA, then drop the old;
- every desired node's Secret `<cluster>-node-<id>-tls` (its PEM keystore with the node subject and
  the layout's host names as SANs, the trusted cluster CAs, and on brokers the trusted clients CAs
  and the keystores of listeners that bring their own certificate), re-issued when missing, due
  for renewal, issued by a CA no longer issuing, or missing a host name;
- the operator's own Secret `<cluster>-operator-tls`, its identity on every admin connection (a
  super user); the returned `ClientSecurity` carries it in memory, never on a command line.

A Secret is written only when its content changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kraft_engine.protocol.security import ClientSecurity, SecurityConfigError, client_security
from kraft_operator import certificates as certs
from kraft_operator.certificates import CertificateError, KeyPair
from kraft_operator.model import CertificateAuthoritySpec, KRaftCluster, TlsSpec
from kraft_operator.plan import DesiredNode, Layout
from kraft_operator.plan.security import (
    CLIENTS_TRUSTSTORE_KEY,
    KEYSTORE_KEY,
    OPERATOR_COMMON_NAME,
    ORGANIZATION,
    TRUSTSTORE_KEY,
    CaSwitchPhase,
    ca_switch_step,
    certificate_due,
    clients_ca_secret,
    cluster_ca_secret,
    issuing_ca_is_new,
    listener_keystore_key,
    node_common_name,
    node_secret,
    operator_secret,
    trusted_in,
)
from kraft_operator.runtime.port import RuntimeActionError, SecretStore

__all__ = ["CaState", "TlsError", "TlsState", "ensure_tls", "reissue_needed"]

_CA_CERT, _CA_KEY = "ca.crt", "ca.key"
_PREVIOUS_CERT, _PREVIOUS_KEY = "previous-ca.crt", "previous-ca.key"
_PHASE = "switch-phase"
_SWITCH_STEPS = {
    CaSwitchPhase.TRUST_BOTH: "switch to a new CA, step 1 of 3: trust-both (nodes trust the old and the new CA)",
    CaSwitchPhase.NEW_CERTIFICATES: "switch to a new CA, step 2 of 3: new-certificates (issued by the new CA)",
    CaSwitchPhase.NONE: "switch to a new CA, step 3 of 3: the old CA is dropped from the truststores",
}


class TlsError(RuntimeActionError):
    """TLS material that cannot be made or used; the message names the spec field or Secret."""


@dataclass(frozen=True, slots=True)
class CaState:
    """A CA as the cluster uses it now: the key pair that issues, and the certificates trusted."""

    issuing: KeyPair
    trusted: tuple[str, ...]
    phase: CaSwitchPhase
    # the step this pass took, in words (an event), or None
    switched: str | None = None

    @property
    def trusted_pem(self) -> str:
        return "".join(pem.rstrip("\n") + "\n" for pem in self.trusted)


@dataclass(frozen=True, slots=True)
class TlsState:
    cluster_ca: CaState
    clients_ca: CaState
    revisions: dict[int, str]
    admin_security: ClientSecurity

    @property
    def switched(self) -> tuple[str, ...]:
        """The CA switch steps this pass took, in words."""
        return tuple(ca.switched for ca in (self.cluster_ca, self.clients_ca) if ca.switched is not None)


async def _brought_ca(cluster: KRaftCluster, *, secrets: SecretStore, secret_name: str, field: str) -> KeyPair:
    """The CA the user brings in `secretName` (`ca.crt` and `ca.key`), checked."""
    data = await secrets.read(cluster.metadata.namespace or "default", secret_name)
    if data is None or _CA_CERT not in data or _CA_KEY not in data:
        raise TlsError(f"{field}.secretName: Secret {secret_name} must hold {_CA_CERT} and {_CA_KEY}")
    pair = KeyPair(data[_CA_CERT], data[_CA_KEY])
    try:
        certs.check_ca(pair)
    except CertificateError as e:
        raise TlsError(f"{field}.secretName: Secret {secret_name}: {e}") from None
    return pair


def _same_certificate(a: str, b: str) -> bool:
    return a.strip() == b.strip()


async def _ca(
    cluster: KRaftCluster, *, secrets: SecretStore, spec: CertificateAuthoritySpec, own_secret: str, field: str,
    common_name: str, now_ms: int, settled: bool,
) -> CaState:
    """The CA in use, kept in the operator's own Secret `own_secret` (with the previous one while a
    switch runs). A generated CA is replaced when due; a CA the user brings is never renewed by the
    operator, but when the user's Secret holds another CA than the one in use (the user renewed or
    replaced it, or brought one where the operator's had been), the new one comes in through the
    same staged switch: a node rolled in between trusts both, so the quorum never splits."""
    namespace = cluster.metadata.namespace or "default"
    brought = None
    if spec.secret_name is not None:
        brought = await _brought_ca(cluster, secrets=secrets, secret_name=spec.secret_name, field=field)
    data = await secrets.read(namespace, own_secret)
    if data is None or _CA_CERT not in data or _CA_KEY not in data:
        pair = brought or certs.generate_ca(common_name=common_name, organization=ORGANIZATION,
                                            validity_days=spec.validity_days, now_ms=now_ms)
        data = {_CA_CERT: pair.certificate_pem, _CA_KEY: pair.key_pem, _PHASE: CaSwitchPhase.NONE.value}
        await secrets.write(namespace, own_secret, data, cluster=cluster)
    try:
        phase = CaSwitchPhase(data.get(_PHASE, CaSwitchPhase.NONE.value).strip())
    except ValueError:
        raise TlsError(f"Secret {own_secret}: {_PHASE} {data.get(_PHASE)!r} is not a phase") from None
    if brought is not None:
        # a new CA from the user waits for a switch in progress to end before it starts its own
        due = not _same_certificate(brought.certificate_pem, data[_CA_CERT])
    else:
        due = certificate_due(not_after_ms=certs.not_after_ms(data[_CA_CERT]), now_ms=now_ms,
                              renewal_days=spec.renewal_days)
    following = ca_switch_step(phase=phase, ca_due=due, settled=settled)
    switched = None
    if following is not phase:
        switched = f"{field.removeprefix('spec.tls.')}: {_SWITCH_STEPS[following]}"
        if following is CaSwitchPhase.TRUST_BOTH:
            fresh = brought or certs.generate_ca(common_name=common_name, organization=ORGANIZATION,
                                                 validity_days=spec.validity_days, now_ms=now_ms)
            data = {_CA_CERT: fresh.certificate_pem, _CA_KEY: fresh.key_pem, _PREVIOUS_CERT: data[_CA_CERT],
                    _PREVIOUS_KEY: data[_CA_KEY]}
        elif following is CaSwitchPhase.NONE:
            data = {k: v for k, v in data.items() if k not in (_PREVIOUS_CERT, _PREVIOUS_KEY)}
        data = {**data, _PHASE: following.value}
        await secrets.write(namespace, own_secret, data, cluster=cluster)
        phase = following
    current = KeyPair(data[_CA_CERT], data[_CA_KEY])
    previous = KeyPair(data[_PREVIOUS_CERT], data[_PREVIOUS_KEY]) if _PREVIOUS_CERT in data else None
    issuing = current if previous is None or issuing_ca_is_new(phase) else previous
    trusted = tuple(trusted_in(phase, current=current.certificate_pem,
                               previous=previous.certificate_pem if previous is not None else None))
    return CaState(issuing=issuing, trusted=trusted, phase=phase, switched=switched)


def reissue_needed(
    keystore_pem: str | None, *, ca: CaState, common_name: str, hosts: Sequence[str], renewal_days: int, now_ms: int,
) -> str | None:
    """Why a certificate (a PEM keystore: key, then chain) must be issued again, None if it is fine."""
    if not keystore_pem or "CERTIFICATE" not in keystore_pem:
        return "none issued yet"
    certificate = keystore_pem[keystore_pem.index("-----BEGIN CERTIFICATE-----"):]
    try:
        if not certs.is_issued_by(certificate, ca.issuing.certificate_pem):
            return "issued by a CA that no longer issues"
        if not certs.subject(certificate).startswith(f"CN={common_name},"):
            return "its subject changed"
        if set(hosts) - set(certs.certificate_hosts(certificate)):
            return "its host names changed"
        if certificate_due(not_after_ms=certs.not_after_ms(certificate), now_ms=now_ms, renewal_days=renewal_days):
            return f"it expires within {renewal_days} days"
    except CertificateError as e:
        return f"it cannot be read ({e})"
    return None


async def _keystore(
    *, existing: str | None, ca: CaState, common_name: str, organization: str | None, hosts: Sequence[str],
    tls: TlsSpec, now_ms: int,
) -> str:
    why = reissue_needed(existing, ca=ca, common_name=common_name, hosts=hosts, renewal_days=tls.renewal_days,
                         now_ms=now_ms)
    if why is None and existing is not None:
        return existing
    return certs.issue(ca.issuing, common_name=common_name, organization=organization, hosts=tuple(hosts),
                       validity_days=tls.validity_days, now_ms=now_ms).keystore_pem


async def _listener_keystores(cluster: KRaftCluster, *, secrets: SecretStore) -> dict[str, str]:
    """The keystores of the client listeners that bring their own certificate."""
    found: dict[str, str] = {}
    namespace = cluster.metadata.namespace or "default"
    for i, listener in enumerate(cluster.spec.listeners):
        if listener.certificate is None or listener.protocol == "PLAINTEXT":
            continue
        reference = listener.certificate
        data = await secrets.read(namespace, reference.secret_name)
        field = f"spec.listeners[{i}].certificate"
        if data is None or reference.certificate not in data or reference.key not in data:
            raise TlsError(f"{field}: Secret {reference.secret_name} must hold {reference.certificate} and "
                           f"{reference.key}")
        pair = KeyPair(data[reference.certificate], data[reference.key])
        try:
            certs.not_after_ms(pair.certificate_pem)
        except CertificateError as e:
            raise TlsError(f"{field}: {e}") from None
        found[listener_keystore_key(listener.name)] = pair.keystore_pem
    return found


async def ensure_tls(
    cluster: KRaftCluster, *, secrets: SecretStore, layout: Layout, nodes: Sequence[DesiredNode], now_ms: int,
    settled: bool,
) -> TlsState:
    """Make or renew what is due (see the module docstring) and say what the cluster uses now."""
    tls = cluster.spec.tls
    if tls is None:
        raise TlsError("spec.tls is not set")
    name = cluster.metadata.name
    namespace = cluster.metadata.namespace or "default"
    cluster_ca = await _ca(cluster, secrets=secrets, spec=tls.cluster_ca, own_secret=cluster_ca_secret(name),
                           field="spec.tls.clusterCa", common_name=f"{name}-cluster-ca", now_ms=now_ms,
                           settled=settled)
    clients_ca = await _ca(cluster, secrets=secrets, spec=tls.clients_ca, own_secret=clients_ca_secret(name),
                           field="spec.tls.clientsCa", common_name=f"{name}-clients-ca", now_ms=now_ms,
                           settled=settled)
    listener_keystores = await _listener_keystores(cluster, secrets=secrets)
    revisions: dict[int, str] = {}
    for node in nodes:
        secret = node_secret(name, node.ref.node_id)
        existing = await secrets.read(namespace, secret) or {}
        wanted = {
            KEYSTORE_KEY: await _keystore(existing=existing.get(KEYSTORE_KEY), ca=cluster_ca,
                                          common_name=node_common_name(name), organization=ORGANIZATION,
                                          hosts=layout.certificate_hosts(node.ref), tls=tls, now_ms=now_ms),
            TRUSTSTORE_KEY: cluster_ca.trusted_pem,
        }
        if node.is_broker:
            wanted[CLIENTS_TRUSTSTORE_KEY] = clients_ca.trusted_pem
            wanted |= listener_keystores
        if wanted != existing:
            await secrets.write(namespace, secret, wanted, cluster=cluster)
        revisions[node.ref.node_id] = certs.fingerprint("".join(f"{k}\n{v}" for k, v in sorted(wanted.items())))
    secret = operator_secret(name)
    existing = await secrets.read(namespace, secret) or {}
    wanted = {
        KEYSTORE_KEY: await _keystore(existing=existing.get(KEYSTORE_KEY), ca=cluster_ca,
                                      common_name=OPERATOR_COMMON_NAME, organization=ORGANIZATION, hosts=(),
                                      tls=tls, now_ms=now_ms),
        TRUSTSTORE_KEY: cluster_ca.trusted_pem,
    }
    if wanted != existing:
        await secrets.write(namespace, secret, wanted, cluster=cluster)
    return TlsState(cluster_ca=cluster_ca, clients_ca=clients_ca, revisions=revisions,
                    admin_security=_client_security(wanted[KEYSTORE_KEY], trusted=cluster_ca.trusted_pem))


def _client_security(keystore_pem: str, *, trusted: str) -> ClientSecurity:
    """The operator's TLS identity as a client: key and chain inline (Kafka's PEM keys), in memory."""
    start = keystore_pem.index("-----BEGIN CERTIFICATE-----")
    try:
        return client_security({
            "security.protocol": "SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": keystore_pem[:start],
            "ssl.keystore.certificate.chain": keystore_pem[start:],
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": trusted,
        })
    except SecurityConfigError as e:
        raise TlsError(f"the operator's own TLS identity is unusable: {e}") from None
