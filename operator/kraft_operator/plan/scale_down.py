"""Scale-down: nodes the spec no longer has leave the cluster, one at a time, without losing a write
or the quorum's ability to commit.

A leaving node is one the last status recorded (or a voter the quorum lists) that the spec's pools
no longer ask for. The one being removed is `status.operation.scaleDown.current` until it is gone;
controllers go before brokers, and among controllers the active one goes last. Each step is
decided afresh from what the cluster says, so an operator restarted anywhere carries on:

1. A voter: RemoveRaftVoter (KIP-853), only while the voters that stay have a caught-up majority
   of their own (the removal is committed by the new voter set, so that majority must be there to
   commit it and everything after it). Waits until the committed voter set no longer lists it and
   a leader other than it leads. Removing the active controller is done as Kafka does it: the
   leader appends the new voter set, keeps leading until it commits, then resigns, and the
   remaining voters elect a leader among themselves.
2. A broker that holds replicas: drain. Each partition it is a replica of gets a target replica
   list with the leaving broker replaced by a staying broker (the one holding fewest replicas that
   is not already a replica), so every replication factor, and so every min.insync.replicas, is
   kept. The targets are published in status first and sent with AlterPartitionReassignments on
   the next reconcile (persist before act: a restarted operator resends the same targets, never
   new ones). The reassignment is throttled as Kafka's reassign tool does it (`reassignment`):
   the throttle (`spec.lifecycle.reassignmentThrottleBytesPerSecond`) is recorded with the
   targets, set with the first send (and again should none of it show), and shown in status
   while the drain runs. It waits until every moved partition has exactly its target replicas,
   all in the ISR, then removes the throttle (step `clear-throttles`) and waits until the cluster
   no longer reports it. A partition no staying broker can take (every staying broker is already a replica) refuses
   the scale-down with the topic named: Degraded, reason ScaleDownRefused; nothing moves.
3. Its process runs: StopNode (controlled shutdown, SIGTERM with the spec's grace period). By now
   it holds no replica and no vote, so stopping it disrupts nothing.
4. A broker still registered: UnregisterBroker, so the cluster forgets it.
5. Gone: it leaves `status.nodes`. Its volumes are kept: deleting a volume is never automatic.

An even controller count is allowed (Kafka runs it) but raises the `EvenControllerCount`
condition: four voters tolerate one failure, as three do, and need one more for every commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kraft_operator.model import (
    BlockerStatus,
    Implementation,
    KRaftClusterSpec,
    KRaftClusterStatus,
    OperationStatus,
    PartitionMoveStatus,
    ReassignmentThrottleStatus,
    Role,
    ScaleDownStatus,
)
from kraft_operator.plan.actions import (
    Event,
    EventType,
    PartitionMove,
    PlannedAction,
    ReassignPartitions,
    RemoveVoter,
    StopNode,
    UnregisterBroker,
)
from kraft_operator.plan.facts import NodeFacts, NodeRef, Observed, PartitionDetail, PodPhase, QuorumFacts
from kraft_operator.plan.gates import removal_gate, running_since
from kraft_operator.plan.reassignment import (
    clear_throttles,
    moving_blockers,
    reassignment_throttle,
    set_throttles,
    throttle_lost,
    throttle_removal,
    throttle_text,
)
from kraft_operator.plan.rendering import DesiredNode
from kraft_operator.plan.roll import rfc3339_ms

__all__ = [
    "SCALE_DOWN_OPERATION",
    "STALE_REGISTRATION_APPROVAL",
    "ScaleDownDecision",
    "even_controllers",
    "plan_scale_down",
    "stale_registrations",
]

# The approval (`kraftwerk.io/approve`) that lets the operator unregister stale broker registrations.
STALE_REGISTRATION_APPROVAL = "stale-registration/unregister"

SCALE_DOWN_OPERATION = "ScaleDown"


@dataclass(frozen=True, slots=True)
class ScaleDownDecision:
    actions: tuple[PlannedAction, ...] = ()
    events: tuple[Event, ...] = ()
    operation: OperationStatus | None = None
    waiting: str = ""
    refused: str = ""
    removed: tuple[int, ...] = ()  # node ids gone for good: they leave status.nodes
    requeue_now: bool = False


@dataclass
class _ScaleDown:
    spec: KRaftClusterSpec
    nodes: Sequence[DesiredNode]
    observed: Observed
    previous: KRaftClusterStatus | None
    now_ms: int
    now_text: str
    fetch_timeout_ms: int

    def __post_init__(self) -> None:
        cluster = self.observed.cluster
        self.quorum = cluster.quorum if cluster is not None else None
        self.brokers = cluster.brokers if cluster is not None else None
        self.details = cluster.partition_details if cluster is not None else None
        self.throttle_facts = cluster.throttles if cluster is not None else None
        prev_op = self.previous.operation if self.previous is not None else None
        self.prev_op = prev_op if prev_op is not None and prev_op.name == SCALE_DOWN_OPERATION else None
        self.prev = self.prev_op.scale_down if self.prev_op is not None else None
        self.wanted = {n.ref.node_id for n in self.nodes}
        self.staying_brokers = sorted(n.ref.node_id for n in self.nodes if n.is_broker)
        recorded = {n.id: n for n in (self.previous.nodes if self.previous is not None else [])}
        self.roles: dict[int, frozenset[Role]] = {i: frozenset(n.roles) for i, n in recorded.items()}
        self.pools = {i: n.pool for i, n in recorded.items()}
        self.implementations = {i: n.implementation for i, n in recorded.items()}
        voters = [v.replica_id for v in self.quorum.voters] if self.quorum is not None and self.quorum.leader_id >= 0 else []
        for voter in voters:
            self.roles.setdefault(voter, frozenset({Role.CONTROLLER}))
        self.voters = set(voters)
        self.leaving = sorted(i for i in self.roles if i not in self.wanted)
        self.events: list[Event] = []

    # -- facts about one leaving node --------------------------------------------------------------
    def deleted_volumes(self, node_id: int) -> tuple[int, ...]:
        """The leaving node's volumes whose spec says `deleteClaim: true`; none when its pool has left
        the spec (no policy left to read: keep them)."""
        pool = next((p for p in self.spec.node_pools if p.name == self.pools.get(node_id)), None)
        return tuple(v.id for v in pool.storage.volumes if v.delete_claim) if pool is not None else ()

    def facts(self, node_id: int) -> NodeFacts | None:
        return self.observed.nodes.get(node_id)

    def running(self, node_id: int) -> bool:
        facts = self.facts(node_id)
        return facts is not None and facts.phase in (PodPhase.RUNNING, PodPhase.PENDING)

    def registered(self, node_id: int) -> bool | None:
        if Role.BROKER not in self.roles[node_id]:
            return False
        if self.brokers is None:
            return None  # unknown: no broker answered
        return node_id in self.brokers

    def replicas_on(self, node_id: int) -> list[PartitionDetail]:
        return [p for p in self.details or () if node_id in p.replicas]

    def gone(self, node_id: int) -> bool:
        return node_id not in self.voters and not self.running(node_id) and self.registered(node_id) is False

    def order(self, ids: list[int]) -> list[int]:
        """Controllers first, the active one last among them; then brokers; highest id first."""
        leader = self.quorum.leader_id if self.quorum is not None else -1

        def key(node_id: int) -> tuple[int, int, int]:
            controller = node_id in self.voters or Role.CONTROLLER in self.roles[node_id]
            return (0 if controller else 1, 1 if node_id == leader else 0, -node_id)

        return sorted(ids, key=key)

    # -- the decision ------------------------------------------------------------------------------
    def decide(self) -> ScaleDownDecision:
        removed = tuple(i for i in self.leaving if self.gone(i))
        if removed and self.prev is not None:
            for node_id in removed:
                if node_id == self.prev.current or node_id in self.prev.leaving:
                    self.events.append(Event(EventType.NORMAL, "NodeRemoved",
                                             f"node {node_id} left the cluster (its volumes are kept)"))
        pending = [i for i in self.leaving if i not in removed]
        if not pending:
            if self.prev is not None:
                self.events.append(Event(EventType.NORMAL, "ScaleDownFinished",
                                         f"scale-down finished (removed: {', '.join(map(str, self.prev.removed + list(removed))) or 'none'})"))
            return ScaleDownDecision(events=tuple(self.events), removed=removed)
        if self.quorum is None or self.quorum.leader_id < 0:
            return self._waiting(pending, current=None, removed=removed, step="await-quorum",
                                 why="a quorum leader before node(s) leave")
        current = self.prev.current if self.prev is not None and self.prev.current in pending else None
        if current is None:
            current = self.order(pending)[0]
        return self._step(current, quorum=self.quorum, pending=pending, removed=removed)

    def _step(
        self, node_id: int, *, quorum: QuorumFacts, pending: list[int], removed: tuple[int, ...]
    ) -> ScaleDownDecision:
        moves = list(self.prev.moves) if self.prev is not None and self.prev.current == node_id else []
        throttle = self.prev.throttle if self.prev is not None and self.prev.current == node_id else None
        voter = next((v for v in quorum.voters if v.replica_id == node_id), None)
        if voter is not None:
            blockers = removal_gate(node_id, quorum=quorum, running=running_since(self.observed.nodes), now_ms=self.now_ms,
                                    fetch_timeout_ms=self.fetch_timeout_ms)
            if blockers:
                why = f"the staying voters to be a caught-up majority before RemoveRaftVoter {node_id}: " + "; ".join(
                    b.message for b in blockers)
                self.events.append(Event(EventType.WARNING, "ScaleDownBlocked", why))
                return self._waiting(pending, current=node_id, removed=removed, step="remove-voter-blocked", why=why,
                                     blockers=blockers, moves=moves, throttle=throttle)
            prev = self.prev
            if (prev is not None and prev.current == node_id and prev.sent_at is not None and self.prev_op is not None
                    and self.prev_op.step == "remove-voter"
                    and self.now_ms - rfc3339_ms(prev.sent_at) < _resend_after_ms(self.fetch_timeout_ms)):
                return self._waiting(pending, current=node_id, removed=removed, step="remove-voter",
                                     why=f"the removal of voter {node_id} to commit", moves=moves, throttle=throttle,
                                     sent_at=prev.sent_at)
            staying = sorted(v.replica_id for v in quorum.voters if v.replica_id != node_id)
            active = " (the active controller: it resigns once the removal commits)" if (
                node_id == quorum.leader_id) else ""
            action = RemoveVoter(node=self._ref(node_id), directory_id=voter.directory_id,
                                 reason=f"node {node_id}: RemoveRaftVoter (directory id {voter.directory_id}){active}; "
                                 f"voters become {staying}")
            self.events.append(Event(EventType.NORMAL, "RemoveVoter", action.reason))
            return self._waiting(pending, current=node_id, removed=removed, step="remove-voter", actions=(action,),
                                 why=f"the removal of voter {node_id} to commit", moves=moves, throttle=throttle, sent_at=self.now_text)
        if node_id == quorum.leader_id:
            return self._waiting(pending, current=node_id, removed=removed, step="await-voter-removal",
                                 why=f"node {node_id} to resign the leadership after its removal", moves=moves, throttle=throttle)
        on_it = self.replicas_on(node_id) if Role.BROKER in self.roles[node_id] else []
        if Role.BROKER in self.roles[node_id] and self.details is None and self.running(node_id):
            return self._waiting(pending, current=node_id, removed=removed, step="drain",
                                 why=f"partition metadata before broker {node_id} is drained", moves=moves, throttle=throttle)
        if on_it or (moves and not self._moved(moves)):
            return self._drain(node_id, on_it=on_it, moves=moves, throttle=throttle, pending=pending, removed=removed)
        if moves and throttle is not None:
            unthrottling = self._unthrottle(node_id, moves=moves, throttle=throttle, pending=pending, removed=removed)
            if unthrottling is not None:
                return unthrottling
        elif moves:
            self.events.append(Event(EventType.NORMAL, "Drained", f"broker {node_id} holds no replica any more"))
        if self.running(node_id):
            grace_ms = self.spec.lifecycle.termination_grace_period_seconds * 1000
            deleted = self.deleted_volumes(node_id)
            volumes = (f"its volume(s) {list(deleted)} deleted (deleteClaim: true), any other kept" if deleted
                       else "its volumes kept (deleteClaim: false)")
            action_stop = StopNode(
                node=self._ref(node_id), implementation=self.implementations.get(node_id, Implementation.KRAFTWERK),
                grace_period_ms=grace_ms, delete_volumes=deleted,
                reason=f"node {node_id}: stop it for good (SIGTERM, {grace_ms} ms grace); it holds no vote and no "
                f"replica; {volumes}")
            self.events.append(Event(EventType.NORMAL, "StopNode", action_stop.reason))
            return self._waiting(pending, current=node_id, removed=removed, step="stop", actions=(action_stop,),
                                 why=f"node {node_id} to stop")
        registered = self.registered(node_id)
        if registered is None:
            return self._waiting(pending, current=node_id, removed=removed, step="unregister",
                                 why=f"the cluster's broker registrations before broker {node_id} is unregistered")
        action_unregister = UnregisterBroker(node=self._ref(node_id),
                                             reason=f"node {node_id}: UnregisterBroker (stopped and drained)")
        self.events.append(Event(EventType.NORMAL, "UnregisterBroker", action_unregister.reason))
        return self._waiting(pending, current=node_id, removed=removed, step="unregister",
                             actions=(action_unregister,), why=f"broker {node_id}'s registration to go")

    def _unthrottle(
        self, node_id: int, *, moves: list[PartitionMoveStatus], throttle: ReassignmentThrottleStatus,
        pending: list[int], removed: tuple[int, ...], drained: bool = True,
    ) -> ScaleDownDecision | None:
        """The drain finished: remove its throttle and wait until the cluster no longer reports it
        (None: gone, the broker may stop)."""
        step, residue = throttle_removal(throttle, facts=self.throttle_facts, now_ms=self.now_ms,
                                         resend_after_ms=_resend_after_ms(self.fetch_timeout_ms))
        if step == "done":
            return None
        if step == "wait":
            return self._waiting(pending, current=node_id, removed=removed, step="clear-throttles", moves=moves,
                                 throttle=throttle,
                                 why=f"the drain's throttle to be removed ({'; '.join(residue[:5])})")
        if throttle.cleared_at is None and drained:
            self.events.append(Event(EventType.NORMAL, "Drained", f"broker {node_id} holds no replica any more"))
        action = clear_throttles(throttle, reason=f"broker {node_id} drained: remove the reassignment throttle "
                                 f"(brokers {throttle.brokers}, topics {[t.topic for t in throttle.topics]})")
        self.events.append(Event(EventType.NORMAL, "ClearReassignmentThrottles", action.reason))
        return self._waiting(pending, current=node_id, removed=removed, step="clear-throttles", actions=(action,),
                             moves=moves, throttle=throttle.model_copy(update={"cleared_at": self.now_text}),
                             why="the drain's throttle to be removed")

    def _drain(
        self, node_id: int, *, on_it: list[PartitionDetail], moves: list[PartitionMoveStatus],
        throttle: ReassignmentThrottleStatus | None, pending: list[int], removed: tuple[int, ...],
    ) -> ScaleDownDecision:
        if not moves:
            planned, refused = self._plan_moves(node_id, on_it)
            if refused:
                message = (f"broker {node_id} cannot be drained: no staying broker can take a replica of "
                           f"{', '.join(refused)} (each already holds one); add brokers or lower those topics' "
                           "replication factor")
                self.events.append(Event(EventType.WARNING, "ScaleDownRefused", message))
                return self._waiting(pending, current=node_id, removed=removed, step="refused", why=message,
                                     refused=message)
            rate = self.spec.lifecycle.reassignment_throttle_bytes_per_second
            planned_throttle = (reassignment_throttle(planned, current=self.details or (), rate_bytes_per_second=rate)
                                if rate is not None and planned else None)
            self.events.append(Event(EventType.NORMAL, "DrainPlanned",
                                     f"broker {node_id}: {len(planned)} partition(s) move off it, "
                                     f"{throttle_text(planned_throttle)} (recorded before sending)"))
            return self._waiting(pending, current=node_id, removed=removed, step="drain-planned", moves=planned,
                                 throttle=planned_throttle,
                                 why=f"the drain of broker {node_id} to be recorded before it is sent", requeue_now=True)
        by_key = {(p.topic, p.partition): p for p in self.details or ()}
        unstarted = [m for m in moves if (m.topic, m.partition) in by_key
                     and not set(m.replicas) <= set(by_key[(m.topic, m.partition)].replicas)]
        if unstarted:
            # Recorded targets the cluster does not show yet: the first send, or a resend after an
            # operator restart or a failed send (the same targets again are harmless).
            action = ReassignPartitions(
                node=self._ref(node_id),
                moves=tuple(PartitionMove(m.topic, m.partition, tuple(m.replicas)) for m in unstarted),
                reason=f"broker {node_id}: AlterPartitionReassignments for {len(unstarted)} partition(s) "
                f"({', '.join(f'{m.topic}-{m.partition} -> {m.replicas}' for m in unstarted[:5])}"
                f"{', ...' if len(unstarted) > 5 else ''})",
            )
            actions: tuple[PlannedAction, ...] = (action,)
            if throttle is not None:
                # Throttle first, as Kafka's tool does: the copy starts throttled.
                actions = (set_throttles(throttle, reason=f"broker {node_id}: {throttle_text(throttle)} for its "
                                         "drain"), action)
                self.events.append(Event(EventType.NORMAL, "SetReassignmentThrottles", actions[0].reason))
            self.events.append(Event(EventType.NORMAL, "ReassignPartitions", action.reason))
            return self._waiting(pending, current=node_id, removed=removed, step="draining", actions=actions,
                                 moves=moves, throttle=throttle,
                                 why=f"the partitions to move off broker {node_id} ({throttle_text(throttle)})")
        blockers = self._moving(moves)
        if not blockers and not on_it:  # no partition metadata to tell
            return self._waiting(pending, current=node_id, removed=removed, step="draining", moves=moves, throttle=throttle,
                                 why=f"partition metadata to show the partitions moved off broker {node_id}")
        if on_it and not blockers:
            # Partitions appeared on it after the plan (a topic created meanwhile): plan again, once
            # the finished part's throttle is gone.
            if throttle is not None:
                unthrottling = self._unthrottle(node_id, moves=moves, throttle=throttle, pending=pending,
                                                removed=removed, drained=False)
                if unthrottling is not None:
                    return unthrottling
            return self._waiting(pending, current=node_id, removed=removed, step="drain-planned", moves=[],
                                 why=f"new partitions on broker {node_id}: its drain is planned again", requeue_now=True)
        why = (f"{len(blockers)} partition(s) to move off broker {node_id} ({throttle_text(throttle)}): "
               + "; ".join(b.message for b in blockers[:5]))
        resend: tuple[PlannedAction, ...] = ()
        if throttle is not None and throttle_lost(throttle, self.throttle_facts):
            resend = (set_throttles(throttle, reason=f"broker {node_id}: the drain's throttle no longer shows; "
                                    f"{throttle_text(throttle)} again"),)
            self.events.append(Event(EventType.WARNING, "SetReassignmentThrottles", resend[0].reason))
        return self._waiting(pending, current=node_id, removed=removed, step="draining", moves=moves, why=why,
                             blockers=blockers, actions=resend, throttle=throttle)

    def _plan_moves(self, node_id: int, on_it: list[PartitionDetail]) -> tuple[list[PartitionMoveStatus], list[str]]:
        load = dict.fromkeys(self.staying_brokers, 0)
        for p in self.details or ():
            for r in p.replicas:
                if r in load:
                    load[r] += 1
        moves: list[PartitionMoveStatus] = []
        refused: list[str] = []
        for p in sorted(on_it, key=lambda p: (p.topic, p.partition)):
            candidates = [b for b in self.staying_brokers if b not in p.replicas]
            if not candidates:
                refused.append(f"{p.topic}-{p.partition} (replicas {list(p.replicas)})")
                continue
            target = min(candidates, key=lambda b: (load[b], b))
            load[target] += 1
            moves.append(PartitionMoveStatus(topic=p.topic, partition=p.partition,
                                             replicas=[target if r == node_id else r for r in p.replicas]))
        return moves, refused

    def _moving(self, moves: list[PartitionMoveStatus]) -> list[BlockerStatus]:
        return moving_blockers(moves, self.details or ())

    def _moved(self, moves: list[PartitionMoveStatus]) -> bool:
        return self.details is not None and not self._moving(moves)

    # -- status ------------------------------------------------------------------------------------
    def _ref(self, node_id: int) -> NodeRef:
        any_node = self.nodes[0].ref if self.nodes else NodeRef("default", "", "", 0)
        return NodeRef(any_node.namespace, any_node.cluster, self.pools.get(node_id, ""), node_id)

    def _waiting(
        self,
        pending: list[int],
        *,
        current: int | None,
        removed: tuple[int, ...],
        step: str,
        why: str,
        actions: tuple[PlannedAction, ...] = (),
        blockers: list[BlockerStatus] | None = None,
        moves: list[PartitionMoveStatus] | None = None,
        sent_at: str | None = None,
        refused: str = "",
        requeue_now: bool = False,
        throttle: ReassignmentThrottleStatus | None = None,
    ) -> ScaleDownDecision:
        started = self.prev_op.started_at if self.prev_op is not None else self.now_text
        done = list(self.prev.removed) if self.prev is not None else []
        done += [i for i in removed if i not in done]
        status = ScaleDownStatus(leaving=self.order(pending), current=current, moves=list(moves or []), removed=done,
                                 sent_at=sent_at, throttle=throttle)
        operation = OperationStatus(name=SCALE_DOWN_OPERATION, step=step, started_at=started,
                                    blocked_by=list(blockers or []), scale_down=status)
        return ScaleDownDecision(actions=actions, events=tuple(self.events), operation=operation, waiting=why,
                                 refused=refused, removed=removed, requeue_now=requeue_now)


def plan_scale_down(
    *,
    spec: KRaftClusterSpec,
    nodes: Sequence[DesiredNode],
    observed: Observed,
    previous: KRaftClusterStatus | None,
    now_ms: int,
    now_text: str,
    fetch_timeout_ms: int,
) -> ScaleDownDecision:
    """The next step of removing the nodes the spec dropped (see the module docstring)."""
    return _ScaleDown(spec=spec, nodes=nodes, observed=observed, previous=previous, now_ms=now_ms, now_text=now_text,
                      fetch_timeout_ms=fetch_timeout_ms).decide()


def _resend_after_ms(fetch_timeout_ms: int) -> int:
    """How long a sent RemoveRaftVoter may take to show before it is sent again (a lost answer,
    a failed send, a leader change): a few fetch timeouts, at least ten seconds."""
    return max(10_000, 5 * fetch_timeout_ms)


def even_controllers(spec: KRaftClusterSpec) -> str | None:
    """The warning for an even controller count, None for an odd one."""
    count = sum(p.replicas for p in spec.node_pools if Role.CONTROLLER in p.roles)
    if count % 2:
        return None
    return (f"{count} controllers tolerate {count // 2 - 1} failure(s), as {count - 1} do, and each commit needs "
            f"{count // 2 + 1} of them; an odd count is recommended")


def stale_registrations(
    *, nodes: Sequence[DesiredNode], observed: Observed, previous: KRaftClusterStatus | None
) -> list[int]:
    """Broker registrations the cluster holds for ids that are no node of this cluster: not in the
    spec, not leaving (not in the last status), no process or pod. Kafka keeps such a registration
    until UnregisterBroker, and it holds a metadata.version bump back (KAFKA-20395)."""
    brokers = observed.cluster.brokers if observed.cluster is not None else None
    if brokers is None:
        return []
    known = {n.ref.node_id for n in nodes} | {n.id for n in (previous.nodes if previous is not None else [])}
    running = {i for i, f in observed.nodes.items() if f.phase in (PodPhase.RUNNING, PodPhase.PENDING)}
    return sorted(i for i in brokers if i not in known and i not in running)
