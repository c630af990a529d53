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
    """The segment rows of each cluster's log, one per offset, from the majority's copy.

    The choice is made on the batches (one row per node's copy of each), which are few beside the
    records, and sent to every task (a broadcast join): the records are filtered where they lie,
    never shuffled with their typed structs."""
    segments = good.where(F.col("file_kind") == "segment")
    votes = (
        segments.select("cluster_id", "batch_base_offset", "batch_last_offset", "batch_sha256", "node_id")
        .distinct()
        .groupBy("cluster_id", "batch_base_offset", "batch_last_offset", "batch_sha256")
        .agg(F.count("*").alias("holders"), F.min("node_id").alias("node_id"))
    )
    ranked = Window.partitionBy("cluster_id", "batch_base_offset").orderBy(F.desc("holders"), "node_id")
    chosen = votes.withColumn("rank", F.row_number().over(ranked)).where(F.col("rank") == 1).drop("rank", "holders")
    # Batches of different boundaries at the same offsets (never in one raft log, but cheap to rule
    # out): an offset two chosen batches cover is taken from the lower node id's (then the lower
    # base offset's). Only batches that overlap another are compared with each other.
    by_base = Window.partitionBy("cluster_id").orderBy("batch_base_offset")
    before = by_base.rowsBetween(Window.unboundedPreceding, -1)
    overlapping = (F.max("batch_last_offset").over(before) >= F.col("batch_base_offset")) | (
        F.lead("batch_base_offset").over(by_base) <= F.col("batch_last_offset")
    )
    flagged = chosen.withColumn("overlapping", F.coalesce(overlapping, F.lit(False)))
    crossing = flagged.where("overlapping")
    a, b = crossing.alias("a"), crossing.alias("b")
    earlier = (F.col("b.node_id") < F.col("a.node_id")) | (
        (F.col("b.node_id") == F.col("a.node_id")) & (F.col("b.batch_base_offset") < F.col("a.batch_base_offset"))
    )
    covered = (
        a.join(
            b,
            (F.col("a.cluster_id") == F.col("b.cluster_id"))
            & (F.col("b.batch_base_offset") <= F.col("a.batch_last_offset"))
            & (F.col("b.batch_last_offset") >= F.col("a.batch_base_offset"))
            & earlier,
        )
        .groupBy("a.cluster_id", "a.batch_base_offset", "a.batch_sha256", "a.node_id")
        .agg(F.collect_list(F.struct(F.col("b.batch_base_offset").alias("low"), F.col("b.batch_last_offset").alias("high")))
             .alias("covered"))
    )
    keys = ["cluster_id", "batch_base_offset", "batch_sha256", "node_id"]
    picks = flagged.select(*keys).join(covered, keys, "left")
    rows = segments.join(F.broadcast(picks), keys)
    taken = F.col("covered").isNotNull() & F.exists("covered", lambda r: F.col("offset").between(r["low"], r["high"]))
    return rows.where(~taken).drop("covered")


def topic_names(log: DataFrame) -> DataFrame:
    """(cluster_id, topic_id, topic): the name each TopicRecord of the log gives its topic id."""
    return log.where(F.col("record_type") == "TopicRecord").select(
        "cluster_id", F.col("record.TopicRecord.topic_id").alias("topic_id"), F.col("record.TopicRecord.name").alias("topic")
    )
