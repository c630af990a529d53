"""The SparkSession the pipeline runs in: `local[*]` unless a master is given.

Spark's Python workers must run the same interpreter as the driver (the one kraftwerk is installed
in), or they cannot import `kraft_pipeline`; the session says so through PYSPARK_PYTHON.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from kraft_pipeline.data_source import register

__all__ = ["DEFAULT_MASTER", "build_session"]

DEFAULT_MASTER = "local[*]"


def build_session(
    *, master: str | None = None, app_name: str = "kraftwerk-pipeline", shuffle_partitions: int = 8
) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Loopback unless told otherwise: a laptop's or CI machine's hostname may resolve anywhere.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        # The derived tables are small beside the input; no need to broadcast-tune them.
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
