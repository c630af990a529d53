"""The planner: from (spec, last published status, observed facts) to the next actions and the
status to publish.

One call decides one reconcile. It is pure: no I/O, no clock (now_ms is an argument), randomness
only from the `random.Random` it is handed (the cluster id and the initial controllers' directory
ids). The operator's memory is the status it published, so an operator restarted at any point
calls this with the last status and carries on where it stopped.

Rules it keeps, whatever the facts:
- A spec with a problem (`validation`) is never acted on: Degraded names the field.
- Paused: observe and publish, never act.
- Persist before act: the cluster id, the `--initial-controllers` value and the node ids are first
  published in status with no action; formatting starts only once they are read back. Otherwise a
  crash between a format and its status write could leave two halves of a cluster with different
  ids.
- A formatted volume is never formatted again. A volume the status says was formatted but that is
  now empty or missing is lost: the node is blocked and Degraded says so, never silently
  re-formatted. A controller's metadata volume is formatted anew with approval (controller disk
  replacement); a broker's lost volume is replaced with approval (`volume_replacement`), which
  then holds every other operation back until the broker's replicas are back.
- The controllers the cluster was created with are formatted `--initial-controllers`; controllers
  added later `--no-initial-controllers`; brokers with neither.
- Brokers start once the quorum has a leader.
- Once nothing else is to do, a rolling restart (`roll`) applies changed images, versions and
  configs one node at a time behind its gates; its state lives in `status.operation.roll`.
- After it: controllers the spec adds join the voters (`quorum_change`), then nodes the spec
  drops leave (`scale_down`: RemoveRaftVoter, drain, stop, unregister), then metadata.version.
- The `kraftwerk.io/pause-reconciliation` annotation pauses like `spec.paused`.
- Situations it can detect (quorum loss, a lost disk, a stuck roll, ...) open runbooks in
  `status.runbooks` (`runbooks`), whatever else happens, paused or not.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kraft_engine.kafka_uuid import RESERVED_UUIDS, to_kafka_str
from kraft_operator.model import (
    APPROVE_ANNOTATION,
    PAUSE_ANNOTATION,
    BlockerStatus,
    Condition,
    ConditionStatus,
    ConditionType,
    DirectoryStatus,
    KRaftCluster,
    KRaftClusterSpec,
    KRaftClusterStatus,
    MetadataVersionStatus,
    NodeStatus,
    OperationStatus,
    PartitionsStatus,
    QuorumReplicaStatus,
    QuorumStatus,
)
from kraft_operator.plan.actions import (
    Action,
    Event,
    EventType,
    FormatStorage,
    PlannedAction,
    QuorumBootstrap,
    StartNode,
    UnregisterBroker,
    WriteConfig,
)
from kraft_operator.plan.facts import (
    ClusterFacts,
    ConfigRules,
    FormatJobFacts,
    JobPhase,
    Layout,
    LogDirFacts,
    NodeFacts,
    NodeRef,
    Observed,
    PodPhase,
    QuorumFacts,
    ReplicaFacts,
)
from kraft_operator.plan.features import plan_metadata_version
from kraft_operator.plan.log_dirs import LogDirDecision, plan_log_dir_removal, retained_log_dirs
from kraft_operator.plan.quorum_change import plan_quorum_change
from kraft_operator.plan.rebalancing import REBALANCE_OPERATION, plan_rebalance
from kraft_operator.plan.rendering import DesiredNode, controller_endpoint, desired_nodes, render_config
from kraft_operator.plan.resizing import grow_volumes
from kraft_operator.plan.roll import RollDecision, fetch_timeout_ms, node_revision, plan_roll
from kraft_operator.plan.runbooks import (
    CONTROLLER_DISK_FORMAT_STEP,
    CONTROLLER_DISK_LOSS,
    approved_steps,
    detect_runbooks,
)
from kraft_operator.plan.scale_down import (
    SCALE_DOWN_OPERATION,
    STALE_REGISTRATION_APPROVAL,
    even_controllers,
    plan_scale_down,
    stale_registrations,
)
from kraft_operator.plan.validation import (
    SpecProblem,
    target_feature_levels,
    target_metadata_version,
    validate_spec,
)
from kraft_operator.plan.volume_replacement import (
    VOLUME_REPLACEMENT_APPROVAL,
    VolumeDecision,
    plan_volume_replacement,
)

if TYPE_CHECKING:
    import random

__all__ = ["DISK_REPLACEMENT_OPERATION", "Plan", "plan"]

DISK_REPLACEMENT_OPERATION = "ControllerDiskReplacement"
DISK_REPLACEMENT_APPROVAL = f"{CONTROLLER_DISK_LOSS}/{CONTROLLER_DISK_FORMAT_STEP}"  # what kraftwerk.io/approve names
STALE_REGISTRATION_OPERATION = "StaleRegistrations"

# How soon to look again: quickly while something is moving, slowly when all is well.
_BUSY_REQUEUE_MS = 1000
_STEADY_REQUEUE_MS = 10_000


@dataclass(frozen=True, slots=True)
class Plan:
    """The planner's answer: actions in order, the status to publish, events to emit, and when to
    look again. `waiting_for` is what blocks progress, in words (empty when nothing does)."""

    actions: tuple[PlannedAction, ...]
    status: KRaftClusterStatus
    events: tuple[Event, ...]
    requeue_after_ms: int
    waiting_for: str = ""

    @property
    def next_action(self) -> PlannedAction | None:
        return self.actions[0] if self.actions else None


def plan(
    cluster: KRaftCluster,
    *,
    observed: Observed,
    layout: Layout,
    rules: ConfigRules,
    rng: random.Random,
    now_ms: int,
) -> Plan:
    """Decide the next step for one KRaftCluster. `cluster.status` is the last published status."""
    namespace = cluster.metadata.namespace or "default"
    name = cluster.metadata.name
    spec, previous = cluster.spec, cluster.status
    if cluster.metadata.annotations.get(PAUSE_ANNOTATION, "").lower() == "true" and not spec.paused:
        spec = spec.model_copy(update={"paused": True})
    generation = cluster.metadata.generation
    nodes = desired_nodes(namespace=namespace, cluster=name, spec=spec, status=previous)
    controllers = [n for n in nodes if n.is_controller]
    retained = retained_log_dirs(nodes, observed, layout=layout)
    rendered = {n.ref.node_id: render_config(n, spec=spec, controllers=controllers, layout=layout,
                                             log_dirs=retained.get(n.ref.node_id)) for n in nodes}
    problems = validate_spec(spec=spec, status=previous, observed=observed, nodes=nodes, layout=layout, rules=rules,
                             rendered=rendered)
    builder = _StatusBuilder(previous=previous, generation=generation, now_ms=now_ms)
    builder.even_warning = even_controllers(spec)
    builder.idle_brokers = idle_brokers(nodes, observed)
    if problems:
        return _refuse(problems, builder=builder, spec=spec, nodes=nodes, observed=observed)
    planner = _Planner(spec=spec, nodes=nodes, observed=observed, layout=layout, rng=rng, builder=builder)
    planner.annotations = cluster.metadata.annotations
    planner.now_ms = now_ms
    planner.rendered = rendered
    return planner.run()


def _refuse(
    problems: list[SpecProblem],
    *,
    builder: _StatusBuilder,
    spec: KRaftClusterSpec,
    nodes: tuple[DesiredNode, ...],
    observed: Observed,
) -> Plan:
    message = "; ".join(str(p) for p in problems)
    status = builder.observe_only(spec=spec, nodes=nodes, observed=observed)
    status = builder.with_conditions(
        status,
        ready=builder.ready_condition(status, spec=spec, nodes=nodes, observed=observed),
        progressing=(ConditionStatus.FALSE, "InvalidSpec", "the spec is refused; nothing is done until it is fixed"),
        degraded=(ConditionStatus.TRUE, "InvalidSpec", message),
        paused=(ConditionStatus.TRUE if spec.paused else ConditionStatus.FALSE, "Spec", ""),
    )
    events = tuple(Event(EventType.WARNING, "InvalidSpec", str(p)) for p in problems)
    return Plan((), status, events, _STEADY_REQUEUE_MS, waiting_for=f"a valid spec ({message})")


class _Planner:
    def __init__(
        self,
        *,
        spec: KRaftClusterSpec,
        nodes: tuple[DesiredNode, ...],
        observed: Observed,
        layout: Layout,
        rng: random.Random,
        builder: _StatusBuilder,
    ) -> None:
        self.spec = spec
        self.nodes = nodes
        self.observed = observed
        self.layout = layout
        self.rng = rng
        self.builder = builder
        self.previous = builder.previous
        self.controllers = [n for n in nodes if n.is_controller]
        self.actions: list[PlannedAction] = []
        self.events: list[Event] = []
        self.blocked: list[str] = []  # Degraded: something is wrong with a node
        self.offline_dirs: list[str] = []  # Degraded too, without blocking: a broker's offline log dir
        self.waiting: list[str] = []  # Progressing: something is on its way
        self.brokers_waiting_for_quorum: list[int] = []
        # A node whose process exited, started again (a crash loop): what the bootstrap does and says
        # for it does not hold a roll of the others back (`_roll`).
        self.crash_restarts: list[PlannedAction] = []
        self.crash_problems: list[str] = []
        self.step = ""
        self.annotations: dict[str, str] = {}
        self.now_ms = 0
        self.revisions: dict[int, str] = {}
        self.rendered: dict[int, dict[str, str]] = {}  # each node's server.properties, rendered once by plan()
        self.removed: tuple[int, ...] = ()
        self.replacing: set[int] = set()  # controllers whose lost metadata disk is formatted anew
        self.approvals: list[BlockerStatus] = []  # dangerous steps waiting for the approve annotation
        self.degraded_reason = "NodeProblem"
        self.requeue_now = False
        self.volume = VolumeDecision()  # a broker's lost volume being replaced (`volume_replacement`)
        self.log_dirs = LogDirDecision()  # a log directory the spec dropped, being emptied (`log_dirs`)

    # -- the whole decision ------------------------------------------------------------------
    def run(self) -> Plan:
        previous = self.previous
        if previous is None or previous.cluster_id is None or previous.initial_controllers is None:
            return self._initialize()
        cluster_id = previous.cluster_id
        directories: dict[int, list[DirectoryStatus]] = {}
        quorum = self.observed.cluster.quorum if self.observed.cluster is not None else None
        initial_ids = _initial_controller_ids(previous.initial_controllers)
        self.volume = plan_volume_replacement(
            spec=self.spec, nodes=self.nodes, observed=self.observed, previous=previous, annotations=self.annotations,
            now_ms=self.now_ms, now_text=self.builder.now_text, fetch_timeout_ms=fetch_timeout_ms(self.spec))
        for node in self.nodes:
            directories[node.ref.node_id] = self._node(node, cluster_id=cluster_id, initial_ids=initial_ids,
                                                       quorum=quorum)
        for resize in grow_volumes(self.nodes, self.observed):
            self._act(resize, step="resize-volume")
        if self.volume.operation is not None:
            for replacement in self.volume.actions:
                self._act(replacement, step="replace-volume")
            self.events.extend(self.volume.events)
            self.waiting.append(self.volume.waiting)
            self.requeue_now = self.requeue_now or self.volume.requeue_now
        else:
            self.events.extend(self.volume.events)  # the replacement finished
            self.log_dirs = plan_log_dir_removal(nodes=self.nodes, observed=self.observed, previous=previous,
                                                 layout=self.layout, paused=self.spec.paused,
                                                 now_text=self.builder.now_text)
            self.events.extend(self.log_dirs.events)
        if self.log_dirs.operation is not None:
            # A dropped log directory still holds replicas: they move off before any restart.
            self.actions.extend(self.log_dirs.actions)
            self.step = self.step or "log-dir-removal"
            if self.log_dirs.refused:
                self.blocked.append(self.log_dirs.refused)
                self.degraded_reason = "LogDirRemovalRefused"
            else:
                self.waiting.append(self.log_dirs.waiting)
            self.requeue_now = self.requeue_now or self.log_dirs.requeue_now
        if self.spec.paused:
            self.actions.clear()
        roll = self._roll()
        status = self.builder.observe_only(spec=self.spec, nodes=self.nodes, observed=self.observed,
                                           directories=directories)
        runbooks, opened_or_closed = detect_runbooks(
            spec=self.spec, nodes=self.nodes, observed=self.observed, previous=self.previous, layout=self.layout,
            annotations=self.annotations, stuck_roll=roll.stuck if roll is not None else (), now_ms=self.now_ms,
            now_text=self.builder.now_text,
            volume_replacement=self.volume.operation.volume if self.volume.operation is not None else None,
        )
        self.events.extend(opened_or_closed)
        status = status.model_copy(update={"runbooks": runbooks})
        if self.volume.operation is not None:
            # A lost broker volume holds everything else back (its node is blocked until replaced).
            result = self._finish(status, requeue_after_ms=0 if self.requeue_now else None)
            operation = self.volume.operation.model_copy(update={"waiting_for": result.waiting_for})
            return replace(result, status=result.status.model_copy(update={"operation": operation}))
        if self.log_dirs.operation is not None:
            result = self._finish(status, requeue_after_ms=0 if self.requeue_now else None)
            operation = self.log_dirs.operation.model_copy(update={"waiting_for": result.waiting_for})
            return replace(result, status=result.status.model_copy(update={"operation": operation}))
        if roll is None or (roll.operation is None and not roll.actions):
            change = (self._quorum_change() or self._scale_down(status) or self._rebalance()
                      or self._stale_registrations() or self._metadata_version())
            if self.removed:
                status = status.model_copy(update={"nodes": [n for n in status.nodes if n.id not in self.removed]})
            if change is not None:
                status = status.model_copy(update={"last_manual_roll": roll.last_manual_roll if roll else
                                                   status.last_manual_roll})
                result = self._finish(status, requeue_after_ms=0 if self.requeue_now else None)
                operation = change.model_copy(update={"waiting_for": result.waiting_for})
                return replace(result, status=result.status.model_copy(update={"operation": operation}))
        if roll is None:
            return self._finish(status)
        status = status.model_copy(update={"last_manual_roll": roll.last_manual_roll})
        result = self._finish(status, requeue_after_ms=0 if roll.requeue_now else None)
        if roll.operation is None:
            return result
        operation = roll.operation.model_copy(update={"waiting_for": result.waiting_for})
        return replace(result, status=result.status.model_copy(update={"operation": operation}))

    def _quorum_change(self) -> OperationStatus | None:
        """KIP-853 scale-up, once neither the bootstrap nor a roll has anything to do; its operation."""
        if self.spec.paused or self.actions or self.waiting or self.blocked:
            return None
        decision = plan_quorum_change(spec=self.spec, nodes=self.nodes, observed=self.observed, previous=self.previous,
                                      layout=self.layout, now_ms=self.now_ms, now_text=self.builder.now_text,
                                      fetch_timeout_ms=fetch_timeout_ms(self.spec))
        if decision.operation is None:
            return None
        self.actions.extend(decision.actions)
        self.events.extend(decision.events)
        self.waiting.append(decision.waiting)
        self.step = self.step or "quorum-change"
        return decision.operation

    def _scale_down(self, status: KRaftClusterStatus) -> OperationStatus | None:
        """Nodes the spec dropped leave (`scale_down`), once nothing else is under way; a scale-down
        already under way keeps its recorded state while something else runs or reconciliation is
        paused. Its operation, None when no node is leaving."""
        prev = self.previous.operation if self.previous is not None else None
        prev = prev if prev is not None and prev.name == SCALE_DOWN_OPERATION else None
        if self.spec.paused or self.actions or self.waiting or self.blocked:
            if prev is None:
                return None
            self.waiting.append("the scale-down resumes once nothing else is under way")
            return prev.model_copy(update={"step": "paused" if self.spec.paused else prev.step})
        decision = plan_scale_down(spec=self.spec, nodes=self.nodes, observed=self.observed, previous=self.previous,
                                   now_ms=self.now_ms, now_text=self.builder.now_text,
                                   fetch_timeout_ms=fetch_timeout_ms(self.spec))
        self.events.extend(decision.events)
        self.removed = decision.removed
        if decision.operation is None:
            return None
        self.actions.extend(decision.actions)
        if decision.refused:
            self.blocked.append(decision.refused)
            self.degraded_reason = "ScaleDownRefused"
        else:
            self.waiting.append(decision.waiting)
        self.requeue_now = self.requeue_now or decision.requeue_now
        self.step = self.step or "scale-down"
        return decision.operation

    def _rebalance(self) -> OperationStatus | None:
        """Replicas moved onto brokers that joined holding none (`rebalancing`), with the spec's flag,
        once nothing else is under way; a rebalance under way keeps its recorded state meanwhile."""
        prev = self.previous.operation if self.previous is not None else None
        prev = prev if prev is not None and prev.name == REBALANCE_OPERATION else None
        if self.spec.paused or self.actions or self.waiting or self.blocked:
            if prev is None:
                return None
            self.waiting.append("the rebalance resumes once nothing else is under way")
            return prev.model_copy(update={"step": "paused" if self.spec.paused else prev.step})
        decision = plan_rebalance(spec=self.spec, nodes=self.nodes, observed=self.observed, previous=self.previous,
                                  idle=idle_broker_ids(self.nodes, self.observed), now_ms=self.now_ms,
                                  now_text=self.builder.now_text,
                                  resend_after_ms=max(10_000, 5 * fetch_timeout_ms(self.spec)))
        self.events.extend(decision.events)
        if decision.operation is None:
            return None
        self.actions.extend(decision.actions)
        self.waiting.append(decision.waiting)
        self.requeue_now = self.requeue_now or decision.requeue_now
        self.step = self.step or "rebalance"
        return decision.operation

    def _stale_registrations(self) -> OperationStatus | None:
        """Broker registrations of ids that are no node of the cluster (`stale_registrations`),
        unregistered one at a time once `kraftwerk.io/approve` names stale-registration/unregister;
        until then the operation's blockedBy names them and the annotation."""
        if self.spec.paused or self.actions or self.waiting or self.blocked:
            return None
        stale = stale_registrations(nodes=self.nodes, observed=self.observed, previous=self.previous)
        if not stale:
            return None
        started = self._started_at(STALE_REGISTRATION_OPERATION)
        self.step = self.step or "stale-registrations"
        if STALE_REGISTRATION_APPROVAL not in approved_steps(self.annotations):
            message = (f"stale broker registration(s) {stale}: no node of this cluster has those ids; unregistering "
                       f'them waits for approval: kubectl annotate kc <cluster> {APPROVE_ANNOTATION}="'
                       f'{STALE_REGISTRATION_APPROVAL}"')
            self.waiting.append(message)
            self.events.append(Event(EventType.WARNING, "StaleRegistration", message))
            blockers = [BlockerStatus(kind="approval", node_id=i, message=f"broker {i} is registered but is no node "
                                      f"of this cluster; approve with {APPROVE_ANNOTATION}={STALE_REGISTRATION_APPROVAL}")
                        for i in stale]
            return OperationStatus(name=STALE_REGISTRATION_OPERATION, step="await-approval", started_at=started,
                                   blocked_by=blockers)
        node_id = stale[0]
        ref = NodeRef(self.nodes[0].ref.namespace, self.nodes[0].ref.cluster, "", node_id)
        action = UnregisterBroker(node=ref, reason=f"node {node_id}: UnregisterBroker for a stale registration "
                                  f"(approved by {APPROVE_ANNOTATION}={STALE_REGISTRATION_APPROVAL})")
        self.actions.append(action)
        self.events.append(Event(EventType.NORMAL, "UnregisterBroker", action.reason))
        self.waiting.append(f"stale broker registration {node_id} to go")
        return OperationStatus(name=STALE_REGISTRATION_OPERATION, step="unregister", started_at=started)

    def _metadata_version(self) -> OperationStatus | None:
        """metadata.version finalization, once nothing else is under way; its operation."""
        if self.spec.paused:
            return None
        busy = bool(self.actions or self.waiting or self.blocked)
        decision = plan_metadata_version(spec=self.spec, nodes=self.nodes, observed=self.observed, busy=busy)
        self.events.extend(decision.events)
        if decision.refused:
            self.blocked.append(decision.refused)
            self.degraded_reason = "MetadataVersionRefused"  # its own Warning event says it already
            return None
        if not (decision.actions or decision.waiting) or busy:
            return None
        self.actions.extend(decision.actions)
        self.waiting.append(decision.waiting)
        self.step = self.step or "metadata-version"
        started = self._started_at("MetadataVersion")
        step = "finalize" if decision.actions else "held-back"
        return OperationStatus(name="MetadataVersion", step=step, started_at=started)

    def _roll(self) -> RollDecision | None:
        """The rolling restart, once the bootstrap has nothing left to do; while it has, a roll under
        way keeps its recorded state (None: the status is left as `_finish` builds it).

        A node that crash-loops (its process exits, the bootstrap starts it again at every
        reconcile, as a kubelet restarts a container) does not hold the roll: the roll's gates count
        it as down, and a roll frozen until it comes back would wait on a dead node, the deadlock
        Koperator #533 describes."""
        actions = [a for a in self.actions if a not in self.crash_restarts]
        blocked = [b for b in self.blocked if b not in self.crash_problems]
        busy = bool(actions or self.waiting or blocked or self.brokers_waiting_for_quorum)
        if busy or len(self.revisions) != len(self.nodes):
            previous = self.previous.operation if self.previous is not None else None
            if previous is None or previous.roll is None:
                return None
            if self.spec.paused:
                previous = previous.model_copy(update={"step": "paused"})
            # A roll held while the bootstrap restarts a crash-looping node is still held: a
            # stuck-roll runbook it had raised stays open (not closed and reopened every reconcile).
            stuck = next((tuple(r.evidence) for r in self.previous.runbooks if r.name == "stuck-roll"), ()) if (
                self.previous is not None) else ()
            return RollDecision(operation=previous, last_manual_roll=self.previous.last_manual_roll
                                if self.previous is not None else None, stuck=stuck)
        decision = plan_roll(spec=self.spec, nodes=self.nodes, observed=self.observed, previous=self.previous,
                             revisions=self.revisions, annotations=self.annotations, now_ms=self.now_ms,
                             now_text=self.builder.now_text, paused=self.spec.paused)
        self.actions.extend(decision.actions)
        self.events.extend(decision.events)
        if decision.waiting:
            self.waiting.append(decision.waiting)
            self.step = self.step or decision.step
        return decision

    def _initialize(self) -> Plan:
        """Assign the cluster id, the node ids and the initial controllers, and publish them (only)."""
        previous = self.previous
        cluster_id = (previous.cluster_id if previous is not None else None) or self.spec.cluster_id
        adopted = sorted({v.cluster_id for f in self.observed.nodes.values() for v in f.volumes if v.cluster_id})
        if cluster_id is None and len(adopted) == 1:
            cluster_id = adopted[0]  # status lost, volumes kept: carry on with the cluster they hold
        if adopted and (len(adopted) > 1 or adopted[0] != cluster_id):
            message = (
                f"the nodes' volumes hold cluster id(s) {', '.join(adopted)}, not {cluster_id}; "
                "kraftwerk never re-formats a formatted volume"
            )
            status = self.builder.observe_only(spec=self.spec, nodes=self.nodes, observed=self.observed)
            status = self.builder.with_conditions(
                status,
                ready=(ConditionStatus.FALSE, "ForeignVolumes", message),
                progressing=(ConditionStatus.FALSE, "ForeignVolumes", message),
                degraded=(ConditionStatus.TRUE, "ForeignVolumes", message),
                paused=self._paused_condition(),
            )
            return Plan((), status, (Event(EventType.WARNING, "ForeignVolumes", message),), _STEADY_REQUEUE_MS,
                        waiting_for=message)
        if cluster_id is None:
            cluster_id = _random_kafka_uuid(self.rng)
        voters = []
        for node in self.controllers:
            facts = self.observed.nodes.get(node.ref.node_id)
            metadata_volume = node.pool.storage.volumes[0].id
            existing = facts.volume(metadata_volume) if facts is not None else None
            if adopted and (existing is None or not existing.formatted):
                # The value the formatted controllers were bootstrapped with is gone with the status;
                # a fresh one would give this node another voter set. It joins later instead.
                continue
            directory_id = (existing.directory_id if existing is not None else None) or _random_kafka_uuid(self.rng)
            host, port = controller_endpoint(node, spec=self.spec, layout=self.layout)
            host_text = f"[{host}]" if ":" in host else host
            voters.append(f"{node.ref.node_id}@{host_text}:{port}:{directory_id}")
        initial = ",".join(voters)
        status = self.builder.observe_only(spec=self.spec, nodes=self.nodes, observed=self.observed)
        status = status.model_copy(update={"cluster_id": cluster_id, "initial_controllers": initial})
        self.step = "assign-cluster-id"
        self.waiting.append("the cluster id and initial controllers to be recorded in status")
        event = Event(EventType.NORMAL, "ClusterIdAssigned", f"cluster id {cluster_id}, initial controllers {initial}")
        self.events.append(event)
        return self._finish(status, requeue_after_ms=0)

    # -- one node ------------------------------------------------------------------------------
    def _node(
        self,
        node: DesiredNode,
        *,
        cluster_id: str,
        initial_ids: frozenset[int],
        quorum: QuorumFacts | None,
    ) -> list[DirectoryStatus]:
        node_id = node.ref.node_id
        facts = self.observed.nodes.get(node_id) or NodeFacts(node_id=node_id, pool=node.ref.pool)
        recorded = self.previous.node(node_id) if self.previous is not None else None
        recorded_ids = {d.volume_id: d.directory_id for d in (recorded.directories if recorded else ()) if d.directory_id}
        job = self.observed.format_jobs.get(node_id)
        if job is not None and job.phase is JobPhase.SUCCEEDED:
            # A format job that succeeded is as good a record as the status: the directories it
            # wrote were formatted, whether or not a status write has recorded them yet.
            paths = {self.layout.volume_path(node.ref, volume_id=v.id): v.id for v in node.pool.storage.volumes}
            for path, written in job.directory_ids.items():
                if path in paths:
                    recorded_ids.setdefault(paths[path], written)
        directories: list[DirectoryStatus] = []
        unformatted: list[str] = []
        problems: list[str] = []
        metadata_id = node.pool.storage.volumes[0].id
        metadata_seen = facts.volume(metadata_id)
        metadata_formatted = (metadata_id in recorded_ids and metadata_seen is not None and metadata_seen.formatted
                              and metadata_seen.directory_id == recorded_ids[metadata_id])
        for volume in node.pool.storage.volumes:
            path = self.layout.volume_path(node.ref, volume_id=volume.id)
            metadata_volume = node.is_controller and volume.id == node.pool.storage.volumes[0].id
            seen = facts.volume(volume.id)
            formatted = seen is not None and seen.formatted
            directory_id = seen.directory_id if seen is not None and formatted else None
            if directory_id is None and job is not None and job.phase is JobPhase.SUCCEEDED:
                directory_id = job.directory_ids.get(path)
            if seen is not None and formatted and seen.cluster_id != cluster_id:
                problems.append(
                    f"node {node_id}: volume {volume.id} ({path}) belongs to cluster {seen.cluster_id}, "
                    f"not {cluster_id}; it is never re-formatted"
                )
            elif seen is not None and formatted and seen.node_id is not None and seen.node_id != node_id:
                problems.append(f"node {node_id}: volume {volume.id} ({path}) was formatted for node {seen.node_id}")
            elif (not formatted and volume.id in recorded_ids and metadata_volume
                  and DISK_REPLACEMENT_APPROVAL in approved_steps(self.annotations)):
                # A lost controller metadata disk, its replacement approved: formatted anew with
                # --no-initial-controllers (a new directory id); the voter swap follows once it has
                # caught up as an observer (`quorum_change`).
                self.replacing.add(node_id)
                unformatted.append(path)
            elif (not formatted and volume.id in recorded_ids and (node_id, volume.id) in self.volume.formattable
                  and facts.phase not in (PodPhase.RUNNING, PodPhase.PENDING)):
                # A broker's lost volume, replaced by an approved BrokerVolumeReplacement: formatted
                # anew (a new directory id), the broker's other directories kept (--ignore-formatted).
                directory_id = None
                unformatted.append(path)
            elif not formatted and volume.id in recorded_ids:
                directory_id = recorded_ids[volume.id]
                if metadata_volume:
                    self.approvals.append(BlockerStatus(
                        kind="approval", node_id=node_id,
                        message=f"node {node_id}: formatting its new metadata volume {path} waits for approval: "
                        f'kubectl annotate kc <cluster> {APPROVE_ANNOTATION}="{DISK_REPLACEMENT_APPROVAL}"'))
                problems.append(
                    f"node {node_id}: volume {volume.id} ({path}) was formatted (directory id "
                    f"{directory_id}) and is now {'missing' if seen is None else 'empty'}; "
                    + ("kraftwerk formats a controller's new metadata volume only with approval (see the "
                       "controller-disk-loss runbook)" if metadata_volume
                       else "kraftwerk replaces a broker's lost volume only with approval: kubectl annotate kc "
                       f'<cluster> {APPROVE_ANNOTATION}="{VOLUME_REPLACEMENT_APPROVAL}" (see the broker-disk-loss '
                       "runbook)")
                )
            elif not formatted and node.is_broker and volume.id != metadata_id and metadata_formatted:
                # A volume added to a formatted broker: the broker formats it at its next start (a
                # new directory id, as Kafka's server does), which the roll for its new log.dirs is.
                pass
            elif not formatted:
                unformatted.append(path)
            described = self._log_dir(node_id, path)
            if described is not None and described.error is not None:
                self.offline_dirs.append(
                    f"node {node_id}: log directory {path} is offline ({described.error}); its replicas are "
                    "offline on this broker (see the broker-disk-loss runbook to replace the volume)"
                )
            directories.append(
                DirectoryStatus(volume_id=volume.id, path=path, directory_id=directory_id,
                                requested_bytes=seen.requested_bytes if seen is not None else None,
                                capacity_bytes=seen.size_bytes if seen is not None else None,
                                offline=None if described is None else described.error is not None,
                                total_bytes=None if described is None or described.total_bytes < 0
                                else described.total_bytes,
                                usable_bytes=None if described is None or described.usable_bytes < 0
                                else described.usable_bytes)
            )
        if problems:
            # The node is blocked as a whole: nothing is written, formatted or started for it.
            self.blocked.extend(problems)
            return directories

        rendered = self.rendered[node_id]
        tls = self.observed.tls_revisions.get(node_id)
        self.revisions[node_id] = node_revision(rendered if tls is None else {**rendered, "#tls": tls},
                                                image=self.spec.image, version=self.spec.version)
        config_current = facts.config is not None and dict(facts.config) == rendered
        if not config_current:
            running = facts.phase in (PodPhase.RUNNING, PodPhase.PENDING)
            self._act(
                WriteConfig(
                    node=node.ref,
                    implementation=node.implementation,
                    roles=node.roles,
                    properties=tuple(sorted(rendered.items())),
                    reason=f"node {node_id}: " + (
                        "its server.properties changed; it applies at the node's next restart (a rolling restart)" if running else "write its server.properties"
                    ),
                ),
                step="write-config",
            )
            if running:
                return directories
        if unformatted:
            self._format(node, job=job, cluster_id=cluster_id, unformatted=unformatted, initial_ids=initial_ids)
            return directories
        self._start(node, facts=facts, quorum=quorum)
        return directories

    def _format(
        self,
        node: DesiredNode,
        *,
        job: FormatJobFacts | None,
        cluster_id: str,
        unformatted: list[str],
        initial_ids: frozenset[int],
    ) -> None:
        node_id = node.ref.node_id
        if job is not None and job.phase is JobPhase.RUNNING:
            self.step = self.step or "format"
            self.waiting.append(f"the format job of node {node_id}")
            return
        if job is not None and job.phase is JobPhase.FAILED:
            self.blocked.append(f"node {node_id}: the format job failed: {job.message or 'no message'}")
            return
        if node.is_controller:
            initial = node_id in initial_ids and node_id not in self.replacing
            bootstrap = QuorumBootstrap.INITIAL if initial else QuorumBootstrap.JOIN
        else:
            bootstrap = QuorumBootstrap.NONE
        volumes = node.pool.storage.volumes
        all_paths = tuple(self.layout.volume_path(node.ref, volume_id=v.id) for v in volumes)
        how = {
            QuorumBootstrap.INITIAL: "as one of the initial controllers",
            QuorumBootstrap.JOIN: "as a controller that joins the quorum later",
            QuorumBootstrap.NONE: "as a broker",
        }[bootstrap]
        self._act(
            FormatStorage(
                node=node.ref,
                implementation=node.implementation,
                cluster_id=cluster_id,
                directories=all_paths,
                bootstrap=bootstrap,
                initial_controllers=self.previous.initial_controllers if self.previous is not None else None,
                release_version=str(target_metadata_version(self.spec)),
                feature_levels=tuple(sorted(target_feature_levels(self.spec).items())),
                ignore_formatted=len(unformatted) < len(all_paths),
                reason=f"node {node_id}: format {', '.join(unformatted)} {how}",
            ),
            step="format",
        )

    def _start(self, node: DesiredNode, *, facts: NodeFacts, quorum: QuorumFacts | None) -> None:
        node_id = node.ref.node_id
        if facts.phase in (PodPhase.RUNNING, PodPhase.PENDING):
            return
        exited = facts.phase is PodPhase.FAILED or facts.phase is PodPhase.SUCCEEDED
        if exited:
            code = f" with code {facts.exit_code}" if facts.exit_code is not None else ""
            detail = f": {facts.message}" if facts.message else ""
            self.blocked.append(f"node {node_id} exited{code}{detail}; restarting it")
            self.crash_problems.append(self.blocked[-1])
        if not node.is_controller and (quorum is None or quorum.leader_id < 0):
            self.step = self.step or "await-quorum"
            self.brokers_waiting_for_quorum.append(node_id)
            return
        start = StartNode(
            node=node.ref,
            implementation=node.implementation,
            roles=node.roles,
            revision=self.revisions.get(node_id, ""),
            reason=f"node {node_id}: start it ({node.implementation.value}, "
            f"{','.join(sorted(r.value for r in node.roles))})",
        )
        self._act(start, step="start")
        if exited:
            self.crash_restarts.append(start)

    def _log_dir(self, node_id: int, path: str) -> LogDirFacts | None:
        """The broker's own account of its directory `path` (DescribeLogDirs), if it gave one."""
        cluster = self.observed.cluster
        return cluster.log_dir(node_id, path) if cluster is not None else None

    def _started_at(self, name: str) -> str | None:
        """When operation `name` started: as the last status recorded it if it was under way, else now."""
        prev = self.previous.operation if self.previous is not None else None
        return prev.started_at if prev is not None and prev.name == name else self.builder.now_text

    def _act(self, action: Action, *, step: str) -> None:
        if self.spec.paused:
            return
        self.actions.append(action)
        self.step = self.step or step
        self.events.append(Event(EventType.NORMAL, type(action).__name__, action.reason))

    def _paused_condition(self) -> tuple[ConditionStatus, str, str]:
        if self.spec.paused:
            return (ConditionStatus.TRUE, "Paused", "spec.paused is true: observing only")
        return (ConditionStatus.FALSE, "Running", "")

    # -- status ----------------------------------------------------------------------------------
    def _finish(self, status: KRaftClusterStatus, *, requeue_after_ms: int | None = None) -> Plan:
        ready = self.builder.ready_condition(status, spec=self.spec, nodes=self.nodes, observed=self.observed)
        if self.brokers_waiting_for_quorum:
            self.waiting.append(f"a quorum leader before broker(s) {self.brokers_waiting_for_quorum} start")
        if ready[0] is not ConditionStatus.TRUE and not (self.actions or self.waiting or self.blocked):
            # Everything is in place; what is left is the cluster's own doing (an election, brokers
            # registering). Say what Ready waits for rather than "nothing to do".
            self.step = "await-ready"
            self.waiting.append(ready[2])
        pending = [type(a).__name__ + ": " + a.reason for a in self.actions]
        if self.spec.paused:
            progressing = (ConditionStatus.FALSE, "Paused", "spec.paused is true: observing only")
        elif self.actions or self.waiting:
            progressing = (ConditionStatus.TRUE, self._step_reason(), "; ".join(pending + self.waiting))
        else:
            progressing = (ConditionStatus.FALSE, "Reconciled", "nothing to do")
        if self.blocked:
            degraded = (ConditionStatus.TRUE, self.degraded_reason, "; ".join(self.blocked + self.offline_dirs))
        elif self.offline_dirs:
            degraded = (ConditionStatus.TRUE, "LogDirOffline", "; ".join(self.offline_dirs))
        else:
            degraded = (ConditionStatus.FALSE, "AsExpected", "")
        waiting_for = "; ".join(self.waiting + self.blocked)
        operation = None
        if self.approvals and not self.spec.paused:
            operation = OperationStatus(name=DISK_REPLACEMENT_OPERATION, step="await-approval", waiting_for=waiting_for,
                                        started_at=self._started_at(DISK_REPLACEMENT_OPERATION),
                                        blocked_by=list(self.approvals))
        elif (self.actions or self.waiting) and not self.spec.paused:
            name = "Bootstrap" if ready[0] is not ConditionStatus.TRUE else "Reconcile"
            operation = OperationStatus(name=name, step=self.step, waiting_for=waiting_for,
                                        started_at=self._started_at(name))
        status = status.model_copy(update={"operation": operation})
        status = self.builder.with_conditions(
            status, ready=ready, progressing=progressing, degraded=degraded, paused=self._paused_condition()
        )
        events = list(self.events)
        was_even = self.previous.condition(ConditionType.EVEN_CONTROLLERS) if self.previous is not None else None
        if self.builder.even_warning and (was_even is None or was_even.status is not ConditionStatus.TRUE):
            events.append(Event(EventType.WARNING, "EvenControllerCount", self.builder.even_warning))
        was_idle = self.previous.condition(ConditionType.IDLE_BROKERS) if self.previous is not None else None
        if self.builder.idle_brokers and (was_idle is None or was_idle.status is not ConditionStatus.TRUE):
            events.append(Event(EventType.NORMAL, "BrokersWithoutReplicas", self.builder.idle_brokers))
        if self.degraded_reason == "NodeProblem":  # a refused scale-down said so in its own Warning
            events += [Event(EventType.WARNING, "NodeProblem", b) for b in self.blocked]
        if requeue_after_ms is None:
            busy = self.actions or self.waiting or ready[0] is not ConditionStatus.TRUE
            requeue_after_ms = _BUSY_REQUEUE_MS if busy else _STEADY_REQUEUE_MS
        return Plan(tuple(self.actions), status, tuple(events), requeue_after_ms, waiting_for=waiting_for)

    def _step_reason(self) -> str:
        return {
            "assign-cluster-id": "Initializing",
            "write-config": "WritingConfig",
            "format": "Formatting",
            "start": "Starting",
            "await-quorum": "AwaitingQuorum",
            "await-ready": "AwaitingReady",
            "roll": "RollingRestart",
            "roll-blocked": "RollBlocked",
            "quorum-change": "QuorumChange",
            "metadata-version": "MetadataVersion",
            "scale-down": "ScaleDown",
            "replace-volume": "ReplacingVolume",
            "log-dir-removal": "RemovingLogDir",
            "stale-registrations": "StaleRegistrations",
            "paused": "Paused",
        }.get(self.step, "Observing")


