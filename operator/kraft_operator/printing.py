"""A KRaftCluster's status as `kubectl get kc -o wide` and `kubectl describe kc` show it.

`kraftwerk up` prints these while it runs, so the local runtime reads exactly like the cluster
would on Kubernetes: the get columns are the CRD's printer columns (`kraft_operator.crd`), the
describe layout is kubectl's (Name/Namespace/..., Status with Conditions, then Events).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from kraft_operator.model import ConditionType, KRaftCluster, KRaftClusterStatus
from kraft_operator.plan import Event

__all__ = ["age", "describe", "get_wide"]

_WIDE_HEADERS = (
    "NAME", "READY", "CONTROLLERS", "BROKERS", "LEADER", "EPOCH", "URP", "METADATAVERSION", "OPERATION", "AGE",
    "CLUSTERID", "WAITINGFOR",
)


def age(since: datetime | None, now: datetime) -> str:
    """kubectl's short age: 45s, 3m12s, 2h5m, 4d."""
    if since is None:
        return "<unknown>"
    seconds = max(0, int((now - since).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60}s" if seconds < 600 else f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{(seconds % 3600) // 60}m"
    return f"{seconds // 86400}d"


def _row(cluster: KRaftCluster, status: KRaftClusterStatus | None, *, created: datetime | None, now: datetime) -> list[str]:
    s = status or KRaftClusterStatus()
    ready = s.condition(ConditionType.READY)
    quorum = s.quorum
    return [
        cluster.metadata.name,
        ready.status.value if ready else "",
        s.controllers or "",
        s.brokers or "",
        str(quorum.leader_id) if quorum else "",
        str(quorum.leader_epoch) if quorum else "",
        str(s.partitions.under_replicated) if s.partitions else "",
        (s.metadata_version.finalized or "") if s.metadata_version else "",
        s.operation.name if s.operation else "",
        age(created, now),
        s.cluster_id or "",
        (s.operation.waiting_for[:60] if s.operation and s.operation.waiting_for else "<none>"),
    ]


def get_wide(
    cluster: KRaftCluster, status: KRaftClusterStatus | None, *, created: datetime | None, now: datetime
) -> str:
    rows = [list(_WIDE_HEADERS), _row(cluster, status, created=created, now=now)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_WIDE_HEADERS))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, indent: str = "  ") -> list[str]:
    all_rows = [list(headers), ["-" * len(h) for h in headers], *[list(r) for r in rows]]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(headers))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in all_rows]


def describe(
    cluster: KRaftCluster,
    status: KRaftClusterStatus | None,
    *,
    events: Sequence[tuple[datetime, Event]] = (),
    now: datetime | None = None,
) -> str:
    now = now or datetime.now(tz=UTC)
    s = status or KRaftClusterStatus()
    spec = cluster.spec
    pools = ", ".join(
        f"{p.name} ({','.join(r.value for r in p.roles)} x{p.replicas}, {p.implementation.value})"
        for p in spec.node_pools
    )
    lines = [
        f"Name:         {cluster.metadata.name}",
        f"Namespace:    {cluster.metadata.namespace or 'default'}",
        f"API Version:  {cluster.api_version}",
        f"Kind:         {cluster.kind}",
        "Spec:",
        f"  Node Pools:  {pools}",
        f"  Listeners:   {', '.join(f'{ln.name}:{ln.port}' for ln in spec.listeners)}; CONTROLLER:{spec.controller_port}",
        f"  Metadata Version:  {spec.metadata_version or '<newest every pool runs>'}",
        f"  Paused:      {str(spec.paused).lower()}",
        "Status:",
        f"  Cluster Id:           {s.cluster_id or '<none>'}",
        f"  Observed Generation:  {s.observed_generation}",
        f"  Controllers:          {s.controllers or ''}",
        f"  Brokers:              {s.brokers or ''}",
        "  Conditions:",
    ]
    lines += _table(
        ("Type", "Status", "Reason", "Last Transition", "Message"),
        [(c.type.value, c.status.value, c.reason, c.last_transition_time, c.message[:120]) for c in s.conditions],
        indent="    ",
    )
    if s.quorum is not None:
        q = s.quorum
        lines.append(f"  Quorum:  leader {q.leader_id}, epoch {q.leader_epoch}, high watermark {q.high_watermark}")
        lines += _table(
            ("Replica", "Kind", "Directory Id", "Log End Offset", "Lag", "Caught Up", "Endpoints"),
            [(str(r.id), "voter", r.directory_id, str(r.log_end_offset), str(r.lag), str(r.caught_up).lower(),
              ",".join(r.endpoints)) for r in q.voters]
            + [(str(r.id), "observer", r.directory_id, str(r.log_end_offset), str(r.lag), str(r.caught_up).lower(),
                ",".join(r.endpoints)) for r in q.observers],
            indent="    ",
        )
    lines.append("  Nodes:")
    lines += _table(
        ("Id", "Pool", "Roles", "Phase", "Version", "Formatted", "Registered", "Fenced", "Directory Ids"),
        [
            (str(n.id), n.pool, ",".join(r.value for r in n.roles), n.phase, n.version or "",
             str(n.formatted).lower(), "" if n.registered is None else str(n.registered).lower(),
             "" if n.fenced is None else str(n.fenced).lower(),
             ",".join(d.directory_id or "-" for d in n.directories))
            for n in s.nodes
        ],
        indent="    ",
    )
    if s.partitions is not None:
        p = s.partitions
        lines.append(
            f"  Partitions:  total {p.total}, under-replicated {p.under_replicated}, "
            f"under-min-ISR {p.under_min_isr}, offline {p.offline}"
        )
    if s.metadata_version is not None:
        lines.append(
            f"  Metadata Version:  finalized {s.metadata_version.finalized or '<unknown>'}, "
            f"target {s.metadata_version.target or '<none>'}"
        )
    if s.operation is not None:
        o = s.operation
        lines.append(f"  Operation:  {o.name}, step {o.step or '-'}, since {o.started_at}")
        if o.waiting_for:
            lines.append(f"    Waiting For:  {o.waiting_for}")
    else:
        lines.append("  Operation:  <none>")
    lines.append("Events:")
    if events:
        lines += _table(
            ("Type", "Reason", "Age", "From", "Message"),
            [(e.type.value, e.reason, age(at, now), "kraftwerk", e.message) for at, e in events[-15:]],
        )
    else:
        lines.append("  <none>")
    return "\n".join(lines)
