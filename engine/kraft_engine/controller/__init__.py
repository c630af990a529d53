"""The quorum controller: a single-threaded event loop over timeline state and the control
managers that generate records and, separately, replay them. Pure."""

from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap, TimelineHashSet, TimelineValue

__all__ = ["SnapshotRegistry", "TimelineHashMap", "TimelineHashSet", "TimelineValue"]
