"""The pipeline on logs written by a real cluster: three controllers and three brokers as processes,
a topic created, a broker killed with SIGKILL (fenced, ISR shrinks) and restarted (registers a new
incarnation, unfenced, ISR expands), metadata.version upgraded with `kraft features upgrade`
(the cluster is formatted one level below the latest), a fourth broker started and a partition
moved onto it with `kraft reassign-partitions`, and a fourth controller added to the quorum and
removed again with `kraft metadata-quorum add-controller` / `remove-controller`. `kraftwerk
pipeline run` then finds each of those events at the offsets the live cluster's high watermark
brackets (read before and after each action), its tables agree with a straight replay of the same
log through the engine's MetadataLoader, and the URP count rises and returns to 0.

The same disks, copied with planted faults (each copy a cluster of its own, so one run checks
them all), fail the DR check that should catch each: a flipped byte in a committed batch on one
node, a node whose batch diverges with a valid CRC, a missing segment, and a snapshot that
disagrees with its log; the untouched copy passes every check.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_processes import BrokerCluster, start_cluster
from pyspark.sql import SparkSession
from quorum_processes import describe_status, directory_of, kraft_tool, metadata_quorum, voter_ids, wait_for
from replay import Replay, check_events_against_replay, check_history_against_replay, straight_replay

from kraft_engine.kafka_uuid import random_uuid, to_kafka_str
from kraft_engine.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    TopicRecord,
    build_batch,
    encode_metadata_record,
    metadata_version,
)
from kraft_engine.storage.log_file_reader import ScannedBatch, read_log_file, scan_batches
from kraft_engine.storage.meta_properties import read_meta_properties, write_meta_properties
from kraft_engine.storage.snapshots import SnapshotId, SnapshotWriter
from kraft_operator.cli import main as kraftwerk_main
from kraft_pipeline.job import TABLES

# Cluster runs and Spark jobs on a loaded 2-core machine take minutes, not the default 300 s.
pytestmark = [pytest.mark.process, pytest.mark.timeout(2400)]

TOPIC = "pipeline-demo"
PARTITIONS = 2
KILLED = 102
CONTROLLERS = (1, 2, 3)
BROKERS = (101, 102, 103)
NEW_BROKER = 104  # started for the reassignment
NEW_CONTROLLER = 4  # added to the quorum, then removed
ALL_NODES = (*CONTROLLERS, NEW_CONTROLLER, *BROKERS, NEW_BROKER)
UPGRADED = metadata_version.LATEST_PRODUCTION
FORMATTED = metadata_version.METADATA_VERSIONS[metadata_version.METADATA_VERSIONS.index(UPGRADED) - 1]
MOVED = 0  # the partition reassigned from KILLED to NEW_BROKER


def leader_hwm(cluster: BrokerCluster) -> int:
    """The high watermark the quorum's leader reports (every offset below it is committed)."""

    def found() -> int | None:
        for node_id in CONTROLLERS:
            status = cluster.status(node_id)
            if status is not None and status["role"] == "Leader" and status["high_watermark"] >= 0:
                return int(status["high_watermark"])
        return None

    return wait_for(found, timeout_s=90, what="a controller leader's high watermark")


def partition_dir(root: Path, node_id: int) -> Path:
    kind = "controller" if node_id < 100 else "broker"
    return root / f"{kind}-{node_id}" / "metadata" / "__cluster_metadata-0"


def fenced(broker_id: int, after: int) -> Any:
    def match(record: object) -> bool:
        return (isinstance(record, FenceBrokerRecord) and record.id == broker_id) or (
            isinstance(record, BrokerRegistrationChangeRecord) and record.broker_id == broker_id and record.fenced == 1
        )

    return lambda cluster: next(
        (o for o, (_, r) in sorted(straight_replay(partition_dir(cluster.root, 1)).records.items())
         if o >= after and match(r)),
        None,
    )


