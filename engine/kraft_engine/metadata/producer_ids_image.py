"""The producer-ids sub-image: the first producer id of the next block the controller will hand out.

Only the controller's ProducerIdControlManager checks that blocks move forward (it generates the
records); the image takes what the log says, as in Kafka, because a snapshot loaded after a log
truncation may legitimately carry a lower value than the image it replaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kraft_engine.metadata.image_writer import ImageWriter, ImageWriterOptions
from kraft_engine.records.metadata_records import ProducerIdsRecord

__all__ = ["ProducerIdsDelta", "ProducerIdsImage"]


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    """`next_producer_id` is -1 until the first block is allocated."""

    EMPTY: ClassVar[ProducerIdsImage]

    next_producer_id: int

    def is_empty(self) -> bool:
        return self.next_producer_id < 0

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        if self.next_producer_id >= 0:
            # The allocating broker is not part of the image; Kafka writes -1/-1 here too.
            writer.write(ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=self.next_producer_id), 0)


ProducerIdsImage.EMPTY = ProducerIdsImage(-1)


class ProducerIdsDelta:
    def __init__(self, image: ProducerIdsImage) -> None:
        self.image = image
        self.next_producer_id = image.next_producer_id
        self._replayed = False

    def replay_producer_ids(self, record: ProducerIdsRecord) -> None:
        self.next_producer_id = int(record.next_producer_id)
        self._replayed = True

    def finish_snapshot(self) -> None:
        if not self._replayed:
            self.next_producer_id = -1

    def apply(self) -> ProducerIdsImage:
        if self.next_producer_id == self.image.next_producer_id:
            return self.image
        return ProducerIdsImage(self.next_producer_id)
