"""ACLs on a secured cluster, end to end: StandardAuthorizer on every node, nodes and an `admin`
SCRAM user as `super.users`, ACLs managed with `kraft acls --command-config`, and kafka-python
clients (SCRAM-SHA-512 over SASL_SSL) allowed where their ACLs allow and refused with
TOPIC_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED where they do not.

ACLs reach each broker through its metadata log, after the controller commits them, so every
step that changes ACLs waits until each broker lists the change (DescribeAcls to that broker)
before a client acts on it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from quorum_processes import HOST, KRAFT, kraft_tool, wait_for
from secure_cluster import SecureCluster, start_secure_cluster

pytestmark = [
    pytest.mark.process,
    # kafka-python loads its schemas with importlib.resources' deprecated helpers
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

_NODES = ("node-1", "node-101", "node-102")
_TOPIC = "acl-orders"
_GROUP = "acl-group"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    processes = SecureCluster(root=Path(tmp_path_factory.mktemp("acls")))
    authorizer = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # Nodes authenticate with their certificates (mTLS): their subjects are super users.
        "super.users": ";".join([*(f"User:CN={n},O=kraftwerk" for n in _NODES), "User:admin"]),
    }
    processes.extra_config |= authorizer  # the controller's
    processes.broker_config |= authorizer
    try:
        start_secure_cluster(processes, controller_flags=tuple(
            flag for user in ("admin", "alice", "bob")
            for flag in ("--add-scram", f"SCRAM-SHA-512=[name={user},password={user}-secret]")))
        yield processes
    finally:
        processes.cleanup()


def _command_config(cluster: SecureCluster, directory: Path, user: str) -> Path:
    path = directory / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={cluster.ca.write(directory)}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{user}-secret";\n', encoding="utf-8")
    return path


def _acls(cluster: SecureCluster, config: Path, *args: str, bootstrap: str | None = None) -> subprocess.CompletedProcess[str]:
    return kraft_tool("acls", "--bootstrap-server", bootstrap or cluster.client_bootstrap(),
                      "--command-config", str(config), *args)


def _wait_every_broker_lists(cluster: SecureCluster, config: Path, entry: str, *, present: bool = True) -> None:
    for node_id in sorted(cluster.brokers):
        bootstrap = f"{HOST}:{cluster.client_ports[node_id]}"

        def settled(bootstrap: str = bootstrap) -> bool:
            listed = _acls(cluster, config, "--list", "--topic", _TOPIC, bootstrap=bootstrap)
            assert listed.returncode == 0, listed.stderr
            return (entry in listed.stdout) == present

        wait_for(settled, timeout_s=120, interval_s=0.5, what=f"broker {node_id} to {'list' if present else 'drop'} {entry}")


def _client(cluster: SecureCluster, directory: Path, user: str) -> dict[str, object]:
    return {"bootstrap_servers": cluster.client_bootstrap(), "security_protocol": "SASL_SSL",
            "ssl_cafile": str(cluster.ca.write(directory)), "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": user, "sasl_plain_password": f"{user}-secret", "request_timeout_ms": 30000}


def _produce(cluster: SecureCluster, directory: Path, user: str, values: list[bytes]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(acks="all", enable_idempotence=False, max_block_ms=60000,
                             **_client(cluster, directory, user))
    try:
        for value in values:
            producer.send(_TOPIC, value=value).get(timeout=60)
    finally:
        producer.close()


def _consume_in_group(cluster: SecureCluster, directory: Path, user: str, count: int) -> list[bytes]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(_TOPIC, group_id=_GROUP, auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=60000, **_client(cluster, directory, user))
    try:
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == count:
                break
        consumer.commit()
        return values
    finally:
        consumer.close()


def test_acls_allow_and_refuse_real_clients(cluster: SecureCluster, tmp_path: Path) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

    admin_config = _command_config(cluster, tmp_path, "admin")
    alice_config = _command_config(cluster, tmp_path, "alice")

    # The super user creates the topic; bob, with no ACL, is refused by the controller (the
    # broker forwards CreateTopics with bob's principal inside the Envelope).
    admin = KafkaAdminClient(**_client(cluster, tmp_path, "admin"))
    try:
        admin.create_topics([NewTopic(_TOPIC, num_partitions=1, replication_factor=2)], timeout_ms=30000)
    finally:
        admin.close()
    cluster.wait_isr(_TOPIC, 0, {101, 102})
    bob_admin = KafkaAdminClient(**_client(cluster, tmp_path, "bob"))
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            bob_admin.create_topics([NewTopic("bobs-topic", num_partitions=1, replication_factor=1)],
                                    timeout_ms=30000)
        # Listing topics leaves out what bob may not describe.
        assert _TOPIC not in bob_admin.list_topics()
    finally:
        bob_admin.close()

    # A user without ALTER on the cluster cannot add ACLs (CLUSTER_AUTHORIZATION_FAILED).
    refused = _acls(cluster, alice_config, "--add", "--allow-principal", "User:alice", "--operation", "All",
                    "--topic", _TOPIC)
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr

    added = _acls(cluster, admin_config, "--add", "--allow-principal", "User:alice", "--producer", "--consumer",
                  "--topic", _TOPIC, "--group", _GROUP)
    assert added.returncode == 0, added.stderr
    assert (f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={_TOPIC}, patternType=LITERAL)`: \n"
            " \t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)\n") in added.stdout
    # (The listing kafka-acls prints after adding may predate the broker's copy of the new ACLs,
    # in Kafka as here: the ACLs travel through the metadata log.)
    _wait_every_broker_lists(cluster, admin_config, "principal=User:alice, host=*, operation=READ")
    group_listed = _acls(cluster, admin_config, "--list", "--group", _GROUP)
    assert group_listed.stdout == (
        f"Current ACLs for resource `ResourcePattern(resourceType=GROUP, name={_GROUP}, patternType=LITERAL)`: \n"
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW) \n\n")

    # alice produces and consumes in her group; bob is refused on the topic and on the group.
    values = [f"order-{i}".encode() for i in range(5)]
    _produce(cluster, tmp_path, "alice", values)
    assert _consume_in_group(cluster, tmp_path, "alice", len(values)) == values
    with pytest.raises(TopicAuthorizationFailedError):
        _produce(cluster, tmp_path, "bob", [b"intruder"])
    with pytest.raises((GroupAuthorizationFailedError, TopicAuthorizationFailedError)):
        _consume_in_group(cluster, tmp_path, "bob", 1)

    # A DENY wins over alice's ALLOW: WRITE is refused, reading still works.
    denied = _acls(cluster, admin_config, "--add", "--deny-principal", "User:alice", "--operation", "Write",
                   "--topic", _TOPIC)
    assert denied.returncode == 0, denied.stderr
    _wait_every_broker_lists(cluster, admin_config, "operation=WRITE, permissionType=DENY")
    with pytest.raises(TopicAuthorizationFailedError):
        _produce(cluster, tmp_path, "alice", [b"after-deny"])
    listed = _acls(cluster, admin_config, "--list", "--principal", "User:alice")
    assert listed.returncode == 0 and listed.stdout.startswith("ACLs for principal `User:alice`\n")
    assert "operation=WRITE, permissionType=DENY" in listed.stdout

    # Removing the DENY gives alice her WRITE back.
    removed = _acls(cluster, admin_config, "--remove", "--force", "--deny-principal", "User:alice",
                    "--operation", "Write", "--topic", _TOPIC)
    assert removed.returncode == 0, removed.stderr
    _wait_every_broker_lists(cluster, admin_config, "permissionType=DENY", present=False)
    _produce(cluster, tmp_path, "alice", [b"after-remove"])
    # Every broker kept serving through the refusals.
    for node_id in sorted(cluster.brokers):
        process = cluster.nodes[node_id].process
        assert process is not None and process.poll() is None


def _tool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KRAFT, *args], input=stdin, capture_output=True, text=True, timeout=300, check=False)


def test_tools_take_command_config_and_meet_the_same_acls(cluster: SecureCluster, tmp_path: Path) -> None:
    """`kraft topics`, `console-producer`, `console-consumer` and `consumer-groups` over SASL_SSL
    with `--command-config`: the admin user (a super user) creates, alice works where her ACLs
    allow, bob is refused."""
    bootstrap = ["--bootstrap-server", cluster.client_bootstrap()]
    configs = {user: str(_command_config(cluster, tmp_path, user)) for user in ("admin", "alice", "bob")}
    topic, group = "tools-orders", "tools-group"

    created = _tool("topics", *bootstrap, "--command-config", configs["admin"], "--create", "--topic", topic,
                    "--partitions", "1", "--replication-factor", "2")
    assert created.returncode == 0, created.stderr
    assert f"Created topic {topic}." in created.stdout
    cluster.wait_isr(topic, 0, {101, 102})
    refused = _tool("topics", *bootstrap, "--command-config", configs["bob"], "--create", "--topic", "bobs-tools")
    assert refused.returncode == 1 and "Authorization failed." in refused.stderr

    granted = _acls(cluster, Path(configs["admin"]), "--add", "--allow-principal", "User:alice", "--producer",
                    "--idempotent", "--consumer", "--topic", topic, "--group", group)
    assert granted.returncode == 0, granted.stderr
    for node_id in sorted(cluster.brokers):
        def listed(node_id: int = node_id) -> bool:
            answer = _acls(cluster, Path(configs["admin"]), "--list", "--topic", topic,
                           bootstrap=f"{HOST}:{cluster.client_ports[node_id]}")
            assert answer.returncode == 0, answer.stderr
            return "principal=User:alice" in answer.stdout
        wait_for(listed, timeout_s=120, interval_s=0.5, what=f"broker {node_id} to list alice's ACLs")

    produced = _tool("console-producer", *bootstrap, "--command-config", configs["alice"], "--topic", topic,
                     stdin="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _tool("console-consumer", *bootstrap, "--command-config", configs["alice"], "--topic", topic,
                     "--group", group, "--from-beginning", "--max-messages", "3", "--timeout-ms", "60000")
    assert consumed.stdout.split() == ["one", "two", "three"], consumed.stderr
    described = _tool("consumer-groups", *bootstrap, "--command-config", configs["admin"], "--describe",
                      "--group", group)
    assert described.returncode == 0 and topic in described.stdout, described.stderr
    intruder = _tool("console-producer", *bootstrap, "--command-config", configs["bob"], "--topic", topic,
                     stdin="intruder\n")
    assert intruder.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in intruder.stderr
