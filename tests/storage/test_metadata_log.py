"""The file-backed metadata log behaves like the raft core's in-memory log, and survives reopening.

A model-based test drives `FileMetadataLog` and the core's `MemoryLog` with the same random
operations and compares everything the core can observe.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.snapshot_footer_record.v0 import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0 import SnapshotHeaderRecord
from kio.static.primitive import i16, i64

from kraft_engine.errors import SnapshotError
from kraft_engine.raft.log import MemoryLog, validate_offset_and_epoch
from kraft_engine.records.batches import build_batch
from kraft_engine.records.control import build_control_batch
from kraft_engine.records.log_batch import OffsetAndEpoch
from kraft_engine.storage import snapshots
from kraft_engine.storage.metadata_log import FileMetadataLog
from kraft_engine.storage.snapshots import list_snapshots


def data_batch(base_offset: int, epoch: int, count: int) -> bytes:
    return build_batch(
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        values=[b"r%d" % (base_offset + i) for i in range(count)],
        timestamp_ms=1_000 + base_offset,
    )


def snapshot_bytes(epoch: int) -> bytes:
    header = build_control_batch(
        base_offset=0,
        partition_leader_epoch=epoch,
        timestamp_ms=5,
        records=[SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(4))],
    )
    body = build_batch(base_offset=1, partition_leader_epoch=epoch, values=[b"state"], timestamp_ms=5)
    footer = build_control_batch(
        base_offset=2, partition_leader_epoch=epoch, timestamp_ms=5, records=[SnapshotFooterRecord(version=i16(0))]
    )
    return header + body + footer


def observe(log: MemoryLog | FileMetadataLog) -> dict[str, object]:
    end = log.end_offset()
    return {
        "start": log.log_start_offset,
        "end": end,
        "for_epoch": [log.end_offset_for_epoch(e) for e in range(0, 8)],
        "read": [log.read(o, 1) for o in range(log.log_start_offset, end.offset + 1)],
        "snapshots": log.snapshot_ids(),
        "snapshot sizes": [log.snapshot_size(s) for s in log.snapshot_ids()],
        "valid": [
            validate_offset_and_epoch(log, offset=o, epoch=e)
            for o in range(log.log_start_offset, end.offset + 1)
            for e in range(0, 6)
        ],
    }


operation = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("truncate"), st.integers(0, 100), st.just(0)),
    st.tuples(st.just("flush"), st.just(0), st.just(0)),
    st.tuples(st.just("snapshot"), st.integers(0, 100), st.just(0)),
    st.tuples(st.just("clean"), st.just(0), st.just(0)),
    st.tuples(st.just("install"), st.integers(1, 5), st.integers(0, 1)),
    st.tuples(st.just("reopen"), st.just(0), st.just(0)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=st.lists(operation, max_size=25))
def test_file_log_matches_the_memory_log(tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[str, int, int]]) -> None:
    directory = tmp_path_factory.mktemp("meta") / "__cluster_metadata-0"
    model = MemoryLog()
    log, _ = FileMetadataLog.open(directory, segment_bytes=300)
    try:
        for name, a, b in operations:
            end = model.end_offset()
            boundaries = sorted({model.log_start_offset, end.offset} | {x.base_offset for x in model.batches()})
            boundaries = [x for x in boundaries if x >= model.log_start_offset]
            if name == "append":
                data = data_batch(end.offset, max(end.epoch, 1) + a, b)
                assert [x.raw for x in log.append(data)] == [x.raw for x in model.append(data)]
            elif name == "truncate":
                # Raft never truncates below committed data, and snapshots only cover committed data.
                floor = max((s.offset for s in model.snapshot_ids()), default=0)
                targets = [x for x in boundaries if x >= floor]
                if not targets:
                    continue
                target = targets[a % len(targets)]
                model.truncate_to(target)
                log.truncate_to(target)
            elif name == "flush":
                model.flush()
                log.flush()
                assert log.flushed_offset == model.flushed_offset
            elif name == "snapshot":
                candidates = [x for x in boundaries if x > 0 and x <= end.offset]
                if not candidates:
                    continue
                offset = candidates[a % len(candidates)]
                epoch = model.end_offset_for_epoch(10**6).epoch if offset == end.offset else None
                if epoch is None:
                    epoch = max(x.epoch for x in model.batches() if x.last_offset < offset) if any(
                        x.last_offset < offset for x in model.batches()
                    ) else 0
                sid = OffsetAndEpoch(epoch=epoch, offset=offset)
                if any(s.offset == offset for s in model.snapshot_ids()):
                    continue
                model.store_snapshot(sid, snapshot_bytes(epoch))
                log.store_snapshot(sid, snapshot_bytes(epoch))
            elif name == "clean":
                snapshots = model.snapshot_ids()
                if not snapshots or snapshots[-1].offset > end.offset:
                    continue
                model.delete_before(snapshots[-1].offset)
                log.delete_before(snapshots[-1].offset)
                for old in snapshots[:-1]:
                    model.delete_snapshot(old)
                    log.delete_snapshot(old)
            elif name == "install":
                sid = OffsetAndEpoch(epoch=max(end.epoch, 1) + b, offset=end.offset + a)
                model.store_snapshot(sid, snapshot_bytes(sid.epoch))
                log.store_snapshot(sid, snapshot_bytes(sid.epoch))
                model.truncate_to_latest_snapshot()
                log.truncate_to_latest_snapshot()
            elif name == "reopen":
                # After a restart the log starts at its first segment's base offset (Kafka's rule,
                # tested below); reopen only where that keeps the model's log start.
                bases = [int(p.name[:20]) for p in directory.glob("*.log")]
                if min(bases) != model.log_start_offset:
                    continue
                log.close()
                log, report = FileMetadataLog.open(directory, segment_bytes=300)
                assert report.is_clean, report.describe()
                model.flush()
            assert observe(log) == observe(model), (name, a, b)
    finally:
        log.close()


def test_a_snapshot_beyond_the_log_end_restarts_the_log_on_open(tmp_path: Path) -> None:
    log, _ = FileMetadataLog.open(tmp_path)
    with log:
        log.append(data_batch(0, 1, 3))
        log.store_snapshot(OffsetAndEpoch(epoch=4, offset=50), snapshot_bytes(4))
        # Crash here: downloaded and frozen, but the log was never truncated.
    log, _ = FileMetadataLog.open(tmp_path)
    with log:
        assert log.log_start_offset == 50
        assert log.end_offset() == OffsetAndEpoch(epoch=4, offset=50)
        assert log.snapshot_size(OffsetAndEpoch(epoch=4, offset=50)) == len(snapshot_bytes(4))
        assert log.read_snapshot(OffsetAndEpoch(epoch=4, offset=50), 0, 1 << 20) == snapshot_bytes(4)


def test_storing_an_invalid_snapshot_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    log, _ = FileMetadataLog.open(tmp_path)
    with log:
        with pytest.raises(SnapshotError):
            log.store_snapshot(OffsetAndEpoch(epoch=1, offset=3), data_batch(0, 1, 1))
        assert log.snapshot_ids() == []
        assert log.snapshot_size(OffsetAndEpoch(epoch=1, offset=3)) is None
    assert sorted(p.name for p in tmp_path.iterdir() if "checkpoint" in p.name) == ["leader-epoch-checkpoint"]


def test_after_a_restart_the_log_starts_at_its_first_segment(tmp_path: Path) -> None:
    log, _ = FileMetadataLog.open(tmp_path, segment_bytes=100)
    with log:
        for offset in range(0, 6, 2):
            log.append(data_batch(offset, 1, 2))
        log.store_snapshot(OffsetAndEpoch(epoch=1, offset=3), snapshot_bytes(1))
        log.delete_before(3)
        assert log.log_start_offset == 3
        first_base = min(int(p.name[:20]) for p in tmp_path.glob("*.log"))
        assert first_base == 2  # the segment holding offset 3 starts at 2 and is kept
    log, report = FileMetadataLog.open(tmp_path, segment_bytes=100)
    with log:
        assert report.is_clean
        assert log.log_start_offset == 2
        assert log.end_offset() == OffsetAndEpoch(epoch=1, offset=6)
        assert log.snapshot_ids() == [OffsetAndEpoch(epoch=1, offset=3)]


def on_disk(directory: Path) -> list[OffsetAndEpoch]:
    return [OffsetAndEpoch(epoch=s.epoch, offset=s.end_offset) for s in list_snapshots(directory)]


def test_the_snapshot_listing_stays_true_to_the_directory_when_a_store_or_delete_fails_part_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = OffsetAndEpoch(epoch=1, offset=3), OffsetAndEpoch(epoch=2, offset=5)
    log, _ = FileMetadataLog.open(tmp_path)
    with log:
        log.append(data_batch(0, 1, 3) + data_batch(3, 2, 2))
        log.store_snapshot(first, snapshot_bytes(1))

        def failing_fsync_dir(directory: Path) -> None:
            raise OSError(5, "Input/output error")

        # The rename happened, the directory fsync did not: the snapshot is there, and listed.
        monkeypatch.setattr(snapshots, "fsync_dir", failing_fsync_dir)
        with pytest.raises(OSError):
            log.store_snapshot(second, snapshot_bytes(2))
        assert log.snapshot_ids() == on_disk(tmp_path) == [first, second]
        assert log.snapshot_size(second) == len(snapshot_bytes(2))
        # A delete renamed to .deleted but failed before the unlink: the snapshot is gone.
        with pytest.raises(OSError):
            log.delete_snapshot(first)
        assert log.snapshot_ids() == on_disk(tmp_path) == [second]
        assert log.snapshot_size(first) is None
        monkeypatch.undo()
        log.delete_snapshot(second)
        assert log.snapshot_ids() == on_disk(tmp_path) == []
    log, report = FileMetadataLog.open(tmp_path)
    with log:
        assert log.snapshot_ids() == []
        assert report.removed_files == (f"{snapshots.snapshot_file_name(snapshots.SnapshotId(3, 1))}.deleted",)


def _part_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".part"))


def test_a_snapshot_prepared_off_the_loop_is_stored_by_renaming_it_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`prepare_snapshot` (the controller's snapshot thread) writes, checks and fsyncs the file;
    `store_snapshot` of the same bytes (raft's loop) then neither checks nor rewrites it."""
    sid = OffsetAndEpoch(epoch=2, offset=3)
    data = snapshot_bytes(2)
    log, _ = FileMetadataLog.open(tmp_path)
    with log:
        log.append(data_batch(0, 2, 3))
        log.prepare_snapshot(sid, data)
        assert log.snapshot_ids() == []  # not a snapshot until stored
        assert len(_part_files(tmp_path)) == 1
        checks: list[Path] = []
        monkeypatch.setattr(snapshots, "_validate_snapshot_file", checks.append)
        log.store_snapshot(sid, data)
        assert checks == []
        assert log.snapshot_ids() == [sid]
        assert _part_files(tmp_path) == []
    log, _ = FileMetadataLog.open(tmp_path)
    with log:
        assert log.read_snapshot(sid, 0, 1 << 20) == data


