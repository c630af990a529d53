"""Rolling restarts: which nodes must restart, in which order, one at a time, behind the gates.

A node must restart when the revision it runs differs from the one its spec asks for (a change of
image, version or rendered server.properties: `node_revision`, compared by `revision_change`), when its pod carries the
`kraftwerk.io/manual-rolling-update` annotation, or when the cluster carries it with a value whose
roll has not finished yet (`status.lastManualRoll` records the last finished one).

Order: nodes already down first (no gate: restarting them cannot reduce availability, and a roll
never waits on a dead pod), then controllers (followers by id, the active controller last), then
brokers by id. Each node passes its gates (`kraft_operator.plan.gates`) before it restarts, and the
roll waits until the cluster says the node has recovered before it moves on.

The roll's memory is `status.operation.roll`, and it is written before every act (persist before
act, as the bootstrap does):

    gating             -> pick the next node whose gates are open; record it as `current` in phase
                          `restarting`, and act on nothing yet
    restarting         -> re-check its gates on fresh facts; RestartNode, phase `awaiting-recovery`
    awaiting-recovery  -> wait until the node is back (running, caught up, registered, unfenced, in
                          every ISR); then `done`, and gating again

So the only node an operator that died at any point can have disrupted is the one status names as
`current`, and a restarted operator resumes at the step status recorded. A node in `restarting`
that already runs its target revision was restarted by an operator that died before it could say
so: it goes straight to awaiting-recovery.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kraft_operator.model import (
    MANUAL_ROLL_ANNOTATION,
    BlockerStatus,
    KRaftClusterSpec,
    KRaftClusterStatus,
    OperationStatus,
    RollStatus,
)
from kraft_operator.plan.actions import Event, EventType, RestartNode
from kraft_operator.plan.facts import Observed, PodPhase
from kraft_operator.plan.gates import (
    DEFAULT_FETCH_TIMEOUT_MS,
    broker_gate,
    controller_gate,
    is_down,
    not_recovered,
    running_since,
)
from kraft_operator.plan.rendering import DesiredNode

__all__ = [
    "BOOTSTRAP_SERVERS_KEY",
    "ROLL_OPERATION",
    "RollDecision",
    "fetch_timeout_ms",
    "node_revision",
    "plan_roll",
    "revision_change",
    "rfc3339_ms",
]

ROLL_OPERATION = "RollingRestart"


BOOTSTRAP_SERVERS_KEY = "controller.quorum.bootstrap.servers"


def node_revision(properties: Mapping[str, str], *, image: str, version: str) -> str:
    """What a node runs: a digest of its image, version and rendered server.properties without
    `controller.quorum.bootstrap.servers`, then `/` and that list as it is.

    The bootstrap servers are kept apart because every KIP-853 controller change rewrites them on
    every node, and a running node does not need the new list: a voter learns the voter set from
    the metadata log, and an observer (a broker) asks its bootstrap servers only to find a leader
    it does not know. A list that holds a majority of the controllers always holds one that runs
    while the quorum does (two majorities share a member), so `revision_change` restarts a node for
    its bootstrap servers only once they reach fewer than a majority of the cluster's controllers;
    the new list applies at the node's next start either way (its stored config is rewritten)."""
    digest = hashlib.sha256()
    kept = sorted((k, v) for k, v in properties.items() if k != BOOTSTRAP_SERVERS_KEY)
    for part in (image, version, *(f"{k}={v}" for k, v in kept)):
        digest.update(part.encode())
        digest.update(b"\n")
    return f"{digest.hexdigest()[:16]}/{properties.get(BOOTSTRAP_SERVERS_KEY, '')}"


