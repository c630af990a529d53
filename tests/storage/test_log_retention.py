"""Time and size retention (Kafka's deleteOldSegments): which segments go, and what never does."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft_engine.records.batches import build_batch
from kraft_engine.storage.partition_log import PartitionLog

T0 = 1_700_000_000_000
HOUR_MS = 3_600_000
VALUE = b"v" * 200


def one_batch(timestamp_ms: int) -> bytes:
    return build_batch(base_offset=0, partition_leader_epoch=0, values=[VALUE, VALUE], timestamp_ms=timestamp_ms)


BATCH_BYTES = len(one_batch(T0))


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    """Six segments of two batches (four records) each, an hour apart, plus an active one."""
    opened, _ = PartitionLog.open(tmp_path / "orders-0", segment_bytes=2 * BATCH_BYTES)
    for hour in range(13):
        opened.append_as_leader(one_batch(T0 + hour * HOUR_MS), epoch=0)
    return opened


def test_the_fixture_has_six_full_segments_and_an_active_one(log: PartitionLog) -> None:
    assert [int(name[:20]) for name in log.segment_names] == [0, 4, 8, 12, 16, 20, 24]
    assert log.log_end_offset == 26


def test_time_retention_deletes_the_oldest_expired_segments_and_moves_the_log_start(log: PartitionLog) -> None:
    # Segment k's newest batch is at hour 2k+1; at hour 12 with 6 h retention, hours 1, 3 and 5 expire.
    deleted = log.delete_retained_segments(now_ms=T0 + 12 * HOUR_MS, retention_ms=6 * HOUR_MS + 1,
                                           retention_bytes=-1, high_watermark=26)
    assert [int(name[:20]) for name in deleted] == [0, 4, 8]
    assert log.log_start_offset == 12
    assert log.read(12, max_bytes=1)
    assert not (log.directory / deleted[0]).exists()


def test_size_retention_keeps_at_least_retention_bytes(log: PartitionLog) -> None:
    total = log.size_in_bytes()
    deleted = log.delete_retained_segments(now_ms=T0, retention_ms=-1, retention_bytes=total - 3 * 2 * BATCH_BYTES,
                                           high_watermark=26)
    assert len(deleted) == 3
    assert log.size_in_bytes() >= total - 3 * 2 * BATCH_BYTES
    # One byte more to keep: one segment fewer goes.
    assert log.delete_retained_segments(now_ms=T0, retention_ms=-1, retention_bytes=log.size_in_bytes() - 2 * BATCH_BYTES + 1,
                                        high_watermark=26) == []


def test_nothing_at_or_above_the_high_watermark_is_deleted(log: PartitionLog) -> None:
    deleted = log.delete_retained_segments(now_ms=T0 + 100 * HOUR_MS, retention_ms=0, retention_bytes=-1,
                                           high_watermark=9)
    assert [int(name[:20]) for name in deleted] == [0, 4]  # segment 8 ends at 12 > 9
    assert log.log_start_offset == 8


def test_an_expired_active_segment_rolls_and_the_log_restarts_empty_at_its_end(log: PartitionLog) -> None:
    deleted = log.delete_retained_segments(now_ms=T0 + 100 * HOUR_MS, retention_ms=HOUR_MS, retention_bytes=-1,
                                           high_watermark=26)
    assert len(deleted) == 7
    assert (log.log_start_offset, log.log_end_offset) == (26, 26)
    assert log.append_as_leader(one_batch(T0), epoch=1).first_offset == 26


def test_no_retention_keeps_everything(log: PartitionLog) -> None:
    assert log.delete_retained_segments(now_ms=T0 + 100 * HOUR_MS, retention_ms=-1, retention_bytes=-1,
                                        high_watermark=26) == []


def test_segment_timestamps_survive_a_reopen_and_a_truncation(tmp_path: Path, log: PartitionLog) -> None:
    log.truncate_to(24)  # the active segment's batches go: its timestamp is recomputed when needed
    log.close()
    reopened, _ = PartitionLog.open(tmp_path / "orders-0", segment_bytes=2 * BATCH_BYTES, recovery_point=20)
    deleted = reopened.delete_retained_segments(now_ms=T0 + 12 * HOUR_MS, retention_ms=6 * HOUR_MS + 1,
                                                retention_bytes=-1, high_watermark=24)
    assert [int(name[:20]) for name in deleted] == [0, 4, 8]
    reopened.close()