def test_prepared_snapshots_never_stored_or_stored_with_other_bytes_leave_nothing_behind(tmp_path: Path) -> None:
    log, _ = FileMetadataLog.open(tmp_path)
    with log:
        log.append(data_batch(0, 2, 6))
        first, second = OffsetAndEpoch(epoch=2, offset=3), OffsetAndEpoch(epoch=2, offset=6)
        log.prepare_snapshot(first, snapshot_bytes(2))
        log.discard_prepared_snapshot(first)
        assert _part_files(tmp_path) == []
        # Stored with a different bytes object (equal or not): written again, the prepared file dropped.
        log.prepare_snapshot(second, snapshot_bytes(2))
        log.store_snapshot(second, bytes(bytearray(snapshot_bytes(2))))
        assert log.snapshot_ids() == [second] and _part_files(tmp_path) == []
        with pytest.raises(SnapshotError):
            log.prepare_snapshot(first, data_batch(0, 1, 1))  # not a snapshot: refused, nothing kept
        assert _part_files(tmp_path) == []
        log.prepare_snapshot(first, snapshot_bytes(2))
    assert _part_files(tmp_path) == []  # close drops what was never stored


def _deleted(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".deleted"))


def test_deleted_snapshots_and_segments_wait_out_the_delete_delay_as_kafkas_metadata_log_does(tmp_path: Path) -> None:
    """Kafka's KafkaMetadataLog renames a deleted snapshot `.checkpoint.deleted` and trimmed
    segments `.deleted`, and unlinks them after `internal.metadata.delete.delay.millis`."""
    old, new = OffsetAndEpoch(epoch=1, offset=2), OffsetAndEpoch(epoch=1, offset=4)
    log, _ = FileMetadataLog.open(tmp_path, segment_bytes=100, delete_delay_ms=60_000)
    with log:
        for offset in range(0, 6, 2):
            log.append(data_batch(offset, 1, 2))
        log.store_snapshot(old, snapshot_bytes(1))
        log.store_snapshot(new, snapshot_bytes(1))
        log.delete_before(4)
        log.delete_snapshot(old)
        waiting = ["00000000000000000000.index.deleted", "00000000000000000000.log.deleted",
                   "00000000000000000002-0000000001.checkpoint.deleted",
                   "00000000000000000002.index.deleted", "00000000000000000002.log.deleted"]
        assert _deleted(tmp_path) == waiting and sorted(log.files_awaiting_deletion) == waiting
        assert log.snapshot_ids() == [new] and on_disk(tmp_path) == [new]
        assert log.delete_due_files() == []  # a minute has not passed
        assert _deleted(tmp_path) == waiting
    # Closed with files still waiting: the next open removes them.
    log, report = FileMetadataLog.open(tmp_path, segment_bytes=100, delete_delay_ms=60_000)
    with log:
        assert _deleted(tmp_path) == [] and set(waiting) <= set(report.removed_files)
        assert log.snapshot_ids() == [new] and log.log_start_offset == 4


def test_deleted_metadata_files_are_unlinked_once_the_delay_passed_and_at_once_without_one(tmp_path: Path) -> None:
    for delay_ms in (50, 0):
        directory = tmp_path / f"delay-{delay_ms}"
        log, _ = FileMetadataLog.open(directory, segment_bytes=100, delete_delay_ms=delay_ms)
        with log:
            for offset in range(0, 6, 2):
                log.append(data_batch(offset, 1, 2))
            log.store_snapshot(OffsetAndEpoch(epoch=1, offset=2), snapshot_bytes(1))
            log.store_snapshot(OffsetAndEpoch(epoch=1, offset=4), snapshot_bytes(1))
            log.delete_before(4)
            log.delete_snapshot(OffsetAndEpoch(epoch=1, offset=2))
            if delay_ms:
                assert len(_deleted(directory)) == 5
                time.sleep(0.2)
                assert len(log.delete_due_files()) == 5
            assert _deleted(directory) == [] and log.files_awaiting_deletion == []
    with pytest.raises(ValueError, match="delete delay must be at least 0, got -1"):
        FileMetadataLog.open(tmp_path / "refused", delete_delay_ms=-1)
