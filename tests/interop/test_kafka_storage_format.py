"""`kraft storage format` writes the bootstrap records Apache Kafka's `kafka-storage format` writes.

Both tools format the same node (same cluster id, same --initial-controllers) for a release, with
and without `--feature` overrides, and both bootstrap checkpoints are decoded record by record.
They hold the same records, Kafka's default feature levels for the release included.
`version-mapping` and `feature-dependencies` print the same text. Skips without the jars or a JDK.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from kio.schema.snapshot_footer_record.v0 import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0 import SnapshotHeaderRecord

from kraft_engine.cli.main import main
from kraft_engine.records import FeatureLevelRecord, decode_metadata_record
from kraft_engine.records.log_batch import parse_batches
from kraft_engine.storage.formatter import BOOTSTRAP_SNAPSHOT_NAME, CLUSTER_METADATA_DIR_NAME

from .kafka_jars import CLASSPATH, needs_jars

pytestmark = pytest.mark.kafka_jars

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
INITIAL = "1@localhost:19093:JEXY6aqzQY-32P5TStzaFg,2@localhost:19094:MvDxzVmcRsaTz33bUuRU6A"


def _kafka_storage(*args: str) -> subprocess.CompletedProcess[str]:
    assert CLASSPATH is not None
    return subprocess.run(
        ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dlog4j2.level=warn", "-cp", CLASSPATH,
         "kafka.tools.StorageTool", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )


def _config(root: Path) -> Path:
    config = root / "server.properties"
    root.mkdir()
    config.write_text(
        "process.roles=controller\nnode.id=1\nlisteners=CONTROLLER://localhost:19093\n"
        "controller.listener.names=CONTROLLER\ncontroller.quorum.bootstrap.servers=localhost:19093\n"
        f"log.dirs={root}/meta\n"
    )
    return config


def _checkpoint(path: Path) -> tuple[list[object], list[object]]:
    """(control records but the header and footer, metadata records) of a checkpoint file."""
    control: list[object] = []
    metadata: list[object] = []
    for batch in parse_batches(path.read_bytes()):
        control.extend(r for r in batch.control_records
                       if not isinstance(r, SnapshotHeaderRecord | SnapshotFooterRecord))
        metadata.extend(decode_metadata_record(value) for value in batch.records)
    return control, metadata


_BROKER_LEVELS = ("--feature", "group.version=0", "--feature", "transaction.version=0",
                  "--feature", "eligible.leader.replicas.version=0")


@needs_jars
@pytest.mark.parametrize("flags", [
    ("--release-version", "3.9-IV0"),
    ("--feature", "metadata.version=21"),
    # Kafka's defaults: group.version=1 from 4.0-IV0, transaction.version=2 from 4.0-IV2,
    # eligible.leader.replicas.version=1 from 4.1-IV0.
    ("--release-version", "4.0-IV0"),
    ("--release-version", "4.0-IV2"),
    ("--release-version", "4.1-IV1"),
    ("--release-version", "4.1-IV0"),
    # --feature overrides, as an operator picks levels every node supports.
    ("--release-version", "4.1-IV1", *_BROKER_LEVELS),
    ("--release-version", "4.0-IV3", "--feature", "group.version=0", "--feature", "transaction.version=1"),
    ("--release-version", "4.1-IV1", "--feature", "eligible.leader.replicas.version=0"),
])
def test_both_tools_write_the_same_bootstrap_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...]
) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "kafka"
    assert main(["storage", "format", "-c", str(_config(ours)), "-t", CLUSTER_ID, "-I", INITIAL, *flags]) == 0
    capsys.readouterr()
    kafka = _kafka_storage("format", "-c", str(_config(theirs)), "-t", CLUSTER_ID, "-I", INITIAL, *flags)
    assert kafka.returncode == 0, kafka.stderr
    our_control, our_metadata = _checkpoint(ours / "meta" / CLUSTER_METADATA_DIR_NAME / BOOTSTRAP_SNAPSHOT_NAME)
    # Kafka 4.1 puts the voters in the 0-0 checkpoint and the bootstrap metadata records in
    # bootstrap.checkpoint beside it; the engine writes both into the 0-0 checkpoint.
    kafka_control, kafka_empty = _checkpoint(theirs / "meta" / CLUSTER_METADATA_DIR_NAME / BOOTSTRAP_SNAPSHOT_NAME)
    _, kafka_metadata = _checkpoint(theirs / "meta" / "bootstrap.checkpoint")
    assert kafka_empty == []
    assert our_control == kafka_control
    assert our_metadata == kafka_metadata
    if flags == ("--release-version", "4.1-IV1"):
        assert [(r.name, r.feature_level) for r, _ in our_metadata if isinstance(r, FeatureLevelRecord)] == [
            ("metadata.version", 27), ("eligible.leader.replicas.version", 1), ("group.version", 1),
            ("transaction.version", 2),
        ]


@needs_jars
@pytest.mark.parametrize("args", [
    ("version-mapping",),
    ("version-mapping", "--release-version", "3.3"),
    ("version-mapping", "--release-version", "4.0-IV1"),
    ("version-mapping", "--release-version", "4.1-IV0"),
    ("feature-dependencies", "--feature", "eligible.leader.replicas.version=1", "--feature", "kraft.version=1",
     "--feature", "transaction.version=2", "--feature", "metadata.version=25"),
])
def test_version_mapping_and_feature_dependencies_print_what_kafka_prints(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    kafka = _kafka_storage(*args)
    assert kafka.returncode == 0, kafka.stderr
    if args == ("version-mapping",):
        # Without a release the tools print their own latest production release: Kafka 4.1's
        # is 4.1-IV1, the engine's 4.2-IV1; ask ours for Kafka's.
        args = ("version-mapping", "--release-version", "4.1-IV1")
    assert main(["storage", *args]) == 0
    assert capsys.readouterr().out == kafka.stdout
