"""Record batches as the raft core and the log store see them: the exact bytes plus a parsed view.

Building and decoding are the batch and control-record modules here (kio underneath). The core keeps
and forwards the original batch bytes (a decoded batch must never be re-encoded: kio's reader
truncates record timestamps); `LogBatch` only adds the fields consensus needs (offsets, epoch,
control records). It lives below both raft and storage, with `OffsetAndEpoch`, because the file
log (storage) builds these views for the raft core without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft_engine.records.batches import UnsupportedBatchError, build_batch, decode_records, validate_batch
from kraft_engine.records.control import ControlRecord, decode_control_batch

__all__ = ["LogBatch", "OffsetAndEpoch", "build_data_batch", "parse_batches"]


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """An (offset, epoch) pair; ordered by epoch first, then offset, like Kafka's OffsetAndEpoch.

    Used both for log end positions and for snapshot ids (a snapshot id's offset is exclusive:
    the snapshot holds offsets [0, offset)).
    """

    epoch: int
    offset: int

    def __str__(self) -> str:
        return f"(offset={self.offset}, epoch={self.epoch})"


@dataclass(frozen=True, slots=True)
class LogBatch:
    """A parsed view of one record batch, next to its exact bytes."""

    base_offset: int
    last_offset: int
    epoch: int
    is_control: bool
    # The batch's max timestamp: Kafka's Batch.appendTimestamp().
    append_timestamp_ms: int
    control_records: tuple[ControlRecord, ...]
    raw: bytes = field(repr=False)
    # The data records' values, decoded from `raw` on the first read of `records`.
    _values: tuple[bytes, ...] | None = field(default=None, repr=False, compare=False)

    @property
    def records(self) -> tuple[bytes, ...]:
        """Values of the data records (empty for a control batch).

        Decoded on first read, not by `parse_batches`: of the three parses a fetched batch went
        through on raft's loop (the Fetch response, the log append, the listener's read-back)
        only the listener's needs the records; the other two need offsets, epoch and control
        records. Decoding them all was a fifth of a follower's loop time in bench/quorum.py at
        64 writers. The batch's CRC was checked when it was parsed, so the bytes are the
        leader's own (Kafka's follower appends on the CRC check alone, too)."""
        values = self._values
        if values is None:
            values = () if self.is_control else tuple(
                r.value if r.value is not None else b"" for r in decode_records(self.raw)
            )
            object.__setattr__(self, "_values", values)  # a cache of what `raw` holds
        return values

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size_in_bytes(self) -> int:
        return len(self.raw)


def build_data_batch(values: list[bytes], *, base_offset: int, epoch: int, timestamp_ms: int) -> bytes:
    """One data batch holding `values` (the state machine's serialized records) from `base_offset`."""
    return build_batch(base_offset=base_offset, partition_leader_epoch=epoch, values=values, timestamp_ms=timestamp_ms)


def parse_batches(data: bytes | bytearray | memoryview) -> list[LogBatch]:
    """Parse concatenated whole batches; raises ValueError on a corrupt (CRC, framing) or partial
    batch, or a compressed one. Data records are decoded when `LogBatch.records` is first read."""
    batches: list[LogBatch] = []
    view = memoryview(data)
    position = 0
    while position < len(view):
        header = validate_batch(view, position)
        raw = bytes(view[position : position + header.size_bytes])
        controls: tuple[ControlRecord, ...] = ()
        if header.is_control:
            controls = tuple(decoded.record for decoded in decode_control_batch(raw))
        elif header.compression_codec != 0:
            # Refused here, as when the records were decoded here: only `records` would see it.
            raise UnsupportedBatchError(
                f"batch at offset {header.base_offset} uses compression codec {header.compression_codec}; "
                "only uncompressed batches are supported"
            )
        batches.append(
            LogBatch(
                base_offset=header.base_offset,
                last_offset=header.last_offset,
                epoch=header.partition_leader_epoch,
                is_control=header.is_control,
                append_timestamp_ms=header.max_timestamp,
                control_records=controls,
                raw=raw,
            )
        )
        position += header.size_bytes
    return batches