@dataclasses.dataclass
class Run:
    root: Path
    cluster_id: str
    marks: dict[str, int]


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = Path(tmp_path_factory.mktemp("pipeline-cluster"))
    cluster = BrokerCluster(root=root)
    marks: dict[str, int] = {}
    try:
        start_cluster(cluster, controllers=len(CONTROLLERS), brokers=len(BROKERS), release=FORMATTED)
        marks["before_create"] = leader_hwm(cluster)
        kraft_tool("topics", "--bootstrap-controller", cluster.bootstrap_servers(), "--create", "--topic", TOPIC,
                   "--partitions", str(PARTITIONS), "--replication-factor", "3", check=True)
        for partition in range(PARTITIONS):
            cluster.wait_isr(TOPIC, partition, set(BROKERS), timeout_s=120)
        marks["after_create"] = leader_hwm(cluster)

        marks["before_kill"] = leader_hwm(cluster)
        cluster.kill(KILLED)
        # Fenced once its session (6 s) runs out; seen in the controller's own log file.
        wait_for(lambda: fenced(KILLED, marks["before_kill"])(cluster), timeout_s=120,
                 what=f"broker {KILLED}'s fencing in the metadata log")
        for partition in range(PARTITIONS):
            cluster.wait_isr(TOPIC, partition, set(BROKERS) - {KILLED}, timeout_s=120)
        marks["after_fence"] = leader_hwm(cluster)

        marks["before_restart"] = leader_hwm(cluster)
        cluster.start(KILLED)
        cluster.wait_ready([KILLED], timeout_s=120)
        for partition in range(PARTITIONS):
            cluster.wait_isr(TOPIC, partition, set(BROKERS), timeout_s=120)
        marks["after_restart"] = leader_hwm(cluster)

        marks["before_upgrade"] = leader_hwm(cluster)
        kraft_tool("features", "--bootstrap-controller", cluster.bootstrap_servers(), "upgrade",
                   "--metadata", UPGRADED.version, check=True)  # answered once committed
        marks["after_upgrade"] = leader_hwm(cluster)

        cluster.add_broker(NEW_BROKER)
        cluster.format(NEW_BROKER)
        cluster.start(NEW_BROKER)
        cluster.wait_ready([NEW_BROKER], timeout_s=120)
        marks["before_reassign"] = leader_hwm(cluster)
        target = sorted((set(BROKERS) - {KILLED}) | {NEW_BROKER})
        plan = root / "reassignment.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": MOVED, "replicas": target, "log_dirs": ["any"] * len(target)}]}))
        reassign = ("reassign-partitions", "--bootstrap-server", cluster.broker_bootstrap(),
                    "--reassignment-json-file", str(plan))
        kraft_tool(*reassign, "--execute", check=True)

        def reassigned() -> bool:
            # Kafka's verify line; a timeout reports the tool's last answer
            answer = kraft_tool(*reassign, "--verify", check=True).stdout
            assert f"Reassignment of partition {TOPIC}-{MOVED} is completed." in answer, answer
            return True

        wait_for(reassigned, timeout_s=120, interval_s=1, what="the reassignment to finish")
        cluster.wait_isr(TOPIC, MOVED, set(target), timeout_s=120)
        marks["after_reassign"] = leader_hwm(cluster)

        marks["before_add_controller"] = leader_hwm(cluster)
        cluster.add_node(NEW_CONTROLLER)
        cluster.format(NEW_CONTROLLER, "--no-initial-controllers")
        cluster.start(NEW_CONTROLLER)
        voters = list(CONTROLLERS)

        def observer_caught_up() -> bool:
            rows = json.loads(metadata_quorum(cluster, "--output", "json", "describe", "--replication",
                                              bootstrap_ids=voters, check=True).stdout)
            return any(r["nodeId"] == NEW_CONTROLLER and r["status"] == "Observer" and r["lag"] == 0 for r in rows)

        wait_for(observer_caught_up, timeout_s=120, interval_s=1, what=f"controller {NEW_CONTROLLER} to catch up")
        metadata_quorum(cluster, "add-controller", "--config", str(cluster.nodes[NEW_CONTROLLER].config_path),
                        bootstrap_ids=voters, check=True)
        wait_for(lambda: voter_ids(describe_status(cluster, bootstrap_ids=voters)) == [*voters, NEW_CONTROLLER],
                 timeout_s=120, interval_s=1, what=f"controller {NEW_CONTROLLER} to be a voter")
        marks["after_add_controller"] = leader_hwm(cluster)
        directory = directory_of(describe_status(cluster, bootstrap_ids=voters), NEW_CONTROLLER)
        metadata_quorum(cluster, "remove-controller", "--controller-id", str(NEW_CONTROLLER),
                        "--controller-directory-id", directory, bootstrap_ids=voters, check=True)
        wait_for(lambda: voter_ids(describe_status(cluster, bootstrap_ids=voters)) == voters,
                 timeout_s=120, interval_s=1, what=f"controller {NEW_CONTROLLER} to be removed")
        marks["after_remove_controller"] = leader_hwm(cluster)
        cluster_id = read_meta_properties(partition_dir(root, 1).parent).cluster_id
        assert cluster_id is not None
    finally:
        # SIGKILL, as a crash would leave the disks: the reader must cope with whatever is there.
        cluster.cleanup()
    yield Run(root=root, cluster_id=cluster_id, marks=marks)