def revision_change(started: str, target: str) -> str | None:
    """Why a node started on revision `started` must restart to run `target` (`node_revision`),
    None when it need not: the digests differ (image, version or server.properties), or the
    bootstrap servers it started with reach fewer than a majority of the target's. A revision from
    before the bootstrap servers were kept apart has no `/` and differs in its digest."""
    started_digest, _, started_servers = started.partition("/")
    target_digest, _, target_servers = target.partition("/")
    if started_digest != target_digest:
        return f"its revision {started_digest} differs from {target_digest} (image, version or server.properties)"
    wanted = [s for s in target_servers.split(",") if s]
    reached = set(wanted) & {s for s in started_servers.split(",") if s}
    if not wanted or len(reached) * 2 > len(wanted):
        return None
    return (f"it started with {BOOTSTRAP_SERVERS_KEY}={started_servers}, which reaches {len(reached)} of the "
            f"{len(wanted)} controllers ({target_servers}); a majority is needed")


def fetch_timeout_ms(spec: KRaftClusterSpec) -> int:
    """`controller.quorum.fetch.timeout.ms` as the spec sets it (validated elsewhere)."""
    try:
        return int(spec.config.get("controller.quorum.fetch.timeout.ms", DEFAULT_FETCH_TIMEOUT_MS))
    except ValueError:
        return DEFAULT_FETCH_TIMEOUT_MS


def rfc3339_ms(text: str) -> int:
    """Milliseconds since the epoch of a status time (`%Y-%m-%dT%H:%M:%SZ`, or with `.fff`)."""
    form = "%Y-%m-%dT%H:%M:%S.%fZ" if "." in text else "%Y-%m-%dT%H:%M:%SZ"
    return round(datetime.strptime(text, form).replace(tzinfo=UTC).timestamp() * 1000)


def _rfc3339_text(now_ms: int) -> str:
    """A status time with milliseconds: a restart's time is compared with a voter's caught-up
    time, and a second's resolution would count a caught-up time from just before it."""
    moment = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now_ms % 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class RollDecision:
    """What the roll does this reconcile. `operation` is None when no roll is under way; `stuck`
    holds the evidence once a roll has waited longer than `spec.lifecycle.stuckRollAfterSeconds`."""

    actions: tuple[RestartNode, ...] = ()
    events: tuple[Event, ...] = ()
    operation: OperationStatus | None = None
    waiting: str = ""
    step: str = ""
    last_manual_roll: str | None = None
    stuck: tuple[str, ...] = ()
    stuck_since: str | None = None
    requeue_now: bool = False


