"""spec.tls and spec.users on the local runtime, end to end: `kraftwerk up` as a user runs it, three
combined controller-broker nodes as real processes on mTLS between themselves, a SASL_SSL (SCRAM-SHA-512)
and an SSL (client certificate) listener for applications, and two users the operator manages.

Real clients use nothing but what the operator wrote into each user's Secret (the local runtime's
Secrets are files): kafka-python with alice's password and bob's certificate, and our own client
with the Secret's `client.properties`. Then the renewal window is widened so every certificate is
due: the operator re-issues them and rolls the nodes; the cluster CA's window is widened so the
CA is due: it is replaced live (trust both, new certificates, old dropped: three rolls) while
alice's client keeps producing, and so is a CA the user brings in its place; and the users are
removed: their Secrets go, alice's password and bob's ACLs no longer get them in.
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
        - resource: {type: topic, name: secure-, patternType: prefix}
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


SECURE_CLIENT = Path(__file__).resolve().parents[1] / "k8s" / "secure_client.py"


class _Workload:
    """tests/k8s/secure_client.py's workload as alice, in its own process: it produces one record
    at a time until stopped, makes a new producer from her Secret's files when a send fails, and
    at the end reads every acknowledged record back."""

    def __init__(self, world: dict, topic: str) -> None:
        import subprocess
        import sys

        self.stop_file = world["root"] / f"{topic}.stop"
        self.output = world["root"] / f"{topic}.out"
        with self.output.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(SECURE_CLIENT), "workload", ",".join(_bootstrap(world, "SCRAM")), topic,
                 str(self.stop_file), str(_secret_dir(world, "sec-user-alice"))], stdout=out, stderr=subprocess.STDOUT)
        self.world = world
        _wait(world, "the workload to acknowledge records", lambda: self.acked() >= 20, timeout_s=300)

    def acked(self) -> int:
        counts = [int(line.split()[1]) for line in self.output.read_text().splitlines() if line.startswith("acked ")]
        return counts[-1] if counts else 0

    def __enter__(self) -> _Workload:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process.poll() is None:  # a test that failed before stop(): no process left behind
            terminate(self.process, timeout_s=30)

    def stop(self) -> dict:
        self.stop_file.touch()
        try:
            self.process.wait(timeout=400)
        finally:
            if self.process.poll() is None:
                terminate(self.process, timeout_s=30)
        lines = [line for line in self.output.read_text().splitlines() if line.startswith("{")]
        assert lines and self.process.returncode == 0, self.output.read_text()[-3000:]
        report = json.loads(lines[-1])
        assert report["lostCount"] == 0 and report["acknowledged"] > 0, report
        return report


def _ca_secret(world: dict) -> dict[str, str]:
    directory = _secret_dir(world, "sec-cluster-ca")
    return {f.name: f.read_text() for f in directory.iterdir() if f.is_file() and not f.name.startswith(".")}


def _restarts_since(world: dict, offset: int) -> dict[int, int]:
    """How many times the operator restarted each node since `offset` in `kraftwerk up`'s output."""
    restarts = dict.fromkeys((0, 1, 2), 0)
    for line in world["log"].read_text()[offset:].splitlines():
        if line.startswith("Normal ") and line.split()[1] == "RestartNode":  # the event lines `up` prints
            restarts[int(line.split("node ", 1)[1].split(":", 1)[0])] += 1
    return restarts


def _walked(phases: list[str]) -> bool:
    """The switch's phases as polled from the operator's CA Secret: its three steps in order (the
    first poll may come after the operator already took the first)."""
    return phases in (["none", "trust-both", "new-certificates", "none"], ["trust-both", "new-certificates", "none"])


