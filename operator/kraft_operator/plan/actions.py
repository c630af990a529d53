"""What a plan asks a runtime to do, and what it tells the world (events).

Actions are data, each naming one node and carrying everything the runtime needs, plus `reason`:
the sentence the operator logs and turns into a Kubernetes Event. A runtime performs them in the
order given and stops at the first failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kraft_operator.model import Implementation, Role
from kraft_operator.plan.facts import NodeRef

__all__ = [
    "Action",
    "AddVoter",
    "AlterReplicaLogDirs",
    "ClearReassignmentThrottles",
    "Event",
    "EventType",
    "FinalizeMetadataVersion",
    "FormatStorage",
    "LogDirMove",
    "PlannedAction",
    "PartitionMove",
    "QuorumBootstrap",
    "ReassignPartitions",
    "RemoveVoter",
    "ReplaceVolume",
    "ResizeVolume",
    "RestartNode",
    "SetReassignmentThrottles",
    "StartNode",
    "StopNode",
    "UnregisterBroker",
    "WriteConfig",
]


@dataclass(frozen=True, slots=True)
class WriteConfig:
    """Store the node's rendered server.properties (a ConfigMap, or a file on the local runtime)."""

    node: NodeRef
    implementation: Implementation
    roles: frozenset[Role]
    properties: tuple[tuple[str, str], ...]
    reason: str

    def as_dict(self) -> dict[str, str]:
        return dict(self.properties)


class QuorumBootstrap(StrEnum):
    """How `kraft storage format` sets a node up in the KIP-853 quorum."""

    INITIAL = "initial"  # --initial-controllers: one of the controllers the cluster starts with
    JOIN = "join"  # --no-initial-controllers: a controller that joins the quorum later
    NONE = "none"  # a broker: no quorum flag


@dataclass(frozen=True, slots=True)
class FormatStorage:
    """Run `kraft storage format` (a Job on Kubernetes, a process locally) with the node's config.

    Never sent for a node whose volumes are all formatted; `ignore_formatted` (-g) is set when some
    are, so the formatted ones are skipped, never rewritten."""

    node: NodeRef
    implementation: Implementation
    cluster_id: str
    directories: tuple[str, ...]
    bootstrap: QuorumBootstrap
    initial_controllers: str | None
    release_version: str
    ignore_formatted: bool
    reason: str
    feature_levels: tuple[tuple[str, int], ...] = ()
    """`--feature name=level` overrides: levels every node of the cluster supports."""

    def format_arguments(self, *, config_path: str) -> list[str]:
        """The `kraft storage format` arguments (Kafka's StorageTool takes the same)."""
        args = ["format", "--config", config_path, "--cluster-id", self.cluster_id,
                "--release-version", self.release_version]
        for name, level in self.feature_levels:
            args += ["--feature", f"{name}={level}"]
        if self.bootstrap is QuorumBootstrap.INITIAL and self.initial_controllers is not None:
            args += ["--initial-controllers", self.initial_controllers]
        elif self.bootstrap is QuorumBootstrap.JOIN:
            args.append("--no-initial-controllers")
        if self.ignore_formatted:
            args.append("--ignore-formatted")
        return args


@dataclass(frozen=True, slots=True)
class StartNode:
    """Run the node (create its Pod, or start its process) from its stored config."""

    node: NodeRef
    implementation: Implementation
    roles: frozenset[Role]
    reason: str
    revision: str = ""  # recorded with the pod/process: what `NodeFacts.started_revision` reports


@dataclass(frozen=True, slots=True)
class RestartNode:
    """Restart a running node (one step of a roll): its controlled shutdown (SIGTERM, killed after
    `grace_period_ms`), then start it again from its stored config, recording `revision`. The next
    observe shows it starting; the roll waits until the cluster says it has recovered."""

    node: NodeRef
    implementation: Implementation
    roles: frozenset[Role]
    revision: str
    grace_period_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class ResizeVolume:
    """Grow one volume of a node to `size` (patch its PVC's request; the storage driver expands it,
    online or at the pod's next start). Never sent to shrink: the CRD and validation refuse that."""

    node: NodeRef
    implementation: Implementation
    volume_id: int
    size: str
    reason: str


@dataclass(frozen=True, slots=True)
class AddVoter:
    """AddRaftVoter (KIP-853) for a controller that caught up as an observer: sent by the reconciler
    through the admin client to the active controller, not by the runtime."""

    node: NodeRef
    directory_id: str
    endpoints: tuple[tuple[str, str, int], ...]  # (listener, host, port)
    reason: str


