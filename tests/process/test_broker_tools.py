"""`kraft console-producer`, `kraft console-consumer` and `kraft log-dirs` against three of our
brokers and three controllers (real processes), run as the commands a user types, with Kafka's
flags; kafka-python (a client not written here) cross-checks where the records went and what
they hold."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from broker_processes import BrokerCluster
from quorum_processes import kraft_tool

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.partitioner.default import murmur2

pytestmark = [
    pytest.mark.process,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

KRAFT = str(Path(sys.executable).parent / "kraft")
PARTITIONS = 3


@pytest.fixture
def cluster(module_brokers: BrokerCluster) -> BrokerCluster:
    return module_brokers


def _create(cluster: BrokerCluster, topic: str, *, partitions: int = PARTITIONS,
            configs: dict[str, str] | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.broker_bootstrap(), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic, partitions, 3, topic_configs=configs or {})])
    finally:
        admin.close()
    for partition in range(partitions):
        cluster.wait_isr(topic, partition, set(cluster.brokers))


def _producer(cluster: BrokerCluster, topic: str, lines: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KRAFT, "console-producer", "--bootstrap-server", cluster.broker_bootstrap(), "--topic", topic,
                           *flags], input=lines, capture_output=True, text=True, timeout=300, check=False)


def _consumer(cluster: BrokerCluster, topic: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KRAFT, "console-consumer", "--bootstrap-server", cluster.broker_bootstrap(), "--topic", topic,
                           *flags], capture_output=True, text=True, timeout=300, check=False)


def _kafka_python_read(cluster: BrokerCluster, topic: str, *,
                       partitions: int = PARTITIONS) -> dict[int, list[tuple[int, bytes | None, bytes | None]]]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.broker_bootstrap(), enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=5000)
    try:
        assignment = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assignment)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(assignment)
        read: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {p: [] for p in range(partitions)}
        while any(consumer.position(tp) < ends[tp] for tp in assignment):
            for records in consumer.poll(timeout_ms=2000).values():
                for record in records:
                    read[record.partition].append((record.offset, record.key, record.value))
        return read
    finally:
        consumer.close()


def test_console_producer_keys_pick_kafkas_partition_and_console_consumer_reads_a_partition_from_an_offset(
        cluster: BrokerCluster) -> None:
    topic = "console"
    _create(cluster, topic)
    keys = [f"key-{i % 7}" for i in range(60)]
    lines = "".join(f"{key}:value-{i}\n" for i, key in enumerate(keys))
    produced = _producer(cluster, topic, lines, "--property", "parse.key=true", "--property", "key.separator=:",
                         "--compression-codec", "zstd", "--batch-size", "16")
    assert (produced.returncode, produced.stderr) == (0, "")

    # Every key went where Kafka's partitioner (kafka-python's murmur2 here) puts it, in order.
    expected: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for i, key in enumerate(keys):
        expected[(murmur2(key.encode()) & 0x7FFFFFFF) % PARTITIONS].append((key.encode(), f"value-{i}".encode()))
    read = _kafka_python_read(cluster, topic)
    assert {p: [(k, v) for _, k, v in records] for p, records in read.items()} == expected
    assert all([o for o, _, _ in records] == list(range(len(records))) for records in read.values())

    partition = max(expected, key=lambda p: len(expected[p]))
    start = 3
    consumed = _consumer(cluster, topic, "--partition", str(partition), "--offset", str(start), "--max-messages",
                         str(len(expected[partition]) - start), "--property", "print.key=true",
                         "--property", "print.offset=true", "--property", "print.partition=true")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [
        f"Partition:{partition}\tOffset:{offset}\t{key.decode()}\t{value.decode()}"
        for offset, (key, value) in enumerate(expected[partition]) if offset >= start
    ]
    assert consumed.stderr.strip() == f"Processed a total of {len(expected[partition]) - start} messages"

    # --from-beginning over every partition, ended by --timeout-ms once nothing more arrives.
    everything = _consumer(cluster, topic, "--from-beginning", "--timeout-ms", "3000")
    assert everything.returncode == 0
    assert sorted(everything.stdout.splitlines()) == sorted(f"value-{i}" for i in range(60))
    assert f"Processed a total of {len(keys)} messages" in everything.stderr


def test_console_tools_refuse_what_kafkas_refuse(cluster: BrokerCluster) -> None:
    topic = "refusals"
    _create(cluster, topic)
    no_separator = _producer(cluster, topic, "no-separator-here\n", "--property", "parse.key=true")
    assert no_separator.returncode == 1
    assert "No key separator found on line number 1: 'no-separator-here'" in no_separator.stderr
    assert _consumer(cluster, topic, "--offset", "3").stderr.strip() == \
        "Error: The partition is required when offset is specified."
    assert "cannot be specified together" in _consumer(cluster, topic, "--partition", "0", "--offset", "3",
                                                       "--from-beginning").stderr
    # An error while consuming is logged and the count printed, status 0 (Kafka's ConsoleConsumer).
    unknown = _consumer(cluster, "no-such-topic", "--partition", "0", "--offset", "0", "--timeout-ms", "1000")
    assert unknown.returncode == 0
    assert unknown.stderr.splitlines()[0].startswith("ERROR Error processing message, terminating consumer process: ")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in unknown.stderr
    assert unknown.stderr.splitlines()[-1] == "Processed a total of 0 messages"
    # Nothing was written by the refused line.
    assert all(records == [] for records in _kafka_python_read(cluster, topic).values())


def test_log_dirs_describe_prints_kafkas_json_for_every_broker(cluster: BrokerCluster) -> None:
    topic = "sized"
    _create(cluster, topic)
    assert _producer(cluster, topic, "".join(f"line-{i}\n" for i in range(30))).returncode == 0
    result = kraft_tool("log-dirs", "--bootstrap-server", cluster.broker_bootstrap(), "--describe",
                        "--topic-list", topic)
    assert result.returncode == 0, result.stderr
    first, second, document = result.stdout.splitlines()
    assert first == "Querying brokers for log directories information"
    assert second == "Received log directory information from brokers " + ",".join(map(str, sorted(cluster.brokers)))
    described = json.loads(document)
    assert described["version"] == 1
    assert [b["broker"] for b in described["brokers"]] == sorted(cluster.brokers)
    for broker in described["brokers"]:
        root = cluster.nodes[broker["broker"]].config_path.parent
        assert [d["logDir"] for d in broker["logDirs"]] == [str(root / "data-a"), str(root / "data-b")]
        assert all(d["error"] is None for d in broker["logDirs"])
        shown = {p["partition"]: (d["logDir"], p) for d in broker["logDirs"] for p in d["partitions"]}
        assert sorted(shown) == [f"{topic}-{p}" for p in range(PARTITIONS)]
        for name, (log_dir, entry) in shown.items():
            on_disk = sum(f.stat().st_size for f in (Path(log_dir) / name).glob("*.log"))
            assert (entry["size"], entry["offsetLag"], entry["isFuture"]) == (on_disk, 0, False)
    missing = kraft_tool("log-dirs", "--bootstrap-server", cluster.broker_bootstrap(), "--describe",
                         "--broker-list", "101,999")
    assert missing.returncode == 1
    assert missing.stdout.strip() == ("ERROR: The given brokers do not exist from --broker-list: 999. "
                                      "Current existent brokers: " + ",".join(map(str, sorted(cluster.brokers))))


def test_console_producer_acks_and_exit_status_follow_kafkas_console_producer(cluster: BrokerCluster) -> None:
    topic = "acks"
    _create(cluster, topic, partitions=1, configs={"max.message.bytes": "300"})
    big = "x" * 1000  # over the topic's max.message.bytes: MESSAGE_TOO_LARGE, nothing written

    # acks=0 from --producer-property: written, nothing waited for; an oversized line's refusal is
    # never seen (the broker answers acks=0 with nothing), so the status is 0.
    zero = _producer(cluster, topic, f"zero-1\n{big}\nzero-2\n", "--producer-property", "acks=0", "--sync")
    assert (zero.returncode, zero.stderr) == (0, "")
    # acks=1 and the flag winning over the property (Kafka's maybeMergeOptions), asynchronous:
    # the refusal is logged as Kafka's ErrorLoggingCallback logs it, the rest is written, status 0.
    one = _producer(cluster, topic, f"one-1\n{big}\none-2\n", "--producer-property", "acks=0",
                    "--request-required-acks", "1", "--batch-size", "1")
    assert one.returncode == 0, one.stderr
    [logged] = one.stderr.splitlines()
    assert logged.startswith(f"ERROR Error when sending message to topic {topic} with key: null, value: 1000 bytes "
                             "with error: MESSAGE_TOO_LARGE"), one.stderr
    # acks=all (the default) with --sync: the first refusal ends the run with status 1, as Kafka's
    # tool does when producer.send(record).get() throws; the line after it is not sent.
    synced = _producer(cluster, topic, f"all-1\n{big}\nall-2\n", "--sync")
    assert synced.returncode == 1
    assert "MESSAGE_TOO_LARGE" in synced.stderr

    written = [b"zero-1", b"zero-2", b"one-1", b"one-2", b"all-1"]
    assert [v for _, _, v in _kafka_python_read(cluster, topic, partitions=1)[0]] == written

    # Kafka's refusals of the configuration and the command line: status 1, nothing written.
    idempotent = _producer(cluster, topic, "never\n", "--producer-property", "enable.idempotence=true",
                           "--producer-property", "acks=1")
    assert idempotent.returncode == 1
    assert "Must set acks to all in order to use the idempotent producer" in idempotent.stderr
    bad_acks = _producer(cluster, topic, "never\n", "--request-required-acks", "2")
    assert bad_acks.returncode == 1
    assert "Invalid value 2 for configuration acks: String must be one of: all, -1, 0, 1" in bad_acks.stderr
    no_topic = subprocess.run([KRAFT, "console-producer", "--bootstrap-server", cluster.broker_bootstrap()],
                              input="never\n", capture_output=True, text=True, timeout=300, check=False)
    assert no_topic.returncode == 1 and "--topic" in no_topic.stderr
    unknown = _producer(cluster, "no-such-topic", "never\n")
    assert unknown.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in unknown.stderr
    assert [v for _, _, v in _kafka_python_read(cluster, topic, partitions=1)[0]] == written