def _switch_and_watch(world: dict, change, *, new_ca_of) -> tuple[list[str], dict[int, int], str]:
    """Apply `change` to the spec, then follow the cluster CA switch it starts to its end (the
    third roll done): (the phases seen, how many times the operator restarted each node meanwhile,
    the CA in use at the end)."""
    old = _ca_secret(world)["ca.crt"]
    phases: list[str] = []
    offset = len(world["log"].read_text())
    _edit(world, change)

    def switched() -> str | None:
        data = _ca_secret(world)
        phase = data.get("switch-phase", "none")
        if not phases or phases[-1] != phase:
            phases.append(phase)
        if phase != "none" or data["ca.crt"] == old or not new_ca_of(data["ca.crt"]):
            return None
        # the status is saved before the events of its pass are printed: once the last restart is
        # printed, a Ready status without an operation comes after it
        if min(_restarts_since(world, offset).values()) < 3 or not _ready(world["state"]):
            return None
        return data["ca.crt"]

    ca = _wait(world, "the cluster CA switch to end", switched, timeout_s=1500)
    steps = [line.split("clusterCa: ", 1)[1] for line in world["log"].read_text()[offset:].splitlines()
             if "CertificateAuthoritySwitch" in line]
    assert [step.split(":", 1)[0] for step in steps] == [
        "switch to a new CA, step 1 of 3", "switch to a new CA, step 2 of 3", "switch to a new CA, step 3 of 3"], steps
    return phases, _restarts_since(world, offset), ca


def _assert_switched_to(world: dict, ca: str, *, old: str, topic: str) -> None:
    for node in (0, 1, 2):
        certificate = _node_certificate(world, node)
        assert certs.is_issued_by(certificate, ca) and not certs.is_issued_by(certificate, old)
        assert (_secret_dir(world, f"sec-node-{node}-tls") / "truststore.pem").read_text() == ca
    assert "previous-ca.crt" not in _ca_secret(world)
    alice = _secret(world, "alice")
    assert alice is not None and alice["ca.crt"] == ca
    _wait(world, "alice served with the new CA alone", lambda: _metadata_everywhere(
        world, alice["client.properties"], "SCRAM", topic) == {"NONE"}, timeout_s=120)


def test_a_due_cluster_ca_is_replaced_live_in_three_rolls_while_a_client_keeps_producing(secured: dict) -> None:
    _wait(secured, "settled", lambda: _ready(secured["state"]), timeout_s=300)
    old = _ca_secret(secured)["ca.crt"]
    with _Workload(secured, "secure-ca-switch") as workload:
        # The CA was made for 1000 days; a 1500-day window makes it due (its successor, for 2000, is not).
        phases, restarts, ca = _switch_and_watch(
            secured, lambda spec: spec["tls"]["clusterCa"].update(validityDays=2000, renewalDays=1500),
            new_ca_of=lambda pem: certs.not_after_ms(pem) > certs.not_after_ms(old))
        assert _walked(phases), phases
        # three rolls: each node restarted three times (trust both, new certificate, old CA dropped)
        assert restarts == {0: 3, 1: 3, 2: 3}, restarts
        _assert_switched_to(secured, ca, old=old, topic="secure-ca-switch")
        acked = workload.acked()
        _wait(secured, "the workload to go on after the switch", lambda: workload.acked() >= acked + 20,
              timeout_s=300)
        workload.stop()


def test_a_ca_the_user_brings_comes_in_through_the_same_staged_switch(secured: dict) -> None:
    """The user's CA (`clusterCa.secretName`) where the operator's had been: a new CA from the
    user's Secret, staged as a renewal is. (The user renewing it in place later takes the same
    path, a user CA other than the one in use: `test_tls_material` walks it, and the Kubernetes
    tier runs it on a cluster.)"""
    _wait(secured, "settled", lambda: _ready(secured["state"]), timeout_s=300)
    old = _ca_secret(secured)["ca.crt"]
    pair = certs.generate_ca(common_name="my-ca", organization="example", validity_days=3000,
                             now_ms=int(time.time() * 1000))
    mine = _secret_dir(secured, "my-ca")
    mine.mkdir(mode=0o700)
    (mine / "ca.key").write_text(pair.key_pem)
    (mine / "ca.crt").write_text(pair.certificate_pem)
    with _Workload(secured, "secure-byo-ca") as workload:
        phases, restarts, ca = _switch_and_watch(
            secured, lambda spec: spec["tls"]["clusterCa"].update(secretName="my-ca"),
            new_ca_of=lambda pem: pem == pair.certificate_pem)
        assert _walked(phases), phases
        assert restarts == {0: 3, 1: 3, 2: 3}, restarts
        _assert_switched_to(secured, ca, old=old, topic="secure-byo-ca")
        workload.stop()


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

