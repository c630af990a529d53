"""`ssl.principal.mapping.rules` as Kafka's SslPrincipalMapper reads them, and SCRAM against
RFC 7677's published exchange."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft_engine.protocol.principal_mapping import NoMatchingRule, SslPrincipalMapper
from kraft_engine.protocol.scram import (
    SCRAM_MECHANISMS,
    ScramClient,
    ScramError,
    ScramServer,
    scram_credential,
)


@pytest.mark.parametrize(("rules", "name", "expected"), [
    ("DEFAULT", "CN=duke,OU=JavaSoft,O=Sun Microsystems", "CN=duke,OU=JavaSoft,O=Sun Microsystems"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=duke,OU=ServiceUsers,O=Org,C=US", "duke"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=duke,OU=JavaSoft,O=Sun", "CN=duke,OU=JavaSoft,O=Sun"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
     "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US", "duke@javasoft"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/U",
     "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US", "DUKE@JAVASOFT"),
    # a reference to a group the pattern lacks stays literal, as Kafka escapes it
    ("RULE:^CN=(.*?),O=.*$/$1-$2/", "CN=svc,O=corp", "svc-$2"),
    # `\,` escapes inside a replacement; rules may be separated by spaces and newlines
    ("RULE:^CN=([^,]*),.*$/user\\,$1/ ,\n DEFAULT", "CN=x,O=y", "user,x"),
])
def test_mapping_rules(rules: str, name: str, expected: str) -> None:
    assert SslPrincipalMapper(rules).name(name) == expected


def test_no_rule_applies_refuses() -> None:
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=x"):
        SslPrincipalMapper("RULE:^CN=admin$/admin/").name("CN=x")


@pytest.mark.parametrize("rules", ["DEFAULT/L", "DEFAULT/U", "RULE:/", "RULE:blah", "RULE:^CN=(.*)/$1"])
def test_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)


# --- SCRAM ---------------------------------------------------------------------------------------


def test_rfc7677_exchange_byte_for_byte() -> None:
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-256"]
    credential = scram_credential(mechanism, password="pencil", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = ScramServer(mechanism, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    client = ScramClient(mechanism, username="user", password="pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert server.client_first(client.first()) == "user"
    server_first = server.server_first(credential)
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = client.final(server_first)
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    server_final = server.final(final)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client.verify(server_final)
    with pytest.raises(ScramError, match="out of order"):
        server.final(final)  # one exchange, one proof


def test_client_refuses_a_server_without_the_credential() -> None:
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-512"]
    server = ScramServer(mechanism)
    client = ScramClient(mechanism, username="u", password="right")
    server.client_first(client.first())
    # The server holds a credential for another password: the client's proof fails on the
    # server, and the server's signature would fail on the client.
    first = server.server_first(scram_credential(mechanism, password="other"))
    with pytest.raises(ScramError, match="Invalid client credentials"):
        server.final(client.final(first))
    with pytest.raises(ScramError, match="server signature"):
        client.verify(b"v=" + base64.b64encode(b"\x00" * 64))


@pytest.mark.parametrize("message", [
    b"y,,n=user,r=abc", b"p=tls-unique,,n=user,r=abc", b"n,a=other,n=user,r=abc", b"n,,n=user,r=abc,tokenauth=true",
    b"n,,n=,r=abc", b"", b"\xff",
])
def test_client_first_messages_kafka_refuses(message: bytes) -> None:
    with pytest.raises(ScramError):
        ScramServer(SCRAM_MECHANISMS["SCRAM-SHA-256"]).client_first(message)


@given(st.binary(max_size=300))
def test_any_client_final_bytes_fail_cleanly(data: bytes) -> None:
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-256"]
    server = ScramServer(mechanism, nonce="s")
    server.client_first(b"n,,n=user,r=c")
    server.server_first(scram_credential(mechanism, password="p", salt=b"salt"))
    with pytest.raises(ScramError):
        server.final(data)


def test_saslname_escapes_round_trip() -> None:
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-256"]
    client = ScramClient(mechanism, username="a=b,c", password="p")
    assert b"n=a=3Db=2Cc," in client.first()
    assert ScramServer(mechanism).client_first(client.first()) == "a=b,c"
