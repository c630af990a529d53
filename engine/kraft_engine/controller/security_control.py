"""ACLs, SCRAM credentials and delegation tokens as the controller holds them.

The controller does not serve the admin APIs that create these yet (CreateAcls,
AlterUserScramCredentials, CreateDelegationToken are out of scope), but a metadata log written
by Apache Kafka may contain their records, and a controller that cannot replay every record of
its log must stop. So each kind lives in revertible state with Kafka's replay checks (a removal
must name something that exists), ready for the generating side to be added on top.
"""

from __future__ import annotations

import uuid

from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap
from kraft_engine.records import (
    AccessControlEntryRecord,
    DelegationTokenRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)

__all__ = ["AclControlManager", "DelegationTokenControlManager", "ScramControlManager"]

# Kafka's ScramMechanism ids (0 is UNKNOWN and never stored).
_SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


class AclControlManager:
    def __init__(self, registry: SnapshotRegistry) -> None:
        self._acls: TimelineHashMap[uuid.UUID, AccessControlEntryRecord] = TimelineHashMap(registry)

    def acls(self, epoch: int | None = None) -> dict[uuid.UUID, AccessControlEntryRecord]:
        return self._acls.snapshot(epoch)

    def replay(self, record: AccessControlEntryRecord, offset: int) -> None:
        self._acls.put(record.id, record)

    def replay_remove(self, record: RemoveAccessControlEntryRecord, offset: int) -> None:
        if self._acls.remove(record.id) is None:
            raise RuntimeError(f"Unable to replay {record} at offset {offset}: no acl with that ID found.")


class ScramControlManager:
    def __init__(self, registry: SnapshotRegistry) -> None:
        self._credentials: TimelineHashMap[tuple[str, int], UserScramCredentialRecord] = TimelineHashMap(registry)

    def credentials(self, epoch: int | None = None) -> dict[tuple[str, int], UserScramCredentialRecord]:
        """(user, mechanism id) -> credential."""
        return self._credentials.snapshot(epoch)

    def replay(self, record: UserScramCredentialRecord, offset: int) -> None:
        if int(record.mechanism) not in _SCRAM_MECHANISMS:
            raise RuntimeError(f"Unknown SCRAM mechanism {record.mechanism} at offset {offset}")
        self._credentials.put((record.name, int(record.mechanism)), record)

    def replay_remove(self, record: RemoveUserScramCredentialRecord, offset: int) -> None:
        if self._credentials.remove((record.name, int(record.mechanism))) is None:
            raise RuntimeError(f"Unable to find credential to delete: {record.name} "
                               f"{_SCRAM_MECHANISMS.get(int(record.mechanism), record.mechanism)} at offset {offset}")


class DelegationTokenControlManager:
    def __init__(self, registry: SnapshotRegistry) -> None:
        self._tokens: TimelineHashMap[str, DelegationTokenRecord] = TimelineHashMap(registry)

    def tokens(self, epoch: int | None = None) -> dict[str, DelegationTokenRecord]:
        return self._tokens.snapshot(epoch)

    def replay(self, record: DelegationTokenRecord, offset: int) -> None:
        self._tokens.put(record.token_id, record)

    def replay_remove(self, record: RemoveDelegationTokenRecord, offset: int) -> None:
        # Kafka removes without checking: an expired token may already be gone.
        self._tokens.remove(record.token_id)