class _StatusBuilder:
    """Builds the published status from facts; keeps each condition's transition time while its
    status stays the same (Kubernetes' convention)."""

    def __init__(self, *, previous: KRaftClusterStatus | None, generation: int | None, now_ms: int) -> None:
        self.previous = previous
        self.generation = generation
        self.now_text = datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.even_warning: str | None = None  # the spec asks for an even number of controllers
        self.idle_brokers: str | None = None  # running brokers that hold no replica (`idle_brokers`)

    def observe_only(
        self,
        *,
        spec: KRaftClusterSpec,
        nodes: tuple[DesiredNode, ...],
        observed: Observed,
        directories: dict[int, list[DirectoryStatus]] | None = None,
    ) -> KRaftClusterStatus:
        previous = self.previous or KRaftClusterStatus()
        cluster = observed.cluster or ClusterFacts()
        node_statuses = []
        wanted = {n.ref.node_id for n in nodes}
        for node in nodes:
            node_id = node.ref.node_id
            facts = observed.nodes.get(node_id) or NodeFacts(node_id=node_id, pool=node.ref.pool)
            recorded = previous.node(node_id)
            dirs = (directories or {}).get(node_id)
            if dirs is None:
                dirs = list(recorded.directories) if recorded is not None else []
            # A directory id, once known, is remembered: it is how a lost volume is recognised.
            remembered = {d.volume_id: d.directory_id for d in (recorded.directories if recorded else ())}
            dirs = [d if d.directory_id or not remembered.get(d.volume_id)
                    else d.model_copy(update={"directory_id": remembered[d.volume_id]}) for d in dirs]
            formatted = bool(dirs) and all(d.directory_id for d in dirs) and len(dirs) == len(node.pool.storage.volumes)
            broker = cluster.brokers.get(node_id) if cluster.brokers is not None else None
            node_statuses.append(
                NodeStatus(
                    id=node_id,
                    pool=node.ref.pool,
                    roles=sorted(node.roles),
                    implementation=node.implementation,
                    phase=facts.phase.value,
                    version=facts.version,
                    formatted=formatted,
                    directories=dirs,
                    registered=(broker is not None) if node.is_broker and cluster.brokers is not None else None,
                    fenced=broker.fenced if broker is not None else None,
                )
            )
        # Nodes the spec no longer wants stay listed until the scale-down has removed them.
        node_statuses += [n for n in previous.nodes if n.id not in wanted]
        node_statuses.sort(key=lambda n: n.id)
        quorum = _quorum_status(cluster.quorum)
        partitions = None
        if cluster.partitions is not None:
            p = cluster.partitions
            partitions = PartitionsStatus(
                total=p.total, under_replicated=p.under_replicated, under_min_isr=p.under_min_isr, offline=p.offline
            )
        target: str | None
        try:
            target = str(target_metadata_version(spec))
        except ValueError:
            target = spec.metadata_version
        controllers = [n for n in nodes if n.is_controller]
        brokers = [n for n in nodes if n.is_broker]
        finalized = cluster.finalized_metadata_version or (
            previous.metadata_version.finalized if previous.metadata_version else None)
        failed = previous.metadata_version if previous.metadata_version is not None else MetadataVersionStatus()
        if failed.failed_bump is None or finalized == target:
            failed = MetadataVersionStatus()  # a refused bump is remembered until the target is finalized
        return previous.model_copy(
            update={
                "observed_generation": self.generation,
                "nodes": node_statuses,
                "quorum": quorum if quorum is not None else previous.quorum,
                "partitions": partitions if partitions is not None else previous.partitions,
                "metadata_version": MetadataVersionStatus(
                    finalized=finalized, target=target, failed_bump=failed.failed_bump, failed_at=failed.failed_at,
                ),
                "controllers": f"{sum(_controller_ready(n, observed) for n in controllers)}/{len(controllers)}",
                "brokers": f"{sum(_broker_ready(n, observed) for n in brokers)}/{len(brokers)}",
            }
        )

    def ready_condition(
        self,
        status: KRaftClusterStatus,
        *,
        spec: KRaftClusterSpec,
        nodes: tuple[DesiredNode, ...],
        observed: Observed,
    ) -> tuple[ConditionStatus, str, str]:
        cluster = observed.cluster
        if cluster is None or cluster.quorum is None or cluster.quorum.leader_id < 0:
            why = "; ".join(cluster.errors) if cluster is not None and cluster.errors else "no quorum leader observed"
            return (ConditionStatus.FALSE, "NoQuorum", why)
        not_ready = [n.ref.node_id for n in nodes if n.is_controller and not _controller_ready(n, observed)]
        not_ready += [n.ref.node_id for n in nodes if n.is_broker and not _broker_ready(n, observed)]
        if not_ready:
            return (ConditionStatus.FALSE, "NodesNotReady", f"node(s) {sorted(set(not_ready))} not ready")
        if cluster.partitions is not None and cluster.partitions.offline:
            return (ConditionStatus.FALSE, "OfflinePartitions", f"{cluster.partitions.offline} partition(s) offline")
        return (
            ConditionStatus.TRUE,
            "Ready",
            f"quorum leader {cluster.quorum.leader_id} in epoch {cluster.quorum.leader_epoch}; "
            f"controllers {status.controllers}, brokers {status.brokers}",
        )

    def with_conditions(
        self,
        status: KRaftClusterStatus,
        *,
        ready: tuple[ConditionStatus, str, str],
        progressing: tuple[ConditionStatus, str, str],
        degraded: tuple[ConditionStatus, str, str],
        paused: tuple[ConditionStatus, str, str],
    ) -> KRaftClusterStatus:
        wanted = {
            ConditionType.READY: ready,
            ConditionType.PROGRESSING: progressing,
            ConditionType.DEGRADED: degraded,
            ConditionType.PAUSED: paused,
            ConditionType.EVEN_CONTROLLERS: (
                (ConditionStatus.TRUE, "EvenControllerCount", self.even_warning) if self.even_warning
                else (ConditionStatus.FALSE, "OddControllerCount", "")
            ),
            ConditionType.IDLE_BROKERS: (
                (ConditionStatus.TRUE, "NoRebalance", self.idle_brokers) if self.idle_brokers
                else (ConditionStatus.FALSE, "EveryBrokerHoldsReplicas", "")
            ),
        }
        conditions = []
        for kind, (state, reason, message) in wanted.items():
            old = status.condition(kind)
            since = old.last_transition_time if old is not None and old.status == state else self.now_text
            conditions.append(
                Condition(
                    type=kind,
                    status=state,
                    reason=reason,
                    message=message[:32768],
                    last_transition_time=since,
                    observed_generation=self.generation,
                )
            )
        return status.model_copy(update={"conditions": conditions})


