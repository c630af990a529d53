"""`kraft reassign-partitions`' inputs and the orders its output follows, without a cluster:
Kafka's JSON files refused with Kafka's words, the throttle lists Kafka's tool writes, and the
java.util.HashSet iteration order Kafka's "Clearing ... throttles" lines print in (checked against
a JVM's own output)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kraft_engine.cli.main import main
from kraft_engine.cli.reassign_partitions import (
    _moves,
    _throttled_replicas,
    java_hash_set_order,
    parse_reassignment_json,
    parse_topics_to_move_json,
)
from kraft_engine.records.group_records import java_string_hash


def test_the_reassignment_json_gives_replicas_and_log_dirs() -> None:
    parts, dirs = parse_reassignment_json(json.dumps({"version": 1, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [1, 2], "log_dirs": ["/data/b", "any"]},
        {"topic": "orders", "partition": 1, "replicas": [3]}]}))
    assert parts == {("orders", 0): [1, 2], ("orders", 1): [3]}
    assert dirs == {("orders", 0, 1): "/data/b"}


@pytest.mark.parametrize(("document", "message"), [
    ({"version": 1, "partitions": []}, "Partition reassignment list cannot be empty"),
    ({"version": 2, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]}, "Not supported version field value 2"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}, "Partition replica list cannot be empty"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 1]}]},
     "Partition replica lists may not contain duplicate entries: t-0 contains multiple entries for 1"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}, {"topic": "t", "partition": 0, "replicas": [2]}]},
     "Partition reassignment contains duplicate topic partitions: t-0"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]},
     "Size of replicas list [1, 2] is different from size of log dirs list [any] for partition t-0"),
])
def test_a_bad_reassignment_json_is_refused_with_kafkas_words(document: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        parse_reassignment_json(json.dumps(document))


def test_the_topics_to_move_json() -> None:
    assert parse_topics_to_move_json('{"version":1,"topics":[{"topic":"a"},{"topic":"b"}]}') == ["a", "b"]
    with pytest.raises(ValueError, match=r"List of topics to reassign contains duplicate entries: \[a\]"):
        parse_topics_to_move_json('{"topics":[{"topic":"a"},{"topic":"a"}]}')


def test_throttled_replicas_are_kafkas_sources_and_new_replicas() -> None:
    """Kafka's calculateProposedMoveMap: the leader list names the current replicas, the follower
    list the new ones; an ongoing reassignment's adding replicas are not sources."""

    class Ongoing:
        replicas = (1, 2, 3)
        adding_replicas = (3,)

    moves = _moves({("t", 1): Ongoing()}, {("t", 0): [2, 3], ("t", 1): [1, 4]}, {("t", 0): [1, 2], ("t", 1): [1, 2, 3]})
    assert _throttled_replicas(moves, leader=True) == {"t": "0:1,0:2,1:1,1:2"}
    assert _throttled_replicas(moves, leader=False) == {"t": "0:3,1:4"}


def test_java_hash_set_order_is_the_jvms() -> None:
    # Printed by `new HashSet<>(Arrays.asList(...))` on a JVM (OpenJDK 17).
    topics = ["light", "local", "orders", "payments", "heavy", "__consumer_offsets", "t1", "t2", "a-very-long-topic-name"]
    assert java_hash_set_order(topics, hash_of=java_string_hash) == [
        "a-very-long-topic-name", "light", "payments", "orders", "t1", "local", "__consumer_offsets", "t2", "heavy"]
    assert java_hash_set_order([101, 102, 103, 104, 17, 1, 33, 1000, 2000, 3], hash_of=int) == [
        2000, 17, 1, 33, 3, 101, 102, 103, 104, 1000]
    assert java_hash_set_order([100 + i * 7 for i in range(20)], hash_of=int) == [
        128, 226, 163, 100, 198, 135, 233, 170, 107, 205, 142, 177, 114, 212, 149, 184, 121, 219, 156, 191]


@pytest.mark.parametrize("option", [["--throttle", "5"], ["--disallow-replication-factor-change"]])
def test_options_of_another_action_are_refused(option: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reassign-partitions", "--bootstrap-server", "127.0.0.1:1", "--verify",
                 "--reassignment-json-file", "x.json", *option]) == 1
    assert f"Option \"[{option[0][2:]}]\" can't be used with action \"[verify]\"" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--bootstrap-server", "127.0.0.1:1", "--bootstrap-controller", "127.0.0.1:2", "--list"],
     "Please don't specify both --bootstrap-server and --bootstrap-controller"),
    (["--list"], "Please specify either --bootstrap-server or --bootstrap-controller"),
    # Kafka 4.1 takes --bootstrap-controller for --cancel and --list only.
    (["--bootstrap-controller", "127.0.0.1:2", "--execute", "--reassignment-json-file", "x.json"],
     "Option \"[bootstrap-controller]\" can't be used with action \"[execute]\""),
    (["--bootstrap-controller", "127.0.0.1:2", "--verify", "--reassignment-json-file", "x.json"],
     "Option \"[bootstrap-controller]\" can't be used with action \"[verify]\""),
    (["--bootstrap-controller", "127.0.0.1:2", "--generate", "--topics-to-move-json-file", "x.json",
      "--broker-list", "1"], "Option \"[bootstrap-controller]\" can't be used with action \"[generate]\""),
    (["--bootstrap-controller", "nohost", "--list"], "--bootstrap-controller: "),
])
def test_the_bootstrap_flags_follow_kafkas_rules(args: list[str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reassign-partitions", *args]) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("properties", "message"), [
    ("security.protocol=NOPE\n", "--command-config {path}: Invalid value NOPE for configuration security.protocol"),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n", "sasl.jaas.config is not set"),
    ("security.protocol=SSL\nssl.truststore.location=/nonexistent/trust.pem\nssl.truststore.type=PEM\n",
     "--command-config {path}: "),
])
def test_a_command_config_that_cannot_be_used_is_refused_before_anything_is_sent(
        properties: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "admin.properties"
    path.write_text(properties)
    # Port 1 answers nothing: a refusal that reached the network would time out instead.
    assert main(["reassign-partitions", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(path),
                 "--list"]) == 1
    assert message.format(path=path) in capsys.readouterr().err


def test_a_missing_command_config_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.properties"
    assert main(["reassign-partitions", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(missing),
                 "--list"]) == 1
    assert f"cannot read --command-config {missing}" in capsys.readouterr().err
