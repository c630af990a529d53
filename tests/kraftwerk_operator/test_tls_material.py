"""The TLS material the operator makes (`tls_material.ensure_tls`) on the local runtime's Secrets:
real CAs and certificates (`cryptography`), real files, checked with Python's own TLS stack."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import stat
import time
from pathlib import Path

import pytest

from kraft_operator import certificates as certs
from kraft_operator.plan import desired_nodes
from kraft_operator.plan.security import DAY_MS, CaSwitchPhase
from kraft_operator.runtime.local import LocalRuntime
from kraft_operator.tls_material import TlsError, ensure_tls

from .builders import cluster_from

SPEC = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: sec}
spec:
  nodePools:
    - {name: controllers, roles: [controller], replicas: 1, storage: {volumes: [{id: 0, size: 1Gi}]}}
    - {name: brokers, roles: [broker], replicas: 2, storage: {volumes: [{id: 0, size: 1Gi}]}}
  listeners:
    - {name: MTLS, port: 9095, protocol: SSL}
  tls: {clusterCa: {validityDays: 100, renewalDays: 10}, validityDays: 50, renewalDays: 5}
"""
NOW_MS = 1_900_000_000_000


def _ensure(runtime: LocalRuntime, cluster, *, now_ms: int = NOW_MS, settled: bool = False):
    nodes = desired_nodes(namespace="default", cluster="sec", spec=cluster.spec, status=None)
    return asyncio.run(ensure_tls(cluster, secrets=runtime.secrets, layout=runtime.layout(cluster), nodes=nodes,
                                  now_ms=now_ms, settled=settled))


def _read(runtime: LocalRuntime, name: str) -> dict[str, str]:
    found = asyncio.run(runtime.secrets.read("default", name))
    assert found is not None, name
    return found


def _keystore_certificate(keystore: str) -> str:
    return keystore[keystore.index("-----BEGIN CERTIFICATE-----"):]


def test_cas_and_node_certificates_are_made_once_into_owner_only_files(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path)
    cluster = cluster_from(SPEC)
    state = _ensure(runtime, cluster)
    secrets_dir = tmp_path / "default" / "_secrets"
    assert sorted(p.name for p in secrets_dir.iterdir()) == [
        "sec-clients-ca", "sec-cluster-ca", "sec-node-0-tls", "sec-node-1-tls", "sec-node-2-tls", "sec-operator-tls"]
    for path in secrets_dir.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    ca = _read(runtime, "sec-cluster-ca")
    clients_ca = _read(runtime, "sec-clients-ca")
    assert ca["ca.crt"] != clients_ca["ca.crt"]
    node = _read(runtime, "sec-node-1-tls")
    certificate = _keystore_certificate(node["keystore.pem"])
    assert certs.subject(certificate) == "CN=sec-kraft,O=kraftwerk.io"
    assert certs.certificate_hosts(certificate) == ("localhost", "127.0.0.1")
    assert certs.is_issued_by(certificate, ca["ca.crt"])
    assert node["truststore.pem"] == ca["ca.crt"]
    assert node["clients-truststore.pem"] == clients_ca["ca.crt"]
    assert "clients-truststore.pem" not in _read(runtime, "sec-node-0-tls")  # a controller
    operator = _keystore_certificate(_read(runtime, "sec-operator-tls")["keystore.pem"])
    assert certs.subject(operator) == "CN=kraftwerk-operator,O=kraftwerk.io"
    # Nothing changes on the next pass: the same material, the same revisions.
    again = _ensure(runtime, cluster)
    assert again.revisions == state.revisions
    assert _read(runtime, "sec-node-1-tls") == node


def test_the_material_really_authenticates_both_ways(tmp_path: Path) -> None:
    """A TLS server with node 1's keystore and a client with the operator's identity (as the
    admin connection uses it) complete a mutual handshake; Python's ssl checks names and chains."""
    runtime = LocalRuntime(tmp_path)
    state = _ensure(runtime, cluster_from(SPEC), now_ms=int(time.time() * 1000))
    node_dir = runtime.secrets.path("default", "sec-node-1-tls")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(node_dir / "keystore.pem")
    server.load_verify_locations(node_dir / "truststore.pem")
    server.verify_mode = ssl.CERT_REQUIRED
    client = state.admin_security.ssl_context
    assert client is not None
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    s = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (c, s):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(outgoing.read())
        incoming.write(s_out.read())
    peer = s.getpeercert()
    assert peer is not None and peer["subject"] == \
        ((("organizationName", "kraftwerk.io"),), (("commonName", "kraftwerk-operator"),))


