"""Metadata logs behind a Hadoop filesystem URI: `file:`, `hdfs://`, `viewfs://`, `s3a://` or any
other scheme the Spark session's Hadoop configuration knows.

The `kraft-metadata` source reads local paths in its Python workers, which have no JVM and so no
Hadoop FileSystem (reading one from Python would need libhdfs, which Spark does not ship). A URI
therefore takes Spark's own route through Hadoop instead:

- discovery on the driver, through the driver JVM's Hadoop `FileSystem` for the URI: the same
  rules as for local paths (a node's `__cluster_metadata-0` directory, the log dir holding it, a
  single segment or snapshot, or any directory above them), with cluster and node from the
  `meta.properties` beside each partition directory, read through the same FileSystem;
- reading on the executors, by Spark's `binaryFile` source (one row per file, read through Hadoop
  on whichever executor runs the task), decoded by the same per-file decoder as the data source
  (`log_files.decode_bytes`) into the same rows.

A file is read whole into one row, so a file of 2 GiB or more cannot be read this way (Spark's
`binaryFile` limit; metadata log segments are far smaller by default only for our nodes, Kafka's
roll at `metadata.log.segment.bytes`, 1 GiB).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from kraft_engine.storage.log_file_reader import classify_log_file
from kraft_engine.storage.meta_properties import META_PROPERTIES_FILE_NAME
from kraft_pipeline.log_files import (
    METADATA_PARTITION_DIR,
    UNKNOWN_CLUSTER_ID,
    UNKNOWN_NODE_ID,
    LogFile,
    decode_bytes,
    identity_of,
)

__all__ = ["find_hadoop_log_files", "is_uri", "read_hadoop_log_files", "write_hadoop_text"]


def is_uri(path: str) -> bool:
    """A path with a scheme (`file:/x`, `viewfs://a/x`): read through Hadoop. A plain path is local."""
    return len(urlsplit(path).scheme) > 1  # not a Windows drive letter


class _HadoopFs:
    """The driver JVM's Hadoop FileSystem for one URI, called over py4j."""

    def __init__(self, spark: SparkSession, uri: str) -> None:
        jvm: Any = spark._jvm
        self.jvm = jvm
        self.path = jvm.org.apache.hadoop.fs.Path(uri)
        self.fs = self.path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def status(self) -> Any:
        if not self.fs.exists(self.path):
            raise FileNotFoundError(f"{self.path.toString()}: no such file or directory")
        return self.fs.getFileStatus(self.path)

    def children(self, directory: Any) -> list[Any]:
        return sorted(self.fs.listStatus(directory), key=lambda s: s.getPath().getName())

    def read(self, path: Any) -> bytes | None:
        if not self.fs.exists(path):
            return None
        stream = self.fs.open(path)
        try:
            return bytes(self.jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def identity(self, log_dir: Any) -> tuple[str, int, str | None]:
        try:
            raw = self.read(self.jvm.org.apache.hadoop.fs.Path(log_dir, META_PROPERTIES_FILE_NAME))
        except Exception as e:  # py4j's error from the JVM: the file is there but cannot be read
            return UNKNOWN_CLUSTER_ID, UNKNOWN_NODE_ID, f"{log_dir.toString()}: cannot read: {e}"
        return identity_of(raw, log_dir=log_dir.toString())

    def partition_dirs(self, top: Any) -> Iterator[Any]:
        if top.getPath().getName() == METADATA_PARTITION_DIR:
            yield top.getPath()
            return
        stack = [top]
        while stack:
            directory = stack.pop()
            below = [c for c in self.children(directory.getPath()) if c.isDirectory()]
            for child in below:
                if child.getPath().getName() == METADATA_PARTITION_DIR:
                    yield child.getPath()
            stack.extend(reversed([c for c in below if c.getPath().getName() != METADATA_PARTITION_DIR]))


def find_hadoop_log_files(spark: SparkSession, uris: Sequence[str]) -> list[LogFile]:
    """Every segment and snapshot under `uris`, in (cluster, node, file) order, each file once,
    named by its Hadoop path (what Spark's `binaryFile` source calls it). A URI that names nothing
    is an error (FileNotFoundError) before any work starts."""
    found: dict[str, LogFile] = {}
    for uri in uris:
        hadoop = _HadoopFs(spark, uri)
        top = hadoop.status()
        if top.isFile():
            path = top.getPath()
            if classify_log_file(path.getName()) is not None:
                cluster_id, node_id, problem = hadoop.identity(path.getParent().getParent())
                found[path.toString()] = LogFile(path.toString(), cluster_id, node_id, problem)
            continue
        for partition_dir in hadoop.partition_dirs(top):
            cluster_id, node_id, problem = hadoop.identity(partition_dir.getParent())
            for child in hadoop.children(partition_dir):
                if child.isFile() and classify_log_file(child.getPath().getName()) is not None:
                    name = child.getPath().toString()
                    found[name] = LogFile(name, cluster_id, node_id, problem)
    return sorted(found.values(), key=lambda f: (f.cluster_id, f.node_id, f.path))


def read_hadoop_log_files(spark: SparkSession, files: Sequence[LogFile], schema: Any) -> DataFrame:
    """The rows of `files` (found by `find_hadoop_log_files`), read on the executors through
    Hadoop by Spark's `binaryFile` source; `schema` is the data source's (the same rows)."""
    if not files:
        return spark.createDataFrame([], schema)
    by_path = {f.path: f for f in files}

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for path, content in zip(batch.column("path").to_pylist(), batch.column("content").to_pylist(),
                                     strict=True):
                file = by_path.get(path) or LogFile(path, UNKNOWN_CLUSTER_ID, UNKNOWN_NODE_ID,
                                                    "Spark read a file that discovery did not find")
                yield from decode_bytes(file, content)

    # recursiveFileLookup: the files are named one by one; it only turns off partition inference,
    # which would take a `key=value` directory above a node for a table partition.
    raw = spark.read.format("binaryFile").option("recursiveFileLookup", "true").load([f.path for f in files])
    frame: DataFrame = raw.select("path", "content").mapInArrow(decode, schema)
    return frame


def write_hadoop_text(spark: SparkSession, *, path: str, text: str) -> None:
    """`text` as the file `path` (replaced if there), through the Hadoop FileSystem Spark's writers
    use for the same path (a plain path on Hadoop's default filesystem, as Spark resolves it)."""
    hadoop = _HadoopFs(spark, path)
    stream = hadoop.fs.create(hadoop.path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()
