"""The operator-facing tools on real brokers, ours and Apache Kafka 4.1's (jars; those parts skip
cleanly without them): `kraft get-offsets` and Kafka's GetOffsetShell print the same lines for
the same flags; `kraft producer-perf-test` / `consumer-perf-test` and Kafka's perf tools print
Kafka's lines with the counts that were really written and read; Kafka's kafka-log-dirs prints
the JSON ours prints; Kafka's kafka-reassign-partitions moves a partition with a throttle that
our brokers take as dynamic configs and removes it on `--verify`."""

from __future__ import annotations

import json
import re
import sys
import time
import warnings
from pathlib import Path

import confluent_kafka
import pytest
import quorum_processes
from broker_processes import BrokerCluster
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from group_members import TIMEOUT_S
from quorum_processes import kraft_tool, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))
from kafka_jars import CLASSPATH, kafka_tool

pytestmark = [
    pytest.mark.process,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]
has_jars = CLASSPATH is not None

# A replication throttle is Kafka's sampled rate: a throttled fetcher may fetch whenever the rate
# over the live windows (at least ten 1 s windows) is under the bound, and one fetch may then
# bring up to `replica.fetch.max.bytes`. With Kafka's 1 MiB that lets a 5 kB/s throttle move a
# MiB every eleven seconds (when the window holding it expires), so a throttle holds a move to its
# rate only when one fetch is below what the windows allow (rate x 10 s). The held-back move below
# relies on that: this module's brokers fetch 16 KiB per partition, its records in 16 KiB batches.
BROKER_CONFIG = {"replica.fetch.max.bytes": "16384"}

_PRODUCER_SUMMARY = re.compile(r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
                               r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$")
_CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
_CONSUMER_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}, "
                            r"([\d.]+), [\d.]+, (\d+), [\d.]+, \d+, \d+, [\d.]+, [\d.]+$")


@pytest.fixture
def cluster(group_brokers: BrokerCluster) -> BrokerCluster:
    return group_brokers


def kraft(*args: str, check: bool = True) -> str:
    """Our tool through the console script's `main`, in this process (an interpreter start per
    tool costs half a second of CPU, minutes of a loaded machine over a module; the refusals
    below still run the console script)."""
    return kraft_tool(*args, check=check).stdout


def kafka(main_class: str, *args: str) -> str:
    result = kafka_tool(main_class, *args, timeout_s=TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _topic(cluster: BrokerCluster, topic: str, *, partitions: int, replicas: list[int] | None = None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.broker_bootstrap(), request_timeout_ms=60_000)
    try:
        admin.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: replicas}) if replicas
                             else NewTopic(topic, partitions, 3)])
    finally:
        admin.close()
    for partition in range(1 if replicas else partitions):
        cluster.wait_isr(topic, partition, set(replicas or cluster.brokers))


def _send(cluster: BrokerCluster, topic: str, records: list[tuple[int, int, bytes]], *,
          batch_bytes: int = 1_000_000) -> None:
    """(partition, timestamp ms, value) each, acks=all, in batches of at most `batch_bytes`."""
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.broker_bootstrap(), "acks": "all",
                                        "batch.size": batch_bytes})
    for partition, timestamp, value in records:
        producer.produce(topic, value=value, partition=partition, timestamp=timestamp)
    assert producer.flush(TIMEOUT_S) == 0


