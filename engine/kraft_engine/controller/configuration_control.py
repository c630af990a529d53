"""Dynamic configs as the controller holds them: Kafka's ConfigurationControlManager (state and
replay; the IncrementalAlterConfigs/DescribeConfigs front ends are not implemented yet).

Topic creation writes ConfigRecords (min.insync.replicas, retention.*, ...), and the replication
manager reads them back, so the controller must replay them into revertible state like any
other record.
"""

from __future__ import annotations

from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap
from kraft_engine.records import ConfigRecord

__all__ = ["ConfigurationControlManager"]


class ConfigurationControlManager:
    def __init__(self, registry: SnapshotRegistry) -> None:
        # (resource type, resource name, config name) -> value
        self._configs: TimelineHashMap[tuple[int, str, str], str] = TimelineHashMap(registry)

    def replay(self, record: ConfigRecord, offset: int) -> None:
        key = (int(record.resource_type), record.resource_name, record.name)
        if record.value is None:
            self._configs.remove(key)
        else:
            self._configs.put(key, record.value)

    def configs(self, resource_type: int, resource_name: str, epoch: int | None = None) -> dict[str, str]:
        return {
            name: value
            for (rtype, rname, name), value in self._configs.items(epoch)
            if rtype == resource_type and rname == resource_name
        }
