"""The sparse `.index` file beside each log segment, in Kafka's format.

A read from offset N must not scan a whole segment from byte 0. Like Kafka's `OffsetIndex`, every
`index.interval.bytes` (4096) of appended batches we record one 8-byte entry: the big-endian
int32 offset relative to the segment's base offset, then the int32 byte position of the batch.
As in Kafka's `LogSegment.append`, the offset is the *last* offset of the batch starting at that
position, so the floor entry for any offset points at or before the batch that holds it.

Kafka preallocates the file (segment.index.bytes, 10 MiB) and trims it when the segment is
closed or rolled. We simply append entries, so the file is always exactly `8 * entries` bytes —
which Kafka reads fine (a trimmed index looks the same).

The index is derived data, and that is what keeps its fsync off the commit path. Recovery walks
every segment's batch headers on open and rewrites any index file that does not match them
exactly (entries missing, entries beyond the log end, garbage, a torn size), so nothing in the
file needs to survive a crash. `flush()` is therefore only called where Kafka makes an index
durable for its own tools: when the segment rolls and when it is closed. It syncs only when
something was written since the last sync.
"""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path

from kraft_engine.invariant import require
from kraft_engine.storage.storage_error import storage_io

__all__ = ["INDEX_ENTRY_SIZE", "OffsetIndex"]

INDEX_ENTRY_SIZE = 8
_ENTRY = struct.Struct(">ii")


class OffsetIndex:
    """In-memory entries (absolute offset, position) mirrored in an append-only file."""

    def __init__(self, path: Path, *, base_offset: int, entries: list[tuple[int, int]]) -> None:
        self.path = path
        self.base_offset = base_offset
        self._offsets = [o for o, _ in entries]
        self._positions = [p for _, p in entries]
        with storage_io("opening", path):
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._dirty = False
        with storage_io("writing", path):
            self._rewrite()

    @staticmethod
    def read_entries(path: Path, *, base_offset: int) -> list[tuple[int, int]] | None:
        """The file's entries, or None when the file is missing or its size is not whole entries."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) % INDEX_ENTRY_SIZE:
            return None
        return [(base_offset + rel, pos) for rel, pos in _ENTRY.iter_unpack(raw)]

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._offsets, self._positions, strict=True))

    def append(self, offset: int, position: int) -> None:
        require(
            not self._offsets or (offset > self._offsets[-1] and position > self._positions[-1]),
            f"index entries must increase: ({offset}, {position}) after {self.entries[-1:]}",
        )
        entry = _ENTRY.pack(offset - self.base_offset, position)
        with storage_io("writing", self.path):
            if os.pwrite(self._fd, entry, len(self._offsets) * INDEX_ENTRY_SIZE) != len(entry):
                raise OSError(f"short write of an {len(entry)}-byte index entry")
        self._offsets.append(offset)
        self._positions.append(position)
        self._dirty = True

    def lookup(self, offset: int) -> int:
        """Byte position of a batch at or before the one holding `offset` (0 when none is indexed)."""
        index = bisect.bisect_right(self._offsets, offset)
        return self._positions[index - 1] if index else 0

    def floor_position(self, position: int, *, offset_below: int | None) -> int:
        """The last indexed batch start at or before `position` whose batch's offsets are all
        below `offset_below` (any when None); 0 when no entry qualifies."""
        index = bisect.bisect_right(self._positions, position)
        if offset_below is not None:
            index = min(index, bisect.bisect_left(self._offsets, offset_below))
        return self._positions[index - 1] if index else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries for batches at or after `position` (the log was cut there)."""
        keep = bisect.bisect_left(self._positions, position)
        if keep < len(self._positions):
            del self._offsets[keep:]
            del self._positions[keep:]
            with storage_io("truncating", self.path):
                os.ftruncate(self._fd, keep * INDEX_ENTRY_SIZE)
            self._dirty = True

    def flush(self) -> None:
        """fsync the file if anything was written since the last flush."""
        if self._dirty:
            with storage_io("fsyncing", self.path):
                os.fsync(self._fd)
            self._dirty = False

    def close(self) -> None:
        """Flush (as Kafka does when it closes an index) and close the file."""
        if self._fd >= 0:
            try:
                self.flush()
            finally:
                os.close(self._fd)
                self._fd = -1

    def _rewrite(self) -> None:
        data = b"".join(_ENTRY.pack(o - self.base_offset, p) for o, p in self.entries)
        if os.pread(self._fd, len(data) + 1, 0) != data:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)
            self._dirty = True