def test_a_certificate_in_its_renewal_window_is_issued_again_and_changes_only_its_nodes_revision(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path)
    cluster = cluster_from(SPEC)
    before = _ensure(runtime, cluster)
    old = _read(runtime, "sec-node-1-tls")["keystore.pem"]
    # 46 days later every node certificate (50 days) is inside its 5-day window; the CA (100 days,
    # window 10) is not.
    later = _ensure(runtime, cluster, now_ms=NOW_MS + 46 * DAY_MS)
    renewed = _read(runtime, "sec-node-1-tls")["keystore.pem"]
    assert renewed != old
    assert certs.not_after_ms(_keystore_certificate(renewed)) > certs.not_after_ms(_keystore_certificate(old))
    assert all(later.revisions[n] != before.revisions[n] for n in before.revisions)
    assert _read(runtime, "sec-cluster-ca")["switch-phase"] == "none"


def test_a_due_ca_is_replaced_through_trust_both_then_new_certificates_then_the_old_dropped(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path)
    cluster = cluster_from(SPEC)
    _ensure(runtime, cluster)
    old_ca = _read(runtime, "sec-cluster-ca")["ca.crt"]
    due = NOW_MS + 91 * DAY_MS  # inside the CA's 10-day window
    # 1. A new CA; nodes trust both; certificates still come from the old CA (nodes not yet
    #    rolled trust only the old one).
    step1 = _ensure(runtime, cluster, now_ms=due, settled=True)
    assert step1.cluster_ca.phase is CaSwitchPhase.TRUST_BOTH
    new_ca = _read(runtime, "sec-cluster-ca")["ca.crt"]
    assert new_ca != old_ca
    node = _read(runtime, "sec-node-1-tls")
    assert old_ca in node["truststore.pem"] and new_ca in node["truststore.pem"]
    assert certs.is_issued_by(_keystore_certificate(node["keystore.pem"]), old_ca)
    # Not settled yet (the roll to trust both is running): nothing moves.
    assert _ensure(runtime, cluster, now_ms=due, settled=False).cluster_ca.phase is CaSwitchPhase.TRUST_BOTH
    # 2. Settled: certificates from the new CA, both still trusted.
    step2 = _ensure(runtime, cluster, now_ms=due, settled=True)
    assert step2.cluster_ca.phase is CaSwitchPhase.NEW_CERTIFICATES
    node = _read(runtime, "sec-node-1-tls")
    assert certs.is_issued_by(_keystore_certificate(node["keystore.pem"]), new_ca)
    assert old_ca in node["truststore.pem"]
    assert step2.revisions != step1.revisions
    # 3. Settled again: the old CA leaves every truststore.
    step3 = _ensure(runtime, cluster, now_ms=due, settled=True)
    assert step3.cluster_ca.phase is CaSwitchPhase.NONE
    assert _read(runtime, "sec-node-1-tls")["truststore.pem"] == new_ca
    assert "previous-ca.crt" not in _read(runtime, "sec-cluster-ca")


