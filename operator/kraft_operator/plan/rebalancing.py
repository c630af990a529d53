"""A rebalance onto brokers that joined, when the spec asks for it (`spec.lifecycle.rebalanceOnScaleUp`,
off by default).

Kafka never moves existing replicas: brokers a scale-up adds only get partitions created after
they joined, and the `BrokersWithoutReplicas` condition says so. With the flag, the operator
moves replicas onto them itself, as a human would with `kafka-reassign-partitions --generate`
then `--execute --throttle`, and in the same persist-before-act shape as a drain:

1. `planned`: once every broker of the spec runs unfenced, no partition is under-replicated and
   some broker holds no replica, the targets (`reassignment.rebalance_moves`: replica counts
   evened out, the fewest replicas moved, replication factors kept) and their throttle are
   recorded in status, nothing sent yet;
2. `reassigning`: the throttle is set and AlterPartitionReassignments sent for the recorded
   targets the cluster does not show yet (a restarted operator resends the same ones, never new
   ones); it waits until every target is reached and in the ISR;
3. `clear-throttles`: the throttle is removed, and the operation ends once the cluster no longer
   reports it.

A rebalance under way finishes even if the flag is turned off meanwhile (its moves were sent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kraft_operator.model import (
    KRaftClusterSpec,
    KRaftClusterStatus,
    OperationStatus,
    PartitionMoveStatus,
    ReassignmentThrottleStatus,
    RebalanceStatus,
)
from kraft_operator.plan.actions import Event, EventType, PartitionMove, PlannedAction, ReassignPartitions
from kraft_operator.plan.facts import NodeRef, Observed
from kraft_operator.plan.reassignment import (
    clear_throttles,
    moving_blockers,
    reassignment_throttle,
    rebalance_moves,
    set_throttles,
    throttle_lost,
    throttle_removal,
    throttle_text,
)
from kraft_operator.plan.rendering import DesiredNode

__all__ = ["REBALANCE_OPERATION", "RebalanceDecision", "plan_rebalance"]

REBALANCE_OPERATION = "Rebalance"


@dataclass(frozen=True, slots=True)
class RebalanceDecision:
    actions: tuple[PlannedAction, ...] = ()
    events: tuple[Event, ...] = ()
    operation: OperationStatus | None = None
    waiting: str = ""
    requeue_now: bool = False


def plan_rebalance(
    *,
    spec: KRaftClusterSpec,
    nodes: Sequence[DesiredNode],
    observed: Observed,
    previous: KRaftClusterStatus | None,
    idle: Sequence[int],
    now_ms: int,
    now_text: str,
    resend_after_ms: int,
) -> RebalanceDecision:
    """The rebalance's next step (see the module docstring); `idle` are the running, unfenced
    brokers of the spec that hold no replica."""
    prev_op = previous.operation if previous is not None else None
    prev_op = prev_op if prev_op is not None and prev_op.name == REBALANCE_OPERATION else None
    cluster = observed.cluster
    details = cluster.partition_details if cluster is not None else None
    brokers = sorted(n.ref.node_id for n in nodes if n.is_broker)
    ref = next((n.ref for n in nodes if n.is_broker), None)
    if prev_op is None or prev_op.rebalance is None:
        if not spec.lifecycle.rebalance_on_scale_up or not idle or details is None or ref is None:
            return RebalanceDecision()
        registered = cluster.brokers if cluster is not None else None
        if registered is None or any(b not in registered or registered[b].fenced for b in brokers):
            return RebalanceDecision()  # a broker of the spec is not up yet: the plan would leave it out
        if any(not set(p.replicas) <= set(p.isr) for p in details):
            return RebalanceDecision()  # under-replicated partitions first (URP); the roll gates say so
        moves = rebalance_moves(details, brokers=brokers)
        if not moves:
            return RebalanceDecision()
        rate = spec.lifecycle.reassignment_throttle_bytes_per_second
        throttle = reassignment_throttle(moves, current=details, rate_bytes_per_second=rate) if rate else None
        event = Event(EventType.NORMAL, "RebalancePlanned",
                      f"broker(s) {list(idle)} hold no replica: {len(moves)} partition(s) get new replicas "
                      f"({_moves_text(moves)}), {throttle_text(throttle)} (recorded before sending)")
        return RebalanceDecision(
            events=(event,), requeue_now=True, waiting="the rebalance to be recorded before it is sent",
            operation=_operation("planned", started_at=now_text, brokers=list(idle), moves=moves, throttle=throttle))
    state = prev_op.rebalance
    started = prev_op.started_at or now_text
    moves, throttle = list(state.moves), state.throttle
    if details is None:
        return RebalanceDecision(waiting="partition metadata to follow the rebalance", operation=_operation(
            prev_op.step, started_at=started, brokers=state.brokers, moves=moves, throttle=throttle))
    by_key = {(p.topic, p.partition): p for p in details}
    unstarted = [m for m in moves if (m.topic, m.partition) in by_key
                 and not set(m.replicas) <= set(by_key[(m.topic, m.partition)].replicas)]
    blockers = moving_blockers(moves, details)
    if unstarted and ref is not None:
        node = NodeRef(ref.namespace, ref.cluster, ref.pool, state.brokers[0] if state.brokers else ref.node_id)
        action = ReassignPartitions(
            node=node, drain=False, moves=tuple(PartitionMove(m.topic, m.partition, tuple(m.replicas)) for m in unstarted),
            reason=f"rebalance onto broker(s) {state.brokers}: AlterPartitionReassignments for {len(unstarted)} "
            f"partition(s) ({_moves_text(unstarted)})")
        actions: list[PlannedAction] = []
        events: list[Event] = []
        if throttle is not None:
            actions.append(set_throttles(throttle, reason=f"rebalance: {throttle_text(throttle)}"))
            events.append(Event(EventType.NORMAL, "SetReassignmentThrottles", actions[0].reason))
        actions.append(action)
        events.append(Event(EventType.NORMAL, "ReassignPartitions", action.reason))
        return RebalanceDecision(
            actions=tuple(actions), events=tuple(events),
            waiting=f"the rebalance's partitions to move ({throttle_text(throttle)})",
            operation=_operation("reassigning", started_at=started, brokers=state.brokers, moves=moves,
                                 throttle=throttle))
    if blockers:
        actions = []
        events = []
        if throttle is not None and throttle_lost(throttle, cluster.throttles if cluster is not None else None):
            actions.append(set_throttles(throttle, reason=f"rebalance: the throttle no longer shows; "
                                         f"{throttle_text(throttle)} again"))
            events.append(Event(EventType.WARNING, "SetReassignmentThrottles", actions[0].reason))
        why = (f"{len(blockers)} partition(s) of the rebalance to move ({throttle_text(throttle)}): "
               + "; ".join(b.message for b in blockers[:5]))
        operation = _operation("reassigning", started_at=started, brokers=state.brokers, moves=moves,
                               throttle=throttle)
        return RebalanceDecision(actions=tuple(actions), events=tuple(events), waiting=why,
                                 operation=operation.model_copy(update={"blocked_by": blockers}))
    if throttle is not None:
        step, residue = throttle_removal(throttle, facts=cluster.throttles if cluster is not None else None,
                                         now_ms=now_ms, resend_after_ms=resend_after_ms)
        if step == "wait":
            return RebalanceDecision(
                waiting=f"the rebalance's throttle to be removed ({'; '.join(residue[:5])})",
                operation=_operation("clear-throttles", started_at=started, brokers=state.brokers, moves=moves,
                                     throttle=throttle))
        if step == "send":
            action_clear = clear_throttles(throttle, reason=f"rebalance onto broker(s) {state.brokers} finished: "
                                           f"remove the reassignment throttle (brokers {throttle.brokers})")
            return RebalanceDecision(
                actions=(action_clear,), events=(Event(EventType.NORMAL, "ClearReassignmentThrottles",
                                                       action_clear.reason),),
                waiting="the rebalance's throttle to be removed",
                operation=_operation("clear-throttles", started_at=started, brokers=state.brokers, moves=moves,
                                     throttle=throttle.model_copy(update={"cleared_at": now_text})))
    return RebalanceDecision(events=(Event(EventType.NORMAL, "RebalanceFinished",
                                           f"rebalance onto broker(s) {state.brokers} finished: {len(moves)} "
                                           "partition(s) moved"),))


def _operation(
    step: str, *, started_at: str, brokers: list[int], moves: list[PartitionMoveStatus],
    throttle: ReassignmentThrottleStatus | None,
) -> OperationStatus:
    return OperationStatus(name=REBALANCE_OPERATION, step=step, started_at=started_at,
                           rebalance=RebalanceStatus(brokers=brokers, moves=moves, throttle=throttle))


def _moves_text(moves: Sequence[PartitionMoveStatus]) -> str:
    return ", ".join(f"{m.topic}-{m.partition} -> {m.replicas}" for m in moves[:5]) + (", ..." if len(moves) > 5 else "")
