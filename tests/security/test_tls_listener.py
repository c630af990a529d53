"""TLS listeners (SSL, mTLS) with Kafka's `ssl.*` keys, seen from real TLS clients on loopback.

Attack tests: plaintext to a TLS port, a certificate from another CA, no certificate where one
is required; each is refused at the handshake, counted, and the listener keeps serving.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest
from pki import CertificateAuthority
from protocol_helpers import echo_metadata, metadata_request, wait_for_close_count

from kraft_engine.protocol import ConnectionConfig, ConnectionFailed, KafkaConnection, RequestContext
from kraft_engine.protocol.security import (
    ClientSecurity,
    SecurityConfigError,
    client_security,
    listener_security,
)
from kraft_engine.protocol.tls import TlsConfigError, client_context, tls_settings


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority("cluster-ca")


@pytest.fixture(scope="module")
def other_ca() -> CertificateAuthority:
    return CertificateAuthority("cluster-ca")  # the same name, another key


def _server_props(ca: CertificateAuthority, *, client_auth: str = "required", **extra: str) -> dict[str, str]:
    server = ca.issue("broker-0", organization="kraftwerk")
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": server.chain_pem,
        "ssl.keystore.key": server.key_pem,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": ca.certificate_pem,
        "ssl.client.auth": client_auth,
        **extra,
    }


def _client(ca: CertificateAuthority, trusted: CertificateAuthority, common_name: str | None = "alice") -> ClientSecurity:
    props = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
             "ssl.truststore.certificates": trusted.certificate_pem}
    if common_name is not None:
        issued = ca.issue(common_name, organization="kraftwerk")
        props |= {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": issued.chain_pem,
                  "ssl.keystore.key": issued.key_pem}
    return client_security(props)


def _connection(listener: Any, security: ClientSecurity) -> KafkaConnection:
    return KafkaConnection(*listener.address, config=ConnectionConfig(
        security=security, request_timeout_ms=10000, socket_connection_setup_timeout_ms=10000))


async def _metadata_over(listener: Any, security: ClientSecurity, *, timeout_ms: int = 10000) -> list[str]:
    async with _connection(listener, security) as connection:
        await connection.connect(timeout_ms=timeout_ms)
        response = await connection.send(metadata_request(12, ["t"]))
        return [t.name for t in response.topics]


async def test_mtls_client_gets_its_certificate_subject_as_principal(make_listener, ca):
    seen: list[str] = []

    async def handler(request: Any, ctx: RequestContext) -> Any:
        seen.append(ctx.principal)
        return await echo_metadata(request, ctx)

    listener = await make_listener(name="SSL", handler=handler, security=listener_security(
        _server_props(ca), listener_name="SSL", security_protocol="SSL"))
    assert await _metadata_over(listener, _client(ca, ca, "alice")) == ["t"]
    assert seen == ["User:CN=alice,O=kraftwerk"]


async def test_principal_mapping_rules_and_per_listener_overrides(make_listener, ca):
    seen: list[str] = []

    async def handler(request: Any, ctx: RequestContext) -> Any:
        seen.append(ctx.principal)
        return await echo_metadata(request, ctx)

    props = _server_props(ca, **{
        "ssl.principal.mapping.rules": "DEFAULT",
        # the listener's own rules win over the bare key
        "listener.name.clients.ssl.principal.mapping.rules": r"RULE:^CN=(.*?),O=(.*)$/$1@$2/U,DEFAULT",
    })
    listener = await make_listener(name="CLIENTS", handler=handler, security=listener_security(
        props, listener_name="CLIENTS", security_protocol="SSL"))
    await _metadata_over(listener, _client(ca, ca, "bob"))
    assert seen == ["User:BOB@KRAFTWERK"]


async def test_no_matching_mapping_rule_refuses_the_client(make_listener, ca):
    props = _server_props(ca, **{"ssl.principal.mapping.rules": r"RULE:^CN=admin,.*$/admin/"})
    listener = await make_listener(name="SSL", security=listener_security(
        props, listener_name="SSL", security_protocol="SSL"))
    with pytest.raises(ConnectionFailed):
        await _metadata_over(listener, _client(ca, ca, "mallory"), timeout_ms=1500)
    await wait_for_close_count(listener, "authentication_failed", 1)


async def test_client_auth_none_is_anonymous_and_requested_accepts_no_certificate(make_listener, ca):
    seen: list[str] = []

    async def handler(request: Any, ctx: RequestContext) -> Any:
        seen.append(ctx.principal)
        return await echo_metadata(request, ctx)

    for auth in ("none", "requested"):
        listener = await make_listener(name="SSL", handler=handler, security=listener_security(
            _server_props(ca, client_auth=auth), listener_name="SSL", security_protocol="SSL"))
        assert await _metadata_over(listener, _client(ca, ca, None)) == ["t"]
    assert seen == ["User:ANONYMOUS", "User:ANONYMOUS"]


async def test_certificate_from_another_ca_is_refused_at_the_handshake(make_listener, ca, other_ca):
    listener = await make_listener(name="SSL", security=listener_security(
        _server_props(ca), listener_name="SSL", security_protocol="SSL"))
    # A client certificate from another CA (same CA name, another key): the server refuses it.
    with pytest.raises(ConnectionFailed):
        await _metadata_over(listener, _client(other_ca, ca, "alice"), timeout_ms=1500)
    await wait_for_close_count(listener, "ssl_handshake_failed", 1)
    # A client that does not trust the server's CA refuses the server.
    with pytest.raises(ConnectionFailed) as refused:
        await _metadata_over(listener, _client(ca, other_ca, "alice"), timeout_ms=1500)
    assert isinstance(refused.value.__cause__, ssl.SSLCertVerificationError)
    # No certificate where one is required.
    with pytest.raises(ConnectionFailed):
        await _metadata_over(listener, _client(ca, ca, None), timeout_ms=1500)
    await wait_for_close_count(listener, "ssl_handshake_failed", 2)
    # ... and the listener still serves a good client.
    assert await _metadata_over(listener, _client(ca, ca, "alice")) == ["t"]


async def test_plaintext_to_a_tls_port_is_closed_and_the_listener_keeps_serving(make_listener, ca):
    from kraft_engine.protocol.framing import encode_request

    listener = await make_listener(name="SSL", security=listener_security(
        _server_props(ca), listener_name="SSL", security_protocol="SSL"))
    reader, writer = await asyncio.open_connection(*listener.address)
    writer.write(encode_request(metadata_request(12, ["t"]), correlation_id=1, client_id="plain"))
    await writer.drain()
    # The server never answers in Kafka's framing: it ends the connection (a TLS alert at most).
    data = await asyncio.wait_for(reader.read(), timeout=30)
    assert not data.startswith(b"\x00\x00")
    writer.close()
    await wait_for_close_count(listener, "ssl_handshake_failed", 1)
    assert await _metadata_over(listener, _client(ca, ca, "alice")) == ["t"]


async def test_keystore_files_pem_and_pkcs12(make_listener, ca, tmp_path: Path):
    server = ca.issue("broker-0")
    pem_store = server.keystore_pem(tmp_path, "server")
    p12 = server.pkcs12(tmp_path, "server", "store-pass")
    ca_file = ca.write(tmp_path)
    for props in (
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem_store)},
        {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(p12), "ssl.keystore.password": "store-pass"},
    ):
        listener = await make_listener(name="SSL", security=listener_security(
            props, listener_name="SSL", security_protocol="SSL"))
        trust = client_security({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                 "ssl.truststore.location": str(ca_file)})
        assert await _metadata_over(listener, trust) == ["t"]


async def test_pkcs12_truststore_checks_client_certificates(make_listener, ca, other_ca, tmp_path: Path):
    """A PKCS12 truststore (the CA's certificate in a password-protected store) on the server:
    a client of that CA gets in, a client of another CA does not."""
    server = ca.issue("broker-0")
    truststore = ca.issue("holder").pkcs12(tmp_path, "truststore", "trust-pass")  # holds the CA in its chain
    props = {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": server.chain_pem,
             "ssl.keystore.key": server.key_pem, "ssl.truststore.type": "PKCS12",
             "ssl.truststore.location": str(truststore), "ssl.truststore.password": "trust-pass",
             "ssl.client.auth": "required"}
    listener = await make_listener(name="SSL", security=listener_security(props, listener_name="SSL",
                                                                          security_protocol="SSL"))
    assert await _metadata_over(listener, _client(ca, ca, "alice")) == ["t"]
    with pytest.raises(ConnectionFailed):
        await _metadata_over(listener, _client(other_ca, ca, "alice"), timeout_ms=1500)


def test_bad_tls_settings_name_the_key(ca, tmp_path: Path):
    with pytest.raises(SecurityConfigError, match="keystore"):
        listener_security({}, listener_name="SSL", security_protocol="SSL")
    with pytest.raises(SecurityConfigError, match=r"ssl.client.auth"):
        listener_security(_server_props(ca, client_auth="sometimes"), listener_name="SSL", security_protocol="SSL")
    with pytest.raises(SecurityConfigError, match="JKS"):
        listener_security({"ssl.keystore.type": "JKS", "ssl.keystore.location": "/x"}, listener_name="SSL",
                          security_protocol="SSL")
    server = ca.issue("b")
    with pytest.raises(SecurityConfigError, match="truststore"):
        listener_security({"ssl.keystore.certificate.chain": server.chain_pem, "ssl.keystore.key": server.key_pem,
                           "ssl.client.auth": "required"}, listener_name="SSL", security_protocol="SSL")
    p12 = server.pkcs12(tmp_path, "s", "right")
    with pytest.raises(SecurityConfigError, match="PKCS12"):
        listener_security({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(p12),
                           "ssl.keystore.password": "wrong"}, listener_name="SSL", security_protocol="SSL")
    with pytest.raises(TlsConfigError, match=r"ssl\.enabled\.protocols"):
        client_context(tls_settings({"ssl.enabled.protocols": "SSLv3"}))


async def test_fetch_records_from_a_file_reach_a_tls_client_repeatedly(ca, tmp_path: Path):
    """A response with file regions over TLS is copied (no sendfile under TLS) and delivered every
    time: asyncio's TLS transport paused forever at a zero write-buffer limit, which once hung
    every Fetch with records on TLS listeners."""
    import os

    from test_file_regions import FETCH, _fetch_request, _region, _response

    from kraft_engine.protocol import Listener, SplicedResponse

    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(os.urandom(200_000))
    data = segment.read_bytes()

    async def handler(request: Any, ctx: RequestContext) -> Any:
        regions = [_region(segment, 100, 70_000), _region(segment, 150_000, 5)]
        return SplicedResponse(lambda records_of: _response(ctx, [records_of(r) for r in regions]), regions)

    async with Listener("SSL", security=listener_security(_server_props(ca), listener_name="SSL",
                                                          security_protocol="SSL")) as listener:
        listener.register(FETCH, min_version=4, max_version=16, handler=handler)
        await listener.start("127.0.0.1", 0)
        async with _connection(listener, _client(ca, ca, "alice")) as connection:
            for _ in range(5):
                response = await asyncio.wait_for(connection.send(_fetch_request(12)), timeout=60)
                assert [bytes(p.records) for p in response.responses[0].partitions] == [
                    data[100:70_100], data[150_000:150_005]]
        copied = listener.registry.get_sample_value("kraftwerk_network_file_region_bytes_total",
                                                    {"listener": "SSL", "mode": "copy"})
        assert copied == 5 * 70_005
