"""Record batches as the raft core sees them: the exact bytes plus a parsed view.

Building and decoding are `kraft_engine.records` (kio underneath). The core keeps and forwards
the original batch bytes (a decoded batch must never be re-encoded: kio's reader truncates record
timestamps); `LogBatch` only adds the fields consensus needs (offsets, epoch, control records).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft_engine.records.batches import build_batch, decode_records, validate_batch
from kraft_engine.records.control import ControlRecord, build_control_batch, decode_control_batch

__all__ = ["ControlRecord", "LogBatch", "build_control_batch", "build_data_batch", "parse_batches"]


@dataclass(frozen=True, slots=True)
class LogBatch:
    """A parsed view of one record batch, next to its exact bytes."""

    base_offset: int
    last_offset: int
    epoch: int
    is_control: bool
    # The batch's max timestamp: Kafka's Batch.appendTimestamp().
    append_timestamp_ms: int
    # Values of the data records (empty for a control batch).
    records: tuple[bytes, ...]
    control_records: tuple[ControlRecord, ...]
    raw: bytes = field(repr=False)

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
    """Parse concatenated whole batches; raises ValueError on a corrupt or partial batch."""
    batches: list[LogBatch] = []
    view = memoryview(data)
    position = 0
    while position < len(view):
        header = validate_batch(view, position)
        raw = bytes(view[position : position + header.size_bytes])
        values: tuple[bytes, ...] = ()
        controls: tuple[ControlRecord, ...] = ()
        if header.is_control:
            controls = tuple(decoded.record for decoded in decode_control_batch(raw))
        else:
            values = tuple(r.value if r.value is not None else b"" for r in decode_records(raw))
        batches.append(
            LogBatch(
                base_offset=header.base_offset,
                last_offset=header.last_offset,
                epoch=header.partition_leader_epoch,
                is_control=header.is_control,
                append_timestamp_ms=header.max_timestamp,
                records=values,
                control_records=controls,
                raw=raw,
            )
        )
        position += header.size_bytes
    return batches
