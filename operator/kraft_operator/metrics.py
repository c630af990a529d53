"""The operator's own Prometheus metrics: how often and how long it reconciles each cluster, what
operation each cluster is in, and how long each has been blocked.

    kraftwerk_operator_reconciles_total{namespace,cluster,result}      result: acted, idle, refused, failed
    kraftwerk_operator_reconcile_duration_seconds{namespace,cluster}    histogram, observe + plan + apply
    kraftwerk_operator_actions_total{namespace,cluster,action}          WriteConfig, FormatStorage, StartNode
    kraftwerk_operator_operation{namespace,cluster,operation,step}      1 for the operation in progress
    kraftwerk_operator_blocked_seconds_total{namespace,cluster}         time spent Degraded, refused, or with a gate holding the operation
    kraftwerk_operator_cluster_ready{namespace,cluster}                 1 when the Ready condition is True

Everything goes to the registry given (a private one by default, so tests and several operators
in one process never collide); `/metrics` serves it (`serve`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from kraft_operator.model import ConditionStatus, ConditionType
from kraft_operator.plan import Plan

__all__ = ["OperatorMetrics"]


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = ["namespace", "cluster"]
        self.reconciles = Counter(
            "kraftwerk_operator_reconciles", "Reconciles per cluster by result", [*labels, "result"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "kraftwerk_operator_reconcile_duration_seconds", "One reconcile: observe, plan, apply", labels,
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.actions = Counter(
            "kraftwerk_operator_actions", "Actions performed", [*labels, "action"], registry=self.registry
        )
        self.operation = Gauge(
            "kraftwerk_operator_operation", "The operation in progress (1)", [*labels, "operation", "step"],
            registry=self.registry,
        )
        self.blocked = Counter(
            "kraftwerk_operator_blocked_seconds", "Time spent Degraded, with a refused spec, or with a gate holding the operation", labels,
            registry=self.registry,
        )
        self.ready = Gauge("kraftwerk_operator_cluster_ready", "1 when Ready is True", labels, registry=self.registry)
        self._operation_labels: dict[tuple[str, str], tuple[str, str]] = {}
        self._blocked_since: dict[tuple[str, str], float] = {}

    def record(
        self, *, namespace: str, cluster: str, result: Plan, duration_s: float, now_s: float, failed: bool = False
    ) -> None:
        key = (namespace, cluster)
        degraded = result.status.condition(ConditionType.DEGRADED)
        is_degraded = degraded is not None and degraded.status is ConditionStatus.TRUE
        refused = is_degraded and degraded is not None and degraded.reason == "InvalidSpec"
        outcome = "failed" if failed else "refused" if refused else "acted" if result.actions else "idle"
        self.reconciles.labels(namespace, cluster, outcome).inc()
        self.duration.labels(namespace, cluster).observe(duration_s)
        for action in result.actions:
            self.actions.labels(namespace, cluster, type(action).__name__).inc()
        previous = self._operation_labels.pop(key, None)
        if previous is not None:
            self.operation.remove(namespace, cluster, *previous)
        operation = result.status.operation
        if operation is not None:
            self._operation_labels[key] = (operation.name, operation.step)
            self.operation.labels(namespace, cluster, operation.name, operation.step).set(1)
        since = self._blocked_since.pop(key, None)
        if since is not None:
            self.blocked.labels(namespace, cluster).inc(max(0.0, now_s - since))
        roll_blocked = operation is not None and bool(operation.blocked_by)
        if is_degraded or failed or roll_blocked:
            self._blocked_since[key] = now_s
        ready = result.status.condition(ConditionType.READY)
        self.ready.labels(namespace, cluster).set(1 if ready is not None and ready.status is ConditionStatus.TRUE else 0)

    def serve(self, port: int, *, addr: str = "0.0.0.0") -> None:
        """Serve /metrics on `port` from a background thread."""
        start_http_server(port, addr=addr, registry=self.registry)
