"""The SparkSession the pipeline runs in: `local[*]` unless a master is given.

Spark's Python workers must run the same interpreter as the driver (the one kraftwerk is installed
in), or they cannot import `kraft_pipeline`; the session says so through PYSPARK_PYTHON.

The JVMs run with HotSpot's first JIT tier only (`-XX:TieredStopAtLevel=1`, with the tiered
default code cache of 240 MB). The job is many short queries, each with its own generated
classes: with the default tiers C2's compiler threads spent more CPU than all of the job's tasks
(32.7 of 70 JVM CPU seconds on a 10k-partition cluster's log, against 12.0 in tasks); with C1
alone they spend 2.9 and the tasks 13.0. It applies where the session starts the JVM (local mode)
and to a cluster's executors.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from kraft_pipeline.data_source import register

__all__ = ["DEFAULT_MASTER", "JAVA_OPTIONS", "build_session"]

DEFAULT_MASTER = "local[*]"
# C1 alone gets the non-tiered default code cache (48 MB), which one JVM running several sessions'
# queries fills (HotSpot then stops compiling at all): the tiered default size instead.
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def build_session(
    *,
    master: str | None = None,
    app_name: str = "kraftwerk-pipeline",
    shuffle_partitions: int = 8,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The session (an existing one if this process has one running); `conf` adds Spark settings
    (executor memory and cores for a cluster, say), and may override the ones set here."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Loopback unless told otherwise: a laptop's or CI machine's hostname may resolve anywhere.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        # The derived tables are small beside the input; no need to broadcast-tune them.
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", JAVA_OPTIONS)
        .config("spark.executor.extraJavaOptions", JAVA_OPTIONS)
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