@pytest.mark.timeout(900)  # seven starts of Kafka's tool: a JVM start is half a minute on a loaded machine
def test_get_offsets_prints_kafkas_lines_for_every_time_and_filter(cluster: BrokerCluster) -> None:
    topic = "offsets"
    _topic(cluster, topic, partitions=3)
    _send(cluster, topic, [(0, 1000 + i, b"a") for i in range(5)] + [(2, 2000 + i, b"b") for i in range(12)])
    bootstrap = cluster.broker_bootstrap()
    cases = {
        ("--topic", topic): "offsets:0:5\noffsets:1:0\noffsets:2:12\n",
        ("--topic", "off.*", "--time", "earliest"): "offsets:0:0\noffsets:1:0\noffsets:2:0\n",
        ("--topic", topic, "--time", "-2", "--partitions", "0,2"): "offsets:0:0\noffsets:2:0\n",
        ("--topic", topic, "--time", "2005"): "offsets:2:5\n",  # the first record at or after it; none elsewhere
        ("--topic", topic, "--time", "max-timestamp"): "offsets:0:4\noffsets:2:11\n",
        ("--topic-partitions", f"{topic}:1-", "--time", "-1"): "offsets:1:0\noffsets:2:12\n",
        ("--topic-partitions", f"{topic}:-1"): "offsets:0:5\n",
    }
    for flags, expected in cases.items():
        assert kraft("get-offsets", "--bootstrap-server", bootstrap, *flags) == expected, flags
        if has_jars:
            assert kafka("org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", bootstrap, *flags) == expected
    # No tiered storage: the local log starts at the log start; nothing is in remote storage (Kafka's
    # tool and node give the same: interop/test_kafka_list_offsets.py, a JVM start each costs too much here).
    assert kraft("get-offsets", "--bootstrap-server", bootstrap, "--topic", topic, "--time", "earliest-local") == \
        "offsets:0:0\noffsets:1:0\noffsets:2:0\n"
    assert kraft("get-offsets", "--bootstrap-server", bootstrap, "--topic", topic, "--time", "-5") == ""
    refused = quorum_processes.kraft("get-offsets", "--bootstrap-server", bootstrap, "--time", "soon")
    assert refused.returncode == 1
    assert ("Malformed time argument soon. Please use -1 or latest / -2 or earliest / -3 or max-timestamp / -4 or "
            "earliest-local / -5 or latest-tiered, or a specified long format timestamp") in refused.stderr


def _offsets_total(cluster: BrokerCluster, topic: str) -> int:
    return sum(int(line.rsplit(":", 1)[1]) for line in
               kraft("get-offsets", "--bootstrap-server", cluster.broker_bootstrap(), "--topic", topic).splitlines())


def test_perf_tools_print_kafkas_lines_with_what_was_written_and_read(cluster: BrokerCluster) -> None:
    topic, bootstrap = "perf", cluster.broker_bootstrap()
    _topic(cluster, topic, partitions=3)
    out = kraft("producer-perf-test", "--topic", topic, "--num-records", "3000", "--record-size", "100",
                "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all")
    summary = _PRODUCER_SUMMARY.match(out.splitlines()[-1])
    assert summary is not None and summary.group(1) == "3000", out
    assert _offsets_total(cluster, topic) == 3000
    if has_jars:
        out = kafka("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", "3000",
                    "--record-size", "100", "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}")
        summary = _PRODUCER_SUMMARY.match(out.splitlines()[-1])
        assert summary is not None and summary.group(1) == "3000", out
    total = _offsets_total(cluster, topic)
    assert total == (6000 if has_jars else 3000)

    out = kraft("consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(total),
                "--group", "perf-ours", "--timeout", "60000")
    lines = out.splitlines()
    assert lines[0] == _CONSUMER_HEADER
    found = _CONSUMER_LINE.match(lines[1])
    assert found is not None and found.groups() == (f"{total * 100 / 1024 / 1024:.4f}", str(total)), out
    if has_jars:
        out = kafka("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
                    "--messages", str(total), "--group", "perf-kafka", "--timeout", "60000")
        lines = [line for line in out.splitlines() if line and not line.startswith("Starting")]
        assert lines[0] == _CONSUMER_HEADER
        found = _CONSUMER_LINE.match(lines[1])
        assert found is not None and found.groups() == (f"{total * 100 / 1024 / 1024:.4f}", str(total)), out


