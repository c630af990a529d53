"""One partition's log on disk: segments of v2 record batches, Kafka's layout, crash recovery.

The raft layer needs an append-only log it can extend as leader, extend or truncate as follower,
read back by offset, and trim below a snapshot — and it needs to know exactly what survived a
crash. This module is that log, in the layout Apache Kafka uses, so Kafka's tools can read it:

    <log dir>/<topic>-<partition>/            e.g. __cluster_metadata-0/
        00000000000000000000.log              v2 record batches, back to back
        00000000000000000000.index            sparse offset index (see offset_index)
        00000000000000004711.log              next segment, named by its base offset
        leader-epoch-checkpoint               epoch -> start offset (see leader_epoch_cache)

API (all offsets are Kafka offsets; batches are raw bytes, never re-encoded):

    log, report = PartitionLog.open(dir, segment_bytes=..., recovery_point=..., log_start_offset=...)
    log.append_as_leader(batches, epoch=e) -> AppendInfo   # offsets assigned from the log end
    log.append_as_follower(batches)        -> AppendInfo   # offsets already assigned, must follow
    log.read(offset, max_bytes=n)          -> bytes        # whole batches, at least one
    log.read_region(offset, max_bytes=n)   -> (fd, position, size) | None  # the same, for sendfile
    log.truncate_to(offset)                -> int          # the real new log end (batch boundary)
    log.truncate_fully_and_start_at(offset)                # e.g. after downloading a snapshot
    log.delete_below(offset)               -> [segment names deleted]
    log.cleanable_segments(upper_bound=o)  -> [(base offset, end offset)]  # the log cleaner's view
    log.segment_batches(base_offset)       -> iterator of the segment's batches (bytes)
    log.replace_segment(base_offset, batches)      # the cleaner's output swapped in atomically
    log.delete_retained_segments(now_ms=..., retention_ms=..., retention_bytes=..., high_watermark=...)
                                           -> [segment names deleted]  # Kafka's deleteOldSegments
    log.flush()                                            # fsync the data; flushed_offset = log end
    pending = log.begin_flush(); pending.sync(); log.complete_flush(pending)  # the same, fsync on any thread
    log.end_offset_for_epoch(epoch)        -> (epoch, end offset)
    log.log_start_offset / log_end_offset / flushed_offset / latest_epoch
    log.close()

Decisions worth knowing:

- Leader appends patch each batch's base offset and partition leader epoch in place. Neither
  field is covered by the batch CRC (it starts at `attributes`), which is why Kafka's leader can
  do the same; the CRC still verifies on read.
- A segment rolls before an append that would push it past `segment_bytes` (Kafka's
  `segment.bytes`, 1 GiB; the metadata log's `metadata.log.segment.bytes`), whose offsets
  would no longer fit the index's 32-bit relative offsets, or, once `configure_rolls` set a
  `segment.ms`, whose batch's max timestamp is more than `segment.ms` (less the log's jitter)
  past the segment's first batch's (Kafka's LogSegment.shouldRoll; by the clock since the segment
  was opened when batches carry no timestamps). Like Kafka, time rolls happen on append only. The old segment is fsynced before the
  new one is created and the directory fsynced after, so only the last segment can be torn.
- Recovery point and log start offset: like Kafka, these live at the log-directory level
  (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`, see checkpoint_file) and
  belong to whoever manages the log directory. `open()` takes them as arguments. Without a
  recovery point every segment is CRC-checked; with one, segments wholly below it are only
  walked header by header (lengths, offsets, epochs), and the rest — always including the last
  segment — are CRC-checked. Without a log start offset it is the first segment's base offset;
  with one, segments wholly below it (a crash interrupted retention) are deleted on open.
- `flushed_offset` is the recovery point to checkpoint: every offset below it was fsynced.
- After a clean shutdown (`clean_shutdown=True`: the log-directory owner found Kafka's
  `.kafka_cleanshutdown` marker) nothing below the active segment is read: each sealed segment's
  offset index is taken as written (it was fsynced at roll and close) and its offsets end where
  the next segment begins, the leader-epoch cache comes from its checkpoint, and only the active
  segment's batches after its last index entry are walked to find the log end. Any of these that
  does not hold (an index missing or pointing past its segment, a missing or malformed epoch
  checkpoint, a torn batch at the tail) falls back to full recovery, so a wrong marker costs
  time, never data. This is what lets a broker with gigabytes of logs restart in seconds.
- A flush can run off the caller's thread: `begin_flush` (caller's thread) notes the log end and
  duplicates the active segment's descriptor, `PendingFlush.sync` fsyncs that duplicate on any
  thread while the caller keeps appending (older segments were synced when they rolled), and
  `complete_flush` (caller's thread) records what it covered: the offsets below the noted end,
  unless the log was truncated meanwhile. A closed or deleted segment does not disturb the sync,
  which holds its own descriptor.
- `flush()` fsyncs the active segment's `.log` only (and nothing when nothing was written). The
  offset index is derived data, as Kafka treats it: every open walks each segment's batch
  headers (it must anyway, to rebuild the leader-epoch cache) and rewrites an index that does
  not match them — entries missing, entries past the log end, garbage — so a crash may leave
  any index behind. Indexes are fsynced when their segment rolls and when the log is closed,
  so Kafka's tools find them whole. On the commit path this halves the fsyncs per flush.
- Input errors (`LogError`) leave the log untouched. An `OSError` from the disk during an
  append or truncation leaves the in-memory view unreliable, as it makes Kafka take the log
  directory offline: close the log and reopen it, and recovery reconciles memory with disk.
- Recovery truncates at the first batch that is torn, fails its CRC, breaks offset order or
  lowers the leader epoch. Offsets must be contiguous unless the log is opened with
  `allow_offset_gaps` (a broker's partition logs, which compaction thins out: a later batch may
  then start past the previous one's end, never before it; the metadata log keeps the strict
  rule, where a gap is damage since base offsets are outside the CRC). Everything after that point is dropped, later segments included, even if
  intact — Kafka does the same, since a log with a hole is worse than a shorter one. The
  RecoveryReport lists every drop with segment, byte position, byte count, reason and the
  intact batches (offset ranges) that were lost behind the bad one, so nothing goes silently.
- The leader-epoch cache is rebuilt from the batch headers on every open and compared with the
  checkpoint file, which is rewritten (and the fact reported) when it is missing or differs.
- Opening also removes what crashes leave behind: `.deleted` segment files, indexes without a
  segment, and unfinished or half-deleted snapshots (`.checkpoint.part`, `.checkpoint.deleted`).
  We keep no `.timeindex`; one left by Kafka is deleted with its segment or when its segment is
  truncated, and Kafka rebuilds a missing time index when it opens the log.
"""

from __future__ import annotations

import bisect
import os
import random
import re
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kraft_engine.errors import StorageError
from kraft_engine.invariant import InvariantViolation
from kraft_engine.records.batches import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CorruptBatchError,
    IncompleteBatchError,
    read_batch_header,
    validate_batch,
)
from kraft_engine.storage.atomic_file import fsync_dir
from kraft_engine.storage.batch_sequence import restamp, whole_batches
from kraft_engine.storage.checkpoint_file import (
    LEADER_EPOCH_CHECKPOINT_FILE_NAME,
    CheckpointError,
    EpochEntry,
    read_leader_epoch_checkpoint,
)
from kraft_engine.storage.leader_epoch_cache import LeaderEpochCache
from kraft_engine.storage.offset_index import OffsetIndex
from kraft_engine.storage.snapshots import clean_snapshot_leftovers
from kraft_engine.storage.storage_error import storage_io, write_fully

