"""A mixed cluster over mTLS: our controller, our broker 101 and an Apache Kafka 4.1 broker 102,
every listener SSL with `ssl.client.auth=required` (the controller listener and the inter-broker
listener INTERNAL, which clients use too), each node's certificate from one test CA, the
authorizer on everywhere (StandardAuthorizer, `allow.everyone.if.no.acl.found=false`).

Principals come from the certificates as Kafka maps them: both sides have the same
`ssl.principal.mapping.rules`, which turn `CN=node-101,O=kraftwerk` into `node-101`; the nodes
and the admin are `super.users` by those short names, so every inter-node call (registration,
heartbeats, forwarded Envelopes, each follower's Fetch from the other side's leader) is authorized
through the mapping. The application's certificate `CN=app,O=kraftwerk` gets its ACLs as
`User:app`; before them both brokers refuse it (TOPIC_AUTHORIZATION_FAILED), after them both
serve it, so both read the same principal out of the same certificate.

The topic has partition 0 led by ours with Kafka's following and partition 1 led by Kafka's with
ours following; kafka-python as `app` writes with acks=all over mTLS and reads everything back.
Then the replicas are reordered and the preferred leaders elected, so each side leads the
partition it followed, and every acknowledged record is read back from the new leaders.

Needs the cached Kafka jars and a JDK; skips cleanly without them.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from kraft_engine.loopback_ports import free_loopback_ports

from .kafka_jars import needs_jars
from .test_mixed_brokers import (
    _LEVELS_OUR_BROKER_SUPPORTS,
    CLUSTER_ID,
    KRAFT,
    OURS,
    THEIRS,
    _java,
    _layout,
    _properties,
    _ready,
    _running,
    _until,
    _written_and_read_back_while_each_side_leads_once,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
from pki import CertificateAuthority

pytestmark = [pytest.mark.kafka_jars, pytest.mark.process, pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

HOST = "127.0.0.1"
CONTROLLER = 1
ORGANIZATION = "kraftwerk"
# Kafka's rule syntax: the CN of a certificate of our organization, anything else as it is.
MAPPING_RULES = rf"RULE:^CN=([^,]+),O={ORGANIZATION}$/$1/,DEFAULT"
SUPER_USERS = f"User:node-{CONTROLLER};User:node-{OURS};User:node-{THEIRS};User:admin"
TOPIC = "mixed-mtls"


def _security(ca: CertificateAuthority, directory: Path, name: str) -> dict[str, str]:
    """A node's TLS keys: its own certificate (PEM keystore), the CA, client certificates required,
    Kafka's mapping rules and the authorizer."""
    keystore = ca.issue(name, organization=ORGANIZATION).keystore_pem(directory, name)
    return {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.write(directory)),
        "ssl.client.auth": "required", "ssl.principal.mapping.rules": MAPPING_RULES,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": SUPER_USERS, "allow.everyone.if.no.acl.found": "false",
    }


def _broker(tmp_path: Path, ca: CertificateAuthority, *, node_id: int, port: int, controller_port: int,
            **extra: str) -> dict[str, str]:
    return {
        "process.roles": "broker", "node.id": str(node_id), "listeners": f"INTERNAL://{HOST}:{port}",
        "inter.broker.listener.name": "INTERNAL", "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:SSL,INTERNAL:SSL",
        "controller.quorum.bootstrap.servers": f"{HOST}:{controller_port}",
        "log.dirs": str(tmp_path / f"node-{node_id}"), "offsets.topic.replication.factor": "1",
        "replica.lag.time.max.ms": "10000",
        **_security(ca, tmp_path, f"node-{node_id}"), **extra,
    }


def _client_files(ca: CertificateAuthority, directory: Path, name: str) -> dict[str, Any]:
    """kafka-python's settings for mTLS as `CN=<name>,O=kraftwerk`."""
    cert, key = ca.issue(name, organization=ORGANIZATION).write(directory, name)
    return {"security_protocol": "SSL", "ssl_cafile": str(ca.write(directory)), "ssl_certfile": str(cert),
            "ssl_keyfile": str(key), "ssl_check_hostname": True}


