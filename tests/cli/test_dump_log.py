"""`kraft dump-log` prints Kafka's DumpLogSegments lines for our files, and on damage prints the
valid prefix, then says where it stopped and exits non-zero."""

from __future__ import annotations

import dataclasses
import json
import types
import uuid
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest

# tests/ is on sys.path (it holds the root conftest), so the interop helpers are importable here.
from interop.kafka_jars import CLASSPATH as KAFKA_CLASSPATH
from interop.kafka_jars import kafka_dump
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
    METADATA_RECORD_TYPES,
    ControlRecord,
    ControlRecordType,
    FeatureLevelRecord,
    TopicRecord,
    build_batch,
    build_control_batch,
    encode_metadata_record,
    read_batch_header,
    record_to_json,
)
from kraft_engine.storage.snapshots import SnapshotId, SnapshotWriter, snapshot_file_name

TS_MS = 1795214642077
DIR_ID = "JEXY6aqzQY-32P5TStzaFg"


def snapshot_voters() -> VotersRecord:
    return VotersRecord(
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


def snapshot_bytes() -> bytes:
    voters = snapshot_voters()
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


# --- every record type, in a segment and in a snapshot ---------------------------------------------


def _sample_value(kafka_type: str, annotation: Any, *, n: int, default: Any) -> Any:
    """A value of one field that differs from its default, so tagged fields are written too."""
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return sample_entity(annotation, n=n)
    values: dict[str, Any] = {
        "int8": n % 100 + 1,
        "int16": n + 1,
        "int32": 1000 + n,
        "int64": 10**12 + n,
        "uint16": 9000 + n,
        "bool": not default if isinstance(default, bool) else True,
        "float64": n + 0.5,
        "string": f"s{n}",
        "bytes": bytes([n % 256, 7]),
        "uuid": uuid.UUID(int=(n + 1) << 64 | 0xABC),
    }
    return values[kafka_type]


def sample_entity(cls: type[Any], *, n: int = 1) -> Any:
    """One instance of a generated record class (any version) or of its nested structs, with a
    non-default value in every field, built from the kio field metadata."""
    kwargs = {}
    for i, field in enumerate(dataclasses.fields(cls)):
        annotation = field.type
        if get_origin(annotation) is types.UnionType:
            annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
        default = field.default if field.default is not dataclasses.MISSING else None
        kafka_type = field.metadata["kafka_type"]
        if get_origin(annotation) is tuple:
            element = get_args(annotation)[0]
            kwargs[field.name] = tuple(
                _sample_value(kafka_type, element, n=n * 10 + i + j, default=None) for j in range(2)
            )
        else:
            kwargs[field.name] = _sample_value(kafka_type, annotation, n=n * 10 + i, default=default)
    return cls(**kwargs)


EVERY_METADATA_RECORD = [
    sample_entity(record_type.version_classes[version], n=record_type.api_key * 10 + version)
    for record_type in METADATA_RECORD_TYPES.values()
    for version in range(record_type.highest_version + 1)
]


def every_control_record() -> list[ControlRecord]:
    return [
        LeaderChangeMessage(
            version=i16(0),
            leader_id=i32(2),
            voters=(LeaderChangeVoter(voter_id=i32(1)), LeaderChangeVoter(voter_id=i32(2))),
            granting_voters=(LeaderChangeVoter(voter_id=i32(2)),),
        ),
        SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(TS_MS - 1)),
        KRaftVersionRecord(version=i16(0), k_raft_version=i16(1)),
        snapshot_voters(),
        SnapshotFooterRecord(version=i16(0)),
    ]


def every_record_segment(directory: Path) -> Path:
    """A metadata log segment holding one control batch with every KRaft control record type and
    one data batch with every metadata record type at every version."""
    control = build_control_batch(
        base_offset=0, partition_leader_epoch=3, timestamp_ms=TS_MS, records=every_control_record()
    )
    data = build_batch(
        base_offset=5,
        partition_leader_epoch=3,
        values=[encode_metadata_record(record) for record in EVERY_METADATA_RECORD],
        timestamp_ms=TS_MS + 1,
    )
    path = directory / "00000000000000000000.log"
    path.write_bytes(control + data)
    return path


def every_record_snapshot(directory: Path) -> Path:
    """A snapshot written by the engine's snapshot writer, with every metadata record type at every
    version between its header (plus KRaftVersion and Voters) and its footer."""
    snapshot_id = SnapshotId(end_offset=len(EVERY_METADATA_RECORD) + 3, epoch=3)
    writer = SnapshotWriter(
        directory,
        snapshot_id=snapshot_id,
        last_contained_log_timestamp_ms=TS_MS - 1,
        control_records=[KRaftVersionRecord(version=i16(0), k_raft_version=i16(1)), snapshot_voters()],
        timestamp_ms=TS_MS,
    )
    writer.append([encode_metadata_record(record) for record in EVERY_METADATA_RECORD])
    path = writer.freeze()
    assert path.name == snapshot_file_name(snapshot_id)
    return path


def _payloads(lines: list[str]) -> list[Any]:
    return [json.loads(line.split(" payload: ", 1)[1]) for line in lines if " payload: " in line]


def test_every_metadata_record_type_and_version_is_decoded_from_a_segment_and_a_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = [record_to_json(record, type(record).__version__) for record in EVERY_METADATA_RECORD]
    # The samples reach every record type Kafka defines, at every version, with every field set.
    assert {(j["type"], j["version"]) for j in expected} == {
        (t.type_name, v) for t in METADATA_RECORD_TYPES.values() for v in range(t.highest_version + 1)
    }
    for path in (every_record_segment(tmp_path), every_record_snapshot(tmp_path)):
        rc, lines, err = run(capsys, "--cluster-metadata-decoder", "--files", str(path))
        assert rc == 0, err
        assert not err
        assert _payloads(lines) == expected
        assert not any("Error at" in line for line in lines)


def test_every_control_record_type_is_decoded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines, err = run(capsys, "--cluster-metadata-decoder", "--files", str(every_record_segment(tmp_path)))
    assert rc == 0, err
    control = lines[3:8]
    labels = ["LeaderChange:", "SnapshotHeader", "KRaftVersion", "KRaftVoters", "SnapshotFooter"]
    assert len(labels) == len(ControlRecordType) - 2  # every KRaft type; ABORT/COMMIT are transaction markers
    for line, label, record in zip(control, labels, every_control_record(), strict=True):
        assert line.startswith("| offset: ")
        printed = json.loads(line.split(f" {label} ", 1)[1])
        assert printed["version"] == record.version
    assert '"voterDirectoryId":"JEXY6aqzQY-32P5TStzaFg"' in control[3]
    assert '"grantingVoters":[{"voterId":2}]' in control[0]


@pytest.mark.kafka_jars
@pytest.mark.skipif(KAFKA_CLASSPATH is None, reason="Kafka jars not cached (run scripts/fetch-kafka-jars) or no java")
def test_kafkas_dump_log_prints_the_same_for_every_record_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [every_record_segment(tmp_path), every_record_snapshot(tmp_path)]
    kafka = kafka_dump(*files)
    assert "Error at" not in kafka
    assert len(_payloads(kafka.splitlines())) == 2 * len(EVERY_METADATA_RECORD)
    rc, ours, err = run(capsys, "--cluster-metadata-decoder", "--files", *map(str, files))
    assert rc == 0, err
    assert ours == kafka.splitlines()