@dataclasses.dataclass
class Output:
    path: Path
    printed: str


@pytest.fixture(scope="module")
def pipeline_run(cluster_run: Run, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Output:
    """`kraftwerk pipeline run` as a user runs it (in this process, to reuse the session's JVM)."""
    output = Path(tmp_path_factory.mktemp("pipeline-output")) / "tables"
    before = tree_digest(cluster_run.root)
    printed = io.StringIO()
    argv = ["pipeline", "run", "--input", str(cluster_run.root), "--output", str(output)]
    assert kraftwerk_main(argv, out=printed) == 0
    assert tree_digest(cluster_run.root) == before, "the pipeline changed its input"
    return Output(output, printed.getvalue())


@pytest.fixture(scope="module")
def pipeline_output(pipeline_run: Output) -> Path:
    return pipeline_run.path


def tree_digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and "__cluster_metadata-0" in p.parts
    }


def table(spark: SparkSession, output: Path, name: str) -> list[dict[str, Any]]:
    path = output / name
    if not any(path.rglob("*.parquet")):
        return []
    return [row.asDict(recursive=True) for row in spark.read.parquet(str(path)).collect()]


def test_events_are_found_at_the_offsets_the_live_cluster_brackets(
    cluster_run: Run, pipeline_output: Path, spark: SparkSession
) -> None:
    events = table(spark, pipeline_output, "events")
    marks = cluster_run.marks
    assert {e["cluster_id"] for e in events} == {cluster_run.cluster_id}

    def between(kind: str, low: str, high: str, **match: Any) -> list[dict[str, Any]]:
        return [
            e for e in events
            if e["event"] == kind and marks[low] <= e["offset"] < marks[high]
            and all(e[k] == v for k, v in match.items())
        ]

    assert len(between("topic_created", "before_create", "after_create", topic=TOPIC)) == 1
    created = between("partition_created", "before_create", "after_create", topic=TOPIC)
    assert sorted(e["partition"] for e in created) == list(range(PARTITIONS))
    assert all(sorted(e["replicas"]) == list(BROKERS) for e in created)

    assert between("broker_fenced", "before_kill", "after_fence", node_id=KILLED)
    shrunk = between("isr_shrunk", "before_kill", "after_fence", topic=TOPIC)
    assert sorted({e["partition"] for e in shrunk}) == list(range(PARTITIONS))
    assert all(KILLED in e["previous_isr"] and KILLED not in e["isr"] for e in shrunk)

    registered = between("broker_registered", "before_restart", "after_restart", node_id=KILLED)
    assert len(registered) == 1
    first = [e for e in events if e["event"] == "broker_registered" and e["node_id"] == KILLED]
    assert len({e["incarnation_id"] for e in first}) == 2, "the restart registers a new incarnation"
    assert between("broker_unfenced", "before_restart", "after_restart", node_id=KILLED)
    expanded = between("isr_expanded", "before_restart", "after_restart", topic=TOPIC)
    assert sorted({e["partition"] for e in expanded}) == list(range(PARTITIONS))
    assert all(KILLED in e["isr"] for e in expanded)

    assert [e for e in events if e["event"] == "feature_level_changed" and e["name"] == "metadata.version"]
    assert [e for e in events if e["event"] == "controller_elected"]