async def _metadata_error(address: str, ca: CertificateAuthority, name: str, topic: str) -> str:
    """The topic's Metadata error at one broker, asked over mTLS as `CN=<name>,O=kraftwerk` by our client."""
    from kio.schema.errors import ErrorCode
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.types import TopicName

    from kraft_engine.protocol import ConnectionConfig, KafkaConnection
    from kraft_engine.protocol.security import client_security

    issued = ca.issue(name, organization=ORGANIZATION)
    security = client_security({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": ca.certificate_pem,
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": issued.chain_pem,
        "ssl.keystore.key": issued.key_pem})
    host, port = address.rsplit(":", 1)
    async with KafkaConnection(host, int(port), config=ConnectionConfig(security=security)) as connection:
        response = await connection.send(MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
    return ErrorCode(response.topics[0].error_code).name.upper()


def _errors_at_each_broker(addresses: list[str], ca: CertificateAuthority, name: str) -> list[str]:
    return [asyncio.run(_metadata_error(address, ca, name, TOPIC)) for address in addresses]


@needs_jars
@pytest.mark.timeout(1200)
def test_our_broker_and_a_kafka_broker_replicate_over_mtls_with_principals_mapped_as_kafka_maps_them(
    tmp_path: Path,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.admin import (
            ACL,
            ACLOperation,
            ACLPermissionType,
            KafkaAdminClient,
            NewTopic,
            ResourcePattern,
            ResourceType,
        )

    ca = CertificateAuthority("mixed-ca")
    controller_port, controller_http, ours_port, ours_http, theirs_port = free_loopback_ports(5)
    controller = _properties(tmp_path / "controller.properties", {
        "process.roles": "controller", "node.id": str(CONTROLLER), "listeners": f"CONTROLLER://{HOST}:{controller_port}",
        "controller.listener.names": "CONTROLLER", "listener.security.protocol.map": "CONTROLLER:SSL",
        "controller.quorum.bootstrap.servers": f"{HOST}:{controller_port}", "log.dirs": str(tmp_path / "controller"),
        "kraftwerk.metrics.port": str(controller_http), **_security(ca, tmp_path, f"node-{CONTROLLER}"),
    })
    subprocess.run([KRAFT, "storage", "format", "-c", str(controller), "-t", CLUSTER_ID, "--standalone", "-r", "4.0",
                    *_LEVELS_OUR_BROKER_SUPPORTS], check=True, capture_output=True)
    ours = _properties(tmp_path / "ours.properties", _broker(
        tmp_path, ca, node_id=OURS, port=ours_port, controller_port=controller_port,
        **{"metadata.log.dir": str(tmp_path / "ours-meta"), "kraftwerk.metrics.port": str(ours_http),
           "broker.heartbeat.interval.ms": "500"}))
    subprocess.run([KRAFT, "storage", "format", "-c", str(ours), "-t", CLUSTER_ID], check=True, capture_output=True)
    theirs = _properties(tmp_path / "theirs.properties", _broker(
        tmp_path, ca, node_id=THEIRS, port=theirs_port, controller_port=controller_port))
    subprocess.run(_java("kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c", str(theirs)),
                   check=True, capture_output=True, timeout=180)
    addresses = [f"{HOST}:{ours_port}", f"{HOST}:{theirs_port}"]
    bootstrap = ",".join(addresses)
    admin_tls = _client_files(ca, tmp_path, "admin")
    app_tls = _client_files(ca, tmp_path, "app")
    with _running([([KRAFT, "server", "start", "--config", str(controller)], tmp_path / "controller.log"),
                   ([KRAFT, "server", "start", "--config", str(ours)], tmp_path / "ours.log"),
                   (_java("kafka.Kafka", str(theirs)), tmp_path / "theirs.log")]):
        _until(lambda: _ready(ours_http), "our broker to be RUNNING (registered with our controller over mTLS)")
        _until(lambda: "Transition from STARTING to STARTED" in (tmp_path / "theirs.log").read_text(),
               "the Kafka broker to start (registered with our controller over mTLS)")
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000, **admin_tls)
        try:
            admin.create_topics([NewTopic(TOPIC, replica_assignments={0: [OURS, THEIRS], 1: [THEIRS, OURS]})])
            both = sorted([OURS, THEIRS])
            # Each follower fetches from the other side's leader over mTLS, as a super user by its mapped name.
            _until(lambda: _layout(admin, TOPIC) == {0: (OURS, [OURS, THEIRS], both), 1: (THEIRS, [THEIRS, OURS], both)},
                   "partition 0 led by ours and 1 by Kafka's, both replicas in sync")

            # `app` has no ACL yet: both brokers refuse it.
            assert _errors_at_each_broker(addresses, ca, "app") == ["TOPIC_AUTHORIZATION_FAILED"] * 2
            granted = admin.create_acls([
                ACL(principal="User:app", host="*", operation=operation, permission_type=ACLPermissionType.ALLOW,
                    resource_pattern=ResourcePattern(ResourceType.TOPIC, TOPIC))
                for operation in (ACLOperation.WRITE, ACLOperation.READ, ACLOperation.DESCRIBE)])
            assert not granted["failed"], granted["failed"]
            # Granted to the mapped name, they let the certificate in at both brokers once each has
            # the ACLs from the metadata log.
            _until(lambda: _errors_at_each_broker(addresses, ca, "app") == ["NONE"] * 2,
                   "both brokers to serve app by the ACLs of User:app")
            # A certificate of another name stays refused at both.
            assert _errors_at_each_broker(addresses, ca, "mallory") == ["TOPIC_AUTHORIZATION_FAILED"] * 2

            _written_and_read_back_while_each_side_leads_once(admin, bootstrap, TOPIC, **app_tls)
        finally:
            admin.close()