def test_a_ca_brought_by_the_user_issues_the_node_certificates(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path)
    mine = certs.generate_ca(common_name="my-ca", organization="example", validity_days=365, now_ms=NOW_MS)
    cluster = cluster_from(SPEC, tls={"clusterCa": {"secretName": "my-ca"}})
    with pytest.raises(TlsError, match=r"spec.tls.clusterCa.secretName: Secret my-ca must hold ca.crt and ca.key"):
        _ensure(runtime, cluster)
    asyncio.run(runtime.secrets.write("default", "my-ca", {"ca.crt": mine.certificate_pem}, cluster=cluster))
    with pytest.raises(TlsError, match=r"must hold ca\.crt and ca\.key"):
        _ensure(runtime, cluster)
    other = certs.generate_ca(common_name="other", organization="example", validity_days=365, now_ms=NOW_MS)
    asyncio.run(runtime.secrets.write("default", "my-ca", {"ca.crt": mine.certificate_pem, "ca.key": other.key_pem},
                                      cluster=cluster))
    with pytest.raises(TlsError, match="does not belong to its certificate"):
        _ensure(runtime, cluster)
    asyncio.run(runtime.secrets.write("default", "my-ca", {"ca.crt": mine.certificate_pem, "ca.key": mine.key_pem},
                                      cluster=cluster))
    _ensure(runtime, cluster)
    node = _read(runtime, "sec-node-2-tls")
    assert certs.is_issued_by(_keystore_certificate(node["keystore.pem"]), mine.certificate_pem)
    assert node["truststore.pem"] == mine.certificate_pem
    # none generated: the operator's Secret keeps a copy of the CA in use (a later switch issues from it)
    assert _read(runtime, "sec-cluster-ca")["ca.crt"] == mine.certificate_pem


def _walk_switch(runtime: LocalRuntime, cluster, *, old_ca: str, new_ca: str) -> None:
    """The three steps of a CA switch from `old_ca` to `new_ca`, each taken only once settled."""
    step1 = _ensure(runtime, cluster, settled=True)
    assert step1.cluster_ca.phase is CaSwitchPhase.TRUST_BOTH
    node = _read(runtime, "sec-node-1-tls")
    assert old_ca in node["truststore.pem"] and new_ca in node["truststore.pem"]
    assert certs.is_issued_by(_keystore_certificate(node["keystore.pem"]), old_ca)
    assert _ensure(runtime, cluster, settled=False).cluster_ca.phase is CaSwitchPhase.TRUST_BOTH
    step2 = _ensure(runtime, cluster, settled=True)
    assert step2.cluster_ca.phase is CaSwitchPhase.NEW_CERTIFICATES
    node = _read(runtime, "sec-node-1-tls")
    assert certs.is_issued_by(_keystore_certificate(node["keystore.pem"]), new_ca)
    assert old_ca in node["truststore.pem"]
    step3 = _ensure(runtime, cluster, settled=True)
    assert step3.cluster_ca.phase is CaSwitchPhase.NONE
    assert _read(runtime, "sec-node-1-tls")["truststore.pem"] == new_ca
    assert _ensure(runtime, cluster, settled=True).revisions == step3.revisions  # nothing more to do


def test_a_ca_the_user_renews_or_brings_later_comes_in_through_the_same_staged_switch(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path)
    generated = cluster_from(SPEC)
    _ensure(runtime, generated)
    operators = _read(runtime, "sec-cluster-ca")["ca.crt"]
    # The user brings a CA where the operator's had been: nodes trust both before any certificate
    # from it is presented, and the operator's is dropped last.
    mine = certs.generate_ca(common_name="my-ca", organization="example", validity_days=365, now_ms=NOW_MS)
    asyncio.run(runtime.secrets.write("default", "my-ca", {"ca.crt": mine.certificate_pem, "ca.key": mine.key_pem},
                                      cluster=generated))
    brought = cluster_from(SPEC, tls={"clusterCa": {"secretName": "my-ca"}})
    _walk_switch(runtime, brought, old_ca=operators, new_ca=mine.certificate_pem)
    # The user renews their CA in place (a new key pair in the same Secret): staged again.
    renewed = certs.generate_ca(common_name="my-ca-2", organization="example", validity_days=365, now_ms=NOW_MS)
    asyncio.run(runtime.secrets.write("default", "my-ca", {"ca.crt": renewed.certificate_pem,
                                                           "ca.key": renewed.key_pem}, cluster=brought))
    _walk_switch(runtime, brought, old_ca=mine.certificate_pem, new_ca=renewed.certificate_pem)
    # A user CA is never renewed by the operator, however close its end.
    late = NOW_MS + 364 * DAY_MS
    assert _ensure(runtime, brought, now_ms=late, settled=True).cluster_ca.phase is CaSwitchPhase.NONE
    assert _read(runtime, "sec-cluster-ca")["ca.crt"] == renewed.certificate_pem


