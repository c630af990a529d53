"""Adding and removing a JBOD log directory (a volume) of a running broker.

Adding one needs nothing of its own: the new volume changes the broker's rendered `log.dirs`, so
the roll restarts it behind its gates, and the broker formats the new, empty directory at its
start (meta.properties with the node's cluster.id and node.id and a new directory.id, as Kafka's
server does for a directory added to a formatted node) and registers it with the controller. The
planner therefore never runs `storage format` for a volume added to a node whose metadata volume
is formatted.

Removing one must not lose the replicas it holds: a broker restarted without a directory has
those replicas nowhere (Kafka counts them offline on that broker). So before the roll without
it, every replica is moved off with AlterReplicaLogDirs (Kafka's `kafka-reassign-partitions`
with `log_dirs` in its plan does the same), and the directory stays in the broker's rendered
`log.dirs` as long as the broker reports it holding a replica (`retained_log_dirs`). Once the
broker reports it empty, the rendered config drops it and the roll restarts the broker without it.
When the broker does not answer, the directory stays as its stored config has it: the operator
changes nothing it cannot see.

The operation (`LogDirRemoval` in `status.operation`, with `logDir` naming the node, the
directory and the moves) runs one directory at a time, persisting each plan before acting:

    planned   the moves (replica -> the staying directory with the most usable bytes, largest
              replica first) recorded with no action
    moving    AlterReplicaLogDirs to the broker for each recorded move whose replica is still in
              the leaving directory with no copy under way; it waits until the broker reports the
              directory empty (no replica, no future replica). A replica that appears there after
              the plan (a new partition) is planned and moved the same way
    refused   a move that cannot be done: the leaving directory is the only online one, or the
              staying ones lack the usable bytes; blockedBy names the replicas and the bytes, and
              nothing is sent. It re-checks at every reconcile (space may be freed)

Everything else (roll, scale-down, metadata.version) waits while a directory still holds replicas.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kraft_operator.model import (
    BlockerStatus,
    KRaftClusterStatus,
    LogDirMoveStatus,
    LogDirRemovalStatus,
    OperationStatus,
)
from kraft_operator.plan.actions import AlterReplicaLogDirs, Event, EventType, LogDirMove
from kraft_operator.plan.facts import Layout, LogDirFacts, Observed
from kraft_operator.plan.rendering import DesiredNode

__all__ = [
    "LOG_DIR_REMOVAL_OPERATION",
    "LogDirDecision",
    "MovePlan",
    "leaving_log_dirs",
    "plan_log_dir_moves",
    "plan_log_dir_removal",
    "retained_log_dirs",
]

LOG_DIR_REMOVAL_OPERATION = "LogDirRemoval"


def _spec_paths(node: DesiredNode, layout: Layout) -> list[str]:
    return [_path(layout.volume_path(node.ref, volume_id=v.id)) for v in node.pool.storage.volumes]


def _path(text: str) -> str:
    """A directory as compared here: a trailing slash is no other directory."""
    return text.strip().rstrip("/") or "/"


def _configured(node_config: Mapping[str, str] | None) -> list[str]:
    if node_config is None:
        return []
    return [_path(d) for d in node_config.get("log.dirs", "").split(",") if d.strip()]


def _holds_replicas(described: LogDirFacts) -> bool:
    return bool(described.replicas)


def retained_log_dirs(
    nodes: Sequence[DesiredNode], observed: Observed, *, layout: Layout
) -> dict[int, tuple[str, ...]]:
    """Each broker's `log.dirs` where it must differ from the spec's volumes: a directory the spec
    dropped stays while its broker reports it holding a replica, or while the broker does not
    answer and its stored config still lists it. Order: the stored config's, then new volumes."""
    retained: dict[int, tuple[str, ...]] = {}
    cluster = observed.cluster
    reported_all = cluster.log_dirs if cluster is not None and cluster.log_dirs is not None else {}
    for node in nodes:
        if not node.is_broker:
            continue
        facts = observed.nodes.get(node.ref.node_id)
        configured = _configured(facts.config if facts is not None else None)
        wanted = _spec_paths(node, layout)
        reported = reported_all.get(node.ref.node_id)
        keep: list[str] = []
        for path in configured:
            if path in wanted:
                continue
            if reported is None:
                keep.append(path)  # the broker does not answer: leave the directory as it is written
                continue
            described = next((d for d in reported if _path(d.path) == path), None)
            if described is not None and _holds_replicas(described):
                keep.append(path)
        if reported is not None:
            for described in reported:
                if _path(described.path) not in wanted and _path(described.path) not in keep and _holds_replicas(described):
                    keep.append(_path(described.path))
        if not keep:
            continue
        ordered = [p for p in configured if p in wanted or p in keep]
        ordered += [p for p in keep if p not in ordered] + [p for p in wanted if p not in ordered]
        retained[node.ref.node_id] = tuple(ordered)
    return retained


