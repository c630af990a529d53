"""Deterministic simulation: a seeded scheduler, an in-memory network that drops, delays,
duplicates and partitions, and a disk that loses unflushed writes on a crash.

`SimCluster` wires RaftNodes to them through the reference driver (the order in which a raft
`Output` must be performed); `SCENARIOS` are the seeded failure stories checked by the invariants
after every event (`kraft sim`, tests/sim); `TranscriptRunner` steps a cluster by hand for the
protocol transcripts (tests/transcripts).
"""

from kraft_engine.sim.cluster import ADMIN_ID, CLUSTER_ID, SimCluster, SimNode, endpoint_of
from kraft_engine.sim.disk import SimDisk
from kraft_engine.sim.invariants import (
    Invariant,
    NodeView,
    SimulationFailure,
    Violation,
    default_invariants,
)
from kraft_engine.sim.network import Envelope, LinkRule, Network
from kraft_engine.sim.replicated_counter import ReplicatedCounter, SimStateMachine, SnapshotRequest
from kraft_engine.sim.scenarios import LIVENESS_BOUND_MS, SCENARIOS, RunOutcome, Scenario, SimRun
from kraft_engine.sim.scheduler import Scheduler, Stalled
from kraft_engine.sim.transcript import TranscriptRunner

__all__ = [
    "ADMIN_ID",
    "CLUSTER_ID",
    "LIVENESS_BOUND_MS",
    "SCENARIOS",
    "Envelope",
    "Invariant",
    "LinkRule",
    "Network",
    "NodeView",
    "ReplicatedCounter",
    "RunOutcome",
    "Scenario",
    "Scheduler",
    "SimCluster",
    "SimDisk",
    "SimNode",
    "SimRun",
    "SimStateMachine",
    "SimulationFailure",
    "SnapshotRequest",
    "Stalled",
    "TranscriptRunner",
    "Violation",
    "default_invariants",
    "endpoint_of",
]
