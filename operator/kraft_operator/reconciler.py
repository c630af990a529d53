"""One reconcile of one KRaftCluster: observe (runtime, then the cluster through the admin client),
plan (pure), apply the actions in order. Both the kopf handlers and `kraftwerk up` call this; they
differ only in the runtime they pass and in where they publish the returned status.

An action the runtime fails to perform stops the rest of that reconcile; the published status then
says so (Degraded, reason ActionFailed) and the next reconcile decides afresh from what exists.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kraft_operator.config_rules import EngineConfigRules
from kraft_operator.metrics import OperatorMetrics
from kraft_operator.model import Condition, ConditionStatus, ConditionType, KRaftCluster
from kraft_operator.observing import observe_cluster
from kraft_operator.plan import ConfigRules, Event, EventType, Plan, plan
from kraft_operator.runtime.port import Runtime, RuntimeActionError

__all__ = ["Reconciler"]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Reconciler:
    runtime: Runtime
    rules: ConfigRules = field(default_factory=EngineConfigRules)
    rng: random.Random = field(default_factory=random.Random)
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    clock_ms: Callable[[], int] = _now_ms
    admin_timeout_ms: int = 2000
    act: bool = True

    async def reconcile(self, cluster: KRaftCluster) -> Plan:
        started = time.monotonic()
        layout = self.runtime.layout(cluster)
        observed = await self.runtime.observe(cluster)
        facts = await observe_cluster(cluster, layout=layout, observed=observed, timeout_ms=self.admin_timeout_ms)
        observed = replace(observed, cluster=facts)
        result = plan(cluster, observed=observed, layout=layout, rules=self.rules, rng=self.rng, now_ms=self.clock_ms())
        failed = False
        if self.act:
            for action in result.actions:
                try:
                    await self.runtime.apply(cluster, action)
                except (RuntimeActionError, OSError) as e:
                    result = _action_failed(result, f"{type(action).__name__} for node {action.node.node_id}: {e}")
                    failed = True
                    break
        self.metrics.record(
            namespace=cluster.metadata.namespace or "default",
            cluster=cluster.metadata.name,
            result=result,
            duration_s=time.monotonic() - started,
            now_s=time.monotonic(),
            failed=failed,
        )
        return result


def _action_failed(result: Plan, message: str) -> Plan:
    conditions = []
    for condition in result.status.conditions:
        if condition.type is ConditionType.DEGRADED:
            conditions.append(
                Condition(
                    type=ConditionType.DEGRADED,
                    status=ConditionStatus.TRUE,
                    reason="ActionFailed",
                    message=message,
                    last_transition_time=condition.last_transition_time,
                    observed_generation=condition.observed_generation,
                )
            )
        else:
            conditions.append(condition)
    status = result.status.model_copy(update={"conditions": conditions})
    events = (*result.events, Event(EventType.WARNING, "ActionFailed", message))
    return replace(result, status=status, events=events, waiting_for=message)
