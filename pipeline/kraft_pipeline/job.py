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
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from kraft_pipeline.canonical_log import canonical_log, good_rows, problem_rows
from kraft_pipeline.data_source import FORMAT_NAME
from kraft_pipeline.dr_checks import dr_checks
from kraft_pipeline.events import events
from kraft_pipeline.partition_history import partition_history
from kraft_pipeline.session import build_session
from kraft_pipeline.urp_history import partition_states, urp_history, urp_partition_totals

__all__ = ["REPORT_NAME", "TABLES", "Tables", "derive", "run"]

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


def derive(spark: SparkSession, inputs: Sequence[str]) -> Tables:
    """Every derived table of the logs under `inputs`, as lazy DataFrames."""
    records = spark.read.format(FORMAT_NAME).load(list(inputs)).cache()
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


def run(*, inputs: Sequence[str], output: str, master: str | None = None, spark: SparkSession | None = None) -> Tables:
    """Derive and write every table under `output` (replacing an earlier run's tables).

    Each table is computed once, here: the writer, the report and the caller (the CLI prints the
    checks) all read the same materialised rows, not three evaluations of the same plan."""
    session = spark if spark is not None else build_session(master=master)
    derived = derive(session, inputs)
    tables = dataclasses.replace(
        derived, **{name: derived.table(name).localCheckpoint(eager=True) for name in TABLES}
    )
    for name in TABLES:
        tables.table(name).write.mode("overwrite").partitionBy("cluster_id").parquet(f"{output.rstrip('/')}/{name}")
    from kraft_pipeline.report import render_report

    _write_text(f"{output.rstrip('/')}/{REPORT_NAME}", render_report(tables))
    return tables


def _write_text(uri: str, text: str) -> None:
    """Beside the tables, on whatever filesystem they went to (local paths and Arrow's URIs)."""
    import pyarrow.fs

    if "://" in uri:
        filesystem, path = pyarrow.fs.FileSystem.from_uri(uri)
    else:
        filesystem, path = pyarrow.fs.LocalFileSystem(), os.path.abspath(uri)
    with filesystem.open_output_stream(path) as out:
        out.write(text.encode("utf-8"))
