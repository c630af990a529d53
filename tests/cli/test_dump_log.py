"""`kraft dump-log` prints Kafka's DumpLogSegments lines for our files, and on damage prints the
valid prefix, then says where it stopped and exits non-zero."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.k_raft_version_record.v0 import KRaftVersionRecord
from kio.schema.leader_change_message.v0 import LeaderChangeMessage
from kio.schema.leader_change_message.v0.data import Voter as LeaderChangeVoter
from kio.schema.snapshot_footer_record.v0 import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0 import SnapshotHeaderRecord
from kio.schema.voters_record.v0 import VotersRecord
from kio.schema.voters_record.v0.data import Endpoint, KRaftVersionFeature, Voter
from kio.static.primitive import i16, i32, i64, u16

from kraft_engine.cli.main import main
from kraft_engine.kafka_uuid import from_kafka_str
from kraft_engine.records import (
    FeatureLevelRecord,
    TopicRecord,
    build_batch,
    build_control_batch,
    encode_metadata_record,
    read_batch_header,
)

TS_MS = 1795214642077
DIR_ID = "JEXY6aqzQY-32P5TStzaFg"


def snapshot_bytes() -> bytes:
    voters = VotersRecord(
        version=i16(0),
        voters=(
            Voter(
                voter_id=i32(1),
                voter_directory_id=from_kafka_str(DIR_ID),
                endpoints=(Endpoint(name="CONTROLLER", host="localhost", port=u16(19093)),),
                k_raft_version_feature=KRaftVersionFeature(
                    min_supported_version=i16(0), max_supported_version=i16(1)
                ),
            ),
        ),
    )
    head = build_control_batch(
        base_offset=0,
        partition_leader_epoch=0,
        timestamp_ms=TS_MS,
        records=[
            SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(TS_MS - 13)),
            KRaftVersionRecord(version=i16(0), k_raft_version=i16(1)),
            voters,
        ],
    )
    foot = build_control_batch(
        base_offset=3, partition_leader_epoch=0, timestamp_ms=TS_MS + 4, records=[SnapshotFooterRecord(version=i16(0))]
    )
    return head + foot


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    rc = main(["dump-log", *args])
    captured = capsys.readouterr()
    return rc, captured.out.splitlines(), captured.err


def test_snapshot_batches_and_control_records_match_kafkas_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = snapshot_bytes()
    path = tmp_path / "00000000000000000000-0000000000.checkpoint"
    path.write_bytes(data)
    first, second = read_batch_header(data), read_batch_header(data, read_batch_header(data).size_bytes)

    rc, lines, err = run(capsys, "--cluster-metadata-decoder", "--files", str(path))

    assert rc == 0, err
    assert lines == [
        f"Dumping {path}",
        "Snapshot end offset: 0, epoch: 0",
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
        "partitionLeaderEpoch: 0 isTransactional: false isControl: true deleteHorizonMs: OptionalLong.empty "
        f"position: 0 CreateTime: {TS_MS} size: {first.size_bytes} magic: 2 compresscodec: none "
        f"crc: {first.crc} isvalid: true",
        f"| offset: 0 CreateTime: {TS_MS} keySize: 4 valueSize: 11 sequence: -1 headerKeys: [] "
        f'SnapshotHeader {{"version":0,"lastContainedLogTimestamp":{TS_MS - 13}}}',
        f"| offset: 1 CreateTime: {TS_MS} keySize: 4 valueSize: 5 sequence: -1 headerKeys: [] "
        'KRaftVersion {"version":0,"kRaftVersion":1}',
        f"| offset: 2 CreateTime: {TS_MS} keySize: 4 valueSize: 55 sequence: -1 headerKeys: [] "
        'KRaftVoters {"version":0,"voters":[{"voterId":1,"voterDirectoryId":"JEXY6aqzQY-32P5TStzaFg",'
        '"endpoints":[{"name":"CONTROLLER","host":"localhost","port":19093}],'
        '"kRaftVersionFeature":{"minSupportedVersion":0,"maxSupportedVersion":1}}]}',
        "baseOffset: 3 lastOffset: 3 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
        "partitionLeaderEpoch: 0 isTransactional: false isControl: true deleteHorizonMs: OptionalLong.empty "
        f"position: {first.size_bytes} CreateTime: {TS_MS + 4} size: {second.size_bytes} magic: 2 "
        f"compresscodec: none crc: {second.crc} isvalid: true",
        f'| offset: 3 CreateTime: {TS_MS + 4} keySize: 4 valueSize: 3 sequence: -1 headerKeys: [] SnapshotFooter {{"version":0}}',
    ]


def test_without_a_decoder_only_batches_are_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "00000000000000000000-0000000000.checkpoint"
    path.write_bytes(snapshot_bytes())
    rc, lines, _ = run(capsys, "--files", str(path))
    assert rc == 0
    assert [line.split(" ")[0] for line in lines[2:]] == ["baseOffset:", "baseOffset:"]


def test_segment_names_give_the_starting_offset_and_leader_changes_print(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change = LeaderChangeMessage(
        version=i16(0),
        leader_id=i32(2),
        voters=(LeaderChangeVoter(voter_id=i32(1)), LeaderChangeVoter(voter_id=i32(2))),
        granting_voters=(LeaderChangeVoter(voter_id=i32(2)),),
    )
    path = tmp_path / "00000000000000000042.log"
    path.write_bytes(build_control_batch(base_offset=42, partition_leader_epoch=7, timestamp_ms=TS_MS, records=[change]))
    rc, lines, _ = run(capsys, "--deep-iteration", "--files", str(path))
    assert rc == 0
    assert lines[1] == "Log starting offset: 42"
    assert "partitionLeaderEpoch: 7" in lines[2]
    assert lines[3].endswith(
        'LeaderChange: {"version":0,"leaderId":2,"voters":[{"voterId":1},{"voterId":2}],"grantingVoters":[{"voterId":2}]}'
    )


def test_comma_separated_files_are_all_dumped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = tmp_path / "00000000000000000000.log"
    two = tmp_path / "00000000000000000003.log"
    one.write_bytes(snapshot_bytes())
    two.write_bytes(snapshot_bytes())
    rc, lines, _ = run(capsys, "--files", f"{one},{two}")
    assert rc == 0
    assert [line for line in lines if line.startswith("Dumping")] == [f"Dumping {one}", f"Dumping {two}"]


def test_a_torn_tail_prints_the_valid_prefix_then_the_invalid_byte_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = snapshot_bytes()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data[:-10])
    rc, lines, err = run(capsys, "--cluster-metadata-decoder", "--files", str(path))
    assert rc == 1
    assert lines[2].startswith("baseOffset: 0 lastOffset: 2")
    assert lines[-1] == f"Found {read_batch_header(data, read_batch_header(data).size_bytes).size_bytes - 10} invalid bytes at the end of {path.name}"
    assert "torn write" in err


def test_a_crc_mismatch_is_reported_as_invalid_and_the_scan_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bytearray(snapshot_bytes())
    data[70] ^= 0xFF  # a byte inside the first batch's records
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(data))
    rc, lines, err = run(capsys, "--cluster-metadata-decoder", "--files", str(path))
    assert rc == 1
    batch_lines = [line for line in lines if line.startswith("baseOffset")]
    assert batch_lines[0].endswith("isvalid: false")
    assert batch_lines[1].endswith("isvalid: true")
    assert "SnapshotFooter" in lines[-1]
    assert "CRC-32C" in err


def test_garbage_stops_the_scan_with_a_clear_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(snapshot_bytes() + b"\x00" * 8 + b"\xff" * 80)
    rc, lines, err = run(capsys, "--files", str(path))
    assert rc == 1
    assert lines[-1] == f"Found 88 invalid bytes at the end of {path.name}"
    assert "magic" in err or "length" in err


def test_unknown_and_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    rc, _, err = run(capsys, "--files", str(other))
    assert rc == 0
    assert "Ignoring unknown file" in err
    rc, _, err = run(capsys, "--files", str(tmp_path / "00000000000000000000.log"))
    assert rc == 1
    assert "cannot read" in err


def test_record_timestamps_keep_their_milliseconds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # kio rounds record timestamps down to seconds; the dump must not.
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(
        build_control_batch(
            base_offset=0,
            partition_leader_epoch=1,
            timestamp_ms=1_700_000_000_999,
            records=[SnapshotFooterRecord(version=i16(0))],
        )
    )
    _, lines, _ = run(capsys, "--deep-iteration", "--files", str(path))
    assert "| offset: 0 CreateTime: 1700000000999 " in lines[3]


def test_a_data_batch_without_the_decoder_prints_record_metadata_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(build_batch(base_offset=0, partition_leader_epoch=1, values=[b"abc"], timestamp_ms=TS_MS))
    _, lines, _ = run(capsys, "--deep-iteration", "--files", str(path))
    assert lines[3] == f"| offset: 0 CreateTime: {TS_MS} keySize: -1 valueSize: 3 sequence: -1 headerKeys: []"



def test_metadata_records_print_as_kafkas_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic_id = from_kafka_str("Qm9vdHN0cmFwVG9waWMxAA")
    values = [
        encode_metadata_record(FeatureLevelRecord(name="metadata.version", feature_level=21)),
        encode_metadata_record(TopicRecord(name="orders", topic_id=topic_id)),
        b"\x01\x7f\x00",  # api key 127 does not exist
    ]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(build_batch(base_offset=0, partition_leader_epoch=1, values=values, timestamp_ms=TS_MS))
    rc, lines, _ = run(capsys, "--cluster-metadata-decoder", "--files", str(path))
    assert lines[3].endswith(
        ' payload: {"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":21}}'
    )
    assert lines[4].endswith(
        ' payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"orders","topicId":"Qm9vdHN0cmFwVG9waWMxAA"}}'
    )
    assert lines[5].startswith("| offset: 2 ")
    assert " payload: Error at 2, skipping. " in lines[5]
    assert rc == 0


def test_kafkas_binary_bootstrap_file_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bootstrap.checkpoint"
    path.write_bytes(snapshot_bytes())
    rc, lines, _ = run(capsys, "--cluster-metadata-decoder", "--files", str(path))
    assert rc == 0
    assert lines[1] == "KRaft bootstrap snapshot"
    assert "SnapshotFooter" in lines[-1]
