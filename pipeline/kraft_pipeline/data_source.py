"""`spark.read.format("kraft-metadata").load(paths)`: metadata logs as a DataFrame.

Built on PySpark's Python Data Source API (pyspark >= 4.0). The driver lists the files (one input
partition per segment or snapshot, so a fleet's files spread over every executor core), and each
task decodes its file with the engine's read-only reader and record decoders, yielding Arrow
record batches rather than Python rows. The columns are `log_files.ROW_SCHEMA`; damaged input shows
up as rows with `problem` set, never as a failed task.

Register once per session with `register(spark)`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

__all__ = ["FORMAT_NAME", "KRaftMetadataDataSource", "register", "spark_schema"]

FORMAT_NAME = "kraft-metadata"


def spark_schema() -> StructType:
    from kraft_pipeline.log_files import ROW_SCHEMA

    schema: StructType = from_arrow_schema(ROW_SCHEMA)
    return schema


def _paths(options: dict[str, str]) -> list[str]:
    if "paths" in options:
        paths = json.loads(options["paths"])
        return [str(p) for p in paths]
    if "path" in options:
        return [options["path"]]
    raise ValueError("kraft-metadata needs one or more paths: spark.read.format('kraft-metadata').load(paths)")


class _Reader(DataSourceReader):
    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def partitions(self) -> list[InputPartition]:
        from kraft_pipeline.log_files import find_log_files

        # A segment's copies on the cluster's nodes one after another: a worker that decoded a
        # batch decodes its copy's identical bytes no more (log_files._DecodedBatches).
        files = sorted(find_log_files(self.paths), key=lambda f: (f.cluster_id, os.path.basename(f.path), f.node_id))
        return [InputPartition(file) for file in files]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # Imported here: this runs in the executor's Python worker.
        from kraft_pipeline.log_files import LogFile, decode_file

        file = getattr(partition, "value", None)
        if not isinstance(file, LogFile):
            raise TypeError(f"kraft-metadata cannot read a {type(partition).__name__}")
        yield from decode_file(file)


class KRaftMetadataDataSource(DataSource):
    """The `kraft-metadata` format: segments and snapshots of `__cluster_metadata-0` directories."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(_paths(dict(self.options)))


def register(spark: SparkSession) -> None:
    spark.dataSource.register(KRaftMetadataDataSource)
