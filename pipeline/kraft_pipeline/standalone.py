"""A Spark standalone cluster on loopback, from the installed PySpark distribution's own launch
classes: `spark-class org.apache.spark.deploy.master.Master` and `...worker.Worker`, as Spark's
`sbin/start-master.sh` and `start-worker.sh` would start them, each in its own process group.

It exists so that the job can be run on a real cluster without installing Spark: the test that
compares the standalone cluster's output with local mode's, and the benchmark's figures at 1 and 2
executor cores, both start one. A production cluster has its own Spark installation and is given
to the job with `--master spark://host:port`.

Everything here is patient: on a small, loaded machine a heartbeat or an RPC can wait minutes, and
no timeout may declare a slow process dead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark

from kraft_engine.loopback_ports import HOST, free_loopback_ports

__all__ = ["PATIENCE", "SPARK_HOME", "StandaloneCluster"]

SPARK_HOME = Path(pyspark.__file__).resolve().parent
# Nothing may call a slow process dead: heartbeats and RPCs wait minutes on a loaded machine.
PATIENCE = {
    "spark.network.timeout": "600s",
    "spark.executor.heartbeatInterval": "60s",
    "spark.rpc.askTimeout": "600s",
    "spark.worker.timeout": "600",
}


def _java_options(conf: dict[str, str]) -> str:
    return " ".join(f"-D{k}={v}" for k, v in conf.items())


class StandaloneCluster:
    """A master and `workers` workers of `cores` cores and `memory` each, under `root` (logs and
    the workers' work dirs `work-<n>`)."""

    def __init__(self, root: Path, *, workers: int, cores: int = 1, memory: str = "1g") -> None:
        self.root = root
        self.cores = cores
        self.memory = memory
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
        with (self.root / f"{name}.log").open("wb") as log:
            self.processes.append(subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            ))

    def start(self) -> None:
        self._spark_class("master", "org.apache.spark.deploy.master.Master", "--host", HOST,
                          "--port", str(self.port), "--webui-port", str(self.ui_port))
        for index, ui_port in enumerate(self.worker_ui_ports):
            work_dir = self.root / f"work-{index}"
            work_dir.mkdir()
            self._spark_class(f"worker-{index}", "org.apache.spark.deploy.worker.Worker", "--host", HOST,
                              "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work_dir),
                              "--webui-port", str(ui_port), self.url)

    def alive_workers(self) -> int | None:
        """How many workers the master's JSON lists as ALIVE; None while the master does not answer."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.ui_port}/json/", timeout=10) as answer:
                state = json.load(answer)
        except OSError:
            return None
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def wait_alive(self, *, timeout_s: float) -> None:
        """Until every worker has registered with the master (RuntimeError after `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while self.alive_workers() != len(self.worker_ui_ports):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(self.worker_ui_ports)} worker(s) not ALIVE at {self.url} "
                                   f"after {timeout_s} s (logs in {self.root})")
            time.sleep(1)

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
