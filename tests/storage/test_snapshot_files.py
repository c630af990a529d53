"""Snapshot files: naming, .part until frozen, .deleted on delete, header/footer, downloads."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.k_raft_version_record.v0 import KRaftVersionRecord
from kio.static.primitive import i16

from kraft_engine.errors import SnapshotError
from kraft_engine.records.batches import build_batch, decode_records
from kraft_engine.records.control import ControlRecordType, decode_control_batch
from kraft_engine.storage.snapshots import (
    DownloadedSnapshotWriter,
    SnapshotId,
    SnapshotReader,
    SnapshotWriter,
    clean_snapshot_leftovers,
    delete_snapshot,
    latest_snapshot,
    list_snapshots,
    snapshot_file_name,
)

SID = SnapshotId(end_offset=42, epoch=3)


def write_snapshot(directory: Path, snapshot_id: SnapshotId = SID) -> Path:
    writer = SnapshotWriter(
        directory,
        snapshot_id=snapshot_id,
        last_contained_log_timestamp_ms=1_700_000_000_500,
        control_records=[KRaftVersionRecord(version=i16(0), k_raft_version=i16(1))],
        timestamp_ms=1_700_000_001_000,
    )
    writer.append([b"one", b"two"])
    writer.append(build_batch(base_offset=0, partition_leader_epoch=0, values=[b"three"], timestamp_ms=5))
    return writer.freeze()


def test_file_name_is_kafkas() -> None:
    assert snapshot_file_name(SID) == "00000000000000000042-0000000003.checkpoint"


def test_snapshot_is_part_file_until_frozen(tmp_path: Path) -> None:
    writer = SnapshotWriter(tmp_path, snapshot_id=SID, last_contained_log_timestamp_ms=0, timestamp_ms=0)
    writer.append([b"a"])
    names = [p.name for p in tmp_path.iterdir()]
    assert len(names) == 1 and names[0].startswith("00000000000000000042-0000000003-")
    assert names[0].endswith(".checkpoint.part")
    assert list_snapshots(tmp_path) == []
    path = writer.freeze()
    assert [p.name for p in tmp_path.iterdir()] == [path.name] == [snapshot_file_name(SID)]
    assert list_snapshots(tmp_path) == [SID]
    with pytest.raises(SnapshotError, match="frozen"):
        writer.append([b"late"])


def test_abort_removes_the_part_file(tmp_path: Path) -> None:
    writer = SnapshotWriter(tmp_path, snapshot_id=SID, last_contained_log_timestamp_ms=0, timestamp_ms=0)
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_contents_header_first_footer_last_all_in_the_snapshot_epoch(tmp_path: Path) -> None:
    write_snapshot(tmp_path)
    with SnapshotReader(tmp_path, SID) as reader:
        batches = list(reader.batches())
        assert reader.last_contained_log_timestamp_ms == 1_700_000_000_500
    assert [(h.base_offset, h.last_offset, h.is_control) for h, _ in batches] == [
        (0, 1, True),
        (2, 3, False),
        (4, 4, False),
        (5, 5, True),
    ]
    assert {h.partition_leader_epoch for h, _ in batches} == {3}
    assert [r.type for r in decode_control_batch(batches[0][1])] == [
        ControlRecordType.SNAPSHOT_HEADER,
        ControlRecordType.KRAFT_VERSION,
    ]
    assert [r.type for r in decode_control_batch(batches[-1][1])] == [ControlRecordType.SNAPSHOT_FOOTER]
    assert [r.value for r in decode_records(batches[1][1])] == [b"one", b"two"]
    assert [r.value for r in decode_records(batches[2][1])] == [b"three"]


def test_listing_latest_and_delete_via_deleted_suffix(tmp_path: Path) -> None:
    older = SnapshotId(10, 1)
    write_snapshot(tmp_path, older)
    write_snapshot(tmp_path, SID)
    (tmp_path / "00000000000000000000.log").write_bytes(b"")  # other files are ignored
    assert list_snapshots(tmp_path) == [older, SID]
    assert latest_snapshot(tmp_path) == SID
    assert delete_snapshot(tmp_path, older)
    assert not delete_snapshot(tmp_path, older)
    assert list_snapshots(tmp_path) == [SID]
    assert not any(p.name.endswith(".deleted") for p in tmp_path.iterdir())


def test_cleaning_leftovers_removes_part_and_deleted_files_only(tmp_path: Path) -> None:
    write_snapshot(tmp_path)
    part = tmp_path / "00000000000000000050-0000000003-abc.checkpoint.part"
    deleted = tmp_path / "00000000000000000010-0000000001.checkpoint.deleted"
    part.write_bytes(b"partial")
    deleted.write_bytes(b"old")
    assert clean_snapshot_leftovers(tmp_path) == [deleted.name, part.name]
    assert list_snapshots(tmp_path) == [SID]
    assert latest_snapshot(tmp_path) == SID


def test_existing_snapshot_is_not_overwritten(tmp_path: Path) -> None:
    write_snapshot(tmp_path)
    with pytest.raises(SnapshotError, match="already exists"):
        SnapshotWriter(tmp_path, snapshot_id=SID, last_contained_log_timestamp_ms=0)


def test_download_by_position_then_freeze(tmp_path: Path) -> None:
    source = tmp_path / "leader"
    target = tmp_path / "follower"
    write_snapshot(source)
    with SnapshotReader(source, SID) as reader:
        writer = DownloadedSnapshotWriter(target, SID)
        position = 0
        while position < reader.size_bytes:
            chunk = reader.read(position, 37)
            writer.write(position, chunk)
            position += len(chunk)
        assert reader.read(reader.size_bytes, 37) == b""
        with pytest.raises(SnapshotError, match="expected"):
            writer.write(0, b"again")
        writer.freeze()
    assert (target / snapshot_file_name(SID)).read_bytes() == (source / snapshot_file_name(SID)).read_bytes()


@pytest.mark.parametrize("damage", ["truncate", "flip", "no-header"])
def test_a_bad_download_never_becomes_a_snapshot(tmp_path: Path, damage: str) -> None:
    write_snapshot(tmp_path / "leader")
    data = bytearray((tmp_path / "leader" / snapshot_file_name(SID)).read_bytes())
    if damage == "truncate":
        data = data[:-20]
    elif damage == "flip":
        data[100] ^= 0xFF
    else:
        data = bytearray(build_batch(base_offset=0, partition_leader_epoch=3, values=[b"x"], timestamp_ms=0))
    writer = DownloadedSnapshotWriter(tmp_path / "follower", SID)
    writer.write(0, bytes(data))
    with pytest.raises(SnapshotError):
        writer.freeze()
    assert list((tmp_path / "follower").iterdir()) == []


def test_reader_detects_a_missing_footer_and_corruption(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path)
    raw = path.read_bytes()
    with SnapshotReader(tmp_path, SID) as reader:
        footer_size = len(list(reader.batches())[-1][1])
    path.write_bytes(raw[:-footer_size])
    with SnapshotReader(tmp_path, SID) as reader, pytest.raises(SnapshotError, match="no SnapshotFooterRecord"):
        list(reader.batches())
    path.write_bytes(raw[:-1])
    with SnapshotReader(tmp_path, SID) as reader, pytest.raises(SnapshotError, match=str(path)):
        list(reader.batches())
    with pytest.raises(SnapshotError, match="no snapshot"):
        SnapshotReader(tmp_path, SnapshotId(1, 1))


def test_appending_bad_batch_bytes_is_refused(tmp_path: Path) -> None:
    writer = SnapshotWriter(tmp_path, snapshot_id=SID, last_contained_log_timestamp_ms=0, timestamp_ms=0)
    with pytest.raises(SnapshotError, match="cannot append"):
        writer.append(b"\x00" * 70)
    writer.freeze()
    with SnapshotReader(tmp_path, SID) as reader:
        assert len(list(reader.batches())) == 2
