"""The quorum controller's metrics as plain data, named like Kafka's kafka.controller MBeans.

The pure controller cannot own a metrics registry (that is I/O and global state), so it hands
the shell one immutable snapshot per scrape and the shell exports it (prometheus-client).
EventQueueTimeMs and EventQueueProcessingTimeMs are the shell's to measure: only it sees the
queue and the wall clock.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ControllerMetrics"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerMetrics:
    active_controller_count: int
    """1 on the active controller, 0 elsewhere."""
    new_active_controllers_count: int
    """How many times this node has become the active controller."""
    fenced_broker_count: int
    active_broker_count: int
    """Registered brokers that are not fenced."""
    global_topic_count: int
    global_partition_count: int
    offline_partitions_count: int
    """Partitions without a leader."""
    preferred_replica_imbalance_count: int
    """Partitions whose leader is not their first replica."""
    metadata_error_count: int
    """Records this controller failed to apply."""
    last_applied_record_offset: int
    last_committed_record_offset: int
    last_applied_record_timestamp_ms: int
    last_applied_record_lag_ms: int
    """Now minus the append time of the last applied batch."""
