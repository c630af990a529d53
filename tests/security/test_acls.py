"""ACLs on a secured cluster, end to end: StandardAuthorizer on every node, nodes and an `admin`
SCRAM user as `super.users`, ACLs managed with `kraft acls --command-config`, and kafka-python
clients (SCRAM-SHA-512 over SASL_SSL) allowed where their ACLs allow and refused with
TOPIC_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED where they do not.

ACLs reach each broker through its metadata log, after the controller commits them, so every
step that changes ACLs waits until each broker lists the change (DescribeAcls to that broker)
before a client acts on it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from quorum_processes import HOST, kraft_tool, wait_for
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
            flag for user in ("admin", "alice", "bob", "carol")
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


def _tool(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """A tool through the console script's `main`, in this process: each interpreter start costs
    about half a second of CPU (a loaded two-core machine made this module's tool test take minutes
    that way); the tools' work, their TLS and SCRAM, and their output are the same."""
    return kraft_tool(*args, stdin=stdin)


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


# -- every API, without and with the ACL ---------------------------------------------------------

_T, _G = "table-topic", "table-group"


def _ns(**fields: object) -> object:
    import types

    return types.SimpleNamespace(**fields)


def _table() -> list[tuple[str, int, int, object, Callable[[Any], int], str]]:
    """(api, key, version, request fields, the error the answer carries, the refusal expected)."""
    import datetime

    from kraft_engine.records.client_records import ProducedRecord, encode_client_batch

    second = datetime.timedelta(seconds=30)
    batch = encode_client_batch([ProducedRecord(value=b"table")])
    topic_part = _ns(name=_T, partition_indexes=(0,))
    return [
        ("Metadata", 3, 12, _ns(topics=(_ns(name=_T, topic_id=None),), allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False),
         lambda r: r.topics[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("Produce", 0, 9, _ns(acks=1, timeout=second, topic_data=(
            _ns(name=_T, partition_data=(_ns(index=0, records=batch),)),)),
         lambda r: r.responses[0].partition_responses[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("Fetch", 1, 12, _ns(max_wait=datetime.timedelta(0), min_bytes=0, forgotten_topics_data=(), topics=(
            _ns(topic=_T, partitions=(_ns(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                          log_start_offset=-1, partition_max_bytes=1 << 20),)),)),
         lambda r: r.responses[0].partitions[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("ListOffsets", 2, 7, _ns(replica_id=-1, isolation_level=0, topics=(
            _ns(name=_T, partitions=(_ns(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),)),
         lambda r: r.topics[0].partitions[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("DescribeConfigs", 32, 4, _ns(resources=(_ns(resource_type=2, resource_name=_T, configuration_keys=None),)),
         lambda r: r.results[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("FindCoordinator", 10, 4, _ns(key_type=0, coordinator_keys=(_G,)),
         lambda r: r.coordinators[0].error_code, "GROUP_AUTHORIZATION_FAILED"),
        ("JoinGroup", 11, 9, _ns(group_id=_G, session_timeout=second, rebalance_timeout=second, member_id="",
                                 protocol_type="consumer", protocols=(_ns(name="range", metadata=b""),)),
         lambda r: r.error_code, "GROUP_AUTHORIZATION_FAILED"),
        ("OffsetCommit", 8, 8, _ns(group_id=_G, generation_id_or_member_epoch=-1, member_id="", topics=(
            _ns(name=_T, partitions=(_ns(partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                         committed_metadata=None),)),)),
         lambda r: r.topics[0].partitions[0].error_code, "GROUP_AUTHORIZATION_FAILED"),
        ("OffsetFetch", 9, 8, _ns(groups=(_ns(group_id=_G, topics=(topic_part,)),), require_stable=False),
         lambda r: r.groups[0].error_code, "GROUP_AUTHORIZATION_FAILED"),
        ("DescribeGroups", 15, 5, _ns(groups=(_G,), include_authorized_operations=False),
         lambda r: r.groups[0].error_code, "GROUP_AUTHORIZATION_FAILED"),
        ("OffsetDelete", 47, 0, _ns(group_id=_G, topics=(_ns(name=_T, partitions=(_ns(partition_index=0),)),)),
         lambda r: r.error_code, "GROUP_AUTHORIZATION_FAILED"),
        ("DeleteGroups", 42, 2, _ns(groups_names=(_G,)), lambda r: r.results[0].error_code,
         "GROUP_AUTHORIZATION_FAILED"),
        ("InitProducerId", 22, 4, _ns(transactional_id=None, transaction_timeout=second),
         lambda r: r.error_code, "CLUSTER_AUTHORIZATION_FAILED"),
        ("DescribeAcls", 29, 3, _ns(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                    principal_filter=None, host_filter=None, operation=1, permission_type=1),
         lambda r: r.error_code, "CLUSTER_AUTHORIZATION_FAILED"),
        ("DescribeUserScramCredentials", 50, 0, _ns(users=None), lambda r: r.error_code,
         "CLUSTER_AUTHORIZATION_FAILED"),
        ("CreateAcls", 30, 3, _ns(creations=(_ns(resource_type=2, resource_name="unused", resource_pattern_type=3,
                                                 principal="User:nobody", host="*", operation=3,
                                                 permission_type=3),)),
         lambda r: r.results[0].error_code, "CLUSTER_AUTHORIZATION_FAILED"),
        ("IncrementalAlterConfigs", 44, 1, _ns(validate_only=True, resources=(_ns(
            resource_type=2, resource_name=_T, configs=(_ns(name="retention.ms", config_operation=0, value="1000"),)),)),
         lambda r: r.responses[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("CreatePartitions", 37, 3, _ns(timeout=second, validate_only=True,
                                        topics=(_ns(name=_T, count=2, assignments=None),)),
         lambda r: r.results[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("CreateTopics", 19, 7, _ns(timeout=second, validate_only=True, topics=(_ns(
            name="table-new", num_partitions=1, replication_factor=1, assignments=(), configs=()),)),
         lambda r: r.topics[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("DeleteTopics", 20, 6, _ns(timeout=second, topics=(_ns(name="table-doomed", topic_id=None),)),
         lambda r: r.responses[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("DescribeTopicPartitions", 75, 0, _ns(topics=(_ns(name=_T),), response_partition_limit=2000, cursor=None),
         lambda r: r.topics[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("OffsetsForLeaderEpoch", 23, 4, _ns(replica_id=-1, topics=(_ns(topic=_T, partitions=(
            _ns(partition=0, current_leader_epoch=-1, leader_epoch=0),)),)),
         lambda r: r.topics[0].partitions[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("DescribeLogDirs", 35, 4, _ns(topics=None), lambda r: r.error_code, "CLUSTER_AUTHORIZATION_FAILED"),
        ("DescribeProducers", 61, 0, _ns(topics=(_ns(name=_T, partition_indexes=(0,)),)),
         lambda r: r.topics[0].partitions[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("DeleteRecords", 21, 2, _ns(timeout=second, topics=(_ns(name=_T, partitions=(
            _ns(partition_index=0, offset=0),)),)),
         lambda r: r.topics[0].partitions[0].error_code, "TOPIC_AUTHORIZATION_FAILED"),
        ("AlterReplicaLogDirs", 34, 2, _ns(dirs=(_ns(path="/no/such/log/dir", topics=(
            _ns(name=_T, partitions=(0,)),)),)),
         lambda r: r.results[0].partitions[0].error_code, "CLUSTER_AUTHORIZATION_FAILED"),
        ("DescribeClientQuotas", 48, 1, _ns(components=(_ns(entity_type="user", match_type=2, match=None),),
                                            strict=False),
         lambda r: r.error_code, "CLUSTER_AUTHORIZATION_FAILED"),
    ]


# The *_authorized_operations each API reports: (api, key, version, request fields, the field).
_OPERATIONS_ASKED = [
    ("Metadata", 3, 12, _ns(topics=(_ns(name=_T, topic_id=None),), allow_auto_topic_creation=False,
                            include_topic_authorized_operations=True), lambda r: r.topics[0].topic_authorized_operations),
    ("DescribeCluster", 60, 2, _ns(include_cluster_authorized_operations=True, endpoint_type=1,
                                   include_fenced_brokers=False), lambda r: r.cluster_authorized_operations),
    ("DescribeTopicPartitions", 75, 0, _ns(topics=(_ns(name=_T),), response_partition_limit=2000, cursor=None),
     lambda r: r.topics[0].topic_authorized_operations),
    ("DescribeGroups", 15, 5, _ns(groups=(_G,), include_authorized_operations=True),
     lambda r: r.groups[0].authorized_operations),
]


def _group_operations(cluster: SecureCluster, user: str) -> int:
    """DescribeGroups' authorized operations for the table's group, from its coordinator (another
    broker answers NOT_COORDINATOR, which carries none), once it answers without an error."""
    import asyncio

    found: dict[str, int] = {}

    def answered() -> bool:
        port = asyncio.run(_ask(cluster, user, [("FindCoordinator", 10, 4, _ns(key_type=0, coordinator_keys=(_G,)),
                                                 lambda r: r.coordinators[0].port)]))["FindCoordinator"]
        if port <= 0:
            return False
        found.update(asyncio.run(_ask(cluster, user, [
            ("error", 15, 5, _ns(groups=(_G,), include_authorized_operations=True), lambda r: r.groups[0].error_code),
            ("operations", 15, 5, _ns(groups=(_G,), include_authorized_operations=True),
             lambda r: r.groups[0].authorized_operations)], port=port)))
        return found["error"] == 0

    wait_for(answered, timeout_s=120, interval_s=0.5, what="the group's coordinator to describe it")
    return found["operations"]


async def _walk(cluster: SecureCluster, user: str) -> dict[str, str]:
    """Each API of the table sent as `user` to the first broker: api -> the error code's name."""
    from kio.schema.errors import ErrorCode

    return {api: ErrorCode(error).name.upper() for api, error in (await _ask(cluster, user, [
        (api, key, version, fields, error_of) for api, key, version, fields, error_of, _ in _table()])).items()}


async def _ask(cluster: SecureCluster, user: str,
               table: list[tuple[str, int, int, object, Callable[[Any], int]]], *, port: int | None = None
               ) -> dict[str, int]:
    """Each request of `table` sent as `user` to the first broker (or the client listener at
    `port`): api -> the value read from its answer."""
    from kraft_engine.protocol import ConnectionConfig, KafkaConnection
    from kraft_engine.protocol.entities import request_class
    from kraft_engine.protocol.security import client_security
    from kraft_engine.protocol.version_bridging import bridge

    security = client_security({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": cluster.ca.certificate_pem,
        "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" '
                            f'password="{user}-secret";'})
    answers = {}
    async with KafkaConnection(HOST, port or cluster.client_ports[min(cluster.brokers)],
                               config=ConnectionConfig(security=security, request_timeout_ms=60000)) as connection:
        for api, key, version, fields, read in table:
            response = await connection.send(bridge(fields, request_class(key, version)), timeout_ms=60000)
            answers[api] = int(read(response))
    return answers


def _bits(*operations: str) -> int:
    from kraft_engine.metadata.authorizer import AclOperation, operations_bitfield

    return operations_bitfield(AclOperation[o] for o in operations)


def test_every_api_refuses_without_its_acl_and_serves_with_it(cluster: SecureCluster, tmp_path: Path) -> None:
    """The table: carol (no ACL) is refused by each API with Kafka's error; after the ACLs each
    needs, no API refuses her. A refused write changes nothing (the doomed topic survives)."""
    import asyncio

    admin_config = _command_config(cluster, tmp_path, "admin")
    for topic in (_T, "table-doomed"):
        created = _tool("topics", "--bootstrap-server", cluster.client_bootstrap(), "--command-config",
                        str(admin_config), "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "2")
        assert created.returncode == 0, created.stderr
        cluster.wait_isr(topic, 0, {101, 102})
    expected = {api: refusal for api, *_, refusal in _table()}
    assert asyncio.run(_walk(cluster, "carol")) == expected
    # Asked for, the authorized operations of what carol may not describe are Kafka's defaults:
    # none for the cluster (0), the schema's "not asked" for a refused topic or group.
    assert asyncio.run(_ask(cluster, "carol", _OPERATIONS_ASKED)) == {
        "Metadata": -2147483648, "DescribeCluster": 0, "DescribeTopicPartitions": -2147483648,
        "DescribeGroups": -2147483648}
    survivors = _tool("topics", "--bootstrap-server", cluster.client_bootstrap(), "--command-config",
                      str(admin_config), "--list")
    assert "table-doomed" in survivors.stdout.split()

    for flags in (["--operation", "All", "--topic", _T, "--group", _G],
                  ["--operation", "Create", "--topic", "table-new"],
                  ["--operation", "Delete", "--topic", "table-doomed"],
                  ["--operation", "IdempotentWrite", "--operation", "Describe", "--operation", "Alter",
                   "--operation", "DescribeConfigs", "--cluster"]):
        granted = _acls(cluster, admin_config, "--add", "--allow-principal", "User:carol", *flags)
        assert granted.returncode == 0, granted.stderr
    first = f"{HOST}:{cluster.client_ports[min(cluster.brokers)]}"

    def carol_listed() -> bool:
        answer = _acls(cluster, admin_config, "--list", "--principal", "User:carol", bootstrap=first)
        assert answer.returncode == 0, answer.stderr
        return answer.stdout.count("principal=User:carol") == 8

    wait_for(carol_listed, timeout_s=120, interval_s=0.5, what="the first broker to list carol's 8 ACLs")
    allowed = asyncio.run(_walk(cluster, "carol"))
    assert {api: code for api, code in allowed.items() if code == expected[api]} == {}
    # ALL on the topic and the group: every operation Kafka reports for them; on the cluster
    # exactly the four granted (ALTER implies DESCRIBE, which was granted anyway).
    every_topic_operation = _bits("READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS",
                                  "ALTER_CONFIGS")
    asked = asyncio.run(_ask(cluster, "carol", _OPERATIONS_ASKED))
    asked["DescribeGroups"] = _group_operations(cluster, "carol")
    assert asked == {
        "Metadata": every_topic_operation, "DescribeTopicPartitions": every_topic_operation,
        "DescribeCluster": _bits("IDEMPOTENT_WRITE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS"),
        "DescribeGroups": _bits("READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS")}


# -- the controller listener: raft's APIs and forged Envelopes -----------------------------------

async def _to_controller(cluster: SecureCluster, directory: Path, common_name: str, requests: list[Any]) -> list[Any]:
    """`requests` sent over mTLS to the controller with a certificate of the cluster CA for `common_name`."""
    from kraft_engine.protocol import ConnectionConfig, KafkaConnection
    from kraft_engine.protocol.security import client_security

    keystore = cluster.ca.issue(common_name, organization="kraftwerk").keystore_pem(directory, common_name)
    security = client_security({
        "security.protocol": "SSL", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(cluster.ca.write(directory))})
    async with KafkaConnection(HOST, cluster.nodes[1].port,
                               config=ConnectionConfig(security=security, request_timeout_ms=60000)) as connection:
        return [await connection.send(request, timeout_ms=60000) for request in requests]


def _forged_create_topics(name: str, *, validate_only: bool, principal: str) -> Any:
    """An Envelope as a broker would send it, claiming `principal` made a CreateTopics."""
    import datetime

    from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
    from kio.schema.envelope.v0.request import EnvelopeRequest
    from kio.schema.types import TopicName
    from kio.static.primitive import i16, i32, i32Timedelta

    from kraft_engine.protocol.envelope import encode_principal
    from kraft_engine.protocol.framing import SIZE_PREFIX, encode_request

    inner = CreateTopicsRequest(
        topics=(CreatableTopic(name=TopicName(name), num_partitions=i32(1), replication_factor=i16(1), assignments=(),
                               configs=()),),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), validate_only=validate_only)
    return EnvelopeRequest(request_data=encode_request(inner, correlation_id=7, client_id="forger")[SIZE_PREFIX.size:],
                           request_principal=encode_principal(principal), client_host_address=bytes([127, 0, 0, 1]))


def test_a_stranger_on_the_controller_listener_is_refused_raft_and_forged_envelopes(cluster: SecureCluster,
                                                                                    tmp_path: Path) -> None:
    """mallory holds a certificate of the cluster CA (the mTLS handshake passes) but no ACL: each
    raft API is CLUSTER_AUTHORIZATION_FAILED, and an Envelope claiming the super user `admin` made a
    CreateTopics is refused (the Envelope needs CLUSTER_ACTION) and creates nothing. The same
    Envelope from a node (a super user) is served, so the refusal is the authorizer's."""
    import asyncio

    from kio.schema.create_topics.v7.response import CreateTopicsResponse
    from kio.schema.errors import ErrorCode

    from kraft_engine.protocol.framing import decode_response
    from kraft_engine.raft import messages
    from kraft_engine.raft.voter_set import Endpoint, ReplicaKey

    cluster_id = cluster.cluster_id
    stranger = ReplicaKey(66, None)
    raft_requests = [
        messages.describe_quorum_request(),
        messages.begin_quorum_epoch_request(cluster_id=cluster_id, voter=ReplicaKey(1, None), leader_id=66,
                                            epoch=1 << 20, leader_endpoints=(Endpoint("CONTROLLER", HOST, 1),)),
        messages.remove_voter_request(cluster_id=cluster_id, voter=ReplicaKey(1, None)),
        messages.add_voter_request(cluster_id=cluster_id, voter=stranger, endpoints=(Endpoint("CONTROLLER", HOST, 1),),
                                   timeout_ms=1000),
    ]
    answers = asyncio.run(_to_controller(cluster, tmp_path, "mallory", [
        *raft_requests, _forged_create_topics("forged-topic", validate_only=False, principal="User:admin")]))
    assert [ErrorCode(a.error_code) for a in answers] == [ErrorCode.cluster_authorization_failed] * 5

    node_answer, quorum = asyncio.run(_to_controller(cluster, tmp_path, "node-101", [
        _forged_create_topics("forwarded-topic", validate_only=True, principal="User:admin"),
        messages.describe_quorum_request()]))
    assert ErrorCode(node_answer.error_code) == ErrorCode.none
    # mallory's BeginQuorumEpoch (epoch 2^20, leader 66) never reached raft: controller 1 still leads.
    (state,) = quorum.topics[0].partitions
    assert (int(state.leader_id), int(state.leader_epoch) < 1 << 20) == (1, True)
    inner = decode_response(node_answer.response_data, CreateTopicsResponse)
    assert ErrorCode(inner.topics[0].error_code) == ErrorCode.none

    admin_config = _command_config(cluster, tmp_path, "admin")
    listed = _tool("topics", "--bootstrap-server", cluster.client_bootstrap(), "--command-config", str(admin_config),
                   "--list")
    assert listed.returncode == 0, listed.stderr
    assert "forged-topic" not in listed.stdout.split()


# -- kraft configs: users' SCRAM credentials and topic configs over SASL_SSL ---------------------

def _configs(cluster: SecureCluster, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _tool("configs", "--bootstrap-server", cluster.client_bootstrap(), "--command-config", str(config), *args)


def test_kraft_configs_manages_scram_users_and_topic_configs(cluster: SecureCluster, tmp_path: Path) -> None:
    """The super user adds dave's SCRAM-SHA-512 credential with `kraft configs` (the password is
    salted by the tool), dave then authenticates, the credential is described with its
    iterations, and once deleted dave is refused. Topic configs are altered, described and
    deleted the same way; bob (no ACL) may not alter them."""
    admin_config = _command_config(cluster, tmp_path, "admin")
    added = _configs(cluster, admin_config, "--alter", "--add-config",
                     "SCRAM-SHA-512=[iterations=8192,password=dave-secret]", "--entity-type", "users",
                     "--entity-name", "dave")
    assert (added.returncode, added.stdout) == (0, "Completed updating config for user dave.\n"), added.stderr
    dave_config = _command_config(cluster, tmp_path, "dave")

    def dave_lists(expected_rc: int) -> bool:
        listed = _tool("topics", "--bootstrap-server", cluster.client_bootstrap(), "--command-config",
                       str(dave_config), "--list", "--timeout-ms", "5000")
        return listed.returncode == expected_rc

    # The credential reaches each broker through its metadata log.
    wait_for(lambda: dave_lists(0), timeout_s=120, interval_s=0.5, what="dave to authenticate")
    described = _configs(cluster, admin_config, "--describe", "--entity-type", "users", "--entity-name", "dave")
    assert described.stdout == "SCRAM credential configs for user-principal 'dave' are SCRAM-SHA-512=iterations=8192\n"
    deleted = _configs(cluster, admin_config, "--alter", "--delete-config", "SCRAM-SHA-512", "--entity-type", "users",
                       "--entity-name", "dave")
    assert (deleted.returncode, deleted.stdout) == (0, "Completed updating config for user dave.\n"), deleted.stderr
    wait_for(lambda: dave_lists(1), timeout_s=120, interval_s=0.5, what="dave to be refused")
    gone = _configs(cluster, admin_config, "--describe", "--entity-type", "users", "--entity-name", "dave")
    assert (gone.returncode, gone.stdout) == (0, "")

    topic = "configs-orders"
    created = _tool("topics", "--bootstrap-server", cluster.client_bootstrap(), "--command-config", str(admin_config),
                    "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "2")
    assert created.returncode == 0, created.stderr
    altered = _configs(cluster, admin_config, "--alter", "--entity-type", "topics", "--entity-name", topic,
                       "--add-config", "retention.ms=12345,cleanup.policy=[compact,delete]")
    assert (altered.returncode, altered.stdout) == (0, f"Completed updating config for topic {topic}.\n"), altered.stderr

    def dynamic_configs() -> list[str]:
        shown = _configs(cluster, admin_config, "--describe", "--topic", topic)
        assert shown.returncode == 0, shown.stderr
        return shown.stdout.splitlines()

    wait_for(lambda: len(dynamic_configs()) == 3, timeout_s=120, interval_s=0.5, what="both overrides described")
    lines = dynamic_configs()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert lines[1].startswith("  cleanup.policy=compact,delete sensitive=false synonyms={"
                               "DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "), lines
    # (No broker sets log.retention.ms, whose default is null: the chain ends at the override, as Kafka's.)
    assert lines[2] == "  retention.ms=12345 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=12345}", lines
    missing = _configs(cluster, admin_config, "--alter", "--topic", topic, "--delete-config", "segment.ms")
    assert (missing.returncode, missing.stderr) == (1, "Invalid config(s): segment.ms\n")
    intruder = _configs(cluster, _command_config(cluster, tmp_path, "bob"), "--alter", "--topic", topic,
                        "--add-config", "retention.ms=1")
    assert intruder.returncode == 1 and "TopicAuthorizationException" in intruder.stderr, intruder.stderr
    removed = _configs(cluster, admin_config, "--alter", "--topic", topic, "--delete-config", "retention.ms")
    assert removed.returncode == 0, removed.stderr
    wait_for(lambda: len(dynamic_configs()) == 2, timeout_s=120, interval_s=0.5, what="retention.ms deleted")
    assert dynamic_configs()[1].startswith("  cleanup.policy=compact,delete ")