@dataclass(frozen=True, slots=True)
class LeavingDir:
    node: DesiredNode
    path: str
    described: LogDirFacts
    staying: tuple[LogDirFacts, ...]  # the broker's other online directories the spec keeps


def leaving_log_dirs(nodes: Sequence[DesiredNode], observed: Observed, *, layout: Layout) -> list[LeavingDir]:
    """Directories the spec dropped that their broker reports holding replicas, in node order."""
    cluster = observed.cluster
    reported_all = cluster.log_dirs if cluster is not None and cluster.log_dirs is not None else {}
    leaving: list[LeavingDir] = []
    for node in nodes:
        reported = reported_all.get(node.ref.node_id)
        if not node.is_broker or reported is None:
            continue
        wanted = _spec_paths(node, layout)
        staying = tuple(d for d in reported if _path(d.path) in wanted and d.error is None)
        leaving += [LeavingDir(node, d.path, d, staying) for d in reported
                    if _path(d.path) not in wanted and _holds_replicas(d)]
    return leaving


@dataclass(frozen=True, slots=True)
class MovePlan:
    """Where each replica of a leaving directory goes, or why it cannot go anywhere."""

    moves: tuple[LogDirMove, ...]
    refused: tuple[str, ...]


def plan_log_dir_moves(leaving: LogDirFacts, staying: Sequence[LogDirFacts], *,
                       recorded: Mapping[tuple[str, int], str] | None = None) -> MovePlan:
    """Moves for every replica still in `leaving`: one whose copy is under way keeps going where
    it goes (a future replica in a staying directory); a recorded target is kept while that
    directory is still an online staying one; the others go, largest first, to the staying
    directory with the most usable bytes left after the moves planned so far (one whose usable
    bytes the broker did not report only when none is known to fit). A replica no directory has
    room for is refused, naming the bytes; so is every replica when no other directory is online
    (the leaving one is the last)."""
    recorded = recorded or {}
    current = [r for r in leaving.replicas if not r.future]
    futures = {(r.topic, r.partition): d.path for d in staying for r in d.replicas if r.future}
    moving_elsewhere = set(futures)
    room = {d.path: d.usable_bytes for d in staying}
    moves: list[LogDirMove] = []
    refused: list[str] = []
    if not staying:
        for r in sorted(current, key=lambda r: (r.topic, r.partition)):
            refused.append(f"{r.topic}-{r.partition} ({r.size_bytes} bytes) in {leaving.path}: no other online log "
                           "directory on this broker to move it to (the last one); add a volume first, in its own roll")
        return MovePlan((), tuple(refused))
    pending = []
    for r in current:
        target = futures.get((r.topic, r.partition), recorded.get((r.topic, r.partition)))
        if target is not None and target in room:
            moves.append(LogDirMove(r.topic, r.partition, target, r.size_bytes))
            if (r.topic, r.partition) not in moving_elsewhere and room[target] >= 0:
                room[target] -= r.size_bytes
        else:
            pending.append(r)
    for r in sorted(pending, key=lambda r: (-r.size_bytes, r.topic, r.partition)):
        # the most room among those known to fit it; a directory whose room is unknown only after them
        fitting = [p for p in room if room[p] >= r.size_bytes] or [p for p in room if room[p] < 0]
        if not fitting:
            roomiest = max(room, key=lambda p: (room[p], p))
            refused.append(f"{r.topic}-{r.partition} ({r.size_bytes} bytes) in {leaving.path}: no staying log "
                           f"directory has room for it (the most usable: {roomiest} with {room[roomiest]} bytes left)")
            continue
        target = max(fitting, key=lambda p: (room[p], p))
        moves.append(LogDirMove(r.topic, r.partition, target, r.size_bytes))
        if room[target] >= 0:
            room[target] -= r.size_bytes
    moves.sort(key=lambda m: (m.topic, m.partition))
    return MovePlan(tuple(moves), tuple(refused))


