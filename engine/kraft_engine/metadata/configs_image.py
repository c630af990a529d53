"""The configurations sub-image: dynamic config key/values per resource (topic, broker, ...).

A ConfigRecord with a null value deletes the key; a resource left with no keys disappears from the
image, so "never configured" and "configured then cleared" are the same state on every node.
Deleting a topic deletes its configs (the RemoveTopicRecord carries no config records of its own).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from kraft_engine.metadata._maps import EMPTY_MAP, applied, frozen_map, thawed
from kraft_engine.metadata.errors import MetadataReplayError
from kraft_engine.metadata.image_writer import ImageWriter, ImageWriterOptions
from kraft_engine.records.metadata_records import ConfigRecord

__all__ = ["ConfigResource", "ConfigResourceType", "ConfigurationsDelta", "ConfigurationsImage"]


class ConfigResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type ids, as ConfigRecord.ResourceType carries them."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigResource(NamedTuple):
    """A configurable resource. The broker-wide default resource has the empty name."""

    type: ConfigResourceType
    name: str


@dataclass(frozen=True, slots=True)
class ConfigurationsImage:
    """Config key/values by resource; never holds a resource with no keys."""

    EMPTY: ClassVar[ConfigurationsImage]

    data: Mapping[ConfigResource, Mapping[str, str]]

    def is_empty(self) -> bool:
        return not self.data

    def configs(self, resource: ConfigResource) -> Mapping[str, str]:
        return self.data.get(resource, EMPTY_MAP)

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        for resource in sorted(self.data):
            values = self.data[resource]
            for name in sorted(values):
                writer.write(
                    ConfigRecord(
                        resource_type=int(resource.type), resource_name=resource.name, name=name, value=values[name]
                    ),
                    0,
                )


ConfigurationsImage.EMPTY = ConfigurationsImage(EMPTY_MAP)


class ConfigurationsDelta:
    """Per-resource key changes; a change to `None` deletes the key."""

    def __init__(self, image: ConfigurationsImage) -> None:
        self.image = image
        self.changes: dict[ConfigResource, dict[str, str | None]] = {}

    def replay_config(self, record: ConfigRecord) -> None:
        try:
            resource_type = ConfigResourceType(record.resource_type)
        except ValueError:
            raise MetadataReplayError(
                f"ConfigRecord for {record.resource_name!r} has unknown resource type {record.resource_type}"
            ) from None
        resource = ConfigResource(resource_type, record.resource_name)
        self.changes.setdefault(resource, {})[record.name] = record.value

    def delete_all(self, resource: ConfigResource) -> None:
        changes = self.changes.setdefault(resource, {})
        for name in self.image.configs(resource):
            changes[name] = None
        for name in changes:
            changes[name] = None

    def finish_snapshot(self) -> None:
        for resource, values in self.image.data.items():
            changes = self.changes.setdefault(resource, {})
            for name in values:
                changes.setdefault(name, None)

    def apply(self) -> ConfigurationsImage:
        if not self.changes:
            return self.image
        data = thawed(self.image.data)
        for resource, changes in self.changes.items():
            values = applied(self.image.configs(resource), changes)
            if values:
                data[resource] = values
            else:
                data.pop(resource, None)
        return ConfigurationsImage(frozen_map(data))
