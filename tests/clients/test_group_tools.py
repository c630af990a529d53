"""The group tools on a group of real consumers: `kraft consumer-groups` (--list, --describe with
--offsets, --members and --state, --reset-offsets, --delete) and `kraft console-consumer --group`,
and, with Apache Kafka 4.1's jars, Kafka's own kafka-consumer-groups --describe and
kafka-console-consumer --group against our brokers (skipped cleanly without the jars). The two
tools' describe outputs are compared line for line: the same state must print the same table.

Our tools run through the console script's `main` in this process (`kraft_tool`): an interpreter
start costs about half a second of CPU, which a loaded two-core machine stretches to tens of
seconds, and these tests run a tool a dozen times each (one `--list` still starts the console
script as a user does)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import quorum_processes
from broker_processes import BrokerCluster
from group_members import TIMEOUT_S, committed_and_ends, create_topic, produce
from group_workload import PARTITIONS
from quorum_processes import kraft_tool, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))
from kafka_jars import CLASSPATH, kafka_tool, needs_jars

pytestmark = [pytest.mark.process]

RECORDS = 40


def kraft(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return kraft_tool(*args, check=check)


def kafka(main_class: str, *args: str) -> subprocess.CompletedProcess[str]:
    return kafka_tool(main_class, *args, timeout_s=TIMEOUT_S)


def _table(output: str) -> tuple[list[str], list[str]]:
    """The header lines (a blank line, the column names) exactly, and the rows as a sorted list:
    Kafka's tool prints a member's partitions in the iteration order of a Java HashSet, ours in
    partition order; every character of every line must still match."""
    lines = output.split("\n")
    return lines[:2], sorted(lines[2:])


class StableConsumer:
    """A confluent-kafka consumer of the group that has read and committed `upto` records per
    partition, and keeps polling (heartbeating) until closed."""

    def __init__(self, bootstrap: str, topic: str, group: str, *, instance: str | None = None) -> None:
        from confluent_kafka import Consumer

        config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": "tool-test-consumer",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 30_000,
                  "partition.assignment.strategy": "range"}
        if instance is not None:
            config["group.instance.id"] = instance
        self._consumer = Consumer(config)
        self._consumer.subscribe([topic])

    def read(self, count: int) -> None:
        got = 0
        while got < count:
            message = self._consumer.poll(30)
            assert message is not None, "no record within 30 s"
            if message.error() is None:
                got += 1
        self._consumer.commit(asynchronous=False)

    def poll(self) -> None:
        self._consumer.poll(0.2)

    def close(self) -> None:
        self._consumer.close()


@pytest.fixture(scope="module")
def group_state(group_brokers: BrokerCluster) -> dict[str, str]:
    bootstrap = group_brokers.broker_bootstrap()
    topic, group = "tools-orders", "tools-group"
    create_topic(bootstrap, topic)
    for partition in range(PARTITIONS):
        group_brokers.wait_isr(topic, partition, set(group_brokers.brokers))
    produce("confluent-kafka", bootstrap, topic, range(RECORDS))
    return {"bootstrap": bootstrap, "topic": topic, "group": group}


def test_describe_list_reset_and_delete(group_state: dict[str, str]) -> None:
    bootstrap, topic, group = group_state["bootstrap"], group_state["topic"], group_state["group"]
    consumer = StableConsumer(bootstrap, topic, group)
    try:
        consumer.read(RECORDS - 4)  # commits offsets that leave a lag on some partitions
        listed_by_script = quorum_processes.kraft("consumer-groups", "--bootstrap-server", bootstrap, "--list",
                                                  timeout_s=TIMEOUT_S, check=True)
        assert group in listed_by_script.stdout.split()
        listed = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--list", "--state", "Stable").stdout
        assert listed.splitlines()[0].split() == ["GROUP", "STATE"]
        assert [group, "Stable"] in [line.split() for line in listed.splitlines()[1:]]

        described = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group).stdout
        lines = described.splitlines()
        assert lines[0] == "" and lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                                       "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        rows = [line.split() for line in lines[2:] if line]
        committed, ends = committed_and_ends(bootstrap, topic, group)
        assert sorted((int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows) == sorted(
            (p, committed[p], ends[p], ends[p] - committed[p]) for p in range(PARTITIONS))
        assert {r[6].startswith("tool-test-consumer-") and r[8] == "tool-test-consumer" for r in rows} == {True}

        members = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group,
                        "--members").stdout.splitlines()
        assert members[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        assert members[2].split()[-1] == str(PARTITIONS)
        state = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group,
                      "--state").stdout.splitlines()
        assert state[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        assert state[2].split()[0] == group and state[2].split()[-3:] == ["range", "Stable", "1"]

        # Kafka 4.1's tool reports these on standard output and exits 0 (only a refused command line exits 1).
        refused = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", group,
                        "--topic", topic, "--to-earliest", "--execute", check=False)
        assert refused.returncode == 0 and refused.stderr == ""
        assert refused.stdout == ("\nError: Assignments can only be reset if the group 'tools-group' is inactive, but "
                                  "the current state is Stable.\n\n" + f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} "
                                  f"{'NEW-OFFSET':<15}\n")
        not_empty = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--delete", "--group", group, check=False)
        assert not_empty.returncode == 0
        assert not_empty.stdout == ("\nError: Deletion of some consumer groups failed:\n* Group 'tools-group' could not "
                                    "be deleted due to: org.apache.kafka.common.errors.GroupNotEmptyException: The group "
                                    "is not empty.\n")
        assert committed_and_ends(bootstrap, topic, group)[0] == committed, "neither changed an offset"
    finally:
        consumer.close()

    wait_for(lambda: "Empty" in kraft("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group",
                                      group, "--state").stdout, timeout_s=TIMEOUT_S, what="the group to be Empty")
    empty = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in empty.stderr
    assert {line.split()[6] for line in empty.stdout.splitlines()[2:] if line} == {"-"}

    reset = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", group,
                  "--topic", f"{topic}:0,1", "--to-offset", "3", "--execute").stdout.splitlines()
    assert reset[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert [line.split() for line in reset[2:]] == [[group, topic, "0", "3"], [group, topic, "1", "3"]]
    committed, _ = committed_and_ends(bootstrap, topic, group)
    assert (committed[0], committed[1]) == (3, 3)
    shifted = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", group,
                    "--all-topics", "--shift-by", "-1", "--dry-run").stdout.splitlines()
    assert [line.split()[2:] for line in shifted[2:]][:2] == [["0", "2"], ["1", "2"]]
    assert committed_and_ends(bootstrap, topic, group)[0] == committed, "--dry-run changed nothing"

    deleted = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--delete", "--group", group).stdout
    assert deleted.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    gone = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, check=False)
    # As Kafka 4.1's tool (interop/test_kafka_describe_missing_group.py): on stdout, status 0.
    assert (gone.returncode, gone.stdout) == (0, "\nError: Executing consumer group command failed due to "
                                              "org.apache.kafka.common.errors.GroupIdNotFoundException: "
                                              f"Group {group} not found.\n")


@needs_jars
@pytest.mark.kafka_jars
@pytest.mark.timeout(900)  # several starts of Kafka's tool (a JVM start is half a minute under load)
def test_kafka_consumer_groups_describe_prints_what_ours_prints(group_state: dict[str, str]) -> None:
    bootstrap, topic = group_state["bootstrap"], group_state["topic"]
    group = "kafka-tool-group"
    consumer = StableConsumer(bootstrap, topic, group)
    try:
        consumer.read(RECORDS - 4)
        for flags in ((), ("--members",), ("--state",)):
            theirs = kafka("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                           bootstrap, "--describe", "--group", group, *flags)
            assert theirs.returncode == 0, theirs.stderr
            ours = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, *flags)
            assert _table(ours.stdout) == _table(theirs.stdout), (flags, ours.stdout, theirs.stdout)
            consumer.poll()
        # Several groups: all described before anything prints, printed in sorted order (Kafka's
        # TreeMap; asked here in the other order); one group that does not exist fails the whole
        # command, as Kafka's Admin fails it, on stdout with status 0.
        other = "another-tool-group"
        kraft("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", other, "--topic",
              topic, "--to-earliest", "--execute")
        printed = {}
        for groups, flags in (((group, other), ()), ((group, other), ("--members",)), ((group, other), ("--state",)),
                              ((group, "no-such-group"), ())):
            asked = [flag for g in groups for flag in ("--group", g)]
            theirs = kafka("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                           bootstrap, "--describe", *asked, *flags)
            ours = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--describe", *asked, *flags)
            assert (ours.returncode, theirs.returncode) == (0, 0), theirs.stderr
            assert _tables(ours.stdout) == _tables(theirs.stdout), (groups, flags, ours.stdout, theirs.stdout)
            printed[(groups[1], *flags)] = _tables(ours.stdout)
            consumer.poll()
        assert [rows[0].split()[0] for _, rows in printed[(other,)]] == [other, group]
        assert [rows[0].split()[0] for _, rows in printed[(other, "--state")]] == [other, group]
        assert printed[("no-such-group",)] == [(
            "Error: Executing consumer group command failed due to org.apache.kafka.common.errors."
            "GroupIdNotFoundException: Group no-such-group not found.", [])]
    finally:
        consumer.close()


def _tables(output: str) -> list[tuple[str, list[str]]]:
    """Each group's block (they are separated by a blank line): its first line, and its other
    lines as a sorted list (see `_table`)."""
    return [(lines[0], sorted(lines[1:])) for block in output.strip("\n").split("\n\n")
            for lines in (block.split("\n"),)]


def test_console_consumer_group_resumes_from_its_committed_offsets(group_state: dict[str, str]) -> None:
    bootstrap, topic = group_state["bootstrap"], group_state["topic"]
    group = "console-group"
    base = ["console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--group", group]
    first = kraft(*base, "--from-beginning", "--max-messages", "10")
    assert "Processed a total of 10 messages" in first.stderr
    second = kraft(*base, "--from-beginning", "--max-messages", str(RECORDS - 10), "--timeout-ms", "20000")
    assert f"Processed a total of {RECORDS - 10} messages" in second.stderr
    values = first.stdout.split() + second.stdout.split()
    assert sorted(values) == sorted(f"v-{i}" for i in range(RECORDS)), "each record once across the two runs"
    committed, ends = committed_and_ends(bootstrap, topic, group)
    assert committed == ends


@needs_jars
@pytest.mark.kafka_jars
def test_kafka_console_consumer_group_against_our_brokers(group_state: dict[str, str]) -> None:
    bootstrap, topic = group_state["bootstrap"], group_state["topic"]
    group = "kafka-console-group"
    result = kafka("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap, "--topic", topic,
                   "--group", group, "--from-beginning", "--max-messages", str(RECORDS))
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == sorted(f"v-{i}" for i in range(RECORDS))
    assert f"Processed a total of {RECORDS} messages" in result.stderr
    committed, ends = committed_and_ends(bootstrap, topic, group)
    assert committed == ends, "Kafka's consumer committed its positions to our coordinator on close"
    described = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
    assert {line.split()[5] for line in described.stdout.splitlines()[2:] if line} == {"0"}


def _lines(output: str) -> list[str]:
    """The lines of an `--export` run, sorted (Kafka prints partitions in a HashMap's order)."""
    assert output.endswith("\n\n"), output  # the records, each ending a line, then Kafka's println
    return sorted(output.removesuffix("\n").splitlines())


def _csv(output: str) -> list[str]:
    """The records of Kafka's `--export` CSV, sorted, without the notes printed before them."""
    return [line for line in _lines(output) if line and not line.startswith("Warn: ")]


@pytest.mark.timeout(900)  # several starts of Kafka's tool (a JVM start is half a minute under load)
def test_reset_offsets_by_time_to_current_and_through_an_exported_csv(
        group_state: dict[str, str], tmp_path: Path) -> None:
    bootstrap, topic = group_state["bootstrap"], group_state["topic"]
    group = "reset-scenarios"
    base = ("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", group)
    # A group that does not exist yet is inactive: its offsets can be set.
    kraft(*base, "--topic", topic, "--to-offset", "5", "--execute")
    committed, ends = committed_and_ends(bootstrap, topic, group)
    assert committed == {p: min(5, ends[p]) for p in range(PARTITIONS)}
    earliest = [f"{topic},{p},0" for p in range(PARTITIONS)]
    latest = [f"{topic},{p},{ends[p]}" for p in range(PARTITIONS)]
    current = [f"{topic},{p},{committed[p]}" for p in range(PARTITIONS)]
    cases = {
        # The records were written now: nothing is that late (the log end), everything is later.
        ("--to-datetime", "2100-01-01T00:00:00.000"): latest,
        ("--to-datetime", "2001-01-01T01:00:00.000+01:00"): earliest,
        ("--by-duration", "P3650D"): earliest,
        ("--to-current",): current,
    }
    for scenario, expected in cases.items():
        out = kraft(*base, "--topic", topic, *scenario, "--dry-run", "--export").stdout
        assert _csv(out) == sorted(expected), scenario
        if CLASSPATH is not None:
            theirs = kafka("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", *base[1:], "--topic", topic,
                           *scenario, "--dry-run", "--export")
            assert theirs.returncode == 0, theirs.stderr
            assert _lines(theirs.stdout) == _lines(out), scenario  # the notes too
    assert committed_and_ends(bootstrap, topic, group)[0] == committed, "--dry-run changed nothing"

    # The exported CSV is a plan --from-file executes (with a group column when several groups are named).
    plan = tmp_path / "plan.csv"
    plan.write_text("".join(f"{topic},{p},{p + 1}\n" for p in range(PARTITIONS)))
    done = kraft(*base, "--from-file", str(plan), "--execute").stdout.splitlines()
    assert [line.split() for line in done[2:]] == [[group, topic, str(p), str(p + 1)] for p in range(PARTITIONS)]
    assert committed_and_ends(bootstrap, topic, group)[0] == {p: p + 1 for p in range(PARTITIONS)}
    two = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", group, "--group",
                "reset-other", "--topic", f"{topic}:0", "--to-earliest", "--dry-run", "--export").stdout
    assert _csv(two) == sorted([f"{group},{topic},0,0", f"reset-other,{topic},0,0"])

    described = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--all-groups").stdout
    assert {(line.split()[0], line.split()[2], line.split()[3]) for line in described.splitlines()
            if line.startswith(group + " ")} == {(group, str(p), str(p + 1)) for p in range(PARTITIONS)}
    kraft("consumer-groups", "--bootstrap-server", bootstrap, "--delete", "--group", group)