@dataclass(frozen=True, slots=True)
class LogDirDecision:
    """What the removal does this reconcile; `operation` is None when no directory holds replicas
    the spec no longer has room for."""

    operation: OperationStatus | None = None
    actions: tuple[AlterReplicaLogDirs, ...] = ()
    events: tuple[Event, ...] = ()
    waiting: str = ""
    refused: str = ""
    requeue_now: bool = False


def plan_log_dir_removal(
    *,
    nodes: Sequence[DesiredNode],
    observed: Observed,
    previous: KRaftClusterStatus | None,
    layout: Layout,
    paused: bool,
    now_text: str,
) -> LogDirDecision:
    """The removal's step this reconcile (see the module docstring)."""
    prev = previous.operation if previous is not None else None
    prev = prev if prev is not None and prev.name == LOG_DIR_REMOVAL_OPERATION and prev.log_dir is not None else None
    leaving = leaving_log_dirs(nodes, observed, layout=layout)
    if prev is not None and prev.log_dir is not None:
        record = prev.log_dir
        same = next((d for d in leaving if d.node.ref.node_id == record.node_id and d.path == record.path), None)
        if same is None:
            reported = (observed.cluster.log_dirs or {}).get(record.node_id) if observed.cluster is not None else None
            if reported is None and any(n.ref.node_id == record.node_id for n in _brokers(nodes)):
                # its broker does not answer now: keep the record, act on nothing unseen
                return LogDirDecision(operation=prev, waiting=f"broker {record.node_id} to answer DescribeLogDirs "
                                      f"(moving replicas off {record.path})")
            done = Event(EventType.NORMAL, "LogDirDrained",
                         f"node {record.node_id}: log directory {record.path} holds no replica; the roll restarts the "
                         "broker without it")
            return LogDirDecision(events=(done,)) if not leaving else _start(leaving[0], paused=paused,
                                                                                 now_text=now_text, events=(done,))
        return _continue(same, prev, record, paused=paused)
    if not leaving:
        return LogDirDecision()
    return _start(leaving[0], paused=paused, now_text=now_text, events=())


def _brokers(nodes: Sequence[DesiredNode]) -> list[DesiredNode]:
    return [n for n in nodes if n.is_broker]


def _what(d: LeavingDir) -> str:
    return f"node {d.node.ref.node_id}: log directory {d.path}"


def _start(d: LeavingDir, *, paused: bool, now_text: str, events: tuple[Event, ...]) -> LogDirDecision:
    """A directory to empty: plan its moves and record them (persist before act), or refuse."""
    plan = plan_log_dir_moves(d.described, d.staying)
    record = LogDirRemovalStatus(node_id=d.node.ref.node_id, path=d.path, moves=_moves_status(plan.moves))
    if plan.refused:
        return _refusal(d, plan, record=record, started=now_text, events=events, first=True)
    if paused:
        return LogDirDecision(events=events)
    count = len(d.described.replicas)
    planned = Event(EventType.NORMAL, "LogDirRemovalPlanned",
                    f"{_what(d)} leaves the spec and holds {count} replica(s); moving them to "
                    f"{sorted({m.log_dir for m in plan.moves})} with AlterReplicaLogDirs before the broker restarts "
                    "without it")
    operation = OperationStatus(name=LOG_DIR_REMOVAL_OPERATION, step="planned", started_at=now_text, log_dir=record)
    return LogDirDecision(operation=operation, events=(*events, planned), requeue_now=True,
                          waiting=f"{_what(d)}: the moves of its {count} replica(s) recorded before they are sent")


