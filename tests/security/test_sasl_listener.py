"""SASL listeners (KIP-152): PLAIN and SCRAM-SHA-256/512 through SaslHandshake and
SaslAuthenticate, from our client and from raw bytes.

Attack tests: a wrong SCRAM proof, a replayed client-final, a request before authentication, an
oversized SASL frame and a client that never authenticates; none gets in, and the listener keeps
serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from pki import CertificateAuthority
from protocol_helpers import RawPeer, closes, echo_metadata, metadata_request, wait_for_close_count

from kraft_engine.protocol import (
    ConnectionConfig,
    ConnectionFailed,
    KafkaConnection,
    RequestContext,
    request_class,
    response_class,
)
from kraft_engine.protocol.framing import decode_response
from kraft_engine.protocol.sasl import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, SaslAuthenticationFailed
from kraft_engine.protocol.scram import SCRAM_MECHANISMS, ScramClient, ScramCredential, scram_credential
from kraft_engine.protocol.security import (
    ClientSecurity,
    SecurityConfigError,
    client_security,
    listener_security,
)

_USERS = {"alice": "alice-secret", "bob": "bob-secret"}
_JAAS_PLAIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
               'password="admin-secret" user_admin="admin-secret" user_carol="carol-secret";')


@pytest.fixture(scope="module")
def credentials() -> dict[tuple[str, str], ScramCredential]:
    return {(mechanism, user): scram_credential(SCRAM_MECHANISMS[mechanism], password=password, iterations=4096)
            for mechanism in SCRAM_MECHANISMS for user, password in _USERS.items()}


def _props(**extra: str) -> dict[str, str]:
    return {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": _JAAS_PLAIN,
            "connection.failed.authentication.delay.ms": "50", **extra}


async def _listener(make_listener: Any, credentials: dict[tuple[str, str], ScramCredential], *,
                    seen: list[str] | None = None, **extra: str) -> Any:
    async def handler(request: Any, ctx: RequestContext) -> Any:
        if seen is not None:
            seen.append(ctx.principal)
        return await echo_metadata(request, ctx)

    security = listener_security(_props(**extra), listener_name="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT",
                                 scram_credentials=lambda mechanism, user: credentials.get((mechanism, user)))
    return await make_listener(name="SASL_PLAINTEXT", handler=handler, security=security)


def _client(mechanism: str, user: str, password: str) -> ClientSecurity:
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    return client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                            "sasl.jaas.config": f'{module} required username="{user}" password="{password}";'})


async def _metadata_as(listener: Any, security: ClientSecurity) -> list[str]:
    async with KafkaConnection(*listener.address, config=ConnectionConfig(security=security)) as connection:
        await connection.connect(timeout_ms=10000)
        response = await connection.send(metadata_request(12, ["t"]))
        return [t.name for t in response.topics]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_each_mechanism_authenticates_and_names_the_principal(make_listener, credentials, mechanism):
    seen: list[str] = []
    listener = await _listener(make_listener, credentials, seen=seen)
    user, password = ("carol", "carol-secret") if mechanism == "PLAIN" else ("alice", "alice-secret")
    assert await _metadata_as(listener, _client(mechanism, user, password)) == ["t"]
    assert seen == [f"User:{user}"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_wrong_password_is_refused_and_the_listener_keeps_serving(make_listener, credentials, mechanism):
    listener = await _listener(make_listener, credentials)
    user = "carol" if mechanism == "PLAIN" else "alice"
    with pytest.raises(ConnectionFailed) as refused:
        await _metadata_as(listener, _client(mechanism, user, "guess"))
    assert isinstance(refused.value.__cause__, SaslAuthenticationFailed)
    assert "SASL_AUTHENTICATION_FAILED" in str(refused.value)
    await wait_for_close_count(listener, "authentication_failed", 1)
    with pytest.raises(ConnectionFailed):
        await _metadata_as(listener, _client(mechanism, "nobody", "x"))
    good = ("carol", "carol-secret") if mechanism == "PLAIN" else ("alice", "alice-secret")
    assert await _metadata_as(listener, _client(mechanism, *good)) == ["t"]


async def test_unenabled_mechanism_is_refused_with_the_enabled_list(make_listener, credentials):
    listener = await _listener(make_listener, credentials, **{"sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    with pytest.raises(ConnectionFailed, match=r"UNSUPPORTED_SASL_MECHANISM.*SCRAM-SHA-512"):
        await _metadata_as(listener, _client("SCRAM-SHA-256", "alice", "alice-secret"))


# --- raw attacks -------------------------------------------------------------------------------


async def _exchange(peer: RawPeer, request: Any, *, correlation_id: int) -> Any:
    await peer.send_request(request, correlation_id=correlation_id)
    frame = await peer.read_frame()
    api_key = {"SaslHandshakeRequest": SASL_HANDSHAKE_KEY, "SaslAuthenticateRequest": SASL_AUTHENTICATE_KEY}[
        type(request).__name__]
    return decode_response(frame, response_class(api_key, request.__version__))


async def _handshake(peer: RawPeer, mechanism: str) -> None:
    response = await _exchange(peer, request_class(SASL_HANDSHAKE_KEY, 1)(mechanism=mechanism), correlation_id=1)
    assert response.error_code == ErrorCode.none


def _authenticate(token: bytes) -> Any:
    return request_class(SASL_AUTHENTICATE_KEY, 2)(auth_bytes=token)


async def test_wrong_and_replayed_scram_proofs_never_get_in(make_listener, raw_peer, credentials):
    listener = await _listener(make_listener, credentials)
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-512"]

    # A genuine exchange, recorded.
    peer = await raw_peer(listener)
    await _handshake(peer, mechanism.name)
    client = ScramClient(mechanism, username="alice", password="alice-secret", nonce="fixed-client-nonce")
    first = client.first()
    server_first = (await _exchange(peer, _authenticate(first), correlation_id=2)).auth_bytes
    recorded_final = client.final(server_first)
    done = await _exchange(peer, _authenticate(recorded_final), correlation_id=3)
    assert done.error_code == ErrorCode.none
    client.verify(done.auth_bytes)  # the server proved it holds the credential
    await peer.close()

    # Replay: the same client-first, then the recorded client-final. The server's nonce is new.
    peer = await raw_peer(listener)
    await _handshake(peer, mechanism.name)
    new_server_first = (await _exchange(peer, _authenticate(first), correlation_id=2)).auth_bytes
    assert new_server_first != server_first
    refused = await _exchange(peer, _authenticate(recorded_final), correlation_id=3)
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    assert await peer.closed_by_server()

    # Replay with the nonce rewritten to this exchange's: the proof was made for another message.
    peer = await raw_peer(listener)
    await _handshake(peer, mechanism.name)
    fresh_first = (await _exchange(peer, _authenticate(first), correlation_id=2)).auth_bytes
    fresh_nonce = fresh_first.decode().split(",")[0][2:]
    old_nonce = server_first.decode().split(",")[0][2:]
    forged = recorded_final.replace(old_nonce.encode(), fresh_nonce.encode())
    refused = await _exchange(peer, _authenticate(forged), correlation_id=3)
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    assert await peer.closed_by_server()

    # A proof of the wrong length and a garbled message.
    for template in (b"c=biws,r=" + fresh_nonce.encode() + b",p=AAAA", b"\xff\xfe garbage"):
        peer = await raw_peer(listener)
        await _handshake(peer, mechanism.name)
        fresh = (await _exchange(peer, _authenticate(first), correlation_id=2)).auth_bytes
        final = template.replace(fresh_nonce.encode(), fresh.decode().split(",")[0][2:].encode())
        refused = await _exchange(peer, _authenticate(final), correlation_id=3)
        assert refused.error_code == ErrorCode.sasl_authentication_failed
        assert await peer.closed_by_server()
    await wait_for_close_count(listener, "authentication_failed", 4)
    assert await _metadata_as(listener, _client("SCRAM-SHA-512", "alice", "alice-secret")) == ["t"]


async def test_requests_before_authentication_close_the_connection(make_listener, raw_peer, credentials):
    listener = await _listener(make_listener, credentials)
    peer = await raw_peer(listener)
    await peer.send_request(metadata_request(12, ["t"]), correlation_id=1)
    assert await peer.closed_by_server()
    # SaslAuthenticate before SaslHandshake is out of order too.
    peer = await raw_peer(listener)
    await peer.send_request(_authenticate(b"n,,n=alice,r=abc"), correlation_id=1)
    assert await peer.closed_by_server()
    await wait_for_close_count(listener, "illegal_sasl_state", 2)
    assert await _metadata_as(listener, _client("SCRAM-SHA-256", "bob", "bob-secret")) == ["t"]


async def test_oversized_sasl_frame_is_refused_from_its_size(make_listener, raw_peer, credentials):
    listener = await _listener(make_listener, credentials, **{"sasl.server.max.receive.size": "4096"})
    peer = await raw_peer(listener)
    await _handshake(peer, "PLAIN")
    # A size prefix of 64 MiB: refused before the body is read (nothing near that is ever sent).
    await peer.send(struct.pack(">i", 64 * 1024 * 1024) + b"\x00" * 16)
    assert await peer.closed_by_server()
    await wait_for_close_count(listener, "request_too_large", 1)
    assert await _metadata_as(listener, _client("PLAIN", "carol", "carol-secret")) == ["t"]


async def test_a_client_that_never_authenticates_is_closed_after_the_handshake_timeout(make_listener, raw_peer, credentials):
    listener = await _listener(make_listener, credentials, **{"kraftwerk.sasl.handshake.timeout.ms": "300"})
    peer = await raw_peer(listener)
    await _handshake(peer, "SCRAM-SHA-512")  # ... and then silence
    assert await asyncio.wait_for(peer.closed_by_server(), timeout=60)
    await wait_for_close_count(listener, "authentication_timeout", 1)  # counted once the task ends
    # An authenticated connection is not subject to it.
    async with KafkaConnection(*listener.address, config=ConnectionConfig(
            security=_client("SCRAM-SHA-512", "alice", "alice-secret"))) as connection:
        await connection.connect(timeout_ms=10000)
        await asyncio.sleep(0.6)
        response = await connection.send(metadata_request(12, ["t"]))
        assert [t.name for t in response.topics] == ["t"]
    assert closes(listener, "authentication_timeout") == 1


async def test_sasl_ssl_with_scram(make_listener, credentials):
    ca = CertificateAuthority()
    server = ca.issue("broker")
    props = _props(**{"sasl.enabled.mechanisms": "SCRAM-SHA-512", "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": server.chain_pem,
                      "ssl.keystore.key": server.key_pem})
    security = listener_security(props, listener_name="SASL_SSL", security_protocol="SASL_SSL",
                                 scram_credentials=lambda m, u: credentials.get((m, u)))
    seen: list[str] = []

    async def handler(request: Any, ctx: RequestContext) -> Any:
        seen.append(ctx.principal)
        return await echo_metadata(request, ctx)

    listener = await make_listener(name="SASL_SSL", handler=handler, security=security)
    client = client_security({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": ca.certificate_pem,
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="bob" password="bob-secret";'})
    assert await _metadata_as(listener, client) == ["t"]
    assert seen == ["User:bob"]


def _client_sockets_to(port: int) -> int:
    """This process's open TCP sockets whose peer is `port` on loopback (from /proc)."""
    ours = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                ours.add(link[len("socket:["):-1])
    with open("/proc/self/net/tcp", encoding="ascii") as table:
        rows = [line.split() for line in table.read().splitlines()[1:]]
    return sum(1 for row in rows if int(row[2].rsplit(":", 1)[1], 16) == port and row[9] in ours)


