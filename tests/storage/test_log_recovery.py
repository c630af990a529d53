"""Recovery on open: torn tails, flipped bytes, garbage, zero-length and orphaned files.

Every test asserts the exact RecoveryReport and that every valid batch before the damage survives
byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_engine.records.batches import build_batch, iter_batches
from kraft_engine.storage import partition_log
from kraft_engine.storage.partition_log import DroppedBytes, PartitionLog, RecoveryReport, segment_file_name

SEGMENT = segment_file_name(0)


def batch(*values: bytes, base_offset: int = 0, epoch: int = 1) -> bytes:
    return build_batch(
        base_offset=base_offset, partition_leader_epoch=epoch, values=list(values), timestamp_ms=1_700_000_000_000
    )


def write_log(log_dir: Path, batches: list[bytes], **kwargs: int) -> bytes:
    """Append `batches` (as follower: offsets as given) and return the bytes stored."""
    log, report = PartitionLog.open(log_dir, **kwargs)
    with log:
        assert report.is_clean
        for b in batches:
            log.append_as_follower(b)
        log.flush()
        return log.read(log.log_start_offset, max_bytes=1 << 30)


def read_all(log: PartitionLog) -> bytes:
    out = b""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, max_bytes=1 << 30)
        out += chunk
        offset = list(iter_batches(chunk))[-1][0].next_offset
    return out


def three_batches() -> list[bytes]:
    return [batch(b"a", b"b"), batch(b"c", base_offset=2), batch(b"d", b"e", base_offset=3, epoch=2)]


def test_clean_reopen_reports_nothing(tmp_path: Path) -> None:
    stored = write_log(tmp_path, three_batches())
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report == RecoveryReport(log_end_offset=5, validated_segments=(SEGMENT,))
        assert report.describe() == []
        assert read_all(log) == stored


def test_torn_tail_mid_batch_is_truncated_and_reported(tmp_path: Path) -> None:
    batches = three_batches()
    write_log(tmp_path, batches)
    kept = len(batches[0]) + len(batches[1])
    segment = tmp_path / SEGMENT
    segment.write_bytes(segment.read_bytes()[: kept + 20])  # crash in the middle of the third batch
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report.truncated == DroppedBytes(
            SEGMENT,
            kept,
            20,
            f"torn batch: batch declares {len(batches[2])} bytes but only 20 are present",
            intact_searched_bytes=20,
        )
        assert report.deleted_segments == ()
        assert report.offsets_dropped == (3, None)
        assert log.log_end_offset == 3
        assert read_all(log) == batches[0] + batches[1]
        assert log.epoch_entries == [(1, 0)]
        assert segment.stat().st_size == kept
        # The log accepts the re-sent batch afterwards.
        log.append_as_follower(batches[2])
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report.is_clean
        assert read_all(log) == b"".join(batches)


def test_flipped_byte_in_the_middle_drops_everything_after_and_says_so(tmp_path: Path) -> None:
    batches = three_batches()
    write_log(tmp_path, batches)
    segment = tmp_path / SEGMENT
    raw = bytearray(segment.read_bytes())
    flip_at = len(batches[0]) + 40  # inside the second batch's CRC-covered bytes
    raw[flip_at] ^= 0xFF
    segment.write_bytes(bytes(raw))
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report.truncated is not None
        assert report.truncated.segment == SEGMENT
        assert report.truncated.position == len(batches[0])
        assert report.truncated.bytes_dropped == len(batches[1]) + len(batches[2])
        assert report.truncated.reason.startswith("corrupt batch: CRC-32C")
        # The intact third batch was lost behind the bad one, and the report names it.
        assert report.truncated.intact_batches == ((3, 4),)
        assert report.offsets_dropped == (2, 4)
        assert any("intact batches dropped" in line and "3..4" in line for line in report.describe())
        assert read_all(log) == batches[0]
        assert log.log_end_offset == 2


def test_a_bounded_search_for_intact_batches_says_it_may_be_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches = three_batches()
    write_log(tmp_path, batches)
    segment = tmp_path / SEGMENT
    raw = bytearray(segment.read_bytes())
    raw[40] ^= 0xFF  # the first batch is corrupt; the two behind it are intact
    segment.write_bytes(bytes(raw))
    # Search only as far as the second batch: the third one is dropped without being seen.
    monkeypatch.setattr(partition_log, "_INTACT_SEARCH_LIMIT_BYTES", len(batches[0]) + len(batches[1]))
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report.truncated is not None
        assert report.truncated.bytes_dropped == len(raw)
        assert report.truncated.intact_batches == ((2, 2),)
        assert not report.truncated.intact_search_complete
        assert f"only the first {len(batches[0]) + len(batches[1])} of the {len(raw)} dropped bytes" in "\n".join(
            report.describe()
        )


def test_garbage_after_the_last_batch_is_dropped(tmp_path: Path) -> None:
    stored = write_log(tmp_path, three_batches())
    segment = tmp_path / SEGMENT
    segment.write_bytes(stored + b"\x00\x01garbage" * 10)
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report.truncated is not None
        assert (report.truncated.position, report.truncated.bytes_dropped) == (len(stored), 90)
        assert report.truncated.intact_batches == ()
        assert read_all(log) == stored
        assert log.log_end_offset == 5


def test_zeroed_tail_like_a_preallocated_file_is_dropped(tmp_path: Path) -> None:
    stored = write_log(tmp_path, three_batches())
    (tmp_path / SEGMENT).write_bytes(stored + bytes(100))
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report.truncated is not None and report.truncated.bytes_dropped == 100
        assert "below the minimum" in report.truncated.reason
        assert read_all(log) == stored


def test_offset_contiguity_is_checked_because_base_offset_is_outside_the_crc(tmp_path: Path) -> None:
    batches = three_batches()
    write_log(tmp_path, batches)
    segment = tmp_path / SEGMENT
    raw = bytearray(segment.read_bytes())
    raw[len(batches[0]) + 7] ^= 0x01  # second batch claims base offset 3 instead of 2
    segment.write_bytes(bytes(raw))
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report.truncated is not None
        assert report.truncated.reason == "batch base offset 3 where 2 was expected"
        assert read_all(log) == batches[0]


def test_zero_length_last_segment_is_kept_as_the_active_segment(tmp_path: Path) -> None:
    stored = write_log(tmp_path, three_batches())
    (tmp_path / segment_file_name(5)).write_bytes(b"")  # crash right after a roll
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report.is_clean
        assert log.segment_names == [SEGMENT, segment_file_name(5)]
        assert read_all(log) == stored
        log.append_as_follower(batch(b"f", base_offset=5, epoch=2))
        assert log.log_end_offset == 6


def test_zero_length_only_segment_is_an_empty_log(tmp_path: Path) -> None:
    (tmp_path / SEGMENT).write_bytes(b"")
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report.is_clean
        assert log.log_end_offset == 0


def test_corrupt_earlier_segment_deletes_later_segments_and_reports_them(tmp_path: Path) -> None:
    one = len(batch(b"x" * 50))
    batches = [batch(b"x" * 50, base_offset=i, epoch=1) for i in range(6)]
    write_log(tmp_path, batches, segment_bytes=2 * one)
    names = [segment_file_name(o) for o in (0, 2, 4)]
    assert sorted(p.name for p in tmp_path.glob("*.log")) == names
    middle = tmp_path / names[1]
    raw = bytearray(middle.read_bytes())
    raw[one + 30] ^= 0x55  # second batch of the middle segment (offset 3)
    middle.write_bytes(bytes(raw))
    log, report = PartitionLog.open(tmp_path, segment_bytes=2 * one)
    with log:
        assert report.truncated is not None
        assert (report.truncated.segment, report.truncated.position, report.truncated.bytes_dropped) == (
            names[1],
            one,
            one,
        )
        assert report.deleted_segments == (
            DroppedBytes(
                names[2], 0, 2 * one, f"follows the point where {names[1]} was cut", ((4, 4), (5, 5)), 2 * one
            ),
        )
        assert report.offsets_dropped == (3, 5)
        assert log.segment_names == names[:2]
        assert not (tmp_path / names[2]).exists()
        assert not (tmp_path / names[2].replace(".log", ".index")).exists()
        assert read_all(log) == b"".join(batches[:3])


def test_recovery_point_skips_crc_checks_below_it_but_not_the_last_segment(tmp_path: Path) -> None:
    one = len(batch(b"x" * 50))
    batches = [batch(b"x" * 50, base_offset=i, epoch=1) for i in range(6)]
    write_log(tmp_path, batches, segment_bytes=2 * one)
    log, report = PartitionLog.open(tmp_path, segment_bytes=2 * one, recovery_point=4)
    with log:
        assert report.validated_segments == (segment_file_name(4),)
        assert log.log_end_offset == 6
    log, report = PartitionLog.open(tmp_path, segment_bytes=2 * one, recovery_point=3)
    with log:
        assert report.validated_segments == (segment_file_name(2), segment_file_name(4))


def test_leftovers_orphans_and_bad_indexes_are_cleaned_up(tmp_path: Path) -> None:
    stored = write_log(tmp_path, [batch(b"y" * 300, base_offset=i) for i in range(30)], index_interval_bytes=1000)
    (tmp_path / "00000000000000000099.log.deleted").write_bytes(b"old")
    (tmp_path / "00000000000000000077.index").write_bytes(b"")
    (tmp_path / "00000000000000000077.timeindex").write_bytes(b"")
    (tmp_path / "00000000000000000030-0000000001-x.checkpoint.part").write_bytes(b"partial snapshot")
    (tmp_path / "quorum-state").write_text("{}")  # not the log's business
    (tmp_path / "00000000000000000000.index").write_bytes(b"\x00" * 12)  # not whole entries
    log, report = PartitionLog.open(tmp_path, index_interval_bytes=1000)
    with log:
        assert report.is_clean
        assert report.removed_files == (
            "00000000000000000099.log.deleted",
            "00000000000000000077.index",
            "00000000000000000077.timeindex",
            "00000000000000000030-0000000001-x.checkpoint.part",
        )
        assert (tmp_path / "quorum-state").exists()
        assert report.rebuilt_indexes == ("00000000000000000000.index",)
        assert (tmp_path / "00000000000000000000.index").stat().st_size % 8 == 0
        assert read_all(log) == stored
        for offset in range(30):
            assert next(iter(iter_batches(log.read(offset, max_bytes=1))))[0].base_offset == offset


def test_missing_or_malformed_epoch_checkpoint_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    write_log(tmp_path, three_batches())
    checkpoint = tmp_path / "leader-epoch-checkpoint"
    assert checkpoint.read_text() == "0\n2\n1 0\n2 3\n"
    checkpoint.unlink()
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report.leader_epoch_checkpoint == "missing: rebuilt from the log"
        assert report.is_clean
    assert checkpoint.read_text() == "0\n2\n1 0\n2 3\n"
    checkpoint.write_text("0\n5\n")
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report.leader_epoch_checkpoint.startswith("malformed (Expected 5 entries")
        assert log.end_offset_for_epoch(1) == (1, 3)
    assert checkpoint.read_text() == "0\n2\n1 0\n2 3\n"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.lists(st.binary(max_size=300), min_size=1, max_size=4), min_size=1, max_size=12),
    epochs=st.lists(st.integers(0, 3), min_size=12, max_size=12),
    segment_bytes=st.sampled_from([200, 700, 1 << 20]),
    cut=st.integers(0, 4000),
)
def test_random_appends_reopen_identical_and_any_cut_keeps_a_valid_prefix(
    tmp_path_factory: object,
    sizes: list[list[bytes]],
    epochs: list[int],
    segment_bytes: int,
    cut: int,
) -> None:
    directory = tmp_path_factory.mktemp("log")  # type: ignore[attr-defined]
    epoch = 0
    appended = []
    log, _ = PartitionLog.open(directory, segment_bytes=segment_bytes, index_interval_bytes=256)
    with log:
        for values, bump in zip(sizes, epochs, strict=False):
            epoch += bump
            log.append_as_leader(batch(*values), epoch=epoch)
        log.flush()
        stored = read_all(log)
        appended = [bytes(raw) for _, raw in iter_batches(stored)]
        end = log.log_end_offset
        entries = log.epoch_entries
    log, report = PartitionLog.open(directory, segment_bytes=segment_bytes, index_interval_bytes=256)
    with log:
        assert report.is_clean and report.rebuilt_indexes == ()
        assert read_all(log) == stored
        assert (log.log_end_offset, log.epoch_entries) == (end, entries)
    # Tear the last segment at an arbitrary byte: what survives is exactly a prefix of the batches.
    last = sorted(directory.glob("*.log"))[-1]
    raw = last.read_bytes()
    last.write_bytes(raw[: cut % (len(raw) + 1)])
    log, report = PartitionLog.open(directory, segment_bytes=segment_bytes, index_interval_bytes=256)
    with log:
        survived = read_all(log)
        survivors = [bytes(r) for _, r in iter_batches(survived)]
        assert survivors == appended[: len(survivors)]
        keep = cut % (len(raw) + 1)
        kept_total = len(stored) - len(raw) + keep
        ends = [sum(len(b) for b in appended[: i + 1]) for i in range(len(appended))]
        assert len(survivors) == sum(1 for e in ends if e <= kept_total)
        torn = kept_total - sum(len(b) for b in survivors)
        assert (report.truncated.bytes_dropped if report.truncated else 0) == torn


def test_search_for_intact_batches_behind_garbage_finds_them(tmp_path: Path) -> None:
    batches = three_batches()
    stored = write_log(tmp_path, batches[:1])
    noise = bytes(range(256)) * 8  # plenty of 0x02 bytes to tempt the magic-byte search
    (tmp_path / SEGMENT).write_bytes(stored + noise + batches[1] + noise + batches[2])
    log, report = PartitionLog.open(tmp_path)
    with log:
        assert report.truncated is not None
        assert report.truncated.intact_batches == ((2, 2), (3, 4))
        assert report.offsets_dropped == (2, 4)
        assert read_all(log) == stored


def test_truncation_removes_a_stale_kafka_time_index(tmp_path: Path) -> None:
    write_log(tmp_path, three_batches())
    time_index = tmp_path / "00000000000000000000.timeindex"
    time_index.write_bytes(bytes(12))
    log, _ = PartitionLog.open(tmp_path)
    with log:
        assert time_index.exists()
        assert log.truncate_to(2) == 2
        assert not time_index.exists()
