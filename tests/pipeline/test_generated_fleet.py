"""The job's tables on a fleet written by the benchmark's generator (the engine's real
QuorumController: brokers registered, topics created, fencings, rolls, reassignments started and
cancelled), against a straight replay of each cluster's log through the engine's MetadataLoader
(`replay.py`: no Spark, not the pipeline's reader). It covers what the job's faster paths touch:
the per-node checks that replay a snapshot from the stored record bytes, the partition history
replayed per topic, and the URP counts, on logs split over many segments and clusters."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pyspark.sql import SparkSession
from replay import Replay, check_events_against_replay, check_history_against_replay, straight_replay

from kraft_engine.records import encode_metadata_record
from kraft_engine.storage.meta_properties import read_meta_properties
from kraft_engine.storage.snapshots import SnapshotId, SnapshotWriter
from kraft_pipeline.job import derive

pytestmark = pytest.mark.timeout(900)

_BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench_generator() -> ModuleType:
    """bench/pipeline.py (it imports bench/controller.py as `controller`).

    The test suite has a package of that name too (tests/controller): when a worker imported it
    first, `controller` is the tests' package. bench/controller.py is put under that name while
    bench/pipeline.py loads, and whatever held the name before is put back.
    """
    held = sys.modules.pop("controller", None)
    sys.path.insert(0, str(_BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_pipeline", _BENCH / "pipeline.py")
        if spec is None or spec.loader is None:
            raise RuntimeError(f"cannot load {_BENCH / 'pipeline.py'}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(_BENCH))
        sys.modules.pop("controller", None)
        if held is not None:
            sys.modules["controller"] = held


def _write_snapshot(partition: Path, replay: Replay, *, end_offset: int, image_offset: int) -> None:
    """A snapshot claiming to hold the log up to `end_offset`, holding the image after `image_offset`."""
    writer = SnapshotWriter(partition, snapshot_id=SnapshotId(end_offset + 1, 1),
                            last_contained_log_timestamp_ms=replay.batch_times_ms[end_offset], timestamp_ms=0)
    writer.append([encode_metadata_record(r, v) for r, v in replay.images[image_offset].records().records])
    writer.freeze()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("generated") / "fleet"
    _bench_generator().generate_fleet(root, clusters=2, partitions=60, rounds=3, segment_bytes=8192)
    return root


def _rows(frame: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in frame.collect()]


def test_tables_of_a_generated_fleet_agree_with_a_straight_replay(fleet: Path, spark: SparkSession) -> None:
    # Node 2 of cluster 0 gets a snapshot true to its log and one claiming more than its image holds.
    node_2 = fleet / "cluster-0" / "controller-2" / "__cluster_metadata-0"
    replay_2 = straight_replay(node_2)
    ends = sorted(replay_2.images)
    true_end, lying_end = ends[len(ends) // 2], ends[-1]
    _write_snapshot(node_2, replay_2, end_offset=true_end, image_offset=true_end)
    _write_snapshot(node_2, replay_2, end_offset=lying_end, image_offset=ends[len(ends) // 4])
    assert len(list(node_2.glob("*.log"))) > 3  # the log spans many segments

    tables = derive(spark, [str(fleet)])
    events, history, urp, checks = (
        _rows(tables.table(name)) for name in ("events", "partition_history", "urp_history", "dr_checks")
    )
    assert _rows(tables.problems) == []
    for cluster in ("cluster-0", "cluster-1"):
        cluster_id = read_meta_properties(fleet / cluster / "controller-1").cluster_id
        replay = straight_replay(fleet / cluster / "controller-1" / "__cluster_metadata-0")
        own_events = [e for e in events if e["cluster_id"] == cluster_id]
        check_events_against_replay(own_events, replay)
        check_history_against_replay([h for h in history if h["cluster_id"] == cluster_id], replay)
        kinds = Counter(e["event"] for e in own_events)
        records = Counter(type_name for type_name, _ in replay.records.values())
        assert kinds["partition_created"] == records["PartitionRecord"] == 60
        assert kinds["reassignment_started"] == kinds["reassignment_cancelled"] == 3
        assert kinds["broker_controlled_shutdown"] == 3 and kinds["broker_registered"] == records["RegisterBrokerRecord"]
        # The URP counts after each batch are the loader's image's.
        at_batch_ends = [r for r in urp if r["cluster_id"] == cluster_id and r["offset"] in replay.images]
        assert len(at_batch_ends) > 10
        for row in at_batch_ends:
            partitions = [
                p for topic in replay.images[row["offset"]].topics.topics_by_id.values()
                for p in topic.partitions.values()
            ]
            want = (sum(len(p.isr) < len(p.replicas) for p in partitions), sum(p.leader == -1 for p in partitions))
            assert (row["under_replicated"], row["offline"]) == want, row
        failing = [c for c in checks if c["cluster_id"] == cluster_id and c["status"] == "fail"]
        if cluster == "cluster-1":
            assert failing == []
        else:  # only the lying snapshot fails; the true one passes, replayed from the stored records
            assert [(c["check"], c["subject"]) for c in failing] == [
                ("snapshot_matches_log", f"node 2 snapshot {lying_end + 1:020d}-{1:010d}")
            ]
            passed = [c["subject"] for c in checks
                      if c["cluster_id"] == cluster_id and c["check"] == "snapshot_matches_log" and c["status"] == "pass"]
            assert passed == [f"node 2 snapshot {true_end + 1:020d}-{1:010d}"]
