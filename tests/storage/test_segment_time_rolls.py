"""segment.ms: a segment rolls once an appended batch's timestamp is segment.ms past its first
batch's (Kafka's LogSegment.shouldRoll), and time retention can then drop the old segment."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft_engine.records.batches import build_batch
from kraft_engine.storage.partition_log import PartitionLog

T0 = 1_700_000_000_000
MINUTE_MS = 60_000


def batch(timestamp_ms: int) -> bytes:
    return build_batch(base_offset=0, partition_leader_epoch=0, values=[b"v" * 50], timestamp_ms=timestamp_ms)


def test_a_batch_segment_ms_past_the_first_one_starts_a_new_segment(tmp_path: Path) -> None:
    log, _ = PartitionLog.open(tmp_path / "t-0")
    log.configure_rolls(segment_bytes=1 << 30, segment_ms=10 * MINUTE_MS)
    for minute in (0, 5, 10):  # 10 minutes is not more than segment.ms: same segment
        log.append_as_leader(batch(T0 + minute * MINUTE_MS), epoch=0)
    assert log.segment_base_offsets == [0]
    log.append_as_leader(batch(T0 + 10 * MINUTE_MS + 1), epoch=0)
    assert log.segment_base_offsets == [0, 3]
    # The new segment counts from its own first batch.
    log.append_as_leader(batch(T0 + 20 * MINUTE_MS), epoch=0)
    assert log.segment_base_offsets == [0, 3]
    log.append_as_leader(batch(T0 + 21 * MINUTE_MS), epoch=0)
    assert log.segment_base_offsets == [0, 3, 5]
    log.close()


def test_the_first_timestamp_of_the_active_segment_is_read_back_after_a_reopen(tmp_path: Path) -> None:
    log, _ = PartitionLog.open(tmp_path / "t-0")
    log.append_as_leader(batch(T0), epoch=0)
    log.close()
    log, _ = PartitionLog.open(tmp_path / "t-0")
    log.configure_rolls(segment_bytes=1 << 30, segment_ms=MINUTE_MS)
    log.append_as_leader(batch(T0 + MINUTE_MS + 1), epoch=0)
    assert log.segment_base_offsets == [0, 1]
    log.close()


def test_without_segment_ms_only_size_rolls(tmp_path: Path) -> None:
    log, _ = PartitionLog.open(tmp_path / "t-0")
    for day in range(3):
        log.append_as_leader(batch(T0 + day * 86_400_000), epoch=0)
    assert log.segment_base_offsets == [0]
    log.close()


def test_a_rolled_segment_expires_by_time_retention(tmp_path: Path) -> None:
    log, _ = PartitionLog.open(tmp_path / "t-0")
    log.configure_rolls(segment_bytes=1 << 30, segment_ms=MINUTE_MS)
    log.append_as_leader(batch(T0), epoch=0)
    log.append_as_leader(batch(T0 + 2 * MINUTE_MS), epoch=0)
    deleted = log.delete_retained_segments(now_ms=T0 + 3 * MINUTE_MS, retention_ms=2 * MINUTE_MS + 1,
                                           retention_bytes=-1, high_watermark=2)
    assert deleted == ["00000000000000000000.log"]
    assert log.log_start_offset == 1
    log.close()


def test_jitter_rolls_earlier_but_never_before_segment_ms_less_the_jitter(tmp_path: Path) -> None:
    for _ in range(20):
        log, _ = PartitionLog.open(tmp_path / "t-0")
        log.configure_rolls(segment_bytes=1 << 30, segment_ms=10 * MINUTE_MS, segment_jitter_ms=5 * MINUTE_MS)
        log.append_as_leader(batch(T0), epoch=0)
        log.append_as_leader(batch(T0 + 5 * MINUTE_MS), epoch=0)  # jitter is below 5 minutes
        assert log.segment_base_offsets == [0]
        log.append_as_leader(batch(T0 + 10 * MINUTE_MS + 1), epoch=0)
        assert log.segment_base_offsets == [0, 2]
        log.close()
        for path in (tmp_path / "t-0").iterdir():
            path.unlink()


@pytest.mark.parametrize("segment_ms", [0, -5])
def test_a_segment_ms_below_one_is_refused(tmp_path: Path, segment_ms: int) -> None:
    log, _ = PartitionLog.open(tmp_path / "t-0")
    with pytest.raises(ValueError, match=r"segment\.ms must be at least 1"):
        log.configure_rolls(segment_bytes=1 << 30, segment_ms=segment_ms)
    log.close()
