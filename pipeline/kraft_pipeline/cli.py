"""`kraftwerk pipeline run --input PATH... --output DIR [--master URL]`.

The subcommand is registered into the `kraftwerk` command by the operator's CLI; it imports
PySpark only when it runs, so `kraftwerk` itself starts as fast as before. The job runs with
`local[*]` unless `--master` names another Spark master (standalone `spark://host:port`, `k8s://`,
`yarn`). Inputs and output may be local paths or Hadoop filesystem URIs. It prints where each table went and the DR checks, and exits 0 whether or not checks fail
(a failed check is a finding about the input, not an error of the job); 1 when it cannot run.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

__all__ = ["register"]


def register(subparsers: Any) -> None:
    pipeline = subparsers.add_parser("pipeline", help="the PySpark pipeline over metadata logs")
    verbs = pipeline.add_subparsers(dest="pipeline_command", metavar="VERB")
    verbs.required = True
    run = verbs.add_parser(
        "run",
        help="derive events, partition history, URP history and DR checks from metadata logs",
        description="Read every __cluster_metadata-0 directory under the inputs (node dirs, log dirs or "
        "any directory above them) and write the derived tables as Parquet partitioned by cluster_id.",
    )
    run.add_argument("--input", nargs="+", action="extend", required=True, metavar="PATH",
                     help="node directories, log dirs or any directory above them (repeatable): local "
                          "paths, or URIs of any Hadoop filesystem Spark is configured for (file:, hdfs://, "
                          "viewfs://, ...)")
    run.add_argument("--output", required=True, metavar="DIR",
                     help="where the tables are written (a local path or a Hadoop filesystem URI)")
    run.add_argument("--master", default=None,
                     help="the Spark master (default local[*]; spark://host:port for a standalone cluster)")
    run.set_defaults(func=_run)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from kraft_pipeline.job import REPORT_NAME, TABLES, run
    from kraft_pipeline.session import DEFAULT_MASTER

    try:
        tables = run(inputs=args.input, output=args.output, master=args.master or DEFAULT_MASTER)
    except FileNotFoundError as e:  # an input URI that names nothing
        print(f"Error: {e}", file=sys.stderr)
        return 1
    for name in TABLES:
        print(f"{name}: {args.output.rstrip('/')}/{name}", file=out)
    print(f"report: {args.output.rstrip('/')}/{REPORT_NAME}", file=out)
    checks = tables.dr_checks.orderBy("cluster_id", "check", "subject").collect()
    for row in checks:
        print(f"[{row['status'].upper()}] {row['cluster_id']} {row['check']} ({row['subject']}): {row['evidence']}",
              file=out)
    problems = tables.problems.count()
    print(f"{problems} problem row(s) in the input" if problems else "no problems in the input", file=out)
    return 0