@pytest.mark.skipif(not has_jars, reason="Kafka jars not cached (run scripts/fetch-kafka-jars) or no java on PATH")
def test_kafka_log_dirs_prints_the_json_ours_prints(cluster: BrokerCluster) -> None:
    topic, bootstrap = "dirs", cluster.broker_bootstrap()
    _topic(cluster, topic, partitions=3)
    _send(cluster, topic, [(p, 0, b"x" * 100) for p in range(3) for _ in range(10)])
    flags = ("--describe", "--bootstrap-server", bootstrap, "--broker-list", "101,102", "--topic-list", topic)

    def settled() -> tuple[str, str] | None:
        ours, theirs = kraft("log-dirs", *flags), kafka("org.apache.kafka.tools.LogDirsCommand", *flags)
        return (ours, theirs) if _normalized(ours) == _normalized(theirs) else None
    ours, theirs = wait_for(settled, timeout_s=60, what="kafka-log-dirs and ours to agree")
    assert ours.splitlines()[:2] == theirs.splitlines()[:2] == [
        "Querying brokers for log directories information", "Received log directory information from brokers 101,102"]
    described = json.loads(theirs.splitlines()[2])
    assert sorted(p["partition"] for b in described["brokers"] for d in b["logDirs"] for p in d["partitions"]) == [
        f"{topic}-{p}" for p in range(3) for _ in range(2)]


def _normalized(output: str) -> object:
    document = json.loads(output.splitlines()[2])
    for broker in document["brokers"]:
        broker["logDirs"] = sorted(({**d, "partitions": sorted(d["partitions"], key=lambda p: p["partition"])}
                                    for d in broker["logDirs"]), key=lambda d: d["logDir"])
    return document


