"""Where in the metadata log an image ends, so that snapshots and publishers know what they hold.

`is_offset_batch_aligned` matters to the snapshot generator: a snapshot may only be cut where the
image ends exactly on a raft batch boundary, and a delta flushed mid-batch (a metadata transaction
began part-way through a batch) is not aligned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["MetadataProvenance"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataProvenance:
    EMPTY: ClassVar[MetadataProvenance]

    last_contained_offset: int
    last_contained_epoch: int
    last_contained_log_time_ms: int
    is_offset_batch_aligned: bool

    @property
    def snapshot_id(self) -> tuple[int, int]:
        """(end offset, epoch): the id of a snapshot holding exactly this image, as Kafka names it."""
        return self.last_contained_offset + 1, self.last_contained_epoch


MetadataProvenance.EMPTY = MetadataProvenance(
    last_contained_offset=-1, last_contained_epoch=-1, last_contained_log_time_ms=-1, is_offset_batch_aligned=False
)
