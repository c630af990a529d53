"""What a controller checks in its metadata log directory before it serves, and the one line it
prints when it must not start.

The operator's disaster-recovery runbooks start from what a damaged node says. So every refusal
here is one `StartupError` line that names the file, says what is wrong and gives the recovery
that works; `kraft server start` prints it as `Error: ...` and exits 1, never with a traceback.

The recovery for a metadata log that cannot be trusted any more (lost, its bootstrap checkpoint
gone, a damaged snapshot the log no longer covers, an unreadable `quorum-state`) is always the
same, and it is the operator's controller disk replacement: give the directory a new identity
and swap it into the voter set. A voter that lost its log or its `quorum-state` has forgotten
whom it voted for in its epoch; if it voted again under the same (node id, directory id) it
could elect two leaders in one epoch. With a new directory id it is a new replica that has
voted for no one, and the old one is removed from the voter set by a committed change, so no
forgotten promise can be broken. Kafka instead starts such a node with an empty log and rejoins
silently, forgetting its votes; `docs/storage-faults.md` explains why we refuse.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from kraft_engine.errors import ServerError, SnapshotError
from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.storage.formatter import BOOTSTRAP_SNAPSHOT_ID, BOOTSTRAP_SNAPSHOT_NAME
from kraft_engine.storage.metadata_log import FileMetadataLog, holds_metadata_log
from kraft_engine.storage.snapshots import SnapshotId, SnapshotReader, list_snapshots

__all__ = [
    "LostLogRecovery",
    "StartupError",
    "check_metadata_log_present",
    "check_snapshots",
]


class StartupError(ServerError):
    """The node must not start; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class LostLogRecovery:
    """Who this node is, to print the replacement steps with the real ids."""

    node_id: int
    cluster_id: str
    directory_id: uuid.UUID | None
    config_path: str | None
    dynamic_quorum: bool

    def steps(self) -> str:
        config = self.config_path or "<server.properties>"
        if not self.dynamic_quorum:
            return (
                "This quorum is static (controller.quorum.voters): it cannot swap a voter's directory. "
                "Restore the directory from a backup, or move the quorum to kraft.version 1 (KIP-853) first."
            )
        old = "<old directory id>" if self.directory_id is None else to_kafka_str(self.directory_id)
        return (
            "To bring it back as a new replica: "
            f"(1) kraft storage format --config {config} --cluster-id {self.cluster_id} "
            "--no-initial-controllers --ignore-formatted (this gives the directory a new directory.id); "
            f"(2) kraft server start --config {config} (it joins as an observer and catches up); "
            "(3) kraft metadata-quorum --bootstrap-controller <live-controller-host:port> remove-controller "
            f"--controller-id {self.node_id} --controller-directory-id {old}; "
            "(4) kraft metadata-quorum --bootstrap-controller <live-controller-host:port> "
            f"--command-config {config} add-controller."
        )


def check_metadata_log_present(*, metadata_dir: Path, partition_dir: Path, recovery: LostLogRecovery) -> None:
    """A formatted metadata directory whose log is gone is a lost log: refuse (module docstring)."""
    if holds_metadata_log(partition_dir):
        return
    raise StartupError(
        f"The metadata log of node {recovery.node_id} is missing: {partition_dir} "
        f"{'holds no log segment and no snapshot' if partition_dir.is_dir() else 'does not exist'}, but "
        f"{metadata_dir / 'meta.properties'} survived. A voter that lost its log has forgotten its votes and must "
        f"not vote again, so this node does not start. {recovery.steps()}"
    )


def check_snapshots(log: FileMetadataLog, *, recovery: LostLogRecovery) -> None:
    """The bootstrap checkpoint (or a later snapshot) exists, and the snapshots a start reads are whole."""
    directory = log.directory
    snapshots = list_snapshots(directory)
    if not snapshots:
        raise StartupError(
            f"The bootstrap checkpoint {directory / BOOTSTRAP_SNAPSHOT_NAME} is missing and {directory} holds no "
            "later snapshot, so this node cannot know its initial metadata.version. Restore the file from a backup "
            f"(every controller formatted together has the same one), or replace the directory. {recovery.steps()}"
        )
    # A start reads the bootstrap checkpoint (the initial metadata.version) and the latest snapshot.
    wanted = [s for s in snapshots if s == BOOTSTRAP_SNAPSHOT_ID]
    if snapshots[-1] not in wanted:
        wanted.append(snapshots[-1])
    for snapshot_id in wanted:
        reason = _damage(directory, snapshot_id)
        if reason is None:
            continue
        path = directory / _name(snapshot_id)
        older = [s for s in snapshots if s.end_offset < snapshot_id.end_offset and _damage(directory, s) is None]
        # Deleting it is safe only when the log can rebuild what it held: an older whole snapshot
        # the log starts at or before, and a log that reaches the damaged snapshot's end (else the
        # node would forget offsets it may have acknowledged to the leader).
        covered = (
            snapshot_id != BOOTSTRAP_SNAPSHOT_ID
            and any(s.end_offset >= log.log_start_offset for s in older)
            and log.end_offset().offset >= snapshot_id.end_offset
        )
        if covered:
            raise StartupError(
                f"The snapshot {path} is damaged ({reason}). The log still holds every record it covers (from offset "
                f"{log.log_start_offset}, after snapshot {_name(older[-1])}): delete {path.name} and start the node "
                "again; it loads the older snapshot and replays the log."
            )
        raise StartupError(
            f"The snapshot {path} is damaged ({reason}) and the log no longer holds the records it covers, so this "
            f"node cannot rebuild its state. Replace the directory. {recovery.steps()}"
        )


def _name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}.checkpoint"


def _damage(directory: Path, snapshot_id: SnapshotId) -> str | None:
    try:
        with SnapshotReader(directory, snapshot_id) as reader:
            for _ in reader.batches():
                pass
    except SnapshotError as e:
        # The reader's messages start with the path, which the caller names already.
        return str(e).removeprefix(f"{directory / _name(snapshot_id)}: ")
    except OSError as e:
        return f"cannot read it: {e.strerror or e}"
    return None