@pytest.mark.skipif(not has_jars, reason="Kafka jars not cached (run scripts/fetch-kafka-jars) or no java on PATH")
def test_kafka_reassign_partitions_moves_with_a_throttle_our_brokers_honour_and_verify_removes(
        cluster: BrokerCluster, tmp_path: Path) -> None:
    topic, bootstrap = "kafka-moves", cluster.broker_bootstrap()
    _topic(cluster, topic, partitions=1, replicas=[101, 102])
    _send(cluster, topic, [(0, 0, b"y" * 1000) for _ in range(2000)])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [102, 103]}]}))
    tool = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
    out = kafka(tool, "--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan), "--execute",
                "--throttle", "500000")
    assert "The inter-broker throttle limit was set to 500000 B/s" in out
    assert f"Successfully started partition reassignment for {topic}-0" in out
    # Our brokers took Kafka's throttle configs; the move is held to the rate while it runs.
    described = kraft("reassign-partitions", "--bootstrap-server", bootstrap, "--list")
    assert f"{topic}-0: replicas: 102,103,101. adding: 103. removing: 101." in described or \
        "No partition reassignments found." in described
    started = time.monotonic()

    def verified() -> str | None:
        out = kafka(tool, "--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan), "--verify")
        return out if "Clearing broker-level throttles" in out else None
    out = wait_for(verified, timeout_s=180, what="Kafka's tool to see the move complete", interval_s=1)
    elapsed = time.monotonic() - started
    assert out == (f"Status of partition reassignment:\nReassignment of partition {topic}-0 is completed.\n\n"
                   "Clearing broker-level throttles on brokers 101,102,103\n"
                   f"Clearing topic-level throttles on topic {topic}\n")
    print(f"~2 MB moved under Kafka's tool's 0.5 MB/s throttle in {elapsed:.1f} s after --execute returned")
    ours = kraft("reassign-partitions", "--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan),
                 "--verify", "--preserve-throttles")
    assert ours == f"Status of partition reassignment:\nReassignment of partition {topic}-0 is completed.\n\n"


def _two_documents(output: str, first: str, second: str) -> tuple[dict[str, object], dict[str, object]]:
    """The two JSON documents `--generate` prints under its two headings."""
    head, _, tail = output.partition(second + "\n")
    assert head.startswith(first + "\n"), output
    return json.loads(head.removeprefix(first + "\n")), json.loads(tail)


def test_reassign_generate_proposes_a_plan_that_executes_and_kafkas_tool_reads_the_same_assignment(
        cluster: BrokerCluster, tmp_path: Path) -> None:
    topic, bootstrap = "to-spread", cluster.broker_bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 4, 2)], request_timeout=60).values():
        future.result(timeout=TIMEOUT_S)

    def assignment() -> dict[int, list[int]] | None:
        partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
        if len(partitions) != 4 or any(p.leader < 0 or sorted(p.isrs) != sorted(p.replicas) for p in partitions.values()):
            return None
        return {index: list(p.replicas) for index, p in partitions.items()}
    current = wait_for(assignment, timeout_s=TIMEOUT_S, what=f"{topic} to have its leaders and full ISRs", interval_s=0.5)
    moving = tmp_path / "topics.json"
    moving.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))
    flags = ("--bootstrap-server", bootstrap, "--generate", "--topics-to-move-json-file", str(moving),
             "--broker-list", "101,102")
    ours_current, proposal = _two_documents(kraft("reassign-partitions", *flags), "Current partition replica assignment",
                                            "Proposed partition reassignment configuration")
    assert ours_current == {"version": 1, "partitions": [
        {"topic": topic, "partition": index, "replicas": current[index], "log_dirs": ["any", "any"]}
        for index in range(4)]}
    assert proposal["version"] == 1
    parts = proposal["partitions"]
    assert isinstance(parts, list)
    assert [(p["topic"], p["partition"], p["log_dirs"]) for p in parts] == [(topic, i, ["any", "any"]) for i in range(4)]
    assert all(sorted(p["replicas"]) == [101, 102] for p in parts), parts
    assert {p["replicas"][0] for p in parts} == {101, 102}  # striped: the leaders spread over the brokers given
    if has_jars:
        # Kafka 4.1's tool reads the same assignment from our brokers and proposes the same shape.
        theirs_current, theirs = _two_documents(
            kafka("org.apache.kafka.tools.reassign.ReassignPartitionsCommand", *flags),
            "Current partition replica assignment", "Proposed partition reassignment configuration")
        assert theirs_current == ours_current
        assert [(p["topic"], p["partition"], sorted(p["replicas"]), p["log_dirs"]) for p in theirs["partitions"]] == [
            (topic, i, [101, 102], ["any", "any"]) for i in range(4)]

    # The proposal is a plan the tool executes as it stands; --verify then reports every partition done.
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(proposal))
    out = kraft("reassign-partitions", "--bootstrap-server", bootstrap, "--execute", "--reassignment-json-file", str(plan))
    assert f"Successfully started partition reassignments for {','.join(f'{topic}-{i}' for i in range(4))}" in out

    def verified() -> str | None:
        out = kraft("reassign-partitions", "--bootstrap-server", bootstrap, "--verify", "--reassignment-json-file",
                    str(plan))
        return out if "is still in progress" not in out else None
    out = wait_for(verified, timeout_s=TIMEOUT_S, what="the generated plan to complete", interval_s=1)
    assert out.splitlines()[:5] == ["Status of partition reassignment:", *(
        f"Reassignment of partition {topic}-{i} is completed." for i in range(4))]
    proposed = {p["partition"]: p["replicas"] for p in parts}
    wait_for(lambda: assignment() == proposed, timeout_s=TIMEOUT_S, what="the brokers' metadata to show the proposal",
             interval_s=0.5)


