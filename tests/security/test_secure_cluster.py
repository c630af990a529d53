"""A cluster whose every listener is secured, with real clients: kafka-python and
confluent-kafka (librdkafka) over mTLS, nodes authenticating each other with certificates from
the cluster CA, and a node with a certificate from another CA refused at the handshake."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from pki import CertificateAuthority
from quorum_processes import wait_for
from secure_cluster import SecureCluster, start_secure_cluster

pytestmark = [
    pytest.mark.process,
    # kafka-python loads its schemas with importlib.resources' deprecated helpers
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    processes = SecureCluster(root=Path(tmp_path_factory.mktemp("secure")))
    try:
        # SCRAM users seeded in the bootstrap metadata, as `kafka-storage format --add-scram` does.
        start_secure_cluster(processes, controller_flags=(
            "--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-secret]",
            "--add-scram", 'SCRAM-SHA-256=[name=bob,iterations=8192,password="bob secret"]'))
        yield processes
    finally:
        processes.cleanup()


def _client_files(cluster: SecureCluster, tmp_path: Path, ca: CertificateAuthority | None = None) -> dict[str, str]:
    issued = (ca or cluster.ca).issue("app", organization="kraftwerk")
    cert, key = issued.write(tmp_path, "app")
    return {"ca": str(cluster.ca.write(tmp_path)), "cert": str(cert), "key": str(key)}


def _mtls_bootstrap(cluster: SecureCluster) -> str:
    return cluster.broker_bootstrap()


def test_kafka_python_over_mtls_produces_and_consumes_across_replicated_brokers(cluster, tmp_path):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    files = _client_files(cluster, tmp_path)
    tls = {"security_protocol": "SSL", "ssl_cafile": files["ca"], "ssl_certfile": files["cert"],
           "ssl_keyfile": files["key"], "ssl_check_hostname": True}
    admin = KafkaAdminClient(bootstrap_servers=_mtls_bootstrap(cluster), request_timeout_ms=30000, **tls)
    try:
        admin.create_topics([NewTopic("mtls-orders", num_partitions=2, replication_factor=2)], timeout_ms=30000)
    finally:
        admin.close()
    # Replication runs over the INTERNAL (mTLS) listener: both replicas join the ISR.
    for partition in (0, 1):
        cluster.wait_isr("mtls-orders", partition, {101, 102})
    producer = KafkaProducer(bootstrap_servers=_mtls_bootstrap(cluster), acks="all", request_timeout_ms=30000, **tls)
    try:
        for i in range(20):
            producer.send("mtls-orders", value=f"order-{i}".encode(), partition=i % 2).get(timeout=60)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=_mtls_bootstrap(cluster), consumer_timeout_ms=30000,
                             auto_offset_reset="earliest", enable_auto_commit=False, **tls)
    try:
        consumer.assign([TopicPartition("mtls-orders", 0), TopicPartition("mtls-orders", 1)])
        values: set[bytes] = set()
        for message in consumer:
            values.add(message.value)
            if len(values) == 20:
                break
    finally:
        consumer.close()
    assert values == {f"order-{i}".encode() for i in range(20)}


def test_librdkafka_over_mtls_produces_and_consumes(cluster, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    files = _client_files(cluster, tmp_path)
    tls = {"bootstrap.servers": _mtls_bootstrap(cluster), "security.protocol": "SSL", "ssl.ca.location": files["ca"],
           "ssl.certificate.location": files["cert"], "ssl.key.location": files["key"]}
    admin = AdminClient(tls)
    for future in admin.create_topics([NewTopic("mtls-rd", 1, 2)], request_timeout=30).values():
        future.result(timeout=60)
    cluster.wait_isr("mtls-rd", 0, {101, 102})
    values = _librdkafka_round_trip(tls, [f"v{i}".encode() for i in range(10)])
    assert values == [f"v{i}".encode() for i in range(10)]


def _librdkafka_round_trip(config: dict[str, str], sent: list[bytes]) -> list[bytes]:
    """Produce `sent` to mtls-rd-0 with acks=all, then read the partition to its end."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    producer = Producer({**config, "acks": "all"})
    errors: list[object] = []
    for value in sent:
        producer.produce("mtls-rd", value=value, partition=0,
                         on_delivery=lambda err, _msg: errors.append(err) if err is not None else None)
    assert producer.flush(120) == 0
    assert errors == []
    consumer = Consumer({**config, "group.id": "unused", "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition("mtls-rd", 0, 0)])
        values: list[bytes] = []
        while True:
            message = consumer.poll(90)
            assert message is not None, "no record and no end of partition within 90 s"
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                return values
            values.append(message.value())
    finally:
        consumer.close()


async def test_a_client_certificate_from_another_ca_is_refused_and_the_broker_keeps_serving(cluster, tmp_path):
    from kafka import KafkaProducer

    from kraft_engine.protocol import ConnectionConfig, ConnectionFailed, KafkaConnection
    from kraft_engine.protocol.security import client_security

    impostor = CertificateAuthority("cluster-ca").issue("app", organization="kraftwerk")
    security = client_security({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": cluster.ca.certificate_pem,
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": impostor.chain_pem,
        "ssl.keystore.key": impostor.key_pem})
    host, port = cluster.broker_bootstrap([101]).split(":")
    async with KafkaConnection(host, int(port), config=ConnectionConfig(security=security)) as connection:
        with pytest.raises(ConnectionFailed):
            await connection.connect(timeout_ms=3000)
    wait_for(lambda: "SSL handshake failed" in cluster.log(101), timeout_s=60, what="the broker to log the refusal")
    good = _client_files(cluster, tmp_path)
    producer = KafkaProducer(bootstrap_servers=_mtls_bootstrap(cluster), security_protocol="SSL",
                             ssl_cafile=good["ca"], ssl_certfile=good["cert"], ssl_keyfile=good["key"],
                             metadata_max_age_ms=500)
    try:
        _wait_until_known(cluster, producer, "mtls-orders", 0)
        producer.send("mtls-orders", value=b"still serving", partition=0).get(timeout=60)
    finally:
        producer.close()


def _wait_until_known(cluster: SecureCluster, producer, topic: str, partition: int) -> None:
    """Until the producer's metadata lists `partition` (kafka-python refuses a send to a partition
    it does not know, at once, rather than waiting). Each look that misses it asks kafka-python for a
    refresh now, rather than at the next expiry; should it never come, the failure shows what the
    producer holds beside what each broker answers."""

    def known() -> bool:
        if partition in (producer.partitions_for(topic) or set()):
            return True
        producer._metadata.request_update()
        return False

    try:
        wait_for(known, timeout_s=60, what=f"the producer's metadata to list {topic}-{partition}")
    except AssertionError as e:
        with concurrent.futures.ThreadPoolExecutor(1) as thread:  # callers may be inside an event loop
            answers = thread.submit(asyncio.run, _metadata_answers(cluster, topic)).result()
        raise AssertionError(f"{e}; the producer holds {producer._metadata}, "
                             f"partitions {producer._metadata.partitions_for_topic(topic)}; "
                             f"the brokers answer {answers}") from e


async def _metadata_answers(cluster: SecureCluster, topic: str) -> dict[int, object]:
    """Each broker's Metadata answer for `topic` over its mTLS listener: (topic error, [(partition,
    error, leader)]), or why it did not answer."""
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.types import TopicName

    from kraft_engine.protocol import ConnectionConfig, KafkaConnection, KafkaProtocolError
    from kraft_engine.protocol.security import client_security

    issued = cluster.ca.issue("observer", organization="kraftwerk")
    security = client_security({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": cluster.ca.certificate_pem,
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": issued.chain_pem, "ssl.keystore.key": issued.key_pem})
    answers: dict[int, object] = {}
    for broker in sorted(cluster.brokers):
        host, port = cluster.broker_bootstrap([broker]).split(":")
        async with KafkaConnection(host, int(port), config=ConnectionConfig(security=security)) as connection:
            try:
                response = await connection.send(MetadataRequest(
                    topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
                    allow_auto_topic_creation=False, include_topic_authorized_operations=False))
            except (KafkaProtocolError, OSError) as error:
                answers[broker] = repr(error)
                continue
        answers[broker] = [(t.error_code, [(int(p.partition_index), p.error_code, int(p.leader_id)) for p in t.partitions])
                           for t in response.topics]
    return answers


def test_kafka_python_over_sasl_ssl_with_scram_sha_512(cluster, tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    ca = str(cluster.ca.write(tmp_path))
    sasl = {"security_protocol": "SASL_SSL", "ssl_cafile": ca, "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "alice"}
    producer = KafkaProducer(bootstrap_servers=cluster.client_bootstrap(), acks="all", request_timeout_ms=30000,
                             metadata_max_age_ms=500, sasl_plain_password="alice-secret", **sasl)
    try:
        _wait_until_known(cluster, producer, "mtls-orders", 1)
        for i in range(10):
            producer.send("mtls-orders", value=f"scram-{i}".encode(), partition=1).get(timeout=60)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.client_bootstrap(), consumer_timeout_ms=30000,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             sasl_plain_password="alice-secret", **sasl)
    try:
        consumer.assign([TopicPartition("mtls-orders", 1)])
        values = set()
        for message in consumer:
            values.add(message.value)
            if {f"scram-{i}".encode() for i in range(10)} <= values:
                break
    finally:
        consumer.close()
    assert {f"scram-{i}".encode() for i in range(10)} <= values
    # The wrong password never gets in (checked with our client: kafka-python leaks a socket when
    # its constructor fails).
    assert "SASL_AUTHENTICATION_FAILED" in asyncio.run(_connect_as(cluster, "alice", "guess"))
    # The refused attempt's TLS socket is closed, not left to the garbage collector (whose
    # ResourceWarning would fail whichever test ran when it collected it).
    gc.collect()
    wait_for(lambda: "Failed authentication" in cluster.log(101) + cluster.log(102), timeout_s=60,
             what="a broker to log the failed authentication")


def test_librdkafka_over_sasl_ssl_with_scram(cluster, tmp_path):
    base = {"bootstrap.servers": cluster.client_bootstrap(), "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(cluster.ca.write(tmp_path))}
    for mechanism, user, password in (("SCRAM-SHA-512", "alice", "alice-secret"), ("SCRAM-SHA-256", "bob", "bob secret")):
        config = {**base, "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}
        values = _librdkafka_round_trip(config, [f"{user}-{i}".encode() for i in range(5)])
        assert [f"{user}-{i}".encode() for i in range(5)] == [v for v in values if v.startswith(user.encode())]


async def _connect_as(cluster: SecureCluster, user: str, password: str, *, broker: int = 0) -> str:
    """'connected', or why our client could not authenticate to a broker's CLIENTS listener."""
    from kraft_engine.protocol import ConnectionConfig, ConnectionFailed, KafkaConnection
    from kraft_engine.protocol.security import client_security

    security = client_security({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": cluster.ca.certificate_pem,
        "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" '
                            f'password="{password}";'})
    host, port = cluster.client_bootstrap().split(",")[broker].split(":")
    async with KafkaConnection(host, int(port), config=ConnectionConfig(security=security)) as connection:
        try:
            await connection.connect(timeout_ms=30000)
        except ConnectionFailed as e:
            return str(e)
    return "connected"


def test_scram_users_are_managed_with_alter_and_describe_user_scram_credentials(cluster, tmp_path):
    """AlterUserScramCredentials through a broker (forwarded to the controller in an Envelope),
    DescribeUserScramCredentials from the broker's image; a new user gets in, a deleted one no
    longer does."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    base = {"bootstrap.servers": cluster.client_bootstrap(), "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(cluster.ca.write(tmp_path)), "sasl.mechanisms": "SCRAM-SHA-512"}
    admin = AdminClient({**base, "sasl.username": "alice", "sasl.password": "alice-secret"})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    for future in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("carol", info, b"carol-secret")]).values():
        future.result(timeout=60)

    def described() -> dict[str, list[tuple[object, int]]] | None:
        # The broker answers from its metadata image, which applies the new record a moment after
        # the controller committed it (as Kafka's): wait until it did.
        try:
            return {user: [(i.mechanism, i.iterations) for i in f.result(timeout=60).scram_credential_infos]
                    for user, f in admin.describe_user_scram_credentials(["carol", "alice"]).items()}
        except KafkaException:
            return None

    infos = wait_for(described, timeout_s=120, what="the brokers to describe carol")
    assert infos == {"carol": [(ScramMechanism.SCRAM_SHA_512, 8192)], "alice": [(ScramMechanism.SCRAM_SHA_512, 4096)]}
    with pytest.raises(KafkaException, match=r"RESOURCE_NOT_FOUND|does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(timeout=60)

    def produce_as(password: str) -> bool:
        producer = Producer({**base, "sasl.username": "carol", "sasl.password": password, "acks": "all",
                             "message.timeout.ms": 10000})
        delivered: list[object] = []
        producer.produce("mtls-rd", value=b"carol", partition=0,
                         on_delivery=lambda err, _msg: delivered.append(err))
        producer.flush(30)
        return delivered == [None]

    # Every broker applies the new credential from the metadata log; then carol gets in.
    wait_for(lambda: all(asyncio.run(_connect_as(cluster, "carol", "carol-secret", broker=b)) == "connected"
                         for b in (0, 1)) or None, timeout_s=120, what="both brokers to accept carol")
    assert produce_as("carol-secret")
    for future in admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)]).values():
        future.result(timeout=60)
    # (Refusal checked with our client: confluent-kafka's binding raises SystemError on a SASL
    # failure reported during flush.)
    wait_for(lambda: all("SASL_AUTHENTICATION_FAILED" in asyncio.run(_connect_as(cluster, "carol", "carol-secret",
                                                                                 broker=b)) for b in (0, 1)) or None,
             timeout_s=120, what="both brokers to refuse carol")
    # The refusal above came from a broker that applied the deletion; the other may lag behind.
    def carol_gone() -> bool:
        try:
            admin.describe_user_scram_credentials(["carol"])["carol"].result(timeout=60)
        except KafkaException as e:
            return "RESOURCE_NOT_FOUND" in str(e)
        return False

    wait_for(lambda: carol_gone() or None, timeout_s=120, what="carol's credential to be gone")


@pytest.mark.kafka_jars
def test_kafka_console_tools_over_mtls_and_sasl_ssl(cluster, tmp_path):
    """Apache Kafka 4.1's own tools with Kafka's client keys: TopicCommand and ConsoleProducer over
    mTLS (a PEM keystore), ConsoleConsumer over SASL_SSL with SCRAM-SHA-512."""
    import subprocess

    from kafka_jars import CLASSPATH

    if CLASSPATH is None:
        pytest.skip("Kafka jars not cached (run scripts/fetch-kafka-jars) or no java on PATH")
    ca = cluster.ca.write(tmp_path)
    keystore = cluster.ca.issue("java-app", organization="kraftwerk").keystore_pem(tmp_path, "java-app")
    mtls = tmp_path / "mtls.properties"
    mtls.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={ca}\n"
                    f"ssl.keystore.type=PEM\nssl.keystore.location={keystore}\n")
    scram = tmp_path / "scram.properties"
    scram.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.truststore.type=PEM\n"
                     f"ssl.truststore.location={ca}\nsasl.jaas.config=org.apache.kafka.common.security.scram."
                     'ScramLoginModule required username="alice" password="alice-secret";\n')

    def java(main: str, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", CLASSPATH, main, *args],
                                input=stdin, capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    internal = cluster.broker_bootstrap()
    java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", internal, "--command-config", str(mtls),
         "--create", "--topic", "java-tools", "--partitions", "1", "--replication-factor", "2")
    java("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", internal, "--producer.config", str(mtls),
         "--topic", "java-tools", "--sync", stdin="java-1\njava-2\njava-3\n")
    consumed = java("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", cluster.client_bootstrap(),
                    "--consumer.config", str(scram), "--topic", "java-tools", "--partition", "0", "--offset", "0",
                    "--max-messages", "3")
    assert consumed.splitlines() == ["java-1", "java-2", "java-3"]


def test_a_broker_with_a_certificate_from_another_ca_never_joins(cluster):
    cluster.rogue_ca[103] = CertificateAuthority("cluster-ca")
    cluster.add_broker(103)
    cluster.format(103)
    cluster.launch(103)
    # The controller refuses its handshake: the impostor never registers, never becomes ready.
    wait_for(lambda: cluster.log(1).count("SSL handshake failed") >= 2, timeout_s=120,
             what="the controller to refuse the impostor's handshakes")
    # The cluster, asked over mTLS, knows brokers 101 and 102 only, fenced ones included.
    assert asyncio.run(_registered_brokers(cluster)) == [101, 102]
    cluster.wait_ready([101, 102])


async def _registered_brokers(cluster: SecureCluster) -> list[int]:
    from kio.static.primitive import i8

    from kraft_engine.protocol import ConnectionConfig, KafkaConnection, request_class
    from kraft_engine.protocol.security import client_security

    issued = cluster.ca.issue("observer", organization="kraftwerk")
    security = client_security({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": cluster.ca.certificate_pem,
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": issued.chain_pem, "ssl.keystore.key": issued.key_pem})
    host, port = cluster.broker_bootstrap([101]).split(":")
    async with KafkaConnection(host, int(port), config=ConnectionConfig(security=security)) as connection:
        response = await connection.send(request_class(60, 2)(
            include_cluster_authorized_operations=False, endpoint_type=i8(1), include_fenced_brokers=True))
    return sorted(int(b.broker_id) for b in response.brokers)
