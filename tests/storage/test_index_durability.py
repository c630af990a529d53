"""The offset index is derived data: a crash may leave any index behind, and reopening repairs it.

`flush()` no longer fsyncs the `.index` file, so after a power loss an index can lack its newest
entries, hold entries for batches that never reached the disk, or be garbage. These tests leave
each of those states on real files (and kill a real appending process with SIGKILL), reopen, and
check that every index matches its segment and a read at every offset returns the right batch.
They also pin down which files each operation syncs: the commit path syncs only the data.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_engine.records.batches import build_batch, iter_batches
from kraft_engine.storage.offset_index import INDEX_ENTRY_SIZE
from kraft_engine.storage.partition_log import PartitionLog, index_file_name, segment_file_name

INTERVAL = 150  # index.interval.bytes: small, so every segment gets several entries


def batch(rng: random.Random, *, base_offset: int = 0) -> bytes:
    values = [bytes([rng.randrange(256)]) * rng.randrange(1, 120) for _ in range(rng.randrange(1, 4))]
    return build_batch(base_offset=base_offset, partition_leader_epoch=1, values=values, timestamp_ms=1_700_000_000_000)


def write_log(directory: Path, *, batches: int, segment_bytes: int = 1 << 20, seed: int = 0) -> None:
    rng = random.Random(seed)
    log, _ = PartitionLog.open(directory, segment_bytes=segment_bytes, index_interval_bytes=INTERVAL)
    with log:
        for _ in range(batches):
            log.append_as_leader(batch(rng), epoch=1)
        log.flush()


def expected_index(segment: bytes, *, base_offset: int) -> bytes:
    """Kafka's rule, independently: an entry (last offset, position) for the batch that follows
    more than index.interval.bytes of batches since the previous entry."""
    entries = b""
    since = 0
    position = 0
    for header, _ in iter_batches(segment):
        if since > INTERVAL:
            entries += (header.last_offset - base_offset).to_bytes(4, "big") + position.to_bytes(4, "big")
            since = 0
        since += header.size_bytes
        position += header.size_bytes
    return entries


def segments(directory: Path) -> list[tuple[int, Path]]:
    return sorted((int(p.name[:20]), p) for p in directory.glob("*.log"))


def assert_indexes_match_segments(directory: Path) -> None:
    for base, path in segments(directory):
        index = directory / index_file_name(base)
        assert index.read_bytes() == expected_index(path.read_bytes(), base_offset=base), index.name


def batches_on_disk(directory: Path) -> Iterator[bytes]:
    for _, path in segments(directory):
        for _, raw in iter_batches(path.read_bytes()):
            yield bytes(raw)


def assert_reads_at_every_offset(log: PartitionLog, directory: Path) -> None:
    """read(o) starts with the batch holding o, for every offset, both as one batch and as many."""
    stored = list(batches_on_disk(directory))
    holding: dict[int, int] = {}
    for i, raw in enumerate(stored):
        header = next(iter_batches(raw))[0]
        holding.update((offset, i) for offset in range(header.base_offset, header.next_offset))
    assert sorted(holding) == list(range(log.log_start_offset, log.log_end_offset))
    for offset, i in holding.items():
        assert log.read(offset, max_bytes=1) == stored[i]
        assert log.read(offset, max_bytes=1 << 20).startswith(stored[i])
    assert log.read(log.log_end_offset, max_bytes=1 << 20) == b""


def reopen(directory: Path, *, segment_bytes: int = 1 << 20) -> tuple[PartitionLog, tuple[str, ...]]:
    log, report = PartitionLog.open(directory, segment_bytes=segment_bytes, index_interval_bytes=INTERVAL)
    assert report.is_clean, report.describe()
    return log, report.rebuilt_indexes


def _missing_tail(index: bytes) -> bytes:
    return index[: (len(index) // INDEX_ENTRY_SIZE // 2) * INDEX_ENTRY_SIZE]


def _garbage(index: bytes) -> bytes:
    return random.Random(7).randbytes(len(index))


def _torn(index: bytes) -> bytes:
    return index[:-3]


def _entries_past_the_log_end(index: bytes) -> bytes:
    # Entries for batches that never reached the disk: offsets and positions beyond the segment.
    return index + (10_000).to_bytes(4, "big") + (1 << 20).to_bytes(4, "big")


def _zero_filled_tail(index: bytes) -> bytes:
    # A file whose size reached the disk before its last blocks did.
    return index[:-16] + bytes(16)


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "missing tail entries": _missing_tail,
    "garbage": _garbage,
    "torn entry": _torn,
    "entries past the log end": _entries_past_the_log_end,
    "zero-filled tail": _zero_filled_tail,
    "empty": lambda index: b"",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("segment", [0, -1], ids=["older segment", "active segment"])
def test_a_damaged_index_is_rebuilt_on_open(tmp_path: Path, damage: str, segment: int) -> None:
    written = tmp_path / "written"
    write_log(written, batches=120, segment_bytes=4000)
    assert len(segments(written)) >= 3
    assert_indexes_match_segments(written)  # the live index follows Kafka's rule
    # The crash: copy the files as they are, with one index in the chosen state.
    crashed = tmp_path / "crashed"
    shutil.copytree(written, crashed)
    base, _ = segments(crashed)[segment]
    index = crashed / index_file_name(base)
    damaged = DAMAGE[damage](index.read_bytes())
    assert damaged != index.read_bytes()
    index.write_bytes(damaged)

    log, rebuilt = reopen(crashed, segment_bytes=4000)
    with log:
        assert rebuilt == (index.name,)
        assert_indexes_match_segments(crashed)
        assert_reads_at_every_offset(log, crashed)
    assert (crashed / index.name).read_bytes() == (written / index.name).read_bytes()


def test_a_missing_index_is_rebuilt_on_open(tmp_path: Path) -> None:
    write_log(tmp_path, batches=60)
    live = (tmp_path / index_file_name(0)).read_bytes()
    assert live
    (tmp_path / index_file_name(0)).unlink()
    log, rebuilt = reopen(tmp_path)
    with log:
        assert rebuilt == (index_file_name(0),)
        assert (tmp_path / index_file_name(0)).read_bytes() == live
        assert_reads_at_every_offset(log, tmp_path)


def test_an_index_longer_than_the_log_is_truncated(tmp_path: Path) -> None:
    # The index reached the disk, the last batches of the segment did not (flush syncs only the data,
    # and the kernel may write the index back first): its last entries point past the log end.
    write_log(tmp_path, batches=80)
    segment = tmp_path / segment_file_name(0)
    index = tmp_path / index_file_name(0)
    live = index.read_bytes()
    positions = [int.from_bytes(live[i + 4 : i + 8], "big") for i in range(0, len(live), INDEX_ENTRY_SIZE)]
    cut = positions[len(positions) // 2]  # a batch boundary: the log simply ends earlier
    segment.write_bytes(segment.read_bytes()[:cut])

    log, rebuilt = reopen(tmp_path)
    with log:
        assert rebuilt == (index.name,)
        kept = index.read_bytes()
        assert kept == live[: (len(positions) // 2) * INDEX_ENTRY_SIZE]
        assert kept == expected_index(segment.read_bytes(), base_offset=0)
        assert_reads_at_every_offset(log, tmp_path)
        # Appends continue from the shorter log and extend the repaired index consistently.
        rng = random.Random(3)
        for _ in range(40):
            log.append_as_leader(batch(rng), epoch=1)
        log.flush()
        assert_reads_at_every_offset(log, tmp_path)
    assert_indexes_match_segments(tmp_path)


_APPENDER = textwrap.dedent(
    """
    import random, sys
    from pathlib import Path
    from kraft_engine.records.batches import build_batch
    from kraft_engine.storage.partition_log import PartitionLog

    rng = random.Random(int(sys.argv[2]))
    log, _ = PartitionLog.open(Path(sys.argv[1]), segment_bytes=6000, index_interval_bytes=int(sys.argv[3]))
    while True:
        values = [b"k" * rng.randrange(1, 200) for _ in range(rng.randrange(1, 4))]
        log.append_as_leader(build_batch(base_offset=0, partition_leader_epoch=1, values=values, timestamp_ms=1), epoch=1)
        log.flush()
        print(log.flushed_offset, flush=True)
    """
)


@pytest.mark.parametrize("seed", [1, 2])
def test_kill_9_while_appending_and_flushing_leaves_a_log_that_reopens_whole(tmp_path: Path, seed: int) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _APPENDER, str(tmp_path), str(seed), str(INTERVAL)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    flushed = 0
    try:
        # Kill it at a different point of its loop each time: after some hundreds of flushes.
        for _ in range(300 + 97 * seed):
            line = child.stdout.readline()
            assert line, "the appender died on its own"
            flushed = int(line)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    log, report = PartitionLog.open(tmp_path, segment_bytes=6000, index_interval_bytes=INTERVAL)
    with log:
        # SIGKILL keeps the page cache: at most a write the kill interrupted is missing.
        assert not report.deleted_segments, report.describe()
        assert log.log_end_offset >= flushed  # everything acknowledged as flushed survived
        assert len(log.segment_names) > 1  # the run rolled segments too
        assert_indexes_match_segments(tmp_path)
        assert_reads_at_every_offset(log, tmp_path)


# ---- which files each operation syncs ---------------------------------------------------------


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the files fsynced or fdatasynced (directories appear with a trailing slash)."""
    names: list[str] = []

    def recording(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            path = Path(os.readlink(f"/proc/self/fd/{fd}"))
            names.append(path.name + ("/" if path.is_dir() else ""))
            real(fd)

        return sync

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name file descriptors")
    monkeypatch.setattr(os, "fsync", recording(os.fsync))
    monkeypatch.setattr(os, "fdatasync", recording(os.fdatasync))
    return names


def test_flush_syncs_only_the_segment_data_and_nothing_when_nothing_was_written(
    tmp_path: Path, synced: list[str]
) -> None:
    rng = random.Random(0)
    log, _ = PartitionLog.open(tmp_path, index_interval_bytes=INTERVAL)
    with log:
        for _ in range(20):
            log.append_as_leader(batch(rng), epoch=1)
        assert (tmp_path / index_file_name(0)).stat().st_size > 0  # index entries were written
        synced.clear()
        log.flush()
        assert synced == [segment_file_name(0)]
        synced.clear()
        log.flush()
        assert synced == []
        assert log.flushed_offset == log.log_end_offset


def test_a_roll_syncs_the_old_segment_and_its_index_and_close_syncs_the_active_index(
    tmp_path: Path, synced: list[str]
) -> None:
    rng = random.Random(0)
    log, _ = PartitionLog.open(tmp_path, segment_bytes=3000, index_interval_bytes=INTERVAL)
    with log:
        log.append_as_leader(batch(rng), epoch=1)  # the first epoch writes leader-epoch-checkpoint
        synced.clear()
        while len(log.segment_names) == 1:
            log.append_as_leader(batch(rng), epoch=1)
        new_base = int(log.segment_names[-1][:20])
        assert synced == [segment_file_name(0), index_file_name(0), f"{tmp_path.name}/"]
        while (tmp_path / index_file_name(new_base)).stat().st_size == 0:
            log.append_as_leader(batch(rng), epoch=1)
        log.flush()
        synced.clear()
    assert synced == [index_file_name(new_base)]


# ---- reads through the index, the tail positions and truncation ----------------------------------


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    interval=st.sampled_from([0, 64, INTERVAL, 4096]),
    segment_bytes=st.sampled_from([700, 3000, 1 << 20]),
    steps=st.lists(st.sampled_from(["append", "append", "append", "truncate", "reopen"]), max_size=40),
)
def test_reads_return_the_batch_holding_every_offset_through_appends_truncations_and_reopens(
    tmp_path_factory: pytest.TempPathFactory, seed: int, interval: int, segment_bytes: int, steps: list[str]
) -> None:
    directory = tmp_path_factory.mktemp("log")
    rng = random.Random(seed)
    # (base offset, next offset, bytes) of every batch in the log, built here at their offsets.
    stored: list[tuple[int, int, bytes]] = []

    def check(log: PartitionLog) -> None:
        assert log.log_end_offset == (stored[-1][1] if stored else 0)
        bases = sorted(int(name[:20]) for name in log.segment_names)
        for base, end, raw in stored:
            segment_end = min((b for b in bases if b > base), default=None)
            same_segment = [r for b, _, r in stored if b >= base and (segment_end is None or b < segment_end)]
            for offset in range(base, end):
                assert log.read(offset, max_bytes=1) == raw
                limit = rng.randrange(1, 2000)
                expected = raw
                for following in same_segment[1:]:
                    if len(expected) + len(following) > limit:
                        break
                    expected += following
                assert log.read(offset, max_bytes=limit) == expected

    log, _ = PartitionLog.open(directory, segment_bytes=segment_bytes, index_interval_bytes=interval)
    try:
        for step in steps:
            if step == "append":
                fresh = []
                for _ in range(rng.randrange(1, 3)):
                    raw = batch(rng, base_offset=stored[-1][1] if stored else 0)
                    header = next(iter_batches(raw))[0]
                    fresh.append(raw)
                    stored.append((header.base_offset, header.next_offset, raw))
                log.append_as_follower(b"".join(fresh))
            elif step == "truncate" and stored:
                target = rng.choice(stored)[0] + rng.randrange(0, 2)
                new_end = log.truncate_to(target)
                stored = [s for s in stored if s[1] <= new_end]
            elif step == "reopen":
                log.close()
                log, report = PartitionLog.open(directory, segment_bytes=segment_bytes, index_interval_bytes=interval)
                assert report.is_clean and report.rebuilt_indexes == (), report.describe()
            check(log)
    finally:
        log.close()
