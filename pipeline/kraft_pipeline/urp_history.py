"""`urp_history` and `urp_partition_totals`: how many partitions were under-replicated, under
min ISR or offline, over time, and how long each partition spent in each state.

A partition is under-replicated while its ISR is smaller than its replica set, under min ISR while
its ISR is smaller than its topic's `min.insync.replicas`, and offline while it has no leader
(leader -1), the definitions behind Kafka's UnderReplicatedPartitions, UnderMinIsrPartitionCount
and OfflinePartitionsCount. Each `partition_history` interval in such a state adds one at its start
offset and removes one at its end; a running sum over offsets gives the cluster's counts after every
change. An interval still open ends, for the totals, at the cluster's last batch time.

`min.insync.replicas` is the last value the log sets for the topic, else the cluster-wide broker
default (ConfigRecord on broker ""), else Kafka's default of 1. A value changed mid-log is applied
to the whole history (the simplification this table makes).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from kraft_engine.metadata.configs_image import ConfigResourceType
from kraft_pipeline.canonical_log import topic_names

__all__ = ["partition_states", "urp_history", "urp_partition_totals"]

_DEFAULT_MIN_ISR = 1
_STATES = ("under_replicated", "under_min_isr", "offline")


def _min_isr(log: DataFrame) -> tuple[DataFrame, DataFrame]:
    configs = log.where(
        (F.col("record_type") == "ConfigRecord") & (F.col("record.ConfigRecord.name") == "min.insync.replicas")
    ).select(
        "cluster_id",
        "offset",
        F.col("record.ConfigRecord.resource_type").alias("resource_type"),
        F.col("record.ConfigRecord.resource_name").alias("resource_name"),
        F.col("record.ConfigRecord.value").cast("int").alias("value"),
    )
    latest = Window.partitionBy("cluster_id", "resource_type", "resource_name").orderBy(F.desc("offset"))
    last = configs.withColumn("n", F.row_number().over(latest)).where(F.col("n") == 1)
    topics = last.where(F.col("resource_type") == int(ConfigResourceType.TOPIC)).select(
        "cluster_id", F.col("resource_name").alias("topic"), F.col("value").alias("topic_min_isr")
    )
    default = last.where((F.col("resource_type") == int(ConfigResourceType.BROKER)) & (F.col("resource_name") == "")).select(
        "cluster_id", F.col("value").alias("default_min_isr")
    )
    return topics, default


def partition_states(history: DataFrame, log: DataFrame) -> DataFrame:
    """`partition_history` with each interval's min ISR and its three states; the input of both
    tables below (the job computes it once and hands it to each)."""
    topics, default = _min_isr(log)
    min_isr = F.coalesce("topic_min_isr", "default_min_isr", F.lit(_DEFAULT_MIN_ISR))
    return (
        history.join(topic_names(log), ["cluster_id", "topic_id"], "left")
        .join(topics, ["cluster_id", "topic"], "left")
        .join(default, ["cluster_id"], "left")
        .withColumn("min_isr", min_isr)
        .withColumn("under_replicated", F.size("isr") < F.size("replicas"))
        .withColumn("under_min_isr", F.size("isr") < F.col("min_isr"))
        .withColumn("offline", F.col("leader") == -1)
    )


def urp_history(states: DataFrame) -> DataFrame:
    """Per cluster, after each offset where any count changes: the three counts and the batch time.
    `states` is `partition_states(history, log)`."""
    starts = states.select(
        "cluster_id", F.col("start_offset").alias("offset"), F.col("start_ms").alias("timestamp_ms"),
        *(F.col(s).cast("int").alias(s) for s in _STATES),
    )
    ends = states.where(F.col("end_offset").isNotNull()).select(
        "cluster_id", F.col("end_offset").alias("offset"), F.col("end_ms").alias("timestamp_ms"),
        *((-F.col(s).cast("int")).alias(s) for s in _STATES),
    )
    deltas = starts.unionByName(ends).groupBy("cluster_id", "offset").agg(
        F.max("timestamp_ms").alias("timestamp_ms"), *(F.sum(s).alias(s) for s in _STATES)
    )
    running = Window.partitionBy("cluster_id").orderBy("offset").rowsBetween(Window.unboundedPreceding, 0)
    return deltas.select(
        "cluster_id", "offset", "timestamp_ms", *(F.sum(s).over(running).cast("int").alias(s) for s in _STATES)
    )


def urp_partition_totals(states: DataFrame, log: DataFrame) -> DataFrame:
    """Per partition, the milliseconds spent under-replicated, under min ISR and offline.
    `states` is `partition_states(history, log)`."""
    last_ms = log.groupBy("cluster_id").agg(F.max("batch_timestamp_ms").alias("last_ms"))
    states = states.join(last_ms, ["cluster_id"])
    duration = F.coalesce("end_ms", "last_ms") - F.col("start_ms")
    return states.groupBy("cluster_id", "topic_id", "topic", "partition").agg(
        *(F.sum(F.when(F.col(s), duration).otherwise(F.lit(0))).alias(f"{s}_ms") for s in _STATES),
        F.count("*").alias("intervals"),
    )
