"""Partition logs: appends, reads, rolls, truncation, retention and the leader-epoch checkpoint."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import pytest
from kio.records.readers import read_batch

from kraft_engine.records.batches import build_batch, iter_batches, read_batch_header
from kraft_engine.storage.checkpoint_file import read_leader_epoch_checkpoint
from kraft_engine.storage.partition_log import (
    LogError,
    OffsetOutOfRangeError,
    PartitionLog,
    partition_directory_name,
    segment_file_name,
)


def batch(*values: bytes, base_offset: int = 0, epoch: int = 0, timestamp_ms: int = 1_700_000_000_123) -> bytes:
    return build_batch(
        base_offset=base_offset, partition_leader_epoch=epoch, values=list(values), timestamp_ms=timestamp_ms
    )


def offsets_in(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h, _ in iter_batches(data)]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "__cluster_metadata-0"


def open_log(log_dir: Path, **kwargs: int) -> PartitionLog:
    log, report = PartitionLog.open(log_dir, **kwargs)
    assert report.is_clean, report.describe()
    return log


def test_new_log_starts_empty_with_first_segment(log_dir: Path) -> None:
    with open_log(log_dir) as log:
        assert (log.log_start_offset, log.log_end_offset, log.flushed_offset) == (0, 0, 0)
        assert log.read(0, max_bytes=1000) == b""
    assert sorted(p.name for p in log_dir.iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "leader-epoch-checkpoint",
    ]


def test_leader_append_assigns_offsets_and_stamps_epoch(log_dir: Path) -> None:
    with open_log(log_dir) as log:
        first = log.append_as_leader(batch(b"a", b"b", base_offset=99), epoch=3)
        assert (first.first_offset, first.last_offset) == (0, 1)
        info = log.append_as_leader(batch(b"c"), epoch=3)
        assert (info.first_offset, info.last_offset) == (2, 2)
        data = log.read(0, max_bytes=1 << 20)
    assert offsets_in(data) == [(0, 1), (2, 2)]
    for header, raw in iter_batches(data):
        assert header.partition_leader_epoch == 3
        decoded, _ = read_batch(bytes(raw), 0)  # kio verifies the CRC of the patched batch
        assert [r.offset for r in decoded.records] == list(range(header.base_offset, header.next_offset))


def test_leader_append_preserves_the_original_bytes_apart_from_offset_and_epoch(log_dir: Path) -> None:
    original = batch(b"x", b"y", timestamp_ms=1_700_000_000_777)
    with open_log(log_dir) as log:
        log.append_as_leader(original, epoch=5)
        stored = log.read(0, max_bytes=1 << 20)
    assert stored[12:] != original[12:]  # epoch patched
    assert stored[16:] == original[16:]
    assert read_batch_header(stored).max_timestamp == 1_700_000_000_777


def test_follower_append_requires_contiguous_offsets(log_dir: Path) -> None:
    with open_log(log_dir) as log:
        log.append_as_follower(batch(b"a", b"b", base_offset=0, epoch=1) + batch(b"c", base_offset=2, epoch=2))
        assert log.log_end_offset == 3
        with pytest.raises(LogError, match="does not follow the log end 3"):
            log.append_as_follower(batch(b"d", base_offset=4, epoch=2))
        with pytest.raises(LogError, match="does not follow"):
            log.append_as_follower(batch(b"d", base_offset=2, epoch=2))
        with pytest.raises(LogError, match="leader epoch 1"):
            log.append_as_follower(batch(b"d", base_offset=3, epoch=1))
        # A bad batch anywhere refuses the whole append.
        with pytest.raises(LogError):
            log.append_as_follower(batch(b"d", base_offset=3, epoch=2) + batch(b"e", base_offset=9, epoch=2))
        assert log.log_end_offset == 3
        assert offsets_in(log.read(0, max_bytes=1 << 20)) == [(0, 1), (2, 2)]


@pytest.mark.parametrize(
    "bad",
    [b"", b"\x00" * 10, batch(b"a")[:-1], batch(b"a")[:30] + b"\xff" + batch(b"a")[31:]],
    ids=["empty", "short", "truncated", "crc-mismatch"],
)
def test_appending_bad_bytes_is_refused_and_changes_nothing(log_dir: Path, bad: bytes) -> None:
    with open_log(log_dir) as log:
        log.append_as_leader(batch(b"ok"), epoch=1)
        with pytest.raises(LogError):
            log.append_as_leader(bad, epoch=1)
        with pytest.raises(LogError):
            log.append_as_follower(bad)
        assert log.log_end_offset == 1
    with open_log(log_dir) as reopened:
        assert reopened.log_end_offset == 1


def test_leader_epoch_cannot_go_backwards(log_dir: Path) -> None:
    with open_log(log_dir) as log:
        log.append_as_leader(batch(b"a"), epoch=4)
        with pytest.raises(LogError, match="below the log's latest epoch 4"):
            log.append_as_leader(batch(b"b"), epoch=3)


def test_read_returns_whole_batches_within_limit_but_at_least_one(log_dir: Path) -> None:
    with open_log(log_dir) as log:
        for _i in range(5):
            log.append_as_leader(batch(b"v" * 100, b"w" * 100), epoch=1)
        size = len(log.read(0, max_bytes=1))
        assert offsets_in(log.read(0, max_bytes=1)) == [(0, 1)]  # larger than the limit: still one batch
        assert offsets_in(log.read(0, max_bytes=2 * size)) == [(0, 1), (2, 3)]
        assert offsets_in(log.read(0, max_bytes=3 * size - 1)) == [(0, 1), (2, 3)]
        # An offset inside a batch returns that whole batch.
        assert offsets_in(log.read(5, max_bytes=size)) == [(4, 5)]
        assert log.read(10, max_bytes=size) == b""
        with pytest.raises(OffsetOutOfRangeError):
            log.read(11, max_bytes=size)


def test_segments_roll_by_segment_bytes_and_reads_cross_them(log_dir: Path) -> None:
    one = len(batch(b"x" * 200))
    with open_log(log_dir, segment_bytes=3 * one) as log:
        for _ in range(10):
            log.append_as_leader(batch(b"x" * 200), epoch=1)
        assert log.segment_names == [segment_file_name(o) for o in (0, 3, 6, 9)]
        for offset in range(10):
            assert offsets_in(log.read(offset, max_bytes=1)) == [(offset, offset)]
        # A read stops at the segment boundary, like Kafka's.
        assert offsets_in(log.read(1, max_bytes=1 << 20)) == [(1, 1), (2, 2)]
    for name in ("00000000000000000003.log", "00000000000000000003.index"):
        assert (log_dir / name).exists()
    with open_log(log_dir, segment_bytes=3 * one) as reopened:
        assert reopened.log_end_offset == 10
        assert offsets_in(reopened.read(4, max_bytes=1 << 20)) == [(4, 4), (5, 5)]


def test_a_batch_larger_than_a_segment_gets_its_own_segment(log_dir: Path) -> None:
    with open_log(log_dir, segment_bytes=100) as log:
        log.append_as_leader(batch(b"x" * 300), epoch=1)
        log.append_as_leader(batch(b"y" * 300), epoch=1)
        assert log.segment_names == [segment_file_name(0), segment_file_name(1)]


def test_sparse_index_is_kafkas_format_and_speeds_reads(log_dir: Path) -> None:
    with open_log(log_dir, index_interval_bytes=1000) as log:
        for _ in range(40):
            log.append_as_leader(batch(b"z" * 200), epoch=1)
        raw = (log_dir / "00000000000000000000.index").read_bytes()
        assert len(raw) % 8 == 0 and len(raw) > 0
        entries = [struct.unpack_from(">ii", raw, i) for i in range(0, len(raw), 8)]
        data = log.read(0, max_bytes=1 << 30)
        positions = {}
        position = 0
        for header, chunk in iter_batches(data):
            positions[position] = header.last_offset
            position += len(chunk)
        for relative_offset, position in entries:
            assert positions[position] == relative_offset  # entry = (last offset of batch, its position)
        # Kafka's rule: a new entry once more than index.interval.bytes were appended since the last.
        size = len(batch(b"z" * 200))
        spacing = next(n for n in range(1, 100) if n * size > 1000)
        assert [b - a for (a, _), (b, _) in itertools.pairwise(entries)] == [spacing] * (len(entries) - 1)
        for offset in range(40):
            assert offsets_in(log.read(offset, max_bytes=1)) == [(offset, offset)]


def test_truncate_to_cuts_at_batch_boundaries(log_dir: Path) -> None:
    with open_log(log_dir) as log:
        log.append_as_leader(batch(b"a", b"b", b"c"), epoch=1)  # 0..2
        log.append_as_leader(batch(b"d", b"e"), epoch=2)  # 3..4
        log.append_as_leader(batch(b"f"), epoch=3)  # 5
        log.flush()
        assert log.truncate_to(10) == 6
        # Offset 4 is inside the batch 3..4: the whole batch goes, the real end is 3.
        assert log.truncate_to(4) == 3
        assert log.log_end_offset == 3 and log.flushed_offset == 3
        assert log.epoch_entries == [(1, 0)]
        assert read_leader_epoch_checkpoint(log_dir / "leader-epoch-checkpoint") == [(1, 0)]
        assert offsets_in(log.read(0, max_bytes=1 << 20)) == [(0, 2)]
        log.append_as_follower(batch(b"x", base_offset=3, epoch=4))
        assert log.end_offset_for_epoch(1) == (1, 3)
        assert log.end_offset_for_epoch(2) == (1, 3)
        assert log.end_offset_for_epoch(4) == (4, 4)
    with open_log(log_dir) as reopened:
        assert reopened.log_end_offset == 4
        assert reopened.epoch_entries == [(1, 0), (4, 3)]


def test_truncate_across_segments_deletes_later_ones(log_dir: Path) -> None:
    one = len(batch(b"x" * 100))
    with open_log(log_dir, segment_bytes=2 * one) as log:
        for epoch in (1, 1, 2, 2, 3, 3):
            log.append_as_leader(batch(b"x" * 100), epoch=epoch)
        assert len(log.segment_names) == 3
        assert log.truncate_to(3) == 3
        assert log.segment_names == [segment_file_name(0), segment_file_name(2)]
        assert not (log_dir / segment_file_name(4)).exists()
        assert log.epoch_entries == [(1, 0), (2, 2)]
        with pytest.raises(OffsetOutOfRangeError):
            log.delete_below(4)


def test_delete_below_advances_log_start_and_removes_whole_segments(log_dir: Path) -> None:
    one = len(batch(b"x" * 100))
    with open_log(log_dir, segment_bytes=2 * one) as log:
        for epoch in (1, 1, 2, 2, 3, 3, 3):
            log.append_as_leader(batch(b"x" * 100), epoch=epoch)
        assert log.delete_below(3) == [segment_file_name(0)]
        assert log.log_start_offset == 3
        assert log.epoch_entries == [(2, 3), (3, 4)]
        with pytest.raises(OffsetOutOfRangeError):
            log.read(2, max_bytes=100)
        with pytest.raises(OffsetOutOfRangeError):
            log.truncate_to(1)
        assert offsets_in(log.read(3, max_bytes=1)) == [(3, 3)]
        assert log.delete_below(2) == []  # never moves backwards
        assert log.delete_below(7) == [segment_file_name(2), segment_file_name(4)]
        assert log.segment_names == [segment_file_name(6)]
        assert log.read(7, max_bytes=10) == b""
    # The log start offset comes back from the caller's checkpoint, as in Kafka.
    log, report = PartitionLog.open(log_dir, segment_bytes=2 * one, log_start_offset=7)
    with log:
        assert report.is_clean
        assert (log.log_start_offset, log.log_end_offset) == (7, 7)


def test_truncate_fully_and_start_at(log_dir: Path) -> None:
    with open_log(log_dir) as log:
        log.append_as_leader(batch(b"a", b"b"), epoch=1)
        log.truncate_fully_and_start_at(100)
        assert (log.log_start_offset, log.log_end_offset, log.epoch_entries) == (100, 100, [])
        assert log.segment_names == [segment_file_name(100)]
        log.append_as_follower(batch(b"c", base_offset=100, epoch=5))
    log2, _ = PartitionLog.open(log_dir, log_start_offset=100)
    with log2:
        assert (log2.log_start_offset, log2.log_end_offset, log2.epoch_entries) == (100, 101, [(5, 100)])


def test_flush_advances_flushed_offset(log_dir: Path) -> None:
    with open_log(log_dir) as log:
        log.append_as_leader(batch(b"a"), epoch=1)
        assert (log.log_end_offset, log.flushed_offset) == (1, 0)
        log.flush()
        assert log.flushed_offset == 1


def test_a_flush_synced_on_another_thread_covers_only_what_was_appended_before_it_began(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import threading

    synced: list[int] = []
    real_fdatasync = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real_fdatasync(fd))[1])
    with open_log(log_dir) as log:
        log.append_as_leader(batch(b"a"), epoch=1)
        pending = log.begin_flush()
        log.append_as_leader(batch(b"b"), epoch=1)  # the caller keeps appending meanwhile
        synced.clear()
        worker = threading.Thread(target=pending.sync)
        worker.start()
        worker.join()
        log.complete_flush(pending)
        assert (pending.end_offset, log.flushed_offset, log.log_end_offset) == (1, 1, 2)
        assert len(synced) == 1
        log.flush()  # "b" was written after the sync began: still unsynced, so this fsyncs again
        assert (len(synced), log.flushed_offset) == (2, 2)
        log.flush()  # nothing new: no fsync
        assert len(synced) == 2


def test_a_flush_begun_before_a_truncation_does_not_count(log_dir: Path) -> None:
    with open_log(log_dir) as log:
        log.append_as_leader(batch(b"a"), epoch=1)
        log.flush()
        log.append_as_leader(batch(b"b"), epoch=1)
        pending = log.begin_flush()
        log.truncate_to(1)
        log.append_as_leader(batch(b"c"), epoch=2)
        pending.sync()
        log.complete_flush(pending)
        assert log.flushed_offset == 1


def test_leader_epoch_checkpoint_is_kept_on_append(log_dir: Path) -> None:
    with open_log(log_dir) as log:
        log.append_as_leader(batch(b"a"), epoch=1)
        log.append_as_leader(batch(b"b", b"c"), epoch=1)
        log.append_as_leader(batch(b"d"), epoch=4)
        assert (log_dir / "leader-epoch-checkpoint").read_text() == "0\n2\n1 0\n4 3\n"
        assert log.end_offset_for_epoch(1) == (1, 3)
        assert log.end_offset_for_epoch(3) == (1, 3)
        assert log.end_offset_for_epoch(4) == (4, 4)
        assert log.end_offset_for_epoch(5) == (-1, -1)


def test_index_stays_consistent_through_truncation_and_reopen(log_dir: Path) -> None:
    with open_log(log_dir, index_interval_bytes=500) as log:
        for _ in range(20):
            log.append_as_leader(batch(b"q" * 150), epoch=1)
        log.truncate_to(13)
        for _ in range(7):
            log.append_as_leader(batch(b"r" * 150), epoch=2)
        live_index = (log_dir / "00000000000000000000.index").read_bytes()
    log, report = PartitionLog.open(log_dir, index_interval_bytes=500)
    with log:
        assert report.is_clean and report.rebuilt_indexes == ()
        assert (log_dir / "00000000000000000000.index").read_bytes() == live_index
        for offset in range(20):
            assert offsets_in(log.read(offset, max_bytes=1)) == [(offset, offset)]


def test_partition_directory_name() -> None:
    assert partition_directory_name("__cluster_metadata", 0) == "__cluster_metadata-0"
    with pytest.raises(ValueError):
        partition_directory_name("", 0)


def test_open_finishes_retention_below_the_checkpointed_log_start(log_dir: Path) -> None:
    one = len(batch(b"x" * 100))
    with open_log(log_dir, segment_bytes=2 * one) as log:
        for _ in range(6):
            log.append_as_leader(batch(b"x" * 100), epoch=1)
    # The caller had checkpointed log start 4, then crashed before deleting the segments below it.
    log, report = PartitionLog.open(log_dir, segment_bytes=2 * one, log_start_offset=4)
    with log:
        assert report.removed_files == (
            f"{segment_file_name(0)} (below the log start offset 4)",
            f"{segment_file_name(2)} (below the log start offset 4)",
        )
        assert log.segment_names == [segment_file_name(4)]
        assert (log.log_start_offset, log.log_end_offset, log.epoch_entries) == (4, 6, [(1, 4)])
