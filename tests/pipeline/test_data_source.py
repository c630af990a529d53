"""The `kraft-metadata` source on hand-built node directories: one task per file, Arrow batches,
typed record structs, and damaged input (bad CRC, torn tail, unknown record version or type)
turned into problem rows that name the file and offset while every readable record still arrives
and no input byte changes."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
from log_builder import CLUSTER_ID, batches_bytes, node_dir, write_segment
from pyspark.sql import SparkSession

from kraft_engine.records import (
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
    build_batch,
    record_version_of,
)
from kraft_engine.records.framing import FRAME_VERSION
from kraft_pipeline.data_source import FORMAT_NAME
from kraft_pipeline.log_files import ROW_SCHEMA, LogFile, decode_file

TOPIC_ID = uuid.UUID(int=7)


def partition_record(partition: int, *, replicas: tuple[int, ...] = (1, 2, 3)) -> PartitionRecord:
    return PartitionRecord(
        partition_id=partition, topic_id=TOPIC_ID, replicas=replicas, isr=replicas, leader=replicas[0],
        leader_epoch=0, partition_epoch=0, removing_replicas=(), adding_replicas=(),
    )


def digest(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_file_decodes_into_arrow_batches_with_typed_record_structs(tmp_path: Path) -> None:
    partition = node_dir(tmp_path, 1)
    change_record = PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=(1, 2))
    write_segment(partition, [(4, [TopicRecord(name="t", topic_id=TOPIC_ID), partition_record(0)]),
                              (4, [change_record])])
    (segment,) = partition.glob("*.log")
    batches = list(decode_file(LogFile(str(segment), CLUSTER_ID, 1)))
    assert all(isinstance(b, pa.RecordBatch) and b.schema == ROW_SCHEMA for b in batches)
    rows = pa.Table.from_batches(batches).to_pylist()
    assert [(r["offset"], r["batch_base_offset"], r["leader_epoch"], r["record_type"], r["record_version"])
            for r in rows] == [(0, 0, 4, "TopicRecord", record_version_of(TopicRecord(name="t", topic_id=TOPIC_ID))),
                               (1, 0, 4, "PartitionRecord", record_version_of(partition_record(0))),
                               (2, 2, 4, "PartitionChangeRecord", record_version_of(change_record))]
    change = rows[2]["record"]["PartitionChangeRecord"]
    assert change["isr"] == [1, 2] and change["replicas"] is None and change["leader"] == -2
    assert rows[2]["record"]["TopicRecord"] is None
    assert {(r["cluster_id"], r["node_id"], r["file"], r["file_kind"]) for r in rows} == {
        (CLUSTER_ID, 1, str(segment), "segment")
    }


def test_spark_reads_one_partition_per_file(spark: SparkSession, tmp_path: Path) -> None:
    for node_id in (1, 2):
        partition = node_dir(tmp_path, node_id)
        next_offset = write_segment(partition, [(1, [FeatureLevelRecord(name="metadata.version", feature_level=27)])])
        write_segment(partition, [(1, [TopicRecord(name="t", topic_id=TOPIC_ID)])], base_offset=next_offset)
    frame = spark.read.format(FORMAT_NAME).load([str(tmp_path)])
    assert frame.rdd.getNumPartitions() == 4
    rows = frame.select("node_id", "offset", "record_type", "record.FeatureLevelRecord.feature_level").collect()
    assert sorted((r[0], r[1], r[2], r[3]) for r in rows) == [
        (1, 0, "FeatureLevelRecord", 27), (1, 1, "TopicRecord", None),
        (2, 0, "FeatureLevelRecord", 27), (2, 1, "TopicRecord", None),
    ]
    # a single path (Spark's `path` option) works too
    assert spark.read.format(FORMAT_NAME).load(str(tmp_path / "node-1")).count() == 2


def _framed(api_key: int, version: int, body: bytes) -> bytes:
    return bytes([FRAME_VERSION, api_key, version]) + body


def test_damaged_input_becomes_problem_rows_and_nothing_else_is_lost(spark: SparkSession, tmp_path: Path) -> None:
    partition = node_dir(tmp_path, 3)
    good, next_offset = batches_bytes([(1, [TopicRecord(name=f"t{i}", topic_id=uuid.UUID(int=i))]) for i in range(4)])
    data = bytearray(good)
    second = len(good) // 4
    data[second + 70] ^= 0x01  # the batch at offset 1: CRC mismatch
    # offset 4: a TopicRecord at version 9 (unknown) and a record of an unknown type, beside a good one
    odd = build_batch(
        base_offset=next_offset, partition_leader_epoch=1, timestamp_ms=1,
        values=[_framed(2, 9, b"\x00"), _framed(120, 0, b"\x00"), _framed(20, 0, b"\x00")],
    )
    torn = build_batch(base_offset=next_offset + 3, partition_leader_epoch=1, timestamp_ms=1, values=[b"x" * 40])
    segment = partition / "00000000000000000000.log"
    segment.write_bytes(bytes(data) + odd + torn[:-9])
    before = digest(tmp_path)

    frame = spark.read.format(FORMAT_NAME).load([str(tmp_path)])
    rows = [r.asDict() for r in frame.orderBy("offset", "position").collect()]
    assert digest(tmp_path) == before

    decoded = [(r["offset"], r["record_type"]) for r in rows if r["problem"] is None]
    assert decoded == [(0, "TopicRecord"), (2, "TopicRecord"), (3, "TopicRecord"), (6, "NoOpRecord")]
    problems = [(r["offset"], r["problem"]) for r in rows if r["problem"] is not None]
    assert [o for o, _ in problems] == [1, 4, 5, 7]
    assert all(str(segment) in p for _, p in problems)
    crc, version, kind, tail = (p for _, p in problems)
    assert "is corrupt" in crc and "CRC-32C" in crc
    assert "TopicRecord version 9 is not supported" in version
    assert "unknown metadata record api key 120" in kind
    assert "torn tail" in tail and f"{len(torn) - 9} bytes not read" in tail
    raws = {r["offset"]: r["raw"] for r in rows if r["problem"] is not None}
    assert raws[4] == _framed(2, 9, b"\x00") and len(raws[7]) == len(torn) - 9


def test_a_node_without_meta_properties_is_a_problem_row_not_a_failure(spark: SparkSession, tmp_path: Path) -> None:
    partition = tmp_path / "lost" / "__cluster_metadata-0"
    partition.mkdir(parents=True)
    write_segment(partition, [(1, [TopicRecord(name="t", topic_id=TOPIC_ID)])])
    rows = spark.read.format(FORMAT_NAME).load([str(tmp_path)]).collect()
    assert sorted((r["node_id"], r["record_type"] or "", r["problem"] is not None) for r in rows) == [
        (-1, "", True), (-1, "TopicRecord", False)
    ]
    assert "no meta.properties" in next(r["problem"] for r in rows if r["problem"])


def test_the_reader_loads_without_the_nodes_server_package() -> None:
    """What a Spark executor imports to decode a file stays clear of the node process's code."""
    script = (
        "import sys, kraft_pipeline.data_source, kraft_pipeline.log_files; "
        "bad = sorted(m for m in sys.modules if m.startswith(('kraft_engine.server', 'kraft_engine.cli', 'kraft_operator'))); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
