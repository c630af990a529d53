"""Safety invariants checked after every simulation event, after Kafka's RaftEventSimulationTest.

The checks read plain snapshots of each node (`NodeView`) instead of reaching into the raft
core, for two reasons: the same checks then apply to any core that can be observed this way,
and a test can hand-construct views that a broken core would produce (two leaders in one epoch,
a high watermark moving backwards) and prove that every check actually fires.

Checks that compare against the past (monotonic epoch and high watermark, single leader per
epoch, consistent committed data) keep their own memory of what they have seen, so a value that
vanishes in a crash is still held against the node afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kraft_engine.errors import SimulationError

__all__ = [
    "AtMostOneUncommittedVoterSet",
    "ConsistentCommittedData",
    "ElectionRecord",
    "Invariant",
    "LeaderNeverLoadSnapshot",
    "MajorityReachedHighWatermark",
    "MonotonicEpoch",
    "MonotonicHighWatermark",
    "NodeView",
    "SimulationFailure",
    "SingleLeader",
    "SnapshotAtLogStart",
    "Violation",
    "default_invariants",
]


class Violation(SimulationError):
    """Raised by an invariant; the scheduler adds the seed and event index."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


class SimulationFailure(SimulationError):
    """A broken invariant (or missed liveness bound) in a seeded run: everything needed to replay it."""

    def __init__(self, *, seed: int, event_index: int, now_ms: int, invariant: str, detail: str) -> None:
        super().__init__(
            f"seed {seed}: invariant {invariant} violated at event {event_index} "
            f"(t={now_ms} ms): {detail}"
        )
        self.seed = seed
        self.event_index = event_index
        self.now_ms = now_ms
        self.invariant = invariant
        self.detail = detail


@dataclass(frozen=True)
class ElectionRecord:
    """What a node's durable quorum-state says: epoch, elected leader, vote (None = absent)."""

    epoch: int
    leader_id: int | None
    voted_id: int | None


@dataclass(frozen=True)
class NodeView:
    """One node as the invariants see it at one instant.

    Durable fields (`persisted`, the log offsets, snapshots) exist whether or not the node runs;
    the in-memory fields are None/False while it is down.
    """

    node_id: int
    running: bool
    persisted: ElectionRecord | None
    log_start_offset: int
    log_end_offset: int
    # (end offset, epoch) of the oldest snapshot on disk, and the epoch the log records for the
    # batch ending right before that offset (None when the log no longer knows: it starts there).
    earliest_snapshot: tuple[int, int] | None = None
    # True when the node's log agrees that the earliest snapshot's (offset, epoch) is valid.
    earliest_snapshot_valid: bool = True
    epoch: int | None = None
    is_leader: bool = False
    high_watermark: int | None = None
    # The voter ids this node currently believes in (the leader's view is the authoritative one),
    # including an uncommitted change; for a leader of a dynamic quorum also the voter set as of
    # its high watermark, and how many distinct uncommitted voter sets its log holds past it.
    voter_ids: frozenset[int] = frozenset()
    committed_voter_ids: frozenset[int] | None = None
    uncommitted_voter_sets: int = 0
    # The state machine claims the leader's epoch (it may append) ...
    writable: bool = False
    # ... and how many snapshots it was asked to load since the last leader change.
    snapshot_loads_since_leader_change: int = 0
    # (offset, value) of every data record this incarnation of the node's state machine applied,
    # in order, append-only; `incarnation` changes on each restart so checkers know to re-read.
    committed: Sequence[tuple[int, int]] = ()
    incarnation: int = 0


class Invariant:
    """A safety property; `check` raises `Violation` when the views break it."""

    name = "Invariant"

    def check(self, views: Sequence[NodeView]) -> None:
        raise NotImplementedError

    def fail(self, detail: str) -> Violation:
        return Violation(self.name, detail)


def _leader_with_max_epoch(views: Iterable[NodeView]) -> NodeView | None:
    leaders = [v for v in views if v.running and v.is_leader and v.epoch is not None]
    return max(leaders, key=lambda v: v.epoch or 0, default=None)