def test_upgrade_reassignment_and_voter_changes_are_found_between_their_marks(
    cluster_run: Run, pipeline_output: Path, spark: SparkSession
) -> None:
    events = table(spark, pipeline_output, "events")
    marks = cluster_run.marks

    def between(kind: str, low: str, high: str) -> list[dict[str, Any]]:
        return sorted((e for e in events if e["event"] == kind and marks[low] <= e["offset"] < marks[high]),
                      key=lambda e: e["offset"])

    levels = [e["value"] for e in sorted(events, key=lambda e: e["offset"])
              if e["event"] == "feature_level_changed" and e["name"] == "metadata.version"]
    assert levels[0] == str(FORMATTED.feature_level), levels  # the bootstrap's level
    upgrade = [e for e in between("feature_level_changed", "before_upgrade", "after_upgrade")
               if e["name"] == "metadata.version"]
    assert [e["value"] for e in upgrade] == [str(UPGRADED.feature_level)]

    target = sorted((set(BROKERS) - {KILLED}) | {NEW_BROKER})
    (started,) = between("reassignment_started", "before_reassign", "after_reassign")
    assert (started["topic"], started["partition"]) == (TOPIC, MOVED)
    assert set(started["replicas"]) == set(BROKERS) | {NEW_BROKER}  # the old and the new, while it runs
    (finished,) = between("reassignment_finished", "before_reassign", "after_reassign")
    assert (finished["topic"], finished["partition"]) == (TOPIC, MOVED)
    assert sorted(finished["replicas"]) == target and finished["offset"] > started["offset"]
    assert [e for e in events if e["event"] == "reassignment_cancelled"] == []

    added = between("voters_changed", "before_add_controller", "after_add_controller")
    assert [e["voters"] for e in added] == [[*CONTROLLERS, NEW_CONTROLLER]]
    removed = between("voters_changed", "after_add_controller", "after_remove_controller")
    assert [e["voters"] for e in removed] == [list(CONTROLLERS)]

    # the partition was under-replicated while it moved (4 replicas, 3 in sync), and is not after
    urp = sorted(table(spark, pipeline_output, "urp_history"), key=lambda r: r["offset"])
    moving = [r for r in urp if started["offset"] <= r["offset"] < finished["offset"]]
    assert moving and max(r["under_replicated"] for r in moving) == 1
    assert [r for r in urp if r["offset"] <= finished["offset"]][-1]["under_replicated"] == 0


def test_tables_agree_with_a_straight_replay_through_the_metadata_loader(
    cluster_run: Run, pipeline_output: Path, spark: SparkSession
) -> None:
    replay: Replay = straight_replay(partition_dir(cluster_run.root, 1))
    check_events_against_replay(table(spark, pipeline_output, "events"), replay)
    # each interval of partition_history is the loader's image of that partition at its start
    check_history_against_replay(table(spark, pipeline_output, "partition_history"), replay)


def test_urp_rises_after_the_kill_and_returns_to_zero_after_the_restart(
    cluster_run: Run, pipeline_output: Path, spark: SparkSession
) -> None:
    urp = sorted(table(spark, pipeline_output, "urp_history"), key=lambda r: r["offset"])
    marks = cluster_run.marks
    during = [r for r in urp if marks["before_kill"] <= r["offset"] < marks["after_fence"]]
    assert max(r["under_replicated"] for r in during) == PARTITIONS
    at_end = [r for r in urp if r["offset"] < marks["after_restart"]][-1]
    assert at_end["under_replicated"] == 0 and at_end["offline"] == 0
    totals = {(r["topic"], r["partition"]): r for r in table(spark, pipeline_output, "urp_partition_totals")}
    assert all(totals[(TOPIC, p)]["under_replicated_ms"] > 0 for p in range(PARTITIONS))


