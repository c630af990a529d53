"""The layout of a snapshot, separate from the node, so that its bytes can be built off raft's loop.

Building a snapshot of a 100k-partition image means laying out ~115k records in record batches:
seconds of Python. The node decides everything that needs its state (the snapshot id, and the
kraft.version and voter set as of its last offset) in `RaftNode.snapshot_builder`; the builder then
holds only immutable data, and `build` is a pure function of it and the state machine's records,
safe to run on any thread. The node takes the bytes back in `RaftNode.store_snapshot`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.static.primitive import i16, i64

from kraft_engine.records.control import build_control_batch
from kraft_engine.records.log_batch import OffsetAndEpoch, build_data_batch

__all__ = ["SnapshotBuilder"]


@dataclass(frozen=True, slots=True)
class SnapshotBuilder:
    """Kafka's snapshot layout: header control batch, the control batches of `control_records`
    (kraft.version, voters; one record each), the state machine's records in data batches of at
    most half `max_batch_size_bytes`, footer control batch."""

    snapshot_id: OffsetAndEpoch
    control_records: tuple[Any, ...]
    max_batch_size_bytes: int

    def build(self, *, records: list[bytes], last_contained_log_timestamp_ms: int, now_ms: int,
              between_batches: Callable[[], None] | None = None) -> bytes:
        """The snapshot's bytes; `between_batches` (if any) is called after each data batch is laid
        out, so that a caller on another thread can let raft's loop run between batches."""
        epoch = self.snapshot_id.epoch
        chunks: list[bytes] = []
        offset = 0

        def control(entities: list[Any]) -> None:
            nonlocal offset
            chunks.append(build_control_batch(base_offset=offset, partition_leader_epoch=epoch, timestamp_ms=now_ms,
                                              records=entities))
            offset += len(entities)

        control([SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(last_contained_log_timestamp_ms))])
        for record in self.control_records:
            control([record])
        group: list[bytes] = []
        size = 0
        for value in records:
            if group and size + len(value) > self.max_batch_size_bytes // 2:
                chunks.append(build_data_batch(group, base_offset=offset, epoch=epoch, timestamp_ms=now_ms))
                offset += len(group)
                group, size = [], 0
                if between_batches is not None:
                    between_batches()
            group.append(value)
            size += len(value) + 32
        if group:
            chunks.append(build_data_batch(group, base_offset=offset, epoch=epoch, timestamp_ms=now_ms))
            offset += len(group)
        control([SnapshotFooterRecord(version=i16(0))])
        return b"".join(chunks)
