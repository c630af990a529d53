"""The pipeline on the metadata logs Apache Kafka 4.1's own nodes wrote: three combined (broker and
controller) Kafka nodes of a dynamic quorum, formatted at metadata.version 4.0-IV3; a topic created
with a chosen assignment, the node that leads the quorum and partition 0 killed with SIGKILL (a new
controller elected, its broker fenced, ISRs shrink, partition 0's leader moves) and restarted (a
new incarnation registers, is unfenced, ISRs expand, and Kafka's own preferred-leader balancing
gives partition 0 back to it); then, as in our own cluster's scenario, metadata.version upgraded to
the highest Kafka's controllers support (`kraft features upgrade`), a partition moved with `kraft
reassign-partitions` (one replica added, one removed), and a controller-only Kafka node added to the
quorum and removed again (`kraft metadata-quorum add-controller` / `remove-controller`).

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
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from interop.kafka_jars import needs_jars
from kafka_cluster import NODES, WAIT_S, KafkaCluster
from pyspark.sql import SparkSession
from quorum_processes import directory_of, kraft_tool, voter_ids, wait_for
from replay import check_events_against_replay, check_history_against_replay, straight_replay

from kraft_engine.records import metadata_version
from kraft_pipeline.job import TABLES, run

pytestmark = [pytest.mark.kafka_jars, pytest.mark.process, pytest.mark.timeout(2400), needs_jars]

TOPIC = "kafka-pipeline-demo"
MOVING = "kafka-pipeline-moved"  # its one partition is reassigned
# The level Kafka's StorageTool formats at: below Kafka 4.1's highest, and a dynamic quorum
# (kraft.version 1) needs 3.9-IV0 or later.
FORMATTED = "4.0-IV3"
NEW_CONTROLLER = 4  # a controller-only node, added to the quorum and removed again


@dataclasses.dataclass
class Run:
    root: Path
    cluster_id: str
    killed: int  # led the quorum and partition 0 when it was killed
    others: list[int]
    marks: dict[str, int]
    upgraded: str  # the metadata.version it was upgraded to


def metadata_dir(root: Path, node_id: int) -> Path:
    return root / f"kafka-{node_id}" / "data" / "__cluster_metadata-0"


@pytest.fixture(scope="module")
def kafka_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = Path(tmp_path_factory.mktemp("kafka-cluster"))
    cluster = KafkaCluster(root=root)
    marks: dict[str, int] = {}
    try:
        cluster.format(release_version=FORMATTED)
        for node_id in NODES:
            cluster.start(node_id)
        killed = cluster.quorum_leader()
        others = [n for n in NODES if n != killed]
        # partition 0 prefers the node to be killed, partition 1 has it last
        assignment = f"{killed}:{others[0]}:{others[1]},{others[0]}:{others[1]}:{killed}"

        marks["before_create"] = cluster.leader_hwm()
        create_topic(cluster, TOPIC, assignment)
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

        upgraded = highest_metadata_version(cluster)
        marks["before_upgrade"] = cluster.leader_hwm()
        # answered once committed; each attempt waits 10 s, and a loaded machine's JVMs can take
        # longer (a retry after the upgrade committed is answered as done: the level is reached)
        kraft_tool("features", "--bootstrap-controller", cluster.controllers(), "--timeout-ms", str(WAIT_S * 1000),
                   "upgrade", "--metadata", upgraded, check=True)
        marks["after_upgrade"] = cluster.leader_hwm()

        create_topic(cluster, MOVING, f"{others[0]}:{others[1]}")
        cluster.wait_partitions(MOVING, {0: (others[0], {others[0], others[1]})}, what=f"{MOVING} in sync")
        marks["before_reassign"] = cluster.leader_hwm()
        reassign(cluster, root=root, target=[others[1], killed])
        # the target's first replica leads once the removed one (the old leader) is gone
        cluster.wait_partitions(MOVING, {0: (others[1], {others[1], killed})}, what=f"{MOVING} on its new replicas")
        marks["after_reassign"] = cluster.leader_hwm()

        marks["before_add_controller"] = cluster.leader_hwm()
        add_and_remove_controller(cluster, marks)
    finally:
        cluster.stop_all()
    yield Run(root=root, cluster_id=cluster.cluster_id, killed=killed, others=others, marks=marks, upgraded=upgraded)


def create_topic(cluster: KafkaCluster, topic: str, assignment: str) -> None:
    def created() -> bool:
        # refused until all three brokers registered; an attempt whose answer was lost under
        # load may have created it, which the next attempt hears as "already exists"
        answer = kraft_tool("topics", "--bootstrap-server", cluster.brokers(), "--create", "--topic", topic,
                            "--replica-assignment", assignment)
        assert answer.returncode == 0 or "already exists" in answer.stdout + answer.stderr, (
            answer.stdout + answer.stderr)
        return True

    wait_for(created, timeout_s=WAIT_S, interval_s=2, what=f"Kafka to create {topic}")


def highest_metadata_version(cluster: KafkaCluster) -> str:
    """The highest metadata.version Kafka's controllers support, as `kafka-features describe` shows it."""
    answer = kraft_tool("features", "--bootstrap-controller", cluster.controllers(), "describe", check=True).stdout
    found = re.search(r"Feature: metadata\.version\tSupportedMinVersion: \S+\tSupportedMaxVersion: (\S+)", answer)
    assert found is not None, answer
    assert metadata_version.from_version_string(found[1]) > metadata_version.from_version_string(FORMATTED), answer
    return found[1]


