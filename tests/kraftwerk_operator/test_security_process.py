"""spec.tls and spec.users on the local runtime, end to end: `kraftwerk up` as a user runs it, three
combined controller-broker nodes as real processes on mTLS between themselves, a SASL_SSL (SCRAM-SHA-512)
and an SSL (client certificate) listener for applications, and two users the operator manages.

Real clients use nothing but what the operator wrote into each user's Secret (the local runtime's
Secrets are files): kafka-python with alice's password and bob's certificate, and our own client
with the Secret's `client.properties`. Then the renewal window is widened so every certificate is
due: the operator re-issues them and rolls the nodes; and the users are removed: their Secrets go,
alice's password and bob's ACLs no longer get them in.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kraft_engine.storage.java_properties import parse_properties
from kraft_operator import certificates as certs

from .local_state import written_status
from .test_roll_process import start_up
from .workload import terminate

pytestmark = [pytest.mark.process, pytest.mark.timeout(1800)]

SPEC = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: sec}
spec:
  nodePools:
    - {name: nodes, roles: [controller, broker], replicas: 3, storage: {volumes: [{id: 0, size: 1Gi}]}}
  listeners:
    - {name: SCRAM, port: 9094, protocol: SASL_SSL}
    - {name: MTLS, port: 9095, protocol: SSL}
  tls: {clusterCa: {validityDays: 1000}, validityDays: 10, renewalDays: 5}
  lifecycle: {terminationGracePeriodSeconds: 60}
  config:
    offsets.topic.replication.factor: "2"
  users:
    - name: alice
      authentication: scram-sha-512
      acls:
        - resource: {type: topic, name: orders}
          operations: [Create, Write, Read, Describe]
    - name: bob
      authentication: tls
      acls:
        - resource: {type: topic, name: orders}
          operations: [Read, Describe]
"""


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("secured")
    spec, state, log = root / "sec.yaml", root / "state", root / "up.log"
    spec.write_text(textwrap.dedent(SPEC))
    up = start_up(spec, state, log)
    try:
        world = {"spec": spec, "state": state, "log": log, "up": up, "root": root}
        _wait(world, "Ready with both users' Secrets and ACLs", lambda: _ready(state) and _secret(world, "alice")
              and _secret(world, "bob") and log.read_text().count("ACL created") >= 6, timeout_s=600)
        yield world
    finally:
        terminate(up, timeout_s=120)


def _wait(world: dict, what: str, check, *, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        assert world["up"].poll() is None, f"kraftwerk up exited waiting for {what}:\n{world['log'].read_text()[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}:\n{world['log'].read_text()[-3000:]}")


def _ready(state: Path) -> bool:
    status = written_status(state, "sec")
    return status is not None and status.get("operation") is None and any(
        c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])


def _secret_dir(world: dict, name: str) -> Path:
    return world["state"] / "default" / "_secrets" / name


def _secret(world: dict, user: str) -> dict[str, str] | None:
    directory = _secret_dir(world, f"sec-user-{user}")
    if not directory.is_dir():
        return None
    return {f.name: f.read_text() for f in directory.iterdir() if f.is_file() and not f.name.startswith(".")}


def _bootstrap(world: dict, listener: str) -> list[str]:
    found = []
    for node in (0, 1, 2):
        config = parse_properties((world["state"] / "default" / "sec" / f"node-{node}" / "server.properties").read_text())
        found += [e.split("//", 1)[1] for e in config["advertised.listeners"].split(",") if e.startswith(f"{listener}:")]
    return found


async def _metadata_as(client_properties: str, address: str, topic: str) -> str:
    """Our client, configured by a Secret's `client.properties` alone: the topic's Metadata error
    name, or why the connection was refused."""
    from kio.schema.errors import ErrorCode
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.types import TopicName

    from kraft_engine.protocol import ConnectionConfig, ConnectionFailed, KafkaConnection
    from kraft_engine.protocol.security import client_security

    security = client_security(parse_properties(client_properties))
    host, port = address.rsplit(":", 1)
    async with KafkaConnection(host, int(port), config=ConnectionConfig(security=security)) as connection:
        try:
            await connection.connect(timeout_ms=30000)
            response = await connection.send(MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),), allow_auto_topic_creation=False,
                include_topic_authorized_operations=False))
        except ConnectionFailed as e:
            return str(e)
    return ErrorCode(response.topics[0].error_code).name.upper()


def _metadata_everywhere(world: dict, client_properties: str, listener: str, topic: str) -> set[str]:
    return {asyncio.run(_metadata_as(client_properties, address, topic)) for address in _bootstrap(world, listener)}


