"""The operator's planner: pure functions from (spec, last status, observed facts) to the next
actions and the status to publish, with why it acts or what blocks it.

As pure as the engine's raft core: no asyncio, os, socket, time or random (import-linter holds
that), typed with mypy's strict mode. Time is `now_ms`, randomness a handed `random.Random`, and
the two things that differ per runtime arrive as ports: `Layout` (hosts, ports, directories) and
`ConfigRules` (the engine's server.properties rules, which live in the node's `server` package).

    result = plan(cluster, observed=Observed(...), layout=layout, rules=rules, rng=rng, now_ms=now)
    result.actions     # WriteConfig / FormatStorage / StartNode, in order
    result.status      # the KRaftClusterStatus to publish
    result.events      # Kubernetes Events (Normal for actions, Warning for refusals and problems)
"""

from kraft_operator.plan.actions import (
    Action,
    Event,
    EventType,
    FormatStorage,
    QuorumBootstrap,
    StartNode,
    WriteConfig,
)
from kraft_operator.plan.facts import (
    BrokerFacts,
    ClusterFacts,
    ConfigRules,
    FormatJobFacts,
    JobPhase,
    Layout,
    NodeFacts,
    NodeRef,
    Observed,
    PartitionFacts,
    PodPhase,
    QuorumFacts,
    ReplicaFacts,
    VolumeFacts,
)
from kraft_operator.plan.planning import Plan, plan
from kraft_operator.plan.rendering import (
    CONTROLLER_LISTENER,
    MANAGED_KEYS,
    DesiredNode,
    desired_nodes,
    render_config,
)
from kraft_operator.plan.validation import (
    ENGINE_HAS_BROKER,
    LATEST_PRODUCTION,
    SpecProblem,
    parse_quantity_bytes,
    target_metadata_version,
    validate_spec,
)

__all__ = [
    "CONTROLLER_LISTENER",
    "ENGINE_HAS_BROKER",
    "LATEST_PRODUCTION",
    "MANAGED_KEYS",
    "Action",
    "BrokerFacts",
    "ClusterFacts",
    "ConfigRules",
    "DesiredNode",
    "Event",
    "EventType",
    "FormatJobFacts",
    "FormatStorage",
    "JobPhase",
    "Layout",
    "NodeFacts",
    "NodeRef",
    "Observed",
    "PartitionFacts",
    "Plan",
    "PodPhase",
    "QuorumBootstrap",
    "QuorumFacts",
    "ReplicaFacts",
    "SpecProblem",
    "StartNode",
    "VolumeFacts",
    "WriteConfig",
    "desired_nodes",
    "parse_quantity_bytes",
    "plan",
    "render_config",
    "target_metadata_version",
    "validate_spec",
]