def reassign(cluster: KafkaCluster, *, root: Path, target: list[int]) -> None:
    """MOVING's partition 0 onto `target` with `kafka-reassign-partitions --execute`, waited for with `--verify`."""
    plan = root / "reassignment.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": MOVING, "partition": 0, "replicas": target, "log_dirs": ["any"] * len(target)}]}))
    command = ("reassign-partitions", "--bootstrap-server", cluster.brokers(), "--reassignment-json-file", str(plan))
    kraft_tool(*command, "--execute", check=True)

    def reassigned() -> bool:
        # Kafka's verify line; a timeout reports the tool's last answer
        answer = kraft_tool(*command, "--verify", check=True).stdout
        assert f"Reassignment of partition {MOVING}-0 is completed." in answer, answer
        return True

    wait_for(reassigned, timeout_s=WAIT_S, interval_s=1, what="the reassignment to finish")


def add_and_remove_controller(cluster: KafkaCluster, marks: dict[str, int]) -> None:
    """A controller-only node joins as an observer, is added to the voters once caught up, and removed."""
    voters = list(NODES)
    node = cluster.add_controller_node(NEW_CONTROLLER)
    cluster.start(NEW_CONTROLLER)

    def status() -> dict[str, Any]:
        answer = kraft_tool("metadata-quorum", "--bootstrap-controller", cluster.controllers(voters), "--output",
                            "json", "describe", "--status", check=True)
        return dict(json.loads(answer.stdout))

    def caught_up() -> bool:
        answer = kraft_tool("metadata-quorum", "--bootstrap-controller", cluster.controllers(voters), "--output",
                            "json", "describe", "--replication", check=True)
        return any(r["nodeId"] == NEW_CONTROLLER and r["status"] == "Observer" and r["lag"] == 0
                   for r in json.loads(answer.stdout))

    wait_for(caught_up, timeout_s=WAIT_S, interval_s=1, what=f"controller {NEW_CONTROLLER} to catch up as an observer")

    def becomes(wanted: list[int], *command: str) -> Callable[[], bool]:
        def attempt() -> bool:
            if voter_ids(status()) == wanted:
                return True
            # Kafka's leader refuses (REQUEST_TIMED_OUT) while the new voter is not caught up at
            # that moment, or the previous voter change is not yet committed in its epoch; the
            # next round first sees whether an attempt whose answer was lost got through
            answer = kraft_tool("metadata-quorum", "--bootstrap-controller", cluster.controllers(voters), *command)
            assert answer.returncode == 0, answer.stdout + answer.stderr
            return voter_ids(status()) == wanted

        return attempt

    wait_for(becomes([*voters, NEW_CONTROLLER], "add-controller", "--config", str(node.config_path)),
             timeout_s=WAIT_S, interval_s=2, what=f"controller {NEW_CONTROLLER} to be a voter")
    marks["after_add_controller"] = cluster.leader_hwm()
    directory = directory_of(status(), NEW_CONTROLLER)
    wait_for(becomes(voters, "remove-controller", "--controller-id", str(NEW_CONTROLLER),
                     "--controller-directory-id", directory),
             timeout_s=WAIT_S, interval_s=2, what=f"controller {NEW_CONTROLLER} to be removed")
    marks["after_remove_controller"] = cluster.leader_hwm()


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
    assert subjects == {f"node {n}" for n in (*NODES, NEW_CONTROLLER)}


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

    # Kafka's bootstrap: metadata.version and the quorum's voters (until the fourth joins)
    assert [e for e in events if e["event"] == "feature_level_changed" and e["name"] == "metadata.version"]
    assert all(sorted(e["voters"]) == list(NODES) for e in events
               if e["event"] == "controller_elected" and e["offset"] < marks["before_add_controller"])