def _majority(size: int) -> int:
    return size // 2 + 1


class SingleLeader(Invariant):
    """At most one leader per epoch, judged from durable quorum-state (as Kafka does)."""

    name = "SingleLeader"

    def __init__(self) -> None:
        self._leaders: dict[int, int] = {}

    def check(self, views: Sequence[NodeView]) -> None:
        for view in views:
            record = view.persisted
            if record is None or record.leader_id is None:
                continue
            known = self._leaders.setdefault(record.epoch, record.leader_id)
            if known != record.leader_id:
                raise self.fail(
                    f"epoch {record.epoch} has two leaders: {known} and {record.leader_id} "
                    f"(seen in node {view.node_id}'s quorum-state)"
                )
        # Also in memory: two nodes acting as leader of the same epoch.
        acting: dict[int, int] = {}
        for view in views:
            if view.running and view.is_leader and view.epoch is not None:
                other = acting.setdefault(view.epoch, view.node_id)
                if other != view.node_id:
                    raise self.fail(f"nodes {other} and {view.node_id} both lead epoch {view.epoch}")


class MonotonicEpoch(Invariant):
    """The durable epoch never decreases, and a running node's epoch equals its durable one."""

    name = "MonotonicEpoch"

    def __init__(self) -> None:
        self._epochs: dict[int, int] = {}

    def forget(self, node_id: int) -> None:
        """A wiped disk starts over legitimately (Kafka drops this check for that scenario)."""
        self._epochs.pop(node_id, None)

    def check(self, views: Sequence[NodeView]) -> None:
        for view in views:
            record = view.persisted
            if record is None:
                continue
            old = self._epochs.get(view.node_id, 0)
            if record.epoch < old:
                raise self.fail(f"node {view.node_id}'s persisted epoch went back {old} -> {record.epoch}")
            self._epochs[view.node_id] = record.epoch
            if view.running and view.epoch is not None and view.epoch != record.epoch:
                raise self.fail(
                    f"node {view.node_id} runs in epoch {view.epoch} but persisted epoch {record.epoch}"
                )


class MonotonicHighWatermark(Invariant):
    """The high watermark of the leader with the highest epoch never goes backwards.

    A deposed leader cut off from the quorum still believes it leads its old epoch; when the new
    leader steps down for a moment it can be the highest-epoch leader still running. Its HWM is
    not the cluster's any more, so leaders of an epoch below the highest one seen are skipped.
    """

    name = "MonotonicHighWatermark"

    def __init__(self) -> None:
        self._high_watermark = 0
        self._epoch = 0

    def check(self, views: Sequence[NodeView]) -> None:
        leader = _leader_with_max_epoch(views)
        if leader is None or leader.high_watermark is None or leader.epoch is None:
            return
        if leader.epoch < self._epoch:
            return
        self._epoch = leader.epoch
        if leader.high_watermark < self._high_watermark:
            raise self.fail(
                f"leader {leader.node_id} (epoch {leader.epoch}) has high watermark "
                f"{leader.high_watermark} after {self._high_watermark} was reached"
            )
        self._high_watermark = leader.high_watermark


class MajorityReachedHighWatermark(Invariant):
    """A majority of the leader's voters hold (in their logs) every offset below its HWM.

    During a voter change the HWM may still be the one computed under the previous voter set
    (the change is in force as soon as it is read, before the HWM is recomputed), so, as Kafka's
    check does, a shortfall under the latest set is judged again under the set as of the HWM.
    """

    name = "MajorityReachedHighWatermark"

    def check(self, views: Sequence[NodeView]) -> None:
        leader = _leader_with_max_epoch(views)
        if leader is None or leader.high_watermark is None or not leader.voter_ids:
            return
        hwm = leader.high_watermark
        candidates = [leader.voter_ids]
        if leader.committed_voter_ids is not None and leader.committed_voter_ids != leader.voter_ids:
            candidates.append(leader.committed_voter_ids)
        for voter_ids in candidates:
            reached = [v.node_id for v in views if v.node_id in voter_ids and v.log_end_offset >= hwm]
            if len(reached) >= _majority(len(voter_ids)):
                return
        raise self.fail(
            f"leader {leader.node_id} has high watermark {hwm} but only voters {sorted(reached)} "
            f"of {sorted(voter_ids)} reached it"
        )