def idle_brokers(nodes: tuple[DesiredNode, ...], observed: Observed) -> str | None:
    """Why the BrokersWithoutReplicas condition is True: running, unfenced brokers of the spec that
    hold no replica while others do (typically brokers a scale-up added). Kafka never moves
    existing replicas by itself; None when every running broker holds some, or nothing is known."""
    idle = idle_broker_ids(nodes, observed)
    if not idle:
        return None
    return (f"broker(s) {idle} hold no replica: Kafka does not move existing replicas onto brokers that join, "
            "only new partitions go there; move some with a throttled reassignment (kraft reassign-partitions "
            "--generate, then --execute --throttle), or set spec.lifecycle.rebalanceOnScaleUp and the operator "
            "does it")


def idle_broker_ids(nodes: tuple[DesiredNode, ...], observed: Observed) -> list[int]:
    """Running, unfenced brokers of the spec that hold no replica while partitions exist."""
    cluster = observed.cluster
    details = cluster.partition_details if cluster is not None else None
    if cluster is None or not details or cluster.brokers is None:
        return []
    holding = {r for p in details for r in p.replicas}
    return sorted(n.ref.node_id for n in nodes if n.is_broker and _broker_ready(n, observed)
                  and n.ref.node_id not in holding)


def _controller_ready(node: DesiredNode, observed: Observed) -> bool:
    facts = observed.nodes.get(node.ref.node_id)
    if facts is None or facts.phase is not PodPhase.RUNNING:
        return False
    quorum = observed.cluster.quorum if observed.cluster is not None else None
    if quorum is None or quorum.leader_id < 0:
        return False
    return any(r.replica_id == node.ref.node_id for r in (*quorum.voters, *quorum.observers))


