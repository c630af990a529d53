"""The format Job's program for an Apache Kafka node: Kafka's own StorageTool formats the node's
log directories, and the termination message reports each directory's id and the cluster id, as
it does for the engine. Runs Kafka 4.1's jars (skipped without them, see `scripts/fetch-kafka-jars`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.storage.java_properties import format_properties
from kraft_engine.storage.meta_properties import read_meta_properties
from kraft_operator.runtime.local import kafka_classpath

FOUND = kafka_classpath()
pytestmark = pytest.mark.skipif(FOUND is None, reason="Kafka jars not cached (scripts/fetch-kafka-jars) or no java")
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def _broker_config(tmp_path: Path) -> tuple[Path, list[Path]]:
    dirs = [tmp_path / "data-0", tmp_path / "data-1"]
    config = tmp_path / "server.properties"
    config.write_text(format_properties({
        "process.roles": "broker", "node.id": "3", "controller.listener.names": "CONTROLLER",
        "listeners": "PLAINTEXT://127.0.0.1:19092", "advertised.listeners": "PLAINTEXT://127.0.0.1:19092",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT", "controller.quorum.bootstrap.servers": "127.0.0.1:19093",
        "log.dirs": ",".join(map(str, dirs)), "metadata.log.dir": str(dirs[0]),
    }), encoding="utf-8")
    return config, dirs


def _format_job(tmp_path: Path, *format_args: str) -> tuple[int, dict[str, object]]:
    assert FOUND is not None
    log = tmp_path / "termination-log"
    done = subprocess.run(
        [sys.executable, "-m", "kraft_operator.runtime.format_job", "--termination-log", str(log),
         "--kafka-classpath", FOUND[0], "--", *format_args],
        capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, json.loads(log.read_text())


def test_kafkas_storage_tool_formats_every_log_dir_and_the_job_reports_their_ids(tmp_path: Path) -> None:
    config, dirs = _broker_config(tmp_path)
    code, report = _format_job(tmp_path, "format", "--config", str(config), "--cluster-id", CLUSTER_ID,
                               "--release-version", "4.1-IV1")
    assert code == 0, report
    metas = [read_meta_properties(d) for d in dirs]
    assert all(m.cluster_id == CLUSTER_ID and m.node_id == 3 and m.directory_id is not None for m in metas)
    assert report == {"clusterId": CLUSTER_ID,
                      "directoryIds": {str(d): to_kafka_str(m.directory_id) for d, m in zip(dirs, metas, strict=True)
                                       if m.directory_id is not None}}
    # formatted directories are Kafka's: its bootstrap checkpoint sits in the metadata directory
    assert (dirs[0] / "bootstrap.checkpoint").is_file()

    # re-run with --ignore-formatted (what the plan passes once a directory is formatted): nothing
    # is rewritten, the same ids are reported again
    again, second = _format_job(tmp_path, "format", "--config", str(config), "--cluster-id", CLUSTER_ID,
                                "--release-version", "4.1-IV1", "--ignore-formatted")
    assert again == 0 and second == report


def test_a_refused_format_is_reported_as_the_jobs_error_and_formats_nothing(tmp_path: Path) -> None:
    config, dirs = _broker_config(tmp_path)
    code, report = _format_job(tmp_path, "format", "--config", str(config), "--cluster-id", CLUSTER_ID,
                               "--release-version", "not-a-version")
    assert code != 0
    assert report["error"] == f"kafka.tools.StorageTool format exited {code}"
    assert report["directoryIds"] == {} and report["clusterId"] is None
    assert not any((d / "meta.properties").exists() for d in dirs)
