"""A full disk under the log, a snapshot and quorum-state: one StorageIOError naming the file, its
directory and the OS error; nothing half-visible; recovery after space is freed loses nothing
that was acknowledged as flushed.

The disk is a real tmpfs of a few pages (skipped, with the reason, where mounting is not allowed).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft_engine.records.batches import build_batch
from kraft_engine.storage import (
    FileQuorumStateStore,
    PartitionLog,
    QuorumStateData,
    SnapshotWriter,
    StorageIOError,
)
from kraft_engine.storage.snapshots import SnapshotId, list_snapshots

FillDisk = Callable[..., Path]


def _batch(n: int, *, size: int = 1000) -> bytes:
    return build_batch(base_offset=0, partition_leader_epoch=1, values=[bytes([i % 251]) * size for i in range(n)],
                       timestamp_ms=0)


def _assert_names(error: StorageIOError, path: Path) -> None:
    text = str(error)
    assert error.path == path and path.name in text and f"in dir {path.parent}" in text
    assert f"[Errno {errno.ENOSPC}]" in text and "No space left on device" in text


def test_a_full_disk_stops_appends_with_one_error_and_recovery_drops_only_the_torn_tail(
    small_tmpfs: Callable[[int], Path], fill_disk: FillDisk
) -> None:
    disk = small_tmpfs(256 * 1024)
    directory = disk / "__cluster_metadata-0"
    # No index entries: the data write is the one that meets the full disk (part of a batch lands).
    log, _ = PartitionLog.open(directory, index_interval_bytes=1 << 30)
    log.append_as_leader(_batch(10), epoch=1)
    log.flush()
    flushed_end = log.log_end_offset
    filler = fill_disk(disk, leave_bytes=3000)  # room for part of the next batch: a short write
    with pytest.raises(StorageIOError) as caught:
        for _ in range(5):
            log.append_as_leader(_batch(10), epoch=1)
            log.flush()
    _assert_names(caught.value, directory / "00000000000000000000.log")
    log.close()

    filler.unlink()
    reopened, report = PartitionLog.open(directory, index_interval_bytes=1 << 30)
    with reopened:
        # What was flushed survives; the torn batch is cut away and reported.
        assert reopened.log_end_offset >= flushed_end
        assert report.truncated is not None and report.truncated.bytes_dropped > 0
        reopened.append_as_leader(_batch(1), epoch=1)


def test_a_full_disk_under_quorum_state_keeps_the_old_state(
    small_tmpfs: Callable[[int], Path], fill_disk: FillDisk
) -> None:
    disk = small_tmpfs(64 * 1024)
    store = FileQuorumStateStore(disk / "quorum-state")
    store.write(QuorumStateData(leader_epoch=3, leader_id=1))
    fill_disk(disk)
    with pytest.raises(StorageIOError) as caught:
        store.write(QuorumStateData(leader_epoch=4, voted_id=2))
    _assert_names(caught.value, disk / "quorum-state.tmp")
    assert store.read() == QuorumStateData(leader_epoch=3, leader_id=1)


def test_a_full_disk_under_a_snapshot_leaves_no_snapshot_visible(
    small_tmpfs: Callable[[int], Path], fill_disk: FillDisk
) -> None:
    disk = small_tmpfs(64 * 1024)
    directory = disk / "__cluster_metadata-0"
    directory.mkdir()
    fill_disk(disk, leave_bytes=8192)  # the header batch fits, the data does not
    writer = SnapshotWriter(directory, snapshot_id=SnapshotId(end_offset=10, epoch=1), last_contained_log_timestamp_ms=0)
    with pytest.raises(StorageIOError) as caught:
        writer.append([b"x" * 1000 for _ in range(20)])
    writer.abort()
    assert list(directory.iterdir()) == []  # abort removed the .part file
    assert ".checkpoint.part" in caught.value.path.name and caught.value.directory == directory
    assert "No space left on device" in str(caught.value)
    assert list_snapshots(directory) == []


def test_the_error_is_not_an_oserror_so_socket_handlers_cannot_swallow_it() -> None:
    assert not issubclass(StorageIOError, OSError)