def test_a_healthy_clusters_dr_checks_pass(cluster_run: Run, pipeline_output: Path, spark: SparkSession) -> None:
    checks = table(spark, pipeline_output, "dr_checks")
    failed = [c for c in checks if c["status"] != "pass"]
    assert not failed, failed
    names = {c["check"] for c in checks}
    assert {"log_agreement", "segment_continuity", "rebuildable_from", "snapshot_age", "voter_set_history"} <= names
    voters = next(c for c in checks if c["check"] == "voter_set_history")
    assert "[1, 2, 3]" in voters["evidence"] and "[1, 2, 3, 4]" in voters["evidence"]
    assert table(spark, pipeline_output, "problems") == []


# -- planted faults ------------------------------------------------------------------------------


def copy_as_cluster(run: Run, root: Path, name: str) -> tuple[Path, str]:
    """A copy of every node's metadata dir under root/name, relabelled as a cluster of its own."""
    target = root / name
    cluster_id = to_kafka_str(random_uuid())
    for node_id in ALL_NODES:
        source = partition_dir(run.root, node_id).parent
        dest = target / f"node-{node_id}"
        dest.mkdir(parents=True)
        shutil.copytree(source / "__cluster_metadata-0", dest / "__cluster_metadata-0")
        meta = read_meta_properties(source)
        write_meta_properties(dest, dataclasses.replace(meta, cluster_id=cluster_id))
    return target, cluster_id


def segment_batches(segment: Path) -> list[ScannedBatch]:
    return [b for b in scan_batches(read_log_file(segment)) if isinstance(b, ScannedBatch)]


def only_segment(node_root: Path) -> Path:
    (segment,) = sorted((node_root / "__cluster_metadata-0").glob("*.log"))
    return segment


def split_segment(segment: Path, *, drop_middle: bool) -> tuple[int, int]:
    """Cut one segment into three at batch boundaries (named by their base offsets, as Kafka rolls
    them); optionally leave out the middle one. Returns the missing offsets' range."""
    batches = segment_batches(segment)
    third = len(batches) // 3
    parts = [batches[:third], batches[third : 2 * third], batches[2 * third :]]
    segment.unlink()
    for index, part in enumerate(parts):
        if drop_middle and index == 1:
            continue
        (segment.parent / f"{part[0].header.base_offset:020d}.log").write_bytes(b"".join(b.raw for b in part))
    return parts[1][0].header.base_offset, parts[1][-1].header.last_offset


