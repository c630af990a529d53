"""The pipeline on inputs (and an output) named by Hadoop filesystem URIs rather than local paths.

Two of the filesystems Spark's own Hadoop client ships, no stand-in:
- a `file:` URI: Hadoop's LocalFileSystem;
- a `viewfs://` URI: Hadoop's ViewFileSystem, whose mount table (set in the session's Hadoop
  configuration, as a site would set it in core-site.xml) links `/logs` to the fleet's directory
  and `/out` to another. A `viewfs://` path is nothing a local reader could open, so rows read from
  it went through Hadoop: found by the driver JVM's FileSystem, read on the executors by Spark's
  `binaryFile` source.

The fleet is two clusters (fleets.whole_and_torn: every kind of event; a copy with a torn tail),
so problem rows, passing and failing checks are all compared. Each URI gives what the local path
gives, with the files named by their URI; a URI that names nothing is a clear error.
"""

from __future__ import annotations

import io
import secrets
from pathlib import Path
from typing import Any

import pytest
from fleets import whole_and_torn
from pyspark.sql import SparkSession

from kraft_operator.cli import main as kraftwerk_main
from kraft_pipeline.job import REPORT_NAME, TABLES, read_records, run

pytestmark = [pytest.mark.timeout(1200)]


def mount(spark: SparkSession, links: dict[str, Path]) -> str:
    """A ViewFileSystem mount table of its own (a fresh name: Hadoop caches a FileSystem per
    authority) linking each `/name` to a local directory; its `viewfs://` root."""
    name = f"kraftfleet{secrets.token_hex(4)}"
    conf: Any = spark.sparkContext._jsc.hadoopConfiguration()
    for link, target in links.items():
        target.mkdir(parents=True, exist_ok=True)
        conf.set(f"fs.viewfs.mounttable.{name}.link./{link}", target.resolve().as_uri())
    return f"viewfs://{name}"


def normalised(value: Any, roots: dict[str, str]) -> Any:
    """`value` with each root (a path or URI prefix) in its strings replaced by its label."""
    if isinstance(value, str):
        for root, label in roots.items():
            value = value.replace(root, label)
        return value
    if isinstance(value, dict):
        return {k: normalised(v, roots) for k, v in value.items()}
    if isinstance(value, list):
        return [normalised(v, roots) for v in value]
    return value


def rows(spark: SparkSession, path: str, roots: dict[str, str]) -> list[str]:
    """A table's rows, the partition column included, as sorted text with the roots replaced."""
    frame = spark.read.parquet(path)
    return sorted(repr(sorted(normalised(r.asDict(recursive=True), roots).items())) for r in frame.collect())


def test_a_file_uri_reads_the_rows_a_local_path_reads(spark: SparkSession, tmp_path: Path) -> None:
    fleet = whole_and_torn(tmp_path / "fleet").resolve()
    local = read_records(spark, [str(fleet)]).collect()
    through_hadoop = read_records(spark, [fleet.as_uri()]).collect()
    files = {r["file"] for r in through_hadoop}
    assert files and all(f.startswith(f"file:{fleet}/") for f in files), files
    assert len(files) == 6  # three nodes of each cluster, one segment each
    roots = {f"file:{fleet}": "<fleet>", str(fleet): "<fleet>"}
    assert sorted(repr(sorted(normalised(r.asDict(recursive=True), roots).items())) for r in through_hadoop) == sorted(
        repr(sorted(normalised(r.asDict(recursive=True), roots).items())) for r in local)
    assert [r for r in through_hadoop if r["problem"] is not None], "the torn tail is a problem row"


def test_a_viewfs_run_writes_what_the_local_run_writes(spark: SparkSession, tmp_path: Path) -> None:
    fleet = whole_and_torn(tmp_path / "fleet").resolve()
    root = mount(spark, {"logs": fleet, "out": tmp_path / "viewfs-out"})

    local_out = tmp_path / "local-out"
    run(inputs=[str(fleet)], output=str(local_out), spark=spark)
    tables = run(inputs=[f"{root}/logs"], output=f"{root}/out/tables", spark=spark)

    problems = tables.problems.collect()
    assert problems and all(p["file"].startswith(f"{root}/logs/torn/node-3/") for p in problems), problems
    read = {r["file"] for r in tables.records.select("file").distinct().collect()}
    assert len(read) == 6 and all(f.startswith(f"{root}/logs/") for f in read), read

    roots = {f"{root}/logs": "<fleet>", str(fleet): "<fleet>"}
    written = tmp_path / "viewfs-out" / "tables"  # where the mount table's /out leads
    for name in TABLES:
        assert rows(spark, str(written / name), roots) == rows(spark, str(local_out / name), roots), name
    # the same page, but for the file names in the problems it quotes
    report = (written / REPORT_NAME).read_text()
    assert f"{root}/logs/torn/node-3/" in report
    assert normalised(report, roots) == normalised((local_out / REPORT_NAME).read_text(), roots)


def test_a_uri_that_names_nothing_is_a_clear_error(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = mount(spark, {"logs": tmp_path / "empty"})
    output = tmp_path / "out"
    missing = f"{root}/logs/no-such-node"
    assert kraftwerk_main(["pipeline", "run", "--input", missing, "--output", str(output)], out=io.StringIO()) == 1
    assert f"Error: {missing}: no such file or directory" in capsys.readouterr().err
    assert not output.exists()