__all__ = [
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "DEFAULT_SEGMENT_BYTES",
    "AppendInfo",
    "DroppedBytes",
    "LogError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "PendingFlush",
    "RecoveryReport",
    "index_file_name",
    "partition_directory_name",
    "segment_file_name",
]

DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
DEFAULT_INDEX_INTERVAL_BYTES = 4096

_LOG_SUFFIX = ".log"
_INDEX_SUFFIX = ".index"
_TIME_INDEX_SUFFIX = ".timeindex"
_DELETED_SUFFIX = ".deleted"
_CLEANED_SUFFIX = ".cleaned"
_SEGMENT_READ_CHUNK_BYTES = 1024 * 1024
_SEGMENT_NAME = re.compile(r"^(\d{20})\.(log|index|timeindex)$")
_INT32_MAX = 2**31 - 1
# How far recovery searches a dropped tail for intact batches to report (it is a report, not a fix).
_INTACT_SEARCH_LIMIT_BYTES = 64 * 1024 * 1024
_MAGIC_BYTE = b"\x02"
# base_offset, batch_length and last_offset_delta: all a walk over known-good batches needs.
_WALKED_FIELDS = struct.Struct(">qi11xi")
_MAGIC_POSITION = 16


def partition_directory_name(topic: str, partition: int) -> str:
    """`<topic>-<partition>`, e.g. `__cluster_metadata-0`, as Kafka names a partition's directory."""
    if not topic or partition < 0:
        raise ValueError(f"invalid topic partition {topic!r}-{partition}")
    return f"{topic}-{partition}"


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{_LOG_SUFFIX}"


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{_INDEX_SUFFIX}"


class LogError(StorageError, ValueError):
    """Input the log refuses (bad batches, offsets that do not follow); the log is unchanged."""


class OffsetOutOfRangeError(LogError):
    """A read or truncation outside [log start offset, log end offset]."""


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class DroppedBytes:
    """Bytes recovery removed from one segment file."""

    segment: str
    position: int
    bytes_dropped: int
    reason: str
    # (base offset, last offset) of batches inside the dropped bytes that were themselves intact.
    intact_batches: tuple[tuple[int, int], ...] = ()
    # How many of the dropped bytes were searched for intact batches: the search is bounded, and
    # the report must say when `intact_batches` may be incomplete.
    intact_searched_bytes: int | None = None

    @property
    def intact_search_complete(self) -> bool:
        return self.intact_searched_bytes is None or self.intact_searched_bytes >= self.bytes_dropped


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What `PartitionLog.open` found and changed. Empty tuples mean a clean log."""

    log_end_offset: int
    validated_segments: tuple[str, ...] = ()
    truncated: DroppedBytes | None = None
    deleted_segments: tuple[DroppedBytes, ...] = ()
    removed_files: tuple[str, ...] = ()
    rebuilt_indexes: tuple[str, ...] = ()
    leader_epoch_checkpoint: str = "up to date"
    # Opened as a clean shutdown left it: nothing below the active segment's tail was read.
    after_clean_shutdown: bool = False

    @property
    def is_clean(self) -> bool:
        return self.truncated is None and not self.deleted_segments

    @property
    def dropped_intact_batches(self) -> tuple[tuple[int, int], ...]:
        drops = ([self.truncated] if self.truncated else []) + list(self.deleted_segments)
        return tuple(batch for drop in drops for batch in drop.intact_batches)

    @property
    def offsets_dropped(self) -> tuple[int, int | None] | None:
        """(first offset lost, last offset known lost or None when the damage hides it), or None."""
        if self.is_clean:
            return None
        intact = self.dropped_intact_batches
        return self.log_end_offset, max((last for _, last in intact), default=None)

    def describe(self) -> list[str]:
        lines = []
        for drop in ([self.truncated] if self.truncated else []) + list(self.deleted_segments):
            verb = "truncated" if drop is self.truncated else "deleted"
            lines.append(
                f"{verb} {drop.segment} at byte {drop.position}: {drop.bytes_dropped} bytes dropped ({drop.reason})"
            )
            if drop.intact_batches:
                ranges = ", ".join(f"{b}..{e}" for b, e in drop.intact_batches)
                lines.append(
                    f"  intact batches dropped because they follow the damage (Kafka's behaviour): {ranges}"
                )
            if not drop.intact_search_complete:
                lines.append(
                    f"  only the first {drop.intact_searched_bytes} of the {drop.bytes_dropped} dropped bytes "
                    "were searched for intact batches; more may have been lost"
                )
        lines.extend(f"removed leftover {name}" for name in self.removed_files)
        lines.extend(f"rebuilt index {name}" for name in self.rebuilt_indexes)
        if self.leader_epoch_checkpoint != "up to date":
            lines.append(f"leader-epoch-checkpoint {self.leader_epoch_checkpoint}")
        return lines


class _Segment:
    """One `.log` file (opened for append) and its index."""

    def __init__(self, directory: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self.log_path = directory / segment_file_name(base_offset)
        with storage_io("opening", self.log_path):
            self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size_bytes = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.bytes_since_index_entry = 0
        self.index: OffsetIndex | None = None
        # Base offsets and positions of the batches appended since the last index entry: fetches
        # read near the log end, and this finds their batch without walking from the entry.
        self.tail_bases: list[int] = []
        self.tail_positions: list[int] = []
        # Whether bytes may sit in the page cache only. An opened file may hold writes a crashed
        # process never synced, so it starts unflushed.
        self.unflushed = True
        # The largest batch max timestamp, for time retention (Kafka reads it from the time index,
        # which we do not keep). None when unknown: worked out from the headers when first needed.
        self.max_timestamp_ms: int | None = -1 if self.size_bytes == 0 else None
        # Appends so far: a flush begun before an append does not cover it (`complete_flush`).
        self.appends = 0
        # segment.ms counts from the first batch's max timestamp (Kafka's rollingBasedTimestamp),
        # or from when this segment object was made when that is unknown (-1, no timestamps).
        self.created_ms = int(time.time() * 1000)
        self._rolling_based_timestamp_ms: int | None = None

    def rolling_based_timestamp_ms(self) -> int:
        """The first batch's max timestamp (-1 when empty), read once from its header."""
        if self._rolling_based_timestamp_ms is None:
            if self.size_bytes < RECORD_BATCH_OVERHEAD:
                return -1
            self._rolling_based_timestamp_ms = read_batch_header(os.pread(self.fd, RECORD_BATCH_OVERHEAD, 0)).max_timestamp
        return self._rolling_based_timestamp_ms

    def time_waited_for_roll_ms(self, *, now_ms: int, max_timestamp_ms: int) -> int:
        """Kafka's LogSegment.timeWaitedForRoll: by record timestamps when the segment has them."""
        first = self.rolling_based_timestamp_ms()
        return max_timestamp_ms - first if first >= 0 else now_ms - self.created_ms

    @property
    def name(self) -> str:
        return self.log_path.name

    @property
    def derived_paths(self) -> tuple[Path, Path]:
        """The offset index, and a `.timeindex` Kafka may have left (we do not maintain one)."""
        return self.log_path.with_suffix(_INDEX_SUFFIX), self.log_path.with_suffix(_TIME_INDEX_SUFFIX)

    def open_index(self, entries: list[tuple[int, int]]) -> None:
        self.index = OffsetIndex(
            self.log_path.with_suffix(_INDEX_SUFFIX), base_offset=self.base_offset, entries=entries
        )

    def append(self, batch: bytes | memoryview, header: BatchHeader, *, index_interval_bytes: int) -> None:
        index = self.index
        if index is None:
            raise InvariantViolation(f"segment {self.log_path} appended to before its index was opened")
        if self.bytes_since_index_entry > index_interval_bytes:
            index.append(header.last_offset, self.size_bytes)
            self.bytes_since_index_entry = 0
            self.tail_bases.clear()
            self.tail_positions.clear()
        self.tail_bases.append(header.base_offset)
        self.tail_positions.append(self.size_bytes)
        # A short write (a full device) is finished or fails with the device's own error.
        write_fully(self.fd, batch, path=self.log_path)
        self.size_bytes += len(batch)
        self.bytes_since_index_entry += len(batch)
        self.next_offset = header.next_offset
        self.unflushed = True
        self.appends += 1
        if self.max_timestamp_ms is not None:
            self.max_timestamp_ms = max(self.max_timestamp_ms, header.max_timestamp)

    def largest_timestamp_ms(self) -> int:
        """The largest max timestamp of the segment's batches (-1 when empty)."""
        if self.max_timestamp_ms is None:
            largest = -1
            position = 0
            while position + RECORD_BATCH_OVERHEAD <= self.size_bytes:
                header = read_batch_header(os.pread(self.fd, RECORD_BATCH_OVERHEAD, position))
                largest = max(largest, header.max_timestamp)
                position += header.size_bytes
            self.max_timestamp_ms = largest
        return self.max_timestamp_ms

    def walk_from(self, offset: int, *, window_bytes: int) -> _HeaderWalk:
        """A header walk starting at the indexed position at or before the batch holding `offset`."""
        if self.tail_bases and offset >= self.tail_bases[0]:
            position = self.tail_positions[bisect.bisect_right(self.tail_bases, offset) - 1]
        else:
            position = self.index.lookup(offset) if self.index is not None else 0
        return _HeaderWalk(self, position, window_bytes=window_bytes)

    def batch_start_at_or_before(self, position: int, *, offset_below: int | None) -> int:
        """A known batch start at or before `position` (from the index, or the batches appended
        since its last entry) whose batch starts below `offset_below`; 0 when none is known."""
        found = self.index.floor_position(position, offset_below=offset_below) if self.index is not None else 0
        tail = bisect.bisect_right(self.tail_positions, position)
        if offset_below is not None:
            tail = min(tail, bisect.bisect_left(self.tail_bases, offset_below))
        return max(found, self.tail_positions[tail - 1]) if tail else found

    def truncate_to_position(self, position: int, *, next_offset: int) -> None:
        # A time index from Kafka would now describe batches that are gone; Kafka rebuilds a missing one.
        with storage_io("truncating", self.log_path):
            self.derived_paths[1].unlink(missing_ok=True)
            os.ftruncate(self.fd, position)
            os.fsync(self.fd)
        self.unflushed = False
        if self.index is not None:
            # Not synced: recovery rebuilds an index that still holds entries past the cut.
            self.index.truncate_to_position(position)
        keep = bisect.bisect_left(self.tail_positions, position)
        del self.tail_bases[keep:]
        del self.tail_positions[keep:]
        self.size_bytes = position
        self.next_offset = next_offset
        self.max_timestamp_ms = -1 if position == 0 else None
        if position == 0:
            self._rolling_based_timestamp_ms = None
        # Exactly what a fresh scan of the remaining bytes computes, so a reopen finds the same index.
        entries = self.index.entries if self.index is not None else []
        self.bytes_since_index_entry = position - entries[-1][1] if entries else position

    def flush(self) -> None:
        """fdatasync the segment's data (`_sync_data`); the index is derived and synced only at
        roll and close."""
        if self.unflushed:
            with storage_io("fsyncing", self.log_path):
                _sync_data(self.fd)
            self.unflushed = False

    def seal(self) -> None:
        """Make data and index durable before a newer segment takes over (Kafka's roll)."""
        self.flush()
        if self.index is not None:
            self.index.flush()

    def close(self) -> None:
        try:
            if self.index is not None:
                self.index.close()
        finally:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