def test_each_users_secret_lets_a_real_client_in_as_far_as_its_acls_allow(secured: dict) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAuthorizationFailedError

    alice, bob = _secret(secured, "alice"), _secret(secured, "bob")
    assert alice is not None and bob is not None
    assert set(alice) >= {"username", "password", "sasl.jaas.config", "ca.crt", "client.properties"}
    assert set(bob) >= {"user.crt", "user.key", "ca.crt", "client.properties"}
    assert certs.subject(bob["user.crt"]) == "CN=bob"
    clients_ca = (_secret_dir(secured, "sec-clients-ca") / "ca.crt").read_text()
    assert certs.is_issued_by(bob["user.crt"], clients_ca)
    # The brokers apply credentials and ACLs from their metadata log a moment after the operator
    # made them: wait until every broker lets alice in (the topic does not exist yet).
    _wait(secured, "every broker to accept alice", lambda: _metadata_everywhere(
        secured, alice["client.properties"], "SCRAM", "orders") == {"UNKNOWN_TOPIC_OR_PARTITION"}, timeout_s=120)
    scram = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice",
             "sasl_plain_password": alice["password"], "ssl_cafile": str(_secret_dir(secured, "sec-user-alice") / "ca.crt")}
    scram_bootstrap = _bootstrap(secured, "SCRAM")
    admin = KafkaAdminClient(bootstrap_servers=scram_bootstrap, request_timeout_ms=60000, **scram)
    try:
        admin.create_topics([NewTopic("orders", num_partitions=1, replication_factor=2)], timeout_ms=60000)
    finally:
        admin.close()
    _wait(secured, "every broker to know orders", lambda: _metadata_everywhere(
        secured, alice["client.properties"], "SCRAM", "orders") == {"NONE"}, timeout_s=120)
    producer = KafkaProducer(bootstrap_servers=scram_bootstrap, acks="all", request_timeout_ms=60000, **scram)
    try:
        for i in range(10):
            producer.send("orders", value=f"order-{i}".encode(), partition=0).get(timeout=60)
    finally:
        producer.close()
    bob_dir = _secret_dir(secured, "sec-user-bob")
    tls = {"security_protocol": "SSL", "ssl_cafile": str(bob_dir / "ca.crt"), "ssl_certfile": str(bob_dir / "user.crt"),
           "ssl_keyfile": str(bob_dir / "user.key")}
    mtls_bootstrap = _bootstrap(secured, "MTLS")
    consumer = KafkaConsumer(bootstrap_servers=mtls_bootstrap, consumer_timeout_ms=60000, auto_offset_reset="earliest",
                             enable_auto_commit=False, **tls)
    try:
        consumer.assign([TopicPartition("orders", 0)])
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == 10:
                break
    finally:
        consumer.close()
    assert values == [f"order-{i}".encode() for i in range(10)]
    # bob may read, not write (an idempotent producer is refused already at InitProducerId, with
    # CLUSTER_AUTHORIZATION_FAILED as Kafka answers; a plain one at Produce).
    producer = KafkaProducer(bootstrap_servers=mtls_bootstrap, acks="all", request_timeout_ms=30000,
                             max_block_ms=60000, enable_idempotence=False, **tls)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("orders", value=b"from bob", partition=0).get(timeout=60)
    finally:
        producer.close()
    # Neither user reaches a topic its ACLs do not name.
    assert _metadata_everywhere(secured, bob["client.properties"], "MTLS", "demo") == {"TOPIC_AUTHORIZATION_FAILED"}


def _started(world: dict) -> dict[int, str]:
    found = {}
    for path in (world["state"] / "default" / "sec").glob("node-*/started.json"):
        found[int(path.parent.name.removeprefix("node-"))] = json.loads(path.read_text())["revision"]
    return found


def _node_certificate(world: dict, node_id: int) -> str:
    keystore = (_secret_dir(world, f"sec-node-{node_id}-tls") / "keystore.pem").read_text()
    return keystore[keystore.index("-----BEGIN CERTIFICATE-----"):]


def _edit(world: dict, change) -> None:
    spec = yaml.safe_load(world["spec"].read_text())
    change(spec["spec"])
    world["spec"].write_text(yaml.safe_dump(spec))


def test_certificates_inside_the_renewal_window_are_renewed_through_a_rolling_restart(secured: dict) -> None:
    before = _started(secured)
    assert sorted(before) == [0, 1, 2]
    old = {n: _node_certificate(secured, n) for n in before}
    # Every certificate was issued for 10 days; a 20-day window makes each of them due now (and
    # the new ones, for 400 days, are not).
    _edit(secured, lambda spec: spec["tls"].update(validityDays=400, renewalDays=20))

    def rolled() -> bool:
        after = _started(secured)
        return _ready(secured["state"]) and all(after.get(n) not in (None, before[n]) for n in before)

    _wait(secured, "every node restarted with its renewed certificate", rolled, timeout_s=900)
    for node_id, certificate in old.items():
        renewed = _node_certificate(secured, node_id)
        assert renewed != certificate
        assert certs.not_after_ms(renewed) > certs.not_after_ms(certificate)
    output = secured["log"].read_text()
    assert "RestartNode" in output
    # The renewed nodes still serve the users.
    alice = _secret(secured, "alice")
    assert alice is not None
    _wait(secured, "alice served after the roll", lambda: _metadata_everywhere(
        secured, alice["client.properties"], "SCRAM", "orders") == {"NONE"}, timeout_s=120)


def test_a_removed_user_loses_its_secret_its_credentials_and_its_acls(secured: dict) -> None:
    alice, bob = _secret(secured, "alice"), _secret(secured, "bob")
    assert alice is not None and bob is not None
    _wait(secured, "bob served", lambda: _metadata_everywhere(
        secured, bob["client.properties"], "MTLS", "orders") == {"NONE"}, timeout_s=120)
    _edit(secured, lambda spec: spec.update(users=[]))
    _wait(secured, "both Secrets deleted", lambda: _secret(secured, "alice") is None and _secret(secured, "bob") is None,
          timeout_s=300)
    # The same credentials, kept by the application, no longer get in: alice's password is refused
    # at authentication, bob's certificate still authenticates but no ACL lets it see the topic.
    _wait(secured, "every broker to refuse alice", lambda: all(
        "SASL_AUTHENTICATION_FAILED" in answer
        for answer in _metadata_everywhere(secured, alice["client.properties"], "SCRAM", "orders")), timeout_s=120)
    _wait(secured, "every broker to refuse bob the topic", lambda: _metadata_everywhere(
        secured, bob["client.properties"], "MTLS", "orders") == {"TOPIC_AUTHORIZATION_FAILED"}, timeout_s=120)
    output = secured["log"].read_text()
    assert "user alice: SCRAM-SHA-512 credential deleted" in output
    assert "ACL deleted: User:CN=bob ALLOW READ on TOPIC LITERAL orders" in output

