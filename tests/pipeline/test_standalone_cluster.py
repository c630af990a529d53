"""The same job on a real Spark standalone cluster gives the same output as local mode.

A master and two one-core workers are started on loopback from the PySpark distribution's own
launch classes (`spark-class org.apache.spark.deploy.master.Master` and `...worker.Worker`), as
`sbin/start-master.sh` and `start-worker.sh` would (`kraft_pipeline.standalone`). `kraftwerk pipeline run --master spark://...`
runs in a fresh process (its driver, the workers' executors and their Python workers are all
separate processes), and every table and the report are compared with the same input run in local
mode. The input is two clusters: the hand-built log that walks through every kind of event, on
three nodes, and a copy of it whose third node has a torn tail (problem rows, failed checks), so
every table has rows from more than one task.

The machine this runs on is small and shared: executors of 512 MiB, and every Spark timeout that
could declare a slow process dead raised to minutes.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleets import TORN_CLUSTER_ID, WHOLE_CLUSTER_ID, whole_and_torn
from pyspark.sql import SparkSession

from kraft_pipeline.job import REPORT_NAME, TABLES, run
from kraft_pipeline.standalone import PATIENCE, StandaloneCluster

pytestmark = [pytest.mark.process, pytest.mark.timeout(1800)]

@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return whole_and_torn(Path(tmp_path_factory.mktemp("standalone-input")))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    standalone = StandaloneCluster(Path(tmp_path_factory.mktemp("spark-standalone")), workers=2)
    try:
        standalone.start()
        standalone.wait_alive(timeout_s=180)
        yield standalone
    finally:
        standalone.stop()


def rows(spark: SparkSession, path: Path) -> list[str]:
    """A table's rows as sorted text (every column, the partition column included)."""
    if not any(path.rglob("*.parquet")):
        return []
    frame = spark.read.parquet(str(path))
    return sorted(repr(sorted(r.asDict(recursive=True).items())) for r in frame.collect())


def test_the_standalone_cluster_writes_what_local_mode_writes(
    fleet: Path, cluster: StandaloneCluster, spark: SparkSession, tmp_path: Path
) -> None:
    local = tmp_path / "local"
    run(inputs=[str(fleet)], output=str(local), spark=spark)

    standalone = tmp_path / "standalone"
    submit = " ".join(f"--conf {k}={v}" for k, v in {
        **PATIENCE, "spark.executor.memory": "512m", "spark.driver.memory": "512m", "spark.executor.cores": "1",
    }.items())
    done = subprocess.run(
        [str(Path(sys.executable).parent / "kraftwerk"), "pipeline", "run", "--master", cluster.url,
         "--input", str(fleet), "--output", str(standalone)],
        env={**cluster.env, "PYSPARK_SUBMIT_ARGS": f"{submit} pyspark-shell"},
        capture_output=True, text=True, timeout=1500, check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    assert "[FAIL]" in done.stdout and "[PASS]" in done.stdout  # the torn copy fails, the whole one passes

    # Both workers ran executors for the job: it was not done in the driver or on one worker alone.
    executors = [d for d in cluster.root.glob("work-*/app-*/*") if d.is_dir()]
    assert {d.parts[-3] for d in executors} == {"work-0", "work-1"}, executors

    for name in TABLES:
        got, want = rows(spark, standalone / name), rows(spark, local / name)
        assert got == want, name
    assert rows(spark, local / "problems"), "the torn tail is a problem row"
    assert {p.name for p in (local / "events").iterdir() if p.is_dir()} == {
        f"cluster_id={WHOLE_CLUSTER_ID}", f"cluster_id={TORN_CLUSTER_ID}"}
    assert (standalone / REPORT_NAME).read_bytes() == (local / REPORT_NAME).read_bytes()
