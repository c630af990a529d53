"""The gates a roll passes before it restarts a node, and the checks that a restarted node is back.

Asked of the cluster itself (DescribeQuorum, DescribeCluster, Metadata and DescribeConfigs as the
observer gathered them), never of pod readiness alone: Strimzi #12649 and Redpanda #1873 are rolls
that outran log recovery because they trusted readiness.

- A broker may restart only while the quorum has a leader (a restarted broker must register
  again), while cluster-wide UnderReplicatedPartitions = 0, and while no
  partition would drop below its topic's effective `min.insync.replicas` without it (the min-ISR
  rule: for every partition with this broker in its ISR, |ISR| - 1 >= min ISR).
- A controller may restart only while the voters other than it that are caught up (the leader, or
  a voter whose last caught-up time is within `controller.quorum.fetch.timeout.ms`) are a majority
  of the whole voter set.
- A voter may be removed (scale-down, a disk swap) only while the voters that stay have a caught-up
  majority of their own (`removal_gate`): they commit the removal and everything after it.
- A broker may stop to have a lost volume replaced only while the min-ISR rule holds for the
  partitions it is still in the ISR of, and no partition lacks a replica other than its own
  (`volume_replacement_gate`).
- A node already down (not running or not ready, a fenced or unregistered broker, a controller the
  quorum does not count as caught up) passes without gates: restarting it cannot reduce
  availability, and waiting on it is the deadlock Koperator #533 describes.

Each check answers with `BlockerStatus` entries naming exactly what holds it: the partitions with
their replicas, ISR and min ISR, the lagging voters with their lag, or the node that is not back.
An empty list means the gate is open.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kraft_operator.model import BlockerStatus
from kraft_operator.plan.facts import (
    ClusterFacts,
    NodeFacts,
    PartitionDetail,
    PodPhase,
    QuorumFacts,
    ReplicaFacts,
)

__all__ = [
    "DEFAULT_FETCH_TIMEOUT_MS",
    "broker_gate",
    "controller_gate",
    "is_down",
    "not_recovered",
    "removal_gate",
    "running_since",
    "volume_replacement_gate",
    "voter_caught_up",
]

DEFAULT_FETCH_TIMEOUT_MS = 2000  # controller.quorum.fetch.timeout.ms's default


def voter_caught_up(
    replica: ReplicaFacts, *, quorum: QuorumFacts, now_ms: int, fetch_timeout_ms: int, since_ms: int = -1
) -> bool:
    """The leader is caught up by definition; a follower when it was last caught up within the
    fetch timeout (KIP-853's rule for a voter that counts) and, given `since_ms`, after that: a voter that just went down keeps a recent timestamp for up to the fetch timeout, so a
    restarted one counts only once it has caught up since its restart."""
    if replica.replica_id == quorum.leader_id:
        return True
    if replica.last_caught_up_timestamp_ms < 0 or replica.last_caught_up_timestamp_ms <= since_ms:
        return False
    return _answered_ms(quorum, now_ms) - replica.last_caught_up_timestamp_ms <= fetch_timeout_ms


def _answered_ms(quorum: QuorumFacts, now_ms: int) -> int:
    """When the leader gave its account of the replicas: a voter's lag is how old its catch-up was
    then. Measured from the plan's now instead, a slow observation (seconds on a loaded machine)
    made every follower look behind, and the controller gate never opened."""
    return min(now_ms, quorum.answered_at_ms) if quorum.answered_at_ms is not None else now_ms


def running_since(nodes: Mapping[int, NodeFacts]) -> dict[int, int]:
    """The nodes whose pod runs and is ready, each with its process's start time in ms (-1 when
    unknown): the `running` the voter gates take."""
    return {i: f.started_at_ms if f.started_at_ms is not None else -1
            for i, f in nodes.items() if f.phase is PodPhase.RUNNING and f.ready}


def _caught_up(
    voters: Sequence[ReplicaFacts], *, quorum: QuorumFacts, running: Mapping[int, int], now_ms: int,
    fetch_timeout_ms: int,
) -> list[ReplicaFacts]:
    """Those of `voters` that run and have caught up since their process started."""
    return [v for v in voters if v.replica_id in running
            and voter_caught_up(v, quorum=quorum, now_ms=now_ms, fetch_timeout_ms=fetch_timeout_ms,
                                since_ms=running[v.replica_id])]


def _leader_end(quorum: QuorumFacts) -> int:
    return next((v.log_end_offset for v in quorum.voters if v.replica_id == quorum.leader_id), 0)


def _voter_blocker(replica: ReplicaFacts, *, quorum: QuorumFacts, now_ms: int, running: bool = True) -> BlockerStatus:
    lag = max(0, _leader_end(quorum) - replica.log_end_offset)
    ago = (_answered_ms(quorum, now_ms) - replica.last_caught_up_timestamp_ms
           if replica.last_caught_up_timestamp_ms >= 0 else None)
    since = f"last caught up {ago} ms ago" if ago is not None else "never caught up"
    if not running:
        since += ", its pod is not running and ready"
    return BlockerStatus(
        kind="voter",
        node_id=replica.replica_id,
        lag=lag,
        caught_up_ms_ago=ago,
        message=f"voter {replica.replica_id} lags the leader by {lag} record(s), {since}",
    )


def controller_gate(
    node_id: int, *, quorum: QuorumFacts | None, running: Mapping[int, int], now_ms: int, fetch_timeout_ms: int
) -> list[BlockerStatus]:
    """What keeps controller `node_id` from restarting: it may while the other caught-up voters
    are a majority of all voters. A voter counts only while its pod runs and is ready, and only
    once it has caught up since its process started (`running`: node id -> start time in ms, -1
    when unknown): the leader keeps a dead voter's last caught-up time, fresh for up to the fetch
    timeout, and a pod restarted within that window would otherwise count before it fetched."""
    if quorum is None or quorum.leader_id < 0:
        return [BlockerStatus(kind="cluster", message="no quorum leader observed: the voters' state is unknown")]
    voters = quorum.voters
    majority = len(voters) // 2 + 1
    others = [v for v in voters if v.replica_id != node_id]
    caught_up = _caught_up(others, quorum=quorum, running=running, now_ms=now_ms, fetch_timeout_ms=fetch_timeout_ms)
    if len(caught_up) >= majority:
        return []
    blockers = [_voter_blocker(v, quorum=quorum, now_ms=now_ms, running=v.replica_id in running)
                for v in others if v not in caught_up]
    if not blockers:  # fewer voters than a majority without this one (a single-voter quorum)
        blockers.append(BlockerStatus(
            kind="cluster",
            message=f"the quorum has {len(voters)} voter(s); without node {node_id} no majority is left",
        ))
    return blockers


def removal_gate(
    node_id: int, *, quorum: QuorumFacts, running: Mapping[int, int], now_ms: int, fetch_timeout_ms: int
) -> list[BlockerStatus]:
    """What keeps voter `node_id` from being removed: the voters that stay must have a caught-up
    majority of their own (a voter counts while its pod runs and once it has caught up since its
    process started: `running` maps node id -> start time in ms). Empty: the removal may go."""
    staying = [v for v in quorum.voters if v.replica_id != node_id]
    if not staying:
        return [BlockerStatus(kind="cluster", message=f"voter {node_id} is the only voter; it cannot be removed")]
    majority = len(staying) // 2 + 1
    caught_up = _caught_up(staying, quorum=quorum, running=running, now_ms=now_ms, fetch_timeout_ms=fetch_timeout_ms)
    if len(caught_up) >= majority:
        return []
    return [
        BlockerStatus(kind="voter", node_id=v.replica_id,
                      message=f"voter {v.replica_id} stays but is not caught up "
                      f"({len(caught_up)} of the {len(staying)} staying voters are; {majority} must be)")
        for v in staying if v not in caught_up
    ]


def broker_gate(broker_id: int, *, cluster: ClusterFacts | None) -> list[BlockerStatus]:
    """What keeps broker `broker_id` from restarting: no quorum leader (a broker restarted then
    cannot register again, so it would stay out until the quorum is back), any under-replicated
    partition (URP must be 0), and every partition it is in the ISR of that would drop below min
    ISR without it. A partition that breaks both rules says both."""
    quorum = cluster.quorum if cluster is not None else None
    blockers = []
    if quorum is None or quorum.leader_id < 0:
        blockers.append(BlockerStatus(
            kind="cluster", message=f"no quorum leader observed: broker {broker_id} restarted now could not "
            "register again until the controllers have a leader"))
    details = cluster.partition_details if cluster is not None else None
    if details is None:
        return [*blockers, BlockerStatus(kind="cluster",
                                         message="no partition metadata observed: URP and ISRs are unknown")]
    for p in details:
        missing = [r for r in p.replicas if r not in p.isr]
        at_min = broker_id in p.isr and len(p.isr) - 1 < p.min_isr
        if not (missing or at_min):
            continue
        why = [f"is under-replicated (replica(s) {missing} out of its ISR; URP must be 0)"] if missing else []
        if at_min:
            why.append(f"would drop below min.insync.replicas={p.min_isr} without broker {broker_id}")
        blockers.append(_partition_blocker(p, f"{p.topic}-{p.partition} {' and '.join(why)}"))
    return blockers


def volume_replacement_gate(broker_id: int, *, cluster: ClusterFacts | None) -> list[BlockerStatus]:
    """What keeps broker `broker_id` from stopping to have a lost volume replaced: the min-ISR rule
    for every partition it is still in the ISR of, and no partition under-replicated for another
    broker's sake. Its own lost replicas are under-replicated already, and may be: the replacement
    is what brings them back."""
    details = cluster.partition_details if cluster is not None else None
    if details is None:
        return [BlockerStatus(kind="cluster", message="no partition metadata observed: URP and ISRs are unknown")]
    blockers = []
    for p in details:
        others_missing = sorted(set(p.replicas) - set(p.isr) - {broker_id})
        if broker_id in p.isr and len(p.isr) - 1 < p.min_isr:
            why = f"would drop below min.insync.replicas={p.min_isr} without broker {broker_id}"
        elif others_missing:
            why = f"is under-replicated: replica(s) {others_missing} are out of its ISR"
        else:
            continue
        blockers.append(_partition_blocker(p, f"{p.topic}-{p.partition} {why}"))
    return blockers


def _partition_blocker(p: PartitionDetail, message: str) -> BlockerStatus:
    return BlockerStatus(
        kind="partition",
        topic=p.topic,
        partition=p.partition,
        replicas=list(p.replicas),
        isr=list(p.isr),
        min_isr=p.min_isr,
        message=f"{message} (replicas {list(p.replicas)}, ISR {list(p.isr)}, min ISR {p.min_isr})",
    )


def is_down(
    node_id: int,
    *,
    controller: bool,
    broker: bool,
    facts: NodeFacts | None,
    cluster: ClusterFacts | None,
    now_ms: int,
    fetch_timeout_ms: int,
) -> bool:
    """Whether the node contributes nothing now, so restarting it cannot reduce availability: not
    running or not ready, or (when the cluster could be asked) a broker unregistered or fenced, a
    controller the quorum does not count as a caught-up voter or observer."""
    if facts is None or facts.phase is not PodPhase.RUNNING or not facts.ready:
        return True
    if cluster is None:
        return False
    if broker and cluster.brokers is not None:
        registered = cluster.brokers.get(node_id)
        if registered is None or registered.fenced:
            return True
    if controller and cluster.quorum is not None and cluster.quorum.leader_id >= 0:
        quorum = cluster.quorum
        replica = next((r for r in (*quorum.voters, *quorum.observers) if r.replica_id == node_id), None)
        if replica is None:
            return True
        started = facts.started_at_ms if facts.started_at_ms is not None else -1
        if replica in quorum.voters and not voter_caught_up(
            replica, quorum=quorum, now_ms=now_ms, fetch_timeout_ms=fetch_timeout_ms, since_ms=started
        ):
            return True
    return False


def not_recovered(
    node_id: int,
    *,
    controller: bool,
    broker: bool,
    facts: NodeFacts | None,
    cluster: ClusterFacts | None,
    now_ms: int,
    fetch_timeout_ms: int,
    since_ms: int = -1,
) -> list[BlockerStatus]:
    """What a restarted node still lacks before the roll moves on: running and ready; a controller
    caught up as a voter since its restart at `since_ms` (or present as an observer); a broker
    registered, unfenced and back in the ISR of every partition it is a replica of."""
    if facts is None or facts.phase is not PodPhase.RUNNING or not facts.ready:
        phase = facts.phase.value if facts is not None else PodPhase.ABSENT.value
        return [BlockerStatus(kind="node", node_id=node_id, message=f"node {node_id} is not running and ready ({phase})")]
    blockers: list[BlockerStatus] = []
    since_ms = max(since_ms, facts.started_at_ms if facts.started_at_ms is not None else -1)
    if controller:
        quorum = cluster.quorum if cluster is not None else None
        if quorum is None or quorum.leader_id < 0:
            blockers.append(BlockerStatus(kind="cluster", message="no quorum leader observed"))
        else:
            voter = next((v for v in quorum.voters if v.replica_id == node_id), None)
            observer = next((o for o in quorum.observers if o.replica_id == node_id), None)
            if voter is not None:
                if not voter_caught_up(voter, quorum=quorum, now_ms=now_ms, fetch_timeout_ms=fetch_timeout_ms,
                                       since_ms=since_ms):
                    blockers.append(_voter_blocker(voter, quorum=quorum, now_ms=now_ms))
            elif observer is None:
                blockers.append(BlockerStatus(
                    kind="node", node_id=node_id, message=f"node {node_id} is not yet in the quorum's voters or observers",
                ))
    if broker:
        brokers = cluster.brokers if cluster is not None else None
        registered = brokers.get(node_id) if brokers is not None else None
        if registered is None:
            blockers.append(BlockerStatus(kind="node", node_id=node_id, message=f"broker {node_id} has not registered"))
        elif registered.fenced:
            blockers.append(BlockerStatus(kind="node", node_id=node_id, message=f"broker {node_id} is fenced"))
        details = cluster.partition_details if cluster is not None else None
        if details is None:
            blockers.append(BlockerStatus(kind="cluster", message="no partition metadata observed"))
        else:
            for p in details:
                if node_id in p.replicas and node_id not in p.isr:
                    blockers.append(_partition_blocker(p, f"broker {node_id} is not back in the ISR of {p.topic}-{p.partition}"))
    return blockers
