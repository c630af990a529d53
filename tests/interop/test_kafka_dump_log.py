"""Apache Kafka's own DumpLogSegments reads what we write, and prints exactly what `kraft dump-log`
prints for it.

Runs Kafka's `kafka.tools.DumpLogSegments --cluster-metadata-decoder` from the jars that
`scripts/fetch-kafka-jars` caches under `.kafka-jars/<version>/` (or `$KAFKA_JARS_DIR`), on a
bootstrap checkpoint made by `kraft storage format` and on a metadata log segment built from our
records. Skips when the jars or a JDK are absent.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from kio.schema.leader_change_message.v0 import LeaderChangeMessage
from kio.schema.leader_change_message.v0.data import Voter as LeaderChangeVoter
from kio.static.primitive import i16, i32

from kraft_engine.cli.main import main
from kraft_engine.records import (
    ConfigRecord,
    FeatureLevelRecord,
    NoOpRecord,
    PartitionRecord,
    TopicRecord,
    build_batch,
    build_control_batch,
    encode_metadata_record,
)
from kraft_engine.storage.formatter import BOOTSTRAP_SNAPSHOT_NAME, CLUSTER_METADATA_DIR_NAME

from .kafka_jars import CLASSPATH, kafka_dump, needs_jars

pytestmark = pytest.mark.kafka_jars

def our_dump(capsys: pytest.CaptureFixture[str], *files: Path) -> str:
    assert main(["dump-log", "--cluster-metadata-decoder", "--files", *map(str, files)]) == 0
    return capsys.readouterr().out


@needs_jars
def test_kafka_reads_our_bootstrap_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=controller\nnode.id=1\nlisteners=CONTROLLER://localhost:19093\n"
        "controller.listener.names=CONTROLLER\ncontroller.quorum.bootstrap.servers=localhost:19093\n"
        f"log.dirs={tmp_path}/meta\n"
    )
    initial = "1@localhost:19093:JEXY6aqzQY-32P5TStzaFg,2@localhost:19094:MvDxzVmcRsaTz33bUuRU6A"
    assert main(["storage", "format", "-c", str(config), "-t", "MkU3OEVBNTcwNTJENDM2Qk", "-I", initial]) == 0
    capsys.readouterr()
    checkpoint = tmp_path / "meta" / CLUSTER_METADATA_DIR_NAME / BOOTSTRAP_SNAPSHOT_NAME

    kafka = kafka_dump(checkpoint)

    assert "SnapshotHeader {" in kafka
    assert 'KRaftVersion {"version":0,"kRaftVersion":1}' in kafka
    assert '"voterId":2,"voterDirectoryId":"MvDxzVmcRsaTz33bUuRU6A"' in kafka
    assert '"type":"FEATURE_LEVEL_RECORD"' in kafka and '"name":"metadata.version"' in kafka
    assert 'SnapshotFooter {"version":0}' in kafka
    assert "Error at" not in kafka and "invalid bytes" not in kafka
    assert our_dump(capsys, checkpoint) == kafka


@needs_jars
def test_kafka_reads_our_metadata_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic_id = uuid.UUID("8f1c2d3e-4b5a-4c6d-8e7f-901a2b3c4d5e")
    directory = uuid.UUID("11111111-2222-4333-8444-555555555555")
    records = [
        FeatureLevelRecord(name="metadata.version", feature_level=21),
        TopicRecord(name="orders", topic_id=topic_id),
        PartitionRecord(
            partition_id=0,
            topic_id=topic_id,
            replicas=(1, 2, 3),
            isr=(1, 2),
            removing_replicas=(),
            adding_replicas=(),
            leader=1,
            leader_epoch=4,
            partition_epoch=7,
            directories=(directory, directory, directory),
            eligible_leader_replicas=(3,),
        ),
        ConfigRecord(resource_type=2, resource_name="orders", name="retention.ms", value="86400000"),
        NoOpRecord(),
    ]
    change = LeaderChangeMessage(
        version=i16(0),
        leader_id=i32(1),
        voters=(LeaderChangeVoter(voter_id=i32(1)), LeaderChangeVoter(voter_id=i32(2))),
        granting_voters=(LeaderChangeVoter(voter_id=i32(1)),),
    )
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(
        build_control_batch(base_offset=0, partition_leader_epoch=3, timestamp_ms=1_795_214_642_077, records=[change])
        + build_batch(
            base_offset=1,
            partition_leader_epoch=3,
            values=[encode_metadata_record(r) for r in records],
            timestamp_ms=1_795_214_642_123,
        )
    )

    kafka = kafka_dump(segment)

    for name in ("FEATURE_LEVEL_RECORD", "TOPIC_RECORD", "PARTITION_RECORD", "CONFIG_RECORD", "NO_OP_RECORD"):
        assert f'"type":"{name}"' in kafka
    assert "Error at" not in kafka and "invalid bytes" not in kafka
    assert our_dump(capsys, segment) == kafka


@needs_jars
def test_we_read_what_kafkas_own_storage_tool_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=controller\nnode.id=1\nlisteners=CONTROLLER://localhost:19093\n"
        "controller.listener.names=CONTROLLER\ncontroller.quorum.bootstrap.servers=localhost:19093\n"
        f"log.dirs={tmp_path}/meta\n"
    )
    assert CLASSPATH is not None
    subprocess.run(
        [
            "java",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            CLASSPATH,
            "kafka.tools.StorageTool",
            "format",
            "-c",
            str(config),
            "-t",
            "MkU3OEVBNTcwNTJENDM2Qk",
            "--standalone",
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )
    # Kafka 4.1 writes a binary bootstrap file; later releases put the records in the checkpoint.
    files = sorted((tmp_path / "meta").rglob("*.checkpoint"))
    assert files

    kafka = kafka_dump(*files)

    assert "KRaftVoters" in kafka and "FEATURE_LEVEL_RECORD" in kafka
    assert our_dump(capsys, *files) == kafka