def _continue(d: LeavingDir, prev: OperationStatus, record: LogDirRemovalStatus, *, paused: bool) -> LogDirDecision:
    recorded = {(m.topic, m.partition): m.log_dir for m in record.moves}
    plan = plan_log_dir_moves(d.described, d.staying, recorded=recorded)
    renewed = record.model_copy(update={"moves": _moves_status(plan.moves)})
    started = prev.started_at or ""
    if plan.refused:
        return _refusal(d, plan, record=renewed, started=started, events=(), first=prev.step != "refused")
    if paused:
        return LogDirDecision(operation=prev.model_copy(update={"step": "paused"}), waiting="reconciliation is paused")
    new = [m for m in plan.moves if (m.topic, m.partition) not in recorded]
    if new:
        # A replica that appeared in the directory after the plan: record its move first.
        operation = prev.model_copy(update={"step": "planned", "log_dir": renewed, "blocked_by": []})
        return LogDirDecision(operation=operation, requeue_now=True,
                              waiting=f"{_what(d)}: the moves of {len(new)} more replica(s) recorded before they are sent")
    moving = {(r.topic, r.partition) for s in d.staying for r in s.replicas if r.future}
    to_send = tuple(m for m in plan.moves if (m.topic, m.partition) not in moving)
    operation = prev.model_copy(update={"step": "moving", "log_dir": renewed, "blocked_by": []})
    remaining = len([r for r in d.described.replicas if not r.future])
    waiting = (f"{_what(d)}: {remaining} replica(s) still there, {len(moving)} copying to "
               f"{sorted({m.log_dir for m in plan.moves})}")
    if not to_send:
        return LogDirDecision(operation=operation, waiting=waiting)
    action = AlterReplicaLogDirs(
        node=d.node.ref, moves=to_send,
        reason=f"node {d.node.ref.node_id}: AlterReplicaLogDirs moves " + ", ".join(
            f"{m.topic}-{m.partition} to {m.log_dir}" for m in to_send[:10])
        + (f" and {len(to_send) - 10} more" if len(to_send) > 10 else "") + f" off {d.path}, which leaves the spec")
    return LogDirDecision(operation=operation, actions=(action,), waiting=waiting,
                          events=(Event(EventType.NORMAL, "AlterReplicaLogDirs", action.reason),))


def _refusal(d: LeavingDir, plan: MovePlan, *, record: LogDirRemovalStatus, started: str,
             events: tuple[Event, ...], first: bool) -> LogDirDecision:
    blockers = [BlockerStatus(kind="log-dir", node_id=d.node.ref.node_id, message=reason) for reason in plan.refused]
    message = (f"{_what(d)} cannot be emptied, so the broker does not restart without it: "
               + "; ".join(plan.refused[:5]) + (f" and {len(plan.refused) - 5} more" if len(plan.refused) > 5 else ""))
    operation = OperationStatus(name=LOG_DIR_REMOVAL_OPERATION, step="refused", started_at=started,
                                blocked_by=blockers, log_dir=record)
    if first:
        events = (*events, Event(EventType.WARNING, "LogDirRemovalRefused", message))
    return LogDirDecision(operation=operation, events=events, refused=message)


def _moves_status(moves: Sequence[LogDirMove]) -> list[LogDirMoveStatus]:
    return [LogDirMoveStatus(topic=m.topic, partition=m.partition, log_dir=m.log_dir) for m in moves]
