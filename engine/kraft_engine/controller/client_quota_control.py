"""Client quotas (user / client-id / ip entities) as the controller holds them: the replay side of
Kafka's ClientQuotaControlManager.

AlterClientQuotas is not served yet, but a log written by Apache Kafka may hold ClientQuotaRecords
and every record in the log must replay, with Kafka's checks on the entity (one of each type,
known types only), so that state stays identical on every controller.
"""

from __future__ import annotations

from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap
from kraft_engine.records import ClientQuotaRecord

__all__ = ["ClientQuotaControlManager"]

_ENTITY_TYPES = frozenset({"user", "client-id", "ip"})

Entity = tuple[tuple[str, str | None], ...]
"""Sorted (entity type, name) pairs; a None name is the default entity of that type."""


class ClientQuotaControlManager:
    def __init__(self, registry: SnapshotRegistry) -> None:
        self._quotas: TimelineHashMap[tuple[Entity, str], float] = TimelineHashMap(registry)

    def quotas(self, epoch: int | None = None) -> dict[Entity, dict[str, float]]:
        result: dict[Entity, dict[str, float]] = {}
        for (entity, key), value in self._quotas.items(epoch):
            result.setdefault(entity, {})[key] = value
        return result

    def replay(self, record: ClientQuotaRecord, offset: int) -> None:
        types = [e.entity_type for e in record.entity]
        if not types or len(set(types)) != len(types) or not set(types) <= _ENTITY_TYPES:
            raise RuntimeError(f"Invalid client quota entity {list(record.entity)} at offset {offset}")
        entity: Entity = tuple(sorted((e.entity_type, e.entity_name) for e in record.entity))
        if record.remove:
            self._quotas.remove((entity, record.key))
        else:
            self._quotas.put((entity, record.key), float(record.value))
