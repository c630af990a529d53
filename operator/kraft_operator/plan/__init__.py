"""The operator's planner: pure functions from (spec, last status, observed facts) to the next
actions and the status to publish, with why it acts or what blocks it.

As pure as the engine's raft core: no asyncio, os, socket, time or random (import-linter holds
that), typed with mypy's strict mode. Time is `now_ms`, randomness a handed `random.Random`, and
the two things that differ per runtime arrive as ports: `Layout` (hosts, ports, directories) and
`ConfigRules` (the engine's server.properties rules, which live in the node's `server` package).

    result = plan(cluster, observed=Observed(...), layout=layout, rules=rules, rng=rng, now_ms=now)
    result.actions     # WriteConfig / FormatStorage / StartNode / RestartNode / StopNode / ..., in order
    result.status      # the KRaftClusterStatus to publish
    result.events      # Kubernetes Events (Normal for actions, Warning for refusals and problems)
"""

from kraft_operator.plan.actions import (
    Action,
    AddVoter,
    AlterReplicaLogDirs,
    ClearReassignmentThrottles,
    Event,
    EventType,
    FinalizeMetadataVersion,
    FormatStorage,
    LogDirMove,
    PartitionMove,
    PlannedAction,
    QuorumBootstrap,
    ReassignPartitions,
    RemoveVoter,
    ReplaceVolume,
    ResizeVolume,
    RestartNode,
    SetReassignmentThrottles,
    StartNode,
    StopNode,
    UnregisterBroker,
    WriteConfig,
)
from kraft_operator.plan.facts import (
    BrokerFacts,
    ClusterFacts,
    ConfigRules,
    FormatJobFacts,
    JobPhase,
    Layout,
    LogDirFacts,
    LogDirReplica,
    NodeFacts,
    NodeRef,
    Observed,
    PartitionDetail,
    PartitionFacts,
    PodPhase,
    QuorumFacts,
    ReplicaFacts,
    ThrottleFacts,
    VolumeFacts,
    replication_factors,
)
from kraft_operator.plan.gates import (
    broker_gate,
    controller_gate,
    is_down,
    not_recovered,
    removal_gate,
    voter_caught_up,
)
from kraft_operator.plan.log_dirs import (
    LOG_DIR_REMOVAL_OPERATION,
    plan_log_dir_moves,
    plan_log_dir_removal,
    retained_log_dirs,
)
from kraft_operator.plan.planning import Plan, plan
from kraft_operator.plan.quorum_change import QUORUM_CHANGE_OPERATION, plan_quorum_change
from kraft_operator.plan.reassignment import (
    THROTTLE_BROKER_KEYS,
    THROTTLE_TOPIC_KEYS,
    reassignment_throttle,
    rebalance_moves,
)
from kraft_operator.plan.rendering import (
    CONTROLLER_LISTENER,
    MANAGED_KEYS,
    DesiredNode,
    desired_nodes,
    render_config,
)
from kraft_operator.plan.resizing import grow_volumes
from kraft_operator.plan.roll import ROLL_OPERATION, RollDecision, node_revision, plan_roll, revision_change
from kraft_operator.plan.scale_down import (
    SCALE_DOWN_OPERATION,
    even_controllers,
    plan_scale_down,
)
from kraft_operator.plan.validation import (
    LATEST_PRODUCTION,
    SpecProblem,
    parse_quantity_bytes,
    target_metadata_version,
    validate_spec,
)

__all__ = [
    "Action",
    "AddVoter",
    "AlterReplicaLogDirs",
    "BrokerFacts",
    "CONTROLLER_LISTENER",
    "ClearReassignmentThrottles",
    "ClusterFacts",
    "ConfigRules",
    "DesiredNode",
    "Event",
    "EventType",
    "FinalizeMetadataVersion",
    "FormatJobFacts",
    "FormatStorage",
    "JobPhase",
    "LATEST_PRODUCTION",
    "LOG_DIR_REMOVAL_OPERATION",
    "Layout",
    "LogDirFacts",
    "LogDirMove",
    "LogDirReplica",
    "MANAGED_KEYS",
    "NodeFacts",
    "NodeRef",
    "Observed",
    "PartitionDetail",
    "PartitionFacts",
    "PartitionMove",
    "Plan",
    "PlannedAction",
    "PodPhase",
    "QUORUM_CHANGE_OPERATION",
    "QuorumBootstrap",
    "QuorumFacts",
    "ROLL_OPERATION",
    "ReassignPartitions",
    "RemoveVoter",
    "ReplaceVolume",
    "ReplicaFacts",
    "ResizeVolume",
    "RestartNode",
    "RollDecision",
    "SCALE_DOWN_OPERATION",
    "SetReassignmentThrottles",
    "SpecProblem",
    "StartNode",
    "StopNode",
    "THROTTLE_BROKER_KEYS",
    "THROTTLE_TOPIC_KEYS",
    "ThrottleFacts",
    "UnregisterBroker",
    "VolumeFacts",
    "WriteConfig",
    "broker_gate",
    "controller_gate",
    "desired_nodes",
    "even_controllers",
    "grow_volumes",
    "is_down",
    "node_revision",
    "not_recovered",
    "parse_quantity_bytes",
    "plan",
    "plan_log_dir_moves",
    "plan_log_dir_removal",
    "plan_quorum_change",
    "plan_roll",
    "plan_scale_down",
    "reassignment_throttle",
    "rebalance_moves",
    "removal_gate",
    "render_config",
    "retained_log_dirs",
    "revision_change",
    "replication_factors",
    "target_metadata_version",
    "validate_spec",
    "voter_caught_up",
]