class _HeaderWalk:
    """Walks one segment's batches through a window of bytes instead of a pread per header.

    Between two index entries sit up to `index.interval.bytes` of batches; locating an offset
    walks their headers, and so does finding where a read ends (from the last known batch start
    before its limit). One pread of such a stretch (refilled when the walk leaves it) replaces
    dozens of 61-byte preads, and the walk unpacks only the three header fields it needs. The
    bytes were checked when appended or recovered.
    """

    def __init__(self, segment: _Segment, position: int, *, window_bytes: int) -> None:
        self._segment = segment
        self._window_bytes = max(window_bytes, RECORD_BATCH_OVERHEAD)
        self.position = position
        self._start = position
        self._data = b""

    def bounds_at(self, position: int) -> tuple[int, int, int]:
        """(base offset, last offset delta, size in bytes) of the batch at `position`."""
        relative = position - self._start
        if relative < 0 or relative + _WALKED_FIELDS.size > len(self._data):
            size = min(self._window_bytes, self._segment.size_bytes - position)
            self._start, self._data, relative = position, os.pread(self._segment.fd, size, position), 0
            if len(self._data) < _WALKED_FIELDS.size:
                raise InvariantViolation(f"{self._segment.log_path} has no whole batch header at byte {position}")
        base_offset, batch_length, last_offset_delta = _WALKED_FIELDS.unpack_from(self._data, relative)
        return base_offset, last_offset_delta, LOG_OVERHEAD + batch_length

    def find(self, offset: int) -> tuple[int, int] | None:
        """Advance `position` to the batch holding `offset`: its (base offset, size), None past the end."""
        end = self._segment.size_bytes
        while self.position < end:
            base_offset, last_offset_delta, size = self.bounds_at(self.position)
            if base_offset + last_offset_delta >= offset:
                return base_offset, size
            self.position += size
        return None

    @property
    def segment_fd(self) -> int:
        return self._segment.fd

    def read(self, start: int, end: int) -> bytes:
        """The segment's bytes [start, end), from the window when it holds them."""
        relative = start - self._start
        if relative >= 0 and end - self._start <= len(self._data):
            return self._data[relative : end - self._start]
        return os.pread(self._segment.fd, end - start, start)


@dataclass
class _Scan:
    """Result of walking one segment during recovery."""

    valid_bytes: int
    next_offset: int
    last_epoch: int
    index_entries: list[tuple[int, int]]
    bytes_since_index_entry: int
    epochs: list[EpochEntry]
    error: str | None = None
    max_timestamp_ms: int = -1


