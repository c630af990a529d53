"""`events`: the typed lifecycle timeline of each cluster, one row per thing that happened.

Brokers (registration with incarnation, fencing, unfencing, controlled shutdown, unregistration),
the quorum (elections from LeaderChangeMessage, voter sets from VotersRecord, feature levels
including metadata.version), topics (creation, deletion), configs, and partitions (leader changes,
ISR shrinks and expands, reassignment start, finish and cancel, directory assignments). Broker,
quorum, topic and config events come straight from one record each; partition events compare
consecutive intervals of `partition_history`, because "the ISR shrank" is a statement about the
state before and after a PartitionChangeRecord, which the record alone (null = unchanged) does not
hold. Every event carries the offset, leader epoch and batch time of the record that caused it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, IntegerType, LongType, StringType

from kraft_engine.metadata.configs_image import ConfigResourceType
from kraft_pipeline.canonical_log import topic_names

__all__ = ["EVENT_COLUMNS", "events"]

_TYPES = {
    "node_id": IntegerType(),
    "topic_id": StringType(),
    "topic": StringType(),
    "partition": IntegerType(),
    "broker_epoch": LongType(),
    "incarnation_id": StringType(),
    "leader": IntegerType(),
    "previous_leader": IntegerType(),
    "replicas": ArrayType(IntegerType()),
    "isr": ArrayType(IntegerType()),
    "previous_isr": ArrayType(IntegerType()),
    "voters": ArrayType(IntegerType()),
    "name": StringType(),
    "value": StringType(),
    "resource": StringType(),
}
EVENT_COLUMNS = ["cluster_id", "offset", "batch_timestamp_ms", "leader_epoch", "event", *_TYPES]
# Kafka's ConfigResource.Type codes as ConfigRecord carries them, by name ("topic", "broker_logger").
_RESOURCE_TYPES = {int(t): t.name.lower() for t in ConfigResourceType}


def _event(rows: DataFrame, event_name: str, /, **columns: Column) -> DataFrame:
    cells = [F.col("cluster_id"), F.col("offset"), F.col("batch_timestamp_ms"), F.col("leader_epoch")]
    cells.append(F.lit(event_name).alias("event"))
    for column, kind in _TYPES.items():
        value = columns.get(column)
        cells.append((F.lit(None) if value is None else value).cast(kind).alias(column))
    return rows.select(*cells)


def _of(log: DataFrame, record_type: str) -> DataFrame:
    return log.where(F.col("record_type") == record_type)


def _field(record_type: str, name: str) -> Column:
    return F.col(f"record.{record_type}.{name}")


def _copied(log: DataFrame, record_type: str, event_name: str, /, **fields: str) -> DataFrame:
    """One event per `record_type` record, each event column a copy of the named record field."""
    return _event(
        _of(log, record_type), event_name, **{column: _field(record_type, name) for column, name in fields.items()}
    )


def _record_events(log: DataFrame) -> list[DataFrame]:
    change = "BrokerRegistrationChangeRecord"
    fence_value, shutdown_value = _field(change, "fenced"), _field(change, "in_controlled_shutdown")
    resource_type = _field("ConfigRecord", "resource_type")
    resource_name = F.create_map(*(x for code, name in _RESOURCE_TYPES.items() for x in (F.lit(code), F.lit(name))))
    return [
        _copied(log, "RegisterBrokerRecord", "broker_registered",
                node_id="broker_id", broker_epoch="broker_epoch", incarnation_id="incarnation_id"),
        _copied(log, "FenceBrokerRecord", "broker_fenced", node_id="id", broker_epoch="epoch"),
        _copied(log, "UnfenceBrokerRecord", "broker_unfenced", node_id="id", broker_epoch="epoch"),
        *(
            _event(
                _of(log, change).where(condition),
                name,
                node_id=_field(change, "broker_id"),
                broker_epoch=_field(change, "broker_epoch"),
            )
            for condition, name in (
                (fence_value == 1, "broker_fenced"),
                (fence_value == -1, "broker_unfenced"),
                (shutdown_value == 1, "broker_controlled_shutdown"),
            )
        ),
        _copied(log, "UnregisterBrokerRecord", "broker_unregistered", node_id="broker_id", broker_epoch="broker_epoch"),
        _copied(log, "RegisterControllerRecord", "controller_registered",
                node_id="controller_id", incarnation_id="incarnation_id"),
        _event(
            _of(log, "LeaderChangeMessage"),
            "controller_elected",
            node_id=_field("LeaderChangeMessage", "leader_id"),
            leader=_field("LeaderChangeMessage", "leader_id"),
            voters=F.transform(_field("LeaderChangeMessage", "voters"), lambda v: v["voter_id"]),
        ),
        _event(
            _of(log, "VotersRecord"),
            "voters_changed",
            voters=F.array_sort(F.transform(_field("VotersRecord", "voters"), lambda v: v["voter_id"])),
        ),
        _event(
            _of(log, "FeatureLevelRecord"),
            "feature_level_changed",
            name=_field("FeatureLevelRecord", "name"),
            value=_field("FeatureLevelRecord", "feature_level").cast("string"),
        ),
        _copied(log, "TopicRecord", "topic_created", topic_id="topic_id", topic="name"),
        _copied(log, "RemoveTopicRecord", "topic_deleted", topic_id="topic_id"),
        _event(
            _of(log, "ConfigRecord"),
            "config_changed",
            resource=F.concat_ws(
                ":", F.coalesce(resource_name[resource_type], resource_type.cast("string")),
                _field("ConfigRecord", "resource_name"),
            ),
            name=_field("ConfigRecord", "name"),
            value=_field("ConfigRecord", "value"),
        ),
    ]


def _partition_events(history: DataFrame, log: DataFrame) -> list[DataFrame]:
    """Events from each interval against the one before it (same partition)."""
    order = Window.partitionBy("cluster_id", "topic_id", "partition").orderBy("start_offset")
    previous = [
        F.lag(c).over(order).alias(f"prev_{c}")
        for c in ("leader", "isr", "replicas", "adding_replicas", "removing_replicas", "directories")
    ]
    cause = log.select(
        "cluster_id", F.col("offset").alias("start_offset"), "leader_epoch", "batch_timestamp_ms", "offset"
    )
    steps = history.select("*", *previous).drop("leader_epoch").join(cause, ["cluster_id", "start_offset"])
    common = {
        "topic_id": F.col("topic_id"),
        "partition": F.col("partition"),
        "leader": F.col("leader"),
        "previous_leader": F.col("prev_leader"),
        "replicas": F.col("replicas"),
        "isr": F.col("isr"),
        "previous_isr": F.col("prev_isr"),
    }
    changed = steps.where(F.col("prev_leader").isNotNull())
    was_reassigning = (F.size("prev_adding_replicas") > 0) | (F.size("prev_removing_replicas") > 0)
    is_reassigning = (F.size("adding_replicas") > 0) | (F.size("removing_replicas") > 0)
    # A reassignment ends in its target (the old replicas minus those being removed, which is
    # where Kafka's completion leaves them) or, when cancelled, back where it started.
    target = F.array_except(F.col("prev_replicas"), F.col("prev_removing_replicas"))
    reached_target = F.array_sort(F.col("replicas")) == F.array_sort(target)
    return [
        _event(steps.where(F.col("started_by") == "PartitionRecord"), "partition_created", **common),
        _event(changed.where(F.col("leader") != F.col("prev_leader")), "leader_changed", **common),
        _event(changed.where(F.size(F.array_except("prev_isr", "isr")) > 0), "isr_shrunk", **common),
        _event(changed.where(F.size(F.array_except("isr", "prev_isr")) > 0), "isr_expanded", **common),
        _event(changed.where(~was_reassigning & is_reassigning), "reassignment_started", **common),
        _event(changed.where(was_reassigning & ~is_reassigning & reached_target), "reassignment_finished", **common),
        _event(changed.where(was_reassigning & ~is_reassigning & ~reached_target), "reassignment_cancelled", **common),
        _event(
            changed.where(
                (F.col("directories") != F.col("prev_directories")) & (F.col("replicas") == F.col("prev_replicas"))
            ),
            "directory_assigned",
            **common,
        ),
    ]


def events(log: DataFrame, history: DataFrame) -> DataFrame:
    """Every event of the canonical log, with topic names filled in from TopicRecord."""
    parts = _record_events(log) + _partition_events(history, log)
    timeline = parts[0]
    for part in parts[1:]:
        timeline = timeline.unionByName(part)
    names = topic_names(log).withColumnRenamed("topic", "topic_name")
    return (
        timeline.join(names, ["cluster_id", "topic_id"], "left")
        .withColumn("topic", F.coalesce("topic", "topic_name"))
        .select(*EVENT_COLUMNS)
    )
