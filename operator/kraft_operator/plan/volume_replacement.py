"""Replacing a broker's lost log directory: one volume of a JBOD node, gone or empty while the
status recorded its directory id.

The broker keeps serving from its other directories (the engine, as Kafka, takes a failed
directory offline and reports it in its heartbeats, so the controller moves leadership away and
shrinks the ISRs); the replicas that lived on the lost one are under-replicated until they are
copied back. Getting them back means a new directory, formatted with a new directory id (what
Kafka's server does for an empty log directory at startup), and a restart of the broker, which
then recreates those replicas in its online directories and fetches them from their leaders.

The operation, recorded in `status.operation` (`BrokerVolumeReplacement`, with `volume` naming
the node, the volume and the lost directory id) before every act:

    await-approval     the broker-disk-loss runbook's `replace-volume` step waits for
                       `kraftwerk.io/approve: broker-disk-loss/replace-volume` (a new PVC replaces
                       the old one, which is deleting a volume: never automatic)
    await-safety       stopping the broker must not take any partition below min.insync.replicas,
                       and no replica other than its own lost ones may be missing
                       (`gates.volume_replacement_gate`); blockedBy names the partitions. A broker
                       already down passes: stopping it cannot reduce availability
    replace            recorded with no action; the next reconcile re-checks the gate on fresh
                       facts and sends ReplaceVolume (controlled shutdown, a new empty volume)
    format             the bootstrap formats the new directory (`--ignore-formatted`, so only it)
                       and starts the broker
    await-replication  until the broker is registered, unfenced, back in the ISR of every
                       partition it holds, and cluster-wide URP is 0; then the runbook closes

An operator that dies after ReplaceVolume but before its status write resends it: the broker is
stopped already and the new directory is still empty (it is formatted only once `format` is
recorded), so replacing it again loses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kraft_operator.model import (
    APPROVE_ANNOTATION,
    BlockerStatus,
    KRaftClusterSpec,
    KRaftClusterStatus,
    OperationStatus,
    VolumeReplacementStatus,
)
from kraft_operator.plan.actions import Event, EventType, ReplaceVolume
from kraft_operator.plan.facts import Observed, PodPhase, VolumeFacts
from kraft_operator.plan.gates import is_down, not_recovered, volume_replacement_gate
from kraft_operator.plan.rendering import DesiredNode
from kraft_operator.plan.roll import rfc3339_ms
from kraft_operator.plan.runbooks import BROKER_DISK_LOSS, BROKER_DISK_REPLACE_STEP, approved_steps

__all__ = [
    "VOLUME_REPLACEMENT_APPROVAL",
    "VOLUME_REPLACEMENT_OPERATION",
    "LostVolume",
    "VolumeDecision",
    "lost_broker_volumes",
    "plan_volume_replacement",
]

VOLUME_REPLACEMENT_OPERATION = "BrokerVolumeReplacement"
VOLUME_REPLACEMENT_APPROVAL = f"{BROKER_DISK_LOSS}/{BROKER_DISK_REPLACE_STEP}"  # what kraftwerk.io/approve names


@dataclass(frozen=True, slots=True)
class LostVolume:
    node: DesiredNode
    volume_id: int
    path: str
    directory_id: str
    state: str  # "missing", "empty", "offline" (DescribeLogDirs) or "halted" (the broker stopped on it)


@dataclass(frozen=True, slots=True)
class VolumeDecision:
    """What the replacement does this reconcile. `formattable` names the (node id, volume id) the
    bootstrap may format anew; `operation` is None when no replacement is under way."""

    operation: OperationStatus | None = None
    actions: tuple[ReplaceVolume, ...] = ()
    events: tuple[Event, ...] = ()
    waiting: str = ""
    formattable: frozenset[tuple[int, int]] = frozenset()
    requeue_now: bool = False


def lost_broker_volumes(
    *, nodes: Sequence[DesiredNode], observed: Observed, previous: KRaftClusterStatus | None,
) -> list[LostVolume]:
    """Broker volumes whose directory id the status recorded and that are now missing, hold no
    meta.properties, or that their running broker reports offline (DescribeLogDirs: Kafka's
    KAFKA_STORAGE_ERROR, the directory failed an I/O while its files may still be there). A controller's metadata volume is not one of them: losing it is the
    controller-disk-loss runbook's (a voter's disk)."""
    lost: list[LostVolume] = []
    if previous is None:
        return lost
    for node in nodes:
        recorded = previous.node(node.ref.node_id)
        if not node.is_broker or recorded is None:
            continue
        facts = observed.nodes.get(node.ref.node_id)
        wanted = {v.id for v in node.pool.storage.volumes}
        metadata_volume = node.pool.storage.volumes[0].id
        for d in recorded.directories:
            if not d.directory_id or d.volume_id not in wanted or (node.is_controller and d.volume_id == metadata_volume):
                continue
            seen = facts.volume(d.volume_id) if facts is not None else None
            if seen is None or not seen.formatted:
                lost.append(LostVolume(node, d.volume_id, d.path, d.directory_id, "missing" if seen is None else "empty"))
            elif seen.directory_id == d.directory_id and _offline(observed, node.ref.node_id, d.path) is not None:
                lost.append(LostVolume(node, d.volume_id, d.path, d.directory_id, "offline"))
            elif (seen.directory_id == d.directory_id and d.volume_id == metadata_volume and facts is not None
                  and facts.halted_on(d.path) is not None):
                # The metadata log's volume failed with its files in place: the broker halts (it
                # must not serve metadata it cannot persist) and answers nothing, so only its exit says so.
                lost.append(LostVolume(node, d.volume_id, d.path, d.directory_id, "halted"))
    return lost


def _state(seen: VolumeFacts | None, *, offline: str | None, halted: str | None = None) -> str:
    if seen is None:
        return "missing"
    if not seen.formatted:
        return "empty"
    if offline is not None:
        return f"offline ({offline}, reported by the broker)"
    if halted is not None:
        return f"failed: the broker halted on it, its metadata log directory ({halted[-300:]})"
    return "failed"


def _offline(observed: Observed, node_id: int, path: str) -> str | None:
    return observed.cluster.offline_log_dir(node_id, path) if observed.cluster is not None else None


def plan_volume_replacement(
    *,
    spec: KRaftClusterSpec,
    nodes: Sequence[DesiredNode],
    observed: Observed,
    previous: KRaftClusterStatus | None,
    annotations: Mapping[str, str],
    now_ms: int,
    now_text: str,
    fetch_timeout_ms: int,
) -> VolumeDecision:
    """The replacement's step this reconcile (see the module docstring)."""
    prev = previous.operation if previous is not None else None
    prev = prev if prev is not None and prev.name == VOLUME_REPLACEMENT_OPERATION and prev.volume is not None else None
    by_id = {n.ref.node_id: n for n in nodes}
    if prev is not None and prev.volume is not None and prev.volume.node_id in by_id:
        record, step, started = prev.volume, prev.step, prev.started_at or now_text
    else:
        lost = lost_broker_volumes(nodes=nodes, observed=observed, previous=previous)
        if not lost:
            return VolumeDecision()
        first = lost[0]
        record = VolumeReplacementStatus(node_id=first.node.ref.node_id, volume_id=first.volume_id, path=first.path,
                                         lost_directory_id=first.directory_id)
        step, started = "detected", now_text
    if spec.paused:
        if prev is None:
            return VolumeDecision()
        return VolumeDecision(operation=prev, waiting="reconciliation is paused")
    node = by_id[record.node_id]
    node_id, volume_id, path = record.node_id, record.volume_id, record.path
    facts = observed.nodes.get(node_id)
    cluster = observed.cluster
    seen = facts.volume(volume_id) if facts is not None else None
    formatted_anew = seen is not None and seen.formatted and seen.directory_id != record.lost_directory_id
    running = facts is not None and facts.phase in (PodPhase.RUNNING, PodPhase.PENDING)

    def operation(at: str, *, blocked_by: Sequence[BlockerStatus] = (),
                  volume: VolumeReplacementStatus = record) -> OperationStatus:
        return OperationStatus(name=VOLUME_REPLACEMENT_OPERATION, step=at, started_at=started,
                               blocked_by=list(blocked_by), volume=volume)

    what = f"broker {node_id}'s volume {volume_id} ({path}, directory id {record.lost_directory_id})"
    if formatted_anew:
        renewed = record.model_copy(update={"new_directory_id": seen.directory_id if seen is not None else None})
        since_ms = rfc3339_ms(record.replaced_at) if record.replaced_at else -1
        blockers = not_recovered(node_id, controller=node.is_controller, broker=True, facts=facts, cluster=cluster,
                                 now_ms=now_ms, fetch_timeout_ms=fetch_timeout_ms, since_ms=since_ms)
        counts = cluster.partitions if cluster is not None else None
        if counts is None or counts.under_replicated:
            urp = "unknown" if counts is None else str(counts.under_replicated)
            blockers.append(BlockerStatus(kind="cluster", message=f"under-replicated partitions: {urp}"))
        if blockers:
            return VolumeDecision(
                operation=operation("await-replication", blocked_by=blockers, volume=renewed),
                waiting=f"{what} was replaced (new directory id {renewed.new_directory_id}); its replicas to "
                "re-replicate: " + "; ".join(b.message for b in blockers[:5]))
        done = Event(EventType.NORMAL, "VolumeReplaced",
                     f"{what} replaced by directory id {renewed.new_directory_id}: the broker is back in every ISR "
                     "and URP is 0")
        return VolumeDecision(events=(done,))
    if step == "format" and not running:
        return VolumeDecision(operation=operation("format"), formattable=frozenset({(node_id, volume_id)}),
                              waiting=f"{what}: the new directory to be formatted and the broker started")
    if VOLUME_REPLACEMENT_APPROVAL not in approved_steps(annotations):
        halted = facts.halted_on(path) if facts is not None else None
        message = (f"{what} is {_state(seen, offline=_offline(observed, node_id, path), halted=halted)}; replacing it (a new volume, formatted with "
                   f"a new directory id, and a restart of the broker) waits for approval: kubectl annotate kc "
                   f'<cluster> {APPROVE_ANNOTATION}="{VOLUME_REPLACEMENT_APPROVAL}"')
        events = (Event(EventType.WARNING, "VolumeLost", message),) if prev is None else ()
        blocker = BlockerStatus(kind="approval", node_id=node_id, message=message)
        return VolumeDecision(operation=operation("await-approval", blocked_by=[blocker]), events=events,
                              waiting=message)
    down = is_down(node_id, controller=node.is_controller, broker=True, facts=facts, cluster=cluster, now_ms=now_ms,
                   fetch_timeout_ms=fetch_timeout_ms)
    blockers = [] if down else volume_replacement_gate(node_id, cluster=cluster)
    if blockers:
        return VolumeDecision(
            operation=operation("await-safety", blocked_by=blockers),
            waiting=f"{what}: stopping broker {node_id} to replace it would be unsafe: "
            + "; ".join(b.message for b in blockers[:5]))
    if step != "replace":
        # Persist before act: `replace` is published first, the ReplaceVolume goes on the next reconcile.
        return VolumeDecision(operation=operation("replace"), requeue_now=True,
                              waiting=f"{what}: its replacement is recorded before it is done")
    action = ReplaceVolume(
        node=node.ref, implementation=node.implementation, volume_id=volume_id, path=path,
        lost_directory_id=record.lost_directory_id, grace_period_ms=spec.lifecycle.termination_grace_period_seconds * 1000,
        reason=f"node {node_id}: replace the {_state(seen, offline=_offline(observed, node_id, path))} volume {volume_id} "
        f"({path}, "
        f"directory id {record.lost_directory_id}): controlled shutdown, a new volume; it is formatted with a new "
        f"directory id and the broker restarts (approved by {APPROVE_ANNOTATION}={VOLUME_REPLACEMENT_APPROVAL})",
    )
    replaced = record.model_copy(update={"replaced_at": now_text})
    return VolumeDecision(operation=operation("format", volume=replaced), actions=(action,),
                          events=(Event(EventType.NORMAL, "ReplaceVolume", action.reason),),
                          waiting=f"{what}: the new directory to be formatted and the broker started")