@dataclass(frozen=True, slots=True)
class RemoveVoter:
    """RemoveRaftVoter (KIP-853) for a controller the spec no longer has, sent by the reconciler to
    the active controller. A leader that removes itself keeps leading until the removal commits,
    then resigns (Kafka's behaviour, and the engine's)."""

    node: NodeRef
    directory_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class StopNode:
    """Stop a node the spec no longer has, for good: its controlled shutdown (SIGTERM, killed after
    `grace_period_ms`) and no restart; the pod (or process) is gone. Its volumes are kept, except
    those in `delete_volumes`: the volumes whose spec says `deleteClaim: true` (the user's standing
    decision; the operator never deletes a volume on its own judgement)."""

    node: NodeRef
    implementation: Implementation
    grace_period_ms: int
    reason: str
    delete_volumes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplaceVolume:
    """Replace one failed volume of a broker (one log directory of a JBOD node): its controlled
    shutdown (SIGTERM, killed after `grace_period_ms`), then a new, empty volume in the old one's
    place (a new PVC; locally a new directory, the old one kept aside under another name). The
    broker stays stopped: the planner formats the new directory (`--ignore-formatted`, a new
    directory id, as Kafka does for an empty log directory) and starts it. Sent only with the
    broker-disk-loss runbook's approval."""

    node: NodeRef
    implementation: Implementation
    volume_id: int
    path: str
    lost_directory_id: str
    grace_period_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """One partition's target replicas in a reassignment."""

    topic: str
    partition: int
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LogDirMove:
    """One replica's destination directory on its broker (AlterReplicaLogDirs)."""

    topic: str
    partition: int
    log_dir: str
    size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class AlterReplicaLogDirs:
    """AlterReplicaLogDirs to `node` (a broker) moving its replicas between its own log
    directories, sent by the reconciler to that broker; naming the same destination again is
    harmless (the move goes on)."""

    node: NodeRef
    moves: tuple[LogDirMove, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class ReassignPartitions:
    """AlterPartitionReassignments for a broker being drained (or a rebalance), sent by the reconciler to the active
    controller. Sending the same targets again is harmless (an operator that died after sending)."""

    node: NodeRef  # the broker being drained (a rebalance: the first broker it fills)
    moves: tuple[PartitionMove, ...]
    reason: str
    drain: bool = True  # False: a rebalance onto brokers that joined (`node` stays a replica)


@dataclass(frozen=True, slots=True)
class SetReassignmentThrottles:
    """IncrementalAlterConfigs before (or with) a reassignment, as Kafka's reassign tool's
    `--throttle`: each topic's `leader/follower.replication.throttled.replicas` (`topics`: topic,
    leader-side list, follower-side list) and both throttled rates on every broker involved. Sent by
    the reconciler to the active controller; sending it again is harmless."""

    rate_bytes_per_second: int
    brokers: tuple[int, ...]
    topics: tuple[tuple[str, str, str], ...]
    reason: str


@dataclass(frozen=True, slots=True)
class ClearReassignmentThrottles:
    """IncrementalAlterConfigs deleting what `SetReassignmentThrottles` set, once the reassignment
    finished (Kafka's `--verify` does it); deleting keys already gone is harmless."""

    brokers: tuple[int, ...]
    topics: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class UnregisterBroker:
    """UnregisterBroker for a drained broker whose process is gone, sent by the reconciler to the
    active controller, so the cluster stops listing it (and it no longer holds a metadata.version
    bump back)."""

    node: NodeRef
    reason: str


@dataclass(frozen=True, slots=True)
class FinalizeMetadataVersion:
    """UpdateFeatures for metadata.version only (an upgrade, or a safe downgrade), sent by the
    reconciler to the active controller."""

    level: int
    version: str
    downgrade: bool
    reason: str


# What a runtime performs; `PlannedAction` adds what the reconciler sends through the admin client.
Action = WriteConfig | FormatStorage | StartNode | RestartNode | ResizeVolume | StopNode | ReplaceVolume
PlannedAction = (Action | AddVoter | RemoveVoter | ReassignPartitions | UnregisterBroker | AlterReplicaLogDirs
                 | FinalizeMetadataVersion | SetReassignmentThrottles | ClearReassignmentThrottles)


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event's type, reason and message (also what `kraftwerk up` prints)."""

    type: EventType
    reason: str
    message: str
