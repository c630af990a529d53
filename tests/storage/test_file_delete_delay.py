"""`file.delete.delay.ms`: segments a running log deletes wait as `.deleted` files, as Kafka's do.

Kafka's LocalLog deletes segments in two steps when retention, DeleteRecords, a truncation or a
restart at a new offset drops them: the files are renamed `.deleted` at once and unlinked after
`file.delete.delay.ms` (a scheduled task), so a read that found them a moment before is not cut
off. A restart removes leftover `.deleted` files straight away (Kafka's LogLoader).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kraft_engine.records.batches import build_batch
from kraft_engine.storage.partition_log import PartitionLog


def _log(directory: Path, *, delay_ms: int) -> PartitionLog:
    log, _ = PartitionLog.open(directory, segment_bytes=400)
    log.configure_deletes(file_delete_delay_ms=delay_ms)
    for i in range(6):  # one batch per segment: segments 0..5
        log.append_as_leader(build_batch(base_offset=0, partition_leader_epoch=0, values=[bytes([i]) * 300],
                                         timestamp_ms=1_700_000_000_000), epoch=0)
    return log


def _names(directory: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(suffix))


def test_segments_below_a_new_log_start_wait_as_deleted_files_until_the_delay_passed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    with _log(directory, delay_ms=60_000) as log:
        assert log.delete_below(2) == ["00000000000000000000.log", "00000000000000000001.log"]
        waiting = ["00000000000000000000.index.deleted", "00000000000000000000.log.deleted",
                   "00000000000000000001.index.deleted", "00000000000000000001.log.deleted"]
        assert _names(directory, ".deleted") == waiting
        assert sorted(log.files_awaiting_deletion) == waiting
        assert _names(directory, ".log")[0] == "00000000000000000002.log"
        assert log.delete_due_files() == []  # a minute has not passed
        assert _names(directory, ".deleted") == waiting
        assert log.read(2, max_bytes=1 << 20)[:8] == (2).to_bytes(8, "big")
    # Closed with files still waiting: the next open removes them, as Kafka's LogLoader does.
    reopened, report = PartitionLog.open(directory, segment_bytes=400, log_start_offset=2)
    with reopened:
        assert _names(directory, ".deleted") == []
        assert set(waiting) <= set(report.removed_files)
        assert (reopened.log_start_offset, reopened.log_end_offset) == (2, 6)


def test_deleted_files_are_unlinked_once_the_delay_has_passed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    with _log(directory, delay_ms=50) as log:
        log.delete_below(3)
        assert len(_names(directory, ".deleted")) == 6
        time.sleep(0.2)
        assert len(log.delete_due_files()) == 6
        assert _names(directory, ".deleted") == [] and log.files_awaiting_deletion == []
        assert _names(directory, ".log")[0] == "00000000000000000003.log"


def test_a_truncation_and_a_restart_at_a_new_offset_delete_the_same_way(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    with _log(directory, delay_ms=60_000) as log:
        assert log.truncate_to(4) == 4
        # Segment 4 is cut to nothing and kept (the log continues in it); 5 goes.
        assert _names(directory, ".log.deleted") == ["00000000000000000005.log.deleted"]
        log.truncate_fully_and_start_at(10)
        assert _names(directory, ".log") == ["00000000000000000010.log"]
        assert len(_names(directory, ".log.deleted")) == 6


def test_a_zero_delay_unlinks_at_once_and_a_negative_one_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    with _log(directory, delay_ms=0) as log:
        log.delete_below(4)
        assert _names(directory, ".deleted") == [] and log.files_awaiting_deletion == []
        with pytest.raises(ValueError, match=r"file\.delete\.delay\.ms must be at least 0, got -1"):
            log.configure_deletes(file_delete_delay_ms=-1)
