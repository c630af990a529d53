"""Disaster-recovery runbooks: their definitions, their detection, and their docs pages.

One definition per situation the operator can detect. The same definition is
- written into `status.runbooks[]` when the situation is detected, with the evidence, the time it
  was first detected, its ordered steps (automated, needing approval, or manual; done or pending)
  and the commands a human would run, filled in for this cluster;
- rendered as a page under `docs/runbooks/` (`render_page`; `scripts/gen-runbook-docs` writes them
  and a test fails when a page differs from its definition).

Steps that can lose data or quorum (unclean leader election, re-forming a quorum from one
survivor with `--standalone`, deleting a PVC) are marked `dangerous` and are never `automated`.
A step is `automated` (the operator does it), `approval` (the operator does it once the
`kraftwerk.io/approve` annotation names it, `<runbook>/<step>`; until then status.operation
.blockedBy names the annotation) or `manual` (the operator never does it; the commands say how).
The approval steps: formatting a lost controller disk (`controller-disk-loss/format-observer`) and
replacing a broker's lost volume (`broker-disk-loss/replace-volume`).

What is detected today: quorum loss, controller and broker disk loss (a volume the status recorded
as formatted is missing, empty, or carries another directory id), a stuck roll, and a broker that
cannot register (exited with a cluster id mismatch, or running for a minute without registering).
A failed metadata.version bump is raised from the refusal the reconciler records in
status.metadataVersion.failedBump.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from kraft_operator.model import (
    APPROVE_ANNOTATION,
    KRaftClusterSpec,
    KRaftClusterStatus,
    RunbookStatus,
    RunbookStepStatus,
    VolumeReplacementStatus,
)
from kraft_operator.plan.actions import Event, EventType
from kraft_operator.plan.facts import Layout, Observed, PodPhase
from kraft_operator.plan.rendering import DesiredNode, controller_endpoint

__all__ = [
    "BROKER_DISK_LOSS",
    "BROKER_DISK_REPLACE_STEP",
    "CONTROLLER_DISK_FORMAT_STEP",
    "CONTROLLER_DISK_LOSS",
    "RUNBOOKS",
    "RunbookDefinition",
    "StepDefinition",
    "approved_steps",
    "detect_runbooks",
    "render_index",
    "render_page",
    "runbook",
]

Mode = Literal["automated", "approval", "manual"]

CONTROLLER_DISK_LOSS = "controller-disk-loss"
CONTROLLER_DISK_FORMAT_STEP = "format-observer"  # the step the approve annotation names
BROKER_DISK_LOSS = "broker-disk-loss"
BROKER_DISK_REPLACE_STEP = "replace-volume"  # the step the approve annotation names

# A broker running this long without a registration is reported (startup takes seconds).
UNREGISTERED_AFTER_MS = 60_000


@dataclass(frozen=True, slots=True)
class StepDefinition:
    id: str
    description: str
    mode: Mode
    dangerous: bool = False


@dataclass(frozen=True, slots=True)
class RunbookDefinition:
    name: str
    title: str
    situation: str
    detection: str
    closes: str
    steps: tuple[StepDefinition, ...]
    commands: tuple[str, ...]


RUNBOOKS: tuple[RunbookDefinition, ...] = (
    RunbookDefinition(
        name="quorum-loss",
        title="Quorum loss",
        situation="No majority of the controller quorum's voters is reachable: the cluster's metadata cannot change "
        "(no topic changes, no leader elections, brokers cannot register).",
        detection="A quorum was observed before, and now DescribeQuorum gets no leader while fewer than a majority of "
        "the voters' pods run. Once open it stays open while no leader is observed, whatever the pods do in between "
        "(a crash-looping pod runs for a moment after each restart).",
        closes="A quorum leader is observed again.",
        steps=(
            StepDefinition("restart-voters", "Start every voter pod that is down (the operator starts failed and "
                           "missing controller pods on its own).", "automated"),
            StepDefinition("await-election", "Wait for the voters to elect a leader once a majority runs.", "automated"),
            StepDefinition("check-voter-disks", "If a voter cannot start because its disk is lost, it cannot rejoin as "
                           "the same voter: follow the controller-disk-loss runbook for it.", "manual"),
            StepDefinition("reform-from-survivor", "Last resort, when a majority of the voters' disks are gone: re-form "
                           "the quorum from one survivor (`kraft storage format --standalone` on a fresh directory "
                           "seeded from it). Every record the survivor lacks is lost.", "manual", dangerous=True),
        ),
        commands=(
            "kubectl get pods -n {namespace} -l kraftwerk.io/cluster={cluster},kraftwerk.io/pool={controller_pool}",
            "kubectl logs -n {namespace} {pod} --tail=100",
            "kubectl exec -n {namespace} {pod} -- kraft metadata-quorum --bootstrap-controller {bootstrap} "
            "describe --status",
            "kubectl exec -n {namespace} {pod} -- kraft metadata-quorum --bootstrap-controller {bootstrap} "
            "describe --replication",
        ),
    ),
    RunbookDefinition(
        name="controller-disk-loss",
        title="Controller disk loss",
        situation="A controller's metadata volume is new or empty: its directory id no longer matches the one the "
        "voter set holds, so it cannot rejoin as that voter.",
        detection="The status recorded a directory id for the controller's volume, and the volume is now missing, "
        "unformatted, or formatted with another directory id.",
        closes="The controller's volume holds the directory id the status records again, or the voter set holds the new one.",
        steps=(
            StepDefinition("confirm-loss", "Confirm the old volume is gone for good (not a detached or slow disk), "
                           "then approve the replacement.", "manual"),
            StepDefinition("format-observer", "Format the new volume with `--no-initial-controllers` (a new directory "
                           "id) and start the controller: it fetches as an observer, never votes with the new disk.",
                           "approval"),
            StepDefinition("await-catch-up", "Wait until the observer has caught up with the leader.", "automated"),
            StepDefinition("swap-voter", "RemoveRaftVoter for the old directory id, then AddRaftVoter for the new one, "
                           "only while the other voters are a caught-up majority (docs/controller-disk-replacement.md "
                           "says why this order never lowers the quorum's fault tolerance).", "automated"),
        ),
        commands=(
            "kubectl exec -n {namespace} {pod} -- kraft storage info --config /etc/kraftwerk/server.properties",
            "kubectl exec -n {namespace} {pod} -- kraft metadata-quorum --bootstrap-controller {bootstrap} "
            "describe --replication",
            "kubectl exec -n {namespace} {pod} -- kraft metadata-quorum --bootstrap-controller {bootstrap} "
            "remove-controller --controller-id {node} --controller-directory-id {directory}",
            "kubectl exec -n {namespace} {pod} -- kraft metadata-quorum --bootstrap-controller {bootstrap} "
            "add-controller --config /etc/kraftwerk/server.properties",
        ),
    ),
    RunbookDefinition(
        name="broker-disk-loss",
        title="Broker disk loss",
        situation="A broker's log directory is new or empty: the replicas it held there are gone from this broker "
        "and are under-replicated until they are copied back.",
        detection="The status recorded a directory id for the broker's volume, and the volume is now missing, "
        "unformatted, or formatted with another directory id. While the operator replaces it, "
        "status.operation (BrokerVolumeReplacement) names the volume and the step.",
        closes="The broker's volume is formatted again, the broker is back in every ISR and URP is back to 0.",
        steps=(
            StepDefinition("confirm-loss", "Confirm the old volume is gone for good.", "manual"),
            StepDefinition("replace-volume", "Once no partition would drop below min.insync.replicas without the "
                           "broker and no other replica is missing, stop the broker (controlled shutdown) and put a "
                           "new, empty volume in the failed one's place (the failed PVC is deleted; locally the old "
                           "directory is kept aside). Deleting a PVC destroys whatever it still holds.", "approval",
                           dangerous=True),
            StepDefinition("format-and-restart", "Format the new directory with a new directory id "
                           "(`--ignore-formatted` keeps the broker's other directories) and start the broker.",
                           "automated"),
            StepDefinition("await-replication", "Wait until the broker is back in every ISR and URP is 0: its lost "
                           "replicas were fetched again from their leaders.", "automated"),
        ),
        commands=(
            "kubectl get pvc -n {namespace} -l kraftwerk.io/cluster={cluster},kraftwerk.io/node-id={node}",
            "kubectl exec -n {namespace} {pod} -- kraft storage info --config /etc/kraftwerk/server.properties",
            "kubectl exec -n {namespace} {pod} -- kraft topics --bootstrap-server localhost:9092 --describe "
            "--under-replicated-partitions",
        ),
    ),
    RunbookDefinition(
        name="stuck-roll",
        title="Stuck rolling restart",
        situation="A rolling restart has waited longer than spec.lifecycle.stuckRollAfterSeconds: a gate stays closed "
        "(a partition at min ISR, URP above 0, a lagging voter) or a restarted node does not recover.",
        detection="status.operation.roll has been blocked, or has awaited a node's recovery, for longer than the "
        "configured time. status.operation.blockedBy names what holds it.",
        closes="The roll moves on (or finishes).",
        steps=(
            StepDefinition("keep-checking", "The operator keeps re-checking the gates every reconcile; it never skips "
                           "one.", "automated"),
            StepDefinition("fix-blocker", "Fix what blockedBy names: bring the missing replica or voter back, or "
                           "lower the topic's min.insync.replicas if that is what you want.", "manual"),
            StepDefinition("pause", "To stop the roll while you investigate, set the "
                           "kraftwerk.io/pause-reconciliation=true annotation.", "manual"),
            StepDefinition("unclean-election", "Only if a partition has no in-sync replica left and its data may be "
                           "given up: unclean leader election for that partition. Acknowledged records can be lost.",
                           "manual", dangerous=True),
        ),
        commands=(
            "kubectl describe kc -n {namespace} {cluster}",
            "kubectl get kc -n {namespace} {cluster} -o jsonpath='{{.status.operation.blockedBy}}'",
            "kubectl exec -n {namespace} {pod} -- kraft topics --bootstrap-server localhost:9092 --describe "
            "--under-min-isr-partitions",
            "kubectl exec -n {namespace} {pod} -- kraft metadata-quorum --bootstrap-controller {bootstrap} "
            "describe --replication",
            "kubectl annotate kc -n {namespace} {cluster} kraftwerk.io/pause-reconciliation=true",
        ),
    ),
    RunbookDefinition(
        name="failed-metadata-version-bump",
        title="Failed metadata.version bump",
        situation="UpdateFeatures refused to finalize the target metadata.version (a node does not support it, or a "
        "stale registration holds it back).",
        detection="The active controller refused the operator's UpdateFeatures for metadata.version; "
        "status.metadataVersion.failedBump holds Kafka's reason until the target is finalized.",
        closes="The finalized metadata.version equals the target.",
        steps=(
            StepDefinition("find-holdout", "Find the node whose supported range stops below the target (status names "
                           "it), and roll it to a version that supports the target.", "manual"),
            StepDefinition("unregister-stale", "Unregister stale brokers or controllers that are no longer part of the "
                           "cluster (KAFKA-20395).", "manual"),
            StepDefinition("retry-bump", "The operator retries the bump at each reconcile while nothing else is under "
                           "way; it succeeds once every registration supports the target.", "automated"),
        ),
        commands=(
            "kubectl exec -n {namespace} {pod} -- kraft features --bootstrap-controller {bootstrap} describe",
            "kubectl exec -n {namespace} {pod} -- kraft metadata-quorum --bootstrap-controller {bootstrap} "
            "describe --status",
        ),
    ),
    RunbookDefinition(
        name="broker-cannot-register",
        title="Broker cannot register",
        situation="A broker runs (or keeps exiting) but the controllers never see its registration, for example "
        "because its volume belongs to another cluster id.",
        detection="A broker exited with a cluster id mismatch, or has run for a minute while a quorum leader exists "
        "and DescribeCluster does not list it.",
        closes="The broker is registered.",
        steps=(
            StepDefinition("read-log", "Read the broker's log for the refusal (INCONSISTENT_CLUSTER_ID, "
                           "a duplicate broker id, an unsupported metadata.version).", "manual"),
            StepDefinition("check-storage", "Compare `kraft storage info` on the broker with the cluster id in status.",
                           "manual"),
            StepDefinition("replace-volume", "If the volume belongs to another cluster, replace it (delete the PVC). "
                           "Deleting a PVC destroys whatever it still holds.", "manual", dangerous=True),
        ),
        commands=(
            "kubectl logs -n {namespace} {pod} --tail=200",
            "kubectl exec -n {namespace} {pod} -- kraft storage info --config /etc/kraftwerk/server.properties",
            "kubectl exec -n {namespace} {pod} -- kraft metadata-quorum --bootstrap-controller {bootstrap} "
            "describe --status",
        ),
    ),
)


def runbook(name: str) -> RunbookDefinition:
    found = next((r for r in RUNBOOKS if r.name == name), None)
    if found is None:
        raise KeyError(f"no runbook named {name!r}")
    return found


def approved_steps(annotations: Mapping[str, str]) -> frozenset[str]:
    """The `<runbook>/<step>` names (or other approvals) the `kraftwerk.io/approve` annotation lists."""
    return frozenset(v.strip() for v in annotations.get(APPROVE_ANNOTATION, "").split(",") if v.strip())


def _status(
    definition: RunbookDefinition,
    *,
    evidence: Sequence[str],
    values: Mapping[str, str],
    done: frozenset[str],
    approved: frozenset[str],
    previous: KRaftClusterStatus | None,
    now_text: str,
) -> RunbookStatus:
    earlier = next((r for r in (previous.runbooks if previous is not None else ()) if r.name == definition.name), None)
    steps = []
    for step in definition.steps:
        key = f"{definition.name}/{step.id}"
        state = "done" if step.id in done else "approved" if step.mode == "approval" and key in approved else "pending"
        steps.append(RunbookStepStatus.model_validate({
            "id": step.id, "description": step.description, "mode": step.mode, "dangerous": step.dangerous,
            "approval": f'{APPROVE_ANNOTATION}="{key}"' if step.mode == "approval" else None, "state": state,
        }))
    return RunbookStatus(
        name=definition.name,
        title=definition.title,
        situation=definition.situation,
        evidence=list(evidence),
        detected_at=earlier.detected_at if earlier is not None else now_text,
        steps=steps,
        commands=[c.format_map(values) for c in definition.commands],
        docs=f"docs/runbooks/{definition.name}.md",
    )


def detect_runbooks(
    *,
    spec: KRaftClusterSpec,
    nodes: Sequence[DesiredNode],
    observed: Observed,
    previous: KRaftClusterStatus | None,
    layout: Layout,
    annotations: Mapping[str, str],
    stuck_roll: Sequence[str],
    now_ms: int,
    now_text: str,
    pod_name: str = "{cluster}-{pool}-{node}",
    volume_replacement: VolumeReplacementStatus | None = None,
) -> tuple[list[RunbookStatus], list[Event]]:
    """The runbooks open now, and Events for those that opened or closed since `previous`.
    `volume_replacement` is a broker volume being replaced: broker-disk-loss stays open, its steps
    marked, until the replacement has finished (the broker back in every ISR, URP 0)."""
    if previous is None or previous.cluster_id is None:
        return [], []
    controllers = [n for n in nodes if n.is_controller]
    namespace, cluster = (nodes[0].ref.namespace, nodes[0].ref.cluster) if nodes else ("default", "")
    bootstrap = ",".join(
        f"{host}:{port}" for host, port in (controller_endpoint(n, spec=spec, layout=layout) for n in controllers)
    )

    def values(node: DesiredNode | None, **extra: str) -> dict[str, str]:
        target = node or (controllers[0] if controllers else None)
        pod = pod_name.format(cluster=cluster, pool=target.ref.pool, node=target.ref.node_id) if target else ""
        return {"namespace": namespace, "cluster": cluster, "pod": pod, "bootstrap": bootstrap,
                "node": str(target.ref.node_id) if target else "",
                "controller_pool": controllers[0].ref.pool if controllers else "", "directory": "", **extra}

    approved = approved_steps(annotations)
    found: list[RunbookStatus] = []
    facts = observed.cluster
    quorum = facts.quorum if facts is not None else None

    def running(node: DesiredNode) -> bool:
        seen = observed.nodes.get(node.ref.node_id)
        return seen is not None and seen.phase is PodPhase.RUNNING

    # -- quorum loss
    voter_ids = [v.id for v in previous.quorum.voters] if previous.quorum is not None else []
    voter_nodes = [n for n in controllers if n.ref.node_id in voter_ids] or controllers
    up = [n for n in voter_nodes if running(n)]
    # Once open it stays open until a leader is observed (its `closes`): voters that crash-loop
    # show as running for a moment between their restarts, which must not close and reopen it.
    was_open = any(r.name == "quorum-loss" for r in previous.runbooks)
    if previous.quorum is not None and (quorum is None or quorum.leader_id < 0) and (
            len(up) * 2 <= len(voter_nodes) or was_open):
        down = [n for n in voter_nodes if not running(n)]
        phases = ", ".join(
            f"{n.ref.node_id} ({(observed.nodes[n.ref.node_id].phase if n.ref.node_id in observed.nodes else PodPhase.ABSENT).value})"
            for n in down
        ) or "none now (they run, and elect no leader)"
        evidence = [
            f"voters {sorted(n.ref.node_id for n in voter_nodes)}; down: {phases}",
            f"{len(up)} of {len(voter_nodes)} voters run; a majority is {len(voter_nodes) // 2 + 1}",
        ]
        evidence += [f"DescribeQuorum: {e}" for e in (facts.errors if facts is not None else ())][:3]
        done = frozenset({"restart-voters"}) if not down else frozenset()
        found.append(_status(runbook("quorum-loss"), evidence=evidence, values=values(up[0] if up else None),
                             done=done, approved=approved, previous=previous, now_text=now_text))

    # -- disk loss (controllers and brokers)
    for kind, group in (("controller-disk-loss", controllers), ("broker-disk-loss", [n for n in nodes if not n.is_controller])):
        lost: list[str] = []
        first: DesiredNode | None = None
        directory = ""
        for node in group:
            recorded = previous.node(node.ref.node_id)
            seen = observed.nodes.get(node.ref.node_id)
            if recorded is None:
                continue
            for d in recorded.directories:
                if not d.directory_id:
                    continue
                volume = seen.volume(d.volume_id) if seen is not None else None
                offline = facts.offline_log_dir(node.ref.node_id, d.path) if facts is not None else None
                if volume is None or not volume.formatted:
                    state = "missing" if volume is None else "empty"
                elif volume.directory_id != d.directory_id:
                    state = f"formatted with directory id {volume.directory_id}"
                elif offline is not None:
                    state = f"offline: the broker reports {offline} for it (DescribeLogDirs)"
                elif (kind == BROKER_DISK_LOSS and seen is not None and d.volume_id == node.pool.storage.volumes[0].id
                      and (halted := seen.halted_on(d.path)) is not None):
                    state = (f"failed: the broker halted on its metadata log directory (exit code {seen.exit_code}: "
                             f"{halted[-300:]})")
                else:
                    continue
                lost.append(f"node {node.ref.node_id} volume {d.volume_id} ({d.path}): directory id {d.directory_id} "
                            f"recorded, the volume is now {state}")
                if first is None:
                    first, directory = node, d.directory_id
        steps_done: frozenset[str] = frozenset()
        if kind == BROKER_DISK_LOSS and volume_replacement is not None:
            v = volume_replacement
            first = first or next((n for n in nodes if n.ref.node_id == v.node_id), None)
            directory = directory or v.lost_directory_id
            if v.replaced_at is not None:
                lost.append(f"node {v.node_id} volume {v.volume_id} ({v.path}): replaced at {v.replaced_at}"
                            + (f", formatted with directory id {v.new_directory_id}; its replicas re-replicate"
                               if v.new_directory_id else ""))
            steps_done = frozenset({"confirm-loss", BROKER_DISK_REPLACE_STEP} if v.replaced_at is not None else ())
            steps_done |= {"format-and-restart"} if v.new_directory_id else set()
        if lost:
            found.append(_status(runbook(kind), evidence=lost, values=values(first, directory=directory),
                                 done=steps_done, approved=approved, previous=previous, now_text=now_text))

    # -- a refused metadata.version bump (the reconciler records Kafka's refusal)
    version = previous.metadata_version
    finalized = (facts.finalized_metadata_version if facts is not None else None) or (version.finalized if version else None)
    if version is not None and version.failed_bump is not None and finalized != version.target:
        evidence = [version.failed_bump, f"finalized {finalized}, target {version.target}"]
        if version.failed_at:
            evidence[0] += f" (at {version.failed_at})"
        found.append(_status(runbook("failed-metadata-version-bump"), evidence=evidence, values=values(None),
                             done=frozenset(), approved=approved, previous=previous, now_text=now_text))

    # -- stuck roll
    if stuck_roll:
        found.append(_status(runbook("stuck-roll"), evidence=list(stuck_roll), values=values(None),
                             done=frozenset({"keep-checking"}), approved=approved, previous=previous,
                             now_text=now_text))

    # -- a broker that cannot register
    brokers = facts.brokers if facts is not None else None
    stuck_brokers: list[str] = []
    first_broker: DesiredNode | None = None
    for node in nodes:
        if not node.is_broker:
            continue
        seen = observed.nodes.get(node.ref.node_id)
        if seen is None:
            continue
        refused = seen.phase is PodPhase.FAILED and "cluster" in seen.message.lower() and "id" in seen.message.lower()
        silent = (
            seen.phase is PodPhase.RUNNING and seen.started_at_ms is not None
            and now_ms - seen.started_at_ms >= UNREGISTERED_AFTER_MS
            and quorum is not None and quorum.leader_id >= 0 and brokers is not None
            and node.ref.node_id not in brokers
        )
        if refused:
            stuck_brokers.append(f"broker {node.ref.node_id} exited: {seen.message}")
        elif silent:
            running_s = (now_ms - (seen.started_at_ms or now_ms)) // 1000
            stuck_brokers.append(f"broker {node.ref.node_id} has run {running_s} s and is not registered")
        else:
            continue
        first_broker = first_broker or node
    if stuck_brokers:
        found.append(_status(runbook("broker-cannot-register"), evidence=stuck_brokers, values=values(first_broker),
                             done=frozenset(), approved=approved, previous=previous, now_text=now_text))

    before = {r.name for r in previous.runbooks}
    now_open = {r.name for r in found}
    events = [Event(EventType.WARNING, "RunbookOpened", f"{r.title}: {'; '.join(r.evidence)} (see {r.docs})")
              for r in found if r.name not in before]
    events += [Event(EventType.NORMAL, "RunbookClosed", f"{name}: {runbook(name).closes}")
               for name in sorted(before - now_open) if any(d.name == name for d in RUNBOOKS)]
    return found, events


_PLACEHOLDERS = {
    "namespace": "<namespace>", "cluster": "<cluster>", "pod": "<pod>", "bootstrap": "<controller-host:port,...>",
    "node": "<node-id>", "controller_pool": "<controller-pool>", "directory": "<old-directory-id>",
}


def render_page(definition: RunbookDefinition) -> str:
    """The docs page of one runbook (docs/runbooks/<name>.md), generated from its definition."""
    lines = [
        f"# Runbook: {definition.title}",
        "",
        "<!-- Generated by scripts/gen-runbook-docs from kraft_operator.plan.runbooks; do not edit. -->",
        "",
        f"`status.runbooks[].name`: `{definition.name}`",
        "",
        "## Situation",
        "",
        definition.situation,
        "",
        "## How the operator detects it",
        "",
        definition.detection,
        "",
        "## When it closes",
        "",
        definition.closes,
        "",
        "## Steps",
        "",
    ]
    for index, step in enumerate(definition.steps, start=1):
        how = {
            "automated": "automated: the operator does it",
            "approval": f'needs approval: `kubectl annotate kc <cluster> {APPROVE_ANNOTATION}="{definition.name}/{step.id}"`',
            "manual": "manual: the operator never does it",
        }[step.mode]
        danger = " **Dangerous: can lose data or quorum.**" if step.dangerous else ""
        lines.append(f"{index}. **{step.id}** ({how}).{danger} {step.description}")
    lines += ["", "## Commands a human would run", "", "```sh"]
    lines += [c.format_map(_PLACEHOLDERS) for c in definition.commands]
    lines += ["```", ""]
    return "\n".join(lines)


def render_index() -> str:
    """docs/runbooks/README.md: every runbook, one line each."""
    lines = [
        "# Disaster-recovery runbooks",
        "",
        "<!-- Generated by scripts/gen-runbook-docs from kraft_operator.plan.runbooks; do not edit. -->",
        "",
        "The operator writes an open runbook into `status.runbooks[]` when it detects the situation, with",
        "the evidence, the time it was detected, its steps (automated, needing approval, or manual; done or",
        "pending) and the commands filled in for the cluster. These pages come from the same definitions.",
        "",
    ]
    lines += [f"- [{d.title}]({d.name}.md) (`{d.name}`): {d.situation}" for d in RUNBOOKS]
    lines.append("")
    return "\n".join(lines)
