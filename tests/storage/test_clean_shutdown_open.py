"""Opening a log after a clean shutdown reads only the active segment's tail; anything that does
not add up falls back to full recovery, so a wrong clean-shutdown marker costs time, not data."""

from __future__ import annotations

from pathlib import Path

from kraft_engine.records.batches import build_batch
from kraft_engine.storage.partition_log import PartitionLog

T0 = 1_700_000_000_000


def batch(i: int) -> bytes:
    return build_batch(base_offset=0, partition_leader_epoch=0, values=[b"v%d" % i] * 5, timestamp_ms=T0 + i)


def written(path: Path) -> tuple[int, list[bytes]]:
    """A closed log of several segments (epochs 1 and 2); its log end and every batch read back."""
    log, _ = PartitionLog.open(path, segment_bytes=400, index_interval_bytes=100)
    for i in range(30):
        log.append_as_leader(batch(i), epoch=1 if i < 15 else 2)
    end = log.log_end_offset
    batches = [log.read(o, max_bytes=1) for o in range(0, end, 5)]
    log.close()
    return end, batches


def corrupt_middle_of_first_segment(path: Path) -> None:
    first = sorted(path.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0xFF
    first.write_bytes(bytes(data))


def test_a_clean_open_does_not_read_sealed_segments(tmp_path: Path) -> None:
    path = tmp_path / "orders-0"
    end, batches = written(path)
    corrupt_middle_of_first_segment(path)  # only a read of the first segment could notice
    log, report = PartitionLog.open(path, segment_bytes=400, index_interval_bytes=100, clean_shutdown=True)
    assert report.is_clean and report.after_clean_shutdown and report.validated_segments == ()
    assert log.log_end_offset == end
    assert log.epoch_entries == [(1, 0), (2, 75)]
    assert [log.read(o, max_bytes=1) for o in range(75, end, 5)] == batches[15:]
    assert log.append_as_leader(batch(99), epoch=2).first_offset == end  # appends continue at the end
    log.close()
    # The same files opened as after a crash: full recovery finds the damage and cuts there.
    _, crashed = PartitionLog.open(path, segment_bytes=400, index_interval_bytes=100)
    assert not crashed.is_clean


def test_a_torn_tail_under_a_wrong_marker_falls_back_to_recovery(tmp_path: Path) -> None:
    path = tmp_path / "orders-0"
    end, _ = written(path)
    last = sorted(path.glob("*.log"))[-1]
    last.write_bytes(last.read_bytes()[:-7])
    log, report = PartitionLog.open(path, segment_bytes=400, index_interval_bytes=100, clean_shutdown=True)
    assert report.truncated is not None and not report.after_clean_shutdown
    assert log.log_end_offset == end - 5
    log.close()


def test_a_missing_epoch_checkpoint_or_a_bad_index_falls_back_to_recovery(tmp_path: Path) -> None:
    path = tmp_path / "orders-0"
    end, batches = written(path)
    (path / "leader-epoch-checkpoint").unlink()
    log, report = PartitionLog.open(path, segment_bytes=400, index_interval_bytes=100, clean_shutdown=True)
    assert report.validated_segments and not report.after_clean_shutdown  # it read the segments
    assert report.leader_epoch_checkpoint == "missing: rebuilt from the log"
    assert (log.log_end_offset, log.epoch_entries) == (end, [(1, 0), (2, 75)])
    log.close()
    first_index = sorted(path.glob("*.index"))[0]
    first_index.write_bytes(b"\x00\x00\x00\x01\x7f\xff\xff\xff")  # an entry past the segment's end
    log, report = PartitionLog.open(path, segment_bytes=400, index_interval_bytes=100, clean_shutdown=True)
    assert first_index.name in report.rebuilt_indexes
    assert [log.read(o, max_bytes=1) for o in range(0, end, 5)] == batches
    log.close()