async def test_a_refused_sasl_ssl_login_leaves_no_socket_behind_when_the_clients_event_loop_ends(
    make_listener, credentials,
):
    # A tool's asyncio.run ends right after the refusal. The listener answers a failed login only
    # after connection.failed.authentication.delay.ms, so a graceful TLS close (waiting for its
    # close_notify) would outlive the loop and leave the socket to the garbage collector, whose
    # ResourceWarning then fails whatever runs at that moment.
    ca = CertificateAuthority()
    server = ca.issue("broker")
    props = _props(**{"sasl.enabled.mechanisms": "SCRAM-SHA-512", "ssl.keystore.type": "PEM",
                      "ssl.keystore.certificate.chain": server.chain_pem, "ssl.keystore.key": server.key_pem,
                      "connection.failed.authentication.delay.ms": "1000"})
    listener = await make_listener(name="SASL_SSL", security=listener_security(
        props, listener_name="SASL_SSL", security_protocol="SASL_SSL",
        scram_credentials=lambda m, u: credentials.get((m, u))))
    client = client_security({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": ca.certificate_pem,
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="bob" password="a guess";'})

    async def refused() -> None:
        with pytest.raises(ConnectionFailed, match="SASL_AUTHENTICATION_FAILED"):
            await _metadata_as(listener, client)

    await asyncio.to_thread(asyncio.run, refused())
    assert _client_sockets_to(listener.address[1]) == 0


def test_sasl_settings_are_checked():
    with pytest.raises(SecurityConfigError, match="GSSAPI"):
        listener_security({}, listener_name="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT")
    with pytest.raises(SecurityConfigError, match=r"plain\.sasl\.jaas\.config"):
        listener_security({"sasl.enabled.mechanisms": "PLAIN"}, listener_name="SASL_PLAINTEXT",
                          security_protocol="SASL_PLAINTEXT")
    with pytest.raises(SecurityConfigError, match="jaas"):
        listener_security({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": "Module required user_a=;"},
                          listener_name="X", security_protocol="SASL_PLAINTEXT")


async def test_a_node_authenticates_to_another_with_the_inter_broker_mechanism(make_listener, credentials):
    """What a broker uses to reach the INTERNAL listener of another: the listener's own keys,
    `sasl.mechanism.inter.broker.protocol`, and the username and password of that mechanism's
    JAAS config under the listener's prefix."""
    from kraft_engine.protocol.security import listener_client_security

    seen: list[str] = []

    async def handler(request: Any, ctx: RequestContext) -> Any:
        seen.append(ctx.principal)
        return await echo_metadata(request, ctx)

    node_props = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="bob-secret";',
    }
    listener = await make_listener(name="INTERNAL", handler=handler, security=listener_security(
        node_props, listener_name="INTERNAL", security_protocol="SASL_PLAINTEXT",
        scram_credentials=lambda m, u: credentials.get((m, u))))
    client = listener_client_security(node_props, listener_name="INTERNAL", security_protocol="SASL_PLAINTEXT",
                                      mechanism_key="sasl.mechanism.inter.broker.protocol")
    assert await _metadata_as(listener, client) == ["t"]
    assert seen == ["User:bob"]
    with pytest.raises(SecurityConfigError, match="username and password"):
        listener_client_security({"sasl.mechanism.controller.protocol": "PLAIN"}, listener_name="CONTROLLER",
                                 security_protocol="SASL_SSL", mechanism_key="sasl.mechanism.controller.protocol")
