"""The pipeline on the metadata logs Apache Kafka 4.1's own nodes wrote: three combined (broker and
controller) Kafka nodes of a dynamic quorum, a topic created with a chosen assignment, the node that
leads the quorum and partition 0 killed with SIGKILL (a new controller elected, its broker fenced,
ISRs shrink, partition 0's leader moves) and restarted (a new incarnation registers, is unfenced,
ISRs expand, and Kafka's own preferred-leader balancing gives partition 0 back to it).

The pipeline reads the three nodes' directories as Kafka left them (topic partition directories
beside `__cluster_metadata-0`) and finds each of those events between the high watermarks Kafka's
quorum leader reported before and after each step; its tables agree with a straight replay of the
same log through the engine's MetadataLoader; the URP count rises to both partitions and returns
to 0; every DR check passes; the input is not changed. Needs the cached Kafka jars and a JDK (skips
cleanly without them).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from interop.kafka_jars import needs_jars
from kafka_cluster import NODES, WAIT_S, KafkaCluster
from pyspark.sql import SparkSession
from quorum_processes import kraft_tool, wait_for
from replay import check_events_against_replay, check_history_against_replay, straight_replay

from kraft_pipeline.job import TABLES, run

pytestmark = [pytest.mark.kafka_jars, pytest.mark.process, pytest.mark.timeout(2400), needs_jars]

TOPIC = "kafka-pipeline-demo"


@dataclasses.dataclass
class Run:
    root: Path
    cluster_id: str
    killed: int  # led the quorum and partition 0 when it was killed
    others: list[int]
    marks: dict[str, int]


def metadata_dir(root: Path, node_id: int) -> Path:
    return root / f"kafka-{node_id}" / "data" / "__cluster_metadata-0"


@pytest.fixture(scope="module")
def kafka_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = Path(tmp_path_factory.mktemp("kafka-cluster"))
    cluster = KafkaCluster(root=root)
    marks: dict[str, int] = {}
    try:
        cluster.format()
        for node_id in NODES:
            cluster.start(node_id)
        killed = cluster.quorum_leader()
        others = [n for n in NODES if n != killed]
        # partition 0 prefers the node to be killed, partition 1 has it last
        assignment = f"{killed}:{others[0]}:{others[1]},{others[0]}:{others[1]}:{killed}"

        marks["before_create"] = cluster.leader_hwm()

        def created() -> bool:
            # refused until all three brokers registered; an attempt whose answer was lost under
            # load may have created it, which the next attempt hears as "already exists"
            answer = kraft_tool("topics", "--bootstrap-server", cluster.brokers(), "--create", "--topic", TOPIC,
                                "--replica-assignment", assignment)
            assert answer.returncode == 0 or "already exists" in answer.stdout + answer.stderr, (
                answer.stdout + answer.stderr)
            return True

        wait_for(created, timeout_s=WAIT_S, interval_s=2, what=f"Kafka to create {TOPIC}")
        cluster.wait_partitions(TOPIC, {0: (killed, set(NODES)), 1: (others[0], set(NODES))},
                                what="both partitions led by their preferred replica with a full ISR")
        marks["after_create"] = cluster.leader_hwm()

        marks["before_kill"] = cluster.leader_hwm()
        cluster.kill(killed)
        # fenced after its session runs out: out of both ISRs, partition 0 led by another
        cluster.wait_partitions(TOPIC, {0: (others[0], set(others)), 1: (others[0], set(others))},
                                what=f"node {killed} out of both ISRs and partition 0 led by {others[0]}")
        cluster.quorum_leader()  # one of the others leads the quorum now
        marks["after_fence"] = cluster.leader_hwm()

        marks["before_restart"] = cluster.leader_hwm()
        cluster.start(killed)
        cluster.wait_partitions(TOPIC, {0: (killed, set(NODES)), 1: (others[0], set(NODES))},
                                what=f"node {killed} back in both ISRs and leading partition 0 again")
        marks["after_restart"] = cluster.leader_hwm()
    finally:
        cluster.stop_all()
    yield Run(root=root, cluster_id=cluster.cluster_id, killed=killed, others=others, marks=marks)


def tree_digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@dataclasses.dataclass
class Output:
    tables: dict[str, list[dict[str, Any]]]
    input_unchanged: bool


@pytest.fixture(scope="module")
def kafka_tables(kafka_run: Run, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Output:
    output = Path(tmp_path_factory.mktemp("kafka-pipeline-output"))
    before = tree_digest(kafka_run.root)
    tables = run(inputs=[str(kafka_run.root)], output=str(output), spark=spark)
    collected = {name: [row.asDict(recursive=True) for row in tables.table(name).collect()] for name in TABLES}
    return Output(tables=collected, input_unchanged=tree_digest(kafka_run.root) == before)


def test_kafkas_node_directories_are_read_as_they_are_and_left_unchanged(kafka_run: Run, kafka_tables: Output) -> None:
    assert kafka_tables.input_unchanged, "the pipeline changed Kafka's directories"
    assert kafka_tables.tables["problems"] == []
    # Kafka's layout: the topic's partition directories sit beside the metadata log; only the
    # metadata log is read, every node's, under the cluster id Kafka's StorageTool wrote
    assert any((kafka_run.root / "kafka-1" / "data").glob(f"{TOPIC}-*"))
    events = kafka_tables.tables["events"]
    assert {e["cluster_id"] for e in events} == {kafka_run.cluster_id}
    subjects = {c["subject"] for c in kafka_tables.tables["dr_checks"] if c["check"] == "segment_continuity"}
    assert subjects == {f"node {n}" for n in NODES}


def test_kafkas_events_are_found_between_the_marks(kafka_run: Run, kafka_tables: Output) -> None:
    events = kafka_tables.tables["events"]
    marks, killed, others = kafka_run.marks, kafka_run.killed, kafka_run.others

    def between(kind: str, low: str, high: str, **match: Any) -> list[dict[str, Any]]:
        return sorted((e for e in events if e["event"] == kind and marks[low] <= e["offset"] < marks[high]
                       and all(e[k] == v for k, v in match.items())), key=lambda e: e["offset"])

    assert len(between("topic_created", "before_create", "after_create", topic=TOPIC)) == 1
    created = {e["partition"]: e["replicas"] for e in between("partition_created", "before_create", "after_create")}
    assert created == {0: [killed, *others], 1: [*others, killed]}

    # the kill: another node elected, the killed broker fenced, both ISRs shrink, partition 0 moves
    elected = between("controller_elected", "before_kill", "after_fence")
    assert elected and all(e["node_id"] != killed for e in elected)
    assert max(e["leader_epoch"] for e in elected) > max(
        e["leader_epoch"] for e in events if e["event"] == "controller_elected" and e["offset"] < marks["before_kill"])
    assert between("broker_fenced", "before_kill", "after_fence", node_id=killed)
    shrunk = between("isr_shrunk", "before_kill", "after_fence", topic=TOPIC)
    assert {e["partition"] for e in shrunk} == {0, 1}
    assert all(killed in e["previous_isr"] and killed not in e["isr"] for e in shrunk)
    moved = between("leader_changed", "before_kill", "after_fence", topic=TOPIC, partition=0)
    assert moved and moved[0]["previous_leader"] == killed and moved[-1]["leader"] == others[0]

    # the restart: a new incarnation, unfenced, both ISRs expand, partition 0 given back
    first = {e["incarnation_id"] for e in events
             if e["event"] == "broker_registered" and e["node_id"] == killed and e["offset"] < marks["before_kill"]}
    again = {e["incarnation_id"] for e in between("broker_registered", "before_restart", "after_restart",
                                                  node_id=killed)}
    assert first and len(again) == 1 and again.isdisjoint(first), "the restart registers one new incarnation"
    assert between("broker_unfenced", "before_restart", "after_restart", node_id=killed)
    expanded = between("isr_expanded", "before_restart", "after_restart", topic=TOPIC)
    assert {e["partition"] for e in expanded} == {0, 1} and all(killed in e["isr"] for e in expanded)
    back = between("leader_changed", "before_restart", "after_restart", topic=TOPIC, partition=0)
    assert back and back[-1]["leader"] == killed

    # Kafka's bootstrap: metadata.version and the quorum's voters
    assert [e for e in events if e["event"] == "feature_level_changed" and e["name"] == "metadata.version"]
    assert all(sorted(e["voters"]) == list(NODES) for e in events if e["event"] == "controller_elected")


def test_kafkas_log_gives_the_tables_a_straight_replay_gives(kafka_run: Run, kafka_tables: Output) -> None:
    replay = straight_replay(metadata_dir(kafka_run.root, kafka_run.others[0]))
    check_events_against_replay(kafka_tables.tables["events"], replay)
    check_history_against_replay(kafka_tables.tables["partition_history"], replay)


def test_kafkas_urp_rises_after_the_kill_and_returns_to_zero(kafka_run: Run, kafka_tables: Output) -> None:
    urp = sorted(kafka_tables.tables["urp_history"], key=lambda r: r["offset"])
    marks = kafka_run.marks
    during = [r for r in urp if marks["before_kill"] <= r["offset"] < marks["after_fence"]]
    assert max(r["under_replicated"] for r in during) == 2
    at_end = [r for r in urp if r["offset"] < marks["after_restart"]][-1]
    assert at_end["under_replicated"] == 0 and at_end["offline"] == 0


def test_kafkas_logs_pass_every_dr_check(kafka_tables: Output) -> None:
    checks = kafka_tables.tables["dr_checks"]
    assert [c for c in checks if c["status"] != "pass"] == []
    names = {c["check"] for c in checks}
    assert {"log_agreement", "segment_continuity", "rebuildable_from", "snapshot_age", "voter_set_history"} <= names