def test_planted_faults_each_fail_their_dr_check(cluster_run: Run, spark: SparkSession, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    clusters: dict[str, str] = {}

    # untouched, except its one segment is split in three (a legal layout), to show the split alone passes
    root, clusters["pristine"] = copy_as_cluster(cluster_run, fleet, "pristine")
    split_segment(only_segment(root / "node-3"), drop_middle=False)

    # a byte flipped inside a committed batch on node 2
    root, clusters["flipped"] = copy_as_cluster(cluster_run, fleet, "flipped")
    segment = only_segment(root / "node-2")
    batches = segment_batches(segment)
    target = batches[len(batches) // 2]
    data = bytearray(segment.read_bytes())
    data[target.position + len(target.raw) - 3] ^= 0x40
    segment.write_bytes(bytes(data))

    # node 3 diverges: one batch replaced by another record at the same offset, with a valid CRC
    root, clusters["diverged"] = copy_as_cluster(cluster_run, fleet, "diverged")
    segment = only_segment(root / "node-3")
    batches = segment_batches(segment)
    victim = next(b for b in batches[len(batches) // 2 :] if b.header.record_count == 1 and not b.header.is_control)
    forged = build_batch(
        base_offset=victim.header.base_offset, partition_leader_epoch=victim.header.partition_leader_epoch,
        timestamp_ms=victim.header.max_timestamp,
        values=[encode_metadata_record(TopicRecord(name="forged", topic_id=random_uuid()))],
    )
    segment.write_bytes(b"".join(forged if b is victim else b.raw for b in batches))

    # a segment missing on node 1
    root, clusters["missing"] = copy_as_cluster(cluster_run, fleet, "missing")
    missing = split_segment(only_segment(root / "node-1"), drop_middle=True)

    # snapshots on node 2: one true to its log, one claiming a later offset than the image it holds
    root, clusters["snapshots"] = copy_as_cluster(cluster_run, fleet, "snapshots")
    replay = straight_replay(partition_dir(cluster_run.root, 2))
    ends = sorted(replay.images)
    true_end, lying_end = ends[len(ends) // 2], ends[-1]
    for end_offset, image_offset in ((true_end, true_end), (lying_end, ends[len(ends) // 4])):
        image = replay.images[image_offset]
        writer = SnapshotWriter(root / "node-2" / "__cluster_metadata-0",
                                snapshot_id=SnapshotId(end_offset + 1, 1),
                                last_contained_log_timestamp_ms=replay.batch_times_ms[end_offset], timestamp_ms=0)
        writer.append([encode_metadata_record(r, v) for r, v in image.records().records])
        writer.freeze()

    from kraft_pipeline.job import run

    output = tmp_path / "out"
    before = tree_digest(fleet)
    tables = run(inputs=[str(fleet)], output=str(output), spark=spark)
    assert tree_digest(fleet) == before
    checks: dict[str, list[dict[str, Any]]] = {}
    for row in tables.dr_checks.collect():
        checks.setdefault(row["cluster_id"], []).append(row.asDict())

    def failing(name: str) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for c in checks[clusters[name]]:
            if c["status"] == "fail":
                out.setdefault(c["check"], []).append(c)
        return out

    assert failing("pristine") == {}
    flipped = failing("flipped")
    assert "node 2 holds other bytes" in flipped["log_agreement"][0]["evidence"]
    assert flipped["segment_continuity"][0]["subject"] == "node 2"
    problems = tables.problems.where(tables.problems.cluster_id == clusters["flipped"]).collect()
    assert [(p["node_id"], p["offset"]) for p in problems] == [(2, target.header.base_offset)]
    assert "corrupt" in problems[0]["problem"] and "node-2" in problems[0]["file"]

    diverged = failing("diverged")
    assert list(diverged) == ["log_agreement"]
    assert f"node 3 holds other bytes for the batch at offset {victim.header.base_offset}" in (
        diverged["log_agreement"][0]["evidence"]
    )

    gap = failing("missing")
    assert [c["subject"] for c in gap["segment_continuity"]] == ["node 1"]
    assert f"offsets {missing[0]}..{missing[1]} are missing" in gap["segment_continuity"][0]["evidence"]

    snapshot_failures = failing("snapshots")
    assert list(snapshot_failures) == ["snapshot_matches_log"]
    (lying,) = snapshot_failures["snapshot_matches_log"]
    assert lying["subject"] == f"node 2 snapshot {lying_end + 1:020d}-{1:010d}"
    passed = [c for c in checks[clusters["snapshots"]] if c["check"] == "snapshot_matches_log" and c["status"] == "pass"]
    assert [c["subject"] for c in passed] == [f"node 2 snapshot {true_end + 1:020d}-{1:010d}"]


def test_kraftwerk_pipeline_run_writes_every_table(cluster_run: Run, pipeline_run: Output) -> None:
    output, printed = pipeline_run.path, pipeline_run.printed
    for name in TABLES:
        assert f"{name}: {output}/{name}" in printed
    assert f"report: {output}/report.html" in printed and (output / "report.html").is_file()
    assert "[PASS]" in printed and "[FAIL]" not in printed
    assert (output / "events" / f"cluster_id={cluster_run.cluster_id}").is_dir()


def test_the_report_is_one_self_contained_file_with_plots_and_the_checks(
    cluster_run: Run, pipeline_output: Path
) -> None:
    page = (pipeline_output / "report.html").read_text()
    assert f"Cluster {cluster_run.cluster_id}" in page
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 2  # partition states over time, and the lifecycle timeline
    for image in images:
        png = base64.b64decode(image)
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    # nothing is fetched from elsewhere: every src is a data URI, and there are no links or scripts
    assert re.findall(r"src='(?!data:)", page) == [] and "<script" not in page and "href=" not in page
    for check in ("log_agreement", "segment_continuity", "rebuildable_from", "snapshot_age", "voter_set_history"):
        assert f"<td>{check}</td>" in page
    assert "0 failed" in page
