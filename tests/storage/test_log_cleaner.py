"""Log compaction: the latest record of each key survives with its offset, tombstones expire,
compressed batches are rebuilt in their codec, and the compacted log reopens and replicates with
its offset gaps."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from kraft_engine.records.batches import build_batch, decode_records, read_batch_header
from kraft_engine.records.compression import CODEC_ZSTD, compress, decompress
from kraft_engine.storage.log_cleaner import (
    clean_log,
    compaction_upper_bound,
    dirty_ratio,
    max_compaction_delay_ms,
)
from kraft_engine.storage.partition_log import LogError, PartitionLog

T0 = 1_700_000_000_000
DAY_MS = 86_400_000


def keyed(pairs: list[tuple[bytes, bytes | None]], *, timestamp_ms: int = T0, codec: int = 0,
          producer_id: int = -1, base_sequence: int = -1) -> bytes:
    data = bytearray(build_batch(base_offset=0, partition_leader_epoch=0, values=[v or b"" for _, v in pairs],
                                 keys=[k for k, _ in pairs], timestamp_ms=timestamp_ms))
    if any(v is None for _, v in pairs):
        # A tombstone: the single record's empty value (length varint 0) becomes null (varint -1,
        # zig-zag 0x01), the same size. Its position: record length, attributes, timestamp and
        # offset deltas, key length, key.
        ((key, _),) = pairs
        position = 61 + 4 + 1 + len(key)
        assert data[position] == 0
        data[position] = 1
    struct.pack_into(">qhi", data, 43, producer_id, 0 if producer_id >= 0 else -1, base_sequence)
    if codec:
        data = data[:61] + compress(codec, bytes(data[61:]))
        struct.pack_into(">i", data, 8, len(data) - 12)
        struct.pack_into(">h", data, 21, codec)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def contents(log: PartitionLog) -> dict[int, tuple[bytes | None, bytes | None]]:
    """offset -> (key, value) of every record, decompressing as a consumer does."""
    found = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes=1 << 20)
        position = 0
        while position < len(data):
            header = read_batch_header(data, position)
            raw = bytearray(data[position : position + header.size_bytes])
            if header.compression_codec:
                raw = raw[:61] + decompress(header.compression_codec, bytes(raw[61:]))
                struct.pack_into(">i", raw, 8, len(raw) - 12)
                struct.pack_into(">h", raw, 21, 0)
                struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
            for record in decode_records(bytes(raw)):
                found[record.offset] = (record.key, record.value)
            position += header.size_bytes
            offset = header.next_offset
    return found


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    opened, _ = PartitionLog.open(tmp_path / "table-0", segment_bytes=100, allow_offset_gaps=True)
    return opened


def fill(log: PartitionLog) -> None:
    # offsets:   0      1      2      3      4      5      6      7
    for pairs in ([(b"a", b"1"), (b"b", b"1")], [(b"a", b"2"), (b"c", b"1")], [(b"b", b"2"), (b"a", b"3")],
                  [(b"d", b"1"), (b"c", b"2")]):
        log.append_as_leader(keyed(pairs), epoch=0)


def test_the_latest_record_of_each_key_survives_at_its_offset(log: PartitionLog) -> None:
    fill(log)
    log.append_as_leader(keyed([(b"a", b"4")]), epoch=0)  # offset 8, the active segment
    assert len(log.segment_names) >= 3
    end = log.log_end_offset
    result = clean_log(log, first_dirty_offset=0, upper_bound=end, now_ms=T0, delete_retention_ms=DAY_MS)
    assert result is not None and result.records_removed > 0
    left = contents(log)
    # Below the active segment only each key's latest there remains; the active segment is untouched.
    cleaned_end = result.first_dirty_offset
    below = {o: kv for o, kv in left.items() if o < cleaned_end}
    keys = [k for k, _ in below.values()]
    assert len(keys) == len(set(keys))
    assert left[8] == (b"a", b"4")
    assert {o: kv for o, kv in below.items() if kv[0] in (b"b", b"d")} == {4: (b"b", b"2"), 6: (b"d", b"1")}
    assert log.log_end_offset == end


def test_a_second_pass_removes_clean_records_that_newer_dirty_ones_replace(log: PartitionLog) -> None:
    fill(log)
    first = clean_log(log, first_dirty_offset=0, upper_bound=log.log_end_offset, now_ms=T0, delete_retention_ms=DAY_MS)
    assert first is not None
    for _ in range(3):
        log.append_as_leader(keyed([(b"b", b"3"), (b"x", b"1")]), epoch=0)
    assert dirty_ratio(log, first_dirty_offset=first.first_dirty_offset, upper_bound=log.log_end_offset) > 0
    clean_log(log, first_dirty_offset=first.first_dirty_offset, upper_bound=log.log_end_offset, now_ms=T0,
              delete_retention_ms=DAY_MS)
    values_of_b = [v for k, v in contents(log).values() if k == b"b"]
    assert values_of_b[-1] == b"3"
    assert b"2" not in values_of_b


def test_tombstones_stay_for_delete_retention_ms_then_go(log: PartitionLog) -> None:
    log.append_as_leader(keyed([(b"k", b"v"), (b"gone", b"v")], timestamp_ms=T0), epoch=0)
    log.append_as_leader(keyed([(b"gone", None)], timestamp_ms=T0), epoch=0)
    log.append_as_leader(keyed([(b"k", b"w")] * 8, timestamp_ms=T0), epoch=0)  # rolls: the tombstone is cleanable
    upper = log.log_end_offset
    clean_log(log, first_dirty_offset=0, upper_bound=upper, now_ms=T0 + 1000, delete_retention_ms=DAY_MS)
    assert (b"gone", None) in contents(log).values()
    assert (b"gone", b"v") not in contents(log).values()
    clean_log(log, first_dirty_offset=0, upper_bound=upper, now_ms=T0 + 2 * DAY_MS, delete_retention_ms=DAY_MS)
    assert all(k != b"gone" for k, _ in contents(log).values())


def test_min_compaction_lag_keeps_records_younger_than_the_lag_out_of_cleaning(log: PartitionLog) -> None:
    hour_ms = 3_600_000
    # Two hours old: offsets 0-3; a minute old: offsets 4-7 (each batch rolls a segment); then the active one.
    for pairs, timestamp_ms in (([(b"a", b"1"), (b"b", b"1")], T0), ([(b"a", b"2"), (b"b", b"2")], T0),
                                ([(b"a", b"3"), (b"b", b"3")], T0 + 2 * hour_ms - 60_000),
                                ([(b"a", b"4"), (b"b", b"4")], T0 + 2 * hour_ms - 60_000)):
        log.append_as_leader(keyed(pairs, timestamp_ms=timestamp_ms), epoch=0)
    log.append_as_leader(keyed([(b"c", b"1")], timestamp_ms=T0 + 2 * hour_ms), epoch=0)
    now_ms, end = T0 + 2 * hour_ms, log.log_end_offset
    first_young = compaction_upper_bound(log, first_dirty_offset=0, upper_bound=end, now_ms=now_ms,
                                         min_compaction_lag_ms=hour_ms)
    assert first_young == 4  # the first segment holding a batch younger than the lag
    assert compaction_upper_bound(log, first_dirty_offset=0, upper_bound=end, now_ms=now_ms,
                                  min_compaction_lag_ms=0) == end
    result = clean_log(log, first_dirty_offset=0, upper_bound=first_young, now_ms=now_ms, delete_retention_ms=DAY_MS)
    assert result is not None and result.first_dirty_offset == 4
    # Only the old section was compacted against itself: a2/b2 replace a1/b1; a3, a4, b3, b4 stay.
    assert contents(log) == {2: (b"a", b"2"), 3: (b"b", b"2"), 4: (b"a", b"3"), 5: (b"b", b"3"),
                             6: (b"a", b"4"), 7: (b"b", b"4"), 8: (b"c", b"1")}
    # An hour later everything below the active segment is old enough.
    later_ms = now_ms + hour_ms
    assert compaction_upper_bound(log, first_dirty_offset=4, upper_bound=end, now_ms=later_ms,
                                  min_compaction_lag_ms=hour_ms) == end
    clean_log(log, first_dirty_offset=4, upper_bound=end, now_ms=later_ms, delete_retention_ms=DAY_MS)
    assert contents(log) == {6: (b"a", b"4"), 7: (b"b", b"4"), 8: (b"c", b"1")}
    with pytest.raises(ValueError, match=r"min\.compaction\.lag\.ms must be at least 0, got -1"):
        compaction_upper_bound(log, first_dirty_offset=0, upper_bound=end, now_ms=now_ms, min_compaction_lag_ms=-1)


def test_max_compaction_delay_is_how_long_the_oldest_dirty_sealed_segment_is_past_the_lag(log: PartitionLog) -> None:
    hour_ms = 3_600_000
    # Sealed segments whose first batches are stamped T0, T0 + 1 h and T0 + 2 h; then the active one.
    for hours in (0, 1, 2):
        log.append_as_leader(keyed([(b"a", b"%d" % hours), (b"b", b"x")], timestamp_ms=T0 + hours * hour_ms), epoch=0)
    log.append_as_leader(keyed([(b"c", b"1")], timestamp_ms=T0 - 10 * hour_ms), epoch=0)  # active: never counted

    def delay(*, first_dirty: int, now_ms: int, lag_ms: int = hour_ms) -> int:
        return max_compaction_delay_ms(log, first_dirty_offset=first_dirty, now_ms=now_ms, max_compaction_lag_ms=lag_ms)

    assert delay(first_dirty=0, now_ms=T0 + hour_ms) == 0  # the oldest is exactly the lag old: not past it
    assert delay(first_dirty=0, now_ms=T0 + hour_ms + 5) == 5
    assert delay(first_dirty=0, now_ms=T0 + 3 * hour_ms) == 2 * hour_ms
    # Cleaned up to offset 2: the first segment is clean, the oldest dirty one starts at T0 + 1 h.
    assert delay(first_dirty=2, now_ms=T0 + 3 * hour_ms) == hour_ms
    assert delay(first_dirty=6, now_ms=T0 + 3 * hour_ms) == 0  # only the active segment is dirty
    assert delay(first_dirty=0, now_ms=T0 + 3 * hour_ms, lag_ms=2**63 - 1) == 0  # Kafka's default: never
    with pytest.raises(ValueError, match=r"max\.compaction\.lag\.ms must be at least 1, got 0"):
        delay(first_dirty=0, now_ms=T0, lag_ms=0)


def test_a_dirty_segment_stamped_zero_never_forces_cleaning(log: PartitionLog) -> None:
    # Kafka's maxCompactionDelay ignores first-batch timestamps of 0 or less (no timestamp).
    log.append_as_leader(keyed([(b"a", b"1")], timestamp_ms=0), epoch=0)
    log.append_as_leader(keyed([(b"a", b"2")] * 8, timestamp_ms=0), epoch=0)
    assert max_compaction_delay_ms(log, first_dirty_offset=0, now_ms=T0, max_compaction_lag_ms=1) == 0


def test_a_compressed_batch_is_rebuilt_in_its_codec_around_the_survivors(log: PartitionLog) -> None:
    log.append_as_leader(keyed([(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], codec=CODEC_ZSTD), epoch=0)
    log.append_as_leader(keyed([(b"z", b"x" * 300)]), epoch=0)  # rolls
    clean_log(log, first_dirty_offset=0, upper_bound=log.log_end_offset, now_ms=T0, delete_retention_ms=DAY_MS)
    first = log.read(0, max_bytes=1)
    header = read_batch_header(first)
    assert header.compression_codec == CODEC_ZSTD
    assert (header.base_offset, header.last_offset, header.record_count) == (0, 2, 2)  # last offset delta kept
    assert {o: kv for o, kv in contents(log).items() if o < 3} == {1: (b"b", b"1"), 2: (b"a", b"2")}


def test_an_emptied_batch_of_a_producer_is_kept_when_it_is_the_producers_last(log: PartitionLog) -> None:
    log.append_as_leader(keyed([(b"a", b"1")], producer_id=7, base_sequence=0), epoch=0)
    log.append_as_leader(keyed([(b"a", b"2")] * 10), epoch=0)
    log.append_as_leader(keyed([(b"a", b"3")]), epoch=0)
    clean_log(log, first_dirty_offset=0, upper_bound=log.log_end_offset, now_ms=T0, delete_retention_ms=DAY_MS)
    first = read_batch_header(log.read(0, max_bytes=1))
    assert (first.base_offset, first.producer_id) == (0, 7)


def test_a_compacted_log_reopens_clean_and_a_follower_takes_its_gaps(log: PartitionLog, tmp_path: Path) -> None:
    fill(log)
    log.append_as_leader(keyed([(b"a", b"4")]), epoch=0)
    clean_log(log, first_dirty_offset=0, upper_bound=log.log_end_offset, now_ms=T0, delete_retention_ms=DAY_MS)
    before = contents(log)
    log.close()
    reopened, report = PartitionLog.open(tmp_path / "table-0", segment_bytes=100, allow_offset_gaps=True)
    assert report.is_clean, report.describe()
    assert contents(reopened) == before
    follower, _ = PartitionLog.open(tmp_path / "follower" / "table-0", segment_bytes=100, allow_offset_gaps=True)
    offset = 0
    while offset < reopened.log_end_offset:
        data = reopened.read(offset, max_bytes=1 << 20)
        follower.append_as_follower(data)
        offset = follower.log_end_offset
    assert contents(follower) == before
    # Backwards is still refused, gaps or not.
    with pytest.raises(LogError):
        follower.append_as_follower(reopened.read(0, max_bytes=1))


def test_a_strict_log_refuses_gaps_and_cleaning(tmp_path: Path) -> None:
    strict, _ = PartitionLog.open(tmp_path / "strict-0")
    gap = build_batch(base_offset=5, partition_leader_epoch=0, values=[b"x"], timestamp_ms=T0)
    with pytest.raises(LogError):
        strict.append_as_follower(gap)


def test_a_cleaned_segment_left_half_written_by_a_crash_is_discarded(log: PartitionLog, tmp_path: Path) -> None:
    fill(log)
    before = contents(log)
    first = log.directory / log.segment_names[0]
    (first.parent / (first.name + ".cleaned")).write_bytes(b"half a segment")
    log.close()
    reopened, report = PartitionLog.open(tmp_path / "table-0", segment_bytes=100, allow_offset_gaps=True)
    assert any(".cleaned" in name for name in report.removed_files)
    assert contents(reopened) == before