def _status_table(*rows: tuple[str, str, str]) -> str:
    """Kafka's `--delete-offsets` table (TOPIC at least 15 wide, PARTITION 10, STATUS 15), newline-ended."""
    width = max([15, *(len(topic) for topic, _, _ in rows)])
    return "".join(f"\n{topic:<{width}} {partition:<10} {status:<15}"
                   for topic, partition, status in [("TOPIC", "PARTITION", "STATUS"), *rows]) + "\n"


@pytest.mark.timeout(900)  # several starts of Kafka's tool (a JVM start is half a minute under load)
def test_delete_offsets_refuses_a_subscribed_topic_and_deletes_the_rest(group_state: dict[str, str]) -> None:
    """`--delete-offsets`: OffsetDelete of one group's offsets, topic by topic (or partition by
    partition); a topic the group is subscribed to keeps its offsets (GROUP_SUBSCRIBED_TO_TOPIC),
    an unknown topic is a row of its own; Kafka 4.1's tool prints the same for the same state."""
    bootstrap, topic = group_state["bootstrap"], group_state["topic"]
    group, other = "offsets-deleting", "tools-other-topic"
    create_topic(bootstrap, other)
    kraft("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", group, "--topic", other,
          "--to-offset", "0", "--execute")
    consumer = StableConsumer(bootstrap, topic, group)
    base = ("consumer-groups", "--bootstrap-server", bootstrap, "--delete-offsets", "--group", group)
    subscribed = "Error: org.apache.kafka.common.errors.GroupSubscribedToTopicException: Deleting offsets of a topic " \
                 "is forbidden while the consumer group is actively subscribed to it."
    unknown = "Error: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does not host " \
              "this topic-partition."
    try:
        consumer.read(RECORDS - 4)
        assert committed_and_ends(bootstrap, other, group)[0] == dict.fromkeys(range(PARTITIONS), 0)
        flags = ("--topic", topic, "--topic", other, "--topic", "no-such-topic")
        out = kraft(*base, *flags)
        assert out.returncode == 0, out.stderr
        assert out.stdout == "\nError: Encountered some partition-level error, see the follow-up details.\n" + _status_table(
            ("no-such-topic", "-", unknown),
            *((topic, str(p), subscribed) for p in range(PARTITIONS)),
            *((other, str(p), "Successful") for p in range(PARTITIONS)))
        assert all(offset < 0 for offset in committed_and_ends(bootstrap, other, group)[0].values()), "deleted"
        assert all(offset >= 0 for offset in committed_and_ends(bootstrap, topic, group)[0].values()), "kept"
        if CLASSPATH is not None:  # the same state, now with nothing left to delete for the other topic
            theirs = kafka("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", *base[1:], *flags)
            assert (theirs.returncode, theirs.stdout) == (0, kraft(*base, *flags).stdout), theirs.stderr
        consumer.poll()
    finally:
        consumer.close()

    # Once the group is Empty, its offsets of a partition named go, the others stay.
    wait_for(lambda: "Empty" in kraft("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group",
                                      group, "--state").stdout, timeout_s=TIMEOUT_S, what="the group to be Empty")
    before = committed_and_ends(bootstrap, topic, group)[0]
    out = kraft(*base, "--topic", f"{topic}:0,2")
    assert out.stdout == f"Request succeeded for deleting offsets from group {group}.\n" + _status_table(
        (topic, "0", "Successful"), (topic, "2", "Successful"))
    after = committed_and_ends(bootstrap, topic, group)[0]
    assert after[0] < 0 and after[2] < 0 and {p: after[p] for p in (1, 3)} == {p: before[p] for p in (1, 3)}

    missing = ("consumer-groups", "--bootstrap-server", bootstrap, "--delete-offsets", "--group", "no-such-group",
               "--topic", f"{topic}:1")
    gone = "Error: org.apache.kafka.common.errors.GroupIdNotFoundException: The group id does not exist."
    out = kraft(*missing)
    assert (out.returncode, out.stdout) == (0, "\nError: The group id does not exist.\n" + _status_table(
        (topic, "1", gone)))
    if CLASSPATH is not None:
        theirs = kafka("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", *missing[1:])
        assert (theirs.returncode, theirs.stdout) == (0, out.stdout), theirs.stderr
    usage = kraft("consumer-groups", "--bootstrap-server", bootstrap, "--delete-offsets", "--group", group, check=False)
    assert usage.returncode == 1 and "Option [delete-offsets] takes the following options: [topic], [group]" in usage.stderr
