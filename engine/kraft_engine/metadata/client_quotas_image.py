"""The client-quotas sub-image: quota values per client entity (user, client-id, ip, or a combination).

An entity is the set of (entity type, name) pairs of a ClientQuotaRecord, a None name being the
default entity of that type. Like configs, an entity whose last quota was removed disappears.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from kraft_engine.metadata._maps import EMPTY_MAP, applied, frozen_map, thawed
from kraft_engine.metadata.errors import MetadataReplayError
from kraft_engine.metadata.image_writer import ImageWriter, ImageWriterOptions
from kraft_engine.records.metadata_records import ClientQuotaRecord, EntityData

__all__ = ["ClientQuotaEntity", "ClientQuotasDelta", "ClientQuotasImage"]

# ((entity type, entity name or None), ...) sorted by entity type; types are unique in an entity.
ClientQuotaEntity = tuple[tuple[str, str | None], ...]


def _entity(record: ClientQuotaRecord) -> ClientQuotaEntity:
    pairs = {data.entity_type: data.entity_name for data in record.entity}
    if len(pairs) != len(record.entity):
        raise MetadataReplayError(f"ClientQuotaRecord names an entity type twice: {record.entity!r}")
    return tuple(sorted(pairs.items(), key=lambda pair: pair[0]))


@dataclass(frozen=True, slots=True)
class ClientQuotasImage:
    EMPTY: ClassVar[ClientQuotasImage]

    entities: Mapping[ClientQuotaEntity, Mapping[str, float]]

    def is_empty(self) -> bool:
        return not self.entities

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        # Sort entities by their text so that None (a default entity) orders deterministically.
        for entity in sorted(self.entities, key=repr):
            quotas = self.entities[entity]
            data = tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity)
            for key in sorted(quotas):
                writer.write(ClientQuotaRecord(entity=data, key=key, value=quotas[key], remove=False), 0)


ClientQuotasImage.EMPTY = ClientQuotasImage(EMPTY_MAP)


class ClientQuotasDelta:
    def __init__(self, image: ClientQuotasImage) -> None:
        self.image = image
        self.changes: dict[ClientQuotaEntity, dict[str, float | None]] = {}

    def replay_client_quota(self, record: ClientQuotaRecord) -> None:
        changes = self.changes.setdefault(_entity(record), {})
        changes[record.key] = None if record.remove else float(record.value)

    def finish_snapshot(self) -> None:
        for entity, quotas in self.image.entities.items():
            changes = self.changes.setdefault(entity, {})
            for key in quotas:
                changes.setdefault(key, None)

    def apply(self) -> ClientQuotasImage:
        if not self.changes:
            return self.image
        entities = thawed(self.image.entities)
        for entity, changes in self.changes.items():
            quotas = applied(self.image.entities.get(entity, EMPTY_MAP), changes)
            if quotas:
                entities[entity] = quotas
            else:
                entities.pop(entity, None)
        return ClientQuotasImage(frozen_map(entities))
