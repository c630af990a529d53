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


def _typed(event_name: str, /, **columns: Column) -> Column:
    """One event as a struct of `_TYPES`' columns (null where the event has no such column)."""
    cells = [F.lit(event_name).alias("event")]
    for column, kind in _TYPES.items():
        value = columns.get(column)
        cells.append((F.lit(None) if value is None else value).cast(kind).alias(column))
    return F.struct(*cells)


def _is(record_type: str) -> Column:
    return F.col("record_type") == record_type


def _field(record_type: str, name: str) -> Column:
    return F.col(f"record.{record_type}.{name}")


def _copied(record_type: str, event_name: str, /, **fields: str) -> tuple[Column, Column]:
    """One event per `record_type` record, each event column a copy of the named record field."""
    return _is(record_type), _typed(event_name, **{column: _field(record_type, name) for column, name in fields.items()})


def _record_events() -> list[tuple[Column, Column]]:
    """(condition, event) pairs: a log row meeting the condition is that event."""
    change = "BrokerRegistrationChangeRecord"
    fence_value, shutdown_value = _field(change, "fenced"), _field(change, "in_controlled_shutdown")
    resource_type = _field("ConfigRecord", "resource_type")
    resource_name = F.create_map(*(x for code, name in _RESOURCE_TYPES.items() for x in (F.lit(code), F.lit(name))))
    return [
        _copied("RegisterBrokerRecord", "broker_registered",
                node_id="broker_id", broker_epoch="broker_epoch", incarnation_id="incarnation_id"),
        _copied("FenceBrokerRecord", "broker_fenced", node_id="id", broker_epoch="epoch"),
        _copied("UnfenceBrokerRecord", "broker_unfenced", node_id="id", broker_epoch="epoch"),
        *(
            (
                _is(change) & condition,
                _typed(name, node_id=_field(change, "broker_id"), broker_epoch=_field(change, "broker_epoch")),
            )
            for condition, name in (
                (fence_value == 1, "broker_fenced"),
                (fence_value == -1, "broker_unfenced"),
                (shutdown_value == 1, "broker_controlled_shutdown"),
            )
        ),
        _copied("UnregisterBrokerRecord", "broker_unregistered", node_id="broker_id", broker_epoch="broker_epoch"),
        _copied("RegisterControllerRecord", "controller_registered",
                node_id="controller_id", incarnation_id="incarnation_id"),
        (
            _is("LeaderChangeMessage"),
            _typed(
                "controller_elected",
                node_id=_field("LeaderChangeMessage", "leader_id"),
                leader=_field("LeaderChangeMessage", "leader_id"),
                voters=F.transform(_field("LeaderChangeMessage", "voters"), lambda v: v["voter_id"]),
            ),
        ),
        (
            _is("VotersRecord"),
            _typed(
                "voters_changed",
                voters=F.array_sort(F.transform(_field("VotersRecord", "voters"), lambda v: v["voter_id"])),
            ),
        ),
        (
            _is("FeatureLevelRecord"),
            _typed(
                "feature_level_changed",
                name=_field("FeatureLevelRecord", "name"),
                value=_field("FeatureLevelRecord", "feature_level").cast("string"),
            ),
        ),
        _copied("TopicRecord", "topic_created", topic_id="topic_id", topic="name"),
        _copied("RemoveTopicRecord", "topic_deleted", topic_id="topic_id"),
        (
            _is("ConfigRecord"),
            _typed(
                "config_changed",
                resource=F.concat_ws(
                    ":", F.coalesce(resource_name[resource_type], resource_type.cast("string")),
                    _field("ConfigRecord", "resource_name"),
                ),
                name=_field("ConfigRecord", "name"),
                value=_field("ConfigRecord", "value"),
            ),
        ),
    ]


# The record types some event comes from: the one pass over the log reads only their rows.
_EVENT_RECORD_TYPES = (
    "RegisterBrokerRecord", "FenceBrokerRecord", "UnfenceBrokerRecord", "BrokerRegistrationChangeRecord",
    "UnregisterBrokerRecord", "RegisterControllerRecord", "LeaderChangeMessage", "VotersRecord",
    "FeatureLevelRecord", "TopicRecord", "RemoveTopicRecord", "ConfigRecord",
)


def _exploded(rows: DataFrame, pairs: list[tuple[Column, Column]]) -> DataFrame:
    """Every event each row is (none, one or several), in one pass over `rows`: each condition
    picks its event into an array, and the array's events become rows."""
    chosen = F.filter(F.array(*(F.when(condition, event) for condition, event in pairs)), lambda e: e.isNotNull())
    return rows.select("cluster_id", "offset", "batch_timestamp_ms", "leader_epoch", F.explode(chosen).alias("e")).select(
        "cluster_id", "offset", "batch_timestamp_ms", "leader_epoch", "e.*"
    )


def _partition_events(history: DataFrame, log: DataFrame) -> DataFrame:
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
    changed = F.col("prev_leader").isNotNull()
    was_reassigning = (F.size("prev_adding_replicas") > 0) | (F.size("prev_removing_replicas") > 0)
    is_reassigning = (F.size("adding_replicas") > 0) | (F.size("removing_replicas") > 0)
    # A reassignment ends in its target (the old replicas minus those being removed, which is
    # where Kafka's completion leaves them) or, when cancelled, back where it started.
    target = F.array_except(F.col("prev_replicas"), F.col("prev_removing_replicas"))
    reached_target = F.array_sort(F.col("replicas")) == F.array_sort(target)
    conditions = [
        (F.col("started_by") == "PartitionRecord", "partition_created"),
        (changed & (F.col("leader") != F.col("prev_leader")), "leader_changed"),
        (changed & (F.size(F.array_except("prev_isr", "isr")) > 0), "isr_shrunk"),
        (changed & (F.size(F.array_except("isr", "prev_isr")) > 0), "isr_expanded"),
        (changed & ~was_reassigning & is_reassigning, "reassignment_started"),
        (changed & was_reassigning & ~is_reassigning & reached_target, "reassignment_finished"),
        (changed & was_reassigning & ~is_reassigning & ~reached_target, "reassignment_cancelled"),
        (
            changed & (F.col("directories") != F.col("prev_directories")) & (F.col("replicas") == F.col("prev_replicas")),
            "directory_assigned",
        ),
    ]
    return _exploded(steps, [(condition, _typed(name, **common)) for condition, name in conditions])


def events(log: DataFrame, history: DataFrame) -> DataFrame:
    """Every event of the canonical log, with topic names filled in from TopicRecord."""
    # One pass over the log for the record events and one over the history for the partition
    # events (each a scan, not one per kind of event: a fleet's log is read twice, not 21 times).
    records = _exploded(log.where(F.col("record_type").isin(*_EVENT_RECORD_TYPES)), _record_events())
    timeline = records.unionByName(_partition_events(history, log))
    names = topic_names(log).withColumnRenamed("topic", "topic_name")
    return (
        timeline.join(names, ["cluster_id", "topic_id"], "left")
        .withColumn("topic", F.coalesce("topic", "topic_name"))
        .select(*EVENT_COLUMNS)
    )