def test_kafkas_upgrade_reassignment_and_voter_changes_are_found_between_their_marks(
    kafka_run: Run, kafka_tables: Output
) -> None:
    events = kafka_tables.tables["events"]
    marks, killed, others = kafka_run.marks, kafka_run.killed, kafka_run.others

    def between(kind: str, low: str, high: str) -> list[dict[str, Any]]:
        return sorted((e for e in events if e["event"] == kind and marks[low] <= e["offset"] < marks[high]),
                      key=lambda e: e["offset"])

    # metadata.version: the level Kafka's StorageTool formatted at first, then one change to the upgrade's
    levels = [e["value"] for e in sorted(events, key=lambda e: e["offset"])
              if e["event"] == "feature_level_changed" and e["name"] == "metadata.version"]
    assert levels[0] == str(metadata_version.from_version_string(FORMATTED).feature_level), levels
    upgrade = [e["value"] for e in between("feature_level_changed", "before_upgrade", "after_upgrade")
               if e["name"] == "metadata.version"]
    assert upgrade == [str(metadata_version.from_version_string(kafka_run.upgraded).feature_level)], upgrade

    # the reassignment: others[1] kept, the killed node added, others[0] removed
    moving = [e for e in events if e.get("topic") == MOVING]
    (started,) = [e for e in between("reassignment_started", "before_reassign", "after_reassign") if e in moving]
    assert started["partition"] == 0 and set(started["replicas"]) == {*others, killed}
    (finished,) = [e for e in between("reassignment_finished", "before_reassign", "after_reassign") if e in moving]
    assert finished["partition"] == 0 and sorted(finished["replicas"]) == sorted([others[1], killed])
    assert finished["offset"] > started["offset"]
    assert [e for e in events if e["event"] == "reassignment_cancelled"] == []

    # the voter change: the controller-only node added, then removed
    added = between("voters_changed", "before_add_controller", "after_add_controller")
    assert [sorted(e["voters"]) for e in added] == [[*NODES, NEW_CONTROLLER]]
    removed = between("voters_changed", "after_add_controller", "after_remove_controller")
    assert [sorted(e["voters"]) for e in removed] == [list(NODES)]

    # under-replicated while it moved (three replicas, two in sync), and not after
    urp = sorted(kafka_tables.tables["urp_history"], key=lambda r: r["offset"])
    during = [r for r in urp if started["offset"] <= r["offset"] < finished["offset"]]
    assert during and max(r["under_replicated"] for r in during) == 1
    assert [r for r in urp if r["offset"] <= finished["offset"]][-1]["under_replicated"] == 0


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