def _scan_segment(
    segment: _Segment,
    *,
    next_offset: int,
    last_epoch: int,
    verify_crc: bool,
    index_interval_bytes: int,
    allow_offset_gaps: bool = False,
) -> _Scan:
    scan = _Scan(0, next_offset, last_epoch, [], 0, [])
    position = 0
    size = segment.size_bytes
    while position < size:
        remaining = size - position
        head = os.pread(segment.fd, min(remaining, RECORD_BATCH_OVERHEAD), position)
        try:
            if len(head) < LOG_OVERHEAD:
                raise IncompleteBatchError(f"{len(head)} bytes left, need {LOG_OVERHEAD}")
            (batch_length,) = struct.unpack_from(">i", head, 8)
            declared = LOG_OVERHEAD + max(batch_length, 0)
            if verify_crc:
                header = validate_batch(os.pread(segment.fd, min(remaining, declared), position))
            else:
                header = read_batch_header(head)
                if header.size_bytes < RECORD_BATCH_OVERHEAD:
                    raise CorruptBatchError(f"batch_length {batch_length} is below the minimum")
                if header.size_bytes > remaining:
                    raise IncompleteBatchError(f"batch declares {header.size_bytes} bytes, {remaining} present")
        except CorruptBatchError as e:
            kind = "torn batch" if isinstance(e, IncompleteBatchError) else "corrupt batch"
            scan.error = f"{kind}: {e.reason}"
            return scan
        if header.base_offset != scan.next_offset and not (allow_offset_gaps and header.base_offset > scan.next_offset):
            scan.error = f"batch base offset {header.base_offset} where {scan.next_offset} was expected"
            return scan
        if header.last_offset_delta < 0 or header.last_offset - segment.base_offset > _INT32_MAX:
            scan.error = f"batch at offset {header.base_offset} has an invalid last offset delta"
            return scan
        if header.partition_leader_epoch < scan.last_epoch:
            scan.error = (
                f"batch at offset {header.base_offset} has leader epoch {header.partition_leader_epoch}"
                f" below the preceding {scan.last_epoch}"
            )
            return scan
        if header.partition_leader_epoch > scan.last_epoch:
            scan.epochs.append((header.partition_leader_epoch, header.base_offset))
            scan.last_epoch = header.partition_leader_epoch
        if scan.bytes_since_index_entry > index_interval_bytes:
            scan.index_entries.append((header.last_offset, position))
            scan.bytes_since_index_entry = 0
        scan.bytes_since_index_entry += header.size_bytes
        scan.max_timestamp_ms = max(scan.max_timestamp_ms, header.max_timestamp)
        position += header.size_bytes
        scan.valid_bytes = position
        scan.next_offset = header.next_offset
    return scan


def _dropped(segment: _Segment, start: int, reason: str) -> DroppedBytes:
    """The bytes of `segment` from `start` on, as recovery drops them, with what was intact there."""
    searched = min(segment.size_bytes - start, _INTACT_SEARCH_LIMIT_BYTES)
    return DroppedBytes(
        segment.name,
        start,
        segment.size_bytes - start,
        reason,
        _intact_batches_in(segment, start, start + searched),
        searched,
    )


def _intact_batches_in(segment: _Segment, start: int, end: int) -> tuple[tuple[int, int], ...]:
    """Batches that still pass every batch-level check inside a segment's dropped bytes."""
    data = os.pread(segment.fd, end - start, start)
    found = []
    position = 0
    # The bad batch's own length cannot be trusted, so every byte position is a candidate. Only
    # positions whose magic byte (16 bytes in) is 2 can start a batch, which `find` skips to in C;
    # a CRC-32C match by accident is negligible.
    while True:
        candidate = data.find(_MAGIC_BYTE, position + _MAGIC_POSITION)
        if candidate < 0:
            break
        position = candidate - _MAGIC_POSITION
        if position + RECORD_BATCH_OVERHEAD > len(data):
            break
        try:
            header = validate_batch(data, position)
        except CorruptBatchError:
            position += 1
            continue
        found.append((header.base_offset, header.last_offset))
        position += header.size_bytes
    return tuple(found)


def _rename_for_deletion(directory: Path, segments: list[_Segment]) -> list[Path]:
    """The first step of Kafka's delete of closed segments: each file renamed `.deleted`, then the
    directory fsynced; the renamed paths. A crash after it leaves `.deleted` files, which the next
    open removes (Kafka's LogLoader does the same)."""
    renamed = []
    for path in [p for s in segments for p in (s.log_path, *s.derived_paths)]:
        if path.exists():
            target = path.with_name(path.name + _DELETED_SUFFIX)
            with storage_io("renaming for deletion", path):
                os.replace(path, target)
            renamed.append(target)
    if renamed:
        fsync_dir(directory)
    return renamed


def _delete_segment_files(directory: Path, segments: list[_Segment]) -> None:
    """Kafka's two-step delete at once: rename to `.deleted`, fsync the directory, unlink."""
    for target in _rename_for_deletion(directory, segments):
        target.unlink(missing_ok=True)


# PartitionLog._open_after_clean_shutdown or PartitionLog._recover, called with the same arguments.
_Opening = Callable[..., "tuple[PartitionLog, RecoveryReport] | None"]


