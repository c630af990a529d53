"""KIP-853 controller scale-up: a controller the spec adds joins the voter set, one at a time.

A controller added after the cluster's creation is formatted `--no-initial-controllers` and started
by the bootstrap (`planning`): it runs as an observer. This step adds it as a voter with
AddRaftVoter once
- it runs, is ready, and its metadata directory id is known (meta.properties);
- the quorum lists it as an observer that has caught up since its process started (last caught-up
  time within `controller.quorum.fetch.timeout.ms`);
- every current voter is caught up as well: a new voter raises the majority, so adding one while
  another voter lags would lower the quorum's fault tolerance;
- no other voter change is waiting to show in the voter set, and no roll is under way.

AddRaftVoter is safe to send twice (an operator that died after sending it finds the node in the
voter set, or gets DUPLICATE_VOTER, which the reconciler takes as done), so it needs no record in
status before it is sent. Status shows the step (`operation` QuorumChange) until the voter set
holds the node.

A controller whose metadata disk was replaced (a new directory id; the formatting waits for the
`controller-disk-loss/format-observer` approval in `planning`) swaps its voter here: once it has
caught up as an observer on the new disk, RemoveRaftVoter for the old directory id (only while the
other voters are a caught-up majority), then AddRaftVoter for the new one as for any added
controller. docs/controller-disk-replacement.md reasons out why this order is safe.

Scale-down (RemoveRaftVoter, the active controller last, then stopping the pod) is `scale_down`;
additions go first, so a spec that replaces controllers raises the voter count before lowering it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kraft_operator.model import KRaftClusterSpec, KRaftClusterStatus, OperationStatus
from kraft_operator.plan.actions import AddVoter, Event, EventType, RemoveVoter
from kraft_operator.plan.facts import Layout, Observed, PodPhase
from kraft_operator.plan.gates import removal_gate, running_since, voter_caught_up
from kraft_operator.plan.rendering import CONTROLLER_LISTENER, DesiredNode, controller_endpoint

__all__ = ["QUORUM_CHANGE_OPERATION", "QuorumChangeDecision", "plan_quorum_change"]

QUORUM_CHANGE_OPERATION = "QuorumChange"


@dataclass(frozen=True, slots=True)
class QuorumChangeDecision:
    actions: tuple[AddVoter | RemoveVoter, ...] = ()
    events: tuple[Event, ...] = ()
    operation: OperationStatus | None = None
    waiting: str = ""


def plan_quorum_change(
    *,
    spec: KRaftClusterSpec,
    nodes: Sequence[DesiredNode],
    observed: Observed,
    previous: KRaftClusterStatus | None,
    layout: Layout,
    now_ms: int,
    now_text: str,
    fetch_timeout_ms: int,
) -> QuorumChangeDecision:
    """The next voter addition, or what it waits for (see the module docstring)."""
    quorum = observed.cluster.quorum if observed.cluster is not None else None
    if quorum is None or quorum.leader_id < 0:
        return QuorumChangeDecision()
    voter_ids = {v.replica_id for v in quorum.voters}
    joining = [n for n in nodes if n.is_controller and n.ref.node_id not in voter_ids]
    replaced = [(n, v) for n in nodes if n.is_controller for v in quorum.voters
                if v.replica_id == n.ref.node_id and v.directory_id
                and _metadata_directory_id(n, observed) not in (None, v.directory_id)]
    if not joining and not replaced:
        return QuorumChangeDecision()
    prev = previous.operation if previous is not None else None
    started = prev.started_at if prev is not None and prev.name == QUORUM_CHANGE_OPERATION else now_text

    def waiting(why: str, step: str) -> QuorumChangeDecision:
        operation = OperationStatus(name=QUORUM_CHANGE_OPERATION, step=step, started_at=started)
        return QuorumChangeDecision(operation=operation, waiting=why)

    if replaced:
        # A controller on a new disk (new directory id) while the voter set still holds its old one:
        # once it has caught up as an observer, the old voter goes (RemoveRaftVoter); the new one
        # then joins as any added controller does (below, on a later reconcile).
        node, old = replaced[0]
        node_id = node.ref.node_id
        facts = observed.nodes.get(node_id)
        new_id = _metadata_directory_id(node, observed)
        observer = next((o for o in quorum.observers if o.replica_id == node_id and o.directory_id == new_id), None)
        since = facts.started_at_ms if facts is not None and facts.started_at_ms is not None else -1
        if (facts is None or facts.phase is not PodPhase.RUNNING or not facts.ready or observer is None
                or not voter_caught_up(observer, quorum=quorum, now_ms=now_ms, fetch_timeout_ms=fetch_timeout_ms,
                                       since_ms=since)):
            return waiting(f"controller {node_id} on its new disk (directory id {new_id}) to catch up as an observer "
                           f"before its old voter ({old.directory_id}) is swapped out", "replace-disk/await-observer")
        if prev is not None and prev.name == QUORUM_CHANGE_OPERATION and prev.step == "replace-disk/remove-old-voter":
            return waiting(f"the removal of controller {node_id}'s old voter ({old.directory_id}) to commit",
                           "replace-disk/await-removal")
        blockers = removal_gate(node_id, quorum=quorum, running=running_since(observed.nodes), now_ms=now_ms,
                                fetch_timeout_ms=fetch_timeout_ms)
        if blockers:
            return waiting(f"the other voters to be a caught-up majority before controller {node_id}'s old voter is "
                           "removed: " + "; ".join(b.message for b in blockers), "replace-disk/blocked")
        removal = RemoveVoter(node=node.ref, directory_id=old.directory_id,
                             reason=f"node {node_id}: RemoveRaftVoter for its lost disk (directory id "
                             f"{old.directory_id}); its new disk ({new_id}) caught up as an observer and joins next")
        operation = OperationStatus(name=QUORUM_CHANGE_OPERATION, step="replace-disk/remove-old-voter",
                                    started_at=started)
        return QuorumChangeDecision(actions=(removal,), events=(Event(EventType.NORMAL, "RemoveVoter", removal.reason),),
                                    operation=operation,
                                    waiting=f"the removal of controller {node_id}'s old voter to commit")

    lagging = [
        v.replica_id for v in quorum.voters
        if not voter_caught_up(v, quorum=quorum, now_ms=now_ms, fetch_timeout_ms=fetch_timeout_ms)
    ]
    node = joining[0]
    node_id = node.ref.node_id
    facts = observed.nodes.get(node_id)
    if facts is None or facts.phase is not PodPhase.RUNNING or not facts.ready:
        return waiting(f"controller {node_id} to run before it joins the voters", "await-observer")
    metadata = facts.volume(node.pool.storage.volumes[0].id)
    directory_id = metadata.directory_id if metadata is not None else None
    if not directory_id:
        return waiting(f"controller {node_id}'s metadata directory id", "await-observer")
    observer = next((o for o in quorum.observers if o.replica_id == node_id), None)
    since = facts.started_at_ms if facts.started_at_ms is not None else -1
    if observer is None or not voter_caught_up(observer, quorum=quorum, now_ms=now_ms,
                                               fetch_timeout_ms=fetch_timeout_ms, since_ms=since):
        return waiting(f"controller {node_id} to catch up as an observer before AddRaftVoter", "await-observer")
    if lagging:
        return waiting(f"voter(s) {sorted(lagging)} to catch up before controller {node_id} joins "
                       "(a new voter raises the majority)", "await-voters")
    host, port = controller_endpoint(node, spec=spec, layout=layout)
    action = AddVoter(
        node=node.ref, directory_id=directory_id, endpoints=((CONTROLLER_LISTENER, host, port),),
        reason=f"node {node_id}: AddRaftVoter (directory id {directory_id}): caught up as an observer; "
        f"voters {sorted(voter_ids)} become {sorted(voter_ids | {node_id})}",
    )
    operation = OperationStatus(name=QUORUM_CHANGE_OPERATION, step="add-voter", started_at=started)
    event = Event(EventType.NORMAL, "AddVoter", action.reason)
    return QuorumChangeDecision(actions=(action,), events=(event,), operation=operation,
                                waiting=f"controller {node_id} to show in the committed voter set")


def _metadata_directory_id(node: DesiredNode, observed: Observed) -> str | None:
    """The directory id in the node's metadata volume's meta.properties, None while unknown."""
    facts = observed.nodes.get(node.ref.node_id)
    volume = facts.volume(node.pool.storage.volumes[0].id) if facts is not None else None
    return volume.directory_id if volume is not None and volume.directory_id else None