def _broker_ready(node: DesiredNode, observed: Observed) -> bool:
    facts = observed.nodes.get(node.ref.node_id)
    if facts is None or facts.phase is not PodPhase.RUNNING:
        return False
    brokers = observed.cluster.brokers if observed.cluster is not None else None
    broker = brokers.get(node.ref.node_id) if brokers is not None else None
    return broker is not None and not broker.fenced


def _quorum_status(quorum: QuorumFacts | None) -> QuorumStatus | None:
    if quorum is None:
        return None
    leader_end = next((v.log_end_offset for v in quorum.voters if v.replica_id == quorum.leader_id), 0)

    def replica(r: ReplicaFacts) -> QuorumReplicaStatus:
        lag = max(0, leader_end - r.log_end_offset)
        return QuorumReplicaStatus(
            id=r.replica_id,
            directory_id=r.directory_id,
            endpoints=list(r.endpoints),
            log_end_offset=r.log_end_offset,
            lag=lag,
            caught_up=r.replica_id == quorum.leader_id or lag == 0,
        )

    return QuorumStatus(
        leader_id=quorum.leader_id,
        leader_epoch=quorum.leader_epoch,
        high_watermark=quorum.high_watermark,
        voters=[replica(v) for v in quorum.voters],
        observers=[replica(o) for o in quorum.observers],
    )


def _initial_controller_ids(initial_controllers: str) -> frozenset[int]:
    return frozenset(int(entry.split("@", 1)[0]) for entry in initial_controllers.split(",") if "@" in entry)


def _random_kafka_uuid(rng: random.Random) -> str:
    """Kafka's Uuid.randomUuid from a handed random.Random: a v4 UUID, not reserved, not starting with '-'."""
    while True:
        value = uuid.UUID(int=rng.getrandbits(128), version=4)
        text = to_kafka_str(value)
        if value not in RESERVED_UUIDS and not text.startswith("-"):
            return text

