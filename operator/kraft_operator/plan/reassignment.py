"""The partition reassignments the operator runs itself (a broker's drain, a rebalance onto brokers
that joined), throttled as Kafka's own `kafka-reassign-partitions --execute --throttle` does it,
and the rebalance's choice of moves.

A reassignment copies whole replicas over the network; unthrottled, a big one starves the
followers of ordinary traffic, and clients see it as latency and URP. Kafka's tool therefore sets,
before it sends AlterPartitionReassignments:
- on each topic, `leader.replication.throttled.replicas` = the replicas moved *from* (the
  sources, which serve the copy) and `follower.replication.throttled.replicas` = the replicas being
  *added* (calculateLeaderThrottles / calculateFollowerThrottles), as `partition:broker` lists;
- on every broker involved, `leader.replication.throttled.rate` and
  `follower.replication.throttled.rate` = the limit in bytes per second;
and removes all of them once the reassignment is verified complete (a forgotten throttle keeps
limiting replication of those replicas long after, which Kafka's docs warn about).

The operator does the same: the throttle is computed here from the recorded targets and the
replicas as they were when the move was planned (Metadata lists adding and removing replicas
together during a move, so it cannot be recomputed later), recorded in status with the moves
before anything is sent, set with the first send, and removed once every target is reached and
in the ISR. `throttle_in_force` and `throttle_residue` read what the cluster reports
(`ThrottleFacts`), so a lost set or a lost removal is sent again.

`rebalance_moves` is the rebalance's plan: pure, deterministic, checked as invariants over many
seeded random clusters (`tests/kraftwerk_operator/test_rebalance.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from kraft_operator.model import (
    BlockerStatus,
    PartitionMoveStatus,
    ReassignmentThrottleStatus,
    TopicThrottleStatus,
)
from kraft_operator.plan.actions import ClearReassignmentThrottles, SetReassignmentThrottles
from kraft_operator.plan.facts import PartitionDetail, ThrottleFacts
from kraft_operator.plan.roll import rfc3339_ms

__all__ = [
    "FOLLOWER_RATE",
    "FOLLOWER_REPLICAS",
    "LEADER_RATE",
    "LEADER_REPLICAS",
    "THROTTLE_BROKER_KEYS",
    "THROTTLE_TOPIC_KEYS",
    "clear_throttles",
    "moving_blockers",
    "rebalance_moves",
    "reassignment_throttle",
    "set_throttles",
    "throttle_in_force",
    "throttle_lost",
    "throttle_removal",
    "throttle_residue",
    "throttle_text",
]

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
THROTTLE_BROKER_KEYS = (LEADER_RATE, FOLLOWER_RATE)
THROTTLE_TOPIC_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)


def reassignment_throttle(
    moves: Iterable[PartitionMoveStatus], *, current: Iterable[PartitionDetail], rate_bytes_per_second: int
) -> ReassignmentThrottleStatus:
    """Kafka's throttle for moving each partition from its `current` replicas to the move's: the
    sources on the leader side, the added replicas on the follower side, the rate on every broker
    that is a source or a destination."""
    by_key = {(p.topic, p.partition): p for p in current}
    leaders: dict[str, set[tuple[int, int]]] = {}
    followers: dict[str, set[tuple[int, int]]] = {}
    brokers: set[int] = set()
    for move in moves:
        detail = by_key.get((move.topic, move.partition))
        sources = set(detail.replicas) if detail is not None else set()
        added = set(move.replicas) - sources
        leaders.setdefault(move.topic, set()).update((move.partition, b) for b in sources)
        followers.setdefault(move.topic, set()).update((move.partition, b) for b in added)
        brokers |= sources | set(move.replicas)
    topics = [TopicThrottleStatus(topic=t, leader_replicas=_replica_list(leaders.get(t, set())),
                                  follower_replicas=_replica_list(followers.get(t, set())))
              for t in sorted(set(leaders) | set(followers))]
    return ReassignmentThrottleStatus(rate_bytes_per_second=rate_bytes_per_second, brokers=sorted(brokers),
                                      topics=topics)


def _replica_list(items: set[tuple[int, int]]) -> str:
    return ",".join(f"{p}:{b}" for p, b in sorted(items))


def throttle_in_force(throttle: ReassignmentThrottleStatus, facts: ThrottleFacts) -> bool:
    """Whether what the cluster reports holds the throttle: every answering involved broker has
    both rates, every topic its replica lists (brokers that did not answer are not held against it)."""
    rate = str(throttle.rate_bytes_per_second)
    for broker in throttle.brokers:
        rates = facts.broker_rates.get(broker)
        if rates is not None and any(rates.get(k) != rate for k in THROTTLE_BROKER_KEYS):
            return False
    for topic in throttle.topics:
        found = facts.topic_replicas.get(topic.topic, {})
        if (found.get(LEADER_REPLICAS, "") != topic.leader_replicas
                or found.get(FOLLOWER_REPLICAS, "") != topic.follower_replicas):
            return False
    return True


def throttle_residue(throttle: ReassignmentThrottleStatus, facts: ThrottleFacts) -> list[str]:
    """What of the throttle the cluster still reports after its removal was asked (empty: gone),
    as `broker N: key=value` / `topic T: key=value` texts."""
    left = [f"broker {b}: {k}={v}" for b in throttle.brokers for k, v in sorted(facts.broker_rates.get(b, {}).items())
            if k in THROTTLE_BROKER_KEYS]
    left += [f"topic {t.topic}: {k}={v}" for t in throttle.topics
             for k, v in sorted(facts.topic_replicas.get(t.topic, {}).items()) if k in THROTTLE_TOPIC_KEYS and v]
    return left


def throttle_lost(throttle: ReassignmentThrottleStatus, facts: ThrottleFacts | None) -> bool:
    """Whether nothing of a throttle that was set shows (a lost send): it is set again."""
    return facts is not None and not throttle_in_force(throttle, facts) and not throttle_residue(throttle, facts)


def throttle_removal(
    throttle: ReassignmentThrottleStatus, *, facts: ThrottleFacts | None, now_ms: int, resend_after_ms: int
) -> tuple[Literal["send", "wait", "done"], list[str]]:
    """The removal's next step once the reassignment finished: send it (not sent yet, or sent a
    while ago and still showing), wait for it to show, or done; with what still shows."""
    if throttle.cleared_at is None:
        return "send", []
    if facts is None:
        return "wait", ["the throttle configs could not be read"]
    residue = throttle_residue(throttle, facts)
    if not residue:
        return "done", []
    if now_ms - rfc3339_ms(throttle.cleared_at) >= resend_after_ms:
        return "send", residue
    return "wait", residue


def set_throttles(throttle: ReassignmentThrottleStatus, *, reason: str) -> SetReassignmentThrottles:
    return SetReassignmentThrottles(
        rate_bytes_per_second=throttle.rate_bytes_per_second, brokers=tuple(throttle.brokers),
        topics=tuple((t.topic, t.leader_replicas, t.follower_replicas) for t in throttle.topics), reason=reason)


def clear_throttles(throttle: ReassignmentThrottleStatus, *, reason: str) -> ClearReassignmentThrottles:
    return ClearReassignmentThrottles(brokers=tuple(throttle.brokers), topics=tuple(t.topic for t in throttle.topics),
                                      reason=reason)


def throttle_text(throttle: ReassignmentThrottleStatus | None) -> str:
    if throttle is None:
        return "unthrottled"
    return f"throttled at {throttle.rate_bytes_per_second} B/s on brokers {throttle.brokers}"


def moving_blockers(moves: Iterable[PartitionMoveStatus], details: Iterable[PartitionDetail]) -> list[BlockerStatus]:
    """The moves not finished yet: a partition whose replicas are not exactly its target, or whose
    target replicas are not all in the ISR (a deleted topic has nothing left to move)."""
    by_key = {(p.topic, p.partition): p for p in details}
    blockers = []
    for m in moves:
        p = by_key.get((m.topic, m.partition))
        if p is None:
            continue
        if set(p.replicas) != set(m.replicas) or not set(m.replicas) <= set(p.isr):
            blockers.append(BlockerStatus(
                kind="partition", topic=p.topic, partition=p.partition, replicas=list(p.replicas), isr=list(p.isr),
                min_isr=p.min_isr,
                message=f"{p.topic}-{p.partition} moving to {m.replicas} (replicas {list(p.replicas)}, "
                f"ISR {list(p.isr)})"))
    return blockers


def rebalance_moves(details: Sequence[PartitionDetail], *, brokers: Sequence[int]) -> list[PartitionMoveStatus]:
    """Targets that spread the replicas evenly over `brokers` (by replica count), moving as few
    replicas as it can and only from the most loaded brokers to the least loaded.

    Greedy: while some broker holds at least two replicas more than another, one replica moves from
    the most loaded such broker to the least loaded one that is not already a replica of that
    partition; a follower is moved before a leader (no leadership change), the lowest
    topic/partition first (deterministic). Only partitions whose replicas are all in the ISR and
    on `brokers` are moved (an under-replicated partition or one under reassignment waits). Each
    move lowers the sum of squared loads, so it ends; the replication factor of every partition
    is kept and no partition gets a broker twice."""
    usable = sorted(set(brokers))
    load = dict.fromkeys(usable, 0)
    for p in details:
        for r in p.replicas:
            if r in load:
                load[r] += 1
    movable = sorted((p for p in details if p.replicas and set(p.replicas) <= set(p.isr)
                      and set(p.replicas) <= set(usable) and len(set(p.replicas)) == len(p.replicas)),
                     key=lambda p: (p.topic, p.partition))
    targets: dict[tuple[str, int], list[int]] = {(p.topic, p.partition): list(p.replicas) for p in movable}
    leaders = {(p.topic, p.partition): p.leader_id for p in movable}
    while True:
        move = _best_move(load, movable, targets, leaders)
        if move is None:
            break
        key, source, destination = move
        replicas = targets[key]
        replicas[replicas.index(source)] = destination
        load[source] -= 1
        load[destination] += 1
    originals = {(p.topic, p.partition): list(p.replicas) for p in movable}
    return [PartitionMoveStatus(topic=t, partition=i, replicas=r) for (t, i), r in sorted(targets.items())
            if r != originals[(t, i)]]


def _best_move(
    load: dict[int, int], movable: Sequence[PartitionDetail], targets: dict[tuple[str, int], list[int]],
    leaders: dict[tuple[str, int], int],
) -> tuple[tuple[str, int], int, int] | None:
    """The next replica to move: from the most loaded broker that can give one to a broker holding
    at least two fewer, to the least loaded such broker."""
    by_load = sorted(load, key=lambda b: (-load[b], b))
    for source in by_load:
        for destination in reversed(by_load):
            if load[source] - load[destination] < 2:
                break
            candidates = [key for key in (_key(p) for p in movable)
                          if source in targets[key] and destination not in targets[key]]
            if candidates:
                # A follower first (no leadership change), then the lowest topic/partition.
                candidates.sort(key=lambda key: (leaders[key] == source, key))
                return candidates[0], source, destination
    return None


def _key(p: PartitionDetail) -> tuple[str, int]:
    return (p.topic, p.partition)
