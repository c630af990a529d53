"""Apache Kafka's own code reads the files we write, and we read the files it writes.

Uses the jars `scripts/fetch-kafka-jars` caches under `.kafka-jars/<version>/` (or
`$KAFKA_JARS_DIR`): `kafka.tools.DumpLogSegments` on our segment, index and snapshot, and a small
Java program (run with `java File.java`) that calls Kafka's FileQuorumStateStore,
MetaPropertiesEnsemble and LeaderEpochCheckpointFile. Skips when the jars or a JDK are absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kraft_engine.kafka_uuid import random_uuid, to_kafka_str
from kraft_engine.records.batches import build_batch
from kraft_engine.storage.checkpoint_file import read_leader_epoch_checkpoint
from kraft_engine.storage.meta_properties import MetaProperties, read_meta_properties, write_meta_properties
from kraft_engine.storage.partition_log import PartitionLog
from kraft_engine.storage.quorum_state_store import FileQuorumStateStore, QuorumStateData
from kraft_engine.storage.snapshots import SnapshotId, SnapshotWriter

_REPO = Path(__file__).resolve().parents[2]


def _classpath() -> str | None:
    root = Path(os.environ.get("KAFKA_JARS_DIR", _REPO / ".kafka-jars"))
    if not root.is_dir() or shutil.which("java") is None:
        return None
    versions = [d for d in sorted(root.iterdir(), reverse=True) if any(d.glob("kafka-raft-*.jar"))]
    return f"{versions[0]}/*" if versions else None


CLASSPATH = _classpath()
pytestmark = [pytest.mark.kafka_jars, pytest.mark.skipif(CLASSPATH is None, reason="Kafka jars or java absent")]

_JAVA = """
import java.io.File;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.metadata.properties.MetaProperties;
import org.apache.kafka.metadata.properties.MetaPropertiesEnsemble;
import org.apache.kafka.metadata.properties.MetaPropertiesVersion;
import org.apache.kafka.metadata.properties.PropertiesUtils;
import org.apache.kafka.raft.ElectionState;
import org.apache.kafka.raft.FileQuorumStateStore;
import org.apache.kafka.raft.ReplicaKey;
import org.apache.kafka.server.common.KRaftVersion;
import org.apache.kafka.storage.internals.checkpoint.LeaderEpochCheckpointFile;
import org.apache.kafka.storage.internals.log.EpochEntry;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;

