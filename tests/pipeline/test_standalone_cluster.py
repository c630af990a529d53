"""The same job on a real Spark standalone cluster gives the same output as local mode.

A master and two one-core workers are started on loopback from the PySpark distribution's own
launch classes (`spark-class org.apache.spark.deploy.master.Master` and `...worker.Worker`), as
`sbin/start-master.sh` and `start-worker.sh` would. `kraftwerk pipeline run --master spark://...`
runs in a fresh process (its driver, the workers' executors and their Python workers are all
separate processes), and every table and the report are compared with the same input run in local
mode. The input is two clusters: the hand-built log that walks through every kind of event, on
three nodes, and a copy of it whose third node has a torn tail (problem rows, failed checks), so
every table has rows from more than one task.

The machine this runs on is small and shared: executors of 512 MiB, and every Spark timeout that
could declare a slow process dead raised to minutes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from fleets import TORN_CLUSTER_ID, WHOLE_CLUSTER_ID, whole_and_torn
from pyspark.sql import SparkSession
from quorum_processes import wait_for

from kraft_engine.loopback_ports import HOST, free_loopback_ports
from kraft_pipeline.job import REPORT_NAME, TABLES, run

pytestmark = [pytest.mark.process, pytest.mark.timeout(1800)]

SPARK_HOME = Path(pyspark.__file__).resolve().parent
# Nothing here may call a slow process dead: heartbeats and RPCs wait minutes on a loaded machine.
PATIENCE = {
    "spark.network.timeout": "600s",
    "spark.executor.heartbeatInterval": "60s",
    "spark.rpc.askTimeout": "600s",
    "spark.worker.timeout": "600",
}


def _java_options(conf: dict[str, str]) -> str:
    return " ".join(f"-D{k}={v}" for k, v in conf.items())


class Standalone:
    """A master and its workers, each a `spark-class` process in its own process group."""

    def __init__(self, root: Path, *, workers: int) -> None:
        self.root = root
        self.processes: list[subprocess.Popen[bytes]] = []
        self.port, self.ui_port, *self.worker_ui_ports = free_loopback_ports(2 + workers)
        self.url = f"spark://{HOST}:{self.port}"
        self.env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(root),
            "SPARK_MASTER_OPTS": _java_options(PATIENCE),
            "SPARK_WORKER_OPTS": _java_options(PATIENCE),
            "PYSPARK_PYTHON": sys.executable,
        }

    def _spark_class(self, name: str, *args: str) -> None:
        log = (self.root / f"{name}.log").open("wb")
        self.processes.append(subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        ))
        log.close()

    def start(self) -> None:
        self._spark_class("master", "org.apache.spark.deploy.master.Master", "--host", HOST,
                          "--port", str(self.port), "--webui-port", str(self.ui_port))
        for index, ui_port in enumerate(self.worker_ui_ports):
            work_dir = self.root / f"work-{index}"
            work_dir.mkdir()
            self._spark_class(f"worker-{index}", "org.apache.spark.deploy.worker.Worker", "--host", HOST,
                              "--cores", "1", "--memory", "1g", "--work-dir", str(work_dir),
                              "--webui-port", str(ui_port), self.url)

    def alive_workers(self) -> int | None:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.ui_port}/json/", timeout=10) as answer:
                state = json.load(answer)
        except OSError:
            return None
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def stop(self) -> None:
        for process in reversed(self.processes):  # workers first: each stops its executors
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=60)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return whole_and_torn(Path(tmp_path_factory.mktemp("standalone-input")))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    standalone = Standalone(Path(tmp_path_factory.mktemp("spark-standalone")), workers=2)
    try:
        standalone.start()
        wait_for(lambda: standalone.alive_workers() == 2 or None, timeout_s=180, interval_s=1,
                 what="two workers registered with the standalone master")
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
    fleet: Path, cluster: Standalone, spark: SparkSession, tmp_path: Path
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