class AtMostOneUncommittedVoterSet(Invariant):
    """KIP-853 changes one voter at a time: past the HWM the leader's log holds at most one
    voter set that differs from the committed one."""

    name = "AtMostOneUncommittedVoterSet"

    def check(self, views: Sequence[NodeView]) -> None:
        for view in views:
            if view.is_leader and view.uncommitted_voter_sets > 1:
                raise self.fail(
                    f"leader {view.node_id} has {view.uncommitted_voter_sets} uncommitted voter sets in its log"
                )


class SnapshotAtLogStart(Invariant):
    """The oldest snapshot sits at the log start (or beyond it) and the log agrees with its epoch."""

    name = "SnapshotAtLogStart"

    def check(self, views: Sequence[NodeView]) -> None:
        for view in views:
            if view.earliest_snapshot is None:
                continue
            offset, epoch = view.earliest_snapshot
            if view.log_start_offset > offset:
                raise self.fail(
                    f"node {view.node_id}: log start {view.log_start_offset} is beyond its oldest "
                    f"snapshot {offset}-{epoch}"
                )
            if view.log_start_offset > 0 and view.log_start_offset != offset:
                raise self.fail(
                    f"node {view.node_id}: no snapshot at log start {view.log_start_offset} "
                    f"(oldest is {offset}-{epoch})"
                )
            if not view.earliest_snapshot_valid:
                raise self.fail(
                    f"node {view.node_id}: its log disagrees with snapshot {offset}-{epoch}"
                )


class LeaderNeverLoadSnapshot(Invariant):
    """A state machine that may write (claims the leader epoch) is never asked to load a snapshot."""

    name = "LeaderNeverLoadSnapshot"

    def check(self, views: Sequence[NodeView]) -> None:
        for view in views:
            if view.running and view.writable and view.snapshot_loads_since_leader_change:
                raise self.fail(
                    f"node {view.node_id} loaded {view.snapshot_loads_since_leader_change} "
                    "snapshot(s) while leader"
                )


class ConsistentCommittedData(Invariant):
    """Every node that reports an offset as committed reports the same value for it, forever.

    Kafka checks this once at the end (it is costly on a JVM log); here it is cheap enough to
    run incrementally, and it is also run as the final validation of every scenario.
    """

    name = "ConsistentCommittedData"

    def __init__(self) -> None:
        self._values: dict[int, tuple[int, int]] = {}  # offset -> (value, first node to commit it)
        # How far each (node, incarnation) has been checked: the lists are append-only.
        self._cursors: dict[tuple[int, int], int] = {}

    def check(self, views: Sequence[NodeView]) -> None:
        for view in views:
            key = (view.node_id, view.incarnation)
            start = self._cursors.get(key, 0)
            self._cursors[key] = len(view.committed)
            for offset, value in view.committed[start:]:
                known = self._values.setdefault(offset, (value, view.node_id))
                if known[0] != value:
                    raise self.fail(
                        f"offset {offset} committed as {known[0]} on node {known[1]} "
                        f"but as {value} on node {view.node_id}"
                    )


def default_invariants() -> list[Invariant]:
    """The set every scenario runs with unless it documents why one cannot hold."""
    return [
        SingleLeader(),
        MonotonicEpoch(),
        MonotonicHighWatermark(),
        MajorityReachedHighWatermark(),
        SnapshotAtLogStart(),
        LeaderNeverLoadSnapshot(),
        ConsistentCommittedData(),
        AtMostOneUncommittedVoterSet(),
    ]