@dataclass
class _Roll:
    spec: KRaftClusterSpec
    nodes: Sequence[DesiredNode]
    observed: Observed
    previous: KRaftClusterStatus | None
    revisions: Mapping[int, str]
    manual: str | None
    now_ms: int
    now_text: str
    events: list[Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.timeout_ms = fetch_timeout_ms(self.spec)
        self.cluster = self.observed.cluster
        self.by_id = {n.ref.node_id: n for n in self.nodes}
        prev_op = self.previous.operation if self.previous is not None else None
        self.prev_op = prev_op if prev_op is not None and prev_op.name == ROLL_OPERATION else None
        self.prev = self.prev_op.roll if self.prev_op is not None else None
        last = self.previous.last_manual_roll if self.previous is not None else None
        self.manual_active = self.manual is not None and self.manual != last
        self.trigger = f"{MANUAL_ROLL_ANNOTATION}={self.manual}" if self.manual_active else "revision"
        same = self.prev is not None and self.prev.trigger == self.trigger
        self.done: list[int] = list(self.prev.done) if self.prev is not None and same else []

    # -- what must restart, and why --------------------------------------------------------------
    def why(self, node: DesiredNode) -> str | None:
        facts = self.observed.nodes.get(node.ref.node_id)
        if facts is None or facts.phase is not PodPhase.RUNNING:
            return None  # not running: the bootstrap starts it, from its current config
        node_id = node.ref.node_id
        target = self.revisions[node_id]
        change = revision_change(facts.started_revision, target) if facts.started_revision is not None else None
        if change is not None:
            return change
        if facts.restart_requested:
            return f"its pod carries {MANUAL_ROLL_ANNOTATION}"
        if self.manual_active and node_id not in self.done:
            return f"the cluster carries {MANUAL_ROLL_ANNOTATION}={self.manual}"
        return None

    def down(self, node: DesiredNode) -> bool:
        return is_down(node.ref.node_id, controller=node.is_controller, broker=node.is_broker,
                       facts=self.observed.nodes.get(node.ref.node_id), cluster=self.cluster, now_ms=self.now_ms,
                       fetch_timeout_ms=self.timeout_ms)

    def tiers(self, candidates: list[DesiredNode]) -> list[list[DesiredNode]]:
        """Down nodes; controller followers; the active controller; brokers."""
        leader = self.cluster.quorum.leader_id if self.cluster is not None and self.cluster.quorum is not None else -1
        down = [n for n in candidates if self.down(n)]
        up = [n for n in candidates if n not in down]
        followers = [n for n in up if n.is_controller and n.ref.node_id != leader]
        active = [n for n in up if n.is_controller and n.ref.node_id == leader]
        brokers = [n for n in up if not n.is_controller]
        return [t for t in (down, followers, active, brokers) if t]

    def gate(self, node: DesiredNode) -> list[BlockerStatus]:
        if self.down(node):
            return []
        blockers: list[BlockerStatus] = []
        if node.is_controller:
            quorum = self.cluster.quorum if self.cluster is not None else None
            blockers += controller_gate(node.ref.node_id, quorum=quorum, running=running_since(self.observed.nodes),
                                        now_ms=self.now_ms, fetch_timeout_ms=self.timeout_ms)
        if node.is_broker:
            blockers += broker_gate(node.ref.node_id, cluster=self.cluster)
        return blockers

    def recovery(self, node: DesiredNode, *, restarted_at: str | None) -> list[BlockerStatus]:
        since_ms = rfc3339_ms(restarted_at) if restarted_at else self.now_ms
        return not_recovered(node.ref.node_id, controller=node.is_controller, broker=node.is_broker,
                             facts=self.observed.nodes.get(node.ref.node_id), cluster=self.cluster,
                             now_ms=self.now_ms, fetch_timeout_ms=self.timeout_ms, since_ms=since_ms)

    # -- the decision ----------------------------------------------------------------------------
    def decide(self, *, paused: bool) -> RollDecision:
        prev = self.prev
        if paused:
            # Observe only: the roll's state stays exactly as recorded, to resume when unpaused.
            if self.prev_op is None:
                return RollDecision()
            return RollDecision(operation=self.prev_op.model_copy(update={"step": "paused"}),
                                waiting="reconciliation is paused", step="paused")
        current = self.by_id.get(prev.current) if prev is not None and prev.current is not None else None
        if current is not None and prev is not None and prev.phase == "awaiting-recovery":
            blockers = self.recovery(current, restarted_at=prev.restarted_at)
            if blockers:
                since = prev.restarted_at or self.now_text
                return self._waiting(current=current, phase="awaiting-recovery", blockers=blockers, since=since,
                                     restarted_at=since, what=f"node {current.ref.node_id} to recover after its restart")
            self.events.append(Event(EventType.NORMAL, "NodeRecovered",
                                     f"node {current.ref.node_id} is back: caught up, registered and in its ISRs"))
            if current.ref.node_id not in self.done:
                self.done.append(current.ref.node_id)
            current = None
        if current is not None and prev is not None and prev.phase == "restarting":
            facts = self.observed.nodes.get(current.ref.node_id)
            target = self.revisions[current.ref.node_id]
            if facts is not None and facts.started_revision == target and self.why(current) is None:
                # Restarted by an operator that died before recording it: wait for it to recover.
                restarted = _rfc3339_text(self.now_ms)
                return self._waiting(current=current, phase="awaiting-recovery",
                                     blockers=self.recovery(current, restarted_at=restarted),
                                     since=restarted, restarted_at=restarted,
                                     what=f"node {current.ref.node_id} to recover after its restart")
            reason = self.why(current)
            if reason is not None:
                blockers = self.gate(current)
                if not blockers:
                    return self._restart(current, reason=reason)
                # The world changed since the gate opened: back to gating.
        candidates = [n for n in self.nodes if self.why(n) is not None]
        if not candidates:
            absent = [n for n in self.nodes if (f := self.observed.nodes.get(n.ref.node_id)) is None
                      or f.phase is not PodPhase.RUNNING]
            if absent and self.prev_op is not None:
                # A node that is down (a crash loop the bootstrap restarts) has not run the roll's
                # target yet: the roll is done only once it runs (and, in a manual roll, restarted).
                blockers = [BlockerStatus(kind="node", node_id=n.ref.node_id,
                                          message=f"node {n.ref.node_id} is not running; the roll ends once it runs")
                            for n in absent]
                since = prev.blocked_since if prev is not None and prev.current is None and prev.blocked_since \
                    else self.now_text
                return self._waiting(current=None, phase="gating", blockers=blockers, since=since, restarted_at=None,
                                     what="; ".join(b.message for b in blockers), candidates=[])
            return self._finished()
        blocked: list[BlockerStatus] = []
        for tier in self.tiers(candidates):
            for node in tier:
                blockers = self.gate(node)
                if not blockers:
                    return self._choose(node, candidates=candidates)
                for b in blockers:
                    if b not in blocked:
                        blocked.append(b)
            break  # a later tier never overtakes a blocked one (controllers before brokers)
        first = self.tiers(candidates)[0]
        since = prev.blocked_since if prev is not None and prev.current is None and prev.blocked_since else self.now_text
        names = ", ".join(str(n.ref.node_id) for n in first)
        message = f"node(s) {names} may not restart yet: " + "; ".join(b.message for b in blocked)
        self.events.append(Event(EventType.WARNING, "RollBlocked", message))
        return self._waiting(current=None, phase="gating", blockers=blocked, since=since, restarted_at=None,
                             what=message, candidates=candidates)

    def _pending(self, candidates: list[DesiredNode]) -> list[int]:
        return [n.ref.node_id for tier in self.tiers(candidates) for n in tier]

    def _status(
        self, *, pending: list[int], current: int | None, phase: str, restarted_at: str | None,
        blocked_since: str | None,
    ) -> RollStatus:
        return RollStatus.model_validate({
            "trigger": self.trigger, "pending": pending, "done": list(self.done), "current": current,
            "phase": phase, "restarted_at": restarted_at, "blocked_since": blocked_since,
        })

    def _operation(self, *, step: str, roll: RollStatus, blockers: list[BlockerStatus]) -> OperationStatus:
        started = self.prev_op.started_at if self.prev_op is not None else self.now_text
        return OperationStatus(name=ROLL_OPERATION, step=step, started_at=started, blocked_by=blockers, roll=roll)

    def _choose(self, node: DesiredNode, *, candidates: list[DesiredNode]) -> RollDecision:
        node_id = node.ref.node_id
        roll = self._status(pending=self._pending(candidates), current=node_id, phase="restarting",
                            restarted_at=None, blocked_since=None)
        why = self.why(node) or ""
        self.events.append(Event(EventType.NORMAL, "RollNext", f"node {node_id} restarts next: {why}"))
        return RollDecision(events=tuple(self.events), operation=self._operation(step="restarting", roll=roll, blockers=[]),
                            waiting=f"node {node_id} to restart (recorded before acting)", step="roll",
                            requeue_now=True)

    def _restart(self, node: DesiredNode, *, reason: str) -> RollDecision:
        node_id = node.ref.node_id
        candidates = [n for n in self.nodes if self.why(n) is not None and n is not node]
        grace_ms = self.spec.lifecycle.termination_grace_period_seconds * 1000
        action = RestartNode(
            node=node.ref, implementation=node.implementation, roles=node.roles, revision=self.revisions[node_id],
            grace_period_ms=grace_ms, reason=f"node {node_id}: controlled restart (SIGTERM, {grace_ms} ms grace): {reason}",
        )
        self.events.append(Event(EventType.NORMAL, "RestartNode", action.reason))
        if self.down(node):
            # Already down when restarted: the restart cannot reduce availability (no gate held it),
            # and waiting for its recovery would hold the roll for as long as the node stays down,
            # the deadlock Koperator #533 describes. It counts as done at once; the gates of the
            # nodes after it still see it down, and the roll ends only once it runs.
            if node_id not in self.done:
                self.done.append(node_id)
            roll = self._status(pending=self._pending(candidates), current=None, phase="gating",
                                restarted_at=None, blocked_since=None)
            return RollDecision(actions=(action,), events=tuple(self.events),
                                operation=self._operation(step="restarting", roll=roll, blockers=[]),
                                waiting=f"node {node_id} was down and is restarted; the roll goes on without "
                                        "waiting for its recovery", step="roll")
        roll = self._status(pending=self._pending(candidates), current=node_id, phase="awaiting-recovery",
                            restarted_at=_rfc3339_text(self.now_ms), blocked_since=None)
        return RollDecision(actions=(action,), events=tuple(self.events),
                            operation=self._operation(step="awaiting-recovery", roll=roll, blockers=[]),
                            waiting=f"node {node_id} to recover after its restart", step="roll")

    def _waiting(
        self,
        *,
        current: DesiredNode | None,
        phase: str,
        blockers: list[BlockerStatus],
        since: str,
        restarted_at: str | None,
        what: str,
        candidates: list[DesiredNode] | None = None,
    ) -> RollDecision:
        if candidates is None:
            candidates = [n for n in self.nodes if self.why(n) is not None and n is not current]
        roll = self._status(pending=self._pending(candidates), current=current.ref.node_id if current else None,
                            phase=phase, restarted_at=restarted_at, blocked_since=since)
        step = "blocked" if current is None else phase
        stuck: tuple[str, ...] = ()
        if self.now_ms - rfc3339_ms(since) >= self.spec.lifecycle.stuck_roll_after_seconds * 1000:
            stuck = (what, *(b.message for b in blockers))
        details = "; ".join(b.message for b in blockers)
        return RollDecision(events=tuple(self.events), operation=self._operation(step=step, roll=roll, blockers=blockers),
                            waiting=what if current is None else f"{what}: {details}" if details else what,
                            step="roll-blocked" if current is None else "roll", stuck=stuck, stuck_since=since)

    def _finished(self) -> RollDecision:
        last = self.previous.last_manual_roll if self.previous is not None else None
        if self.manual_active:
            last = self.manual
        if self.prev_op is not None:
            done = ", ".join(str(i) for i in self.done) or "none"
            self.events.append(Event(EventType.NORMAL, "RollFinished", f"rolling restart finished (restarted: {done})"))
        return RollDecision(events=tuple(self.events), last_manual_roll=last)


def plan_roll(
    *,
    spec: KRaftClusterSpec,
    nodes: Sequence[DesiredNode],
    observed: Observed,
    previous: KRaftClusterStatus | None,
    revisions: Mapping[int, str],
    annotations: Mapping[str, str],
    now_ms: int,
    now_text: str,
    paused: bool,
) -> RollDecision:
    """The roll's step for this reconcile (see the module docstring). `revisions` maps every desired
    node to its target revision."""
    roll = _Roll(spec=spec, nodes=nodes, observed=observed, previous=previous, revisions=revisions,
                 manual=annotations.get(MANUAL_ROLL_ANNOTATION), now_ms=now_ms, now_text=now_text)
    return roll.decide(paused=paused)
