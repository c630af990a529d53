"""`kraft storage format --add-scram`'s argument, as Kafka's tool reads it."""

from __future__ import annotations

import base64

import pytest

from kraft_engine.cli.scram_arguments import ScramArgumentError, parse_scram_argument
from kraft_engine.protocol.scram import SCRAM_MECHANISMS, ScramClient, ScramServer, scram_credential


def test_password_credential_authenticates_with_that_password() -> None:
    record = parse_scram_argument("SCRAM-SHA-512=[name=alice,password=alice-secret]")
    assert (record.name, record.mechanism, record.iterations) == ("alice", 2, 4096)
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-512"]
    server, client = ScramServer(mechanism), ScramClient(mechanism, username="alice", password="alice-secret")
    server.client_first(client.first())
    first = server.server_first(scram_credential(mechanism, password="alice-secret", salt=record.salt))
    client.verify(server.final(client.final(first)))


def test_salted_password_and_quoted_values() -> None:
    salt, salted = b"salt-bytes", b"\x01" * 32
    record = parse_scram_argument(
        f'SCRAM-SHA-256=[name="bob",iterations=8192,salt="{base64.b64encode(salt).decode()}",'
        f'saltedpassword="{base64.b64encode(salted).decode()}"]')
    expected = scram_credential(SCRAM_MECHANISMS["SCRAM-SHA-256"], salted_password=salted, salt=salt, iterations=8192)
    assert (record.name, record.mechanism, record.salt, record.stored_key, record.server_key, record.iterations) == (
        "bob", 1, salt, expected.stored_key, expected.server_key, 8192)


@pytest.mark.parametrize(("argument", "message"), [
    ("SCRAM-SHA-1=[name=a,password=b]", "Invalid SCRAM mechanism"),
    ("SCRAM-SHA-256=[password=b]", "'name'"),
    ("SCRAM-SHA-256=[name=a]", "'password' or 'saltedpassword'"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=10]", "iterations"),
    ("SCRAM-SHA-256=[name=a,saltedpassword=AAAA]", "salt"),
    ("SCRAM-SHA-256=[name=a,salt=%%%,password=b]", "base64"),
    ("SCRAM-SHA-256 name=a", "expected MECHANISM"),
    ("SCRAM-SHA-256=[name=a,colour=red]", "Unknown key"),
])
def test_bad_arguments_say_why(argument: str, message: str) -> None:
    with pytest.raises(ScramArgumentError, match=message):
        parse_scram_argument(argument)
