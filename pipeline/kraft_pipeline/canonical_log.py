"""One copy of each cluster's log out of its nodes' copies, and the rows that are problems.

Every controller and broker keeps a copy of `__cluster_metadata`, byte-for-byte the same batches
where they overlap. The timeline should count each record once, so each batch is taken from the
copy most nodes hold (ties: the lowest node id). Whether the copies really agree is a DR check
(`dr_checks`); here a minority copy simply loses.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

__all__ = ["PROBLEM_COLUMNS", "canonical_log", "good_rows", "problem_rows", "topic_names"]

PROBLEM_COLUMNS = ["cluster_id", "node_id", "file", "position", "offset", "batch_base_offset", "problem", "raw"]


def problem_rows(records: DataFrame) -> DataFrame:
    return records.where(F.col("problem").isNotNull()).select(*PROBLEM_COLUMNS)


def good_rows(records: DataFrame) -> DataFrame:
    return records.where(F.col("problem").isNull())


def canonical_log(good: DataFrame) -> DataFrame:
    """The segment rows of each cluster's log, one per offset, from the majority's copy."""
    segments = good.where(F.col("file_kind") == "segment")
    votes = (
        segments.select("cluster_id", "batch_base_offset", "batch_sha256", "node_id")
        .distinct()
        .groupBy("cluster_id", "batch_base_offset", "batch_sha256")
        .agg(F.count("*").alias("holders"), F.min("node_id").alias("node_id"))
    )
    ranked = Window.partitionBy("cluster_id", "batch_base_offset").orderBy(F.desc("holders"), "node_id")
    chosen = (
        votes.withColumn("rank", F.row_number().over(ranked))
        .where(F.col("rank") == 1)
        .select("cluster_id", "batch_base_offset", "batch_sha256", "node_id")
    )
    rows = segments.join(chosen, ["cluster_id", "batch_base_offset", "batch_sha256", "node_id"])
    # Batches of different boundaries at the same offsets (never in one raft log, but cheap to rule out).
    once = Window.partitionBy("cluster_id", "offset").orderBy("node_id")
    return rows.withColumn("copy", F.row_number().over(once)).where(F.col("copy") == 1).drop("copy")


def topic_names(log: DataFrame) -> DataFrame:
    """(cluster_id, topic_id, topic): the name each TopicRecord of the log gives its topic id."""
    return log.where(F.col("record_type") == "TopicRecord").select(
        "cluster_id", F.col("record.TopicRecord.topic_id").alias("topic_id"), F.col("record.TopicRecord.name").alias("topic")
    )