def test_fault_a_brought_ca_adopted_at_once_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken variant (the user's new CA issues at once, as before this switch existed): the
    walk's first step finds a node certificate from the new CA while nodes trust only the old."""
    from kraft_operator import tls_material

    runtime = LocalRuntime(tmp_path)
    mine = certs.generate_ca(common_name="my-ca", organization="example", validity_days=365, now_ms=NOW_MS)
    brought = cluster_from(SPEC, tls={"clusterCa": {"secretName": "my-ca"}})
    asyncio.run(runtime.secrets.write("default", "my-ca", {"ca.crt": mine.certificate_pem, "ca.key": mine.key_pem},
                                      cluster=brought))
    _ensure(runtime, brought)
    renewed = certs.generate_ca(common_name="my-ca-2", organization="example", validity_days=365, now_ms=NOW_MS)
    asyncio.run(runtime.secrets.write("default", "my-ca", {"ca.crt": renewed.certificate_pem,
                                                           "ca.key": renewed.key_pem}, cluster=brought))
    monkeypatch.setattr(tls_material, "_same_certificate", lambda a, b: True)  # never sees the change...
    real_read = runtime.secrets.read

    async def adopt_at_once(namespace: str, name: str):  # ...and issues from the user's Secret directly
        if name == "sec-cluster-ca":
            return {"ca.crt": renewed.certificate_pem, "ca.key": renewed.key_pem, "switch-phase": "none"}
        return await real_read(namespace, name)

    monkeypatch.setattr(runtime.secrets, "read", adopt_at_once)
    with pytest.raises(AssertionError):
        _walk_switch(runtime, brought, old_ca=mine.certificate_pem, new_ca=renewed.certificate_pem)


def test_a_listener_brings_its_own_certificate(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path)
    cluster = cluster_from(SPEC, listeners=[{"name": "MTLS", "port": 9095, "protocol": "SSL",
                                             "certificate": {"secretName": "public-cert"}}])
    with pytest.raises(TlsError, match=r"spec.listeners\[0\].certificate: Secret public-cert must hold tls.crt"):
        _ensure(runtime, cluster)
    public_ca = certs.generate_ca(common_name="public", organization="example", validity_days=365, now_ms=NOW_MS)
    mine = certs.issue(public_ca, common_name="kafka.example.com", organization=None, hosts=("kafka.example.com",),
                       validity_days=90, now_ms=NOW_MS)
    asyncio.run(runtime.secrets.write("default", "public-cert", {"tls.crt": mine.certificate_pem, "tls.key": mine.key_pem},
                                      cluster=cluster))
    _ensure(runtime, cluster)
    assert _read(runtime, "sec-node-1-tls")["listener-mtls-keystore.pem"] == mine.keystore_pem


def test_the_controller_probe_dials_its_own_tls_controller_listener_with_the_nodes_certificate(tmp_path: Path) -> None:
    """An Apache Kafka controller pod's readiness probe reads the node's server.properties: under
    spec.tls it connects with the node's keystore and truststore, as the node itself does."""
    from kraft_operator.plan import render_config
    from kraft_operator.runtime.controller_probe import controller_security

    runtime = LocalRuntime(tmp_path)
    cluster = cluster_from(SPEC)
    _ensure(runtime, cluster, now_ms=int(time.time() * 1000))
    nodes = desired_nodes(namespace="default", cluster="sec", spec=cluster.spec, status=None)
    config = render_config(nodes[0], spec=cluster.spec, controllers=[nodes[0]], layout=runtime.layout(cluster))
    security = controller_security(config)
    assert security is not None and security.security_protocol == "SSL" and security.ssl_context is not None
    plain = cluster_from(SPEC.replace("  listeners:\n    - {name: MTLS, port: 9095, protocol: SSL}\n", "")
                         .replace("  tls: {clusterCa: {validityDays: 100, renewalDays: 10}, validityDays: 50, renewalDays: 5}\n", ""))
    assert plain.spec.tls is None
    config = render_config(nodes[0], spec=plain.spec, controllers=[nodes[0]], layout=runtime.layout(plain))
    assert controller_security(config) is None
