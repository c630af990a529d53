"""The pipeline job: read every metadata log under the inputs, write the derived tables.

`kraftwerk pipeline run --input PATH... --output DIR` calls `run`. Each table is Parquet,
partitioned by `cluster_id`, written by Spark's own writer into `DIR/<table>/`:

    problems             damaged input: file, byte position, offset, what is wrong, the bytes
    events               the lifecycle timeline (events.py)
    partition_history    per partition intervals of leader, ISR, replicas, epochs
    urp_history          per cluster counts of under-replicated, under-min-ISR, offline partitions
    urp_partition_totals per partition time spent in each of those states
    dr_checks            pass/fail checks with evidence (dr_checks.py)

and `DIR/report.html`, the self-contained report (report.py).

Inputs are local paths (read by the `kraft-metadata` source) or Hadoop filesystem URIs (`file:`,
`hdfs://`, `viewfs://`, ...: found and read through Spark's Hadoop FileSystem, hadoop_files.py),
or both; the output may be either too (the tables by Spark's writers, the report through the
same Hadoop FileSystem).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from kraft_pipeline.canonical_log import canonical_log, good_rows, problem_rows
from kraft_pipeline.data_source import FORMAT_NAME, spark_schema
from kraft_pipeline.dr_checks import dr_checks
from kraft_pipeline.events import events
from kraft_pipeline.hadoop_files import (
    find_hadoop_log_files,
    is_uri,
    read_hadoop_log_files,
    write_hadoop_text,
)
from kraft_pipeline.partition_history import partition_history
from kraft_pipeline.session import build_session
from kraft_pipeline.urp_history import partition_states, urp_history, urp_partition_totals

__all__ = ["REPORT_NAME", "TABLES", "Tables", "derive", "read_records", "run"]

REPORT_NAME = "report.html"
TABLES = ("problems", "events", "partition_history", "urp_history", "urp_partition_totals", "dr_checks")


@dataclass(frozen=True, slots=True)
class Tables:
    records: DataFrame
    problems: DataFrame
    log: DataFrame
    events: DataFrame
    partition_history: DataFrame
    urp_history: DataFrame
    urp_partition_totals: DataFrame
    dr_checks: DataFrame

    def table(self, name: str) -> DataFrame:
        frame: DataFrame = getattr(self, name)
        return frame


def read_records(spark: SparkSession, inputs: Sequence[str]) -> DataFrame:
    """The rows of every log file under `inputs`: local paths through the `kraft-metadata` source,
    URIs through Hadoop (a URI that names nothing is an error here, before any work)."""
    uris = [i for i in inputs if is_uri(i)]
    local = [i for i in inputs if not is_uri(i)]
    frames = []
    if local or not uris:
        frames.append(spark.read.format(FORMAT_NAME).load(local))
    if uris:
        frames.append(read_hadoop_log_files(spark, find_hadoop_log_files(spark, uris), spark_schema()))
    records = frames[0]
    for frame in frames[1:]:
        records = records.unionByName(frame)
    return records


def derive(spark: SparkSession, inputs: Sequence[str]) -> Tables:
    """Every derived table of the logs under `inputs`, as lazy DataFrames."""
    records = read_records(spark, inputs).cache()
    log = canonical_log(good_rows(records)).cache()
    history = partition_history(log).cache()
    states = partition_states(history, log).cache()  # both URP tables start from it
    return Tables(
        records=records,
        problems=problem_rows(records),
        log=log,
        events=events(log, history),
        partition_history=history,
        urp_history=urp_history(states),
        urp_partition_totals=urp_partition_totals(states, log),
        dr_checks=dr_checks(records, log),
    )


def run(
    *,
    inputs: Sequence[str],
    output: str,
    master: str | None = None,
    spark: SparkSession | None = None,
    progress: Callable[[str], None] | None = None,
) -> Tables:
    """Derive and write every table under `output` (replacing an earlier run's tables).

    Each table is computed once, here: the writer, the report and the caller (the CLI prints the
    checks) all read the same materialised rows, not three evaluations of the same plan.
    `progress`, when given, hears the name of each table once it is computed, then of each
    written, then "report": how far a long run has got."""
    session = spark if spark is not None else build_session(master=master)
    derived = derive(session, inputs)
    computed = {}
    for name in TABLES:
        computed[name] = derived.table(name).localCheckpoint(eager=True)
        if progress is not None:
            progress(f"computed {name}")
    tables = dataclasses.replace(derived, **computed)
    for name in TABLES:
        tables.table(name).write.mode("overwrite").partitionBy("cluster_id").parquet(f"{output.rstrip('/')}/{name}")
        if progress is not None:
            progress(f"written {name}")
    from kraft_pipeline.report import render_report

    write_hadoop_text(session, path=f"{output.rstrip('/')}/{REPORT_NAME}", text=render_report(tables))
    if progress is not None:
        progress("report")
    return tables