@dataclass(eq=False)
class PendingFlush:
    """A flush begun by `PartitionLog.begin_flush`; `sync` may run on any thread, once."""

    end_offset: int
    _segment: _Segment
    _fd: int  # a duplicate of the segment's descriptor, or -1 when it had nothing unsynced
    _appends: int
    _truncations: int

    def sync(self) -> None:
        """fsync the duplicated descriptor and close it (the only state it touches)."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            with storage_io("fsyncing", self._segment.log_path):
                _sync_data(fd)
        finally:
            os.close(fd)


def _sync_data(fd: int) -> None:
    """Make an append to a segment durable: fdatasync, not fsync.

    fdatasync writes the data and the metadata needed to read it back (the file size grown by the
    append); it skips the timestamps, which nothing reads after a crash. That is the commit path's
    one blocking wait (the raft leader counts itself, and a follower fetches again, only after
    it), and on ext4 it is measurably shorter than fsync (bench/quorum.py's profile: the follower's
    fsync thread was busy 37 % of the run). etcd syncs its WAL the same way.
    """
    os.fdatasync(fd)


class PartitionLog:
    """A partition's segmented log. Single-threaded: the caller serialises all calls (only a
    `PendingFlush.sync` may run elsewhere)."""

    def __init__(
        self,
        directory: Path,
        *,
        segments: list[_Segment],
        log_start_offset: int,
        epochs: LeaderEpochCache,
        segment_bytes: int,
        index_interval_bytes: int,
        allow_offset_gaps: bool = False,
    ) -> None:
        self.directory = directory
        self._allow_offset_gaps = allow_offset_gaps
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._epochs = epochs
        self._segment_bytes = segment_bytes
        self._index_interval_bytes = index_interval_bytes
        self._flushed_offset = self.log_end_offset
        self._truncations = 0
        self._segment_ms: int | None = None  # never roll by time unless configured
        self._roll_jitter_ms = 0
        # file.delete.delay.ms: segments deleted while the log is open are renamed `.deleted` and
        # unlinked once this much time has passed (`delete_due_files`); 0 unlinks them at once.
        self._file_delete_delay_ms = 0
        self._deferred_deletes: list[tuple[float, list[Path]]] = []  # (due, monotonic s; renamed files)

    # ---- opening and recovery ---------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        recovery_point: int | None = None,
        log_start_offset: int | None = None,
        allow_offset_gaps: bool = False,
        clean_shutdown: bool = False,
    ) -> tuple[PartitionLog, RecoveryReport]:
        """Open (creating if needed) and recover the log in `directory`; see the module doc."""
        if segment_bytes < RECORD_BATCH_OVERHEAD:
            raise ValueError(f"segment.bytes {segment_bytes} is smaller than one record batch")
        if index_interval_bytes < 0:
            raise ValueError(f"index.interval.bytes must be non-negative, got {index_interval_bytes}")
        directory.mkdir(parents=True, exist_ok=True)
        removed: list[str] = []
        bases: set[int] = set()
        for path in sorted(directory.iterdir()):
            if path.name.endswith(_CLEANED_SUFFIX) and _SEGMENT_NAME.match(path.name[: -len(_CLEANED_SUFFIX)]):
                path.unlink()  # a cleaner's output that was never swapped in: the original stands
                removed.append(path.name)
                continue
            if path.name.endswith(_DELETED_SUFFIX) and _SEGMENT_NAME.match(path.name[: -len(_DELETED_SUFFIX)]):
                path.unlink()
                removed.append(path.name)
                continue
            match = _SEGMENT_NAME.match(path.name)
            if match and match.group(2) == "log":
                bases.add(int(match.group(1)))
        for path in sorted(directory.iterdir()):
            match = _SEGMENT_NAME.match(path.name)
            if match and match.group(2) != "log" and int(match.group(1)) not in bases:
                path.unlink()
                removed.append(path.name)
        removed.extend(clean_snapshot_leftovers(directory))

        attempts: list[_Opening] = [cls._recover]
        if clean_shutdown and bases:
            attempts.insert(0, cls._open_after_clean_shutdown)
        for attempt in attempts:
            segments = [_Segment(directory, base) for base in sorted(bases)]
            try:
                opened = attempt(
                    directory,
                    segments=segments,
                    removed=removed,
                    segment_bytes=segment_bytes,
                    index_interval_bytes=index_interval_bytes,
                    recovery_point=recovery_point,
                    log_start_offset=log_start_offset,
                    allow_offset_gaps=allow_offset_gaps,
                )
            except BaseException:
                for segment in segments:
                    segment.close()
                raise
            if opened is not None:
                return opened
            for segment in segments:  # the clean-shutdown open gave up: recover in full
                segment.close()
        raise InvariantViolation(f"no way to open {directory} succeeded")

    @classmethod
    def _open_after_clean_shutdown(
        cls,
        directory: Path,
        *,
        segments: list[_Segment],
        removed: list[str],
        segment_bytes: int,
        index_interval_bytes: int,
        recovery_point: int | None,
        log_start_offset: int | None,
        allow_offset_gaps: bool,
    ) -> tuple[PartitionLog, RecoveryReport] | None:
        """The log as a clean shutdown left it, reading only indexes and the active tail; None
        when anything does not add up (the caller then recovers in full). The recovery point is
        not needed: a clean shutdown flushed everything."""
        del recovery_point
        cache_path = directory / LEADER_EPOCH_CHECKPOINT_FILE_NAME
        try:
            epochs = read_leader_epoch_checkpoint(cache_path)
        except (FileNotFoundError, CheckpointError):
            return None
        for i, segment in enumerate(segments):
            entries = OffsetIndex.read_entries(segment.log_path.with_suffix(_INDEX_SUFFIX), base_offset=segment.base_offset)
            if entries is None or any(position >= segment.size_bytes for _, position in entries):
                return None
            if i + 1 < len(segments):
                segment.next_offset = segments[i + 1].base_offset
                if entries and entries[-1][0] >= segment.next_offset:
                    return None
            else:
                position = entries[-1][1] if entries else 0
                next_offset = segment.base_offset
                while position < segment.size_bytes:
                    head = os.pread(segment.fd, RECORD_BATCH_OVERHEAD, position)
                    if len(head) < RECORD_BATCH_OVERHEAD:
                        return None
                    header = read_batch_header(head)
                    if header.size_bytes < RECORD_BATCH_OVERHEAD or position + header.size_bytes > segment.size_bytes:
                        return None
                    next_offset = header.next_offset
                    position += header.size_bytes
                segment.next_offset = next_offset
                segment.bytes_since_index_entry = segment.size_bytes - entries[-1][1] if entries else segment.size_bytes
            segment.open_index(entries)
            segment.unflushed = False
        log_end = segments[-1].next_offset
        if any(start > log_end for _, start in epochs):
            return None
        start = max(log_start_offset or 0, segments[0].base_offset)
        if start > log_end:
            return None
        log = cls(
            directory,
            segments=segments,
            log_start_offset=start,
            epochs=LeaderEpochCache(cache_path, epochs),
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            allow_offset_gaps=allow_offset_gaps,
        )
        return log, RecoveryReport(log_end_offset=log_end, removed_files=tuple(removed), after_clean_shutdown=True)

    @classmethod
    def _recover(
        cls,
        directory: Path,
        *,
        segments: list[_Segment],
        removed: list[str],
        segment_bytes: int,
        index_interval_bytes: int,
        recovery_point: int | None,
        log_start_offset: int | None,
        allow_offset_gaps: bool,
    ) -> tuple[PartitionLog, RecoveryReport]:
        validated: list[str] = []
        rebuilt: list[str] = []
        dropped: list[DroppedBytes] = []
        truncated: DroppedBytes | None = None
        epochs: list[EpochEntry] = []
        kept: list[_Segment] = []
        cut_in: str | None = None  # the segment where recovery cut the log, if it did
        next_offset: int | None = None
        last_epoch = -1
        for i, segment in enumerate(segments):
            is_last = i == len(segments) - 1
            if cut_in is not None:
                dropped.append(_dropped(segment, 0, f"follows the point where {cut_in} was cut"))
                continue
            if segment.size_bytes == 0 and not is_last and not allow_offset_gaps:
                # (In a compacted log a cleaned segment may hold nothing yet still mark its offsets.)
                # Holds nothing; if it leaves an offset gap, the gap check on the next segment cuts there.
                removed.append(f"{segment.name} (zero-length segment before the last one)")
                continue
            if next_offset is not None and segment.base_offset != next_offset and not (
                allow_offset_gaps and segment.base_offset > next_offset
            ):
                dropped.append(
                    _dropped(segment, 0, f"segment base offset {segment.base_offset} where {next_offset} was expected")
                )
                cut_in = segment.name
                continue
            next_base = segments[i + 1].base_offset if not is_last else None
            verify_crc = recovery_point is None or next_base is None or next_base > recovery_point
            scan = _scan_segment(
                segment,
                next_offset=segment.base_offset,
                last_epoch=last_epoch,
                verify_crc=verify_crc,
                index_interval_bytes=index_interval_bytes,
                allow_offset_gaps=allow_offset_gaps,
            )
            if verify_crc:
                validated.append(segment.name)
            if scan.error is not None:
                truncated = _dropped(segment, scan.valid_bytes, scan.error)
                segment.truncate_to_position(scan.valid_bytes, next_offset=scan.next_offset)
                cut_in = segment.name
            segment.next_offset = scan.next_offset
            segment.bytes_since_index_entry = scan.bytes_since_index_entry
            segment.max_timestamp_ms = scan.max_timestamp_ms
            index_path = segment.log_path.with_suffix(_INDEX_SUFFIX)
            if OffsetIndex.read_entries(index_path, base_offset=segment.base_offset) != scan.index_entries:
                rebuilt.append(index_path.name)
            segment.open_index(scan.index_entries)
            epochs.extend(scan.epochs)
            next_offset = scan.next_offset
            last_epoch = scan.last_epoch
            kept.append(segment)

        doomed = [s for s in segments if s not in kept]
        for segment in doomed:
            segment.close()
        _delete_segment_files(directory, doomed)

        log_end = kept[-1].next_offset if kept else (log_start_offset or 0)
        start = max(log_start_offset or 0, kept[0].base_offset if kept else 0)
        if start > log_end:
            # Everything on disk is below the recorded log start: the log restarts there.
            for segment in kept:
                dropped.append(
                    DroppedBytes(segment.name, 0, segment.size_bytes, f"below the log start offset {start}")
                )
                segment.close()
            _delete_segment_files(directory, kept)
            kept, epochs, log_end = [], [], start
        # Finish a retention that a crash interrupted: segments wholly below the log start go.
        below = []
        while len(kept) > 1 and kept[1].base_offset <= start:
            below.append(kept.pop(0))
        for segment in below:
            segment.close()
            removed.append(f"{segment.name} (below the log start offset {start})")
        _delete_segment_files(directory, below)
        if not kept:
            first = _Segment(directory, start)
            first.open_index([])
            kept.append(first)
            fsync_dir(directory)

        cache_path = directory / LEADER_EPOCH_CHECKPOINT_FILE_NAME
        cache = LeaderEpochCache(cache_path, epochs)
        cache.truncate_from_start(start)
        status = "up to date"
        try:
            if read_leader_epoch_checkpoint(cache_path) != cache.entries:
                status = "differed from the log: rewritten"
        except FileNotFoundError:
            status = "missing: rebuilt from the log" if cache.entries else "up to date"
        except CheckpointError as e:
            status = f"malformed ({e}): rebuilt from the log"
        if status != "up to date" or not cache_path.exists():
            cache.flush()

        # What was read back from the page cache is now made durable, so flushed_offset is honest.
        # (Rebuilt indexes need not be: the next open checks them against the batches again.)
        kept[-1].flush()
        log = cls(
            directory,
            segments=kept,
            log_start_offset=start,
            epochs=cache,
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            allow_offset_gaps=allow_offset_gaps,
        )
        report = RecoveryReport(
            log_end_offset=log.log_end_offset,
            validated_segments=tuple(validated),
            truncated=truncated,
            deleted_segments=tuple(dropped),
            removed_files=tuple(removed),
            rebuilt_indexes=tuple(rebuilt),
            leader_epoch_checkpoint=status,
        )
        return log, report

    # ---- state ----------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def flushed_offset(self) -> int:
        """Every offset below this is on stable storage."""
        return self._flushed_offset

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs.latest_epoch

    @property
    def epoch_entries(self) -> list[EpochEntry]:
        return self._epochs.entries

    @property
    def segment_base_offsets(self) -> list[int]:
        return [s.base_offset for s in self._segments]

    @property
    def segment_names(self) -> list[str]:
        return [s.name for s in self._segments]

    def size_in_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._epochs.end_offset_for(epoch, log_end_offset=self.log_end_offset)

    def configure_rolls(self, *, segment_bytes: int, segment_ms: int | None, segment_jitter_ms: int = 0) -> None:
        """The topic's `segment.bytes`, `segment.ms` and `segment.jitter.ms` (None: no time rolls).

        As Kafka does, the jitter is drawn once per log, uniformly below `segment.jitter.ms` and
        below `segment.ms`, so the logs of one broker do not all roll in the same instant."""
        if segment_bytes < RECORD_BATCH_OVERHEAD:
            raise ValueError(f"segment.bytes {segment_bytes} is smaller than one record batch")
        if segment_ms is not None and segment_ms < 1:
            raise ValueError(f"segment.ms must be at least 1, got {segment_ms}")
        self._segment_bytes = segment_bytes
        if segment_ms != self._segment_ms:
            bound = 0 if segment_ms is None else min(segment_jitter_ms, segment_ms)
            self._roll_jitter_ms = random.randrange(bound) if bound > 0 else 0
        self._segment_ms = segment_ms

    def configure_deletes(self, *, file_delete_delay_ms: int) -> None:
        """How long a deleted segment's files wait as `.deleted` before they are unlinked (Kafka's
        `file.delete.delay.ms`, topic key over the broker's `log.segment.delete.delay.ms`)."""
        if file_delete_delay_ms < 0:
            raise ValueError(f"file.delete.delay.ms must be at least 0, got {file_delete_delay_ms}")
        self._file_delete_delay_ms = file_delete_delay_ms

    def _retire(self, segments: list[_Segment]) -> None:
        """Kafka's asynchronous segment delete (LocalLog.deleteSegmentFiles with asyncDelete):
        the closed segments' files are renamed `.deleted` now and unlinked after
        `file.delete.delay.ms`, so a read that found them a moment ago is not cut off, and a
        crash in between leaves only `.deleted` files, which the next open removes."""
        self.delete_later(_rename_for_deletion(self.directory, segments))

    def delete_later(self, renamed: list[Path]) -> None:
        """Unlink files already renamed `.deleted` once `file.delete.delay.ms` has passed (at
        once when it is 0): this log's segments, or the snapshots beside them (`delete_due_files`)."""
        if not renamed:
            return
        if self._file_delete_delay_ms == 0:
            for target in renamed:
                target.unlink(missing_ok=True)
            return
        self._deferred_deletes.append((time.monotonic() + self._file_delete_delay_ms / 1000, renamed))

    def delete_due_files(self) -> list[str]:
        """Unlink the `.deleted` files whose `file.delete.delay.ms` has passed; their names."""
        now = time.monotonic()
        due = [paths for at, paths in self._deferred_deletes if at <= now]
        if not due:
            return []
        self._deferred_deletes = [(at, paths) for at, paths in self._deferred_deletes if at > now]
        removed = []
        for target in (path for paths in due for path in paths):
            with storage_io("deleting", target):
                target.unlink(missing_ok=True)
            removed.append(target.name)
        return removed

    @property
    def files_awaiting_deletion(self) -> list[str]:
        """Names of the `.deleted` files not yet unlinked, oldest first."""
        return [path.name for _, paths in self._deferred_deletes for path in paths]

    def _due_for_time_roll(self, segment: _Segment, *, max_timestamp_ms: int) -> bool:
        if self._segment_ms is None or segment.size_bytes == 0:
            return False
        waited = segment.time_waited_for_roll_ms(now_ms=int(time.time() * 1000), max_timestamp_ms=max_timestamp_ms)
        return waited > self._segment_ms - self._roll_jitter_ms

    # ---- appends ----------------------------------------------------------------------------

    def append_as_leader(self, batches: bytes, *, epoch: int) -> AppendInfo:
        """Append whole batches, assigning offsets from the log end and stamping `epoch`."""
        headers = _whole_batches(batches)
        latest = self._epochs.latest_epoch
        if latest is not None and epoch < latest:
            raise LogError(f"leader epoch {epoch} is below the log's latest epoch {latest}")
        data, stamped = restamp(batches, headers, base_offset=self.log_end_offset, epoch=epoch)
        return self._append(data, stamped)

    def append_as_follower(self, batches: bytes) -> AppendInfo:
        """Append whole batches whose offsets the leader assigned; they must continue the log."""
        headers = _whole_batches(batches)
        expected = self.log_end_offset
        epoch = self._epochs.latest_epoch if self._epochs.latest_epoch is not None else -1
        for header in headers:
            if header.base_offset != expected and not (self._allow_offset_gaps and header.base_offset > expected):
                raise LogError(f"batch at offset {header.base_offset} does not follow the log end {expected}")
            if header.partition_leader_epoch < epoch:
                raise LogError(
                    f"batch at offset {header.base_offset} has leader epoch {header.partition_leader_epoch},"
                    f" below {epoch}"
                )
            expected = header.next_offset
            epoch = header.partition_leader_epoch
        return self._append(batches, headers)

    def _append(self, data: bytes, headers: list[BatchHeader]) -> AppendInfo:
        view = memoryview(data)
        position = 0
        for header in headers:
            active = self._segments[-1]
            too_big = active.size_bytes + header.size_bytes > self._segment_bytes
            too_far = header.last_offset - active.base_offset > _INT32_MAX
            too_old = self._due_for_time_roll(active, max_timestamp_ms=header.max_timestamp)
            if active.size_bytes > 0 and (too_big or too_far or too_old):
                self._roll(header.base_offset)
            self._epochs.assign(header.partition_leader_epoch, header.base_offset)
            self._segments[-1].append(
                view[position : position + header.size_bytes],
                header,
                index_interval_bytes=self._index_interval_bytes,
            )
            position += header.size_bytes
        return AppendInfo(headers[0].base_offset, headers[-1].last_offset)

    def _roll(self, base_offset: int) -> None:
        self._segments[-1].seal()
        segment = _Segment(self.directory, base_offset)
        segment.open_index([])
        self._segments.append(segment)
        fsync_dir(self.directory)

    # ---- reads ------------------------------------------------------------------------------

    def read(self, offset: int, *, max_bytes: int, upper_bound: int | None = None) -> bytes:
        """Whole batches starting with the one holding `offset`, up to `max_bytes` (at least one
        batch, as in Kafka), from a single segment, none starting at or past `upper_bound`.
        Empty at the log end."""
        located = self._locate(offset, max_bytes=max_bytes, upper_bound=upper_bound)
        if located is None:
            return b""
        walk, start, end = located
        return walk.read(start, end)

    def read_region(self, offset: int, *, max_bytes: int, upper_bound: int | None = None) -> tuple[int, int, int] | None:
        """What `read` returns, as (descriptor of the segment file, position, size) for the kernel
        to send (sendfile) without the bytes passing through this process; None when empty. The
        descriptor is the log's own: duplicate it before the log may close or delete the segment."""
        located = self._locate(offset, max_bytes=max_bytes, upper_bound=upper_bound)
        if located is None:
            return None
        walk, start, end = located
        return walk.segment_fd, start, end - start

    def _locate(self, offset: int, *, max_bytes: int, upper_bound: int | None) -> tuple[_HeaderWalk, int, int] | None:
        """The segment stretch of whole batches `read` returns, found as Kafka's LogSegment.read
        finds it: the start through the index and a walk of at most one index interval, the end
        as far as `max_bytes` and `upper_bound` allow, taken from the index and the batches
        appended since its last entry and walked for at most one more interval. The batches in
        between are never read (an 8 MiB answer used to be pread whole to walk its headers)."""
        if offset == self.log_end_offset or (upper_bound is not None and offset >= upper_bound):
            return None
        if not self._log_start_offset <= offset < self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside the log [{self._log_start_offset}, {self.log_end_offset})"
            )
        window_bytes = self._index_interval_bytes + RECORD_BATCH_OVERHEAD
        for segment in self._segments[self._segment_index(offset) :]:
            walk = segment.walk_from(offset, window_bytes=window_bytes)
            found = walk.find(offset)
            if found is None:
                continue
            if upper_bound is not None and found[0] >= upper_bound:
                return None
            start = walk.position
            end = start + found[1]
            limit = start + max_bytes
            if end >= limit or end >= segment.size_bytes:
                return walk, start, end
            if limit >= segment.size_bytes and (upper_bound is None or segment.next_offset <= upper_bound):
                return walk, start, segment.size_bytes  # the rest of the segment: whole batches, all allowed
            end = max(end, segment.batch_start_at_or_before(limit, offset_below=upper_bound))
            while end < segment.size_bytes:
                base_offset, _, size = walk.bounds_at(end)
                if end - start + size > max_bytes or (upper_bound is not None and base_offset >= upper_bound):
                    break
                end += size
            return walk, start, end
        return None

    def _segment_index(self, offset: int) -> int:
        """Index in `_segments` of the segment whose offsets start at or before `offset`."""
        if offset >= self._segments[-1].base_offset:
            return len(self._segments) - 1  # the active segment: where nearly every read lands
        return bisect.bisect_right([s.base_offset for s in self._segments], offset) - 1

    # ---- truncation and retention ------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove everything at and after `offset`, cutting at a batch boundary.

        When `offset` falls inside a batch, that whole batch goes too. Returns the new log end.
        """
        if offset >= self.log_end_offset:
            return self.log_end_offset
        if offset < self._log_start_offset:
            raise OffsetOutOfRangeError(
                f"cannot truncate to {offset}, below the log start offset {self._log_start_offset}"
            )
        index = self._segment_index(offset)
        segment = self._segments[index]
        walk = segment.walk_from(offset, window_bytes=self._index_interval_bytes + RECORD_BATCH_OVERHEAD)
        found = walk.find(offset)
        position = walk.position
        new_end = segment.next_offset if found is None else found[0]
        if new_end < self._log_start_offset:
            raise OffsetOutOfRangeError(
                f"truncating to {offset} would cut the batch holding the log start offset {self._log_start_offset}"
            )
        later = self._segments[index + 1 :]
        for s in later:
            s.close()
        del self._segments[index + 1 :]
        self._retire(later)
        segment.truncate_to_position(position, next_offset=new_end)
        self._epochs.truncate_from_end(new_end)
        self._flushed_offset = min(self._flushed_offset, new_end)
        self._truncations += 1
        return new_end

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and restart it, empty, at `offset` (e.g. below a fetched snapshot)."""
        if offset < 0:
            raise LogError(f"a log cannot start at negative offset {offset}")
        old = self._segments
        for s in old:
            s.close()
        self._retire(old)
        segment = _Segment(self.directory, offset)
        segment.open_index([])
        self._segments = [segment]
        fsync_dir(self.directory)
        self._epochs.clear()
        self._log_start_offset = offset
        self._flushed_offset = offset
        self._truncations += 1

    def delete_below(self, offset: int) -> list[str]:
        """Advance the log start offset to `offset` and delete segments wholly below it.

        The active segment is never deleted. The caller persists the new log start offset
        (log-start-offset-checkpoint) before relying on it across a restart.
        """
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(f"log start offset {offset} is beyond the log end {self.log_end_offset}")
        if offset <= self._log_start_offset:
            return []
        self._log_start_offset = offset
        doomed = []
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            doomed.append(self._segments.pop(0))
        for s in doomed:
            s.close()
        self._retire(doomed)
        self._epochs.truncate_from_start(offset)
        return [s.name for s in doomed]

    def delete_retained_segments(
        self, *, now_ms: int, retention_ms: int, retention_bytes: int, high_watermark: int
    ) -> list[str]:
        """Kafka's deleteOldSegments: drop the oldest segments that time or size retention expire.

        Time (`retention.ms`, -1 = for ever): from the oldest segment on, those whose largest batch
        timestamp is more than `retention_ms` before `now_ms`, stopping at the first that is not.
        Size (`retention.bytes`, -1 = unbounded): the oldest segments whose removal still leaves
        at least `retention_bytes` in the log. Only segments wholly below `high_watermark` go, so
        no replica loses data consumers may not have read yet. When time retention expires the
        active segment as well (and it is non-empty and below the high watermark), the log first
        rolls, as Kafka does, and restarts empty at its log end. The log start offset moves to
        the oldest kept segment; the caller checkpoints it (log-start-offset-checkpoint).
        """
        segments = self._segments

        def deletable(i: int) -> bool:
            end = segments[i + 1].base_offset if i + 1 < len(segments) else self.log_end_offset
            return end <= high_watermark and segments[i].size_bytes > 0

        keep_from = 0
        if retention_ms >= 0:
            while (
                keep_from < len(segments)
                and deletable(keep_from)
                and now_ms - segments[keep_from].largest_timestamp_ms() > retention_ms
            ):
                keep_from += 1
        if retention_bytes >= 0:
            excess = self.size_in_bytes() - retention_bytes
            by_size = 0
            while by_size < len(segments) - 1 and deletable(by_size) and excess - segments[by_size].size_bytes >= 0:
                excess -= segments[by_size].size_bytes
                by_size += 1
            keep_from = max(keep_from, by_size)
        if keep_from == 0:
            return []
        if keep_from == len(segments):
            self._roll(self.log_end_offset)
        return self.delete_below(self._segments[keep_from].base_offset)

    # ---- compaction ----------------------------------------------------------------------------

    def cleanable_segments(self, *, upper_bound: int) -> list[tuple[int, int]]:
        """(base offset, end offset) of each non-active segment wholly below `upper_bound`."""
        found = []
        for segment, following in zip(self._segments, self._segments[1:], strict=False):
            if following.base_offset > upper_bound:
                break
            found.append((segment.base_offset, following.base_offset))
        return found

    def segment_size_bytes(self, base_offset: int) -> int:
        return self._segment_at(base_offset).size_bytes

    def segment_largest_timestamp_ms(self, base_offset: int) -> int:
        """The largest batch max timestamp in the segment (-1 when it has none)."""
        return self._segment_at(base_offset).largest_timestamp_ms()

    def segment_first_batch_timestamp_ms(self, base_offset: int) -> int:
        """The max timestamp of the segment's first batch (-1 when it has none): what Kafka's
        LogSegment.getFirstBatchTimestamp reads, for `segment.ms` and `max.compaction.lag.ms`."""
        return self._segment_at(base_offset).rolling_based_timestamp_ms()

    def segment_batches(self, base_offset: int) -> Iterator[bytes]:
        """Every batch of one segment, in order, read a chunk at a time."""
        segment = self._segment_at(base_offset)
        position = 0
        while position < segment.size_bytes:
            chunk = os.pread(segment.fd, min(_SEGMENT_READ_CHUNK_BYTES, segment.size_bytes - position), position)
            view = memoryview(chunk)
            used = 0
            while used + LOG_OVERHEAD <= len(view):
                (batch_length,) = struct.unpack_from(">i", view, used + 8)
                size = LOG_OVERHEAD + batch_length
                if used + size > len(view):
                    break
                yield bytes(view[used : used + size])
                used += size
            if used == 0:  # one batch larger than the chunk
                (batch_length,) = struct.unpack_from(">i", chunk, 8)
                yield os.pread(segment.fd, LOG_OVERHEAD + batch_length, position)
                used = LOG_OVERHEAD + batch_length
            position += used

    def replace_segment(self, base_offset: int, batches: Iterable[bytes]) -> None:
        """Swap a non-active segment's batches for `batches` (the cleaner's output of it).

        The new file is written beside the old one as `<base>.log.cleaned`, fsynced, and renamed
        over the original, so a crash leaves one or the other whole (a leftover `.cleaned` is
        removed on open). The offsets it covers do not change: the batches must lie within them,
        in order, and the segment keeps its place before the next one (offset gaps need a log
        opened with `allow_offset_gaps`).
        """
        position = next((i for i, s in enumerate(self._segments) if s.base_offset == base_offset), None)
        if position is None or position == len(self._segments) - 1:
            raise LogError(f"no non-active segment starts at offset {base_offset}")
        if not self._allow_offset_gaps:
            raise LogError("only a log opened with allow_offset_gaps can have segments cleaned")
        old = self._segments[position]
        end = self._segments[position + 1].base_offset
        cleaned = old.log_path.with_name(old.log_path.name + _CLEANED_SUFFIX)
        with storage_io("writing the cleaned segment", cleaned):
            fd = os.open(cleaned, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                expected = base_offset
                for batch in batches:
                    header = validate_batch(batch)
                    if header.base_offset < expected or header.next_offset > end:
                        raise LogError(
                            f"a cleaned batch at {header.base_offset}..{header.last_offset} is out of order or"
                            f" outside the segment's offsets [{base_offset}, {end})"
                        )
                    expected = header.next_offset
                    write_fully(fd, batch, path=cleaned)
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                cleaned.unlink(missing_ok=True)
                raise
            os.close(fd)
            os.replace(cleaned, old.log_path)
        fsync_dir(self.directory)
        old.close()
        segment = _Segment(self.directory, base_offset)
        scan = _scan_segment(segment, next_offset=base_offset, last_epoch=-1, verify_crc=False,
                             index_interval_bytes=self._index_interval_bytes, allow_offset_gaps=True)
        segment.next_offset = end
        segment.bytes_since_index_entry = scan.bytes_since_index_entry
        segment.max_timestamp_ms = scan.max_timestamp_ms
        segment.open_index(scan.index_entries)
        segment.seal()
        self._segments[position] = segment

    def _segment_at(self, base_offset: int) -> _Segment:
        for segment in self._segments:
            if segment.base_offset == base_offset:
                return segment
        raise LogError(f"no segment starts at offset {base_offset}")

    # ---- durability and lifetime --------------------------------------------------------------

    def flush(self) -> None:
        """fsync the active segment's data (older segments were synced when they rolled).

        The offset index is not synced here: it is derived data that recovery rebuilds from the
        batch headers whenever it does not match them, so only the batches need to be durable.
        Nothing is synced when nothing was written since the last flush.
        """
        self._segments[-1].flush()
        self._flushed_offset = self.log_end_offset

    def begin_flush(self) -> PendingFlush:
        """The first step of a flush whose fsync runs elsewhere (see the module docstring)."""
        active = self._segments[-1]
        fd = -1
        if active.unflushed:
            with storage_io("fsyncing", active.log_path):
                fd = os.dup(active.fd)
        return PendingFlush(self.log_end_offset, active, fd, active.appends, self._truncations)

    def complete_flush(self, pending: PendingFlush) -> None:
        """Record a synced `PendingFlush`: durable below its end, unless truncated since."""
        if pending._fd >= 0:
            raise InvariantViolation("complete_flush before the pending flush was synced")
        if pending._truncations != self._truncations:
            return
        self._flushed_offset = max(self._flushed_offset, min(pending.end_offset, self.log_end_offset))
        segment = pending._segment
        if segment is self._segments[-1] and segment.appends == pending._appends:
            segment.unflushed = False

    def close(self) -> None:
        for segment in self._segments:
            segment.close()

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _whole_batches(data: bytes) -> list[BatchHeader]:
    try:
        return whole_batches(data)
    except ValueError as e:
        raise LogError(f"cannot append: {e}") from None
