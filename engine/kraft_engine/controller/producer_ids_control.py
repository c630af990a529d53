"""Producer id blocks for idempotent and transactional producers: Kafka's ProducerIdsControlManager.

Brokers hand out producer ids from blocks the controller allocates (AllocateProducerIds). The
next free id must survive failover and never go backwards, so each allocation is a
ProducerIdsRecord in the metadata log and replay refuses one that does not move forward: two
producers with the same id would corrupt each other's sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kraft_engine.controller.cluster_control import ClusterControlManager
from kraft_engine.controller.results import ControllerApiError, ControllerResult, RecordAndVersion
from kraft_engine.controller.timeline import SnapshotRegistry, TimelineValue
from kraft_engine.records import ProducerIdsRecord

__all__ = ["PRODUCER_ID_BLOCK_SIZE", "ProducerIdsBlock", "ProducerIdsControlManager"]

PRODUCER_ID_BLOCK_SIZE = 1000
"""Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE."""

_LONG_MAX = 9223372036854775807


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


class ProducerIdsControlManager:
    def __init__(self, registry: SnapshotRegistry, *, cluster_control: ClusterControlManager) -> None:
        self._cluster = cluster_control
        # The block the next allocation starts at (Kafka's nextProducerBlock).
        self._next_block: TimelineValue[ProducerIdsBlock] = TimelineValue(registry, ProducerIdsBlock(-1, 0, 0))
        self._broker_epoch: TimelineValue[int] = TimelineValue(registry, -1)

    def next_producer_id(self, epoch: int | None = None) -> int:
        return self._next_block.get(epoch).first_producer_id

    def generate_next_producer_id(self, broker_id: int, broker_epoch: int) -> ControllerResult[ProducerIdsBlock]:
        self._cluster.check_broker_epoch(broker_id, broker_epoch)
        first = self._next_block.get().first_producer_id
        if first > _LONG_MAX - PRODUCER_ID_BLOCK_SIZE:
            raise ControllerApiError(
                ErrorCode.unknown_server_error,
                "Exhausted all producerIds as the next block's end producerId has exceeded the int64 type limit",
            )
        block = ProducerIdsBlock(broker_id, first, PRODUCER_ID_BLOCK_SIZE)
        record = ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                   next_producer_id=block.next_block_first_id)
        return ControllerResult([RecordAndVersion(record, 0)], block)

    def replay(self, record: ProducerIdsRecord, offset: int) -> None:
        current = self._next_block.get().first_producer_id
        if int(record.next_producer_id) <= current:
            raise RuntimeError(
                f"Next Producer ID from replayed record ({record.next_producer_id}) is not greater than current "
                f"next Producer ID ({current})"
            )
        self._next_block.set(ProducerIdsBlock(int(record.broker_id), int(record.next_producer_id),
                                               PRODUCER_ID_BLOCK_SIZE))
        self._broker_epoch.set(int(record.broker_epoch))
