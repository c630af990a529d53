"""The metadata.version levels at which the controller's behaviour changes.

These are Kafka's MetadataVersion feature levels (see shared reference metadata-versions.md).
The controller needs only these few thresholds; the full table of releases lives with the
records. Levels are compared as plain ints so the pure controller stays independent of how
that table is represented.
"""

from __future__ import annotations

__all__ = [
    "MV_3_6_IV0",
    "MV_3_6_IV1",
    "MV_3_7_IV0",
    "MV_3_7_IV2",
    "is_controller_registration_supported",
    "is_directory_assignment_supported",
    "is_leader_epoch_bump_required_on_isr_shrink",
    "is_metadata_transaction_supported",
]

MV_3_6_IV0 = 12
"""Brokers no longer need a leader epoch bump on ISR shrink (KAFKA-15021)."""
MV_3_6_IV1 = 13
"""Metadata transactions (KIP-868): Begin/End/AbortTransactionRecord."""
MV_3_7_IV0 = 15
"""Controller registration (KIP-919): RegisterControllerRecord."""
MV_3_7_IV2 = 17
"""JBOD directory assignment: replica directories in partition records, log dirs in registrations."""


def is_metadata_transaction_supported(level: int) -> bool:
    return level >= MV_3_6_IV1


def is_controller_registration_supported(level: int) -> bool:
    return level >= MV_3_7_IV0


def is_directory_assignment_supported(level: int) -> bool:
    return level >= MV_3_7_IV2


def is_leader_epoch_bump_required_on_isr_shrink(level: int) -> bool:
    return level < MV_3_6_IV0
