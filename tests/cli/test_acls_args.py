"""`kraft acls` refuses what kafka-acls refuses, with a message, before anything is sent; and
`--command-config` files are read with Kafka's client security keys (a bad one is named)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft_engine.cli.main import main
from kraft_engine.cli.tool_inputs import command_config_security

# Nothing listens here: every refusal must come before a connection.
NOWHERE = "127.0.0.1:1"


@pytest.mark.parametrize(("args", "message"), [
    (["--add", "--topic", "t"], "--allow-principal, --deny-principal"),
    (["--add", "--allow-principal", "User:a"], "at least one resource"),
    (["--add", "--allow-principal", "alice", "--topic", "t"], "principalType:name"),
    (["--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"], "Invalid operation Fly"),
    (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"], "--topic and a --group"),
    (["--add", "--allow-principal", "User:a", "--producer"], "--producer you must specify a --topic"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "MATCH"],
     "not valid when adding acls"),
    (["--list", "--allow-principal", "User:a"], "--list does not take"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--principal", "User:b"], "only valid with --list"),
])
def test_refusals_name_the_problem(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acls", "--bootstrap-server", NOWHERE, *args]) == 1
    assert message in capsys.readouterr().err


def test_command_config_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain.properties"
    plain.write_text("# nothing secure\nclient.id=x\n", encoding="utf-8")
    plain_security = command_config_security(str(plain))
    assert plain_security is not None and plain_security.security_protocol == "PLAINTEXT"
    scram = tmp_path / "scram.properties"
    scram.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     'username="alice" password="secret";\n', encoding="utf-8")
    security = command_config_security(str(scram))
    assert security is not None and security.sasl is not None
    assert (security.security_protocol, security.sasl.mechanism, security.sasl.username) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice")
    broken = tmp_path / "broken.properties"
    broken.write_text("security.protocol=SASL_SSL\n", encoding="utf-8")
    assert main(["acls", "--bootstrap-server", NOWHERE, "--command-config", str(broken), "--list"]) == 1
    assert "sasl.jaas.config" in capsys.readouterr().err
    assert main(["acls", "--bootstrap-server", NOWHERE, "--command-config", str(tmp_path / "missing"), "--list"]) == 1
    assert "cannot read --command-config" in capsys.readouterr().err