def test_reassign_list_and_cancel_through_the_controllers_with_a_command_config(
        cluster: BrokerCluster, tmp_path: Path) -> None:
    """A move held back by a 5 kB/s throttle (about 3 MB to copy in batches of 16 KiB, fetched at
    most 16 KiB at a time: ten minutes) is listed and cancelled with `--bootstrap-controller`, the
    tools' admin settings read from `--command-config`."""
    topic, bootstrap, controllers = "held-back", cluster.broker_bootstrap(), cluster.bootstrap_servers()
    _topic(cluster, topic, partitions=1, replicas=[101, 102])
    _send(cluster, topic, [(0, 0, b"h" * 1000) for _ in range(3000)], batch_bytes=16384)
    admin_config = tmp_path / "admin.properties"
    admin_config.write_text("security.protocol=PLAINTEXT\nrequest.timeout.ms=30000\nclient.id=runbook\n")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [102, 103]}]}))
    out = kraft("reassign-partitions", "--bootstrap-server", bootstrap, "--command-config", str(admin_config),
                "--execute", "--reassignment-json-file", str(plan), "--throttle", "5000")
    try:
        assert f"Successfully started partition reassignment for {topic}-0" in out
        listed = kraft("reassign-partitions", "--bootstrap-controller", controllers, "--command-config",
                       str(admin_config), "--list")
        assert listed == (f"Current partition reassignments:\n{topic}-0: replicas: 102,103,101. adding: 103. "
                          "removing: 101.\n")
        refused = quorum_processes.kraft("reassign-partitions", "--bootstrap-controller", controllers, "--verify",
                                         "--reassignment-json-file", str(plan), timeout_s=TIMEOUT_S)
        assert refused.returncode == 1
        assert "Option \"[bootstrap-controller]\" can't be used with action \"[verify]\"" in refused.stderr
        cancelled = kraft("reassign-partitions", "--bootstrap-controller", controllers, "--command-config",
                          str(admin_config), "--cancel", "--reassignment-json-file", str(plan))
    finally:
        # Whatever happened above, no reassignment is left running for the module's other tests.
        kraft("reassign-partitions", "--bootstrap-server", bootstrap, "--cancel", "--reassignment-json-file", str(plan))
    assert cancelled == (f"Successfully cancelled partition reassignment for: {topic}-0\n"
                         "None of the specified partition moves are active."
                         "Clearing broker-level throttles on brokers 101,102,103\n"
                         f"Clearing topic-level throttles on topic {topic}\n")
    assert kraft("reassign-partitions", "--bootstrap-controller", controllers, "--list") == \
        "No partition reassignments found.\n"
    cluster.wait_isr(topic, 0, {101, 102}, timeout_s=TIMEOUT_S)


def test_reassign_disallowing_a_replication_factor_change_moves_only_what_keeps_it(
        cluster: BrokerCluster, tmp_path: Path) -> None:
    """`--execute --disallow-replication-factor-change` (KIP-860): the controller refuses a move
    that changes a partition's replica count and starts the others; Kafka 4.1's tool prints the
    same refusal for the same plan."""
    topic, bootstrap = "keep-factor", cluster.broker_bootstrap()
    _topic(cluster, topic, partitions=1, replicas=[101, 102])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, 2, replica_assignment=[[101, 102]])],
                                          request_timeout=60).values():
        future.result(timeout=TIMEOUT_S)
    cluster.wait_isr(topic, 1, {101, 102})
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [101, 102, 103]},  # a third replica: refused
        {"topic": topic, "partition": 1, "replicas": [102, 101]}]}))  # the same two, reordered
    flags = ("--bootstrap-server", bootstrap, "--execute", "--reassignment-json-file", str(plan),
             "--disallow-replication-factor-change")
    refused = kraft_tool("reassign-partitions", *flags)
    assert refused.returncode == 1
    assert refused.stdout.endswith(f"Error reassigning partition(s):\n{topic}-0: The replication factor is changed "
                                   "from 2 to 3\n"), refused.stdout

    def replicas() -> dict[int, list[int]]:
        partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
        return {index: list(p.replicas) for index, p in partitions.items()}
    wait_for(lambda: replicas() == {0: [101, 102], 1: [102, 101]}, timeout_s=TIMEOUT_S, interval_s=0.5,
             what="the reordered partition moved and the other left alone")
    if has_jars:
        theirs = kafka_tool("org.apache.kafka.tools.reassign.ReassignPartitionsCommand", *flags, timeout_s=TIMEOUT_S)
        assert (theirs.returncode, theirs.stdout) == (1, kraft_tool("reassign-partitions", *flags).stdout)
    allowed = kraft("reassign-partitions", *flags[:-1])
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1" in allowed
    wait_for(lambda: replicas() == {0: [101, 102, 103], 1: [102, 101]}, timeout_s=TIMEOUT_S, interval_s=0.5,
             what="the third replica added without the flag")
