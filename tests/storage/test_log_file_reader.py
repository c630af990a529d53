"""The read-only reader leaves a damaged log directory byte-for-byte as it found it, and reports
every damage (bad CRC, torn tail, garbage) with its byte position instead of raising or dropping."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from kraft_engine.cli.main import main
from kraft_engine.records import TopicRecord, build_batch, encode_metadata_record
from kraft_engine.storage import PartitionLog
from kraft_engine.storage.log_file_reader import (
    LogFileKind,
    ScannedBatch,
    ScanStop,
    classify_log_file,
    list_log_files,
    read_batch_records,
    read_log_file,
    scan_batches,
)

TS_MS = 1795214642077


def tree_digest(directory: Path) -> dict[str, str]:
    """Every file under `directory` (names, sizes, contents), so a rename, truncation or new file shows."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    } | {"": ",".join(sorted(str(p.relative_to(directory)) for p in directory.rglob("*")))}


def topic_batch(base_offset: int, name: str) -> bytes:
    record = TopicRecord(name=name, topic_id=uuid.UUID(int=base_offset + 1))
    return build_batch(
        base_offset=base_offset, partition_leader_epoch=3, values=[encode_metadata_record(record)], timestamp_ms=TS_MS
    )


def damaged_log(directory: Path) -> Path:
    """A partition dir written by PartitionLog, then a flipped byte in batch 1 and a torn tail."""
    log, _ = PartitionLog.open(directory)
    for offset in range(4):
        batch = topic_batch(offset, f"t{offset}")
        log.append_as_follower(batch)
    log.flush()
    log.close()
    segment = directory / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    first = len(topic_batch(0, "t0"))
    data[first + 70] ^= 0xFF
    segment.write_bytes(bytes(data) + topic_batch(4, "t4")[:30])
    (directory / "00000000000000000004-0000000003.checkpoint.part").write_bytes(b"partial")
    return segment


def test_scanning_reports_every_damage_and_changes_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    segment = damaged_log(directory)
    before = tree_digest(directory)

    names = list_log_files(directory)
    assert [(f.name, f.kind) for f in names] == [(segment.name, LogFileKind.SEGMENT)]
    items = list(scan_batches(read_log_file(segment)))
    batches = [i for i in items if isinstance(i, ScannedBatch)]
    assert [b.header.base_offset for b in batches] == [0, 1, 2, 3]
    assert [b.crc_error is None for b in batches] == [True, False, True, True]
    assert "CRC-32C" in (batches[1].crc_error or "")
    stop = items[-1]
    assert isinstance(stop, ScanStop) and stop.torn
    assert stop.position == sum(len(b.raw) for b in batches)
    records = read_batch_records(batches[2].header, batches[2].raw)
    assert [(r.offset, r.timestamp_ms, r.key) for r in records] == [(2, TS_MS, None)]

    # dump-log shares the reader, and prints the damage without repairing it
    assert main(["dump-log", "--cluster-metadata-decoder", "--files", str(segment)]) == 1
    assert tree_digest(directory) == before


def test_the_digest_sees_what_opening_the_log_for_writing_does(tmp_path: Path) -> None:
    """The fault variant: PartitionLog.open truncates the torn tail and rewrites the index, and the
    same digest that stays equal above catches it, so the equality above means something."""
    directory = tmp_path / "__cluster_metadata-0"
    damaged_log(directory)
    before = tree_digest(directory)
    log, _ = PartitionLog.open(directory)
    log.close()
    assert tree_digest(directory) != before


@pytest.mark.parametrize(
    ("name", "kind", "offset", "epoch"),
    [
        ("00000000000000000042.log", LogFileKind.SEGMENT, 42, -1),
        ("00000000000000000100-0000000007.checkpoint", LogFileKind.SNAPSHOT, 100, 7),
        ("bootstrap.checkpoint", LogFileKind.BOOTSTRAP, 0, -1),
    ],
)
def test_file_names_say_what_a_file_holds(name: str, kind: LogFileKind, offset: int, epoch: int) -> None:
    found = classify_log_file(name)
    assert found is not None and (found.kind, found.offset, found.epoch) == (kind, offset, epoch)


@pytest.mark.parametrize(
    "name", ["00000000000000000042.index", "00000000000000000100-0000000007.checkpoint.part", "x.log", "quorum-state"]
)
def test_other_files_are_not_log_files(name: str) -> None:
    assert classify_log_file(name) is None
