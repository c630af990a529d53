"""`kraft configs` reads `--add-config` as Kafka's ConfigCommand does and refuses what it refuses,
with Kafka's message, before anything is sent."""

from __future__ import annotations

import pytest

from kraft_engine.cli.configs import ConfigsArgumentError, parse_add_config
from kraft_engine.cli.main import main

# Nothing listens here: every refusal must come before a connection.
NOWHERE = "127.0.0.1:1"


@pytest.mark.parametrize(("text", "parsed"), [
    ("retention.ms=1000", {"retention.ms": "1000"}),
    ("a=1, b = 2 ,c=", {"a": "1", "b": "2", "c": ""}),
    ("k1=v1,k2=[v1,v2,v2],k3=v3", {"k1": "v1", "k2": "v1,v2,v2", "k3": "v3"}),
    ("SCRAM-SHA-512=[iterations=8192,password=a=b,c]", {"SCRAM-SHA-512": "iterations=8192,password=a=b,c"}),
    ("SCRAM-SHA-256=[password=secret],SCRAM-SHA-512=[password=other]",
     {"SCRAM-SHA-256": "password=secret", "SCRAM-SHA-512": "password=other"}),
])
def test_add_config_is_split_as_kafka_splits_it(text: str, parsed: dict[str, str]) -> None:
    assert parse_add_config(text) == parsed


@pytest.mark.parametrize("text", ["novalue", "a=1,b", "a=1=2"])
def test_add_config_without_key_equals_value_is_refused(text: str) -> None:
    with pytest.raises(ConfigsArgumentError, match="all configs to be added must be in the format"):
        parse_add_config(text)


@pytest.mark.parametrize(("args", "message"), [
    (["--entity-type", "topics", "--entity-name", "t"], "Command must include exactly one action: --describe, --alter"),
    (["--describe", "--alter", "--entity-type", "topics"], "exactly one action"),
    (["--describe"], "At least one entity type must be specified"),
    (["--describe", "--entity-type", "planets"], "Invalid entity type planets, the entity type must be one of topics"),
    (["--describe", "--entity-type", "topics", "--entity-type", "topics"], "Duplicate entity type(s) specified: topics"),
    (["--describe", "--entity-type", "topics", "--entity-type", "brokers"],
     "Only 'users' and 'clients' entity types may be specified together"),
    (["--describe", "--entity-type", "topics", "--topic", "t"],
     "--entity-{type,name,default} should not be used in conjunction with specific entity flags"),
    (["--describe", "--entity-type", "brokers", "--entity-name", "one"],
     "The entity name for brokers must be a valid integer broker id, but it is: one"),
    (["--describe", "--entity-type", "topics", "--entity-default"],
     "--entity-default must not be specified with --describe of topics"),
    (["--alter", "--entity-type", "topics", "--add-config", "a=1"], "An entity name must be specified with --alter of topics"),
    (["--alter", "--entity-type", "brokers", "--add-config", "a=1"],
     "An entity-name or default entity must be specified with --alter of users, clients, brokers or ips"),
    (["--alter", "--topic", "t"], "At least one of --add-config, --add-config-file, or --delete-config must be specified"),
    (["--alter", "--topic", "t", "--add-config", "a=1", "--add-config-file", "x.properties"],
     "Only one of --add-config or --add-config-file must be specified"),
    (["--alter", "--topic", "t", "--add-config", "bad key=1"], "Invalid character found for config key: bad key"),
    (["--alter", "--user", "alice", "--add-config", "SCRAM-SHA-512=[iterations=1000,password=x]"],
     "Iterations 1000 is less than the minimum 4096 required for SCRAM-SHA-512"),
    (["--alter", "--user", "alice", "--add-config", "SCRAM-SHA-512=[pass=x]"],
     "Invalid credential property SCRAM-SHA-512=pass=x"),
    (["--alter", "--user", "alice", "--add-config", "consumer_byte_rate=1024"],
     "Only quota and SCRAM credential configs can be added for 'users' using --bootstrap-server"),
    (["--alter", "--entity-type", "users", "--entity-default", "--add-config", "SCRAM-SHA-256=[password=x]"],
     "The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials"),
    (["--describe", "--entity-type", "clients"], "kraft configs serves the entity types topics, brokers, users; "
                                                 "clients is not served"),
    (["--describe", "--entity-type", "broker-loggers", "--entity-name", "1"], "broker-loggers is not served"),
])
def test_refusals_are_kafkas(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["configs", "--bootstrap-server", NOWHERE, *args]) == 1
    assert message in capsys.readouterr().err


def test_exactly_one_of_bootstrap_server_and_bootstrap_controller(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["configs", "--describe", "--topic", "t"]) == 1
    assert "One of the required --bootstrap-server or --bootstrap-controller" in capsys.readouterr().err
    assert main(["configs", "--bootstrap-server", NOWHERE, "--bootstrap-controller", NOWHERE, "--describe",
                 "--topic", "t"]) == 1
    assert "Only one of --bootstrap-server or --bootstrap-controller can be specified" in capsys.readouterr().err