public class KafkaStorageProbe {
    public static void main(String[] args) throws Exception {
        String dir = args[1];
        if (args[0].equals("read")) {
            System.out.println("quorum-state: " + new FileQuorumStateStore(new File(dir, "quorum-state")).readElectionState());
            MetaPropertiesEnsemble ensemble = new MetaPropertiesEnsemble.Loader().addLogDirs(List.of(dir)).load();
            System.out.println("meta: " + ensemble.logDirProps().get(dir));
            System.out.println("epochs: " + new LeaderEpochCheckpointFile(
                new File(dir, "leader-epoch-checkpoint"), new LogDirFailureChannel(1)).read());
        } else {
            Uuid dirId = Uuid.fromString(args[2]);
            new FileQuorumStateStore(new File(dir, "quorum-state")).writeElectionState(
                ElectionState.withVotedCandidate(9, ReplicaKey.of(4, dirId), Set.of()), KRaftVersion.KRAFT_VERSION_1);
            MetaProperties meta = new MetaProperties.Builder().setVersion(MetaPropertiesVersion.V1)
                .setClusterId("MkU3OEVBNTcwNTJENDM2Qg").setNodeId(4).setDirectoryId(dirId).build();
            PropertiesUtils.writePropertiesFile(meta.toProperties(), new File(dir, "meta.properties").getPath(), true);
            new LeaderEpochCheckpointFile(new File(dir, "leader-epoch-checkpoint"), new LogDirFailureChannel(1))
                .write(List.of(new EpochEntry(1, 0), new EpochEntry(3, 17)));
        }
    }
}
"""


def _java(tmp_path: Path, *args: str) -> str:
    assert CLASSPATH is not None
    source = tmp_path / "KafkaStorageProbe.java"
    source.write_text(_JAVA)
    result = subprocess.run(
        ["java", "-cp", CLASSPATH, str(source), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _dump(*files: Path, index_sanity_check: bool = True) -> str:
    """DumpLogSegments' output. Without the sanity-check flag it prints every index entry and
    looks each one up in the segment, which fails on an entry past the log end."""
    assert CLASSPATH is not None
    flags = ["--index-sanity-check"] if index_sanity_check else []
    result = subprocess.run(
        ["java", "-cp", CLASSPATH, "kafka.tools.DumpLogSegments", *flags, "--files", ",".join(map(str, files))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Exception" not in result.stdout + result.stderr, result.stdout + result.stderr
    return result.stdout


def _write_30_batches(directory: Path, *, values: list[bytes]) -> None:
    """30 batches of `values`, epochs 1, 2, 3 for ten batches each, an index entry every 100 bytes."""
    log, _ = PartitionLog.open(directory, index_interval_bytes=100)
    with log:
        for i in range(30):
            log.append_as_leader(
                build_batch(base_offset=0, partition_leader_epoch=0, values=values, timestamp_ms=i), epoch=1 + i // 10
            )
        log.flush()


def test_dump_log_segments_reads_our_segment_index_and_snapshot(tmp_path: Path) -> None:
    directory = tmp_path / "foo-0"
    _write_30_batches(directory, values=[b"v" * 50, b"w"])
    writer = SnapshotWriter(directory, snapshot_id=SnapshotId(60, 3), last_contained_log_timestamp_ms=5, timestamp_ms=6)
    writer.append([b"a", b"b"])
    snapshot = writer.freeze()
    out = _dump(directory / "00000000000000000000.log", directory / "00000000000000000000.index", snapshot)
    batches = re.findall(r"baseOffset: (\d+) lastOffset: (\d+) .*?partitionLeaderEpoch: (\d+) .*?isvalid: (\w+)", out)
    log_batches = [(int(b), int(e), int(p)) for b, e, p, valid in batches[:30] if valid == "true"]
    assert log_batches == [(2 * i, 2 * i + 1, 1 + i // 10) for i in range(30)]
    assert "00000000000000000000.index passed sanity check" in out
    assert "Snapshot end offset: 60, epoch: 3" in out
    assert [(int(b), int(e)) for b, e, _, _ in batches[30:]] == [(0, 0), (1, 2), (3, 3)]


def test_an_index_left_stale_by_a_crash_passes_kafkas_sanity_check_once_reopened(tmp_path: Path) -> None:
    # flush() does not sync the index; after a crash it may hold entries past the log end.
    directory = tmp_path / "foo-0"
    _write_30_batches(directory, values=[b"v" * 50])
    segment, index = directory / "00000000000000000000.log", directory / "00000000000000000000.index"
    segment.write_bytes(segment.read_bytes()[: len(segment.read_bytes()) // 2])
    index.write_bytes(index.read_bytes() + (500).to_bytes(4, "big") + (1 << 16).to_bytes(4, "big"))
    log, report = PartitionLog.open(directory, index_interval_bytes=100)
    with log:
        assert report.rebuilt_indexes == (index.name,)
        end = log.log_end_offset
    assert "00000000000000000000.index passed sanity check" in _dump(segment, index)
    out = _dump(index, index_sanity_check=False)
    assert "Mismatches" not in out
    entries = [int(o) for o in re.findall(r"offset: (\d+) position: \d+", out)]
    assert entries and max(entries) < end


def test_kafka_reads_our_quorum_state_meta_properties_and_epoch_checkpoint(tmp_path: Path) -> None:
    directory_id = random_uuid()
    FileQuorumStateStore(tmp_path / "quorum-state").write(
        QuorumStateData(leader_epoch=5, leader_id=2, voted_id=2, voted_directory_id=directory_id)
    )
    write_meta_properties(
        tmp_path, MetaProperties(version=1, cluster_id="MkU3OEVBNTcwNTJENDM2Qg", node_id=3, directory_id=directory_id)
    )
    log, _ = PartitionLog.open(tmp_path)
    with log:
        log.append_as_leader(build_batch(base_offset=0, partition_leader_epoch=0, values=[b"a"], timestamp_ms=0), epoch=2)
        log.append_as_leader(build_batch(base_offset=0, partition_leader_epoch=0, values=[b"b"], timestamp_ms=0), epoch=7)
    out = _java(tmp_path, "read", str(tmp_path))
    dir_text = to_kafka_str(directory_id)
    assert f"epoch=5, leaderId=OptionalInt[2], votedKey=Optional[ReplicaKey(id=2, directoryId={dir_text})]" in out
    assert f"MetaProperties(version=1, clusterId=MkU3OEVBNTcwNTJENDM2Qg, nodeId=3, directoryId={dir_text})" in out
    assert "[EpochEntry(epoch=2, startOffset=0), EpochEntry(epoch=7, startOffset=1)]" in out


def test_we_read_what_kafka_writes(tmp_path: Path) -> None:
    directory_id = random_uuid()
    _java(tmp_path, "write", str(tmp_path), to_kafka_str(directory_id))
    assert FileQuorumStateStore(tmp_path / "quorum-state").read() == QuorumStateData(
        leader_epoch=9, voted_id=4, voted_directory_id=directory_id
    )
    assert read_meta_properties(tmp_path) == MetaProperties(
        version=1, cluster_id="MkU3OEVBNTcwNTJENDM2Qg", node_id=4, directory_id=directory_id
    )
    assert read_leader_epoch_checkpoint(tmp_path / "leader-epoch-checkpoint") == [(1, 0), (3, 17)]
    # And for the same state we write the very same bytes Kafka does.
    kafka_bytes = (tmp_path / "quorum-state").read_bytes()
    FileQuorumStateStore(tmp_path / "ours").write(QuorumStateData(leader_epoch=9, voted_id=4, voted_directory_id=directory_id))
    assert (tmp_path / "ours").read_bytes() == kafka_bytes
