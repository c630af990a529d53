"""`partition_history`: for each partition, the intervals over which its state stood still.

A partition's state changes only by PartitionRecord (creation, or a full restatement) and
PartitionChangeRecord, replayed in offset order with Kafka's rule that an absent field (null, or
the "no change" sentinel) keeps its value, and ends with its topic's RemoveTopicRecord. That rule
is the engine's own `PartitionRegistration.from_record` / `.merge`, so the pipeline replays exactly
as a broker's metadata image does; only the grouping (topics in groups, each topic's records in offset order)
is Spark's. Each interval says where it starts and ends (offset and batch time), and the state:
leader, leader epoch, partition epoch, replicas, ISR, replicas being added and removed, ELR.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.metadata.partition_registration import PartitionRegistration
from kraft_engine.records import PartitionChangeRecord, PartitionRecord
from kraft_pipeline.record_schema import record_from_struct_value

__all__ = ["HISTORY_SCHEMA", "partition_history"]

_INTS = pa.list_(pa.int32())
HISTORY_SCHEMA = pa.schema(
    [
        pa.field("cluster_id", pa.string()),
        pa.field("topic_id", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("start_offset", pa.int64()),
        pa.field("start_ms", pa.int64()),
        pa.field("end_offset", pa.int64()),  # the offset of the record that ended it; null while open
        pa.field("end_ms", pa.int64()),
        pa.field("ended_by", pa.string()),  # PartitionRecord, PartitionChangeRecord, RemoveTopicRecord
        pa.field("started_by", pa.string()),
        pa.field("leader", pa.int32()),
        pa.field("leader_epoch", pa.int32()),
        pa.field("partition_epoch", pa.int32()),
        pa.field("replicas", _INTS),
        pa.field("isr", _INTS),
        pa.field("adding_replicas", _INTS),
        pa.field("removing_replicas", _INTS),
        pa.field("elr", _INTS),
        pa.field("directories", pa.list_(pa.string())),
        pa.field("leader_recovery_state", pa.int8()),
    ]
)
_TYPES = ("PartitionRecord", "PartitionChangeRecord", "RemoveTopicRecord")
# Groups of topics per cluster the replay is split into: enough for every core of a cluster's
# executors to have some, few enough that each call into Python holds many topics.
_TOPIC_GROUPS = 16


def _state(registration: PartitionRegistration) -> dict[str, Any]:
    return {
        "leader": registration.leader,
        "leader_epoch": registration.leader_epoch,
        "partition_epoch": registration.partition_epoch,
        "replicas": list(registration.replicas),
        "isr": list(registration.isr),
        "adding_replicas": list(registration.adding_replicas),
        "removing_replicas": list(registration.removing_replicas),
        "elr": list(registration.elr),
        "directories": [to_kafka_str(d) for d in registration.directories],
        "leader_recovery_state": int(registration.leader_recovery_state),
    }


def _fold(table: pa.Table) -> pa.Table:
    """Some topics' partition records -> their partitions' intervals, each topic's in offset order."""
    rows = sorted(table.to_pylist(), key=lambda r: r["offset"])
    current: dict[tuple[str, int], tuple[PartitionRegistration, dict[str, Any]]] = {}
    out: list[dict[str, Any]] = []

    def close(key: tuple[str, int], *, row: dict[str, Any]) -> None:
        if key in current:
            _, interval = current.pop(key)
            interval.update(end_offset=row["offset"], end_ms=row["batch_timestamp_ms"], ended_by=row["record_type"])
            out.append(interval)

    for row in rows:
        kind, topic_id = row["record_type"], row["topic_id"]
        if kind == "RemoveTopicRecord":
            for key in sorted(k for k in current if k[0] == topic_id):
                close(key, row=row)
            continue
        record = record_from_struct_value(kind, row["record"])
        if isinstance(record, PartitionRecord):
            registration = PartitionRegistration.from_record(record)
        elif isinstance(record, PartitionChangeRecord):
            if (topic_id, record.partition_id) not in current:
                continue  # a change to a partition the log never created here (trimmed log)
            registration = current[topic_id, record.partition_id][0].merge(record)
        else:
            continue
        partition = int(record.partition_id)
        close((topic_id, partition), row=row)
        interval = {
            "cluster_id": row["cluster_id"],
            "topic_id": topic_id,
            "partition": partition,
            "start_offset": row["offset"],
            "start_ms": row["batch_timestamp_ms"],
            "end_offset": None,
            "end_ms": None,
            "ended_by": None,
            "started_by": kind,
            **_state(registration),
        }
        current[topic_id, partition] = (registration, interval)
    out.extend(interval for _, interval in current.values())
    return pa.Table.from_pylist(out, schema=HISTORY_SCHEMA)


def partition_history(log: DataFrame) -> DataFrame:
    """Intervals of every partition in the canonical log (see canonical_log).

    Topics are folded in groups of a cluster's topics (by a hash of the topic id), not one group
    per topic: a fleet has tens of thousands of topics, and each group is a call into Python with
    its own Arrow tables."""
    records = log.where(F.col("record_type").isin(*_TYPES)).select(
        "cluster_id",
        "offset",
        "batch_timestamp_ms",
        "record_type",
        F.coalesce(
            F.col("record.PartitionRecord.topic_id"),
            F.col("record.PartitionChangeRecord.topic_id"),
            F.col("record.RemoveTopicRecord.topic_id"),
        ).alias("topic_id"),
        F.struct(*(F.col(f"record.{t}").alias(t) for t in _TYPES)).alias("record"),
    )
    from pyspark.sql.pandas.types import from_arrow_schema

    bucket = F.pmod(F.xxhash64("topic_id"), F.lit(_TOPIC_GROUPS)).alias("topic_group")
    return (
        records.withColumn("topic_group", bucket)
        .groupBy("cluster_id", "topic_group")
        .applyInArrow(_fold, from_arrow_schema(HISTORY_SCHEMA))
    )
